"""Chapter 8's measurements of today's cache variants: the time of one cached decode step against the number
of key/value heads, against the context with and without a sliding window, and at a long context for
multi-head, grouped-query, multi-query and multi-head latent attention and an int8 cache; the bytes per
token each variant's cache buffers hold; and the int8 cache's error over a long decode.

Run from the repository root (a few minutes on a 2-core CPU):  .venv/bin/python benchmarks/kv_cache_variants.py
(with --reuse-int8-error the int8 error, which does not depend on timing, is taken from the stored result)
The result goes to src/attention_book/data/kv_cache_variants_cpu.json, which chapters 7 and 8 read. Every
variant has its own model (the same sizes as the chapter's decoder, random weights: the cost does not
depend on their values) and its own caches, filled with `context` random positions and sized to them (plus room for the
timed steps). Each call appends a position, so round k (after one warm-up call) reads context + k + 1
positions: the median round about REPEATS / 2 more than the context, which chapter 8 prints. All the variants of a batch size
take turns in one interleaved run of REPEATS rounds, so that the machine's slow moments fall on all of
them alike; every row stores the median and the quartiles of its REPEATS timings. The machine was shared
with other jobs while this ran (the stored result predates the load_before/load_after record; a re-run
adds it): compare ratios within one batch size whose ranges do not overlap, never
absolute times across runs. Two rows time the same configuration on purpose (the full cache at the
longest context, and "MHA" among the variants): their gap shows how far identical work can drift.
In the context rows, `cache_bytes_full` is what a full cache's step reads (the context's keys and values);
`held_full` and `held_window` are the bytes the prefilled caches' buffers hold, room for the timed steps
and the whole ring of the window included (so at a context below the window the ring holds more than it
reads). The copy's quartiles are of its rate: q1 the slower.
"""

import math
import sys
from dataclasses import replace
from types import MethodType

import torch
from tqdm import tqdm

from attention_book.decoder import Decoder, DecoderConfig, next_token
from attention_book.latent import masked_softmax
from attention_book.kv_cache import kv_cache_bytes
from attention_book.measure import load_average, load_result, machine, save_result
from attention_book.measure.benchmark import interleaved_times, spread

KV_HEADS = (4, 2, 1)  # the chapter's decoder has H = 4: multi-head, grouped (2 groups), multi-query
KV_CONTEXT = 1024
BATCHES = (1, 8)
WINDOW = 256
CONTEXTS = (128, 256, 512, 1024, 2048, 4096)
REPEATS = 40
LONG_CONTEXT = 4096  # the variants side by side at this context
LATENT = {"latent_dim": 128, "rope_dim": 32}  # MLA at this width: d_c = 2·d_h, d_r = d_h / 2
VARIANTS = {  # name -> (config changes, int8 cache)
    "MHA": ({}, False), "GQA": ({"num_kv_heads": 2}, False), "MQA": ({"num_kv_heads": 1}, False),
    "MLA": (LATENT, False), "MHA int8": ({}, True),
}
BROADCAST = "MLA, broadcast"  # the absorbed step as the package wrote it before: the latent copied per head
LOAD = ("shared: other jobs ran on the same 2 cores while this was measured; medians and quartiles of "
        "interleaved rounds, ratios within one batch size")
COPY_MB = 64  # the copy timed beside the steps (its quartiles swap: a slow copy is a low rate)
INT8_STEPS = 1024  # the int8 cache's error is followed over this many decode steps


def prefilled_step(config: DecoderConfig, context: int, batch: int, int8: bool = False, broadcast: bool = False):
    """One decode step of a model whose caches hold `context` positions of `batch` sequences, as a callable;
    with `broadcast`, an MLA model whose absorbed step is the old broadcasting one. The caches are filled
    with random keys and values of the layers' shapes rather than by a prefill: what a step costs does not
    depend on the numbers it reads, and a prefill of 8 × 4096 tokens per variant would take most of the run."""
    torch.manual_seed(0)
    config = replace(config, context_length=context + REPEATS + 2)  # the cache holds what a step reads
    model = Decoder(config).eval()
    for block in model.blocks if broadcast else ():
        block.attention.absorbed_attention = MethodType(broadcast_absorbed, block.attention)
    generator = torch.Generator().manual_seed(1)
    token = torch.randint(0, config.vocab_size, (batch, 1), generator=generator)  # (B, 1): any token costs the same
    caches = model.new_caches(int8=int8)
    d_h = config.embed_dim // config.num_heads
    if config.latent_dim:  # MLA: a latent (B, 1, S, d_c) and a rope key (B, 1, S, d_r) per position
        shapes = ((batch, 1, context, config.latent_dim), (batch, 1, context, config.rope_dim))
    else:  # keys and values (B, H_kv, S, d_h)
        shapes = ((batch, config.num_kv_heads or config.num_heads, context, d_h),) * 2
    with torch.inference_mode():
        for cache in caches:
            cache.append(*(torch.randn(shape, generator=generator) for shape in shapes))
    return lambda: model(token, caches), caches


def broadcast_absorbed(layer, x, q_r, c, k_r, mask):
    """`LatentAttention.absorbed_attention` before the fix, kept to measure it: q (B, H, 1, ·) times the
    latents (B, 1, S, ·) makes `torch.matmul` expand them to (B, H, S, ·), a copy per head."""
    w_q, w_out = layer.absorbed_weights()  # (H, d_c, E), (H, E, d_c)
    q_lat = torch.einsum("hce,bte->bhtc", w_q, x)  # (B, H, T, d_c)
    scores = q_lat @ c.mT + q_r @ k_r.mT  # (B, H, T, S): c broadcast over H
    weights = masked_softmax(scores / math.sqrt(layer.d_h + layer.d_r), mask)
    out = torch.einsum("hec,bhtc->bte", w_out, weights @ c)  # (B, T, E)
    return out + layer.out_proj.bias


def bytes_per_token(base: DecoderConfig) -> dict:
    """Bytes per position of every variant's caches, read from their buffers (all layers, one sequence)."""
    result = {}
    for name, (changes, int8) in VARIANTS.items():
        model = Decoder(replace(base, **changes)).eval()
        caches = model.new_caches(int8=int8)
        with torch.inference_mode():
            model(torch.zeros(1, 1, dtype=torch.long), caches)
        result[name] = sum(c.nbytes() for c in caches) / base.context_length
    return result


@torch.inference_mode()
def int8_error(base: DecoderConfig) -> dict:
    """Greedy decode of INT8_STEPS tokens with float32 caches; the same tokens fed to a twin with int8 caches.
    At each step, the largest difference of the last layer's attention output and of the logits, each
    relative to the float32 run's largest entry."""
    torch.manual_seed(0)
    model = Decoder(replace(base, context_length=INT8_STEPS + 16)).eval()
    outputs = []
    hook = model.blocks[-1].attention.register_forward_hook(lambda module, args, out: outputs.append(out[0]))
    exact, small = model.new_caches(), model.new_caches(int8=True)
    token = torch.randint(0, base.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    model(token, exact), model(token, small)
    token = torch.zeros(1, 1, dtype=torch.long)
    attention, logits = [], []
    for _ in tqdm(range(INT8_STEPS), desc="int8 decode"):
        outputs.clear()
        a, b = model(token, exact)[:, -1], model(token, small)[:, -1]  # (B, V) each
        attention.append(((outputs[1] - outputs[0]).abs().max() / outputs[0].abs().max()).item())
        logits.append(((b - a).abs().max() / a.abs().max()).item())
        token = next_token(a)  # (B, 1): both runs are fed the float32 run's choice
    hook.remove()
    return {"steps": INT8_STEPS, "relative_attention_error": attention, "relative_logit_error": logits}


def measure_batch(base: DecoderConfig, batch: int) -> tuple[list[dict], list[dict], list[dict], dict]:
    """Every variant of one batch size timed in a single interleaved run, so that all of them, across key/value
    heads and across contexts, share the machine's slow and fast moments."""
    steps, held = {}, {}
    for kv in KV_HEADS:
        steps[("heads", kv)], _ = prefilled_step(replace(base, num_kv_heads=kv), KV_CONTEXT, batch)
    for context in tqdm(CONTEXTS, desc=f"prefilling, batch {batch}"):
        for kind, config in (("full", base), ("window", replace(base, window=WINDOW))):
            steps[(kind, context)], caches = prefilled_step(config, context, batch)
            held[(kind, context)] = sum(c.nbytes() for c in caches)
    for name, (changes, int8) in tqdm(VARIANTS.items(), desc=f"variants at {LONG_CONTEXT}, batch {batch}"):
        steps[("long", name)], _ = prefilled_step(replace(base, **changes), LONG_CONTEXT, batch, int8)
    steps[("long", BROADCAST)], _ = prefilled_step(replace(base, **LATENT), LONG_CONTEXT, batch, broadcast=True)
    source = torch.ones(COPY_MB * 2**20 // 4)  # a copy in the same rounds: the memory speed of this run
    target = torch.empty_like(source)
    steps[("copy",)] = lambda: target.copy_(source)
    times = interleaved_times(steps, REPEATS, progress=True)
    timed = {key: spread(seconds) for key, seconds in times.items()}
    rate = {k: 2 * source.nbytes / v / 1e9 for k, v in timed[("copy",)].items()}  # read + write
    # a rate is the inverse of a time: the slow quartile of the times is the low quartile of the rates
    copy = {"batch": batch, "megabytes": COPY_MB,
            "gb_per_s": {"median": rate["median"], "q1": rate["q3"], "q3": rate["q1"]}}
    long = [{"batch": batch, "variant": name, "context": LONG_CONTEXT, **timed[("long", name)]}
            for name in (*VARIANTS, BROADCAST)]
    heads = [{"batch": batch, "num_kv_heads": kv, "context": KV_CONTEXT, **timed[("heads", kv)],
              "cache_bytes": kv_cache_bytes(base.num_layers, kv, base.embed_dim // base.num_heads, KV_CONTEXT, 4,
                                            batch=batch)} for kv in KV_HEADS]
    contexts = [{"batch": batch, "context": c, "full": timed[("full", c)], "window": timed[("window", c)],
                 "cache_bytes_full": kv_cache_bytes(base.num_layers, base.num_heads, base.embed_dim // base.num_heads,
                                                    c, 4, batch=batch),
                 "held_full": held[("full", c)], "held_window": held[("window", c)]} for c in CONTEXTS]
    return heads, contexts, long, copy


def main() -> None:
    torch.set_num_threads(1)  # the machine is shared: one thread per process waits less for the others
    base = DecoderConfig(context_length=max(CONTEXTS) + 2 * REPEATS)  # each step's model is sized to its context
    before = load_average()  # stored beside the timings: the machine is shared
    if "--reuse-int8-error" in sys.argv:  # deterministic (same code, seeds and machine): the stored one
        error = load_result("kv_cache_variants_cpu")["int8_error"]
    else:
        error = int8_error(base)
    result = {"machine": {**machine(), "load": LOAD}, "config": vars(base), "window": WINDOW, "repeats": REPEATS,
              "latent": LATENT, "kv_heads": [], "context": [], "long_context": [], "copy": [],
              "bytes_per_token": bytes_per_token(base), "int8_error": error}
    for batch in BATCHES:
        heads, contexts, long, copy = measure_batch(base, batch)
        result["copy"].append(copy)
        result["kv_heads"] += heads
        result["context"] += contexts
        result["long_context"] += long
    result["machine"]["load_before"], result["machine"]["load_after"] = before, load_average()
    save_result(result, "kv_cache_variants_cpu", "src/attention_book/data")
    for row in result["kv_heads"]:
        print(f"batch {row['batch']}, {row['num_kv_heads']} key/value heads: {row['median'] * 1e3:.2f} ms "
              f"({row['q1'] * 1e3:.2f}-{row['q3'] * 1e3:.2f})")
    for row in result["long_context"]:
        print(f"batch {row['batch']}, {row['variant']:14} at {LONG_CONTEXT}: {row['median'] * 1e3:7.2f} ms "
              f"({row['q1'] * 1e3:.2f}-{row['q3'] * 1e3:.2f})")
    print("bytes per token:", result["bytes_per_token"])
    print("int8, largest relative error of the attention output:", max(result["int8_error"]["relative_attention_error"]))
    for row in result["context"]:
        print(f"batch {row['batch']}, context {row['context']:5}: full {row['full']['median'] * 1e3:6.2f} ms, "
              f"window {WINDOW}: {row['window']['median'] * 1e3:6.2f} ms")

if __name__ == "__main__":
    main()
