"""Chapter 9's positions: sinusoidal shifts are rotations, RoPE is relative, agrees with the complex form,
and works with a KV cache."""

import math

import pytest
import torch

from attention_book.attention import scaled_dot_product_attention as attention_and_weights
from attention_book.causal import causal_mask
from attention_book.kv_cache import KVCache
from attention_book.positions import (
    LearnedPositions,
    apply_rope,
    pair_frequencies,
    sinusoidal_encoding,
    sinusoidal_shift,
)


def rope_complex(x: torch.Tensor, start: int = 0, base: float = 10000.0) -> torch.Tensor:
    """An independent RoPE: pairs as complex numbers z_i, multiplied by e^{i m θ_i} (Su et al., eq. 12)."""
    T, d = x.shape[-2], x.shape[-1]
    theta = [base ** (-2 * i / d) for i in range(d // 2)]
    turn = torch.tensor([[complex(math.cos(m * t), math.sin(m * t)) for t in theta]
                         for m in range(start, start + T)], dtype=torch.complex128)  # (T, d/2)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())  # (..., T, d/2)
    return torch.view_as_real(z * turn).reshape(x.shape).to(x.dtype)  # (..., T, d)


def scaled_dot_product_attention(q, k, v, mask=None):
    return attention_and_weights(q, k, v, mask)[0]


def test_sinusoidal_encoding_is_the_formula():
    pe = sinusoidal_encoding(50, 16)
    for p in (0, 7, 49):
        for i in range(8):
            angle = p / 10000 ** (2 * i / 16)
            assert math.isclose(pe[p, 2 * i], math.sin(angle), abs_tol=1e-6)
            assert math.isclose(pe[p, 2 * i + 1], math.cos(angle), abs_tol=1e-6)


@pytest.mark.parametrize("offset", [1, 3, 17])
@pytest.mark.parametrize("width", [4, 32])
def test_sinusoidal_shift_is_a_rotation_per_pair(offset, width):
    pe, shift = sinusoidal_encoding(100, width).double(), sinusoidal_shift(offset, width).double()
    torch.testing.assert_close(pe[:-offset] @ shift.T, pe[offset:], atol=1e-5, rtol=0)  # the same M for every p
    torch.testing.assert_close(shift @ shift.T, torch.eye(width, dtype=torch.float64), atol=1e-6, rtol=0)
    assert torch.count_nonzero(shift) == 2 * width  # only 2×2 blocks on the diagonal


def test_learned_positions_add_one_row_per_position():
    positions = LearnedPositions(10, 4)
    x = torch.zeros(2, 3, 4)
    torch.testing.assert_close(positions(x, start=5), positions.embedding.weight[5:8].expand(2, 3, 4))
    with pytest.raises(ValueError, match=r"positions 8..10 are outside the 10 learned positions 0..9"):
        positions(x, start=8)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("start", [0, 5])
def test_rope_equals_the_complex_number_form(seed, start):
    x = torch.randn(2, 3, 7, 16, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(apply_rope(x, start), rope_complex(x, start), atol=1e-5, rtol=1e-5)


def test_rope_keeps_lengths_and_turns_by_the_angle():
    x = torch.randn(9, 8, generator=torch.Generator().manual_seed(3))
    rotated = apply_rope(x)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rotated[0], x[0])  # position 0 is not turned
    assert not torch.allclose(rotated[1:], x[1:], atol=1e-3)


@pytest.mark.parametrize("seed", [0, 1])
def test_rope_scores_depend_only_on_the_distance(seed):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(32, generator=gen).double(), torch.randn(32, generator=gen).double()

    def score(m, n):
        """q at position m against k at position n."""
        qs, ks = q.expand(max(m, n) + 1, 32), k.expand(max(m, n) + 1, 32)  # the same vector at every position
        return float(apply_rope(qs)[m] @ apply_rope(ks)[n])

    for distance in (0, 1, 4, 11):
        scores = [score(n + distance, n) for n in (0, 3, 20)]
        assert max(scores) - min(scores) < 1e-9, (distance, scores)
    assert abs(score(5, 0) - score(6, 0)) > 1e-3  # and it does depend on the distance


@pytest.mark.parametrize("prefill", [1, 4])
def test_rope_with_a_kv_cache_equals_full_recomputation(prefill):
    """Keys are cached rotated by their own positions; each new query is rotated by its position."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 10, 8, generator=gen) for _ in range(3))  # (B, H, T, d_k)
    full = scaled_dot_product_attention(apply_rope(q), apply_rope(k), v, mask=causal_mask(10))
    cache = KVCache(10)
    keys, values = cache.append(apply_rope(k[:, :, :prefill]), v[:, :, :prefill])
    outputs = [scaled_dot_product_attention(apply_rope(q[:, :, :prefill]), keys, values, mask=causal_mask(prefill))]
    for t in range(prefill, 10):
        keys, values = cache.append(apply_rope(k[:, :, t:t + 1], start=t), v[:, :, t:t + 1])  # (B, H, t + 1, d_k)
        outputs.append(scaled_dot_product_attention(apply_rope(q[:, :, t:t + 1], start=t), keys, values))
    torch.testing.assert_close(torch.cat(outputs, dim=2), full)
    wrong = scaled_dot_product_attention(apply_rope(q[:, :, 9:]), keys, values)  # the offset forgotten
    assert not torch.allclose(wrong, full[:, :, 9:], atol=1e-3)


def test_bad_input_names_the_shapes():
    with pytest.raises(ValueError, match=r"x of shape \(2, 5, 7\) has odd d=7"):
        apply_rope(torch.zeros(2, 5, 7))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., T, d\), got shape \(8,\)"):
        apply_rope(torch.zeros(8))
    with pytest.raises(ValueError, match=r"must be ≥ 0, got -1"):
        apply_rope(torch.zeros(3, 4), start=-1)
    with pytest.raises(ValueError, match=r"even width .* got width=5"):
        sinusoidal_encoding(4, 5)
    with pytest.raises(ValueError, match=r"got width=0"):
        pair_frequencies(0)


def test_the_rotate_half_pairing_is_rope_on_reordered_features():
    """The reference of chapter 9's graded exercise (Hugging Face's pairing, i with i + d/2) is this book's RoPE
    applied to the features reordered into adjacent pairs."""
    from attention_book.course.checks import rope_half_reference

    x = torch.randn(7, 12, generator=torch.Generator().manual_seed(5), dtype=torch.float64)  # (T, d)
    interleaved = torch.arange(12).reshape(2, 6).T.flatten()  # 0, 6, 1, 7, …
    torch.testing.assert_close(rope_half_reference(x), apply_rope(x[:, interleaved])[:, interleaved.argsort()])
    torch.testing.assert_close(rope_half_reference(rope_half_reference(x), direction=-1), x)  # turned back
