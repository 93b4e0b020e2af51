"""Chapter 9's measurement: naive, tiled and PyTorch's fused attention on CPU as T grows; time and peak memory.

Run from the repository root (a few minutes on a 2-core CPU):  .venv/bin/python benchmarks/efficient_attention.py
The result goes to src/attention_book/data/efficient_attention_cpu.json, which chapter 9 plots.
Every round runs the three methods in turn, and every round's seconds are stored: the ratio of two methods
within one round is what the chapter reads (a slow moment of the shared machine falls on all three), with
its median and its range over the rounds. One thread, for the reason given in efficient_attention_backward.py.
Peak memory is measured in a fresh process per point.
"""

from functools import partial

import torch
import torch.nn.functional as F
from tqdm import tqdm

from attention_book.efficient import naive_attention, tiled_attention
from attention_book.measure import interleaved_times, machine, save_result
from attention_book.measure.memory import measure_peak_memory

LENGTHS = [256, 512, 1024, 2048, 4096]
HEADS, HEAD_DIM = 8, 64  # B = 1, fp32
REPEATS = 7
THREADS = 1
CONDITIONS = ("run while other jobs shared the machine's 2 cores (load average about 10): absolute times "
              "are slow and vary; only ratios within one round are meaningful")


def main() -> None:
    torch.set_num_threads(THREADS)
    points = [(causal, T) for causal in (False, True) for T in LENGTHS]
    rows = []
    for causal, T in tqdm(points, desc="points"):
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, HEADS, T, HEAD_DIM) for _ in range(3))  # (B, H, T, d)
        rounds = interleaved_times({
            "naive": partial(naive_attention, q, k, v, causal),
            "tiled": partial(tiled_attention, q, k, v, causal),
            "sdpa": partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
        }, repeats=REPEATS, progress=False)
        peak = {method: measure_peak_memory(method, T, HEADS, HEAD_DIM, causal) for method in rounds}
        rows.append({"causal": causal, "length": T, "seconds_per_round": rounds, "peak_extra_bytes": peak})
        ratio = sorted(t / s for t, s in zip(rounds["tiled"], rounds["sdpa"], strict=True))
        print(f"causal={causal!s:5} T={T:5}: tiled/sdpa time {ratio[0]:.2f}-{ratio[-1]:.2f}x, "
              f"tiled/naive peak memory {peak['tiled'] / peak['naive']:.1%}", flush=True)
    save_result({"machine": machine(), "conditions": CONDITIONS, "heads": HEADS, "head_dim": HEAD_DIM,
                 "repeats": REPEATS, "measures": "forward, fp32, B = 1", "rows": rows},
                "efficient_attention_cpu", "src/attention_book/data")


if __name__ == "__main__":
    main()
