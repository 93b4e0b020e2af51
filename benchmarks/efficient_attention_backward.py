"""Chapter 9's training measurement: a forward and a backward pass of naive, tiled and PyTorch's fused
attention on CPU as T grows; time and peak memory.

Run from the repository root (a few minutes on a shared 2-core CPU):
    .venv/bin/python benchmarks/efficient_attention_backward.py
The result goes to src/attention_book/data/efficient_attention_backward_cpu.json, which chapter 9 plots.
Every round runs the three methods in turn, and every round's seconds are stored: the ratio of two methods
within one round is what the chapter reads (a slow moment of the machine falls on all three); peak memory is measured in a fresh process per point. One thread: on the
shared machine the book is built on, several other jobs hold the two cores, and a two-thread pool then
waits at every operation for its descheduled thread, a wait the tiled loop (hundreds of operations per
call) pays hundreds of times and the fused kernel once; one thread measures the algorithms instead.
"""

from functools import partial

import torch
import torch.nn.functional as F
from tqdm import tqdm

from attention_book.efficient import naive_attention, tiled_attention
from attention_book.measure import interleaved_times, machine, save_result
from attention_book.measure.memory import measure_peak_memory

LENGTHS = [256, 512, 1024, 2048]  # 4096 would take a round of about a minute
HEADS, HEAD_DIM = 8, 64  # B = 1, fp32
REPEATS = 5
THREADS = 1
METHODS = {
    "naive": naive_attention,
    "tiled": tiled_attention,
    "sdpa": lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
}
CONDITIONS = ("run while other jobs shared the machine's 2 cores (load average about 10): absolute times "
              "are slow and vary; only ratios within one round are meaningful")


def forward_backward(attend, q, k, v, grad, causal):
    """One training step's attention: the output, then dQ, dK, dV from dO = grad."""
    with torch.inference_mode(False), torch.enable_grad():  # interleaved_medians times in inference mode
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        return torch.autograd.grad(attend(q, k, v, causal), (q, k, v), grad)


def main() -> None:
    torch.set_num_threads(THREADS)
    points = [(causal, T) for causal in (False, True) for T in LENGTHS]
    rows = []
    for causal, T in tqdm(points, desc="points"):
        torch.manual_seed(0)
        q, k, v, grad = (torch.randn(1, HEADS, T, HEAD_DIM) for _ in range(4))  # (B, H, T, d)
        rounds = interleaved_times({name: partial(forward_backward, attend, q, k, v, grad, causal)
                                    for name, attend in METHODS.items()}, repeats=REPEATS, progress=False)
        peak = {name: measure_peak_memory(name, T, HEADS, HEAD_DIM, causal, backward=True) for name in METHODS}
        rows.append({"causal": causal, "length": T, "seconds_per_round": rounds, "peak_extra_bytes": peak})
        ratio = sorted(t / s for t, s in zip(rounds["tiled"], rounds["sdpa"], strict=True))
        print(f"causal={causal!s:5} T={T:5}: tiled/sdpa time {ratio[0]:.2f}-{ratio[-1]:.2f}x, "
              f"tiled/naive peak memory {peak['tiled'] / peak['naive']:.1%}", flush=True)
    save_result({"machine": machine(), "conditions": CONDITIONS, "heads": HEADS, "head_dim": HEAD_DIM,
                 "repeats": REPEATS, "measures": "forward + backward (dQ, dK, dV), fp32, B = 1", "rows": rows},
                "efficient_attention_backward_cpu", "src/attention_book/data")


if __name__ == "__main__":
    main()
