"""Exercises and assignments: the grader is not vacuous, student notebooks hide the solutions, grading
a folder of submissions writes the score tables (issue 8)."""

import csv
import re
import shutil

import nbformat
import numpy as np
import pytest
import torch

from attention_book import assignments, grader
from conftest import NOTEBOOKS


def solution_cells(path):
    """(exercise label, solution source, check name, function name) of every graded exercise of a chapter."""
    cells = nbformat.read(path, as_version=4).cells
    found = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and (start := assignments.SOLUTION_START.search(cell.source)):
            solution, check_cell = cells[i + 1].source, cells[i + 3].source
            name, function = re.search(r'check\("([\w.]+)", (\w+)\)', check_cell).groups()
            found.append((start.group(1), solution, name, function))
    return found


GRADED = [(path.name, *item) for path in NOTEBOOKS for item in solution_cells(path)]


def define(source: str, function: str):
    namespace = {}
    exec(compile(source, "<solution>", "exec"), namespace)  # noqa: S102 - the book's own cells
    return namespace[function]


def test_every_chapter_has_three_exercises_and_a_graded_one():
    for path in NOTEBOOKS:
        sources = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
        assert sum("{exercise}" in s for s in sources) >= 3, path.name
        assert len(solution_cells(path)) >= 1, path.name
    assert {name for _, _, _, name, _ in GRADED} == set(grader.CHECKS), "every check is used by a chapter"


@pytest.mark.parametrize(("chapter", "label", "solution", "name", "function"), GRADED, ids=lambda v: str(v)[:30])
def test_reference_solution_passes(chapter, label, solution, name, function, capsys):
    result = grader.evaluate(name, define(solution, function))
    assert result.passed, result.message
    grader.check(name, define(solution, function))
    assert capsys.readouterr().out == f"✓ {name}: passed on {grader.CASES} random cases\n"


@pytest.mark.parametrize(("chapter", "label", "solution", "name", "function"), GRADED, ids=lambda v: str(v)[:30])
def test_student_stub_fails_with_its_hint(chapter, label, solution, name, function):
    stub = assignments.stub(solution)
    assert "NotImplementedError" in stub
    hint = assignments.HINT.search(solution).group(1)
    result = grader.evaluate(name, define(stub, function))
    assert not result.passed
    assert result.message == f"not implemented yet. Hint: {hint}"


# A deliberately wrong solution for every check, and the feedback it must get.
WRONG = {
    "ch1.vocab": (lambda s: {w: i + 1 for i, w in enumerate(sorted(set(s.replace(",", "").split())))},
                  r"got index 1 but should get 0: indices follow the sorted order"),
    "ch2.attention": (lambda q, k, v: torch.softmax(q @ k.T, dim=-1) @ v, r"the scores are not scaled"),
    "ch3.split_heads": (lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
                        r"head 1 of position 0 should hold columns .*reshape to \(B, T, H, E/H\) first"),
    "ch4.padding_mask": (lambda lengths, S: torch.arange(S) <= lengths[:, None],
                         r"sequence \d+ has length \d+: your mask lets queries see padded position \d+"),
    "ch5.causal_mask": (lambda T: torch.ones(T, T, dtype=torch.bool).tril(1),
                        r"your causal mask lets position 0 see position 1, which comes after it"),
    "ch6.keras_projection": (lambda x, kernel, bias: np.einsum("bte,ehk->bhtk", x, kernel),
                             r"the bias is missing"),
    "ch7.cache_size": (lambda layers, heads, head_dim, length, b: layers * heads * head_dim * length * b,
                       r"half the expected size: every position stores a key AND a value"),
    "ch8.running_max_and_sum": (lambda x, block: (float(x.max()), sum(float(torch.exp(x[i:i + block] - x[i:i + block].max()).sum())
                                                                      for i in range(0, len(x), block))),
                                r"the running sum ends at .* multiply the sum so far by exp\(m − m'\)"),
    "ch9.rope": (lambda x: x.flip(-1), r"position 0 should not be turned"),
    "ch9.previous_token_score": (lambda w: w.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1) / w.shape[-1],
                                 r"you divide by all \d+ queries; query 0 has no previous position"),
    "ch9.sinusoidal": (lambda length, width: torch.stack(
        (torch.cos(torch.arange(length)[:, None] / 10000 ** (torch.arange(0, width, 2) / width)),
         torch.sin(torch.arange(length)[:, None] / 10000 ** (torch.arange(0, width, 2) / width))), -1
    ).reshape(length, width), r"sin and cos are swapped"),
}


@pytest.mark.parametrize("name", sorted(grader.CHECKS))
def test_wrong_solution_gets_specific_feedback(name):
    wrong, message = WRONG[name]
    result = grader.evaluate(name, wrong)
    assert not result.passed
    assert re.search(message, result.message), result.message


def test_causal_mask_feedback_names_the_positions():
    def future_leak(T):
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        if T > 4:
            mask[2, 4] = True
        return mask

    assert grader.evaluate("ch5.causal_mask", future_leak).message == \
        "your causal mask lets position 2 see position 4, which comes after it"
    assert "stops position 0 from seeing position 0 (itself)" in \
        grader.evaluate("ch5.causal_mask", lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1)).message


def test_a_crashing_solution_is_feedback_not_a_crash():
    result = grader.evaluate("ch4.padding_mask", lambda lengths, S: lengths.foo)
    assert not result.passed and result.message.startswith("your function raised AttributeError")


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    return {path.name: path for path in assignments.make_student_notebooks(NOTEBOOKS[0].parent, out)}


def test_student_notebooks_keep_everything_but_solutions(students):
    assert sorted(students) == sorted(p.name for p in NOTEBOOKS)
    for path in NOTEBOOKS:
        teacher = nbformat.read(path, as_version=4)
        student = nbformat.read(students[path.name], as_version=4)
        text = "\n".join(c.source for c in student.cells)
        assert "{solution" not in text, f"{path.name}: a solution leaked"
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in student.cells if c.cell_type == "code")
        for _, solution, _, _ in solution_cells(path):
            body = solution.split('"""')[-1]  # the code after the docstring
            assert body.strip() not in text
        kept = [c.source for c in teacher.cells if "{solution" not in c.source and not c.source.startswith("# Hint:")]
        assert all(source in text for source in kept), f"{path.name}: a cell other than a solution was changed"


def test_stub_keeps_signature_and_docstring():
    solution = '# Hint: think.\nimport torch\n\n\ndef f(a, b=2):\n    """Doc."""\n    return a + b\n'
    assert assignments.stub(solution) == 'def f(a, b=2):\n    """Doc."""\n    raise NotImplementedError(\'think.\')'
    with pytest.raises(ValueError, match="must start with a '# Hint: ...' line"):
        assignments.stub("def f():\n    return 1\n")


def test_grading_a_folder_writes_the_tables(students, tmp_path):
    chapter = "05_causal_attention.ipynb"
    submissions = tmp_path / "submissions"
    (submissions / "ada").mkdir(parents=True)
    (submissions / "bob").mkdir()
    shutil.copy(next(p for p in NOTEBOOKS if p.name == chapter), submissions / "ada" / chapter)  # the solution
    shutil.copy(students[chapter], submissions / "bob" / chapter)  # the untouched stub
    assignments.main(["grade", str(submissions), str(tmp_path / "grades")])
    with open(tmp_path / "grades" / "results.csv") as file:
        results = {row["student"]: row for row in csv.DictReader(file)}
    assert results["ada"]["exercise"] == "ch5.causal_mask" and results["ada"]["passed"] == "True"
    assert results["bob"]["passed"] == "False" and results["bob"]["message"].startswith("not implemented yet. Hint:")
    with open(tmp_path / "grades" / "scores.csv") as file:
        scores = {row["student"]: (row["passed"], row["total"]) for row in csv.DictReader(file)}
    assert scores == {"ada": ("1", "1"), "bob": ("0", "1")}
