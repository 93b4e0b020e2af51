"""Exact attention without the T × S score matrix: online softmax and tiling (chapter 8).

Milakov & Gimelshein (2018), "Online normalizer calculation for softmax"; Dao et al. (2022), FlashAttention.
"""

import functools
import math

import torch

from .attention import validate_attention_inputs, validate_causal_lengths
from .causal import causal_mask


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last axis, reading it `block_size` entries at a time (chapter 8).

    Keeps a running maximum m and a running sum l of exp(x − m); when a block raises the maximum, the
    sum so far is rescaled by exp(m_old − m_new). One pass gives m and l; the result is exp(x − m) / l.
    """
    validate_block_size(block_size, "block_size")
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)  # (..., 1)
    l = torch.zeros_like(m)  # (..., 1)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]  # (..., b)
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        shift = finite_or_zero(m_new)  # what the exponentials subtract: 0 while the row has seen only −∞
        l = l * torch.exp(m - shift) + torch.exp(block - shift).sum(dim=-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / l


def finite_or_zero(m: torch.Tensor) -> torch.Tensor:
    """The running maximum to subtract in the exponentials: −∞ (every score so far masked) becomes 0, as in
    FlashAttention (chapter 8).

    Otherwise exp(m − m_new) would be exp(−∞ + ∞) = NaN for a row whose first blocks are all masked
    (padding, a sliding window); with 0 the masked scores still give exp(−∞) = 0. The running maximum
    itself stays −∞, so that the first finite block sets it.
    """
    return m.masked_fill(torch.isneginf(m), 0.0)


def naive_attention(query, key, value, causal: bool = False) -> torch.Tensor:
    """The textbook form, softmax(Q Kᵀ / √d_k + mask) V, as chapters 2 and 5 first write it: the whole
    (..., T, S) score matrix, then its softmax, each in a buffer of its own."""
    validate_attention_inputs(query, key, value)
    scores = (query / math.sqrt(query.shape[-1])) @ key.transpose(-2, -1)  # (..., T, S)
    if causal:
        blocked = ~causal_mask(query.shape[-2], key.shape[-2], device=query.device)  # (T, S)
        scores = scores.masked_fill(blocked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ value  # (..., T, d_v)


def tiled_attention(query, key, value, causal: bool = False, block_q: int = 256, block_k: int = 256,
                    mask=None):
    """Exact attention computed block by block with online softmax; never more than (block_q, block_k)
    scores per head at once, forward or backward (chapter 8).

    query (..., T, d_k), key (..., S, d_k), value (..., S, d_v) -> (..., T, d_v). With `causal`, the
    queries are the last T of S positions (chapter 5's bottom-right mask), and key blocks wholly in a
    query block's future are skipped. `mask` (padding, for example) follows chapter 2's convention and
    is read one tile at a time; a query that may see no key gets a zero output, as in chapter 2 (so do
    all T queries when S = 0). Differentiable in query, key and value through `TiledAttention`, whose
    backward recomputes the scores tile by tile (FlashAttention-2); a float mask gets no gradient.
    """
    validate_attention_inputs(query, key, value, mask)
    validate_block_size(block_q, "block_q")
    validate_block_size(block_k, "block_k")
    if causal:
        validate_causal_lengths(query.shape[-2], key.shape[-2])
    return TiledAttention.apply(query, key, value, causal, block_q, block_k, mask)


def tiled_attention_forward(query, key, value, causal=False, block_q=256, block_k=256, mask=None):
    """The forward pass of `tiled_attention`: (output (..., T, d_v), log-sum-exp of each row's scores
    (..., T), natural log) (chapter 8). The log-sum-exp is all the backward pass needs of the softmax.

    16-bit inputs are multiplied tile by tile in float32, and the running maximum, sum and output stay in
    float32, as FlashAttention and PyTorch's SDPA keep them; the output is cast back to the input's dtype.
    """
    batch = validate_attention_inputs(query, key, value, mask)[:-2]
    T, S, d_k, d_v = query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]
    q, k, v = flatten_batch(query, key, value, batch)  # (G, T, d_k), (G, S, d_k), (G, S, d_v)
    G, work = q.shape[0], statistics_dtype(query.dtype)  # G = prod(batch): batch and head axes in one
    output = torch.empty(G, T, d_v, dtype=query.dtype, device=q.device)  # (G, T, d_v)
    lse = torch.empty(G, T, dtype=work, device=q.device)  # (G, T)
    # Base-2 exponentials: e^x = 2^(x · log2 e), so log2 e joins the 1/√d_k scale and m, l, p are in base 2.
    # Same result, but on x86 CPUs torch.exp is several times slower for every input below about −88 (whose
    # result underflows), the masked −inf scores among them; torch.exp2 slows only where its result is
    # subnormal, for inputs between −126 and −149 (chapter 8 times both).
    scale = math.log2(math.e) / math.sqrt(d_k)
    offset = S - T  # query i sits at position offset + i
    for i in range(0, T, block_q):
        q_block = q[:, i:i + block_q].to(work) * scale  # scaled here, one block at a time: (G, n, d_k)
        n = q_block.shape[1]
        m = torch.full((G, n, 1), float("-inf"), dtype=work, device=q.device)  # running max
        l = torch.zeros_like(m)  # running sum of 2^(score − m)
        acc = torch.zeros(G, n, d_v, dtype=work, device=q.device)  # running unnormalised output
        last_key = offset + i + n if causal else S  # keys at or after it are every query's future
        for j in range(0, last_key, block_k):
            k_t, v_j = k[:, j:j + block_k].to(work).transpose(1, 2), v[:, j:j + block_k].to(work)
            scores = torch.bmm(q_block, k_t)  # (G, n, b)
            mask_scores(scores, causal, offset + i, j, mask, (i, n), batch)
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (G, n, 1)
            shift = finite_or_zero(m_new)  # 0 while a row has seen only blocked keys
            rescale = torch.exp2(m - shift)  # how much the old maximum overestimated: (G, n, 1)
            p = scores.sub_(shift).exp2_()  # in place: (G, n, b)
            l.mul_(rescale).add_(p.sum(dim=-1, keepdim=True))
            acc.mul_(rescale).baddbmm_(p, v_j)  # acc · rescale + p V_j
            m = m_new
        # log-sum-exp in natural log: (m + log2 l) · ln 2; −inf for a row that saw no key
        lse[:, i:i + n] = ((m + torch.log2(l)) * math.log(2)).squeeze(-1)
        output[:, i:i + n] = acc.div_(l.masked_fill_(l == 0, 1.0))  # a row that saw no key: acc = 0
    return output.reshape(*batch, T, d_v), lse.reshape(*batch, T)  # (..., T, d_v), (..., T)


def tiled_attention_backward(grad_output, query, key, value, output, lse, causal=False, block_q=256,
                             block_k=256, mask=None):
    """dQ, dK, dV of `tiled_attention` from the output and row log-sum-exp alone (chapter 8; Dao, 2023,
    "FlashAttention-2", algorithm 2).

    With P = softmax(S), dO the gradient of the output and D_i = Σ_k dO_ik O_ik (= Σ_j P_ij dP_ij):
    dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), dQ = dS K / √d_k, dK = dSᵀ Q / √d_k. The outer loop
    walks key blocks, so each (dK_j, dV_j) is summed in place and written once; the inner loop walks
    the query blocks that can see key block j, recomputing P = exp(S − L) for one tile at a time and
    adding into dQ. Shapes are those of the inputs with every batch and head axis broadcast.
    """
    batch = lse.shape[:-1]
    T, S, d_k, d_v = query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]
    q, k, v = flatten_batch(query, key, value, batch)  # (G, T, d_k), (G, S, d_k), (G, S, d_v)
    G, work = q.shape[0], statistics_dtype(query.dtype)
    d_o = grad_output.expand(*batch, T, d_v).reshape(G, T, d_v).to(work)  # (G, T, d_v)
    o = output.reshape(G, T, d_v).to(work)
    scale = math.log2(math.e) / math.sqrt(d_k)  # base 2, as in the forward
    q = q.to(work) * scale  # scaled once: (G, T, d_k); so dK = dSᵀ Q / √d_k takes the scaled Q times ln 2
    # L in base 2, and +∞ for a row that saw no key, so that its P = 2^(S − L) is 0, not 2^(−∞ + ∞) = NaN
    lse_2 = (lse.reshape(G, T, 1) * math.log2(math.e)).masked_fill(torch.isneginf(lse.reshape(G, T, 1)),
                                                                     float("inf"))
    delta = (d_o * o).sum(dim=-1, keepdim=True)  # D = rowsum(dO ∘ O): (G, T, 1)
    d_q = [torch.zeros(G, n, d_k, dtype=work, device=q.device)  # one buffer per query block: (G, n, d_k)
           for n in (min(block_q, T - i) for i in range(0, T, block_q))]
    d_k_all = torch.empty(G, S, d_k, dtype=work, device=q.device)
    d_v_all = torch.empty(G, S, d_v, dtype=work, device=q.device)
    offset = S - T  # query i sits at position offset + i
    for j in range(0, S, block_k):
        k_j, v_j = k[:, j:j + block_k].to(work), v[:, j:j + block_k].to(work)  # (G, b, d_k), (G, b, d_v)
        b = k_j.shape[1]
        d_k_j = torch.zeros(G, b, d_k, dtype=work, device=q.device)
        d_v_j = torch.zeros(G, b, d_v, dtype=work, device=q.device)
        first_query = max(0, j - offset) // block_q * block_q if causal else 0  # earlier ones see none of it
        for i in range(first_query, T, block_q):
            q_i = q[:, i:i + block_q]  # (G, n, d_k), scaled
            n = q_i.shape[1]
            scores = torch.bmm(q_i, k_j.transpose(1, 2))  # (G, n, b), base 2
            mask_scores(scores, causal, offset + i, j, mask, (i, n), batch)
            p = scores.sub_(lse_2[:, i:i + n]).exp2_()  # P recomputed: (G, n, b)
            d_o_i = d_o[:, i:i + n]  # (G, n, d_v)
            d_v_j.baddbmm_(p.transpose(1, 2), d_o_i)  # dV_j += Pᵀ dO_i
            d_p = torch.bmm(d_o_i, v_j.transpose(1, 2))  # (G, n, b)
            d_s = p.mul_(d_p.sub_(delta[:, i:i + n]))  # dS = P ∘ (dP − D_i), in P's buffer
            d_q[i // block_q].baddbmm_(d_s, k_j, alpha=scale * math.log(2))  # dQ_i += dS K_j / √d_k
            d_k_j.baddbmm_(d_s.transpose(1, 2), q_i, alpha=math.log(2))  # dK_j += dSᵀ Q_i / √d_k
        d_k_all[:, j:j + b], d_v_all[:, j:j + b] = d_k_j, d_v_j
    d_q = torch.cat(d_q, dim=1) if d_q else torch.zeros(G, 0, d_k, dtype=work, device=q.device)  # (G, T, d_k)
    return tuple(grad.reshape(*batch, *grad.shape[1:]).to(query.dtype) for grad in (d_q, d_k_all, d_v_all))


class TiledAttention(torch.autograd.Function):
    """`tiled_attention` for autograd: the forward saves the inputs, the output and the row log-sum-exp,
    never the (T, S) weights; the backward recomputes them a tile at a time (chapter 8)."""

    @staticmethod
    def forward(ctx, query, key, value, causal, block_q, block_k, mask):
        output, lse = tiled_attention_forward(query, key, value, causal, block_q, block_k, mask)
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.settings = causal, block_q, block_k, mask
        return output

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, output, lse = ctx.saved_tensors
        grads = tiled_attention_backward(grad_output, query, key, value, output, lse, *ctx.settings)
        # inputs whose batch axes were broadcast get their gradient summed back to their own shape
        d_q, d_k, d_v = (g.sum_to_size(x.shape) for g, x in zip(grads, (query, key, value), strict=True))
        return d_q, d_k, d_v, None, None, None, None


def statistics_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the running max, sum and output: float32 for 16-bit inputs, else the input's (chapter 8)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def flatten_batch(query, key, value, batch):
    """Q, K, V with every batch and head axis broadcast to `batch` and flattened into one axis G:
    (G, T, d_k), (G, S, d_k), (G, S, d_v); views unless batch axes broadcast."""
    G = math.prod(batch)
    return tuple(t.expand(*batch, *t.shape[-2:]).reshape(G, *t.shape[-2:]) for t in (query, key, value))


def mask_scores(scores, causal: bool, first_query: int, first_key: int, mask, rows, batch) -> None:
    """Block the scores (G, n, b) of one tile in place: the causal future (query at position first_query
    + r sees keys up to it) and chapter 2's `mask`, read for query rows `rows` = (start, n)."""
    n, b = scores.shape[1:]
    if causal and first_key + b - 1 > first_query:  # the block crosses the diagonal
        query_pos = torch.arange(first_query, first_query + n, device=scores.device)[:, None]  # (n, 1)
        key_pos = torch.arange(first_key, first_key + b, device=scores.device)[None, :]  # (1, b)
        scores.masked_fill_(key_pos > query_pos, float("-inf"))
    if mask is not None:
        tile = mask_tile(mask, slice(rows[0], rows[0] + n), slice(first_key, first_key + b))  # (..., n, b)
        apply_mask_in_base_2(scores, tile.expand(*batch, n, b).reshape(scores.shape))


def mask_tile(mask: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
    """The rows and columns of a (..., T, S) mask that one tile needs; an axis of size 1 broadcasts whole."""
    return mask[..., rows if mask.shape[-2] > 1 else slice(None), cols if mask.shape[-1] > 1 else slice(None)]


def apply_mask_in_base_2(scores: torch.Tensor, mask: torch.Tensor) -> None:
    """Chapter 2's mask on a tile of base-2 scores, in place: blocked −∞, or a float mask times log2 e."""
    if mask.dtype == torch.bool:
        scores.masked_fill_(~mask, float("-inf"))
    else:
        scores.add_(mask.to(scores.dtype), alpha=math.log2(math.e))


def validate_block_size(size: int, name: str) -> None:
    """A block size must be a positive int; the error names the argument (chapter 8)."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"{name} must be a positive integer, got {size!r}")


# Decoding: split-KV (flash-decoding). One query per sequence and head cannot fill a GPU's processors
# with query blocks, so the keys are split instead and the partial results merged exactly.

def split_kv_attention(query, key, value, num_splits: int = 4):
    """Attention of every query to every key, the keys read in `num_splits` chunks whose partial
    (m, l, acc) are computed independently and merged (chapter 8; flash-decoding, Dao et al., 2023).

    query (..., H, T, d_k), key (..., H_kv, S, d_k), value (..., H_kv, S, d_v) -> (..., H, T, d_v); no
    mask: made for decoding, where the new token sees the whole cache (a ring cache holds only its
    window). With H_kv < H (grouped-query attention, chapter 7) each key/value head serves H / H_kv query
    heads, whose queries are stacked and read its keys once.
    """
    validate_block_size(num_splits, "num_splits")
    heads = query.shape[-3] if query.dim() >= 3 else 1
    kv_heads = key.shape[-3] if key.dim() >= 3 else 1
    if heads != kv_heads and (query.dim() < 3 or key.dim() < 3 or heads % kv_heads
                              or value.shape[-3] != kv_heads):
        raise ValueError(f"query heads must be a multiple of key/value heads (axis -3), got query "
                         f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}")
    T = query.shape[-2]
    q = query.unflatten(-3, (kv_heads, heads // kv_heads)).flatten(-3, -2) if heads != kv_heads else query
    validate_attention_inputs(q, key, value)  # q: (..., H_kv, (H / H_kv) · T, d_k)
    S, work = key.shape[-2], statistics_dtype(query.dtype)
    bounds = [S * c // num_splits for c in range(num_splits + 1)]  # chunk c: keys bounds[c] … bounds[c+1] − 1
    partials = [attention_partial(q, key[..., a:b, :], value[..., a:b, :], work)
                for a, b in zip(bounds, bounds[1:], strict=False) if b > a]  # independent: one block each on a GPU
    if not partials:  # S = 0: no key, zeros as in chapter 2
        out = torch.zeros(*q.shape[:-1], value.shape[-1], dtype=query.dtype, device=query.device)
    else:
        m, l, acc = functools.reduce(lambda a, b: merge_partials(*a, *b), partials)
        out = (acc / l.masked_fill(l == 0, 1.0)).to(query.dtype)  # (..., H_kv, (H / H_kv) · T, d_v)
    if heads != kv_heads:
        out = out.unflatten(-2, (heads // kv_heads, T)).flatten(-4, -3)  # (..., H, T, d_v)
    return out


def attention_partial(q, k, v, dtype=None):
    """One chunk's partial attention: the row maximum m (..., T, 1), the sum l of exp(s − m) (..., T, 1)
    and the unnormalised output acc = Σ exp(s − m) v (..., T, d_v), s = q kᵀ / √d_k (chapter 8)."""
    dtype = dtype or q.dtype
    scores = (q.to(dtype) / math.sqrt(q.shape[-1])) @ k.to(dtype).transpose(-2, -1)  # (..., T, b)
    m = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - finite_or_zero(m))
    return m, p.sum(dim=-1, keepdim=True), p @ v.to(dtype)


def merge_partials(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """The (m, l, acc) of two chunks of keys together: each rescaled to the larger maximum (chapter 8)."""
    m = torch.maximum(m_a, m_b)
    shift = finite_or_zero(m)  # two chunks with nothing visible: both scales exp(−∞) = 0
    scale_a, scale_b = torch.exp(m_a - shift), torch.exp(m_b - shift)
    return m, l_a * scale_a + l_b * scale_b, acc_a * scale_a + acc_b * scale_b
