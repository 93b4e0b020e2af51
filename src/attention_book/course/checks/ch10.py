"""Checks of chapter 10's graded exercises (positions); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""


import torch

from ...positions import apply_rope, rope_angles, sinusoidal_encoding, sinusoidal_shift
from .common import CASES, Check, case_generator, shape_problem, sizes


def rope_half_reference(x: torch.Tensor, direction: int = 1) -> torch.Tensor:
    """RoPE with Hugging Face's pairing: feature i with feature i + d/2, turned by direction · m·θ_i."""
    d = x.shape[-1]
    angles = direction * rope_angles(x.shape[-2], d)  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., :d // 2], x[..., d // 2:]  # (..., T, d/2) each
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)  # (..., T, d)


def check_rope_half(rope_half, seed: int = 0) -> str | None:
    """Chapter 10: x (T, d) of positions 0 … T − 1, feature i paired with i + d/2, turned by m·10000^(−2i/d)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, half = sizes(gen, 2, 9)
        x = torch.randn(T + 1, 2 * half, generator=gen, dtype=torch.float64)  # (T, d)
        got, expected = rope_half(x.clone()), rope_half_reference(x)
        if problem := shape_problem(got, expected.shape, "the rotated x"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float64)
        if torch.allclose(got, expected, atol=1e-6):
            continue
        if torch.allclose(got, x, atol=1e-6):
            return "your function returns x unchanged: position m must turn each pair by the angle m·θ_i"
        if half > 1 and torch.allclose(got, apply_rope(x), atol=1e-6):
            return ("that is RoPE on adjacent pairs (2i, 2i + 1), this book's layout; here feature i pairs with "
                    "feature i + d/2: rotate x[:, :d/2] against x[:, d/2:]")
        if not torch.allclose(got[0], x[0], atol=1e-6):
            return "position 0 should not be turned at all (its angle is 0·θ_i = 0)"
        if torch.allclose(got, rope_half_reference(x, direction=-1), atol=1e-6):
            return "each pair turns the wrong way: (a, b) -> (a cos − b sin, a sin + b cos) for the angle m·θ_i"
        feature = int((got - expected).abs().amax(dim=0).argmax())
        return (f"for d = {x.shape[1]} feature {feature} is wrong: pair i is features (i, i + d/2), turned by "
                f"θ_i = 10000^(−2i/d) per position")
    return None


def check_sinusoidal_shift(shift_by_hand, seed: int = 0) -> str | None:
    """Chapter 10: (offset, width) -> M (width, width) with PE[p + offset] = M @ PE[p], one rotation per pair."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        offset, half = sizes(gen, 2, 12)
        width = 2 * half
        got, expected = shift_by_hand(offset, width), sinusoidal_shift(offset, width)
        if problem := shape_problem(got, expected.shape, f"M for offset {offset}, width {width}"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float32)
        if torch.allclose(got, expected, atol=1e-5):
            continue
        if torch.allclose(got, expected.T, atol=1e-5):
            return (f"your M moves back by {offset} positions, not forward: with PE[p] = (sin, cos) per pair, "
                    "PE[p + k] = [[cos kω, sin kω], [−sin kω, cos kω]] @ PE[p]")
        pe = sinusoidal_encoding(offset + 8, width)  # (T, width)
        moved = pe[:8] @ got.T  # (8, width): M @ PE[p] for p = 0 … 7
        pair = int((moved - pe[offset:offset + 8]).abs().amax(dim=0).argmax()) // 2
        return (f"for offset {offset} and width {width}, M @ PE[p] differs from PE[p + {offset}] in pair {pair}: its "
                f"block turns by offset · ω_{pair}, ω_i = 10000^(−2i/width), and M is zero off the 2×2 blocks")
    return None


CHECKS: dict[str, Check] = {
    "ch10.rope_half": Check(check_rope_half, "rope_half",
          forbidden=("attention_book.positions.apply_rope",)),
    "ch10.sinusoidal_shift": Check(check_sinusoidal_shift, "shift_by_hand",
          forbidden=("attention_book.positions.sinusoidal_shift",)),
}
