"""The print edition (`make pdf`, README "A print edition"): the PDF that pdf/build.py wrote, with its LaTeX log.

Run by `make pdf` (and `make pdf-test`) after the build; PDF_BOOK names the book folder (default: the
repository; `make pdf-student` passes the student edition's). Needs poppler-utils (pdfinfo, pdftotext,
pdfimages), which `make pdf-deps` installs.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

BOOK = Path(os.environ.get("PDF_BOOK", Path(__file__).resolve().parent.parent)).resolve()
PDF = BOOK / "_build" / "pdf" / "attention-from-scratch.pdf"
LOG = PDF.with_suffix(".log")

PAGES = range(100, 400)  # 159 pages on 24 Nov 2026 (nine chapters); the twelve-chapter book stays inside
OVERFULL_BUDGET = 10  # overfull boxes that show: every hbox, and a vbox more than VBOX_SLACK too tall
VBOX_SLACK = 3.0  # points: a figure at a page's foot up to this much too tall does not show (13 such with 12 chapters)
MARGIN_TOLERANCE = 1.0  # points beyond the text area's right edge that a word's box may reach
# What attention_book.interactive's outputs say about their controls (their text and HTML forms). The
# chapters' own prose introducing each figure is the chapters' (it names the keys, too).
KEYBOARD_HINTS = ("Interactive where scripts run", "Enter pins it", "hover a query token to see its row")


def run(*command: str) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def pdf() -> Path:
    assert PDF.is_file(), f"no PDF at {PDF}: run `make pdf` first"
    return PDF


@pytest.fixture(scope="module")
def text(pdf) -> str:
    """The PDF's words, whitespace collapsed (lines broken anywhere)."""
    return " ".join(run("pdftotext", str(pdf), "-").split())


@pytest.fixture(scope="module")
def log(pdf) -> str:
    return LOG.read_text(errors="replace")


def chapter_sources() -> list[Path]:
    """The book's pages in _toc.yml's order (root first), whatever the chapters are."""
    toc = yaml.safe_load((BOOK / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            for part in entry.get("parts", []):
                walk(part.get("chapters"))

    walk(toc.get("chapters"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    found = []
    for name in files:
        candidates = [BOOK / f"{name}{suffix}" for suffix in (".ipynb", ".md", "")]
        found.append(next(path for path in candidates if path.is_file()))
    return found


def markdown_cells(path: Path) -> list[dict]:
    if path.suffix == ".ipynb":
        return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "markdown"]
    return [{"source": path.read_text(), "metadata": {}}]


def source_text(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def title(path: Path) -> str:
    for cell in markdown_cells(path):
        for line in source_text(cell).splitlines():
            if line.startswith("# "):
                return re.sub(r"^\d+\.\s+", "", line[2:].strip())
    raise AssertionError(f"{path}: no '# ' title")


def test_page_count(pdf):
    pages = int(re.search(r"^Pages:\s+(\d+)", run("pdfinfo", str(pdf)), re.M).group(1))
    assert pages in PAGES, f"{pages} pages, expected {PAGES.start} to {PAGES.stop - 1}"


def test_log_has_no_missing_characters(log):
    missing = sorted(set(re.findall(r"Missing character: There is no (.+?) in font ([^!\n]+)", log)))
    assert not missing, f"characters no font has (add them to pdf/attentionbook.sty): {missing}"


def test_log_overfull_boxes_within_budget(log):
    boxes = re.findall(r"^Overfull \\([hv])box \(([\d.]+)pt too \w+\).*$", log, re.M)
    assert len(boxes) == len(re.findall(r"^Overfull ", log, re.M)), "an overfull line of another form"
    showing = [f"{kind}box {points} pt" for kind, points in boxes if kind == "h" or float(points) > VBOX_SLACK]
    assert len(showing) <= OVERFULL_BUDGET, "\n".join(showing)


def test_log_references_resolved(log):
    undefined = re.findall(r"LaTeX Warning: (?:Reference|Citation|Hyper reference) .* undefined.*", log)
    assert not undefined, "\n".join(undefined)


def test_every_chapter_once_and_numbered_once(text):
    sources = chapter_sources()
    for path in sources[1:]:
        name = title(path)
        assert name.lower() in text.lower(), f"chapter {path.name}'s title {name!r} is not in the PDF"
    assert "Introduction" in text
    doubled = re.findall(r"Chapter (\d+)\.\s+\1\.", text)
    assert not doubled, f"chapters numbered twice: {doubled}"


def svg_figures(path: Path) -> tuple[set, int]:
    """The SVG files a page's markdown names, and how many SVG attachments its cells hold."""
    names, attachments = set(), 0
    for cell in markdown_cells(path):
        names |= set(re.findall(r"([\w.-]+)\.svg\b", source_text(cell) + json.dumps(cell.get("metadata", {}))))
        attachments += sum("image/svg+xml" in bundle for bundle in cell.get("attachments", {}).values())
    return names, attachments


def test_every_figure_in_the_pdf(pdf, log):
    """Notebook PNG outputs are the PDF's raster images; each SVG diagram was converted and embedded as a
    vector PDF (xdvipdfmx logs each file it embeds as <use NAME.pdf>)."""
    sources = chapter_sources()
    pngs = sum("image/png" in output.get("data", {})
               for path in sources if path.suffix == ".ipynb"
               for cell in json.loads(path.read_text())["cells"] for output in cell.get("outputs", []))
    images = [row for row in run("pdfimages", "-list", str(pdf)).splitlines()[2:] if row.split()[2] == "image"]
    assert len(images) == pngs, f"{len(images)} raster images in the PDF, {pngs} PNG outputs in the notebooks"
    embedded = set(re.findall(r"<use ([^>]+)\.pdf>", log))
    names, attachments = set(), 0
    for path in sources:
        found, count = svg_figures(path)
        names |= found
        attachments += count
    assert names or attachments, "no SVG diagram found in the sources: is the check still looking right?"
    assert names <= embedded, f"SVG diagrams not embedded as vector PDFs: {sorted(names - embedded)}"
    # a diagram is a markdown image and, in the Jupyter form, also its cell's attachment of the same name
    assert len(embedded) >= max(len(names), attachments), (len(embedded), len(names), attachments)


def test_nothing_beyond_the_right_margin(pdf):
    """Every word's box ends inside the text area (pdf/_config.yml: 2.2 cm side margins)."""
    layout = run("pdftotext", "-bbox", str(pdf), "-")
    page_width = float(re.search(r'<page width="([\d.]+)"', layout).group(1))
    right = page_width - 2.2 / 2.54 * 72 + MARGIN_TOLERANCE
    beyond = []
    for page_number, page in enumerate(layout.split("<page ")[1:], start=1):
        for x_max, word in re.findall(r'<word xMin="[\d.]+" yMin="[\d.]+" xMax="([\d.]+)" yMax="[\d.]+">([^<]*)</word>', page):
            if float(x_max) > right:
                beyond.append(f"page {page_number}: {word!r} ends at {float(x_max):.1f} pt > {right:.1f}")
    assert not beyond, "\n".join(beyond[:20])


def test_interactive_figures_print_no_keyboard_instructions(text):
    hints = [hint for hint in KEYBOARD_HINTS if hint in text]
    assert not hints, f"an interactive figure's instructions reached the PDF: {hints}"
    assert "The online book has this figure to explore interactively" in text


def test_solutions_gathered_at_each_chapters_end(text):
    """Each solution follows the chapter's "Solutions" heading (none in the student edition's PDF)."""
    solutions = [match.start() for match in re.finditer(r"Solution to Exercise", text)]
    if not solutions:
        assert (BOOK / "_toc.yml").is_file()
        student = "solution" not in "".join(source_text(cell) for path in chapter_sources()
                                           for cell in markdown_cells(path)).lower()
        assert student, "the sources have solutions, the PDF none"
        return
    headings = [match.start() for match in re.finditer(r"\bSolutions\b", text)]
    for position in solutions:
        before = [h for h in headings if h < position]
        assert before, "a solution before any Solutions heading"
