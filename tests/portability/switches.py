"""Which environment switches change the numbers torch and numpy compute on this machine.

Run: .venv/bin/python tests/portability/switches.py
For each switch, a fresh process computes GEMMs of the book's sizes, a softmax, exp, sums and SDPA,
and numpy GEMMs; the script prints which results differ bit for bit from a run without the switch.
A switch that changes nothing is either ignored or takes the path this machine takes anyway. The
Makefile's `portability` target uses the switches that do change results.
"""

import hashlib
import os
import subprocess
import sys

SWITCHES = [
    "ATEN_CPU_CAPABILITY=default", "ATEN_CPU_CAPABILITY=avx2", "BOOK_TORCH_THREADS=1", "BOOK_TORCH_THREADS=3",
    "MKL_CBWR=COMPATIBLE", "MKL_CBWR=AVX2", "MKL_ENABLE_INSTRUCTIONS=AVX2", "MKL_ENABLE_INSTRUCTIONS=SSE4_2",
    "MKL_DEBUG_CPU_TYPE=5", "ONEDNN_MAX_CPU_ISA=AVX2", "DNNL_MAX_CPU_ISA=AVX2",
    "OPENBLAS_CORETYPE=Sandybridge", "OPENBLAS_CORETYPE=Haswell", "OPENBLAS_CORETYPE=SkylakeX",
]
SIZES = [(6, 16, 6), (6, 16, 24), (64, 256, 64), (256, 64, 256), (1000, 333, 77), (2048, 64, 256)]


def digest(array) -> str:
    """The first hex digits of a hash of the array's bytes."""
    return hashlib.sha1(array.tobytes()).hexdigest()[:12]


def probe() -> dict:
    """Results of the operations the chapters use, each as a hash of its bytes."""
    import numpy as np
    import torch

    if os.environ.get("BOOK_TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["BOOK_TORCH_THREADS"]))
    torch.manual_seed(0)
    results = {}
    for n, k, m in SIZES:
        a, b = torch.randn(n, k), torch.randn(k, m)
        results[f"torch mm {n}x{k}x{m}"] = digest((a @ b).numpy())
        results[f"torch bmm {n}x{k}x{m}"] = digest(torch.bmm(a.expand(3, n, k), b.expand(3, k, m)).numpy())
    x = torch.randn(8, 256, 256) * 5
    for name, fn in [("softmax", lambda t: t.softmax(-1)), ("exp", torch.exp), ("exp2", torch.exp2),
                     ("sum", lambda t: t.sum(-1))]:
        results[f"torch {name}"] = digest(fn(x).numpy())
    q, k, v = (torch.randn(3, 4, 300, 64) for _ in range(3))
    results["torch sdpa"] = digest(torch.nn.functional.scaled_dot_product_attention(q, k, v).numpy())
    rng = np.random.default_rng(0)
    for n, k, m in SIZES:
        a, b = rng.standard_normal((n, k), dtype=np.float32), rng.standard_normal((k, m), dtype=np.float32)
        results[f"numpy mm {n}x{k}x{m}"] = digest(a @ b)
    return results


def run(switch: str | None) -> dict:
    """`probe()` in a fresh process with `switch` (NAME=VALUE) in its environment."""
    env = dict(os.environ)
    if switch:
        name, value = switch.split("=", 1)
        env[name] = value
    out = subprocess.run([sys.executable, __file__, "--probe"], env=env, capture_output=True, text=True,
                         check=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        for name, value in probe().items():
            print(name, value)
        sys.exit()
    base = run(None)
    for switch in SWITCHES:
        changed = [name for name, value in run(switch).items() if value != base[name]]
        print(f"{switch:32} {'changes ' + ', '.join(changed) if changed else 'changes nothing'}")
