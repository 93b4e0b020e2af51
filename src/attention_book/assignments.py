"""Course assignments from the chapters: student notebooks without solutions, and grading of submissions.

    python -m attention_book.assignments student chapters/ student/    # one student notebook per chapter
    python -m attention_book.assignments grade submissions/ grades/     # run every notebook, write CSVs

In a chapter, a graded exercise's solution is a code cell between two markdown cells holding the
sphinx-exercise gates `{solution-start} label` and `{solution-end}`; its first line is `# Hint: ...`.
The student version keeps every other cell, turns each function of such a cell into its signature and
docstring followed by `raise NotImplementedError(hint)`, drops prose solutions (`{solution}` cells) and
all outputs. Grading executes each submitted notebook; the `check(...)` cells record their results.
"""

import argparse
import ast
import csv
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat

SOLUTION_START = re.compile(r"\{solution-start\}\s*(\S+)")
SOLUTION_END = "{solution-end}"
PROSE_SOLUTION = re.compile(r"^[`:]{3,}\{solution\}", re.M)
HINT = re.compile(r"^#\s*Hint:\s*(.+)$", re.M)


def stub(source: str) -> str:
    """Every top-level function of a solution cell, reduced to signature, docstring and the hint."""
    hint = HINT.search(source)
    if hint is None:
        raise ValueError(f"a solution cell must start with a '# Hint: ...' line:\n{source}")
    tree = ast.parse(source)
    lines = source.splitlines()
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if not functions:
        raise ValueError(f"a graded solution cell must define a function:\n{source}")
    parts = []
    for function in functions:
        body = function.body
        has_docstring = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str)
        keep_until = body[0].end_lineno if has_docstring else body[0].lineno - 1  # signature (+ docstring)
        start = function.decorator_list[0].lineno if function.decorator_list else function.lineno
        indent = " " * body[0].col_offset
        parts.append("\n".join(lines[start - 1:keep_until] + [f"{indent}raise NotImplementedError({hint.group(1)!r})"]))
    return "\n\n\n".join(parts)


def student_notebook(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of a chapter with solution code stubbed, prose solutions removed and outputs cleared."""
    result = nbformat.from_dict(json.loads(json.dumps(notebook)))
    cells, label = [], None
    for cell in result.cells:
        source = cell.source
        if cell.cell_type == "markdown" and (start := SOLUTION_START.search(source)):
            label = start.group(1)
            cells.append(nbformat.v4.new_markdown_cell(f"**Your solution** to exercise `{label}`: replace "
                                                       "`raise NotImplementedError(...)` with your code."))
            continue
        if cell.cell_type == "markdown" and SOLUTION_END in source:
            label = None
            continue
        if cell.cell_type == "markdown" and PROSE_SOLUTION.search(source):
            continue  # a written solution: for the teacher, not the student
        if cell.cell_type == "code":
            if label is not None:
                cell.source = stub(source)
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    if label is not None:
        raise ValueError(f"solution {label!r} has no {SOLUTION_END} cell")
    result.cells = cells
    return result


def make_student_notebooks(chapters: Path, out: Path) -> list[Path]:
    """A student notebook for every chapter notebook in `chapters`, written to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(chapters.glob("*.ipynb")):
        target = out / path.name
        nbformat.write(student_notebook(nbformat.read(path, as_version=4)), target)
        written.append(target)
    return written


def expected_checks(notebook: nbformat.NotebookNode) -> list[str]:
    """The exercise names a notebook's `check(...)` cells grade, in order."""
    names = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            names += re.findall(r"check\(\s*[\"']([\w.]+)[\"']", cell.source)
    return names


def grade_notebook(path: Path, timeout: int = 600) -> list[dict]:
    """Execute one submitted notebook and return its check results (a check that never ran counts as failed)."""
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as scratch:
        record = Path(scratch) / "grades.jsonl"
        previous = os.environ.get("ATTENTION_BOOK_GRADES")
        os.environ["ATTENTION_BOOK_GRADES"] = str(record)  # the kernel inherits it
        try:
            NotebookClient(notebook, timeout=timeout, allow_errors=True, kernel_name="python3",
                           resources={"metadata": {"path": scratch}}).execute()
        finally:
            if previous is None:
                os.environ.pop("ATTENTION_BOOK_GRADES")
            else:
                os.environ["ATTENTION_BOOK_GRADES"] = previous
        results = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    ran = {r["exercise"] for r in results}
    for name in expected_checks(notebook):
        if name not in ran:
            results.append({"exercise": name, "passed": False,
                            "message": "the check did not run (an error stopped the notebook before it)"})
    return results


def grade_folder(submissions: Path, out: Path) -> list[dict]:
    """Grade every notebook under `submissions` (the student is the first folder level, or the file name).

    Writes out/results.csv (one row per check, with the feedback) and out/scores.csv (one row per notebook).
    """
    out.mkdir(parents=True, exist_ok=True)
    rows, scores = [], []
    for path in sorted(submissions.rglob("*.ipynb")):
        relative = path.relative_to(submissions)
        student = relative.parts[0] if len(relative.parts) > 1 else path.stem
        results = grade_notebook(path)
        rows += [{"student": student, "notebook": str(relative), **r} for r in results]
        passed = sum(r["passed"] for r in results)
        scores.append({"student": student, "notebook": str(relative), "passed": passed, "total": len(results)})
        print(f"{student:20} {str(relative):40} {passed}/{len(results)}")
    for name, table, fields in (("results.csv", rows, ["student", "notebook", "exercise", "passed", "message"]),
                                ("scores.csv", scores, ["student", "notebook", "passed", "total"])):
        with open(out / name, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=fields)
            writer.writeheader()
            writer.writerows(table)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Student notebooks and grading for the book's exercises.")
    commands = parser.add_subparsers(dest="command", required=True)
    student = commands.add_parser("student", help="write student notebooks (solutions stubbed)")
    student.add_argument("chapters", type=Path)
    student.add_argument("out", type=Path)
    grade = commands.add_parser("grade", help="execute submitted notebooks and write results.csv and scores.csv")
    grade.add_argument("submissions", type=Path)
    grade.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "student":
        for path in make_student_notebooks(args.chapters, args.out):
            print(path)
    else:
        if not args.submissions.is_dir():
            sys.exit(f"{args.submissions} is not a folder of notebooks")
        grade_folder(args.submissions, args.out)


if __name__ == "__main__":
    main()
