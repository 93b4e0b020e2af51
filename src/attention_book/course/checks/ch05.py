"""Checks of chapter 5's graded exercises (causal attention); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import numpy as np
import torch

from ...attention import scaled_dot_product_attention
from ...causal import causal_mask
from .common import boolean_problem, case_generator, CASES, Check, matches, shape_problem, sizes, value_problem


def check_causal_mask(causal_mask_by_hand, seed: int = 0) -> str | None:
    """Chapter 5: boolean (T, T), True where query i may attend to key j, that is j <= i."""
    for case in range(CASES):
        T = int(torch.randint(1, 2 * CASES, (1,), generator=case_generator(seed, case)))
        got = causal_mask_by_hand(T)
        if problem := shape_problem(got, (T, T), f"the mask for T={T}"):
            return problem
        if problem := boolean_problem(got):
            return problem
        expected = causal_mask(T)
        wrong = torch.nonzero(got != expected).tolist()
        if wrong:
            i, j = wrong[0]
            if got[i, j]:
                return f"your causal mask lets position {i} see position {j}, which comes after it"
            return f"your causal mask stops position {i} from seeing position {j}" + (" (itself)" if i == j else "")
    return None


def check_offset_causal_mask(causal_mask_by_hand, seed: int = 0) -> str | None:
    """Chapter 5: T queries, the last T of S positions -> boolean (T, S), query i sees keys 0 … S − T + i."""
    rng = np.random.default_rng([seed, 5])
    for _ in range(CASES):
        S = int(rng.integers(1, 9))
        T = int(rng.integers(1, S + 1))
        got = causal_mask_by_hand(T, S)
        if problem := shape_problem(got, (T, S), f"the mask for T={T}, S={S}"):
            return problem
        if problem := boolean_problem(got):
            return problem
        expected = causal_mask(T, S)
        if torch.equal(got, expected):
            continue
        if torch.equal(got, torch.ones(T, S, dtype=torch.bool).tril()):
            return (f"your triangle starts at the top left (as is_causal=True does): with T={T} of S={S}, query 0 "
                    f"is position {S - T} and sees keys 0..{S - T}")
        i, j = torch.nonzero(got != expected).tolist()[0]
        if got[i, j]:
            return f"T={T}, S={S}: query {i} is position {S - T + i} and must not see key {j}, which comes after it"
        return f"T={T}, S={S}: query {i} is position {S - T + i} and must see key {j}"
    return None


def check_causal_attention(causal_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 5: q, k (T, d_k), v (T, d_v) -> (T, d_v), each position attending to itself and earlier ones."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, d_k, d_v = sizes(gen, 3, 7)
        T += 1  # at least two positions: with one, every mask agrees
        q, k, v = torch.randn(T, d_k, generator=gen), torch.randn(T, d_k, generator=gen), torch.randn(T, d_v, generator=gen)
        got = causal_attention_by_hand(q, k, v)
        expected, weights = scaled_dot_product_attention(q, k, v, causal_mask(T))
        if matches(got, expected):
            continue
        full = torch.softmax(q @ k.T / math.sqrt(d_k), dim=-1)
        if matches(got, (full * causal_mask(T)) @ v):
            return "you masked after the softmax: each row's weights no longer sum to 1; set blocked scores to -inf before it"
        if matches(got, full @ v):
            return "nothing is masked: position 0 sees every later position"
        return value_problem(got, expected, f"the output for T={T}: row") or "wrong output"
    return None


CHECKS: dict[str, Check] = {
    "ch5.causal_mask": Check(check_causal_mask, "causal_mask_by_hand",
          forbidden=("attention_book.causal.causal_mask", "torch.nn.Transformer.generate_square_subsequent_mask")),
    "ch5.offset_causal_mask": Check(check_offset_causal_mask, "offset_causal_mask_by_hand",
          forbidden=("attention_book.causal.causal_mask", "attention_book.causal.position_mask")),
    "ch5.causal_attention": Check(check_causal_attention, "causal_attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
}
