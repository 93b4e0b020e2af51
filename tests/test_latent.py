"""Multi-head latent attention (chapter 8): the cached decode equals full recomputation at every step, the
absorbed form equals the plain one, and the cache holds one latent and one rope key per position."""

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.decoder import Decoder, DecoderConfig, cached_vs_full, generate
from attention_book.kv_cache import KVCache, RingKVCache
from attention_book.latent import LatentAttention, latent_cache_bytes

SETTINGS = settings(max_examples=25, deadline=None)


def latent_decoder(seed, latent_dim=6, rope_dim=4, heads=2, head_dim=4, layers=2, window=None, sinks=0):
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=13, context_length=64, embed_dim=heads * head_dim, num_heads=heads,
                           num_layers=layers, latent_dim=latent_dim, rope_dim=rope_dim, window=window,
                           sinks=sinks)
    return Decoder(config).double().eval()


def reference_mla(layer: LatentAttention, x: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V2's equations written out head by head, with the decoupled key rotated by its position:
    k_i = [W_uk_i c ; rope(W_kr x)], q_i = [W_q_i x ; rope(W_qr_i x)], v_i = W_uv_i c, causal softmax."""
    from attention_book.positions import apply_rope

    B, T, _ = x.shape
    H, d_h, d_r, d_c = layer.H, layer.d_h, layer.d_r, layer.d_c
    down = x @ layer.kv_down.weight.T  # (B, T, d_c + d_r)
    c, k_r = down[..., :d_c], apply_rope(down[..., d_c:])  # (B, T, d_c), (B, T, d_r)
    heads = []
    for i in range(H):
        w_q = layer.q_proj.weight[i * (d_h + d_r):(i + 1) * (d_h + d_r)]  # (d_h + d_r, E)
        q = x @ w_q.T
        q = torch.cat([q[..., :d_h], apply_rope(q[..., d_h:])], -1)  # (B, T, d_h + d_r)
        k = torch.cat([c @ layer.k_up.weight[i * d_h:(i + 1) * d_h].T, k_r], -1)  # (B, T, d_h + d_r)
        v = c @ layer.v_up.weight[i * d_h:(i + 1) * d_h].T  # (B, T, d_h)
        scores = q @ k.transpose(-2, -1) / (d_h + d_r) ** 0.5
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        heads.append(scores.softmax(-1) @ v)
    return layer.out_proj(torch.cat(heads, -1))


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), T=st.integers(1, 9), latent=st.integers(1, 9), rope=st.sampled_from([2, 4]))
def test_latent_attention_is_deepseek_v2s_equations(seed, T, latent, rope):
    torch.manual_seed(seed)
    layer = LatentAttention(8, 2, latent, rope).double()
    x = torch.randn(2, T, 8, dtype=torch.float64)
    assert torch.allclose(layer(x)[0], reference_mla(layer, x), atol=1e-10)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), T=st.integers(1, 9), start=st.integers(0, 12))
def test_absorbed_form_equals_the_plain_one(seed, T, start):
    """With or without cached positions before them, T new positions give the same output both ways."""
    torch.manual_seed(seed)
    layer = LatentAttention(8, 2, 5, 4).double()
    cache = KVCache(32)
    with torch.no_grad():
        if start:
            layer(torch.randn(2, start, 8, dtype=torch.float64), cache=cache)
        twin = copy.deepcopy(cache)
        x = torch.randn(2, T, 8, dtype=torch.float64)
        plain, _ = layer(x, cache=cache, absorbed=False)
        absorbed, _ = layer(x, cache=twin, absorbed=True)
    assert torch.allclose(plain, absorbed, atol=1e-10)


def test_absorbed_weights_follow_training():
    """The absorbed matrices are recomputed when the weights change (an optimiser step, a load)."""
    torch.manual_seed(0)
    layer = LatentAttention(8, 2, 5, 4).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    layer(x, absorbed=True)
    with torch.no_grad():
        layer.k_up.weight.mul_(2)
        layer.out_proj.weight.add_(1)
    assert torch.allclose(layer(x, absorbed=True)[0], layer(x, absorbed=False)[0], atol=1e-10)


@pytest.mark.parametrize("prefill", [1, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_latent_decoder_cached_equals_full_recomputation_at_every_step(prefill, seed):
    model = latent_decoder(seed)
    tokens = torch.randint(0, 13, (2, 30), generator=torch.Generator().manual_seed(seed))
    differences = cached_vs_full(model, tokens, prefill=prefill)
    assert len(differences) == 30 - prefill + 1
    assert max(differences) < 1e-10


def test_latent_decoder_with_a_window_and_sinks_cached_equals_full():
    model = latent_decoder(3, window=4, sinks=2)
    tokens = torch.randint(0, 13, (2, 30), generator=torch.Generator().manual_seed(3))
    assert max(cached_vs_full(model, tokens, prefill=3)) < 1e-10


def test_latent_generation_with_and_without_cache_agree():
    model = latent_decoder(4)
    prompt = torch.randint(0, 13, (1, 5), generator=torch.Generator().manual_seed(4))
    assert torch.equal(generate(model, prompt, 20), generate(model, prompt, 20, use_cache=False))


def test_the_latent_cache_holds_one_latent_and_one_rope_key_per_position():
    model = latent_decoder(0, latent_dim=6, rope_dim=4, layers=3)
    caches = model.new_caches()
    with torch.inference_mode():
        model(torch.zeros(2, 7, dtype=torch.long), caches)
    assert caches[0].keys.shape == (2, 1, 64, 6) and caches[0].values.shape == (2, 1, 64, 4)
    assert sum(c.nbytes() for c in caches) == latent_cache_bytes(3, 6, 4, 64, 8, batch=2)


def test_a_decode_step_that_forgets_the_rope_offset_fails_the_comparison():
    """The decoupled key is rotated by its position; turn the new token by position 0 and the cached
    step no longer equals recomputation (the test above would catch it)."""
    import attention_book.latent as latent

    model = latent_decoder(5)
    tokens = torch.randint(0, 13, (1, 12), generator=torch.Generator().manual_seed(5))
    original = latent.rotate
    latent.rotate = lambda x, positions: original(x, positions - positions[0])  # every call from 0
    try:
        assert max(cached_vs_full(model, tokens, prefill=4)) > 1e-3
    finally:
        latent.rotate = original


def test_latent_attention_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="rope_dim must be a positive even number"):
        LatentAttention(8, 2, 4, 3)
    with pytest.raises(ValueError, match="takes neither num_kv_heads nor dropout"):
        Decoder(DecoderConfig(latent_dim=8, num_kv_heads=2))
    with pytest.raises(ValueError, match="sinks=2 needs a window"):
        LatentAttention(8, 2, 4, 2, sinks=2)


def test_a_ring_holds_the_latents_too():
    model = latent_decoder(6, window=5)
    assert isinstance(model.new_caches()[0], RingKVCache)
    tokens = torch.randint(0, 13, (2, 25), generator=torch.Generator().manual_seed(6))
    assert max(cached_vs_full(model, tokens, prefill=7)) < 1e-10
