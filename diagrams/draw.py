"""Explanatory diagrams for chapters 5-8 of "Attention from scratch", drawn with matplotlib.

Writes one SVG per diagram into chapters/figures/:

    causal_mask_alignments.svg  (chapter 5)  is_causal=True (top-left) against causal_mask(T, S) (bottom-right)
    keras_decoder_flow.svg      (chapter 6)  the Keras decoder's data flow, with the saved weights' h5 names
    kv_cache_decode_step.svg    (chapter 7)  one decode step: what is computed, what is read from the cache
    tile_schedule.svg           (chapter 8)  which tiles tiled attention computes fully, masks or skips

Run from the repository root:

    .venv/bin/python diagrams/draw.py                        # the SVGs only
    .venv/bin/python diagrams/draw.py --png-dir /tmp/diagrams  # and a PNG copy of each, to look at

The SVGs are byte-for-byte the same on every run (fixed hash salt, no date, no randomness), so a diff
shows only real changes. Every diagram is drawn on an axes that fills the figure with one data unit per
inch, so positions and sizes below are in inches. Before saving, `check_layout` fails if any text leaves
the figure or overlaps other text.
"""

import argparse
from itertools import combinations
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed; SVGs are written by the SVG backend all the same

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import patheffects  # noqa: E402
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


# ----------------------------------------------------------------------------------------------------
# Shared helpers


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


def cell_grid(ax, x0, y_top, rows, cols, cell, style_of, linewidth=0.9):
    """A rows x cols grid of square cells, top-left corner at (x0, y_top); row 0 on top, column 0 on the left.

    `style_of(i, j)` names the palette style of cell (i, j). Returns a function giving a cell's centre.
    """
    for i in range(rows):
        for j in range(cols):
            props = dict(STYLES[style_of(i, j)])
            ax.add_patch(Rectangle((x0 + j * cell, y_top - (i + 1) * cell), cell, cell, linewidth=linewidth,
                                   **props))
    return lambda i, j: (x0 + (j + 0.5) * cell, y_top - (i + 0.5) * cell)


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


# ----------------------------------------------------------------------------------------------------
# Chapter 5


def _mask_panel(ax, x0, y_top, T, S, cell, title, subtitle, bottom_right, row_note=None):
    """One causal mask of T queries by S keys: title above, key numbers on top, query numbers at the left."""
    offset = S - T if bottom_right else 0
    at = cell_grid(ax, x0, y_top, T, S, cell, lambda i, j: "query" if j <= offset + i else "blocked")
    width = S * cell
    text(ax, x0 + width / 2, y_top + 0.85, title, size=FONT, weight="bold")
    text(ax, x0 + width / 2, y_top + 0.55, subtitle, size=SMALL, color=MUTED)
    for j in range(S):
        text(ax, *at(-1, j), str(j), size=SMALL, color=MUTED)  # a row above the grid
    for i in range(T):
        label = str(i) if row_note is None else f"{i}  {row_note(i)}"
        text(ax, x0 - 0.12, at(i, 0)[1], label, size=SMALL, color=MUTED, ha="right")
    return at


def causal_mask_alignments(png_dir=None):
    """Chapter 5: with T < S, is_causal=True aligns the triangle top-left, causal_mask(T, S) bottom-right."""
    fig, ax = new_figure(10.0, 4.15)
    T, S, cell, top = 2, 6, 0.4, 2.95
    panels = (
        (0.95, "is_causal=True  (top-left)", "query i sees keys 0 … i", False, None,
         "T = 2 queries, S = 6 keys"),
        (4.85, "causal_mask(T, S)  (bottom-right)", "query i sees keys 0 … S − T + i", True,
         lambda i: f"(position {S - T + i})", "the queries are the last T positions"),
    )
    for x0, title, subtitle, bottom_right, note, caption in panels:
        at = _mask_panel(ax, x0, top, T, S, cell, title, subtitle, bottom_right, note)
        text(ax, x0 + S * cell / 2, top - T * cell - 0.25, "key j", size=SMALL, color=MUTED)
        text(ax, x0 - 0.12, at(-1, 0)[1], "key j →", size=SMALL, color=MUTED, ha="right")
        text(ax, x0 - 0.12, at(T, 0)[1] + 0.05, "query i ↑", size=SMALL, color=MUTED, ha="right")
        text(ax, x0 + S * cell / 2, top - T * cell - 0.58, caption, size=SMALL)

    # T = S: both alignments give the same triangle.
    small, x_eq = 0.25, 8.3
    at = _mask_panel(ax, x_eq, top, S, S, small, "T = S = 6", "both give this", True)
    text(ax, x_eq + S * small / 2, top - S * small - 0.2, "key j", size=SMALL, color=MUTED)
    text(ax, x_eq - 0.12, at(-1, 0)[1], "j", size=SMALL, color=MUTED, ha="right")

    legend_item(ax, 0.3, 0.95, "query", "may attend")
    legend_item(ax, 2.1, 0.95, "blocked", "blocked (score set to −∞)")
    text(ax, 0.3, 0.38, "The two agree only when T = S. With fewer queries than keys (a KV cache, chapter 7), "
         "is_causal=True blocks keys\nthat the queries may see; causal_mask(T, S) puts query i at position "
         "S − T + i, where the cache's queries are.", size=SMALL, ha="left", linespacing=1.4)
    save(fig, "causal_mask_alignments", png_dir)


# ----------------------------------------------------------------------------------------------------
# Chapter 6


def keras_decoder_flow(png_dir=None):
    """Chapter 6: the Keras decoder's forward pass, every tensor's shape and every stored weight's h5 name."""
    fig, ax = new_figure(10.0, 10.2, bottom=-0.2)
    cx, th = 5.0, 0.44  # the main column and the height of a tensor's box

    def layer(x, y, w, lines):
        """A layer with stored weights: a white, square box; first line (its name) in bold."""
        h = 0.2 + 0.245 * len(lines)
        box(ax, x, y, w, h, style="layer", rounded=False)
        for k, line in enumerate(lines):
            text(ax, x, y + 0.245 * ((len(lines) - 1) / 2 - k), line, size=SMALL, weight="bold" if k == 0 else None)
        return h / 2  # half height, for the arrows

    text(ax, 0.3, 9.72, "Chapter 6's decoder: B batch, T tokens, E = 64, H = 2 heads, d_k = 64, V = 6 tokens (5 characters, padding)",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.3, 9.42, "White boxes are layers, listing their arrays in decoder.weights.h5; "
         "the attention's four sit under layers/multi_head_attention/", size=SMALL, ha="left", color=MUTED)

    box(ax, cx, 8.85, 3.2, th, "tokens  (B, T)")
    half = layer(cx, 8.0, 3.9, ["Embedding: one row per token", "layers/embedding/vars/0  (V, E) = (6, 64)"])
    arrow(ax, (cx, 8.85 - th / 2), (cx, 8.0 + half))
    y_x = 7.15
    arrow(ax, (cx, 8.0 - half), (cx, y_x + th / 2))
    box(ax, cx, y_x, 3.2, th, "x  (B, T, E = 64)")

    # Three projections side by side: Keras keeps the head axis in the kernel.
    y_layer, y_qkv = 6.1, 5.05
    cols = {"Q": (1.75, "query", "query"), "K": (5.0, "key", "key"), "V": (8.25, "value", "key")}
    for letter, (x, name, style) in cols.items():
        half = layer(x, y_layer, 3.05, [f"{name}_dense", "vars/0 kernel (E, H, d_k) = (64, 2, 64)",
                                        "vars/1 bias (H, d_k) = (2, 64)"])
        arrow(ax, (cx + (x - cx) * 0.4, y_x - th / 2), (x, y_layer + half))
        arrow(ax, (x, y_layer - half), (x, y_qkv + th / 2))
        box(ax, x, y_qkv, 2.75, th, f"{letter}  (B, H = 2, T, d_k = 64)", style=style)

    # Scores from Q and K, plus the causal mask, drawn as in chapter 5.
    x_s, y_s, y_w, y_c = 3.35, 3.95, 2.95, 1.95
    arrow(ax, (1.75, y_qkv - th / 2), (x_s - 0.6, y_s + th / 2))
    arrow(ax, (5.0, y_qkv - th / 2), (x_s + 0.6, y_s + th / 2))
    text(ax, x_s, 4.5, "Q Kᵀ / √64", size=SMALL)
    box(ax, x_s, y_s, 2.5, th, "scores  (B, H, T, T)")
    cell = 0.13
    cell_grid(ax, 0.55, y_s + 2 * cell, 4, 4, cell, lambda i, j: "query" if j <= i else "blocked", linewidth=0.6)
    text(ax, 0.81, y_s + 0.48, "causal mask (T, T)", size=SMALL)
    text(ax, 0.81, y_s - 0.5, "blocked where j > i", size=SMALL)
    arrow(ax, (1.2, y_s), (x_s - 1.25, y_s), label="+", side="above", offset=0.03)
    arrow(ax, (x_s, y_s - th / 2), (x_s, y_w + th / 2), label="softmax over keys")
    box(ax, x_s, y_w, 2.5, th, "weights  (B, H, T, T)")

    # Context: weights @ V, with V coming down the right-hand side.
    arrow(ax, (x_s, y_w - th / 2), (cx - 0.6, y_c + th / 2))
    arrow(ax, (8.25, y_qkv - th / 2), (cx + 0.6, y_c + th / 2))
    text(ax, cx, 2.5, "weights @ V", size=SMALL)
    box(ax, cx, y_c, 3.2, th, "C  (B, H, T, d_k)")

    # Output projection, then the next-token head, left to right along the bottom.
    y_b = 0.75
    x_out, x_y, x_dense, x_p = 1.6, 3.85, 6.05, 8.85
    ax.plot([cx - 1.6, x_out], [y_c, y_c], color=MUTED, linewidth=1.3, solid_capstyle="butt")
    half = layer(x_out, y_b, 2.6, ["output_dense", "sums over heads and d_k", "vars/0 kernel (H, d_k, E)",
                                   "= (2, 64, 64)", "vars/1 bias (E,) = (64,)"])
    arrow(ax, (x_out, y_c), (x_out, y_b + half))
    arrow(ax, (x_out + 1.3, y_b), (x_y - 0.6, y_b))
    box(ax, x_y, y_b, 1.2, 0.72, "y\n(B, T, E)")
    layer(x_dense, y_b, 2.45, ["Dense + softmax", "layers/dense/vars/0", "kernel (E, V) = (64, 6)",
                               "layers/dense/vars/1", "bias (V,) = (6,)"])
    arrow(ax, (x_y + 0.6, y_b), (x_dense - 1.225, y_b))
    arrow(ax, (x_dense + 1.225, y_b), (x_p - 0.8, y_b))
    box(ax, x_p, y_b, 1.6, 0.72, "probabilities\n(B, T, V = 6)")
    save(fig, "keras_decoder_flow", png_dir)


# ----------------------------------------------------------------------------------------------------
# Chapter 7


def kv_cache_decode_step(png_dir=None):
    """Chapter 7: one decode step. Only the newest position's q, k, v are computed; k and v join the cache."""
    fig, ax = new_figure(10.0, 6.7)
    t, cw, ch, x0 = 5, 0.62, 0.42, 2.75  # newest position, cell width and height, the grid's left edge
    sub = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")

    def x_of(j):
        return x0 + (j + 0.5) * cw

    def row(y, style_of, label_of, title, shape, edge_of=lambda j: 1.0):
        for j in range(t + 1):
            box(ax, x_of(j), y, cw, ch, label_of(j), style=style_of(j), size=SMALL, rounded=False,
                linewidth=edge_of(j))
        text(ax, x0 - 0.15, y + 0.11, title, size=SMALL, ha="right")
        text(ax, x0 - 0.15, y - 0.13, shape, size=SMALL, ha="right", color=MUTED)

    def subscript(j):
        return "ₜ" if j == t else str(j).translate(sub)

    text(ax, 0.2, 6.4, "One decode step with the cache, in one layer: the newest token is at position t "
         "(here t = 5)", size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 6.08, "start = len(caches[0]) = t, read before the append, is the new token's position offset; "
         "afterwards the cache holds 0 … t, S = t + 1", size=SMALL, ha="left", color=MUTED)

    y_pos, y_k, y_v, y_q, y_s, y_w = 5.5, 5.0, 4.25, 3.45, 2.55, 1.85
    text(ax, x0 - 0.15, y_pos, "position", size=SMALL, ha="right", color=MUTED)
    for j in range(t + 1):
        text(ax, x_of(j), y_pos, "t" if j == t else str(j), size=SMALL, color=MUTED)

    def new_or_read(j):
        return "key_strong" if j == t else "key_pale"

    def thick_if_new(j):
        return 2.2 if j == t else 1.0

    row(y_k, new_or_read, lambda j: "k" + subscript(j), "KVCache.keys", "(B, H, S, d_k)", thick_if_new)
    row(y_v, new_or_read, lambda j: "v" + subscript(j), "KVCache.values", "(B, H, S, d_v)", thick_if_new)
    row(y_q, lambda j: "query_strong" if j == t else "empty", lambda j: "qₜ" if j == t else "",
        "queries", "never cached", thick_if_new)
    row(y_s, lambda j: "tensor", lambda j: "qₜ·k" + subscript(j), "scores (B, H, 1, S)", "= q Kᵀ / √d_k")
    row(y_w, lambda j: "tensor", lambda j: "w" + subscript(j), "weights (B, H, 1, S)", "softmax over keys")

    right = x0 + (t + 1) * cw

    # x_t and its three projections; k and v are appended to the cache.
    x_box, w_box = 9.05, 1.3
    box(ax, x_box, (y_k + y_q) / 2, w_box, y_k - y_q + ch, "xₜ\n(B, 1, E)\nnewest\ntoken", style="tensor")
    for y, label in ((y_k, "k  (B, H, 1, d_k)"), (y_v, "v  (B, H, 1, d_v)"), (y_q, "q  (B, H, 1, d_k)")):
        arrow(ax, (x_box - w_box / 2, y), (right + 0.05, y), label=label, side="above", offset=0.05)
    text(ax, (right + x_box - w_box / 2) / 2, y_q - 0.22, "used now, not kept", size=SMALL, color=MUTED)
    text(ax, (right + x_box - w_box / 2) / 2, y_k + 0.5, "KVCache.append(k, v)", size=SMALL, weight="bold")

    # The single query's output: weights @ V over all S cached values.
    arrow(ax, (right + 0.05, y_w), (x_box - 0.85, y_w), label="weights @ V\n(all S values)", side="above",
          offset=0.05)
    box(ax, x_box, y_w, 1.7, 0.62, "out (B, H, 1, d_v)\n= Σⱼ wⱼ vⱼ", style="tensor", size=SMALL)

    legend_item(ax, 0.2, 1.0, "key_strong", "computed this step, for position t only: one query qₜ, one key kₜ, "
                "one value vₜ (the new row of K and V)", linewidth=2.2)
    legend_item(ax, 0.2, 0.6, "key_pale", "only read: keys and values of positions 0 … t − 1, appended by earlier "
                "steps")
    legend_item(ax, 0.2, 0.2, "empty", "never stored: the queries of earlier positions, used once at their own step")
    save(fig, "kv_cache_decode_step", png_dir)


# ----------------------------------------------------------------------------------------------------
# Chapter 8


FULL, MASKED, SKIPPED = "full", "masked", "skipped"


def tile_kind(i0: int, j0: int, block_q: int, block_k: int, offset: int) -> str:
    """What `tiled_attention` does with the tile of query rows i0 … and key columns j0 …, as in its loop.

    Query i sits at position offset + i (offset = S − T). Key blocks from offset + i0 + block_q on are never
    visited; a visited block whose last key lies past the block's first query position crosses the diagonal.
    """
    if j0 >= offset + i0 + block_q:
        return SKIPPED
    return MASKED if j0 + block_k - 1 > offset + i0 else FULL


def _draw_tile(ax, x, y_top, kind, c, block_q, block_k, allowed):
    """One tile of block_q x block_k elements (size c); `allowed(a, b)` says whether element (a, b) may attend."""
    def style(a, b):
        if kind == SKIPPED:
            return "blocked"
        if kind == FULL:
            return "query_strong"
        return "query" if allowed(a, b) else "masked_out"

    cell_grid(ax, x, y_top, block_q, block_k, c, style, linewidth=0.5)
    ax.add_patch(Rectangle((x, y_top - block_q * c), block_k * c, block_q * c, fill=False, edgecolor=INK,
                           linewidth=1.5))


def _walk_arrow(ax, x_from, x_to, y):
    """A query block's loop over its key blocks: a dark arrow with a white halo, readable over the tiles."""
    halo = [patheffects.withStroke(linewidth=4, foreground="white")]
    ax.add_patch(FancyArrowPatch((x_from, y), (x_to, y), arrowstyle="-|>,head_length=7,head_width=4",
                                 mutation_scale=1, color=INK, linewidth=1.6, shrinkA=0, shrinkB=0,
                                 path_effects=halo))


def _tile_panel(ax, x0, y_top, T, S, block, c, title, subtitle, row_note=None):
    """The tiles of causal tiled attention for T queries and S keys in blocks of `block` positions."""
    offset = S - T
    tile = block * c
    for qb in range(T // block):
        last = x0
        for kb in range(S // block):
            kind = tile_kind(qb * block, kb * block, block, block, offset)
            _draw_tile(ax, x0 + kb * tile, y_top - qb * tile, kind, c, block, block,
                       lambda a, b, qb=qb, kb=kb: kb * block + b <= offset + qb * block + a)
            if kind != SKIPPED:
                last = x0 + (kb + 1) * tile
        _walk_arrow(ax, x0 + 0.08, last - 0.1, y_top - (qb + 0.75) * tile)  # along the tiles' lower row
        label = str(qb) if row_note is None else f"{qb}  {row_note(qb)}"
        text(ax, x0 - 0.12, y_top - (qb + 0.5) * tile, label, size=SMALL, color=MUTED, ha="right")
    for kb in range(S // block):
        text(ax, x0 + (kb + 0.5) * tile, y_top + 0.2, str(kb), size=SMALL, color=MUTED)
    text(ax, x0 - 0.12, y_top + 0.2, "query block", size=SMALL, color=MUTED, ha="right")
    text(ax, x0 + S * c / 2, y_top + 0.48, "key block", size=SMALL, color=MUTED)
    text(ax, x0 + S * c / 2, y_top + 1.05, title, size=FONT, weight="bold")
    text(ax, x0 + S * c / 2, y_top + 0.77, subtitle, size=SMALL, color=MUTED)
    # The diagonal, key j = S − T + i, through the centres of the last allowed elements.
    ax.plot([x0 + offset * c, x0 + (offset + T) * c], [y_top, y_top - T * c], color=DIAGONAL, linewidth=1.6,
            linestyle=(0, (4, 2)), solid_capstyle="butt")


def tile_schedule(png_dir=None):
    """Chapter 8: tiles of tiled attention under a causal mask, for T = S and for T < S (bottom-right)."""
    fig, ax = new_figure(10.0, 6.3)
    block, c, top = 2, 0.3, 4.9
    _tile_panel(ax, 1.25, top, 8, 8, block, c, "(a) causal, T = S = 8", "block_q = block_k = 2 positions")
    _tile_panel(ax, 6.0, top, 4, 8, block, c, "(b) causal, T = 4 < S = 8", "queries are positions 4 … 7",
                row_note=lambda qb: f"(positions {4 + 2 * qb}–{5 + 2 * qb})")
    text(ax, 6.0 + 1.2, top - 1.2 - 0.35, "the diagonal starts S − T = 4 keys", size=SMALL)
    text(ax, 6.0 + 1.2, top - 1.2 - 0.62, "(2 key blocks) to the right:", size=SMALL)
    text(ax, 6.0 + 1.2, top - 1.2 - 0.89, "bottom-right alignment, as in chapter 5", size=SMALL)

    # Legend: one tile of each kind, the diagonal and the walk.
    y1, y2, y3 = 1.75, 1.1, 0.45
    for x, kind, label in ((0.3, FULL, "full: no mask"), (2.55, MASKED, "masked: crosses the diagonal"),
                           (5.95, SKIPPED, "skipped: never computed")):
        _draw_tile(ax, x, y1 + c, kind, c, 2, 2, lambda a, b: b <= a)
        text(ax, x + 2 * c + 0.12, y1, label, size=SMALL, ha="left")
    ax.plot([0.3, 0.9], [y2, y2], color=DIAGONAL, linewidth=1.6, linestyle=(0, (4, 2)))
    text(ax, 1.02, y2, "the diagonal: key j = S − T + i (masked tiles set the scores right of it to −∞)",
         size=SMALL, ha="left")
    _walk_arrow(ax, 0.3, 0.9, y3)
    text(ax, 1.02, y3, "each query block walks its key blocks left to right, keeping a running max m, running sum l "
         "and output acc;\nit stops after the last tile that touches the diagonal and writes acc / l",
         size=SMALL, ha="left", linespacing=1.4)
    save(fig, "tile_schedule", png_dir)


DIAGRAMS = (causal_mask_alignments, keras_decoder_flow, kv_cache_decode_step, tile_schedule)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--png-dir", type=Path, help="also write a PNG copy of each diagram here (not the repo)")
    parser.add_argument("--out", type=Path, default=FIGURES, help="where the SVGs go (default: chapters/figures)")
    parser.add_argument("names", nargs="*", help="draw only these diagrams (default: all)")
    args = parser.parse_args()
    plt.rcParams["savefig.directory"] = str(args.out)
    for draw in DIAGRAMS:
        if not args.names or draw.__name__ in args.names:
            draw(args.png_dir)
            print(f"wrote {args.out / draw.__name__}.svg")


if __name__ == "__main__":
    main()
