"""Checks of chapter 7's graded exercises (the KV cache); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import numpy as np
import torch

from ...kv_cache import RingKVCache, kv_cache_bytes
from .common import case_generator, CASES, Check, shape_problem, sizes


def check_cache_size(kv_cache_size, seed: int = 0) -> str | None:
    """Chapter 7: bytes of a KV cache, 2 × layers × key/value heads × head_dim × positions held × bytes per
    value × batch, where a sliding window caps the positions held at the window."""
    rng = np.random.default_rng([seed, 7])
    for case in range(CASES):
        layers, kv_heads, head_dim, length = (int(n) for n in rng.integers(1, 64, size=4))
        per_value, batch = int(rng.choice([1, 2, 4])), int(rng.integers(1, 9))
        window = None if case % 2 else int(rng.integers(1, 64))
        held = length if window is None else min(length, window)
        got = kv_cache_size(layers, kv_heads, head_dim, length, per_value, batch, window)
        expected = kv_cache_bytes(layers, kv_heads, head_dim, held, per_value, batch=batch)
        if got == expected:
            continue
        if got * 2 == expected:
            return "half the expected size: every position stores a key AND a value (the factor 2)"
        if got == expected // batch and batch > 1:
            return f"that is one sequence's cache: the batch of {batch} sequences keeps {batch} of them"
        if window is not None and held < length and got == kv_cache_bytes(layers, kv_heads, head_dim, length,
                                                                          per_value, batch=batch):
            return (f"with window={window} and length={length} a rolling cache holds only the last {window} "
                    "positions: use min(length, window)")
        if window is not None and length < window and got == kv_cache_bytes(layers, kv_heads, head_dim, window,
                                                                             per_value, batch=batch):
            return f"length={length} is shorter than window={window}: the cache holds only the {length} positions seen"
        return (f"for {layers} layers, {kv_heads} key/value heads of {head_dim}, {length} positions, window {window}, "
                f"{per_value}-byte values and batch {batch} you get {got}, expected {expected}")
    return None


def check_ring_slots(ring_slots, seed: int = 0) -> str | None:
    """Chapter 7: after positions 0 … length − 1 went into a ring of `window` slots (position p in slot
    p mod window), the position each slot holds, in slot order."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        length, window = sizes(gen, 2, 13)
        expected = RingKVCache(window).slot_positions(length)
        got = torch.as_tensor(ring_slots(length, window)).flatten()
        if len(got) != len(expected):
            return (f"length={length}, window={window}: a ring of {window} slots holds min(length, window) = "
                    f"{len(expected)} positions, yours gives {len(got)}")
        if torch.equal(got, expected):
            continue
        if torch.equal(got.sort().values, expected.sort().values):
            return (f"length={length}, window={window}: the right positions, in the wrong order; the answer goes "
                    f"slot by slot, and slot k holds the position p with p mod window == k")
        k = int(torch.nonzero(got != expected)[0])
        return (f"length={length}, window={window}: slot {k} should hold position {int(expected[k])} (the latest p "
                f"below length with p mod {window} == {k}), yours says {int(got[k])}")
    return None


def check_decode_step(decode_step, seed: int = 0) -> str | None:
    """Chapter 7: one cached step: append k_new, v_new to the cache, attend with the single query over all."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, H, S, d = sizes(gen, 4, 5)
        q, k_new, v_new = (torch.randn(B, H, 1, d, generator=gen, dtype=torch.float64) for _ in range(3))
        k_cache, v_cache = (torch.randn(B, H, S, d, generator=gen, dtype=torch.float64) for _ in range(2))
        got = decode_step(q, k_new, v_new, k_cache.clone(), v_cache.clone())
        if not isinstance(got, tuple | list) or len(got) != 3:
            return "return three things: (output (B, H, 1, d_v), keys (B, H, S + 1, d_k), values (B, H, S + 1, d_v))"
        output, keys, values = (torch.as_tensor(part) for part in got)
        expected_keys, expected_values = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
        if tuple(keys.shape) == (B, H, S, d):
            return "the returned keys still have S positions: append the new key (the cache grows by one each step)"
        if problem := shape_problem(keys, expected_keys.shape, "the keys"):
            return problem
        if torch.allclose(keys, torch.cat([k_new, k_cache], dim=-2)):
            return "the new key went in front: the cache keeps positions in order, so append it at the end"
        if not (torch.allclose(keys, expected_keys) and torch.allclose(values, expected_values)):
            return "the returned keys and values should be the cached ones followed by the new ones (torch.cat, dim=-2)"
        if problem := shape_problem(output, (B, H, 1, d), "the output"):
            return problem
        scores = q @ expected_keys.transpose(-2, -1)  # (B, H, 1, S + 1)
        expected = torch.softmax(scores / math.sqrt(d), dim=-1) @ expected_values
        if d > 1 and torch.allclose(output, torch.softmax(scores, dim=-1) @ expected_values):
            return "the scores are not scaled: divide q · k by sqrt(d_k) before the softmax"
        if torch.allclose(output, torch.softmax(q @ k_cache.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v_cache):
            return "the output ignores the new position: attend over the keys and values after appending"
        if not torch.allclose(output, expected):
            return f"the output differs from softmax(q Kᵀ / √d_k) V (largest difference {(output - expected).abs().max():.3g})"
    return None


CHECKS: dict[str, Check] = {
    "ch7.cache_size": Check(check_cache_size, "kv_cache_size",
          forbidden=("attention_book.kv_cache.kv_cache_bytes",)),
    "ch7.ring_slots": Check(check_ring_slots, "ring_slots",
          forbidden=("attention_book.kv_cache.RingKVCache.slot_positions",)),
    "ch7.decode_step": Check(check_decode_step, "decode_step",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
}
