"""The KV cache: keys and values kept between decoding steps (chapter 7)."""

import copy
import math

import numpy as np
import torch

from .attention import validate_positive
from .causal import validate_sinks


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, length: int, bytes_per_value: int,
                   batch: int = 1) -> int:
    """Memory of a full cache: keys and values (the 2) for every layer, key/value head, position and
    sequence of the batch (chapter 7). With grouped-query attention kv_heads is H_kv, not H."""
    validate_cache_sizes(layers=layers, kv_heads=kv_heads, head_dim=head_dim, length=length,
                         bytes_per_value=bytes_per_value, batch=batch)
    return 2 * layers * kv_heads * head_dim * length * bytes_per_value * batch


def validate_cache_sizes(**sizes) -> None:
    """The sizes a cache's memory is counted from (name=value): non-negative integers, except
    bytes_per_value, which may be a fraction (0.5: int4) (chapter 7)."""
    for name, size in sizes.items():
        kinds = (int, float, np.integer, np.floating) if name == "bytes_per_value" else (int, np.integer)  # 0.5: int4
        if isinstance(size, bool) or not isinstance(size, kinds) or not 0 <= size < math.inf:
            raise ValueError(f"{name} must be a non-negative {'number' if float in kinds else 'integer'}, got {size!r}")


def validate_row(row, batch_size: int) -> None:
    """A sequence of a paged cache is named by its row, 0 … batch_size − 1; Python's negative indexing
    would name another one."""
    if isinstance(row, bool) or not isinstance(row, (int, np.integer)) or not 0 <= row < batch_size:
        raise IndexError(f"row {row!r} is not a sequence of this cache: rows are 0 to {batch_size - 1} "
                         f"(batch size {batch_size})")


def _zeros_like(example, shape):
    """An empty buffer of `shape` of the same kind (tensor or NumPy array), dtype and device as `example`."""
    if isinstance(example, torch.Tensor):
        return example.new_zeros(shape)
    return np.zeros(shape, dtype=example.dtype)


def buffers_for(keys, values, stored_keys, stored_values, length: int):
    """A cache's key and value buffers (..., length, d) (chapter 7).

    Allocated on the first append, shaped like the new keys (..., n, d_k)
    and values (..., n, d_v) and of their kind (tensor or NumPy array);
    after that the stored ones, checked to fit them.
    """
    if keys.ndim < 2 or values.ndim < 2:
        raise ValueError(
            f"keys {tuple(keys.shape)} and values {tuple(values.shape)} "
            "must be (..., n, d): at least 2 dimensions")
    if keys.shape[:-1] != values.shape[:-1]:
        raise ValueError(
            f"keys {tuple(keys.shape)} and values {tuple(values.shape)} "
            "must agree on every axis but the last")
    if stored_keys is None:
        lead = tuple(keys.shape[:-2])
        return (_zeros_like(keys, (*lead, length, keys.shape[-1])),
                _zeros_like(values, (*lead, length, values.shape[-1])))
    validate_fits(keys, stored_keys, "keys")
    validate_fits(values, stored_values, "values")
    return stored_keys, stored_values


def validate_fits(new, stored, name: str) -> None:
    """Only the length axis (-2) of new keys or values may differ from the cache's buffer."""
    validate_kind(new, stored, name)
    if new.shape[:-2] != stored.shape[:-2] or new.shape[-1] != stored.shape[-1]:
        stored_shape = (*stored.shape[:-2], "S", stored.shape[-1])
        raise ValueError(f"new {name} of shape {tuple(new.shape)} do not fit a cache of {name} shaped "
                         f"{stored_shape}: only the length axis (-2) may differ")


def validate_kind(new, stored, name: str) -> None:
    """New keys or values must have the buffer's kind, dtype and device: a cache never converts them (an
    int8 buffer would truncate floats)."""
    if isinstance(new, torch.Tensor) != isinstance(stored, torch.Tensor) or new.dtype != stored.dtype or \
            getattr(new, "device", None) != getattr(stored, "device", None):
        raise TypeError(f"new {name} are a {_kind(new)}, the cache holds a {_kind(stored)}: give it the same "
                        "dtype and device (.to(...)), or reset() it")


def _kind(t) -> str:
    """"Tensor of torch.float32 on cpu", "ndarray of float64": what a cache's check compares."""
    return f"{type(t).__name__} of {t.dtype}" + (f" on {t.device}" if isinstance(t, torch.Tensor) else "")


class KVCache:
    """Keys (..., S, d_k) and values (..., S, d_v) of one attention layer, for at most `max_length` positions.

    Chapter 7. The buffers are allocated on the first `append`, shaped like what is appended, and
    filled in place; PyTorch tensors and NumPy arrays both work. `reset` empties the cache.
    """

    def __init__(self, max_length: int):
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be at least 1, got {max_length}")
        self.max_length = max_length
        self.reset()

    def reset(self) -> None:
        """Forget every position (a new sequence may have another batch size or width)."""
        self.keys = self.values = None  # (..., max_length, d_k), (..., max_length, d_v)
        self.length = 0
        self.layer = None  # the attention module that appends to it, set on its first use

    def __len__(self) -> int:
        return self.length

    def positions(self, num_new: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions of the next `append`'s n new queries (n,) and of the keys it returns (S,), S = len + n."""
        start = self.length
        return torch.arange(start, start + num_new, device=device), torch.arange(start + num_new, device=device)

    def append(self, keys, values):
        """Store the keys (..., n, d_k) and values (..., n, d_v) of n new
        positions. Returns the keys (..., S, d_k) and values (..., S, d_v)
        of all S positions stored so far.
        """
        self.keys, self.values = buffers_for(
            keys, values, self.keys, self.values, self.max_length)
        n = keys.shape[-2]
        if self.length + n > self.max_length:
            raise ValueError(
                f"KV cache overflow: {self.length} positions stored + {n} "
                f"new > max_length={self.max_length}")
        new = slice(self.length, self.length + n)
        self.keys[..., new, :] = keys
        self.values[..., new, :] = values
        self.length += n
        held = slice(0, self.length)  # (..., S, d) each:
        return self.keys[..., held, :], self.values[..., held, :]

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on, as after a rejected
        speculative draft (chapter 8): the next `append` writes over them,
        and the positions before are untouched."""
        if (isinstance(length, bool) or not isinstance(length, int)
                or not 0 <= length <= self.length):
            raise ValueError(
                f"length must be an integer from 0 to the {self.length} "
                f"positions stored, got {length!r}")
        self.length = length

    def nbytes(self) -> int:
        """Bytes held by the two buffers (the whole `max_length`, allocated up front)."""
        if self.keys is None:
            return 0
        return self.keys.nbytes + self.values.nbytes  # tensors and arrays both have .nbytes


class RingKVCache:
    """The rolling cache of sliding-window attention: `window` slots, position p kept in slot p mod window
    (chapter 8; Mistral 7B's rolling buffer).

    A query sees itself and the window − 1 positions before it, so nothing older is ever read again and
    its slot is overwritten. Memory stays at `window` positions however long the sequence grows; `len`
    counts every position seen, which the decoder needs for the position of the next token.
    With `sinks` (StreamingLLM's attention sinks) the first `sinks` positions keep slots of their own,
    0 … sinks − 1, never overwritten, and position p ≥ sinks goes to slot sinks + (p − sinks) mod window.
    """

    def __init__(self, window: int, sinks: int = 0):
        validate_positive(window=window)  # a ring needs a size: None (no window) is a KVCache
        validate_sinks(sinks, window)
        self.window, self.sinks = window, sinks
        self.reset()

    def reset(self) -> None:
        """Forget every position."""
        self.keys = self.values = None  # (..., sinks + window, d_k), (..., sinks + window, d_v)
        self.length = 0  # positions seen, not positions held
        self.layer = None  # the attention module that appends to it, set on its first use

    def __len__(self) -> int:
        return self.length

    def slot_positions(self, end: int, device=None) -> torch.Tensor:
        """Which position each slot holds once positions 0 … end − 1 are written: (min(end, sinks + window),)."""
        sinks = torch.arange(min(end, self.sinks), device=device)  # the sinks' own slots
        slots = torch.arange(min(max(end - self.sinks, 0), self.window), device=device)  # ring slot k holds the
        ring = slots + (end - 1 - self.sinks - slots) // self.window * self.window  # latest p ≡ k, counted
        return torch.cat([sinks, self.sinks + ring])  # from the first position after the sinks

    def positions(self, num_new: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions of the next `append`'s n new queries (n,) and of the keys it returns (S,).

        One new position (decoding): the keys are the slots, in slot order, after it is written. Several
        (prefill): the sinks and the window − 1 latest old positions, then the new ones, in position order.
        """
        start = self.length
        queries = torch.arange(start, start + num_new, device=device)  # (n,)
        if num_new == 1:
            return queries, self.slot_positions(start + 1, device)  # (S,), S = min(len + 1, sinks + window)
        sinks = torch.arange(min(start, self.sinks), device=device)  # old positions: the sinks held,
        recent = torch.arange(min(max(self.sinks, start - self.window + 1), start), start,  # the window's
                              device=device)
        return queries, torch.cat([sinks, recent, queries])  # (S,), S = held + n

    def append(self, keys: torch.Tensor, values: torch.Tensor):
        """Store the keys (..., n, d_k) and values (..., n, d_v) of n new positions; return the keys and
        values (..., S, d) at the positions `positions(n)` names."""
        size = self.sinks + self.window
        self.keys, self.values = buffers_for(keys, values, self.keys, self.values, size)
        n, start = keys.shape[-2], self.length
        if n > 1:  # the old positions the new queries can still see, oldest first, before any is overwritten
            old = self.slot_index(self.positions(n)[1][:-n])  # (held,)
            all_keys = torch.cat([self.keys[..., old, :], keys], dim=-2)  # (..., held + n, d_k)
            all_values = torch.cat([self.values[..., old, :], values], dim=-2)  # (..., held + n, d_v)
        new = torch.arange(start, start + n)
        kept = new[(new < self.sinks) | (new >= max(self.sinks, start + n - self.window))]  # the ones that stay
        self.keys[..., self.slot_index(kept), :] = keys[..., kept - start, :]
        self.values[..., self.slot_index(kept), :] = values[..., kept - start, :]
        self.length += n
        if n > 1:
            return all_keys, all_values
        held = min(self.length, size)
        return self.keys[..., :held, :], self.values[..., :held, :]  # (..., S, d), in slot order

    def slot_index(self, positions: torch.Tensor) -> torch.Tensor:
        """The slot of each position: p below the sinks, sinks + (p − sinks) mod window after them."""
        ring = self.sinks + (positions - self.sinks) % self.window
        return torch.where(positions < self.sinks, positions, ring).to(self.keys.device)

    def nbytes(self) -> int:
        """Bytes held by the two buffers: `sinks + window` positions, whatever the length."""
        if self.keys is None:
            return 0
        return self.keys.nbytes + self.values.nbytes


class Int8KVCache(KVCache):
    """A `KVCache` that stores keys and values as int8, one float32 scale per position and head (chapter 8).

    Each new key (and value) vector x of d numbers is stored as round(x / s) with s = max|x| / 127, so
    that it is rebuilt as s · round(x / s), within s / 2 of x in every entry; d + 4 bytes instead of 4d.
    `append` returns keys and values rebuilt from the stored ones in float32 and handed back in the dtype
    they came in (a real kernel rebuilds them tile by tile as it reads them). Scales per position suit streaming: KIVI (Liu et al., 2024) scales
    keys per channel instead, over groups of positions, because a few key channels carry outliers.
    """

    def reset(self) -> None:
        """Forget every position."""
        super().reset()
        self.key_scales = self.value_scales = None  # (..., max_length, 1) each

    def append(self, keys: torch.Tensor, values: torch.Tensor):
        """Quantise and store n new positions' keys (..., n, d_k) and values (..., n, d_v); return every
        stored position's keys (..., S, d_k) and values (..., S, d_v), dequantised in float32 and returned
        in the dtype the new keys came in (a bfloat16 layer reads bfloat16)."""
        if not keys.is_floating_point() or not values.is_floating_point():
            raise ValueError(f"Int8KVCache quantises floating-point keys and values, got {keys.dtype} and "
                             f"{values.dtype}")
        n = keys.shape[-2]
        if self.length + n > self.max_length:
            raise ValueError(f"KV cache overflow: {self.length} positions stored + {n} new > max_length="
                             f"{self.max_length}")
        k8, k_scale = quantize_int8(keys)  # (..., n, d_k) int8, (..., n, 1)
        v8, v_scale = quantize_int8(values)
        self.keys, self.values = buffers_for(k8, v8, self.keys, self.values, self.max_length)
        self.key_scales, self.value_scales = buffers_for(k_scale, v_scale, self.key_scales, self.value_scales,
                                                         self.max_length)
        new = slice(self.length, self.length + n)
        self.keys[..., new, :], self.values[..., new, :] = k8, v8
        self.key_scales[..., new, :], self.value_scales[..., new, :] = k_scale, v_scale
        self.length += n
        held = slice(0, self.length)
        return (dequantize_int8(self.keys[..., held, :], self.key_scales[..., held, :]).to(keys.dtype),
                dequantize_int8(self.values[..., held, :], self.value_scales[..., held, :]).to(values.dtype))

    def nbytes(self) -> int:
        """Bytes of the int8 buffers and their float32 scales (the whole `max_length`)."""
        if self.keys is None:
            return 0
        return sum(t.nbytes for t in (self.keys, self.values, self.key_scales, self.value_scales))


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., d) -> int8 (..., d) and float32 scale (..., 1) with
    x ≈ scale · int8, symmetric, one scale per vector (chapter 8)."""
    scale = x.abs().amax(dim=-1, keepdim=True).float() / 127  # (..., 1)
    scale = scale.clamp(min=torch.finfo(torch.float32).tiny)  # zeros stay 0
    q = (x.float() / scale).round().clamp(-127, 127)
    return q.to(torch.int8), scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """int8 (..., d) and scale (..., 1) -> float32 (..., d)."""
    return q.float() * scale


PADDING = torch.iinfo(torch.int64).max  # the position of a padding key: no query ever reaches it


class BlockPool:
    """A fixed number of blocks, each holding the keys and values of `block_size` positions of one layer
    (chapter 8; vLLM's PagedAttention). Sequences take blocks as they grow and give them back when done."""

    def __init__(self, num_blocks: int, block_size: int):
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in (num_blocks, block_size)):
            raise ValueError(f"num_blocks and block_size must be at least 1, got {num_blocks} and {block_size}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.free = list(range(num_blocks - 1, -1, -1))  # popped from the end: block 0 first
        self.keys = self.values = None  # (num_blocks, H_kv, block_size, d_k), (..., d_v): on first use

    def allocate(self) -> int:
        """A free block's number."""
        if not self.free:
            raise RuntimeError(f"the block pool is exhausted: all {self.num_blocks} blocks of {self.block_size} "
                               "positions are in use")
        return self.free.pop()

    def release(self, blocks: list[int]) -> None:
        """Give blocks back to the pool."""
        free = set(self.free)
        for block in blocks:
            if not 0 <= block < self.num_blocks or block in free or list(blocks).count(block) > 1:
                raise ValueError(f"blocks {list(blocks)}: block {block} is not in use (already free, released "
                                 f"twice, or not one of the pool's {self.num_blocks} blocks)")
        self.free.extend(reversed(blocks))

    def ensure_storage(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Allocate the pool's buffers for keys (B, H_kv, n, d_k) and values (B, H_kv, n, d_v) on first use."""
        if self.keys is None:
            heads = keys.shape[-3]
            self.keys = keys.new_zeros((self.num_blocks, heads, self.block_size, keys.shape[-1]))
            self.values = values.new_zeros((self.num_blocks, heads, self.block_size, values.shape[-1]))
        elif keys.shape[-3] != self.keys.shape[1] or keys.shape[-1] != self.keys.shape[-1] \
                or values.shape[-1] != self.values.shape[-1]:
            raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} do not fit blocks of "
                             f"keys {tuple(self.keys.shape[1:])} and values {tuple(self.values.shape[1:])}")
        validate_kind(keys, self.keys, "keys")
        validate_kind(values, self.values, "values")

    def block_bytes(self) -> int:
        """Bytes of one block's keys and values (0 before the first append)."""
        if self.keys is None:
            return 0
        return (self.keys.nbytes + self.values.nbytes) // self.num_blocks


class PagedKVCache:
    """The keys and values of B sequences of different lengths, in blocks from one `BlockPool`, with a block
    table per sequence: position p of sequence b lives in block `block_tables[b][p // block_size]`, at
    offset p mod block_size (chapter 8).

    `append` feeds n new positions to every sequence in `rows` (all of them by default; `for_rows` makes a
    cache that feeds a few, e.g. to prefill prompts of different lengths one by one). Servers keep one
    block table for all layers; here each layer's cache keeps its own, identical, table.
    """

    def __init__(self, pool: BlockPool, batch_size: int):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not isinstance(pool, BlockPool):
            raise TypeError(f"pool must be a BlockPool (the blocks every sequence takes from), got "
                            f"{type(pool).__name__}")
        self.pool = pool
        self.layer = None  # the attention module that appends to it, set on its first use
        self.block_tables = [[] for _ in range(batch_size)]  # block numbers of each sequence, in order
        self.lengths = [0] * batch_size  # positions stored per sequence
        self.rows = list(range(batch_size))  # the sequences the next append feeds

    def for_rows(self, rows: list[int]) -> "PagedKVCache":
        """The same cache (pool, tables, lengths shared), feeding only the sequences `rows`."""
        for row in rows:
            validate_row(row, len(self.lengths))
        if len(set(rows)) != len(rows):
            raise ValueError(f"rows {list(rows)} name a sequence twice: both copies would write the same blocks")
        view = copy.copy(self)
        view.rows = list(rows)
        return view

    def __len__(self) -> int:
        """The length of the longest sequence fed."""
        return max(self.lengths[row] for row in self.rows)

    def positions(self, num_new: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions of the next `append`'s new queries (B, n), and of the keys it returns (B, S), with
        padding (beyond a shorter sequence's end) at position PADDING."""
        starts = torch.tensor([self.lengths[row] for row in self.rows], device=device)[:, None]  # (B, 1)
        queries = starts + torch.arange(num_new, device=device)  # (B, n)
        num_keys = max(self.lengths[row] for row in self.rows) + num_new  # from the list: no device read-back
        keys = torch.arange(num_keys, device=device).expand(len(self.rows), num_keys)  # (B, S)
        return queries, keys.masked_fill(keys >= starts + num_new, PADDING)

    def append(self, keys: torch.Tensor, values: torch.Tensor):
        """Write keys (B, H_kv, n, d_k) and values (B, H_kv, n, d_v) after each sequence's stored positions;
        return every sequence's keys (B, H_kv, S, d_k) and values, padded to the longest (S positions)."""
        if keys.dim() != 4 or keys.shape[:-1] != values.shape[:-1] or keys.shape[0] != len(self.rows):
            raise ValueError(f"a paged cache feeding {len(self.rows)} sequences takes keys (B, H_kv, n, d_k) and "
                             f"values (B, H_kv, n, d_v) with B = {len(self.rows)}; got {tuple(keys.shape)} and "
                             f"{tuple(values.shape)}")
        self.pool.ensure_storage(keys, values)
        n = keys.shape[-2]
        size = self.pool.block_size
        needed = sum(-(-(self.lengths[row] + n) // size) - len(self.block_tables[row]) for row in self.rows)
        if needed > len(self.pool.free):  # refuse before anything changes
            raise RuntimeError(f"the block pool is exhausted: {needed} more blocks needed, {len(self.pool.free)} of "
                               f"{self.pool.num_blocks} blocks of {size} positions free")
        for i, row in enumerate(self.rows):
            positions = range(self.lengths[row], self.lengths[row] + n)
            blocks, offsets = self.slots(row, positions)  # (n,), (n,)
            self.pool.keys[blocks, :, offsets] = keys[i].transpose(0, 1)  # (n, H_kv, d_k)
            self.pool.values[blocks, :, offsets] = values[i].transpose(0, 1)  # (n, H_kv, d_v)
            self.lengths[row] += n
        return self.gather(self.pool.keys), self.gather(self.pool.values)

    def slots(self, row: int, positions: range) -> tuple[torch.Tensor, torch.Tensor]:
        """The block and offset of each position of sequence `row`, taking new blocks from the pool as needed."""
        table, size = self.block_tables[row], self.pool.block_size
        while len(table) * size < positions.stop:
            table.append(self.pool.allocate())
        like = dict(dtype=torch.long, device=self.pool.keys.device)  # long even when n = 0
        blocks = torch.tensor([table[p // size] for p in positions], **like)
        offsets = torch.tensor([p % size for p in positions], **like)
        return blocks, offsets

    def gather(self, storage: torch.Tensor) -> torch.Tensor:
        """The fed sequences' positions from pool storage (blocks, H_kv, size, d): (B, H_kv, S, d)."""
        longest = max(self.lengths[row] for row in self.rows)
        count = -(-longest // self.pool.block_size)  # blocks of the longest sequence
        tables = torch.tensor([self.block_tables[row][:count] + [0] * (count - len(self.block_tables[row]))
                               for row in self.rows], device=storage.device)  # (B, count), padded with block 0
        blocks = storage[tables]  # (B, count, H_kv, size, d)
        return blocks.transpose(1, 2).flatten(2, 3)[..., :longest, :]  # (B, H_kv, count · size, d) -> (B, H_kv, S, d)

    def release(self, row: int) -> None:
        """Sequence `row` is finished: its blocks go back to the pool, and the row starts empty."""
        validate_row(row, len(self.lengths))
        self.pool.release(self.block_tables[row])
        self.block_tables[row], self.lengths[row] = [], 0

    def nbytes(self) -> int:
        """Bytes of the blocks the sequences hold: what they use, rounded up to whole blocks."""
        return sum(len(table) for table in self.block_tables) * self.pool.block_bytes()
