"""Observability of the transition matrix a method corrects with (row-stochastic,
``T[i, j] = P(noisy = j | clean = i)``).

:class:`TransitionMonitor` logs, at the end of every training epoch in which the method's T̂
changed (each epoch for a learned T such as VolMinNet's, once for a given or estimated T), the
estimation error ``ε_T = ‖T − T̂‖₁,₁ / ‖T‖₁,₁`` against the true T (where the noise has one) as
``transition/t_estimation_error``, and T̂ as a heat-map image ``transition/T_hat`` in TensorBoard.
The run writes the final T̂ and ε_T to its folder (:mod:`noisylabels.run.artifacts`).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from noisylabels.methods.core.base import NoisyLabelMethod


def transition_figure(T: Tensor, title: str = "") -> Any:
    """A matplotlib heat-map of a C x C transition matrix (rows: clean, columns: noisy class),
    with the values written in the cells for up to 10 classes. Needs no display."""
    from matplotlib.figure import Figure

    c = T.shape[0]
    size = 4.0 + min(c, 100) * 0.04
    fig = Figure(figsize=(size + 1.0, size))
    # fixed margins that hold the labels, title and colorbar at every size: tight_layout would
    # measure each of the cells' texts by drawing them once more (a quarter of the figure's time)
    fig.subplots_adjust(left=0.8 / (size + 1.0), right=0.97, bottom=0.55 / size, top=1 - 0.4 / size)
    ax = fig.add_subplot()
    image = ax.imshow(T.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax)
    ax.set_xlabel("noisy class j")
    ax.set_ylabel("clean class i")
    ax.set_title(title)
    if c <= 10:
        ax.set_xticks(range(c))
        ax.set_yticks(range(c))
        for i in range(c):
            for j in range(c):
                value = float(T[i, j])
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if value > 0.5 else "white",
                )
    return fig


def figure_to_array(fig: Any) -> np.ndarray:
    """Render a matplotlib figure with the Agg canvas (no display, no pyplot) to uint8 RGB HWC."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


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
        image = figure_to_array(transition_figure(T_hat, title))
        for logger in loggers:
            logger.experiment.add_image(
                "transition/T_hat", image, trainer.global_step, dataformats="HWC"
            )
