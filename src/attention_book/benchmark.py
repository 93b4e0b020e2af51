"""Timing for the book's benchmark sections: ratios measured in one run, never timed unit tests."""

import json
import platform
import statistics
import time
from importlib import resources

import torch
from tqdm import tqdm  # plain text bar: works in a terminal, a notebook and nbval alike


def machine() -> dict:
    """What a stored measurement was taken on."""
    return {"processor": platform.processor() or platform.machine(), "python": platform.python_version(),
            "torch": torch.__version__.split("+")[0], "threads": torch.get_num_threads()}


def measure_generation(model, prompt: torch.Tensor, max_new_tokens: int, rounds: int = 3,
                       progress: bool = True) -> dict:
    """Generate greedily with and without the KV cache, `rounds` times each in turn; seconds per step (chapter 7).

    Each step's time is its median over the rounds: alternating the runs spreads the machine's slow
    moments over both, and the median drops them. Every run must produce the same tokens, otherwise the
    timings would compare different work.
    """
    from .decoder import generate

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    runs, first = {"cached": [], "uncached": []}, None
    for _ in range(rounds):
        for use_cache in (True, False):
            steps = []
            tokens = generate(model, prompt, max_new_tokens, use_cache=use_cache, progress=progress,
                              step_times=steps)
            first = tokens if first is None else first
            if not torch.equal(tokens, first):
                raise AssertionError("generation with and without the cache produced different tokens")
            runs["cached" if use_cache else "uncached"].append(steps)
    medians = {mode: [statistics.median(step) for step in zip(*times, strict=True)] for mode, times in runs.items()}
    return {"machine": machine(), "prompt_length": prompt.shape[-1], "rounds": rounds,
            "parameters": sum(p.numel() for p in model.parameters()), "seconds_per_step": medians}


def save_result(result: dict, name: str, folder) -> None:
    """Write a measurement as `folder/name.json` (benchmarks/ stores it in the package's data)."""
    with open(f"{folder}/{name}.json", "w") as file:
        json.dump(result, file, indent=1)


def load_result(name: str) -> dict:
    """A measurement stored with the package (`attention_book/data/name.json`), so that Colab has it too."""
    path = resources.files("attention_book").joinpath("data", f"{name}.json")
    if not path.is_file():
        raise FileNotFoundError(f"no stored measurement {name!r}: {path} does not exist")
    return json.loads(path.read_text())


def interleaved_medians(functions: dict, repeats: int = 5, progress: bool = True) -> dict:
    """Median seconds of each of `functions` (name -> callable), run in turn `repeats` times (chapters 3, 8).

    Interleaving spreads the machine's slow moments over all of them, so their ratios stay fair.
    """
    times = {name: [] for name in functions}
    with torch.inference_mode():
        for fn in functions.values():
            fn()  # warm-up
        for _ in tqdm(range(repeats), desc="timing", leave=False, disable=not progress):
            for name, fn in functions.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds) for name, seconds in times.items()}
