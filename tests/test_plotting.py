"""The shared figures read well: cell text contrasts with its cell, and diverging maps are centred at 0."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attention_book.plotting import plot_heatmap, text_colour  # noqa: E402


@pytest.mark.parametrize("cmap", ["Blues", "Greens", "viridis", "RdBu_r"])
def test_cell_text_is_dark_on_light_cells_and_light_on_dark_ones(cmap):
    values = np.array([[0.0, 0.25], [0.75, 1.0]]) - (0.5 if cmap == "RdBu_r" else 0.0)
    ax = plot_heatmap(values, ["a", "b"], ["c", "d"], cmap=cmap)
    image = ax.images[0]
    for label, v in zip(ax.texts, values.ravel(), strict=True):
        r, g, b, _ = image.cmap(image.norm(v))
        light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5  # a rough lightness, independent of text_colour's formula
        if abs(0.299 * r + 0.587 * g + 0.114 * b - 0.5) > 0.15:  # clearly light or clearly dark cells
            assert label.get_color() == ("black" if light else "white"), (cmap, v)
    plt.close("all")


def test_diverging_maps_put_their_neutral_colour_at_zero():
    ax = plot_heatmap(np.array([[-1.0, 0.0, 9.0]]), ["q"], ["a", "b", "c"], cmap="RdBu_r")
    assert ax.images[0].norm(0.0) == pytest.approx(0.5)
    plt.close("all")


def test_text_colour_on_black_and_white():
    assert (text_colour((0, 0, 0, 1)), text_colour((1, 1, 1, 1))) == ("white", "black")


def test_attention_grid_shares_one_colour_scale():
    """Chapter 3's per-head grid: every map on the scale 0 to 1, one colour bar, spare axes hidden (issue 29)."""
    import matplotlib.pyplot as plt
    import torch

    from attention_book.plotting import plot_attention_grid

    flat, sharp = torch.full((3, 3), 1 / 3), torch.eye(3)
    fig = plot_attention_grid({"flat": flat, "sharp": sharp, "half": sharp / 2}, ["a", "b", "c"], columns=2)
    images = [ax.images[0] for ax in fig.axes if ax.images and ax.get_title()]
    assert [(im.norm.vmin, im.norm.vmax) for im in images] == [(0, 1)] * 3
    assert sum(ax.get_label() == "<colorbar>" for ax in fig.axes) == 1
    assert not fig.axes[3].axison  # the fourth cell of the 2 × 2 grid is empty
    plt.close(fig)
