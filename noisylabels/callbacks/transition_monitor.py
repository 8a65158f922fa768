"""Observability of the transition matrix a method corrects with (row-stochastic,
``T[i, j] = P(noisy = j | clean = i)``).

:class:`TransitionMonitor` logs, at the end of every training epoch in which the method's T̂
changed (each epoch for a learned T such as VolMinNet's, once for a given or estimated T), the
estimation error ``ε_T = ‖T − T̂‖₁,₁ / ‖T‖₁,₁`` against the true T (where the noise has one) as
``transition/t_estimation_error``, and T̂ as a heat-map image ``transition/T_hat`` in TensorBoard.
The run writes the final T̂ and ε_T to its folder (:mod:`noisylabels.run.artifacts`).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from noisylabels.methods.core.base import NoisyLabelMethod


@functools.cache
def _font(size: int) -> Any:
    """DejaVu Sans at ``size`` pixels, the font matplotlib ships (it has T̂'s and ε's glyphs)."""
    from matplotlib import get_data_path
    from PIL import ImageFont

    return ImageFont.truetype(os.path.join(get_data_path(), "fonts", "ttf", "DejaVuSans.ttf"), size)


def _viridis() -> np.ndarray:
    """matplotlib's viridis as a ``(256, 3)`` uint8 table."""
    from matplotlib import colormaps

    return (colormaps["viridis"](np.linspace(0.0, 1.0, 256))[:, :3] * 255).round().astype(np.uint8)


def transition_image(T: Tensor, title: str = "") -> np.ndarray:
    """A heat-map of a C x C transition matrix as a uint8 RGB ``(H, W, 3)`` image (rows: clean
    class i, columns: noisy class j; viridis over [0, 1] with its colour bar), the values written
    in the cells for up to 10 classes. Drawn with Pillow: a few milliseconds, where a matplotlib
    figure took over a hundred (it is drawn at every epoch in which T̂ changes)."""
    from PIL import Image, ImageDraw

    c = T.shape[0]
    cell = max(2, 360 // c)
    grid = c * cell
    left, top, gap, bar, right, bottom = 56, 30, 14, 14, 34, 44
    width, height = left + grid + gap + bar + right, top + grid + bottom
    values = T.detach().float().cpu().clamp(0.0, 1.0).numpy()
    lut = _viridis()
    cells = lut[(values * 255).round().astype(np.int64)]
    canvas = np.full((height, width, 3), 255, dtype=np.uint8)
    canvas[top : top + grid, left : left + grid] = np.kron(cells, np.ones((cell, cell, 1)))
    ramp = lut[np.linspace(255, 0, grid).round().astype(np.int64)]  # 1 at the top
    canvas[top : top + grid, left + grid + gap : left + grid + gap + bar] = ramp[:, None, :]
    image = Image.fromarray(canvas)
    draw = ImageDraw.Draw(image)
    font, small = _font(11), _font(9)
    black = (0, 0, 0)
    draw.text((left + grid / 2, top / 2), title, fill=black, font=font, anchor="mm")
    draw.text((left + grid / 2, height - 12), "noisy class j", fill=black, font=font, anchor="mm")
    label = Image.new("RGB", (grid, 16), "white")
    ImageDraw.Draw(label).text((grid / 2, 8), "clean class i", fill=black, font=font, anchor="mm")
    image.paste(label.rotate(90, expand=True), (6, top))
    x_bar = left + grid + gap + bar + 3
    for value, y in ((1.0, top), (0.5, top + grid / 2), (0.0, top + grid - 1)):
        draw.text((x_bar, y), f"{value:g}", fill=black, font=small, anchor="lm")
    if c <= 10:
        for k in range(c):
            middle = k * cell + cell / 2
            draw.text((left + middle, top + grid + 8), str(k), fill=black, font=small, anchor="mm")
            draw.text((left - 6, top + middle), str(k), fill=black, font=small, anchor="rm")
        for i in range(c):
            for j in range(c):
                value = float(values[i, j])
                ink = black if value > 0.5 else (255, 255, 255)
                at = (left + j * cell + cell / 2, top + i * cell + cell / 2)
                draw.text(at, f"{value:.2f}", fill=ink, font=small, anchor="mm")
    return np.asarray(image).copy()


class TransitionMonitor(L.Callback):
    """Log ε_T and a T̂ heat-map to the loggers at the end of each epoch in which T̂ changed."""

    def __init__(self) -> None:
        self._last: Tensor | None = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not isinstance(pl_module, NoisyLabelMethod):
            return
        T_hat = pl_module.transition_estimate()
        if T_hat is None or (self._last is not None and torch.equal(self._last, T_hat)):
            return
        self._last = T_hat
        error = pl_module.t_estimation_error(T_hat)
        if not trainer.is_global_zero:
            return
        title = f"T̂, epoch {trainer.current_epoch}"
        if error is not None:
            title += f", ε_T = {error:.3f}"
            # straight to the loggers: the value is the same on every process, nothing to reduce
            for logger in trainer.loggers:
                logger.log_metrics({"transition/t_estimation_error": error}, trainer.global_step)
        self._add_figure(trainer, T_hat, title)

    @staticmethod
    def _add_figure(trainer: L.Trainer, T_hat: Tensor, title: str) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        if not loggers:
            return
        image = transition_image(T_hat, title)
        for logger in loggers:
            logger.experiment.add_image(
                "transition/T_hat", image, trainer.global_step, dataformats="HWC"
            )
