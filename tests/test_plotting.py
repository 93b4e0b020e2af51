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


def helper_figures():
    """One figure from every plotting helper, at its default size, with long rows of labels."""
    import matplotlib.pyplot as plt

    from attention_book import plotting

    words = [f"w{i}" for i in range(16)]
    rng = np.random.default_rng(0)
    yield "plot_heatmap", plotting.plot_heatmap(rng.normal(size=(6, 16)), words[:6], words).figure
    yield "plot_attention", plotting.plot_attention(rng.random((6, 6)), words[:6]).figure
    yield "plot_attention_grid", plotting.plot_attention_grid({"a": rng.random((6, 12)), "b": rng.random((6, 12))},
                                                              words[:6], words[:12])
    yield "plot_scaling", plotting.plot_scaling([1, 4, 16], [1, 4, 16], [(0.5, 0.3)] * 3, [(0.4, 0.2)] * 3)
    yield "plot_bars", plotting.plot_bars(words[:8], list(range(1, 9)), ylabel="y", title="t").figure
    yield "plot_lines", plotting.plot_lines([1, 2], {"a": [1, 2], "b": [2, 1]}, xlabel="x", ylabel="y",
                                            title="t").figure
    plt.close("all")


def test_every_helper_draws_text_readable_at_page_width():
    """Issue 40: no helper's figure is wider than PAGE_INCHES (shown at 0.65 of its size or more in the
    article) and no text in it is smaller than MIN_FONT points (9 CSS px or more on the page)."""
    from matplotlib.text import Text

    from attention_book.plotting import MIN_FONT, PAGE_INCHES

    for name, figure in helper_figures():
        width = figure.get_size_inches()[0]
        assert width <= PAGE_INCHES + 1e-9, f"{name}: {width:.2f} in wide, the page shows {PAGE_INCHES}"
        texts = [t for t in figure.findobj(Text) if t.get_text().strip() and t.get_visible()]
        small = sorted({(t.get_fontsize(), t.get_text()[:20]) for t in texts if t.get_fontsize() < MIN_FONT})
        assert not small, f"{name}: text below {MIN_FONT} pt: {small[:5]}"
