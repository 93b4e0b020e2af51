"""Chapter 7's graded exercises: each check tells plausible mistakes apart (issue 19)."""

import math

import torch

from attention_book import grader


def reference_decode_step(q, k_new, v_new, k_cache, v_cache):
    keys, values = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ values, keys, values


def test_window_mask_feedback():
    def band(width):
        return lambda T, S, w: torch.ones(T, S, dtype=torch.bool).tril(S - T).triu(S - T - width + 1)

    assert grader.evaluate("ch7.window_mask", lambda T, S, w: band(w)(T, S, w)).passed
    too_wide = grader.evaluate("ch7.window_mask", lambda T, S, w: band(w + 1)(T, S, w)).message
    assert "your band is" in too_wide and "wide" in too_wide, too_wide
    not_bool = grader.evaluate("ch7.window_mask", lambda T, S, w: band(w)(T, S, w).int()).message
    assert "should be boolean" in not_bool
    no_window = grader.evaluate("ch7.window_mask", lambda T, S, w: torch.ones(T, S, dtype=torch.bool).tril(S - T))
    assert not no_window.passed and "should not see it" in no_window.message, no_window.message


def test_decode_step_feedback():
    assert grader.evaluate("ch7.decode_step", reference_decode_step).passed

    def unscaled(q, k_new, v_new, k_cache, v_cache):
        keys, values = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
        return torch.softmax(q @ keys.transpose(-2, -1), dim=-1) @ values, keys, values

    def in_front(q, k_new, v_new, k_cache, v_cache):
        _, keys, values = reference_decode_step(q, k_new, v_new, k_cache, v_cache)
        return _, torch.cat([k_new, k_cache], dim=-2), torch.cat([v_new, v_cache], dim=-2)

    def old_positions_only(q, k_new, v_new, k_cache, v_cache):
        _, keys, values = reference_decode_step(q, k_new, v_new, k_cache, v_cache)
        return torch.softmax(q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v_cache, keys, values

    assert "not scaled" in grader.evaluate("ch7.decode_step", unscaled).message
    assert "went in front" in grader.evaluate("ch7.decode_step", in_front).message
    assert "ignores the new position" in grader.evaluate("ch7.decode_step", old_positions_only).message
    assert "return three things" in grader.evaluate("ch7.decode_step", lambda *a: a[0]).message
