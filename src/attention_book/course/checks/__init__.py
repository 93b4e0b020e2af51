"""Checks for the graded exercises: a student's function against the reference on random inputs (course
tooling; the chapters call `check` through `from attention_book.course import check`).

One module per chapter (`ch01` … `ch12`) holds that chapter's checks and its registry entries; `common`
holds what they share. A check is one function `check_x(student, seed)` that calls `student` on random
inputs drawn from `seed` and returns None when every answer is right, else the first specific problem it
finds. Its registry entry (`Check`) names the exercise ("chN.name"), the function a solution cell
defines, and `forbidden`: the dotted names of the package's and the library's versions of what the
exercise builds, which the grader makes raise inside the submission, and the notebook's `check()`
around each call of the student's function (`attention_book.course.forbid`). The same check gives the
notebook's instant feedback (seed 0, the student's function called in the kernel) and the grade (a
secret seed, the function called in a sandbox by `attention_book.course.grading`).

To add a check: write `check_x` in its chapter's module, add its entry to that module's `CHECKS` with the
function name and the forbidden tuple, and name the same dotted names in the exercise's markdown line
"**Write it yourself:** the grader makes `name1` and `name2` raise inside your solution."
"""

from collections.abc import Callable

from ..forbid import forbidding
from ..verdict import Result, not_implemented
from . import ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11, ch12
from .ch10 import rope_half_reference
from .common import CASES, Check

CHAPTERS = (ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11, ch12)
CHECKS: dict[str, Check] = {name: entry for chapter in CHAPTERS for name, entry in chapter.CHECKS.items()}


class StudentRaised(Exception):
    """The student's function raised `name: message` (in the kernel or in the sandbox)."""

    def __init__(self, name: str, message: str):
        self.name, self.message = name, message
        super().__init__(f"{name}: {message}")


class Stopped(Exception):
    """Grading of the function cannot go on (its sandbox ended); the message says why."""


def calling(student_function, forbidden: tuple[str, ...] = ()) -> Callable:
    """`student_function`, called with the exercise's `forbidden` functions switched off (`forbid`, as the
    grader does; put back after each call) and whatever it raises turned into `StudentRaised` (so that a
    check's own errors on a bad result are told apart from the student's)."""
    guarded = forbidding(student_function, forbidden)

    def call(*args):
        try:
            return guarded(*args)
        except Exception as error:  # noqa: BLE001 - the student's error is feedback
            raise StudentRaised(type(error).__name__, str(error)) from error
    return call


class Shortcut(Exception):
    """The function's answer may be right, but it skipped the method the exercise asks for."""


def method_kept(call: Callable, entry: Check, in_kernel: bool) -> Callable:
    """`call`, raising `Shortcut` when it makes a tensor larger than the exercise's method needs: measured
    here (`in_kernel`) or by the sandbox's worker (`call.largest`)."""
    def bounded(*args):
        if in_kernel:
            from ..worker import LargestTensor

            with LargestTensor() as measured:
                value = call(*args)
            largest = measured.largest
        else:
            value = call(*args)
            largest = call.largest
        bound = entry.largest(*args)
        if largest > bound:
            raise Shortcut(f"{entry.method}: your function made a tensor of {largest} elements where the method "
                           f"needs at most {bound} for these inputs")
        return value
    return bounded


def evaluate(exercise: str, student_function, seed: int = 0, call: Callable | None = None) -> Result:
    """Run the named check on `student_function` (or on `call`, which raises `StudentRaised` itself) and
    return the verdict with its feedback."""
    if exercise not in CHECKS:
        raise KeyError(f"no check named {exercise!r}; known: {sorted(CHECKS)}")
    entry = CHECKS[exercise]
    run = call or calling(student_function, entry.forbidden)
    if entry.largest is not None:
        run = method_kept(run, entry, in_kernel=call is None)
    try:
        problem = entry.run(run, seed)
    except StudentRaised as error:
        problem = not_implemented(error.message) if error.name == "NotImplementedError" else \
            f"your function raised {error.name}: {error.message}"
    except (Stopped, Shortcut) as error:
        problem = str(error)
    except Exception as error:  # a result the check cannot even read is feedback too
        problem = f"your function's result could not be checked ({type(error).__name__}: {error})"
    return Result(exercise, problem is None, problem or f"passed on {CASES} random cases")


def check(exercise: str, student_function) -> None:
    """Instant feedback in the notebook (Colab or Jupyter): `evaluate` and print. Not the grade."""
    print(evaluate(exercise, student_function))



__all__ = ["CASES", "CHECKS", "Check", "Result", "Stopped", "StudentRaised", "check", "evaluate", "rope_half_reference"]
