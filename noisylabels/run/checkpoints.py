"""A run's checkpoints: the best one for model selection and ``checkpoints/last.ckpt``, the state
a killed run resumes from, never more than an epoch old.

:class:`WarmupAwareCheckpoint` keeps the best checkpoint by noisy-validation accuracy (or the
monitored value), never of a warm-up epoch.

:class:`LastCheckpoint` writes ``last.ckpt`` when fitting starts and at the end of every
training epoch (warm-up epochs included), after validation, the method's epoch-end work (e.g.
manual LR schedules) and the best-checkpoint bookkeeping, so it holds the run exactly as the next
epoch would begin. The file is replaced atomically (written beside, then renamed): a run killed
while writing it keeps the previous one. Besides what Lightning saves it holds the random number
generator states (torch, CUDA where present, numpy, Python; process 0's under DDP), saved and
restored at the same point of a run (fit start, before the training loader draws its seed), so a
resumed run on the CPU continues bit-identically; the data order depends on the training seed and
the epoch only (:class:`~noisylabels.data.samplers.ShardSampler`).

It also records each resume (checkpoint, completed epochs, hyperparameters and trainer options
that differ from the checkpoint's) for ``results.json``, refuses a resume whose noisy labels
differ from those the checkpoint was trained on, and leaves no folder that looks like a run
when a run fails: a run folder that holds no checkpoint yet is removed
(:func:`discard_failed_run`, which :func:`~noisylabels.run.fit.fit_and_test` calls once the
loggers are closed), any other gets ``unfinished.txt`` saying why it stopped (removed again
when the run is resumed). A finished run is one with ``results.json``; a run stopped in its
warm-up (``max_steps``, ``max_time``) is not one: it ends with an error and ``unfinished.txt``.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.run.artifacts import run_dir
from noisylabels.run.provenance import labels_sha256
from noisylabels.run.resume import (
    CHECKPOINT_FILE,
    TRAINER_OPTIONS,
    changed_hparams,
    changed_options,
)
from noisylabels.run.stops import StopSignals
from noisylabels.run.storage import AtomicCheckpointIO, write_text

LAST = CHECKPOINT_FILE  # "last.ckpt", named once in run.resume (which --ckpt_path last finds)
UNFINISHED = "unfinished.txt"
# what a run folder holds before its first checkpoint: such a folder is removed when it fails
SETUP_ARTIFACTS = {
    "config.yaml",
    "hparams.yaml",
    "noise.pt",
    "transition.csv",
    "empirical_transition.csv",
}


def rng_state() -> dict[str, Any]:
    """The random number generator states of this process, as tensors and numbers (loadable
    with ``weights_only=True``)."""
    key, pos, has_gauss, gauss = np.random.get_state(legacy=True)[1:]
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "key": torch.from_numpy(key.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    key = np_state["key"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", key, np_state["pos"], np_state["has_gauss"], np_state["gauss"]))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


# the best checkpoint of every run: highest noisy-validation accuracy, one file, named by its epoch
BEST_CHECKPOINT: dict[str, Any] = {
    "monitor": "val/acc",
    "mode": "max",
    "filename": "best-epoch{epoch:03d}",
    "auto_insert_metric_name": False,
}


class WarmupAwareCheckpoint(ModelCheckpoint):
    """:class:`~lightning.pytorch.callbacks.ModelCheckpoint` that never keeps a checkpoint of a
    warm-up epoch (``pl_module.in_warmup``) as best/top-k, so model selection only sees the
    method's own objective.

    ``last.ckpt`` is not this callback's: :class:`LastCheckpoint` writes
    it at the end of every epoch of every run (warm-up included), so ``save_last`` changes
    nothing here (Lightning's own ``save_last`` writes only when a top-k checkpoint is written).
    """

    def check_monitor_top_k(self, trainer: L.Trainer, current: Tensor | None = None) -> bool:
        if getattr(trainer.lightning_module, "in_warmup", False):
            return False
        return super().check_monitor_top_k(trainer, current)

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: Any) -> None:
        """``last.ckpt`` is :class:`LastCheckpoint`'s."""


class LastCheckpoint(Checkpoint):
    """Keep ``checkpoints/last.ckpt`` of every run (see the module docstring; every run attaches
    it, see :func:`noisylabels.run.run_callbacks`). Its folder is the trainer's checkpoint
    callback's (``RUN/checkpoints`` by default).

    Args:
        trainer_options: the run's trainer options as plain values (the config's ``trainer``
            section): kept in the checkpoint, so a resume records those that changed.
    """

    def __init__(self, trainer_options: dict[str, Any] | None = None) -> None:
        self.trainer_options = trainer_options
        self.resumes: list[dict[str, Any]] = []
        self._loaded: dict[str, Any] | None = None
        self._ckpt_hparams: tuple[Any, Any] = (None, None)
        self._epoch_end = False
        self._labels_sha256: str | None = None
        self._epochs_done: int | None = None
        self._continued = False
        self._refused = False
        self._discard: Path | None = None
        self._recorded: BaseException | None = None
        self.fit_done = False
        #: the run's signal handlers (set by fit_and_test), which say what stopped it
        self.signals: StopSignals | None = None

    # ---------------------------------------------------------------- where
    @staticmethod
    def dirpath(trainer: L.Trainer) -> Path:
        """The folder of ``last.ckpt``: the model checkpoint's folder, else ``RUN/checkpoints``."""
        callback = trainer.checkpoint_callback
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            return Path(callback.dirpath)
        return run_dir(trainer) / "checkpoints"

    @property
    def resumed(self) -> bool:
        """Whether this fit continues from a checkpoint."""
        return self._loaded is not None

    # ---------------------------------------------------------------- saving
    def save(self, trainer: L.Trainer, epoch_end: bool) -> None:
        """Write ``last.ckpt`` atomically (every process dumps, process 0 writes): staged
        beside it by :class:`~noisylabels.run.storage.AtomicCheckpointIO`, or written beside it
        and renamed where the trainer has another checkpoint writer."""
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        path = self.dirpath(trainer) / LAST
        atomic = isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
        target = path if atomic else path.with_name(f".{LAST}.tmp")
        self._epoch_end = epoch_end
        try:
            trainer.save_checkpoint(target, weights_only=False)
        finally:
            self._epoch_end = False
        if trainer.is_global_zero and not atomic:
            os.replace(target, path)
        trainer.strategy.barrier("LastCheckpoint.save")

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._epoch_end:
            # saved from on_train_epoch_end, before Lightning marks the epoch completed: mark it
            # here, so that the resumed run starts cleanly with the next epoch
            progress = checkpoint["loops"]["fit_loop"]["epoch_progress"]
            for counts in (progress["total"], progress["current"]):
                counts["completed"] = counts["processed"]

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": rng_state(),
            "resumes": list(self.resumes),
            "noisy_labels_sha256": self._labels_sha256,
            TRAINER_OPTIONS: self.trainer_options,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = dict(state_dict)
        self.resumes = list(state_dict.get("resumes", []))

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._ckpt_hparams = (
            checkpoint.get("hyper_parameters"),
            checkpoint.get("datamodule_hyper_parameters"),
        )
        progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {})
        self._epochs_done = progress.get("current", {}).get("completed")
        if self._loaded is None:  # a checkpoint without this callback's state
            self._loaded = {}

    # ---------------------------------------------------------------- the run
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._labels_sha256 = labels_sha256(trainer.datamodule)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # the last hook before the training loop draws from the random state (its data loader's
        # base seed) that runs after the checkpoint is restored: the RNG states are saved and
        # restored here, so a resumed run draws exactly what the uninterrupted one does
        if self.resumed:
            self._continue(trainer, pl_module)
        elif not trainer.fast_dev_run:
            self.dirpath(trainer).mkdir(parents=True, exist_ok=True)
            self.save(trainer, epoch_end=False)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.resumed and not self._continued:  # strategies that restore after on_fit_start
            self._continue(trainer, pl_module)

    def _continue(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Check the labels, record the resume, restore the random state."""
        assert self._loaded is not None
        self._continued = True
        datamodule = trainer.datamodule
        saved, now = self._loaded.get("noisy_labels_sha256"), self._labels_sha256
        if saved is not None and now is not None and saved != now:
            self._refused = True  # nothing was changed: the run folder stays as it was
            raise InputError(
                f"the noisy labels of this run differ from those checkpoint {trainer.ckpt_path} "
                "was trained on (the --data noise options or the label file changed); resume "
                "with the data options of the checkpoint's run (its config.yaml), or start a new "
                "run without --ckpt_path"
            )
        model_hp, data_hp = self._ckpt_hparams
        changed = changed_hparams(model_hp, getattr(pl_module, "hparams", None), "model")
        changed.update(changed_hparams(data_hp, getattr(datamodule, "hparams", None), "data"))
        saved_options = self._loaded.get(TRAINER_OPTIONS)
        changed.update(changed_options(saved_options, self.trainer_options, "trainer"))
        self.resumes.append(
            {"from": str(trainer.ckpt_path), "epochs_done": self._epochs_done, "changed": changed}
        )
        if "rng" in self._loaded:
            set_rng_state(self._loaded["rng"])
        if trainer.is_global_zero:
            (run_dir(trainer) / UNFINISHED).unlink(missing_ok=True)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.save(trainer, epoch_end=True)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # a run stopped (max_steps, max_time) before the method's own stage began has trained
        # a warm-up model only: it must not be tested and reported as the method's result
        if trainer.fast_dev_run or not getattr(pl_module, "in_warmup", False):
            return
        steps, max_steps = trainer.global_step, trainer.max_steps
        by = f"--trainer.max_steps {max_steps}" if 0 <= max_steps <= steps else "--trainer.max_time"
        raise InputError(
            f"the run stopped after {steps} optimizer step(s), still in its warm-up (stopped by "
            f"{by}), before the method's own stage began: its model is a plain cross-entropy "
            "warm-up model, not the method's, so no results.json is written. Continue it with "
            "--ckpt_path last and a larger --trainer.max_steps or --trainer.max_time"
        )

    # ---------------------------------------------------------------- failures
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.fit_done = True

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.record_failure(trainer, exception)

    def record_failure(self, trainer: L.Trainer, exception: BaseException) -> None:
        """Leave the run folder honest after ``exception`` stopped the run (once per exception,
        in the trainer's ``on_exception`` or, for a stop between its calls, from
        :func:`~noisylabels.run.fit.fit_and_test`): a stop signal prints one line and writes
        ``unfinished.txt``; a failure before the first checkpoint has its folder removed; any
        other failure writes ``unfinished.txt`` saying why."""
        if exception is self._recorded:
            return
        self._recorded = exception
        if not trainer.is_global_zero or trainer.fast_dev_run or self._refused:
            return
        folder = run_dir(trainer)
        if not folder.is_dir():
            return
        last = self.dirpath(trainer) / LAST
        resume = (
            f"{last} holds the run at the end of its last completed epoch; continue it with "
            "`noisylabels fit --config ... --ckpt_path last` (or --ckpt_path "
            f"{folder})"
            if last.is_file()
            else "it left no checkpoint"
        )
        if isinstance(exception, SIGTERMException):
            signals = self.signals
            what = signals.what() if signals is not None else "SIGTERM"
            where = (
                "during the final test (training had finished)"
                if self.fit_done
                else f"in epoch {trainer.current_epoch}"
            )
            note = f"Stopped by {what} {where}; no results.json was written."
            if signals is not None and signals.requeue_note:
                note += f" {signals.requeue_note[0].upper()}{signals.requeue_note[1:]}."
            note += f" {resume}."
            print(f"noisylabels: {note}", file=sys.stderr, flush=True)
        elif not self.resumed and _only_setup_artifacts(folder, trainer):
            self._discard = folder  # removed by discard_failed_run, once the loggers are closed
            return
        else:
            note = f"The run failed: {type(exception).__name__}: {exception}\n{resume}."
        try:
            write_text(folder / UNFINISHED, note + "\n")
        except OSError:
            pass  # a full or read-only folder: the error itself says so


def _only_setup_artifacts(folder: Path, trainer: L.Trainer) -> bool:
    """Whether ``folder`` is a logger's run folder holding nothing but what a run writes before
    training (no checkpoint, no results)."""
    if folder.resolve() == Path(trainer.default_root_dir).resolve():
        return False
    for path in folder.rglob("*"):
        name = path.name
        if path.is_dir():
            if name != "checkpoints":
                return False
        elif name not in SETUP_ARTIFACTS and not name.startswith("events.out.tfevents."):
            return False
    return True


def discard_failed_run(trainer: L.Trainer) -> None:
    """Remove the folder of a run that failed before its first checkpoint (see
    :class:`LastCheckpoint`); call it after ``trainer.fit`` raised, when the loggers are closed."""
    for callback in trainer.callbacks:
        if isinstance(callback, LastCheckpoint) and callback._discard is not None:
            shutil.rmtree(callback._discard, ignore_errors=True)
            callback._discard = None


def resume_history(trainer: L.Trainer) -> list[dict[str, Any]]:
    """The resumes of this run, oldest first (empty for a run that was never interrupted): the
    checkpoint, how many epochs it had completed and the hyperparameters that differed."""
    for callback in trainer.callbacks:
        if isinstance(callback, LastCheckpoint):
            return list(callback.resumes)
    return []
