"""The T̂ heat-map the transition monitor logs: every cell in the colour of its value, the colour
bar from 1 (top) to 0, the title in the band above the cells."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from noisylabels.callbacks.transition_monitor import _viridis, transition_image


def _cells(image: np.ndarray, c: int) -> tuple[int, int, int]:
    """``(left, top, cell)``: where the grid of a ``c``-class heat-map lies (found from its
    colours: the grid is the one block of viridis pixels left of the colour bar)."""

    def code(rgb: np.ndarray) -> np.ndarray:
        rgb = rgb.astype(np.int64)
        return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]

    viridis = np.isin(code(image), code(_viridis()))
    rows, cols = np.nonzero(viridis)
    top, left = rows.min(), cols.min()
    grid_right = left + int(np.argmin(viridis[top, left:]))
    return int(left), int(top), int((grid_right - left) // c)


@pytest.mark.parametrize("c", [2, 10, 14, 100])
def test_every_cell_has_the_colour_of_its_value(c: int) -> None:
    gen = torch.Generator().manual_seed(c)
    T = torch.softmax(3 * torch.randn(c, c, generator=gen), dim=1)
    image = transition_image(T, "T̂, epoch 3, ε_T = 0.123")
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    left, top, cell = _cells(image, c)
    lut = _viridis()
    inset = 1 if cell < 20 else 2  # a corner of the cell: the value's text is in its middle
    for i in range(c):
        for j in range(c):
            pixel = image[top + i * cell + inset, left + j * cell + inset]
            expected = lut[int(round(float(T[i, j]) * 255))]
            assert tuple(pixel) == tuple(expected), (i, j)


def test_the_colour_bar_runs_from_one_at_the_top_to_zero() -> None:
    image = transition_image(torch.eye(3), "")
    left, top, cell = _cells(image, 3)
    lut = _viridis()
    white = (image[top] == 255).all(axis=1)
    x = next(x for x in range(left + 3 * cell, image.shape[1]) if not white[x])
    assert tuple(image[top, x]) == tuple(lut[255])
    assert tuple(image[top + 3 * cell - 1, x]) == tuple(lut[0])


def test_the_title_is_written_above_the_cells() -> None:
    T = torch.full((4, 4), 0.25)
    a, b = transition_image(T, "T̂, epoch 1"), transition_image(T, "T̂, epoch 2, ε_T = 0.5")
    _, top, _ = _cells(a, 4)
    differ = np.nonzero((a != b).any(axis=(1, 2)))[0]
    assert len(differ) > 0 and differ.max() < top
