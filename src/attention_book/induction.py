"""A two-layer attention-only transformer trained to copy, and what its heads do (chapter 9).

The task: n random tokens, then the same n tokens again. The first half cannot be predicted; the second
can, by a two-head circuit (Elhage et al., 2021; Olsson et al., 2022): a previous-token head in layer 1
writes "the token before me was a" into each position, and an induction head in layer 2 looks for the
position whose previous token is the current one, and copies the token it finds there.
`scripts/train_induction.py` trains three variants (learned positions, RoPE, none) and stores them.
"""

import json
import math
from dataclasses import asdict, dataclass
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

from .causal import causal_mask
from .kv_cache import KVCache
from .positions import LearnedPositions, apply_rope

POSITION_KINDS = ("learned", "rope", "none")
EVAL_BATCH, EVAL_SEED = 512, 12345  # the fixed sequences every stored metric is measured on


@dataclass(frozen=True)
class InductionConfig:
    """Sizes of chapter 9's model and task; about 41 thousand parameters (43 with learned positions)."""

    vocab_size: int = 64  # V: random tokens 0 … 63
    half_length: int = 16  # n_max: n random tokens (n from n_max/2 … n_max) repeated up to T = 2·n_max
    embed_dim: int = 64  # E
    num_heads: int = 4  # H, so d_k = E/H = 16
    num_layers: int = 2
    positions: str = "learned"  # "learned" (added to the embeddings), "rope" (rotates q, k) or "none"


class HeadAttention(nn.Module):
    """Causal multi-head attention that returns its weights and can silence heads (chapter 9)."""

    def __init__(self, config: InductionConfig):
        super().__init__()
        E, self.H = config.embed_dim, config.num_heads
        self.rope = config.positions == "rope"
        self.qkv = nn.Linear(E, 3 * E, bias=False)
        self.out = nn.Linear(E, E, bias=False)

    def forward(self, x, head_mask=None, cache: KVCache | None = None):
        """x (B, T, E) -> (output (B, T, E), weights (B, H, T, S)); head_mask (H,) scales each head's output."""
        B, T, E = x.shape
        start = 0 if cache is None else len(cache)
        q, k, v = self.qkv(x).reshape(B, T, 3, self.H, E // self.H).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, d_k)
        if self.rope:
            q, k = apply_rope(q, start), apply_rope(k, start)  # rotated by positions start … start + T − 1
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H, S, d_k): keys are cached already rotated
        scores = q @ k.transpose(-2, -1) / math.sqrt(E // self.H)  # (B, H, T, S)
        scores = scores.masked_fill(~causal_mask(T, k.shape[-2], device=x.device), float("-inf"))
        weights = scores.softmax(dim=-1)  # (B, H, T, S)
        heads = weights @ v  # (B, H, T, d_k)
        if head_mask is not None:
            heads = heads * head_mask[:, None, None]  # (B, H, T, d_k): a 0 removes that head's output
        return self.out(heads.transpose(1, 2).reshape(B, T, E)), weights  # (B, T, E)


class AttentionOnly(nn.Module):
    """Embeddings, `num_layers` residual attention layers, no MLP, and an unembedding (chapter 9)."""

    def __init__(self, config: InductionConfig = InductionConfig()):
        super().__init__()
        if config.positions not in POSITION_KINDS:
            raise ValueError(f"positions must be one of {POSITION_KINDS}, got {config.positions!r}")
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embed_dim)
        if config.positions == "learned":
            self.position = LearnedPositions(2 * config.half_length, config.embed_dim)
        self.norms = nn.ModuleList([nn.LayerNorm(config.embed_dim) for _ in range(config.num_layers)])
        self.layers = nn.ModuleList([HeadAttention(config) for _ in range(config.num_layers)])
        self.unembed = nn.Linear(config.embed_dim, config.vocab_size, bias=False)

    def forward(self, tokens, head_mask=None, caches=None):
        """tokens (B, T) -> (logits (B, T, V), per-layer weights [(B, H, T, S)]).

        head_mask (L, H): 1 keeps a head, 0 ablates it. With caches, tokens are the newest T positions.
        """
        x = self.embedding(tokens)  # (B, T, E)
        if self.config.positions == "learned":
            x = self.position(x, 0 if caches is None else len(caches[0]))
        maps = []
        for i, (norm, layer) in enumerate(zip(self.norms, self.layers, strict=True)):
            out, weights = layer(norm(x), None if head_mask is None else head_mask[i],
                                 None if caches is None else caches[i])
            x = x + out  # (B, T, E): each head writes into the residual stream
            maps.append(weights)
        return self.unembed(x), maps


def repeated_tokens(batch: int, config: InductionConfig, generator: torch.Generator):
    """Tokens (B, T = 2·n_max) and periods (B,): n random tokens, then the same n again and again (chapter 9).

    Each sequence draws its own n from n_max/2 … n_max, so token t equals token t − n for t ≥ n. The period
    varies so that no fixed offset predicts the copy: the model must find the earlier occurrence by content.
    """
    n_max = config.half_length
    periods = torch.randint(n_max // 2, n_max + 1, (batch,), generator=generator)  # (B,)
    first = torch.randint(0, config.vocab_size, (batch, n_max), generator=generator)  # (B, n_max)
    index = torch.arange(2 * n_max)[None, :] % periods[:, None]  # (B, T): t mod n
    return first.gather(1, index), periods  # (B, T), (B,)


def loss_per_token(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of predicting token t + 1 at position t: logits (B, T, V), tokens (B, T) -> (B, T − 1)."""
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, T − 1)


def half_masks(periods: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which targets 1 … T − 1 are in the first n (unpredictable) and which repeat (B, T − 1) each.

    Target n, the first repeated token, belongs to neither: nothing announces that the repeat starts.
    """
    target = torch.arange(1, length)[None, :]  # (1, T − 1): the position each prediction is for
    return target < periods[:, None], target > periods[:, None]  # (B, T − 1), (B, T − 1)


def half_losses(losses: torch.Tensor, periods: torch.Tensor) -> tuple[float, float]:
    """(mean loss on the first n tokens, mean loss on the repeated ones) from losses (B, T − 1)."""
    first, repeated = half_masks(periods, losses.shape[-1] + 1)
    if not first.any() or not repeated.any():
        raise ValueError(f"periods {periods.tolist()} leave no target in one half of losses "
                         f"{tuple(losses.shape)}: each period must be from 1 to T - 2 = {losses.shape[-1] - 1}")
    return float(losses[first].mean()), float(losses[repeated].mean())


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight a query puts on the position just before it, over queries 1 … T − 1: (B, H, T, T) -> (H,)."""
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # diagonal (B, H, T − 1)


def induction_targets(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T, T): True where key j's previous token equals query t's token (1 ≤ j ≤ t): where to look next."""
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T): token t equals token j
    follows = torch.zeros_like(same)
    follows[:, :, 1:] = same[:, :, :-1]  # (B, T, T): token t equals token j − 1
    return follows & causal_mask(tokens.shape[-1], device=tokens.device)  # (B, T, T)


def induction_score(weights: torch.Tensor, tokens: torch.Tensor, periods: torch.Tensor) -> torch.Tensor:
    """Mean total weight a repeating query puts on keys whose previous token is its own token (chapter 9).

    weights (B, H, T, T), tokens (B, T), periods (B,) -> (H,); queries t ≥ n, where the token has been seen.
    """
    on_targets = (weights * induction_targets(tokens)[:, None]).sum(-1)  # (B, H, T)
    queries = torch.arange(tokens.shape[-1])[None, :] >= periods[:, None]  # (B, T)
    if not queries.any():
        raise ValueError(f"periods {periods.tolist()} leave no repeating query in tokens {tuple(tokens.shape)}: "
                         f"a period must be below T = {tokens.shape[-1]}")
    return on_targets.transpose(0, 1)[:, queries].mean(-1)  # (H, queries) -> (H,)


def evaluate(model: AttentionOnly, tokens: torch.Tensor, periods: torch.Tensor) -> dict:
    """Losses per half, head scores and the repeated-half loss with each head ablated, as plain numbers."""
    L, H = model.config.num_layers, model.config.num_heads
    with torch.no_grad():
        logits, maps = model(tokens)
        first, repeated = half_losses(loss_per_token(logits, tokens), periods)
        ablated = []
        for layer in range(L):
            row = []
            for head in range(H):
                keep = torch.ones(L, H)
                keep[layer, head] = 0.0
                row.append(half_losses(loss_per_token(model(tokens, keep)[0], tokens), periods)[1])
            ablated.append(row)
    return {"loss_first_half": first, "loss_repeated_half": repeated,
            "previous_token_score": [previous_token_score(w).tolist() for w in maps],
            "induction_score": [induction_score(w, tokens, periods).tolist() for w in maps],
            "ablated_repeated_loss": ablated}


@dataclass(frozen=True)
class TrainConfig:
    """Chapter 9's training run: Adam on fresh random batches, CPU, a fixed seed."""

    steps: int = 1500
    batch_size: int = 64
    learning_rate: float = 3e-3
    seed: int = 0
    log_every: int = 25  # steps between points of the stored loss curve


def train(config: InductionConfig, train_config: TrainConfig = TrainConfig()) -> tuple[AttentionOnly, dict]:
    """Train a fresh model; returns it and its loss curve {step, loss_first_half, loss_repeated_half}."""
    torch.manual_seed(train_config.seed)
    model = AttentionOnly(config)
    data = torch.Generator().manual_seed(train_config.seed + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=train_config.learning_rate)
    curve = {"step": [], "loss_first_half": [], "loss_repeated_half": []}
    for step in range(train_config.steps + 1):
        tokens, periods = repeated_tokens(train_config.batch_size, config, data)  # (B, T), (B,)
        losses = loss_per_token(model(tokens)[0], tokens)  # (B, T − 1)
        if step % train_config.log_every == 0 or step == train_config.steps:
            first, repeated = half_losses(losses.detach(), periods)
            for key, value in zip(curve, (step, first, repeated), strict=True):
                curve[key].append(value)
        if step == train_config.steps:
            break
        optimizer.zero_grad()
        losses.mean().backward()
        optimizer.step()
    return model.eval(), curve


def evaluation_batch(config: InductionConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed evaluation sequences (B, T) and their periods (B,), the same on every machine."""
    return repeated_tokens(EVAL_BATCH, config, torch.Generator().manual_seed(EVAL_SEED))


def load_trained(positions: str) -> tuple[AttentionOnly, dict]:
    """The model `scripts/train_induction.py` trained with these positions, and its stored record (chapter 9):
    config, loss curve, metrics, training seconds, and the machine and training settings of the run.

    The weights are a plain state_dict read with `torch.load(weights_only=True)`: no pickled code runs.
    """
    data = resources.files("attention_book").joinpath("data")
    stored = json.loads(data.joinpath("induction.json").read_text())
    if positions not in stored["variants"]:
        raise ValueError(f"no trained model with positions={positions!r}; stored: {sorted(stored['variants'])}")
    record = {**stored["variants"][positions], "machine": stored["machine"], "train": stored["train"]}
    model = AttentionOnly(InductionConfig(**record["config"]))
    with data.joinpath(record["weights"]).open("rb") as file:
        model.load_state_dict(torch.load(file, weights_only=True))
    return model.eval(), record


def config_dict(config) -> dict:
    """A frozen config as a JSON-ready dict."""
    return asdict(config)
