"""The course command (README, "For teachers"):

    python -m attention_book.course student chapters/ _build/student/         # student notebooks
    python -m attention_book.course edition . _build/student/book/            # the book's student edition
    python -m attention_book.course grade submissions/ grades/                 # sandboxed grading
    python -m attention_book.course course chapters/ _build/course/            # nbgrader's course folder
    python -m attention_book.course feedback chapters/                         # students' instant feedback
"""

import argparse
import os
import sys
from pathlib import Path

from .sandbox import MEMORY_FLOOR_MB, MEMORY_MB, isolation


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m attention_book.course",
                                     description="Student notebooks and grading for the book's exercises.")
    commands = parser.add_subparsers(dest="command", required=True)
    student = commands.add_parser("student", help="write student notebooks (solutions stubbed)")
    student.add_argument("chapters", type=Path)
    student.add_argument("out", type=Path)
    edition = commands.add_parser("edition", help="write the sources of the book's student edition (solutions removed)")
    edition.add_argument("book", type=Path, help="the book's folder (this repository)")
    edition.add_argument("out", type=Path)
    edition.add_argument("--repository", default=None,
                         help="GitHub URL where you publish the edition: its Colab buttons open the student notebooks")
    edition.add_argument("--branch", default="main")
    edition.add_argument("--path-to-book", default="", help="the edition's folder in that repository")
    edition.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    grade = commands.add_parser("grade", help="grade submitted notebooks in sandboxes; write the grade files")
    grade.add_argument("submissions", type=Path,
                       help="one folder per student (nbgrader's submitted/ works), or one notebook per student")
    grade.add_argument("out", type=Path)
    grade.add_argument("--timeout", type=float, default=120, help="seconds per notebook (default 120)")
    grade.add_argument("--exercise-timeout", type=float, default=20, help="seconds per exercise (default 20)")
    grade.add_argument("--memory", type=int, default=MEMORY_MB,
                       help=f"MB of memory per notebook, all its processes and files together (a cgroup, or the "
                            f"grader's count; default {MEMORY_MB}, at least {MEMORY_FLOOR_MB})")
    grade.add_argument("--deadline", type=float, default=4 * 3600,
                       help="seconds for the whole run: notebooks not started by then score nothing (default 14400)")
    grade.add_argument("--max-notebooks", type=int, default=2000,
                       help="refuse to start when there are more notebooks to grade than this (default 2000)")
    grade.add_argument("--seed", type=int, default=None,
                       help="the inputs' seed (default: a secret random one, recorded in grading.json)")
    grade.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="students graded at once, each in a sandbox of its own (default: 2, or 1 on one core)")
    grade.add_argument("--weak", action="store_true",
                       help="grade without the allow-list sandbox (no bubblewrap or user namespaces here): submissions "
                            "can then read the teacher's files, use the network and signal the teacher's processes")
    grade.add_argument("--hide", type=Path, action="append", default=[],
                       help="a folder inside the Python installation the submissions must not see")
    feedback = commands.add_parser("feedback", help="store the students' instant feedback (seed 0's cases and the "
                                     "chapters' answers) in the package's data/feedback/")
    feedback.add_argument("chapters", type=Path)
    course = commands.add_parser("course", help="write nbgrader's course folder (source/<chapter>/, nbgrader_config.py)")
    course.add_argument("chapters", type=Path)
    course.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "feedback":
        from .feedback import record

        for path in record(args.chapters):
            print(path)
        return
    if args.command == "edition":
        from .notebooks import make_student_edition

        if args.out.exists() and not args.force:
            sys.exit(f"{args.out} exists: pass --force to replace it (everything in it is deleted)")
        for path in make_student_edition(args.book, args.out, args.repository, args.branch, args.path_to_book):
            print(path)
        return
    if args.command in ("student", "course"):
        if not args.chapters.is_dir():
            sys.exit(f"{args.chapters} is not a folder of chapter notebooks")
        if args.command == "student":
            from .notebooks import make_student_notebooks

            written = make_student_notebooks(args.chapters, args.out)
        else:
            from .export import make_course

            written = make_course(args.chapters, args.out)
        for path in written:
            print(path)
        return
    if not args.submissions.is_dir():
        sys.exit(f"{args.submissions} is not a folder of notebooks")
    if args.timeout <= 0 or args.exercise_timeout <= 0 or args.deadline <= 0:
        sys.exit(f"--timeout, --exercise-timeout and --deadline must be positive, got {args.timeout}, "
                 f"{args.exercise_timeout} and {args.deadline}")
    if args.memory < MEMORY_FLOOR_MB:
        sys.exit(f"--memory {args.memory} is below the floor of {MEMORY_FLOOR_MB} MB: the worker alone (Python with "
                 f"torch and numpy) needs about 0.4 GB, so every notebook would fail. The default is {MEMORY_MB}.")
    if not args.weak and isolation() is not None:
        sys.exit(f"refusing to grade: the sandbox cannot isolate submissions on this machine ({isolation()}).\n"
                 "Install bubblewrap (make bwrap) where user namespaces are allowed, or pass --weak to grade with a "
                 "weaker sandbox in which submissions can read your files, use the network and signal your processes.")
    from .grading import grade_folder

    try:
        grade_folder(args.submissions, args.out, timeout=args.timeout, hidden=tuple(p.resolve() for p in args.hide),
                     memory_mb=args.memory, seed=args.seed, exercise_seconds=args.exercise_timeout, weak=args.weak,
                     jobs=args.jobs, deadline=args.deadline, max_notebooks=args.max_notebooks)
    except ValueError as error:
        sys.exit(f"refusing to grade: {error}")


if __name__ == "__main__":
    main()
