"""Two tiny trained models whose attention a reader can name (chapters 3 and 4).

`LookBack` (chapter 3): one layer of causal multi-head attention over random tokens, trained to name, at
every position, the token one back and the token two back. Its two heads split the work: a
previous-token head and a two-back head.

`Reverser` (chapter 4): a one-layer encoder–decoder trained to write a random sequence backwards; its
decoder's cross-attention learns the anti-diagonal alignment, target position t to source S − 1 − t.

`scripts/train_small_models.py` trains both and stores them as plain state_dicts in the package's data
(`trained_lookback.pt`, `trained_reverser.pt`), with their settings and accuracies in
`trained_small.json`; the chapters load them with `load_lookback` and `load_reverser`.
"""

import json
from dataclasses import asdict, dataclass
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

from .attention import scaled_dot_product_attention
from .multihead import MultiHeadAttention, head_weights


@dataclass(frozen=True)
class LookBackConfig:
    vocab_size: int = 12  # V: random tokens 0 … 11
    length: int = 10  # T: tokens per sequence
    embed_dim: int = 32  # E
    num_heads: int = 2  # H


@dataclass(frozen=True)
class ReverserConfig:
    vocab_size: int = 10  # V: source tokens 0 … 9; id V is the decoder's start token
    length: int = 8  # S = T: a source and its reversal
    embed_dim: int = 32  # E
    num_heads: int = 2  # H of the two self-attentions; the cross-attention has one head


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 300
    batch_size: int = 64
    learning_rate: float = 3e-3
    seed: int = 0


class LookBack(nn.Module):
    """Token and learned position embeddings, one causal multi-head attention, two read-outs (chapter 3)."""

    def __init__(self, config: LookBackConfig = LookBackConfig()):
        super().__init__()
        self.config = config
        V, T, E = config.vocab_size, config.length, config.embed_dim
        self.token_embedding = nn.Embedding(V, E)
        self.position_embedding = nn.Embedding(T, E)
        self.attention = MultiHeadAttention(E, config.num_heads)
        self.one_back = nn.Linear(E, V)  # logits of the token at t − 1
        self.two_back = nn.Linear(E, V)  # logits of the token at t − 2

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> (B, T, E)."""
        positions = torch.arange(tokens.shape[-1], device=tokens.device)
        return self.token_embedding(tokens) + self.position_embedding(positions)

    def forward(self, tokens: torch.Tensor):
        """tokens (B, T) -> logits for one back and two back, (B, T, V) each."""
        out, _ = self.attention(self.embed(tokens), need_weights=False, is_causal=True)  # (B, T, E)
        return self.one_back(out), self.two_back(out)

    @torch.no_grad()
    def head_weights(self, tokens: torch.Tensor) -> torch.Tensor:
        """Every head's causal attention weights, (B, H, T, T)."""
        x = self.embed(tokens)
        q = self.attention.split_heads(self.attention.q_proj(x))  # (B, H, T, E/H)
        k = self.attention.split_heads(self.attention.k_proj(x))  # (B, H, T, E/H)
        T = tokens.shape[-1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T), True = may attend
        return head_weights(q, k, causal)


class Reverser(nn.Module):
    """A one-layer encoder–decoder: encoder self-attention, decoder causal self-attention, then
    cross-attention from the decoder to the encoder, and a read-out (chapter 4)."""

    def __init__(self, config: ReverserConfig = ReverserConfig()):
        super().__init__()
        self.config = config
        V, S, E, H = config.vocab_size, config.length, config.embed_dim, config.num_heads
        self.source_embedding = nn.Embedding(V, E)
        self.target_embedding = nn.Embedding(V + 1, E)  # + the start token, id V
        self.source_positions = nn.Embedding(S, E)
        self.target_positions = nn.Embedding(S, E)
        self.encoder_attention = MultiHeadAttention(E, H)
        self.decoder_attention = MultiHeadAttention(E, H)
        self.cross_attention = MultiHeadAttention(E, 1)
        self.read_out = nn.Linear(E, V)

    def encode(self, source: torch.Tensor) -> torch.Tensor:
        """source (B, S) -> memory, the encoder states (B, S, E)."""
        x = self.source_embedding(source) + self.source_positions(torch.arange(source.shape[-1]))
        return x + self.encoder_attention(x, need_weights=False)[0]

    def cross_keys_values(self, memory: torch.Tensor):
        """memory (B, S, E) -> the cross-attention's keys and values,
        (B, 1, S, E) each (one head). They depend on the source alone:
        made once per source, reused at every decoding step (chapter 4)."""
        cross = self.cross_attention
        keys = cross.split_heads(cross.k_proj(memory))  # (B, 1, S, E)
        values = cross.split_heads(cross.v_proj(memory))  # (B, 1, S, E)
        return keys, values

    def decode(self, decoder_input: torch.Tensor, cross_kv,
               need_weights: bool = False):
        """The decoder layer (chapter 4): decoder_input (B, T) and the cross
        keys and values -> logits (B, T, V), cross weights (B, T, S)."""
        positions = torch.arange(decoder_input.shape[-1])  # (T,)
        y = self.target_embedding(decoder_input)  # (B, T, E)
        y = y + self.target_positions(positions)
        # causal self-attention over the target so far, with a residual
        y = y + self.decoder_attention(y, need_weights=False,
                                       is_causal=True)[0]
        # cross-attention: queries from y, keys and values made once
        crossed, weights = self.cross_attend(y, *cross_kv)  # (B, T, E)
        logits = self.read_out(y + crossed)  # (B, T, V)
        return logits, weights[:, 0] if need_weights else None

    def cross_attend(self, y: torch.Tensor, keys: torch.Tensor,
                     values: torch.Tensor):
        """Queries from the decoder states y (B, T, E) over the cross keys
        and values -> (output (B, T, E), weights (B, 1, T, S))."""
        cross = self.cross_attention
        queries = cross.split_heads(cross.q_proj(y))  # (B, 1, T, E)
        context, weights = scaled_dot_product_attention(queries, keys,
                                                        values)
        # context (B, 1, T, E) -> (B, T, E)
        return cross.out_proj(cross.merge_heads(context)), weights

    def forward(self, source: torch.Tensor, target: torch.Tensor, need_weights: bool = False):
        """Teacher forcing: the decoder reads the start token and target[:-1]; returns (logits, weights)."""
        start = torch.full_like(target[..., :1], self.config.vocab_size)
        decoder_input = torch.cat([start, target[..., :-1]], dim=-1)  # (B, T)
        memory = self.encode(source)  # (B, S, E)
        return self.decode(decoder_input, self.cross_keys_values(memory), need_weights)

    @torch.no_grad()
    def generate(self, source: torch.Tensor) -> torch.Tensor:
        """Greedy decoding, one token per step (chapter 4). The encoder and
        the cross-attention's keys and values run once; the decoder's causal
        self-attention reruns the prefix (chapter 7 caches it)."""
        memory = self.encode(source)  # (B, S, E)
        cross_kv = self.cross_keys_values(memory)  # made once
        # the start token, id V: (B, 1)
        out = torch.full_like(source[..., :1], self.config.vocab_size)
        for _ in range(source.shape[-1]):
            logits, _ = self.decode(out, cross_kv)  # (B, t, V)
            next_token = logits[..., -1:, :].argmax(-1)  # (B, 1)
            out = torch.cat([out, next_token], dim=-1)
        return out[..., 1:]  # (B, T) without the start token


def lookback_batch(batch: int, config: LookBackConfig, generator: torch.Generator) -> torch.Tensor:
    """Random token sequences (B, T)."""
    return torch.randint(0, config.vocab_size, (batch, config.length), generator=generator)


def reverser_batch(batch: int, config: ReverserConfig, generator: torch.Generator):
    """Random sources (B, S) and their reversals (B, T)."""
    source = torch.randint(0, config.vocab_size, (batch, config.length), generator=generator)
    return source, source.flip(-1)


def lookback_loss(model: LookBack, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of both read-outs where they have a target (t ≥ 1 and t ≥ 2)."""
    one, two = model(tokens)
    V = model.config.vocab_size
    return F.cross_entropy(one[:, 1:].reshape(-1, V), tokens[:, :-1].reshape(-1)) + \
        F.cross_entropy(two[:, 2:].reshape(-1, V), tokens[:, :-2].reshape(-1))


def reverser_loss(model: Reverser, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    logits, _ = model(source, target)
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def train_lookback(config: LookBackConfig = LookBackConfig(), settings: TrainSettings = TrainSettings(),
                   after_step=None):
    """A fresh `LookBack` trained from `settings.seed`; returns the model in eval mode and its loss curve.
    `after_step(steps_done, model)`, if given, is called after every step (chapter 3 measures on the way)."""
    torch.manual_seed(settings.seed)
    model = LookBack(config)
    data = torch.Generator().manual_seed(settings.seed + 1)
    return _train(model, lambda: (lookback_batch(settings.batch_size, config, data),), lookback_loss, settings,
                  after_step)


def train_reverser(config: ReverserConfig = ReverserConfig(), settings: TrainSettings = TrainSettings()):
    """A fresh `Reverser` trained from `settings.seed`; returns the model in eval mode and its loss curve."""
    torch.manual_seed(settings.seed)
    model = Reverser(config)
    data = torch.Generator().manual_seed(settings.seed + 1)
    return _train(model, lambda: reverser_batch(settings.batch_size, config, data), reverser_loss, settings)


def _train(model, next_batch, loss_fn, settings: TrainSettings, after_step=None):
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.learning_rate)
    curve = []
    for step in range(settings.steps):
        loss = loss_fn(model, *next_batch())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == settings.steps - 1:
            curve.append([step, round(loss.item(), 4)])
        if after_step is not None:
            after_step(step + 1, model)
    return model.eval(), curve


EVAL_SEED = 1234  # the fixed evaluation batch, the same on every machine


@torch.no_grad()
def lookback_accuracy(model: LookBack, batch: int = 256) -> dict:
    """Share of correct one-back and two-back predictions on the evaluation batch."""
    tokens = lookback_batch(batch, model.config, torch.Generator().manual_seed(EVAL_SEED))
    one, two = model(tokens)
    return {"one_back": (one[:, 1:].argmax(-1) == tokens[:, :-1]).float().mean().item(),
            "two_back": (two[:, 2:].argmax(-1) == tokens[:, :-2]).float().mean().item()}


@torch.no_grad()
def reverser_accuracy(model: Reverser, batch: int = 256) -> dict:
    """Share of correct tokens with teacher forcing and with greedy generation, on the evaluation batch."""
    source, target = reverser_batch(batch, model.config, torch.Generator().manual_seed(EVAL_SEED))
    logits, _ = model(source, target)
    return {"teacher_forced": (logits.argmax(-1) == target).float().mean().item(),
            "generated": (model.generate(source) == target).float().mean().item()}


def evaluation_tokens(config, batch: int = 1):
    """The first `batch` sequences of the evaluation batch (what the chapters plot)."""
    generator = torch.Generator().manual_seed(EVAL_SEED)
    if isinstance(config, LookBackConfig):
        return lookback_batch(batch, config, generator)
    return reverser_batch(batch, config, generator)


def _load(name: str, model_class, config_class):
    data = resources.files("attention_book").joinpath("data")
    record = json.loads(data.joinpath("trained_small.json").read_text())[name]
    model = model_class(config_class(**record["config"]))
    with data.joinpath(record["weights"]).open("rb") as file:
        model.load_state_dict(torch.load(file, weights_only=True))
    return model.eval(), record


def load_lookback():
    """Chapter 3's trained `LookBack` and its stored record (config, settings, curve, accuracy)."""
    return _load("lookback", LookBack, LookBackConfig)


def load_reverser():
    """Chapter 4's trained `Reverser` and its stored record (config, settings, curve, accuracy)."""
    return _load("reverser", Reverser, ReverserConfig)


def config_dict(config) -> dict:
    return asdict(config)
