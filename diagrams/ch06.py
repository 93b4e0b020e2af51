"""Chapter 6's diagrams (keras_decoder_flow.svg), drawn by diagrams/draw.py."""

from primitives import FONT, MUTED, SMALL, arrow, box, cell_grid, new_figure, save, text


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
    text(ax, 0.81, y_s - 0.5, "blocked (j > i): score", size=SMALL)
    text(ax, 0.81, y_s - 0.75, "−∞ in our pass; Keras", size=SMALL)
    text(ax, 0.81, y_s - 1.0, "(TF backend, fused):", size=SMALL)
    text(ax, 0.81, y_s - 1.25, "−0.7 × bf16 max", size=SMALL)
    arrow(ax, (1.2, y_s), (x_s - 1.25, y_s))
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
