"""Grading a class: every submitted notebook's solutions run in a sandbox, judged here (course tooling;
run by `python -m attention_book.assignments grade`).

Nothing a submission runs decides its grade. The exercises of a notebook come from the check registry
(the chapter number of its file name picks them), not from the notebook; the solution cell of each is
the last code cell that defines the exercise's function; only those cells run, in a child process
(`attention_book.course.sandbox`) that the grader feeds inputs drawn from a secret seed. The child's
answers come back as JSON values and the check compares them with the reference in this process, where
nothing of the submission runs. A notebook whose child hangs, exhausts memory, exits or is killed gets
no marks for that exercise, with the reason; the notebook's next exercise gets a fresh child (within the
notebook's time limit), and the next notebook is graded all the same.
"""

import csv
import re
import secrets
import sys
import time
from pathlib import Path

import nbformat

from .checks import CHECKS, Result, Stopped, StudentRaised, evaluate
from .sandbox import MEMORY_MB, Sandbox, SandboxEnded, SubmissionError, describe_isolation

CHAPTER = re.compile(r"^0*(\d+)_")
RESULT_FIELDS = ["student", "notebook", "exercise", "passed", "message"]
SCORE_FIELDS = ["student", "notebook", "passed", "total"]


def chapter_exercises(notebook_name: str) -> list[str]:
    """The registered exercises ("chN.name") of the chapter whose number starts `notebook_name`."""
    number = CHAPTER.match(notebook_name)
    return [] if number is None else [name for name in CHECKS if name.split(".")[0] == f"ch{int(number.group(1))}"]


def solution_source(cells: list[str], function: str) -> str | None:
    """The last code cell that defines `function` at its top level (the student's solution cell)."""
    definition = re.compile(rf"^(async\s+)?def\s+{re.escape(function)}\s*\(", re.M)
    return next((source for source in reversed(cells) if definition.search(source)), None)


class _SandboxCall:
    """The student's function as the checks see it: each call runs in the sandbox."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def __call__(self, *args):
        try:
            return self.sandbox.call(*args)
        except SubmissionError as error:
            raise StudentRaised(error.name, error.message) from None
        except SandboxEnded as error:
            raise Stopped(str(error)) from None


def grade_notebook(path: Path, timeout: float = 60, hidden: tuple[Path, ...] = (), seed: int | None = None,
                   memory_mb: int = MEMORY_MB) -> list[Result]:
    """Every exercise of one submitted notebook, each run in the notebook's sandbox and judged here."""
    exercises = chapter_exercises(path.name)
    try:
        cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    except Exception as error:  # noqa: BLE001 - a broken file is that student's problem only
        return [Result(name, False, f"the notebook cannot be read ({type(error).__name__}: {error})") for name in exercises]
    seed = secrets.randbelow(2**31) if seed is None else seed
    deadline = time.monotonic() + timeout
    results, sandbox = [], None
    try:
        for name in exercises:
            function = CHECKS[name].function
            source = solution_source(cells, function)
            if source is None:
                results.append(Result(name, False, f"no code cell defines {function}()"))
                continue
            if sandbox is not None and sandbox.ended:  # a crash costs the exercise that caused it, not the rest
                sandbox.close()
                sandbox = None
            try:
                if sandbox is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SandboxEnded("the grading process of this notebook stopped: time limit reached")
                    sandbox = Sandbox(timeout=left, memory_mb=memory_mb, hidden=hidden)
                sandbox.define(source, function)
            except SandboxEnded as error:
                results.append(Result(name, False, str(error)))
                continue
            except SubmissionError as error:
                results.append(Result(name, False, f"your solution cell raised {error.name}: {error.message}"))
                continue
            results.append(evaluate(name, None, seed=seed, call=_SandboxCall(sandbox)))
    finally:
        if sandbox is not None:
            sandbox.close()
    return results


def student_of(relative: Path) -> str:
    """The student a submission belongs to: its first folder, or its file name's stem."""
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def grade_folder(submissions: Path, out: Path, timeout: float = 60, hidden: tuple[Path, ...] = (),
                 memory_mb: int = MEMORY_MB) -> list[dict]:
    """Grade every notebook under `submissions`; write out/results.csv (one row per exercise, with the
    feedback) and out/scores.csv (one row per notebook), rewritten after every notebook."""
    paths = sorted(submissions.rglob("*.ipynb"))
    out.mkdir(parents=True, exist_ok=True)
    hidden = (submissions.resolve(), out.resolve(), *hidden)
    print(describe_isolation(), file=sys.stderr)
    rows, scores = [], []
    for i, path in enumerate(paths, 1):
        relative = path.relative_to(submissions)
        student, started = student_of(relative), time.monotonic()
        results = grade_notebook(path, timeout=timeout, hidden=hidden, memory_mb=memory_mb)
        rows += [{"student": student, "notebook": str(relative), "exercise": r.exercise, "passed": r.passed,
                  "message": r.message} for r in results]
        passed = sum(r.passed for r in results)
        scores.append({"student": student, "notebook": str(relative), "passed": passed, "total": len(results)})
        write_table(out / "results.csv", rows, RESULT_FIELDS)
        write_table(out / "scores.csv", scores, SCORE_FIELDS)
        note = "" if results else "  (no graded exercises: is the file named after its chapter?)"
        print(f"[{i}/{len(paths)}] {student:16} {str(relative):40} {passed}/{len(results)} "
              f"({time.monotonic() - started:.0f} s){note}", file=sys.stderr)
    return rows


def write_table(path: Path, rows: list[dict], fields: list[str]) -> None:
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
