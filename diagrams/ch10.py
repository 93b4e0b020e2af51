"""Chapter 10's diagrams (rope_rotation.svg), drawn by diagrams/draw.py."""

from matplotlib.patches import FancyArrowPatch

from primitives import DIAGONAL, FONT, MUTED, SMALL, new_figure, save, text


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
    """Chapter 10: RoPE turns one feature pair of q by m·θ and of k by n·θ; q·k sees only m − n."""
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
