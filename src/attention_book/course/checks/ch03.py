"""Checks of chapter 3's graded exercises (multi-head attention); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import torch

from .common import boolean_problem, case_generator, CASES, Check, shape_problem, sizes


def check_split_heads(split_heads_by_hand, seed: int = 0) -> str | None:
    """Chapter 3: (B, T, E) -> (B, H, T, E/H), head h holding columns h·E/H to (h+1)·E/H − 1."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, H, d = sizes(gen, 4, 5)
        x = torch.randn(B, T, H * d, generator=gen)
        got = split_heads_by_hand(x, H)
        if problem := shape_problem(got, (B, H, T, d), f"splitting (B, T, E) = {tuple(x.shape)} into {H} heads"):
            return problem
        expected = x.view(B, T, H, d).transpose(1, 2)
        if not torch.equal(got, expected):
            return (f"head 1 of position 0 should hold columns {d}..{2 * d - 1} of x, i.e. x[0, 0, {d}:{2 * d}]; "
                    f"reshape to (B, T, H, E/H) first, then swap T and H")
    return None


def check_merge_heads(merge_heads_by_hand, seed: int = 0) -> str | None:
    """Chapter 3: (B, H, T, d) -> (B, T, H·d), the inverse of split_heads: head h fills columns h·d … (h+1)·d − 1."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, H, T, d = sizes(gen, 4, 5)
        x = torch.randn(B, H, T, d, generator=gen)
        got = merge_heads_by_hand(x)
        if problem := shape_problem(got, (B, T, H * d), f"merging (B, H, T, d) = {tuple(x.shape)}"):
            return problem
        expected = x.transpose(1, 2).reshape(B, T, H * d)
        if not torch.equal(torch.as_tensor(got), expected):
            return (f"columns {d}..{2 * d - 1} of position 0 should hold head 1's vector x[0, 1, 0]; swap H and T "
                    f"back first (transpose(1, 2)), then reshape (a transpose needs .reshape, not .view)")
    return None


def check_mask_to_sdpa(mask_to_sdpa, seed: int = 0) -> str | None:
    """Chapter 3: nn.MultiheadAttention's boolean attn_mask (T, S) and key_padding_mask (B, S), True =
    blocked, -> one boolean (B, 1, T, S) mask for F.scaled_dot_product_attention, True = may attend."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, S = sizes(gen, 3, 6)
        attn_mask = torch.rand(T, S, generator=gen) < 0.3
        key_padding_mask = torch.rand(B, S, generator=gen) < 0.3
        got = mask_to_sdpa(attn_mask, key_padding_mask)
        if problem := shape_problem(got, (B, 1, T, S), f"the mask for B={B}, T={T}, S={S}"):
            return problem + " (batch, a length-1 head axis that broadcasts, queries, keys)"
        if problem := boolean_problem(got):
            return problem
        expected = ~(attn_mask[None, None] | key_padding_mask[:, None, None, :])
        if torch.equal(got, ~expected):
            return "the convention is flipped: nn.MultiheadAttention's True means blocked, SDPA's True means may attend"
        for b, _, t, s in torch.nonzero(got != expected).tolist():
            why = "attn_mask" if attn_mask[t, s] else "key_padding_mask" if key_padding_mask[b, s] else None
            if why:
                return f"batch {b}: query {t} may attend to key {s} in your mask, but {why} blocks it"
            return f"batch {b}: query {t} may not attend to key {s} in your mask, though neither mask blocks it"
    return None


CHECKS: dict[str, Check] = {
    "ch3.split_heads": Check(check_split_heads, "split_heads_by_hand",
          forbidden=("attention_book.multihead.MultiHeadAttention.split_heads",)),
    "ch3.merge_heads": Check(check_merge_heads, "merge_heads_by_hand",
          forbidden=("attention_book.multihead.MultiHeadAttention.merge_heads",)),
    "ch3.mask_to_sdpa": Check(check_mask_to_sdpa, "mask_to_sdpa",
          forbidden=("attention_book.multihead.mask_from_torch",)),
}
