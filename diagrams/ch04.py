"""Chapter 4's diagrams (cross_attention.svg, encoder_decoder.svg), drawn by diagrams/draw.py."""

from matplotlib.patches import Rectangle
from primitives import FONT, MUTED, SMALL, arrow, box, cell_grid, legend_item, new_figure, outline, save, text


def cross_attention(png_dir=None):
    """Chapter 4: queries from the sentence (T = 6), keys and values from a source of S = 8 tokens."""
    fig, ax = new_figure(9.5, 8.05, bottom=0.15)
    T, S, u, rh, c = 6, 8, 0.05, 0.17, 0.24  # lengths, inches per feature, a strip's row height, a grid's cell
    x_q, x_k, x_v = 1.3, 3.85, 7.0  # the left edges of the Q, K and V strips
    y_in, y_strip, y_grid = 6.95, 6.2, 3.7  # input boxes, strips' tops, grids' tops
    sources = [f"s{j}" for j in range(S)]  # 0-based, as the chapter's printed positions
    words = ["Life", "is", "short", "eat", "dessert", "first"]
    padded = {5, 6, 7}  # the chapter's key_padding_mask blocks the last three source tokens

    text(ax, 0.2, 7.92, "Cross-attention: queries from the sentence, keys and values from a second sequence",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 7.63, "Chapter 4's weights W_query, W_key (24, 16) and W_value (28, 16), applied as x @ W.T",
         size=SMALL, ha="left", color=MUTED)

    def strip(x0, rows, width, style, label):
        """A tensor drawn row by row (one row per token), `width` features wide, its name to the right."""
        cell_grid(ax, x0, y_strip, rows, 1, width * u, lambda i, j: style, linewidth=0.6, cell_h=rh)
        outline(ax, x0, y_strip, width * u, rows * rh)
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
    outline(ax, x_v, y_grid, 28 * u, T * c)
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


def encoder_decoder(png_dir=None):
    """Chapter 4: an encoder–decoder; every decoder layer's cross-attention projects the final encoder output."""
    fig, ax = new_figure(10.4, 7.9)
    xe, xd, w = 2.3, 7.4, 3.4  # the encoder's and the decoder's columns
    text(ax, 0.2, 7.6, "An encoder–decoder: the decoder's cross-attention reads the encoder's output",
         size=FONT, ha="left", weight="bold")
    text(ax, 0.2, 7.3, "Residual connections and LayerNorm are left out. Each dashed layer repeats N times, on both sides: "
         "the encoder's final\noutput, the memory, feeds every decoder layer's cross-attention, each with its own "
         "W_key, W_value",
         size=SMALL, ha="left", color=MUTED, va="top", linespacing=1.35)
    box(ax, xe, 0.55, w, 0.55, "source tokens (B, S)", style="tensor", size=SMALL)
    arrow(ax, (xe, 0.83), (xe, 1.3))
    box(ax, xe, 1.6, w, 0.55, "embedding + positions", style="layer", size=SMALL)
    arrow(ax, (xe, 1.88), (xe, 2.35))
    ax.add_patch(Rectangle((xe - w / 2 - 0.12, 2.26), w + 0.24, 2.12, fill=False, edgecolor=MUTED,
                           linewidth=1.2, linestyle=(0, (4, 3))))  # one encoder layer, repeated N times
    text(ax, xe + w / 2 + 0.45, 3.3, "× N\nlayers", size=FONT, weight="bold", linespacing=1.3)
    box(ax, xe, 2.75, w, 0.75, "self-attention\n(every source token sees all)", style="key", size=SMALL)
    arrow(ax, (xe, 3.13), (xe, 3.6))
    box(ax, xe, 3.9, w, 0.55, "feed-forward", style="layer", size=SMALL)
    arrow(ax, (xe, 4.18), (xe, 4.62))
    box(ax, xe, 5.05, w, 0.85, "memory: the final encoder output\n(B, S, E); the chapter's second\n"
        "sequence (S = 8) stands in for it", style="key_strong", size=SMALL)
    text(ax, xe, 6.35, "encoder: runs once", size=FONT, weight="bold")
    text(ax, xe, 6.05, "over the whole source", size=SMALL, color=MUTED)

    box(ax, xd, 0.55, w, 0.55, "target, shifted right (B, T):\n<start>, Life, is, short, …", style="tensor",
        size=SMALL)
    arrow(ax, (xd, 0.83), (xd, 1.3))
    box(ax, xd, 1.6, w, 0.55, "embedding + positions", style="layer", size=SMALL)
    ax.add_patch(Rectangle((xd - w / 2 - 0.12, 2.26), w + 0.24, 3.04, fill=False, edgecolor=MUTED,
                           linewidth=1.2, linestyle=(0, (4, 3))))  # one decoder layer, repeated N times
    text(ax, xd + w / 2 + 0.45, 3.8, "× N\nlayers", size=FONT, weight="bold", linespacing=1.3)
    arrow(ax, (xd, 1.88), (xd, 2.35))
    box(ax, xd, 2.75, w, 0.75, "causal self-attention\n(no peeking at later targets)", style="query", size=SMALL)
    arrow(ax, (xd, 3.13), (xd, 3.5))
    box(ax, xd, 3.95, w, 0.9, "cross-attention: Q from the decoder (T);\nK, V = memory @ this layer's\n"
        "W_key, W_value (S), made once", style="query_strong", size=SMALL)
    arrow(ax, (xe + w / 2, 5.0), (xd - w / 2, 4.05), label="memory (B, S, E)", side="below", offset=0.34)
    arrow(ax, (xd, 4.4), (xd, 4.72))
    box(ax, xd, 4.95, w, 0.45, "feed-forward", style="layer", size=SMALL)
    arrow(ax, (xd, 5.18), (xd, 5.5))
    box(ax, xd, 5.8, w, 0.55, "Linear + softmax: next token y(t)", style="tensor", size=SMALL)
    text(ax, xd, 6.6, "decoder", size=FONT, weight="bold")
    text(ax, xd, 6.3, "inference: once per new token;\ntraining: once over the whole shifted target", size=SMALL,
         color=MUTED, linespacing=1.3)
    save(fig, "encoder_decoder", png_dir)
