"""Exact attention without the T × S score matrix: online softmax, tiling,
the backward pass and split-KV decoding (chapter 9).

Milakov & Gimelshein (2018), "Online normalizer calculation for softmax";
Dao et al. (2022), "FlashAttention"; Dao (2023), "FlashAttention-2".
Lines stay within 79 columns: the chapter prints these functions.
"""

import functools
import math

import torch

from .attention import validate_attention_inputs, validate_causal_lengths, validate_operands
from .causal import causal_mask


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last axis, reading it `block_size` entries at a time
    (chapter 9): one pass gives m and l, then the result is exp(x − m) / l.
    """
    m, l = online_max_and_sum(x, block_size)  # (..., 1) each
    return torch.exp(x - m) / l


def online_max_and_sum(x: torch.Tensor, block_size: int):
    """The maximum m of x's last axis and l = Σ exp(x − m), in one pass of
    `block_size` entries at a time, in x's dtype -> (m, l), (..., 1) each
    (chapter 9).

    When a block raises the maximum, the sum so far is rescaled by
    exp(m_old − m_new). For 16-bit x, PyTorch's CPU `sum` adds each block
    in float32 and rounds once; adding it to l rounds again (and so does
    the rescale): a few 16-bit roundings per block, never one per term.
    """
    validate_block_size(block_size, "block_size")
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype,
                   device=x.device)  # (..., 1)
    l = torch.zeros_like(m)  # (..., 1)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]  # (..., b)
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        shift = finite_or_zero(m_new)  # 0 while the row has seen only −∞
        l = l * torch.exp(m - shift) + torch.exp(block - shift).sum(
            dim=-1, keepdim=True)
        m = m_new
    return m, l


def sequential_sum(x: torch.Tensor) -> torch.Tensor:
    """Σ x over the last axis, one term at a time in x's dtype, rounding
    after every addition -> (..., 1) (chapter 9).

    A running sum kept wholly in 16 bits, unlike `torch.sum`, which on a
    CPU accumulates float16 and bfloat16 in float32 and rounds once.
    """
    total = torch.zeros_like(x[..., :1])  # (..., 1)
    for j in range(x.shape[-1]):
        total = total + x[..., j:j + 1]  # rounded to x's dtype
    return total


def finite_or_zero(m: torch.Tensor) -> torch.Tensor:
    """The running maximum to subtract in the exponentials: −∞ (every score
    so far masked) becomes 0, as in FlashAttention (chapter 9).

    Otherwise exp(m − m_new) would be exp(−∞ + ∞) = NaN for a row whose
    first blocks are all masked (padding, a sliding window); with 0 the
    masked scores still give exp(−∞) = 0. The running maximum itself stays
    −∞, so that the first finite block sets it.
    """
    return m.masked_fill(torch.isneginf(m), 0.0)


def online_attention_states(scores: torch.Tensor, values: torch.Tensor,
                            block_size: int):
    """One query's attention read `block_size` keys at a time (chapter 9's
    tiles, for one row, as the interactive step-through shows them): yields
    (start, stop, m, l, acc) after each tile, with the running maximum m,
    the running sum l of exp(score − m) and the accumulator
    acc = Σ exp(score − m) · value over the keys read so far.

    scores (S,), values (S, d_v). After the last tile acc / l equals
    softmax(scores) · values: each tile's partial result is merged into
    what came before with `merge_partials`, as split-KV decoding merges its
    chunks.
    """
    validate_block_size(block_size, "block_size")
    validate_one_row(scores, values)
    m = torch.tensor(float("-inf"), dtype=scores.dtype)  # ()
    l = torch.tensor(0.0, dtype=scores.dtype)  # ()
    acc = values.new_zeros(values.shape[-1])  # (d_v,)
    for start in range(0, scores.shape[-1], block_size):
        stop = min(start + block_size, scores.shape[-1])
        m_tile = scores[start:stop].max()  # ()
        p = torch.exp(scores[start:stop] - finite_or_zero(m_tile))  # (b,)
        m, l, acc = merge_partials(m, l, acc, m_tile, p.sum(),
                                   p @ values[start:stop])  # (d_v,)
        yield start, stop, m, l, acc


def naive_attention(query, key, value, causal: bool = False) -> torch.Tensor:
    """The textbook form, softmax(Q Kᵀ / √d_k + mask) V, as chapters 2 and 5
    first write it: the whole (..., T, S) score matrix, then its softmax,
    each in a buffer of its own."""
    validate_attention_inputs(query, key, value)
    scale = 1 / math.sqrt(query.shape[-1])
    scores = (query * scale) @ key.transpose(-2, -1)  # (..., T, S)
    if causal:
        T, S = query.shape[-2], key.shape[-2]
        blocked = ~causal_mask(T, S, device=query.device)  # (T, S)
        scores = scores.masked_fill(blocked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ value  # (..., T, d_v)


def tiled_attention(query, key, value, causal: bool = False,
                    block_q: int = 256, block_k: int = 256, mask=None):
    """Exact attention computed block by block with online softmax: a few
    (block_q, block_k) tiles of scores per head at a time (two in the
    forward, the one in use and the next), never the (T, S) matrix, forward
    or backward (chapter 9).

    query (..., T, d_k), key (..., S, d_k), value (..., S, d_v) ->
    (..., T, d_v). With `causal`, the queries are the last T of S positions
    (chapter 5's bottom-right mask), and key blocks wholly in a query
    block's future are skipped. `mask` (padding, for example) follows
    chapter 2's convention and is read one tile at a time; a query that may
    see no key gets a zero output, as in chapter 2 (so do all T queries when
    S = 0). Differentiable in query, key and value through `TiledAttention`,
    whose backward recomputes the scores tile by tile (FlashAttention, in
    FlashAttention-2's loop order); a float mask gets no gradient, so one
    that requires grad is refused.
    """
    validate_attention_inputs(query, key, value, mask)
    validate_block_size(block_q, "block_q")
    validate_block_size(block_k, "block_k")
    validate_constant_mask(mask)
    if causal:
        validate_causal_lengths(query.shape[-2], key.shape[-2])
    return TiledAttention.apply(query, key, value, causal, block_q, block_k,
                                mask)


def tiled_attention_forward(query, key, value, causal=False, block_q=256,
                            block_k=256, mask=None, round_p=False):
    """The forward pass of `tiled_attention` -> (output (..., T, d_v), the
    log-sum-exp of each row's scores (..., T), natural log) (chapter 9).

    16-bit inputs are multiplied a tile at a time in float32, and the
    running max, sum and output stay in float32, as FlashAttention and
    PyTorch's SDPA keep them; the output is cast back to the input's dtype.
    The probabilities P stay in float32 too, unless `round_p`: then, as
    those kernels do, P is rounded to the input's dtype for P V (the sum l
    still adds the unrounded P).
    """
    batch = validate_attention_inputs(query, key, value, mask)[:-2]
    T, S, d_k = query.shape[-2], key.shape[-2], query.shape[-1]
    d_v = value.shape[-1]
    # G = prod(batch): every batch and head axis in one, for torch.bmm
    q, k, v = flatten_batch(query, key, value, batch)  # (G, T or S, d)
    G, work = q.shape[0], statistics_dtype(query.dtype)
    like = dict(dtype=work, device=q.device)  # float32 for 16-bit inputs
    output = torch.empty(G, T, d_v, dtype=query.dtype, device=q.device)
    lse = torch.empty(G, T, **like)  # (G, T)
    # Base 2: e^x = 2^(x · log2 e), so log2 e joins the 1/√d_k scale and
    # m, l, p are in base 2. Same result, faster: on the CPUs we timed
    # torch.exp2(x · log2 e) beats torch.exp(x) on ordinary inputs and far
    # more on −∞ and where the result is subnormal, x below about −87.3
    # (chapter 9 times both); on a GPU exp2 is the native instruction.
    scale = math.log2(math.e) / math.sqrt(d_k)
    offset = S - T  # query i sits at position offset + i
    for i in range(0, T, block_q):
        q_i = q[:, i:i + block_q].to(work) * scale  # (G, n, d_k)
        n = q_i.shape[1]
        m = torch.full((G, n, 1), float("-inf"), **like)  # running max
        l = torch.zeros_like(m)  # running sum of 2^(score − m)
        acc = torch.zeros(G, n, d_v, **like)  # unnormalised output
        # with the causal mask, keys from offset + i + n on are the future
        last_key = offset + i + n if causal else S
        for j in range(0, last_key, block_k):
            k_j = k[:, j:j + block_k].to(work)  # (G, b, d_k)
            v_j = v[:, j:j + block_k].to(work)  # (G, b, d_v)
            scores = torch.bmm(q_i, k_j.transpose(1, 2))  # (G, n, b)
            mask_scores(scores, causal, offset + i, j, mask, i, batch)
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            shift = finite_or_zero(m_new)  # 0 while a row saw only −∞
            rescale = torch.exp2(m - shift)  # (G, n, 1)
            p = scores.sub_(shift).exp2_()  # in place: (G, n, b)
            l.mul_(rescale).add_(p.sum(dim=-1, keepdim=True))
            if round_p:  # P in 16 bits for the product, as the kernels
                p = p.to(query.dtype).to(work)
            acc.mul_(rescale).baddbmm_(p, v_j)  # acc · rescale + p V_j
            m = m_new
        # log-sum-exp, natural log: (m + log2 l) · ln 2; −∞ if no key seen
        lse[:, i:i + n] = ((m + torch.log2(l)) * math.log(2)).squeeze(-1)
        l.masked_fill_(l == 0, 1.0)  # a row that saw no key: acc = 0
        output[:, i:i + n] = acc.div_(l)
    return output.reshape(*batch, T, d_v), lse.reshape(*batch, T)


def tiled_attention_backward(grad_output, query, key, value, output, lse,
                             causal=False, block_q=256, block_k=256,
                             mask=None):
    """dQ, dK, dV of `tiled_attention` from its output and row log-sum-exp
    alone (chapter 9; FlashAttention's backward, Dao et al., 2022, saving
    FlashAttention-2's log-sum-exp, Dao, 2023).

    With scores Z, P = softmax(Z), dO the output's gradient and
    D = rowsum(dO ∘ O): dV = Pᵀ dO, dP = dO Vᵀ, dZ = P ∘ (dP − D),
    dQ = dZ K / √d_k and dK = dZᵀ Q / √d_k. The outer loop walks key blocks,
    so dK_j and dV_j are summed in place and written once; the inner loop
    walks the query blocks that can see key block j, recomputing
    P = exp(Z − L) a tile at a time.
    """
    batch = lse.shape[:-1]
    T, S, d_k = query.shape[-2], key.shape[-2], query.shape[-1]
    d_v = value.shape[-1]
    q, k, v = flatten_batch(query, key, value, batch)  # (G, T or S, d)
    G, work = q.shape[0], statistics_dtype(query.dtype)
    like = dict(dtype=work, device=q.device)  # float32 for 16-bit inputs
    d_o = grad_output.expand(*batch, T, d_v).reshape(G, T, d_v).to(work)
    o = output.reshape(G, T, d_v).to(work)  # (G, T, d_v)
    delta = (d_o * o).sum(dim=-1, keepdim=True)  # D: (G, T, 1)
    scale = math.log2(math.e) / math.sqrt(d_k)  # base 2, as forward
    q = q.to(work) * scale  # (G, T, d_k), scaled once
    # L in base 2, and +∞ for a row that saw no key: its P = 2^(S − L) is
    # then 0, not 2^(−∞ + ∞) = NaN
    lse_2 = lse.reshape(G, T, 1) * math.log2(math.e)
    lse_2 = lse_2.masked_fill(torch.isneginf(lse_2), float("inf"))
    d_q = [torch.zeros(G, min(block_q, T - i), d_k, **like)
           for i in range(0, T, block_q)]  # one (G, n, d_k) per block
    d_k_all = torch.empty(G, S, d_k, **like)
    d_v_all = torch.empty(G, S, d_v, **like)
    offset = S - T  # query i sits at position offset + i
    for j in range(0, S, block_k):
        k_j = k[:, j:j + block_k].to(work)  # (G, b, d_k)
        v_j = v[:, j:j + block_k].to(work)  # (G, b, d_v)
        d_k_j = torch.zeros_like(k_j)
        d_v_j = torch.zeros_like(v_j)
        # with the causal mask, queries before position j see none of it
        first = max(0, j - offset) // block_q * block_q if causal else 0
        for i in range(first, T, block_q):
            q_i, d_o_i = q[:, i:i + block_q], d_o[:, i:i + block_q]
            n = q_i.shape[1]
            scores = torch.bmm(q_i, k_j.transpose(1, 2))  # (G, n, b)
            mask_scores(scores, causal, offset + i, j, mask, i, batch)
            p = scores.sub_(lse_2[:, i:i + n]).exp2_()  # P, recomputed
            d_v_j.baddbmm_(p.transpose(1, 2), d_o_i)  # dV_j += Pᵀ dO_i
            d_p = torch.bmm(d_o_i, v_j.transpose(1, 2))  # (G, n, b)
            d_z = p.mul_(d_p.sub_(delta[:, i:i + n]))  # P ∘ (dP − D_i)
            # Q_i and K_j carry scale = log2 e / √d_k; ln 2 undoes log2 e
            d_q[i // block_q].baddbmm_(d_z, k_j, alpha=scale * math.log(2))
            d_k_j.baddbmm_(d_z.transpose(1, 2), q_i, alpha=math.log(2))
        d_k_all[:, j:j + block_k] = d_k_j
        d_v_all[:, j:j + block_k] = d_v_j
    d_q = torch.cat(d_q, dim=1) if d_q else q.new_zeros(G, 0, d_k)
    return tuple(g.reshape(*batch, *g.shape[1:]).to(query.dtype)
                 for g in (d_q, d_k_all, d_v_all))


class TiledAttention(torch.autograd.Function):
    """`tiled_attention` for autograd: the forward saves the inputs, the
    output and the row log-sum-exp, never the (T, S) weights; the backward
    recomputes them a tile at a time (chapter 9). Differentiable once: a second derivative is refused."""

    @staticmethod
    def forward(ctx, query, key, value, causal, block_q, block_k, mask):
        output, lse = tiled_attention_forward(query, key, value, causal,
                                              block_q, block_k, mask)
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.settings = causal, block_q, block_k, mask
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable  # the backward is not itself differentiable
    def backward(ctx, grad_output):
        query, key, value, output, lse = ctx.saved_tensors
        grads = tiled_attention_backward(grad_output, query, key, value,
                                         output, lse, *ctx.settings)
        # an input whose batch axes broadcast gets its gradient summed back
        d_q, d_k, d_v = (g.sum_to_size(x.shape) for g, x in
                         zip(grads, (query, key, value), strict=True))
        return d_q, d_k, d_v, None, None, None, None


def statistics_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the running max, sum and output: float32 for 16-bit
    inputs, else the input's own (chapter 9)."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return dtype


def flatten_batch(query, key, value, batch):
    """Q, K, V with every batch and head axis broadcast to `batch` and
    flattened into one axis G: (G, T, d_k), (G, S, d_k), (G, S, d_v); views
    unless batch axes broadcast."""
    G = math.prod(batch)
    return tuple(t.expand(*batch, *t.shape[-2:]).reshape(G, *t.shape[-2:])
                 for t in (query, key, value))


def mask_scores(scores, causal: bool, first_query: int, first_key: int,
                mask, row: int, batch) -> None:
    """Block the scores (G, n, b) of one tile in place: the causal future
    (the query at position first_query + r sees keys up to it) and chapter
    2's `mask`, whose rows row … row + n − 1 this tile reads."""
    n, b = scores.shape[1:]
    if causal and first_key + b - 1 > first_query:  # crosses the diagonal
        device = scores.device
        query_pos = torch.arange(first_query, first_query + n, device=device)
        key_pos = torch.arange(first_key, first_key + b, device=device)
        scores.masked_fill_(key_pos > query_pos[:, None], float("-inf"))
    if mask is not None:
        tile = mask_tile(mask, slice(row, row + n),
                         slice(first_key, first_key + b))  # (..., n, b)
        tile = tile.expand(*batch, n, b).reshape(scores.shape)
        apply_mask_in_base_2(scores, tile)


def mask_tile(mask: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
    """The rows and columns of a (..., T, S) mask that one tile needs; an
    axis of size 1 broadcasts whole."""
    rows = rows if mask.shape[-2] > 1 else slice(None)
    cols = cols if mask.shape[-1] > 1 else slice(None)
    return mask[..., rows, cols]


def apply_mask_in_base_2(scores: torch.Tensor, mask: torch.Tensor) -> None:
    """Chapter 2's mask on a tile of base-2 scores, in place: blocked −∞, or
    a float mask times log2 e."""
    if mask.dtype == torch.bool:
        scores.masked_fill_(~mask, float("-inf"))
    else:
        scores.add_(mask.to(scores.dtype), alpha=math.log2(math.e))


def validate_one_row(scores, values) -> None:
    """One query's scores (S,) and the values (S, d_v) they weigh (chapter 9)."""
    for name, t, rank in (("scores", scores, 1), ("values", values, 2)):
        if not isinstance(t, torch.Tensor) or t.dim() != rank:
            got = f"shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor {'(S,)' if rank == 1 else '(S, d_v)'}, got {got}; "
                             "scores are one query's row, values one vector per key")
    if scores.shape[0] != values.shape[0] or not scores.is_floating_point() \
            or scores.dtype != values.dtype:
        raise ValueError(f"scores {tuple(scores.shape)} of {scores.dtype} and values {tuple(values.shape)} of "
                         f"{values.dtype} must have one row per key (S) and one floating dtype")


def validate_constant_mask(mask) -> None:
    """`TiledAttention` gives a float mask no gradient: a mask that asks for one is refused (chapter 9)."""
    if mask is not None and mask.requires_grad:
        raise ValueError("mask requires grad, but tiled_attention gives a float mask no gradient: pass "
                         "mask.detach(), or use chapter 2's scaled_dot_product_attention to learn a bias")


def validate_partials(*partials) -> None:
    """Two chunks' (m, l, acc): tensors of one floating dtype and device, m and l of one shape (..., 1)
    and acc (..., d_v) with the same leading axes (chapter 9)."""
    names = ("m_a", "l_a", "acc_a", "m_b", "l_b", "acc_b")
    for name, t in zip(names, partials, strict=True):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    kinds = {(t.dtype, t.device) for t in partials}
    lead = {t.shape[:-1] for t in partials}
    if len(kinds) > 1 or len(lead) > 1 or partials[0].shape != partials[1].shape \
            or partials[0].shape != partials[3].shape or partials[0].shape != partials[4].shape:
        found = ", ".join(f"{name} {tuple(t.shape)} {t.dtype}" for name, t in zip(names, partials, strict=True))
        raise ValueError(f"partials must be m, l (..., 1) and acc (..., d_v) of one dtype and device, with "
                         f"the same leading axes; got {found}")


def validate_block_size(size: int, name: str) -> None:
    """A block size must be a positive int; the error names the argument
    (chapter 9)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"{name} must be a positive integer, got {size!r}")


# Decoding: split-KV (flash-decoding). One query per sequence and head
# cannot fill a GPU's processors with query blocks, so the keys are split
# instead and the chunks' partial results merged exactly.

def split_kv_attention(query, key, value, num_splits: int = 4):
    """Every query attends to every key; the keys are read in `num_splits`
    chunks whose partial (m, l, acc) are computed independently and then
    merged (chapter 9; flash-decoding, Dao et al., 2023).

    query (..., H, T, d_k), key (..., H_kv, S, d_k), value (..., H_kv, S,
    d_v) -> (..., H, T, d_v). No mask: made for decoding, where the new
    token sees the whole cache (a ring cache holds only its window). With
    H_kv < H (grouped-query attention, chapter 8) each key/value head serves
    H / H_kv query heads, whose queries are stacked to read its keys once.
    """
    validate_block_size(num_splits, "num_splits")
    q = stack_query_groups(query, key, value)  # (..., H_kv, G·T, d_k)
    validate_attention_inputs(q, key, value)
    S, work = key.shape[-2], statistics_dtype(query.dtype)
    bounds = [S * c // num_splits for c in range(num_splits + 1)]
    chunks = [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)
              if b > a]
    # independent of one another: on a GPU, one thread block each
    partials = [attention_partial(q, key[..., a:b, :], value[..., a:b, :],
                                  work) for a, b in chunks]
    if not partials:  # S = 0: no key, zeros as in chapter 2
        shape = (*q.shape[:-1], value.shape[-1])
        return query.new_zeros(shape).reshape(
            *query.shape[:-1], value.shape[-1])
    m, l, acc = functools.reduce(lambda a, b: merge_partials(*a, *b),
                                 partials)
    out = (acc / l.masked_fill(l == 0, 1.0)).to(query.dtype)
    return out.reshape(*query.shape[:-1], value.shape[-1])  # (..., H, T, d_v)


def attention_partial(q, k, v, dtype=None):
    """One chunk's partial attention (chapter 9): the row maximum m
    (..., T, 1), the sum l of exp(s − m) (..., T, 1) and the unnormalised
    output acc = Σ exp(s − m) v (..., T, d_v), with s = q kᵀ / √d_k."""
    dtype = dtype or q.dtype
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # (.., T, b)
    m = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - finite_or_zero(m))
    return m, p.sum(dim=-1, keepdim=True), p @ v


def merge_partials(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """The (m, l, acc) of two chunks of keys together: each rescaled to the
    larger maximum (chapter 9)."""
    validate_partials(m_a, l_a, acc_a, m_b, l_b, acc_b)
    m = torch.maximum(m_a, m_b)
    shift = finite_or_zero(m)  # no key in either: both scales exp(−∞) = 0
    scale_a, scale_b = torch.exp(m_a - shift), torch.exp(m_b - shift)
    return m, l_a * scale_a + l_b * scale_b, acc_a * scale_a + acc_b * scale_b


def stack_query_groups(query, key, value):
    """Queries (..., H, T, d_k) as (..., H_kv, (H / H_kv) · T, d_k): the
    query heads that share a key/value head stacked as more rows of it."""
    validate_operands(query=query, key=key, value=value)
    heads = query.shape[-3] if query.dim() >= 3 else 1
    kv_heads = key.shape[-3] if key.dim() >= 3 else 1
    if heads == kv_heads:
        return query
    if (query.dim() < 3 or key.dim() < 3 or heads % kv_heads
            or value.dim() < 3 or value.shape[-3] != kv_heads):
        raise ValueError(
            "query heads must be a multiple of key/value heads (axis -3), "
            f"got query {tuple(query.shape)}, key {tuple(key.shape)}, "
            f"value {tuple(value.shape)}")
    grouped = query.unflatten(-3, (kv_heads, heads // kv_heads))
    return grouped.flatten(-3, -2)  # (..., H_kv, (H / H_kv) · T, d_k)
