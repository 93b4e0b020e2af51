"""Chapter 8's diagrams (grouped_query_heads.svg, ring_buffer.svg, block_table.svg, latent_attention.svg), drawn by diagrams/draw.py."""

from primitives import FONT, INK, MUTED, SMALL, arrow, box, cell_grid, new_figure, save, text


def grouped_query_heads(png_dir=None):
    """Chapter 8: which key/value head each query head reads, for H = 4 and H_kv = 4, 2, 1."""
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

        x_q = [left + w / 2 + h * (w + gap) for h in range(4)]  # centres of the query heads
        # each key/value head is drawn as large as in (a), under the middle of its group: the area shows the cache
        x_kv = [sum(x_q[g * group:(g + 1) * group]) / group for g in range(kv_heads)]

        for h in range(4):
            box(ax, x_q[h], y_q, w, 0.42, f"q{'₀₁₂₃'[h]}", style="query", size=SMALL, rounded=False)
            arrow(ax, (x_kv[h // group], y_kv + 0.3), (x_q[h], y_q - 0.22))
        for g in range(kv_heads):
            box(ax, x_kv[g], y_kv, w, 0.6, f"k{'₀₁₂₃'[g]}\nv{'₀₁₂₃'[g]}", style="key", size=SMALL, rounded=False)
        text(ax, centre, 1.1, setting, size=SMALL)
        text(ax, centre, 0.8, f"cache: {kv_heads} head{'s' if kv_heads > 1 else ''} per layer and position",
             size=SMALL, color=MUTED)
        text(ax, centre, 0.5, "as large as multi-head" if kv_heads == 4 else f"{4 // kv_heads}× smaller",
             size=SMALL, color=MUTED)
    text(ax, 0.2, y_q, "queries", size=SMALL, ha="left", color=MUTED, rotation=90)
    text(ax, 0.2, y_kv, "keys, values", size=SMALL, ha="left", color=MUTED, rotation=90)
    save(fig, "grouped_query_heads", png_dir)


def ring_buffer(png_dir=None):
    """Chapter 8: the rolling cache of sliding-window attention, window = 4, just after position 9 is written."""
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
    """Chapter 8: three sequences of different lengths, their block tables, and the shared pool of blocks."""
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


def latent_attention(png_dir=None):
    """Chapter 8: multi-head latent attention at a decode step, absorbed form (DeepSeek-V2)."""
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
    arrow(ax, (5.85, 1.15), (6.6, 2.0), "read", side="right", offset=0.06)
    text(ax, 6.2, 1.05, "scores (B, H, 1, S) =\nq_lat · c + q_r · k_r", size=SMALL, ha="left", linespacing=1.3)
    # output
    box(ax, 9.0, 1.2, 1.75, 0.6, "softmax, then\nΣ w c (B, H, 1, d_c)", style="tensor", size=SMALL)
    arrow(ax, (8.0, 2.0), (8.6, 1.5))
    box(ax, 9.0, 0.35, 1.75, 0.45, "W_o W_uv → (B, 1, E)", style="layer", size=SMALL)
    arrow(ax, (9.0, 0.9), (9.0, 0.58))
    save(fig, "latent_attention", png_dir)
