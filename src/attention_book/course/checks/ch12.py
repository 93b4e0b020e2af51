"""Checks of chapter 12's graded exercises (a GPT you train); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import torch
import torch.nn.functional as F

from ...attention import scaled_dot_product_attention
from ...decoder import DecoderBlock, DecoderConfig
from ...gpt import GPTTrainConfig, learning_rate, top_k_top_p
from ...multihead import MultiHeadAttention
from .common import CASES, Check, case_generator, matches, shape_problem, sizes, value_problem


def random_block(gen: torch.Generator, E: int, H: int) -> DecoderBlock:
    """Chapter 7's `DecoderBlock` of width E and H heads, every parameter drawn from `gen`."""
    block = DecoderBlock(DecoderConfig(vocab_size=2, context_length=8, embed_dim=E, num_heads=H, num_layers=1))
    with torch.no_grad():
        for name, p in block.named_parameters():
            scale = 1.0 if "norm" in name and name.endswith("weight") else 0.0  # LayerNorm gains around 1
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + scale)
    return block.eval()


def block_variants(block: DecoderBlock, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What common mistakes compute instead of the block, by name."""
    mha = block.attention.attention

    def attention(h, causal=True):
        T = h.shape[-2]
        return mha(h, mask=torch.ones(T, T, dtype=torch.bool).tril() if causal else None)[0]

    def unscaled(h):  # the causal attention without 1/sqrt(d_k)
        B, T, E = h.shape
        H, d = mha.num_heads, mha.head_dim
        q, k, v = (proj(h).view(B, T, H, d).transpose(1, 2) for proj in (mha.q_proj, mha.k_proj, mha.v_proj))
        heads, _ = scaled_dot_product_attention(q, k, v, torch.ones(T, T, dtype=torch.bool).tril(), scale=1.0)
        return mha.out_proj(heads.transpose(1, 2).reshape(B, T, H * d))  # (B, H, T, d) -> (B, T, E)

    def mlp(h, approximate="tanh"):
        return block.mlp[2](F.gelu(block.mlp[0](h), approximate=approximate))

    y = x + attention(block.norm1(x), causal=False)
    x1 = x + attention(block.norm1(x))
    post = block.norm1(x + attention(x))
    x2 = x + unscaled(block.norm1(x))
    return {
        "no scaling": x2 + mlp(block.norm2(x2)),
        "no mask": y + mlp(block.norm2(y)),
        "exact gelu": x1 + mlp(block.norm2(x1), approximate="none"),
        "post-norm": block.norm2(post + mlp(post)),
        "no residual": mlp(block.norm2(attention(block.norm1(x)))),
        "one norm": x1 + mlp(block.norm1(x1)),
    }


BLOCK_FEEDBACK = {
    "no scaling": "the scores are not scaled: divide q·k by sqrt(d_k), d_k = E / H, before the softmax",
    "no mask": "position 0 sees later positions: set the scores of keys j > i to -inf before the softmax",
    "exact gelu": "GPT-2's GELU is the tanh approximation: F.gelu(h, approximate='tanh')",
    "post-norm": "that is a post-norm block, norm(x + f(x)); GPT-2 normalises the input of each branch: "
                 "x + f(norm(x))",
    "no residual": "the residual connections are missing: each branch's output is added to its input, x + f(norm(x))",
    "one norm": "the MLP branch has its own LayerNorm, norm2.weight and norm2.bias",
}


def check_block(block_by_hand, seed: int = 0) -> str | None:
    """Chapter 12: x (B, T, E), the block's weights (a dict of chapter 7's DecoderBlock parameter names),
    H -> x + attention(norm1(x)), then + mlp(norm2(·)), with the causal mask."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, H, d = sizes(gen, 4, 4)
        T, E = T + 1, H * d
        block = random_block(gen, E, H)
        x = torch.randn(B, T, E, generator=gen)
        weights = {name: t.detach().clone() for name, t in block.state_dict().items()}
        with torch.no_grad():
            expected = block(x)
            got = block_by_hand(x.clone(), weights, H)
            if problem := shape_problem(got, expected.shape, f"the block's output for B={B}, T={T}, E={E}"):
                return problem
            if matches(got, expected, atol=1e-4):
                continue
            for name, wrong in block_variants(block, x).items():
                if matches(got, wrong, atol=1e-4):
                    return BLOCK_FEEDBACK[name]
        return value_problem(got, expected, f"B={B}, T={T}, E={E}, H={H}: output", atol=1e-4) or "wrong output"
    return None


def check_lm_loss(lm_loss_by_hand, seed: int = 0) -> str | None:
    """Chapter 12: logits (B, T, V) of a model run on tokens (B, T) -> the mean cross-entropy of predicting
    token t + 1 at position t, over all B·(T − 1) positions (nats)."""
    for case in range(CASES + 1):
        gen = case_generator(seed, case)
        B, T, V = sizes(gen, 3, 6)
        T, V = T + 2, V + 2
        logits = torch.randn(B, T, V, generator=gen) * (2 if case < CASES else 100)  # the last: exp overflows
        tokens = torch.randint(0, V, (B, T), generator=gen)
        got = lm_loss_by_hand(logits.clone(), tokens.clone())
        if not isinstance(got, torch.Tensor) or got.dim() != 0:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return f"the loss should be one number, a tensor of shape (), yours is {shape}"
        expected = F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
        if not math.isfinite(got.item()):
            return (f"your loss is {got.item()} for logits as large as {logits.abs().max().item():.0f}: exp "
                    "overflows; take log_softmax (or subtract each row's maximum before exp)")
        if math.isclose(got.item(), expected.item(), rel_tol=1e-5, abs_tol=1e-6):
            continue
        per = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, T − 1)
        wrong = {
            "unshifted": F.cross_entropy(logits.reshape(-1, V), tokens.reshape(-1)),
            "backwards": F.cross_entropy(logits[:, 1:].reshape(-1, V), tokens[:, :-1].reshape(-1)),
            "last": F.cross_entropy(logits[:, -2], tokens[:, -1]),
            "sum": per.sum(),
            "per sequence sum": per.sum(dim=1).mean(),
            "bits": per.mean() / math.log(2),
        }
        feedback = {
            "unshifted": "position t is scored on token t, which it already sees: its target is token t + 1 "
                         "(logits[:, :-1] against tokens[:, 1:])",
            "backwards": "the shift goes the wrong way: position t predicts token t + 1, so drop the last "
                         "position's logits and the first token",
            "last": "only the last position is scored; training scores every position at once",
            "sum": "that is the sum over positions; the loss is their mean",
            "per sequence sum": "that is each sequence's sum, averaged over the batch; average over every position",
            "bits": "that is in bits; the loss is in nats (natural logarithm), as F.cross_entropy gives it",
        }
        for name, value in wrong.items():
            if math.isclose(got.item(), value.item(), rel_tol=1e-5, abs_tol=1e-6):
                return feedback[name]
        return f"B={B}, T={T}, V={V}: your loss is {got.item():.4f}, expected {expected.item():.4f}"
    return None


ORDER_CASES = 4  # cases in which filtering top-p before renormalising over the top k gives other tokens


def order_separating_p(logits: torch.Tensor, k: int) -> float:
    """A p at which top-p over the top-k survivors' renormalised probabilities keeps only the most likely
    token of every row, while top-p over all V tokens' probabilities keeps the second as well: between
    the top token's probability before and after renormalising over the k largest."""
    top = logits.topk(k, dim=-1).values  # (B, k)
    before, after = logits.softmax(-1).max(-1).values, top.softmax(-1)[:, 0]  # (B,) each
    if bool(before.max() < after.min()):
        return round(float((before.max() + after.min()) / 2), 3)
    return round(float(after.min()), 3)


def check_filter_logits(filter_logits, seed: int = 0) -> str | None:
    """Chapter 12: logits (B, V), top_k (int or None), top_p (float or None) -> logits with −inf everywhere
    outside the k largest and outside the smallest most-likely set whose probability reaches p."""
    for case in range(CASES + ORDER_CASES):
        gen = case_generator(seed, case)
        B, V = sizes(gen, 2, 9)
        V += 2
        logits = torch.randn(B, V, generator=gen) * 2
        if case < CASES:
            top_k = [None, int(torch.randint(1, V + 1, (1,), generator=gen))][case % 2]
            top_p = [None, round(float(torch.rand(1, generator=gen)) * 0.9 + 0.05, 2)][(case // 2) % 2]
        else:  # both, with p between the first token's share before and after top-k: the order decides
            top_k, top_p = 3, order_separating_p(logits, 3)
        given = logits.clone()
        got = filter_logits(given, top_k, top_p)
        if not torch.equal(given, logits):
            return ("filter_logits changed the logits it was given; return a new tensor (the caller may "
                    "still need them, e.g. to sample again at another temperature)")
        expected = top_k_top_p(logits, top_k, top_p)
        if problem := shape_problem(got, expected.shape, "the filtered logits"):
            return problem
        got_kept, kept = torch.isfinite(got), torch.isfinite(expected)
        where = f"for top_k={top_k}, top_p={top_p}, V={V}"
        if torch.equal(got_kept, kept):
            if not torch.equal(got[kept], expected[kept]):
                return f"{where}: the kept logits must stay as they were (filtering only sets others to -inf)"
            continue
        if (got[~got_kept] > float("-inf")).any():
            return f"{where}: dropped tokens must get -inf, so that the softmax gives them probability 0"
        if top_k is not None and top_p is not None:
            unrenormalised = torch.isfinite(top_k_top_p(logits, None, top_p)) & torch.isfinite(
                top_k_top_p(logits, top_k, None))  # top-p on the full softmax, then top-k
            if torch.equal(got_kept, unrenormalised):
                return (f"{where}: top-p measured the probabilities over all V tokens; apply top-k first, "
                        "then take the softmax over the k survivors and keep tokens while the mass ranked "
                        "above them is below p")
        if top_p is not None:
            order = logits.softmax(-1).sort(dim=-1, descending=True)
            crossing = order.values.cumsum(-1) <= top_p  # the wrong rule: drops the token that crosses p
            narrow = torch.zeros_like(crossing).scatter(-1, order.indices, crossing)
            if top_k is not None:
                narrow &= torch.isfinite(top_k_top_p(logits, top_k, None))
            if torch.equal(got_kept, narrow):
                return (f"{where}: the token whose probability carries the running sum past p must be kept too "
                        "(keep a token while the mass ranked above it is below p)")
        row = int((got_kept != kept).any(dim=-1).nonzero()[0])
        return (f"{where}, row {row}: you keep tokens {got_kept[row].nonzero().flatten().tolist()}, "
                f"expected {kept[row].nonzero().flatten().tolist()}")
    return None


def random_attention(gen: torch.Generator, E: int, H: int) -> MultiHeadAttention:
    """Chapter 3's `MultiHeadAttention` with every parameter drawn from `gen`."""
    mha = MultiHeadAttention(E, H)
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return mha.eval()


def attention_without(mha: MultiHeadAttention, x: torch.Tensor, heads: list[int], bias: bool = True,
                      causal: bool = True, rescale: bool = False):
    """Causal attention of x (B, T, E) with the listed heads' outputs zeroed before W^O. For the check's
    diagnoses: `causal=False` drops the mask, `rescale` scales the kept heads by H / (H − removed)."""
    T, d = x.shape[-2], mha.head_dim
    q, k, v = (mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))  # (B, H, T, d) each
    mask = torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~mask, float("-inf")).softmax(-1)
    context = weights @ v  # (B, H, T, d)
    for head in heads:
        context[:, head] = 0
    if rescale and heads:
        context = context * (mha.num_heads / (mha.num_heads - len(set(heads))))
    merged = mha.merge_heads(context)  # (B, T, E)
    return F.linear(merged, mha.out_proj.weight, mha.out_proj.bias if bias else None)


def check_without_head(without_head, seed: int = 0) -> str | None:
    """Chapter 12: x (B, T, E), the weights of chapter 3's MultiHeadAttention (q_proj/k_proj/v_proj/out_proj
    weight and bias), H and a head -> causal attention whose head `head` writes nothing."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, d = sizes(gen, 3, 4)
        H = int(torch.randint(2, 5, (1,), generator=gen))
        T, E = T + 1, H * d
        head = int(torch.randint(0, H, (1,), generator=gen))
        mha = random_attention(gen, E, H)
        x = torch.randn(B, T, E, generator=gen)
        weights = {name: t.detach().clone() for name, t in mha.state_dict().items()}
        with torch.no_grad():
            got = without_head(x.clone(), weights, H, head)
            expected = attention_without(mha, x, [head])
            if problem := shape_problem(got, expected.shape, f"the output for B={B}, T={T}, E={E}"):
                return problem
            if matches(got, expected, atol=1e-4):
                continue
            where = f"H={H}, head {head}"
            if matches(got, attention_without(mha, x, [head], bias=False), atol=1e-4):
                return f"{where}: W^O's bias belongs to no head; removing a head keeps it"
            if matches(got, attention_without(mha, x, []), atol=1e-4):
                return f"{where}: nothing was removed; zero head {head}'s E/H columns before W^O"
            if matches(got, attention_without(mha, x, [head], causal=False), atol=1e-4):
                return (f"{where}: every query sees every key; the block is causal: mask the keys after each "
                        "query (a lower-triangular T × T mask) before the softmax")
            if matches(got, attention_without(mha, x, [head], rescale=True), atol=1e-4):
                return (f"{where}: the kept heads were scaled up (as dropout does in training); an ablation "
                        "only zeroes the removed head's share")
            if matches(got, attention_without(mha, x, [head]) + F.linear(
                    F.pad(mha.v_proj.bias[head * d:(head + 1) * d], (head * d, E - (head + 1) * d)).expand(B, T, E),
                    mha.out_proj.weight), atol=1e-4):
                return (f"{where}: the head still writes its value bias (its weights sum to 1 over the keys); "
                        "zero the head's output, its E/H columns of the concatenated heads, not only W_V")
            for other in range(H):
                if other != head and matches(got, attention_without(mha, x, [other]), atol=1e-4):
                    return f"{where}: you removed head {other}; head h owns columns h·E/H … (h + 1)·E/H − 1"
            out = mha.out_proj(mha.merge_heads(
                (mha.split_heads(mha.q_proj(x)) @ mha.split_heads(mha.k_proj(x)).transpose(-2, -1)
                 / math.sqrt(d)).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
                .softmax(-1) @ mha.split_heads(mha.v_proj(x))))
            out[..., head * d:(head + 1) * d] = 0
            if matches(got, out, atol=1e-4):
                return (f"{where}: you zeroed W^O's output columns; a head's share is its E/H columns of "
                        "W^O's input (the concatenated heads), which W^O mixes into every output column")
        return value_problem(got, expected, f"{where}: output", atol=1e-4) or "wrong output"
    return None


def schedule_variants(peak: float, warmup: int, steps: int) -> dict[str, list[float]]:
    """The learning rate of every step 0 … steps − 1 by `gpt.learning_rate` (a linear warm-up over `warmup`
    steps, then a cosine down to a tenth of `peak` at the last step), and what common mistakes give instead."""
    config = GPTTrainConfig(steps=steps, warmup=warmup, learning_rate=peak)
    right = [learning_rate(step, config) for step in range(steps)]

    def cosine(step, start, length, floor=0.1):
        progress = (step - start) / max(1, length)
        return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))

    after = range(warmup, steps)
    return {
        "right": right,
        "from zero": [peak * step / warmup for step in range(warmup)] + right[warmup:],
        "to zero": right[:warmup] + [cosine(step, warmup, steps - warmup, floor=0.0) for step in after],
        "no warm-up": [cosine(step, 0, steps) for step in range(steps)],
        "linear": right[:warmup] + [peak * (0.1 + 0.9 * (1 - (step - warmup) / max(1, steps - warmup)))
                                    for step in after],
        "whole run": right[:warmup] + [cosine(step, warmup, steps) for step in after],
    }


SCHEDULE_FEEDBACK = {
    "from zero": "the warm-up starts at 0, so step 0 trains with a learning rate of 0: step s of the warm-up "
                 "gets peak · (s + 1) / warmup, reaching the peak at its last step",
    "to zero": "the cosine ends at 0; here it ends at a tenth of the peak: peak · (0.1 + 0.9 · (1 + cos(π·p)) / 2)",
    "no warm-up": "the learning rate starts at the peak: the first `warmup` steps climb linearly to it, and the "
                  "cosine starts after them",
    "linear": "the decay after the warm-up is a half cosine, (1 + cos(π·p)) / 2 of the way from a tenth of the "
              "peak to the peak, not a straight line",
    "whole run": "the cosine's progress p counts from the end of the warm-up: p = (s − warmup) / (steps − warmup), "
                 "reaching a tenth of the peak at step `steps`, the end of training",
}


def _same_rates(got: list[float], rates: list[float]) -> bool:
    """Every step's learning rate agrees to a relative 1e-6."""
    return all(math.isclose(g, r, rel_tol=1e-6, abs_tol=1e-12) for g, r in zip(got, rates, strict=True))


def check_lr_schedule(lr_schedule, seed: int = 0) -> str | None:
    """Chapter 12: peak, warmup, steps -> the learning rate of every step 0 … steps − 1, a list, as
    `gpt.learning_rate` gives it: a linear warm-up, then a cosine down towards a tenth of the peak."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        peak = round(float(torch.rand(1, generator=gen)) * 0.009 + 0.001, 4)
        warmup = int(torch.randint(2, 21, (1,), generator=gen))
        steps = warmup + int(torch.randint(3, 120, (1,), generator=gen))
        where = f"peak={peak}, warmup={warmup}, steps={steps}"
        variants = schedule_variants(peak, warmup, steps)
        got = lr_schedule(peak, warmup, steps)
        try:
            got = [float(rate) for rate in got]
        except (TypeError, ValueError):
            return f"{where}: return the learning rates of the {steps} steps, a list of numbers"
        if len(got) != steps:
            return f"{where}: one learning rate per step, {steps} of them (steps 0 … {steps - 1}); yours has {len(got)}"

        if _same_rates(got, variants["right"]):
            continue
        for name, rates in variants.items():
            if name != "right" and _same_rates(got, rates):
                return f"{where}: {SCHEDULE_FEEDBACK[name]}"
        step = next(s for s, (g, r) in enumerate(zip(got, variants["right"], strict=True))
                    if not math.isclose(g, r, rel_tol=1e-6, abs_tol=1e-12))
        right, part = variants["right"][step], "warm-up" if step < warmup else "cosine"
        return (f"{where}: step {step} should train at {right:.10g}, yours gives {got[step]:.10g}, a relative "
                f"difference of {abs(got[step] - right) / abs(right):.1e}, more than rounding: check the {part}'s "
                f"formula at that step (which step it counts from, and what it divides by)")
    return None


CHECKS: dict[str, Check] = {
    "ch12.block": Check(check_block, "block_by_hand",
          forbidden=("attention_book.decoder.DecoderBlock.forward",
                     "attention_book.multihead.MultiHeadAttention.forward",
                     "torch.nn.functional.scaled_dot_product_attention")),
    "ch12.lm_loss": Check(check_lm_loss, "lm_loss_by_hand",
          forbidden=("torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss",
                     "attention_book.gpt.next_token_loss")),
    "ch12.filter_logits": Check(check_filter_logits, "filter_logits",
          forbidden=("attention_book.gpt.top_k_top_p",)),
    "ch12.without_head": Check(check_without_head, "without_head",
          forbidden=("attention_book.gpt.ablated", "attention_book.multihead.MultiHeadAttention.forward",
                     "torch.nn.functional.scaled_dot_product_attention")),
    "ch12.lr_schedule": Check(check_lr_schedule, "lr_schedule", forbidden=("attention_book.gpt.learning_rate",)),
}
