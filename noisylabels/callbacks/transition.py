"""Observability of the transition matrix a method corrects with (row-stochastic,
``T[i, j] = P(noisy = j | clean = i)``), and checkpoint selection that skips warm-up epochs.

:class:`TransitionMonitor` logs, at the end of every training epoch in which the method's T̂
changed (each epoch for a learned T such as VolMinNet's, once for a given or estimated T), the
estimation error ``ε_T = ‖T − T̂‖₁,₁ / ‖T‖₁,₁`` against the true T (where the noise has one) as
``transition/t_estimation_error``, and T̂ as a heat-map image ``transition/T_hat`` in TensorBoard.
After fit and after test it writes the T̂ of the model as it stands (after the post-fit test:
the best checkpoint's) to ``transition_estimate.csv`` and ``ε_T`` to ``transition_estimate.json``
in the run dir.
"""

from __future__ import annotations

import json
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from noisylabels.callbacks.artifacts import run_dir
from noisylabels.noise import estimation_error, save_transition

ESTIMATE_FILE = "transition_estimate.csv"
ERROR_FILE = "transition_estimate.json"


def current_transition(pl_module: L.LightningModule) -> Tensor | None:
    """The module's current T̂ (detached, float, CPU), or ``None`` if it has none (yet)."""
    getter = getattr(pl_module, "transition", None)
    T = getter() if callable(getter) else None
    return None if T is None else T.detach().float().cpu()


def true_transition(trainer: L.Trainer) -> Tensor | None:
    """The true T of the run's synthetic noise, or ``None`` where it is unknown."""
    T = getattr(trainer.datamodule, "transition", None)
    return None if T is None else T.detach().float().cpu()


def transition_figure(T: Tensor, title: str = "") -> Any:
    """A matplotlib heat-map of a C x C transition matrix (rows: clean, columns: noisy class),
    with the values written in the cells for up to 10 classes. Needs no display."""
    from matplotlib.figure import Figure

    c = T.shape[0]
    size = 4.0 + min(c, 100) * 0.04
    fig = Figure(figsize=(size + 1.0, size))
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
    fig.tight_layout()
    return fig


def figure_to_array(fig: Any) -> np.ndarray:
    """Render a matplotlib figure with the Agg canvas (no display, no pyplot) to uint8 RGB HWC."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


class TransitionMonitor(L.Callback):
    """Log ε_T and a T̂ heat-map when T̂ changes; write the final T̂ and ε_T to the run dir."""

    def __init__(self) -> None:
        self._last: Tensor | None = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        T_hat = current_transition(pl_module)
        if T_hat is None or (self._last is not None and torch.equal(self._last, T_hat)):
            return
        self._last = T_hat
        true_t = true_transition(trainer)
        error = None if true_t is None else estimation_error(true_t, T_hat)
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

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write(trainer, pl_module)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write(trainer, pl_module)

    @staticmethod
    def write(trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Write the module's T̂ (``transition_estimate.csv``) and ε_T
        (``transition_estimate.json``) to the run dir (process 0; nothing without a T̂)."""
        T_hat = current_transition(pl_module)
        if T_hat is None or not trainer.is_global_zero:
            return
        out = run_dir(trainer)
        out.mkdir(parents=True, exist_ok=True)
        save_transition(T_hat, out / ESTIMATE_FILE)
        true_t = true_transition(trainer)
        summary = {
            "method": getattr(pl_module, "method_name", type(pl_module).__name__),
            "epoch": trainer.current_epoch,
            "t_estimation_error": None if true_t is None else estimation_error(true_t, T_hat),
        }
        (out / ERROR_FILE).write_text(json.dumps(summary, indent=2) + "\n")


class WarmupAwareCheckpoint(ModelCheckpoint):
    """:class:`~lightning.pytorch.callbacks.ModelCheckpoint` that never keeps a checkpoint of a
    warm-up epoch (``pl_module.in_warmup``) as best/top-k, so model selection only sees the
    method's own objective; ``save_last`` checkpoints are still written."""

    def check_monitor_top_k(self, trainer: L.Trainer, current: Tensor | None = None) -> bool:
        if getattr(trainer.lightning_module, "in_warmup", False):
            return False
        return super().check_monitor_top_k(trainer, current)
