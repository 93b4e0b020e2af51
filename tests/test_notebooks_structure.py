"""Every chapter notebook is committed executed, Colab-ready and listed in the table of contents."""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


def toc_files(entries):
    for entry in entries:
        if "file" in entry:
            yield entry["file"]
        yield from toc_files(entry.get("chapters", []) + entry.get("sections", []))


def code_cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def test_toc_lists_every_chapter_and_nothing_missing():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = set(toc_files(toc["chapters"]))
    on_disk = {str(p.relative_to(ROOT).with_suffix("")) for p in NOTEBOOKS}
    assert listed == on_disk
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
    assert re.search(rf'%pip install -q "attention-book @ git\+{re.escape(REPO_URL)}"', first), \
        f"the install cell must use the repository URL of _config.yml, {REPO_URL}"
    sources = ["".join(c["source"]) for c in cells]
    assert not any("sys.path" in s for s in sources), "notebooks import the package, never edit sys.path"
    assert any("torch.__version__" in s for s in sources), "a cell prints the torch version"
