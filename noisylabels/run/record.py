"""A run's record, and its only writer.

:class:`RunRecorder` is attached to every run, from the command line and from Python alike
(:func:`~noisylabels.run.fit.fit_and_test`), and is the one thing that writes a run folder's
files (:data:`RUN_FILES` and the checkpoints), each atomically (written beside its name, then
renamed: a reader sees the old file or the new one, never a part):

* before anything is written, whether the run may be recorded where it is asked to be
  (:func:`~noisylabels.run.rules.admission`): a refused run leaves every file as it was;
* then ``config.yaml`` (the resolved config) and the noise (``noise.pt``, the true T as
  ``transition.csv`` or the measured one as ``empirical_transition.csv``);
* ``checkpoints/last.ckpt`` when fitting starts and at the end of every training epoch (after
  validation, the method's epoch-end work and the best-checkpoint bookkeeping, so it holds the
  run exactly as the next epoch would begin), with the random number generator states, the
  run's identity, its resume history and this part of the run (its seconds so far, how it
  executes, the code it runs: what a resume records of it); the best checkpoint goes through
  the same writer (:class:`RecordCheckpointIO`);
* at the end ``results.json``, the final T̂ (``transition_estimate.csv``/``.json``) and every
  training sample's record (``sample_dynamics.pt``);
* where a run fails: ``unfinished.txt`` saying why and how to continue, or, before its first
  checkpoint, no folder at all.

A run stopped in its warm-up (``max_steps``, ``max_time``) has trained a warm-up model only: it
is refused, not recorded as the method's result.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from noisylabels.disk.reading import UnreadableFile, load_torch
from noisylabels.disk.storage import (
    replacing,
    save_torch,
    torch_bytes,
    write_bytes,
    write_json,
    write_text,
)
from noisylabels.errors import InputError
from noisylabels.methods.core.stages import StageSchedule
from noisylabels.noise import save_transition
from noisylabels.run import identity as ident
from noisylabels.run import resume
from noisylabels.run.artifacts import (
    DYNAMICS_FILE,
    NOISE_FILE,
    differing_entries,
    noise_record,
    run_dir,
    sample_dynamics,
    transition_estimate,
)
from noisylabels.run.checkpoints import WarmupAwareCheckpoint
from noisylabels.run.execution import execution
from noisylabels.run.provenance import code_state
from noisylabels.run.rng import rng_state, set_rng_state
from noisylabels.run.rules import (
    CHECKPOINTS,
    EMPIRICAL_FILE,
    LAST,
    RESULTS_FILE,
    TRANSITION_FILE,
    UNFINISHED,
    admission,
    only_setup_files,
)
from noisylabels.run.source import CONFIG_FILE, add_config_text, python_config_text
from noisylabels.run.stops import StopSignals


class RecordCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer for local files, writing each checkpoint atomically in its
    own folder (instead of staging it in ``$TMPDIR``); other paths (URLs) are Lightning's."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options for local files")
        write_bytes(path, torch_bytes(checkpoint))


class RunRecorder(Checkpoint):
    """The record of one run (see the module docstring), attached to every run by
    :func:`~noisylabels.run.fit.fit_and_test`.

    Args:
        config_text: the resolved config as ``config.yaml`` holds it (the command line's); a
            run from Python writes its classes, hyperparameters and trainer settings.
        trainer_options: the run's trainer options as plain values (the config's ``trainer``
            section, or a Python trainer's settings), part of its identity.
        run_options: the run's other options that decide its result (``checkpoint.monitor``,
            ``checkpoint.mode``, ``tail_test_epochs``), flat.
        seed: the training seed.
        resume_from: the checkpoint the run continues from (:func:`noisylabels.run.resume.load`).
        protocol_epochs: the epochs of the protocol the run was started under (its first part's:
            a resume passes the checkpoint's), kept in every checkpoint.
    """

    def __init__(
        self,
        *,
        config_text: str | None = None,
        trainer_options: Mapping[str, Any] | None = None,
        run_options: Mapping[str, Any] | None = None,
        seed: Any = None,
        resume_from: resume.Checkpoint | None = None,
        protocol_epochs: int | None = None,
    ) -> None:
        self.config_text = config_text
        self.protocol_epochs = protocol_epochs
        self.trainer_options = dict(trainer_options or {})
        self.run_options = dict(run_options or {})
        self.seed = seed
        self.resume_from = resume_from
        self.identity: dict[str, Any] = {}
        self.options: dict[str, Any] = {}
        self.inputs: dict[str, str] = {}
        self.resumes: list[dict[str, Any]] = list(resume_from.resumes) if resume_from else []
        self.started = time.perf_counter()  # this part of the run (a resume starts another)
        self._code: dict[str, Any] | None = None  # the code this part runs (code_state)
        self.folder: Path | None = None
        self.in_place = False
        self.fit_done = False
        #: the run's signal handlers (set by fit_and_test), which say what stopped it
        self.signals: StopSignals | None = None
        self._loaded: dict[str, Any] | None = None
        self._epoch_end = False
        self._continued = False
        self._refused = False
        self._discard: Path | None = None
        self._recorded: BaseException | None = None

    @property
    def state_key(self) -> str:
        return resume.STATE_KEY

    # ---------------------------------------------------------------- where
    @staticmethod
    def dirpath(trainer: L.Trainer) -> Path:
        """The folder of ``last.ckpt``: the model checkpoint's folder, else ``RUN/checkpoints``."""
        callback = trainer.checkpoint_callback
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            return Path(callback.dirpath)
        return run_dir(trainer) / CHECKPOINTS

    @property
    def resumed(self) -> bool:
        """Whether this fit continues from a checkpoint."""
        return self.resume_from is not None

    # ---------------------------------------------------------------- identity and folder
    def check(self, trainer: L.Trainer, model: Any, datamodule: Any) -> None:
        """Before fitting, before anything is written (process 0; the data set up): the run's
        identity, and whether it may be recorded in its folder (see the module docstring).
        Raises :class:`~noisylabels.errors.InputError` saying why not; a refused run writes
        nothing."""
        if trainer.fast_dev_run or not trainer.is_global_zero:
            return
        self.identity, self.options, self.inputs = ident.of_run(
            model, datamodule, self.seed, self.trainer_options, self.run_options
        )
        schedule = getattr(model, "schedule", None)
        ends = schedule.ends_with_the_run() if isinstance(schedule, StageSchedule) else None
        problem, self.in_place = admission(
            run_dir(trainer), self.resume_from, self.identity, trainer.max_epochs, ends
        )
        if problem is None and self.in_place:
            problem = self._check_noise_record(trainer, datamodule)
        if problem:
            self._refused = True
            raise InputError(problem)
        if self.in_place and self.resume_from is not None:
            self._remove_orphans(trainer)

    def _check_noise_record(self, trainer: L.Trainer, datamodule: Any) -> str | None:
        """Where the run continues in its own folder: its ``noise.pt`` must hold the noise the
        run regenerates (its labels, split and T), or it is refused (``None``: it does); a
        missing one is written again, and said so."""
        record = noise_record(datamodule)
        if record is None:
            return None
        path = run_dir(trainer) / NOISE_FILE
        if not os.path.lexists(path):
            self._write_noise(trainer, datamodule)
            print(
                f"noisylabels: {path} was missing; written again from the noise the run "
                "regenerates (its labels match the run's recorded hash)",
                file=sys.stderr,
                flush=True,
            )
            return None
        try:
            saved = load_torch(path, "the run's noise record")
        except UnreadableFile as err:
            saved, why = None, str(err)
        else:
            differ = differing_entries(saved, record)
            why = f"it differs from it in {', '.join(differ)}" if differ else None
        if saved is not None and why is None:
            return None
        return (
            f"{path} is not the noise this run was trained with: the run regenerates its noisy "
            f"labels from its options (they match the labels' hash its checkpoint recorded), and "
            f"{why}. It was replaced or altered since the run started, and a run folder holds "
            "one run's record: restore the run's own noise.pt (or delete it, and the resume "
            "writes it again), or start a new run"
        )

    def _remove_orphans(self, trainer: L.Trainer) -> None:
        """Remove the checkpoint files of the run's folder that its checkpoint refers to
        nowhere (a best checkpoint saved after the newest state, by a part that was killed
        before it wrote that state): a resumed run keeps one best checkpoint."""
        assert self.resume_from is not None
        folder = self.dirpath(trainer)
        keep = {LAST, *self.resume_from.kept}
        for path in sorted(folder.glob("*.ckpt")):
            if path.name not in keep and path.is_file():
                path.unlink(missing_ok=True)
                print(
                    f"noisylabels: removed {path}: a checkpoint saved after the state the run "
                    "continues from, which that state does not refer to",
                    file=sys.stderr,
                    flush=True,
                )

    # ---------------------------------------------------------------- the run
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # Lightning's default
            trainer.strategy.checkpoint_io = RecordCheckpointIO()
        if trainer.fast_dev_run:  # a smoke test writes no run folder
            return
        self.in_place = bool(trainer.strategy.broadcast(self.in_place))
        self.folder = run_dir(trainer)
        if trainer.is_global_zero and not self.in_place:
            self._write_config(trainer, pl_module)
            self._write_noise(trainer)

    def _write_config(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        text = self.config_text
        if text is None:
            text = python_config_text(pl_module, trainer.datamodule, trainer, self.seed)
        write_text(run_dir(trainer) / CONFIG_FILE, text)
        add_config_text(trainer, text)

    def _write_noise(self, trainer: L.Trainer, datamodule: Any = None) -> None:
        record = noise_record(datamodule if datamodule is not None else trainer.datamodule)
        if record is None:
            return
        folder = run_dir(trainer)
        save_torch(record, folder / NOISE_FILE)
        if record.get("transition") is not None:
            self._write_transition(record["transition"], folder / TRANSITION_FILE)
        elif record.get("empirical_transition") is not None:
            self._write_transition(record["empirical_transition"], folder / EMPIRICAL_FILE)

    @staticmethod
    def _write_transition(T: torch.Tensor, path: Path) -> None:
        with replacing(path) as tmp:
            save_transition(T, tmp)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # the last hook before the training loop draws from the random state (its data loader's
        # base seed) that runs after the checkpoint is restored: the RNG states are saved and
        # restored here, so a resumed run draws exactly what the uninterrupted one does
        if self.resumed and self._loaded is not None:
            self._continue(trainer)
        elif not trainer.fast_dev_run:
            self.dirpath(trainer).mkdir(parents=True, exist_ok=True)
            self.save(trainer, epoch_end=False)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.resumed and self._loaded is not None and not self._continued:
            self._continue(trainer)  # strategies that restore after on_fit_start

    def _continue(self, trainer: L.Trainer) -> None:
        """Record the resume, restore the random state."""
        assert self._loaded is not None and self.resume_from is not None
        self._continued = True
        changed = ident.resumable_changes(self.resume_from.options, self.options)
        self.resumes.append(
            {
                "from": str(self.resume_from.path),
                "epochs_done": self.resume_from.epochs_done,
                "changed": changed,
                # the part that wrote the checkpoint: its seconds until then, how it executed,
                # the code it ran
                "part": self._loaded.get("part"),
            }
        )
        if "rng" in self._loaded:
            set_rng_state(self._loaded["rng"])
        if trainer.is_global_zero and self.in_place and self.folder is not None:
            (self.folder / UNFINISHED).unlink(missing_ok=True)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # a run stopped (max_steps, max_time) before the method's own stage began has trained
        # a warm-up model only: it must not be tested and recorded as the method's result
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

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.fit_done = True

    # ---------------------------------------------------------------- last.ckpt
    def save(self, trainer: L.Trainer, epoch_end: bool) -> None:
        """Write ``last.ckpt`` atomically (every process dumps, process 0 writes): through
        :class:`RecordCheckpointIO`, or written beside it and renamed where the trainer has
        another checkpoint writer."""
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        path = self.dirpath(trainer) / LAST
        atomic = isinstance(trainer.strategy.checkpoint_io, RecordCheckpointIO)
        target = path if atomic else path.with_name(f".{LAST}.tmp")
        self._epoch_end = epoch_end
        try:
            trainer.save_checkpoint(target, weights_only=False)
        finally:
            self._epoch_end = False
        if trainer.is_global_zero and not atomic:
            os.replace(target, path)
        trainer.strategy.barrier("RunRecorder.save")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.save(trainer, epoch_end=True)
        # the best checkpoints replaced this epoch go only now that last.ckpt no longer
        # refers to them: a run killed at any moment leaves the one its last.ckpt names
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, WarmupAwareCheckpoint):
                callback.remove_replaced(trainer)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if state is not None:  # what a resume from this checkpoint records of this part
            if self._code is None:
                self._code = code_state()
            state["part"] = {
                "seconds": time.perf_counter() - self.started,
                "execution": execution(trainer, pl_module),
                "code": self._code,
            }
        if self._epoch_end:
            # saved from on_train_epoch_end, before Lightning marks the epoch completed: mark it
            # here, so that the resumed run starts cleanly with the next epoch
            progress = checkpoint["loops"]["fit_loop"]["epoch_progress"]
            for counts in (progress["total"], progress["current"]):
                counts["completed"] = counts["processed"]

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": rng_state(),
            "identity": dict(self.identity),
            "options": dict(self.options),
            "resumes": list(self.resumes),
            "protocol_epochs": self.protocol_epochs,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = dict(state_dict)

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._loaded is None:  # an older checkpoint (its state under another key) or none
            self._loaded = resume.run_state(checkpoint)

    # ---------------------------------------------------------------- the end
    def finish(
        self,
        trainer: L.Trainer,
        model: Any,
        results: dict[str, Any],
        config_text: str | None = None,
    ) -> Path:
        """Write the run's results (``results.json``), its final T̂ and per-sample record, and,
        for a run continued in its own folder, its config as resumed; returns the results'
        path. Process 0 only."""
        folder = run_dir(trainer)
        for name, content in transition_estimate(model).items():
            if name.endswith(".csv"):
                self._write_transition(content, folder / name)
            else:
                write_json(folder / name, content)
        dynamics = sample_dynamics(trainer, model)
        if dynamics is not None:
            save_torch(dynamics, folder / DYNAMICS_FILE)
        if self.in_place:
            self._write_config(trainer, model)
        return write_json(folder / RESULTS_FILE, results)

    # ---------------------------------------------------------------- failures
    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.record_failure(trainer, exception)

    def record_failure(self, trainer: L.Trainer, exception: BaseException) -> None:
        """Leave the run folder honest after ``exception`` stopped the run (once per exception,
        in the trainer's ``on_exception`` or, for a stop between its calls, from
        :func:`~noisylabels.run.fit.fit_and_test`): a stop signal prints one line and writes
        ``unfinished.txt``; a failure before the first checkpoint has its folder removed; any
        other failure writes ``unfinished.txt`` saying why. A refused run writes nothing."""
        if exception is self._recorded:
            return
        self._recorded = exception
        if not trainer.is_global_zero or trainer.fast_dev_run or self._refused:
            return
        folder = self.folder
        if folder is None or not folder.is_dir():
            return
        last = self.dirpath(trainer) / LAST
        completed = trainer.fit_loop.epoch_progress.current.completed
        state = (
            f"at the end of epoch {completed - 1}, its last completed one"
            if completed
            else "as it started, before its first epoch completed"
        )
        how = (
            f"{last} holds the run {state}; continue it with `noisylabels fit --config "
            f"{folder / CONFIG_FILE} --ckpt_path {folder}`"
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
            by = "on request (SIGINT, Ctrl-C)" if what.startswith("SIGINT") else f"by {what}"
            note = f"Stopped {by} {where}; no results.json was written."
            if signals is not None and signals.requeue_note:
                note += f" {signals.requeue_note[0].upper()}{signals.requeue_note[1:]}."
            note += f" {how}."
            print(f"noisylabels: {note}", file=sys.stderr, flush=True)
        elif not self.in_place and only_setup_files(folder, Path(trainer.default_root_dir)):
            self._discard = folder  # removed by discard(), once the loggers are closed
            return
        else:
            note = f"The run failed: {type(exception).__name__}: {exception}\n{how}."
        try:
            write_text(folder / UNFINISHED, note + "\n")
        except OSError:
            pass  # a full or read-only folder: the error itself says so

    def discard(self) -> None:
        """Remove the folder of a run that failed before its first checkpoint; call it after
        ``trainer.fit`` raised, when the loggers are closed."""
        if self._discard is not None:
            shutil.rmtree(self._discard, ignore_errors=True)
            self._discard = None


def recorder_of(trainer: L.Trainer) -> RunRecorder | None:
    """The run record of ``trainer``'s run, where it has one."""
    found = [c for c in trainer.callbacks if isinstance(c, RunRecorder)]
    return found[0] if found else None


def resume_history(trainer: L.Trainer) -> list[dict[str, Any]]:
    """The resumes of this run, oldest first (empty for a run that was never interrupted): the
    checkpoint, how many epochs it had completed and the resumable options that changed."""
    recorder = recorder_of(trainer)
    return list(recorder.resumes) if recorder is not None else []
