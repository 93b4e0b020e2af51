"""Chapter 9's measurement: naive, tiled and PyTorch's fused attention on CPU as T grows; time and peak memory.

Run from the repository root (a few minutes on a 2-core CPU):  .venv/bin/python benchmarks/efficient_attention.py
The result goes to src/attention_book/data/efficient_attention_cpu.json, which chapter 9 plots.
"""

from functools import partial

import torch
import torch.nn.functional as F
from tqdm import tqdm

from attention_book.efficient import naive_attention, tiled_attention
from attention_book.measure import interleaved_medians, machine, save_result
from attention_book.measure.memory import measure_peak_memory

LENGTHS = [256, 512, 1024, 2048, 4096]
HEADS, HEAD_DIM = 8, 64  # B = 1, fp32


def main() -> None:
    points = [(causal, T) for causal in (False, True) for T in LENGTHS]
    rows = []
    for causal, T in tqdm(points, desc="points"):
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, HEADS, T, HEAD_DIM) for _ in range(3))  # (B, H, T, d)
        seconds = interleaved_medians({
            "naive": partial(naive_attention, q, k, v, causal),
            "tiled": partial(tiled_attention, q, k, v, causal),
            "sdpa": partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
        }, repeats=9, progress=False)  # medians of 9 interleaved runs: this shared machine is noisy
        peak = {method: measure_peak_memory(method, T, HEADS, HEAD_DIM, causal) for method in seconds}
        rows.append({"causal": causal, "length": T, "seconds": seconds, "peak_extra_bytes": peak})
    save_result({"machine": machine(), "heads": HEADS, "head_dim": HEAD_DIM, "rows": rows},
                "efficient_attention_cpu", "src/attention_book/data")
    for row in rows:
        s, p = row["seconds"], row["peak_extra_bytes"]
        print(f"causal={row['causal']!s:5} T={row['length']:5}: tiled/sdpa time {s['tiled'] / s['sdpa']:.2f}x, "
              f"tiled/naive peak memory {p['tiled'] / p['naive']:.1%}")


if __name__ == "__main__":
    main()
