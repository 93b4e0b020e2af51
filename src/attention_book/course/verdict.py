"""A verdict on one exercise, and the words for an unfinished stub (course tooling): shared by the checks
(`attention_book.course.checks`), the instant feedback (`feedback`) and the grader (`grading`), none of
which imports another for it."""

from dataclasses import dataclass


@dataclass
class Result:
    exercise: str
    passed: bool
    message: str

    def __str__(self) -> str:
        return f"{'✓' if self.passed else '✗'} {self.exercise}: {self.message}"


def not_implemented(hint: str) -> str:
    """The feedback on a stub that raises NotImplementedError(hint): the hint, or (nbgrader's stubs raise it
    without one) what to do."""
    hint = hint.strip()
    if not hint:
        return "not implemented yet: the function still raises NotImplementedError; write its body"
    return f"not implemented yet. Hint: {hint}"
