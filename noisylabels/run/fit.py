"""One run: fit → test the best checkpoint on the clean test set → ``results.json``.

The command line's ``fit`` is :func:`fit_and_test`; from Python it is the same run::

    import lightning as L
    from noisylabels.data import MNISTDataModule
    from noisylabels.methods import Forward
    from noisylabels.run import RunPlan, fit_and_test

    L.seed_everything(0, workers=True)  # as noisylabels fit does (--seed_everything 0)
    data = MNISTDataModule(data_dir="DATA", noise_type="symmetric", noise_rate=0.2)
    model = Forward(alpha=0.1, transition=True, num_classes=10, input_shape=(1, 28, 28))
    trainer = L.Trainer(max_epochs=model.schedule.total_epochs)
    results = fit_and_test(model, data, trainer, RunPlan(tail_test_epochs=10))

The trainer's ``max_epochs`` is the caller's: ``noisylabels fit`` derives it from the method's
stage schedule (warm-up + main + revision, :attr:`~noisylabels.methods.StageSchedule.total_epochs`)
unless ``--trainer.max_epochs`` is given, a ``Trainer`` built in Python trains what it says.
What the run does beyond the method, data and trainer is its :class:`~noisylabels.run.plan.RunPlan`
(which alone builds its callbacks and chooses the checkpoint it continues); where it comes from,
its :class:`~noisylabels.run.source.RunSource`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException

from noisylabels.callbacks import HealthMonitor
from noisylabels.data import NoisyDataModule
from noisylabels.disk.storage import storage_error
from noisylabels.errors import warn
from noisylabels.run import identity, resume
from noisylabels.run.artifacts import log_hp_metric, run_dir
from noisylabels.run.chatter import quiet_lightning
from noisylabels.run.claim import Claim, claim
from noisylabels.run.plan import RunPlan, logger_spec
from noisylabels.run.record import LAST, RunRecorder, resume_history
from noisylabels.run.results import build_results, tail_summary
from noisylabels.run.rules import check_gradient_clip, check_precision
from noisylabels.run.source import RunSource, run_config
from noisylabels.run.stops import StopSignals, refuse_hpc_checkpoints

LAST_METRIC = "test/acc_last"
# what a run from Python records of the trainer (the command line records every option)
PYTHON_TRAINER_OPTIONS = (
    "max_epochs", "min_epochs", "max_steps", "precision", "accumulate_grad_batches",
    "gradient_clip_val", "gradient_clip_algorithm", "limit_train_batches",
    "limit_val_batches", "check_val_every_n_epoch", "val_check_interval"
)  # fmt: skip


def fit_and_test(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    trainer: L.Trainer,
    plan: RunPlan | None = None,
    *,
    source: RunSource | None = None,
) -> dict[str, Any] | None:
    """Fit ``model`` on ``datamodule``, test the best checkpoint and the last epoch's model on
    the clean test set, and record the run in its folder: ``noisylabels fit``'s run.

    Parameters
    ----------
    model : LightningModule
        A method of :mod:`noisylabels.methods`, or any module that logs ``val/acc`` (and
        ``test/acc`` when tested).
    datamodule : LightningDataModule
        The data; a :class:`~noisylabels.data.NoisyDataModule` is set up before anything is
        written, so that its labels are known to the record.
    trainer : Trainer
        Trains its own ``max_epochs`` (a method's schedule plans
        ``model.schedule.total_epochs``); its callbacks of a type the plan builds run instead.
    plan : RunPlan, default RunPlan()
        What the run does beyond these: test after fit, the tail test, the best checkpoint,
        the per-subset statistics, its seed, the run it continues.
    source : RunSource, default RunSource()
        The command line and config it was started with (none from Python).

    Returns
    -------
    dict or None
        The results (also written to ``results.json``) on process 0; ``None`` on the others
        and under ``fast_dev_run`` (a smoke test of every stage: nothing is written). SIGTERM,
        and under SLURM SIGUSR1, stop the run at the next safe point with ``unfinished.txt`` in
        its folder (:mod:`noisylabels.run.stops`); a full disk or a read-only folder raises
        :class:`~noisylabels.errors.StorageError`.
    """
    start = time.perf_counter()
    quiet_lightning()
    plan, source = plan or RunPlan(), source or RunSource()
    check_precision(trainer.precision)
    check_gradient_clip(trainer.gradient_clip_val)
    options = trainer_options(trainer, source.config)
    now = identity.of_objects(model, datamodule, seed=plan.run_seed(), trainer_options=options)
    root = Path(trainer.default_root_dir)
    checkpoint = plan.checkpoint_to_resume(root, logger_spec(trainer), now)
    created = missing_folders(trainer)  # what the run creates above its folder
    with claimed(trainer, checkpoint, source, created) as held:
        checkpoint = held.checkpoint if held is not None else checkpoint
        recorder = plan.attach(
            trainer, model, datamodule, source=source, checkpoint=checkpoint,
            trainer_options=options,
        )  # fmt: skip
        with as_user_errors(trainer) as signals:
            recorder.signals = signals
            refuse_hpc_checkpoints(trainer, plan.resume)
            if trainer.is_global_zero and not trainer.fast_dev_run:
                prepare(datamodule)
            recorder.check(trainer, model, datamodule)  # nothing is written before
            try:
                trainer.fit(
                    model,
                    datamodule=datamodule,
                    ckpt_path=None if checkpoint is None else str(checkpoint.path),
                    weights_only=plan.weights_only,
                )
            except BaseException:
                recorder.discard()  # a folder holding nothing to resume from
                remove_empty(created)  # and the folders above it the run made for it
                raise
            try:
                return finish(model, datamodule, trainer, plan, source, recorder, start, signals)
            except (Exception, SIGTERMException, KeyboardInterrupt) as err:
                recorder.record_failure(trainer, err)  # a stop or failure between the calls
                raise


@contextlib.contextmanager
def claimed(
    trainer: L.Trainer,
    checkpoint: resume.Checkpoint | None,
    source: RunSource,
    created: list[Path],
) -> Iterator[Claim | None]:
    """The run folder held by this process for as long as the run writes it (process 0; the
    others and ``fast_dev_run`` write nothing: ``None``); a run that fails releases it, with
    the folders it created and left empty."""
    if not trainer.is_global_zero or trainer.fast_dev_run:
        yield None
        return
    by = f"noisylabels {source.command[0]}" if source.command else "noisylabels.run.fit_and_test"
    held = claim(trainer, checkpoint, by)
    try:
        yield held
    except BaseException:
        held.release(failed=True)
        remove_empty(created)
        raise
    held.release()


@contextlib.contextmanager
def as_user_errors(trainer: L.Trainer) -> Iterator[StopSignals]:
    """The run's stop signals (SIGTERM, SIGUSR1 under SLURM) installed; a stop they asked for
    and a full disk or read-only folder end as the project's errors."""
    with StopSignals(trainer) as signals:
        try:
            yield signals
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


def finish(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    trainer: L.Trainer,
    plan: RunPlan,
    source: RunSource,
    recorder: RunRecorder,
    start: float,
    signals: StopSignals,
) -> dict[str, Any] | None:
    """After the fit: the tests, ``results.json`` and the end of the record."""
    signals.check()
    resumed = resume_history(trainer)  # before a test restores other states
    tail = tail_summary(trainer)
    ended = trainer.max_epochs is not None and trainer.current_epoch >= trainer.max_epochs
    if tail is not None and tail.get("missing") and ended:
        # (a run stopped early, e.g. by its health, misses its last epochs anyway)
        warn(
            f"the test of the run's last epochs has no record of epoch(s) "
            f"{', '.join(map(str, tail['missing']))} (the run was resumed with "
            "another --trainer.max_epochs after its last epochs began), so "
            "results.json's test_acc_tail_mean is null"
        )
    health = health_of(trainer)
    test_metrics = None
    if plan.test_after_fit:
        test_metrics = test_last_and_best(model, datamodule, trainer, signals)
    signals.check()
    if not trainer.is_global_zero:
        return None
    config = source.config
    if config is None:
        config = run_config(model, datamodule, trainer, plan.run_seed())
    results = build_results(
        trainer,
        model,
        datamodule,
        seed=plan.run_seed(),
        wall_time_s=time.perf_counter() - start,
        test_metrics=test_metrics,
        config=config,
        resumed=resumed,
        tail=tail,
        command=source.command,
        inputs=recorder.inputs,
        protocol_epochs=recorder.protocol_epochs,
        health=health,
    )
    if not trainer.fast_dev_run:
        log_hp_metric(trainer, results["test_acc"])
        recorder.finish(trainer, model, results)
    return results


def say_results(trainer: L.Trainer, results: dict[str, Any] | None) -> None:
    """Where a fit's results are, its figure, and a warning where it stopped learning."""
    if results is None:
        return
    if trainer.fast_dev_run:
        print("fast_dev_run: every stage ran once; a smoke test writes no results.json")
        return
    if results["test_acc"] is not None:
        # a run without validation selects no checkpoint: its figure is the last epoch's
        unselected = results.get("best_epoch") is None
        which = " (the last epoch's: no checkpoint was selected)" if unselected else ""
        print(f"clean test accuracy: {results['test_acc']:.4f} ({results['method']}){which}")
    if results.get("health", "ok") != "ok":
        print(
            f"noisylabels: warning: the run stopped learning ({results['health']}); "
            "results.json records it as its health, and `noisylabels report` leaves the run "
            "out of its means (--include-unhealthy takes it in)",
            file=sys.stderr,
        )
    print(f"run folder: {run_dir(trainer)}")


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
