"""Explanatory diagrams for chapters 1-9 of "Attention from scratch", drawn with matplotlib.

Writes one SVG per diagram into chapters/figures/:

    embedding_lookup.svg             (chapter 1)  sentence -> tokens -> ids -> rows of nn.Embedding(6, 16) -> X
    scaled_dot_product_attention.svg (chapter 2)  X -> Q, K, V -> scores -> softmax -> weights @ V, every shape
    multihead_split_merge.svg        (chapter 3)  one E-wide projection, split_heads, H attentions, merge_heads, W^O
    cross_attention.svg              (chapter 4)  queries from the sentence (T = 6), keys and values from 8 other tokens
    causal_mask_alignments.svg       (chapter 5)  is_causal=True (top-left) against causal_mask(T, S) (bottom-right)
    keras_decoder_flow.svg           (chapter 6)  the Keras decoder's data flow, with the saved weights' h5 names
    kv_cache_decode_step.svg         (chapter 7)  one decode step: what is computed, what is read from the cache
    tile_schedule.svg                (chapter 8)  which tiles tiled attention computes fully, masks or skips
    rope_rotation.svg                (chapter 9)  RoPE turns a q/k feature pair by its position; the angle sees m − n
    induction_circuit.svg            (chapter 9)  a previous-token head and an induction head copy the token after A
    k_composition_ablation.svg       (chapter 9)  the path ablation: head 3's output taken out of layer 2's keys only

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


# ----------------------------------------------------------------------------------------------------
# Chapter 1


def embedding_lookup(png_dir=None):
    """Chapter 1: sentence -> tokens -> ids (sorted vocabulary) -> rows of nn.Embedding(6, 16) -> X (6, 16)."""
    fig, ax = new_figure(9.6, 5.0, bottom=-0.35)
    words = ["Life", "is", "short", "eat", "dessert", "first"]
    vocab = {word: rank for rank, word in enumerate(sorted(words))}  # {'Life': 0, 'dessert': 1, ...}
    E, pitch, rh, cw = 16, 0.42, 0.3, 0.11  # width, row pitch, row height, cell width
    top = 3.25  # the rows' top

    def y_of(i):
        return top - (i + 0.5) * pitch

    x_word, x_id, x_arrow_end, x_table, x_emb = 0.8, 2.05, 3.05, 3.95, 7.45

    text(ax, 0.25, 4.4, "“Life is short, eat dessert first”", size=FONT, ha="left", weight="bold")
    arrow(ax, (x_word, 4.17), (x_word, 3.95), label="split on spaces, drop the comma", side="right", offset=0.1)

    # Column headers: a name, and what the column holds.
    for x, name, note in ((x_word, "tokens", "T = 6"), (x_id, "ids", "vocab[word]"),
                          (x_table + E * cw / 2, "embedding table", "nn.Embedding(6, 16): 6 rows, E = 16"),
                          (x_emb + E * cw / 2, "X = embed(token_ids)", "(T, E) = (6, 16)")):
        text(ax, x, 3.72, name, size=FONT, weight="bold")
        text(ax, x, 3.46, note, size=SMALL, color=MUTED)

    for i, word in enumerate(words):
        y = y_of(i)
        box(ax, x_word, y, 1.05, rh, word, style="tensor", size=SMALL)
        box(ax, x_id, y, 0.42, rh, str(vocab[word]), style="layer", size=SMALL, rounded=False)
        arrow(ax, (x_word + 0.56, y), (x_id - 0.24, y))
        # The lookup: id -> the table's row of that number.
        arrow(ax, (x_id + 0.23, y), (x_arrow_end, y_of(vocab[word])))

    for word, rank in vocab.items():  # the table's rows, in id order
        cell_grid(ax, x_table, y_of(rank) + rh / 2, 1, E, cw, lambda i, j: "tensor", linewidth=0.6, cell_h=rh)
        text(ax, x_arrow_end + 0.08, y_of(rank), f"{rank}  {word}", size=SMALL, ha="left")
    for i, word in enumerate(words):  # X's rows, in sentence order
        cell_grid(ax, x_emb, y_of(i) + rh / 2, 1, E, cw, lambda i, j: "tensor", linewidth=0.6, cell_h=rh)
        text(ax, x_emb - 0.1, y_of(i), f"{word} ({vocab[word]})", size=SMALL, ha="right")
    arrow(ax, (x_table + E * cw + 0.12, y_of(2.5)), (x_emb - 1.05, y_of(2.5)))

    bottom = top - 6 * pitch
    text(ax, x_table + E * cw / 2, bottom - 0.22, "row i: the vector of token id i", size=SMALL, color=MUTED)
    text(ax, x_emb + E * cw / 2, bottom - 0.22, "row t = table row token_ids[t]", size=SMALL, color=MUTED)
    text(ax, 0.25, -0.12, "vocab: the distinct words, sorted (capitals first) and numbered from 0:\n"
         "{'Life': 0, 'dessert': 1, 'eat': 2, 'first': 3, 'is': 4, 'short': 5},  so  token_ids = [0, 4, 5, 2, 1, 3]",
         size=SMALL, ha="left", linespacing=1.4)
    save(fig, "embedding_lookup", png_dir)


# ----------------------------------------------------------------------------------------------------
# Chapter 2


def scaled_dot_product_attention(png_dir=None):
    """Chapter 2: X -> Q, K, V -> scores -> / sqrt(d_k) -> (+ mask) -> softmax -> weights @ V, every shape named."""
    fig, ax = new_figure(8.8, 7.65)
    th = 0.62  # the height of a two-line tensor box
    x_q, x_k, x_v = 1.55, 4.4, 7.25

    text(ax, 0.25, 7.35, "Scaled dot-product attention with chapter 2's sizes", size=FONT, ha="left",
         weight="bold")
    text(ax, 0.25, 6.92, "T = 6 queries, S = 6 keys (S = T in self-attention), d_in = 16, d_k = 24, d_v = 28\n"
         "Weights as in SelfAttention, (d_in, d_out), applied as X @ W (the chapter's first half stores Wᵀ)",
         size=SMALL, ha="left", color=MUTED, linespacing=1.4)

    y_x, y_w, y_qkv = 6.15, 5.2, 4.15
    box(ax, x_k, y_x, 3.0, 0.44, "X   (T, d_in) = (6, 16)")
    for x, name, shape, letter, rows, style in (
            (x_q, "W_query", "(d_in, d_k) = (16, 24)", "Q", "(T, d_k) = (6, 24)", "query"),
            (x_k, "W_key", "(d_in, d_k) = (16, 24)", "K", "(S, d_k) = (6, 24)", "key"),
            (x_v, "W_value", "(d_in, d_v) = (16, 28)", "V", "(S, d_v) = (6, 28)", "key")):
        box(ax, x, y_w, 2.45, th, style="layer", rounded=False)
        text(ax, x, y_w + 0.13, name, size=SMALL, weight="bold")
        text(ax, x, y_w - 0.13, shape, size=SMALL)
        arrow(ax, (x_k + (x - x_k) * 0.45, y_x - 0.22), (x, y_w + th / 2))
        arrow(ax, (x, y_w - th / 2), (x, y_qkv + th / 2))
        box(ax, x, y_qkv, 2.45, th, f"{letter} = X {name}\n{rows}", style=style, size=SMALL)

    # The scores, scaled, masked and normalised, in a column between Q and K.
    x_s, y_s, y_scaled, y_wt = 2.95, 2.95, 1.9, 0.75
    arrow(ax, (x_q, y_qkv - th / 2), (x_s - 0.5, y_s + th / 2))
    arrow(ax, (x_k, y_qkv - th / 2), (x_s + 0.5, y_s + th / 2))
    box(ax, x_s, y_s, 2.3, th, "scores = Q Kᵀ\n(T, S) = (6, 6)", size=SMALL)
    arrow(ax, (x_s, y_s - th / 2), (x_s, y_scaled + th / 2), label="÷ √d_k = √24 ≈ 4.9")
    box(ax, x_s, y_scaled, 2.3, th, "scores / √d_k\n(T, S) = (6, 6)", size=SMALL)
    box(ax, 0.72, y_scaled, 1.1, th, "mask (T, S)\noptional", style="empty", size=SMALL)
    arrow(ax, (0.72 + 0.55, y_scaled), (x_s - 1.15, y_scaled), label="+", side="above", offset=0.03)
    text(ax, 0.72, y_scaled - 0.5, "0 or −∞", size=SMALL, color=MUTED)
    arrow(ax, (x_s, y_scaled - th / 2), (x_s, y_wt + th / 2), label="softmax over keys\n(dim = −1)")
    box(ax, x_s, y_wt, 2.3, th, "weights  (T, S) = (6, 6)\neach row sums to 1", size=SMALL)

    # The output: weights @ V, with V coming down the right-hand side.
    arrow(ax, (x_v, y_qkv - th / 2), (x_v, y_wt + th / 2))
    arrow(ax, (x_s + 1.15, y_wt), (x_v - 1.1, y_wt), label="weights @ V", side="above", offset=0.05)
    box(ax, x_v, y_wt, 2.2, th, "output Z\n(T, d_v) = (6, 28)", size=SMALL)
    save(fig, "scaled_dot_product_attention", png_dir)


# ----------------------------------------------------------------------------------------------------
# Chapter 3


def _outline(ax, x0, y_top, w, h, linewidth=1.2):
    """A dark frame around a grid of cells, so that one tensor (or one head) reads as one block."""
    ax.add_patch(Rectangle((x0, y_top - h), w, h, fill=False, edgecolor=INK, linewidth=linewidth))


def _head_stack(ax, x0, y_top, layers, rows, cols, c, style_of_layer, dx, dy):
    """`layers` grids of rows x cols cells, layer 0 in front at (x0, y_top), each next one dx right and dy up."""
    for h in reversed(range(layers)):  # back to front, so that the front layer is drawn last
        cell_grid(ax, x0 + h * dx, y_top + h * dy, rows, cols, c, lambda i, j, h=h: style_of_layer(h),
                  linewidth=0.5)
        _outline(ax, x0 + h * dx, y_top + h * dy, cols * c, rows * c)


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
        _outline(ax, x_flat, y_top, grid_w, T * c)
        if header:
            text(ax, x_flat + grid_w / 2, y_top + 0.2, header, size=SMALL)
        text(ax, x_flat + grid_w / 2, y_top - T * c - 0.2, shape, size=SMALL, color=MUTED)

    def grouped(y_top, styles, shape):
        for h in range(H):
            x = x_group + h * (d * c + gap)
            cell_grid(ax, x, y_top, T, d, c, lambda i, j, h=h: styles(h), linewidth=0.5)
            _outline(ax, x, y_top, d * c, T * c)
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


# ----------------------------------------------------------------------------------------------------
# Chapter 4


def cross_attention(png_dir=None):
    """Chapter 4: queries from the sentence (T = 6), keys and values from a source of S = 8 tokens."""
    fig, ax = new_figure(9.5, 8.05, bottom=0.15)
    T, S, u, rh, c = 6, 8, 0.05, 0.17, 0.24  # lengths, inches per feature, a strip's row height, a grid's cell
    x_q, x_k, x_v = 1.3, 3.85, 7.0  # the left edges of the Q, K and V strips
    y_in, y_strip, y_grid = 6.95, 6.2, 3.7  # input boxes, strips' tops, grids' tops
    sources = [f"s{j}" for j in range(1, S + 1)]
    words = ["Life", "is", "short", "eat", "dessert", "first"]
    padded = {5, 6, 7}  # the chapter's key_padding_mask blocks the last three source tokens

    text(ax, 0.2, 7.92, "Cross-attention: queries from the sentence, keys and values from a second sequence",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 7.63, "Chapter 4's weights W_query, W_key (24, 16) and W_value (28, 16), applied as x @ W.T",
         size=SMALL, ha="left", color=MUTED)

    def strip(x0, rows, width, style, label):
        """A tensor drawn row by row (one row per token), `width` features wide, its name to the right."""
        cell_grid(ax, x0, y_strip, rows, 1, width * u, lambda i, j: style, linewidth=0.6, cell_h=rh)
        _outline(ax, x0, y_strip, width * u, rows * rh)
        text(ax, x0 + width * u + 0.1, y_strip - rows * rh / 2, label, size=SMALL, ha="left", linespacing=1.35)

    # Two inputs, three projections.
    box(ax, x_q + 24 * u / 2, y_in, 2.1, 0.56, "x: the sentence\n(T, E) = (6, 16)", size=SMALL)
    x_src = (x_k + 24 * u / 2 + x_v + 28 * u / 2) / 2
    box(ax, x_src, y_in, 2.9, 0.56, "source = torch.rand(8, 16)\n(S, E) = (8, 16)", size=SMALL)
    strip(x_q, T, 24, "query", "Q  (T, d_k)\n= (6, 24)")
    strip(x_k, S, 24, "key", "K  (S, d_k)\n= (8, 24)")
    strip(x_v, S, 28, "key", "V  (S, d_v)\n= (8, 28)")
    arrow(ax, (x_q + 0.6, y_in - 0.28), (x_q + 0.6, y_strip + 0.03), label="x @ W_query.T")
    arrow(ax, (x_src - 0.5, y_in - 0.28), (x_k + 0.6, y_strip + 0.03), label="source @ W_key.T", side="left")
    arrow(ax, (x_src + 0.5, y_in - 0.28), (x_v + 0.7, y_strip + 0.03), label="source @ W_value.T", offset=0.3)

    # Scores and weights: one row per query word, one column per source token.
    x_sc, x_w = 1.3, 4.55
    for x0, style_of in ((x_sc, lambda i, j: "blocked" if j in padded else "tensor"),
                         (x_w, lambda i, j: "masked_out" if j in padded else "tensor")):
        cell_grid(ax, x0, y_grid, T, S, c, style_of, linewidth=0.6)
        for j, name in enumerate(sources):
            text(ax, x0 + (j + 0.5) * c, y_grid + 0.15, name, size=SMALL, color=MUTED)
    for i, word in enumerate(words):
        text(ax, x_sc - 0.1, y_grid - (i + 0.5) * c, word, size=SMALL, ha="right")
    arrow(ax, (x_q + 0.6, y_strip - T * rh - 0.05), (x_sc + S * c / 2 - 0.3, y_grid + 0.64))
    arrow(ax, (x_k + 0.35, y_strip - S * rh - 0.05), (x_sc + S * c / 2 + 0.3, y_grid + 0.64))
    text(ax, x_q + 0.72, y_grid + 0.98, "Q Kᵀ / √24", size=SMALL, ha="left")
    y_under = y_grid - T * c - 0.22
    text(ax, x_sc + S * c / 2, y_under, "scores  (T, S) = (6, 8)", size=SMALL)
    arrow(ax, (x_sc + S * c + 0.1, y_grid - T * c / 2), (x_w - 0.1, y_grid - T * c / 2))
    text(ax, (x_sc + S * c + x_w) / 2, y_grid - T * c / 2 + 0.28, "softmax over\nthe 8 source\ntokens", size=SMALL,
         va="bottom", linespacing=1.3)
    text(ax, x_w + S * c / 2, y_under, "weights  (T, S) = (6, 8)", size=SMALL)
    text(ax, x_w + S * c / 2, y_under - 0.27, "each row sums to 1", size=SMALL, color=MUTED)

    # The optional padding mask, added to the scores before the softmax: −inf in the columns it blocks.
    y_mask = y_grid + 0.58
    cell_grid(ax, x_sc, y_mask, 1, S, c, lambda i, j: "blocked" if j in padded else "tensor", linewidth=0.6)
    text(ax, x_sc - 0.1, y_mask - c / 2, "+ padding\nmask (1, 8)", size=SMALL, ha="right",
         linespacing=1.3)

    # The output: weights @ V, V coming straight down.
    arrow(ax, (x_v + 0.7, y_strip - S * rh - 0.05), (x_v + 0.7, y_grid + 0.05))
    arrow(ax, (x_w + S * c + 0.1, y_grid - T * c / 2), (x_v - 0.1, y_grid - T * c / 2), label="@ V", side="above",
          offset=0.05)
    cell_grid(ax, x_v, y_grid, T, 1, 28 * u, lambda i, j: "tensor", linewidth=0.6, cell_h=c)
    _outline(ax, x_v, y_grid, 28 * u, T * c)
    text(ax, x_v + 28 * u / 2, y_under, "output  (T, d_v) = (6, 28)", size=SMALL)
    text(ax, x_v + 28 * u / 2, y_under - 0.27, "one row per query word", size=SMALL, color=MUTED)

    # What may differ and what must match.
    y_note = 0.95
    legend_item(ax, 0.2, y_note + 0.4, "query", "queries: from x, one per word (T = 6)")
    legend_item(ax, 4.9, y_note + 0.4, "key", "keys and values: from the source (S = 8)")
    legend_item(ax, 0.2, y_note, "blocked", "key_padding_mask True: −∞ added to the score")
    legend_item(ax, 4.9, y_note, "masked_out", "so the weight after the softmax is 0")
    text(ax, 0.2, y_note - 0.55, "Lengths may differ (T = 6, S = 8), but Q and K must have the same width, d_k = 24; "
         "V's width d_v = 28 sets the output's.\nSelf-attention is the case source = x, where S = T.", size=SMALL,
         ha="left", linespacing=1.4)
    save(fig, "cross_attention", png_dir)


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


def grouped_query_heads(png_dir=None):
    """Chapter 7: which key/value head each query head reads, for H = 4 and H_kv = 4, 2, 1."""
    fig, ax = new_figure(10.0, 4.6)
    text(ax, 0.2, 4.35, "Query heads sharing key/value heads: H = 4 query heads, num_kv_heads = H_kv",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 4.05, "query head h reads key/value head h // (H / H_kv); only the key/value heads are cached",
         size=SMALL, ha="left", color=MUTED)
    panels = ((4, "multi-head", "num_kv_heads = 4"), (2, "grouped-query", "num_kv_heads = 2"),
              (1, "multi-query", "num_kv_heads = 1"))
    w, gap, y_q, y_kv = 0.55, 0.12, 3.25, 1.65
    for p, (kv_heads, name, setting) in enumerate(panels):
        left = 0.55 + p * 3.3
        span = 4 * w + 3 * gap
        centre = left + span / 2
        text(ax, centre, 3.8, f"({'abc'[p]}) {name}", size=FONT, weight="bold")
        group = 4 // kv_heads

        kv_w = (span - (kv_heads - 1) * gap) / kv_heads
        x_q = [left + w / 2 + h * (w + gap) for h in range(4)]  # centres of the query heads
        x_kv = [left + kv_w / 2 + g * (kv_w + gap) for g in range(kv_heads)]  # and of the key/value heads

        for h in range(4):
            box(ax, x_q[h], y_q, w, 0.42, f"q{'₀₁₂₃'[h]}", style="query", size=SMALL, rounded=False)
            arrow(ax, (x_kv[h // group], y_kv + 0.3), (x_q[h], y_q - 0.22))
        for g in range(kv_heads):
            box(ax, x_kv[g], y_kv, kv_w, 0.6, f"k{'₀₁₂₃'[g]}, v{'₀₁₂₃'[g]}", style="key", size=SMALL, rounded=False)
        text(ax, centre, 1.1, setting, size=SMALL)
        text(ax, centre, 0.8, f"cache: {kv_heads} head{'s' if kv_heads > 1 else ''} per layer and position",
             size=SMALL, color=MUTED)
        text(ax, centre, 0.5, "as large as multi-head" if kv_heads == 4 else f"{4 // kv_heads}× smaller",
             size=SMALL, color=MUTED)
    text(ax, 0.2, y_q, "queries", size=SMALL, ha="left", color=MUTED, rotation=90)
    text(ax, 0.2, y_kv, "keys, values", size=SMALL, ha="left", color=MUTED, rotation=90)
    save(fig, "grouped_query_heads", png_dir)


def ring_buffer(png_dir=None):
    """Chapter 7: the rolling cache of sliding-window attention, window = 4, just after position 9 is written."""
    fig, ax = new_figure(10.0, 5.0)
    window, t, cw, ch, x0 = 4, 9, 0.62, 0.42, 1.9
    text(ax, 0.2, 4.75, "The rolling cache of a sliding window: window = 4, after the step of position t = 9",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 4.45, "position p is written to slot p mod window; the query at t sees t − window + 1 … t, "
         "exactly what the slots hold", size=SMALL, ha="left", color=MUTED)

    y_pos, y_seq = 3.85, 3.4
    text(ax, x0 - 0.15, y_pos, "position p", size=SMALL, ha="right", color=MUTED)
    text(ax, x0 - 0.15, y_seq, "sequence", size=SMALL, ha="right")
    for p in range(t + 1):
        x = x0 + (p + 0.5) * cw
        text(ax, x, y_pos, str(p), size=SMALL, color=MUTED)
        style = "blocked" if p <= t - window else ("key_strong" if p == t else "key")
        box(ax, x, y_seq, cw, ch, f"k{str(p).translate(str.maketrans('0123456789', '₀₁₂₃₄₅₆₇₈₉'))}", style=style,
            size=SMALL, rounded=False)
    text(ax, x0 + (t + 1) * cw + 0.15, y_seq, "keys (values alike)", size=SMALL, ha="left")
    text(ax, x0 + (t - window + 1) * cw / 2, y_seq - 0.45, "overwritten: no query reads them again", size=SMALL,
         color=MUTED)
    ax.plot([x0 + (t - window + 1) * cw, x0 + (t + 1) * cw], [y_seq - 0.33] * 2, color=INK, linewidth=1.4)
    text(ax, x0 + (t - window / 2 + 1) * cw, y_seq - 0.5, "the window of query t", size=SMALL)

    y_slot, y_slot_label, sw = 1.75, 2.2, 0.8
    newest = x0 + (t + 0.5) * cw
    slot_x0 = newest - (t % window + 0.5) * sw  # the newest position's slot right under it
    text(ax, slot_x0 - 0.15, y_slot + 0.12, "RingKVCache.keys", size=SMALL, ha="right")
    text(ax, slot_x0 - 0.15, y_slot - 0.13, "(B, H_kv, window, d_k)", size=SMALL, ha="right", color=MUTED)
    for slot in range(window):
        p = t - (t - slot) % window
        x = slot_x0 + (slot + 0.5) * sw
        text(ax, x, y_slot_label, f"slot {slot}", size=SMALL, color=MUTED)
        box(ax, x, y_slot, sw, 0.5, f"p = {p}", style="key_strong" if p == t else "key", size=SMALL,
            rounded=False, linewidth=2.2 if p == t else 1.0)
    arrow(ax, (newest, y_seq - ch / 2 - 0.02), (newest, y_slot_label + 0.15))
    text(ax, newest + 0.1, 2.62, f"write: slot {t} mod {window} = {t % window}", size=SMALL, ha="left")
    text(ax, slot_x0 + window * sw, y_slot - 0.5, "memory: window positions, however long the sequence", size=SMALL,
         ha="right")
    text(ax, 0.2, 0.7, "A decode step attends over the slots in slot order: with no mask, the order of the keys does "
         "not change the result.", size=SMALL, ha="left")
    text(ax, 0.2, 0.4, "A prefill of several positions attends over the window − 1 latest old ones and the new ones, "
         "in position order, under the windowed mask.", size=SMALL, ha="left")
    save(fig, "ring_buffer", png_dir)


def block_table(png_dir=None):
    """Chapter 7: three sequences of different lengths, their block tables, and the shared pool of blocks."""
    fig, ax = new_figure(10.0, 5.4, bottom=-0.1)
    size = 4
    sequences = (("A", 7, (0, 3), "query"), ("B", 3, (1,), "key"), ("C", 10, (2, 4, 6), "tensor"))
    text(ax, 0.2, 5.05, "A paged cache: block_size = 4 positions, a block table per sequence, one pool of blocks",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 4.75, "position p of a sequence lives in block table[p // 4], at offset p mod 4; the last block "
         "of each sequence is the only one not full", size=SMALL, ha="left", color=MUTED)
    cw, ch, x0 = 0.3, 0.36, 0.85
    text(ax, x0 + 1.8, 4.3, "sequences (positions)", size=SMALL, weight="bold")
    text(ax, 6.3, 4.3, "block tables", size=SMALL, weight="bold")
    owner = {}
    for r, (name, length, blocks, style) in enumerate(sequences):
        y = 3.75 - r * 0.75
        text(ax, x0 - 0.15, y, name, size=FONT, ha="right", weight="bold")
        for p in range(length):
            box(ax, x0 + (p + 0.5) * cw + (p // size) * 0.12, y, cw, ch, "", style=style, rounded=False,
                linewidth=0.8)
        text(ax, 4.35, y, f"{length} positions", size=SMALL, ha="left", color=MUTED)
        text(ax, 6.3, y, "[" + ", ".join(map(str, blocks)) + "]", size=SMALL)
        for i, b in enumerate(blocks):
            owner[b] = (name, i * size, min(length, (i + 1) * size) - 1, style)
    text(ax, 8.45, 4.3, "the pool: BlockPool(8, 4)", size=SMALL, weight="bold")
    bw, bh = 1.1, 0.5
    for b in range(8):
        x, y = 7.85 + (b % 2) * 1.2, 3.75 - (b // 2) * (bh + 0.12)
        if b in owner:
            name, first, last, style = owner[b]
            box(ax, x, y, bw, bh, f"{b}: {name} {first}–{last}", style=style, size=SMALL, rounded=False)
        else:
            box(ax, x, y, bw, bh, f"{b}: free", style="empty", size=SMALL, rounded=False)
    text(ax, 0.2, 1.1, "Held: 6 blocks = 24 positions for 20 stored; the pool's other 2 blocks are free for any "
         "sequence. A cache preallocated", size=SMALL, ha="left")
    text(ax, 0.2, 0.8, "for the longest context would hold 3 × context_length positions. A finished sequence gives "
         "its blocks back (release),", size=SMALL, ha="left")
    text(ax, 0.2, 0.5, "and attention gathers each sequence's blocks in table order, padded to the longest, "
         "with padding masked by position.", size=SMALL, ha="left")
    text(ax, 0.2, 0.2, "Blocks are taken as sequences grow, so a table's blocks need not be adjacent; 5 and 7 were "
         "given back by a finished sequence.", size=SMALL, ha="left")
    save(fig, "block_table", png_dir)


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
    """Chapter 8: tiles of tiled attention under a causal mask, for T = S and for T < S (bottom-right)."""
    fig, ax = new_figure(13.0, 6.3)
    block, c, top = 2, 0.3, 4.9
    _tile_panel(ax, 1.25, top, 8, 8, block, c, "(a) causal, T = S = 8", "block_q = block_k = 2 positions")
    _tile_panel(ax, 6.0, top, 4, 8, block, c, "(b) causal, T = 4 < S = 8", "queries are positions 4 … 7",
                row_note=lambda qb: f"(positions {4 + 2 * qb}–{5 + 2 * qb})")
    text(ax, 6.0 + 1.2, top - 1.2 - 0.35, "the diagonal starts S − T = 4 keys", size=SMALL)
    text(ax, 6.0 + 1.2, top - 1.2 - 0.62, "(2 key blocks) to the right:", size=SMALL)
    text(ax, 6.0 + 1.2, top - 1.2 - 0.89, "bottom-right alignment, as in chapter 5", size=SMALL)
    _tile_panel(ax, 10.1, top, 8, 8, block, c, "(c) the backward, T = S = 8", "key blocks outer (FlashAttention-2)",
                walk="columns")

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
    text(ax, 1.02, y3, "(a), (b), the forward: each query block walks its key blocks left to right, keeping a running "
         "max m, running sum l and output acc;\nit stops after the last tile that touches the diagonal and writes "
         "acc / l and the log-sum-exp m + log l once. (c), the backward: each key block walks down\nthe query "
         "blocks that see it, from the diagonal, recomputing P from the log-sum-exp and summing dK and dV in place; "
         "dQ is added to per tile.", size=SMALL, ha="left", linespacing=1.4)
    save(fig, "tile_schedule", png_dir)


# ----------------------------------------------------------------------------------------------------
# Chapter 9


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


# ----------------------------------------------------------------------------------------------------
# Chapters 3 and 4 (issue 29): where attention sits in a transformer


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


def encoder_decoder(png_dir=None):
    """Chapter 4: an encoder–decoder, its cross-attention reading the encoder's keys and values."""
    fig, ax = new_figure(10.4, 7.6)
    xe, xd, w = 2.3, 7.4, 3.4  # the encoder's and the decoder's columns
    text(ax, 0.2, 7.3, "An encoder–decoder: the decoder's cross-attention reads the encoder's output",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 7.0, "One layer each; residual connections and LayerNorm around every box are left out",
         size=SMALL, ha="left", color=MUTED)
    box(ax, xe, 0.55, w, 0.55, "source tokens (B, S)\n\"Life is short …\"", style="tensor", size=SMALL)
    arrow(ax, (xe, 0.83), (xe, 1.3))
    box(ax, xe, 1.6, w, 0.55, "embedding + positions", style="layer", size=SMALL)
    arrow(ax, (xe, 1.88), (xe, 2.35))
    box(ax, xe, 2.75, w, 0.75, "self-attention\n(every source token sees all)", style="key", size=SMALL)
    arrow(ax, (xe, 3.13), (xe, 3.6))
    box(ax, xe, 3.9, w, 0.55, "feed-forward", style="layer", size=SMALL)
    arrow(ax, (xe, 4.18), (xe, 4.65))
    box(ax, xe, 5.0, w, 0.65, "encoder states (B, S, E)\nK, V computed once", style="key_strong", size=SMALL)
    text(ax, xe, 6.35, "encoder: runs once", size=FONT, weight="bold")
    text(ax, xe, 6.05, "over the whole source", size=SMALL, color=MUTED)

    box(ax, xd, 0.55, w, 0.55, "target so far (B, T), shifted:\n<start>, y(1), …, y(t−1)", style="tensor",
        size=SMALL)
    arrow(ax, (xd, 0.83), (xd, 1.3))
    box(ax, xd, 1.6, w, 0.55, "embedding + positions", style="layer", size=SMALL)
    arrow(ax, (xd, 1.88), (xd, 2.35))
    box(ax, xd, 2.75, w, 0.75, "causal self-attention\n(no peeking at later targets)", style="query", size=SMALL)
    arrow(ax, (xd, 3.13), (xd, 3.55))
    box(ax, xd, 3.95, w, 0.8, "cross-attention\nQ from the decoder (T),\nK, V from the encoder (S)",
        style="query_strong", size=SMALL)
    arrow(ax, (xe + w / 2, 5.0), (xd - w / 2, 4.05), label="K, V (B, S, E)", side="below", offset=0.34)
    arrow(ax, (xd, 4.35), (xd, 4.7))
    box(ax, xd, 4.95, w, 0.45, "feed-forward", style="layer", size=SMALL)
    arrow(ax, (xd, 5.18), (xd, 5.5))
    box(ax, xd, 5.8, w, 0.55, "Linear + softmax: next token y(t)", style="tensor", size=SMALL)
    text(ax, xd, 6.35, "decoder: runs once per new token", size=FONT, weight="bold")
    save(fig, "encoder_decoder", png_dir)


def latent_attention(png_dir=None):
    """Chapter 7: multi-head latent attention at a decode step, absorbed form (DeepSeek-V2)."""
    fig, ax = new_figure(10.0, 5.4)
    text(ax, 0.2, 5.15, "Multi-head latent attention, one decode step (absorbed form)", size=FONT, ha="left",
         weight="bold")
    text(ax, 0.2, 4.85, "the cache holds one latent c and one rotated key k_r per position, shared by all H heads",
         size=SMALL, ha="left", color=MUTED)
    # the new token
    box(ax, 0.85, 2.55, 1.2, 0.6, "x_t\n(B, 1, E)", style="tensor", size=SMALL)
    # keys: down-projection to the latent and the decoupled rope key
    box(ax, 2.75, 3.95, 1.7, 0.6, "kv_down\n(W_dkv and W_kr)", style="layer", size=SMALL)
    arrow(ax, (0.85, 2.85), (1.9, 3.85))
    box(ax, 4.9, 4.2, 1.9, 0.42, "c_t (B, 1, 1, d_c)", style="key_strong", size=SMALL, rounded=False)
    box(ax, 4.9, 3.7, 1.9, 0.42, "RoPE → k_r,t (.., d_r)", style="key_strong", size=SMALL, rounded=False)
    arrow(ax, (3.6, 3.95), (3.95, 3.95))
    arrow(ax, (5.85, 3.95), (6.45, 3.45), "append", side="right", offset=0.06)
    # the cache
    cell = 0.34
    cell_grid(ax, 6.1, 3.3, 1, 9, cell, lambda i, j: "key_strong" if j == 8 else "key_pale", cell_h=0.34)
    cell_grid(ax, 6.1, 2.82, 1, 9, cell, lambda i, j: "key_strong" if j == 8 else "key_pale", cell_h=0.22)
    text(ax, 6.0, 3.13, "c", size=SMALL, ha="right")
    text(ax, 6.0, 2.71, "k_r", size=SMALL, ha="right")
    text(ax, 7.63, 2.42, "cache: (B, 1, S, d_c) and (B, 1, S, d_r)", size=SMALL, color=MUTED)
    text(ax, 7.63, 2.15, "d_c + d_r numbers per position and layer", size=SMALL, color=MUTED)
    # queries
    box(ax, 2.75, 1.15, 1.7, 0.6, "q_proj, then W_ukᵀ\n(absorbed)", style="layer", size=SMALL)
    arrow(ax, (0.85, 2.25), (1.9, 1.25))
    box(ax, 4.9, 1.4, 1.9, 0.42, "q_lat (B, H, 1, d_c)", style="query", size=SMALL, rounded=False)
    box(ax, 4.9, 0.9, 1.9, 0.42, "RoPE → q_r (.., d_r)", style="query", size=SMALL, rounded=False)
    arrow(ax, (3.6, 1.15), (3.95, 1.15))
    arrow(ax, (5.85, 1.15), (6.6, 2.0))
    text(ax, 6.2, 1.05, "scores (B, H, 1, S) =\nq_lat · c + q_r · k_r", size=SMALL, ha="left", linespacing=1.3)
    # output
    box(ax, 9.0, 1.2, 1.75, 0.6, "softmax, then\nΣ w c (B, H, 1, d_c)", style="tensor", size=SMALL)
    arrow(ax, (8.0, 2.0), (8.6, 1.5))
    box(ax, 9.0, 0.35, 1.75, 0.45, "W_o W_uv → (B, 1, E)", style="layer", size=SMALL)
    arrow(ax, (9.0, 0.9), (9.0, 0.58))
    save(fig, "latent_attention", png_dir)


DIAGRAMS = (embedding_lookup, scaled_dot_product_attention, multihead_split_merge, cross_attention,
            causal_mask_alignments, keras_decoder_flow, kv_cache_decode_step, grouped_query_heads, ring_buffer,
            block_table, tile_schedule, rope_rotation, induction_circuit, k_composition_ablation)
DIAGRAMS += (transformer_block, encoder_decoder)  # chapters 3 and 4 (issue 29)
DIAGRAMS += (latent_attention,)  # chapter 7 (issue 31)


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
