"""Scaled dot-product attention, softmax(Q Kᵀ / √d_k) V (chapter 2), and the input checks every form shares.

Masks follow `torch.nn.functional.scaled_dot_product_attention`: a boolean mask is True where a
query may attend to a key; a float mask is added to the scores (−inf blocks). A query whose every
key is blocked gets all-zero weights and a zero output, never NaN. Half-precision inputs get their
scores and softmax in float32, as the fused kernels keep them, and results in their own dtype.
"""

import math

import torch


def scaled_dot_product_attention(query, key, value, mask=None, scale: float | None = None):
    """softmax(Q Kᵀ / √d_k) V: returns (output (..., T, d_v), weights (..., T, S)) (chapter 2)."""
    validate_attention_inputs(query, key, value, mask)
    weights = softmax_scores(query, key, mask, scale)  # (..., T, S), float32 for half-precision inputs
    return (weights @ value.to(weights.dtype)).to(value.dtype), weights.to(query.dtype)


def attention_weights(query, key, mask=None, scale: float | None = None) -> torch.Tensor:
    """softmax(Q Kᵀ · scale), scale = 1/√d_k by default: shape (..., T, S) (chapter 2)."""
    validate_attention_inputs(query, key, mask=mask)
    return softmax_scores(query, key, mask, scale).to(query.dtype)


def softmax_scores(query, key, mask=None, scale: float | None = None) -> torch.Tensor:
    """softmax(Q Kᵀ · scale + mask) without input checks, for callers that made them (chapter 2)."""
    return masked_softmax(apply_mask(scaled_scores(query, key, scale), mask))


def scaled_scores(query, key, scale: float | None = None) -> torch.Tensor:
    """Q Kᵀ · scale, scale = 1/√d_k by default: (..., T, S) (chapter 2), in float32 at least."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    dtype = score_dtype(query.dtype)  # float16 overflows above 65504: a score of 300 · 300 is out of range
    query, key = query.to(dtype), key.to(dtype)
    return (query * scale) @ key.transpose(-2, -1)  # (..., T, S); scaling Q, not the scores, costs less


def score_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype scores and softmax are computed in: float32, or float64 for float64 inputs."""
    return torch.promote_types(dtype, torch.float32)


def apply_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Blocked scores become −inf (boolean mask), or the mask is added (float mask)."""
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    if not mask.is_floating_point():
        raise TypeError(f"mask must be boolean (True = attend) or floating (added to scores), got dtype "
                        f"{mask.dtype}: an integer mask would be added as numbers")
    return scores + mask.to(scores.dtype)


def masked_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis; a row that is −inf everywhere gives zeros instead of NaN."""
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., T, 1)
    # zero the empty rows' scores first, so that neither the softmax nor its gradient sees NaN; no
    # `if empty.any()`, which would read the tensor back to the CPU (and fails on the meta device)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1)
    return weights.masked_fill(empty, 0.0)


# Input checks: each raises a ValueError (or TypeError) that names the shapes involved. Every form of
# attention in the package validates its inputs with these before it computes anything.

def validate_attention_inputs(query, key, value=None, mask=None) -> tuple[int, ...]:
    """Validate Q (..., T, d_k), K (..., S, d_k), V (..., S, d_v); return the score shape (..., T, S)."""
    value = key if value is None else value  # weights alone: only Q, K and the mask matter
    validate_operands(query=query, key=key, value=value)
    if query.shape[-1] == 0:
        raise ValueError(f"query {_shape(query)} and key {_shape(key)} have width d_k = 0: the scale 1/√d_k "
                         "is undefined; give them at least one feature")
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
        if mask.device != query.device:
            raise ValueError(f"mask is on {mask.device} but query, key and value on {query.device}: "
                             "move it with mask.to(query.device)")
    return score_shape


def validate_operands(**named) -> None:
    """Each of `named` (query=..., key=..., value=...) a floating tensor (..., length, width), all of one
    dtype and one device."""
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (..., length, width), got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, width), got shape {_shape(t)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got dtype {t.dtype} with shape {_shape(t)}: "
                            "token ids are embedded first (chapter 1), or convert with .float()")
    if len({t.dtype for t in named.values()}) > 1 or len({t.device for t in named.values()}) > 1:
        found = ", ".join(f"{name} {t.dtype} on {t.device}" for name, t in named.items())
        names = list(named)
        raise TypeError(f"{', '.join(names[:-1])} and {names[-1]} must share one dtype and one device, got "
                        f"{found}; convert with .to({names[0]})")


def validate_mask(mask: torch.Tensor, score_shape: tuple[int, ...]) -> None:
    """A mask must be boolean or floating and broadcast to the scores' shape (..., T, S)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a boolean or floating torch.Tensor (..., T, S), got {type(mask).__name__}")
    if not (mask.dtype == torch.bool or mask.is_floating_point()):
        raise TypeError(f"mask must be boolean (True = attend) or floating (added to scores), got dtype {mask.dtype}")
    if broadcast_shape(mask.shape, score_shape) != tuple(score_shape):
        raise ValueError(f"mask of shape {_shape(mask)} does not broadcast to the scores' shape {score_shape} (..., T, S)")


def validate_causal_lengths(num_queries: int, num_keys: int) -> None:
    """Causal attention puts the T queries at the last T of S positions, so it needs T ≤ S (chapter 5)."""
    if num_queries > num_keys:
        raise ValueError(f"causal attention needs at least as many keys as queries, got T={num_queries} > "
                         f"S={num_keys}")


def validate_width(x: torch.Tensor, width: int, name: str = "x", setting: str = "d_in",
                   dtype: torch.dtype | None = None) -> None:
    """`x` must be (..., T, width), and of the module's weights' `dtype` if given; the error names the
    module's `setting` (chapters 2-4)."""
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a tensor (..., T, {setting}) with at least 2 dimensions, got {got}; "
                         f"a single sequence is (T, {setting}): add the length axis with {name}[None]")
    if dtype is not None and x.dtype != dtype:
        hint = "token ids are embedded first (chapter 1)" if not x.is_floating_point() else f"use {name}.to({dtype})"
        raise TypeError(f"{name} has dtype {x.dtype}, the module's weights {dtype}: {hint}, or convert the "
                        "module with .to(dtype)")
    if x.shape[-1] != width:
        raise ValueError(f"{name} of shape {tuple(x.shape)} has width {x.shape[-1]}, "
                         f"the module expects {setting}={width}")


def validate_mask_axes(mask, query: torch.Tensor, heads: int | None = None) -> None:
    """Refuse a mask shorter than the scores whose first axis could be read two ways (chapters 2-3).

    Masks align with the scores (B, H, T, S) from the right: a (T, S) mask is one row per query, a
    (H, T, S) one per head. With B == T a padding mask (B, S) looks like (T, S), and with B == H a
    (B, T, S) mask looks like (H, T, S): broadcasting would give each sequence's row to a query (or a
    head). The four-axis forms are never ambiguous, so they are what the error asks for.
    """
    if mask is None or query.dim() < 3:
        return
    B, T = query.shape[-3], query.shape[-2]
    if mask.dim() == 2 and mask.shape[0] == B > 1 and B == T:
        per_query, per_sequence = ("(1, T, S) = mask[None]", "(B, 1, S) = mask[:, None]") if heads is None else \
            ("(1, 1, T, S) = mask[None, None]", "(B, 1, 1, S) = mask[:, None, None]")
        raise ValueError(f"mask of shape {_shape(mask)} is ambiguous with B = T = {B}: (T, S), one row per "
                         f"query, or (B, S), one row per sequence? Give {per_query} or {per_sequence}")
    if mask.dim() == 2 and mask.shape[0] == B > 1 and B != T:
        raise ValueError(f"mask of shape {_shape(mask)} is (B, S) with B = {B}, but a two-axis mask is (T, S) "
                         f"and T = {T}: give a padding mask as mask[:, None{', None' if heads else ''}]")
    if heads is not None and mask.dim() == 3 and mask.shape[0] == B > 1:
        if B == heads:
            raise ValueError(f"mask of shape {_shape(mask)} is ambiguous with B = H = {B}: (B, T, S), one mask "
                             "per sequence, or (H, T, S), one per head? Give (B, 1, T, S) = mask[:, None] or "
                             "(1, H, T, S) = mask[None]")
        raise ValueError(f"mask of shape {_shape(mask)} is (B, T, S) with B = {B} but H = {heads}: the scores "
                         "are (B, H, T, S), so give it a head axis, mask[:, None] (B, 1, T, S)")


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


def validate_positive(allow_none: bool = False, **sizes) -> None:
    """Each of `sizes` (name=value) must be a positive int (or None if `allow_none`); 0 is not None."""
    for name, value in sizes.items():
        if value is None and allow_none:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            expected = "a positive integer or None" if allow_none else "a positive integer"
            raise ValueError(f"{name} must be {expected}, got {value!r}")
