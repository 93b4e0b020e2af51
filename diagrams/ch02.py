"""Chapter 2's diagrams (one_query_walk.svg, scaled_dot_product_attention.svg), drawn by diagrams/draw.py."""

from primitives import FONT, MUTED, SMALL, arrow, box, new_figure, save, text


def scaled_dot_product_attention(png_dir=None):
    """Chapter 2: X -> Q, K, V -> scores -> / sqrt(d_k) -> (+ mask) -> softmax -> weights @ V, every shape named."""
    fig, ax = new_figure(8.8, 7.65)
    th = 0.62  # the height of a two-line tensor box
    x_q, x_k, x_v = 1.55, 4.4, 7.25

    text(ax, 0.25, 7.35, "Scaled dot-product attention with chapter 2's sizes", size=FONT, ha="left",
         weight="bold")
    text(ax, 0.25, 6.92, "T = 6 queries, S = 6 keys (S = T in self-attention), d_in = 16, d_k = 24, d_v = 28\n"
         "Every weight as the chapter stores it, (d_in, d_out), applied as X @ W",
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


def _one_query_numbers():
    """Chapter 2's scores and weights for the query of word 1, computed as the chapter computes them (the
    same sentence, seeds and call order), rounded as it prints them."""
    import torch
    from torch import nn

    import attention_book as ab

    token_ids = ab.encode(ab.SENTENCE, ab.build_vocab(ab.SENTENCE))
    torch.manual_seed(123)
    x = nn.Embedding(6, 16)(token_ids).detach()  # (T, E) = (6, 16)
    torch.manual_seed(123)
    W_query, W_key = torch.rand(24, 16).T, torch.rand(24, 16).T  # (E, d_k) each; W_value is drawn third
    omega = (x[1] @ W_query) @ (x @ W_key).T  # (T,)
    alpha = torch.softmax(omega / 24**0.5, dim=0)  # (T,)
    return [f"{w:.2f}".replace("-", "−") for w in omega.tolist()], [f"{a:.2f}" for a in alpha.tolist()]


def one_query_walk(png_dir=None):
    """Chapter 2: one query (word 1, "is") against the six keys: scores, softmax, the weighted sum of values,
    with the numbers the chapter prints."""
    omega, alpha = _one_query_numbers()
    fig, ax = new_figure(9.6, 5.3, bottom=-0.1)
    words = ["Life", "is", "short", "eat", "dessert", "first"]
    sub = "₀₁₂₃₄₅"
    text(ax, 0.2, 4.95, "Attention for one word: the query of word 1, \u201cis\u201d, against every word's key",
         size=FONT, ha="left", weight="bold")
    x0, pitch, y_key, y_score, y_weight, y_value, y_sum = 2.35, 1.1, 4.05, 3.05, 2.05, 1.15, 0.3
    box(ax, 0.95, y_key, 1.1, 0.42, "q₁ = x₁ W_Q", style="query_strong", size=SMALL)
    text(ax, 0.95, y_score, "ω₁,ⱼ = q₁ · kⱼ", size=SMALL)
    text(ax, 0.95, y_weight, "α₁,ⱼ: softmax over j\nof ω₁,ⱼ / √d_k; six\nweights summing to 1", size=SMALL,
         linespacing=1.3)
    text(ax, 0.95, y_value, "α₁,ⱼ times\nthe value vⱼ", size=SMALL, linespacing=1.3)
    for j, word in enumerate(words):
        x = x0 + j * pitch
        box(ax, x, y_key, 0.9, 0.42, f"k{sub[j]}", style="key", size=SMALL)
        text(ax, x, y_key + 0.4, word, size=SMALL, color=MUTED)
        # q1 meets key j: an arrow from the query's row into each score
        arrow(ax, (1.5, y_key - 0.12), (x - 0.3, y_score + 0.25))
        arrow(ax, (x, y_key - 0.21), (x, y_score + 0.25))
        box(ax, x, y_score, 0.9, 0.5, f"ω₁,{sub[j]}\n{omega[j]}", style="tensor", size=SMALL)
        arrow(ax, (x, y_score - 0.25), (x, y_weight + 0.25))
        box(ax, x, y_weight, 0.9, 0.5, f"α₁,{sub[j]}\n{alpha[j]}", style="query", size=SMALL)
        arrow(ax, (x, y_weight - 0.25), (x, y_value + 0.21))
        box(ax, x, y_value, 0.9, 0.42, f"× v{sub[j]}", style="key_pale", size=SMALL)
        arrow(ax, (x, y_value - 0.21), (x0 + 2.5 * pitch + (j - 2.5) * 0.12, y_sum + 0.21))
    box(ax, x0 + 2.5 * pitch, y_sum, 3.4, 0.42, "Σ:  z₁ = Σⱼ α₁,ⱼ vⱼ,  d_v wide", style="query_strong",
        size=SMALL)
    save(fig, "one_query_walk", png_dir)
