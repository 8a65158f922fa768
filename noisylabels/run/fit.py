"""One run: fit → test the best checkpoint on the clean test set → ``results.json``.

The command line's ``fit`` is :func:`fit_and_test`; it is as callable from Python::

    from lightning import Trainer
    from noisylabels.data import MNISTDataModule
    from noisylabels.methods import Forward
    from noisylabels.run import WarmupAwareCheckpoint, fit_and_test

    data = MNISTDataModule(data_dir="DATA", noise_type="symmetric", noise_rate=0.2)
    model = Forward(alpha=0.1, transition=True)
    checkpoint = WarmupAwareCheckpoint(monitor="val/acc", mode="max")
    results = fit_and_test(model, data, Trainer(max_epochs=80, callbacks=[checkpoint]))

A method is not a run: what a run records and stops on (the noise record, T̂ monitoring, the
divergence stop, ``last.ckpt``, the data module's reports) are the :func:`run_callbacks`, which
:func:`fit_and_test` attaches to the trainer before fitting, from the command line and from
Python alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, Checkpoint

from noisylabels.callbacks import DivergenceGuard, SampleDynamics, TailTest, TransitionMonitor
from noisylabels.data import NoisyDataModule
from noisylabels.run.artifacts import (
    NoiseRecorder,
    run_dir,
    write_sample_dynamics,
    write_transition_estimate,
)
from noisylabels.run.checkpoints import LastCheckpoint, discard_failed_run, resume_history
from noisylabels.run.results import build_results, tail_summary, write_results

RESULTS_FILE = "results.json"
LAST_METRIC = "test/acc_last"


def run_callbacks(
    datamodule: L.LightningDataModule | None = None, tail_test_epochs: int = 0
) -> list[Callback]:
    """The callbacks of every run: the noise and its T (``noise.pt``, ``transition.csv``), T̂ and
    ε_T, every training sample's record over the epochs (``sample_dynamics.pt``), the stop on a
    NaN/Inf loss, ``checkpoints/last.ckpt`` to resume from, and whatever the data module needs
    (e.g. a skipped-image report); with ``tail_test_epochs``, the clean test accuracy of every
    network over that many last epochs (:class:`TailTest`)."""
    callbacks: list[Callback] = [
        NoiseRecorder(),
        TransitionMonitor(),
        SampleDynamics(),
        DivergenceGuard(),
        LastCheckpoint(),
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
) -> dict[str, Any] | None:
    """Fit ``model`` on ``datamodule``, test the best checkpoint (by the trainer's checkpoint
    callback; the final model where there is none) and the last epoch's model on the clean test
    set, and write ``results.json``, the final T̂ and the per-sample record
    (``sample_dynamics.pt``) to the run dir.

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

    Under ``fast_dev_run`` (a smoke test of every stage, not a result) nothing is written.

    Returns:
        The results (also written to ``results.json``) on process 0; ``None`` on the others.
    """
    start = time.perf_counter()
    attach_callbacks(trainer, run_callbacks(datamodule, tail_test_epochs))
    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=weights_only)
    except BaseException:
        discard_failed_run(trainer)  # a folder holding nothing to resume from
        raise
    resumed = resume_history(trainer)  # before a test from a checkpoint restores its states
    tail = tail_summary(trainer)
    test_metrics = None
    if test:
        test_metrics = test_last_and_best(model, datamodule, trainer)
    if not trainer.is_global_zero:
        return None
    if seed is None and os.environ.get("PL_GLOBAL_SEED") is not None:
        seed = int(os.environ["PL_GLOBAL_SEED"])
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
    )
    if trainer.fast_dev_run:
        return results
    folder = run_dir(trainer)
    write_transition_estimate(folder, model)
    write_sample_dynamics(folder, trainer, model)
    write_results(results, folder / RESULTS_FILE)
    return results


def test_last_and_best(
    model: L.LightningModule, datamodule: L.LightningDataModule, trainer: L.Trainer
) -> dict[str, Any]:
    """Test the model as fit left it (the last epoch, logged as ``test/acc_last``), then the
    best checkpoint (``test/acc``; the same model where there is none), on the clean test set.
    Returns both metrics."""
    metrics: dict[str, Any] = {}
    has_best = bool(getattr(trainer.checkpoint_callback, "best_model_path", ""))
    if has_best:
        previous = getattr(model, "test_metric", None)
        model.test_metric = LAST_METRIC
        try:
            out = trainer.test(model, datamodule=datamodule, ckpt_path=None, verbose=False)
        finally:
            model.test_metric = previous or "test/acc"
        metrics.update(out[0] if out else {})
    out = trainer.test(model, datamodule=datamodule, ckpt_path="best" if has_best else None)
    metrics.update(out[0] if out else {})
    if not has_best and "test/acc" in metrics:
        metrics[LAST_METRIC] = metrics["test/acc"]
    return metrics
