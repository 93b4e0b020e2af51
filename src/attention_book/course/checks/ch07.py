"""Checks of chapter 7's graded exercises (the KV cache: correctness and cost); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import torch

from .common import CASES, Check, case_generator, shape_problem, sizes


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
    "ch7.decode_step": Check(check_decode_step, "decode_step",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
}
