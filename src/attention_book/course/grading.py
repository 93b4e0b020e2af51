"""Grading a class: every submitted notebook's solutions run in a sandbox, judged here (course tooling;
run by `python -m attention_book.course grade`).

Nothing a submission runs decides its grade. The exercises of a notebook come from the check registry
(the chapter number of its file name picks them), not from the notebook; the solution cell of each is
the last code cell that defines the exercise's function; only those cells run, each exercise in a process
of its own inside the notebook's sandbox (`attention_book.course.sandbox`), with the exercise's forbidden
functions switched off, on inputs drawn from the class's secret seed. A student's notebooks are graded in
turn in one sandbox, renewed between them (every process the last one left killed, its scratch folder
and /dev/shm emptied, its time restarted; a fresh one where that fails): starting Python with torch is
most of a notebook's grading time. No sandbox ever serves two students. The child's answers come back as
JSON values and the check compares them with the reference in this process. Whatever goes wrong with one
notebook (a hang, a crash, a malformed answer, an error of the grader itself) costs that notebook only,
with its path in the log; a symbolic link, anything that resolves outside the submissions folder, or
anything but a regular file (a named pipe) is refused unread.

Who handed a notebook in (`identify`): the first folder (one folder per student, nbgrader's submitted/),
the name after the chapter number (`05_ada.ipynb`), or the name in Canvas's bulk download
(`lastfirst_12345_67890_05_causal_attention.ipynb`, also with `_LATE_`; 12345 is Canvas's user ID). One
notebook per student and chapter is graded: the newest (by modification time); the others are named in
the log and in that student's feedback, and never graded.

What a teacher gets, in the output folder: results.csv (one row per exercise, with the feedback),
scores.csv (one row per notebook), totals.csv (one row per student), canvas.csv (Canvas's gradebook
import: one assignment per chapter), gradescope_chN.csv (Gradescope's roster columns with the score, one
per chapter), gradescope/chN/<student>/results.json (one per notebook, in the format of Gradescope's
autograder output: `export.gradescope_results`), feedback/<student>.md (one file per student, to hand
back) and grading.json (the seed and settings:
`--seed` with that seed grades the same inputs again). Every file is written whole and then moved in
place; a cell that a spreadsheet would read as a formula gets a leading apostrophe.
"""

import ast
import csv
import hashlib
import json
import os
import re
import secrets
import stat
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from .checks import CASES, CHECKS, Result, Stopped, StudentRaised, evaluate
from .export import gradescope_results
from .spy import plain, spied, watching
from .sandbox import (MEMORY_MB, ExerciseEnded, Sandbox, SandboxEnded, SubmissionError, become_subreaper,
                      describe_isolation, kill_children)

CHAPTER = re.compile(r"^0*(\d+)_")
FLAT = re.compile(r"^0*(\d+)_(?P<student>.+)$")  # 05_ada.ipynb
CANVAS = re.compile(r"^(?P<student>[^_]+)_(?:LATE_)?(?P<user>\d+)_(?P<submission>\d+)_(?P<file>.+)$")
RESULT_FIELDS = ["student", "notebook", "exercise", "passed", "message"]
SCORE_FIELDS = ["student", "notebook", "passed", "total"]
TOTAL_FIELDS = ["student", "passed", "total"]
EXERCISE_SECONDS = 20  # default time limit of one exercise
NOTEBOOK_BYTES = 16 << 20  # a submitted notebook larger than this is refused unread
NAME_CHARACTERS = 80  # a student's or notebook's name in the grade files is cut to this, with a hash
MAX_NOTEBOOKS = 2000  # notebooks one run grades at most (--max-notebooks)
RUN_SECONDS = 4 * 3600  # the whole run's deadline (--deadline)
RUNS_AS_PYTHON = {"time", "capture", "prun"}  # cell magics whose body Jupyter runs as the cell's Python
FORMULA = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as the start of a formula
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")  # a login that is an e-mail address (Gradescope's Email)


def chapter_exercises(notebook_name: str) -> list[str]:
    """The registered exercises ("chN.name") of the chapter whose number starts `notebook_name` (a Canvas
    download's name: its original file name)."""
    number = chapter_number(notebook_name)
    return [] if number is None else [name for name in CHECKS if name.split(".")[0] == f"ch{number}"]


def chapter_number(notebook_name: str) -> int | None:
    """The chapter number that starts `notebook_name`, or the original file name in a Canvas download's."""
    canvas = CANVAS.match(notebook_name)
    number = CHAPTER.match(canvas["file"] if canvas and CHAPTER.match(canvas["file"]) else notebook_name)
    return None if number is None else int(number.group(1))


def as_python(cell: str) -> str | None:
    """A code cell's source as Jupyter runs it: line magics and `!` commands become calls of get_ipython()
    (IPython's own translation; the sandbox's get_ipython does nothing), a `%%time` or `%%capture` cell is
    its body; None for a cell that is not Python (another cell magic)."""
    from IPython.core.inputtransformer2 import TransformerManager

    first, _, body = cell.lstrip().partition("\n")
    if first.startswith("%%"):
        if first[2:].split(" ")[0] not in RUNS_AS_PYTHON:
            return None
        cell = body
    try:
        return TransformerManager().transform_cell(cell)
    except Exception:  # noqa: BLE001 - IPython cannot read it: neither can Jupyter
        return None


def solution_source(cells: list[str], function: str) -> str | None:
    """The last code cell that defines `function` at its top level (the student's solution cell), as
    Python: a definition inside a string, or in a cell that does not parse, does not count."""
    for cell in reversed(cells):
        source = as_python(cell)
        if source is None or function not in source:
            continue
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        if any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function
               for node in tree.body):
            return source
    return None


class _SandboxCall:
    """The student's function as the checks see it: each call runs in the sandbox."""

    def __init__(self, sandbox: Sandbox, writes: tuple[int, ...] = ()):
        self.sandbox, self.writes = sandbox, writes

    @property
    def largest(self) -> int:
        """The number of elements of the largest tensor the last call made (the worker measures it)."""
        return self.sandbox.largest

    def __call__(self, *args):
        import torch

        spies = {i: sorted(type(a).spy_flagged) for i, a in enumerate(args) if spied(a)}
        watchers = watching(args)  # the check's watchers around this call, watching its arguments
        watch = {name: positions for name, (_, positions) in watchers.items()}
        try:
            with torch._C.DisableTorchFunction():  # the check's watchers see the student's calls, not the grader's
                value = self.sandbox.call(*[plain(a) for a in args], writes=self.writes, spies=spies, watch=watch)
            for index, entries in self.sandbox.spied.items():  # what the worker's spies saw, into the check's logs
                if index in spies:
                    type(args[index]).spy_log.extend(entries)
            for name, report in self.sandbox.watched.items():  # what the worker's watchers saw, into the check's
                try:
                    watchers[name][0].absorb(report)
                except ValueError as error:
                    raise Stopped(f"the grading process of this notebook sent a malformed report ({error}); "
                                  "the exercise cannot be graded") from None
            return value
        except SubmissionError as error:
            raise StudentRaised(error.name, error.message) from None
        except ExerciseEnded as error:
            raise Stopped(f"the process grading this exercise stopped: {error}") from None
        except SandboxEnded as error:
            raise Stopped(str(error)) from None


def read_submission(path: Path, root: Path):
    """The notebook at `path`, refusing symbolic links, anything outside `root`, anything but a regular
    file (opened without blocking, so a named pipe cannot hang the run) and oversized files."""
    relative = path.relative_to(root)
    for i in range(1, len(relative.parts) + 1):
        if (root / Path(*relative.parts[:i])).is_symlink():
            raise PermissionError(f"refused: {shown(Path(*relative.parts[:i]))} is a symbolic link; submit the "
                                  "notebook itself")
    if not path.resolve().is_relative_to(root.resolve()):
        raise PermissionError(f"refused: {shown(relative)} resolves outside the submissions folder")
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise PermissionError(f"refused: {shown(relative)} is not a regular file (a named pipe or a device); "
                                  "submit the notebook itself")
        data = file.read(NOTEBOOK_BYTES + 1)
    if len(data) > NOTEBOOK_BYTES:
        raise ValueError(f"the notebook is larger than {NOTEBOOK_BYTES >> 20} MB")
    return nbformat.reads(data.decode("utf-8"), as_version=4)


def grade_notebook(path: Path, timeout: float = 60, hidden: tuple[Path, ...] = (), seed: int | None = None,
                   memory_mb: int = MEMORY_MB, exercise_seconds: float = EXERCISE_SECONDS, weak: bool = False,
                   root: Path | None = None, reuse: dict | None = None) -> list[Result]:
    """Every exercise of one submitted notebook, each run in the notebook's sandbox and judged here.
    `reuse`, a dict the caller keeps across ONE student's notebooks (never another's): the sandbox the
    previous notebook left there is renewed for this one (`Sandbox.renew`: its processes killed, its
    scratch folder emptied, its time restarted) instead of a fresh one started (Python importing torch,
    most of a notebook's grading time), and this notebook's is left there instead of closed."""
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
                    kept = None if reuse is None else reuse.pop("sandbox", None)
                    if kept is not None and kept.renew(left):
                        sandbox = kept
                    else:
                        sandbox = Sandbox(timeout=left, memory_mb=memory_mb, hidden=hidden, weak=weak)
                sandbox.preload(entry.imports)
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
            results.append(evaluate(name, None, seed=seed, call=_SandboxCall(sandbox, entry.writes)))
            try:
                sandbox.finish()
            except (SandboxEnded, ExerciseEnded):
                pass  # the next exercise gets a fresh sandbox if this one is gone
    except BaseException:
        if sandbox is not None:
            sandbox.close()
        raise
    if sandbox is not None and (reuse is None or sandbox.ended or "sandbox" in reuse):
        sandbox.close()
    elif sandbox is not None:
        reuse["sandbox"] = sandbox
    return results


def shown(text) -> str:
    """`text` safe to print to a terminal or a log: control characters (escape sequences) and bytes that
    are not UTF-8 written as escapes."""
    text = as_bytes(text).decode("utf-8", "backslashreplace") if isinstance(text, (str, os.PathLike)) else str(text)
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in text)


def as_bytes(text) -> bytes:
    """The bytes of a name as the file system gave them (undecodable bytes included)."""
    try:
        return os.fsencode(text)
    except UnicodeError:
        return os.fspath(text).encode("utf-8", "surrogatepass")


def clean_name(name: str) -> str:
    """A student's or notebook's name as the grade files hold it: valid UTF-8 and printable (anything else
    escaped) and at most NAME_CHARACTERS long; when it had to change, a hash of the original keeps two
    names apart."""
    text = shown(name)
    if text == name and len(text) <= NAME_CHARACTERS:
        return text
    digest = hashlib.sha256(as_bytes(name)).hexdigest()[:8]
    return f"{text[:NAME_CHARACTERS - 9]}~{digest}"


def identify(relative: Path) -> tuple[str, str, str]:
    """(student, the notebook's chapter file name, Canvas's user ID or "") of a submission at `relative`:
    Canvas's bulk-download name, a student's folder (nbgrader's submitted/<student>/<assignment>/ too), or a
    flat file named after the chapter's number and the student (05_ada.ipynb)."""
    if len(relative.parts) > 1:  # a student names the files in their own folder: never read as another's
        return clean_name(relative.parts[0]), relative.name, ""
    canvas = CANVAS.match(relative.name)
    if canvas and CHAPTER.match(canvas["file"]):
        return clean_name(canvas["student"]), canvas["file"], canvas["user"]
    flat = FLAT.match(relative.stem)
    return clean_name(flat["student"] if flat else relative.stem), relative.name, ""


def student_of(relative: Path) -> str:
    """The student a submission at `relative` belongs to (`identify`)."""
    return identify(relative)[0]


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


def one_per_chapter(paths: list[Path], submissions: Path) -> tuple[list[Path], dict[str, list[str]]]:
    """The notebooks to grade: for each student and chapter the newest (modification time, then name);
    and, by student, what was handed in besides and is not graded."""
    newest: dict[tuple[str, int], Path] = {}
    skipped: dict[str, list[str]] = {}

    def age(path: Path):
        try:
            return path.lstat().st_mtime, str(path)
        except OSError:
            return 0.0, str(path)

    graded = []
    for path in paths:
        student = identify(path.relative_to(submissions))[0]
        number = chapter_number(path.name)
        if number is None:
            graded.append(path)  # no exercises: listed with a note, nothing runs
            continue
        key = (student, number)
        if key in newest:
            older, kept = sorted([newest[key], path], key=age)
            skipped.setdefault(student, []).append(clean_name(str(older.relative_to(submissions))))
            newest[key] = kept
        else:
            newest[key] = path
    return sorted(graded + list(newest.values())), skipped


def by_student(paths: list[Path], submissions: Path, jobs: int = 1) -> list[list[Path]]:
    """`paths` in groups that each hold notebooks of one student only (each group shares a sandbox), in
    order; a student's notebooks split into more groups where the class has fewer students than `jobs`."""
    groups: dict[str, list[Path]] = {}
    for path in paths:
        groups.setdefault(identify(path.relative_to(submissions))[0], []).append(path)
    split = max(1, -(-max(1, jobs) // max(1, len(groups))))  # groups per student: ceil(jobs / students)
    return [group[i::split] for group in groups.values() for i in range(split) if group[i::split]]


def grade_folder(submissions: Path, out: Path, timeout: float = 60, hidden: tuple[Path, ...] = (),
                 memory_mb: int = MEMORY_MB, seed: int | None = None, exercise_seconds: float = EXERCISE_SECONDS,
                 weak: bool = False, jobs: int = 1, deadline: float = RUN_SECONDS,
                 max_notebooks: int = MAX_NOTEBOOKS) -> list[dict]:
    """Grade every notebook under `submissions` (one per student and chapter) and write the grade files
    (see the module docstring) to `out`, rewritten after every notebook once its processes are gone.
    `deadline` bounds the whole run (seconds): notebooks not started by then score nothing, with the reason."""
    found = submissions_in(submissions)
    paths, skipped = one_per_chapter(found, submissions)
    if len(paths) > max_notebooks:
        raise ValueError(f"{len(paths)} notebooks to grade, more than max_notebooks={max_notebooks} (--max-notebooks): "
                         "raise it if the class is that large")
    out.mkdir(parents=True, exist_ok=True)
    hidden = (submissions.resolve(), out.resolve(), *hidden)
    seed = secrets.randbelow(2**31) if seed is None else seed
    if weak:
        jobs = 1  # orphans are killed between notebooks: one notebook at a time
        if not become_subreaper():
            print("weak mode: this system cannot adopt orphaned processes; a process that leaves its session "
                  "may outlive its notebook", file=sys.stderr)
    settings = {"seed": seed, "cases": CASES, "timeout": timeout, "exercise_seconds": exercise_seconds,
                "memory_mb": memory_mb, "weak": weak, "sandbox": describe_isolation(weak), "deadline": deadline,
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "not_graded": {student: names for student, names in sorted(skipped.items())},
                "regrade": f"python -m attention_book.course grade {shown(submissions)} {shown(out)} --seed {seed}"}
    write_atomically(out / "grading.json", json.dumps(settings, indent=2) + "\n")
    print(settings["sandbox"], file=sys.stderr)
    print(f"seed {seed} (recorded in {shown(out / 'grading.json')}; --seed {seed} grades the same inputs again)",
          file=sys.stderr)
    for student, names in sorted(skipped.items()):
        print(f"warning: {shown(student)} handed in more than one notebook of a chapter; graded the newest, not "
              f"{', '.join(shown(n) for n in names)}", file=sys.stderr)
    rows: dict[Path, list[dict]] = {}
    canvas_ids: dict[str, str] = {}
    lock = threading.Lock()
    done, started_run = [0], time.monotonic()

    def one(path: Path, reuse: dict) -> None:
        relative = path.relative_to(submissions)
        student, _, canvas_id = identify(relative)
        notebook, started = clean_name(str(relative)), time.monotonic()
        left = started_run + deadline - started
        with lock:
            if notebook != str(relative):
                print(f"warning: the grade files name {shown(relative)} {notebook} (not plain UTF-8, control "
                      f"characters or over {NAME_CHARACTERS} characters)", file=sys.stderr)
            print(f"grading {shown(student)}: {shown(notebook)}", file=sys.stderr)
        try:
            if left <= 0:
                results = [Result(name, False, "not graded: the run's deadline passed before this notebook's turn")
                           for name in chapter_exercises(path.name)]
            else:
                results = grade_notebook(path, timeout=min(timeout, left), hidden=hidden, seed=seed,
                                         memory_mb=memory_mb, exercise_seconds=exercise_seconds, weak=weak,
                                         root=submissions, reuse=None if weak else reuse)
        except Exception as error:  # noqa: BLE001 - the grader's own failure costs this notebook only
            print(f"error while grading {shown(path)}:\n{shown(traceback.format_exc())}", file=sys.stderr)
            results = [Result(name, False, f"the grader failed on this notebook ({type(error).__name__}); the "
                                           "teacher has the details") for name in chapter_exercises(path.name)]
        if weak:
            kill_children()  # every process the notebook left behind, before anything is written
        with lock:
            rows[path] = [{"student": student, "notebook": notebook, "exercise": r.exercise, "passed": r.passed,
                           "message": r.message} for r in results]
            if canvas_id:
                canvas_ids[student] = canvas_id
            write_grades(out, [row for p in sorted(rows) for row in rows[p]], skipped, canvas_ids)
            done[0] += 1
            passed = sum(r.passed for r in results)
            note = "" if results else "  (no graded exercises: is the file named after its chapter?)"
            print(f"[{done[0]}/{len(paths)}] {shown(student):16} {shown(notebook):40} {passed}/{len(results)} "
                  f"({time.monotonic() - started:.0f} s){note}", file=sys.stderr)

    def student_notebooks(group: list[Path]) -> None:
        """One student's notebooks in turn, in one sandbox renewed between them (`grade_notebook`)."""
        reuse: dict = {}
        try:
            for path in group:
                one(path, reuse)
        finally:
            if "sandbox" in reuse:
                reuse.pop("sandbox").close()

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(student_notebooks, by_student(paths, submissions, jobs)))
    if weak:
        kill_children()
    every = [row for p in sorted(rows) for row in rows[p]]
    write_grades(out, every, skipped, canvas_ids)  # last, after every child is gone
    return every


def chapter_of(exercise: str) -> int:
    return int(exercise.split(".")[0].removeprefix("ch"))


def write_grades(out: Path, rows: list[dict], skipped: dict[str, list[str]] | None = None,
                 canvas_ids: dict[str, str] | None = None) -> None:
    """results.csv, scores.csv, totals.csv, canvas.csv, gradescope_chN.csv, feedback/<student>.md and
    gradescope/chN/<student>/results.json from the rows so far."""
    skipped, canvas_ids = skipped or {}, canvas_ids or {}
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
    write_lms(out, students, canvas_ids)
    write_feedback(out, students, notebooks, skipped)
    write_gradescope_results(out, notebooks)


def write_gradescope_results(out: Path, notebooks: dict[tuple[str, str], list[dict]]) -> None:
    """gradescope/chN/<student>/results.json for every notebook graded (`export.gradescope_results`, the
    format of Gradescope's autograder output), and no other file there (a re-grade removes the rest)."""
    folder = out / "gradescope"
    names = feedback_names({student for student, _ in notebooks})
    keep = set()
    for (student, _), rows in notebooks.items():
        chapter = chapter_of(rows[0]["exercise"])
        target = folder / f"ch{chapter}" / names[student] / "results.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, json.dumps(gradescope_results(rows), indent=1, ensure_ascii=False) + "\n")
        keep.add(target)
    for old in folder.glob("ch*/*/results.json") if folder.exists() else ():
        if old not in keep:
            old.unlink()
            for empty in (old.parent, old.parent.parent):
                if not any(empty.iterdir()):
                    empty.rmdir()


# The LMS files' shapes, from the vendors' documentation (checked 2026-11; tests/test_grading_lms.py pins them):
# Canvas's gradebook import: https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/
# import-csv-file-carmen-grades (the required columns: Student name, ID or SIS User ID; SIS Login ID; Section;
# then assignment columns, a new column creating a new assignment; start from Canvas's own export, whose
# second row is "Points Possible") and Instructure's guide "How do I import grades in the Gradebook?"
# (https://community.canvaslms.com/t5/Svenska-Instrukt%C3%B6r-Guide/Hur-importerar-jag-omd%C3%B6men-i-bed%C3%B6mnings
# %C3%B6versikten/ta-p/441990: new columns become assignments in the group Assignments with no submission;
# names holding Current Score, Current Points, Final Score or Final Points are not read as assignments).
# Gradescope's roster upload: https://help.gradescope.com/article/w59nl02vyt-instructor-course-add-members
# (Name and a unique Email required, SID and Section optional); no documentation of a score upload into
# a Gradescope assignment was found, so gradescope_chN.csv is the roster's columns plus "Total Score", the
# name Gradescope's own grade export gives the score.
CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS = "    Points Possible"  # the second row of Canvas's export, which its import reads back
CANVAS_NOT_ASSIGNMENTS = ("Current Score", "Current Points", "Final Score", "Final Points")
GRADESCOPE_FIELDS = ["Name", "SID", "Email", "Total Score"]


def write_lms(out: Path, students: dict[str, list[dict]], canvas_ids: dict[str, str]) -> None:
    """Canvas's gradebook import (canvas.csv: Student, ID, SIS User ID, SIS Login ID, Section, then one
    column per chapter, a new assignment each, and the Points Possible row; no total, which Canvas
    computes) and a Gradescope file per chapter (gradescope_chN.csv: its roster's Name, SID, Email and
    the score); the documentation they follow is cited above."""
    every = [row for rows in students.values() for row in rows]
    chapters = sorted({chapter_of(row["exercise"]) for row in every})
    possible = {n: sum(1 for name in CHECKS if chapter_of(name) == n) for n in chapters}
    column = {n: f"Chapter {n} exercises" for n in chapters}
    marks = {s: {n: sum(int(r["passed"]) for r in rows if chapter_of(r["exercise"]) == n) for n in chapters}
             for s, rows in students.items()}
    fields = [*CANVAS_IDENTITY, *column.values()]
    canvas = [{"Student": CANVAS_POINTS, **{column[n]: possible[n] for n in chapters}}]
    canvas += [{"Student": s, "ID": canvas_ids.get(s, ""), "SIS Login ID": s,
                **{column[n]: marks[s][n] for n in chapters}} for s in sorted(students)]
    write_table(out / "canvas.csv", canvas, fields)
    for old in out.glob("gradescope_ch*.csv"):
        if int(old.stem.removeprefix("gradescope_ch") or 0) not in chapters:
            old.unlink()
    for n in chapters:
        handed_in = sorted(s for s in students if any(chapter_of(r["exercise"]) == n for r in students[s]))
        write_table(out / f"gradescope_ch{n}.csv",
                    [{"Name": s, "SID": s, "Email": s if EMAIL.fullmatch(s) else "", "Total Score": marks[s][n]}
                     for s in handed_in], GRADESCOPE_FIELDS)


def markdown_text(text: str) -> str:
    """`text` as a Markdown code span: no link, image, HTML or emphasis in it is rendered, on one line."""
    text = " ".join(shown(str(text)).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def feedback_names(students) -> dict[str, str]:
    """One file name per student, never shared: the name itself where it is a plain one, else its plain
    characters and a hash of the whole name ("ada smith" and "ada_smith" get two files)."""
    names = {}
    for student in sorted(students):
        plain = re.sub(r"[^\w.-]", "_", student, flags=re.ASCII).lstrip(".")[:NAME_CHARACTERS] or "_"
        if plain != student:
            plain = f"{plain[:NAME_CHARACTERS - 9]}~{hashlib.sha256(as_bytes(student)).hexdigest()[:8]}"
        names[student] = plain
    return names


def write_feedback(out: Path, students: dict[str, list[dict]], notebooks: dict, skipped: dict[str, list[str]]) -> None:
    """feedback/<student>.md for every student graded, and no other file there (a re-grade removes those of
    students no longer in the class)."""
    folder = out / "feedback"
    folder.mkdir(exist_ok=True)
    names = feedback_names(students)
    for student, student_rows in students.items():
        lines = [f"# Feedback for {markdown_text(student)}", "", f"Total: {sum(r['passed'] for r in student_rows)} "
                 f"of {len(student_rows)} exercises.", ""]
        for (who, notebook), notebook_rows in notebooks.items():
            if who != student:
                continue
            lines += [f"## {markdown_text(notebook)}", ""]
            lines += [f"- {'✓' if r['passed'] else '✗'} `{r['exercise']}`: {markdown_text(r['message'])}"
                      for r in notebook_rows]
            lines.append("")
        if skipped.get(student):
            lines += ["Not graded (only the newest notebook of a chapter is): "
                      + ", ".join(markdown_text(n) for n in skipped[student]), ""]
        write_atomically(folder / f"{names[student]}.md", "\n".join(lines))
    keep = {f"{name}.md" for name in names.values()}
    for old in folder.glob("*.md"):
        if old.name not in keep:
            old.unlink()


def cell(value):
    """A CSV cell no spreadsheet reads as a formula: text starting with = + - @, a tab or a carriage return
    gets a leading apostrophe."""
    if isinstance(value, str) and value.startswith(FORMULA):
        return "'" + value
    return value


def write_table(path: Path, rows: list[dict], fields: list[str]) -> None:
    """A CSV file written whole, then moved in place; a row that cannot be written becomes a row saying so."""
    lines = []
    for row in rows:
        try:
            buffer = _Lines()
            csv.DictWriter(buffer, fieldnames=fields).writerow({k: cell(shown(v) if isinstance(v, str) else v)
                                                               for k, v in row.items()})
            lines.append(buffer.text)
        except Exception as error:  # noqa: BLE001 - one bad row costs that row only
            buffer = _Lines()
            csv.writer(buffer).writerow([f"(a row that could not be written: {type(error).__name__})"])
            lines.append(buffer.text)
    header = _Lines()
    csv.writer(header).writerow(fields)
    write_atomically(path, header.text + "".join(lines))


class _Lines:
    def __init__(self):
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text


def write_atomically(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file in the same folder: a reader never sees half a file."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
