"""Every chapter and every student notebook reads right as Jupyter and Colab show it (issue 40): rendered
with nbconvert's HTML exporter (no MyST, no internet), no markdown cell shows a raw MyST directive or role,
a broken image (a relative path, an attachment not stored) or math that MathJax would not typeset (math
the markdown renderer mangled, or math inside a code block)."""

import html
import re

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert import HTMLExporter

from attention_book.course.notebooks import student_notebook
from conftest import NOTEBOOKS

# What MyST would have turned into something else, seen as text in Jupyter.
RAW_MYST = [
    (re.compile(r"\{[a-z][\w:-]*\}`"), "a MyST role such as {cite}`...` or {ref}`...`"),  # in code, text
    (re.compile(r"^\s*[`:]{3,}\s*\{[\w-]+\}", re.M), "a MyST directive fence"),
    (re.compile(r"^:(label|class|name|width|align):", re.M), "a directive option line"),
]
# A citation after a sentence that has just named its authors reads twice in Jupyter:
# "Britz et al. (Britz et al., 2017)"; the Jupyter form keeps only the year there (scripts/colab_markdown.py).
DOUBLED_CITATION = re.compile(r"\b(?P<names>[A-Z][\w-]+(?: et al\.| and [A-Z][\w-]+)?)(?:'s|’s)?"
                              r" (?:\(\d{4}[a-z]?\) )?\((?P=names), \d{4}"
                              r"|\((?P<cited>[A-Z][^()]*?, \d{4}[a-z]?)\) \((?P=cited)\)")
MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?!\$)[^$\n]+?(?<!\\)\$", re.S)
# Code in the markdown source, where `$` is no math; a fence of a MyST directive (```{exercise}) counts
# as text here, so that the math Jupyter would show raw inside it is found.
CODE = re.compile(r"^(`{3,}|~{3,})(?![`~]*\{).*?^\1|`[^`\n]*`", re.S | re.M)


def rendered_markdown(notebook: nbformat.NotebookNode) -> list[tuple[int, BeautifulSoup]]:
    """(cell index, the rendered HTML of that markdown cell) as nbconvert's lab template writes them."""
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook)
    soup = BeautifulSoup(body, "html.parser")
    rendered = soup.select("div.jp-MarkdownCell div.jp-RenderedMarkdown")
    indices = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "markdown"]
    assert len(rendered) == len(indices), "nbconvert rendered another number of markdown cells"
    return list(zip(indices, rendered, strict=True))


def problems(notebook: nbformat.NotebookNode) -> list[str]:
    from nbconvert.filters.markdown_mistune import InvalidNotebook

    found = []
    try:
        cells = rendered_markdown(notebook)
    except InvalidNotebook as error:  # an image shown as attachment:name that the cell does not store
        return [f"nbconvert cannot render it: {error}"]
    for index, rendered in cells:
        source = notebook.cells[index].source
        text = rendered.get_text()
        for pattern, what in RAW_MYST:
            if match := pattern.search(text):
                found.append(f"cell {index}: {what}: {match.group(0)!r}")
        if match := DOUBLED_CITATION.search(" ".join(text.split())):
            found.append(f"cell {index}: a citation names its authors twice: {match.group(0)!r}")
        if match := re.search(r"\{[a-z][\w:-]*\}<code>", str(rendered)):
            found.append(f"cell {index}: a MyST role such as {{cite}}`...`: {match.group(0)!r}")
        for code in rendered.select("pre, code"):
            if re.match(r"\s*\{[\w-]+\}", code.get_text()) or "language-{" in str(code.get("class", "")):
                found.append(f"cell {index}: a MyST directive rendered as code: {code.get_text()[:60]!r}")
        for image in rendered.select("img"):
            src = image.get("src", "")
            if not src.startswith("data:"):
                found.append(f"cell {index}: image {src[:60]!r} does not load from the notebook alone")
            if not image.get("alt"):
                found.append(f"cell {index}: an image without alt text")
        outside_code = html.unescape(str(_without_code(rendered)))
        for math in MATH.findall(CODE.sub("", source)):
            if html.unescape(math) not in outside_code:
                found.append(f"cell {index}: math {math[:60]!r} is not left intact for MathJax")
    return found


def _without_code(rendered):
    copy = BeautifulSoup(str(rendered), "html.parser")
    for code in copy.select("pre, code"):
        code.decompose()
    return copy


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_renders_in_jupyter(path):
    found = problems(nbformat.read(path, as_version=4))
    assert not found, f"{path.name} as Jupyter shows it:\n" + "\n".join(found[:20])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_student_notebook_renders_in_jupyter(path):
    found = problems(student_notebook(nbformat.read(path, as_version=4)))
    assert not found, f"the student {path.name} as Jupyter shows it:\n" + "\n".join(found[:20])


def test_the_checks_catch_what_jupyter_showed_before_issue_40():
    """The MyST form the chapters had: each of its failures is found."""
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("````{exercise} T\n:label: ch5-x\n\nWrite $f(x)$.\n````"),
        nbformat.v4.new_markdown_cell("As shown by {cite}`vaswani2017`."),
        nbformat.v4.new_markdown_cell("![a diagram](figures/x.svg)"),
        nbformat.v4.new_markdown_cell("Fine: $a_1 * b_2 * c$ and $$\\sum_i x_i$$ render."),
        nbformat.v4.new_markdown_cell('Britz et al. [(Britz et al., 2017)](https://a.b "cite:britz2017") found it.'),
        nbformat.v4.new_markdown_cell('Britz et al. [(2017)](https://a.b "cite:britz2017") found it.'),
        nbformat.v4.new_markdown_cell("```{admonition} Side note\nText.\n```"),
        nbformat.v4.new_markdown_cell('Flash (Dao et al., 2022) [(Dao et al., 2022)](https://a.b "cite:dao2022").')])
    found = "\n".join(problems(notebook))
    assert "cell 0: a MyST directive" in found and "cell 0: math '$f(x)$'" in found
    assert "cell 1: a MyST role" in found
    assert "cell 2: image 'figures/x.svg'" in found
    assert "cell 3" not in found
    assert "cell 4: a citation names its authors twice: 'Britz et al. (Britz et al., 2017'" in found
    assert "cell 5" not in found
    assert "cell 6: a MyST directive" in found
    assert "cell 7: a citation names its authors twice: '(Dao et al., 2022) (Dao et al., 2022)'" in found
    missing = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("![a diagram](attachment:x.svg)")])
    assert problems(missing) == ["nbconvert cannot render it: missing attachment: x.svg"]
