"""Chapter 7's measurement: generation with and without the KV cache, 1024 new tokens, stored for the book.

A 256-token prompt (a paragraph of bytes), then 1024 greedy steps, three rounds of each kind in turn, on
one thread (as chapter 8's variant benchmark and chapter 7's profile). Every round's step times are
stored, so that the chapter takes ratios within a round (`round_ratios`) and gives their range over the
rounds; each step's median, lowest and highest over the rounds are stored too. The machine is shared:
its load average before and after the run is stored beside the result.
Run from the repository root (17.5 minutes in the stored run, on a loaded 2-core CPU):  .venv/bin/python benchmarks/kv_cache.py
The result goes to src/attention_book/data/kv_cache_cpu.json, which chapter 7 plots.
"""

from time import perf_counter

import torch

from attention_book.decoder import Decoder, DecoderConfig
from attention_book.measure import load_average, measure_generation, round_ratios, save_result

NEW_TOKENS = 1024
PROMPT_LENGTH = 256
ROUNDS = 3


def main() -> None:
    torch.set_num_threads(1)  # as the variant benchmark: one thread per process on a shared machine
    torch.manual_seed(0)
    model = Decoder(DecoderConfig()).eval()  # random weights: the cost does not depend on their values
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT_LENGTH))  # (B, T0)
    before, start = load_average(), perf_counter()
    result = measure_generation(model, prompt, NEW_TOKENS, rounds=ROUNDS)
    result["machine"].update(
        load_before=before, load_after=load_average(), minutes=(perf_counter() - start) / 60,
        load=("shared: other jobs ran on the same 2 cores while this was measured; every round's step "
              "times, and each step's median, lowest and highest over the interleaved rounds"))
    save_result(result, "kv_cache_cpu", "src/attention_book/data")
    totals = {mode: [sum(run) for run in runs] for mode, runs in result["seconds_per_round"].items()}
    median, low, high = round_ratios(totals, "uncached", "cached")
    print(f"{NEW_TOKENS} tokens: the cache {median:.1f}x faster (rounds {low:.1f}-{high:.1f}), "
          f"{result['machine']['minutes']:.1f} minutes")


if __name__ == "__main__":
    main()
