"""FLOP counts of attention, for throughput in TFLOP/s (chapter 9)."""

import math

from ..attention import validate_positive


def attention_tflops(batch: int, heads: int, length: int, head_dim: int, seconds: float, causal: bool) -> float:
    """Forward-pass throughput: Q Kᵀ and P V are 2 · 2·T·S·d flops per head, half of it under a causal mask."""
    validate_positive(batch=batch, heads=heads, length=length, head_dim=head_dim)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
        raise ValueError(f"seconds must be a measured time > 0, got {seconds!r}")
    flops = 4 * batch * heads * length * length * head_dim * (0.5 if causal else 1.0)
    return flops / seconds / 1e12
