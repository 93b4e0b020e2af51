"""Checks of chapter 8's graded exercises (storing less: the cache's size, the ring, the ring with sinks, grouped decode); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""


import math

import numpy as np
import torch

from ...kv_cache import RingKVCache, kv_cache_bytes
from .common import CASES, Check, case_generator, shape_problem, sizes


def check_cache_size(kv_cache_size, seed: int = 0) -> str | None:
    """Chapter 8: bytes of a KV cache, 2 × layers × key/value heads × head_dim × positions held × bytes per
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
    """Chapter 8: after positions 0 … length − 1 went into a ring of `window` slots (position p in slot
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


def check_sink_slots(sink_slots, seed: int = 0) -> str | None:
    """Chapter 8: after positions 0 … length − 1 went into a ring of `sinks` fixed slots and `window` rolling
    ones (position p < sinks in slot p, a later one in slot sinks + (p − sinks) mod window), the position
    each slot holds, in slot order."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        window, sinks = sizes(gen, 2, 7)
        length = sizes(gen, 1, 3 * (sinks + window))[0]
        expected = RingKVCache(window, sinks=sinks).slot_positions(length)
        got = torch.as_tensor(sink_slots(length, window, sinks)).flatten()
        setting = f"length={length}, window={window}, sinks={sinks}"
        if len(got) != len(expected):
            return (f"{setting}: the ring holds min(length, sinks + window) = {len(expected)} positions, yours "
                    f"gives {len(got)}")
        if torch.equal(got, expected):
            continue
        if torch.equal(got, RingKVCache(sinks + window).slot_positions(length)):
            return (f"{setting}: that is a plain ring of {sinks + window} slots, which overwrites the sinks; "
                    f"positions 0 … {sinks - 1} keep slots 0 … {sinks - 1} forever")
        # the ring's slots counted from position 0: slot sinks + p mod window
        from_zero = [max((p for p in range(sinks, length) if p % window == j), default=-1)
                     for j in range(len(expected) - min(length, sinks))]
        if got[sinks:].tolist() == from_zero:
            return (f"{setting}: the ring is counted from position 0; it starts after the sinks, so position p ≥ "
                    f"sinks goes to slot sinks + (p − sinks) mod window")
        k = int(torch.nonzero(got != expected)[0])
        return f"{setting}: slot {k} should hold position {int(expected[k])}, yours says {int(got[k])}"
    return None


def check_grouped_decode(grouped_decode, seed: int = 0) -> str | None:
    """Chapter 8: one decode step of H query heads over H_kv shared key/value heads, query head h reading
    key/value head h // (H / H_kv), without copying the keys and values per query head."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, S, d = sizes(gen, 3, 6)
        kv_heads = sizes(gen, 1, 4)[0]
        group = 2 + case % 3  # at least two query heads per key/value head
        H = kv_heads * group
        q = torch.randn(B, H, 1, d, generator=gen, dtype=torch.float64)
        k, v = (torch.randn(B, kv_heads, S, d, generator=gen, dtype=torch.float64) for _ in range(2))
        got = torch.as_tensor(grouped_decode(q, k, v))
        if problem := shape_problem(got, (B, H, 1, d), "the output"):
            return problem

        def attend(keys, values, q=q, d=d):
            return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(d), dim=-1) @ values

        expected = attend(k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1))
        if torch.allclose(got, expected):
            continue
        if kv_heads > 1 and torch.allclose(got, attend(k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1))):
            return (f"with H={H} and H_kv={kv_heads}, query head 1 read key/value head 1: heads go to groups in "
                    f"order, head h reads h // {group} (repeat_interleave's order, not repeat's)")
        if d > 1 and torch.allclose(got, torch.softmax(q @ k.repeat_interleave(group, dim=1).transpose(-2, -1),
                                                       dim=-1) @ v.repeat_interleave(group, dim=1)):
            return "the scores are not scaled: divide q · k by sqrt(d_k) before the softmax"
        return (f"H={H}, H_kv={kv_heads}: the output differs from attention with each key/value head shared by "
                f"its group (largest difference {(got - expected).abs().max():.3g})")
    return None


CHECKS: dict[str, Check] = {
    "ch8.cache_size": Check(check_cache_size, "kv_cache_size",
          forbidden=("attention_book.kv_cache.kv_cache_bytes",)),
    "ch8.ring_slots": Check(check_ring_slots, "ring_slots",
          forbidden=("attention_book.kv_cache.RingKVCache.slot_positions",)),
    "ch8.sink_slots": Check(check_sink_slots, "sink_slots",
          forbidden=("attention_book.kv_cache.RingKVCache.slot_positions",)),
    "ch8.grouped_decode": Check(check_grouped_decode, "grouped_decode",
          forbidden=("attention_book.multihead.grouped_attention", "torch.repeat_interleave",
                     "torch.Tensor.repeat_interleave", "torch.Tensor.repeat", "torch.Tensor.expand")),
}
