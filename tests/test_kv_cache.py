"""Chapter 7: cached decoding equals recomputing the whole prefix; the cache refuses what does not fit."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from attention_book import keras_decoder as kd
from attention_book.decoder import Decoder, DecoderConfig, cached_vs_full, generate
from attention_book.kv_cache import KVCache, kv_cache_bytes
from attention_book.measure import benchmark, measure_generation


def random_decoder(layers, heads, head_dim, seed, context_length=32) -> Decoder:
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=11, context_length=context_length, embed_dim=heads * head_dim,
                           num_heads=heads, num_layers=layers)
    return Decoder(config).double().eval()


@settings(max_examples=20, deadline=None)
@given(layers=st.integers(1, 3), heads=st.integers(1, 4), head_dim=st.integers(1, 8), seed=st.integers(0, 999),
       batch=st.integers(1, 3), length=st.integers(2, 20), prefill=st.integers(1, 5))
def test_cached_logits_equal_full_recomputation(layers, heads, head_dim, seed, batch, length, prefill):
    model = random_decoder(layers, heads, head_dim, seed)
    tokens = torch.randint(0, 11, (batch, length), generator=torch.Generator().manual_seed(seed))
    differences = cached_vs_full(model, tokens, prefill=min(prefill, length))
    assert len(differences) == length - min(prefill, length) + 1
    assert max(differences) < 1e-10


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generated_tokens_are_identical_with_and_without_cache(temperature, seed):
    model = random_decoder(2, 2, 4, seed).float()
    prompt = torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(seed))
    runs = [generate(model, prompt, 20, use_cache=use_cache, temperature=temperature,
                     generator=torch.Generator().manual_seed(seed)) for use_cache in (True, False)]
    assert runs[0].shape == (2, 23)
    assert torch.equal(runs[0][:, :3], prompt)
    assert torch.equal(runs[0], runs[1])


def test_sampling_depends_on_the_generator():
    model = random_decoder(1, 2, 4, 0).float()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    a, b = (generate(model, prompt, 30, temperature=1.0, generator=torch.Generator().manual_seed(s)) for s in (0, 1))
    assert not torch.equal(a, b)


def test_keras_decoder_cached_equals_full():
    rng = np.random.default_rng(0)
    config = kd.KerasDecoderConfig(vocab_size=6, embed_dim=8, num_heads=2, key_dim=5)
    weights = {name: rng.normal(size=shape) for name, (_, shape) in kd.keras_weight_map(config).items()}
    tokens = rng.integers(0, 6, size=(2, 9))
    cache = KVCache(9)
    kd.decoder_forward(weights, tokens[:, :3], cache)  # prefill
    for end in range(4, 10):
        cached = kd.decoder_forward(weights, tokens[:, end - 1:end], cache)[:, -1]
        np.testing.assert_allclose(cached, kd.decoder_forward(weights, tokens[:, :end])[:, -1], rtol=1e-12, atol=1e-14)
    assert len(cache) == 9


def test_cache_returns_everything_appended_and_resets():
    cache = KVCache(10)
    parts = [(torch.randn(2, 3, n, 4), torch.randn(2, 3, n, 5)) for n in (3, 1, 2)]
    for k, v in parts:
        keys, values = cache.append(k, v)
    assert len(cache) == 6
    assert torch.equal(keys, torch.cat([k for k, _ in parts], dim=-2))
    assert torch.equal(values, torch.cat([v for _, v in parts], dim=-2))
    assert cache.nbytes() == 2 * 3 * 10 * (4 + 5) * 4
    cache.reset()
    assert len(cache) == 0
    keys, _ = cache.append(torch.ones(1, 1, 4), torch.ones(1, 1, 4))  # another batch shape after a reset
    assert keys.shape == (1, 1, 4)


def test_cache_refuses_overflow():
    cache = KVCache(4)
    cache.append(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2))
    with pytest.raises(ValueError, match=r"KV cache overflow: 3 positions stored \+ 2 new > max_length=4"):
        cache.append(torch.zeros(1, 2, 2), torch.zeros(1, 2, 2))
    assert len(cache) == 3  # a refused append stores nothing


def test_cache_refuses_mismatched_shapes():
    cache = KVCache(8)
    with pytest.raises(ValueError, match=r"keys \(2, 3, 4\) and values \(2, 2, 4\) must agree"):
        cache.append(torch.zeros(2, 3, 4), torch.zeros(2, 2, 4))
    cache.append(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"new keys of shape \(2, 1, 5\) do not fit a cache of keys shaped "
                                         r"\(2, 'S', 4\)"):
        cache.append(torch.zeros(2, 1, 5), torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match=r"new values of shape \(2, 1, 3\) do not fit"):
        cache.append(torch.zeros(2, 1, 4), torch.zeros(2, 1, 3))
    with pytest.raises(ValueError, match=r"new keys of shape \(3, 1, 4\) do not fit"):
        cache.append(torch.zeros(3, 1, 4), torch.zeros(3, 1, 4))  # another batch size without a reset
    assert len(cache) == 3
    with pytest.raises(ValueError, match="max_length must be at least 1"):
        KVCache(0)


def test_decoder_refuses_positions_beyond_its_context():
    model = random_decoder(1, 1, 4, 0, context_length=5)
    with pytest.raises(ValueError, match=r"positions 0..5 exceed context_length=5"):
        model(torch.zeros(1, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"max_new_tokens=3 exceed context_length=5"):  # before any step
        generate(model, torch.zeros(1, 4, dtype=torch.long), 3)


def test_cache_memory_formula():
    # Llama 2 7B: 32 layers, 32 heads of 128, fp16, a 4096-token context: 2 GiB per sequence.
    assert kv_cache_bytes(32, 32, 128, 4096, 2) == 2 * 2**30
    model = random_decoder(2, 2, 4, 0, context_length=7).float()
    caches = model.new_caches()
    model(torch.zeros(3, 2, dtype=torch.long), caches)
    assert sum(c.nbytes() for c in caches) == kv_cache_bytes(2, 2, 4, 7, 4, batch=3)


def fake_generation(monkeypatch, step_times_by_run, tokens_by_run):
    """Stand-ins for `generate_steps` and the clock: run after run, each step takes the given seconds
    of a fake clock and yields the given tokens."""
    runs = iter(zip(step_times_by_run, tokens_by_run, strict=True))
    now = [0.0]

    def generate_steps(model, prompt, max_new_tokens, use_cache):
        times, tokens = next(runs)
        for seconds in times:
            now[0] += seconds
            yield tokens
    monkeypatch.setattr(benchmark, "generate_steps", generate_steps)
    monkeypatch.setattr(benchmark, "perf_counter", lambda: now[0])


def test_measure_generation_takes_each_steps_median_over_alternating_rounds(monkeypatch):
    # Runs alternate cached, uncached, cached, ...; a slow moment in one run (9.0, 90.0) must not show.
    times = [[1.0, 2.0], [10.0, 20.0], [9.0, 2.5], [11.0, 90.0], [1.5, 1.0], [12.0, 21.0]]
    tokens = torch.tensor([[1, 2, 3]])
    fake_generation(monkeypatch, times, [tokens] * 6)
    result = measure_generation(torch.nn.Linear(2, 3), tokens[:, :1], 2, rounds=3, progress=False)
    assert (result["rounds"], result["prompt_length"], result["parameters"]) == (3, 1, 9)
    assert result["seconds_per_step"] == {"cached": [1.5, 2.0], "uncached": [11.0, 21.0]}
    # every round kept whole, so that ratios can be taken within a round
    assert result["seconds_per_round"] == {"cached": [[1.0, 2.0], [9.0, 2.5], [1.5, 1.0]],
                                           "uncached": [[10.0, 20.0], [11.0, 90.0], [12.0, 21.0]]}


def test_measure_generation_refuses_runs_that_generate_different_tokens(monkeypatch):
    same, other = torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 4]])
    fake_generation(monkeypatch, [[1.0]] * 4, [same, same, same, other])
    with pytest.raises(AssertionError, match="different tokens"):
        measure_generation(None, same[:, :1], 1, rounds=2, progress=False)
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        measure_generation(None, same[:, :1], 1, rounds=0)


@pytest.mark.parametrize(("draft", "accepted"), [(4, 0), (4, 2), (3, 3), (1, 0)])
def test_truncate_rolls_back_a_rejected_draft_exactly(draft, accepted):
    """Speculative decoding: k draft tokens go in at once, the first `accepted` are kept, the rest are cut;
    the next step equals full recomputation of the kept sequence, and the positions before the draft are
    bit for bit what they were."""
    model = random_decoder(2, 2, 4, seed=3)
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, model.config.vocab_size, (2, 10 + draft + 1), generator=gen)  # (B, T)
    caches = model.new_caches()
    with torch.inference_mode():
        model(tokens[:, :10], caches)  # the prompt
        before = [c.keys[..., :10, :].clone() for c in caches]
        model(tokens[:, 10:10 + draft], caches)  # the draft, checked in one pass
        for cache in caches:
            cache.truncate(10 + accepted)
        kept = torch.cat([tokens[:, :10 + accepted], tokens[:, -1:]], dim=1)  # (B, 10 + accepted + 1)
        step = model(kept[:, -1:], caches)[:, -1]
        full = model(kept)[:, -1]
    assert all(torch.equal(c.keys[..., :10, :], b) for c, b in zip(caches, before, strict=True))
    assert len(caches[0]) == kept.shape[1]
    assert (step - full).abs().max() < 1e-4


def test_truncate_refuses_lengths_it_does_not_hold():
    cache = KVCache(8)
    cache.append(torch.ones(1, 3, 2), torch.ones(1, 3, 2))
    for bad in (-1, 4, 1.5, True):
        with pytest.raises(ValueError, match="length must be an integer from 0 to the 3 positions stored"):
            cache.truncate(bad)
