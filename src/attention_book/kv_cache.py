"""The KV cache: keys and values kept between decoding steps (chapter 7)."""

import numpy as np
import torch


def kv_cache_bytes(layers: int, heads: int, head_dim: int, length: int, bytes_per_value: int, batch: int = 1) -> int:
    """Memory of a full cache: keys and values (the 2) for every layer, head and position (chapter 7)."""
    return 2 * layers * heads * head_dim * length * bytes_per_value * batch


def _zeros_like(example, shape):
    """An empty buffer of `shape` of the same kind (tensor or NumPy array), dtype and device as `example`."""
    if isinstance(example, torch.Tensor):
        return example.new_zeros(shape)
    return np.zeros(shape, dtype=example.dtype)


class KVCache:
    """Keys (..., S, d_k) and values (..., S, d_v) of one attention layer, for at most `max_length` positions.

    Chapter 7. The buffers are allocated on the first `append`, shaped like what is appended, and
    filled in place; PyTorch tensors and NumPy arrays both work. `reset` empties the cache.
    """

    def __init__(self, max_length: int):
        if max_length < 1:
            raise ValueError(f"max_length must be at least 1, got {max_length}")
        self.max_length = max_length
        self.reset()

    def reset(self) -> None:
        """Forget every position (a new sequence may have another batch size or width)."""
        self.keys = self.values = None  # (..., max_length, d_k), (..., max_length, d_v)
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def append(self, keys, values):
        """Store the keys (..., n, d_k) and values (..., n, d_v) of n new positions.

        Returns the keys (..., S, d_k) and values (..., S, d_v) of all S positions stored so far.
        """
        if keys.shape[:-1] != values.shape[:-1]:
            raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must agree on every axis "
                             "but the last")
        n = keys.shape[-2]
        if self.keys is None:
            lead = tuple(keys.shape[:-2])
            self.keys = _zeros_like(keys, (*lead, self.max_length, keys.shape[-1]))
            self.values = _zeros_like(values, (*lead, self.max_length, values.shape[-1]))
        else:
            self._validate_fits(keys, self.keys, "keys")
            self._validate_fits(values, self.values, "values")
        if self.length + n > self.max_length:
            raise ValueError(f"KV cache overflow: {self.length} positions stored + {n} new > max_length="
                             f"{self.max_length}")
        self.keys[..., self.length:self.length + n, :] = keys
        self.values[..., self.length:self.length + n, :] = values
        self.length += n
        return self.keys[..., :self.length, :], self.values[..., :self.length, :]  # (..., S, d)

    @staticmethod
    def _validate_fits(new, stored, name: str) -> None:
        if new.shape[:-2] != stored.shape[:-2] or new.shape[-1] != stored.shape[-1]:
            stored_shape = (*stored.shape[:-2], "S", stored.shape[-1])
            raise ValueError(f"new {name} of shape {tuple(new.shape)} do not fit a cache of {name} shaped "
                             f"{stored_shape}: only the length axis (-2) may differ")

    def nbytes(self) -> int:
        """Bytes held by the two buffers (the whole `max_length`, allocated up front)."""
        if self.keys is None:
            return 0
        return self.keys.nbytes + self.values.nbytes  # tensors and arrays both have .nbytes
