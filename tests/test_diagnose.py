"""The instant feedback of an installed student names common mistakes from the inputs, the student's answer
and the stored expected answer alone (issue 40): no reference answer is computed."""

import json
import math

import numpy as np
import pytest
import torch

from attention_book.course import feedback, wire
from attention_book.course.diagnose import name_the_mistake


def causal_weights(T: int, d: int, seed: int = 0):
    """q, k (T, d) and their causal softmax weights (T, T), the expected answer of a weights exercise."""
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(T, d, generator=gen), torch.randn(T, d, generator=gen)
    scores = q @ k.T / math.sqrt(d)
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)
    return q, k, scores, blocked, scores.masked_fill(blocked, float("-inf")).softmax(-1)


@pytest.fixture
def stored(tmp_path):
    """A feedback folder with one exercise, "chX.weights", whose stored case is causal_weights(5, 4)."""
    q, k, _, _, expected = causal_weights(5, 4)
    case = {"args": wire.encode([q, k]), "expected": wire.encode(expected)}
    (tmp_path / "chX.json").write_text(json.dumps({"chX.weights": [case]}))
    return tmp_path


def replayed(stored, answer) -> str:
    result = feedback.replay("chX.weights", answer, stored)
    assert not result.passed
    return result.message


def test_masking_after_the_softmax_is_named(stored):
    def masked_after(q, k):
        T, d = q.shape
        weights = (q @ k.T / math.sqrt(d)).softmax(-1)
        return weights.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), 0.0)
    assert "the mask was applied after the softmax" in replayed(stored, masked_after)


def test_the_wrong_softmax_axis_is_named(stored):
    def wrong_axis(q, k):
        T, d = q.shape
        scores = (q @ k.T / math.sqrt(d)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
        return scores.softmax(0)
    message = replayed(stored, wrong_axis)
    assert "the softmax runs over the wrong axis" in message or "NaN" in message or "transpose" in message


def test_a_missing_mask_is_named(stored):
    assert "a position the expected weights block" in replayed(
        stored, lambda q, k: (q @ k.T / math.sqrt(q.shape[1])).softmax(-1))


def test_rows_that_do_not_sum_to_one_are_named(stored):
    def no_softmax(q, k):
        T, d = q.shape
        return (q @ k.T / math.sqrt(d)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), 0.0)
    assert "every row must sum to 1" in replayed(stored, no_softmax)


def test_a_transposed_answer_is_named(stored):
    assert "transpose of the expected one" in replayed(
        stored, lambda q, k: causal_weights(5, 4)[-1].T)


def test_a_missing_scale_is_named_as_the_root_of_a_size():
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(3, 16, generator=gen), torch.randn(6, 16, generator=gen)
    expected = (q @ k.T / 4.0).numpy()  # scores scaled by 1/√16
    message = name_the_mistake((q @ k.T).numpy(), expected, (q, k))
    assert message.startswith("your result is √16 = 4.0000 times the expected one")
    assert "applied twice" in name_the_mistake((q @ k.T / 16).numpy(), expected, (q, k))


def test_nan_where_the_answer_is_finite_is_named():
    expected = np.array([[1.0, 0.0], [0.5, 0.5]])
    got = np.array([[1.0, 0.0], [np.nan, np.nan]])
    assert "where the expected value is finite" in name_the_mistake(got, expected)


def test_sizes_in_another_order_are_named():
    assert "the right sizes in another order, (4, 2, 3)" in name_the_mistake(np.zeros((4, 2, 3)), np.zeros((2, 3, 4)))
    assert name_the_mistake(np.zeros((4, 2)), np.zeros((2, 5))) is None


def test_an_answer_with_no_named_mistake_says_where_it_differs(stored):
    def off_by_a_little(q, k):
        weights = causal_weights(5, 4)[-1].clone()
        weights[3, 0] += 0.01
        weights[3, 1] -= 0.01
        return weights
    assert replayed(stored, off_by_a_little).endswith("the result[3, 0] is 0.6044, expected 0.5944") or \
        "the result[3, 0] is" in replayed(stored, off_by_a_little)


def test_the_right_answer_names_nothing(stored):
    assert feedback.replay("chX.weights", lambda q, k: causal_weights(5, 4)[-1], stored).passed


def test_the_replay_counts_cases_as_the_checks_do():
    """Both say "passed on 20 random cases"; some checks add edge cases after the random ones."""
    from attention_book.course.checks.common import CASES

    assert feedback.CASES == CASES
