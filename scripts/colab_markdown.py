"""Convert chapter notebooks from the MyST form to the form Jupyter and Colab render (issue 40), in place.

    .venv/bin/python scripts/colab_markdown.py chapters/*.ipynb

What changes, in markdown cells only (code cells' sources and every output stay byte-for-byte):
- ````{exercise} Title / :label: L```` fences become a markdown cell with metadata
  {"exercise": {"label": L}} headed `**Exercise N.k — Title**` (N from the file name's NN_ prefix, k the
  exercise's place in the chapter);
- ````{solution} L```` fences become a markdown cell with {"solution": {"label": L}} headed
  `**Solution to Exercise N.k**`;
- the gate cells ```{solution-start} L``` and ```{solution-end}``` are removed and the cells between
  them (the graded code cell, and any closing prose) carry {"solution": {"label": L}};
- {cite}`a,b` becomes `[(A et al., 2017; B, 2019)](url of a "cite:a,b")` (authors, year and url from
  references.bib), {ref}`L` becomes `[N.k](#L "ref")` (exercise labels only);
- `![alt](figures/x.svg)` becomes `![alt](attachment:x.svg)` with the SVG in the cell's attachments;
- a side note in an ```{admonition} Title```, ```{note}```, ```{tip}```, ```{warning}``` or ```{important}```
  fence becomes a blockquote `> **Title.** text` (Jupyter shows a fence as code);
- a citation whose authors the sentence has just named ("Britz et al. [(Britz et al., 2017)](...)", read
  twice in Jupyter) keeps only its year: "Britz et al. [(2017)](...)" (the book shows "Britz et al. [BGLL17]").

Idempotent: on a converted notebook it only renumbers the headings (after chapters are split or
renumbered) and refreshes attachments from chapters/figures. The book is built from the MyST form
again by _ext/notebook_form.py (attention_book.notebook_form.myst_notebook).
"""

import argparse
import re
import sys
from pathlib import Path

import nbformat

from attention_book.notebook_form import CITE, REF, attach_figures, label_of, split_heading

ROOT = Path(__file__).resolve().parent.parent
OLD_EXERCISE = re.compile(r"\A(?P<fence>[`:]{3,})\{exercise\}[ \t]*(?P<title>[^\n]*)\n"
                          r"(?P<options>(?::[\w-]+:[^\n]*\n)*)\n?(?P<text>.*?)\n?(?P=fence)\s*\Z", re.S)
OLD_SOLUTION = re.compile(r"\A(?P<fence>[`:]{3,})\{solution\}[ \t]*(?P<label>\S+)\n"
                          r"(?P<options>(?::[\w-]+:[^\n]*\n)*)\n?(?P<text>.*?)\n?(?P=fence)\s*\Z", re.S)
GATE_START = re.compile(r"\A[`:]{3,}\{solution-start\}\s*(?P<label>\S+)")
GATE_END = re.compile(r"^[`:]{3,}\{solution-end\}\s*\n?[`:]{3,}\Z", re.M)
OLD_CITE = re.compile(r"\{cite\}`(?P<keys>[^`]+)`")
OLD_REF = re.compile(r"\{ref\}`(?P<label>[\w-]+)`")
OLD_FIGURE = re.compile(r"\]\(figures/(?P<name>[\w.-]+\.svg)\)")
ADMONITION = re.compile(r"^(?P<fence>[`:]{3,})\{(?P<kind>admonition|note|tip|warning|important|seealso)\}[ \t]*"
                        r"(?P<title>[^\n]*)\n(?P<options>(?::[\w-]+:[^\n]*\n)*)\n?(?P<text>.*?)\n?^(?P=fence)[ \t]*$",
                        re.S | re.M)
SHORT_CITE = re.compile(r"\A\[\(\d{4}[a-z]?\)\]")  # a citation that keeps only its year


def chapter_number(path: Path) -> int:
    match = re.match(r"(\d+)_", path.name)
    if match is None:
        raise ValueError(f"{path}: a chapter notebook's name starts with its number, e.g. 05_causal.ipynb")
    return int(match.group(1))


def references(bib: Path) -> dict[str, tuple[str, str]]:
    """key -> ("Vaswani et al., 2017", url) from references.bib."""
    from pybtex.database import parse_file

    found = {}
    for key, entry in parse_file(str(bib)).entries.items():
        people = entry.persons.get("author", [])
        last = [" ".join(p.last_names).replace("{", "").replace("}", "") for p in people]
        names = last[0] if len(last) == 1 else f"{last[0]} and {last[1]}" if len(last) == 2 else f"{last[0]} et al."
        url = entry.fields.get("url") or (f"https://doi.org/{entry.fields['doi']}" if "doi" in entry.fields else "")
        if not url:
            raise ValueError(f"references.bib: {key} needs a url or doi (a citation links to it in Jupyter)")
        found[key] = (f"{names}, {entry.fields.get('year', 'n.d.')}", url)
    return found


def exercise_labels(notebook, number: int) -> dict[str, str]:
    """label -> "5.2" for every exercise of a chapter, in either form."""
    labels = []
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        old = OLD_EXERCISE.match(cell.source.strip())
        label = label_of(cell, "exercise") or (
            re.search(r"^:label:\s*(\S+)", old["options"], re.M).group(1) if old else None)
        if label:
            labels.append(label)
    return {label: f"{number}.{k}" for k, label in enumerate(labels, 1)}


def cite(keys: str, bib: dict) -> str:
    missing = [key for key in keys.split(",") if key.strip() not in bib]
    if missing:
        raise KeyError(f"{{cite}} of {missing}, which references.bib lacks")
    entries = [bib[key.strip()] for key in keys.split(",")]
    return f'[({"; ".join(text for text, _ in entries)})]({entries[0][1]} "cite:{keys.replace(" ", "")}")'


def year_only(keys: str, bib: dict) -> str:
    """A citation that keeps only its year, for a sentence that has just named the authors."""
    text, url = bib[keys.split(",")[0].strip()]
    return f'[({text.rsplit(", ", 1)[1]})]({url} "cite:{keys.replace(" ", "")}")'


def undouble(source: str, bib: dict) -> str:
    """"Britz et al. [(Britz et al., 2017)](...)" and "Rabe and Staats (2021) [(Rabe and Staats, 2021)](...)"
    become "Britz et al. [(2017)](...)" and "Rabe and Staats [(2021)](...)" (a citation of one key);
    "FlashAttention (Dao et al., 2022) [(Dao et al., 2022)](...)" loses its spelled-out "(Dao et al., 2022)"."""
    out, last = "", 0
    for match in CITE.finditer(source):
        out += source[last:match.start()]
        last = match.end()
        keys = match["keys"]
        names, year = bib[keys][0].rsplit(", ", 1) if "," not in keys else (None, None)
        named = names and re.search(re.escape(names) + r"(?:'s|’s)?(?P<year> \(" + re.escape(year) + r"\))?\s*\Z",
                                    out)
        spelled = names and re.search(r" ?\(" + re.escape(f"{names}, {year}") + r"\)\s*\Z", out)
        if spelled:  # "FlashAttention (Dao et al., 2022) [(Dao et al., 2022)](...)": the link alone says it
            out = out[:spelled.start()] + " "
            out += match.group(0)
            continue
        if not named:
            out += match.group(0)
            continue
        if named["year"]:  # the sentence's own "(2021)" goes: the citation shows the year
            out = out[:named.start("year")] + out[named.end("year"):]
        out += year_only(keys, bib)
    return out + source[last:]


def admonitions(source: str) -> str:
    """Side notes fenced for MyST as blockquotes Jupyter renders: `> **Title.** text`."""
    def quote(match):
        title = match["title"].strip() or match["kind"].capitalize()
        text = match["text"].strip("\n")
        lines = f"**{title.rstrip('.')}.** {text}".split("\n")
        return "\n".join(f"> {line}".rstrip() for line in lines)

    return ADMONITION.sub(quote, source)


def convert_markdown(source: str, bib: dict, numbers: dict) -> str:
    """Citations, references, side notes and figures of a markdown cell in the Jupyter form (idempotent)."""
    source = admonitions(source)
    source = OLD_CITE.sub(lambda m: cite(m["keys"], bib), source)
    # refresh the text after a bib change; a year-only citation stays one
    source = CITE.sub(lambda m: (year_only if SHORT_CITE.match(m.group(0)) else cite)(m["keys"], bib), source)
    source = undouble(source, bib)

    def ref(match):
        if match["label"] not in numbers:
            raise KeyError(f"{{ref}}`{match['label']}` names no exercise of these notebooks")
        return f'[{numbers[match["label"]]}](#{match["label"]} "ref")'

    source = REF.sub(ref, OLD_REF.sub(ref, source))
    return OLD_FIGURE.sub(lambda m: f"](attachment:{m['name']})", source)


def convert(notebook, number: int, bib: dict, numbers: dict):
    """The notebook in the Jupyter form (see the module docstring); code cells untouched but for metadata."""
    cells, gate = [], None
    for cell in notebook.cells:
        if cell.cell_type == "code":
            if gate is not None:
                cell.metadata["solution"] = {"label": gate[0]}
                gate = (gate[0], True)
            cells.append(cell)
            continue
        if cell.cell_type != "markdown":
            cells.append(cell)
            continue
        stripped = cell.source.strip()
        if start := GATE_START.match(stripped):
            gate = (start["label"], False)
            continue
        if end := GATE_END.search(stripped):
            if gate is None or not gate[1]:
                raise ValueError("a {solution-end} without a {solution-start} and a code cell before it")
            if prose := stripped[:end.start()].strip():  # the solution's closing words, in its cell
                cells.append(nbformat.v4.new_markdown_cell(convert_markdown(prose, bib, numbers), id=cell.get("id"),
                                                           metadata={"solution": {"label": gate[0]}}))
            gate = None
            continue
        if gate is not None:  # prose inside a graded solution, after its code
            cell.source = convert_markdown(cell.source, bib, numbers)
            cell.metadata["solution"] = {"label": gate[0]}
            cells.append(cell)
            continue
        source = convert_markdown(cell.source, bib, numbers)
        if old := OLD_EXERCISE.match(source.strip()):
            options = dict(re.findall(r"^:([\w-]+):[ \t]*(.*)$", old["options"], re.M))
            if set(options) != {"label"}:
                raise ValueError(f"exercise options {sorted(options)}: only :label: is converted")
            cell.metadata["exercise"] = {"label": options["label"]}
            title, text = old["title"].strip() or None, old["text"].strip("\n")
        elif old := OLD_SOLUTION.match(source.strip()):
            options = dict(re.findall(r"^:([\w-]+):[ \t]*(.*)$", old["options"], re.M))
            if options not in ({"class": "dropdown"}, {}):
                raise ValueError(f"solution {old['label']!r} options {options}: only :class: dropdown is converted")
            cell.metadata["solution"] = {"label": old["label"]}
            title, text = None, old["text"].strip("\n")
        elif label_of(cell, "solution") and cells and label_of(cells[-1], "solution") == label_of(cell, "solution"):
            cell.source = source  # a graded solution's closing prose: no heading
            cells.append(cell)
            continue
        elif label_of(cell, "exercise") or label_of(cell, "solution"):
            title, text = split_heading(source)
        else:
            cell.source = source
            cells.append(cell)
            continue
        if label := label_of(cell, "exercise"):
            heading = f"**Exercise {numbers[label]}{' — ' + title if title else ''}**"
        else:
            heading = f"**Solution to Exercise {numbers[label_of(cell, 'solution')]}**"
        cell.source = f"{heading}\n\n{text}"
        cells.append(cell)
    if gate is not None:
        raise ValueError(f"solution {gate[0]!r} has no {{solution-end}} cell")
    notebook.cells = cells
    attach_figures(notebook, ROOT / "chapters" / "figures")
    return notebook


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--bib", type=Path, default=ROOT / "references.bib")
    args = parser.parse_args(argv)
    bib = references(args.bib)
    notebooks = {path: nbformat.read(path, as_version=4) for path in args.notebooks}
    numbers = {}
    for path, notebook in notebooks.items():
        numbers.update(exercise_labels(notebook, chapter_number(path)))
    for path, notebook in notebooks.items():
        before = nbformat.writes(notebook)
        codes = [(c.source, c.get("outputs")) for c in notebook.cells if c.cell_type == "code"]
        convert(notebook, chapter_number(path), bib, numbers)
        after = [(c.source, c.get("outputs")) for c in notebook.cells if c.cell_type == "code"]
        assert codes == after, f"{path}: converting changed a code cell"  # never: only metadata is added
        text = nbformat.writes(notebook)
        if text != before:
            path.write_text(text + "\n" if not text.endswith("\n") else text, encoding="utf-8")
        print(f"{path}: {'converted' if text != before else 'already in the Jupyter form'}", file=sys.stderr)


if __name__ == "__main__":
    main()
