"""How long the sandboxed grader takes for a class (issue 33's target: 30 students × 9 chapters in under
10 minutes on 2 cores). Each student hands in every chapter as the book has it, solutions included (an
honest class: every exercise must pass), and the whole class is graded once with the README's command.
The result goes to src/attention_book/data/grading_class_cpu.json. Run from the repository root, on a
machine doing nothing else (minutes):

    .venv/bin/python benchmarks/grading_class.py [--students 30] [--jobs 2]
"""

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter

from attention_book.measure import machine

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "attention_book" / "data" / "grading_class_cpu.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    chapters = sorted((ROOT / "chapters").glob("*.ipynb"))
    with tempfile.TemporaryDirectory() as scratch:
        submissions, grades = Path(scratch) / "submissions", Path(scratch) / "grades"
        for i in range(args.students):
            folder = submissions / f"student{i:02d}"
            folder.mkdir(parents=True)
            for chapter in chapters:
                shutil.copy(chapter, folder / chapter.name)
        start = perf_counter()
        subprocess.run([sys.executable, "-m", "attention_book.course", "grade", str(submissions), str(grades),
                        "--jobs", str(args.jobs)], check=True, cwd=ROOT)
        seconds = perf_counter() - start
        with open(grades / "results.csv") as file:
            rows = list(csv.DictReader(file))
    passed = sum(row["passed"] == "True" for row in rows)
    record = {"machine": machine(), "students": args.students, "chapters": len(chapters), "jobs": args.jobs,
              "exercises": len(rows), "passed": passed, "seconds": round(seconds, 1)}
    assert passed == len(rows), f"an honest class must pass every exercise: {passed} of {len(rows)}"
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{args.students} students × {len(chapters)} chapters: {passed}/{len(rows)} exercises passed in "
          f"{seconds / 60:.1f} min with {args.jobs} jobs")


if __name__ == "__main__":
    main()
