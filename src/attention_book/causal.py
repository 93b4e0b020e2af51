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
    With a `window` (sliding-window attention, chapter 8) query i sees only itself and the window − 1
    positions before it: keys S − T + i − window + 1 … S − T + i.
    """
    num_keys = num_queries if num_keys is None else num_keys
    for name, length in (("num_queries", num_queries), ("num_keys", num_keys)):
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {length!r}")
    validate_causal_lengths(num_queries, num_keys)
    validate_window(window)
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    mask = ones.tril(diagonal=num_keys - num_queries)  # (T, S)
    if window is not None:
        mask &= ones.triu(diagonal=num_keys - num_queries - window + 1)  # nothing older than the window
    return mask


def position_mask(query_positions: torch.Tensor, key_positions: torch.Tensor,
                  window: int | None = None, sinks: int = 0):
    """True where a query at position p may attend to a key at position s:
    s ≤ p, and s > p − window (chapter 8). With `sinks` (attention sinks,
    chapter 8) the first `sinks` positions stay visible to every query.

    `causal_mask` for keys that are not simply 0 … S − 1: a ring buffer's
    slots, or a batch of sequences of different lengths padded to one
    (padding gets a position no query reaches). Positions (..., T) and
    (..., S) give a mask (..., T, S).
    """
    validate_window(window)
    p = query_positions[..., :, None]  # (..., T, 1)
    s = key_positions[..., None, :]  # (..., 1, S)
    mask = s <= p  # (..., T, S)
    if window is not None:
        mask &= (s > p - window) | (s < sinks)
    return mask


def validate_sinks(sinks, window) -> None:
    """Sinks are a count of first positions kept beside a window: an integer ≥ 0, and > 0 only with a window."""
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise ValueError(f"sinks must be an integer ≥ 0 (the first positions every query keeps), got {sinks!r}")
    if sinks and window is None:
        raise ValueError(f"sinks={sinks} needs a window: without one every query sees the first positions anyway")


def validate_window(window) -> None:
    """A window counts the query and the window − 1 positions before it: a positive integer, or None."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be a positive integer (the query and the window - 1 keys before it), "
                         f"got {window!r}")


def validate_ring_window(cache, window: int | None, sinks: int = 0) -> None:
    """A cache that keeps only its last `cache.window` positions (chapter 8's ring) must hold the layer's
    window, and its first `cache.sinks` slots the layer's sinks; a cache without a `window` keeps every
    position."""
    kept = getattr(cache, "window", None)
    if kept is not None and (window is None or kept < window):
        raise ValueError(f"cache is a {type(cache).__name__} of window {kept}, but this layer has window={window}: "
                         "it would forget keys the layer still attends to; give it RingKVCache(window) "
                         "(or a KVCache for window=None)")
    if kept is not None and getattr(cache, "sinks", 0) < sinks:
        raise ValueError(f"cache is a {type(cache).__name__} with sinks={getattr(cache, 'sinks', 0)}, but this layer has sinks={sinks}: "
                         "it would overwrite the first positions every query keeps; give it "
                         f"RingKVCache({window}, sinks={sinks})")


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention under a causal mask, with dropout on the weights (chapter 5).

    Built on chapter 3's `MultiHeadAttention`; x (B, T, E) -> (B, T, E). With a `window` each position
    sees only itself and the window − 1 before it (sliding-window attention, chapter 8), and with `sinks`
    also the first `sinks` positions (attention sinks, chapter 8).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 num_kv_heads: int | None = None, window: int | None = None, sinks: int = 0):
        super().__init__()
        validate_window(window)
        validate_sinks(sinks, window)
        self.window, self.sinks = window, sinks
        self.attention = MultiHeadAttention(embed_dim, num_heads, bias=bias, dropout=dropout,
                                            num_kv_heads=num_kv_heads)

    def forward(self, x: torch.Tensor, need_weights: bool = False,
                cache=None):
        """Returns (output (B, T, E), head-averaged weights (B, T, S) or None).

        Without a cache S = T. With a cache (chapter 7), x holds the T newest
        positions, and the cache says which positions the queries and the S
        keys it will return stand for; the mask follows from those.
        """
        validate_ring_window(cache, self.window, self.sinks)
        mask, is_causal = self.mask(x.shape[-2], x.device, cache)
        if mask is not None and mask.dim() == 2:
            mask = mask[None, None]  # (1, 1, T, S): every sequence and head
        return self.attention(x, mask=mask, need_weights=need_weights,
                              cache=cache, is_causal=is_causal)

    def mask(self, num_queries: int, device=None,
             cache=None) -> tuple[torch.Tensor | None, bool]:
        """(mask, is_causal) for T new queries: is_causal when the mask is the
        plain T × T triangle, which the fused kernel applies without a mask
        tensor; mask None when nothing is blocked."""
        if cache is None:  # S = T: queries and keys are the same positions
            query_positions = torch.arange(num_queries, device=device)  # (T,)
            key_positions = query_positions  # (S,)
        else:  # (..., T), (..., S)
            query_positions, key_positions = cache.positions(num_queries,
                                                             device)
        num_keys = key_positions.shape[-1]
        # contiguous keys 0 … S − 1, or a full ring: the newest query sees
        # them all when S ≤ window + sinks (chapter 8)
        window_covers_all = (self.window is None
                             or num_keys <= self.window + self.sinks)
        if query_positions.dim() == 1 and window_covers_all:  # one batch start
            if num_queries == num_keys:
                return None, True
            if num_queries == 1:
                return None, False  # one newest query may see every key given
        mask = position_mask(query_positions, key_positions, self.window,
                             self.sinks)  # (..., T, S)
        if mask.dim() > 2:
            mask = mask[:, None]  # (B, T, S) -> (B, 1, T, S): heads alike
        return mask, False
