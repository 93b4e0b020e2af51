"""Checks of chapter 11's graded exercises (what trained heads learn); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import torch

from ...causal import causal_mask
from .common import CASES, Check, case_generator, shape_problem, sizes


def check_previous_token_score(score_by_hand, seed: int = 0) -> str | None:
    """Chapter 11: q, k (H, T, d) -> (H,): causal softmax(q kᵀ / √d), then the mean weight of queries
    1 … T − 1 on the position just before them."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        H, T, d = sizes(gen, 3, 7)
        q, k = (torch.randn(H, T + 1, d, generator=gen, dtype=torch.float64) * 2 for _ in range(2))
        got = score_by_hand(q.clone(), k.clone())
        scores = q @ k.transpose(-2, -1)  # (H, T, T)
        mask = causal_mask(T + 1)

        def score(s, m=mask):
            weights = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)  # (H, T, T)
            return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # (H,)

        expected = score(scores / math.sqrt(d))
        if problem := shape_problem(got, expected.shape, "the scores"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float64)
        if torch.allclose(got, expected, atol=1e-9):
            continue
        if torch.allclose(got, score(scores / math.sqrt(d), torch.ones_like(mask)), atol=1e-9):
            return "the weights need the causal mask: a query may not look at later positions"
        if d > 1 and torch.allclose(got, score(scores), atol=1e-9):
            return "the scores are not scaled: divide q · k by sqrt(d) before the softmax"
        weights = torch.softmax((scores / math.sqrt(d)).masked_fill(~mask, float("-inf")), dim=-1)
        if torch.allclose(got, weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1) / (T + 1), atol=1e-9):
            return f"you divide by all {T + 1} queries; query 0 has no previous position: average over the {T} others"
        if torch.allclose(got, weights.diagonal(dim1=-2, dim2=-1)[:, 1:].mean(-1), atol=1e-9):
            return "you average each query's weight on itself; the previous position is one to the left"
        return (f"for {H} heads and T = {T + 1} your scores are {[round(v, 3) for v in got.tolist()]}, expected "
                f"{[round(v, 3) for v in expected.tolist()]}")
    return None


CHECKS: dict[str, Check] = {
    "ch11.previous_token_score": Check(check_previous_token_score, "previous_token_score_by_hand",
          forbidden=("attention_book.induction.previous_token_score",)),
}
