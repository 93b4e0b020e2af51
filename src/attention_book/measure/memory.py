"""Peak memory of one attention call, measured in a fresh process (chapter 9).

A fresh interpreter per measurement: nothing allocated earlier (caches, other methods' buffers) can
hide or inflate the peak. Linux only: it resets and reads the kernel's peak-RSS counter (VmHWM).

    python -m attention_book.measure.memory tiled 4096 --heads 8 --head-dim 64 [--causal]
prints the bytes by which the process's peak resident memory exceeded its size just before the call.
With --backward the call is a forward and a backward pass (the gradients of Q, K and V included).
"""

import argparse
import json
import re
import subprocess
import sys

import torch

from ..efficient import naive_attention, tiled_attention

METHODS = {
    "naive": naive_attention,
    "tiled": tiled_attention,
    "sdpa": lambda q, k, v, causal: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
}


def _require_linux() -> None:
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"peak memory is measured through Linux's /proc; it is not available on {sys.platform}")


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as file:
        return int(re.search(rf"^{key}:\s+(\d+) kB", file.read(), re.M).group(1)) * 1024


def peak_extra_bytes(method: str, length: int, heads: int, head_dim: int, causal: bool,
                     backward: bool = False) -> int:
    """In this process: peak resident memory of one call above the memory held just before it."""
    _require_linux()
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, head_dim) for _ in range(3))  # (B, H, T, d)
    if backward:
        return _peak_extra_bytes_backward(METHODS[method], q, k, v, causal)
    with torch.inference_mode():
        METHODS[method](q[..., :8, :], k[..., :8, :], v[..., :8, :], causal)  # load kernels and thread pools first
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")  # reset the peak (VmHWM) to the current resident size
        before = _status_bytes("VmRSS")
        output = METHODS[method](q, k, v, causal)
        peak = _status_bytes("VmHWM")
    del output
    return peak - before


def _peak_extra_bytes_backward(attend, q, k, v, causal: bool) -> int:
    """Peak resident memory of a forward and a backward pass above the memory held just before them."""
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    grad = torch.randn_like(q)  # dO, made before the measurement: (B, H, T, d)
    small = [t[..., :8, :].detach().requires_grad_() for t in (q, k, v)]
    attend(*small, causal).backward(grad[..., :8, :])  # load kernels and thread pools first
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")  # reset the peak (VmHWM) to the current resident size
    before = _status_bytes("VmRSS")
    attend(q, k, v, causal).backward(grad)
    return _status_bytes("VmHWM") - before


def measure_peak_memory(method: str, length: int, heads: int = 8, head_dim: int = 64, causal: bool = False,
                        backward: bool = False) -> int:
    """`peak_extra_bytes` in a fresh Python process (chapter 9); with `backward`, of a forward and a
    backward pass."""
    _require_linux()
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    command = [sys.executable, "-m", "attention_book.measure.memory", method, str(length), "--heads", str(heads),
               "--head-dim", str(head_dim)] + (["--causal"] if causal else []) + (["--backward"] if backward else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    return json.loads(done.stdout)["peak_extra_bytes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", choices=sorted(METHODS))
    parser.add_argument("length", type=int)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--backward", action="store_true")
    args = parser.parse_args()
    extra = peak_extra_bytes(args.method, args.length, args.heads, args.head_dim, args.causal, args.backward)
    print(json.dumps({"peak_extra_bytes": extra}))


if __name__ == "__main__":
    main()
