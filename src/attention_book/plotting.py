"""Figures shared by every chapter, so that all plots look alike."""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import CenteredNorm

# Readable at page width (issue 40): the book's article is 676 px wide at a 1280-px window and the inline
# backend draws at 100 dpi, so a figure at most PAGE_INCHES wide shows at 0.65 of its size or more, and
# text of MIN_FONT points (13.9 px drawn) at 9 CSS px or more. tests/test_plotting.py holds every helper
# to both; tests/browser/test_page_layout.py measures the rendered pages.
PAGE_INCHES = 10.0
MIN_FONT = 10
DIVERGING = {"RdBu", "RdBu_r", "coolwarm", "bwr", "seismic", "PiYG", "PRGn", "BrBG", "PuOr", "RdGy", "RdYlBu"}


def _as_array(matrix) -> np.ndarray:
    if hasattr(matrix, "detach"):
        matrix = matrix.detach().cpu().numpy()
    return np.asarray(matrix)


def plot_heatmap(matrix, row_labels, col_labels, *, ax=None, title=None, xlabel="key", ylabel="query",
                 cmap="viridis", annotate=True, fmt="{:.2f}", vmin=None, vmax=None, colorbar=True,
                 fontsize=MIN_FONT):
    """A matrix with labelled rows and columns and its values written in the cells (chapters 1-5).

    `vmin`/`vmax` fix the colour scale, so that several heatmaps compare on one scale."""
    values = _as_array(matrix)
    if values.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"matrix of shape {values.shape} does not match {len(row_labels)} row and "
                         f"{len(col_labels)} column labels")
    if ax is None:
        cell = min(0.75, (PAGE_INCHES - 2.0) / len(col_labels))  # inches per column, within the page
        _, ax = plt.subplots(figsize=(cell * len(col_labels) + 2.0, 0.6 * len(row_labels) + 1.5))
    norm = None
    if cmap in DIVERGING and np.nanmin(values) < 0 < np.nanmax(values):
        norm = CenteredNorm()  # symmetric about 0: the neutral colour means 0, not the middle of the range
    if norm is not None and (vmin is not None or vmax is not None):
        norm = None  # an explicit scale wins over the centred one
    image = ax.imshow(values, cmap=cmap, norm=norm, vmin=None if norm else vmin, vmax=None if norm else vmax)
    ax.set_xticks(range(len(col_labels)), labels=col_labels, rotation=45, ha="right")
    ax.set_yticks(range(len(row_labels)), labels=row_labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if annotate:
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=fontsize,
                    color=text_colour(image.cmap(image.norm(v))))
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.figure.tight_layout()
    return ax


def text_colour(rgba) -> str:
    """Black on light cells, white on dark ones, for any colormap: by the cell colour's relative luminance."""
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3])  # sRGB -> linear
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.179 else "white"


def plot_attention(weights, query_tokens, key_tokens=None, *, ax=None, title="attention weights", **options):
    """Attention weights (T, S) with the query tokens down and the key tokens across (chapters 2-5).

    `options` go to `plot_heatmap`: `vmin=0, vmax=1` puts several maps on one scale."""
    key_tokens = query_tokens if key_tokens is None else key_tokens
    return plot_heatmap(weights, query_tokens, key_tokens, ax=ax, title=title, cmap="Blues", **options)


def plot_attention_grid(maps: dict, query_tokens, key_tokens=None, *, columns=2, title=None, fontsize=MIN_FONT + 1,
                        cell_inches=0.45, annotate=True):
    """Several attention maps (title -> (T, S) weights) in a grid on one colour scale, 0 to 1 (chapters 3-4).

    One shared scale and one colour bar: a flat map looks flat beside a sharp one."""
    key_tokens = query_tokens if key_tokens is None else key_tokens
    rows = -(-len(maps) // columns)
    cell_inches = min(cell_inches, ((PAGE_INCHES - 0.8) / columns - 1.3) / len(key_tokens))  # within the page
    width = columns * (cell_inches * len(key_tokens) + 1.3) + 0.8
    height = rows * (cell_inches * len(query_tokens) + 1.2)
    fig, axes = plt.subplots(rows, columns, figsize=(width, height), squeeze=False)
    for ax, (name, weights) in zip(axes.flat, maps.items(), strict=False):  # more axes than maps
        plot_heatmap(weights, query_tokens, key_tokens, ax=ax, title=name, cmap="Blues", vmin=0, vmax=1,
                     colorbar=False, fontsize=fontsize, annotate=annotate)
        ax.tick_params(labelsize=fontsize)  # text at one size: readable when the page shrinks the figure
        ax.xaxis.label.set_size(fontsize)
        ax.yaxis.label.set_size(fontsize)
        ax.title.set_size(fontsize + 1)
    for ax in list(axes.flat)[len(maps):]:
        ax.axis("off")
    image = axes.flat[0].images[0]
    fig.colorbar(image, ax=axes.ravel().tolist(), fraction=0.02, pad=0.02, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def plot_scaling(d_ks, variances, unscaled, scaled):
    """The √d_k argument in three panels (chapter 2), its text readable at the page's width.

    `variances[i]` is Var(q·k) at d_ks[i]; `unscaled`/`scaled` are lists of (max weight, Jacobian norm).
    """
    fig, (ax_var, ax_max, ax_grad) = plt.subplots(1, 3, figsize=(PAGE_INCHES, 3.4))
    ax_var.plot(d_ks, variances, "o-", label="measured Var(q·k)")
    ax_var.plot(d_ks, d_ks, "k--", label="d_k")
    ax_var.set(xscale="log", yscale="log", xlabel="d_k", title="variance of a dot product")
    for data, style, name in ((unscaled, "o-", "q·k"), (scaled, "s-", "q·k / √d_k")):
        ax_max.plot(d_ks, [m for m, _ in data], style, label=name)
        ax_grad.plot(d_ks, [g for _, g in data], style, label=name)
    ax_max.set(xscale="log", xlabel="d_k", ylim=(0, 1.05), title="largest softmax weight")
    ax_grad.set(xscale="log", xlabel="d_k", ylim=(0, None), title="‖∂softmax/∂scores‖")
    for ax in (ax_var, ax_max, ax_grad):
        ax.legend(fontsize=10)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=11)
        ax.xaxis.label.set_size(11)
        ax.title.set_size(12)
    fig.tight_layout()
    return fig


def plot_bars(labels, values, *, ylabel, title, ax=None):
    """A labelled bar chart with the values written on the bars (benchmark sections)."""
    if len(labels) != len(values):
        raise ValueError(f"labels and values must have one entry per bar, got {len(labels)} labels and "
                         f"{len(values)} values")
    if ax is None:
        _, ax = plt.subplots(figsize=(min(1.6 * len(labels) + 2, PAGE_INCHES), 3.5))
    bars = ax.bar(labels, values, color=plt.cm.tab10.colors[: len(labels)])
    ax.bar_label(bars, fmt="%.3g")
    ax.set(ylabel=ylabel, title=title)
    ax.figure.tight_layout()
    return ax


def plot_lines(x, series: dict, *, xlabel, ylabel, title, ax=None, logx=False, logy=False, marker="o"):
    """One line per entry of `series` (label -> values over `x`): loss curves and benchmarks (chapters 6-9)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for label, values in series.items():
        ax.plot(x, _as_array(values), marker=marker, markersize=3, label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend()
    ax.grid(alpha=0.3)
    return ax
