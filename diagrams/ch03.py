"""Chapter 3's diagrams (multihead_split_merge.svg, transformer_block.svg), drawn by diagrams/draw.py."""

import matplotlib.pyplot as plt

from primitives import FONT, MUTED, SMALL, arrow, box, cell_grid, legend_item, new_figure, outline, save, text


def _head_stack(ax, x0, y_top, layers, rows, cols, c, style_of_layer, dx, dy):
    """`layers` grids of rows x cols cells, layer 0 in front at (x0, y_top), each next one dx right and dy up."""
    for h in reversed(range(layers)):  # back to front, so that the front layer is drawn last
        cell_grid(ax, x0 + h * dx, y_top + h * dy, rows, cols, c, lambda i, j, h=h: style_of_layer(h),
                  linewidth=0.5)
        outline(ax, x0 + h * dx, y_top + h * dy, cols * c, rows * c)


def _bracket(ax, x_from, x_to, y, label, up=True):
    """A square bracket over (or under) x_from … x_to, its ends pointing at what it groups, with a bold label."""
    tip = -0.1 if up else 0.1
    ax.plot([x_from, x_from, x_to, x_to], [y + tip, y, y, y + tip], color=MUTED, linewidth=1.2)
    text(ax, (x_from + x_to) / 2, y - tip * 1.6, label, size=FONT, weight="bold")


def multihead_split_merge(png_dir=None):
    """Chapter 3: the fused form. One E-wide projection, split_heads, H attentions in parallel, merge_heads."""
    fig, ax = new_figure(9.65, 6.45)
    E, H, T = 16, 4, 6
    d, c, gap = E // H, 0.1, 0.12  # head width, cell size, the gap between heads once unflattened
    y1, y2 = 4.75, 1.55  # the grids' tops: the split (left to right), the merge (right to left)
    x_box, x_flat, x_group, x_stack = 0.6, 2.25, 5.0, 8.01
    dx, dy = 0.2, 0.14  # the offset of each head behind the previous one
    grid_w, group_w = E * c, E * c + (H - 1) * gap

    def blues(h):
        return "query" if h % 2 == 0 else "query_strong"

    def oranges(h):
        return "key" if h % 2 == 0 else "key_strong"

    text(ax, 0.2, 6.2, "Multi-head attention, fused: one projection of width E, split into H heads and merged back",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 5.92, "Chapter 3's example: E = 16, H = 4, so E/H = 4; B = 1 sentence of T = 6 tokens",
         size=SMALL, ha="left", color=MUTED)

    def flat(y_top, styles, header, shape):
        cell_grid(ax, x_flat, y_top, T, E, c, lambda i, j: styles(j // d), linewidth=0.5)
        outline(ax, x_flat, y_top, grid_w, T * c)
        if header:
            text(ax, x_flat + grid_w / 2, y_top + 0.2, header, size=SMALL)
        text(ax, x_flat + grid_w / 2, y_top - T * c - 0.2, shape, size=SMALL, color=MUTED)

    def grouped(y_top, styles, shape):
        for h in range(H):
            x = x_group + h * (d * c + gap)
            cell_grid(ax, x, y_top, T, d, c, lambda i, j, h=h: styles(h), linewidth=0.5)
            outline(ax, x, y_top, d * c, T * c)
            text(ax, x + d * c / 2, y_top + 0.2, str(h), size=SMALL)
        text(ax, x_group - 0.08, y_top + 0.2, "head", size=SMALL, ha="right")
        text(ax, x_group + group_w / 2, y_top - T * c - 0.2, shape, size=SMALL, color=MUTED)

    def stack(y_top, styles, shape):
        _head_stack(ax, x_stack, y_top, H, T, d, c, styles, dx, dy)
        text(ax, x_stack + (d * c + (H - 1) * dx) / 2 + 0.2, y_top - T * c - 0.1, shape, size=SMALL, color=MUTED,
             va="top", linespacing=1.3)

    def step(x_from, x_to, y, name, args):
        arrow(ax, (x_from, y), (x_to, y))
        text(ax, (x_from + x_to) / 2, y + 0.16, name, size=SMALL)
        text(ax, (x_from + x_to) / 2, y - 0.16, args, size=SMALL, color=MUTED)

    # The split, left to right.
    m1 = y1 - T * c / 2
    box(ax, x_box, m1, 1.0, 0.8, "x\n(B, T, E)\n= (1, 6, 16)", size=SMALL)
    step(x_box + 0.55, x_flat - 0.08, m1, "q_proj", "Linear(E, E)")
    flat(y1, blues, "q = q_proj(x)", "(B, T, E) = (1, 6, 16)")
    step(x_flat + grid_w + 0.1, x_group - 0.1, m1, "unflatten", "E → (H, E/H)")
    grouped(y1, blues, "(B, T, H, E/H) = (1, 6, 4, 4)")
    step(x_group + group_w + 0.1, x_stack - 0.1, m1, "transpose", "T ↔ H")
    stack(y1, blues, "(B, H, T, E/H)\n= (1, 4, 6, 4)")
    _bracket(ax, x_flat + grid_w + 0.1, x_stack - 0.1, 5.3, "split_heads")

    # Attention, one per head, all heads at once.
    y_att, w_att, h_att = 2.85, 0.9, 0.5
    for h in reversed(range(H)):  # one box per head, head 0 in front
        box(ax, x_stack + w_att / 2 + h * dx, y_att + h * 0.1, w_att, h_att, "attention" if h == 0 else "",
            rounded=False, size=SMALL)
    x_down = x_stack + dx / 2  # down the strip that the layers behind leave free
    arrow(ax, (x_down, y1 - T * c - 0.05), (x_down, y_att + h_att / 2))
    arrow(ax, (x_down, y_att - h_att / 2), (x_down, y2 + 0.04))
    text(ax, x_stack - 0.15, y_att, "each head: softmax(q kᵀ / √(E/H)) v\n"
         "k and v: k_proj, v_proj, then split_heads\nH = 4 heads in parallel, one batched matmul", size=SMALL,
         ha="right", linespacing=1.4)

    # The merge, right to left: the same steps undone.
    m2 = y2 - T * c / 2
    stack(y2, oranges, "(B, H, T, E/H)\n= (1, 4, 6, 4)")
    step(x_stack - 0.1, x_group + group_w + 0.1, m2, "transpose", "H ↔ T")
    grouped(y2, oranges, "(B, T, H, E/H) = (1, 6, 4, 4)")
    step(x_group - 0.1, x_flat + grid_w + 0.1, m2, "flatten", "(H, E/H) → E")
    flat(y2, oranges, "", "(B, T, E) = (1, 6, 16)")
    step(x_flat - 0.08, x_box + 0.55, m2, "out_proj = Wᴼ", "Linear(E, E)")
    box(ax, x_box, m2, 1.0, 0.8, "output\n(B, T, E)\n= (1, 6, 16)", size=SMALL)
    _bracket(ax, x_flat + grid_w + 0.1, x_stack - 0.1, 0.5, "merge_heads", up=False)

    legend_item(ax, 0.2, 3.25, "query_strong", "the queries q, split into heads")
    legend_item(ax, 0.2, 2.85, "key_strong", "the heads' outputs, weights @ v")
    save(fig, "multihead_split_merge", png_dir)


def _residual(ax, x_side, y_from, y_to, x_main):
    """A skip connection: from the main line at y_from out to x_side, down to y_to, back into (+)."""
    ax.plot([x_main, x_side, x_side], [y_from, y_from, y_to], color=MUTED, linewidth=1.3)
    arrow(ax, (x_side, y_to), (x_main - 0.2, y_to))


def _plus(ax, x, y):
    ax.add_patch(plt.Circle((x, y), 0.2, facecolor="white", edgecolor=MUTED, linewidth=1.3))
    text(ax, x, y, "+", size=FONT)


def transformer_block(png_dir=None):
    """Chapter 3: multi-head attention inside a (pre-LayerNorm, GPT-2 style) transformer block."""
    fig, ax = new_figure(8.6, 8.4)
    x, w = 3.3, 3.4  # the main line and the boxes' width
    text(ax, 0.2, 8.1, "Where multi-head attention sits: one transformer block", size=FONT, ha="left",
         weight="bold")
    text(ax, 0.2, 7.8, "(B, T, E) in, (B, T, E) out; GPT-2 small stacks 12 of these with E = 768, H = 12",
         size=SMALL, ha="left", color=MUTED)
    box(ax, x, 0.55, w, 0.5, "x: (B, T, E)", style="tensor")
    arrow(ax, (x, 0.8), (x, 1.45))
    box(ax, x, 1.7, w, 0.5, "LayerNorm", style="layer")
    arrow(ax, (x, 1.95), (x, 2.45))
    box(ax, x, 2.95, w, 1.0, "multi-head attention\nQ, K, V from the same x\n(this chapter)", style="query")
    arrow(ax, (x, 3.45), (x, 3.8))
    _plus(ax, x, 4.0)
    _residual(ax, x - w / 2 - 0.5, 1.1, 4.0, x)
    arrow(ax, (x, 4.2), (x, 4.65))
    box(ax, x, 4.9, w, 0.5, "LayerNorm", style="layer")
    arrow(ax, (x, 5.15), (x, 5.6))
    box(ax, x, 6.05, w, 0.9, "feed-forward, per token\nLinear E → 4E, GELU, Linear 4E → E", style="key")
    arrow(ax, (x, 6.5), (x, 6.85))
    _plus(ax, x, 7.05)
    _residual(ax, x - w / 2 - 0.5, 4.4, 7.05, x)
    arrow(ax, (x + 0.2, 7.05), (x + w / 2 + 0.55, 7.05))
    text(ax, x + w / 2 + 0.65, 7.05, "output: (B, T, E)", size=SMALL, ha="left")
    notes = ["Attention is the only place where tokens", "exchange information; the feed-forward",
             "network works on each token alone.", "", "The residual connections (the lines on",
             "the left) add each sub-layer's output to", "its input, so a layer learns a correction.",
             "", "GPT-2 normalises before each sub-layer;", "the original transformer (2017)",
             "normalised after each addition."]
    for i, line in enumerate(notes):
        text(ax, 5.3, 5.6 - 0.27 * i, line, size=SMALL, ha="left", color=MUTED)
    save(fig, "transformer_block", png_dir)
