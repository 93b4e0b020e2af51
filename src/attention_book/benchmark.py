"""Timing for the book's benchmark sections: ratios measured in one run, never timed unit tests."""

import statistics
import time

import torch
from tqdm import tqdm  # plain text bar: works in a terminal, a notebook and nbval alike


def median_time(fn, repeats: int = 5, warmup: int = 1, label: str | None = None) -> float:
    """Median wall-clock seconds of `fn()` over `repeats` runs after `warmup` runs, with a progress bar."""
    with torch.inference_mode():
        for _ in range(warmup):
            fn()
        times = []
        for _ in tqdm(range(repeats), desc=label, leave=False):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times)
