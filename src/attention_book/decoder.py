"""A small GPT-style decoder built from the package, and text generation with and without a KV cache (chapter 7)."""

from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

from .causal import CausalSelfAttention
from .kv_cache import BlockPool, Int8KVCache, KVCache, PagedKVCache, RingKVCache
from .latent import LatentAttention


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
    sinks: int = 0  # with a window: the first `sinks` positions stay visible to all (attention sinks)
    latent_dim: int | None = None  # multi-head latent attention: the cached latent's width; None = keys, values
    rope_dim: int = 32  # with latent_dim: width of the rotated key shared by the heads, cached beside it


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
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probabilities = torch.softmax(logits / temperature, dim=-1)  # (B, V)
    return torch.multinomial(probabilities, 1, generator=generator)


@torch.inference_mode()
def generate_steps(model: Decoder, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
                   temperature: float = 0.0, generator: torch.Generator | None = None):
    """Continue `prompt` (B, T0) one token at a time, yielding the sequence (B, T0 + i) after step i (chapter 7).

    With the cache, the prompt is run once (prefill) and every later step feeds only the newest token
    (decode); without it every step runs the whole sequence.
    """
    caches = model.new_caches() if use_cache else None
    tokens, fresh = prompt, prompt  # fresh: the positions the model has not seen yet
    for _ in range(max_new_tokens):
        logits = model(fresh if use_cache else tokens, caches)[:, -1]  # (B, V): the last position only
        chosen = next_token(logits, temperature, generator)  # (B, 1)
        tokens = torch.cat([tokens, chosen], dim=-1)  # (B, T + 1)
        fresh = chosen
        yield tokens


def generate(model: Decoder, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
             temperature: float = 0.0, generator: torch.Generator | None = None, progress: bool = False):
    """`prompt` (B, T0) continued by `max_new_tokens` tokens -> (B, T0 + max_new_tokens) (chapter 7)."""
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
    """Continue B prompts of different lengths (each (T0_b,)) in one batch, with paged caches (chapter 7).

    Each prompt is prefilled alone into its own blocks; then every step decodes one token for all B
    sequences at once, each at its own position. Returns the sequences (T0_b + max_new_tokens,) and the
    caches. The pool holds `num_blocks` blocks per layer, by default just enough for every sequence.
    """
    if not prompts or any(p.dim() != 1 or len(p) == 0 for p in prompts):
        raise ValueError(f"prompts must be non-empty 1-D token tensors, got shapes {[tuple(p.shape) for p in prompts]}")
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
def decode_one_by_one(model, tokens: torch.Tensor, caches: list) -> torch.Tensor:
    """Feed `tokens` (B, T) through `caches` one position at a time; the logits of every step (B, T, V).

    Works for any model called as model(tokens, caches=...), chapter 9's too (its first output is taken).
    """
    logits = []
    for t in range(tokens.shape[-1]):
        out = model(tokens[:, t:t + 1], caches=caches)
        logits.append(out[0] if isinstance(out, tuple) else out)  # (B, 1, V)
    return torch.cat(logits, dim=1)  # (B, T, V)
