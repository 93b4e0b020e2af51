"""The chapters' instant feedback for graded exercises: `check("chN.name", function)` (course tooling;
the checks live in `attention_book.course.checks`, grading in `attention_book.course.grading`).

`check` runs in the student's own kernel (Colab or Jupyter) and only prints; the grade never comes from it.
"""

from .course.checks import CASES, CHECKS, Result, check, evaluate

__all__ = ["CASES", "CHECKS", "Result", "check", "evaluate"]
