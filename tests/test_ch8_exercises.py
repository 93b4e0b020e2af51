"""Chapter 8's graded exercises: each check tells plausible mistakes apart (issue 19)."""

import torch

from attention_book.course import checks


def reference_ring_slots(length, window):
    slots = torch.arange(min(length, window))
    return slots + (length - 1 - slots) // window * window


def test_ring_slots_feedback():
    assert checks.evaluate("ch8.ring_slots", reference_ring_slots).passed
    too_many = checks.evaluate("ch8.ring_slots", lambda length, window: torch.arange(length)).message
    assert "holds min(length, window)" in too_many, too_many
    off_by_one = checks.evaluate("ch8.ring_slots", lambda length, window: reference_ring_slots(length, window) + 1)
    assert "slot 0 should hold position" in off_by_one.message, off_by_one.message


def reference_cache_size(layers, kv_heads, head_dim, length, bytes_per_value, batch=1, window=None):
    held = length if window is None else min(length, window)
    return 2 * layers * kv_heads * head_dim * held * bytes_per_value * batch


def test_cache_size_feedback():
    assert checks.evaluate("ch8.cache_size", reference_cache_size).passed

    def no_window(layers, kv_heads, head_dim, length, bytes_per_value, batch=1, window=None):
        return reference_cache_size(layers, kv_heads, head_dim, length, bytes_per_value, batch)

    def no_batch(layers, kv_heads, head_dim, length, bytes_per_value, batch=1, window=None):
        return reference_cache_size(layers, kv_heads, head_dim, length, bytes_per_value, 1, window)

    def whole_window(layers, kv_heads, head_dim, length, bytes_per_value, batch=1, window=None):
        return reference_cache_size(layers, kv_heads, head_dim, window or length, bytes_per_value, batch)

    assert "use min(length, window)" in checks.evaluate("ch8.cache_size", no_window).message
    assert "one sequence's cache" in checks.evaluate("ch8.cache_size", no_batch).message
    message = checks.evaluate("ch8.cache_size", whole_window).message
    assert "holds only the" in message and "positions seen" in message, message
