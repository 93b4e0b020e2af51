"""Add the rule-3 line to the graded exercises of chapters 05-09 (issue 33): each exercise's markdown names
what its check forbids. Edits only the markdown text of those exercise cells, in place, and only where
the line is missing. Run once: `.venv/bin/python scripts/write_it_yourself.py chapters/0[5-9]_*.ipynb`."""

import json
import sys
from pathlib import Path

import nbformat

from attention_book.course.checks import CHECKS
from attention_book.course.export import graded_exercises
from attention_book.notebook_form import label_of


def line(forbidden: tuple[str, ...]) -> str:
    names = [f"`{name}`" for name in forbidden]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"**Write it yourself:** the grader makes {listed} raise inside your solution."


def main(paths: list[str]) -> None:
    for path in map(Path, paths):
        exercises = {e["label"]: e["name"] for e in graded_exercises(nbformat.read(path, as_version=4))}
        raw = json.loads(path.read_text())
        changed = 0
        for cell in raw["cells"]:
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            label = label_of(cell, "exercise")
            if cell["cell_type"] != "markdown" or label is None:
                continue
            name = exercises.get(label)
            if name is None or not CHECKS[name].forbidden or "**Write it yourself:**" in source:
                continue
            new = source.rstrip("\n") + "\n\n" + line(CHECKS[name].forbidden)
            cell["source"] = new.splitlines(keepends=True) if isinstance(cell["source"], list) else new
            changed += 1
        path.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
        print(f"{path}: {changed} exercise(s)")


if __name__ == "__main__":
    main(sys.argv[1:])
