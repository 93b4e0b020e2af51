"""Sliding-window attention with a rolling cache, and the paged cache (chapter 8): each proven equal to full
recomputation at every step, with positions, memory and errors checked."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attention_book as ab
from attention_book.causal import CausalSelfAttention, position_mask
from attention_book.decoder import Decoder, DecoderConfig, cached_vs_full, generate, generate_paged, serve
from attention_book.kv_cache import PADDING, BlockPool, KVCache, PagedKVCache, RingKVCache

SETTINGS = settings(max_examples=30, deadline=None)


def windowed_decoder(window, seed, num_kv_heads=None, layers=2, heads=2, head_dim=4, context_length=64):
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=13, context_length=context_length, embed_dim=heads * head_dim,
                           num_heads=heads, num_layers=layers, num_kv_heads=num_kv_heads, window=window)
    return Decoder(config).double().eval()


# position_mask: the rule behind every mask of the chapter

@SETTINGS
@given(T=st.integers(1, 9), extra=st.integers(0, 9), window=st.one_of(st.none(), st.integers(1, 20)))
def test_position_mask_with_positions_0_to_s_is_causal_mask(T, extra, window):
    S = T + extra
    ours = position_mask(torch.arange(S - T, S), torch.arange(S), window)
    assert torch.equal(ours, ab.causal_mask(T, S, window=window))


def test_position_mask_never_reaches_padding():
    mask = position_mask(torch.tensor([[2], [5]]), torch.tensor([[0, 1, 2, PADDING], [0, 1, 2, 3]]), window=3)
    assert torch.equal(mask, torch.tensor([[[True, True, True, False]], [[False, False, False, True]]]))


@pytest.mark.parametrize("window", [0, -2, 1.5, True, "3"])
def test_bad_windows_are_refused_everywhere(window):
    for make in (lambda: ab.causal_mask(3, window=window), lambda: ab.CausalSelfAttention(4, 2, window=window),
                 lambda: RingKVCache(window),
                 lambda: position_mask(torch.arange(2), torch.arange(2), window)):
        with pytest.raises(ValueError, match="window must be a positive integer"):
            make()


# The rolling cache

@st.composite
def chunked_sequence(draw):
    """A window, chunk sizes fed one after another (several well past the window), a seed."""
    window = draw(st.integers(1, 6))
    chunks = draw(st.lists(st.integers(1, 8), min_size=1, max_size=8))
    return window, chunks, draw(st.integers(0, 2**31 - 1))


@SETTINGS
@given(chunked_sequence())
def test_ring_returns_the_keys_at_the_positions_it_names(case):
    """Whatever the chunks, append returns exactly the stored keys and values at `positions`' key positions,
    and those are every position a new query can see under the window."""
    window, chunks, seed = case
    gen = torch.Generator().manual_seed(seed)
    total = sum(chunks)
    keys, values = torch.randn(2, 3, total, 4, generator=gen), torch.randn(2, 3, total, 5, generator=gen)
    cache, start = RingKVCache(window), 0
    for n in chunks:
        queries, key_positions = cache.positions(n)
        got_k, got_v = cache.append(keys[..., start:start + n, :], values[..., start:start + n, :])
        assert torch.equal(queries, torch.arange(start, start + n))
        assert torch.equal(got_k, keys[..., key_positions, :]) and torch.equal(got_v, values[..., key_positions, :])
        needed = set(range(max(0, start - window + 1), start + n))  # what the first to the last query see
        assert needed <= set(key_positions.tolist()) <= set(range(start + n))
        start += n
        assert len(cache) == start
        assert cache.keys.shape[-2] == window  # memory: the window, never more


@SETTINGS
@given(chunked_sequence(), st.integers(1, 3), st.booleans())
def test_windowed_attention_cached_in_a_ring_equals_full_windowed_recomputation(case, kv_heads, need_weights):
    window, chunks, seed = case
    torch.manual_seed(seed)
    module = ab.CausalSelfAttention(12, 6, num_kv_heads=kv_heads if 6 % kv_heads == 0 else 1,
                                    window=window).double().eval()
    x = torch.randn(2, sum(chunks), 12, dtype=torch.float64)
    with torch.no_grad():
        full, _ = module(x, need_weights=need_weights)
        mask = ab.causal_mask(x.shape[1], window=window)[None, None]  # chapter 5's mask, (1, 1, T, T): never (B, S)
        reference, _ = module.attention(x, mask=mask)
        cache, start, pieces = RingKVCache(window), 0, []
        for n in chunks:
            out, _ = module(x[:, start:start + n], need_weights=need_weights, cache=cache)
            pieces.append(out)
            start += n
    torch.testing.assert_close(full, reference, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-12)


def test_the_window_changes_only_positions_past_it():
    torch.manual_seed(0)
    plain = ab.CausalSelfAttention(8, 2).double().eval()
    windowed = ab.CausalSelfAttention(8, 2, window=4).double().eval()
    windowed.load_state_dict(plain.state_dict())
    x = torch.randn(1, 10, 8, dtype=torch.float64)
    with torch.no_grad():
        a, _ = plain(x)
        b, _ = windowed(x)
    torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=1e-12)  # positions 0-3 see everything anyway
    assert (a[:, 4:] - b[:, 4:]).abs().amax(dim=-1).min() > 1e-6  # every later position sees less


@pytest.mark.parametrize("window, kv_heads", [(1, None), (3, None), (5, 1), (8, 2)])
@pytest.mark.parametrize("prefill", [1, 4, 11])
def test_windowed_decoder_cached_equals_full_well_past_the_window(window, kv_heads, prefill):
    model = windowed_decoder(window, seed=window + prefill, num_kv_heads=kv_heads)
    tokens = torch.randint(0, 13, (2, 40), generator=torch.Generator().manual_seed(prefill))
    assert isinstance(model.new_caches()[0], RingKVCache)
    assert max(cached_vs_full(model, tokens, prefill)) < 1e-10  # 40 positions, five times the longest window


def test_windowed_generation_holds_constant_memory():
    model = windowed_decoder(6, seed=1, context_length=128)
    prompt = torch.randint(0, 13, (1, 9), generator=torch.Generator().manual_seed(3))
    assert torch.equal(generate(model, prompt, 100), generate(model, prompt, 100, use_cache=False))
    caches = model.new_caches()
    held = []
    with torch.inference_mode():
        model(prompt, caches)
        for token in torch.randint(0, 13, (1, 100), generator=torch.Generator().manual_seed(4)).T:
            model(token[None], caches)
            held.append(sum(c.nbytes() for c in caches))
    assert len(caches[0]) == 109 and set(held) == {2 * 2 * 6 * 8 * 8}  # layers · (K, V) · window · E · float64


# The paged cache

@st.composite
def paged_case(draw):
    """Block size, prompt lengths of B sequences, decode steps, a seed."""
    lengths = draw(st.lists(st.integers(1, 11), min_size=1, max_size=4))
    return draw(st.integers(1, 5)), lengths, draw(st.integers(1, 7)), draw(st.integers(0, 2**31 - 1))


@SETTINGS
@given(paged_case())
def test_paged_cache_returns_every_sequence_padded_with_its_own_positions(case):
    block_size, lengths, steps, seed = case
    gen = torch.Generator().manual_seed(seed)
    B = len(lengths)
    full = [torch.randn(2, length + steps, 3, generator=gen) for length in lengths]  # (H_kv, S_b, d) each
    cache = PagedKVCache(BlockPool(64, block_size), B)
    for b, length in enumerate(lengths):  # prefill each alone
        cache.for_rows([b]).append(full[b][None, :, :length], full[b][None, :, :length])
    for step in range(steps):
        queries, key_positions = cache.positions(1)
        new = torch.stack([f[:, lengths[b] + step] for b, f in enumerate(full)])[:, :, None]  # (B, H_kv, 1, d)
        keys, values = cache.append(new, new)
        for b in range(B):
            end = lengths[b] + step + 1
            assert queries[b].tolist() == [end - 1]
            assert torch.equal(keys[b, :, :end], full[b][:, :end]) and torch.equal(values[b, :, :end], full[b][:, :end])
            assert key_positions[b, :end].tolist() == list(range(end))
            assert (key_positions[b, end:] == PADDING).all()
    blocks_held = sum(-(-(length + steps) // block_size) for length in lengths)
    assert sum(len(t) for t in cache.block_tables) == blocks_held == 64 - len(cache.pool.free)
    assert cache.nbytes() == blocks_held * 2 * 2 * block_size * 3 * 4  # (K, V) · H_kv · block · d · float32
    assert len({block for table in cache.block_tables for block in table}) == blocks_held  # none shared


@SETTINGS
@given(paged_case(), st.sampled_from([None, 3]), st.sampled_from([None, 1]))
def test_paged_generation_equals_each_sequence_alone(case, window, kv_heads):
    block_size, lengths, steps, seed = case
    model = windowed_decoder(window, seed=seed % 1000, num_kv_heads=kv_heads)
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 13, (length,), generator=gen) for length in lengths]
    sequences, caches = generate_paged(model, prompts, steps, block_size=block_size)
    for prompt, sequence in zip(prompts, sequences, strict=True):
        assert torch.equal(sequence, generate(model, prompt[None], steps, use_cache=False)[0])


@pytest.mark.parametrize("window", [None, 2])
def test_paged_logits_equal_full_recomputation_at_every_step(window):
    model = windowed_decoder(window, seed=5)
    gen = torch.Generator().manual_seed(6)
    lengths, steps = [3, 9, 1], 8
    sequences = [torch.randint(0, 13, (length + steps,), generator=gen) for length in lengths]
    caches = model.new_paged_caches(len(lengths), num_blocks=32, block_size=4)
    with torch.inference_mode():
        for b, length in enumerate(lengths):
            prefilled = model(sequences[b][None, :length], [c.for_rows([b]) for c in caches])[0]  # (T0_b, V)
            torch.testing.assert_close(prefilled, model(sequences[b][None, :length])[0], rtol=0, atol=1e-10)
        for step in range(steps):
            new = torch.stack([s[length + step] for s, length in zip(sequences, lengths, strict=True)])[:, None]  # (B, 1)
            cached = model(new, caches)[:, -1]  # (B, V)
            for b, length in enumerate(lengths):
                full = model(sequences[b][None, :length + step + 1])[0, -1]
                torch.testing.assert_close(cached[b], full, rtol=0, atol=1e-10)


def test_finished_sequences_give_their_blocks_back():
    pool = BlockPool(4, 2)
    cache = PagedKVCache(pool, 2)
    cache.append(torch.zeros(2, 1, 3, 4), torch.zeros(2, 1, 3, 4))  # 3 positions each: 2 blocks each
    assert pool.free == [] and cache.block_tables == [[0, 1], [2, 3]]
    with pytest.raises(RuntimeError, match="the block pool is exhausted: 2 more blocks needed, 0 of 4 blocks of 2 positions free"):
        cache.append(torch.zeros(2, 1, 2, 4), torch.zeros(2, 1, 2, 4))  # position 4 needs a third block
    assert cache.lengths == [3, 3] and pool.free == []  # nothing changed
    cache.release(0)
    assert cache.lengths[0] == 0 and cache.block_tables[0] == [] and sorted(pool.free) == [0, 1]
    cache.for_rows([0]).append(torch.ones(1, 1, 4, 4), torch.ones(1, 1, 4, 4))  # a new sequence reuses them
    assert sorted(cache.block_tables[0]) == [0, 1]


def test_paged_cache_names_the_shapes_it_refuses():
    cache = PagedKVCache(BlockPool(4, 2), 2)
    with pytest.raises(ValueError, match=r"feeding 2 sequences takes keys \(B, H_kv, n, d_k\).*got \(3, 1, 1, 4\)"):
        cache.append(torch.zeros(3, 1, 1, 4), torch.zeros(3, 1, 1, 4))
    cache.append(torch.zeros(2, 1, 1, 4), torch.zeros(2, 1, 1, 4))
    with pytest.raises(ValueError, match=r"do not fit blocks of keys \(1, 2, 4\)"):
        cache.append(torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 4))
    with pytest.raises(IndexError, match="row 2 is not a sequence of this cache"):
        cache.for_rows([2])
    with pytest.raises(ValueError, match="num_blocks and block_size must be at least 1"):
        BlockPool(0, 16)
    model = windowed_decoder(None, seed=0)
    with pytest.raises(ValueError, match=r"non-empty 1-D token tensors, got shapes \[\(2, 3\)\]"):
        generate_paged(model, [torch.zeros(2, 3, dtype=torch.long)], 4)


def test_full_and_ring_caches_agree_on_every_step():
    """The same windowed model with a full cache (masked by position) and with the ring."""
    model = windowed_decoder(4, seed=2)
    tokens = torch.randint(0, 13, (1, 30), generator=torch.Generator().manual_seed(2))
    full_caches = [KVCache(64) for _ in model.blocks]
    ring_caches = model.new_caches()
    with torch.inference_mode():
        for t in range(30):
            a = model(tokens[:, t:t + 1], full_caches)
            b = model(tokens[:, t:t + 1], ring_caches)
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert sum(c.nbytes() for c in ring_caches) * 16 == sum(c.nbytes() for c in full_caches)  # 4 of 64 positions


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_continuous_batching_equals_each_sequence_generated_alone(rows):
    """`serve` admits waiting prompts into rows that finished, mid-run, reusing their blocks; every sequence
    comes out as `generate` makes it alone."""
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab_size=19, context_length=64, embed_dim=16, num_heads=2, num_layers=2)).eval()
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 19, (n,), generator=gen) for n in (5, 1, 9, 3, 7)]
    new_tokens = [6, 2, 4, 9, 3]
    sequences, events = serve(model, prompts, new_tokens, rows=rows, block_size=4)
    for prompt, n, sequence in zip(prompts, new_tokens, sequences, strict=True):
        assert torch.equal(sequence, generate(model, prompt[None], n)[0])
    admitted = [step for step, kind, _ in events if kind == "admit"]
    assert len(admitted) == len(prompts) and sum(kind == "release" for _, kind, _ in events) == len(prompts)
    assert max(admitted) > 0  # some prompts joined a batch already decoding


def test_serve_refuses_mismatched_requests():
    model = Decoder(DecoderConfig(vocab_size=19, context_length=64, embed_dim=16, num_heads=2, num_layers=2)).eval()
    with pytest.raises(ValueError, match="one number of new tokens per prompt: 2 prompts, 1 numbers"):
        serve(model, [torch.tensor([1]), torch.tensor([2])], [3], rows=2)


@pytest.mark.parametrize(("ring", "window"), [(4, 8), (4, None)])
def test_a_layer_refuses_a_ring_smaller_than_its_window(ring, window):
    layer = CausalSelfAttention(8, 2, window=window).eval()
    with pytest.raises(ValueError, match=f"cache is a RingKVCache of window {ring}, but this layer has window={window}"):
        layer(torch.zeros(1, 1, 8), cache=RingKVCache(ring))
