"""Colab end to end: every chapter's install cell, run against a clone standing in for the remote, installs
the package alone (torch and TensorFlow stay as they are) and gives a working import (issue 9)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import NOTEBOOKS, REPO_URL, ROOT, code_cells

# The cell names the repository once (BOOK = "...") and installs from it with IPython's {BOOK} expansion,
# so that its lines fit the page.
INSTALL = re.compile(r'BOOK = "(\S+)"\n.*\n    %pip install -q "attention-book @ git\+\{BOOK\}"')


def install_requirements() -> dict[str, str]:
    """Notebook name -> the requirement its Colab cell installs."""
    found = {}
    for path in NOTEBOOKS:
        match = INSTALL.search("".join(code_cells(path)[0]["source"]))
        assert match, f"{path.name}: no install cell"
        assert match.group(1) == REPO_URL, f"{path.name} installs from {match.group(1)}, not {REPO_URL}"
        found[path.name] = f"attention-book @ git+{match.group(1)}"
    return found


@pytest.fixture(scope="module")
def remote(tmp_path_factory) -> str:
    """A clone of this repository's committed state, as a git URL."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.fail("the Colab test needs the repository's git history (run it from a clone)")
    clone = tmp_path_factory.mktemp("remote") / "attention-book"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    return f"git+file://{clone}"


def pip(*args, cwd=None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stderr[-3000:]}"
    return done


def test_every_install_cell_installs_only_the_package(remote, tmp_path):
    """In an environment that already has torch and TensorFlow (as Colab does), pip adds the package only."""
    requirements = {req.replace(f"git+{REPO_URL}", remote) for req in install_requirements().values()}
    assert len(requirements) == 1, f"the chapters install different things: {requirements}"
    report = tmp_path / "report.json"
    pip("install", "--dry-run", "--quiet", "--report", str(report), *requirements)
    installs = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert installs == ["attention-book"], f"installing the package would also install {installs}"


def test_installed_package_imports_and_has_its_data(remote, tmp_path):
    """Installed from the git URL (not this checkout), the package imports and finds its stored results."""
    site = tmp_path / "site"
    pip("install", "--quiet", "--no-deps", "--target", str(site), f"attention-book @ {remote}")
    check = ("import attention_book, torch; from attention_book.measure import load_result; "
             "print(attention_book.__file__); print(len(load_result('kv_cache_cpu')['seconds_per_step']['cached']))")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    where, steps = done.stdout.split()
    assert Path(where).is_relative_to(site), f"imported {where}, not the installed copy"
    assert int(steps) == 1024
