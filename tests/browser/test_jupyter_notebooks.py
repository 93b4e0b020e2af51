"""A student notebook as Jupyter shows it, in headless Chromium (issue 40): nbconvert's HTML of the
notebook alone (no MyST, no book, no internet), its math typeset by the local MathJax 3 as JupyterLab
does. Every diagram loads, every exercise is formatted text (no code block holding a directive), no math
is left as `$...$` text. The screenshot is kept in _build/screenshots/jupyter_student_NN_x.png.

Run with `make browser` (or `.venv/bin/python -m pytest tests/browser/test_jupyter_notebooks.py`).
"""

import re
import time
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter

from attention_book.course.notebooks import student_notebook
from test_rendered_pages import SCREENSHOTS, browser, full_page_screenshot, open_page  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
MATHJAX = next((ROOT / ".venv").glob("lib/python3*/site-packages/sphinx-mathjax-offline/static/mathjax/tex-chtml.js"),
               None)
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
# JupyterLab's MathJax 3 settings: $...$ and $$...$$, escapes processed.
MATHJAX_CONFIG = """<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']],
displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true, processEnvironments: true}};</script>
<script src="%s"></script>"""


def jupyter_html(notebook: nbformat.NotebookNode) -> str:
    """nbconvert's lab HTML, with the CDN MathJax 2 replaced by the local MathJax 3 (no internet)."""
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook)
    body = re.sub(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->",
                  lambda _: MATHJAX_CONFIG % MATHJAX.as_uri(), body, count=1, flags=re.S)
    return re.sub(r'<script src="https://[^"]*"></script>', "", body)  # require.js and the like: offline


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_student_notebook_as_jupyter_shows_it(browser, path, tmp_path):  # noqa: F811 (fixture)
    if MATHJAX is None:
        pytest.fail("sphinx-mathjax-offline's MathJax is missing from .venv: make install")
    html_path = tmp_path / f"{path.stem}.html"
    html_path.write_text(jupyter_html(student_notebook(nbformat.read(path, as_version=4))))
    page = open_page(browser, html_path.as_uri())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not page.evaluate(
            "!!(window.MathJax && MathJax.startup && MathJax.startup.promise) && "
            "document.querySelectorAll('mjx-container').length > 0"):
        time.sleep(0.5)
    page.evaluate("MathJax.startup.promise.then(() => true)")
    state = page.evaluate("""(() => {
        const md = [...document.querySelectorAll('.jp-MarkdownCell .jp-RenderedMarkdown')];
        const images = md.flatMap(c => [...c.querySelectorAll('img')]);
        const text = md.map(c => { const copy = c.cloneNode(true);
            copy.querySelectorAll('mjx-container, code, pre').forEach(n => n.remove()); return copy.innerText; });
        return {broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt.slice(0, 60)),
                images: images.length, math: document.querySelectorAll('mjx-container').length,
                errors: document.querySelectorAll('mjx-merror').length,
                exercises: md.filter(c => /^Exercise \\d+\\.\\d+/.test(c.innerText.trim())).length,
                raw: text.flatMap((t, i) => /\\$[^$\\n]+\\$|\\{[a-z-]+\\}`?|^:label:/m.test(t) ? [i] : [])};
    })()""")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / f"jupyter_student_{path.stem}.png").write_bytes(full_page_screenshot(page, width=1100))
    assert not state["broken"], f"{path.name}: diagrams that do not load: {state['broken']}"
    assert state["math"] > 0 and not state["errors"], f"{path.name}: MathJax typeset {state}"
    assert state["exercises"] >= 3, f"{path.name}: {state['exercises']} exercises shown as formatted text"
    assert not state["raw"], f"{path.name}: markdown cells {state['raw']} (of the rendered ones) show raw " \
                             "math or MyST"
