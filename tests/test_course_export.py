"""`make course` (issue 20): nbgrader assignments generated from the chapters, run through nbgrader's own
commands. `nbgrader generate_assignment` stubs every solution; `nbgrader autograde` gives the reference
solutions full marks and the stubs none, for every chapter with graded exercises."""

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attention_book.course import export
from conftest import NOTEBOOKS

pytest.importorskip("nbgrader")


REPOSITORY = Path(__file__).resolve().parents[1]


def nbgrader(course: Path, *args: str) -> None:
    """nbgrader's command as the README has teachers run it, `make nbgrader ARGS=...`, from a shell whose PATH
    lacks the virtual environment (nbgrader then needs the Makefile to find `alembic`)."""
    venv = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv)
    env = {**os.environ, "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    quoted = " ".join(f"'{a}'" for a in args)
    done = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPOSITORY), "nbgrader", f"COURSE={course}",
                           f"ARGS={quoted}"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The generated course, released, submitted by `reference` (the sources) and `stub` (the release),
    autograded; returns (course folder, {(student, assignment): (score, max_score)})."""
    course = tmp_path_factory.mktemp("course")
    written = export.make_course(NOTEBOOKS[0].parent, course)
    nbgrader(course, "generate_assignment", "*", "--force")
    for source in written:
        assignment = source.parent.name
        for student, notebook in (("reference", source), ("stub", course / "release" / assignment / source.name)):
            (course / "submitted" / student / assignment).mkdir(parents=True)
            shutil.copy(notebook, course / "submitted" / student / assignment / source.name)
    nbgrader(course, "autograde", "*", "--create", "--force")
    nbgrader(course, "export", "--to", "grades.csv")
    with open(course / "grades.csv") as file:
        grades = {(row["student_id"], row["assignment"]): (float(row["score"]), float(row["max_score"]))
                  for row in csv.DictReader(file)}
    return course, grades


def test_every_chapter_with_graded_exercises_is_an_assignment(course):
    folder, _ = course
    expected = {p.stem for p in NOTEBOOKS if export.graded_exercises(nbformat.read(p, as_version=4))}
    assert {p.name for p in (folder / "source").iterdir()} == expected
    assert expected >= {"01_embedding", "05_causal_attention", "09_efficient_attention"}


def test_the_release_has_no_solutions(course):
    folder, _ = course
    for path in (folder / "release").rglob("*.ipynb"):
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text and "seed=" not in text, path
        assert text.count("raise NotImplementedError()") == text.count("\n## "), path


@pytest.mark.parametrize("chapter", [p.stem for p in NOTEBOOKS])
def test_autograde_gives_the_reference_full_marks_and_the_stub_none(course, chapter):
    _, grades = course
    exercises = len(export.graded_exercises(nbformat.read(NOTEBOOKS[0].parent / f"{chapter}.ipynb", as_version=4)))
    if exercises == 0:
        assert ("reference", chapter) not in grades
        return
    assert grades[("reference", chapter)] == (exercises, exercises)
    assert grades[("stub", chapter)] == (0, exercises)


def test_solution_markers_wrap_each_function_body_after_its_docstring():
    source = '# Hint: add.\nimport torch\n\n\ndef f(a, b):\n    """Sum."""\n    c = a + b\n    return c\n\n\ndef g():\n    return 1\n'
    assert export.mark_solution(source) == (
        '# Hint: add.\nimport torch\n\n\ndef f(a, b):\n    """Sum."""\n    ### BEGIN SOLUTION\n    c = a + b\n'
        '    return c\n    ### END SOLUTION\n\n\ndef g():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION')


def test_an_exercise_without_its_check_is_an_error():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("**Exercise 5.1 — T**\n\nDo it.", metadata={"exercise": {"label": "ch5-x"}}),
        nbformat.v4.new_code_cell("# Hint: h\ndef f():\n    return 1", metadata={"solution": {"label": "ch5-x"}})])
    with pytest.raises(ValueError, match="exercise 'ch5-x' needs an exercise cell .* and a check"):
        export.graded_exercises(notebook)
