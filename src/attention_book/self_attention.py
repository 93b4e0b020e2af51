"""One head of self-attention as an `nn.Module`, with the source article's weight layout (chapter 2)."""

import torch
from torch import nn

from .attention import (
    scaled_dot_product_attention,
    validate_mask_axes,
    validate_positive,
    validate_width,
)


class SelfAttention(nn.Module):
    """One head, its weights (d_in, d_out) used as x @ W (chapter 2)."""

    def __init__(self, d_in: int, d_out_kq: int, d_out_v: int):
        super().__init__()
        validate_positive(d_in=d_in, d_out_kq=d_out_kq, d_out_v=d_out_v)
        self.d_in = d_in
        # torch.rand in this order: a seed reproduces the source's numbers
        self.W_query = nn.Parameter(torch.rand(d_in, d_out_kq))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out_kq))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out_v))

    def forward(self, x: torch.Tensor, mask=None) -> torch.Tensor:
        """x (..., T, d_in) -> context vectors (..., T, d_v)."""
        validate_width(x, self.d_in, dtype=self.W_query.dtype)
        validate_mask_axes(mask, x)
        queries = x @ self.W_query  # (..., T, d_k)
        keys = x @ self.W_key  # (..., T, d_k)
        values = x @ self.W_value  # (..., T, d_v)
        context, _ = scaled_dot_product_attention(queries, keys, values,
                                                  mask)
        return context
