"""Chapter 8: online softmax equals softmax; tiled attention equals the naive form and stores far less."""

import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from attention_book import scaled_dot_product_attention
from attention_book.causal import causal_mask
from attention_book.efficient import naive_attention, online_softmax, tiled_attention
from attention_book.measure.memory import measure_peak_memory


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 4), length=st.integers(1, 70), block=st.integers(1, 80), scale=st.sampled_from([1.0, 50.0]),
       seed=st.integers(0, 999))
def test_online_softmax_equals_softmax(rows, length, block, scale, seed):
    x = torch.randn(rows, length, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale
    torch.testing.assert_close(online_softmax(x, block), torch.softmax(x, dim=-1), rtol=1e-12, atol=1e-14)


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 2), heads=st.integers(1, 3), T=st.integers(1, 40), extra_keys=st.integers(0, 30),
       d_k=st.integers(1, 9), d_v=st.integers(1, 9), block_q=st.integers(1, 50), block_k=st.integers(1, 50),
       causal=st.booleans(), seed=st.integers(0, 999))
def test_tiled_equals_naive(batch, heads, T, extra_keys, d_k, d_v, block_q, block_k, causal, seed):
    """Any shapes, T <= S, block sizes that do and do not divide the lengths, causal or not."""
    gen = torch.Generator().manual_seed(seed)
    S = T + extra_keys
    q = torch.randn(batch, heads, T, d_k, generator=gen)
    k = torch.randn(batch, heads, S, d_k, generator=gen)
    v = torch.randn(batch, heads, S, d_v, generator=gen)
    expected = naive_attention(q, k, v, causal)
    torch.testing.assert_close(tiled_attention(q, k, v, causal, block_q, block_k), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("blocks", [(256, 256), (100, 70), (1000, 1000)])
def test_tiled_equals_pytorch_sdpa(causal, blocks):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 300, 32, generator=gen) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(tiled_attention(q, k, v, causal, *blocks), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
# Scores of several hundred carry float32 rounding of about 1e-4, which the softmax passes on as a relative error.
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 3e-4), (torch.float64, 1e-12)])
def test_tiled_equals_naive_when_scores_are_far_apart(causal, dtype, tolerance):
    """Scores hundreds apart, and a later key block whose maximum is hundreds above the earlier ones: in
    float32 most exponentials and rescale factors underflow to 0; in float64 they do not, and the
    comparison can be tight."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 50, 8, generator=gen, dtype=dtype) for _ in range(3))
    q = q * 40  # scores spread over several hundred
    k[..., 30:, :] *= 3  # later blocks bring a much larger maximum
    expected = naive_attention(q, k, v, causal)
    torch.testing.assert_close(tiled_attention(q, k, v, causal, 16, 7), expected, rtol=tolerance, atol=tolerance)


def test_online_softmax_when_the_first_blocks_are_all_masked():
    """A row whose first blocks are −∞ (padding on the left, a sliding window): no NaN, still softmax."""
    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x[:, :17] = float("-inf")
    torch.testing.assert_close(online_softmax(x, 8), torch.softmax(x, dim=-1), rtol=1e-12, atol=1e-14)


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 40), extra_keys=st.integers(0, 30), blocked=st.integers(0, 70), block_q=st.integers(1, 20),
       block_k=st.integers(1, 20), causal=st.booleans(), seed=st.integers(0, 999))
def test_tiled_with_a_padding_mask_whose_first_blocks_are_empty(T, extra_keys, blocked, block_q, block_k, causal,
                                                                 seed):
    """Keys 0..blocked-1 of the first sequence are padding, so its first key blocks are wholly masked; the
    second sequence has none. Equal to chapter 2's attention (zeros where a query may see nothing)."""
    gen = torch.Generator().manual_seed(seed)
    S = T + extra_keys
    q, k, v = (torch.randn(2, 3, n, 5, generator=gen, dtype=torch.float64) for n in (T, S, S))
    padding = torch.ones(2, 1, 1, S, dtype=torch.bool)  # (B, 1, 1, S): True = a real key
    padding[0, ..., :blocked] = False
    mask = padding & causal_mask(T, S) if causal else padding
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    got = tiled_attention(q, k, v, causal, block_q, block_k, mask=padding)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_tiled_with_a_float_mask_equals_chapter_2():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 30, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(30, 30, generator=gen, dtype=torch.float64)  # added to the scores, in natural-log units
    torch.testing.assert_close(tiled_attention(q, k, v, block_q=8, block_k=8, mask=bias),
                               scaled_dot_product_attention(q, k, v, bias)[0], rtol=1e-12, atol=1e-12)


def test_tiled_broadcasts_batch_dimensions_like_naive():
    gen = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 1, 5, 4, generator=gen), torch.randn(1, 2, 7, 4, generator=gen), torch.randn(7, 6, generator=gen)
    torch.testing.assert_close(tiled_attention(q, k, v, block_k=3), naive_attention(q, k, v), rtol=1e-5, atol=1e-5)


def test_clear_errors():
    q, k = torch.zeros(1, 5, 4), torch.zeros(1, 3, 4)
    with pytest.raises(ValueError, match="at least as many keys as queries, got T=5 > S=3"):
        tiled_attention(q, k, k, causal=True)
    with pytest.raises(ValueError, match="block_k must be a positive integer, got 0"):
        tiled_attention(q, k, k, block_k=0)
    with pytest.raises(ValueError, match=r"query and key widths differ: query \(1, 5, 4\) has d_k=4, key \(1, 3, 2\)"):
        tiled_attention(q, torch.zeros(1, 3, 2), k)
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        online_softmax(q, -1)


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="peak memory is read from Linux's /proc (VmHWM, clear_refs)")
def test_tiled_never_holds_the_score_matrix():
    """Peak memory in fresh processes: tiled stays far below the (H, T, T) scores that naive stores."""
    T, heads = 4096, 4
    naive = measure_peak_memory("naive", T, heads=heads, head_dim=32)
    tiled = measure_peak_memory("tiled", T, heads=heads, head_dim=32)
    scores = heads * T * T * 4  # one fp32 score matrix
    assert naive >= scores
    assert tiled < scores / 8


def test_masked_first_blocks_then_very_negative_scores_in_float32():
    """The running maximum must stay the true maximum after masked blocks: were it 0, later scores near
    −300 would underflow exp to 0 in float32 and the row would come out 0/0 or zeros."""
    x = torch.full((2, 24), float("-inf"))
    x[:, 8:] = -300 + torch.randn(2, 16, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(online_softmax(x, 8), torch.softmax(x, dim=-1))
    q = torch.full((1, 4, 1), 30.0)  # (B, T, d) with d = 1: every score is q·k
    k = torch.full((1, 40, 1), -10.0) + torch.randn(1, 40, 1, generator=torch.Generator().manual_seed(1)) * 0.1
    v = torch.randn(1, 40, 3, generator=torch.Generator().manual_seed(2))
    padding = torch.ones(1, 1, 40, dtype=torch.bool)
    padding[..., :16] = False  # the first two key blocks of 8 are padding; the rest score about −300
    expected, _ = scaled_dot_product_attention(q, k, v, padding)
    torch.testing.assert_close(tiled_attention(q, k, v, block_q=4, block_k=8, mask=padding), expected)
