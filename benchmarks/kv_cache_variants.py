"""Chapter 7's measurements of today's cache variants: the time of one cached decode step against the number
of key/value heads, and against the context with and without a sliding window.

Run from the repository root (about a minute on a 2-core CPU):  .venv/bin/python benchmarks/kv_cache_variants.py
The result goes to src/attention_book/data/kv_cache_variants_cpu.json, which chapter 7 reads. Every
variant has its own model (the same sizes as the chapter's decoder, random weights: the cost does not
depend on their values) and its own caches, prefilled with the context; all the variants of a batch size
are timed in turn in one run, so that the machine's slow moments fall on all of them alike and their
times can be compared across heads and contexts.
"""

from dataclasses import replace

import torch
from tqdm import tqdm

from attention_book.decoder import Decoder, DecoderConfig
from attention_book.measure import interleaved_medians, machine, save_result

KV_HEADS = (4, 2, 1)  # the chapter's decoder has H = 4: multi-head, grouped (2 groups), multi-query
KV_CONTEXT = 1024
BATCHES = (1, 8)
WINDOW = 256
CONTEXTS = (128, 256, 512, 1024, 2048, 4096)
REPEATS = 40


def prefilled_step(config: DecoderConfig, context: int, batch: int):
    """One decode step of a model whose caches hold `context` positions of `batch` sequences, as a callable."""
    torch.manual_seed(0)
    model = Decoder(config).eval()
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, config.vocab_size, (batch, context), generator=generator)  # (B, T0)
    token = prompt[:, -1:]  # (B, 1): which token is fed does not change the cost
    caches = model.new_caches()
    with torch.inference_mode():
        model(prompt, caches)
    return lambda: model(token, caches), caches


def measure_batch(base: DecoderConfig, batch: int) -> tuple[list[dict], list[dict]]:
    """Every variant of one batch size timed in a single interleaved run, so that all of them, across key/value
    heads and across contexts, share the machine's slow and fast moments."""
    steps, held = {}, {}
    for kv in KV_HEADS:
        steps[("heads", kv)], _ = prefilled_step(replace(base, num_kv_heads=kv), KV_CONTEXT, batch)
    for context in tqdm(CONTEXTS, desc=f"prefilling, batch {batch}"):
        for kind, config in (("full", base), ("window", replace(base, window=WINDOW))):
            steps[(kind, context)], caches = prefilled_step(config, context, batch)
            held[(kind, context)] = sum(c.nbytes() for c in caches)
    seconds = interleaved_medians(steps, REPEATS, progress=True)
    heads = [{"batch": batch, "num_kv_heads": kv, "context": KV_CONTEXT, "seconds_per_step": seconds[("heads", kv)]}
             for kv in KV_HEADS]
    contexts = [{"batch": batch, "context": c, "seconds_full": seconds[("full", c)],
                 "seconds_window": seconds[("window", c)], "bytes_full": held[("full", c)],
                 "bytes_window": held[("window", c)]} for c in CONTEXTS]
    return heads, contexts


def main() -> None:
    base = DecoderConfig(context_length=max(CONTEXTS) + 2 * REPEATS)  # room for the timed steps' growth
    result = {"machine": machine(), "config": vars(base), "window": WINDOW, "repeats": REPEATS,
              "kv_heads": [], "context": []}
    for batch in BATCHES:
        heads, contexts = measure_batch(base, batch)
        result["kv_heads"] += heads
        result["context"] += contexts
    save_result(result, "kv_cache_variants_cpu", "src/attention_book/data")
    for row in result["kv_heads"]:
        print(f"batch {row['batch']}, {row['num_kv_heads']} key/value heads: "
              f"{row['seconds_per_step'] * 1e3:.2f} ms per step")
    for row in result["context"]:
        print(f"batch {row['batch']}, context {row['context']:5}: full {row['seconds_full'] * 1e3:6.2f} ms, "
              f"window {WINDOW}: {row['seconds_window'] * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
