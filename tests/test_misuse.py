"""Misuse gets a clear error, never a silent wrong answer (issue 34).

One test per class of misuse the issue found: each call either raises an error of the right type that
names the argument (never checked by its exact text alone), or returns the well-defined answer.
"""

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import attention_book as ab
from attention_book.attention import apply_mask
from attention_book.decoder import Decoder, DecoderConfig, cached_vs_full, generate, generate_paged, next_token
from attention_book.induction import half_losses, induction_score
from attention_book.keras_decoder import decoder_forward
from attention_book.kv_cache import BlockPool, KVCache, PagedKVCache, RingKVCache, kv_cache_bytes
from attention_book.plotting import plot_bars

matplotlib.use("Agg")
SETTINGS = settings(max_examples=25, deadline=None)
CONFIG = DecoderConfig(vocab_size=11, context_length=24, embed_dim=8, num_heads=2, num_layers=2)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Decoder(CONFIG).eval()


def no_empty_rows(mask: torch.Tensor) -> torch.Tensor:
    mask = mask.clone()
    mask[..., 0] = True
    return mask


# The silent cases of the table

def test_generate_refuses_a_one_dimensional_prompt(model):
    """`encode` returns (T,); `[:, -1]` on its logits (T, V) would cut the vocabulary axis."""
    prompt = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="prompt"):
        generate(model, prompt, 3)
    with pytest.raises(ValueError, match="tokens"):
        cached_vs_full(model, prompt)
    assert generate(model, prompt[None], 3).shape == (1, 6)  # the form the error asks for


@SETTINGS
@given(st.integers(2, 4), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_mask_that_could_mean_two_things_is_refused(size, seq, seed):
    """(B, T, S) with B == H, and (B, S) with B == T: refused; the four-axis forms say which is meant."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    B = H = T = size  # every ambiguity at once
    module = ab.MultiHeadAttention(2 * H, H).eval()
    x = torch.randn(B, T, 2 * H, generator=gen)
    per_sequence = no_empty_rows(torch.rand(B, T, T, generator=gen) < 0.5)  # (B, T, S)
    padding = no_empty_rows(torch.rand(B, T, generator=gen) < 0.5)  # (B, S)
    for mask in (per_sequence, padding):
        with pytest.raises(ValueError, match=r"mask of shape .*ambiguous"):
            module(x, mask=mask)
    with pytest.raises(ValueError, match="mask"):  # (B, T, S) with B != H: names the missing head axis
        ab.MultiHeadAttention(2 * (H + 1), H + 1)(x.repeat(1, 1, 2)[..., :2 * (H + 1)], mask=per_sequence)
    with torch.no_grad():
        out, _ = module(x, mask=per_sequence[:, None])  # (B, 1, T, S): one mask per sequence
        for b in range(B):
            alone, _ = module(x[b:b + 1], mask=per_sequence[b])
            torch.testing.assert_close(out[b:b + 1], alone)
        out, _ = module(x, mask=padding[:, None, None])  # (B, 1, 1, S): padding
        for b in range(B):
            alone, _ = module(x[b:b + 1], mask=padding[b].expand(T, T))
            torch.testing.assert_close(out[b:b + 1], alone)
    with pytest.raises(ValueError, match="mask"):  # SelfAttention: (B, S) with B == T
        ab.SelfAttention(2 * H, 2, 2)(x, mask=padding)


@pytest.mark.parametrize("temperature", [-1.0, -0.5, float("nan"), float("inf")])
def test_negative_temperature_is_refused(model, temperature):
    prompt = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="temperature"):
        generate(model, prompt, 3, temperature=temperature)
    with pytest.raises(ValueError, match="temperature"):
        generate_paged(model, [prompt[0]], 3, temperature=temperature)
    with pytest.raises(ValueError, match="temperature"):
        next_token(torch.zeros(1, 4), temperature)


@SETTINGS
@given(st.floats(100.0, 400.0), st.integers(0, 2**31 - 1), st.sampled_from([torch.float16, torch.bfloat16]))
def test_half_precision_scores_are_computed_in_float32(spread, seed, dtype):
    """Scores above float16's 65504 gave NaN; now the explicit path agrees with the fused kernel."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 5, 16, generator=gen) * spread
    k = q + torch.randn(2, 5, 16, generator=gen)
    v = torch.randn(2, 5, 16, generator=gen)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    out, weights = ab.scaled_dot_product_attention(q, k, v)
    fused = F.scaled_dot_product_attention(q, k, v)
    assert out.dtype == weights.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(out.float(), fused.float(), atol=2e-2, rtol=2e-2)

    module = ab.MultiHeadAttention(16, 2)
    with torch.no_grad():
        module.q_proj.weight.mul_(spread)
        module.k_proj.weight.mul_(spread)
    module = module.to(dtype).eval()
    x = torch.randn(1, 5, 16, generator=gen).to(dtype)
    with torch.no_grad():
        explicit, averaged = module(x)
        implicit, _ = module(x, need_weights=False)
    assert torch.isfinite(explicit).all() and averaged.dtype == dtype
    torch.testing.assert_close(explicit.float(), implicit.float(), atol=3e-2, rtol=3e-2)


def test_a_cache_must_fit_its_layer():
    """A ring cache smaller than the layer's window, and one cache given to two layers, are refused."""
    x = torch.randn(1, 6, 8)
    windowed = ab.CausalSelfAttention(8, 2, window=4).eval()
    with pytest.raises(ValueError, match="cache"):
        windowed(x[:, :1], cache=RingKVCache(3))
    with pytest.raises(ValueError, match="cache"):
        ab.CausalSelfAttention(8, 2).eval()(x[:, :1], cache=RingKVCache(3))  # no window: sees everything
    first, second = ab.CausalSelfAttention(8, 2).eval(), ab.CausalSelfAttention(8, 2).eval()
    shared = KVCache(16)
    with torch.no_grad():
        first(x, cache=shared)
        with pytest.raises(ValueError, match="cache"):
            second(x, cache=shared)
        shared.reset()
        second(x, cache=shared)  # reset: a new owner may take it
        step = [windowed(x[:, i:i + 1], cache=ring)[0] for ring in [RingKVCache(5)] for i in range(6)]
    torch.testing.assert_close(torch.cat(step, dim=1), windowed(x)[0])  # a larger ring is exact


def test_from_torch_refuses_a_sequence_first_module():
    torch.manual_seed(0)
    sequence_first = nn.MultiheadAttention(8, 2).eval()  # batch_first=False: reads (T, B, E)
    with pytest.raises(ValueError, match="batch_first"):
        ab.MultiHeadAttention.from_torch(sequence_first)
    ours = ab.MultiHeadAttention.from_torch(sequence_first, sequence_first=True)
    x = torch.randn(3, 2, 8)  # (T, B, E)
    with torch.no_grad():
        expected, _ = sequence_first(x, x, x)
        out, _ = ours(x.transpose(0, 1))
    torch.testing.assert_close(out.transpose(0, 1), expected)


@pytest.mark.parametrize("name", ["num_kv_heads", "head_dim"])
@pytest.mark.parametrize("value", [0, -2, 2.0, True])
def test_zero_is_not_none_for_head_settings(name, value):
    with pytest.raises(ValueError, match=name):
        ab.MultiHeadAttention(8, 2, **{name: value})


def test_a_cache_never_converts_what_it_is_given():
    """KVCache and the paged pool keep the dtype of their first append; ints would have been truncated."""
    cache = KVCache(4)
    cache.append(torch.zeros(1, 1, 2, dtype=torch.long), torch.zeros(1, 1, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="keys"):
        cache.append(torch.full((1, 1, 2), 0.7), torch.full((1, 1, 2), 0.7))
    assert len(cache) == 1
    numpy_cache = KVCache(4)
    numpy_cache.append(np.zeros((1, 1, 2), np.float32), np.zeros((1, 1, 2), np.float32))
    with pytest.raises(TypeError, match="keys"):
        numpy_cache.append(np.zeros((1, 1, 2)), np.zeros((1, 1, 2)))  # float64
    paged = PagedKVCache(BlockPool(4, 2), 1)
    paged.append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    with pytest.raises(TypeError, match="keys"):
        paged.append(torch.zeros(1, 1, 1, 2, dtype=torch.float64), torch.zeros(1, 1, 1, 2, dtype=torch.float64))


def test_a_block_is_never_given_to_two_sequences():
    pool = BlockPool(4, 2)
    block = pool.allocate()
    pool.release([block])
    with pytest.raises(ValueError, match="block"):
        pool.release([block])  # twice
    with pytest.raises(ValueError, match="block"):
        pool.release([7])  # not one of the pool's
    assert sorted(pool.free) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="rows"):
        PagedKVCache(BlockPool(4, 2), 2).for_rows([0, 0])


def test_generation_settings_out_of_range_are_refused(model):
    prompt = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, prompt, -2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_paged(model, [prompt[0]], -2)
    for prefill in (0, 4, 5):
        with pytest.raises(ValueError, match="prefill"):
            cached_vs_full(model, prompt, prefill=prefill)
    assert len(cached_vs_full(model, prompt, prefill=3)) == 1
    with pytest.raises(ValueError, match="max_new_tokens"):  # refused before any work, not at step 22
        generate(model, prompt, CONFIG.context_length)
    with pytest.raises(ValueError, match="caches"):
        model(prompt, model.new_caches()[:1])
    with pytest.raises(ValueError, match="logits"):
        next_token(torch.tensor([[0.0, float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="logits"):
        next_token(torch.tensor([[0.0, float("nan"), 1.0]]), temperature=1.0)
    q = torch.randn(2, 3, 4, device="meta")
    with pytest.raises(TypeError, match="query"):
        ab.scaled_dot_product_attention(q, torch.randn(2, 3, 4), torch.randn(2, 3, 4))


def test_smaller_silent_cases_are_refused_or_right():
    with pytest.raises(TypeError, match="mask"):
        apply_mask(torch.zeros(2, 2), torch.tensor([[1, 0], [0, 1]]))
    with pytest.raises(ValueError, match="length"):
        kv_cache_bytes(1, 2, 4, -10, 2)
    assert ab.encode("", {}).dtype == torch.long
    weights = {"embedding": np.arange(12.0).reshape(6, 2)}
    with pytest.raises(ValueError, match="tokens"):
        decoder_forward(weights, np.array([[-1]]))  # NumPy reads -1 as the last row
    with pytest.raises(ValueError, match="periods"):
        half_losses(torch.rand(2, 3), torch.tensor([9, 9]))  # no repeated target: a mean of nothing
    with pytest.raises(ValueError, match="periods"):
        induction_score(torch.rand(1, 2, 4, 4), torch.randint(0, 5, (1, 4)), torch.tensor([9]))
    with pytest.raises(ValueError, match="labels"):
        plot_bars(["a", "b"], [1, 2, 3], ylabel="y", title="t")


# The obscure classes: they raised, but with torch's or Python's words

def test_dtype_mixes_name_the_argument():
    x = torch.randn(2, 3)
    with pytest.raises(TypeError, match="query"):
        ab.scaled_dot_product_attention(x.double(), x, x)
    with pytest.raises(TypeError, match="query"):
        ab.scaled_dot_product_attention(x.long(), x.long(), x.long())
    module = ab.MultiHeadAttention(8, 2)
    for wrong in (torch.ones(1, 3, 8, dtype=torch.long), torch.ones(1, 3, 8, dtype=torch.float64)):
        with pytest.raises(TypeError, match="query"):
            module(wrong)
    with pytest.raises(TypeError, match="key"):
        module(torch.ones(1, 3, 8), torch.ones(1, 3, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="x"):
        ab.SelfAttention(3, 2, 2)(torch.ones(4, 3, dtype=torch.long))


def test_a_float_mask_of_another_dtype_is_added_as_it_says():
    """`mask_from_torch` builds float32 masks; a module of another dtype adds them all the same, on the
    weights path and the fused one."""
    padding = torch.tensor([[False, False, True], [False, True, True]])  # True = blocked
    mask = ab.mask_from_torch(key_padding_mask=padding)  # float32 (B, 1, 1, S)
    assert mask.dtype == torch.float32
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        torch.manual_seed(0)
        module = ab.MultiHeadAttention(8, 2).to(dtype).eval()
        x = torch.randn(2, 3, 8).to(dtype)
        for need_weights in (True, False):
            with torch.no_grad():
                out, _ = module(x, mask=mask, need_weights=need_weights)
                expected, _ = module(x, mask=~padding[:, None, None], need_weights=need_weights)
            torch.testing.assert_close(out, expected)


@SETTINGS
@given(st.one_of(st.integers(-5, -1), st.integers(CONFIG.vocab_size, 40)))
def test_token_ids_out_of_range_name_the_argument(model, wrong):
    tokens = torch.tensor([[1, wrong, 2]])
    with pytest.raises(ValueError, match="tokens"):
        model(tokens)
    with pytest.raises(ValueError, match="prompt"):
        generate(model, tokens, 2)
    with pytest.raises(TypeError, match="tokens"):
        model(tokens.float())
    with pytest.raises(ValueError, match="tokens"):
        decoder_forward({"embedding": np.zeros((CONFIG.vocab_size, 2))}, tokens.numpy())


def test_empty_inputs_are_refused_or_empty(model):
    with pytest.raises(ValueError, match="prompt"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="prompts"):
        generate_paged(model, [torch.zeros(0, dtype=torch.long)], 2)
    module = ab.MultiHeadAttention(8, 2)
    assert module(torch.randn(2, 0, 8))[0].shape == (2, 0, 8)  # no queries: no outputs
    out, weights = ab.scaled_dot_product_attention(torch.randn(2, 4), torch.randn(0, 4), torch.randn(0, 4))
    assert torch.equal(out, torch.zeros(2, 4)) and weights.shape == (2, 0)  # no keys: zero, as chapter 2 says
    assert ab.causal_mask(0, 3).shape == (0, 3)
    with pytest.raises(ValueError, match="periods"):
        half_losses(torch.rand(2, 3), torch.tensor([0, 0]))  # every target in the repeat, none before


def test_wrong_rank_names_the_argument(model):
    with pytest.raises(ValueError, match="query"):
        ab.MultiHeadAttention(8, 2)(torch.ones(8))
    with pytest.raises(ValueError, match="x"):
        ab.SelfAttention(8, 2, 2)(torch.ones(8))
    W = torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match="x"):
        ab.stacked_multihead_attention(torch.randn(8), W, W, W)
    with pytest.raises(ValueError, match="W_key"):
        ab.stacked_multihead_attention(torch.randn(3, 8), W, torch.randn(4, 8), W)
    with pytest.raises(ValueError, match="tokens"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="keys"):
        KVCache(4).append(torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="key_padding_mask"):
        ab.mask_from_torch(key_padding_mask=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_mask"):
        ab.mask_from_torch(torch.zeros(3, 2, 2, dtype=torch.bool), num_heads=2)


@pytest.mark.parametrize("build, name", [
    (lambda: ab.MultiHeadAttention(8, 0), "num_heads"),
    (lambda: ab.MultiHeadAttention(-4, 2), "embed_dim"),
    (lambda: ab.MultiHeadAttention(8, 2, kdim=0), "kdim"),
    (lambda: ab.MultiHeadAttentionWrapper(8, 2, 2, 0), "num_heads"),
    (lambda: ab.SelfAttention(0, 2, 2), "d_in"),
    (lambda: ab.CausalSelfAttention(8, 0), "num_heads"),
    (lambda: KVCache(2.5), "max_length"),
    (lambda: BlockPool(2, 2.0), "block_size"),
    (lambda: PagedKVCache(BlockPool(2, 2), 0), "batch_size"),
    (lambda: DecoderConfig(num_heads=0), "num_heads"),
    (lambda: DecoderConfig(context_length=0), "context_length"),
    (lambda: DecoderConfig(num_kv_heads=0), "num_kv_heads"),
    (lambda: DecoderConfig(dropout=1.5), "dropout"),
    (lambda: ab.causal_mask(-1), "num_queries"),
    (lambda: ab.causal_mask(2.0), "num_queries"),
])
def test_bad_constructor_arguments_name_the_argument(build, name):
    with pytest.raises(ValueError, match=name):
        build()


def test_tensors_stay_on_their_device():
    """On the meta device nothing can be read back: masks, caches and checks must not need it."""
    meta = torch.device("meta")
    x = torch.randn(2, 3, 8, device=meta)
    module = ab.MultiHeadAttention(8, 2).to(meta)
    out, weights = module(x, mask=torch.ones(1, 1, 3, 3, dtype=torch.bool, device=meta))
    assert out.device == weights.device == meta
    out, _ = ab.CausalSelfAttention(8, 2).to(meta)(x, cache=PagedKVCache(BlockPool(4, 4), 2))
    assert out.device == meta
    out, _ = ab.CausalSelfAttention(8, 2, window=2).to(meta)(x, cache=RingKVCache(2))
    assert out.device == meta
    q = torch.randn(2, 3, 4, device=meta)
    assert ab.scaled_dot_product_attention(q, q, q, mask=ab.causal_mask(3, device=meta))[0].device == meta
    with pytest.raises(ValueError, match="mask"):
        ab.scaled_dot_product_attention(q, q, q, mask=ab.causal_mask(3))  # a CPU mask for meta inputs
    cache = KVCache(4)
    cache.append(torch.zeros(1, 1, 2, device=meta), torch.zeros(1, 1, 2, device=meta))
    with pytest.raises(TypeError, match="keys"):
        cache.append(torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    assert Decoder(CONFIG).to(meta)(torch.ones(1, 3, dtype=torch.long, device=meta)).device == meta
