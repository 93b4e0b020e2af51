"""The chapters' instant feedback, `check("chN.name", function)`, where the grader's checks are installed
and where they are not (course tooling).

The checks (`attention_book.course.checks`) hold the reference answers, so the package students install
leaves them out (pyproject.toml excludes the package). There, `check` replays what the checks ask on
seed 0: the inputs of every case and the reference's answer to them, stored in
`attention_book/data/feedback/chN.json` by `python -m attention_book.course feedback` from the chapters'
own solutions. The replay says which case differs and where; the grader's checks, with their specific
diagnoses, run where they are installed (a teacher's or the book's checkout) and when grading, on inputs
no student has seen. Both apply the exercise's forbidden list as the grader does (`forbid`): the checks'
own, or, where they are left out, the one stored in `data/feedback/forbidden.json`.
"""

import json
import math
from pathlib import Path

import numpy as np
import torch

from . import wire
from .diagnose import name_the_mistake
from .forbid import forbidding
from .verdict import Result, not_implemented

FOLDER = Path(__file__).resolve().parents[1] / "data" / "feedback"
FORBIDDEN = "forbidden.json"  # exercise -> the dotted names its solution may not call
CASES = 20  # random inputs per check, as checks.common.CASES; some checks add edge cases after them


def _full_checks():
    try:
        from . import checks
    except ImportError:
        return None
    return checks if hasattr(checks, "evaluate") else None


def evaluate(exercise: str, student_function, seed: int = 0) -> Result:
    """The verdict on `student_function`: the full check where it is installed, else the replay (seed 0 only)."""
    checks = _full_checks()
    if checks is not None:
        return checks.evaluate(exercise, student_function, seed=seed)
    if seed != 0:
        raise ValueError(f"seed {seed} needs the grader's checks, which this installation leaves out")
    return replay(exercise, student_function)


def check(exercise: str, student_function) -> None:
    """`evaluate` on seed 0, printed. Not the grade."""
    print(evaluate(exercise, student_function))


def cases(exercise: str, folder: Path = FOLDER) -> list[dict]:
    """The stored cases of `exercise`: {"args": [...], "expected": value}, wire-encoded."""
    chapter = exercise.split(".")[0]
    path = folder / f"{chapter}.json"
    if not path.exists():
        raise KeyError(f"no stored feedback for {exercise!r} ({path.name} is missing)")
    stored = json.loads(path.read_text())
    if exercise not in stored:
        raise KeyError(f"no check named {exercise!r}; known: {sorted(stored)}")
    return stored[exercise]


def stored_forbidden(folder: Path = FOLDER) -> dict[str, list[str]]:
    """What each exercise forbids, as stored for the students' installation (forbidden.json)."""
    path = folder / FORBIDDEN
    return json.loads(path.read_text()) if path.exists() else {}


def replay(exercise: str, student_function, folder: Path = FOLDER) -> Result:
    """`student_function` on every stored case of `exercise`, with the exercise's forbidden functions
    switched off (as the grader does), its answers compared with the reference's."""
    stored = cases(exercise, folder)
    student_function = forbidding(student_function, stored_forbidden(folder).get(exercise, ()))
    for number, case in enumerate(stored, 1):
        args = wire.decode(case["args"])
        try:
            got = student_function(*args)
        except NotImplementedError as error:
            return Result(exercise, False, not_implemented(str(error)))
        except Exception as error:  # noqa: BLE001 - the student's error is feedback
            return Result(exercise, False, f"your function raised {type(error).__name__}: {error}")
        try:
            problem = difference(got, wire.decode(case["expected"]), args=args)
        except Exception as error:  # noqa: BLE001 - a result that cannot even be compared is feedback too
            problem = f"your result could not be checked ({type(error).__name__}: {error})"
        if problem:
            return Result(exercise, False, f"case {number} of {len(stored)}, inputs {describe(args)}: {problem}")
    return Result(exercise, True, f"passed on {min(len(stored), CASES)} random cases")


def describe(args) -> str:
    """The arguments in a few words: shapes of arrays, values of the rest."""
    def one(value):
        if isinstance(value, (torch.Tensor, np.ndarray)):
            return f"shape {tuple(value.shape)}"
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return "(" + ", ".join(one(a) for a in args) + ")"


def difference(got, expected, what: str = "the result", args=()) -> str | None:
    """None when `got` equals the reference's `expected` (arrays to rounding), else the mistake named
    (`diagnose`) or where it first differs; `args` are the inputs, for mistakes named by their sizes."""
    if isinstance(expected, (torch.Tensor, np.ndarray)):
        reference = expected.numpy() if isinstance(expected, torch.Tensor) else expected
        try:
            array = np.asarray(got.detach().cpu() if isinstance(got, torch.Tensor) else got)
        except (TypeError, ValueError, AttributeError):
            return f"{what} should be an array of shape {tuple(reference.shape)}, yours is a {type(got).__name__}"
        if array.shape != reference.shape:
            named = name_the_mistake(array, reference, args)
            return named or f"{what} should have shape {tuple(reference.shape)}, yours has {tuple(array.shape)}"
        if reference.dtype == bool and array.dtype != bool:
            return f"{what} should be boolean, yours has dtype {array.dtype}"
        if reference.dtype.kind in "biu":
            wrong = np.argwhere(array != reference)
        else:
            wrong = np.argwhere(~np.isclose(array.astype(np.float64), reference.astype(np.float64), atol=1e-5,
                                            rtol=1e-4, equal_nan=True))
        if len(wrong) == 0:
            return None
        if named := name_the_mistake(array, reference, args):
            return named
        at = tuple(int(i) for i in wrong[0])
        return f"{what}{list(at)} is {_number(array[at])}, expected {_number(reference[at])}"
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"{what} should be {len(expected)} values, yours is {type(got).__name__}"
        for i, (mine, right) in enumerate(zip(got, expected, strict=True)):
            if problem := difference(mine, right, f"part {i} of {what}"):
                return problem
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{what} should have the keys {sorted(expected, key=str)}, yours {sorted(got, key=str) if isinstance(got, dict) else type(got).__name__}"
        for key in expected:
            if problem := difference(got[key], expected[key], f"{what}[{key!r}]"):
                return problem
        return None
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(got, (str, bytes, bool, np.bool_)):  # float("1.0") and float(True) would pass
            return f"{what} should be a number, yours is {type(got).__name__} {got!r}"
        try:
            number = float(got)
        except (TypeError, ValueError):
            return f"{what} should be a number, yours is {type(got).__name__}"
        if math.isclose(number, expected, rel_tol=1e-6, abs_tol=1e-9):
            return None
        return f"{what} is {_number(number)}, expected {_number(expected)}"
    if isinstance(got, np.generic) and isinstance(expected, (bool, int, float, str)):
        got = got.item()  # a NumPy bool or number reads as the Python one: True, not np.True_
    return None if got == expected else f"{what} is {got!r}, expected {expected!r}"


def _number(value) -> str:
    value = value.item() if hasattr(value, "item") else value
    return f"{value:.4f}" if isinstance(value, float) else repr(value)


def record(chapters: Path, out: Path = FOLDER) -> list[Path]:
    """Store, for every graded exercise of the chapters, the inputs the check gives on seed 0 and the
    chapter's own solution's answers, and every check's forbidden list (forbidden.json) (`python -m attention_book.course feedback chapters/`)."""
    import nbformat

    from .checks import CHECKS
    from .checks import evaluate as full
    from .export import graded_exercises

    stored: dict[str, dict[str, list]] = {}
    for path in sorted(chapters.glob("*.ipynb")):
        for exercise in graded_exercises(nbformat.read(path, as_version=4)):
            namespace: dict = {}
            exec(compile(exercise["solution"], str(path), "exec"), namespace)  # noqa: S102 - the book's own cells
            solution, recorded = namespace[exercise["function"]], []

            def spy(*args, solution=solution, recorded=recorded):
                with torch._C.DisableTorchFunction():  # unmeasured: the check counts the solution's tensors only
                    encoded = wire.encode(list(args))  # before the call: a solution may change its arguments
                value = solution(*args)
                recorded.append({"args": encoded, "expected": wire.encode(value)})
                return value

            result = full(exercise["name"], spy)
            if not result.passed:
                raise ValueError(f"{path.name}: the chapter's solution of {exercise['name']} fails: {result.message}")
            stored.setdefault(exercise["name"].split(".")[0], {})[exercise["name"]] = recorded
    missing = set(CHECKS) - {name for chapter in stored.values() for name in chapter}
    if missing:
        raise ValueError(f"no chapter solves {sorted(missing)}")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for chapter, exercises in sorted(stored.items()):
        path = out / f"{chapter}.json"
        path.write_text(json.dumps(exercises, sort_keys=True, separators=(",", ":")) + "\n")
        written.append(path)
    written.append(write_forbidden(out))
    return written


def write_forbidden(out: Path = FOLDER) -> Path:
    """forbidden.json: every check's forbidden list, for the students' installation (which has no checks)."""
    from .checks import CHECKS

    forbidden = {name: list(entry.forbidden) for name, entry in sorted(CHECKS.items())}
    (out / FORBIDDEN).write_text(json.dumps(forbidden, indent=0, sort_keys=True) + "\n")
    return out / FORBIDDEN
