"""Positions: sinusoidal encodings, learned position embeddings and rotary positions (RoPE) (chapter 9).

Attention alone is permutation-equivariant: it cannot tell "eat dessert first" from "first dessert eat".
Absolute encodings add a vector per position to the token embeddings (Vaswani et al., 2017); rotary
positions rotate each query and key by an angle proportional to its position (Su et al., 2021), so that
their dot product depends only on how far apart they are. Pairs of features are (0, 1), (2, 3), ….
"""

import torch
from torch import nn


def pair_frequencies(width: int, base: float = 10000.0) -> torch.Tensor:
    """The angle per position of each of the width / 2 feature pairs: base^(−2i / width), i = 0 … width/2 − 1."""
    validate_even_width(width)
    return base ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)  # (width/2,)


def sinusoidal_encoding(length: int, width: int, base: float = 10000.0) -> torch.Tensor:
    """PE (length, width): PE[p, 2i] = sin(p·ω_i), PE[p, 2i+1] = cos(p·ω_i) (chapter 9; Vaswani et al., 2017)."""
    angles = torch.arange(length, dtype=torch.float64)[:, None] * pair_frequencies(width, base)  # (T, width/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, width/2, 2)
    return pe.reshape(length, width).float()  # (T, width): sin, cos, sin, cos, …


def sinusoidal_shift(offset: int, width: int, base: float = 10000.0) -> torch.Tensor:
    """The matrix M (width, width) with PE[p + offset] = M @ PE[p] for every p: one 2×2 rotation per pair (chapter 9)."""
    angles = offset * pair_frequencies(width, base)  # (width/2,)
    cos, sin = angles.cos(), angles.sin()
    # (sin(a + b), cos(a + b)) = [[cos b, sin b], [−sin b, cos b]] @ (sin a, cos a)
    blocks = torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)  # (width/2, 2, 2)
    return torch.block_diag(*blocks).float()  # (width, width)


class LearnedPositions(nn.Module):
    """One trained vector per position, added to the token embeddings, as chapter 7's decoder does (chapter 9)."""

    def __init__(self, max_length: int, width: int):
        super().__init__()
        self.embedding = nn.Embedding(max_length, width)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x (B, T, E) of positions start … start + T − 1 -> x + P[start:start + T] (B, T, E)."""
        end = start + x.shape[-2]
        validate_positions(start, end, self.embedding.num_embeddings)
        return x + self.embedding(torch.arange(start, end, device=x.device))  # (B, T, E)


def rope_angles(length: int, width: int, start: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Angles (T, width/2): position m = start … start + T − 1 turns pair i by m·θ_i (chapter 9)."""
    positions = torch.arange(start, start + length, dtype=torch.float64)  # (T,)
    return positions[:, None] * pair_frequencies(width, base)  # (T, width/2)


def apply_rope(x: torch.Tensor, start: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Rotate queries or keys x (..., T, d) of positions start … start + T − 1 (chapter 9; Su et al., 2021).

    Pair (x[2i], x[2i+1]) at position m is turned by the angle m·θ_i, θ_i = base^(−2i/d). With a KV cache,
    `start` is the number of positions already cached: the new keys are stored rotated by their own positions.
    """
    validate_rope_input(x, start)
    T, d = x.shape[-2], x.shape[-1]
    angles = rope_angles(T, d, start, base)  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)  # (..., T, d/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]  # (..., T, d/2) each
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., T, d/2, 2)
    return rotated.reshape(x.shape)  # (..., T, d)


# Input checks, shared by the functions above.

def validate_even_width(width: int) -> None:
    """Sinusoids and rotations work on pairs of features, so the width must be a positive even number."""
    if width < 2 or width % 2:
        raise ValueError(f"positions need an even width (features come in pairs), got width={width}")


def validate_positions(start: int, end: int, max_length: int) -> None:
    """Positions start … end − 1 must exist in a table of max_length positions."""
    if start < 0 or end > max_length:
        raise ValueError(f"positions {start}..{end - 1} are outside the {max_length} learned positions "
                         f"0..{max_length - 1}")


def validate_rope_input(x: torch.Tensor, start: int) -> None:
    """RoPE needs x (..., T, d) with d even, and a start position ≥ 0."""
    if x.dim() < 2:
        raise ValueError(f"RoPE needs x of shape (..., T, d), got shape {tuple(x.shape)}")
    if x.shape[-1] % 2:
        raise ValueError(f"RoPE rotates pairs of features: x of shape {tuple(x.shape)} has odd d={x.shape[-1]}")
    if start < 0:
        raise ValueError(f"start is the first position, so it must be ≥ 0, got {start}")
