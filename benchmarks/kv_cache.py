"""Chapter 7's measurement: generation with and without the KV cache, 1024 new tokens, stored for the book.

A 256-token prompt (a paragraph of bytes), then 1024 greedy steps, three rounds of each kind in turn; each
step's median over the rounds is stored with its lowest and highest.
Run from the repository root (about 5 minutes on a 2-core CPU):  .venv/bin/python benchmarks/kv_cache.py
The result goes to src/attention_book/data/kv_cache_cpu.json, which chapter 7 plots.
"""

import torch

from attention_book.measure import measure_generation, save_result
from attention_book.decoder import Decoder, DecoderConfig

NEW_TOKENS = 1024
PROMPT_LENGTH = 256


def main() -> None:
    torch.manual_seed(0)
    model = Decoder(DecoderConfig()).eval()  # random weights: the cost does not depend on their values
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT_LENGTH))  # (B, T0)
    result = measure_generation(model, prompt, NEW_TOKENS)
    result["machine"]["load"] = ("shared: other jobs ran on the same 2 cores while this was measured; "
                                 "each step's median, lowest and highest over the interleaved rounds")
    save_result(result, "kv_cache_cpu", "src/attention_book/data")
    cached, uncached = (sum(result["seconds_per_step"][k]) for k in ("cached", "uncached"))
    print(f"{NEW_TOKENS} tokens: {uncached:.1f} s without the cache, {cached:.1f} s with it, "
          f"{uncached / cached:.1f}x faster")


if __name__ == "__main__":
    main()
