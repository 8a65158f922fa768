"""One run: fit → test the best checkpoint on the clean test set → ``results.json``.

The command line's ``fit`` is :func:`fit_and_test`; from Python it is the same run::

    import lightning as L
    from noisylabels.data import MNISTDataModule
    from noisylabels.methods import Forward
    from noisylabels.run import fit_and_test

    L.seed_everything(0, workers=True)  # as noisylabels fit does (--seed_everything 0)
    data = MNISTDataModule(data_dir="DATA", noise_type="symmetric", noise_rate=0.2)
    model = Forward(alpha=0.1, transition=True, num_classes=10, input_shape=(1, 28, 28))
    results = fit_and_test(model, data, L.Trainer(max_epochs=model.schedule.total_epochs))

The trainer's ``max_epochs`` is the caller's: ``noisylabels fit`` derives it from the method's
stage schedule (warm-up + main + revision, :attr:`~noisylabels.methods.StageSchedule.total_epochs`)
unless ``--trainer.max_epochs`` is given, a ``Trainer`` built in Python trains what it says.

A method is not a run: what a run observes and stops on (T̂ monitoring, the divergence stop, the
epoch log, the data module's reports) are the :func:`run_callbacks`, and what it records is the
run record (:class:`~noisylabels.run.record.RunRecorder`, the only writer of the run folder);
:func:`fit_and_test` attaches them to the trainer before fitting, from the command line and from
Python alike. A trainer built in Python also gets what the command line configures
(:mod:`noisylabels.run.defaults`): the best checkpoint by noisy-validation accuracy and the
per-subset statistics; keyword arguments turn each off.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, Checkpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from noisylabels.callbacks import (
    DivergenceGuard,
    EpochLog,
    HealthMonitor,
    SampleDynamics,
    TailTest,
    TransitionMonitor,
)
from noisylabels.data import NoisyDataModule
from noisylabels.errors import InputError
from noisylabels.run import resume
from noisylabels.run.artifacts import log_hp_metric
from noisylabels.run.claim import claim
from noisylabels.run.defaults import command_line_callbacks, run_config
from noisylabels.run.record import LAST, RunRecorder, resume_history
from noisylabels.run.results import build_results, tail_summary
from noisylabels.run.rules import check_gradient_clip, check_precision
from noisylabels.run.stops import StopSignals, refuse_hpc_checkpoints
from noisylabels.run.storage import storage_error

LAST_METRIC = "test/acc_last"
# what a run from Python records of the trainer (the command line records every option)
PYTHON_TRAINER_OPTIONS = (
    "max_epochs",
    "min_epochs",
    "max_steps",
    "precision",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "limit_train_batches",
    "limit_val_batches",
    "check_val_every_n_epoch",
    "val_check_interval",
)


def run_callbacks(
    datamodule: L.LightningDataModule | None = None, tail_test_epochs: int = 0
) -> list[Callback]:
    """The observers of every run: T̂ and ε_T, every training sample's record over the epochs
    (``sample_dynamics.pt``), the stop on a NaN/Inf loss, a line per epoch where there is no
    progress bar, and whatever the data module needs (e.g. a skipped-image report); with
    ``tail_test_epochs``, the clean test accuracy of every network over that many last epochs
    (:class:`TailTest`). :func:`fit_and_test` attaches them, and the run record
    (:class:`~noisylabels.run.record.RunRecorder`), which writes the run folder."""
    callbacks: list[Callback] = [
        TransitionMonitor(),
        SampleDynamics(),
        DivergenceGuard(),
        EpochLog(),
    ]
    if tail_test_epochs:
        callbacks.insert(1, TailTest(tail_test_epochs))
    if isinstance(datamodule, NoisyDataModule):
        callbacks.extend(datamodule.callbacks())
    return callbacks


RUN_DEFAULT = "_noisylabels_run_default"
"""The attribute that marks a callback :func:`missing_run_callbacks` attached itself."""


def missing_run_callbacks(
    trainer: L.Trainer, datamodule: L.LightningDataModule | None, tail_test_epochs: int = 0
) -> list[Callback]:
    """The :func:`run_callbacks` of a type the caller did not give ``trainer``: a caller's
    callback of such a type (``--trainer.callbacks+=noisylabels.callbacks.DivergenceGuard
    --trainer.callbacks.init_args.check_every 7``) runs with its options rather than being
    replaced by the default, as ``config.yaml`` records it; one an earlier run attached is
    replaced. The tail test is the run's own option: a caller's :class:`TailTest` is refused
    with where to set it."""
    given = [c for c in trainer.callbacks if not getattr(c, RUN_DEFAULT, False)]
    for callback in given:
        if isinstance(callback, TailTest):
            raise InputError(
                "a TailTest among the trainer's callbacks: the tail test is an option of the "
                "run, recorded in results.json; set it with --tail_test_epochs N "
                "(fit_and_test(..., tail_test_epochs=N)) instead"
            )
    missing = []
    for callback in run_callbacks(datamodule, tail_test_epochs):
        if not any(isinstance(c, type(callback)) for c in given):
            setattr(callback, RUN_DEFAULT, True)
            missing.append(callback)
    return missing


def attach_callbacks(trainer: L.Trainer, callbacks: list[Callback]) -> None:
    """Add ``callbacks`` to ``trainer``: each replaces the trainer's callbacks of its type (or a
    base type), and checkpoint callbacks come last, in the order Lightning runs them (a
    checkpoint then holds what the other callbacks did in the same hook)."""
    types = {type(c) for c in callbacks}
    kept = [
        c
        for c in trainer.callbacks
        if type(c) is Callback or not any(issubclass(t, type(c)) for t in types)
    ]
    merged = [*kept, *callbacks]
    others = [c for c in merged if not isinstance(c, Checkpoint)]
    checkpoints = [c for c in merged if isinstance(c, Checkpoint)]
    trainer.callbacks = others + checkpoints


def fit_and_test(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    trainer: L.Trainer,
    *,
    ckpt_path: str | os.PathLike | resume.Checkpoint | None = None,
    weights_only: bool | None = None,
    test: bool = True,
    seed: int | None = None,
    config: Mapping[str, Any] | None = None,
    config_text: str | None = None,
    tail_test_epochs: int = 0,
    select_best: bool = True,
    subset_statistics: bool = True,
    command: Sequence[str] | None = None,
    protocol_epochs: int | None = None,
) -> dict[str, Any] | None:
    """Fit ``model`` on ``datamodule``, test the best checkpoint (by the trainer's checkpoint
    callback; the final model where there is none) and the last epoch's model on the clean test
    set, and record the run in its folder (``results.json``, ``config.yaml``, the noise, the
    final T̂, the per-sample record, the checkpoints; :class:`~noisylabels.run.record.RunRecorder`
    writes them all): ``noisylabels fit``'s run. ``model`` may be any ``LightningModule`` that
    logs ``val/acc`` (and ``test/acc`` when tested). The run trains the ``trainer``'s
    ``max_epochs``; a method's stage schedule plans ``model.schedule.total_epochs`` (what
    ``noisylabels fit`` trains where ``--trainer.max_epochs`` is not given).

    Args:
        ckpt_path: the checkpoint to continue from: a checkpoint file, a run folder (its
            ``checkpoints/last.ckpt``) or ``"last"`` (the newest run under the trainer's
            logger). The run continues only as the same experiment
            (:mod:`noisylabels.run.identity`); in the checkpoint's own run folder where the
            trainer writes there and the run is unfinished, else in the trainer's new folder.
        weights_only: how Lightning loads ``ckpt_path`` (its ``weights_only``), after the run
            has read it weights-only itself.
        test: test after fitting; without it ``results.json`` has ``test_acc: null``.
        seed: the run's training seed (default: Lightning's ``PL_GLOBAL_SEED``, which
            ``seed_everything`` sets), part of its identity.
        config: the resolved configuration, hashed into ``results.json``'s provenance (default:
            the model's and data module's classes and hyperparameters, the trainer's settings).
        config_text: ``config.yaml`` as the command line resolved it (default: ``config`` of a
            run from Python, as YAML).
        tail_test_epochs: also test every network on the clean test set at the end of each of
            the last this many epochs (``results.json``: ``test_acc_tail``,
            ``test_acc_tail_mean``), as the two-network baselines' references report.
        select_best: where the trainer has only Lightning's default checkpoint (which monitors
            nothing and keeps the last epoch), use the command line's instead: the best
            noisy-validation accuracy (``val/acc``, max), never a warm-up epoch, saved as
            ``checkpoints/best-epochNNN.ckpt``. A checkpoint that monitors something is kept.
        subset_statistics: record the per-subset loss statistics of a ``NoisyLabelMethod``
            (:class:`~noisylabels.callbacks.SubsetStatistics`, ``subsets.csv``) where the
            trainer has no such callback.
        command: the command line of the run (``["fit", "--config", ...]``), recorded with its
            hash in ``results.json``'s provenance (a sweep compares it with the run it plans).
        protocol_epochs: the epochs the run's config files plan before command-line options
            (``results.json``'s ``protocol_epochs``; a report flags a shorter run).

    Under ``fast_dev_run`` (a smoke test of every stage, not a result) nothing is written.
    SIGTERM, and under SLURM SIGUSR1, stop the run at the next safe point with
    ``unfinished.txt`` in its folder (:mod:`noisylabels.run.stops`); a full disk or a read-only
    folder raises :class:`~noisylabels.errors.StorageError`.

    Returns:
        The results (also written to ``results.json``) on process 0; ``None`` on the others.
    """
    start = time.perf_counter()
    if seed is None and os.environ.get("PL_GLOBAL_SEED") is not None:
        seed = int(os.environ["PL_GLOBAL_SEED"])
    check_precision(trainer.precision)
    check_gradient_clip(trainer.gradient_clip_val)
    checkpoint = resume_checkpoint(ckpt_path, trainer)
    created = missing_folders(trainer)  # what the run creates above its folder
    held = None
    if trainer.is_global_zero and not trainer.fast_dev_run:  # the one writer: process 0
        by = f"noisylabels {command[0]}" if command else "noisylabels.run.fit_and_test"
        held = claim(trainer, checkpoint, by)
        checkpoint = held.checkpoint
        if checkpoint is not None and checkpoint.protocol_epochs is not None:
            protocol_epochs = checkpoint.protocol_epochs  # the first part's protocol holds
    try:
        return _fit_and_test(
            model,
            datamodule,
            trainer,
            checkpoint,
            weights_only=weights_only,
            test=test,
            seed=seed,
            config=config,
            config_text=config_text,
            tail_test_epochs=tail_test_epochs,
            select_best=select_best,
            subset_statistics=subset_statistics,
            command=command,
            protocol_epochs=protocol_epochs,
            ckpt_path=ckpt_path,
            created=created,
            start=start,
        )
    except BaseException:
        if held is not None:
            held.release(failed=True)
            remove_empty(created)
        raise
    finally:
        if held is not None:
            held.release()


def _fit_and_test(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    trainer: L.Trainer,
    checkpoint: resume.Checkpoint | None,
    *,
    weights_only: bool | None,
    test: bool,
    seed: int | None,
    config: Mapping[str, Any] | None,
    config_text: str | None,
    tail_test_epochs: int,
    select_best: bool,
    subset_statistics: bool,
    command: Sequence[str] | None,
    protocol_epochs: int | None,
    ckpt_path: Any,
    created: list[Path],
    start: float,
) -> dict[str, Any] | None:
    added = command_line_callbacks(
        trainer, model, select_best=select_best, subset_statistics=subset_statistics
    )
    attach_callbacks(
        trainer, [*added, *missing_run_callbacks(trainer, datamodule, tail_test_epochs)]
    )
    recorder = RunRecorder(
        config_text=config_text,
        trainer_options=trainer_options(trainer, config),
        run_options=run_options(trainer, tail_test_epochs),
        seed=seed,
        resume_from=checkpoint,
        protocol_epochs=protocol_epochs,
    )
    attach_callbacks(trainer, [recorder])
    if config is None:
        config = run_config(model, datamodule, trainer, seed)
    with StopSignals(trainer) as signals:
        recorder.signals = signals
        try:
            refuse_hpc_checkpoints(trainer, ckpt_path)
            if trainer.is_global_zero and not trainer.fast_dev_run:
                prepare(datamodule)
            recorder.check(trainer, model, datamodule)  # nothing is written before
            try:
                trainer.fit(
                    model,
                    datamodule=datamodule,
                    ckpt_path=None if checkpoint is None else str(checkpoint.path),
                    weights_only=weights_only,
                )
            except BaseException:
                recorder.discard()  # a folder holding nothing to resume from
                remove_empty(created)  # and the folders above it the run made for it
                raise
            try:
                signals.check()
                resumed = resume_history(trainer)  # before a test restores other states
                tail = tail_summary(trainer)
                ended = (
                    trainer.max_epochs is not None and trainer.current_epoch >= trainer.max_epochs
                )
                if tail is not None and tail.get("missing") and ended and trainer.is_global_zero:
                    # (a run stopped early, e.g. by its health, misses its last epochs anyway)
                    warnings.warn(
                        f"the test of the run's last epochs has no record of epoch(s) "
                        f"{', '.join(map(str, tail['missing']))} (the run was resumed with "
                        "another --trainer.max_epochs after its last epochs began), so "
                        "results.json's test_acc_tail_mean is null",
                        stacklevel=1,
                    )
                health = health_of(trainer)
                test_metrics = None
                if test:
                    test_metrics = test_last_and_best(model, datamodule, trainer, signals)
                signals.check()
                if not trainer.is_global_zero:
                    return None
                results = build_results(
                    trainer,
                    model,
                    datamodule,
                    seed=seed,
                    wall_time_s=time.perf_counter() - start,
                    test_metrics=test_metrics,
                    config=config,
                    resumed=resumed,
                    tail=tail,
                    command=command,
                    inputs=recorder.inputs,
                    protocol_epochs=protocol_epochs,
                    health=health,
                )
                if not trainer.fast_dev_run:
                    log_hp_metric(trainer, results["test_acc"])
                    recorder.finish(trainer, model, results)
                return results
            except (Exception, SIGTERMException, KeyboardInterrupt) as err:
                recorder.record_failure(trainer, err)  # a stop or failure between the calls
                raise
        except SIGTERMException as err:
            stop = signals.stopped_by(err)
            if stop is err:
                raise
            raise stop from err
        except OSError as err:
            found = storage_error(err)
            if found is None or found is err:
                raise
            raise found from err


def missing_folders(trainer: L.Trainer) -> list[Path]:
    """The folders that a run's files go under (its ``default_root_dir``, its loggers' roots) and
    their parents that do not exist yet, deepest first: the folders the run itself creates."""
    tops = [trainer.default_root_dir]
    for logger in trainer.loggers:
        root = getattr(logger, "root_dir", None) or getattr(logger, "save_dir", None)
        if root:
            tops.append(root)
    missing: set[Path] = set()
    for top in tops:
        path = Path(os.path.abspath(top))
        while not path.exists() and path != path.parent:
            missing.add(path)
            path = path.parent
    return sorted(missing, key=lambda p: len(p.parts), reverse=True)


def remove_empty(folders: Sequence[Path]) -> None:
    """Remove those of ``folders`` (deepest first) that are empty: a run that failed before
    training leaves no folder it created. A folder holding anything is kept."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (a kept run, another run's files), or not there
            pass


def health_of(trainer: L.Trainer) -> str:
    """The verdict of the run's :class:`HealthMonitor`: ``"ok"``, or why the run stopped
    learning (``"ok"`` where it has none)."""
    found = [c for c in trainer.callbacks if isinstance(c, HealthMonitor)]
    return found[0].verdict if found else "ok"


def prepare(datamodule: L.LightningDataModule) -> None:
    """Set up a :class:`~noisylabels.data.NoisyDataModule` for fitting ahead of the trainer
    (which then finds it set up), so that its labels are known before anything is written."""
    if isinstance(datamodule, NoisyDataModule):
        datamodule.prepare_data()
        datamodule.setup("fit")


def resume_checkpoint(
    ckpt_path: str | os.PathLike | resume.Checkpoint | None, trainer: L.Trainer
) -> resume.Checkpoint | None:
    """The checkpoint a fit continues from, read weights-only (nothing in the file executed):
    ``ckpt_path`` as given (the command line's, already read), or a file, run folder, ``last``
    (the newest run under the trainer's logger) or ``hpc`` read here."""
    if ckpt_path is None or isinstance(ckpt_path, resume.Checkpoint):
        return ckpt_path
    value = str(ckpt_path)
    if value in ("best", "registry") and not Path(value).exists():
        raise InputError(
            f"ckpt_path {value!r} names a checkpoint of Lightning's own bookkeeping, not a run "
            "to continue: pass a checkpoint file, a run folder or 'last'"
        )
    path, folder = resume.candidates(value, Path(trainer.default_root_dir), _logger_spec(trainer))[
        0
    ]
    return resume.load(path, folder)


def _logger_spec(trainer: L.Trainer) -> Any:
    """The trainer's first logger as :func:`~noisylabels.run.resume.logger_base` reads a
    config's (``False`` without one)."""
    if not trainer.loggers:
        return False
    logger = trainer.loggers[0]
    if not isinstance(logger, (TensorBoardLogger, CSVLogger)):
        return SimpleNamespace(class_path=type(logger).__name__, init_args={})
    return SimpleNamespace(
        class_path=type(logger).__name__,
        init_args={"save_dir": logger.save_dir, "name": logger.name},
    )


def trainer_options(trainer: L.Trainer, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The trainer options of a run's identity: the config's ``trainer`` section (every
    ``--trainer.*`` option of the command line), else the settings of ``trainer`` that decide
    what a run from Python computes (:data:`PYTHON_TRAINER_OPTIONS`)."""
    section = (config or {}).get("trainer")
    if section is not None:
        return resume.plain_options(section)
    return resume.plain_options(
        {name: getattr(trainer, name, None) for name in PYTHON_TRAINER_OPTIONS}
    )


def run_options(trainer: L.Trainer, tail_test_epochs: int) -> dict[str, Any]:
    """What decides a run's result beyond its hyperparameters and trainer settings: how the
    best checkpoint is chosen and how many last epochs are tested."""
    best = trainer.checkpoint_callback
    monitor = getattr(best, "monitor", None)
    return {
        "checkpoint.monitor": monitor,
        "checkpoint.mode": getattr(best, "mode", None) if monitor else None,
        "tail_test_epochs": int(tail_test_epochs),
    }


def test_last_and_best(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    trainer: L.Trainer,
    signals: StopSignals | None = None,
) -> dict[str, Any]:
    """Test the model as fit left it (the last epoch, logged as ``test/acc_last``), then the
    best checkpoint (``test/acc``; the same model where there is none), on the clean test set.
    Both name their checkpoint: ``checkpoints/last.ckpt`` (the end of the last epoch) and the
    best one, so that no other checkpoint (e.g. Lightning's SLURM ``hpc_ckpt``) is picked up.
    ``signals``: stop between the two tests where a stop signal arrived. Returns both metrics."""
    metrics: dict[str, Any] = {}
    last = RunRecorder.dirpath(trainer) / LAST
    last_path = str(last) if last.is_file() else None
    best_path = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
    with warnings.catch_warnings():
        # last.ckpt's writer is a second checkpoint callback; "best" is the first one's
        warnings.filterwarnings("ignore", message=r".*configured with multiple `ModelCheckpoint`")
        if best_path:
            previous = getattr(model, "test_metric", None)
            model.test_metric = LAST_METRIC
            try:
                out = trainer.test(model, datamodule=datamodule, ckpt_path=last_path, verbose=False)
            finally:
                model.test_metric = previous or "test/acc"
            tested = dict(out[0]) if out else {}
            if LAST_METRIC not in tested and "test/acc" in tested:  # a module of its own
                tested[LAST_METRIC] = tested.pop("test/acc")
            metrics.update(tested)
            if signals is not None:
                signals.check()
        out = trainer.test(model, datamodule=datamodule, ckpt_path=best_path or last_path)
    metrics.update(out[0] if out else {})
    if not best_path and "test/acc" in metrics:
        metrics[LAST_METRIC] = metrics["test/acc"]
    return metrics
