"""Chapter 7's profile of one cached decode step: where its few milliseconds go, at batch 1 and 8.

Run from the repository root (about a minute on a 2-core CPU):  .venv/bin/python benchmarks/kv_cache_profile.py
The result goes to src/attention_book/data/kv_cache_profile_cpu.json, which chapter 7 reads.
"""

import torch

from attention_book.decoder import Decoder, DecoderConfig
from attention_book.measure import machine, save_result
from attention_book.measure.profile import copy_bandwidth, decode_step_profile, matmul_throughput

CONTEXT = 1200  # about the context of the last steps of chapter 7's generation benchmark


def main() -> None:
    torch.manual_seed(0)
    model = Decoder(DecoderConfig()).eval()  # random weights: the cost does not depend on their values
    rows = [decode_step_profile(model, CONTEXT, batch) for batch in (1, 8)]
    result = {"machine": machine(), "copy_gb_per_s": copy_bandwidth(), "matmul_gflop_per_s": matmul_throughput(),
              "context": CONTEXT, "rows": rows}
    save_result(result, "kv_cache_profile_cpu", "src/attention_book/data")
    print(f"copying memory: {result['copy_gb_per_s']:.1f} GB/s, matrix products: "
          f"{result['matmul_gflop_per_s']:.0f} GFLOP/s")
    for row in rows:
        print(f"batch {row['batch']}: {row['seconds_per_step'] * 1e3:.2f} ms per step, "
              f"{row['operator_calls_per_step']:.0f} operator calls ({row['aten_calls_per_step']:.0f} ATen calls), "
              f"{row['gb_per_s']:.1f} GB/s, {row['gflop_per_s']:.1f} GFLOP/s")
        for op in row["heaviest_ops"]:
            print(f"    {op['name']:28} {op['calls_per_step']:5.0f} calls {op['self_ms_per_step']:6.3f} ms")


if __name__ == "__main__":
    main()
