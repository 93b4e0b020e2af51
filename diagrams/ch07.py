"""Chapter 7's diagrams (kv_cache_decode_step.svg), drawn by diagrams/draw.py."""

from primitives import FONT, MUTED, SMALL, arrow, box, legend_item, new_figure, save, text


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

    legend_item(ax, 0.2, 1.0, "key_strong", "computed this step and appended: one key kₜ and one value vₜ, the new "
                "row of K and V (the query qₜ, blue, is computed too)", linewidth=2.2)
    legend_item(ax, 0.2, 0.6, "key_pale", "only read: keys and values of positions 0 … t − 1, appended by earlier "
                "steps")
    legend_item(ax, 0.2, 0.2, "empty", "never stored: the queries of earlier positions, used once at their own step")
    save(fig, "kv_cache_decode_step", png_dir)
