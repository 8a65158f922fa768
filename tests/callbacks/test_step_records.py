"""The per-sample callbacks of a run (SubsetStatistics, SampleDynamics) fill and sum their
epoch's buffer of training-step records once per epoch between them, and each reads what it
would have read alone."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from noisylabels.callbacks import SampleDynamics, SubsetStatistics, subset_stats
from noisylabels.callbacks.subset_stats import StepRecords
from noisylabels.data import DigitsDataModule
from noisylabels.methods import CE, StepOutput

from conftest import TwoThreadAllReduce, synthetic_facts, tiny_trainer

CLEAN = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
NOISY = torch.tensor([0, 2, 2, 0, 0, 2, 1, 1])
N, C = len(NOISY), 3


def _step(indices: list[int], seed: int, network: int = 0) -> dict[str, Any]:
    idx = torch.tensor(indices)
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(indices), C, generator=gen)
    losses = F.cross_entropy(logits, NOISY[idx], reduction="none")
    step = StepOutput(
        index=idx,
        labels=NOISY[idx],
        logits=logits,
        losses=losses,
        weights=1 + torch.randn(len(indices), generator=gen),
        used=None,
        objective=losses.mean(),
        mean=losses.mean(),
        variance=losses.var(unbiased=False),
        network=network,
    )
    return {"loss": losses.mean(), "steps": [step]}


def _steps(indices: list[int], seed: int) -> dict[str, Any]:
    """A step of two networks (as Co-teaching's): network 1's records differ from network 0's."""
    outputs = _step(indices, seed)
    outputs["steps"] += _step(indices, seed + 100, network=1)["steps"]
    return outputs


# two epochs of steps over samples 0..6 (sample 7 is never trained on)
EPOCHS = [
    [_steps([0, 1, 2], 1), _steps([3, 4, 5, 6], 2)],
    [_steps([6, 0, 4], 3), _steps([1, 2, 3, 5], 4)],
]
OTHER_EPOCH = [_steps([5, 4, 3], 5), _steps([2, 1, 0, 6], 6)]


def _module() -> L.LightningModule:
    module = CE(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2))
    module.add_network()  # the steps below record networks 0 and 1, as a two-network method's
    module.log = lambda *args, **kwargs: None  # no trainer attached
    return module


MODULE = _module()


def _trainer(callbacks: list[StepRecords], reduce: Any) -> Any:
    facts = synthetic_facts(C, NOISY, CLEAN, torch.arange(N - 1), 0.3)
    return SimpleNamespace(
        datamodule=SimpleNamespace(data_facts=lambda: facts),
        strategy=SimpleNamespace(reduce=reduce),
        callbacks=callbacks,
        current_epoch=0,
        global_step=0,
        max_epochs=len(EPOCHS),
        is_global_zero=True,
        loggers=[],
        fast_dev_run=True,  # no subsets.csv
    )


def _counting(calls: list[int]) -> Any:
    def reduce(tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
        calls.append(1)
        return tensor

    return reduce


def _start(callbacks: list[StepRecords], trainer: Any) -> None:
    """A fit's start, at epoch 0 and step 0."""
    trainer.current_epoch = trainer.global_step = 0
    for cb in callbacks:
        cb.setup(trainer, MODULE, "fit")
        cb.on_fit_start(trainer, MODULE)


def _epoch(callbacks: list[StepRecords], trainer: Any, steps: list[Any]) -> list[dict[str, float]]:
    """Drive the callbacks' hooks as a training epoch does; returns the statistics of every
    SubsetStatistics."""
    for cb in callbacks:
        cb.on_train_epoch_start(trainer, MODULE)
    for b, outputs in enumerate(steps):
        for cb in callbacks:
            cb.on_train_batch_end(trainer, MODULE, outputs, {}, b)
        trainer.global_step += 1
    for cb in callbacks:
        cb.on_train_epoch_end(trainer, MODULE)
    trainer.current_epoch += 1
    return [dict(cb.last) for cb in callbacks if isinstance(cb, SubsetStatistics)]


def _fit(
    callbacks: list[StepRecords], trainer: Any, epochs: list[list[Any]]
) -> list[dict[str, float]]:
    """A fit over ``epochs``; the statistics of every SubsetStatistics after every epoch."""
    _start(callbacks, trainer)
    return [stats for steps in epochs for stats in _epoch(callbacks, trainer, steps)]


def _alone(callback: StepRecords, epochs: list[list[Any]] = EPOCHS) -> Any:
    """What ``callback`` records in a fit of ``epochs`` without the other callback."""
    trainer = _trainer([callback], _counting([]))
    trainer.max_epochs = len(epochs)
    stats = _fit([callback], trainer, epochs)
    return stats if isinstance(callback, SubsetStatistics) else callback.record()


def _assert_same_record(record: dict[str, Any], expected: dict[str, Any]) -> None:
    assert record["epochs"] == expected["epochs"]
    for name, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(record[name], value), name


@pytest.mark.parametrize("order", ["statistics first", "dynamics first"])
@pytest.mark.parametrize(
    ("statistics", "dynamics", "sums_per_epoch"),
    [
        ({}, {}, [1, 1]),
        ({"every_n_epochs": 2}, {}, [1, 1]),  # epoch 0: the dynamics alone
        ({}, {"network": 1}, [2, 2]),  # other records: each its own
    ],
    ids=["same steps", "statistics every other epoch", "other network"],
)
def test_the_epoch_is_summed_once_for_both_callbacks(
    order: str, statistics: dict[str, Any], dynamics: dict[str, Any], sums_per_epoch: list[int]
) -> None:
    stats_cb, dyn_cb = SubsetStatistics(**statistics), SampleDynamics(**dynamics)
    callbacks = [stats_cb, dyn_cb] if order == "statistics first" else [dyn_cb, stats_cb]
    calls: list[int] = []
    trainer = _trainer(callbacks, _counting(calls))
    _start(callbacks, trainer)
    stats = []
    for epoch, steps in enumerate(EPOCHS):
        before = len(calls)
        stats += _epoch(callbacks, trainer, steps)
        assert len(calls) - before == sums_per_epoch[epoch], f"epoch {epoch}"
    expected_stats = _alone(SubsetStatistics(**statistics))
    assert stats == expected_stats
    _assert_same_record(dyn_cb.record(), _alone(SampleDynamics(**dynamics)))


def test_the_pass_source_sums_its_own_buffer() -> None:
    """``source: pass`` records the pass's losses, not the steps': nothing to share."""
    stats_cb, dyn_cb = SubsetStatistics(source="pass"), SampleDynamics()
    stats_cb._training_pass = lambda trainer, module: None  # a pass over no batch
    calls: list[int] = []
    _fit([stats_cb, dyn_cb], _trainer([stats_cb, dyn_cb], _counting(calls)), EPOCHS)
    assert len(calls) == 2 * len(EPOCHS)
    _assert_same_record(dyn_cb.record(), _alone(SampleDynamics()))


def test_an_earlier_fit_is_not_read_at_the_same_epoch_and_step() -> None:
    """A fit that starts again at the same epoch and step with the same callbacks sums its
    own records, not those kept from before: here the dynamics summed epoch 0 of a first fit
    (the statistics record every other epoch), and the statistics record epoch 0 of the second,
    its last."""
    callbacks = [SubsetStatistics(every_n_epochs=2), SampleDynamics()]
    trainer = _trainer(callbacks, _counting([]))
    assert _fit(callbacks, trainer, EPOCHS[:1]) == [{}]
    trainer.max_epochs = 1
    stats = _fit(callbacks, trainer, [OTHER_EPOCH])
    assert stats == _alone(SubsetStatistics(every_n_epochs=2), [OTHER_EPOCH])
    assert stats != [{}]
    _assert_same_record(callbacks[1].record(), _alone(SampleDynamics(), [OTHER_EPOCH]))


def test_two_processes_sum_once_and_agree() -> None:
    """Each process trains on its share: one all-reduce per epoch and process, and the sums of
    a one-process fit over every step."""
    all_reduce = TwoThreadAllReduce()

    per_rank = [[SubsetStatistics(), SampleDynamics()] for _ in (0, 1)]
    stats: dict[int, list[dict[str, float]]] = {}

    def work(rank: int) -> None:
        shards = [[steps[rank]] for steps in EPOCHS]
        trainer = _trainer(per_rank[rank], all_reduce.reducer(rank))
        stats[rank] = _fit(per_rank[rank], trainer, shards)

    threads = [threading.Thread(target=work, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all_reduce.calls == {0: len(EPOCHS), 1: len(EPOCHS)}
    expected_stats, expected = _alone(SubsetStatistics()), _alone(SampleDynamics())
    for rank in (0, 1):
        assert len(stats[rank]) == len(expected_stats)
        for got, want in zip(stats[rank], expected_stats, strict=True):
            assert got == pytest.approx(want)
        record = per_rank[rank][1].record()
        for name, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert torch.allclose(record[name], value, atol=1e-6), name


@pytest.mark.parametrize(
    ("callbacks", "sums"),
    [
        (lambda: [SubsetStatistics(histograms=False), SampleDynamics()], 2),
        (lambda: [SampleDynamics(), SubsetStatistics(histograms=False)], 2),
        (lambda: [SubsetStatistics(source="pass", histograms=False), SampleDynamics()], 4),
    ],
    ids=["statistics first", "dynamics first", "pass"],
)
def test_a_fit_fills_and_reduces_the_buffer_once_per_epoch(
    callbacks: Any, sums: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Lightning fit of 2 epochs with both callbacks: one fill and one reduce of the
    per-sample buffer per epoch (two with ``source: pass``, whose buffer is its own)."""
    fills: list[int] = []
    fill = subset_stats.fill_buffer

    def counting_fill(*args: Any) -> torch.Tensor:
        fills.append(1)
        return fill(*args)

    monkeypatch.setattr(subset_stats, "fill_buffer", counting_fill)
    dm = DigitsDataModule(batch_size=64, noise_rate=0.3)
    model = CE(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [16]}}, input_shape=(1, 8, 8)
    )
    trainer = tiny_trainer(
        max_epochs=2,
        limit_train_batches=3,
        limit_val_batches=0,
        callbacks=callbacks(),
        default_root_dir=tmp_path,
    )
    reduces: list[int] = []
    reduce = trainer.strategy.reduce
    n = 10 + 4  # the buffer's columns: C logits, loss, weight, two counts

    def counting_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(tensor, torch.Tensor) and tensor.dim() == 2 and tensor.shape[1] == n:
            reduces.append(1)
        return reduce(tensor, *args, **kwargs)

    monkeypatch.setattr(trainer.strategy, "reduce", counting_reduce)
    trainer.fit(model, datamodule=dm)
    assert trainer.current_epoch == 2
    assert (len(fills), len(reduces)) == (sums, sums)
    dynamics = next(c for c in trainer.callbacks if isinstance(c, SampleDynamics))
    statistics = next(c for c in trainer.callbacks if isinstance(c, SubsetStatistics))
    assert dynamics.record()["epochs"] == 2
    assert int(dynamics.record()["loss_epochs"].sum()) == 2 * 3 * 64
    assert statistics.last
