"""The book's drawn diagrams are what diagrams/draw.py draws: committed SVGs regenerate byte for byte."""

import subprocess
import sys

from conftest import ROOT


def test_committed_diagrams_are_the_scripts_output(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "diagrams" / "draw.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    drawn = {path.name: path.read_bytes() for path in tmp_path.glob("*.svg")}
    committed = {path.name: path.read_bytes() for path in (ROOT / "chapters" / "figures").glob("*.svg")}
    assert drawn.keys() == committed.keys()
    stale = [name for name in drawn if drawn[name] != committed[name]]
    assert not stale, f"re-run diagrams/draw.py: {stale} differ from what it draws"


def test_every_diagram_is_used_with_alt_text():
    """Each SVG appears in a chapter as ![alt text](figures/name.svg) with a real description."""
    import re

    from conftest import NOTEBOOKS

    text = "".join(path.read_text() for path in NOTEBOOKS)
    for path in (ROOT / "chapters" / "figures").glob("*.svg"):
        uses = re.findall(rf"!\[([^\]]*)\]\(figures/{re.escape(path.name)}\)", text)
        assert uses, f"{path.name} is not shown in any chapter"
        assert all(len(alt.split()) >= 15 for alt in uses), f"{path.name}: alt text too short"
