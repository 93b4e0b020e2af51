"""Every chapter notebook is committed executed, Colab-ready and listed in the table of contents."""

import re
import unicodedata

import pytest
import yaml

from conftest import NOTEBOOKS, REPO_URL, ROOT, code_cells


def toc_files(entries):
    for entry in entries:
        if "file" in entry:
            yield entry["file"]
        yield from toc_files(entry.get("chapters", []) + entry.get("sections", []))


def test_toc_lists_every_chapter_and_nothing_missing():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = set(toc_files(toc["chapters"]))
    on_disk = {str(p.relative_to(ROOT).with_suffix("")) for p in NOTEBOOKS}
    assert listed == on_disk | {"references"}
    assert (ROOT / f"{toc['root']}.md").exists()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_executed_without_errors(path):
    cells = code_cells(path)
    counts = [c["execution_count"] for c in cells]
    assert None not in counts, f"{path.name}: unexecuted code cells"
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: not executed top to bottom in one run"
    errors = [o for c in cells for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, f"{path.name}: stored error output {errors[0].get('ename')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_ready(path):
    cells = code_cells(path)
    first = "".join(cells[0]["source"])
    assert 'if "google.colab" in sys.modules:' in first, "the first cell installs only inside Colab"
    assert f'BOOK = "{REPO_URL}"' in first and '%pip install -q "attention-book @ git+{BOOK}"' in first, \
        f"the install cell must use the repository URL of _config.yml, {REPO_URL}"
    sources = ["".join(c["source"]) for c in cells]
    assert not any("sys.path" in s for s in sources), "notebooks import the package, never edit sys.path"
    assert any("torch.__version__" in s for s in sources), "a cell prints the torch version"


# Rounding noise in a stored output: a float in scientific notation with a mantissa (1.3e-06, 9.93e-01)
# or a float with eight or more decimals (0.8017057180404663). A bound such as "below 1e-5" is fine.
ROUNDING_NOISE = re.compile(r"\d\.\d+e[-+]?\d+|\d\.\d{8,}")
# Cells whose output may differ between machines: they measure time or memory.
MEASUREMENTS = ("interleaved_medians", "interleaved_times", "measure_generation", "measure_peak_memory")


def text_outputs(cell):
    """The text a code cell printed or returned, as nbval compares it."""
    texts = []
    for output in cell["outputs"]:
        if output["output_type"] == "stream" and output["name"] == "stdout":
            texts.append("".join(output["text"]))
        elif "text/plain" in output.get("data", {}):
            texts.append("".join(output["data"]["text/plain"]))
    return "\n".join(texts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_print_no_rounding_noise(path):
    """Portable outputs (see `make portability`): digits float32 reproduces on any machine, bounds for noise."""
    for index, cell in enumerate(code_cells(path)):
        if "nbval-ignore-output" in cell["metadata"].get("tags", []):
            continue
        noise = ROUNDING_NOISE.findall(text_outputs(cell))
        assert not noise, f"{path.name}, code cell {index}: prints rounding noise {noise[:3]}; print 4 decimals " \
                          "or the bound the cell asserts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_ignored_only_where_they_measure(path):
    """nbval-ignore-output is for timing and memory cells; every other output is compared."""
    for index, cell in enumerate(code_cells(path)):
        if "nbval-ignore-output" in cell["metadata"].get("tags", []):
            source = "".join(cell["source"])
            assert any(name in source for name in MEASUREMENTS), \
                f"{path.name}, code cell {index}: nbval-ignore-output on a cell that measures nothing"
        assert not {"nbval-skip", "raises-exception"} & set(cell["metadata"].get("tags", [])), \
            f"{path.name}, code cell {index}: skipped by nbval"


def test_top_level_exports_exactly_what_the_chapters_call_as_ab():
    """The package's export rule (its docstring): `ab.<name>` in a chapter, and nothing else."""
    import attention_book

    used = {name for path in NOTEBOOKS for cell in code_cells(path)
            for name in re.findall(r"\bab\.(\w+)", "".join(cell["source"]))}
    assert set(attention_book.__all__) == used


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_warnings(path):
    """A warning on stderr carries a process id and a temporary path: it is noise, and no reader needs it."""
    for index, cell in enumerate(code_cells(path)):
        stderr = [o for o in cell["outputs"] if o["output_type"] == "stream" and o["name"] == "stderr"]
        assert not stderr, f"{path.name}, code cell {index}: stores stderr {''.join(stderr[0]['text'])[:200]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_has_alt_text(path):
    """Plots rendered from outputs carry a description (cell metadata mystnb.image.alt) for screen readers."""
    for index, cell in enumerate(code_cells(path)):
        if any("image/png" in o.get("data", {}) for o in cell["outputs"]):
            alt = cell["metadata"].get("mystnb", {}).get("image", {}).get("alt", "")
            assert len(alt.split()) >= 15, f"{path.name}, code cell {index}: a figure without alt text"


# Code that fits the page (issue 28): at a 1280-px window the article shows 79 columns of code and
# output (_static/code-width.css; tests/browser measures the rendered blocks). A CJK character takes
# two columns of a monospace font.
PAGE_COLUMNS = 79


def columns(line: str) -> int:
    """The width of `line` in a monospace font: East Asian wide and full-width characters count twice."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_and_outputs_fit_the_page(path):
    """No code line and no printed line is wider than the rendered article: a reader never scrolls sideways."""
    for index, cell in enumerate(code_cells(path)):
        for what, text in (("code", "".join(cell["source"])), ("output", text_outputs(cell))):
            wide = [line for line in text.splitlines() if columns(line) > PAGE_COLUMNS]
            assert not wide, f"{path.name}, code cell {index}: {len(wide)} {what} line(s) wider than " \
                             f"{PAGE_COLUMNS} columns, e.g. {wide[0]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_opening_import_cell_is_folded(path):
    """The long import cell a chapter opens with can be passed over: its source is folded, its output shown."""
    tags = code_cells(path)[1]["metadata"].get("tags", [])
    assert "hide-input" in tags, f"{path.name}: tag the import cell (code cell 1) hide-input"
