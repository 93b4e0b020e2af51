"""The course command (README, "For teachers"); the code lives in `attention_book.course`.

    python -m attention_book.assignments student chapters/ student/            # student notebooks
    python -m attention_book.assignments grade submissions/ grades/ --timeout 60  # sandboxed grading
    python -m attention_book.assignments course chapters/ _build/course/       # nbgrader assignments
"""

import argparse
import sys
from pathlib import Path

from .course.export import make_course
from .course.grading import grade_folder
from .course.notebooks import make_student_notebooks
from .course.sandbox import MEMORY_MB


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m attention_book.assignments",
                                     description="Student notebooks and grading for the book's exercises.")
    commands = parser.add_subparsers(dest="command", required=True)
    student = commands.add_parser("student", help="write student notebooks (solutions stubbed)")
    student.add_argument("chapters", type=Path)
    student.add_argument("out", type=Path)
    grade = commands.add_parser("grade", help="grade submitted notebooks in sandboxes; write results.csv and scores.csv")
    grade.add_argument("submissions", type=Path, help="one folder per student, or one notebook per student")
    grade.add_argument("out", type=Path)
    grade.add_argument("--timeout", type=float, default=60, help="seconds per notebook (default 60)")
    grade.add_argument("--memory", type=int, default=MEMORY_MB, help=f"MB of memory per notebook (default {MEMORY_MB})")
    grade.add_argument("--hide", type=Path, action="append", default=[],
                       help="a folder the submissions must not see (the chapters with solutions: hidden by default)")
    course = commands.add_parser("course", help="write nbgrader's course folder (source/<chapter>/, nbgrader_config.py)")
    course.add_argument("chapters", type=Path)
    course.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command in ("student", "course"):
        if not args.chapters.is_dir():
            sys.exit(f"{args.chapters} is not a folder of chapter notebooks")
        make = make_student_notebooks if args.command == "student" else make_course
        for path in make(args.chapters, args.out):
            print(path)
        return
    if not args.submissions.is_dir():
        sys.exit(f"{args.submissions} is not a folder of notebooks")
    if args.timeout <= 0:
        sys.exit(f"--timeout must be positive, got {args.timeout}")
    checkout = Path(__file__).resolve().parents[2]  # a source checkout: its chapters, history and build hold solutions
    hidden = [p.resolve() for p in args.hide] + [folder for folder in (checkout / "chapters", checkout / ".git",
                                                                       checkout / "_build") if folder.is_dir()]
    grade_folder(args.submissions, args.out, timeout=args.timeout, hidden=tuple(hidden), memory_mb=args.memory)


if __name__ == "__main__":
    main()
