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


def check_saturation(saturation_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: queries (n, d_k) and keys (n, S, d_k), one query per row of keys -> (variance of the scaled
    scores q·k / √d_k over all n·S of them, mean over the n queries of the largest softmax weight)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        n, S, d_k = [m + 1 for m in sizes(gen, 3, 9)]
        scale = float(torch.rand(1, generator=gen)) * 2 + 0.5
        q, k = torch.randn(n, d_k, generator=gen) * scale, torch.randn(n, S, d_k, generator=gen)
        got = saturation_by_hand(q, k)
        if not isinstance(got, tuple | list) or len(got) != 2:
            return "return two numbers: (variance of the scaled scores, mean largest weight)"
        variance, largest = (float(value) for value in got)
        scores = (k @ q[:, :, None]).squeeze(-1)  # (n, S): q_i · k_ij
        expected_var = (scores / math.sqrt(d_k)).var().item()
        expected_max = torch.softmax(scores / math.sqrt(d_k), dim=-1).max(-1).values.mean().item()
        if math.isclose(variance, scores.var().item(), rel_tol=1e-4) and d_k > 1:
            return f"that is the variance of the unscaled scores: divide them by √d_k = {math.sqrt(d_k):.3f} first"
        if not math.isclose(variance, expected_var, rel_tol=1e-4, abs_tol=1e-6):
            return f"for n={n}, S={S}, d_k={d_k} the variance of the scaled scores is {expected_var:.4f}, yours is " \
                   f"{variance:.4f}"
        if math.isclose(largest, torch.softmax(scores / math.sqrt(d_k), dim=0).max(-1).values.mean().item(),
                        rel_tol=1e-4) and not math.isclose(largest, expected_max, rel_tol=1e-4):
            return "the softmax runs over the queries (dim 0): each query's weights over its S keys must sum to 1"
        if not math.isclose(largest, expected_max, rel_tol=1e-4, abs_tol=1e-6):
            return f"for n={n}, S={S}, d_k={d_k} the mean largest weight is {expected_max:.4f}, yours is {largest:.4f}"
    return None


def additive_scores(q, k, W_1, W_2, v_a):
    """Bahdanau's scores e[t, s] = tanh(q_t W_1 + k_s W_2) · v_a, (T, S)."""
    return torch.tanh((q @ W_1)[:, None, :] + (k @ W_2)[None, :, :]) @ v_a


def check_additive(additive_scores_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: queries (T, d_q), keys (S, d_k), W_1 (d_q, h), W_2 (d_k, h), v_a (h,) -> scores (T, S)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, S, d_q, d_k, h = [m + 1 for m in sizes(gen, 5, 6)]
        q, k = torch.randn(T, d_q, generator=gen), torch.randn(S, d_k, generator=gen)
        W_1, W_2 = torch.randn(d_q, h, generator=gen), torch.randn(d_k, h, generator=gen)
        v_a = torch.randn(h, generator=gen)
        got = additive_scores_by_hand(q, k, W_1, W_2, v_a)
        if problem := shape_problem(got, (T, S), "the scores"):
            return problem + " (one score per query and key: broadcast (T, 1, h) against (1, S, h))"
        expected = additive_scores(q, k, W_1, W_2, v_a)
        if matches(got, expected):
            continue
        if matches(got, ((q @ W_1)[:, None, :] + (k @ W_2)[None, :, :]) @ v_a):
            return "the tanh is missing: the hidden layer is tanh(q W_1 + k W_2), then · v_a"
        if matches(got, torch.tanh(((q @ W_1)[:, None, :] + (k @ W_2)[None, :, :]) @ v_a)):
            return "the tanh comes before v_a: tanh(q W_1 + k W_2) · v_a, not tanh((q W_1 + k W_2) · v_a)"
        if matches(got, torch.softmax(expected, dim=-1)):
            return "these are the weights: the exercise asks for the scores before the softmax"
        return value_problem(got, expected, f"the scores for T={T}, S={S}, h={h}: entry") or "wrong scores"
    return None


CHECKS: dict[str, Check] = {
    "ch2.attention": Check(check_attention, "attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
    "ch2.saturation": Check(check_saturation, "saturation_by_hand",
          forbidden=()),  # the package's demos draw their own queries and keys: nothing computes this answer
    "ch2.additive": Check(check_additive, "additive_scores_by_hand",
          forbidden=("keras.layers.AdditiveAttention",)),
}
