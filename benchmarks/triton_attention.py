"""Chapter 9's GPU measurement: the Triton kernel against PyTorch's fused attention, in TFLOP/s.

Needs a CUDA GPU. Run from the repository root:  python benchmarks/triton_attention.py
fp16 and bf16, head_dim 64 and 128, T from 1k to 16k, causal and not; model width E = H · d = 2048 and
B · T = 16 · 16384 tokens at every point, so that every point does comparable work. Each time is the
median of triton.testing.do_bench; PyTorch's side is every fused backend pinned in turn (flash, cuDNN,
memory-efficient), and the GPU's name, the backends and the FLOP count go into the stored result.
The result goes to src/attention_book/data/triton_attention_gpu.json.
"""

from functools import partial

import torch
import torch.nn.functional as F
import triton
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm import tqdm

from attention_book.measure import attention_tflops, machine, save_result
from attention_book.triton_attention import triton_attention

LENGTHS = [1024, 2048, 4096, 8192, 16384]
TOKENS_PER_POINT = 16 * 16384  # batch · T kept constant: B = TOKENS_PER_POINT // T


# PyTorch's fused kernels, each pinned in turn: the kernel is measured against the fastest of them at
# every point, and against FlashAttention explicitly. A backend that cannot run a point is left out of it.
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
FLOP_COUNT = "4·B·H·T·S·d (Q Kᵀ and P V, 2 flops per multiply-add), halved under a causal mask"


def sdpa_with(backend, q, k, v, causal):
    """F.scaled_dot_product_attention with only `backend` allowed."""
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def median_ms(fn) -> float:
    """Milliseconds per call, the median of Triton's repeated timing (its default is the mean)."""
    return triton.testing.do_bench(fn, return_mode="median")


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
        ms = {"triton": median_ms(partial(triton_attention, q, k, v, causal))}
        for name, backend in BACKENDS.items():
            try:
                sdpa_with(backend, q, k, v, causal)
            except RuntimeError:  # "No available kernel": this backend does not take this point
                continue
            ms[name] = median_ms(partial(sdpa_with, backend, q, k, v, causal))
        tflops = {name: attention_tflops(B, H, T, d, t / 1e3, causal) for name, t in ms.items()}
        fastest = max((name for name in tflops if name != "triton"), key=tflops.get)
        rows.append({"dtype": str(dtype).removeprefix("torch."), "head_dim": d, "causal": causal, "length": T,
                     "batch": B, "heads": H, "tflops": tflops, "fastest_sdpa": fastest})
    info = machine() | {"gpu": torch.cuda.get_device_name(), "triton": triton.__version__}
    save_result({"machine": info, "flop_count": FLOP_COUNT, "timing": "median of triton.testing.do_bench",
                 "rows": rows}, "triton_attention_gpu", "src/attention_book/data")
    for row in rows:
        t, fastest = row["tflops"], row["fastest_sdpa"]
        print(f"{row['dtype']:8} d={row['head_dim']:3} causal={row['causal']!s:5} T={row['length']:5}: "
              f"triton {t['triton']:6.1f}, flash {t.get('flash', float('nan')):6.1f}, fastest SDPA ({fastest}) "
              f"{t[fastest]:6.1f} TFLOP/s: {t['triton'] / t[fastest]:.2f}x")


if __name__ == "__main__":
    main()
