"""Chapter 8's GPU measurement: the Triton kernel against PyTorch's fused attention, in TFLOP/s.

Needs a CUDA GPU. Run from the repository root:  python benchmarks/triton_attention.py
fp16 and bf16, head_dim 64 and 128, T from 1k to 16k, causal and not; model width E = H · d = 2048 and
B · T = 16 · 16384 tokens at every point, so that every point does comparable work.
The result goes to src/attention_book/data/triton_attention_gpu.json.
"""

from functools import partial

import torch
import torch.nn.functional as F
import triton.testing
from tqdm import tqdm

from attention_book.measure import attention_tflops, machine, save_result
from attention_book.triton_attention import triton_attention

LENGTHS = [1024, 2048, 4096, 8192, 16384]
TOKENS_PER_POINT = 16 * 16384  # batch · T kept constant: B = TOKENS_PER_POINT // T


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    points = [(dtype, d, causal, T) for dtype in (torch.float16, torch.bfloat16) for d in (64, 128)
              for causal in (False, True) for T in LENGTHS]
    rows = []
    for dtype, d, causal, T in tqdm(points, desc="points"):
        B, H = TOKENS_PER_POINT // T, 2048 // d  # E = 2048
        q, k, v = (torch.randn(B, H, T, d, device="cuda", dtype=dtype) for _ in range(3))
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(triton_attention(q, k, v, causal), expected, rtol=2e-2, atol=2e-2)
        ms = {"triton": triton.testing.do_bench(partial(triton_attention, q, k, v, causal)),
              "sdpa": triton.testing.do_bench(partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal))}
        rows.append({"dtype": str(dtype).removeprefix("torch."), "head_dim": d, "causal": causal, "length": T,
                     "batch": B, "heads": H,
                     "tflops": {name: attention_tflops(B, H, T, d, t / 1e3, causal) for name, t in ms.items()}})
    info = machine() | {"gpu": torch.cuda.get_device_name()}
    save_result({"machine": info, "rows": rows}, "triton_attention_gpu", "src/attention_book/data")
    for row in rows:
        t = row["tflops"]
        print(f"{row['dtype']:8} d={row['head_dim']:3} causal={row['causal']!s:5} T={row['length']:5}: "
              f"triton {t['triton']:6.1f}  sdpa {t['sdpa']:6.1f} TFLOP/s  ({t['triton'] / t['sdpa']:.2f}x)")


if __name__ == "__main__":
    main()
