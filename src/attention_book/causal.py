"""Causal attention: no position may see a later one (chapter 5)."""

import torch
from torch import nn

from .attention import validate_causal_lengths
from .multihead import MultiHeadAttention


def causal_mask(num_queries: int, num_keys: int | None = None, device=None, window: int | None = None):
    """Boolean (T, S) mask, True where query i may attend to key j (chapter 5).

    With fewer queries than keys (T < S, as with a KV cache) the queries are the *last* T positions, so
    query i sits at position S − T + i and sees keys 0 … S − T + i. `is_causal=True` in
    `F.scaled_dot_product_attention` aligns the triangle at the top left instead, which is wrong here.
    With a `window` (sliding-window attention, chapter 7) query i sees only itself and the window − 1
    positions before it: keys S − T + i − window + 1 … S − T + i.
    """
    num_keys = num_queries if num_keys is None else num_keys
    validate_causal_lengths(num_queries, num_keys)
    if window is not None and (not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be a positive integer (the query and the window - 1 keys before it), "
                         f"got {window!r}")
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    mask = ones.tril(diagonal=num_keys - num_queries)  # (T, S)
    if window is not None:
        mask &= ones.triu(diagonal=num_keys - num_queries - window + 1)  # nothing older than the window
    return mask


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention under a causal mask, with dropout on the weights (chapter 5).

    Built on chapter 3's `MultiHeadAttention`; x (B, T, E) -> (B, T, E).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 num_kv_heads: int | None = None):
        super().__init__()
        self.attention = MultiHeadAttention(embed_dim, num_heads, bias=bias, dropout=dropout,
                                            num_kv_heads=num_kv_heads)

    def forward(self, x: torch.Tensor, need_weights: bool = False, cache=None):
        """Returns (output (B, T, E), head-averaged weights (B, T, S) or None).

        Without a cache S = T. With a `KVCache` (chapter 7), x holds the T newest positions and
        S = len(cache) + T: the mask's triangle sits bottom-right.
        """
        num_queries = x.shape[-2]
        num_keys = num_queries + (0 if cache is None else len(cache))
        if num_queries == num_keys:  # both triangles agree: the fused kernel masks without a mask tensor
            return self.attention(x, need_weights=need_weights, cache=cache, is_causal=True)
        mask = None  # a single newest query may see every key: nothing to block
        if num_queries > 1:
            mask = causal_mask(num_queries, num_keys, device=x.device)  # (T, S)
        return self.attention(x, mask=mask, need_weights=need_weights, cache=cache)
