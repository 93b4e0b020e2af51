"""Course tooling for teachers (README, "For teachers"): the graded exercises' checks (`checks`, one module
per chapter; not part of what students install), student notebooks and the student edition of the book
(`notebooks`), sandboxed grading (`grading`, `sandbox`, `worker`, `wire`) and the export to nbgrader
(`export`). The command is `python -m attention_book.course`.
"""


def check(exercise: str, student_function) -> None:
    """Instant feedback in a chapter's notebook (Colab or Jupyter): `check("ch5.causal_mask", function)` tests
    the function on seed 0's inputs and prints the verdict. It never records a grade."""
    from .feedback import check as run

    run(exercise, student_function)


__all__ = ["check"]
