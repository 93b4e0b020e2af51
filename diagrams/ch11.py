"""Chapter 11's diagrams (induction_circuit.svg, k_composition_ablation.svg), drawn by diagrams/draw.py."""

from matplotlib.patches import FancyArrowPatch

from primitives import FONT, MUTED, SMALL, arrow, box, new_figure, save, text


def _curved(ax, start, end, color, rad):
    """A curved arrow from `start` to `end` (rad > 0 bends it to the left of its direction)."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>,head_length=7,head_width=4", mutation_scale=1,
                                 color=color, linewidth=1.8, shrinkA=2, shrinkB=2,
                                 connectionstyle=f"arc3,rad={rad}"))


def induction_circuit(png_dir=None):
    """Chapter 11: a previous-token head in layer 1 and an induction head in layer 2 copy the token after A."""
    fig, ax = new_figure(11.0, 4.6)
    tokens = ["w", "A", "B", "x", "y", "z", "A"]
    w, gap, y = 0.62, 0.5, 2.35
    xs = [1.7 + i * (w + gap) for i in range(len(tokens))]
    for i, (x, token) in enumerate(zip(xs, tokens, strict=True)):
        style = "query" if i == 6 else ("key_strong" if i == 2 else ("key_pale" if i == 1 else "tensor"))
        box(ax, x, y, w, 0.5, token, style=style)
        text(ax, x, y - 0.45, str(i), size=SMALL, color=MUTED)
    text(ax, xs[0] - 0.55, y, "tokens", size=SMALL, color=MUTED, ha="right")
    text(ax, xs[0] - 0.55, y - 0.45, "position", size=SMALL, color=MUTED, ha="right")
    blue, orange = "#08519c", "#a63603"
    _curved(ax, (xs[2], y + 0.27), (xs[1], y + 0.27), orange, 0.8)  # layer 1: position 2 looks one back
    text(ax, xs[1] + 0.1, y + 1.05, "layer 1, previous-token head: position 2 attends to position 1", size=SMALL,
         color=orange, ha="left")
    text(ax, xs[1] + 0.1, y + 0.78, "and writes \"my previous token is A\" into position 2", size=SMALL,
         color=orange, ha="left")
    _curved(ax, (xs[6], y - 0.62), (xs[2], y - 0.62), blue, -0.25)  # layer 2: the second A finds position 2
    text(ax, (xs[2] + xs[6]) / 2, y - 1.45, "layer 2, induction head: the query A at position 6 matches the key "
         "that says \"previous token is A\"", size=SMALL, color=blue)
    text(ax, (xs[2] + xs[6]) / 2, y - 1.72, "(position 2) and copies its token, B, into the prediction",
         size=SMALL, color=blue)
    arrow(ax, (xs[6] + w / 2 + 0.05, y), (xs[6] + w / 2 + 0.75, y))
    box(ax, xs[6] + w / 2 + 1.25, y, 0.95, 0.5, "next: B", style="query_strong")
    text(ax, 5.5, 4.25, "The induction circuit: after \"A B … A\", predict B", size=FONT, weight="bold")
    save(fig, "induction_circuit", png_dir)


def k_composition_ablation(png_dir=None):
    """Chapter 11: the path ablation that tests K-composition. Layer 1 head 3's output is taken out of what
    layer 2 reads for its keys, and only there: queries, values and the logits still see it."""
    fig, ax = new_figure(12.4, 5.6)
    y0, y1, y2 = 0.75, 2.75, 4.45
    box(ax, 1.05, y0, 1.5, 0.62, "tokens\n(B, T)")
    box(ax, 3.35, y0, 1.75, 0.62, "x0 = embedding\n(B, T, E)")
    box(ax, 6.0, y0, 2.3, 0.62, "layer 1: heads 0-3\nhead 3: previous token", style="layer")
    box(ax, 9.05, y0, 2.45, 0.62, "x1 = x0 + layer 1's heads\n(B, T, E)")
    arrow(ax, (1.8, y0), (2.47, y0))
    arrow(ax, (4.23, y0), (4.85, y0))
    arrow(ax, (7.15, y0), (7.82, y0))
    sides = ((5.2, "query", "queries read LN(x1)"),
             (8.0, "key_strong", "keys read\nLN(x1 − head 3's output)"),
             (10.8, "key_pale", "values read LN(x1)"))
    for x, style, label in sides:
        box(ax, x, y1, 2.5, 0.72, label, style=style, size=SMALL)
        arrow(ax, (9.05, y0 + 0.31), (x, y1 - 0.36))
        arrow(ax, (x, y1 + 0.36), (8.0, y2 - 0.32))
    box(ax, 8.0, y2, 3.0, 0.64, "layer 2: induction heads\nweights (B, H, T, T)", style="layer")
    box(ax, 2.75, y2, 3.1, 0.64, "logits (B, T, V) =\nW_U (x1 + layer 2's output)", style="query_strong",
        size=SMALL)
    arrow(ax, (6.5, y2), (4.3, y2))
    text(ax, 2.75, 3.6, "the direct path from head 3 to\nthe logits is kept", size=SMALL, color=MUTED)
    text(ax, 6.2, 5.3, "K-composition, tested: take head 3's output out of the keys only", size=FONT,
         weight="bold")
    save(fig, "k_composition_ablation", png_dir)
