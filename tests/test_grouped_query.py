"""Grouped-query and multi-query attention (chapter 8): equal to PyTorch's GQA and to multi-head attention
with repeated key/value weights and to Keras's GroupQueryAttention; cached decoding equals full recomputation;
the cache shrinks H / H_kv times."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attention_book as ab
from attention_book.decoder import Decoder, DecoderConfig, cached_vs_full
from attention_book.kv_cache import kv_cache_bytes

SETTINGS = settings(max_examples=30, deadline=None)


@st.composite
def gqa_case(draw):
    """Sizes (B, T, H_kv, group, head_dim), a seed, and whether to mask causally."""
    return (draw(st.integers(1, 3)), draw(st.integers(1, 7)), draw(st.integers(1, 3)), draw(st.integers(1, 4)),
            draw(st.integers(1, 5)), draw(st.integers(0, 2**31 - 1)), draw(st.booleans()))


def gqa_module(kv_heads, group, head_dim, seed):
    torch.manual_seed(seed)
    heads = kv_heads * group
    return ab.MultiHeadAttention(heads * head_dim, heads, num_kv_heads=kv_heads).double().eval()


@SETTINGS
@given(gqa_case(), st.booleans())
def test_equals_sdpa_with_enable_gqa(case, need_weights):
    batch, T, kv_heads, group, head_dim, seed, causal = case
    module = gqa_module(kv_heads, group, head_dim, seed)
    x = torch.randn(batch, T, module.embed_dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    with torch.no_grad():
        out, _ = module(x, need_weights=need_weights, is_causal=causal)
        q = module.split_heads(module.q_proj(x))  # (B, H, T, d)
        k = module.split_heads(module.k_proj(x), kv_heads)  # (B, H_kv, T, d)
        v = module.split_heads(module.v_proj(x), kv_heads)
        expected = module.out_proj(module.merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                                     enable_gqa=True)))
    torch.testing.assert_close(out, expected)


@SETTINGS
@given(gqa_case())
def test_equals_multi_head_attention_with_key_value_weights_repeated_per_group(case):
    batch, T, kv_heads, group, head_dim, seed, _ = case
    gqa = gqa_module(kv_heads, group, head_dim, seed)
    E, H = gqa.embed_dim, gqa.num_heads
    plain = ab.MultiHeadAttention(E, H).double().eval()

    def per_group(linear):  # (H_kv·d, E) -> (H·d, E): each key/value head's rows once per query head of its group
        weight = linear.weight.unflatten(0, (kv_heads, head_dim)).repeat_interleave(group, dim=0).flatten(0, 1)
        return weight, linear.bias.unflatten(0, (kv_heads, head_dim)).repeat_interleave(group, dim=0).flatten()

    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(plain, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("k_proj", "v_proj"):
            weight, bias = per_group(getattr(gqa, name))
            getattr(plain, name).weight.copy_(weight)
            getattr(plain, name).bias.copy_(bias)
        x = torch.randn(batch, T, E, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
        torch.testing.assert_close(gqa(x)[0], plain(x)[0])
        torch.testing.assert_close(gqa(x)[1], plain(x)[1])


@settings(max_examples=15, deadline=None)
@given(kv_heads=st.integers(1, 2), group=st.integers(1, 3), head_dim=st.integers(1, 6), layers=st.integers(1, 2),
       seed=st.integers(0, 999), prefill=st.integers(1, 5))
def test_cached_decoding_equals_full_recomputation(kv_heads, group, head_dim, layers, seed, prefill):
    torch.manual_seed(seed)
    heads = kv_heads * group
    config = DecoderConfig(vocab_size=11, context_length=24, embed_dim=heads * head_dim, num_heads=heads,
                           num_layers=layers, num_kv_heads=kv_heads)
    model = Decoder(config).double().eval()
    tokens = torch.randint(0, 11, (2, 16), generator=torch.Generator().manual_seed(seed))
    assert max(cached_vs_full(model, tokens, prefill)) < 1e-10


@pytest.mark.parametrize("kv_heads", [1, 2, 4, 8])
def test_the_cache_is_num_heads_over_num_kv_heads_times_smaller(kv_heads):
    config = DecoderConfig(vocab_size=11, context_length=20, embed_dim=64, num_heads=8, num_layers=2,
                           num_kv_heads=kv_heads)
    model = Decoder(config).eval()
    caches = model.new_caches()
    with torch.no_grad():
        model(torch.zeros(3, 5, dtype=torch.long), caches)
    held = sum(c.nbytes() for c in caches)
    assert held == kv_cache_bytes(2, kv_heads, 8, 20, 4, batch=3)
    assert held * (8 // kv_heads) == kv_cache_bytes(2, 8, 8, 20, 4, batch=3)  # multi-head: H / H_kv times more


def test_num_kv_heads_must_divide_num_heads():
    with pytest.raises(ValueError, match="num_heads=6 is not a multiple of num_kv_heads=4"):
        ab.MultiHeadAttention(12, 6, num_kv_heads=4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (6, 3), (4, 1), (8, 2)])
def test_from_keras_group_query_attention_equals_keras(heads, kv_heads, causal):
    """Chapter 8: our module with a Keras `GroupQueryAttention`'s weights (key/value kernels (E, H_kv, d_k))
    computes what Keras computes, on both of its paths (fused, and repeated heads with weights); the same
    weights with the key/value heads copied in the wrong order do not."""
    keras = keras_backend()
    keras.utils.set_random_seed(heads + kv_heads)
    x = np.random.default_rng(heads).standard_normal((2, 5, 12), dtype=np.float32)  # (B, T, E)
    layer = keras.layers.GroupQueryAttention(3, heads, kv_heads, bias_initializer="random_normal")
    expected = torch.tensor(np.asarray(layer(x, x, use_causal_mask=causal)))
    ours = ab.MultiHeadAttention.from_keras(layer)
    assert (ours.num_heads, ours.num_kv_heads, ours.head_dim) == (heads, kv_heads, 3)
    with torch.no_grad():
        for need_weights in (False, True):
            out, _ = ours(torch.from_numpy(x), is_causal=causal, need_weights=need_weights)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
        if kv_heads > 1:  # key/value heads in reverse order: query group g reads another group's head
            for linear in (ours.k_proj, ours.v_proj):
                # (H_kv·d_k, ...) -> (H_kv, d_k, ...), heads reversed, -> (H_kv·d_k, ...)
                linear.weight.copy_(linear.weight.unflatten(0, (kv_heads, 3)).flip(0).flatten(0, 1))
                linear.bias.copy_(linear.bias.unflatten(0, (kv_heads, 3)).flip(0).flatten())
            wrong, _ = ours(torch.from_numpy(x), is_causal=causal)
            assert (wrong - expected).abs().max() > 1e-2


def test_from_keras_refuses_a_gated_group_query_attention():
    keras = keras_backend()
    layer = keras.layers.GroupQueryAttention(3, 4, 2, use_gate=True)
    x = np.zeros((1, 2, 12), dtype=np.float32)
    layer(x, x)
    with pytest.raises(ValueError, match="use_gate=True"):
        ab.MultiHeadAttention.from_keras(layer)


def keras_backend():
    """Keras, imported the way the book's TensorFlow chapters do: no C++ log lines, no oneDNN kernels."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    import keras

    return keras
