"""The chapters' instant feedback (course tooling): with the grader's checks installed (a teacher's or the
book's own checkout) the full check with its specific feedback; see `attention_book.course.checks`."""


def evaluate(exercise: str, student_function, seed: int = 0):
    """The verdict of `exercise`'s check on `student_function` (a `Result`: exercise, passed, message)."""
    from .checks import evaluate as full

    return full(exercise, student_function, seed=seed)


def check(exercise: str, student_function) -> None:
    """`evaluate` on seed 0, printed."""
    print(evaluate(exercise, student_function))
