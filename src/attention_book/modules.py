"""Attention as `nn.Module`s, in the order the book builds them."""

import torch
from torch import nn

from .attention import scaled_dot_product_attention


def check_width(x: torch.Tensor, width: int, name: str = "x", setting: str = "d_in") -> None:
    """Raise a clear error, naming the module's `setting`, when the last axis of `x` is not `width` wide."""
    if x.shape[-1] != width:
        raise ValueError(f"{name} of shape {tuple(x.shape)} has width {x.shape[-1]}, "
                         f"the module expects {setting}={width}")


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


class SelfAttention(nn.Module):
    """One head with its own W_query, W_key (d_in, d_k) and W_value (d_in, d_v), used as x @ W (chapter 2)."""

    def __init__(self, d_in: int, d_out_kq: int, d_out_v: int):
        super().__init__()
        self.d_in = d_in
        # Drawn with torch.rand in this order, so a seed reproduces the source article's numbers.
        self.W_query = nn.Parameter(torch.rand(d_in, d_out_kq))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out_kq))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out_v))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (..., T, d_in) -> context vectors (..., T, d_v)."""
        check_width(x, self.d_in)
        queries = x @ self.W_query  # (..., T, d_k)
        keys = x @ self.W_key  # (..., T, d_k)
        values = x @ self.W_value  # (..., T, d_v)
        context, _ = scaled_dot_product_attention(queries, keys, values, mask)
        return context
