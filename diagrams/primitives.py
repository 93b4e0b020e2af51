"""The drawing primitives every diagram of the book shares (diagrams/draw.py draws them all): one palette,
boxes, arrows and text on an axes of one data unit per inch, a layout check, and deterministic SVG output."""

from itertools import combinations
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed; SVGs are written by the SVG backend all the same

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

plt.rcParams["svg.hashsalt"] = "attention-book"  # stable ids for clip paths and hatches
plt.rcParams["hatch.linewidth"] = 0.8

FIGURES = Path(__file__).resolve().parent.parent / "chapters" / "figures"

# One palette for every diagram: blues for queries, oranges for keys and values, grey for what is
# blocked or skipped, neutral greys for other tensors and for layers with stored weights.
INK = "#252525"
MUTED = "#525252"
STYLES = {
    "query": dict(facecolor="#c6dbef", edgecolor="#2171b5"),
    "query_strong": dict(facecolor="#6baed6", edgecolor="#08519c"),
    "key": dict(facecolor="#fdd0a2", edgecolor="#d94801"),
    "key_pale": dict(facecolor="#fff1e4", edgecolor="#f0a56b"),
    "key_strong": dict(facecolor="#fd8d3c", edgecolor="#a63603"),
    "tensor": dict(facecolor="#f0f0f0", edgecolor=MUTED),
    "layer": dict(facecolor="white", edgecolor=MUTED),
    "blocked": dict(facecolor="#e8e8e8", edgecolor="#9a9a9a", hatch="///"),
    "masked_out": dict(facecolor="white", edgecolor="#9ecae1", hatch="xx"),
    "empty": dict(facecolor="white", edgecolor="#9a9a9a", linestyle=(0, (3, 2))),
}
DIAGONAL = "#cb181d"  # the causal diagonal of chapter 8's tiles, the one accent colour
FONT = 11  # body text and titles; nothing is smaller than SMALL
SMALL = 10


def new_figure(width: float, height: float, bottom: float = 0.0):
    """A figure of width x height inches whose single, invisible axes uses inches as data units.

    `bottom` is the y coordinate of the figure's lower edge (negative to add a margin below y = 0).
    """
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(bottom, bottom + height)
    ax.set_axis_off()
    return fig, ax


def text(ax, x, y, label, size=FONT, **kwargs):
    """Text centred at (x, y) unless told otherwise, in the diagrams' ink colour."""
    kwargs.setdefault("ha", "center")
    kwargs.setdefault("va", "center")
    kwargs.setdefault("color", INK)
    return ax.text(x, y, label, fontsize=size, **kwargs)


def box(ax, cx, cy, w, h, label="", style="tensor", size=FONT, rounded=True, linewidth=1.2, **text_kwargs):
    """A box of the palette's `style` centred at (cx, cy) with a centred (possibly multi-line) label."""
    props = dict(STYLES[style])
    props["linewidth"] = linewidth
    shape = "round,pad=0,rounding_size=0.08" if rounded else "square,pad=0"
    ax.add_patch(FancyBboxPatch((cx - w / 2, cy - h / 2), w, h, boxstyle=shape, **props))
    if label:
        text(ax, cx, cy, label, size=size, linespacing=1.35, **text_kwargs)
    return cx, cy, w, h


def arrow(ax, start, end, label=None, side="right", offset=0.08, size=SMALL, **text_kwargs):
    """A straight arrow from `start` to `end`; `label` beside its midpoint, on `side`, `offset` inches away."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>,head_length=6,head_width=3.5", mutation_scale=1,
                                 color=MUTED, linewidth=1.3, shrinkA=0, shrinkB=0))
    if label:
        x, y = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        dx, dy = {"right": (offset, 0), "left": (-offset, 0), "above": (0, offset), "below": (0, -offset)}[side]
        ha = {"right": "left", "left": "right"}.get(side, "center")
        va = {"above": "bottom", "below": "top"}.get(side, "center")
        text(ax, x + dx, y + dy, label, size=size, ha=ha, va=va, linespacing=1.3, **text_kwargs)


def cell_grid(ax, x0, y_top, rows, cols, cell, style_of, linewidth=0.9, cell_h=None):
    """A rows x cols grid of cells, top-left corner at (x0, y_top); row 0 on top, column 0 on the left.

    Cells are `cell` wide and `cell_h` high (square unless told). `style_of(i, j)` names the palette style of
    cell (i, j). Returns a function giving a cell's centre.
    """
    cell_h = cell if cell_h is None else cell_h
    for i in range(rows):
        for j in range(cols):
            props = dict(STYLES[style_of(i, j)])
            ax.add_patch(Rectangle((x0 + j * cell, y_top - (i + 1) * cell_h), cell, cell_h, linewidth=linewidth,
                                   **props))
    return lambda i, j: (x0 + (j + 0.5) * cell, y_top - (i + 0.5) * cell_h)


def legend_item(ax, x, y, style, label, w=0.42, h=0.26, size=SMALL, **box_kwargs):
    """A small swatch of `style` at (x, y) (its left edge) with `label` to its right; returns the label's end."""
    box(ax, x + w / 2, y, w, h, style=style, rounded=False, **box_kwargs)
    return text(ax, x + w + 0.1, y, label, size=size, ha="left")


def check_layout(fig):
    """Fail if any text sticks out of the figure or overlaps another text (a reader could not read it)."""
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    boxes = []
    for t in fig.findobj(matplotlib.text.Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        bb = t.get_window_extent(renderer)
        if bb.x0 < canvas.x0 - 0.5 or bb.y0 < canvas.y0 - 0.5 or bb.x1 > canvas.x1 + 0.5 or bb.y1 > canvas.y1 + 0.5:
            raise AssertionError(f"text {t.get_text()!r} is clipped by the figure's edge")
        boxes.append((t.get_text(), bb))
    for (a, bb_a), (b, bb_b) in combinations(boxes, 2):
        if bb_a.overlaps(bb_b):
            raise AssertionError(f"texts {a!r} and {b!r} overlap")


def save(fig, name: str, png_dir: Path | None = None):
    """Write <output>/<name>.svg (deterministically) and, if asked, a PNG copy to look at."""
    check_layout(fig)
    output = Path(plt.rcParams["savefig.directory"] or FIGURES)
    output.mkdir(parents=True, exist_ok=True)
    fig.savefig(output / f"{name}.svg", format="svg", metadata={"Date": None})
    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(png_dir / f"{name}.png", format="png", dpi=150, metadata={"Software": None})
    plt.close(fig)


def outline(ax, x0, y_top, w, h, linewidth=1.2):
    """A dark frame around a grid of cells, so that one tensor (or one head) reads as one block."""
    ax.add_patch(Rectangle((x0, y_top - h), w, h, fill=False, edgecolor=INK, linewidth=linewidth))
