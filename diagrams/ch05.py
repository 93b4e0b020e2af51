"""Chapter 5's diagrams (causal_mask_alignments.svg), drawn by diagrams/draw.py."""

from primitives import FONT, MUTED, SMALL, cell_grid, legend_item, new_figure, save, text


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
