"""Checks of chapter 5's graded exercises (causal attention); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import numpy as np
import torch

from ...attention import scaled_dot_product_attention
from ...causal import causal_mask
from .common import boolean_problem, case_generator, CASES, Check, matches, shape_problem, sizes, value_problem


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


def check_padded_causal_mask(padded_causal_mask_by_hand, seed: int = 0) -> str | None:
    """Chapter 5: lengths (B,), T and left_padded -> boolean (B, T, T), True where query i may see key j:
    j <= i and key j is a real token (right padding: j < length; left padding: j >= T - length)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T = int(torch.randint(2, 8, (1,), generator=gen))
        lengths = torch.randint(1, T + 1, (int(torch.randint(1, 4, (1,), generator=gen)),), generator=gen)
        lengths[0] = max(1, T - 2)  # some padding in every batch
        left = bool(case % 2)
        got = padded_causal_mask_by_hand(lengths, T, left)
        if problem := shape_problem(got, (len(lengths), T, T), "the mask"):
            return problem + " (B, T, T): one causal mask per sequence"
        if problem := boolean_problem(got):
            return problem
        positions = torch.arange(T)
        real = positions >= T - lengths[:, None] if left else positions < lengths[:, None]  # (B, S)
        expected = causal_mask(T) & real[:, None, :]  # (B, T, T)
        if torch.equal(got, expected):
            continue
        side = "left" if left else "right"
        other = positions < lengths[:, None] if left else positions >= T - lengths[:, None]
        if torch.equal(got, causal_mask(T) & other[:, None, :]):
            return f"with {side} padding the padding sits at the {side}: real tokens are the last `length` " \
                f"positions" if left else "with right padding the real tokens are the first `length` positions"
        b, i, j = torch.nonzero(got != expected).tolist()[0]
        if got[b, i, j] and j > i:
            return f"sequence {b}: query {i} may see key {j}, which comes after it"
        if got[b, i, j]:
            return (f"sequence {b} has length {int(lengths[b])}, {side}-padded: key {j} is padding and must be "
                    f"blocked for every query")
        return f"sequence {b} ({side}-padded, length {int(lengths[b])}): query {i} must see key {j}"
    return None


def check_attention_dropout(dropped_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 5: causal attention with dropout on its weights, the pattern given: q, k, v (B, H, T, d),
    keep (B, H, T, T) and p -> (B, H, T, d), the kept weights divided by 1 - p, rows not renormalised."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, H, T, d = sizes(gen, 4, 5)
        T += 1
        q, k, v = (torch.randn(B, H, T, d, generator=gen) for _ in range(3))
        p = float(torch.rand((), generator=gen)) * 0.6 + 0.2
        keep = torch.rand(B, H, T, T, generator=gen) >= p  # the pattern nn.Dropout(p) would draw
        got = dropped_attention_by_hand(q, k, v, keep.clone(), p)
        if problem := shape_problem(got, (B, H, T, d), "the output"):
            return problem
        mask = causal_mask(T)
        weights = scaled_dot_product_attention(q, k, v, mask)[1]  # (B, H, T, T)
        expected = (weights * keep / (1 - p)) @ v
        if matches(got, expected):
            continue
        if matches(got, (weights * keep) @ v):
            return f"p={p:.2f}: the kept weights must be divided by 1 - p, as nn.Dropout does in training"
        if torch.as_tensor(got).isnan().any():
            return "your output has NaN: a row whose kept weights sum to 0 divided by that sum; dropout " \
                   "does not renormalise the rows, so such a row gives a zero output"
        kept = weights * keep
        if matches(got, (kept / kept.sum(-1, keepdim=True).clamp(min=1e-30)) @ v):
            return "dropout does not renormalise the rows: after it they no longer sum to 1"
        if matches(got, (scaled_dot_product_attention(q, k, v, mask & keep)[1] / (1 - p)) @ v) or \
                matches(got, scaled_dot_product_attention(q, k, v, mask & keep)[0]):
            return "you dropped scores before the softmax; nn.Dropout acts on the weights after it"
        if matches(got, (scaled_dot_product_attention(q, k, v)[1] * keep / (1 - p)) @ v):
            return "the weights are not causal: query i must not see keys after i"
        return value_problem(got, expected, f"with p={p:.2f}, the output") or "wrong output"
    return None


def check_packed_mask(packed_mask_by_hand, seed: int = 0) -> str | None:
    """Chapter 5: document ids (T,) of sequences packed one after another -> boolean (T, T), True where
    query i may see key j: the same document and j <= i."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T = int(torch.randint(3, 10, (1,), generator=gen))
        starts = torch.rand(T, generator=gen) < 0.35
        starts[0] = False
        if case == 0 or not starts.any():
            starts[T // 2] = True  # at least two documents
        document = starts.cumsum(0)  # (T,) 0, 0, 1, 1, 1, 2, …
        got = packed_mask_by_hand(document)
        if problem := shape_problem(got, (T, T), "the mask"):
            return problem
        if problem := boolean_problem(got):
            return problem
        same = document[:, None] == document[None, :]  # (T, T)
        expected = causal_mask(T) & same
        if torch.equal(got, expected):
            continue
        i, j = torch.nonzero(got != expected).tolist()[0]
        if got[i, j] and j > i:
            return f"documents {document.tolist()}: query {i} may see key {j}, which comes after it"
        if got[i, j]:
            return (f"documents {document.tolist()}: query {i} (document {int(document[i])}) may see key {j} of "
                    f"document {int(document[j])}; a document must not see the one packed before it")
        return f"documents {document.tolist()}: query {i} must see key {j}, earlier in its own document"
    return None


CHECKS: dict[str, Check] = {
    "ch5.offset_causal_mask": Check(check_offset_causal_mask, "offset_causal_mask_by_hand",
          forbidden=("attention_book.causal.causal_mask", "attention_book.causal.position_mask")),
    "ch5.padded_causal_mask": Check(check_padded_causal_mask, "padded_causal_mask_by_hand",
          forbidden=("attention_book.causal.causal_mask", "attention_book.causal.position_mask")),
    "ch5.attention_dropout": Check(check_attention_dropout, "dropped_attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention",
                     "torch.nn.functional.scaled_dot_product_attention")),
    "ch5.packed_mask": Check(check_packed_mask, "packed_mask_by_hand",
          forbidden=("attention_book.causal.causal_mask", "attention_book.causal.position_mask")),
}
