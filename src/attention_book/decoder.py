"""A small GPT-style decoder built from the package, and text generation with and without a KV cache (chapter 7).

`from_gpt2` pours a Hugging Face GPT-2's weights into the same decoder.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

from .causal import CausalSelfAttention
from .attention import validate_positive
from .kv_cache import BlockPool, Int8KVCache, KVCache, PagedKVCache, RingKVCache
from .latent import LatentAttention
from .multihead import validate_dropout


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of chapter 7's decoder; the defaults give about 3.6 million parameters."""

    vocab_size: int = 256  # V: one token per byte
    context_length: int = 1280  # longest sequence (a 256-token prompt + 1024 new): positions, cache length
    embed_dim: int = 256  # E
    num_heads: int = 4  # H, so E/H = 64
    num_layers: int = 4
    dropout: float = 0.0  # on the attention weights, in training mode only
    num_kv_heads: int | None = None  # key/value heads; None = H (multi-head), 1 = multi-query
    window: int | None = None  # sliding window: each position sees itself and window - 1 before; None = all
    tie_head: bool = False  # the head's (V, E) weight is the token embedding's, as in GPT-2
    sinks: int = 0  # with a window: the first `sinks` positions stay visible to all (attention sinks)
    latent_dim: int | None = None  # multi-head latent attention: the cached latent's width; None = keys, values
    rope_dim: int = 32  # with latent_dim: width of the rotated key shared by the heads, cached beside it

    def __post_init__(self):
        validate_positive(vocab_size=self.vocab_size, context_length=self.context_length,
                          embed_dim=self.embed_dim, num_heads=self.num_heads, num_layers=self.num_layers,
                          rope_dim=self.rope_dim)
        validate_positive(allow_none=True, num_kv_heads=self.num_kv_heads, window=self.window,
                          latent_dim=self.latent_dim)
        validate_dropout(self.dropout)


class DecoderBlock(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + MLP(norm(x)) (chapter 7)."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        E = config.embed_dim
        self.norm1, self.norm2 = nn.LayerNorm(E), nn.LayerNorm(E)
        if config.latent_dim is None:
            self.attention = CausalSelfAttention(E, config.num_heads, dropout=config.dropout,
                                                 num_kv_heads=config.num_kv_heads, window=config.window,
                                                 sinks=config.sinks)
        else:  # multi-head latent attention: one latent and one rope key cached per position
            if config.num_kv_heads is not None or config.dropout:
                raise ValueError("latent_dim (multi-head latent attention) takes neither num_kv_heads nor dropout, "
                                 f"got num_kv_heads={config.num_kv_heads}, dropout={config.dropout}")
            self.attention = LatentAttention(E, config.num_heads, config.latent_dim, config.rope_dim,
                                             window=config.window, sinks=config.sinks)
        self.mlp = nn.Sequential(nn.Linear(E, 4 * E), nn.GELU(approximate="tanh"), nn.Linear(4 * E, E))  # as GPT-2

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """x (B, T, E) -> (B, T, E)."""
        attended, _ = self.attention(self.norm1(x), cache=cache)
        x = x + attended
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """Token and position embeddings, `num_layers` blocks, a final norm and the next-token head (chapter 7)."""

    def __init__(self, config: DecoderConfig = DecoderConfig()):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.embed_dim)
        self.position_embedding = nn.Embedding(config.context_length, config.embed_dim)
        self.blocks = nn.ModuleList([DecoderBlock(config) for _ in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.embed_dim)
        self.head = nn.Linear(config.embed_dim, config.vocab_size, bias=False)
        if config.tie_head:
            self.head.weight = self.token_embedding.weight  # one (V, E) matrix embeds tokens and scores them

    def new_caches(self, int8: bool = False) -> list[KVCache] | list[RingKVCache]:
        """One empty cache per layer: as long as the context, or a ring of `window` positions (and the
        sinks); with `int8`, full caches that store int8 keys and values."""
        if self.config.window is not None:
            if int8:
                raise ValueError("int8 caches are full caches: give window=None")
            return [RingKVCache(self.config.window, self.config.sinks) for _ in self.blocks]
        kind = Int8KVCache if int8 else KVCache
        return [kind(self.config.context_length) for _ in self.blocks]

    def new_paged_caches(self, batch_size: int, num_blocks: int, block_size: int = 16) -> list[PagedKVCache]:
        """One paged cache per layer for `batch_size` sequences, each layer with a pool of `num_blocks` blocks."""
        return [PagedKVCache(BlockPool(num_blocks, block_size), batch_size) for _ in self.blocks]

    def forward(self, tokens: torch.Tensor, caches: list | None = None):
        """tokens (B, T) -> next-token logits (B, T, V).

        With caches, `tokens` are the newest T positions, placed after those
        already stored: the caches say at which positions (one start for the
        batch, or one per sequence for a paged cache).
        """
        validate_tokens(tokens, self.config.vocab_size,
                        device=self.head.weight.device)
        validate_caches(caches, len(self.blocks))
        T = tokens.shape[-1]
        start = 0 if caches is None else len(caches[0])  # paged: the longest
        if start + T > self.config.context_length:
            raise ValueError(
                f"positions {start}..{start + T - 1} exceed context_length="
                f"{self.config.context_length} (the last position is "
                f"{self.config.context_length - 1})")
        if caches is None:
            positions = torch.arange(T, device=tokens.device)  # (T,)
        else:  # (T,), or (B, T) for a paged cache
            positions, _ = caches[0].positions(T, tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.head(self.norm(x))  # (B, T, V)


def next_token(logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None):
    """Greedy (temperature 0) or sampled choice from logits (B, V) -> tokens (B, 1)."""
    validate_temperature(temperature)
    validate_logits(logits, temperature)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probabilities = torch.softmax(logits / temperature, dim=-1)  # (B, V)
    return torch.multinomial(probabilities, 1, generator=generator)


@torch.inference_mode()
def generate_steps(model: Decoder, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
                   temperature: float = 0.0, generator: torch.Generator | None = None, process=None):
    """Continue `prompt` (B, T0) one token at a time, yielding the sequence (B, T0 + i) after step i (chapter 7).

    With the cache, the prompt is run once (prefill) and every later step feeds only the newest token
    (decode); without it every step runs the whole sequence. `process`, if given, maps each step's logits
    (B, V) to the logits the token is drawn from (chapter 12's temperature and top-k/top-p).
    """
    caches = model.new_caches() if use_cache else None
    tokens, fresh = prompt, prompt  # fresh: the positions the model has not seen yet
    for _ in range(max_new_tokens):
        logits = model(fresh if use_cache else tokens, caches)[:, -1]  # (B, V): the last position only
        if process is not None:
            logits = process(logits)  # (B, V)
        chosen = next_token(logits, temperature, generator)  # (B, 1)
        tokens = torch.cat([tokens, chosen], dim=-1)  # (B, T + 1)
        fresh = chosen
        yield tokens


def generate(model: Decoder, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
             temperature: float = 0.0, generator: torch.Generator | None = None, progress: bool = False):
    """`prompt` (B, T0) continued by `max_new_tokens` tokens -> (B, T0 + max_new_tokens) (chapter 7)."""
    validate_generation(prompt, max_new_tokens, temperature, model.config.vocab_size)
    if prompt.shape[-1] + max_new_tokens > model.config.context_length:
        raise ValueError(f"prompt of {prompt.shape[-1]} tokens + max_new_tokens={max_new_tokens} exceed "
                         f"context_length={model.config.context_length}")
    tokens = prompt
    steps = generate_steps(model, prompt, max_new_tokens, use_cache, temperature, generator)
    for sequence in tqdm(steps, total=max_new_tokens, disable=not progress,
                         desc="with cache" if use_cache else "without cache"):
        tokens = sequence
    return tokens


@torch.inference_mode()
def cached_vs_full(model: Decoder, tokens: torch.Tensor, prefill: int = 1) -> list[float]:
    """Feed `tokens` (B, T) through the cache, `prefill` first and then one by one; at every step compare the
    newest logits with a full recomputation of the prefix. Returns the largest difference of each step."""
    validate_tokens(tokens, model.config.vocab_size, "tokens")
    if isinstance(prefill, bool) or not isinstance(prefill, int) or not 1 <= prefill <= tokens.shape[-1]:
        raise ValueError(f"prefill must be an integer from 1 to T = {tokens.shape[-1]} (tokens {tuple(tokens.shape)}), "
                         f"got {prefill!r}")
    caches = model.new_caches()
    differences = []
    for end in range(prefill, tokens.shape[-1] + 1):
        begin = 0 if end == prefill else end - 1
        cached = model(tokens[:, begin:end], caches)[:, -1]  # (B, V)
        full = model(tokens[:, :end])[:, -1]  # (B, V)
        differences.append((cached - full).abs().max().item())
    return differences


@torch.inference_mode()
def generate_paged(model: Decoder, prompts: list[torch.Tensor], max_new_tokens: int, block_size: int = 16,
                   num_blocks: int | None = None, temperature: float = 0.0,
                   generator: torch.Generator | None = None) -> tuple[list[torch.Tensor], list[PagedKVCache]]:
    """Continue B prompts of different lengths (each (T0_b,)) in one batch, with paged caches (chapter 8).

    Each prompt is prefilled alone into its own blocks; then every step decodes one token for all B
    sequences at once, each at its own position. Returns the sequences (T0_b + max_new_tokens,) and the
    caches. The pool holds `num_blocks` blocks per layer, by default just enough for every sequence.
    """
    if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, torch.Tensor) for p in prompts):
        raise ValueError(f"prompts must be a list of 1-D token tensors (T0_b,), one per sequence, got "
                         f"{type(prompts).__name__}")
    validate_positive(block_size=block_size)
    if not prompts or any(p.dim() != 1 or len(p) == 0 for p in prompts):
        raise ValueError(f"prompts must be non-empty 1-D token tensors, got shapes {[tuple(p.shape) for p in prompts]}")
    for prompt in prompts:
        validate_generation(prompt[None], max_new_tokens, temperature, model.config.vocab_size)
    if num_blocks is None:
        num_blocks = sum(-(-(len(p) + max_new_tokens) // block_size) for p in prompts)
    caches = model.new_paged_caches(len(prompts), num_blocks, block_size)
    last = [model(prompt[None], [c.for_rows([b]) for c in caches])[:, -1] for b, prompt in enumerate(prompts)]
    logits = torch.cat(last)  # (B, V): each prompt's last position
    sequences = list(prompts)
    for step in range(max_new_tokens):
        chosen = next_token(logits, temperature, generator)  # (B, 1)
        sequences = [torch.cat([s, c]) for s, c in zip(sequences, chosen, strict=True)]
        if step < max_new_tokens - 1:
            logits = model(chosen, caches)[:, -1]  # (B, V): one new position per sequence, each its own
    return sequences, caches


@torch.inference_mode()
def serve(model: Decoder, prompts: list[torch.Tensor], new_tokens: list[int], rows: int, block_size: int = 16,
          num_blocks: int | None = None) -> tuple[list[torch.Tensor], list[tuple[int, str, int]]]:
    """Continuous batching on a paged cache (chapter 8): at most `rows` sequences decode together; when one
    has its `new_tokens[i]` greedy tokens it gives its blocks back and the next waiting prompt is prefilled
    into its row, between two decode steps of the others. Returns the sequences in the prompts' order and
    the events (step, "admit" or "release", prompt index)."""
    if len(prompts) != len(new_tokens) or not prompts:
        raise ValueError(f"give one number of new tokens per prompt: {len(prompts)} prompts, {len(new_tokens)} numbers")
    for prompt, n in zip(prompts, new_tokens, strict=True):
        if prompt.dim() != 1 or len(prompt) == 0:
            raise ValueError(f"prompts must be non-empty 1-D token tensors, got shape {tuple(prompt.shape)}")
        validate_generation(prompt[None], n, 0.0, model.config.vocab_size)
    if num_blocks is None:  # enough for the `rows` longest sequences at once
        need = sorted((-(-(len(p) + n) // block_size) for p, n in zip(prompts, new_tokens, strict=True)), reverse=True)
        num_blocks = sum(need[:rows])
    caches = model.new_paged_caches(rows, num_blocks, block_size)
    waiting, running = list(range(len(prompts))), {}  # running: row -> prompt index
    sequences, logits, events = list(prompts), {}, []
    for step in range(sum(new_tokens) + 1):
        for row in (r for r in range(rows) if r not in running):  # admit into free rows
            if waiting:
                i = waiting.pop(0)
                running[row] = i
                logits[row] = model(prompts[i][None], [c.for_rows([row]) for c in caches])[0, -1]  # (V,)
                events.append((step, "admit", i))
        if not running:
            break
        for row, i in list(running.items()):
            sequences[i] = torch.cat([sequences[i], next_token(logits[row][None])[0]])
            if len(sequences[i]) == len(prompts[i]) + new_tokens[i]:  # done: its blocks go back to the pool
                for cache in caches:
                    cache.release(row)
                del running[row]
                events.append((step, "release", i))
        if running:  # one decode step for every running sequence, each at its own position
            active = sorted(running)
            out = model(torch.stack([sequences[running[r]][-1:] for r in active]),
                        [c.for_rows(active) for c in caches])[:, -1]  # (B, V)
            logits.update(zip(active, out, strict=True))
    return sequences, events


@torch.inference_mode()
def decode_one_by_one(model, tokens: torch.Tensor, caches: list) -> torch.Tensor:
    """Feed `tokens` (B, T) through `caches` one position at a time; the logits of every step (B, T, V).

    Works for any model called as model(tokens, caches=...), chapter 11's too (its first output is taken).
    """
    if caches is None:
        raise ValueError("caches must be given (model.new_caches()): without them each position would "
                         "see only itself")
    logits = []
    for t in range(tokens.shape[-1]):
        out = model(tokens[:, t:t + 1], caches=caches)
        logits.append(out[0] if isinstance(out, tuple) else out)  # (B, 1, V)
    return torch.cat(logits, dim=1)  # (B, T, V)


# GPT-2's weights in this decoder (chapter 7)
#
# Chapter 7's decoder is GPT-2's architecture: pre-norm blocks, tanh GELU, learned positions, biases
# everywhere but the head, LayerNorm's eps 1e-5 (PyTorch's default), and, with `tie_head`, the head
# tied to the token embedding. Hugging Face's `GPT2LMHeadModel` names its tensors as below; its Conv1D layers (c_attn,
# c_proj, c_fc) store weights as (in, out), transposed from nn.Linear's (out, in), and c_attn holds
# the query, key and value projections side by side. Shapes are in letters: V vocabulary, P positions,
# E width; "3E" is three times E.

GPT2_TOP = {  # GPT-2's name: (its shape, our parameter)
    "transformer.wte.weight": (("V", "E"), "token_embedding.weight"),
    "transformer.wpe.weight": (("P", "E"), "position_embedding.weight"),
    "transformer.ln_f.weight": (("E",), "norm.weight"),
    "transformer.ln_f.bias": (("E",), "norm.bias"),
}
GPT2_HEAD = "lm_head.weight"  # (V, E) -> head.weight; absent from a state dict saved with the head tied
GPT2_BLOCK = {  # in block i: "transformer.h.{i}." + GPT-2's name: (its shape, our parameters in "blocks.{i}.")
    "ln_1.weight": (("E",), ["norm1.weight"]),
    "ln_1.bias": (("E",), ["norm1.bias"]),
    "attn.c_attn.weight": (("E", "3E"), [f"attention.attention.{x}_proj.weight" for x in "qkv"]),  # split in 3
    "attn.c_attn.bias": (("3E",), [f"attention.attention.{x}_proj.bias" for x in "qkv"]),
    "attn.c_proj.weight": (("E", "E"), ["attention.attention.out_proj.weight"]),
    "attn.c_proj.bias": (("E",), ["attention.attention.out_proj.bias"]),
    "ln_2.weight": (("E",), ["norm2.weight"]),
    "ln_2.bias": (("E",), ["norm2.bias"]),
    "mlp.c_fc.weight": (("E", "4E"), ["mlp.0.weight"]),
    "mlp.c_fc.bias": (("4E",), ["mlp.0.bias"]),
    "mlp.c_proj.weight": (("4E", "E"), ["mlp.2.weight"]),
    "mlp.c_proj.bias": (("E",), ["mlp.2.bias"]),
}
GPT2_BUFFERS = ("attn.bias", "attn.masked_bias")  # causal-mask buffers of older checkpoints: not weights


def gpt2_name_map(num_layers: int) -> dict[str, tuple[tuple[str, ...], list[str]]]:
    """Every tensor of a GPT-2 state dict with `num_layers` blocks -> (its shape in letters, our parameters)."""
    names = {name: (shape, [ours]) for name, (shape, ours) in GPT2_TOP.items()}
    for i in range(num_layers):
        for name, (shape, ours) in GPT2_BLOCK.items():
            names[f"transformer.h.{i}.{name}"] = (shape, [f"blocks.{i}.{x}" for x in ours])
    return names


def from_gpt2(state_dict: dict, num_heads: int) -> Decoder:
    """A `Decoder` holding the weights of a Hugging Face GPT-2 (`GPT2LMHeadModel.state_dict()`) (chapter 7).

    Sizes come from the tensors' shapes; the number of heads does not show in them (GPT-2 124M has 12).
    Every tensor is checked against the shape the name map expects before anything is copied. As
    nanoGPT's `from_pretrained` and LLMs-from-scratch's chapter 5 do, without importing `transformers`.
    """
    sizes, num_layers = gpt2_sizes(state_dict, num_heads)
    names = gpt2_name_map(num_layers)
    tied = GPT2_HEAD not in state_dict or torch.equal(state_dict[GPT2_HEAD], state_dict["transformer.wte.weight"])
    config = DecoderConfig(vocab_size=sizes["V"], context_length=sizes["P"], embed_dim=sizes["E"],
                           num_heads=num_heads, num_layers=num_layers, tie_head=tied)
    if not tied:
        names[GPT2_HEAD] = (("V", "E"), ["head.weight"])
    wte = state_dict["transformer.wte.weight"]
    with torch.device("meta"):  # no time spent drawing random weights that are overwritten next
        model = Decoder(config)
    model = model.to_empty(device=wte.device).to(wte.dtype)
    if tied:
        model.head.weight = model.token_embedding.weight  # to_empty gave the head a tensor of its own
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name, (_, ours) in names.items():
            tensor = state_dict[name]
            if tensor.dim() == 2 and name.startswith("transformer.h."):
                tensor = tensor.T  # Conv1D's (in, out) -> nn.Linear's (out, in)
            for part, our_name in zip(tensor.chunk(len(ours)), ours, strict=True):  # c_attn: q, k, v
                parameters.pop(our_name).copy_(part)
    assert not parameters, f"the name map left {sorted(parameters)} unset"
    return model.eval()


def gpt2_sizes(state_dict: dict, num_heads: int) -> tuple[dict[str, int], int]:
    """V, P, E and the number of blocks of a GPT-2 state dict, after checking every tensor's name and shape."""
    if not isinstance(state_dict, Mapping) or not all(isinstance(t, torch.Tensor) for t in state_dict.values()):
        kinds = sorted({type(t).__name__ for t in state_dict.values()}) if isinstance(state_dict, Mapping) else []
        raise TypeError(f"state_dict must be a dict of name -> torch.Tensor (GPT2LMHeadModel's .state_dict()), "
                        f"got {type(state_dict).__name__}" + (f" of {kinds}" if kinds else "")
                        + ("; pass model.state_dict()" if isinstance(state_dict, nn.Module) else ""))
    for name in ("transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight"):
        if name not in state_dict:
            raise ValueError(f"state_dict is not GPT-2's (GPT2LMHeadModel's): it has no {name}; its keys are "
                             f"{_listed(sorted(state_dict))}")
    wte, wpe = state_dict["transformer.wte.weight"], state_dict["transformer.wpe.weight"]
    if wte.dim() != 2 or wpe.dim() != 2:
        raise ValueError(f"transformer.wte.weight must be (V, E) and transformer.wpe.weight (P, E), got "
                         f"{tuple(wte.shape)} and {tuple(wpe.shape)}")
    (V, E), P = wte.shape, wpe.shape[0]
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1 or E % num_heads:
        raise ValueError(f"num_heads={num_heads!r} must be a positive integer dividing the width E={E} of "
                         f"transformer.wte.weight {(V, E)}: each head takes E/H columns")
    blocks = [name.split(".")[2] for name in state_dict if name.startswith("transformer.h.")]
    num_layers = 1 + max(int(i) for i in blocks if i.isdigit())
    sizes = {"V": V, "P": P, "E": E}
    letters = {name: shape for name, (shape, _) in gpt2_name_map(num_layers).items()} | {GPT2_HEAD: ("V", "E")}
    missing = [name for name in letters if name not in state_dict and name != GPT2_HEAD]
    unexpected = sorted(name for name in state_dict if name not in letters and not name.endswith(GPT2_BUFFERS))
    problems = [f"missing {_listed(missing)}"] if missing else []
    problems += [f"unexpected {_listed(unexpected)}"] if unexpected else []
    for name, shape in letters.items():
        size = tuple(int(s[:-1] or 1) * sizes[s[-1]] for s in shape)  # "4E" -> 4 * E
        if name in state_dict and tuple(state_dict[name].shape) != size:
            problems.append(f"{name} must be ({', '.join(shape)}) = {size}, got {tuple(state_dict[name].shape)}")
    if problems:
        raise ValueError(f"state_dict does not match GPT-2 with {num_layers} blocks, V={V}, P={P}, E={E}: "
                         + "; ".join(problems))
    return sizes, num_layers


def _listed(names: list[str], most: int = 8) -> str:
    """The first `most` names, and how many more."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return f"{names[:most]}{more}"


# Input checks: the errors name the argument and the form expected.

def validate_tokens(tokens, vocab_size: int, name: str = "tokens", device=None) -> None:
    """Token ids (B, T): int64 or int32 (what nn.Embedding reads) from 0 to vocab_size - 1, on the
    model's `device` if given (chapter 7)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        got = f"shape {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"{name} must be token ids (B, T), got {got}; one sequence (T,) is {name}[None]")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be integer token ids of dtype int64 (or int32), got dtype {tokens.dtype}; "
                        f"convert ids with {name}.long()")
    if device is not None and tokens.device != device:
        raise ValueError(f"{name} are on {tokens.device}, the model on {device}: move them with "
                         f"{name}.to({str(device)!r})")
    if tokens.numel() and tokens.device.type != "meta":
        low, high = (int(t) for t in torch.aminmax(tokens))
        if low < 0 or high >= vocab_size:
            raise ValueError(f"{name} must be ids from 0 to vocab_size - 1 = {vocab_size - 1}, got values from "
                             f"{low} to {high}")


def validate_logits(logits, temperature) -> None:
    """Logits (B, V) with a choice in every row: no NaN, not −inf everywhere, and, to sample, no +inf
    (softmax(+inf) is NaN)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        got = f"shape {tuple(logits.shape)} of {logits.dtype}" if isinstance(logits, torch.Tensor) else \
            type(logits).__name__
        raise ValueError(f"logits must be floating (B, V), one row per sequence, got {got}; "
                         "take the last position's row with logits[:, -1]")
    if logits.device.type == "meta":
        return
    bad = torch.isnan(logits).any(dim=-1) | torch.isneginf(logits).all(dim=-1)
    if temperature != 0:
        bad |= torch.isposinf(logits).any(dim=-1)
    if bad.any():
        raise ValueError(f"logits of shape {tuple(logits.shape)} give no token in rows "
                         f"{bad.nonzero().flatten().tolist()}: they contain NaN, are −inf everywhere, or (to "
                         "sample) contain +inf")


def validate_caches(caches, num_layers: int) -> None:
    """None, or one cache per layer."""
    if caches is not None and len(caches) != num_layers:
        raise ValueError(f"caches must hold one cache per layer, {num_layers}, got {len(caches)}")


def validate_temperature(temperature) -> None:
    """0 is greedy; a positive temperature samples. A negative one would sample from softmax(-logits)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be 0 (greedy) or a positive number, got {temperature!r}")


def validate_generation(prompt, max_new_tokens, temperature, vocab_size: int) -> None:
    """What `generate` and `generate_paged` need: a non-empty prompt (B, T0), a count, a temperature."""
    validate_tokens(prompt, vocab_size, "prompt")
    if prompt.shape[-1] == 0:
        raise ValueError(f"prompt must hold at least one token, got shape {tuple(prompt.shape)}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    validate_temperature(temperature)
