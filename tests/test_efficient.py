"""Chapter 9: online softmax equals softmax; tiled attention equals the naive form and stores far less."""

import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from attention_book import scaled_dot_product_attention
from attention_book.causal import causal_mask
from attention_book.efficient import (
    attention_partial,
    merge_partials,
    naive_attention,
    online_max_and_sum,
    online_softmax,
    sequential_sum,
    split_kv_attention,
    tiled_attention,
    tiled_attention_forward,
)
from attention_book.kv_cache import KVCache, RingKVCache
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


# Float32 statistics (issue 37): FlashAttention's own criterion. Its tests compare a kernel's error against a
# high-precision reference with PyTorch's error in the same dtype and allow at most twice that (plus a floor).
# Lengths odd and even, T < S and T > S, causal bottom-right (T <= S only: the book refuses T > S there).
LENGTHS = [(113, 203), (128, 217), (108, 256), (1, 239), (203, 113), (256, 128)]
FLOOR = {torch.float16: 1e-4, torch.bfloat16: 1e-3, torch.float32: 1e-6}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("d", [32, 59, 64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("T", "S"), LENGTHS)
def test_error_at_most_twice_sdpas_in_the_same_dtype(dtype, d, causal, T, S):
    if causal and T > S:
        pytest.skip("causal attention needs T <= S in this book")
    gen = torch.Generator().manual_seed(T * S + d)
    q, k, v = (torch.randn(2, 3, n, d, generator=gen, dtype=torch.float64) for n in (T, S, S))
    mask = causal_mask(T, S) if causal else None  # bottom-right; SDPA's is_causal would be top-left
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    low = [t.to(dtype) for t in (q, k, v)]
    sdpa_error = (F.scaled_dot_product_attention(*low, attn_mask=mask).double() - reference).abs().max()
    out = tiled_attention(*low, causal, 64, 48)
    assert out.dtype == dtype
    error = (out.double() - reference).abs().max()
    assert error <= 2 * sdpa_error + FLOOR[dtype], f"error {error:.2e} > 2 × SDPA's {sdpa_error:.2e}"


@pytest.mark.parametrize(("T", "S"), [(0, 5), (4, 0), (0, 0)])
@pytest.mark.parametrize("causal", [False, True])
def test_empty_lengths_give_chapter_2s_result(T, S, causal):
    """No queries: an empty output. No keys: every query sees nothing and gets zeros, as in chapter 2."""
    q, k, v = torch.randn(2, T, 4), torch.randn(2, S, 4), torch.randn(2, S, 3)
    if causal and T > S:
        with pytest.raises(ValueError, match=f"got T={T} > S={S}"):
            tiled_attention(q, k, v, causal)
        return
    expected = scaled_dot_product_attention(q, k, v)[0]
    assert expected.shape == (2, T, 3)
    torch.testing.assert_close(tiled_attention(q, k, v, causal), expected)
    torch.testing.assert_close(split_kv_attention(q, k, v), expected)


# The backward pass (issue 32): FlashAttention-2's, tile by tile, from the output and the row log-sum-exp.

def inputs(shape_q, shape_k, d_v, seed, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=gen, dtype=dtype).requires_grad_()
    k = torch.randn(*shape_k, generator=gen, dtype=dtype).requires_grad_()
    v = torch.randn(*shape_k[:-1], d_v, generator=gen, dtype=dtype).requires_grad_()
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("T", "S"), [(7, 7), (5, 11), (9, 13)])
@pytest.mark.parametrize("padding", [False, True])
def test_gradcheck_against_finite_differences_and_naive(causal, T, S, padding):
    """torch.autograd.gradcheck (finite differences in float64) of the tiled backward, blocks that do not
    divide the lengths, with and without the causal mask and padding, T = S and T < S; and the same
    gradients as autograd through the naive form (chapter 2's attention, which stores every weight)."""
    q, k, v = inputs((2, 2, T, 4), (2, 2, S, 4), 3, seed=T + S)
    mask = None
    if padding:
        mask = torch.ones(2, 1, 1, S, dtype=torch.bool)  # (B, 1, 1, S)
        mask[0, ..., :4] = False  # the first sequence's first 4 keys are padding: a whole first key block
        mask[1, ..., -2:] = False  # the second's last 2
    assert torch.autograd.gradcheck(lambda *x: tiled_attention(*x, causal, 3, 4, mask=mask), (q, k, v))
    full = mask if not causal else (causal_mask(T, S) if mask is None else mask & causal_mask(T, S))
    d_out = torch.randn(2, 2, T, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    expected = torch.autograd.grad(scaled_dot_product_attention(q, k, v, full)[0], (q, k, v), d_out)
    got = torch.autograd.grad(tiled_attention(q, k, v, causal, 3, 4, mask=mask), (q, k, v), d_out)
    for name, g, e in zip("qkv", got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10, msg=f"d{name}")


def test_gradient_of_a_query_that_sees_no_key_is_zero():
    """The fully-masked-row guard in the backward: such a row's P is 0 (not NaN), so are its gradients."""
    q, k, v = inputs((1, 6, 4), (1, 8, 4), 3, seed=1)
    mask = torch.ones(1, 6, 8, dtype=torch.bool)
    mask[0, 2] = False  # query 2 may see no key
    out = tiled_attention(q, k, v, block_q=4, block_k=3, mask=mask)
    d_q, d_k, d_v = torch.autograd.grad(out.sum(), (q, k, v))
    assert torch.isfinite(d_q).all() and torch.isfinite(d_k).all() and torch.isfinite(d_v).all()
    assert (d_q[0, 2] == 0).all() and (out[0, 2] == 0).all()
    expected = torch.autograd.grad(scaled_dot_product_attention(q, k, v, mask)[0].sum(), (q, k, v))
    for g, e in zip((d_q, d_k, d_v), expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)


def test_gradients_sum_over_broadcast_batch_axes():
    q, k, v = inputs((3, 1, 5, 4), (1, 2, 7, 4), 2, seed=2)
    d_out = torch.randn(3, 2, 5, 2, dtype=torch.float64)
    expected = torch.autograd.grad(naive_attention(q, k, v), (q, k, v), d_out)
    got = torch.autograd.grad(tiled_attention(q, k, v, block_k=3), (q, k, v), d_out)
    for g, e, x in zip(got, expected, (q, k, v), strict=True):
        assert g.shape == x.shape
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)


# float32: tiled and SDPA sum in different orders; over 300 keys their gradients differ by a few float32 ulps
# of the largest entries, well below 1e-4.
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("T", "S"), [(300, 300), (100, 300)])
def test_float32_gradients_equal_sdpas(causal, T, S):
    q, k, v = inputs((2, 4, T, 64), (2, 4, S, 64), 64, seed=3, dtype=torch.float32)
    d_out = torch.randn(2, 4, T, 64, generator=torch.Generator().manual_seed(4))
    mask = causal_mask(T, S) if causal else None
    expected = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v), d_out)
    got = torch.autograd.grad(tiled_attention(q, k, v, causal, 64, 48), (q, k, v), d_out)
    for name, g, e in zip("qkv", got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4, msg=f"d{name}")


def test_forward_saves_the_log_sum_exp():
    q, k, v = inputs((2, 9, 5), (2, 12, 5), 3, seed=5)
    _, lse = tiled_attention_forward(q, k, v, True, 4, 5)
    scores = q @ k.transpose(-2, -1) / 5**0.5
    expected = torch.logsumexp(scores.masked_fill(~causal_mask(9, 12), float("-inf")), dim=-1)
    torch.testing.assert_close(lse, expected, rtol=1e-12, atol=1e-12)


# Split-KV decoding (flash-decoding) with the caches of chapters 7 and 8.

@pytest.mark.parametrize("num_splits", [1, 3, 8, 50])
@pytest.mark.parametrize("cache_kind", ["full", "ring", "gqa", "ring-gqa"])
def test_split_kv_decoding_equals_full_attention_over_the_cache(num_splits, cache_kind):
    """Decode 30 steps: at each, the new query attends (split-KV) to what the cache returns, and equals
    full attention over every position it may see, kept here outside the cache."""
    heads, kv_heads = (4, 2) if "gqa" in cache_kind else (4, 4)
    window = 7 if "ring" in cache_kind else None
    cache = RingKVCache(window) if window else KVCache(max_length=30)
    gen = torch.Generator().manual_seed(num_splits)
    all_k, all_v = [], []
    for _ in range(30):
        q = torch.randn(2, heads, 1, 8, generator=gen)  # (B, H, 1, d)
        k_new, v_new = (torch.randn(2, kv_heads, 1, 8, generator=gen) for _ in range(2))  # (B, H_kv, 1, d)
        all_k.append(k_new)
        all_v.append(v_new)
        keys, values = cache.append(k_new, v_new)  # a ring returns its window in slot order
        got = split_kv_attention(q, keys, values, num_splits)
        seen = slice(-window, None) if window else slice(None)
        k_full = torch.cat(all_k, dim=-2)[..., seen, :].repeat_interleave(heads // kv_heads, dim=1)
        v_full = torch.cat(all_v, dim=-2)[..., seen, :].repeat_interleave(heads // kv_heads, dim=1)
        torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k_full, v_full), rtol=1e-5, atol=1e-6)


def test_merge_of_partials_is_exact_and_order_free():
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(3, n, 5, generator=gen, dtype=torch.float64) for n in (2, 20, 20))
    k[:, 13:] *= 30  # a later chunk with a far larger maximum
    parts = [attention_partial(q, k[:, a:a + 5], v[:, a:a + 5]) for a in range(0, 20, 5)]
    for order in ([0, 1, 2, 3], [3, 1, 0, 2]):
        m, total, acc = parts[order[0]]
        for i in order[1:]:
            m, total, acc = merge_partials(m, total, acc, *parts[i])
        torch.testing.assert_close(acc / total, naive_attention(q, k, v), rtol=1e-12, atol=1e-12)


def test_split_kv_errors_name_the_shapes():
    q = torch.zeros(1, 4, 1, 8)
    with pytest.raises(ValueError, match=r"query heads must be a multiple of key/value heads .* key \(1, 3, 5, 8\)"):
        split_kv_attention(q, torch.zeros(1, 3, 5, 8), torch.zeros(1, 3, 5, 8))
    with pytest.raises(ValueError, match="num_splits must be a positive integer, got 0"):
        split_kv_attention(q, q, q, 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_round_p_rounds_the_probabilities_as_the_kernels_do(dtype, causal):
    """With round_p, P·V uses P rounded to the input dtype and l the unrounded P (issue 44): equal to the
    same computation written whole, and different from the float32-P loop."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 32, generator=gen).to(dtype) for n in (40, 70, 70))
    got, _ = tiled_attention_forward(q, k, v, causal, 16, 16, round_p=True)
    scores = q.float() @ k.float().transpose(-2, -1) / 32 ** 0.5  # (1, 2, T, S)
    if causal:
        scores = scores.masked_fill(~causal_mask(40, 70), float("-inf"))
    p = torch.exp(scores - scores.amax(-1, keepdim=True))
    expected = ((p.to(dtype).float() @ v.float()) / p.sum(-1, keepdim=True)).to(dtype)
    torch.testing.assert_close(got, expected, rtol=0, atol=2 * torch.finfo(dtype).eps)
    plain, _ = tiled_attention_forward(q, k, v, causal, 16, 16)
    assert not torch.equal(got, plain)


def test_online_max_and_sum_are_the_row_max_and_the_sum_of_exponentials():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 50, generator=gen, dtype=torch.float64) * 4
    x[0, :20] = float("-inf")  # masked first blocks
    m, total = online_max_and_sum(x, 7)
    torch.testing.assert_close(m, x.amax(-1, keepdim=True))
    torch.testing.assert_close(total, torch.exp(x - m).sum(-1, keepdim=True))


@pytest.mark.parametrize("dtype, terms, running, accumulated", [
    (torch.float16, [2048.0, 1.0, 1.0], 2048.0, 2050.0),  # 2049 rounds to 2048
    (torch.bfloat16, [2048.0] + [1.0] * 200, 2048.0, 2240.0),  # bf16 steps by 16 here
])
def test_sequential_sum_rounds_every_addition_where_torch_sum_does_not(dtype, terms, running, accumulated):
    x = torch.tensor(terms, dtype=dtype)
    assert sequential_sum(x).item() == running
    assert x.sum().item() == accumulated  # the CPU sum accumulates in float32, rounds once
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(3, 40, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(sequential_sum(y), y.sum(-1, keepdim=True))
