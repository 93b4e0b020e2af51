"""Chapter 7's decoder against transformers' GPT-2: the same model, the same greedy tokens, timed.

Chapter 7's model (DecoderConfig()'s sizes, random weights) is built as a Hugging Face GPT2LMHeadModel
and copied into the package's Decoder with `from_gpt2`. Both generate the same tokens after a 256-token
prompt: the package's `generate` with its KV cache, and transformers' `generate` with its default
(dynamic) cache, with its static cache, and with its static cache under `torch.compile` (which
`generate` does only on accelerators unless its CompileConfig says all devices; the first call compiles,
and its time is stored). The four take turns, ROUNDS times, and each keeps its median
(the machine is shared: interleaving spreads its slow moments over all four); every round's times are
stored, and each ratio with its range over the rounds. Beside them, the floor of
a cached step: its FLOPs over this CPU's large-matmul FLOP/s, and its bytes over its copy bandwidth, both
measured in the same interleaved rounds, so that they see the machine as loaded as the generations do.
The bytes' time is a floor only where they must come from memory: this model's weights and cache (about
16 MB) would fit in the profile run's 32 MiB last-level cache, which re-reads them faster; this run records
no cache size. The machine's load is stored before and after the run.

Run from the repository root (a few minutes on a 2-core CPU):  .venv/bin/python benchmarks/gpt2_generate.py
The result goes to src/attention_book/data/gpt2_generate_cpu.json, which chapter 7 quotes.
"""

import os
import platform
import statistics
import tempfile
import time
from functools import partial

# A fresh compile cache, so that the compiled generation's first call (stored) is a cold compile, as a
# reader's first run is; set before torch is imported, which reads it.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpt2_generate_inductor_")

import torch
import transformers
from transformers import CompileConfig, GPT2Config, GPT2LMHeadModel

from attention_book.decoder import DecoderConfig, from_gpt2, generate
from attention_book.measure import interleaved_times, load_average, machine, round_ratios, save_result
from attention_book.measure.profile import decode_step_work

PROMPT_LENGTH = 256
NEW_TOKENS = 256
ROUNDS = 11
# One thread. On a shared 2-core machine two threads of one process wait for each other whenever the
# other is descheduled: under a load of 18, a cached step of this model took 206 ms with two threads and
# 16 ms with one. One thread measures the code, not the scheduler.
THREADS = 1
MATMUL = 1024  # the floor's reference: a (1024, 1024) @ (1024, 1024) float32 product
COPY_MB = 256  # and copying 256 MiB of float32


def cpu_name() -> str:
    """The processor's model name (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as file:
            names = [line.split(":", 1)[1].strip() for line in file if line.startswith("model name")]
        return names[0] if names else platform.processor()
    except OSError:
        return platform.processor() or platform.machine()


def compile_everywhere() -> CompileConfig:
    """transformers' default compile settings, allowed on a CPU too (its `_compile_all_devices`)."""
    config = CompileConfig()
    config._compile_all_devices = True  # the switch `generate` reads; not an __init__ argument
    return config


def main() -> None:
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    config = DecoderConfig()  # chapter 7's sizes
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=config.vocab_size, n_positions=config.context_length,
                                    n_embd=config.embed_dim, n_layer=config.num_layers, n_head=config.num_heads,
                                    tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)).eval()
    ours = from_gpt2(hf.state_dict(), config.num_heads)
    assert ours.config == config, (ours.config, config)  # chapter 7's model exactly
    prompt = torch.randint(0, config.vocab_size, (1, PROMPT_LENGTH))  # (B, T0)
    hf_generate = partial(hf.generate, prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                          do_sample=False)
    functions = {"package": partial(generate, ours, prompt, NEW_TOKENS),
                 "transformers": hf_generate,
                 "transformers_static": partial(hf_generate, cache_implementation="static"),
                 "transformers_compiled": partial(hf_generate, cache_implementation="static",
                                                  compile_config=compile_everywhere())}
    tokens, first_call = {}, {}
    with torch.inference_mode():
        for name, fn in functions.items():  # the compiled one compiles here, before the timed rounds
            start = time.perf_counter()
            tokens[name] = fn()
            first_call[name] = time.perf_counter() - start
    for name, sequence in tokens.items():  # otherwise the times would compare different work
        assert torch.equal(sequence, tokens["package"]), f"{name} generated other tokens"
    a, b = torch.ones(MATMUL, MATMUL), torch.ones(MATMUL, MATMUL)
    source = torch.ones(COPY_MB * 2**20 // 4)
    target = torch.empty_like(source)
    references = {"matmul": partial(torch.matmul, a, b), "copy": partial(target.copy_, source)}
    load_before = load_average()
    per_round = interleaved_times(functions | references, repeats=ROUNDS)  # the machine's ceilings, same moments
    load_after = load_average()
    seconds = {name: statistics.median(times) for name, times in per_round.items()}
    gflops = 2 * MATMUL**3 / seconds.pop("matmul") / 1e9
    gbs = 2 * source.nbytes / seconds.pop("copy") / 1e9  # read once, write once
    work = decode_step_work(ours, PROMPT_LENGTH + NEW_TOKENS // 2, batch=1)  # a step in the middle
    per_token = {name: s / NEW_TOKENS for name, s in seconds.items()}
    floor = {"arithmetic": work["flops_per_step"] / (gflops * 1e9), "memory": work["bytes_per_step"] / (gbs * 1e9)}
    result = {"machine": machine() | {"cpu": cpu_name(), "cpu_count": os.cpu_count(),
                                      "transformers": transformers.__version__},
              "prompt_length": PROMPT_LENGTH, "new_tokens": NEW_TOKENS, "rounds": ROUNDS,
              "parameters": sum(p.numel() for p in ours.parameters()),
              "seconds": seconds, "seconds_per_token": per_token,
              "ratio": {name: seconds["package"] / s for name, s in seconds.items() if name != "package"},
              "ratio_per_round": {name: dict(zip(("median", "lowest", "highest"),
                                                 round_ratios(per_round, "package", name), strict=True))
                                  for name in functions if name != "package"},
              "compiled_over_static_per_round": dict(zip(("median", "lowest", "highest"), round_ratios(
                  per_round, "transformers_compiled", "transformers_static"), strict=True)),
              "first_call_seconds": first_call,
              "seconds_per_round": per_round, "load_before": load_before, "load_after": load_after,
              **work, "matmul_gflop_per_s": gflops, "copy_gb_per_s": gbs, "floor_seconds_per_token": floor,
              "floor_fraction": {name: max(floor.values()) / s for name, s in per_token.items()}}
    save_result(result, "gpt2_generate_cpu", "src/attention_book/data")
    for name, s in per_token.items():
        print(f"{name:20} {s * 1e3:6.2f} ms per token, {result['floor_fraction'][name]:.1%} of it the floor")
    for name, ratio in result["ratio_per_round"].items():
        print(f"package / {name}: {ratio['median']:.2f} per round (range {ratio['lowest']:.2f}-{ratio['highest']:.2f})")
    compiled = result["compiled_over_static_per_round"]
    print(f"compiled / eager static cache: {compiled['median']:.2f} per round "
          f"(range {compiled['lowest']:.2f}-{compiled['highest']:.2f}); first call {first_call}")
    print(f"floor per token: {floor['arithmetic'] * 1e6:.0f} µs of arithmetic ({work['flops_per_step'] / 1e6:.1f} MFLOP "
          f"at {gflops:.0f} GFLOP/s), {floor['memory'] * 1e6:.0f} µs of memory "
          f"({work['bytes_per_step'] / 1e6:.1f} MB at {gbs:.0f} GB/s)")


if __name__ == "__main__":
    main()
