"""The interactive figures' data come from the package's own computation (issue 28): the caches'
buffers read back, the online-softmax states equal to the full softmax, the explorer's rows equal to
the weights given; and their HTML is self-contained and deterministic."""

import re

import pytest
import torch

from attention_book.efficient import online_attention_states
from attention_book.interactive import attention_explorer, kv_cache_steps, tile_steps


def test_online_attention_states_end_at_softmax_times_values():
    gen = torch.Generator().manual_seed(0)
    scores, values = torch.randn(11, generator=gen, dtype=torch.float64) * 4, torch.randn(11, 3, generator=gen,
                                                                                        dtype=torch.float64)
    states = list(online_attention_states(scores, values, block_size=4))
    assert [(start, stop) for start, stop, *_ in states] == [(0, 4), (4, 8), (8, 11)]
    for _, stop, m, total, acc in states:  # after each tile: the exact statistics of the keys read so far
        seen = scores[:stop]
        torch.testing.assert_close(m, seen.max())
        torch.testing.assert_close(total, torch.exp(seen - seen.max()).sum())
        torch.testing.assert_close(acc / total, torch.softmax(seen, -1) @ values[:stop])
    torch.testing.assert_close(acc / total, torch.softmax(scores, -1) @ values)


def test_online_attention_states_with_masked_first_tile():
    """A tile of −∞ scores (masked keys) before any finite one: no NaN, and the result is exact."""
    scores = torch.tensor([float("-inf")] * 3 + [0.5, 2.0, -1.0], dtype=torch.float64)
    values = torch.arange(12, dtype=torch.float64).view(6, 2)
    *_, (_, _, _, total, acc) = online_attention_states(scores, values, block_size=3)
    torch.testing.assert_close(acc / total, torch.softmax(scores, -1) @ values)


def test_explorer_rows_are_the_weights_given_at_4_decimals():
    weights = torch.softmax(torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1)), -1)
    figure = attention_explorer(weights, ["a", "b", "c"], ["w", "x", "y", "z"], names=["h0", "h1"], name="t",
                                title="T")
    for m, map_ in enumerate(figure.data["maps"]):
        assert map_["weights"] == [[round(float(w), 4) for w in row] for row in weights[m]]
    with pytest.raises(ValueError, match=r"weights must be \(M, T, S\) = \(2, 3, 3\).*got \(2, 3, 4\)"):
        attention_explorer(weights, ["a", "b", "c"], names=["h0", "h1"], name="t", title="T")
    with pytest.raises(ValueError, match="name"):
        attention_explorer(weights, ["a", "b", "c"], ["w", "x", "y", "z"], names=["h0", "h1"], name="a b",
                           title="T")


def test_kv_cache_steps_read_the_caches_back():
    prompt, steps, window, block = 5, 6, 4, 4
    figure = kv_cache_steps(prompt, steps, window=window, block_size=block, other_prompt=2)
    records = figure.data["steps"]
    assert len(records) == steps + 1
    before = []  # what the ring held before each step
    for step, record in enumerate(records):
        length = prompt + step
        assert record["full"] == list(range(length))  # the full cache: every position, in order
        held = sorted(p for p in record["ring"] if p is not None)
        assert held == list(range(max(0, length - window), length))  # the ring: the last `window` positions
        assert all(p % window == slot for slot, p in enumerate(record["ring"]) if p is not None)  # slot p mod w
        dropped = (set(before) | set(record["new"])) - set(held)  # written or held, and now gone
        assert record["ring_wrapped"] == bool(dropped)  # the prefill of 5 into 4 slots already wraps
        before = held
        assert record["lengths"] == [length, 2 + step]
        assert [len(t) for t in record["tables"]] == [-(-length // block), -(-(2 + step) // block)]
        owners = [o for o in record["pool"] if o is not None]
        assert len(owners) == sum(len(t) for t in record["tables"])  # every held block, and no other
    assert records[-1]["pool"][records[-1]["tables"][0][-1]].startswith("s0: p8")


def test_tile_steps_hold_the_online_states():
    scores = torch.tensor([0.5, 3.0, -1.0, 2.5, 4.0, 0.0, 1.0])
    values = torch.arange(14, dtype=torch.float32).view(7, 2) / 10
    figure = tile_steps(scores, values, 3)
    assert [s["m"] for s in figure.data["steps"]] == [3.0, 4.0, 4.0]
    exact = (torch.softmax(scores, -1) @ values).tolist()
    assert figure.data["steps"][-1]["out"] == pytest.approx(exact, abs=1e-4)
    assert figure.data["exact"] == [round(e, 4) for e in exact]


def test_html_is_self_contained_and_deterministic():
    figures = [kv_cache_steps(), tile_steps(torch.tensor([1.0, 2.0]), torch.eye(2), 1),
               attention_explorer(torch.eye(2)[None], ["a", "b"], names=["h"], name="e", title="E")]
    for figure in figures:
        page = figure._repr_html_()
        assert page == figure._repr_html_()
        assert not re.search(r"(src|href)=|https?://|import\(|fetch\(|XMLHttpRequest", page), \
            "the figure loads nothing from anywhere"
        assert page.count("<script>") == 2 and "AttnBookFigures.start" in page
        assert figure.summary.split()[:3] == repr(figure).split(": ", 1)[1].split()[:3]
        assert max(map(len, repr(figure).splitlines())) <= 79  # the notebook's 79 columns
