"""GPT-2's own weights generating text through chapter 7's decoder, timed from outside (chapter 7).

Chapter 7's Colab cell downloads OpenAI's GPT-2 from the Hugging Face hub and hands its state dict and
tokenizer to `gpt2_generation`; everywhere else (CI, the rendered book) it hands None, and nothing runs.
"""

import textwrap

import torch

from ..decoder import from_gpt2, generate_steps
from .benchmark import time_steps

NEEDS_HUB = "GPT-2's weights come from the Hugging Face hub: this cell runs only in Colab."


def gpt2_generation(state_dict: dict | None, tokenizer, prompt: str, new_tokens: int, num_heads: int = 12,
                    width: int = 79) -> dict | None:
    """Greedy text from a GPT-2 state dict through `from_gpt2`, with and without the KV cache (chapter 7).

    `tokenizer` has GPT-2's `encode(str) -> list[int]` and `decode(list[int]) -> str`. Prints the tokens
    per second of each run and the text, wrapped to `width` columns; returns them. Without a state dict
    (no hub) prints that and returns None.
    """
    if state_dict is None:
        print(NEEDS_HUB)
        return None
    model = from_gpt2(state_dict, num_heads)
    tokens = torch.tensor([tokenizer.encode(prompt)])  # (1, T0)
    speed, sequences = {}, {}
    for use_cache in (True, False):
        seconds, sequences[use_cache] = time_steps(generate_steps(model, tokens, new_tokens, use_cache=use_cache))
        speed["with cache" if use_cache else "without cache"] = new_tokens / sum(seconds)
    assert torch.equal(sequences[True], sequences[False]), "the cache changed the tokens"
    config = model.config
    print(f"GPT-2: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, "
          f"{config.num_layers} layers of {num_heads} heads, a prompt of {tokens.shape[-1]} tokens")
    for name, rate in speed.items():
        print(f"{name:13}: {rate:6.1f} tokens/s")
    text = tokenizer.decode(sequences[True][0].tolist())
    print("\n".join(textwrap.fill(line, width) for line in text.splitlines()))
    return {"tokens_per_second": speed, "tokens": sequences[True], "text": text}
