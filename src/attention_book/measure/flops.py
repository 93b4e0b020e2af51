"""FLOP counts of attention, for throughput in TFLOP/s (chapter 9)."""


def attention_tflops(batch: int, heads: int, length: int, head_dim: int, seconds: float, causal: bool) -> float:
    """Forward-pass throughput: Q Kᵀ and P V are 2 · 2·T·S·d flops per head, half of it under a causal mask."""
    flops = 4 * batch * heads * length * length * head_dim * (0.5 if causal else 1.0)
    return flops / seconds / 1e12
