"""Model selection: the best checkpoint by noisy-validation accuracy, never of a warm-up epoch."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor


class WarmupAwareCheckpoint(ModelCheckpoint):
    """:class:`~lightning.pytorch.callbacks.ModelCheckpoint` that never keeps a checkpoint of a
    warm-up epoch (``pl_module.in_warmup``) as best/top-k, so model selection only sees the
    method's own objective.

    ``last.ckpt`` is not this callback's: :class:`~noisylabels.callbacks.LastCheckpoint` writes
    it at the end of every epoch of every run (warm-up included), so ``save_last`` changes
    nothing here (Lightning's own ``save_last`` writes only when a top-k checkpoint is written).
    """

    def check_monitor_top_k(self, trainer: L.Trainer, current: Tensor | None = None) -> bool:
        if getattr(trainer.lightning_module, "in_warmup", False):
            return False
        return super().check_monitor_top_k(trainer, current)

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: Any) -> None:
        """``last.ckpt`` is :class:`~noisylabels.callbacks.LastCheckpoint`'s."""
