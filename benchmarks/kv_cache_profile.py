"""Chapter 7's profile of one cached decode step: where its few milliseconds go, at batch 1 and 8.

One thread, as chapter 8's variant benchmark (benchmarks/kv_cache_variants.py) uses, so that the two
compare; the machine's load is stored beside the result. A copy and a read-only stream (a sum) take turns
over 256 MiB, 25 rounds (median and quartiles, and the read's rate over the copy's in each round); the matrix
product is timed 25 times; the steps 48 times at one context (median and quartiles).
Run from the repository root (about a minute on a 2-core CPU):  .venv/bin/python benchmarks/kv_cache_profile.py
The result goes to src/attention_book/data/kv_cache_profile_cpu.json, which chapter 7 reads.
"""

import torch

from attention_book.decoder import Decoder, DecoderConfig
from attention_book.measure import load_average, machine, save_result
from attention_book.measure.benchmark import last_level_cache
from attention_book.measure.profile import decode_step_profile, matmul_throughput, memory_bandwidth

CONTEXT = 1200  # about the context of the last steps of chapter 7's generation benchmark
STEPS = 48
ROUNDS = 25  # of the copy, the read and the matrix product


def main() -> None:
    torch.set_num_threads(1)  # as the variant benchmark: one thread per process on a shared machine
    torch.manual_seed(0)
    model = Decoder(DecoderConfig()).eval()  # random weights: the cost does not depend on their values
    before = load_average()
    memory, matmul = memory_bandwidth(repeats=ROUNDS), matmul_throughput(repeats=ROUNDS)
    copy, read = memory["copy"], memory["read"]
    rows = [decode_step_profile(model, CONTEXT, batch, STEPS) for batch in (1, 8)]
    result = {"machine": {**machine(), "load_before": before, "load_after": load_average(),
                          "last_level_cache_bytes": last_level_cache(),
                          "load": "shared: other jobs ran on the same 2 cores while this was measured"},
              "copy_gb_per_s": copy, "read_gb_per_s": read, "read_over_copy": memory["read_over_copy"],
              "matmul_gflop_per_s": matmul, "context": CONTEXT, "rows": rows}
    save_result(result, "kv_cache_profile_cpu", "src/attention_book/data")
    print(f"copying memory: {copy['median']:.1f} GB/s (quartiles {copy['q1']:.1f}-{copy['q3']:.1f}), "
          f"reading: {read['median']:.1f} GB/s ({read['q1']:.1f}-{read['q3']:.1f}), "
          f"matrix products: {matmul['median']:.0f} GFLOP/s ({matmul['q1']:.0f}-{matmul['q3']:.0f})")
    for row in rows:
        q = row["seconds_spread"]
        print(f"batch {row['batch']}: {row['seconds_per_step'] * 1e3:.2f} ms per step "
              f"({q['q1'] * 1e3:.2f}-{q['q3'] * 1e3:.2f}), "
              f"{row['operator_calls_per_step']:.0f} operator calls ({row['aten_calls_per_step']:.0f} ATen calls), "
              f"{row['gb_per_s']:.1f} GB/s, {row['gflop_per_s']:.1f} GFLOP/s")
        for op in row["heaviest_ops"]:
            print(f"    {op['name']:28} {op['calls_per_step']:5.0f} calls {op['self_ms_per_step']:6.3f} ms")


if __name__ == "__main__":
    main()
