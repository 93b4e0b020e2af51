"""How long the sandboxed grader takes for a class (issue 47's target: 30 students × all 12 chapters in
under 10 minutes). Each student hands in every chapter as the book has it, solutions included (an honest
class: every exercise should pass), and the whole class is graded once with the README's command. The
machine's load average is sampled every 10 s while it runs and stored with the result, with each
notebook's grading time (from the grader's progress lines) and any exercise that failed. The result
goes to src/attention_book/data/grading_class_cpu.json. Run from the repository root, on a machine doing
nothing else if the number is to be compared with the target (minutes):

    .venv/bin/python benchmarks/grading_class.py [--students 30] [--jobs 2] [--chapters 1 2 ...] [--out x.json]
        [--note 'what else ran']
"""

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from time import perf_counter

from attention_book.measure import machine

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "attention_book" / "data" / "grading_class_cpu.json"
PROGRESS = re.compile(r"^\[\d+/\d+\] \S+ +\S*?(\d\d)_\S+ +(\d+)/(\d+) \((\d+) s\)")  # the grader's line per notebook


class LoadSampler(threading.Thread):
    """The 1-minute load average every `every` seconds until stopped."""

    def __init__(self, every: float = 10.0):
        super().__init__(daemon=True)
        self.every, self.samples, self.stopped = every, [os.getloadavg()[0]], threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict:
        quartiles = statistics.quantiles(self.samples, n=4) if len(self.samples) > 1 else self.samples * 3
        return {"load_average_1min": {"median": round(statistics.median(self.samples), 1),
                                      "quartiles": [round(quartiles[0], 1), round(quartiles[2], 1)],
                                      "min": round(min(self.samples), 1), "max": round(max(self.samples), 1),
                                      "samples": len(self.samples)}, "cores": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--chapters", type=int, nargs="*", help="chapter numbers (default: every chapter)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the result goes (default: the stored one)")
    parser.add_argument("--note", default="", help="what else ran on the machine (stored with the result)")
    args = parser.parse_args()
    chapters = [path for path in sorted((ROOT / "chapters").glob("*.ipynb"))
                if not args.chapters or int(path.name.split("_")[0]) in args.chapters]
    load = LoadSampler()
    with tempfile.TemporaryDirectory() as scratch:
        submissions, grades = Path(scratch) / "submissions", Path(scratch) / "grades"
        for i in range(args.students):
            folder = submissions / f"student{i:02d}"
            folder.mkdir(parents=True)
            for chapter in chapters:
                shutil.copy(chapter, folder / chapter.name)
        load.start()
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        start = perf_counter()
        run = subprocess.run([sys.executable, "-m", "attention_book.course", "grade", str(submissions), str(grades),
                              "--jobs", str(args.jobs)], check=True, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        seconds = perf_counter() - start
        load.stopped.set()
        with open(grades / "results.csv") as file:
            rows = list(csv.DictReader(file))
    timed = [(m.group(1), int(m.group(4))) for line in run.stderr.splitlines() if (m := PROGRESS.match(line))]
    per_notebook = [seconds for _, seconds in timed]
    by_chapter = {chapter: [s for c, s in timed if c == chapter] for chapter in sorted({c for c, _ in timed})}
    passed = sum(row["passed"] == "True" for row in rows)
    failed = sorted({f"{row['exercise']}: {row['message'][:160]}" for row in rows if row["passed"] != "True"})
    record = {"machine": {**machine(), **load.summary(), "note": args.note}, "started": started, "students": args.students,
              "chapters": len(chapters), "jobs": args.jobs, "notebooks": len(per_notebook),
              "exercises": len(rows), "passed": passed, "failed": failed, "seconds": round(seconds, 1),
              "seconds_per_notebook": {"median": statistics.median(per_notebook),
                                       "quartiles": statistics.quantiles(per_notebook, n=4)[::2],
                                       "max": max(per_notebook)} if len(per_notebook) > 1 else per_notebook,
              "seconds_by_chapter": {chapter: {"median": statistics.median(times), "max": max(times),
                                               "total": sum(times)} for chapter, times in by_chapter.items()}}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{args.students} students × {len(chapters)} chapters: {passed}/{len(rows)} exercises passed in "
          f"{seconds / 60:.1f} min with {args.jobs} jobs (load average {record['machine']['load_average_1min']})")
    for line in failed:
        print(f"failed: {line}")


if __name__ == "__main__":
    main()
