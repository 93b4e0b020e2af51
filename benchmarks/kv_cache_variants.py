"""Chapter 7's measurements of today's cache variants: the time of one cached decode step against the number
of key/value heads, and against the context with and without a sliding window.

Run from the repository root (about three minutes on a 2-core CPU):  .venv/bin/python benchmarks/kv_cache_variants.py
The result goes to src/attention_book/data/kv_cache_variants_cpu.json, which chapter 7 reads. Every
variant has its own model (the same sizes as the chapter's decoder, random weights: the cost does not
depend on their values) and its own caches, prefilled with the context; the variants' steps are timed in
turn, so that the machine's slow moments fall on all of them alike.
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


def step_against_kv_heads(base: DecoderConfig) -> list[dict]:
    rows = []
    for batch in tqdm(BATCHES, desc="key/value heads"):
        steps = {kv: prefilled_step(replace(base, num_kv_heads=kv), KV_CONTEXT, batch)[0] for kv in KV_HEADS}
        seconds = interleaved_medians(steps, REPEATS, progress=False)
        rows += [{"batch": batch, "num_kv_heads": kv, "context": KV_CONTEXT, "seconds_per_step": seconds[kv]}
                 for kv in KV_HEADS]
    return rows


def step_against_context(base: DecoderConfig, batch: int) -> list[dict]:
    rows = []
    for context in tqdm(CONTEXTS, desc=f"context, batch {batch}"):
        full, full_caches = prefilled_step(base, context, batch)
        windowed, ring_caches = prefilled_step(replace(base, window=WINDOW), context, batch)
        seconds = interleaved_medians({"full": full, "window": windowed}, REPEATS, progress=False)
        rows.append({"batch": batch, "context": context, "seconds_full": seconds["full"],
                     "seconds_window": seconds["window"],
                     "bytes_full": sum(c.nbytes() for c in full_caches),
                     "bytes_window": sum(c.nbytes() for c in ring_caches)})
    return rows


def main() -> None:
    base = DecoderConfig(context_length=max(CONTEXTS) + 2 * REPEATS)  # room for the timed steps' growth
    result = {"machine": machine(), "config": vars(base), "window": WINDOW, "repeats": REPEATS,
              "kv_heads": step_against_kv_heads(base),
              "context": step_against_context(base, 1) + step_against_context(base, 8)}
    save_result(result, "kv_cache_variants_cpu", "src/attention_book/data")
    for row in result["kv_heads"]:
        print(f"batch {row['batch']}, {row['num_kv_heads']} key/value heads: "
              f"{row['seconds_per_step'] * 1e3:.2f} ms per step")
    for row in result["context"]:
        print(f"batch {row['batch']}, context {row['context']:5}: full {row['seconds_full'] * 1e3:6.2f} ms, "
              f"window {WINDOW}: {row['seconds_window'] * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
