"""One run: fit → test the best checkpoint on the clean test set → ``results.json``.

The command line's ``fit`` is :func:`fit_and_test`; from Python it is the same run::

    import lightning as L
    from noisylabels.data import MNISTDataModule
    from noisylabels.methods import Forward
    from noisylabels.run import fit_and_test

    L.seed_everything(0, workers=True)  # as noisylabels fit does (--seed_everything 0)
    data = MNISTDataModule(data_dir="DATA", noise_type="symmetric", noise_rate=0.2)
    model = Forward(alpha=0.1, transition=True, num_classes=10, input_shape=(1, 28, 28))
    results = fit_and_test(model, data, L.Trainer(max_epochs=80))

A method is not a run: what a run records and stops on (the noise record, T̂ monitoring, the
divergence stop, ``last.ckpt``, the epoch log, the data module's reports) are the
:func:`run_callbacks`, which :func:`fit_and_test` attaches to the trainer before fitting, from the
command line and from Python alike. A trainer built in Python also gets what the command line
configures (:mod:`noisylabels.run.defaults`): the best checkpoint by noisy-validation accuracy,
the per-subset statistics and ``config.yaml``; keyword arguments turn each off.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, Checkpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from noisylabels.callbacks import (
    DivergenceGuard,
    EpochLog,
    SampleDynamics,
    TailTest,
    TransitionMonitor,
)
from noisylabels.data import NoisyDataModule
from noisylabels.run.artifacts import (
    NoiseRecorder,
    log_hp_metric,
    run_dir,
    write_sample_dynamics,
    write_transition_estimate,
)
from noisylabels.run.checkpoints import LAST, LastCheckpoint, discard_failed_run, resume_history
from noisylabels.run.defaults import (
    ConfigRecord,
    command_line_callbacks,
    run_config,
    trainer_objects,
)
from noisylabels.run.results import build_results, tail_summary, write_results
from noisylabels.run.resume import plain_options
from noisylabels.run.stops import StopSignals, refuse_hpc_checkpoints
from noisylabels.run.storage import AtomicCheckpointIO, storage_error

RESULTS_FILE = "results.json"
LAST_METRIC = "test/acc_last"
# what a resume from Python compares of the trainer (the command line compares every option)
PYTHON_TRAINER_OPTIONS = (
    "max_epochs",
    "max_steps",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "check_val_every_n_epoch",
)


def run_callbacks(
    datamodule: L.LightningDataModule | None = None,
    tail_test_epochs: int = 0,
    trainer_options: dict[str, Any] | None = None,
) -> list[Callback]:
    """The callbacks of every run: the noise and its T (``noise.pt``, ``transition.csv``), T̂ and
    ε_T, every training sample's record over the epochs (``sample_dynamics.pt``), the stop on a
    NaN/Inf loss, a line per epoch where there is no progress bar, ``checkpoints/last.ckpt`` to
    resume from (keeping ``trainer_options`` for the record of a resume), and whatever the data
    module needs (e.g. a skipped-image report); with ``tail_test_epochs``, the clean test
    accuracy of every network over that many last epochs (:class:`TailTest`)."""
    callbacks: list[Callback] = [
        NoiseRecorder(),
        TransitionMonitor(),
        SampleDynamics(),
        DivergenceGuard(),
        EpochLog(),
        LastCheckpoint(trainer_options),
    ]
    if tail_test_epochs:
        callbacks.insert(2, TailTest(tail_test_epochs))
    if isinstance(datamodule, NoisyDataModule):
        callbacks.extend(datamodule.callbacks())
    return callbacks


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
    ckpt_path: str | None = None,
    weights_only: bool | None = None,
    test: bool = True,
    seed: int | None = None,
    config: Mapping[str, Any] | None = None,
    tail_test_epochs: int = 0,
    select_best: bool = True,
    subset_statistics: bool = True,
    save_config: bool = True,
    save_results: bool = True,
    command: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """Fit ``model`` on ``datamodule``, test the best checkpoint (by the trainer's checkpoint
    callback; the final model where there is none) and the last epoch's model on the clean test
    set, and write ``results.json``, the final T̂ and the per-sample record
    (``sample_dynamics.pt``) to the run dir: ``noisylabels fit``'s run. ``model`` may be any
    ``LightningModule`` that logs ``val/acc`` (and ``test/acc`` when tested).

    Args:
        ckpt_path: checkpoint to resume the fit from (Lightning's ``ckpt_path``).
        weights_only: how Lightning loads ``ckpt_path`` (its ``weights_only``).
        test: test after fitting; without it ``results.json`` has ``test_acc: null``.
        seed: the run's training seed, for ``results.json`` (default: Lightning's
            ``PL_GLOBAL_SEED``, which ``seed_everything`` sets).
        config: the resolved configuration, hashed into ``results.json``'s provenance.
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
        save_config: write ``config.yaml`` (the model's and data module's class and
            hyperparameters, the trainer's settings, the seed) to the run folder; its hash goes
            to ``results.json``'s provenance. Ignored when ``config`` is given (the command
            line writes its own).
        save_results: write ``results.json`` and the final T̂ to the run folder.
        command: the command line of the run (``["fit", "--config", ...]``), recorded with its
            hash in ``results.json``'s provenance (a sweep compares it with the run it plans).

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
    options = trainer_options(trainer, config)
    added = command_line_callbacks(
        trainer, model, select_best=select_best, subset_statistics=subset_statistics
    )
    attach_callbacks(trainer, [*added, *run_callbacks(datamodule, tail_test_epochs, options)])
    if config is None and save_config:
        config = run_config(model, datamodule, trainer, seed)
        attach_callbacks(trainer, [ConfigRecord(config, trainer_objects(trainer))])
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()  # staged in the run's folder
    last = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
    with StopSignals(trainer) as signals:
        if last is not None:
            last.signals = signals
        try:
            refuse_hpc_checkpoints(trainer, ckpt_path)
            try:
                trainer.fit(
                    model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=weights_only
                )
            except BaseException:
                discard_failed_run(trainer)  # a folder holding nothing to resume from
                raise
            try:
                signals.check()
                resumed = resume_history(trainer)  # before a test restores other states
                tail = tail_summary(trainer)
                test_metrics = None
                if test:
                    test_metrics = test_last_and_best(model, datamodule, trainer, signals)
                signals.check()
                results = _results(
                    trainer, model, datamodule, seed, start, test_metrics, config, resumed, tail,
                    command,
                )  # fmt: skip
                if results is not None and not trainer.fast_dev_run:
                    log_hp_metric(trainer, results["test_acc"])
                    if save_results:
                        folder = run_dir(trainer)
                        write_transition_estimate(folder, model)
                        write_sample_dynamics(folder, trainer, model)
                        write_results(results, folder / RESULTS_FILE)
                return results
            except (Exception, SIGTERMException, KeyboardInterrupt) as err:
                if last is not None:  # a stop or failure between the trainer's calls
                    last.record_failure(trainer, err)
                raise
        except OSError as err:
            found = storage_error(err)
            if found is None or found is err:
                raise
            raise found from err


def _results(
    trainer: L.Trainer,
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    seed: int | None,
    start: float,
    test_metrics: dict[str, Any] | None,
    config: Mapping[str, Any] | None,
    resumed: list[dict[str, Any]],
    tail: dict[str, Any] | None,
    command: Sequence[str] | None,
) -> dict[str, Any] | None:
    """The results of a fit (``None`` off process 0)."""
    if not trainer.is_global_zero:
        return None
    return build_results(
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
    )


def trainer_options(trainer: L.Trainer, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The trainer options a resume compares with the checkpoint's: the config's ``trainer``
    section (every ``--trainer.*`` option of the command line), else the run-length settings
    of ``trainer`` (a run from Python)."""
    section = (config or {}).get("trainer")
    if section is not None:
        return plain_options(section)
    return plain_options({name: getattr(trainer, name, None) for name in PYTHON_TRAINER_OPTIONS})


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
    last = LastCheckpoint.dirpath(trainer) / LAST
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
