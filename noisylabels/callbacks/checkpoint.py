"""Model selection: the best checkpoint by noisy-validation accuracy, never of a warm-up epoch."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor


class WarmupAwareCheckpoint(ModelCheckpoint):
    """:class:`~lightning.pytorch.callbacks.ModelCheckpoint` that never keeps a checkpoint of a
    warm-up epoch (``pl_module.in_warmup``) as best/top-k, so model selection only sees the
    method's own objective; ``save_last`` checkpoints are still written."""

    def check_monitor_top_k(self, trainer: L.Trainer, current: Tensor | None = None) -> bool:
        if getattr(trainer.lightning_module, "in_warmup", False):
            return False
        return super().check_monitor_top_k(trainer, current)
