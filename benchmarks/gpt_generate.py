"""Chapter 12's trained GPT generating with and without chapter 7's KV cache: the same tokens, timed.

The stored model of scripts/train_gpt.py continues a one-character prompt to the end of its context
(127 new characters), greedily, with the cache (one new position per step) and without it (the whole
sequence every step). The two take turns, ROUNDS times, after one warm-up each; every repeat is stored,
so the chapter can quote the median and the range.

Run from the repository root (about a minute on a 2-core CPU):  .venv/bin/python benchmarks/gpt_generate.py
The result goes to src/attention_book/data/gpt_generate_cpu.json, which chapter 12 quotes.
"""

import statistics
from time import perf_counter

import torch

from attention_book.decoder import generate
from attention_book.gpt import encode, load_trained
from attention_book.measure import machine, save_result

ROUNDS = 11
THREADS = 1  # one thread: on a shared 2-core machine two threads wait for each other (see gpt2_generate.py)


def main() -> None:
    torch.set_num_threads(THREADS)
    model, stored = load_trained()
    prompt = encode("T", stored["vocabulary"])[None]  # (1, 1)
    new_tokens = model.config.context_length - prompt.shape[-1]
    runs = {"cached": [], "uncached": []}
    reference = None
    for round_ in range(ROUNDS + 1):  # round 0 warms up and is not kept
        for mode in runs:
            start = perf_counter()
            tokens = generate(model, prompt, new_tokens, use_cache=mode == "cached")
            seconds = perf_counter() - start
            reference = tokens if reference is None else reference
            if not torch.equal(tokens, reference):  # otherwise the times would compare different work
                raise AssertionError(f"generation {mode} produced other tokens")
            if round_:
                runs[mode].append(seconds)
    summary = {mode: {"median": statistics.median(s), "min": min(s), "max": max(s)} for mode, s in runs.items()}
    ratios = [u / c for u, c in zip(runs["uncached"], runs["cached"], strict=True)]  # per round: same moment
    result = {"machine": machine() | {"note": "measured on a shared machine under load from other jobs"},
              "prompt_length": prompt.shape[-1], "new_tokens": new_tokens, "rounds": ROUNDS, "seconds": runs,
              "summary": summary, "speedup_per_round": ratios}
    save_result(result, "gpt_generate_cpu", "src/attention_book/data")
    for mode, s in summary.items():
        print(f"{mode:9} median {s['median'] * 1e3:6.1f} ms (range {s['min'] * 1e3:.1f} to {s['max'] * 1e3:.1f}) "
              f"for {new_tokens} tokens")
    print(f"speed-up per round: median {statistics.median(ratios):.2f}, range {min(ratios):.2f} to {max(ratios):.2f}")


if __name__ == "__main__":
    main()
