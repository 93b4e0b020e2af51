"""Course tooling for teachers (README, "For teachers"): the graded exercises' checks (`checks`), student
notebooks (`notebooks`), sandboxed grading (`grading`, `sandbox`, `worker`, `wire`) and the export to
nbgrader (`export`). The command is `python -m attention_book.assignments`.
"""

from .checks import check  # the chapters' instant feedback: `from attention_book.course import check`

__all__ = ["check"]
