"""Checks of chapter 3's graded exercises (multi-head attention); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import torch

from .common import boolean_problem, case_generator, CASES, Check, matches, shape_problem, sizes, value_problem


def check_split_heads(split_heads_by_hand, seed: int = 0) -> str | None:
    """Chapter 3: (B, T, E) -> (B, H, T, E/H), head h holding columns h·E/H to (h+1)·E/H − 1."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, H, d = sizes(gen, 4, 5)
        x = torch.randn(B, T, H * d, generator=gen)
        got = split_heads_by_hand(x, H)
        if problem := shape_problem(got, (B, H, T, d), f"splitting (B, T, E) = {tuple(x.shape)} into {H} heads"):
            return problem
        expected = x.view(B, T, H, d).transpose(1, 2)
        if not torch.equal(got, expected):
            return (f"head 1 of position 0 should hold columns {d}..{2 * d - 1} of x, i.e. x[0, 0, {d}:{2 * d}]; "
                    f"reshape to (B, T, H, E/H) first, then swap T and H")
    return None


def check_mha_forward(batched_mha_by_hand, seed: int = 0) -> str | None:
    """Chapter 3: x (B, T, E) and an nn.MultiheadAttention's parameters -> its output (B, T, E)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, H, d = sizes(gen, 4, 5)
        E = H * d
        # no initialisation (it would draw from the student's global generator): every parameter from `gen`
        module = torch.nn.utils.skip_init(torch.nn.MultiheadAttention, E, H, batch_first=True).eval()
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=gen) / d**0.5)
        x = torch.randn(B, T, E, generator=gen)
        params = [p.detach().clone() for p in (module.in_proj_weight, module.in_proj_bias,
                                                module.out_proj.weight, module.out_proj.bias)]
        got = batched_mha_by_hand(x, *params, H)
        if problem := shape_problem(got, (B, T, E), "the output"):
            return problem
        with torch.no_grad():
            expected, _ = module(x, x, x, need_weights=False)
        if matches(got, expected):
            continue
        if H > 1 and matches(got, _mha(x, *params, 1)):
            return f"you attended with one head of width E = {E}: split q, k and v into H = {H} heads of E/H = {d}"
        if matches(got, _mha(x, *params, H, scale=False)):
            return f"the scores are not scaled: divide each head's q kᵀ by √(E/H) = √{d}"
        if matches(got, _mha(x, *params, H, out=False)):
            return "the output projection is missing: apply out_proj (weight and bias) to the merged heads"
        return value_problem(got, expected, f"the output for (B, T, E) = {(B, T, E)}, H = {H}: entry") or "wrong output"
    return None


def _mha(x, in_w, in_b, out_w, out_b, H, scale=True, out=True):
    """nn.MultiheadAttention's self-attention forward pass, and the variants of the usual mistakes."""
    B, T, E = x.shape
    q, k, v = (x @ in_w.T + in_b).split(E, dim=-1)  # (B, T, E) each
    q, k, v = (t.view(B, T, H, E // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, E/H)
    scores = q @ k.transpose(-2, -1) / ((E // H) ** 0.5 if scale else 1.0)
    context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, E)
    return context @ out_w.T + out_b if out else context


def check_mask_to_sdpa(mask_to_sdpa, seed: int = 0) -> str | None:
    """Chapter 3: nn.MultiheadAttention's boolean attn_mask (T, S) and key_padding_mask (B, S), True =
    blocked, -> one boolean (B, 1, T, S) mask for F.scaled_dot_product_attention, True = may attend."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, S = sizes(gen, 3, 6)
        attn_mask = torch.rand(T, S, generator=gen) < 0.3
        key_padding_mask = torch.rand(B, S, generator=gen) < 0.3
        got = mask_to_sdpa(attn_mask, key_padding_mask)
        if problem := shape_problem(got, (B, 1, T, S), f"the mask for B={B}, T={T}, S={S}"):
            return problem + " (batch, a length-1 head axis that broadcasts, queries, keys)"
        if problem := boolean_problem(got):
            return problem
        expected = ~(attn_mask[None, None] | key_padding_mask[:, None, None, :])
        if torch.equal(got, ~expected):
            return "the convention is flipped: nn.MultiheadAttention's True means blocked, SDPA's True means may attend"
        for b, _, t, s in torch.nonzero(got != expected).tolist():
            why = "attn_mask" if attn_mask[t, s] else "key_padding_mask" if key_padding_mask[b, s] else None
            if why:
                return f"batch {b}: query {t} may attend to key {s} in your mask, but {why} blocks it"
            return f"batch {b}: query {t} may not attend to key {s} in your mask, though neither mask blocks it"
    return None


CHECKS: dict[str, Check] = {
    "ch3.split_heads": Check(check_split_heads, "split_heads_by_hand",
          forbidden=("attention_book.multihead.MultiHeadAttention.split_heads",)),
    "ch3.mha_forward": Check(check_mha_forward, "batched_mha_by_hand",
          forbidden=("torch.nn.functional.multi_head_attention_forward",
                     "torch.nn.functional.scaled_dot_product_attention",
                     "attention_book.multihead.MultiHeadAttention.forward")),
    "ch3.mask_to_sdpa": Check(check_mask_to_sdpa, "mask_to_sdpa",
          forbidden=("attention_book.multihead.mask_from_torch",)),
}
