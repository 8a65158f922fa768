"""SampleDynamics: every training sample's loss, margin, VRNL weight and posterior, summed over
the epochs; the record a run writes (``sample_dynamics.pt``)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from noisylabels.callbacks import SampleDynamics
from noisylabels.callbacks.dynamics import margins
from noisylabels.methods import CE, StepOutput

from conftest import CONFIGS, TwoThreadAllReduce, synthetic_facts

NOISY = torch.tensor([0, 2, 1, 0, 1])
N, C = len(NOISY), 3


def _step(indices: list[int], logits: list[list[float]], weights: list[float], used=None):
    idx = torch.tensor(indices)
    z = torch.tensor(logits)
    losses = F.cross_entropy(z, NOISY[idx], reduction="none")
    step = StepOutput(
        index=idx,
        labels=NOISY[idx],
        logits=z,
        losses=losses,
        weights=torch.tensor(weights),
        used=None if used is None else torch.tensor(used),
        objective=losses.mean(),
        mean=losses.mean(),
        variance=losses.var(unbiased=False),
    )
    return {"loss": losses.mean(), "steps": [step]}, {"index": idx}


def _stub(reduce: Any = None) -> Any:
    # sample 4: the validation split, never trained on
    facts = synthetic_facts(C, NOISY, NOISY, torch.arange(4), 0.2)
    strategy = SimpleNamespace(reduce=reduce or (lambda t, reduce_op: t))
    return SimpleNamespace(datamodule=SimpleNamespace(data_facts=lambda: facts), strategy=strategy)


MODULE = CE(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2))
# two epochs of steps over samples 0..3 (sample 4 is never trained on)
EPOCHS = [
    [
        _step([0, 1], [[2.0, 0.0, 1.0], [0.0, 3.0, 1.0]], [1.5, 0.5]),
        _step([2, 3], [[0.0, 1.0, 0.0], [1.0, 1.0, 4.0]], [1.0, 0.2], used=[True, False]),
    ],
    [
        _step([3, 0], [[3.0, 1.0, 0.0], [4.0, 0.0, 0.0]], [1.1, 1.3]),
        _step([1, 2], [[0.0, 1.0, 2.0], [1.0, 2.0, 0.0]], [0.9, 1.2]),
    ],
]


def _epoch(cb: SampleDynamics, trainer: Any, steps: list[Any]) -> None:
    cb.on_train_epoch_start(trainer, MODULE)
    for b, (outputs, batch) in enumerate(steps):
        cb.on_train_batch_end(trainer, MODULE, outputs, batch, b)
    cb.on_train_epoch_end(trainer, MODULE)


def _expected() -> dict[str, torch.Tensor]:
    """The sums worked out from the steps above, sample by sample."""
    logits = {i: [] for i in range(N)}
    weights = {i: [] for i in range(N)}
    for steps in EPOCHS:
        for outputs, _ in steps:
            step = outputs["steps"][0]
            used = torch.ones(len(step.index), dtype=torch.bool) if step.used is None else step.used
            for k, i in enumerate(step.index.tolist()):
                logits[i].append(step.logits[k])
                if used[k]:
                    weights[i].append(float(step.weights[k]))
    out = {name: torch.zeros(N) for name in ("loss", "margin", "weight", "loss_epochs")}
    out["weight_epochs"] = torch.zeros(N)
    out["probs"] = torch.zeros(N, C)
    for i in range(N):
        for z in logits[i]:
            y = int(NOISY[i])
            out["loss"][i] += float(-F.log_softmax(z, 0)[y])
            others = torch.cat([z[:y], z[y + 1 :]])
            out["margin"][i] += float(z[y] - others.max())
            out["probs"][i] += F.softmax(z, 0)
            out["loss_epochs"][i] += 1
        out["weight"][i] = sum(weights[i])
        out["weight_epochs"][i] = len(weights[i])
    return out


def _assert_record(record: dict[str, Any]) -> None:
    expected = _expected()
    assert record["epochs"] == 2
    for name, value in expected.items():
        assert torch.allclose(record[name], value, atol=1e-5), name
    # what the audit reads off: the AUM of sample 3 (label 0, logits 1,1,4 then 3,1,0)
    assert float(record["margin"][3]) == pytest.approx((1 - 4) + (3 - 1))
    assert float(record["weight"][3]) == pytest.approx(1.1)  # epoch 0 left it out
    assert float(record["loss_epochs"][4]) == 0 and float(record["probs"][4].sum()) == 0


def test_margins() -> None:
    z = torch.tensor([[1.0, 3.0, 2.0], [5.0, 1.0, 1.0]])
    assert torch.equal(margins(z, torch.tensor([1, 2])), torch.tensor([1.0, -4.0]))


def test_sums_over_epochs_equal_hand_computation() -> None:
    cb, trainer = SampleDynamics(), _stub()
    cb.setup(trainer, MODULE, "fit")
    cb.on_fit_start(trainer, MODULE)
    for steps in EPOCHS:
        _epoch(cb, trainer, steps)
    _assert_record(cb.record())


def test_a_resumed_fit_ends_with_the_sums_of_an_uninterrupted_one() -> None:
    first, trainer = SampleDynamics(), _stub()
    first.setup(trainer, MODULE, "fit")
    first.on_fit_start(trainer, MODULE)
    _epoch(first, trainer, EPOCHS[0])
    state = first.state_dict()
    # a new process: the checkpoint's state is restored before on_fit_start
    resumed = SampleDynamics()
    resumed.setup(trainer, MODULE, "fit")
    resumed.load_state_dict(state)
    resumed.on_fit_start(trainer, MODULE)
    _epoch(resumed, trainer, EPOCHS[1])
    _assert_record(resumed.record())
    # a state restored for testing after the fit leaves the record alone
    resumed.teardown(trainer, MODULE, "fit")
    resumed.load_state_dict(state)
    _assert_record(resumed.record())
    # and a later new fit does not start from it
    resumed.setup(trainer, MODULE, "fit")
    resumed.on_fit_start(trainer, MODULE)
    assert resumed.record()["epochs"] == 0 and float(resumed.record()["loss"].sum()) == 0


def test_two_processes_hold_the_same_sums() -> None:
    """Each process trains on its share; sample 0 on both (padding) counts once per epoch."""
    all_reduce = TwoThreadAllReduce()

    callbacks = [SampleDynamics(), SampleDynamics()]
    trainers = [_stub(all_reduce.reducer(r)) for r in (0, 1)]
    # epoch 0 as above, split by step; epoch 1 likewise, with sample 0 repeated on rank 1
    shards = [
        [[EPOCHS[0][0]], [EPOCHS[0][1]]],
        [[EPOCHS[1][0]], [EPOCHS[1][1], _step([0], [[4.0, 0.0, 0.0]], [1.3])]],
    ]

    def work(rank: int) -> None:
        cb, trainer = callbacks[rank], trainers[rank]
        cb.setup(trainer, MODULE, "fit")
        cb.on_fit_start(trainer, MODULE)
        for shard in shards:
            _epoch(cb, trainer, shard[rank])

    threads = [threading.Thread(target=work, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for cb in callbacks:
        _assert_record(cb.record())


def test_every_run_writes_its_record(run_cli, tmp_path: Path) -> None:
    """``noisylabels fit`` writes ``sample_dynamics.pt``: the sums over every epoch of the
    training split, loadable without running code."""
    run_cli(
        "fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "2",
        "--trainer.limit_train_batches", "3", "--test_after_fit", "false",
    )  # fmt: skip
    (path,) = tmp_path.rglob("sample_dynamics.pt")
    record = torch.load(path, weights_only=True)
    noise = torch.load(path.parent / "noise.pt", weights_only=True)
    assert record["epochs"] == 2 and record["trained_epochs"] == 2
    assert record["alpha"] == 0.1 and record["method"] == "Forward-VRNL"
    assert torch.equal(record["noisy_labels"], noise["noisy_labels"])
    assert torch.equal(record["train_indices"], noise["train_indices"])
    seen = record["loss_epochs"] > 0
    assert not seen[noise["val_indices"]].any()  # never trained on the validation split
    # 3 batches of 64 distinct samples in each of the 2 epochs
    assert int(record["loss_epochs"].sum()) == 2 * 3 * 64 and int(record["loss_epochs"].max()) <= 2
    assert torch.allclose(record["probs"].sum(1), record["loss_epochs"], atol=1e-4)


def test_step_records_are_those_of_the_callbacks_network_and_none_without_them() -> None:
    """What the per-sample callbacks read from a training step's return value: its records of
    their network, or ``None`` (a step of another LightningModule), which they warn of once."""
    import warnings

    from noisylabels.callbacks.subset_stats import network_steps
    from noisylabels.methods.core.step import StepOutput

    zeros = torch.zeros(2)
    steps = [
        StepOutput(index=zeros, labels=zeros, logits=zeros, losses=zeros, weights=zeros,
                   used=None, objective=zeros, mean=zeros, variance=zeros, network=k)
        for k in (0, 1)
    ]  # fmt: skip
    assert network_steps({"loss": zeros, "steps": steps}, 1) == [steps[1]]
    assert network_steps(zeros, 0) is None and network_steps({"loss": zeros}, 0) is None
    callback = SampleDynamics()
    callback._sums = torch.zeros(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            callback.on_train_batch_end(None, None, {"loss": zeros}, None, 0)
    assert [str(w.message) for w in caught] == [
        "SampleDynamics: the training step returned no 'steps' (StepOutput records of a "
        "noisylabels method), so there is nothing to record"
    ]
