"""Transition-matrix methods: estimated T for Forward, Reweight, VolMinNet, biased T, and the
warm-up stage (estimation, model selection, checkpoints), through the real CLI where users reach
them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from lightning import Trainer
from torch import nn

from noisylabels.methods import CE, Forward, Reweight, VolMinNet
from noisylabels.methods import transition as transition_module
from noisylabels.noise import bias_transition, estimation_error, load_transition
from noisylabels.run import WarmupAwareCheckpoint

from conftest import CONFIGS, config_args, read_results

TINY = ["--trainer.accelerator", "cpu", "--data.batch_size", "16"]
GIVEN_T = {"transition": True, "schedule": {"warmup_epochs": 0}}  # nothing to estimate
ESTIMATED_T = {"transition": "estimate", "schedule": {"warmup_epochs": 20}}


def run_dir_of(root: Path) -> Path:
    return next(root.rglob("results.json")).parent


def tensorboard_tags(folder: Path) -> tuple[set[str], set[str], dict[str, int]]:
    """(image tags, scalar tags, number of values per scalar) of all event files in ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    images: set[str] = set()
    scalars: set[str] = set()
    counts: dict[str, int] = {}
    for path in folder.glob("events.out.tfevents.*"):
        acc = EventAccumulator(str(path), size_guidance={"images": 0, "scalars": 0})
        acc.Reload()
        tags = acc.Tags()
        images |= set(tags["images"])
        scalars |= set(tags["scalars"])
        for tag in tags["scalars"]:
            counts[tag] = counts.get(tag, 0) + len(acc.Scalars(tag))
    return images, scalars, counts


# ------------------------------------------------------------------------------- VolMinNet
def volmin(c: int = 4, **kwargs) -> VolMinNet:
    return VolMinNet(network={"backbone": "mlp"}, num_classes=c, input_shape=(1, 1, 2), **kwargs)


def assert_diagonal_dominant_stochastic(T: torch.Tensor) -> None:
    assert torch.allclose(T.sum(1), torch.ones(T.shape[0]), atol=1e-6)
    assert (T >= 0).all()
    off = T.masked_fill(torch.eye(T.shape[0], dtype=torch.bool), -1.0)
    assert (T.diagonal() > off.max(1).values).all()


def test_volmin_transition_at_init_and_after_steps() -> None:
    model = volmin(c=5, kappa=2.0)
    T = model.transition().detach()
    off = torch.sigmoid(torch.tensor(-2.0))
    assert torch.allclose(T.diagonal(), torch.full((5,), 1 / (1 + 4 * off)))
    assert_diagonal_dominant_stochastic(T)
    # push every off-diagonal entry up hard: the diagonal must stay the row maximum
    opt = torch.optim.Adam([model.W], lr=0.5)
    for _ in range(50):
        opt.zero_grad()
        (-(model.transition() * model.off_diagonal).sum()).backward()
        opt.step()
    T = model.transition().detach()
    assert T.diagonal().max() < 0.3  # the steps did move T far from its start
    assert_diagonal_dominant_stochastic(T)


def test_volmin_logdet_term_sign_and_value() -> None:
    model = volmin(c=4, lam=1e-4)
    with torch.no_grad():
        model.W.normal_(0, 1)
    T = model.transition()
    assert torch.allclose(model.volume_term(), 1e-4 * torch.log(torch.det(T).abs()))
    det_before = torch.det(T).abs().item()
    opt = torch.optim.SGD([model.W], lr=100.0)
    for _ in range(5):
        opt.zero_grad()
        model.volume_term().backward()
        opt.step()
    assert torch.det(model.transition()).abs().item() < det_before  # minimizing shrinks volume


@pytest.mark.parametrize("t_optimizer", ["adam", "sgd"])
def test_volmin_has_its_own_optimizer_for_T(t_optimizer: str) -> None:
    model = volmin(t_optimizer=t_optimizer, schedule={"milestones": (3, 7)})
    (opt_net, opt_t), (sch_net, sch_t) = model.configure_optimizers()
    assert isinstance(opt_net, torch.optim.SGD)
    assert isinstance(opt_t, torch.optim.Adam if t_optimizer == "adam" else torch.optim.SGD)
    group = opt_t.param_groups[0]
    assert group["params"] == [model.W] and group["lr"] == 0.01 and group["weight_decay"] == 0
    if t_optimizer == "sgd":
        assert group["momentum"] == 0.9
    assert all(p is not model.W for g in opt_net.param_groups for p in g["params"])
    assert sch_net._milestones() == sch_t._milestones() == {3: 1, 7: 1}


class FixedLogits(nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits


def test_volmin_validation_uses_pT_and_test_uses_clean_p() -> None:
    model = volmin(c=3)
    logit = torch.special.logit
    with torch.no_grad():  # row 0 of T ≈ [0.5, 0.01, 0.49], row 2 ≈ [0, 0, 1]
        model.W.copy_(torch.full((3, 3), -30.0))
        model.W[0, 1], model.W[0, 2] = logit(torch.tensor(0.02)), logit(torch.tensor(0.98))
    p = torch.tensor([[0.55, 0.0, 0.45]])
    model.net = FixedLogits(torch.log(p + 1e-9))
    q = p @ model.transition().detach()
    assert q.argmax(1).item() == 2 and p.argmax(1).item() == 0  # the example separates them
    batch = {"image": torch.zeros(1, 1, 1, 2), "label": torch.tensor([2])}
    model.trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    model.validation_step(batch, 0)
    model.test_step(batch, 0)
    assert model.val_acc.compute().item() == 1.0  # p @ T predicts the noisy label 2
    assert model.test_acc.compute().item() == 0.0  # the clean p predicts class 0


# ------------------------------------------------------------------------------- Reweight
def test_reweight_beta_hand_example_and_identity() -> None:
    model = Reweight(network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 1, 2), **GIVEN_T)
    T = torch.tensor([[0.8, 0.2, 0.0], [0.1, 0.7, 0.2], [0.0, 0.3, 0.7]])
    model.store_transition(T)
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]])
    labels = torch.tensor([1, 2])
    p = torch.softmax(logits, 1)
    # β_i = p_y / Σ_k p_k T[k, y]
    beta0 = p[0, 1] / (p[0, 0] * 0.2 + p[0, 1] * 0.7 + p[0, 2] * 0.3)
    beta1 = p[1, 2] / (p[1, 0] * 0.0 + p[1, 1] * 0.2 + p[1, 2] * 0.7)
    beta = model.importance_weights(p, labels)
    assert torch.allclose(beta, torch.stack([beta0, beta1]), atol=1e-6)
    ce = F.cross_entropy(logits, labels, reduction="none")
    assert torch.allclose(model.per_sample_loss(logits, {"label": labels}), beta * ce, atol=1e-6)

    model.store_transition(torch.eye(3))
    torch.manual_seed(0)
    logits = torch.randn(32, 3)
    labels = torch.randint(0, 3, (32,))
    assert torch.equal(model.importance_weights(torch.softmax(logits, 1), labels), torch.ones(32))
    plain = CE(network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 1, 2))
    batch = {"label": labels}
    assert torch.allclose(
        model.per_sample_loss(logits, batch), plain.per_sample_loss(logits, batch)
    )


def test_reweight_detach_beta_switch() -> None:
    kwargs = dict(network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 1, 2), **GIVEN_T)
    T = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.6, 0.2], [0.1, 0.2, 0.7]])
    grads = {}
    for detach in (True, False):
        model = Reweight(detach_beta=detach, **kwargs)
        model.store_transition(T)
        logits = torch.tensor([[1.0, 0.2, -0.5]], requires_grad=True)
        loss = model.per_sample_loss(logits, {"label": torch.tensor([1])}).sum()
        (grads[detach],) = torch.autograd.grad(loss, logits)
        beta = model.importance_weights(torch.softmax(logits, 1), torch.tensor([1]))
        assert beta.requires_grad is (not detach)
    assert not torch.allclose(grads[True], grads[False])


# ------------------------------------------------------------------------------- estimated T
def test_estimate_mode_warmup_state_and_checkpoint_round_trip() -> None:
    kwargs = dict(network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 1, 2), **ESTIMATED_T)
    model = Forward(**kwargs)
    assert model.in_warmup and model.transition() is None
    logits, labels = torch.randn(8, 3), torch.randint(0, 3, (8,))
    ce = F.cross_entropy(logits, labels, reduction="none")
    assert torch.allclose(model.stage_loss(logits, {"label": labels}), ce)
    T_hat = torch.tensor([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.0, 0.3, 0.7]])
    model.estimate_transition = lambda: T_hat  # the estimation point without a trainer
    model.start_main_stage()
    assert not model.in_warmup and torch.equal(model.transition(), T_hat)
    corrected = model.stage_loss(logits, {"label": labels})
    assert torch.allclose(corrected, model.per_sample_loss(logits, {"label": labels}))
    restored = Forward(**kwargs)
    restored.load_state_dict(model.state_dict())
    assert not restored.in_warmup and torch.equal(restored.T, T_hat)


def test_bad_transition_arguments() -> None:
    with pytest.raises(ValueError, match="estimator"):
        Forward(estimator="median", **ESTIMATED_T)
    with pytest.raises(ValueError, match="--model.schedule.warmup_epochs must be >= 0"):
        Forward(transition="estimate", schedule={"warmup_epochs": -1})
    with pytest.raises(ValueError, match="0.97, not 97"):
        Forward(outlier_quantile=97, **ESTIMATED_T)
    with pytest.raises(ValueError, match="transition_bias"):
        Forward(transition_bias=-0.1)
    with pytest.raises(FileNotFoundError, match="true, estimate"):
        Forward(transition="estmate")
    with pytest.raises(ValueError, match="t_optimizer"):
        VolMinNet(t_optimizer="rmsprop")


def test_warmup_longer_than_run_is_refused(run_cli, mnist_dir) -> None:
    with pytest.raises(ValueError, match="warmup_epochs=20 leaves no epoch"):
        run_cli(
            "fit", *config_args("mnist_reweight"),
            "--data.data_dir", str(mnist_dir), "--trainer.max_epochs", "2", *TINY,
        )  # fmt: skip


def test_estimated_T_real_tiny_run_then_resume(run_cli, tmp_path, mnist_dir, monkeypatch) -> None:
    """Warm-up 1 epoch, estimate T̂ from the training split, train 1 corrected epoch; the best
    checkpoint is not the warm-up epoch; T̂ lands in the run dir, results.json, TensorBoard and
    the checkpoint, and a resumed run keeps it without estimating again."""
    calls = []
    real_anchor = transition_module.anchor_transition

    def spy(probs, filter_outliers, quantile):
        calls.append((tuple(probs.shape), filter_outliers, quantile))
        return real_anchor(probs, filter_outliers, quantile)

    monkeypatch.setattr(transition_module, "anchor_transition", spy)
    first = tmp_path / "first"
    run_cli(
        "fit", *config_args("mnist_forward_vrnl"),
        "--model.transition", "estimate", "--model.schedule.warmup_epochs", "1",
        "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3",
        "--checkpoint.save_top_k", "-1", "--checkpoint.save_last", "true",
        "--data.data_dir", str(mnist_dir), *TINY, root=first,
    )  # fmt: skip
    # estimated once, with the filter on, from the training split's first 3 batches of 16
    # (limit_train_batches applies to the estimation pass too)
    assert calls == [((3 * 16, 10), True, 0.97)]
    results = read_results(first)
    folder = run_dir_of(first)
    T_hat = load_transition(folder / "transition_estimate.csv", 10)
    true_t = load_transition(folder / "transition.csv", 10)
    assert not torch.allclose(T_hat, torch.eye(10)) and not torch.allclose(T_hat, true_t)
    error = estimation_error(true_t, T_hat)
    assert results["t_estimation_error"] == pytest.approx(error, abs=1e-6)
    assert json.loads((folder / "transition_estimate.json").read_text())[
        "t_estimation_error"
    ] == pytest.approx(error, abs=1e-6)
    # every top-k candidate is kept (save_top_k -1), yet no warm-up epoch was a candidate
    names = sorted(p.name for p in (folder / "checkpoints").glob("best-*.ckpt"))
    assert names == ["best-epoch001.ckpt"] and results["best_epoch"] == 1
    best = torch.load(folder / "checkpoints" / names[0], weights_only=False)["state_dict"]
    assert bool(best["main_started"]) and torch.allclose(best["T"], T_hat, atol=1e-6)
    images, scalars, counts = tensorboard_tags(folder)
    assert "transition/T_hat" in images
    assert counts["transition/t_estimation_error"] == 1  # logged once for an estimated T

    def no_estimate(*args, **kwargs):
        raise AssertionError("a resumed run must not estimate T again")

    monkeypatch.setattr(transition_module, "anchor_transition", no_estimate)
    run_cli(
        "fit", *config_args("mnist_forward_vrnl"),
        "--model.transition", "estimate", "--model.schedule.warmup_epochs", "1",
        "--trainer.max_epochs", "3", "--trainer.limit_train_batches", "3",
        "--ckpt_path", str(folder / "checkpoints" / "last.ckpt"),
        "--data.data_dir", str(mnist_dir), *TINY, root=first,
    )  # fmt: skip
    # a finished run is never rewritten: it continues in a new run folder, with the same T̂,
    # one more epoch
    continued = folder.parent / "version_1"
    assert torch.allclose(load_transition(continued / "transition_estimate.csv", 10), T_hat)
    resumed = json.loads((continued / "results.json").read_text())
    assert resumed["epochs"] == 3
    [entry] = resumed["resumed"]
    part = entry.pop("part")  # the first part's time and execution (tests/run/test_provenance)
    assert part["seconds"] > 0 and part["execution"]["device"] == "cpu"
    assert entry == {  # the larger --trainer.max_epochs is recorded
        "from": str(folder / "checkpoints" / "last.ckpt"),
        "epochs_done": 2,
        "changed": {"trainer.max_epochs": [2, 3]},
    }


def test_warmup_checkpoint_is_never_best() -> None:
    class Stub:
        in_warmup = True

    class StubTrainer:
        lightning_module = Stub()

    ckpt = WarmupAwareCheckpoint(monitor="val/acc", mode="max", save_top_k=-1)
    assert ckpt.check_monitor_top_k(StubTrainer(), torch.tensor(0.9)) is False
    Stub.in_warmup = False
    assert ckpt.check_monitor_top_k(StubTrainer(), torch.tensor(0.9)) is True


@pytest.mark.parametrize("filter_outliers", ["true", "false"])
def test_dual_t_under_fast_dev_run(run_cli, tmp_path, mnist_dir, monkeypatch, filter_outliers):
    """``--model.estimator dual_t`` reaches Dual-T with the filter setting; under fast_dev_run
    the warm-up is skipped so estimation and the corrected stage still run."""
    calls = []
    real = transition_module.dual_t_parts

    def spy(probs, labels, filter_outliers, quantile):
        calls.append((tuple(labels.shape), filter_outliers))
        return real(probs, labels, filter_outliers, quantile)

    monkeypatch.setattr(transition_module, "dual_t_parts", spy)
    cli = run_cli(
        "fit", *config_args("mnist_forward"),
        "--model.transition", "estimate", "--model.estimator", "dual_t",
        "--model.filter_outliers", filter_outliers, "--trainer.fast_dev_run", "2",
        "--data.data_dir", str(mnist_dir), *TINY,
    )  # fmt: skip
    assert calls == [((32,), filter_outliers == "true")]
    assert cli.results["t_estimation_error"] is not None
    details = cli.results["t_estimate"]  # the diagonals of T̂ and of the anchor estimate T♣
    assert details["estimator"] == "dual_t"
    assert len(details["diag"]) == len(details["anchor_diag"]) == 10


def test_estimation_uses_outputs_without_augmentation(cifar10_dir) -> None:
    from noisylabels.data import CIFAR10DataModule

    dm = CIFAR10DataModule(data_dir=str(cifar10_dir), batch_size=16, augment=True)
    model = Forward(
        network={"backbone": "mlp"}, num_classes=10, input_shape=(3, 32, 32), **ESTIMATED_T
    )
    trainer = Trainer(accelerator="cpu", logger=False, limit_train_batches=2, max_epochs=1)
    dm.trainer = trainer
    model.trainer = trainer
    trainer._data_connector.attach_datamodule(model, dm)
    dm.setup("fit")
    model.train()
    probs_a, labels = model.train_outputs()
    probs_b, _ = model.train_outputs()
    assert model.training  # train mode restored
    assert torch.equal(probs_a, probs_b)  # no random crop or flip
    images = dm.data.train_images[dm.train_indices[:32]]
    model.eval()
    with torch.no_grad():
        expected = torch.softmax(model(dm.transform(images, train=False)), 1)
    assert torch.allclose(probs_a, expected, atol=1e-6)
    assert torch.equal(labels, dm.noisy_labels[dm.train_indices[:32]])


# ------------------------------------------------------------------------------- biased T
def test_biased_true_T_reports_its_error(run_cli, tmp_path, mnist_dir) -> None:
    run_cli(
        "fit", *config_args("mnist_forward_vrnl"),
        "--config", str(CONFIGS / "protocol" / "true_t.yaml"), "--model.transition_bias", "0.1",
        "--model.bias_seed", "3", "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "2", "--data.data_dir", str(mnist_dir), *TINY,
    )  # fmt: skip
    results = read_results(tmp_path)
    folder = run_dir_of(tmp_path)
    true_t = load_transition(folder / "transition.csv", 10)
    expected = bias_transition(true_t, 0.1, torch.Generator().manual_seed(3))
    used = load_transition(folder / "transition_estimate.csv", 10)
    assert torch.allclose(used, expected, atol=1e-6)
    assert results["t_estimation_error"] == pytest.approx(estimation_error(true_t, expected))
    assert results["t_estimation_error"] > 0.05


# ------------------------------------------------------------------------------- VolMinNet run
def test_volmin_real_tiny_run_logs_error_every_epoch(run_cli, tmp_path, mnist_dir) -> None:
    cli = run_cli(
        "fit", "--config", str(CONFIGS / "mnist_volmin_vrnl.yaml"),
        "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3",
        "--model.schedule.milestones", "[1]", "--data.data_dir", str(mnist_dir), *TINY,
    )  # fmt: skip
    trainer = cli.trainer
    assert trainer.global_step == 6  # one step per batch although two optimizers step
    assert [s.get_last_lr()[0] for s in cli.model.lr_schedulers()] == [0.001, 0.001]
    folder = run_dir_of(tmp_path)
    images, _, counts = tensorboard_tags(folder)
    assert counts["transition/t_estimation_error"] == 2 and "transition/T_hat" in images
    T_hat = load_transition(folder / "transition_estimate.csv", 10)
    assert_diagonal_dominant_stochastic(T_hat)
    assert read_results(tmp_path)["t_estimation_error"] == pytest.approx(
        estimation_error(load_transition(folder / "transition.csv", 10), T_hat), abs=1e-6
    )


def test_volmin_variance_term_reaches_the_classifier_not_T() -> None:
    """VRNL changes the classifier's gradient; T's gradient is that of VolMinNet alone."""
    torch.manual_seed(0)
    grads = {}
    for alpha in (0.0, 0.5):
        model = VolMinNet(
            network={"backbone": "mlp"}, num_classes=4, input_shape=(1, 2, 2), alpha=alpha
        )
        torch.manual_seed(1)
        for p in model.parameters():
            p.data.normal_(0, 0.5)
        batch = {
            "image": torch.randn(12, 1, 2, 2),
            "label": torch.randint(0, 4, (12,)),
            "index": torch.arange(12),
        }
        model.training_objective(batch).backward()
        grads[alpha] = (model.W.grad.clone(), next(model.net.parameters()).grad.clone())
    assert torch.allclose(grads[0.0][0], grads[0.5][0], atol=1e-7)  # T: unchanged by VRNL
    assert not torch.allclose(grads[0.0][1], grads[0.5][1])  # classifier: reweighted


DIGITS_REWEIGHT = [
    "--config", str(CONFIGS / "quickstart.yaml"),
    "--model.class_path", "noisylabels.methods.Reweight", "--model.transition", "estimate",
    "--model.schedule.warmup_epochs", "1", "--data.batch_size", "64",
]  # fmt: skip


def test_fast_dev_run_trains_the_warmup_then_estimates_then_corrects(run_cli, monkeypatch) -> None:
    """A smoke test runs both stages in its one epoch: the first half of its batches are the
    plain-CE warm-up, T̂ is estimated from that model, the rest are the corrected stage."""
    from noisylabels.methods.core.base import NoisyLabelMethod

    stages, estimated_after = [], []
    real_step, real_start = NoisyLabelMethod.training_step, NoisyLabelMethod.start_main_stage

    def step(self, batch, batch_idx):
        stages.append((batch_idx, self.in_warmup))
        return real_step(self, batch, batch_idx)

    def start(self):
        estimated_after.append(self.trainer.global_step)
        return real_start(self)

    monkeypatch.setattr(NoisyLabelMethod, "training_step", step)
    monkeypatch.setattr(NoisyLabelMethod, "start_main_stage", start)
    cli = run_cli("fit", *DIGITS_REWEIGHT, "--trainer.fast_dev_run", "4")
    assert stages == [(0, True), (1, True), (2, False), (3, False)]
    assert estimated_after == [2]  # T̂ from the model of 2 warm-up steps
    assert cli.results["t_estimation_error"] is not None


def _degenerate_anchors(probs, filter_outliers, quantile):
    """T̂ of anchors that are all the same sample: every row e_0 (rank 1, 9 zero columns)."""
    T = torch.zeros(probs.shape[1], probs.shape[1])
    T[:, 0] = 1.0
    return T


def test_fast_dev_run_replaces_a_degenerate_estimate_and_says_so(run_cli, monkeypatch) -> None:
    monkeypatch.setattr(transition_module, "anchor_transition", _degenerate_anchors)
    with pytest.warns(UserWarning, match=r"fast_dev_run: Reweight's T̂.*degenerate .*T̂ = I"):
        cli = run_cli("fit", *DIGITS_REWEIGHT, "--trainer.fast_dev_run", "2")
    assert torch.equal(cli.model.T, torch.eye(10))
    assert cli.results["test_acc"] is not None


def test_a_real_run_with_a_degenerate_estimate_warns_and_its_divergence_names_it(
    run_cli, monkeypatch, tmp_path
) -> None:
    """Outside a smoke test a degenerate T̂ is kept (warned about once, at the estimate); when
    the corrected stage then diverges, the message names T̂'s condition before α and lr."""
    from noisylabels.errors import DivergenceError

    monkeypatch.setattr(transition_module, "anchor_transition", _degenerate_anchors)
    with pytest.warns(UserWarning, match=r"Reweight: the T̂ estimated at epoch 1 is degenerate"):
        with pytest.raises(DivergenceError) as err:
            run_cli("fit", *DIGITS_REWEIGHT, "--trainer.max_epochs", "3")
    message = str(err.value)
    assert "epoch 1" in message
    assert "9 all-zero columns (1, 2, 3, 4, 5, 6, 7, 8, 9), rank 1 of 10" in message
    assert message.index("it is degenerate") < message.index("alpha=0.1")
    assert not list(tmp_path.rglob("results.json"))


def test_transition_estimate_needs_warmup_epochs_and_a_given_T_none(run_cli) -> None:
    """T̂ from an untrained network is refused, also in a smoke test (whose warm-up is the
    first half of its batches, so that T̂ is estimated where a real run estimates it); a given
    T has nothing to estimate, and a warm-up with it is refused."""
    from noisylabels.errors import InputError

    no_warmup = [*DIGITS_REWEIGHT, "--model.schedule.warmup_epochs", "0"]
    untrained = r"--model.schedule.warmup_epochs is 0.*untrained network"
    with pytest.raises(InputError, match=untrained):
        run_cli("fit", *no_warmup, "--trainer.max_epochs", "2")
    with pytest.raises(InputError, match=untrained):
        run_cli("fit", *no_warmup, "--trainer.fast_dev_run", "2")
    given = [*DIGITS_REWEIGHT, "--model.transition", "true"]
    with pytest.raises(InputError, match="set --model.schedule.warmup_epochs 0"):
        run_cli("fit", *given, "--trainer.fast_dev_run", "2")
    assert run_cli(
        "fit", *given, "--model.schedule.warmup_epochs", "0", "--trainer.fast_dev_run", "2"
    )
