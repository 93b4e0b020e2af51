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


def check_masked_loss(masked_loss_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: logits (B, T, V), labels (B, T) and target lengths (B,) -> the mean cross-entropy over the
    real positions t < lengths[b] only (padded query positions do not count)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, V = [n + 1 for n in sizes(gen, 3, 7)]
        logits = torch.randn(B, T, V, generator=gen) * 2
        labels = torch.randint(0, V, (B, T), generator=gen)
        lengths = torch.randint(1, T + 1, (B,), generator=gen)
        lengths[0] = max(1, T - 1)  # at least one padded position in the batch
        got = masked_loss_by_hand(logits, labels, lengths)
        if problem := shape_problem(torch.as_tensor(got), (), "the loss"):
            return problem + " (one number: the mean over the real positions)"
        real = torch.arange(T) < lengths[:, None]  # (B, T)
        nll = -torch.log_softmax(logits, dim=-1).gather(-1, labels[..., None]).squeeze(-1)  # (B, T)
        expected = nll[real].mean()
        if torch.allclose(torch.as_tensor(got, dtype=expected.dtype), expected, atol=1e-5):
            continue
        if torch.allclose(torch.as_tensor(got, dtype=expected.dtype), nll.mean(), atol=1e-5):
            return (f"you averaged over every position, padding included: with lengths {lengths.tolist()}, only "
                    f"positions below each length count")
        if torch.allclose(torch.as_tensor(got, dtype=expected.dtype), (nll * real).sum() / nll.numel(), atol=1e-5):
            return (f"the padded positions are zeroed but still counted in the mean: divide by the number of real "
                    f"positions, {int(real.sum())}, not {nll.numel()}")
        return f"with lengths {lengths.tolist()} the loss is {expected:.4f}, yours is {float(got):.4f}"
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
    "ch4.masked_loss": Check(check_masked_loss, "masked_loss_by_hand",
          forbidden=("torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss")),
    "ch4.padded_attention": Check(check_padded_attention, "padded_attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
}
