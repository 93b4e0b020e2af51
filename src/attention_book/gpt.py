"""A GPT you train: chapter 12's corpus, training step, sampling and heads.

The model is chapter 7's `Decoder` (learned positions, pre-norm blocks, a tied head), which chapter 12
first assembles by hand from chapters 3, 5 and 10's parts. It learns characters of the documentation every
Python ships (`pydoc_data.topics`): only the paragraphs that read the same in Python 3.10 to 3.13, found
by the fingerprints stored in `data/gpt_corpus.json`, so the corpus (and every number measured on it) is
the same on any of them. `scripts/train_gpt.py` trains it; the weights and curves are stored beside.
"""

import collections
import hashlib
import json
import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import resources

import torch
import torch.nn.functional as F

from .causal import causal_mask
from .decoder import Decoder, DecoderConfig, generate_steps, validate_generation, validate_tokens
from .multihead import head_weights

DATA = resources.files("attention_book").joinpath("data")
CORPUS_FILE, WEIGHTS_FILE, RESULT_FILE = "gpt_corpus.json", "gpt_weights.pt", "gpt.json"
PLAIN_WEIGHTS_FILE = "gpt_weights_plain.pt"  # the same run without repeated passages


@dataclass(frozen=True)
class GPTTrainConfig:
    """How chapter 12's model is trained (`scripts/train_gpt.py`)."""

    steps: int = 5000  # optimiser steps
    batch_size: int = 16  # B windows per step
    context_length: int = 128  # T characters per window; also the model's context_length
    learning_rate: float = 3e-3  # AdamW's peak, after a linear warm-up, then a cosine decay to a tenth
    warmup: int = 100  # steps of linear warm-up
    weight_decay: float = 0.1  # on the matrices only, as nanoGPT does
    seed: int = 1234  # torch.manual_seed before the model is built; batches come from their own generator
    validation_fraction: float = 0.1  # the last tenth of the corpus is held out
    eval_every: int = 500  # steps between two measurements of the curves
    eval_windows: int = 64  # fixed windows the curves are measured on, from each split
    repeat_fraction: float = 0.375  # share of each batch's rows that are a passage written over and over
    repeat_lengths: tuple[int, int] = (10, 64)  # shortest and longest such passage, in characters

    def __post_init__(self):  # gpt.json stores the lengths as a JSON list: the same config either way
        object.__setattr__(self, "repeat_lengths", tuple(self.repeat_lengths))


def model_config(vocab_size: int, context_length: int = 128) -> DecoderConfig:
    """Chapter 12's sizes: E = 64, H = 4 heads of 16, 2 blocks, the head tied to the token embedding."""
    return DecoderConfig(vocab_size=vocab_size, context_length=context_length, embed_dim=64, num_heads=4,
                         num_layers=2, tie_head=True)


# The corpus: the paragraphs of pydoc_data.topics that Python 3.10 to 3.13 share.

def fingerprint(paragraph: str) -> str:
    """The first 16 hex digits of a paragraph's SHA-256: stored instead of the text itself."""
    return hashlib.sha256(paragraph.encode()).hexdigest()[:16]


def topic_paragraphs(topics: dict[str, str]) -> list[str]:
    """Every non-blank paragraph (split at blank lines) of the topics, topic by topic in name order."""
    return [p for name in sorted(topics) for p in topics[name].split("\n\n") if p.strip()]


def corpus_text(topics: dict[str, str] | None = None) -> str:
    """Chapter 12's corpus: the stored paragraphs, in their stored order, joined by blank lines.

    `topics` defaults to this Python's `pydoc_data.topics`. A Python that lacks one of them (its
    documentation was edited) gets an error naming how many are missing, never another corpus.
    """
    if topics is None:
        from pydoc_data.topics import topics
    stored = json.loads(DATA.joinpath(CORPUS_FILE).read_text())
    found = {fingerprint(p): p for p in topic_paragraphs(topics)}
    missing = [f for f in stored["fingerprints"] if f not in found]
    if missing:
        raise ValueError(f"this Python's pydoc_data.topics lacks {len(missing)} of the "
                         f"{len(stored['fingerprints'])} paragraphs chapter 12's corpus is made of "
                         f"(checked on Python {', '.join(stored['pythons'])}); the stored model and "
                         "results would not match a different corpus")
    text = "\n\n".join(found[f] for f in stored["fingerprints"])
    if hashlib.sha256(text.encode()).hexdigest() != stored["sha256"]:
        raise ValueError("the corpus assembled from pydoc_data.topics does not have the stored SHA-256")
    return text


def shared_fingerprints(versions: list[dict[str, str]]) -> list[str]:
    """Fingerprints of the paragraphs every one of `versions` (topics dicts) has, in the first one's order,
    each once (`scripts/train_gpt.py --corpus` writes them)."""
    shared = set.intersection(*(set(topic_paragraphs(v)) for v in versions))
    ordered = dict.fromkeys(p for p in topic_paragraphs(versions[0]) if p in shared)
    return [fingerprint(p) for p in ordered]


# Characters as tokens.

def vocabulary(text: str) -> list[str]:
    """The characters of `text`, sorted: token id i is vocabulary[i]."""
    return sorted(set(text))


def encode(text: str, vocab: list[str]) -> torch.Tensor:
    """Characters -> ids (N,); a character outside `vocab` is an error naming it."""
    index = {c: i for i, c in enumerate(vocab)}
    unknown = sorted(set(text) - index.keys())
    if unknown:
        raise ValueError(f"text has characters outside the vocabulary of {len(vocab)}: {unknown[:10]}")
    return torch.tensor([index[c] for c in text], dtype=torch.long)


def decode(ids, vocab: list[str]) -> str:
    """Ids -> characters."""
    return "".join(vocab[int(i)] for i in ids)


def split(ids: torch.Tensor, validation_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(training ids, validation ids): the validation split is the end of the corpus."""
    cut = int(len(ids) * (1 - validation_fraction))
    return ids[:cut], ids[cut:]


# Training: every position predicts the next character.

def windows(ids: torch.Tensor, starts: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets (B, T) for windows beginning at `starts` (B,): targets are inputs shifted by one."""
    index = starts[:, None] + torch.arange(length + 1)  # (B, T + 1)
    chunk = ids[index]  # (B, T + 1)
    return chunk[:, :-1], chunk[:, 1:]  # (B, T), (B, T)


def random_windows(ids: torch.Tensor, batch_size: int, length: int, generator: torch.Generator):
    """A batch of windows at random places in `ids`: inputs, targets (B, T)."""
    starts = torch.randint(0, len(ids) - length, (batch_size,), generator=generator)  # (B,)
    return windows(ids, starts, length)


def repeated_passages(ids: torch.Tensor, count: int, length: int, generator: torch.Generator,
                      shortest: int, longest: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets (count, T) made of real passages written over and over (chapter 12).

    Row by row, a passage length n from `shortest` to `longest` and then its start s are drawn from
    `generator`; the row is ids[s : s + n] repeated to fill T + 1 characters, so from the (n + 1)-th
    character on every target can be copied from n characters back: the task an induction head solves.
    """
    if not 1 <= shortest <= longest < len(ids):
        raise ValueError(f"repeat lengths must satisfy 1 <= shortest <= longest < len(ids) = {len(ids)}, "
                         f"got shortest={shortest}, longest={longest}")
    periods, starts = [], []
    for _ in range(count):  # n, then s, for each row in turn
        periods.append(int(torch.randint(shortest, longest + 1, (1,), generator=generator)))
        starts.append(int(torch.randint(0, len(ids) - periods[-1], (1,), generator=generator)))
    n = torch.tensor(periods, dtype=torch.long)[:, None]  # (count, 1)
    offsets = torch.arange(length + 1) % n  # (count, T + 1): 0 … n − 1, 0 … n − 1, …
    chunk = ids[torch.tensor(starts, dtype=torch.long)[:, None] + offsets]  # (count, T + 1)
    return chunk[:, :-1], chunk[:, 1:]  # (count, T), (count, T)


def training_batch(ids: torch.Tensor, config: GPTTrainConfig, generator: torch.Generator):
    """One step's inputs and targets (B, T): random windows of `ids`, whose first round(B · repeat_fraction)
    rows are then replaced by `repeated_passages` (chapter 12: copying must pay for an induction head to
    form). With repeat_fraction 0 they are `random_windows`, drawn the same way."""
    if not 0 <= config.repeat_fraction <= 1:
        raise ValueError(f"repeat_fraction must be in [0, 1], got {config.repeat_fraction}")
    inputs, targets = random_windows(ids, config.batch_size, config.context_length, generator)  # (B, T) each
    count = round(config.batch_size * config.repeat_fraction)
    if count == 0:
        return inputs, targets
    shortest, longest = config.repeat_lengths
    copied_inputs, copied_targets = repeated_passages(ids, count, config.context_length, generator,
                                                      shortest, longest)  # (count, T) each
    return (torch.cat([copied_inputs, inputs[count:]]),  # (B, T)
            torch.cat([copied_targets, targets[count:]]))  # (B, T)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) over every position of every window: logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # (B·T, V) against (B·T,)


def bits(nats: float) -> float:
    """A loss in nats per character -> bits per character."""
    return nats / math.log(2)


def kneser_ney(train: str, vocab: list[str], k: int, discount: float = 0.75):
    """Interpolated Kneser–Ney on characters, up to `k` characters of context (chapter 12's baseline;
    Chen & Goodman, 1998, after Kneser & Ney, 1995): returns probability(context, c).

    The longest usable context (k, or fewer at a window's start) takes its counts C(hc) minus `discount`;
    each shorter one counts N(·hc), the different characters seen before hc; the shortest is an add-one
    unigram of those. Each order gives the order below it weight discount · K(h) / C(h) (K(h): the
    different characters after h), so every conditional sums to 1 over `vocab`. An unseen context passes
    the shorter one's prediction on. Float64 sums of integer counts: the same on every machine."""
    if k < 1:
        raise ValueError(f"kneser_ney: k must be at least 1, got {k}")
    if not 0 < discount < 1:
        raise ValueError(f"kneser_ney: discount must lie in (0, 1), got {discount}")
    known = set(vocab)

    def grams(n):  # every n-character string of train, counted
        return collections.Counter(train[i:i + n] for i in range(len(train) - n + 1))

    def by_context(counts):  # hc -> count: also C(h) and K(h)
        total, kinds = collections.Counter(), collections.Counter()
        for hc, count in counts.items():
            total[hc[:-1]] += count
            kinds[hc[:-1]] += 1
        return counts, total, kinds

    raw = [None] + [by_context(grams(n + 1)) for n in range(1, k + 1)]  # raw[n]: n characters of context
    continuation = [by_context(collections.Counter(ahc[1:] for ahc in grams(n + 2)))  # N(·hc)
                    for n in range(k)]

    def probability(context: str, c: str) -> float:
        if c not in known:
            raise ValueError(f"kneser_ney: {c!r} is not in the vocabulary of {len(vocab)} characters")
        top = min(k, len(context))
        before, total, _ = continuation[0]
        p = (before[c] + 1) / (total[""] + len(vocab))  # add-one continuation unigram
        for n in range(1, top + 1):
            counts, total, kinds = raw[n] if n == top else continuation[n]
            h = context[-n:]
            if not total[h]:  # unseen: keep the shorter context's p
                break
            p = (max(counts[h + c] - discount, 0) + discount * kinds[h] * p) / total[h]
        return p

    return probability


def learning_rate(step: int, config: GPTTrainConfig) -> float:
    """Linear warm-up to the peak, then a cosine towards a tenth of it,
    reached at step `config.steps`, the end of training (chapter 12)."""
    peak = config.learning_rate
    if step < config.warmup:  # the peak at step warmup - 1
        return peak * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def evaluation_starts(ids: torch.Tensor, config: GPTTrainConfig) -> torch.Tensor:
    """Fixed, evenly spaced window starts (eval_windows,) on which the curves are measured."""
    return torch.linspace(0, len(ids) - config.context_length - 1, config.eval_windows).long()


@torch.no_grad()
def evaluate(model: Decoder, ids: torch.Tensor, config: GPTTrainConfig) -> float:
    """Mean next-character loss (nats) of `model` over the fixed windows of `ids`."""
    was_training = model.training
    model.eval()
    inputs, targets = windows(ids, evaluation_starts(ids, config), config.context_length)
    loss = next_token_loss(model(inputs), targets).item()
    model.train(was_training)
    return loss


def optimizer(model: Decoder, config: GPTTrainConfig) -> torch.optim.AdamW:
    """AdamW, decaying the matrices only (not biases, norms), as nanoGPT."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.learning_rate,
                             betas=(0.9, 0.95))


def train(text: str, config: GPTTrainConfig = GPTTrainConfig(), progress=None) -> tuple[Decoder, dict]:
    """Train chapter 12's model on `text`; returns it and its curves {step, train, validation} (nats).

    Deterministic: one seed for the weights, one generator for the batches, deterministic kernels.
    `progress`, if given, is called with (step, train loss, validation loss) at each measurement.
    """
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        return training_loop(text, config, progress)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)  # the caller's setting, as it was


def training_loop(text: str, config: GPTTrainConfig,
                  progress) -> tuple[Decoder, dict]:
    """`train`'s loop, run under deterministic algorithms (chapter 12)."""
    vocab = vocabulary(text)
    train_ids, validation_ids = split(encode(text, vocab),
                                      config.validation_fraction)
    torch.manual_seed(config.seed)  # the weights' seed
    model = initialise(Decoder(model_config(len(vocab),
                                            config.context_length)))
    adamw = optimizer(model, config)
    batches = torch.Generator().manual_seed(config.seed)  # the windows'
    curves = {"step": [], "train": [], "validation": []}
    for step in range(config.steps + 1):
        if step % config.eval_every == 0 or step == config.steps:
            measured = (evaluate(model, train_ids, config),
                        evaluate(model, validation_ids, config))
            for name, value in zip(("train", "validation"), measured,
                                   strict=True):
                curves[name].append(value)
            curves["step"].append(step)
            if progress is not None:
                progress(step, *measured)
        if step == config.steps:
            break
        for group in adamw.param_groups:  # both groups: this step's rate
            group["lr"] = learning_rate(step, config)
        inputs, targets = training_batch(  # (B, T) each
            train_ids, config, batches)
        train_step(model, adamw, inputs, targets)
    return model.eval(), curves


def train_step(model: Decoder, adamw: torch.optim.Optimizer,
               inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """One optimiser step on inputs and targets (B, T): the loss (nats)."""
    loss = next_token_loss(model(inputs), targets)  # every position
    adamw.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # norm <= 1
    adamw.step()
    return loss.item()


def initialise(model: Decoder) -> Decoder:
    """GPT-2's initialisation, as nanoGPT writes it: weights N(0, 0.02), biases 0, and the two projections
    that write into the residual stream N(0, 0.02/√(2L)). PyTorch's default N(0, 1) embedding, tied to the
    head, would start the model far above log2(V) bits per character (chapter 12 measures it)."""
    residual = 0.02 / math.sqrt(2 * model.config.num_layers)
    for name, parameter in model.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.zeros_(parameter)
        elif parameter.dim() == 2:
            std = residual if name.endswith(("out_proj.weight", "mlp.2.weight")) else 0.02
            torch.nn.init.normal_(parameter, mean=0.0, std=std)
    return model


def config_dict(config) -> dict:
    """A frozen dataclass as a plain dict (stored in gpt.json)."""
    return asdict(config)


def load_trained(without_repeats: bool = False) -> tuple[Decoder, dict]:
    """The stored model of `scripts/train_gpt.py` and its stored results (curves, vocabulary, times);
    `without_repeats=True` loads the same run trained with no repeated passages (repeat_fraction 0)."""
    stored = json.loads(DATA.joinpath(RESULT_FILE).read_text())
    config = GPTTrainConfig(**(stored["without_repeats"] if without_repeats else stored)["train"])
    model = Decoder(model_config(len(stored["vocabulary"]), config.context_length))
    with DATA.joinpath(PLAIN_WEIGHTS_FILE if without_repeats else WEIGHTS_FILE).open("rb") as file:
        state = torch.load(file, weights_only=True)
    model.load_state_dict(state)
    return model.eval(), stored


# Sampling: temperature, top-k and top-p (nucleus).

def top_k_top_p(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Logits (B, V) with every token outside the top k, or outside the smallest set of most likely tokens
    whose probabilities reach p, set to −∞ (Holtzman et al., 2020). Ties at the k-th logit are kept."""
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probabilities = sorted_logits.softmax(dim=-1)  # (B, V), most likely first
        before = probabilities.cumsum(dim=-1) - probabilities  # mass of the tokens ranked above each
        drop = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before >= top_p)  # (B, V)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample(model: Decoder, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
           use_cache: bool = True) -> torch.Tensor:
    """`prompt` (B, T0) continued by sampled tokens -> (B, T0 + max_new_tokens) (chapter 12).

    Chapter 7's generation loop (`generate_steps`: prefill, then one new token per step through the
    caches), with each step's logits divided by the temperature and then filtered by `top_k_top_p`, in
    Hugging Face's order (temperature, top-k, top-p), before chapter 7's `next_token` draws from them.
    Temperature 0 is greedy.
    """
    validate_generation(prompt, max_new_tokens, temperature, model.config.vocab_size)
    if prompt.shape[-1] + max_new_tokens > model.config.context_length:
        raise ValueError(f"prompt of {prompt.shape[-1]} tokens + max_new_tokens={max_new_tokens} exceed "
                         f"context_length={model.config.context_length}")
    top_k_top_p(torch.zeros(1, 1), top_k, top_p)  # bad top_k / top_p fail here, before any work
    scale = temperature if temperature > 0 else 1.0  # greedy: the filters keep the most likely token

    def tempered_and_filtered(logits):  # (B, V) -> (B, V)
        return top_k_top_p(logits / scale, top_k, top_p)

    steps = generate_steps(model, prompt, max_new_tokens, use_cache, 1.0 if temperature > 0 else 0.0, generator,
                           process=tempered_and_filtered)
    return collections.deque(steps, maxlen=1)[0] if max_new_tokens else prompt  # the last step's sequence


# The heads: their maps, and what the model loses without them.

@torch.no_grad()
def attention_maps(model: Decoder, tokens: torch.Tensor) -> torch.Tensor:
    """Every head's attention weights (L, H, T, T) for one sequence of tokens (1, T) (chapter 12)."""
    validate_tokens(tokens, model.config.vocab_size)
    if tokens.shape[0] != 1:
        raise ValueError(f"tokens must be one sequence (1, T), got {tuple(tokens.shape)}")
    T = tokens.shape[-1]
    x = model.token_embedding(tokens) + model.position_embedding(torch.arange(T))  # (1, T, E)
    maps = []
    for block in model.blocks:
        attention = block.attention.attention  # chapter 3's MultiHeadAttention inside chapter 5's wrapper
        h = block.norm1(x)  # (1, T, E)
        q = attention.split_heads(attention.q_proj(h))  # (1, H, T, E/H)
        k = attention.split_heads(attention.k_proj(h))  # (1, H, T, E/H)
        maps.append(head_weights(q, k, causal_mask(T))[0])  # (H, T, T)
        x = block(x)  # (1, T, E)
    return torch.stack(maps)  # (L, H, T, T)


@contextmanager
def ablated(model: Decoder, heads: list[tuple[int, int]]):
    """Inside the `with`, the listed (layer, head) pairs write nothing: their slice of the concatenated
    heads is zeroed before the output projection W^O (chapter 3's sum over heads, one term removed)."""
    d = model.config.embed_dim // model.config.num_heads
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (0 <= layer < model.config.num_layers and 0 <= head < model.config.num_heads):
            raise ValueError(f"head ({layer}, {head}) does not exist: layers 0..{model.config.num_layers - 1}, "
                             f"heads 0..{model.config.num_heads - 1}")
        by_layer.setdefault(layer, []).append(head)

    def silence(chosen):
        def hook(_, inputs):
            merged = inputs[0].clone()  # (B, T, E): heads side by side, E/H columns each
            for head in chosen:
                merged[..., head * d:(head + 1) * d] = 0
            return (merged,)
        return hook

    handles = [model.blocks[layer].attention.attention.out_proj.register_forward_pre_hook(silence(chosen))
               for layer, chosen in by_layer.items()]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def previous_token_scores(maps: torch.Tensor) -> torch.Tensor:
    """Mean weight each head puts on the position just before the query: (L, H, T, T) -> (L, H)."""
    return maps.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)


def induction_scores(maps: torch.Tensor, period: int) -> torch.Tensor:
    """On a sequence whose second half repeats its first (`period` tokens apart): the mean weight each
    head puts, from query t in the repeat, on key t − period + 1, the token after the earlier copy of t's
    token: (L, H, T, T) -> (L, H)."""
    T = maps.shape[-1]
    if not 1 <= period < T - 1:
        raise ValueError(f"period must be from 1 to T - 2 = {T - 2}, got {period}")
    before = maps.diagonal(offset=-(period - 1), dim1=-2, dim2=-1)  # (L, H, T − period + 1): queries period − 1 …
    return before[..., 1:].mean(dim=-1)  # queries period … T − 1
