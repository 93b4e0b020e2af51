"""Grading a class: every submitted notebook's solutions run in a sandbox, judged here (course tooling;
run by `python -m attention_book.course grade`).

Nothing a submission runs decides its grade. The exercises of a notebook come from the check registry
(the chapter number of its file name picks them), not from the notebook; the solution cell of each is
the last code cell that defines the exercise's function; only those cells run, each exercise in a process
of its own inside the notebook's sandbox (`attention_book.course.sandbox`), with the exercise's forbidden
functions switched off, on inputs drawn from the class's secret seed. The child's answers come back as
JSON values and the check compares them with the reference in this process. Whatever goes wrong with one
notebook (a hang, a crash, a malformed answer, an error of the grader itself) costs that notebook only,
with its path in the log; a symbolic link, or anything that resolves outside the submissions folder, is
refused unread.

What a teacher gets, in the output folder: results.csv (one row per exercise, with the feedback),
scores.csv (one row per notebook), totals.csv (one row per student), lms.csv (one row per student, one
column per exercise, for Canvas's or Gradescope's grade import), feedback/<student>.md (one file per
student, to hand back) and grading.json (the seed and settings: `--seed` with that seed grades the same
inputs again).
"""

import csv
import json
import os
import re
import secrets
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from .checks import CASES, CHECKS, Result, Stopped, StudentRaised, evaluate
from .sandbox import (MEMORY_MB, ExerciseEnded, Sandbox, SandboxEnded, SubmissionError, become_subreaper,
                      describe_isolation, kill_children)

CHAPTER = re.compile(r"^0*(\d+)_")
RESULT_FIELDS = ["student", "notebook", "exercise", "passed", "message"]
SCORE_FIELDS = ["student", "notebook", "passed", "total"]
TOTAL_FIELDS = ["student", "passed", "total"]
EXERCISE_SECONDS = 20  # default time limit of one exercise
NOTEBOOK_BYTES = 16 << 20  # a submitted notebook larger than this is refused unread


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
        except ExerciseEnded as error:
            raise Stopped(f"the process grading this exercise stopped: {error}") from None
        except SandboxEnded as error:
            raise Stopped(str(error)) from None


def read_submission(path: Path, root: Path):
    """The notebook at `path`, refusing symbolic links, anything outside `root` and oversized files."""
    relative = path.relative_to(root)
    for i in range(1, len(relative.parts) + 1):
        if (root / Path(*relative.parts[:i])).is_symlink():
            raise PermissionError(f"refused: {Path(*relative.parts[:i])} is a symbolic link; submit the notebook "
                                  "itself")
    if not path.resolve().is_relative_to(root.resolve()):
        raise PermissionError(f"refused: {relative} resolves outside the submissions folder")
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as file:
        data = file.read(NOTEBOOK_BYTES + 1)
    if len(data) > NOTEBOOK_BYTES:
        raise ValueError(f"the notebook is larger than {NOTEBOOK_BYTES >> 20} MB")
    return nbformat.reads(data.decode("utf-8"), as_version=4)


def grade_notebook(path: Path, timeout: float = 60, hidden: tuple[Path, ...] = (), seed: int | None = None,
                   memory_mb: int = MEMORY_MB, exercise_seconds: float = EXERCISE_SECONDS, weak: bool = False,
                   root: Path | None = None) -> list[Result]:
    """Every exercise of one submitted notebook, each run in the notebook's sandbox and judged here."""
    exercises = chapter_exercises(path.name)
    try:
        notebook = read_submission(path, path.parent if root is None else root)
        cells = [c.source for c in notebook.cells if c.cell_type == "code"]
    except PermissionError as error:
        return [Result(name, False, str(error)) for name in exercises]
    except Exception as error:  # noqa: BLE001 - a broken file is that student's problem only
        return [Result(name, False, f"the notebook cannot be read ({type(error).__name__}: {str(error)[:200]})")
                for name in exercises]
    seed = secrets.randbelow(2**31) if seed is None else seed
    deadline = time.monotonic() + timeout
    results, sandbox = [], None
    try:
        for name in exercises:
            entry = CHECKS[name]
            source = solution_source(cells, entry.function)
            if source is None:
                results.append(Result(name, False, f"no code cell defines {entry.function}()"))
                continue
            if sandbox is not None and sandbox.ended:  # a crash costs the exercise that caused it, not the rest
                sandbox.close()
                sandbox = None
            try:
                if sandbox is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SandboxEnded("the grading process of this notebook stopped: time limit reached")
                    sandbox = Sandbox(timeout=left, memory_mb=memory_mb, hidden=hidden, weak=weak)
                sandbox.exercise(source, entry.function, entry.forbidden, seconds=exercise_seconds)
            except SandboxEnded as error:
                results.append(Result(name, False, str(error)))
                continue
            except ExerciseEnded as error:
                results.append(Result(name, False, f"the process grading this exercise stopped: {error}"))
                continue
            except SubmissionError as error:
                results.append(Result(name, False, f"your solution cell raised {error.name}: {error.message}"))
                continue
            results.append(evaluate(name, None, seed=seed, call=_SandboxCall(sandbox)))
            try:
                sandbox.finish()
            except (SandboxEnded, ExerciseEnded):
                pass  # the next exercise gets a fresh sandbox if this one is gone
    finally:
        if sandbox is not None:
            sandbox.close()
    return results


def student_of(relative: Path) -> str:
    """The student a submission belongs to: its first folder, or its file name's stem (nbgrader's
    submitted/<student>/<assignment>/<notebook>.ipynb and one folder per student both work)."""
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def submissions_in(folder: Path) -> list[Path]:
    """Every notebook under `folder`, symbolic links included (they are refused when graded) but not
    followed; Jupyter's checkpoints skipped."""
    found = []
    for parent, folders, files in os.walk(folder, followlinks=False):
        folders[:] = sorted(f for f in folders if f != ".ipynb_checkpoints")
        here = Path(parent)
        found += [here / f for f in files if f.endswith(".ipynb")]
        for link in [here / f for f in folders if (here / f).is_symlink()]:  # its notebooks are refused by name
            found += [link / f for f in os.listdir(link) if f.endswith(".ipynb")] if link.is_dir() else []
    return sorted(found)


def grade_folder(submissions: Path, out: Path, timeout: float = 60, hidden: tuple[Path, ...] = (),
                 memory_mb: int = MEMORY_MB, seed: int | None = None, exercise_seconds: float = EXERCISE_SECONDS,
                 weak: bool = False, jobs: int = 1) -> list[dict]:
    """Grade every notebook under `submissions` and write the grade files (see the module docstring) to
    `out`, rewritten after every notebook once its processes are gone."""
    paths = submissions_in(submissions)
    out.mkdir(parents=True, exist_ok=True)
    hidden = (submissions.resolve(), out.resolve(), *hidden)
    seed = secrets.randbelow(2**31) if seed is None else seed
    if weak:
        jobs = 1  # orphans are killed between notebooks: one notebook at a time
        if not become_subreaper():
            print("weak mode: this system cannot adopt orphaned processes; a process that leaves its session "
                  "may outlive its notebook", file=sys.stderr)
    settings = {"seed": seed, "cases": CASES, "timeout": timeout, "exercise_seconds": exercise_seconds,
                "memory_mb": memory_mb, "weak": weak, "sandbox": describe_isolation(weak),
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "regrade": f"python -m attention_book.course grade {submissions} {out} --seed {seed}"}
    (out / "grading.json").write_text(json.dumps(settings, indent=2) + "\n")
    print(settings["sandbox"], file=sys.stderr)
    print(f"seed {seed} (recorded in {out / 'grading.json'}; --seed {seed} grades the same inputs again)",
          file=sys.stderr)
    rows: dict[Path, list[dict]] = {}
    lock = threading.Lock()
    done = [0]

    def one(path: Path) -> None:
        relative = path.relative_to(submissions)
        student, started = student_of(relative), time.monotonic()
        try:
            results = grade_notebook(path, timeout=timeout, hidden=hidden, seed=seed, memory_mb=memory_mb,
                                     exercise_seconds=exercise_seconds, weak=weak, root=submissions)
        except Exception as error:  # noqa: BLE001 - the grader's own failure costs this notebook only
            print(f"error while grading {path}:\n{traceback.format_exc()}", file=sys.stderr)
            results = [Result(name, False, f"the grader failed on this notebook ({type(error).__name__}); the "
                                           "teacher has the details") for name in chapter_exercises(path.name)]
        if weak:
            kill_children()  # every process the notebook left behind, before anything is written
        with lock:
            rows[path] = [{"student": student, "notebook": str(relative), "exercise": r.exercise, "passed": r.passed,
                           "message": r.message} for r in results]
            write_grades(out, [row for p in sorted(rows) for row in rows[p]])
            done[0] += 1
            passed = sum(r.passed for r in results)
            note = "" if results else "  (no graded exercises: is the file named after its chapter?)"
            print(f"[{done[0]}/{len(paths)}] {student:16} {str(relative):40} {passed}/{len(results)} "
                  f"({time.monotonic() - started:.0f} s){note}", file=sys.stderr)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, paths))
    if weak:
        kill_children()
    every = [row for p in sorted(rows) for row in rows[p]]
    write_grades(out, every)  # last, after every child is gone
    return every


def write_grades(out: Path, rows: list[dict]) -> None:
    """results.csv, scores.csv, totals.csv, lms.csv and feedback/<student>.md from the rows so far."""
    write_table(out / "results.csv", rows, RESULT_FIELDS)
    notebooks: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        notebooks.setdefault((row["student"], row["notebook"]), []).append(row)
    write_table(out / "scores.csv", [{"student": s, "notebook": n, "passed": sum(r["passed"] for r in rs),
                                      "total": len(rs)} for (s, n), rs in notebooks.items()], SCORE_FIELDS)
    students: dict[str, list[dict]] = {}
    for row in rows:
        students.setdefault(row["student"], []).append(row)
    write_table(out / "totals.csv", [{"student": s, "passed": sum(r["passed"] for r in rs), "total": len(rs)}
                                     for s, rs in sorted(students.items())], TOTAL_FIELDS)
    exercises = sorted({row["exercise"] for row in rows}, key=lambda name: list(CHECKS).index(name))
    lms = []
    for student, student_rows in sorted(students.items()):
        marks = {r["exercise"]: int(r["passed"]) for r in student_rows}
        lms.append({"Student": student, "SIS Login ID": student, **{e: marks.get(e, 0) for e in exercises},
                    "Total": sum(marks.values())})
    write_table(out / "lms.csv", lms, ["Student", "SIS Login ID", *exercises, "Total"])
    (out / "feedback").mkdir(exist_ok=True)
    for student, student_rows in students.items():
        lines = [f"# Feedback for {student}", "", f"Total: {sum(r['passed'] for r in student_rows)} of "
                 f"{len(student_rows)} exercises.", ""]
        for (who, notebook), notebook_rows in notebooks.items():
            if who != student:
                continue
            lines += [f"## {notebook}", ""]
            lines += [f"- {'✓' if r['passed'] else '✗'} `{r['exercise']}`: {r['message']}" for r in notebook_rows]
            lines.append("")
        name = re.sub(r"[^\w.-]", "_", student) or "_"
        (out / "feedback" / f"{name}.md").write_text("\n".join(lines))


def write_table(path: Path, rows: list[dict], fields: list[str]) -> None:
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
