"""Checks of chapter 9's graded exercises (efficient attention); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import torch

from ...attention import scaled_dot_product_attention
from .common import CASES, Check, case_generator, matches, sizes, value_problem


def check_running_max_and_sum(running_max_and_sum, seed: int = 0) -> str | None:
    """Chapter 9: one pass over x (N,) in blocks -> (max of x, sum of exp(x − max))."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        x = torch.randn(int(torch.randint(1, 30, (1,), generator=gen)), generator=gen, dtype=torch.float64) * 5
        block = int(torch.randint(1, 8, (1,), generator=gen))
        m, l = (float(v) for v in running_max_and_sum(x, block))
        expected_m = float(x.max())
        expected_l = float(torch.exp(x - expected_m).sum())
        if not math.isclose(m, expected_m, rel_tol=1e-9, abs_tol=1e-12):
            return f"the running maximum ends at {m:.4f}, the maximum of x is {expected_m:.4f} (block size {block})"
        if not math.isclose(l, expected_l, rel_tol=1e-9):
            return (f"the running sum ends at {l:.4f}, expected {expected_l:.4f}: when a block raises the maximum "
                    f"from m to m', multiply the sum so far by exp(m − m')")
    return None


def check_merge_partials(merge_partials, seed: int = 0) -> str | None:
    """Chapter 9: two blocks' (m, l, acc) for one query, acc = Σ exp(s − m) v, -> the (m, l, acc) of both."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        n_a, n_b, d = sizes(gen, 3, 6)
        s = torch.randn(n_a + n_b, generator=gen, dtype=torch.float64) * 4
        v = torch.randn(n_a + n_b, d, generator=gen, dtype=torch.float64)

        def partial(scores, values):
            m = scores.max()
            return m, torch.exp(scores - m).sum(), torch.exp(scores - m) @ values

        a, b = partial(s[:n_a], v[:n_a]), partial(s[n_a:], v[n_a:])
        m, l, acc = (torch.as_tensor(x, dtype=torch.float64) for x in merge_partials(*a, *b))
        expected = partial(s, v)
        if not math.isclose(float(m), float(expected[0]), rel_tol=1e-9):
            return f"the merged maximum is {float(m):.4f}, expected max(m_a, m_b) = {float(expected[0]):.4f}"
        if not math.isclose(float(l), float(expected[1]), rel_tol=1e-9):
            if math.isclose(float(l), float(a[1] + b[1]), rel_tol=1e-9):
                return "l_a + l_b adds sums taken against different maxima: rescale each by exp(m_x − m) first"
            return f"the merged sum is {float(l):.4f}, expected {float(expected[1]):.4f}"
        if problem := value_problem(acc, expected[2], "the merged accumulator", atol=1e-9):
            return problem + ": rescale each block's acc by exp(m_x − m), like its sum"
    return None


def check_tiled_attention(tiled_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 9: q (T, d), k, v (S, d) read in key blocks of `block` -> softmax(Q Kᵀ / √d) V, (T, d)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, S, d = sizes(gen, 3, 9)
        block = int(torch.randint(1, 5, (1,), generator=gen))
        q, k, v = (torch.randn(n, d, generator=gen, dtype=torch.float64) for n in (T, S, S))
        got = tiled_attention_by_hand(q, k, v, block)
        expected, _ = scaled_dot_product_attention(q, k, v)
        if matches(got, expected, atol=1e-9):
            continue
        blocks = [scaled_dot_product_attention(q, k[i:i + block], v[i:i + block])[0] for i in range(0, S, block)]
        if len(blocks) > 1 and matches(got, sum(blocks) / len(blocks), atol=1e-9):
            return "you averaged the blocks' outputs; blocks weigh by their share of the softmax sum: keep m, l, acc"
        return value_problem(got, expected, f"the output for T={T}, S={S}, block {block}: row", atol=1e-9) or "wrong output"
    return None


CHECKS: dict[str, Check] = {
    "ch9.running_max_and_sum": Check(check_running_max_and_sum, "running_max_and_sum",
          forbidden=("attention_book.efficient.online_softmax",),
          largest=lambda x, block: block, method="read x in blocks of block_size, one block at a time"),
    "ch9.merge_partials": Check(check_merge_partials, "merge_partials",
          forbidden=("attention_book.efficient.merge_partials",)),
    "ch9.tiled_attention": Check(check_tiled_attention, "tiled_attention_by_hand",
          forbidden=("attention_book.efficient.tiled_attention", "attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention"),
          largest=lambda q, k, v, block: max(q.shape[0] * max(block, q.shape[1], v.shape[1]), block * k.shape[1]),
          method="never hold the (T, S) score matrix: one block of keys at a time, (T, block) scores at most"),
}
