"""The book's drawn diagrams are what diagrams/draw.py draws (each chapter's from diagrams/chNN.py, on the shared
diagrams/primitives.py): committed SVGs regenerate byte for byte."""

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


def markdown_cells():
    import nbformat

    from conftest import NOTEBOOKS

    return [(path, cell) for path in NOTEBOOKS for cell in nbformat.read(path, as_version=4).cells
            if cell.cell_type == "markdown"]


def test_every_diagram_is_used_with_alt_text():
    """Each SVG appears in a chapter as ![alt text](attachment:name.svg) with a real description (issue 40:
    the notebook alone shows it; the book shows figures/name.svg, see _ext/notebook_form.py)."""
    import re

    text = "".join(cell.source for _, cell in markdown_cells())
    intro = (ROOT / "intro.md").read_text()  # the introduction's figures: a {figure} directive with :alt:
    for path in (ROOT / "chapters" / "figures").glob("*.svg"):
        uses = re.findall(rf"!\[([^\]]*)\]\(attachment:{re.escape(path.name)}\)", text)
        uses += re.findall(rf"```{{figure}} chapters/figures/{re.escape(path.name)}\n:alt: ([^\n]*)", intro)
        assert uses, f"{path.name} is not shown in any chapter"
        assert all(len(alt.split()) >= 15 for alt in uses), f"{path.name}: alt text too short"
    assert "](figures/" not in text, "a chapter shows a diagram by a relative path, which Colab cannot load"


def test_attached_diagrams_are_the_drawn_svgs_byte_for_byte():
    """Every attachment a chapter's markdown shows is stored in its cell and equals chapters/figures' SVG
    (diagrams/draw.py keeps them in sync)."""
    import base64
    import re

    for path, cell in markdown_cells():
        names = re.findall(r"\]\(attachment:([\w.-]+)\)", cell.source)
        attachments = cell.get("attachments", {})
        assert sorted(attachments) == sorted(set(names)), f"{path.name}: attachments {sorted(attachments)} " \
                                                           f"for the images {names}"
        for name in names:
            stored = base64.b64decode(attachments[name]["image/svg+xml"])
            drawn = (ROOT / "chapters" / "figures" / name).read_bytes()
            assert stored == drawn, f"{path.name}: attachment {name} is stale; run diagrams/draw.py"


def test_tile_schedule_draws_what_the_causal_mask_allows(monkeypatch):
    """Chapter 9's diagram classifies a tile as the loops of `tiled_attention` treat it: skipped where the
    causal mask blocks every score of the tile, masked where it blocks some, full where it blocks none; the
    backward's column walk starts at the first query block that sees the key block."""
    from attention_book.causal import causal_mask

    monkeypatch.syspath_prepend(str(ROOT / "diagrams"))  # chapter 9's drawings, as draw.py imports them
    import ch09 as draw
    for T, S, block_q, block_k in [(8, 8, 2, 2), (4, 8, 2, 2), (12, 16, 3, 4), (6, 6, 2, 3)]:
        allowed = causal_mask(T, S)  # (T, S), True = may attend
        for i0 in range(0, T, block_q):
            for j0 in range(0, S, block_k):
                tile = allowed[i0:i0 + block_q, j0:j0 + block_k]
                expected = draw.SKIPPED if not tile.any() else draw.FULL if tile.all() else draw.MASKED
                assert draw.tile_kind(i0, j0, block_q, block_k, S - T) == expected, (T, S, block_q, block_k, i0, j0)
