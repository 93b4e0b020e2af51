"""Causal attention: the future cannot leak, and it equals PyTorch's causal attention (chapter 5)."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import attention_book as ab
from attention_book.kv_cache import KVCache

SETTINGS = settings(max_examples=40, deadline=None)
sizes = st.tuples(st.integers(1, 3), st.integers(2, 9), st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31 - 1))


@SETTINGS
@given(sizes, st.booleans())
def test_future_tokens_cannot_leak(size, need_weights):
    batch, t, heads, head_dim, seed = size
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = ab.CausalSelfAttention(heads * head_dim, heads).eval()
    x = torch.randn(batch, t, heads * head_dim, generator=gen)
    position = int(torch.randint(t - 1, (1,), generator=gen))  # change every token after this one
    changed = x.clone()
    changed[:, position + 1:] = torch.randn(batch, t - position - 1, heads * head_dim, generator=gen) * 10
    with torch.no_grad():
        out, _ = model(x, need_weights=need_weights)
        out_changed, _ = model(changed, need_weights=need_weights)
    assert torch.equal(out[:, : position + 1], out_changed[:, : position + 1])  # bit for bit
    assert not torch.equal(out[:, position + 1:], out_changed[:, position + 1:])  # the test can fail


@SETTINGS
@given(sizes)
def test_equals_sdpa_is_causal_and_nn_multihead_attention(size):
    batch, t, heads, head_dim, seed = size
    E = heads * head_dim
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    reference = nn.MultiheadAttention(E, heads, batch_first=True, dtype=torch.float64).eval()
    model = ab.CausalSelfAttention(E, heads).double().eval()
    model.attention = ab.MultiHeadAttention.from_torch(reference)
    x = torch.randn(batch, t, E, generator=gen, dtype=torch.float64)
    blocked_future = ~ab.causal_mask(t)  # nn.MultiheadAttention blocks where True
    with torch.no_grad():
        expected, expected_weights = reference(x, x, x, attn_mask=blocked_future)
        out, weights = model(x, need_weights=True)
        fast, _ = model(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(fast, expected)
    # the core, against F.scaled_dot_product_attention(is_causal=True)
    q, k, v = (torch.randn(batch, heads, t, head_dim, generator=gen, dtype=torch.float64) for _ in "qkv")
    ours, _ = ab.scaled_dot_product_attention(q, k, v, ab.causal_mask(t))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@SETTINGS
@given(st.integers(2, 10), st.integers(1, 10), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_fewer_queries_than_keys_matches_full_recomputation(s, t, d, seed):
    t = min(t, s)
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(s, d, generator=gen, dtype=torch.float64) for _ in "qkv")
    full, _ = ab.scaled_dot_product_attention(q, k, v, ab.causal_mask(s))  # all S positions
    last, _ = ab.scaled_dot_product_attention(q[-t:], k, v, ab.causal_mask(t, s))  # only the last T queries
    torch.testing.assert_close(last, full[-t:])
    if t < s:  # the top-left triangle of is_causal=True hides keys these queries may see
        wrong = F.scaled_dot_product_attention(q[-t:], k, v, is_causal=True)
        assert not torch.allclose(wrong, full[-t:])


def test_causal_mask_shapes_and_errors():
    assert torch.equal(ab.causal_mask(2, 4), torch.tensor([[True, True, True, False], [True, True, True, True]]))
    with pytest.raises(ValueError, match="at least as many keys as queries, got T=5 > S=3"):
        ab.causal_mask(5, 3)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    model = ab.CausalSelfAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 6, 8)
    model.train()
    a, b = model(x)[0], model(x)[0]
    assert not torch.equal(a, b)  # dropout draws a new pattern each call
    model.eval()
    torch.testing.assert_close(model(x)[0], model(x, need_weights=True)[0])
    assert torch.equal(model(x)[0], model(x)[0])


def test_training_with_dropout_keeps_the_fused_kernel(monkeypatch):
    """Chapter 5: without need_weights the module hands dropout to F.scaled_dot_product_attention (dropout_p
    in training, 0 in evaluation) with is_causal=True, as nanoGPT does, instead of building the T × T weights;
    dropout_p = 1 drops every weight, leaving out_proj's bias at every position."""
    import torch.nn.functional as F

    calls, fused = [], F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("dropout_p"), kwargs.get("is_causal")))
        return fused(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    torch.manual_seed(0)
    model = ab.CausalSelfAttention(8, 2, dropout=0.1)
    x = torch.randn(2, 6, 8)
    model.train()(x)
    model.eval()(x)
    model.train()(x, need_weights=True)  # the explicit path: no fused call
    assert calls == [(0.1, True), (0.0, True)]
    everything_dropped = ab.CausalSelfAttention(8, 2, dropout=1.0).train()
    out, _ = everything_dropped(x)
    bias = everything_dropped.attention.out_proj.bias
    torch.testing.assert_close(out, bias.expand_as(out))


@SETTINGS
@given(sizes, st.booleans())
def test_is_causal_equals_the_explicit_mask(size, need_weights):
    """MultiHeadAttention's `is_causal` (fused or weights path) equals chapter 5's mask when T == S."""
    batch, t, heads, head_dim, seed = size
    torch.manual_seed(seed)
    module = ab.MultiHeadAttention(heads * head_dim, heads).eval()
    x = torch.randn(batch, t, heads * head_dim, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        implicit = module(x, need_weights=need_weights, is_causal=True)
        # (1, 1, T, T): a bare (T, T) mask is refused when B == T, where it could be a (B, S) padding mask
        explicit = module(x, mask=ab.causal_mask(t)[None, None], need_weights=need_weights)
    torch.testing.assert_close(implicit[0], explicit[0])
    if need_weights:
        torch.testing.assert_close(implicit[1], explicit[1])


def test_causal_self_attention_leaves_the_mask_to_the_fused_kernel_when_t_equals_s(monkeypatch):
    """T == S: SDPA gets is_causal and no mask tensor (which a GPU's flash kernel needs); T < S: the mask."""
    calls, sdpa = [], F.scaled_dot_product_attention

    def recording_sdpa(q, k, v, attn_mask=None, is_causal=False, dropout_p=0.0):
        calls.append((attn_mask, is_causal))
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording_sdpa)
    model = ab.CausalSelfAttention(8, 2).eval()
    cache = KVCache(16)
    with torch.no_grad():
        model(torch.randn(1, 5, 8), cache=cache)  # prefill: T = S = 5
        model(torch.randn(1, 2, 8), cache=cache)  # two new positions: T = 2 < S = 7
    assert calls[0] == (None, True)
    assert calls[1][1] is False and torch.equal(calls[1][0], ab.causal_mask(2, 7)[None, None])


def test_is_causal_refuses_what_it_cannot_mean():
    module = ab.MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="either a mask or is_causal=True, not both"):
        module(x, mask=ab.causal_mask(4), is_causal=True)
    with pytest.raises(ValueError, match=r"is_causal needs as many queries as keys, got T=4, S=6"):
        module(x, torch.randn(1, 6, 8), is_causal=True)


@SETTINGS
@given(st.integers(1, 8), st.integers(0, 8), st.integers(1, 10))
def test_sliding_window_mask_sees_itself_and_the_window_before(T, extra, window):
    """causal_mask(T, S, window=w): query i, at position S - T + i, sees exactly positions p - w + 1 ... p."""
    S = T + extra
    mask = ab.causal_mask(T, S, window=window)
    for i in range(T):
        position = S - T + i
        seen = [j for j in range(S) if mask[i, j]]
        assert seen == list(range(max(0, position - window + 1), position + 1))
    assert torch.equal(ab.causal_mask(T, S, window=S), ab.causal_mask(T, S))  # a window as long as S: plain causal


def test_window_must_be_positive():
    with pytest.raises(ValueError, match="window must be a positive integer"):
        ab.causal_mask(3, window=0)
