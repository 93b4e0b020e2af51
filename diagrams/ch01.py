"""Chapter 1's diagrams (embedding_lookup.svg), drawn by diagrams/draw.py."""

from primitives import FONT, MUTED, SMALL, arrow, box, cell_grid, new_figure, save, text


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
