"""Scaled dot-product attention, softmax(Q Kᵀ / √d_k) V (chapter 2), and the input checks every form shares.

Masks follow `torch.nn.functional.scaled_dot_product_attention`: a boolean mask is True where a
query may attend to a key; a float mask is added to the scores (−inf blocks). A query whose every
key is blocked gets all-zero weights and a zero output, never NaN.
"""

import math

import torch


def scaled_dot_product_attention(query, key, value, mask=None, scale: float | None = None):
    """softmax(Q Kᵀ / √d_k) V: returns (output (..., T, d_v), weights (..., T, S)) (chapter 2)."""
    validate_attention_inputs(query, key, value, mask)
    weights = softmax_scores(query, key, mask, scale)  # (..., T, S)
    return weights @ value, weights


def attention_weights(query, key, mask=None, scale: float | None = None) -> torch.Tensor:
    """softmax(Q Kᵀ · scale), scale = 1/√d_k by default: shape (..., T, S) (chapter 2)."""
    validate_attention_inputs(query, key, mask=mask)
    return softmax_scores(query, key, mask, scale)


def softmax_scores(query, key, mask=None, scale: float | None = None) -> torch.Tensor:
    """softmax(Q Kᵀ · scale + mask) without input checks, for callers that made them (chapter 2)."""
    return masked_softmax(apply_mask(scaled_scores(query, key, scale), mask))


def scaled_scores(query, key, scale: float | None = None) -> torch.Tensor:
    """Q Kᵀ · scale, scale = 1/√d_k by default: (..., T, S) (chapter 2)."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    return (query * scale) @ key.transpose(-2, -1)  # (..., T, S); scaling Q, not the scores, costs less


def apply_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Blocked scores become −inf (boolean mask), or the mask is added (float mask)."""
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    return scores + mask


def masked_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis; a row that is −inf everywhere gives zeros instead of NaN."""
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., T, 1)
    if not empty.any():
        return torch.softmax(scores, dim=-1)
    # zero the empty rows' scores first, so that neither the softmax nor its gradient sees NaN
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1)
    return weights.masked_fill(empty, 0.0)


# Input checks: each raises a ValueError (or TypeError) that names the shapes involved. Every form of
# attention in the package validates its inputs with these before it computes anything.

def validate_attention_inputs(query, key, value=None, mask=None) -> tuple[int, ...]:
    """Validate Q (..., T, d_k), K (..., S, d_k), V (..., S, d_v); return the score shape (..., T, S)."""
    value = key if value is None else value  # weights alone: only Q, K and the mask matter
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, width), got shape {_shape(t)}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key widths differ: query {_shape(query)} has d_k={query.shape[-1]}, "
            f"key {_shape(key)} has d_k={key.shape[-1]}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value lengths differ: key {_shape(key)} has S={key.shape[-2]}, "
            f"value {_shape(value)} has S={value.shape[-2]}"
        )
    batch = broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if batch is None:
        raise ValueError(
            f"batch dimensions do not broadcast: query {_shape(query)}, key {_shape(key)}, value {_shape(value)}"
        )
    score_shape = (*batch, query.shape[-2], key.shape[-2])
    if mask is not None:
        validate_mask(mask, score_shape)
    return score_shape


def validate_mask(mask: torch.Tensor, score_shape: tuple[int, ...]) -> None:
    """A mask must be boolean or floating and broadcast to the scores' shape (..., T, S)."""
    if not (mask.dtype == torch.bool or mask.is_floating_point()):
        raise TypeError(f"mask must be boolean (True = attend) or floating (added to scores), got dtype {mask.dtype}")
    if broadcast_shape(mask.shape, score_shape) != tuple(score_shape):
        raise ValueError(f"mask of shape {_shape(mask)} does not broadcast to the scores' shape {score_shape} (..., T, S)")


def validate_causal_lengths(num_queries: int, num_keys: int) -> None:
    """Causal attention puts the T queries at the last T of S positions, so it needs T ≤ S (chapter 5)."""
    if num_queries > num_keys:
        raise ValueError(f"causal attention needs at least as many keys as queries, got T={num_queries} > "
                         f"S={num_keys}")


def validate_width(x: torch.Tensor, width: int, name: str = "x", setting: str = "d_in") -> None:
    """The last axis of `x` must be `width` wide; the error names the module's `setting` (chapters 2-4)."""
    if x.shape[-1] != width:
        raise ValueError(f"{name} of shape {tuple(x.shape)} has width {x.shape[-1]}, "
                         f"the module expects {setting}={width}")


def broadcast_shape(*shapes) -> tuple[int, ...] | None:
    """The shape that `shapes` broadcast to, or None if they do not (`torch.broadcast_shapes` without its cost)."""
    ndim = max(len(shape) for shape in shapes)
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    result = []
    for sizes in zip(*padded, strict=True):
        distinct = {size for size in sizes if size != 1}
        if len(distinct) > 1:
            return None
        result.append(distinct.pop() if distinct else 1)
    return tuple(result)


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)
