"""The warm-up options of the shared stage schedule: which warm-up model T̂ is estimated from
(``warmup_model``), what the method's own stage starts from (``main_stage_init``) and the
warm-up's momentum (``warmup_momentum``), on tiny data, and the last-epoch test accuracy."""

from __future__ import annotations

import copy

import pytest
import torch
from lightning import Callback, Trainer
from test_transition_methods import TINY, run_dir_of
from torch import nn

from noisylabels.data import MNISTDataModule
from noisylabels.methods import Forward, Reweight, StageSchedule
from noisylabels.run import WarmupAwareCheckpoint, fit_and_test

from conftest import config_args, read_results


def fill(model: nn.Module, value: float) -> None:
    with torch.no_grad():
        for p in model.net.parameters():
            p.fill_(value)


def net_value(model: nn.Module) -> float:
    return float(next(model.net.parameters()).detach().flatten()[0])


def scripted(main_stage_init: str, warmup_model: str = "best") -> tuple[Forward, list[float]]:
    """A Forward model whose warm-up saw three epochs with weights 1, 2, 3 and noisy-val
    accuracies 0.5, 0.7 (best), 0.6; returns it and, once the main stage starts, the weight
    the estimation point saw."""
    model = Forward(
        network={"backbone": "mlp"},
        num_classes=3,
        input_shape=(1, 1, 2),
        transition="estimate",
        schedule={
            "warmup_epochs": 3,
            "warmup_model": warmup_model,
            "main_stage_init": main_stage_init,
        },
    )
    seen: list[float] = []

    def estimate() -> torch.Tensor:
        seen.append(net_value(model))
        return torch.eye(3)

    model.estimate_transition = estimate
    for weight, score in ((1.0, 0.5), (2.0, 0.7), (3.0, 0.6)):
        fill(model, weight)
        model.record_warmup_score(score)
    return model, seen


@pytest.mark.parametrize(
    ("main_stage_init", "warmup_model", "estimated_from", "starts_from"),
    [
        ("continue", "best", 2.0, 3.0),  # T̂ from the best epoch, training goes on from the last
        ("restart", "best", 2.0, 2.0),  # T-Revision: the estimation model goes on
        ("continue", "last", 3.0, 3.0),  # the default: the last warm-up epoch throughout
        ("restart", "last", 3.0, 3.0),
    ],
)
def test_estimation_and_main_stage_models(
    main_stage_init: str, warmup_model: str, estimated_from: float, starts_from: float
) -> None:
    model, seen = scripted(main_stage_init, warmup_model)
    model.start_main_stage()
    assert seen == [estimated_from]
    assert net_value(model) == starts_from
    assert not model.in_warmup and torch.equal(model.T, torch.eye(3))


def test_reinit_gives_a_newly_built_network() -> None:
    model, seen = scripted("reinit")

    def build_network() -> nn.Module:
        fresh = copy.deepcopy(model.net)
        fill(nn.ModuleDict({"net": fresh}), 0.25)
        return fresh

    model.build_network = build_network
    model.start_main_stage()
    assert seen == [2.0]  # estimated from the best warm-up model, then a new network
    assert all(torch.all(p == 0.25) for p in model.net.parameters())


def test_best_warmup_model_survives_a_checkpoint() -> None:
    """A run resumed in its warm-up still estimates from the best warm-up epoch before it."""
    model, _ = scripted("continue")
    checkpoint: dict = {"state_dict": model.state_dict()}
    model.on_save_checkpoint(checkpoint)
    resumed, seen = scripted("continue")
    resumed._warmup_best = None
    resumed.on_load_checkpoint(checkpoint)
    resumed.start_main_stage()
    assert seen == [2.0] and resumed.estimation_epoch == model._warmup_best["epoch"]


def test_bad_stage_options() -> None:
    with pytest.raises(ValueError, match="--model.schedule.warmup_model must be one of"):
        Forward(schedule={"warmup_model": "first"})
    with pytest.raises(ValueError, match="--model.schedule.main_stage_init must be one of"):
        Forward(schedule={"main_stage_init": "fresh"})
    with pytest.raises(ValueError, match=r"warmup_momentum must be in \[0, 1\)"):
        Forward(schedule={"warmup_momentum": 1.5})
    with pytest.raises(ValueError, match="SGD's momentum"):
        Forward(optim={"optimizer": "adam"}, schedule={"warmup_momentum": 0.0})
    with pytest.raises(ValueError, match="--model.schedule.main_epochs must be >= 1"):
        StageSchedule(main_epochs=0)
    with pytest.raises(ValueError, match="--model.schedule has no option 'warmup'"):
        Forward(schedule={"warmup": 3})


class OptimizerProbe(Callback):
    """At each epoch's first batch: the SGD momentum, whether a momentum buffer exists, the
    network's first weight; at each epoch's end: that weight again."""

    def __init__(self) -> None:
        self.starts: list[tuple[float, bool, torch.Tensor]] = []
        self.ends: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == 0:
            opt = trainer.optimizers[0]
            has_state = any("momentum_buffer" in s for s in opt.state.values())
            weight = next(pl_module.net.parameters()).detach().clone()
            self.starts.append((opt.param_groups[0]["momentum"], has_state, weight))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.ends.append(next(pl_module.net.parameters()).detach().clone())


@pytest.mark.parametrize(
    ("main_stage_init", "warmup_momentum"),
    [("continue", 0.0), ("continue", None), ("reinit", None)],
)
def test_momentum_and_reinit_in_a_real_fit(
    mnist_dir, tmp_path, main_stage_init: str, warmup_momentum: float | None
) -> None:
    """Tiny MNIST, one warm-up epoch, then the reweighted stage with momentum 0.9: the warm-up
    momentum as asked; the main stage from a new network and a fresh optimizer (reinit) or
    the warm-up's network and momentum buffers (continue)."""
    torch.manual_seed(0)
    data = MNISTDataModule(data_dir=str(mnist_dir), batch_size=16)
    model = Reweight(
        network={"backbone": "lenet5"},
        schedule=StageSchedule(
            warmup_epochs=1, warmup_momentum=warmup_momentum, main_stage_init=main_stage_init
        ),
    )
    probe = OptimizerProbe()
    trainer = Trainer(
        max_epochs=2,
        accelerator="cpu",
        limit_train_batches=3,
        limit_val_batches=2,
        callbacks=[probe, WarmupAwareCheckpoint(monitor="val/acc", mode="max")],
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        logger=False,
    )
    results = fit_and_test(model, data, trainer)
    (warm_momentum, _, _), (main_momentum, main_state, main_weight) = probe.starts
    assert warm_momentum == (0.9 if warmup_momentum is None else 0.0) and main_momentum == 0.9
    # momentum buffers carry over only when the warm-up had momentum and the stage continues
    assert main_state is (main_stage_init == "continue" and warmup_momentum is None)
    assert torch.equal(main_weight, probe.ends[0]) is (main_stage_init == "continue")
    assert results["estimation_epoch"] == 0 and results["best_epoch"] == 1
    assert results["last_epoch"] == 1 and results["test_acc_last"] == results["test_acc"]


def test_best_warmup_epoch_through_the_cli(run_cli, tmp_path, mnist_dir) -> None:
    """``--model.schedule.warmup_model best``: T̂ comes from the warm-up epoch with the best logged
    noisy-validation accuracy; results.json records that epoch and both test accuracies."""
    run_cli(
        "fit",
        *config_args("mnist_forward_vrnl"),
        "--model.schedule.warmup_epochs",
        "3",
        "--trainer.max_epochs",
        "5",
        "--trainer.limit_train_batches",
        "4",
        "--model.optim.lr",
        "0.05",
        "--data.data_dir",
        str(mnist_dir),
        *TINY,
    )
    results = read_results(tmp_path)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir_of(tmp_path)), size_guidance={"scalars": 0})
    acc.Reload()
    warmup = [e.value for e in acc.Scalars("val/acc")][:3]
    assert results["estimation_epoch"] == warmup.index(max(warmup))
    assert results["last_epoch"] == 4 and results["test_acc_last"] is not None
    assert 2 < results["best_epoch"] <= 4  # never a warm-up epoch
