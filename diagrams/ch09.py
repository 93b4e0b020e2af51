"""Chapter 9's diagrams (tile_schedule.svg), drawn by diagrams/draw.py."""

from matplotlib import patheffects
from matplotlib.patches import FancyArrowPatch, Rectangle

from primitives import DIAGONAL, FONT, INK, MUTED, SMALL, arrow, box, cell_grid, new_figure, save, text


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


def _walk_arrow_down(ax, x, y_from, y_to):
    """A key block's loop over the query blocks that see it (the backward pass), top to bottom."""
    halo = [patheffects.withStroke(linewidth=4, foreground="white")]
    ax.add_patch(FancyArrowPatch((x, y_from), (x, y_to), arrowstyle="-|>,head_length=7,head_width=4",
                                 mutation_scale=1, color=INK, linewidth=1.6, shrinkA=0, shrinkB=0,
                                 path_effects=halo))


def _tile_panel(ax, x0, y_top, T, S, block, c, title, subtitle, row_note=None, walk="rows"):
    """The tiles of causal tiled attention for T queries and S keys in blocks of `block` positions; the
    arrows walk the rows (the forward: query blocks outer) or the columns (the backward: key blocks outer)."""
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
        if walk == "rows":
            _walk_arrow(ax, x0 + 0.08, last - 0.1, y_top - (qb + 0.75) * tile)  # along the tiles' lower row
        label = str(qb) if row_note is None else f"{qb}  {row_note(qb)}"
        text(ax, x0 - 0.12, y_top - (qb + 0.5) * tile, label, size=SMALL, color=MUTED, ha="right")
    for kb in range(S // block):
        text(ax, x0 + (kb + 0.5) * tile, y_top + 0.2, str(kb), size=SMALL, color=MUTED)
        if walk == "columns":  # from the first query block that sees key block kb down to the last
            first = max(0, kb * block - offset) // block
            _walk_arrow_down(ax, x0 + (kb + 0.75) * tile, y_top - first * tile - 0.08, y_top - T * c + 0.1)
    text(ax, x0 - 0.12, y_top + 0.2, "query block", size=SMALL, color=MUTED, ha="right")
    text(ax, x0 + S * c / 2, y_top + 0.48, "key block", size=SMALL, color=MUTED)
    text(ax, x0 + S * c / 2, y_top + 1.05, title, size=FONT, weight="bold")
    text(ax, x0 + S * c / 2, y_top + 0.77, subtitle, size=SMALL, color=MUTED)
    # The diagonal, key j = S − T + i, through the centres of the last allowed elements.
    ax.plot([x0 + offset * c, x0 + (offset + T) * c], [y_top, y_top - T * c], color=DIAGONAL, linewidth=1.6,
            linestyle=(0, (4, 2)), solid_capstyle="butt")


def tile_schedule(png_dir=None):
    """Chapter 9: tiles of tiled attention under a causal mask, for T = S and for T < S (bottom-right), in
    two rows narrow enough to read at page width: (a) and (b) above, (c) and the legend below."""
    fig, ax = new_figure(8.4, 7.7, bottom=-0.1)
    block, c, top = 2, 0.3, 6.45
    _tile_panel(ax, 1.25, top, 8, 8, block, c, "(a) causal, T = S = 8", "block_q = block_k = 2 positions")
    _tile_panel(ax, 5.7, top, 4, 8, block, c, "(b) causal, T = 4 < S = 8", "queries are positions 4 … 7",
                row_note=lambda qb: f"({4 + 2 * qb}–{5 + 2 * qb})")
    text(ax, 5.7 + 1.2, top - 1.2 - 0.35, "the diagonal starts S − T = 4 keys", size=SMALL)
    text(ax, 5.7 + 1.2, top - 1.2 - 0.62, "(2 key blocks) to the right:", size=SMALL)
    text(ax, 5.7 + 1.2, top - 1.2 - 0.89, "bottom-right, as in chapter 5", size=SMALL)
    top2 = top - 2.4 - 1.5
    _tile_panel(ax, 1.25, top2, 8, 8, block, c, "(c) the backward, T = S = 8", "dK, dV: key blocks outer",
                walk="columns")

    # Legend, right of (c): one tile of each kind, the diagonal and the walks.
    x = 4.45
    for y, kind, label in ((top2 - 0.3, FULL, "full: no mask"), (top2 - 0.95, MASKED, "masked: crosses the diagonal"),
                           (top2 - 1.6, SKIPPED, "skipped: never computed")):
        _draw_tile(ax, x, y + c, kind, c, 2, 2, lambda a, b: b <= a)
        text(ax, x + 2 * c + 0.12, y, label, size=SMALL, ha="left")
    y = top2 - 2.05
    ax.plot([x, x + 0.6], [y, y], color=DIAGONAL, linewidth=1.6, linestyle=(0, (4, 2)))
    text(ax, x + 0.72, y, "key j = S − T + i", size=SMALL, ha="left")
    y = top2 - 2.45
    _walk_arrow(ax, x, x + 0.6, y)
    text(ax, x + 0.72, y, "a block's walk: rows in (a), (b);\ncolumns in (c)", size=SMALL, ha="left",
         linespacing=1.3)
    save(fig, "tile_schedule", png_dir)


def memory_hierarchy(png_dir=None):
    """Chapter 9: a GPU's memories (FlashAttention's Figure 1, A100 figures) and what each form of attention
    writes to the slow one."""
    fig, ax = new_figure(10.0, 4.2)
    text(ax, 2.3, 3.95, "(a) an A100's memories (Dao et al., 2022)", size=FONT)
    for y, w, style, label in ((3.15, 2.4, "query_strong", "SRAM, on chip: 192 KB per SM\n× 108 SMs, about 19 TB/s"),
                               (1.95, 3.4, "key", "HBM, GPU memory: 40–80 GB,\n1.5–2.0 TB/s"),
                               (0.75, 4.3, "tensor", "CPU DRAM: 1 TB and more,\nabout 12.8 GB/s")):
        box(ax, 2.3, y, w, 0.95, label, style=style, size=SMALL)
    text(ax, 7.35, 3.95, "(b) what each form moves through HBM", size=FONT)
    box(ax, 5.85, 3.05, 2.3, 0.9, "naive: writes Z and P,\nT × S each, reads both back", style="key", size=SMALL)
    box(ax, 8.65, 3.05, 2.3, 0.9, "tiled: reads Q, K, V tiles,\nwrites O and L once", style="key", size=SMALL)
    box(ax, 8.65, 1.6, 2.3, 0.9, "a tile of z, p and the\nrunning m, l, acc: in SRAM", style="query_strong",
        size=SMALL)
    arrow(ax, (8.35, 2.6), (8.35, 2.05))
    arrow(ax, (8.95, 2.05), (8.95, 2.6))
    text(ax, 7.25, 0.85, "the scores never reach HBM in the tiled form;", size=SMALL)
    text(ax, 7.25, 0.55, "the naive form moves 4 T·S numbers through it", size=SMALL)
    save(fig, "memory_hierarchy", png_dir)


def split_kv(png_dir=None):
    """Chapter 9: split-KV decoding: one query, the cache cut into chunks, a partial (m, l, acc) per chunk
    computed in parallel, then one exact merge."""
    fig, ax = new_figure(10.0, 4.0)
    box(ax, 0.85, 3.3, 1.2, 0.6, "query q\n(one token)", style="query", size=SMALL)
    text(ax, 5.9, 3.8, "the cached keys and values, S positions, cut into 4 chunks", size=SMALL)
    xs = (3.05, 4.95, 6.85, 8.75)
    ranges = ("0 … S/4 − 1", "S/4 … S/2 − 1", "S/2 … 3S/4 − 1", "3S/4 … S − 1")
    for c, (x, span) in enumerate(zip(xs, ranges, strict=True)):
        box(ax, x, 3.3, 1.75, 0.6, f"K, V positions\n{span}", style="key", size=SMALL)
        box(ax, x, 1.95, 1.75, 0.75, f"partial {c + 1}:\nm, l, acc", style="query_strong", size=SMALL)
        arrow(ax, (x, 3.0), (x, 2.33))
        arrow(ax, (x, 1.57), (5.9, 0.95))
    arrow(ax, (1.45, 3.3), (2.17, 3.3))
    text(ax, 0.95, 2.05, "q meets every\nchunk; one thread\nblock per chunk,\nin parallel", size=SMALL,
         linespacing=1.3)
    box(ax, 5.9, 0.6, 5.4, 0.7, "merge: m = max of the m's; rescale each l and acc by exp(m_c − m), add;\n"
        "output = acc / l (exact, in any order)", style="tensor", size=SMALL)
    save(fig, "split_kv", png_dir)
