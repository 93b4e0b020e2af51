"""Checks of chapter 4's graded exercises (cross-attention and padding); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import torch

from ...attention import scaled_dot_product_attention
from .common import boolean_problem, case_generator, CASES, Check, matches, shape_problem, sizes, value_problem


def check_padding_mask(padding_mask_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: lengths (B,) and S -> boolean (B, S), True for real tokens (the package's convention)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        S = int(torch.randint(1, 9, (1,), generator=gen))
        lengths = torch.randint(1, S + 1, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen)
        got = padding_mask_by_hand(lengths, S)
        if problem := shape_problem(got, (len(lengths), S), "the mask"):
            return problem
        if problem := boolean_problem(got):
            return problem
        expected = torch.arange(S) < lengths[:, None]
        for b, s in zip(*torch.nonzero(got != expected).T.tolist(), strict=True):
            what = "lets queries see padded position" if got[b, s] else "hides real position"
            return f"sequence {b} has length {int(lengths[b])}: your mask {what} {s}"
    return None


def check_cross_attention(cross_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: decoder states (T, E) ask, encoder states (S, E) answer: W_q on the decoder, W_k and W_v
    on the encoder -> (T, d_v)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, S, E, d_k, d_v = sizes(gen, 5, 6)
        target, source = torch.randn(T, E, generator=gen), torch.randn(S, E, generator=gen)
        W_q, W_k, W_v = (torch.randn(E, n, generator=gen) for n in (d_k, d_k, d_v))
        got = cross_attention_by_hand(target, source, W_q, W_k, W_v)
        expected, _ = scaled_dot_product_attention(target @ W_q, source @ W_k, source @ W_v)
        if matches(got, expected):
            continue
        if T != S and shape_problem(got, (S, d_v), "") is None:
            return (f"your output has one row per source position ({S}); cross-attention gives one per target "
                    f"position ({T}): the queries come from the decoder (target)")
        if matches(got, scaled_dot_product_attention(target @ W_q, target @ W_k, target @ W_v)[0]):
            return "that is self-attention over the target: the keys and values come from the encoder (source)"
        return value_problem(got, expected, f"the output for T={T}, S={S}: row") or "wrong output"
    return None


def check_padded_attention(padded_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: q (B, T, d), k (B, S, d), v (B, S, d_v) and lengths (B,) -> (B, T, d_v), no key beyond a
    sequence's length attended."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, S, d = sizes(gen, 4, 6)
        q, k, v = torch.randn(B, T, d, generator=gen), torch.randn(B, S, d, generator=gen), torch.randn(B, S, d, generator=gen)
        lengths = torch.randint(1, S + 1, (B,), generator=gen)
        got = padded_attention_by_hand(q, k, v, lengths)
        mask = (torch.arange(S) < lengths[:, None])[:, None, :]  # (B, 1, S)
        expected, _ = scaled_dot_product_attention(q, k, v, mask)
        if matches(got, expected):
            continue
        if matches(got, scaled_dot_product_attention(q, k, v)[0]):
            return f"the padding is attended: with lengths {lengths.tolist()}, keys at or beyond a length must get weight 0"
        if matches(got, scaled_dot_product_attention(q, k, v, ~mask)[0]):
            return "the mask is flipped: the real tokens (positions below the length) are the ones to attend"
        return value_problem(got, expected, f"the output with lengths {lengths.tolist()} at") or "wrong output"
    return None


CHECKS: dict[str, Check] = {
    "ch4.padding_mask": Check(check_padding_mask, "padding_mask_by_hand",
          forbidden=()),
    "ch4.cross_attention": Check(check_cross_attention, "cross_attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
    "ch4.padded_attention": Check(check_padded_attention, "padded_attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
}
