"""Checks of chapter 2's graded exercises (self-attention); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import torch

from ...attention import scaled_dot_product_attention
from .common import case_generator, CASES, Check, matches, shape_problem, sizes, value_problem


def check_attention(attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: softmax(Q Kᵀ / √d_k) V for q (T, d_k), k (S, d_k), v (S, d_v)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, S, d_k, d_v = sizes(gen, 4, 7)
        q, k, v = torch.randn(T, d_k, generator=gen), torch.randn(S, d_k, generator=gen), torch.randn(S, d_v, generator=gen)
        got = attention_by_hand(q, k, v)
        if problem := shape_problem(got, (T, d_v), "the context vectors"):
            return problem
        expected, _ = scaled_dot_product_attention(q, k, v)
        if torch.allclose(got, expected, atol=1e-5):
            continue
        if torch.allclose(got, torch.softmax(q @ k.T, dim=-1) @ v, atol=1e-5):
            return f"the scores are not scaled: divide Q Kᵀ by √d_k = {math.sqrt(d_k):.3f} before the softmax"
        if S == T and torch.allclose(got, torch.softmax(q @ k.T / math.sqrt(d_k), dim=0) @ v, atol=1e-5):
            return "the softmax runs over the queries (dim 0); each query's weights over the keys must sum to 1 (dim -1)"
        row = int((got - expected).abs().sum(-1).argmax())
        return f"query {row} gets {got[row].tolist()}, expected {expected[row].tolist()}"
    return None


def check_attention_weights(attention_weights_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: q (T, d_k), k (S, d_k) -> softmax(Q Kᵀ / √d_k), (T, S), each row summing to 1."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, S, d_k = sizes(gen, 3, 7)
        q, k = torch.randn(T, d_k, generator=gen) * 2, torch.randn(S, d_k, generator=gen) * 2
        got = attention_weights_by_hand(q, k)
        expected = torch.softmax(q @ k.T / math.sqrt(d_k), dim=-1)
        if matches(got, expected):
            continue
        if matches(got, torch.softmax(q @ k.T, dim=-1)):
            return f"the scores are not scaled: divide Q Kᵀ by √d_k = {math.sqrt(d_k):.3f} before the softmax"
        if matches(got, torch.softmax(q @ k.T / math.sqrt(d_k), dim=0)):
            return "the softmax runs over the queries (dim 0); each query's weights over the keys must sum to 1 (dim -1)"
        if matches(got, q @ k.T / math.sqrt(d_k)):
            return "these are the scaled scores: the weights are their softmax over the keys"
        return value_problem(got, expected, f"the weights for T={T}, S={S}, d_k={d_k}: row") or "wrong weights"
    return None


def check_self_attention(self_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: x (T, d_in) and W_q, W_k (d_in, d_k), W_v (d_in, d_v) -> context vectors (T, d_v)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, d_in, d_k, d_v = sizes(gen, 4, 6)
        x = torch.randn(T, d_in, generator=gen)
        W_q, W_k = torch.randn(d_in, d_k, generator=gen), torch.randn(d_in, d_k, generator=gen)
        W_v = torch.randn(d_in, d_v, generator=gen)
        got = self_attention_by_hand(x, W_q, W_k, W_v)
        expected, _ = scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v)
        if matches(got, expected):
            continue
        if matches(got, scaled_dot_product_attention(x @ W_q, x @ W_k, x)[0]):
            return "the values are the inputs themselves: project them with W_v first (v = x @ W_v)"
        if matches(got, scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, scale=1 / math.sqrt(d_in))[0]):
            return f"you scaled by √d_in = √{d_in}; the scale is √d_k = √{d_k}, the width of the queries and keys"
        return value_problem(got, expected, f"the context vectors for T={T}, d_in={d_in}, d_k={d_k}, d_v={d_v}: row") \
            or "wrong context vectors"
    return None


CHECKS: dict[str, Check] = {
    "ch2.attention": Check(check_attention, "attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
    "ch2.attention_weights": Check(check_attention_weights, "attention_weights_by_hand",
          forbidden=("attention_book.attention.attention_weights", "attention_book.attention.scaled_dot_product_attention")),
    "ch2.self_attention": Check(check_self_attention, "self_attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
}
