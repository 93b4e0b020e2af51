"""Attention sinks on the ring (StreamingLLM) and the int8 cache (chapter 8): the ring with sinks equals
full recomputation under the sinks-and-window mask at every step; the int8 cache stays within its bound."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.causal import CausalSelfAttention, position_mask
from attention_book.decoder import Decoder, DecoderConfig, cached_vs_full
from attention_book.kv_cache import Int8KVCache, KVCache, RingKVCache, dequantize_int8, quantize_int8

SETTINGS = settings(max_examples=30, deadline=None)


def sink_decoder(window, sinks, seed, layers=2, heads=2, head_dim=4, kv_heads=None):
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=13, context_length=64, embed_dim=heads * head_dim, num_heads=heads,
                           num_layers=layers, window=window, sinks=sinks, num_kv_heads=kv_heads)
    return Decoder(config).double().eval()


def test_the_sinks_mask_keeps_the_first_positions_and_the_window():
    mask = position_mask(torch.arange(7), torch.arange(7), window=2, sinks=2).int()
    assert mask.tolist() == [[1, 0, 0, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 1, 0, 0, 0],
                             [1, 1, 0, 1, 1, 0, 0],
                             [1, 1, 0, 0, 1, 1, 0],
                             [1, 1, 0, 0, 0, 1, 1]]


@pytest.mark.parametrize("window, sinks", [(3, 2), (8, 1), (4, 4)])
def test_a_decode_step_on_a_sink_ring_needs_no_mask(window, sinks):
    """Every slot a ring with sinks holds is visible to the newest query, so
    the layer builds no mask (and takes the no-copy grouped path); a plain
    cache past window + sinks positions still needs one."""
    layer = CausalSelfAttention(8, 2, window=window, sinks=sinks)
    ring, plain = RingKVCache(window, sinks), KVCache(64)
    for step in range(3 * (window + sinks)):
        _, keys_at = ring.positions(1)
        assert position_mask(torch.tensor([step]), keys_at, window, sinks).all()
        assert layer.mask(1, cache=ring)[0] is None
        mask, _ = layer.mask(1, cache=plain)
        assert (mask is None) == (step < window + sinks)
        for cache in (ring, plain):
            cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))


@st.composite
def sink_case(draw):
    """A window, a number of sinks, chunk sizes fed one after another, a seed."""
    window, sinks = draw(st.integers(1, 5)), draw(st.integers(0, 4))
    chunks = draw(st.lists(st.integers(1, 7), min_size=1, max_size=8))
    return window, sinks, chunks, draw(st.integers(0, 2**31 - 1))


@SETTINGS
@given(sink_case())
def test_ring_with_sinks_returns_the_keys_at_the_positions_it_names(case):
    window, sinks, chunks, _ = case
    ring, seen = RingKVCache(window, sinks), 0
    for n in chunks:
        _, named = ring.positions(n)
        values = torch.arange(seen, seen + n, dtype=torch.float64)[None, :, None]  # each key is its position
        keys, _ = ring.append(values, values)
        assert keys[0, :, 0].long().tolist() == named.tolist()
        seen += n
        assert ring.keys.shape[-2] == sinks + window  # the buffers never grow


@SETTINGS
@given(sink_case(), st.sampled_from([None, 1]))
def test_sinks_on_the_ring_equal_full_recomputation_with_the_mask(case, kv_heads):
    window, sinks, chunks, seed = case
    model = sink_decoder(window, sinks, seed % 1000, kv_heads=kv_heads)
    tokens = torch.randint(0, 13, (2, sum(chunks)), generator=torch.Generator().manual_seed(seed))
    caches, start = model.new_caches(), 0
    with torch.inference_mode():
        for n in chunks:
            cached = model(tokens[:, start:start + n], caches)  # (B, n, V)
            full = model(tokens[:, :start + n])[:, start:]  # windowed and sunk by the mask alone
            assert (cached - full).abs().max() < 1e-10
            start += n


@pytest.mark.parametrize("window, sinks, prefill", [(3, 1, 1), (4, 2, 6), (5, 4, 2)])
def test_sink_decoder_cached_equals_full_well_past_the_window(window, sinks, prefill):
    model = sink_decoder(window, sinks, 0)
    tokens = torch.randint(0, 13, (2, 40), generator=torch.Generator().manual_seed(1))
    assert max(cached_vs_full(model, tokens, prefill=prefill)) < 1e-10


def test_sinks_change_what_the_window_alone_computes():
    """The comparison above can fail: a ring without sinks against a model whose mask keeps them decoded
    wrongly past the first window, so it is refused (issue 48); a model without sinks computes otherwise."""
    with_sinks, without = sink_decoder(3, 2, 0), sink_decoder(3, 0, 0)
    tokens = torch.randint(0, 13, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        with pytest.raises(ValueError, match="sinks=0, but this layer has sinks=2"):
            with_sinks(tokens[:, :1], without.new_caches())
        caches = with_sinks.new_caches()
        cached = torch.cat([with_sinks(tokens[:, i:i + 1], caches) for i in range(12)], dim=1)
        full = with_sinks(tokens)
    assert (cached - full).abs().max() < 1e-10
    without.load_state_dict(with_sinks.state_dict())  # the same weights, the window alone
    with torch.inference_mode():
        windowed = without(tokens)
    assert (windowed[:, :3] - full[:, :3]).abs().max() < 1e-10  # within the first window: alike
    assert (windowed[:, 3:] - full[:, 3:]).abs().max(-1).values.min() > 1e-3  # past it the sinks matter


def test_bad_sinks_are_refused():
    for sinks in (-1, 1.5, True):
        with pytest.raises(ValueError, match="sinks must be an integer"):
            RingKVCache(4, sinks)
    with pytest.raises(ValueError, match="sinks=2 needs a window"):
        CausalSelfAttention(8, 2, sinks=2)


# The int8 cache

@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), d=st.integers(1, 16), scale=st.floats(1e-3, 1e3))
def test_int8_round_trip_is_within_half_a_step(seed, d, scale):
    x = torch.randn(3, 5, d, generator=torch.Generator().manual_seed(seed)) * scale
    q, s = quantize_int8(x)
    assert q.dtype == torch.int8 and s.shape == (3, 5, 1)
    assert ((dequantize_int8(q, s) - x).abs() <= s / 2 * (1 + 1e-5)).all()


def test_int8_zero_vectors_stay_zero():
    q, s = quantize_int8(torch.zeros(2, 4))
    assert torch.equal(dequantize_int8(q, s), torch.zeros(2, 4))


@pytest.mark.parametrize("chunks", [[5, 1, 1, 1], [1] * 9, [9]])
def test_int8_cache_returns_what_the_float_cache_holds_within_the_bound(chunks):
    gen = torch.Generator().manual_seed(0)
    exact, small = KVCache(16), Int8KVCache(16)
    for n in chunks:
        k, v = torch.randn(2, 3, n, 8, generator=gen), torch.randn(2, 3, n, 6, generator=gen)
        (k_exact, v_exact), (k_small, v_small) = exact.append(k, v), small.append(k, v)
        bound_k = k_exact.abs().amax(-1, keepdim=True) / 254 * (1 + 1e-5)  # half a step of 1/127 of max|x|
        assert ((k_small - k_exact).abs() <= bound_k).all()
        assert ((v_small - v_exact).abs() <= v_exact.abs().amax(-1, keepdim=True) / 254 * (1 + 1e-5)).all()
    assert small.keys.dtype == torch.int8
    assert small.nbytes() == 2 * 3 * 16 * (8 + 6) + 2 * 2 * 3 * 16 * 4  # int8 entries + float32 scales


def test_int8_decoder_stays_close_to_the_float_one():
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=13, context_length=64, embed_dim=16, num_heads=2,
                                  num_layers=2)).eval()
    tokens = torch.randint(0, 13, (2, 40), generator=torch.Generator().manual_seed(1))
    exact, small = model.new_caches(), model.new_caches(int8=True)
    with torch.inference_mode():
        for t in range(40):
            a, b = model(tokens[:, t:t + 1], exact), model(tokens[:, t:t + 1], small)
            assert 0 < (a - b).abs().max() < 0.05  # close, and not the same computation


def test_int8_cache_refuses_integers_and_overflow():
    cache = Int8KVCache(2)
    with pytest.raises(ValueError, match="quantises floating-point"):
        cache.append(torch.ones(1, 1, 2, dtype=torch.long), torch.ones(1, 1, 2, dtype=torch.long))
    cache.append(torch.ones(1, 2, 2), torch.ones(1, 2, 2))
    with pytest.raises(ValueError, match="KV cache overflow"):
        cache.append(torch.ones(1, 1, 2), torch.ones(1, 1, 2))
