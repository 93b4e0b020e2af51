"""Chapter 9's diagrams (rope_rotation.svg, induction_circuit.svg, k_composition_ablation.svg), drawn by diagrams/draw.py."""

from matplotlib.patches import FancyArrowPatch

from primitives import DIAGONAL, FONT, MUTED, SMALL, arrow, box, new_figure, save, text


def _vector(ax, origin, angle_deg, length, color, label, label_at=1.18, dashed=False):
    """An arrow from `origin` at `angle_deg`, `length` inches long, with `label` just past its tip."""
    import math

    a = math.radians(angle_deg)
    tip = (origin[0] + length * math.cos(a), origin[1] + length * math.sin(a))
    ax.add_patch(FancyArrowPatch(origin, tip, arrowstyle="-|>,head_length=7,head_width=4", mutation_scale=1,
                                 color=color, linewidth=1.0 if dashed else 2.0, shrinkA=0, shrinkB=0,
                                 linestyle=(0, (3, 2)) if dashed else "solid", alpha=0.6 if dashed else 1.0))
    text(ax, origin[0] + label_at * length * math.cos(a), origin[1] + label_at * length * math.sin(a), label,
         size=SMALL, color=color)


def _rope_panel(ax, cx, cy, m, n, theta, q0, k0, title):
    """One feature pair's plane: q at position m turned by m·θ, k at position n turned by n·θ."""
    from matplotlib.patches import Arc

    r = 1.25
    ax.plot([cx - 1.55, cx + 1.55], [cy, cy], color="#bdbdbd", linewidth=0.8)
    ax.plot([cx, cx], [cy - 1.55, cy + 1.55], color="#bdbdbd", linewidth=0.8)
    q_blue, k_orange = "#08519c", "#a63603"
    _vector(ax, (cx, cy), q0, r, q_blue, "q", dashed=True)
    _vector(ax, (cx, cy), k0, r * 0.8, k_orange, "k", dashed=True)
    qa, ka = q0 + m * theta, k0 + n * theta
    _vector(ax, (cx, cy), qa, r, q_blue, f"q turned by {m}θ")
    _vector(ax, (cx, cy), ka, r * 0.8, k_orange, f"k turned by {n}θ", label_at=1.35)
    ax.add_patch(Arc((cx, cy), 1.0, 1.0, theta1=min(qa, ka), theta2=max(qa, ka), color=DIAGONAL, linewidth=1.6))
    text(ax, cx, cy - 1.9, title, size=FONT, weight="bold")
    text(ax, cx, cy - 2.2, f"angle between them: ({m} − {n})θ + (angle at position 0)", size=SMALL, color=DIAGONAL)


def rope_rotation(png_dir=None):
    """Chapter 9: RoPE turns one feature pair of q by m·θ and of k by n·θ; q·k sees only m − n."""
    fig, ax = new_figure(9.6, 5.6)
    theta, q0, k0 = 22.0, 20.0, -40.0
    text(ax, 4.8, 5.3, "RoPE in the plane of one feature pair (2i, 2i + 1): q at position m, k at position n",
         size=FONT, weight="bold")
    text(ax, 4.8, 4.98, "dashed: q and k before the rotation (position 0); solid: turned by position × θ",
         size=SMALL, color=MUTED)
    _rope_panel(ax, 2.4, 2.9, 3, 1, theta, q0, k0, "(a) m = 3, n = 1")
    _rope_panel(ax, 7.2, 2.9, 6, 4, theta, q0, k0, "(b) m = 6, n = 4")
    text(ax, 4.8, 0.25, "both vectors keep their length; q · k = |q| |k| cos(angle) is the same in (a) and (b): "
         "it depends on m − n only", size=SMALL)
    save(fig, "rope_rotation", png_dir)


def _curved(ax, start, end, color, rad):
    """A curved arrow from `start` to `end` (rad > 0 bends it to the left of its direction)."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>,head_length=7,head_width=4", mutation_scale=1,
                                 color=color, linewidth=1.8, shrinkA=2, shrinkB=2,
                                 connectionstyle=f"arc3,rad={rad}"))


def induction_circuit(png_dir=None):
    """Chapter 9: a previous-token head in layer 1 and an induction head in layer 2 copy the token after A."""
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
    """Chapter 9: the path ablation that tests K-composition. Layer 1 head 3's output is taken out of what
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
