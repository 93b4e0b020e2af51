"""Checks of chapter 10's graded exercises (positions); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""


import torch

from ...positions import apply_rope, rope_angles
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


def alibi_reference(T: int, H: int, first: int = 1) -> torch.Tensor:
    """(H, T, T): −m_h (t − j) for keys j ≤ t, 0 above the diagonal, m_h = 2^(−8(h + first)/H)."""
    slopes = torch.tensor([2 ** (-8 * (h + first) / H) for h in range(H)], dtype=torch.float64)  # (H,)
    t = torch.arange(T)
    distance = (t[:, None] - t[None, :]).clamp(min=0).double()  # (T, T)
    return -slopes[:, None, None] * distance  # (H, T, T)


def check_alibi(alibi_by_hand, seed: int = 0) -> str | None:
    """Chapter 10: (T, H) -> (H, T, T) bias −m_h (t − j) for j ≤ t, 0 for j > t, with the slopes
    m_h = 2^(−8(h + 1)/H), H a power of two (Press et al., 2022)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        (T,) = sizes(gen, 1, 10)
        H = 2 ** int(torch.randint(0, 4, (1,), generator=gen))  # 1, 2, 4 or 8
        T += 1
        got, expected = alibi_by_hand(T, H), alibi_reference(T, H)
        if problem := shape_problem(got, expected.shape, f"the bias for T = {T}, H = {H}"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float64)
        if torch.allclose(got, expected, atol=1e-6):
            continue
        if torch.allclose(got, -expected, atol=1e-6):
            return "the bias has the wrong sign: ALiBi subtracts m_h·(t − j), a penalty that grows with distance"
        if torch.allclose(got.tril(), expected, atol=1e-6):
            return ("below the diagonal it is right, but keys after the query (j > t) should get 0: the causal "
                    "mask removes them, and −m_h·(t − j) would be a bonus there")
        if torch.allclose(got, expected.flip(0), atol=1e-6):
            return "the slopes are in reverse order: head 0 has the steepest slope, 2^(−8/H), head H − 1 the gentlest"
        if torch.allclose(got, alibi_reference(T, H, first=0), atol=1e-6):
            return "head 0's slope should be 2^(−8/H), not 1: the slopes are 2^(−8(h + 1)/H) for h = 0 … H − 1"
        head = int((got - expected).abs().flatten(1).amax(-1).argmax())
        return (f"for T = {T}, H = {H}, head {head} is wrong: its bias at query t, key j ≤ t is "
                f"−{2 ** (-8 * (head + 1) / H):.4g}·(t − j)")
    return None


def check_rope_interpolated(rope_interpolated, seed: int = 0) -> str | None:
    """Chapter 10: x (T, d) at positions 0 … T − 1 and a scale s: pair (2i, 2i + 1) at position m turned by
    (m / s)·θ_i, θ_i = 10000^(−2i/d) (position interpolation, Chen et al., 2023)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, half, s = sizes(gen, 3, 9)
        scale = float(s) / 2 + 1  # 1.5 … 5
        x = torch.randn(T + 1, 2 * half, generator=gen, dtype=torch.float64)  # (T, d)
        got, expected = rope_interpolated(x.clone(), scale), apply_rope(x, scale=scale)
        if problem := shape_problem(got, expected.shape, "the rotated x"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float64)
        if torch.allclose(got, expected, atol=1e-6):
            continue
        if torch.allclose(got, apply_rope(x), atol=1e-6):
            return "that is plain RoPE: divide every position by the scale before turning (m / s)·θ_i"
        if torch.allclose(got, apply_rope(x, scale=1 / scale), atol=1e-6):
            return ("you multiply the positions by the scale; interpolation divides them, so T·s positions fit "
                    "into the angles training saw for T")
        if T > 0 and torch.allclose(got, apply_rope(x, base=10000.0 * scale), atol=1e-6):
            return "you changed the base (NTK-style scaling); position interpolation divides the positions"
        feature = int((got - expected).abs().amax(dim=0).argmax())
        return (f"for d = {x.shape[1]}, scale {scale} feature {feature} is wrong: pair i = (2i, 2i + 1) turns by "
                f"(m / scale)·10000^(−2i/d)")
    return None


CHECKS: dict[str, Check] = {
    "ch10.rope_half": Check(check_rope_half, "rope_half",
          forbidden=("attention_book.positions.apply_rope",)),
    "ch10.alibi": Check(check_alibi, "alibi_by_hand",
          forbidden=("attention_book.positions.alibi_bias", "attention_book.positions.alibi_slopes")),
    "ch10.rope_interpolated": Check(check_rope_interpolated, "rope_interpolated",
          forbidden=("attention_book.positions.apply_rope", "attention_book.positions.rope_angles")),
}
