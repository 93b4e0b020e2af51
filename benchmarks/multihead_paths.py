"""Chapter 3's speed section: what each multi-head attention path really runs, and how long it takes.

Four calls at GPT-2-small sizes, (B, T, E) = (1, 1024, 768) with 12 heads, in inference mode on the
CPU: `nn.MultiheadAttention` and the package's `MultiHeadAttention`, each with and without the
returned weights. For each, torch.profiler lists the ATen operators it dispatches and the largest
single buffer it allocates (is the (B, H, T, S) score tensor, 50 MB here, ever made?); then the four
are timed in turn, `REPEATS` times (interleaved, so that a slow moment of the shared machine hits all
of them), and every run's time stored with the medians and quartiles. Timings on a shared machine are
noisy, but a slow moment hits the four calls of one round alike: chapter 3 compares them round by round
(each call's time over the fused call's in the same round, and a sign test on how many rounds it was slower).

Run from the repository root (about a minute on 2 cores):  .venv/bin/python benchmarks/multihead_paths.py
The result goes to src/attention_book/data/multihead_paths_cpu.json, which chapter 3 reads.
"""

import statistics

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

import attention_book as ab
from attention_book.measure import machine, save_result
from attention_book.measure.benchmark import interleaved_times

B, T, E, H = 1, 1024, 768, 12
REPEATS = 21
# ATen operators that tell the paths apart: explicit scores and softmax, or a fused kernel.
MARKERS = ("aten::_native_multi_head_attention", "aten::bmm", "aten::baddbmm", "aten::matmul",
           "aten::_softmax", "aten::softmax", "aten::_masked_softmax",
           "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention")


def variants(theirs: nn.MultiheadAttention, ours: ab.MultiHeadAttention, x: torch.Tensor) -> dict:
    return {
        "nn.MHA, need_weights=True": lambda: theirs(x, x, x),
        "nn.MHA, need_weights=False": lambda: theirs(x, x, x, need_weights=False),
        "ours, need_weights=True": lambda: ours(x),
        "ours, need_weights=False": lambda: ours(x, need_weights=False),
    }


def operators(fn, scores_bytes: int) -> dict:
    """The marker operators one call dispatches, and every buffer of at least half the (B, H, T, S)
    score tensor's size that an operator allocates itself (not counting its children), in bytes."""
    with torch.inference_mode():
        fn()  # warm-up: thread pools and kernels loaded before the profile
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    events = prof.events()
    calls, big, largest = {}, [], ("none", 0)
    for event in events:
        if event.name in MARKERS:
            calls[event.name] = calls.get(event.name, 0) + 1
        own = event.cpu_memory_usage - sum(max(c.cpu_memory_usage, 0) for c in event.cpu_children)
        if own >= scores_bytes // 2:
            big.append({"operator": event.name, "bytes": own})
        if own > largest[1]:
            largest = (event.name, own)
    return {"operators": dict(sorted(calls.items())), "score_sized_buffers": big,
            "largest_own_allocation": {"operator": largest[0], "bytes": largest[1]}}


def main() -> None:
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(E, H, batch_first=True).eval()
    ours = ab.MultiHeadAttention.from_torch(theirs).eval()
    x = torch.randn(B, T, E)  # (B, T, E)
    calls = variants(theirs, ours, x)
    scores_bytes = 4 * B * H * T * T  # one float32 (B, H, T, S) tensor
    profiles = {name: operators(fn, scores_bytes) for name, fn in calls.items()}
    times = interleaved_times(calls, repeats=REPEATS, progress=False)
    seconds = {name: statistics.median(runs) for name, runs in times.items()}
    quartiles = {name: statistics.quantiles(runs, n=4)[::2] for name, runs in times.items()}  # [Q1, Q3]
    result = {"machine": machine(), "shape": {"B": B, "T": T, "E": E, "H": H}, "repeats": REPEATS,
              "scores_bytes": scores_bytes, "median_seconds": seconds, "quartile_seconds": quartiles,
              "seconds": times, "profiles": profiles}
    save_result(result, "multihead_paths_cpu", "src/attention_book/data")
    print(f"one (B, H, T, S) float32 tensor: {result['scores_bytes'] / 1e6:.0f} MB")
    for name, row in profiles.items():
        big = ", ".join(f"{b['operator']} {b['bytes'] / 1e6:.0f} MB" for b in row["score_sized_buffers"])
        q1, q3 = quartiles[name]
        print(f"{name:28} {seconds[name] * 1e3:7.1f} ms (quartiles {q1 * 1e3:.0f}-{q3 * 1e3:.0f})  "
              f"score-sized buffers: {big or 'none'}")
        for op, count in row["operators"].items():
            print(f"    {op:52} {count}")


if __name__ == "__main__":
    main()
