"""The notebook's instant `check()` applies each exercise's forbidden list as the grader does (issue 47):
one home for the switching off (`attention_book.course.forbid`), everything put back after the check."""

import sys

import pytest
import torch
import torch.nn.functional as F

from attention_book.course import check, feedback, forbid
from attention_book.course.checks import CHECKS

CHEAT = "import torch\n\n\ndef stable_softmax_by_hand(s):\n    return torch.softmax(s, dim=-1)\n"
ROUTES = "import torch\n\n\ndef stable_softmax_by_hand(s):\n    return torch.ops.aten._softmax(s, -1, False)\n"
METHOD = "def stable_softmax_by_hand(s):\n    return s.softmax(-1)\n"
FUNCTIONAL = ("from torch.nn.functional import softmax as hidden\n\n\n"
              "def stable_softmax_by_hand(s):\n    return hidden(s, dim=-1)\n")
HONEST = ("import torch\n\n\ndef stable_softmax_by_hand(s):\n    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)\n"
          "    return e / e.sum(dim=-1, keepdim=True)\n")
GRADER_SAYS = "raised ForbiddenCall: this exercise asks you to write softmax yourself"


def _defined(source: str):
    """The function a solution cell defines, run as a notebook's kernel runs it (in `__main__`'s globals
    here: a namespace of its own)."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - the test's own cells
    return namespace["stable_softmax_by_hand"]


def _softmax_works() -> None:
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    expected = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
    for route in (torch.softmax(x, -1), F.softmax(x, dim=-1), x.softmax(-1), torch.ops.aten._softmax(x, -1, False)):
        torch.testing.assert_close(route, expected)
    assert "softmax" not in vars(torch.Tensor)  # inherited again, no shadow left behind


@pytest.mark.parametrize("source", [CHEAT, ROUTES, METHOD, FUNCTIONAL], ids=["torch", "aten", "method", "alias"])
def test_check_refuses_a_forbidden_call_with_the_graders_message(source, capsys):
    check("ch1.stable_softmax", _defined(source))
    printed = capsys.readouterr().out
    assert printed.startswith("✗ ch1.stable_softmax") and GRADER_SAYS in printed, printed
    _softmax_works()


def test_check_passes_an_honest_solution_and_everything_works_after(capsys):
    check("ch1.stable_softmax", _defined(HONEST))
    assert capsys.readouterr().out.startswith("✓ ch1.stable_softmax")
    _softmax_works()


def test_the_same_answer_passes_where_nothing_is_forbidden(monkeypatch):
    """Not vacuous: the cheat is a right answer; only the forbidden list makes it fail."""
    import dataclasses

    from attention_book.course import checks

    entry = CHECKS["ch1.stable_softmax"]
    monkeypatch.setitem(checks.CHECKS, "ch1.stable_softmax", dataclasses.replace(entry, forbidden=()))
    assert checks.evaluate("ch1.stable_softmax", _defined(CHEAT)).passed


def test_the_students_installation_replays_with_the_same_list(capsys):
    """Without the grader's checks (what students install) the replay reads the forbidden lists stored
    beside the cases: the same message, the honest answer still passes."""
    assert not feedback.replay("ch1.stable_softmax", _defined(CHEAT)).passed
    assert GRADER_SAYS.removeprefix("raised ") in feedback.replay("ch1.stable_softmax", _defined(CHEAT)).message
    assert feedback.replay("ch1.stable_softmax", _defined(HONEST)).passed
    _softmax_works()


def test_stored_forbidden_lists_are_the_checks():
    """data/feedback/forbidden.json (what the students' installation applies) names what the checks
    forbid, for every exercise (`python -m attention_book.course feedback chapters/` rewrites it)."""
    assert feedback.stored_forbidden() == {name: list(entry.forbidden) for name, entry in CHECKS.items()}


def test_a_package_function_and_its_aliases_are_put_back():
    """A package function forbidden (ch3.mqa forbids attention_book.multihead.grouped_attention): off in
    its module and in an alias inside the context, the very same object after."""
    import attention_book.multihead as multihead

    original = multihead.grouped_attention
    namespace = {"alias": original}
    with forbid.Forbidden(["attention_book.multihead.grouped_attention"], namespaces=[namespace]):
        for route in (multihead.grouped_attention, namespace["alias"]):
            with pytest.raises(forbid.ForbiddenCall, match="write grouped_attention yourself"):
                route()
    assert multihead.grouped_attention is original and namespace["alias"] is original


def test_no_process_starts_inside_and_everything_may_after():
    """The walls are on only while the student's function runs (the audit hook stays, switched off)."""
    import subprocess

    with forbid.Forbidden(["torch.softmax"]):
        with pytest.raises(PermissionError, match="no process may start"):
            subprocess.run([sys.executable, "-c", "pass"], check=False)
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0
