"""Chapter 7's diagrams (kv_cache_decode_step.svg), drawn by diagrams/draw.py."""

from primitives import FONT, MUTED, SMALL, arrow, box, legend_item, new_figure, save, text


def kv_cache_decode_step(png_dir=None):
    """Chapter 7: one decode step. Only the newest position's q, k, v are computed; k and v are written into
    slot t of the cache's preallocated buffers (B, H, L, d), whose later slots stay empty."""
    fig, ax = new_figure(11.0, 6.7)
    t, cw, ch, x0 = 5, 0.62, 0.42, 2.75  # newest position, cell width and height, the grid's left edge
    spare = 2  # empty slots drawn after t (the buffer goes on to L - 1)
    sub = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")

    def x_of(j):
        return x0 + (j + 0.5) * cw

    def row(y, style_of, label_of, title, shape, edge_of=lambda j: 1.0, slots=t + 1):
        for j in range(slots):
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
    for j, label in enumerate([*map(str, range(t)), "t", "t+1", "… L−1"]):
        text(ax, x_of(j), y_pos, label, size=SMALL, color=MUTED)

    def new_or_read(j):
        return "key_strong" if j == t else "key_pale" if j < t else "empty"

    def thick_if_new(j):
        return 2.2 if j == t else 1.0

    def cached(name):
        return lambda j: name + subscript(j) if j <= t else ""

    row(y_k, new_or_read, cached("k"), "KVCache.keys", "(B, H, L, d_k)", thick_if_new, t + 1 + spare)
    row(y_v, new_or_read, cached("v"), "KVCache.values", "(B, H, L, d_v)", thick_if_new, t + 1 + spare)
    text(ax, x0 + (t + 1) * cw / 2, y_v - 0.38, "append returns [..., :S, :], S = t + 1", size=SMALL,
         color=MUTED)
    text(ax, x_of(t + spare / 2 + 0.5), y_v - 0.38, "empty slots", size=SMALL, color=MUTED)
    row(y_q, lambda j: "query_strong" if j == t else "empty", lambda j: "qₜ" if j == t else "",
        "queries", "never cached", thick_if_new)
    row(y_s, lambda j: "tensor", lambda j: "qₜ·k" + subscript(j), "scores (B, H, 1, S)", "= q Kᵀ / √d_k")
    row(y_w, lambda j: "tensor", lambda j: "w" + subscript(j), "weights (B, H, 1, S)", "softmax over keys")

    right = x0 + (t + 1) * cw  # the S positions held
    buffer_right = right + spare * cw  # the buffer's drawn slots

    # x_t and its three projections; k and v are written into slot t.
    x_box, w_box = 10.05, 1.3
    box(ax, x_box, (y_k + y_q) / 2, w_box, y_k - y_q + ch, "xₜ\n(B, 1, E)\nnewest\ntoken", style="tensor")
    for y, label, end in ((y_k, "k  (B, H, 1, d_k)", buffer_right), (y_v, "v  (B, H, 1, d_v)", buffer_right),
                          (y_q, "q  (B, H, 1, d_k)", right)):
        arrow(ax, (x_box - w_box / 2, y), (end + 0.05, y), label=label, side="above", offset=0.05)
    text(ax, (buffer_right + x_box - w_box / 2) / 2, y_q - 0.22, "used now, not kept", size=SMALL, color=MUTED)
    text(ax, (buffer_right + x_box - w_box / 2) / 2, y_k + 0.75, "KVCache.append(k, v): slot t", size=SMALL,
         weight="bold")

    # The single query's output: weights @ V over all S cached values.
    arrow(ax, (right + 0.05, y_w), (x_box - 0.85, y_w), label="weights @ V\n(all S values)", side="above",
          offset=0.05)
    box(ax, x_box, y_w, 1.7, 0.62, "out (B, H, 1, d_v)\n= Σⱼ wⱼ vⱼ", style="tensor", size=SMALL)

    legend_item(ax, 0.2, 1.0, "key_strong", "computed this step and written into slot t: one key kₜ and one value vₜ, the new "
                "row of K and V (the query qₜ, blue, is computed too)", linewidth=2.2)
    legend_item(ax, 0.2, 0.6, "key_pale", "only read: keys and values of positions 0 … t − 1, written by earlier "
                "steps")
    legend_item(ax, 0.2, 0.2, "empty", "empty: the queries of earlier positions, never stored (used once at their own "
                "step), and the slots after t, allocated up to L")
    save(fig, "kv_cache_decode_step", png_dir)
