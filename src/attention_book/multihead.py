"""Multi-head attention in the three forms of chapter 3, and PyTorch's mask conventions."""

import weakref

import torch
from torch import nn
import torch.nn.functional as F

from .attention import (
    apply_mask,
    masked_softmax,
    scaled_dot_product_attention,
    scaled_scores,
    validate_attention_inputs,
    validate_mask_axes,
    validate_positive,
    validate_width,
)
from .self_attention import SelfAttention


def stacked_multihead_attention(x, W_query, W_key, W_value):
    """H heads at once with stacked weights (H, d_k, E), (H, d_k, E), (H, d_v, E) and `torch.bmm` (chapter 3).

    x (T, E) -> context vectors (H, T, d_v).
    """
    validate_stacked_weights(x, W_query, W_key, W_value)
    heads = W_query.shape[0]
    stacked_inputs = x.T.repeat(heads, 1, 1)  # (E, T) -> (H, E, T)
    queries = torch.bmm(W_query, stacked_inputs).permute(0, 2, 1)  # (H, d_k, T) -> (H, T, d_k)
    keys = torch.bmm(W_key, stacked_inputs).permute(0, 2, 1)  # (H, T, d_k)
    values = torch.bmm(W_value, stacked_inputs).permute(0, 2, 1)  # (H, T, d_v)
    context, _ = scaled_dot_product_attention(queries, keys, values)
    return context  # (H, T, d_v)


class MultiHeadAttentionWrapper(nn.Module):
    """`num_heads` independent `SelfAttention` heads, outputs concatenated (chapter 3)."""

    def __init__(self, d_in: int, d_out_kq: int, d_out_v: int, num_heads: int):
        super().__init__()
        validate_positive(num_heads=num_heads)
        self.heads = nn.ModuleList([SelfAttention(d_in, d_out_kq, d_out_v) for _ in range(num_heads)])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (..., T, d_in) -> (..., T, H · d_v)."""
        return torch.cat([head(x, mask) for head in self.heads], dim=-1)


class MultiHeadAttention(nn.Module):
    """Fused multi-head attention: one projection of width E split into H heads of E/H, then W^O (chapter 3).

    Inputs are (..., T, E) for queries and (..., S, kdim), (..., S, vdim) for keys and values; self-attention
    when `key` and `value` are omitted, cross-attention (chapter 4) otherwise. `mask` follows the package's
    convention (boolean True = may attend, or float added to the scores) and broadcasts to (..., H, T, S).
    `dropout` acts on the attention weights in training mode only (chapter 5); returned weights are taken
    before it. `head_dim` defaults to E/H; Keras lets every head be wider (its `key_dim`, chapter 6), so the
    heads together span H · head_dim columns, which W^O maps back to E. With `num_kv_heads` below H, groups
    of H / num_kv_heads query heads share one key/value head (grouped-query attention; multi-query with 1,
    chapter 8), and a KV cache holds only those.
    """

    def __init__(self, embed_dim: int, num_heads: int, kdim: int | None = None, vdim: int | None = None,
                 bias: bool = True, dropout: float = 0.0, head_dim: int | None = None,
                 num_kv_heads: int | None = None):
        super().__init__()
        validate_positive(embed_dim=embed_dim, num_heads=num_heads)
        validate_positive(allow_none=True, kdim=kdim, vdim=vdim, head_dim=head_dim, num_kv_heads=num_kv_heads)
        validate_dropout(dropout)
        if head_dim is None and embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}: "
                             f"each head needs E/H = {embed_dim / num_heads:g} columns")
        num_kv_heads = num_kv_heads or num_heads
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}: every "
                             "key/value head must serve the same number of query heads")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = head_dim or embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        inner = num_heads * self.head_dim  # H · d_k, which is E unless head_dim is given
        self.q_proj = nn.Linear(embed_dim, inner, bias=bias)
        self.k_proj = nn.Linear(self.kdim, num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, num_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(inner, embed_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x: torch.Tensor, heads: int | None = None):
        """(..., T, E) -> (..., H, T, E/H); with a given head_dim,
        (..., T, H·d_k) -> (..., H, T, d_k).

        `heads` other than H splits keys and values into their
        num_kv_heads heads."""
        heads = heads or self.num_heads
        x = x.unflatten(-1, (heads, self.head_dim))  # (..., T, H, E/H)
        return x.transpose(-3, -2)  # (..., H, T, E/H)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H, T, E/H) -> (..., T, E): the heads concatenated
        (H·d_k wide in general)."""
        # (..., H, T, E/H) -> (..., T, H, E/H) -> (..., T, E)
        return x.transpose(-3, -2).flatten(-2)

    def forward(self, query, key=None, value=None, mask=None, need_weights: bool = True, cache=None,
                is_causal: bool = False):
        """Returns (output (..., T, E), weights averaged over heads (..., T, S) or None).

        With a `KVCache` (chapter 7) the new keys and values are appended to it and the queries attend to
        every position it holds; `mask` must then cover all of them. `is_causal` is
        `F.scaled_dot_product_attention`'s, for T == S only (chapter 5): it lets the fused kernel skip the
        future without a mask tensor, which a GPU's flash kernel needs.
        """
        key = query if key is None else key
        value = key if value is None else value
        dtype = self.q_proj.weight.dtype
        validate_width(query, self.embed_dim, "query", "embed_dim", dtype)
        validate_width(key, self.kdim, "key", "kdim", dtype)
        validate_width(value, self.vdim, "value", "vdim", dtype)
        validate_mask_axes(mask, query, self.num_heads)
        if mask is not None and mask.is_floating_point():
            mask = mask.to(dtype)  # added to the scores; the fused kernel wants the query's dtype
        if cache is not None:
            validate_cache_layer(cache, self)
        q = self.split_heads(self.q_proj(query))  # (..., H, T, E/H)
        k = self.split_heads(self.k_proj(key), self.num_kv_heads)  # (..., H_kv, S, E/H)
        v = self.split_heads(self.v_proj(value), self.num_kv_heads)  # (..., H_kv, S, E/H)
        if cache is not None:
            k, v = cache.append(k, v)  # every position so far: (..., H_kv, S_cached + S, E/H)
        if self.num_kv_heads < self.num_heads and mask is None and not is_causal and not need_weights \
                and not (self.training and self.dropout.p > 0):
            return self.out_proj(self.merge_heads(grouped_attention(q, k, v))), None
        if self.num_kv_heads < self.num_heads:  # each key/value head serves a group of query heads
            group = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)  # (..., H, S, E/H)
        validate_attention_inputs(q, k, v, mask)  # errors name the per-head shapes
        if is_causal:
            validate_is_causal(q, k, mask)
        if need_weights:
            if is_causal:  # F.scaled_dot_product_attention's is_causal, written out: (T, T), True = may attend
                mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
            weights = head_weights(q, k, mask)  # (..., H, T, S), float32 for half-precision inputs
            context = (self.dropout(weights) @ v.to(weights.dtype)).to(v.dtype)  # (..., H, T, E/H)
            averaged = weights.mean(dim=-3).to(q.dtype) if need_weights else None  # (..., T, S)
            return self.out_proj(self.merge_heads(context)), averaged
        # the fused kernel, same maths; with is_causal it makes the (T, T) mask itself (mask is None then), and
        # in training it drops attention weights itself, given dropout_p (as nanoGPT does; chapter 5)
        dropout_p = self.dropout.p if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p)
        return self.out_proj(self.merge_heads(context)), None

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, sequence_first: bool = False) -> "MultiHeadAttention":
        """A copy of an `nn.MultiheadAttention`'s weights in this module (chapter 3).

        This module takes (B, T, E); a module built without `batch_first=True` takes (T, B, E), so it is
        refused unless `sequence_first=True` says that the caller will transpose its inputs."""
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported")
        if not mha.batch_first and not sequence_first:
            raise ValueError("mha has batch_first=False: it reads inputs as (T, B, E), this module as (B, T, E), "
                             "so the same tensor would mean another thing. Build it with batch_first=True, or "
                             "pass sequence_first=True and give this module x.transpose(0, 1)")
        module = cls(mha.embed_dim, mha.num_heads, mha.kdim, mha.vdim, bias=mha.in_proj_bias is not None,
                     dropout=mha.dropout)
        module.to(device=mha.out_proj.weight.device, dtype=mha.out_proj.weight.dtype)
        load_torch_weights(module, mha)
        return module

    @classmethod
    def from_keras(cls, layer) -> "MultiHeadAttention":
        """A copy of a built Keras `MultiHeadAttention` layer's weights in this module (chapter 3).

        A Keras `GroupQueryAttention` works too (chapter 8): its kernels have the same layout, the key and
        value ones with H_kv heads, (E, H_kv, d_k), and it repeats each key/value head in place
        (`ops.repeat` on the head axis), as this module's `repeat_interleave` does. Its gate has no
        counterpart here, and its window is a mask here (chapter 5's `causal_mask(..., window=)`): both
        are refused rather than dropped.
        """
        gate, window = getattr(layer, "use_gate", False), getattr(layer, "sliding_window", None)
        if gate or window is not None:
            raise ValueError(f"the Keras layer has use_gate={gate} and sliding_window={window}; this "
                             "module has neither: build it with use_gate=False and sliding_window=None")
        arrays = {}
        for variable in layer.weights:
            name = KERAS_ARRAYS.get("/".join(variable.path.split("/")[-2:]))  # by the path's end, "query/kernel"
            if name:
                arrays[name] = variable.numpy()
        missing = sorted(set(KERAS_ARRAYS.values()) - set(arrays))
        if missing:
            raise ValueError(f"the Keras layer has no {missing}: build it (call it once) and keep its biases")
        E, H, head_dim = arrays["query_kernel"].shape
        module = cls(arrays["output_kernel"].shape[-1], H, kdim=arrays["key_kernel"].shape[0],
                     vdim=arrays["value_kernel"].shape[0], head_dim=head_dim,
                     num_kv_heads=arrays["key_kernel"].shape[1])  # (E, H_kv, d_k): H_kv = H unless grouped
        copy_parameters(module, keras_attention_map(arrays), "the Keras layer has")
        return module


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """Unmasked attention of H query heads over H_kv shared key/value heads,
    without copying them (chapter 8).

    The group of query heads that share a key/value head is stacked as if
    its heads were more positions: (..., H, T, d) -> (..., H_kv, group·T, d).
    Exact only when every query sees every key, as in a decode step; with a
    mask the keys and values are repeated instead (`MultiHeadAttention`).
    """
    kv_heads, group = k.shape[-3], q.shape[-3] // k.shape[-3]
    # (..., H, T, d) -> (..., H_kv, group, T, d) -> (..., H_kv, group·T, d)
    stacked = q.unflatten(-3, (kv_heads, group)).flatten(-3, -2)
    context = F.scaled_dot_product_attention(stacked, k, v)
    # (..., H_kv, group·T, d_v) -> (..., H_kv, group, T, d_v)
    #                           -> (..., H, T, d_v)
    return context.unflatten(-2, (group, q.shape[-2])).flatten(-4, -3)


def validate_dropout(dropout) -> None:
    """A dropout probability is a number from 0 to 1, as `nn.Dropout` takes."""
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
        raise ValueError(f"dropout must be a probability from 0 to 1, got {dropout!r}")


def validate_cache_layer(cache, module: nn.Module) -> None:
    """A KV cache holds one layer's keys and values: the first module to use it owns it until `reset`
    (chapter 7). Two layers sharing one would each read the other's keys."""
    owner = getattr(cache, "layer", None)
    if owner is None:
        cache.layer = weakref.ref(module)
    elif owner() is not module:
        raise ValueError("cache already holds another attention layer's keys and values: give every layer "
                         "its own cache (Decoder.new_caches() makes one per layer), or reset() it first")


def validate_torch_masks(**masks) -> None:
    """`nn.MultiheadAttention`'s masks (name=mask): None, or boolean (True = blocked) or floating tensors, as
    PyTorch takes them; an integer mask would be added to the scores as numbers (chapter 3)."""
    for name, mask in masks.items():
        if mask is not None and (not isinstance(mask, torch.Tensor) or
                                 not (mask.dtype == torch.bool or mask.is_floating_point())):
            got = f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise TypeError(f"{name} must be a boolean (True = blocked) or floating torch.Tensor, as "
                            f"nn.MultiheadAttention takes it, got {got}: convert with {name}.bool()")


def validate_stacked_weights(x, W_query, W_key, W_value) -> None:
    """x (T, E) and stacked weights (H, d_k, E), (H, d_k, E), (H, d_v, E) (chapter 3)."""
    if x.dim() != 2:
        raise ValueError(f"x must be (T, E), got shape {tuple(x.shape)}")
    for name, w in (("W_query", W_query), ("W_key", W_key), ("W_value", W_value)):
        if w.dim() != 3 or w.shape[0] != W_query.shape[0] or w.shape[-1] != x.shape[-1]:
            raise ValueError(f"{name} must be (H, d, E) with H = W_query.shape[0] = {W_query.shape[0]} and "
                             f"E = x.shape[-1] = {x.shape[-1]}, got shape {tuple(w.shape)}")
    if W_key.shape[1] != W_query.shape[1]:
        raise ValueError(f"W_query {tuple(W_query.shape)} and W_key {tuple(W_key.shape)} must share d_k")


def validate_is_causal(q: torch.Tensor, k: torch.Tensor, mask) -> None:
    """`is_causal` stands for the mask and is exact only when queries and keys are the same positions."""
    if mask is not None:
        raise ValueError("give either a mask or is_causal=True, not both")
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"is_causal needs as many queries as keys, got T={q.shape[-2]}, S={k.shape[-2]}; "
                         "for T < S use chapter 5's causal_mask(T, S)")


def head_weights(q: torch.Tensor, k: torch.Tensor, mask=None) -> torch.Tensor:
    """Every head's softmax(q kᵀ / √d_k + mask): (..., H, T, S) (chapter 3).

    Chapter 2's `softmax_scores`, except that with no mask and no gradient to keep, the softmax is written
    over the fresh scores: at GPT-2 sizes a second (B, H, T, S) buffer costs more to allocate and fault in
    than the softmax itself (chapter 3's speed section measures it).
    """
    scores = scaled_scores(q, k)  # (..., H, T, S)
    if mask is None and not scores.requires_grad:
        return torch.softmax(scores, dim=-1, out=scores)
    return masked_softmax(apply_mask(scores, mask))


# A Keras MultiHeadAttention's variables (the last two parts of their paths) and our names for them.
KERAS_ARRAYS = {"query/kernel": "query_kernel", "query/bias": "query_bias", "key/kernel": "key_kernel",
                "key/bias": "key_bias", "value/kernel": "value_kernel", "value/bias": "value_bias",
                "attention_output/kernel": "output_kernel", "attention_output/bias": "output_bias"}


def keras_attention_map(w: dict) -> dict:
    """Our parameter names -> a Keras MultiHeadAttention's arrays rearranged for them (chapters 3 and 6).

    A Keras kernel is used as x @ kernel and keeps a head axis: (E, H, d_k). `nn.Linear` stores the
    transpose of a flat matrix, (out, in), so the kernel is flattened to (E, H·d_k), head after head, and
    transposed; the output kernel (H, d_k, E) becomes (E, H·d_k) the same way.
    """
    def linear(kernel):  # (in, ...) -> (out, in)
        return kernel.reshape(kernel.shape[0], -1).T

    return {
        "q_proj.weight": linear(w["query_kernel"]),  # (E, H, d_k) -> (H·d_k, E)
        "q_proj.bias": w["query_bias"].reshape(-1),  # (H, d_k) -> (H·d_k,)
        "k_proj.weight": linear(w["key_kernel"]),
        "k_proj.bias": w["key_bias"].reshape(-1),
        "v_proj.weight": linear(w["value_kernel"]),
        "v_proj.bias": w["value_bias"].reshape(-1),
        "out_proj.weight": w["output_kernel"].reshape(-1, w["output_kernel"].shape[-1]).T,  # (H, d_k, E) -> (E, H·d_k)
        "out_proj.bias": w["output_bias"],  # (E,)
    }


def torch_weight_map(mha: nn.MultiheadAttention) -> dict[str, torch.Tensor]:
    """Our parameter names -> the `nn.MultiheadAttention` tensors they come from (chapter 3)."""
    E = mha.embed_dim
    if mha._qkv_same_embed_dim:  # packed: in_proj_weight (3E, E) holds W_Q, W_K, W_V one under another
        q_w, k_w, v_w = mha.in_proj_weight[:E], mha.in_proj_weight[E:2 * E], mha.in_proj_weight[2 * E:]
    else:  # kdim or vdim differ from E: three separate matrices
        q_w, k_w, v_w = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    names = {"q_proj.weight": q_w, "k_proj.weight": k_w, "v_proj.weight": v_w,
             "out_proj.weight": mha.out_proj.weight}
    if mha.in_proj_bias is not None:
        b = mha.in_proj_bias  # (3E,)
        names |= {"q_proj.bias": b[:E], "k_proj.bias": b[E:2 * E], "v_proj.bias": b[2 * E:],
                  "out_proj.bias": mha.out_proj.bias}
    return names


def load_torch_weights(module: MultiHeadAttention, mha: nn.MultiheadAttention) -> None:
    """Copy tensors by the explicit name map, checking every shape."""
    copy_parameters(module, torch_weight_map(mha), "nn.MultiheadAttention has")


def copy_parameters(module: nn.Module, tensors: dict, source: str) -> None:
    """Copy `tensors` (parameter name -> tensor or array) into `module`, checking every shape first.

    The weight loaders of chapters 3 and 6 are explicit name maps fed to this; `source` names where the
    tensors come from in the error, e.g. "nn.MultiheadAttention has".
    """
    ours = dict(module.named_parameters())
    tensors = {name: torch.as_tensor(tensor) for name, tensor in tensors.items()}
    for name, tensor in tensors.items():  # all checked before anything is copied
        if ours[name].shape != tensor.shape:
            raise ValueError(f"{name}: expected shape {tuple(ours[name].shape)}, {source} {tuple(tensor.shape)}")
    with torch.no_grad():
        for name, tensor in tensors.items():
            ours[name].copy_(tensor)


def additive_mask(mask: torch.Tensor) -> torch.Tensor:
    """A PyTorch-module mask (boolean True = blocked, or float) as a float mask (0 or −inf) (chapter 3)."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, device=mask.device).masked_fill(mask, float("-inf"))
    return mask


def mask_from_torch(attn_mask=None, key_padding_mask=None, num_heads: int = 1):
    """`nn.MultiheadAttention`'s attn_mask (T, S) or (B·H, T, S) and key_padding_mask (B, S), both with
    True = blocked, combined into one float mask for this package, shaped to broadcast to (B, H, T, S): four
    axes always, so that it is never ambiguous (`validate_mask_axes`)."""
    validate_torch_masks(attn_mask=attn_mask, key_padding_mask=key_padding_mask)
    total = None
    if attn_mask is not None:
        total = additive_mask(attn_mask)
        if total.dim() == 3:  # (B·H, T, S) -> (B, H, T, S)
            if total.shape[0] % num_heads:
                raise ValueError(f"attn_mask of shape {tuple(total.shape)} is (B·H, T, S), but its first axis is "
                                 f"not a multiple of num_heads={num_heads}")
            total = total.unflatten(0, (-1, num_heads))
        elif total.dim() == 2:  # (T, S) -> (1, 1, T, S)
            total = total[None, None]
    if key_padding_mask is not None:
        if key_padding_mask.dim() != 2:
            raise ValueError(f"key_padding_mask must be (B, S), got shape {tuple(key_padding_mask.shape)}")
        padding = additive_mask(key_padding_mask)[:, None, None, :]  # (B, S) -> (B, 1, 1, S)
        total = padding if total is None else total + padding
    return total
