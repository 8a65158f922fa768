"""A callback that interrupts the training process from inside, for the kill-and-resume tests.

Passed to the real command line with ``--trainer.callbacks+=interrupt.InterruptAt`` (the tests
put this folder on ``PYTHONPATH``), it sends the process a signal when training reaches a given
epoch and batch: SIGKILL (no chance to clean up) or SIGTERM (what a batch scheduler sends).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
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

        from noisylabels.run import RunRecorder

        path = RunRecorder.dirpath(trainer) / "last.ckpt"
        if not path.is_file():
            self.completed.append(-1)
            return
        loops = torch.load(path, weights_only=True)["loops"]["fit_loop"]
        self.completed.append(loops["epoch_progress"]["current"]["completed"])


class InterruptAtTest(L.Callback):
    """Send ``sig`` to this process before test batch ``batch`` of the ``test``-th test run of
    the process (0: the last epoch's model, 1: the best checkpoint's); ``batch=-1``: when that
    test has ended (before the next one, where Lightning's loops no longer look)."""

    def __init__(self, test: int, batch: int, sig: int = int(signal.SIGTERM)) -> None:
        self.test, self.batch, self.sig = test, batch, sig
        self.tests = -1
        self.sent = False

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.tests += 1

    def on_test_batch_start(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not self.sent and (self.tests, batch_idx) == (self.test, self.batch):
            self.sent = True
            os.kill(os.getpid(), self.sig)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.sent and (self.tests, -1) == (self.test, self.batch):
            self.sent = True
            os.kill(os.getpid(), self.sig)


class SignalPlan(L.Callback):
    """Send the signals a JSON file lists, each once, across the processes of a run that is
    stopped and restarted: ``[{"where": "train"|"test", "index": EPOCH|TEST, "batch": B,
    "signal": "SIGUSR1"}, ...]`` (``TEST``: 0 for the last epoch's model, 1 for the best
    checkpoint's, counted in each process); a sent entry is marked ``"sent": true``."""

    def __init__(self, plan: str) -> None:
        self.plan = Path(plan)
        self.tests = -1

    def _fire(self, where: str, index: int, batch: int) -> None:
        events = json.loads(self.plan.read_text())
        for event in events:
            if event.get("sent") or (event["where"], event["index"], event["batch"]) != (
                where,
                index,
                batch,
            ):
                continue
            event["sent"] = True
            self.plan.write_text(json.dumps(events))
            os.kill(os.getpid(), getattr(signal, event["signal"]))
            return

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.tests += 1

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._fire("train", trainer.current_epoch, batch_idx)

    def on_test_batch_start(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._fire("test", self.tests, batch_idx)


class FailWrites(L.Callback):
    """From the start of epoch ``epoch`` on, make the run's writes of files named ``name``
    (every file where empty) fail as a disk would: half the data written, then ``OSError``
    with ``errno`` (28: no space left on the device; 30: a read-only file system)."""

    def __init__(self, epoch: int, errno: int = 28, name: str = "") -> None:
        self.epoch, self.errno, self.name = epoch, errno, name

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch != self.epoch:
            return
        from noisylabels.disk import storage

        original = storage._write_file
        wanted = Path(self.name)

        def failing(path: Path, data: bytes) -> None:
            name = Path(path).name
            if self.name and not (
                name.startswith(f".{wanted.stem}.") and name.endswith(wanted.suffix)
            ):
                original(path, data)
                return
            with open(path, "wb") as out:
                out.write(data[: len(data) // 2])
            raise OSError(self.errno, os.strerror(self.errno), str(path))

        storage._write_file = failing


class KillAtEpochEnd(L.Callback):
    """SIGKILL this process at the end of training epoch ``epoch`` (0-based), after that
    epoch's validation and best-checkpoint bookkeeping and before the run record writes its
    ``last.ckpt`` (Lightning runs the checkpoint callbacks' epoch-end hooks after the others)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)
