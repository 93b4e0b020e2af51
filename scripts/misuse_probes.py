"""Misuse probes of issue 48's second round: each calls the package wrongly and is classed by what happens.

  clear    it raised a ValueError, TypeError, IndexError or RuntimeError naming the argument (or one of the
           words the probe lists), or it returned the right answer;
  silent   it returned, and the answer is wrong (or nonsense was accepted);
  obscure  it raised, but the error does not name what the caller did wrong;
  crash    the process died (counted by running this script: it prints the totals only if it survives).

Run: `python scripts/misuse_probes.py` (add `-v` to list every probe's class). Against another checkout,
`PYTHONPATH=/path/to/src python scripts/misuse_probes.py`. `tests/test_misuse_round2.py` runs the same probes
and requires 0 silent and at most 10% obscure.
"""

import os
import re
import sys

if "torch" not in sys.modules:  # the Triton probes run in the interpreter when there is no GPU
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import torch
from torch import nn

PROBES: list[tuple[str, str, tuple[str, ...], object]] = []  # (name, kind, words, function)
CLEAR_TYPES = (ValueError, TypeError, IndexError, RuntimeError, KeyError)


def refuses(*words):
    """The probe must raise an error that names one of `words`; returning at all is silent."""
    def register(function):
        PROBES.append((function.__name__, "refuse", words, function))
        return function
    return register


def answers(*words):
    """The probe returns True when the answer is right (False: silent); it may also refuse, naming `words`."""
    def register(function):
        PROBES.append((function.__name__, "answer", words, function))
        return function
    return register


def classify(kind: str, words: tuple[str, ...], function) -> tuple[str, str]:
    try:
        result = function()
    except Exception as error:  # noqa: BLE001 - every error is classed
        message = f"{type(error).__name__}: {error}"
        named = any(re.search(rf"(?<![\w.]){re.escape(word)}(?!\w)", str(error), re.IGNORECASE) for word in words)
        return ("clear" if isinstance(error, CLEAR_TYPES) and named else "obscure"), message[:300]
    if kind == "refuse":
        return "silent", f"returned {str(result)[:120]!r}"
    return ("clear", "right answer") if result is True else ("silent", f"wrong answer: {str(result)[:120]}")


def run(verbose: bool = False) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"clear": [], "silent": [], "obscure": []}
    for name, kind, words, function in PROBES:
        torch.manual_seed(0)
        verdict, message = classify(kind, words, function)
        found[verdict].append(name)
        if verbose:
            print(f"{verdict:8} {name}: {message}")
    return found


# The modules under test, imported once.
import attention_book as ab  # noqa: E402
from attention_book import course  # noqa: E402
from attention_book.course.checks import common  # noqa: E402
from attention_book.decoder import (  # noqa: E402
    Decoder,
    DecoderConfig,
    decode_one_by_one,
    from_gpt2,
    generate,
    generate_paged,
    next_token,
)
from attention_book.efficient import (  # noqa: E402
    merge_partials,
    online_attention_states,
    split_kv_attention,
    tiled_attention,
)
from attention_book.induction import (  # noqa: E402
    AttentionOnly,
    InductionConfig,
    induction_score,
    previous_token_score,
)
from attention_book.interactive import InteractiveFigure, attention_explorer, kv_cache_steps, tile_steps  # noqa: E402
from attention_book.keras_decoder import decoder_forward  # noqa: E402
from attention_book.kv_cache import BlockPool, Int8KVCache, KVCache, PagedKVCache, RingKVCache  # noqa: E402
from attention_book.latent import LatentAttention, latent_cache_bytes  # noqa: E402
from attention_book.measure import attention_tflops  # noqa: E402
from attention_book.measure.profile import decode_step_work  # noqa: E402
from attention_book.positions import LearnedPositions, alibi_bias, alibi_slopes, apply_rope  # noqa: E402

CONFIG = DecoderConfig(vocab_size=11, context_length=24, embed_dim=8, num_heads=2, num_layers=2)


def decoder(**changes):
    torch.manual_seed(0)
    return Decoder(DecoderConfig(**{**CONFIG.__dict__, **changes})).eval()


def latent(**changes):
    torch.manual_seed(0)
    sizes = dict(embed_dim=8, num_heads=2, latent_dim=6, rope_dim=4) | changes
    return LatentAttention(**sizes).double()


def decode(layer, x, caches):
    """x (B, T, E) fed one position at a time through `caches` (one cache, or the same one for each step)."""
    with torch.no_grad():
        return torch.cat([layer(x[:, t:t + 1], cache=caches)[0] for t in range(x.shape[1])], dim=1)


X8 = torch.randn(1, 6, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


# LatentAttention: constructor values

@refuses("latent_dim")
def latent_dim_zero():
    return latent(latent_dim=0)(X8)


@refuses("embed_dim")
def latent_embed_dim_zero():
    return LatentAttention(0, 2, 6, 4)(torch.zeros(1, 2, 0))


@refuses("head_dim")
def latent_head_dim_zero():
    return latent(head_dim=0)


@refuses("latent_dim")
def latent_dim_float():
    return latent(latent_dim=6.0)


@refuses("latent_dim")
def latent_dim_none():
    return latent(latent_dim=None)


@refuses("num_heads")
def latent_heads_negative():
    return latent(num_heads=-2)


@refuses("num_heads")
def latent_heads_zero():
    return latent(num_heads=0)


@refuses("embed_dim")
def latent_embed_dim_indivisible():
    return latent(embed_dim=9)


@refuses("head_dim")
def latent_head_dim_float():
    return latent(head_dim=2.5)


@refuses("rope_dim")
def latent_rope_dim_float():
    return latent(rope_dim=4.0)


@refuses("need_weights")
def latent_need_weights():
    return latent()(X8, need_weights=True)


# LatentAttention: inputs

@refuses("x")
def latent_input_rank():
    return latent()(X8[0, 0])


@refuses("x", "embed_dim")
def latent_input_width():
    return latent()(torch.zeros(1, 3, 5, dtype=torch.float64))


@refuses("x")
def latent_input_dtype():
    return latent()(X8.float())


@refuses("x")
def latent_input_integer():
    return latent()(torch.ones(1, 3, 8, dtype=torch.long))


@refuses("x")
def latent_input_numpy():
    return latent()(X8.numpy())


@answers("x")
def latent_input_meta():
    layer = LatentAttention(8, 2, 6, 4).to("meta")
    out, _ = layer(torch.zeros(1, 3, 8, device="meta"), cache=KVCache(8))
    return out.device.type == "meta" and out.shape == (1, 3, 8)


@answers("x")
def latent_empty_sequence():
    return latent()(X8[:, :0])[0].shape == (1, 0, 8)


# LatentAttention: training and the absorbed matrices

@answers("absorbed")
def latent_absorbed_trains():
    layer = latent().train()
    out, _ = layer(X8, absorbed=True)
    out.square().sum().backward()
    grads = {name: p.grad for name, p in layer.named_parameters()}
    plain = latent().train()
    plain(X8, absorbed=False)[0].square().sum().backward()
    return all(grads[name] is not None and torch.allclose(grads[name], p.grad, atol=1e-9)
               for name, p in plain.named_parameters())


@answers("absorbed")
def latent_absorbed_follows_data():
    layer = latent().eval()
    with torch.no_grad():
        layer(X8, absorbed=True)
        for p in layer.parameters():
            p.data.mul_(1.5)  # an in-place change through .data: no version bump
        return torch.allclose(layer(X8, absorbed=True)[0], layer(X8, absorbed=False)[0], atol=1e-10)


@answers("absorbed")
def latent_absorbed_follows_data_assignment():
    layer = latent().eval()
    with torch.no_grad():
        layer(X8, absorbed=True)
        layer.k_up.weight.data = layer.k_up.weight.data * 2
        return torch.allclose(layer(X8, absorbed=True)[0], layer(X8, absorbed=False)[0], atol=1e-10)


@answers("absorbed")
def latent_absorbed_follows_load_state_dict():
    layer, other = latent().eval(), latent(embed_dim=8)
    torch.manual_seed(5)
    for p in other.parameters():
        nn.init.normal_(p)
    with torch.no_grad():
        layer(X8, absorbed=True)
        layer.load_state_dict(other.state_dict())
        return torch.allclose(layer(X8, absorbed=True)[0], other(X8, absorbed=False)[0], atol=1e-10)


# LatentAttention: caches

@refuses("cache", "window")
def latent_ring_smaller_than_window():
    return decode(latent(window=4).eval(), X8, RingKVCache(3))


@refuses("cache", "window")
def latent_ring_without_window():
    return decode(latent().eval(), X8, RingKVCache(3))


@refuses("cache", "sinks")
def latent_ring_without_sink_slot():
    return decode(latent(window=3, sinks=1).eval(), X8, RingKVCache(3))


@refuses("cache")
def latent_cache_shared_by_two_layers():
    first, second = latent().eval(), latent().eval()
    cache = KVCache(16)
    with torch.no_grad():
        first(X8, cache=cache)
        return second(X8, cache=cache)


@refuses("length")
def latent_cache_bytes_negative_length():
    return latent_cache_bytes(2, 6, 4, -10, 2)


@refuses("layers")
def latent_cache_bytes_fractional_layers():
    return latent_cache_bytes(2.5, 6, 4, 10, 2)


@refuses("latent_dim")
def latent_cache_bytes_none():
    return latent_cache_bytes(2, None, 4, 10, 2)


# Caches

@refuses("cache", "sinks")
def causal_ring_without_sink_slot():
    layer = ab.CausalSelfAttention(8, 2, window=3, sinks=1).eval()
    return decode(layer, X8.float(), RingKVCache(3))


@refuses("row")
def paged_release_negative_row():
    cache = PagedKVCache(BlockPool(4, 2), 2)
    cache.append(torch.zeros(2, 1, 3, 2), torch.zeros(2, 1, 3, 2))
    return cache.release(-1)


@refuses("row")
def paged_release_past_the_batch():
    cache = PagedKVCache(BlockPool(4, 2), 2)
    return cache.release(2)


@refuses("window")
def ring_window_none():
    return RingKVCache(None)


@refuses("pool")
def paged_pool_none():
    return PagedKVCache(None, 2)


@refuses("pool")
def paged_pool_int():
    return PagedKVCache(4, 2)


@refuses("max_length")
def kv_cache_none():
    return KVCache(None)


@answers("keys")
def kv_cache_append_nothing():
    cache = KVCache(4)
    cache.append(torch.ones(1, 1, 2, 3), torch.ones(1, 1, 2, 3))
    keys, _ = cache.append(torch.ones(1, 1, 0, 3), torch.ones(1, 1, 0, 3))
    return len(cache) == 2 and keys.shape == (1, 1, 2, 3)


@answers("keys")
def ring_append_nothing():
    cache = RingKVCache(3)
    cache.append(torch.ones(1, 1, 2, 3), torch.ones(1, 1, 2, 3))
    keys, _ = cache.append(torch.ones(1, 1, 0, 3), torch.ones(1, 1, 0, 3))
    return len(cache) == 2 and keys.shape[-2] == 2


@refuses("keys")
def kv_cache_numpy_then_list():
    cache = KVCache(4)
    cache.append(np.zeros((1, 2, 3), np.float32), np.zeros((1, 2, 3), np.float32))
    return cache.append([[[0.0, 0, 0]]], [[[0.0, 0, 0]]])


@refuses("keys")
def kv_cache_list():
    return KVCache(4).append([[0.0, 1.0]], [[0.0, 1.0]])


@refuses("keys")
def int8_cache_integer_keys():
    return Int8KVCache(4).append(torch.ones(1, 1, 2, 3, dtype=torch.long), torch.ones(1, 1, 2, 3, dtype=torch.long))


@answers("Int8KVCache", "float32", "cache")
def int8_cache_with_a_bfloat16_module():
    layer = ab.CausalSelfAttention(8, 2).to(torch.bfloat16).eval()
    with torch.no_grad():
        out, _ = layer(X8.to(torch.bfloat16), cache=Int8KVCache(8))
        full, _ = layer(X8.to(torch.bfloat16))
    return out.dtype == torch.bfloat16 and bool(torch.allclose(out.float(), full.float(), atol=0.1))


@refuses("cache", "sequences", "batch")
def paged_cache_wrong_batch_in_a_module():
    layer = ab.CausalSelfAttention(8, 2).eval()
    with torch.no_grad():
        return layer(X8.float(), cache=PagedKVCache(BlockPool(8, 4), 3))


# Efficient attention

@refuses("values")
def online_states_one_dimensional_values():
    return list(online_attention_states(torch.randn(5), torch.randn(5), 2))


@refuses("values", "scores")
def online_states_lengths_differ():
    return list(online_attention_states(torch.randn(5), torch.randn(4, 3), 2))


@refuses("scores")
def online_states_two_dimensional_scores():
    return list(online_attention_states(torch.randn(2, 5), torch.randn(5, 3), 2))


@refuses("scores")
def online_states_numpy():
    return list(online_attention_states(np.zeros(5), np.zeros((5, 3)), 2))


@refuses("mask")
def tiled_mask_requires_grad():
    mask = torch.zeros(4, 4, requires_grad=True)
    q = torch.randn(1, 4, 8)
    return tiled_attention(q, q, q, mask=mask)


@refuses("once_differentiable", "differentiable", "second")
def tiled_second_order():
    q = torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True)
    out = tiled_attention(q, q, q, block_q=2, block_k=2)
    (grad,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    return grad.sum().backward()  # a gradient penalty's second backward


@refuses("query")
def tiled_numpy():
    q = np.zeros((4, 8), np.float32)
    return tiled_attention(q, q, q)


@refuses("block_q")
def tiled_block_bool():
    q = torch.randn(4, 8)
    return tiled_attention(q, q, q, block_q=True)


@refuses("query", "key", "value")
def split_kv_numpy():
    q = np.zeros((2, 1, 8), np.float32)
    return split_kv_attention(q, q, q)


@refuses("query", "key")
def split_kv_widths_differ():
    return split_kv_attention(torch.randn(2, 1, 8), torch.randn(2, 5, 4), torch.randn(2, 5, 4))


@refuses("query", "key", "value")
def split_kv_dtypes_differ():
    return split_kv_attention(torch.randn(2, 1, 8), torch.randn(2, 5, 8).double(), torch.randn(2, 5, 8))


@refuses("query", "key", "heads")
def split_kv_heads_not_a_multiple():
    return split_kv_attention(torch.randn(1, 3, 1, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8))


@refuses("query", "key")
def split_kv_one_dimensional():
    return split_kv_attention(torch.randn(8), torch.randn(5, 8), torch.randn(5, 8))


@refuses("num_splits")
def split_kv_zero_splits():
    q = torch.randn(2, 1, 8)
    return split_kv_attention(q, q, q, num_splits=0)


@refuses("acc", "l", "m", "shape")
def merge_partials_shapes_differ():
    return merge_partials(torch.zeros(2, 1), torch.ones(2, 1), torch.zeros(2, 3),
                          torch.zeros(3, 1), torch.ones(3, 1), torch.zeros(3, 3))


@refuses("acc", "dtype")
def merge_partials_dtypes_differ():
    return merge_partials(torch.zeros(2, 1), torch.ones(2, 1), torch.zeros(2, 3),
                          torch.zeros(2, 1), torch.ones(2, 1), torch.zeros(2, 3, dtype=torch.float64))


@refuses("m_a", "tensor")
def merge_partials_floats():
    return merge_partials(0.0, 1.0, torch.zeros(3), 0.0, 1.0, torch.zeros(3))


# Triton (the interpreter on a machine without a GPU)

def _triton():
    from attention_book.triton_attention import triton_attention
    return triton_attention


@answers("key", "S")
def triton_no_keys():
    q = torch.randn(1, 1, 16, 16)
    k = torch.randn(1, 1, 0, 16)
    out = _triton()(q, k, k, block_q=16, block_k=16)
    return bool(torch.equal(out, torch.zeros_like(out)))


@answers("bfloat16", "11584")
def triton_bfloat16():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1, 16, 16, generator=gen).to(torch.bfloat16) for _ in range(3))
    out = _triton()(q, k, v, block_q=16, block_k=16)
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    return bool(torch.allclose(out.float(), expected, atol=3e-2, rtol=3e-2))


@refuses("query", "device")
def triton_meta():
    q = torch.zeros(1, 1, 16, 16, device="meta")
    return _triton()(q, q, q)


# Decoder and generation

@refuses("logits")
def greedy_all_masked_logits():
    return next_token(torch.full((1, 5), float("-inf")))


@refuses("logits")
def sampled_all_masked_logits():
    return next_token(torch.full((1, 5), float("-inf")), 1.0)


@refuses("logits")
def sampled_infinite_logits():
    return next_token(torch.tensor([[0.0, float("inf"), 1.0]]), 1.0)


@refuses("logits")
def next_token_one_dimensional_logits():
    return next_token(torch.zeros(5))


@refuses("caches")
def decode_one_by_one_without_caches():
    return decode_one_by_one(decoder(), torch.tensor([[1, 2, 3]]), None)


@refuses("tokens", "device")
def tokens_on_meta_model_on_cpu():
    return decoder()(torch.ones(1, 3, dtype=torch.long, device="meta"))


@refuses("tokens", "device")
def tokens_on_cpu_model_on_meta():
    return decoder().to("meta")(torch.ones(1, 3, dtype=torch.long))


@answers("tokens")
def uint8_tokens():
    model = decoder()
    tokens = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        return torch.equal(model(tokens.to(torch.uint8)), model(tokens))


@answers("tokens")
def int16_tokens():
    model = decoder()
    tokens = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        return torch.equal(model(tokens.to(torch.int16)), model(tokens))


@refuses("tokens")
def numpy_tokens():
    return decoder()(np.array([[1, 2, 3]]))


@refuses("tokens")
def list_tokens():
    return decoder()([[1, 2, 3]])


@answers("max_new_tokens")
def generate_no_new_tokens():
    prompt = torch.tensor([[1, 2, 3]])
    return torch.equal(generate(decoder(), prompt, 0), prompt)


@answers("max_new_tokens")
def generate_paged_no_new_tokens():
    prompt = torch.tensor([1, 2, 3])
    sequences, _ = generate_paged(decoder(), [prompt], 0)
    return torch.equal(sequences[0], prompt)


@refuses("prompts")
def generate_paged_tensor_not_list():
    return generate_paged(decoder(), torch.tensor([[1, 2, 3]]), 2)


@refuses("prompts")
def generate_paged_two_dimensional_prompt():
    return generate_paged(decoder(), [torch.tensor([[1, 2, 3]])], 2)


@refuses("block_size")
def generate_paged_block_size_zero():
    return generate_paged(decoder(), [torch.tensor([1, 2, 3])], 2, block_size=0)


@refuses("state_dict")
def from_gpt2_module():
    return from_gpt2(decoder(), 2)


@refuses("state_dict")
def from_gpt2_numpy_arrays():
    state = {name: tensor.numpy() for name, tensor in decoder().state_dict().items()}
    return from_gpt2({"transformer.wte.weight": state["token_embedding.weight"],
                      "transformer.wpe.weight": state["position_embedding.weight"],
                      "transformer.h.0.ln_1.weight": state["blocks.0.norm1.weight"]}, 2)


@refuses("num_heads")
def from_gpt2_heads_none():
    wte = torch.zeros(11, 8)
    return from_gpt2({"transformer.wte.weight": wte, "transformer.wpe.weight": torch.zeros(4, 8),
                      "transformer.h.0.ln_1.weight": torch.zeros(8)}, None)


@refuses("window", "cache")
def decoder_ring_caches_without_window():
    model = decoder()
    with torch.no_grad():
        return model(torch.tensor([[1, 2, 3]]), [RingKVCache(2) for _ in range(2)])


@refuses("context_length")
def decoder_prompt_too_long():
    return decoder()(torch.zeros(1, 30, dtype=torch.long))


# Positions

@refuses("start", "positions")
def rope_start_and_positions():
    x = torch.randn(3, 4)
    return apply_rope(x, start=5, positions=torch.arange(3))


@refuses("base")
def rope_base_infinite():
    return apply_rope(torch.randn(3, 4), base=float("inf"))


@refuses("base")
def rope_base_nan():
    return apply_rope(torch.randn(3, 4), base=float("nan"))


@refuses("slopes")
def alibi_column_slopes():
    return alibi_bias(torch.arange(3), torch.arange(3), alibi_slopes(2)[:, None])


@refuses("positions", "query_positions", "key_positions")
def alibi_float_positions():
    return alibi_bias(torch.arange(3.0), torch.arange(3.0), alibi_slopes(2))


@refuses("query_positions", "key_positions", "B")
def alibi_batches_differ():
    return alibi_bias(torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long), alibi_slopes(2))


@refuses("slopes")
def alibi_numpy_slopes():
    return alibi_bias(torch.arange(3), torch.arange(3), np.ones(2))


@refuses("max_length")
def learned_positions_negative():
    return LearnedPositions(-1, 4)


@refuses("width")
def learned_positions_zero_width():
    return LearnedPositions(4, 0)


@answers("positions")
def learned_positions_meta():
    table = LearnedPositions(8, 4).to("meta")
    return table(torch.zeros(1, 3, 4, device="meta")).device.type == "meta"


@refuses("start", "positions")
def learned_positions_negative_start():
    return LearnedPositions(8, 4)(torch.zeros(1, 3, 4), start=-1)


@refuses("width")
def sinusoidal_float_width():
    from attention_book.positions import sinusoidal_encoding
    return sinusoidal_encoding(4, 6.0)


@refuses("num_heads")
def alibi_slopes_float():
    return alibi_slopes(2.0)


# Interactive figures

@refuses("weights")
def explorer_infinite_weights():
    return attention_explorer(torch.tensor([[[1.0, float("inf")], [0.5, 0.5]]]), ["a", "b"], names=["h"],
                              name="x", title="t")._repr_html_()


@answers("scores")
def tiles_fully_masked_tile():
    import json
    scores = torch.tensor([float("-inf"), float("-inf"), 1.0, 2.0])
    page = tile_steps(scores, torch.eye(4), 2)._repr_html_()
    payload = page.split('<script type="application/json">')[1].split("</script>")[0]
    json.loads(payload, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    return True


@answers("scores")
def tiles_every_score_masked():
    import json
    page = tile_steps(torch.full((4,), float("-inf")), torch.eye(4), 2)._repr_html_()
    payload = page.split('<script type="application/json">')[1].split("</script>")[0]
    json.loads(payload, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    return True


@refuses("kind")
def figure_unknown_kind():
    return InteractiveFigure("heatmap", "x", "t", {}, "s")


@answers("prompt", "steps")
def kv_steps_past_999():
    figure = kv_cache_steps(prompt=998, steps=3, window=4, block_size=512, other_prompt=2)
    return figure.data["steps"][-1]["pool"][:3] == ["s0: p0-p511", "s0: p512-p1000", "s1: p0-p4"]


@refuses("prompt", "steps")
def kv_steps_float():
    return kv_cache_steps(prompt=2.5)


@refuses("values", "scores")
def tiles_values_too_short():
    return tile_steps(torch.randn(4), torch.randn(3, 2), 2)


@refuses("names", "weights")
def explorer_names_string():
    return attention_explorer(torch.rand(1, 2, 2), ["a", "b"], names="h", name="x", title="t")


# Elsewhere

@refuses("key_padding_mask")
def mask_from_torch_integer_padding():
    return ab.mask_from_torch(torch.zeros(3, 3), torch.tensor([[0, 0, 1]]))


@refuses("attn_mask")
def mask_from_torch_integer_attn_mask():
    return ab.mask_from_torch(torch.zeros(3, 3, dtype=torch.long))


@refuses("key_padding_mask")
def mask_from_torch_numpy_padding():
    return ab.mask_from_torch(key_padding_mask=np.zeros((1, 3), bool))


def induction_model(**changes):
    torch.manual_seed(0)
    return AttentionOnly(InductionConfig(vocab_size=8, half_length=4, embed_dim=8, num_heads=2, **changes)).eval()


@answers("cache", "window")
def induction_ring_without_window():
    """A layer without a window reads through a ring as with the ring's window, prefilled or one by one."""
    model = induction_model(positions="rope")
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        steps = decode_one_by_one(model, tokens, [RingKVCache(2, sinks=1) for _ in range(2)])
        prefill = model(tokens, caches=[RingKVCache(2, sinks=1) for _ in range(2)])[0]
    return bool(torch.allclose(steps, prefill, atol=1e-6))


@refuses("cache")
def induction_one_cache_for_both_layers():
    model = induction_model(positions="rope")
    cache = KVCache(8)
    with torch.no_grad():
        return model(torch.tensor([[1, 2, 3]]), caches=[cache, cache])


@refuses("caches")
def induction_one_cache_too_few():
    model = induction_model(positions="rope")
    with torch.no_grad():
        return model(torch.tensor([[1, 2, 3]]), caches=[KVCache(8)])


@refuses("weights")
def previous_token_score_three_axes():
    return previous_token_score(torch.rand(2, 4, 4))


@refuses("weights", "tokens")
def induction_score_batches_differ():
    tokens = torch.tensor([[1, 2, 1, 2], [3, 4, 3, 4]])
    return induction_score(torch.rand(3, 2, 4, 4), tokens, torch.tensor([2, 2]))


@refuses("weights", "tokens")
def induction_score_lengths_differ():
    tokens = torch.tensor([[1, 2, 1, 2]])
    return induction_score(torch.rand(1, 2, 5, 5), tokens, torch.tensor([2]))


@refuses("periods", "tokens")
def induction_score_periods_short():
    tokens = torch.tensor([[1, 2, 1, 2], [3, 4, 3, 4]])
    return induction_score(torch.rand(2, 2, 4, 4), tokens, torch.tensor([2]))


@answers("tokens")
def induction_uint8_tokens():
    model = induction_model()
    tokens = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        return torch.equal(model(tokens.to(torch.uint8))[0], model(tokens)[0])


@refuses("cache")
def keras_decoder_ring_cache():
    rng = np.random.default_rng(0)
    E, H, d, V = 4, 2, 2, 5
    w = {"embedding": rng.normal(size=(V, E)), "query_kernel": rng.normal(size=(E, H, d)),
         "query_bias": np.zeros((H, d)), "key_kernel": rng.normal(size=(E, H, d)), "key_bias": np.zeros((H, d)),
         "value_kernel": rng.normal(size=(E, H, d)), "value_bias": np.zeros((H, d)),
         "output_kernel": rng.normal(size=(H, d, E)), "output_bias": np.zeros(E),
         "dense_kernel": rng.normal(size=(E, V)), "dense_bias": np.zeros(V)}
    cache = RingKVCache(2)
    return [decoder_forward(w, np.array([[t]]), cache) for t in (1, 2, 3, 4)]


@refuses("seconds")
def tflops_negative_seconds():
    return attention_tflops(1, 2, 64, 16, -1.0, False)


@refuses("seconds")
def tflops_zero_seconds():
    return attention_tflops(1, 2, 64, 16, 0.0, False)


@refuses("length")
def tflops_negative_length():
    return attention_tflops(1, 2, -64, 16, 1.0, False)


@answers("num_kv_heads")
def decode_step_work_grouped_query():
    full = decode_step_work(decoder(num_kv_heads=None), 10, 1)
    grouped = decode_step_work(decoder(num_kv_heads=1), 10, 1)
    element = 4
    saved = 2 * CONFIG.num_layers * 10 * (CONFIG.embed_dim - CONFIG.embed_dim // CONFIG.num_heads) * element
    weights_saved = 2 * CONFIG.num_layers * (CONFIG.embed_dim - CONFIG.embed_dim // CONFIG.num_heads) \
        * (CONFIG.embed_dim + 1) * element
    return full["bytes_per_step"] - grouped["bytes_per_step"] == saved + weights_saved


@refuses("context")
def decode_step_work_negative_context():
    return decode_step_work(decoder(), -5, 1)


@refuses("kv_heads", "length")
def kv_cache_bytes_float_heads():
    from attention_book.kv_cache import kv_cache_bytes
    return kv_cache_bytes(2, 2.5, 4, 10, 2)


# course.check: the feedback describes the answer as it is

def _feedback(got, expected) -> str | None:
    from attention_book.course.feedback import difference
    return difference(got, expected)


@answers("bool")
def check_numpy_bool():
    message = _feedback(np.bool_(True), False) or ""
    return "np.True_" not in message and "True" in message and "False" in message


@answers("list")
def check_nested_list_for_an_array():
    message = _feedback([[1.0, 2.0], [3.0, 4.0]], np.zeros((2, 2))) or ""
    return "list" in message or "[0, 0]" in message


@answers("tuple")
def check_tuple_for_an_array():
    message = common.shape_problem((1.0, 2.0), (2,), "the result") or ""
    return "tuple" in message


@answers("list")
def check_list_for_a_tensor_shape():
    message = common.shape_problem([[1.0, 2.0]], (1, 2), "the result")
    return message is None or "list" in message


@answers("bool", "dtype")
def check_numpy_bool_mask():
    message = common.boolean_problem(np.ones((2, 2), bool)) or ""
    return "ndarray" in message and "torch.Tensor" in message


@answers("result")
def check_string_for_a_number():
    message = _feedback("1.0", 1.0) or ""
    return "str" in message


@answers("result")
def check_tuple_for_a_dict():
    message = _feedback((1, 2), {"a": 1}) or ""
    return "tuple" in message


@answers("result")
def check_none_for_a_list():
    message = _feedback(None, [1, 2]) or ""
    return "None" in message or "NoneType" in message


@answers("result")
def course_check_unknown_exercise():
    try:
        course.check("ch99.nothing", lambda: None)
    except KeyError as error:
        return "ch99.nothing" in str(error)
    return False


# Half precision, strided and empty inputs

@answers("x")
def latent_bfloat16_module():
    layer = LatentAttention(8, 2, 6, 4).to(torch.bfloat16).eval()
    with torch.no_grad():
        out, _ = layer(X8.to(torch.bfloat16))
    return out.dtype == torch.bfloat16 and bool(torch.isfinite(out).all())


@answers("query")
def strided_inputs_tiled():
    q = torch.randn(8, 4, 2)[..., 0]  # (8, 4), strided
    k = torch.randn(4, 8).T  # (8, 4) non-contiguous
    out = tiled_attention(q, k, k, block_q=3, block_k=3)
    expected, _ = ab.scaled_dot_product_attention(q, k, k)
    return bool(torch.allclose(out, expected, atol=1e-5))


@answers("key")
def split_kv_no_keys():
    q = torch.randn(2, 1, 8)
    out = split_kv_attention(q, torch.randn(2, 0, 8), torch.randn(2, 0, 8))
    return bool(torch.equal(out, torch.zeros(2, 1, 8)))


@answers("query")
def tiled_no_queries():
    return tiled_attention(torch.randn(0, 8), torch.randn(3, 8), torch.randn(3, 8)).shape == (0, 8)


@refuses("d", "width", "head_dim", "query")
def tiled_zero_width():
    return tiled_attention(torch.randn(3, 0), torch.randn(3, 0), torch.randn(3, 2))


@refuses("block_size")
def online_states_zero_block():
    return list(online_attention_states(torch.randn(4), torch.randn(4, 2), 0))


# More of the same kinds: 16-bit, meta, strided and empty inputs through the newer paths

@answers("keys")
def int8_append_nothing():
    cache = Int8KVCache(4)
    cache.append(torch.ones(1, 1, 2, 3), torch.ones(1, 1, 2, 3))
    keys, _ = cache.append(torch.ones(1, 1, 0, 3), torch.ones(1, 1, 0, 3))
    return len(cache) == 2 and keys.shape == (1, 1, 2, 3)


@answers("keys")
def paged_append_nothing():
    cache = PagedKVCache(BlockPool(4, 2), 1)
    cache.append(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    keys, _ = cache.append(torch.ones(1, 1, 0, 2), torch.ones(1, 1, 0, 2))
    return cache.lengths == [3] and keys.shape == (1, 1, 3, 2)


@answers("x")
def latent_cache_no_new_positions():
    layer = latent().eval()
    cache = KVCache(8)
    with torch.no_grad():
        layer(X8[:, :3], cache=cache)
        out, _ = layer(X8[:, :0], cache=cache)
    return out.shape == (1, 0, 8) and len(cache) == 3


@answers("x")
def latent_strided_input():
    layer = latent().eval()
    wide = torch.randn(1, 6, 16, dtype=torch.float64)[..., ::2]  # (1, 6, 8), strided
    with torch.no_grad():
        return torch.allclose(layer(wide)[0], layer(wide.contiguous())[0])


@answers("x")
def latent_decode_equals_full_in_float16():
    layer = LatentAttention(8, 2, 6, 4).to(torch.float16).eval()
    x = X8.to(torch.float16)
    with torch.no_grad():
        full, _ = layer(x)
        step = decode(layer, x, KVCache(8))
    return bool(torch.allclose(full.float(), step.float(), atol=1e-2))


@answers("query")
def tiled_bfloat16_backward():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 5, 8, generator=gen).to(torch.bfloat16).requires_grad_() for _ in range(3))
    tiled_attention(q, k, v, True, 2, 2).float().sum().backward()
    return q.grad.dtype == torch.bfloat16 and bool(torch.isfinite(q.grad).all())


@answers("query")
def tiled_meta():
    q = torch.zeros(1, 4, 8, device="meta")
    return tiled_attention(q, q, q, block_q=2, block_k=2).device.type == "meta"


@answers("query")
def split_kv_float16():
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, n, 8, generator=gen) for n in (1, 9, 9))
    out = split_kv_attention(q.half(), k.half(), v.half(), 3)
    expected, _ = ab.scaled_dot_product_attention(q, k, v)
    return out.dtype == torch.float16 and bool(torch.allclose(out.float(), expected, atol=1e-2))


@answers("query")
def split_kv_strided():
    k = torch.randn(2, 8, 18)[..., ::2]  # (2, 8, 9) strided, then transposed to (2, 9, 8)
    k = k.transpose(1, 2)
    q = torch.randn(2, 1, 8)
    out = split_kv_attention(q, k, k, 4)
    expected, _ = ab.scaled_dot_product_attention(q, k, k)
    return bool(torch.allclose(out, expected, atol=1e-5))


@answers("caches")
def ring_decoder_equals_full_window():
    model = decoder(window=3, sinks=1)
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    with torch.no_grad():
        return torch.allclose(decode_one_by_one(model, tokens, model.new_caches()), model(tokens), atol=1e-5)


@answers("prompts")
def generate_paged_equals_generate():
    model = decoder()
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4, 5])]
    sequences, _ = generate_paged(model, prompts, 3)
    return all(torch.equal(s, generate(model, p[None], 3)[0]) for s, p in zip(sequences, prompts, strict=True))


@refuses("temperature")
def generate_paged_negative_temperature():
    return generate_paged(decoder(), [torch.tensor([1, 2])], 2, temperature=-1.0)


@refuses("num_blocks", "block pool", "pool")
def generate_paged_too_few_blocks():
    return generate_paged(decoder(), [torch.tensor([1, 2, 3])], 4, block_size=2, num_blocks=1)


@refuses("int8", "window")
def ring_int8_caches():
    return decoder(window=3).new_caches(int8=True)


@answers("positions")
def rope_meta():
    return apply_rope(torch.zeros(2, 3, 4, device="meta"), start=2).device.type == "meta"


@answers("positions")
def rope_bfloat16_positions_per_sequence():
    x = torch.randn(2, 3, 4)
    out = apply_rope(x.to(torch.bfloat16), positions=torch.tensor([[0, 1, 2], [5, 6, 7]]))
    expected = torch.cat([apply_rope(x[:1]), apply_rope(x[1:], start=5)])
    return out.dtype == torch.bfloat16 and bool(torch.allclose(out.float(), expected, atol=3e-2))


@refuses("positions")
def rope_float_positions():
    return apply_rope(torch.randn(3, 4), positions=torch.arange(3.0))


@refuses("x")
def rope_integer_x():
    return apply_rope(torch.ones(3, 4, dtype=torch.long))


@answers("positions")
def alibi_empty():
    return alibi_bias(torch.arange(0), torch.arange(0), alibi_slopes(2)).shape == (2, 0, 0)


@refuses("weights", "names")
def explorer_too_few_names():
    return attention_explorer(torch.rand(2, 2, 2), ["a", "b"], names=["h"], name="x", title="t")


@refuses("name")
def figure_name_with_spaces():
    return InteractiveFigure("tiles", "a b", "t", {}, "s")


@refuses("block_size")
def tiles_block_float():
    return tile_steps(torch.randn(4), torch.randn(4, 2), 2.0)


@answers("scores")
def tiles_numpy_inputs():
    figure = tile_steps(np.array([0.1, 0.2, 0.3]), np.eye(3), 2)
    return len(figure.data["steps"]) == 2


@refuses("positions")
def induction_config_unknown_positions():
    return AttentionOnly(InductionConfig(positions="relative"))


@refuses("tokens")
def induction_tokens_out_of_range():
    return induction_model()(torch.tensor([[1, 9, 2]]))


@refuses("periods")
def induction_score_no_repeat():
    tokens = torch.tensor([[1, 2, 3, 4]])
    return induction_score(torch.rand(1, 2, 4, 4), tokens, torch.tensor([9]))


@refuses("tokens")
def keras_decoder_float_tokens():
    return decoder_forward({"embedding": np.zeros((5, 2))}, np.array([[1.0, 2.0]]))


@refuses("key_padding_mask")
def mask_from_torch_one_dimensional_padding():
    return ab.mask_from_torch(key_padding_mask=torch.zeros(3, dtype=torch.bool))


@refuses("mask")
def causal_module_integer_mask():
    return ab.MultiHeadAttention(8, 2)(X8.float(), mask=torch.ones(1, 1, 6, 6, dtype=torch.long))


@refuses("cache", "sequences", "batch")
def latent_paged_cache():
    with torch.no_grad():
        return latent().eval()(X8, cache=PagedKVCache(BlockPool(8, 4), 1))


@refuses("window")
def latent_window_zero():
    return latent(window=0)


@refuses("sinks")
def latent_sinks_without_window():
    return latent(sinks=2)


if __name__ == "__main__":
    verbose = "-v" in sys.argv
    found = run(verbose)
    total = sum(len(names) for names in found.values())
    print(f"{total} probes: {len(found['clear'])} clear, {len(found['silent'])} silent, "
          f"{len(found['obscure'])} obscure, 0 crashes")
    for verdict in ("silent", "obscure"):
        if found[verdict]:
            print(f"{verdict}: {', '.join(found[verdict])}")
