"""What one cached decode step spends its time on: operator calls, bytes read, FLOPs (chapter 7).

Profiled from outside: the decoder runs through chapter 7's `generate_steps`, and torch.profiler counts
the PyTorch operators it dispatches.
"""

import statistics
from functools import partial

import torch
from torch.profiler import ProfilerActivity, profile

from ..attention import validate_positive
from ..decoder import Decoder, generate_steps
from .benchmark import interleaved_times, rate_spread, spread, time_steps


def decode_step_profile(model: Decoder, context: int, batch: int, steps: int = 24) -> dict:
    """Cached decode steps of `batch` sequences after a prompt of `context` tokens: the median step's
    seconds with the quartiles over the steps, operator calls per step, the heaviest operators, and bytes
    and FLOPs per step (chapter 7)."""
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (batch, context), generator=generator)  # (B, T0)
    timed = generate_steps(model, prompt, steps + 1)
    next(timed)  # the prefill, not a decode step
    seconds, _ = time_steps(timed)
    profiled = generate_steps(model, prompt, steps + 1)
    next(profiled)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in profiled:
            pass
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    top_level = [e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    heaviest = sorted(prof.key_averages(), key=lambda a: a.self_cpu_time_total, reverse=True)[:6]
    step = statistics.median(seconds)
    work = decode_step_work(model, context + steps // 2, batch)
    return {"context": context, "batch": batch, "steps": steps, "seconds_per_step": step,
            "seconds_spread": spread(seconds),
            "operator_calls_per_step": len(top_level) / steps, "aten_calls_per_step": len(events) / steps,
            "heaviest_ops": [{"name": a.key, "calls_per_step": a.count / steps,
                              "self_ms_per_step": a.self_cpu_time_total / 1e3 / steps} for a in heaviest],
            **work, "gb_per_s": work["bytes_per_step"] / step / 1e9, "gflop_per_s": work["flops_per_step"] / step / 1e9}


def decode_step_work(model: Decoder, context: int, batch: int) -> dict:
    """Bytes a decode step must read and FLOPs it must do, at `context` cached positions (chapter 7).

    Every weight matrix is read once per step whatever the batch (embeddings: one row per sequence); the
    cache is read for every sequence. Each multiply-add of a weight is 2 FLOPs per sequence, and attention
    adds q·k and p·v over the context: 4 · S · E per layer and sequence. The cache holds
    `cached_numbers` per position and layer: fewer with grouped-query or latent attention.
    """
    validate_positive(batch=batch)
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise ValueError(f"context must be a number of cached positions ≥ 0, got {context!r}")
    config = model.config
    embeddings = model.token_embedding.weight.numel() + model.position_embedding.weight.numel()
    weights = sum(p.numel() for p in model.parameters()) - embeddings  # read whole at every step
    element = next(model.parameters()).element_size()
    cache = config.num_layers * batch * context * cached_numbers(config)  # every layer's cache
    bytes_read = element * (weights + cache + 2 * batch * config.embed_dim)
    flops = 2 * batch * weights + 4 * config.num_layers * batch * context * config.embed_dim
    return {"bytes_per_step": bytes_read, "flops_per_step": flops}


def cached_numbers(config) -> int:
    """Numbers one layer caches per position and sequence: keys and values of the H_kv key/value heads,
    2 · H_kv · E/H (2E without grouped queries), or one latent and one rope key, d_c + d_r (chapters 7 and 8)."""
    if config.latent_dim is not None:
        return config.latent_dim + config.rope_dim
    return 2 * (config.num_kv_heads or config.num_heads) * (config.embed_dim // config.num_heads)


def matmul_throughput(size: int = 1024, repeats: int = 9) -> dict:
    """GFLOP/s of a large float32 matrix product on this machine, a ceiling for arithmetic: median and
    quartiles over `repeats` timings."""
    a, b = torch.ones(size, size), torch.ones(size, size)
    seconds = interleaved_times({"matmul": partial(torch.matmul, a, b)}, repeats, progress=False)["matmul"]
    return rate_spread(2 * size**3 / 1e9, seconds)


def copy_bandwidth(megabytes: int = 256, repeats: int = 9) -> dict:
    """GB/s this machine moves copying a large float32 tensor, every byte counted twice (read once, written
    once), a ceiling for memory traffic: median and quartiles over `repeats` timings (chapter 7)."""
    return memory_bandwidth(megabytes, repeats)["copy"]


def memory_bandwidth(megabytes: int = 256, repeats: int = 9) -> dict:
    """GB/s of two streams over a large float32 tensor, taking turns in each of `repeats` rounds (chapter 7):
    a copy, every byte counted twice (read once, written once), and a read-only stream (a sum), every byte
    counted once. Median and quartiles of each, and the read's rate over the copy's within each round
    (median, lowest, highest): memory's bandwidth is shared by reads and writes, so a stream that only
    reads is compared with the copy's whole rate, not half of it."""
    validate_positive(megabytes=megabytes, repeats=repeats)
    source = torch.ones(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    functions = {"copy": partial(target.copy_, source), "read": partial(torch.sum, source)}
    seconds = interleaved_times(functions, repeats, progress=False)
    ratios = sorted(c / (2 * r) for c, r in zip(seconds["copy"], seconds["read"], strict=True))
    return {"copy": rate_spread(2 * source.nbytes / 1e9, seconds["copy"]),  # read once, write once
            "read": rate_spread(source.nbytes / 1e9, seconds["read"]),  # read once
            "read_over_copy": {"median": statistics.median(ratios), "lowest": ratios[0], "highest": ratios[-1]}}
