"""Chapter 12's diagram (gpt_stack.svg), drawn by diagrams/draw.py."""

from primitives import FONT, MUTED, SMALL, arrow, box, new_figure, plt, save, text


def _plus(ax, x, y):
    ax.add_patch(plt.Circle((x, y), 0.18, facecolor="white", edgecolor=MUTED, linewidth=1.3))
    text(ax, x, y, "+", size=FONT)


def gpt_stack(png_dir=None):
    """Chapter 12: the GPT the chapter assembles, with the shape of every tensor between its parts, and
    one Block opened up beside the stack."""
    fig, ax = new_figure(10.4, 9.2)
    text(ax, 0.2, 8.9, "The GPT of this chapter: GPT(...) on the left, one Block opened on the right",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 8.6, "B windows of T characters; V = 103 characters, E = 64, H = 4 heads of E/H = 16, "
         "L = 2 blocks", size=SMALL, ha="left", color=MUTED)

    x, w = 2.4, 3.2  # the stack
    box(ax, x, 0.45, w, 0.45, "tokens (B, T)", style="tensor")
    arrow(ax, (x, 0.68), (x, 1.1))
    box(ax, x, 1.4, w, 0.6, "token_embedding\nrows of a (V, E) table", style="layer", size=SMALL)
    arrow(ax, (x, 1.7), (x, 2.2), "(B, T, E)")
    _plus(ax, x, 2.4)
    box(ax, x - 1.25, 3.15, 2.2, 0.6, "positions: a learned\n(max_T, E) table, chapter 10", style="layer", size=SMALL)
    ax.plot([x - 1.25, x - 1.25], [2.85, 2.4], color=MUTED, linewidth=1.3)
    arrow(ax, (x - 1.25, 2.4), (x - 0.18, 2.4))
    arrow(ax, (x, 2.58), (x, 4.05), "(B, T, E)")
    box(ax, x, 4.6, w, 1.1, "blocks: L × Block\n(B, T, E) → (B, T, E)", style="query", size=SMALL)
    arrow(ax, (x, 5.15), (x, 5.6), "(B, T, E)")
    box(ax, x, 5.85, w, 0.5, "norm (LayerNorm)", style="layer", size=SMALL)
    arrow(ax, (x, 6.1), (x, 6.55), "(B, T, E)")
    box(ax, x, 6.9, w, 0.7, "head: x @ Wᵀ, W = token_embedding's\n(V, E) table itself (tied)",
        style="layer", size=SMALL)
    arrow(ax, (x, 7.25), (x, 7.7), "(B, T, V)")
    box(ax, x, 7.95, w, 0.45, "logits: a score per character", style="tensor", size=SMALL)
    text(ax, x, 8.35, "position t scores the character at t + 1", size=SMALL, color=MUTED)

    bx, bw = 7.6, 3.2  # one block
    ax.plot([x + w / 2, bx - bw / 2 - 0.55], [4.6, 1.0], color=MUTED, linewidth=0.9, linestyle=(0, (3, 2)))
    ax.plot([x + w / 2, bx - bw / 2 - 0.55], [4.6, 8.2], color=MUTED, linewidth=0.9, linestyle=(0, (3, 2)))
    box(ax, bx, 0.75, bw, 0.45, "x (B, T, E)", style="tensor", size=SMALL)
    arrow(ax, (bx, 0.98), (bx, 1.35))
    box(ax, bx, 1.6, bw, 0.5, "norm1 (LayerNorm)", style="layer", size=SMALL)
    arrow(ax, (bx, 1.85), (bx, 2.25), "(B, T, E)")
    box(ax, bx, 2.95, bw, 1.15, "attention: MultiHeadAttention\n(chapter 3) with causal_mask(T)\n"
        "(chapter 5); H heads (B, H, T, E/H)", style="query", size=SMALL)
    arrow(ax, (bx, 3.53), (bx, 3.95), "(B, T, E)")
    _plus(ax, bx, 4.15)
    ax.plot([bx, bx - bw / 2 - 0.35, bx - bw / 2 - 0.35], [1.15, 1.15, 4.15], color=MUTED, linewidth=1.3)
    arrow(ax, (bx - bw / 2 - 0.35, 4.15), (bx - 0.18, 4.15))
    arrow(ax, (bx, 4.33), (bx, 4.8), "(B, T, E)")
    box(ax, bx, 5.05, bw, 0.5, "norm2 (LayerNorm)", style="layer", size=SMALL)
    arrow(ax, (bx, 5.3), (bx, 5.7), "(B, T, E)")
    box(ax, bx, 6.3, bw, 0.95, "mlp, each position alone:\nLinear E → 4E, GELU (tanh),\nLinear 4E → E",
        style="key", size=SMALL)
    arrow(ax, (bx, 6.78), (bx, 7.2), "(B, T, E)")
    _plus(ax, bx, 7.4)
    ax.plot([bx, bx - bw / 2 - 0.35, bx - bw / 2 - 0.35], [4.55, 4.55, 7.4], color=MUTED, linewidth=1.3)
    arrow(ax, (bx - bw / 2 - 0.35, 7.4), (bx - 0.18, 7.4))
    arrow(ax, (bx, 7.58), (bx, 7.95))
    box(ax, bx, 8.2, bw, 0.45, "out (B, T, E)", style="tensor", size=SMALL)
    save(fig, "gpt_stack", png_dir)
