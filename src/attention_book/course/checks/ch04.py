"""Checks of chapter 4's graded exercises (cross-attention and padding); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import torch

from ...attention import scaled_dot_product_attention
from .common import boolean_problem, case_generator, CASES, Check, matches, shape_problem, sizes, value_problem


def check_padding_mask(padding_mask_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: lengths (B,) and S -> boolean (B, S), True for real tokens (the package's convention)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        S = int(torch.randint(1, 9, (1,), generator=gen))
        lengths = torch.randint(1, S + 1, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen)
        got = padding_mask_by_hand(lengths, S)
        if problem := shape_problem(got, (len(lengths), S), "the mask"):
            return problem
        if problem := boolean_problem(got):
            return problem
        expected = torch.arange(S) < lengths[:, None]
        for b, s in zip(*torch.nonzero(got != expected).T.tolist(), strict=True):
            what = "lets queries see padded position" if got[b, s] else "hides real position"
            return f"sequence {b} has length {int(lengths[b])}: your mask {what} {s}"
    return None


def check_masked_loss(masked_loss_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: logits (B, T, V), labels (B, T) and target lengths (B,) -> the mean cross-entropy over the
    real positions t < lengths[b] only (padded query positions do not count)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, V = [n + 1 for n in sizes(gen, 3, 7)]
        logits = torch.randn(B, T, V, generator=gen) * 2
        labels = torch.randint(0, V, (B, T), generator=gen)
        lengths = torch.randint(1, T + 1, (B,), generator=gen)
        lengths[0] = max(1, T - 1)  # at least one padded position in the batch
        got = masked_loss_by_hand(logits, labels, lengths)
        if problem := shape_problem(torch.as_tensor(got), (), "the loss"):
            return problem + " (one number: the mean over the real positions)"
        real = torch.arange(T) < lengths[:, None]  # (B, T)
        nll = -torch.log_softmax(logits, dim=-1).gather(-1, labels[..., None]).squeeze(-1)  # (B, T)
        expected = nll[real].mean()
        if torch.allclose(torch.as_tensor(got, dtype=expected.dtype), expected, atol=1e-5):
            continue
        if torch.allclose(torch.as_tensor(got, dtype=expected.dtype), nll.mean(), atol=1e-5):
            return (f"you averaged over every position, padding included: with lengths {lengths.tolist()}, only "
                    f"positions below each length count")
        if torch.allclose(torch.as_tensor(got, dtype=expected.dtype), (nll * real).sum() / nll.numel(), atol=1e-5):
            return (f"the padded positions are zeroed but still counted in the mean: divide by the number of real "
                    f"positions, {int(real.sum())}, not {nll.numel()}")
        return f"with lengths {lengths.tolist()} the loss is {expected:.4f}, yours is {float(got):.4f}"
    return None


def check_padded_attention(padded_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: q (B, T, d), k (B, S, d), v (B, S, d_v) and lengths (B,) -> (B, T, d_v), no key beyond a
    sequence's length attended."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, S, d = sizes(gen, 4, 6)
        q, k, v = torch.randn(B, T, d, generator=gen), torch.randn(B, S, d, generator=gen), torch.randn(B, S, d, generator=gen)
        lengths = torch.randint(1, S + 1, (B,), generator=gen)
        if case % 4 == 0:
            lengths[0] = 0  # an empty source: its queries see no key
        got = padded_attention_by_hand(q, k, v, lengths)
        mask = (torch.arange(S) < lengths[:, None])[:, None, :]  # (B, 1, S)
        expected, _ = scaled_dot_product_attention(q, k, v, mask)  # zeros for an empty source
        if matches(got, expected):
            continue
        empty = [b for b in range(B) if lengths[b] == 0]
        if empty and isinstance(got, torch.Tensor) and got.shape == expected.shape and got[empty].isnan().any() \
                and matches(got[lengths > 0], expected[lengths > 0]):
            return (f"sequence {empty[0]} has length 0: its queries may see no key, and a softmax over only −inf "
                    "gives NaN; return zeros for them (the package's convention), not NaN")
        if matches(got, scaled_dot_product_attention(q, k, v)[0]):
            return f"the padding is attended: with lengths {lengths.tolist()}, keys at or beyond a length must get weight 0"
        if matches(got, scaled_dot_product_attention(q, k, v, ~mask)[0]):
            return "the mask is flipped: the real tokens (positions below the length) are the ones to attend"
        return value_problem(got, expected, f"the output with lengths {lengths.tolist()} at") or "wrong output"
    return None


def cross_reference(x, key, value, weights, H, heads=None, scale=None, bias=True):
    """nn.MultiheadAttention's cross-attention with kdim/vdim, written out; `heads`, `scale` and `bias`
    reproduce the usual mistakes."""
    E = x.shape[-1]
    heads = heads or H
    b_q, b_k, b_v = weights["in_proj_bias"].chunk(3) if bias else (0.0, 0.0, 0.0)
    q = x @ weights["q_proj_weight"].T + b_q  # (B, T, E)
    k = key @ weights["k_proj_weight"].T + b_k  # (B, S, E)
    v = value @ weights["v_proj_weight"].T + b_v  # (B, S, E)
    q, k, v = (t.unflatten(-1, (heads, E // heads)).transpose(1, 2) for t in (q, k, v))  # (B, h, L, E/h)
    scores = q @ k.transpose(-2, -1) / (scale or (E // heads) ** 0.5)  # (B, h, T, S)
    context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).flatten(-2)  # (B, T, E)
    return context @ weights["out_proj.weight"].T + weights["out_proj.bias"]


def check_cross_attention(cross_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: an nn.MultiheadAttention(E, H, kdim, vdim, batch_first=True)'s output from its named
    parameters, x (B, T, E), key (B, S, kdim), value (B, S, vdim) -> (B, T, E)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, T, S = sizes(gen, 3, 5)
        H = 2 if case % 2 else int(torch.randint(1, 4, (1,), generator=gen))
        E = H * int(torch.randint(1, 4, (1,), generator=gen))
        kdim, vdim = (E + n for n in sizes(gen, 2, 6))  # never E: three separate projection matrices
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
            layer = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=vdim, batch_first=True).eval()
            torch.nn.init.normal_(layer.in_proj_bias)
            torch.nn.init.normal_(layer.out_proj.bias)
        weights = {name: p.detach().clone() for name, p in layer.named_parameters()}
        x, key, value = (torch.randn(B, L, w, generator=gen) for L, w in ((T, E), (S, kdim), (S, vdim)))
        with torch.no_grad():
            expected, _ = layer(x, key, value, need_weights=False)
        got = cross_attention_by_hand(x, key, value, dict(weights), H)
        if matches(got, expected):
            continue
        if problem := shape_problem(got, expected.shape, "the output"):
            return problem + " (B, T, E): the queries' length and width"
        if H > 1 and matches(got, cross_reference(x, key, value, weights, H, heads=1)):
            return f"you attended with one head of width E = {E}: split q, k and v into H = {H} heads of E/H"
        if H > 1 and matches(got, cross_reference(x, key, value, weights, H, scale=E ** 0.5)):
            return f"each head's scores are divided by √(E/H) = √{E // H}, not by √E = √{E}"
        if matches(got, cross_reference(x, key, value, weights, H, bias=False)):
            return "in_proj_bias is missing: its three thirds are the query, key and value biases"
        return value_problem(got, expected, f"with E={E}, H={H}, kdim={kdim}, vdim={vdim}, the output") \
            or "wrong output"
    return None


def check_cross_cache(cross_decode_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: L residual cross-attention layers over one memory; each layer's keys and values made once
    from the memory -> (outputs (T, E), keys (L, S, E), values (L, S, E))."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, S, E = sizes(gen, 3, 6)
        L = 2 + case % 3
        y, memory = torch.randn(T, E, generator=gen), torch.randn(S, E, generator=gen)
        W_q, W_k, W_v = (torch.randn(L, E, E, generator=gen) / E ** 0.5 for _ in range(3))
        got = cross_decode_by_hand(y, memory, W_q, W_k, W_v)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            return "return three tensors: the outputs (T, E), and the cache's keys and values (L, S, E)"
        outputs, keys, values = got
        expected_keys, expected_values = memory @ W_k, memory @ W_v  # (L, S, E)
        for name, mine, right in (("keys", keys, expected_keys), ("values", values, expected_values)):
            if problem := shape_problem(mine, right.shape, f"the cached {name}"):
                return problem + " (L, S, E): one (S, E) block per layer, projected from the memory"
            for layer in range(1, L):
                if not matches(mine[layer], right[layer]) and matches(mine[layer], right[0]):
                    return (f"layer {layer}'s {name} are layer 0's: every layer projects the memory with its own "
                            f"W_{name[0]}[{layer}]")
            if not matches(mine, right):
                return f"the cached {name} should be memory @ W_{name[0]}[l] for every layer l: the final " \
                       "encoder output, not a decoder state"
        h = y  # the whole block at once, every position through every layer
        for q_l, k_l, v_l in zip(W_q, expected_keys, expected_values, strict=True):
            h = h + torch.softmax(h @ q_l @ k_l.T / E ** 0.5, dim=-1) @ v_l
        if matches(outputs, h):
            continue
        no_residual = y
        for q_l, k_l, v_l in zip(W_q, expected_keys, expected_values, strict=True):
            no_residual = torch.softmax(no_residual @ q_l @ k_l.T / E ** 0.5, dim=-1) @ v_l
        if matches(outputs, no_residual):
            return "the residual is missing: each layer adds its attention output to h"
        return value_problem(outputs, h, f"with L={L} layers, the output") or "wrong output"
    return None


CHECKS: dict[str, Check] = {
    "ch4.padding_mask": Check(check_padding_mask, "padding_mask_by_hand",
          forbidden=()),
    "ch4.masked_loss": Check(check_masked_loss, "masked_loss_by_hand",
          forbidden=("torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss")),
    "ch4.padded_attention": Check(check_padded_attention, "padded_attention_by_hand",
          forbidden=("attention_book.attention.scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")),
    "ch4.cross_attention": Check(check_cross_attention, "cross_attention_by_hand",
          forbidden=("torch.nn.MultiheadAttention.forward", "torch.nn.functional.multi_head_attention_forward",
                     "attention_book.multihead.MultiHeadAttention.forward")),
    "ch4.cross_cache": Check(check_cross_cache, "cross_decode_by_hand",
          forbidden=()),
}
