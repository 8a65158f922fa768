"""A callback that interrupts the training process from inside, for the kill-and-resume tests.

Passed to the real command line with ``--trainer.callbacks+=interrupt.InterruptAt`` (the tests
put this folder on ``PYTHONPATH``), it sends the process a signal when training reaches a given
epoch and batch: SIGKILL (no chance to clean up) or SIGTERM (what a batch scheduler sends).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning as L


class InterruptAt(L.Callback):
    """Send ``sig`` to this process before training batch ``batch`` of epoch ``epoch`` (0-based;
    batch 0 of the first epoch after a warm-up comes right after the estimation point)."""

    def __init__(self, epoch: int, batch: int, sig: int = int(signal.SIGKILL)) -> None:
        self.epoch, self.batch, self.sig = epoch, batch, sig
        self.sent = False

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self.sent and (trainer.current_epoch, batch_idx) == (self.epoch, self.batch):
            self.sent = True
            os.kill(os.getpid(), self.sig)


class LastCheckpointProbe(L.Callback):
    """Record, at the start of every training epoch, how many completed epochs the run's
    ``last.ckpt`` holds (``-1`` when there is none)."""

    def __init__(self) -> None:
        self.completed: list[int] = []

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        import torch

        from noisylabels.run import LastCheckpoint

        path = LastCheckpoint.dirpath(trainer) / "last.ckpt"
        if not path.is_file():
            self.completed.append(-1)
            return
        loops = torch.load(path, weights_only=True)["loops"]["fit_loop"]
        self.completed.append(loops["epoch_progress"]["current"]["completed"])
