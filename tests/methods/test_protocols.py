"""The stage machinery the reference protocols need: the learning rate of every epoch (warm-up
milestones, multistep, Co-teaching's linear decay with Adam's β1), the revision stage with its
own optimizer (T-Revision, PTD), the last epochs' test accuracy, and unnormalised input."""

from __future__ import annotations

import pytest
import torch
from lightning import Callback, Trainer

from noisylabels.data import DigitsDataModule
from noisylabels.methods import PTD, CoTeaching, TRevision
from noisylabels.methods.core.optim import OptimizerOptions
from noisylabels.methods.core.stages import StagedLR, StageSchedule
from noisylabels.run import fit_and_test

from conftest import CONFIGS, read_results

SHAPE = (1, 8, 8)


def _lrs(
    schedule: StageSchedule, warmup: int, end: int, epochs: int, adam: bool = False, factor=None
):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([param], lr=1.0) if adam else torch.optim.SGD([param], lr=1.0)
    scheduler = StagedLR(opt, schedule, warmup, end, factor)
    seen = []
    for _ in range(epochs):
        group = opt.param_groups[0]
        seen.append((group["lr"], group["betas"][0] if adam else None))
        opt.step()
        scheduler.step()
    return seen


def test_multistep_equals_torch_multistep_lr() -> None:
    """Without warm-up milestones the rates are MultiStepLR's, float for float (milestones
    shifted by the warm-up)."""
    schedule = StageSchedule(milestones=(3, 5), lr_gamma=0.1)
    ours = [lr for lr, _ in _lrs(schedule, 2, 10, 10)]
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    reference = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[5, 7], gamma=0.1)
    theirs = []
    for _ in range(10):
        theirs.append(opt.param_groups[0]["lr"])
        opt.step()
        reference.step()
    assert ours == theirs


def _torch_rates(make, epochs: int) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    scheduler = make(opt)
    rates = []
    for _ in range(epochs):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return rates


def test_cosine_equals_torch_cosine_annealing_with_and_without_restarts() -> None:
    """ELR's CIFAR-10 plan (CosineAnnealingWarmRestarts, T_0 10) and SOP's (CosineAnnealingLR
    over the run), after a warm-up of 2 constant epochs."""
    restarts = StageSchedule(lr_schedule="cosine", cosine_period=4, min_lr=0.1)
    ours = [lr for lr, _ in _lrs(restarts, 2, 12, 12)]
    theirs = _torch_rates(
        lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 4, eta_min=0.1), 10
    )
    assert ours[:2] == [1.0, 1.0]
    assert ours[2:] == pytest.approx(theirs, abs=1e-12)
    whole = StageSchedule(lr_schedule="cosine", min_lr=0.01)
    ours = [lr for lr, _ in _lrs(whole, 0, 8, 8)]
    theirs = _torch_rates(
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 8, eta_min=0.01), 8
    )
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_a_methods_lr_factor_scales_every_epochs_rate() -> None:
    """CORES²'s lr / (1 + β_t) on top of a milestone: each epoch's rate is the schedule's times
    the factor of that epoch."""
    schedule = StageSchedule(milestones=(3,), lr_gamma=0.1)
    factors = [1.0, 1.0, 0.5, 0.25, 0.25, 0.5, 0.5]
    lrs = [lr for lr, _ in _lrs(schedule, 0, 6, 6, factor=lambda e: factors[e])]
    assert lrs == pytest.approx([1.0, 1.0, 0.5, 0.025, 0.025, 0.05], abs=1e-12)


def test_warmup_milestones_then_the_stage_starts_at_lr() -> None:
    """Dual-T: ÷10 after 2 warm-up epochs, back to lr when the corrected stage starts, then its
    own milestones."""
    schedule = StageSchedule(warmup_milestones=(2,), milestones=(1,), lr_gamma=0.1)
    lrs = [round(lr, 12) for lr, _ in _lrs(schedule, 4, 8, 8)]
    assert lrs == [1.0, 1.0, 0.1, 0.1, 1.0, 0.1, 0.1, 0.1]


def test_linear_decay_and_beta1_as_coteaching() -> None:
    """lr constant until ``decay_start`` epochs into the stage, then ``lr (end - e) / (end -
    start)``; Adam's β1 ``decay_beta1`` from the same epoch (Co-teaching's main.py)."""
    schedule = StageSchedule(lr_schedule="linear", decay_start=3, decay_beta1=0.1)
    seen = _lrs(schedule, 0, 7, 7, adam=True)
    assert [round(lr, 12) for lr, _ in seen] == [1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25]
    assert [b for _, b in seen] == [0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1]


def test_bad_schedule_options() -> None:
    with pytest.raises(ValueError, match="lr_schedule"):
        StageSchedule(lr_schedule="exponential")
    with pytest.raises(ValueError, match="cosine_period"):
        StageSchedule(lr_schedule="cosine", cosine_period=0)
    with pytest.raises(ValueError, match="min_lr"):
        StageSchedule(min_lr=-1.0)
    with pytest.raises(ValueError, match="decay_beta1"):
        StageSchedule(decay_beta1=1.5)
    with pytest.raises(ValueError, match="revision_epochs"):
        StageSchedule(revision_epochs=-1)
    with pytest.raises(ValueError, match="revision_model"):
        StageSchedule(revision_model="first")


class StageProbe(Callback):
    """Per epoch: the stage, ΔT and the first network weight at the epoch's start, and the
    noisy-validation accuracy at its end."""

    def __init__(self) -> None:
        self.epochs: list[dict] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == 0:
            stage = "warmup" if pl_module.in_warmup else "main"
            stage = "revision" if pl_module.in_revision else stage
            self.epochs.append(
                {
                    "stage": stage,
                    "delta": getattr(pl_module, "delta", torch.zeros(1)).detach().clone(),
                    "weight": next(pl_module.net.parameters()).detach().clone(),
                    "optimizers": [type(o).__name__ for o in trainer.optimizers],
                }
            )


def _trainer(tmp_path, epochs: int, probe: Callback) -> Trainer:
    return Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[probe],
    )


def test_trevision_three_stages(tmp_path) -> None:
    """Warm-up 2, reweighting 3 with T̂ fixed (ΔT untouched), revision 2 from the best
    reweighting epoch with the revision's Adam moving network and ΔT."""
    probe = StageProbe()
    model = TRevision(
        network={"backbone": "mlp"},
        num_classes=10,
        input_shape=SHAPE,
        transition="estimate",
        schedule=StageSchedule(
            warmup_epochs=2,
            main_epochs=3,
            revision_epochs=2,
            warmup_model="best",
            main_stage_init="restart",
        ),
        optim=OptimizerOptions(revision_lr=1e-2),
    )
    data = DigitsDataModule(noise_rate=0.2, batch_size=64)
    assert model.schedule.total_epochs == 7  # the trainer's max_epochs is the caller's
    results = fit_and_test(model, data, _trainer(tmp_path, model.schedule.total_epochs, probe))
    stages = [e["stage"] for e in probe.epochs]
    assert stages == ["warmup"] * 2 + ["main"] * 3 + ["revision"] * 2
    assert all(not e["delta"].any() for e in probe.epochs[:6])  # ΔT learned in revision only
    assert probe.epochs[6]["delta"].abs().sum() > 0  # after the first revision epoch
    assert probe.epochs[0]["optimizers"] == ["SGD", "Adam"]  # network's SGD, revision's Adam
    assert results["last_epoch"] == 6 and results["test_acc_last"] is not None


def test_revision_starts_from_the_best_epoch_of_the_stage(tmp_path) -> None:
    """The model the revision starts from is the one of the main stage's best validation epoch,
    not the last one (PTD: warm-up 1, reweighting 3, revision 1)."""

    class Recorder(StageProbe):
        def __init__(self) -> None:
            super().__init__()
            self.scores: list[tuple[float, torch.Tensor]] = []

        def on_validation_end(self, trainer, pl_module) -> None:
            if not trainer.sanity_checking and not pl_module.in_warmup:
                state = next(pl_module.net.parameters()).detach().clone()
                self.scores.append((float(trainer.callback_metrics["val/acc"]), state))

    probe = Recorder()
    model = PTD(
        network={"backbone": "mlp"},
        num_classes=10,
        input_shape=SHAPE,
        schedule={"warmup_epochs": 1, "revision_epochs": 1},
        optim={"lr": 0.05},
    )
    data = DigitsDataModule(noise_rate=0.2, batch_size=64)
    fit_and_test(model, data, _trainer(tmp_path, 5, probe))
    main_scores = probe.scores[:3]
    best = max(range(3), key=lambda k: (main_scores[k][0], -k))
    start = probe.epochs[4]
    assert start["stage"] == "revision"
    assert torch.equal(start["weight"], main_scores[best][1])


def test_tail_test_records_every_network(tmp_path, run_cli) -> None:
    """``--tail_test_epochs 2``: results.json holds both networks' clean test accuracy of the
    last two epochs and their mean; the last epoch's network 0 equals ``test_acc_last``. The
    selected checkpoint is the first epoch's (the lowest logged ``epoch``), whose state,
    restored by the test, knows no tail yet."""
    run_cli(
        "fit",
        "--config",
        str(CONFIGS / "data" / "digits.yaml"),
        "--config",
        str(CONFIGS / "method" / "coteaching.yaml"),
        "--trainer.max_epochs",
        "3",
        "--tail_test_epochs",
        "2",
        *("--checkpoint.monitor", "epoch", "--checkpoint.mode", "min"),
    )
    results = read_results(tmp_path)
    assert results["best_epoch"] == 0
    tail = results["test_acc_tail"]
    assert tail["epochs"] == [1, 2] and all(len(acc) == 2 for acc in tail["acc"])
    assert results["test_acc_tail_mean"] == pytest.approx(sum(map(sum, tail["acc"])) / 4)
    assert tail["acc"][-1][0] == pytest.approx(results["test_acc_last"])


def test_coteaching_preset_optimizer(tmp_path) -> None:
    """The Co-teaching reference's optimization reaches the optimizers: Adam at 1e-3 without
    weight decay for both networks."""
    model = CoTeaching(
        network={"backbone": "mlp"},
        num_classes=10,
        input_shape=SHAPE,
        optim={"optimizer": "adam", "lr": 1e-3, "weight_decay": 0.0},
        schedule={"lr_schedule": "linear", "decay_start": 1, "decay_beta1": 0.1},
        forget_rate=0.2,
    )
    optimizers, schedulers = model.configure_optimizers()
    assert [type(o).__name__ for o in optimizers] == ["Adam", "Adam"]
    assert all(o.param_groups[0]["weight_decay"] == 0.0 for o in optimizers)
    assert all(isinstance(s, StagedLR) for s in schedulers)


def test_unnormalised_input() -> None:
    """``normalize: false`` feeds pixels in [0, 1]."""
    data = DigitsDataModule(normalize=False)
    images = torch.tensor([[[[0, 255]]]], dtype=torch.uint8)
    assert data.transform(images).tolist() == [[[[0.0, 1.0]]]]
    normalized = DigitsDataModule().transform(images)
    assert normalized.min() < 0
