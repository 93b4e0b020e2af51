"""Exact attention without the T × S score matrix: online softmax and tiling (chapter 8).

Milakov & Gimelshein (2018), "Online normalizer calculation for softmax"; Dao et al. (2022), FlashAttention.
"""

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
    scores per head at once (chapter 8).

    query (..., T, d_k), key (..., S, d_k), value (..., S, d_v) -> (..., T, d_v). With `causal`, the
    queries are the last T of S positions (chapter 5's bottom-right mask), and key blocks wholly in a
    query block's future are skipped. `mask` (padding, for example) follows chapter 2's convention and
    is read one tile at a time; a query that may see no key gets a zero output, as in chapter 2.
    """
    score_shape = validate_attention_inputs(query, key, value, mask)  # (..., T, S)
    validate_block_size(block_q, "block_q")
    validate_block_size(block_k, "block_k")
    T, S, d_k, d_v = query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]
    if causal:
        validate_causal_lengths(T, S)
    batch = score_shape[:-2]
    # G = prod(batch): every batch and head axis flattened into one, so that torch.bmm takes them all
    q = query.expand(*batch, T, d_k).reshape(-1, T, d_k)  # (G, T, d_k); a view unless batch axes broadcast
    k_t = key.expand(*batch, S, d_k).reshape(-1, S, d_k).transpose(1, 2)  # (G, d_k, S)
    v = value.expand(*batch, S, d_v).reshape(-1, S, d_v)  # (G, S, d_v), likewise
    output = torch.empty(q.shape[0], T, d_v, dtype=q.dtype, device=q.device)  # (G, T, d_v)
    # Base-2 exponentials: e^x = 2^(x · log2 e), so log2 e joins the 1/√d_k scale and m, l, p are in base 2.
    # Same result, but on x86 CPUs torch.exp is several times slower for every input below about −88 (whose
    # result underflows), the masked −inf scores among them; torch.exp2 slows only where its result is
    # subnormal, for inputs between −126 and −149 (chapter 8 times both).
    scale = math.log2(math.e) / math.sqrt(d_k)
    offset = S - T  # query i sits at position offset + i
    for i in range(0, T, block_q):
        q_block = q[:, i:i + block_q] * scale  # scaled here, one block at a time: (G, n, d_k)
        n = q_block.shape[1]
        m = torch.full((q.shape[0], n, 1), float("-inf"), dtype=q.dtype, device=q.device)  # running max
        l = torch.zeros_like(m)  # running sum of 2^(score − m)
        acc = torch.zeros(q.shape[0], n, d_v, dtype=q.dtype, device=q.device)  # running unnormalised output
        last_key = offset + i + n if causal else S  # keys at or after it are every query's future
        for j in range(0, last_key, block_k):
            scores = torch.bmm(q_block, k_t[:, :, j:j + block_k])  # (G, n, b)
            if causal and j + scores.shape[-1] - 1 > offset + i:  # the block crosses the diagonal
                query_pos = torch.arange(offset + i, offset + i + n, device=q.device)[:, None]  # (n, 1)
                key_pos = torch.arange(j, j + scores.shape[-1], device=q.device)[None, :]  # (1, b)
                scores.masked_fill_(key_pos > query_pos, float("-inf"))
            if mask is not None:
                tile = mask_tile(mask, slice(i, i + n), slice(j, j + scores.shape[-1]))  # (..., n, b)
                apply_mask_in_base_2(scores, tile.expand(*batch, *scores.shape[1:]).reshape(scores.shape))
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (G, n, 1)
            shift = finite_or_zero(m_new)  # 0 while a row has seen only blocked keys
            rescale = torch.exp2(m - shift)  # how much the old maximum overestimated: (G, n, 1)
            p = scores.sub_(shift).exp2_()  # in place: (G, n, b)
            l.mul_(rescale).add_(p.sum(dim=-1, keepdim=True))
            acc.mul_(rescale).baddbmm_(p, v[:, j:j + block_k])  # acc · rescale + p V_j
            m = m_new
        output[:, i:i + block_q] = acc.div_(l.masked_fill_(l == 0, 1.0))  # a row that saw no key: acc = 0
    return output.reshape(*batch, T, d_v)  # (G, T, d_v) -> (..., T, d_v)


def mask_tile(mask: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
    """The rows and columns of a (..., T, S) mask that one tile needs; an axis of size 1 broadcasts whole."""
    return mask[..., rows if mask.shape[-2] > 1 else slice(None), cols if mask.shape[-1] > 1 else slice(None)]


def apply_mask_in_base_2(scores: torch.Tensor, mask: torch.Tensor) -> None:
    """Chapter 2's mask on a tile of base-2 scores, in place: blocked −∞, or a float mask times log2 e."""
    if mask.dtype == torch.bool:
        scores.masked_fill_(~mask, float("-inf"))
    else:
        scores.add_(mask, alpha=math.log2(math.e))


def validate_block_size(size: int, name: str) -> None:
    """A block size must be a positive int; the error names the argument (chapter 8)."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"{name} must be a positive integer, got {size!r}")


def online_attention_states(scores: torch.Tensor, values: torch.Tensor, block_size: int):
    """One query's attention read `block_size` keys at a time (chapter 8's tiles, for one row): yields
    (start, stop, m, l, acc) after each tile, with the running maximum m, the running sum l of
    exp(score − m) and the accumulator acc = Σ exp(score − m) · value over the keys read so far.

    scores (S,), values (S, d_v). After the last tile acc / l = softmax(scores) · values exactly: each
    tile rescales what came before by exp(m_old − m_new), as `online_softmax` rescales its sum.
    """
    validate_block_size(block_size, "block_size")
    m = torch.tensor(float("-inf"), dtype=scores.dtype)  # ()
    l = torch.tensor(0.0, dtype=scores.dtype)  # ()
    acc = values.new_zeros(values.shape[-1])  # (d_v,)
    for start in range(0, scores.shape[-1], block_size):
        stop = min(start + block_size, scores.shape[-1])
        m_new = torch.maximum(m, scores[start:stop].max())
        shift = finite_or_zero(m_new)
        p = torch.exp(scores[start:stop] - shift)  # (b,)
        rescale = torch.exp(m - shift)
        l = l * rescale + p.sum()
        acc = acc * rescale + p @ values[start:stop]  # (d_v,)
        m = m_new
        yield start, stop, m, l, acc
