"""Chapter 9's measurement: naive, tiled and PyTorch's fused attention on CPU as T grows; time and peak memory.

Run from the repository root (about 12 minutes on a shared 2-core CPU):
    .venv/bin/python benchmarks/efficient_attention.py
The result goes to src/attention_book/data/efficient_attention_cpu.json, which chapter 9 plots.
At each length every round runs the six calls (three methods, without and with the causal mask) in turn,
and every round's seconds are stored: the ratio of two calls within one round is what the chapter reads
(a slow moment of the shared machine falls on all six), with its median and its range over the rounds.
The unmasked and causal rows of one length come from the same rounds (round i of one is round i of the
other), so causal / unmasked within a round is fair too. One thread, for the reason given in
efficient_attention_backward.py. Peak memory is measured in a fresh process per point. The stored
machine names the CPU model and the load average before and after the run.
"""

import os
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
METHODS = {
    "naive": naive_attention,
    "tiled": tiled_attention,
    "sdpa": lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
}
CONDITIONS = ("run while other jobs shared the machine's 2 cores (load averages in machine): absolute "
              "times are slow and vary; only ratios within one round are meaningful; the unmasked and "
              "causal rows of one length ran in the same rounds")


def cpu_model() -> str:
    """The CPU's model name as Linux reports it ('unknown' elsewhere)."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, rounded to 0.1."""
    return [round(x, 1) for x in os.getloadavg()]


def rows_for_length(T: int, call, repeats: int, backward: bool = False) -> list[dict]:
    """Time the three methods without and with the causal mask in the same interleaved rounds at length T;
    `call(attend, causal)` -> a zero-argument callable. One row per mask: seconds per round, peak memory."""
    calls = {(name, causal): call(attend, causal) for causal in (False, True) for name, attend in METHODS.items()}
    seconds = interleaved_times(calls, repeats=repeats, progress=False)
    rows = []
    for causal in (False, True):
        rounds = {name: seconds[(name, causal)] for name in METHODS}
        peak = {name: measure_peak_memory(name, T, HEADS, HEAD_DIM, causal, backward=backward) for name in METHODS}
        rows.append({"causal": causal, "length": T, "seconds_per_round": rounds, "peak_extra_bytes": peak})
        ratio = sorted(t / s for t, s in zip(rounds["tiled"], rounds["sdpa"], strict=True))
        print(f"causal={causal!s:5} T={T:5}: tiled/sdpa time {ratio[0]:.2f}-{ratio[-1]:.2f}x, "
              f"tiled/naive peak memory {peak['tiled'] / peak['naive']:.1%}", flush=True)
    return rows


def run_machine() -> dict:
    """The machine record with the CPU model and the load average at the start."""
    return {**machine(), "cpu_model": cpu_model(), "load_average_start": load_average()}


def sweep(lengths: list[int], inputs: int, step, repeats: int, backward: bool = False) -> tuple[dict, list[dict]]:
    """The machine record and the rows of every length: `inputs` tensors (B, H, T, d) drawn from seed 0 at each T,
    timed as `step(attend)(*tensors, causal)` (this file's forward; efficient_attention_backward.py's training step)."""
    torch.set_num_threads(THREADS)
    where = run_machine()
    rows = []
    for T in tqdm(lengths, desc="lengths"):
        torch.manual_seed(0)
        x = [torch.randn(1, HEADS, T, HEAD_DIM) for _ in range(inputs)]  # (B, H, T, d) each
        rows += rows_for_length(T, lambda attend, causal, x=x: partial(step(attend), *x, causal), repeats, backward)
    where["load_average_end"] = load_average()
    return where, rows


def main() -> None:
    where, rows = sweep(LENGTHS, 3, lambda attend: attend, REPEATS)
    save_result({"machine": where, "conditions": CONDITIONS, "heads": HEADS, "head_dim": HEAD_DIM,
                 "repeats": REPEATS, "measures": "forward, fp32, B = 1", "rows": rows},
                "efficient_attention_cpu", "src/attention_book/data")


if __name__ == "__main__":
    main()
