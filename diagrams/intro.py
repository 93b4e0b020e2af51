"""The introduction's diagrams (encoder_bottleneck.svg, soft_alignment.svg), drawn by diagrams/draw.py."""

from primitives import FONT, MUTED, SMALL, arrow, box, new_figure, save, text


def encoder_bottleneck(png_dir=None):
    """Introduction: a recurrent encoder–decoder squeezes the source into one vector; with Bahdanau's
    attention every decoder step reads a weighted sum of all encoder states."""
    fig, ax = new_figure(10.4, 5.95, bottom=-0.35)
    source, target = ["life", "is", "short"], ["la", "vie", "est", "courte"]
    w, h, pitch = 0.9, 0.5, 1.25  # a state's box and the distance between steps
    x_enc, x_dec, x_c = 0.7, 5.35, 4.45  # the first encoder and decoder step

    def recurrent(y, xs, names, style):
        for i, (x, name) in enumerate(zip(xs, names, strict=True)):
            box(ax, x, y, w, h, name, style=style, size=SMALL)
            if i:
                arrow(ax, (xs[i - 1] + w / 2, y), (x - w / 2, y))

    # top: without attention, the last encoder state is all the decoder gets
    y = 4.15
    text(ax, 0.2, 5.35, "Without attention: the whole source in one fixed-size vector", size=FONT, ha="left",
         weight="bold")
    xs = [x_enc + i * pitch for i in range(3)]
    recurrent(y, xs, ["h₁", "h₂", "h₃"], "key")
    for x, word in zip(xs, source, strict=True):
        text(ax, x, y - 0.55, word, size=SMALL, color=MUTED)
    box(ax, x_c, y, 0.7, h, "c", style="key_strong", size=FONT)
    arrow(ax, (xs[-1] + w / 2, y), (x_c - 0.35, y))
    text(ax, x_c, y + 0.55, "context vector", size=SMALL, color=MUTED)
    ds = [x_dec + 0.45 + i * pitch for i in range(4)]
    recurrent(y, ds, ["s₁", "s₂", "s₃", "s₄"], "query")
    arrow(ax, (x_c + 0.35, y), (ds[0] - w / 2, y))
    for x, word in zip(ds, target, strict=True):
        text(ax, x, y - 0.55, word, size=SMALL, color=MUTED)
    text(ax, 0.2, 3.2, "encoder (reads the source)", size=SMALL, ha="left", color=MUTED)
    text(ax, ds[0] - w / 2, 3.2, "decoder (writes the translation from c alone)", size=SMALL, ha="left",
         color=MUTED)

    # bottom: with attention, decoder step t reads a weighted sum of every encoder state
    y = 0.45
    text(ax, 0.2, 2.6, "With attention (Bahdanau et al.): every step reads all the encoder states", size=FONT,
         ha="left", weight="bold")
    recurrent(y, xs, ["h₁", "h₂", "h₃"], "key")
    for x, word in zip(xs, source, strict=True):
        text(ax, x, y - 0.55, word, size=SMALL, color=MUTED)
    box(ax, x_c, 1.75, 0.7, h, "c₃", style="key_strong", size=FONT)
    for i, x in enumerate(xs):  # h_i -> c3, each arrow named by its weight, written just above its start
        start, end = (x + 0.2, y + h / 2), (x_c - 0.35, 1.65 + 0.1 * i)
        arrow(ax, start, end)
        t = 0.22 if i < 2 else 0.3
        text(ax, start[0] + t * (end[0] - start[0]) - 0.1, start[1] + t * (end[1] - start[1]) + 0.16,
             f"α₃,{'₁₂₃'[i]}", size=SMALL, color=MUTED)
    recurrent(y, ds, ["s₁", "s₂", "s₃", "s₄"], "query")
    arrow(ax, (ds[1] - 0.25, y + h / 2), (x_c + 0.35, 1.62))  # the previous state s2 scores every h_i
    arrow(ax, (x_c + 0.35, 1.88), (ds[2] - 0.15, y + h / 2))
    for x, word in zip(ds, target, strict=True):
        text(ax, x, y - 0.55, word, size=SMALL, color=MUTED)
    text(ax, ds[0] - w / 2, 1.75, "c₃ = Σᵢ α₃,ᵢ hᵢ: weights from a softmax\nof the scores f(s₂, hᵢ), new at every step",
         size=SMALL, ha="left", linespacing=1.35)
    save(fig, "encoder_bottleneck", png_dir)


def soft_alignment(png_dir=None):
    """Introduction: attention as a soft alignment, the cross-attention weights of chapter 4's trained reverser
    on the first evaluation sequence (computed from the stored weights; two decimals, so every machine draws
    the same colours)."""
    import torch  # only this drawing computes: the trained model's weights on one sequence

    from attention_book.trained import evaluation_tokens, load_reverser
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    reverser, _ = load_reverser()
    source, target = evaluation_tokens(reverser.config, 1)  # (1, S), (1, T)
    with torch.no_grad():
        _, weights = reverser(source, target, need_weights=True)  # (1, T, S)
    weights = [[round(float(w), 2) for w in row] for row in weights[0]]  # (T, S)
    S, T, cell = len(weights[0]), len(weights), 0.46
    fig, ax = new_figure(7.3, 5.6)
    text(ax, 0.2, 5.3, "Attention as a soft alignment: a trained decoder's weights", size=FONT, ha="left",
         weight="bold")
    text(ax, 0.2, 5.0, "chapter 4's model, trained to write its source backwards", size=SMALL, ha="left", color=MUTED)
    x0, y_top = 1.75, 4.3
    blues = colormaps["Blues"]
    for i in range(T):  # row i: output position i; column j: source position j
        for j in range(S):
            ax.add_patch(Rectangle((x0 + j * cell, y_top - (i + 1) * cell), cell, cell, linewidth=0.5,
                                   facecolor=blues(weights[i][j]), edgecolor="white"))
    for j, token in enumerate(source[0].tolist()):
        text(ax, x0 + (j + 0.5) * cell, y_top + 0.2, str(token), size=SMALL)
    for i, token in enumerate(target[0].tolist()):
        text(ax, x0 - 0.2, y_top - (i + 0.5) * cell, str(token), size=SMALL, ha="right")
    text(ax, x0 + S * cell / 2, y_top + 0.48, "source tokens (keys), position 0 to 7", size=SMALL, color=MUTED)
    text(ax, 0.2, y_top - T * cell / 2, "output\ntokens\n(queries)", size=SMALL, ha="left", color=MUTED,
         linespacing=1.3)
    text(ax, x0 + S * cell + 0.2, y_top - T * cell / 2, "dark: weight\nnear 1\n\nwhite: near 0", size=SMALL,
         ha="left", color=MUTED, linespacing=1.3)
    save(fig, "soft_alignment", png_dir)
