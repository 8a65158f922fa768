"""SCE and APL: each loss against a hand computation on tiny logits (value and gradient, written
out from ``p = exp(z) / Σ exp(z)``), the bounds the docs state (RCE within ``-A (1 - p_y)`` and
``-A (1 - p_y + (K - 1) 1e-7)``, NCE and NFL in [0, 1], APL's VRNL objective above ``-α M² / 4``,
SCE's unbounded below), the training step's VRNL objective, option validation, the shipped
configs, and one short VRNL run of each through the command line on the digits."""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from noisylabels.errors import InputError
from noisylabels.methods import APL, SCE
from noisylabels.methods.apl import (
    LOSSES,
    mean_absolute_error,
    normalized_cross_entropy,
    normalized_focal_loss,
)
from noisylabels.methods.core.losses import RCE_LOG_ZERO, reverse_cross_entropy
from noisylabels.methods.sce import sce_loss

from conftest import CONFIGS, read_results

A = math.log(1e-4)  # the reference's log 0
ALPHA = 0.1
LOGITS = [[2.0, 0.5, -1.0], [0.1, 0.2, 0.3], [-3.0, 4.0, 0.0]]
LABELS = [0, 2, 0]


def softmax(z: list[float]) -> list[float]:
    e = [math.exp(v) for v in z]
    return [v / sum(e) for v in e]


def vrnl_by_hand(losses: list[float], alpha: float = ALPHA) -> float:
    mean = sum(losses) / len(losses)
    return mean - alpha * sum((v - mean) ** 2 for v in losses) / len(losses)


def value_and_grad(fn, logits: list[list[float]] = LOGITS, labels: list[int] = LABELS):
    """Per-sample values and ``∂l_i / ∂z_i`` of ``fn(logits, labels)``."""
    z = torch.tensor(logits, requires_grad=True)
    out = fn(z, torch.tensor(labels))
    out.sum().backward()
    return out.tolist(), z.grad.tolist()


def d_log_p(p: list[float], k: int, j: int) -> float:
    """``∂ log p_k / ∂z_j``."""
    return (1.0 if k == j else 0.0) - p[j]


# --------------------------------------------------------------------------- the losses
def test_rce_is_minus_a_times_the_mass_off_the_label_with_its_gradient() -> None:
    values, grads = value_and_grad(reverse_cross_entropy)
    assert RCE_LOG_ZERO == pytest.approx(A)
    for z, y, v, g in zip(LOGITS, LABELS, values, grads, strict=True):
        p = softmax(z)
        assert v == pytest.approx(-A * sum(max(pk, 1e-7) for k, pk in enumerate(p) if k != y))
        # RCE = -A (1 - p_y) where no p_k is floored: ∂/∂z_j = A p_y (δ_jy - p_j)
        expected = [A * p[y] * d_log_p(p, y, j) for j in range(3)]
        assert g == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_rce_floors_p_at_1e_7_as_the_reference() -> None:
    """A probability below 1e-7 counts as 1e-7 and gets no gradient."""
    logits, labels = [[30.0, 0.0, 0.0]], [1]  # p_2, p_3 ~ 1e-13 < 1e-7; p_1 ~ 1
    values, grads = value_and_grad(reverse_cross_entropy, logits, labels)
    p = softmax(logits[0])
    assert values[0] == pytest.approx(-A * (p[0] + 1e-7), rel=1e-6)
    # only p_1 (off the label, not floored) carries a gradient: -A ∂p_1/∂z_j
    assert grads[0] == pytest.approx([-A * p[0] * d_log_p(p, 0, j) for j in range(3)], abs=1e-9)


@pytest.mark.parametrize(("a", "b"), [(0.1, 1.0), (6.0, 1.0), (1.0, 0.0), (0.0, 1.0)])
def test_sce_is_a_ce_plus_b_rce_with_its_gradient(a: float, b: float) -> None:
    values, grads = value_and_grad(lambda z, y: sce_loss(z, y, a, b))
    for z, y, v, g in zip(LOGITS, LABELS, values, grads, strict=True):
        p = softmax(z)
        rce = -A * (1 - p[y])
        assert v == pytest.approx(a * -math.log(p[y]) + b * rce, rel=1e-5)
        # ∂CE/∂z_j = p_j - δ_jy; ∂RCE/∂z_j = A p_y (δ_jy - p_j)
        expected = [-(a + b * -A * p[y]) * d_log_p(p, y, j) for j in range(3)]
        assert g == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_nce_is_log_p_y_over_the_sum_of_log_p_with_its_gradient() -> None:
    values, grads = value_and_grad(normalized_cross_entropy)
    for z, y, v, g in zip(LOGITS, LABELS, values, grads, strict=True):
        p = softmax(z)
        u, w = math.log(p[y]), sum(math.log(pk) for pk in p)
        assert v == pytest.approx(u / w, rel=1e-6)
        du = [d_log_p(p, y, j) for j in range(3)]
        dw = [sum(d_log_p(p, k, j) for k in range(3)) for j in range(3)]
        expected = [(du[j] * w - u * dw[j]) / w**2 for j in range(3)]
        assert g == pytest.approx(expected, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("gamma", [0.5, 2.0])
def test_nfl_normalizes_the_focal_loss_with_its_factors_detached(gamma: float) -> None:
    """The value ``(1 - p_y)^γ log p_y / Σ_k (1 - p_k)^γ log p_k``; the gradient with the
    factors ``f_k = (1 - p_k)^γ`` held constant, as the reference's ``.data`` holds them."""
    values, grads = value_and_grad(lambda z, y: normalized_focal_loss(z, y, gamma))
    for z, y, v, g in zip(LOGITS, LABELS, values, grads, strict=True):
        p = softmax(z)
        f = [(1 - pk) ** gamma for pk in p]
        num, den = (
            f[y] * math.log(p[y]),
            sum(fk * math.log(pk) for fk, pk in zip(f, p, strict=True)),
        )
        assert v == pytest.approx(num / den, rel=1e-5)
        dnum = [f[y] * d_log_p(p, y, j) for j in range(3)]
        dden = [sum(f[k] * d_log_p(p, k, j) for k in range(3)) for j in range(3)]
        expected = [(dnum[j] * den - num * dden[j]) / den**2 for j in range(3)]
        assert g == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_nfl_with_gamma_0_is_nce_and_mae_is_one_minus_p_y() -> None:
    z, y = torch.tensor(LOGITS), torch.tensor(LABELS)
    torch.testing.assert_close(normalized_focal_loss(z, y, 0.0), normalized_cross_entropy(z, y))
    values, grads = value_and_grad(mean_absolute_error)
    for z, y, v, g in zip(LOGITS, LABELS, values, grads, strict=True):
        p = softmax(z)
        assert v == pytest.approx(1 - p[y], rel=1e-6)
        assert g == pytest.approx([-p[y] * d_log_p(p, y, j) for j in range(3)], abs=1e-6)


# --------------------------------------------------------------------------- the bounds
def extreme_logits(k: int = 10, n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits from near uniform to saturated (scale up to 1e3), labels at random."""
    gen = torch.Generator().manual_seed(0)
    scale = torch.logspace(-2, 3, n).unsqueeze(1)
    return torch.randn(n, k, generator=gen) * scale, torch.randint(0, k, (n,), generator=gen)


def test_each_bounded_loss_stays_in_its_range() -> None:
    z, y = extreme_logits()
    p_y = torch.softmax(z, 1).gather(1, y.unsqueeze(1)).squeeze(1)
    rce = reverse_cross_entropy(z, y)
    assert (rce >= -A * (1 - p_y) - 1e-5).all()
    assert (rce <= -A * (1 - p_y + 9 * 1e-7) + 1e-5).all() and (rce <= -A * (1 + 9e-7)).all()
    for loss in (normalized_cross_entropy(z, y), normalized_focal_loss(z, y, 0.5)):
        assert torch.isfinite(loss).all() and (loss >= 0).all() and (loss <= 1 + 1e-6).all()
    mae = mean_absolute_error(z, y)
    assert (mae >= 0).all() and (mae <= 1).all()


@pytest.mark.parametrize("losses", LOSSES)
def test_apl_losses_lie_in_0_m_so_its_vrnl_objective_is_bounded_below(losses: str) -> None:
    """``l_i ∈ [0, M]``; the objective of the most spread batch (half at 0, half at M, the
    worst case of Popoviciu's bound ``Var <= M² / 4``) and of extreme logits is above
    ``-α M² / 4``."""
    model = APL(num_classes=10, losses=losses, passive_weight=10.0, alpha=ALPHA)
    bound = model.loss_bound()
    z, y = extreme_logits()
    losses_ = model.per_sample_loss(z, {"label": y})
    assert (losses_ >= 0).all() and (losses_ <= bound + 1e-4).all()
    for values in (losses_.tolist(), [0.0] * 8 + [bound] * 8):
        assert vrnl_by_hand(values) >= -ALPHA * bound**2 / 4 - 1e-6


def test_sce_vrnl_objective_is_unbounded_below() -> None:
    """One sample's CE pushed up (its logit for the label lowered) drives ``mean - α Var`` to
    ``-∞``; its RCE stays below ``-A``."""
    model = SCE(num_classes=3, alpha=ALPHA)
    labels = torch.tensor([0, 0, 0, 0])
    objectives = []
    for s in (10.0, 100.0, 1e4):  # CE ~ s, the loss ~ 0.1 s
        logits = torch.tensor([[5.0, 0, 0]] * 3 + [[-s, 0, 0]])
        losses = model.per_sample_loss(logits, {"label": labels}).tolist()
        objectives.append(vrnl_by_hand(losses))
        assert float(reverse_cross_entropy(logits, labels).max()) <= -A * (1 + 2e-7) + 1e-5
    assert objectives[0] > objectives[1] > objectives[2] and objectives[2] < -1000


# --------------------------------------------------------------------------- the training step
def make(cls: type, **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    kwargs.setdefault("alpha", ALPHA)
    return cls(network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 1, 2), **kwargs)


def batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    labels = torch.tensor([0, 1, 2, 0, 2, 1])
    return {
        "image": torch.randn(6, 1, 1, 2, generator=gen),
        "label": labels,
        "clean_label": labels,
        "index": torch.arange(6),
    }


def by_hand(name: str, p: list[float], y: int, a: float, b: float, gamma: float = 0.5) -> float:
    log = [math.log(v) for v in p]
    rce = -A * sum(max(v, 1e-7) for k, v in enumerate(p) if k != y)
    if name == "sce":
        return a * -log[y] + b * rce
    active, passive = name.split("_")
    f = [(1 - v) ** (gamma if active == "nfl" else 0.0) for v in p]
    act = f[y] * log[y] / sum(fk * lk for fk, lk in zip(f, log, strict=True))
    return a * act + b * (rce if passive == "rce" else 1 - p[y])


@pytest.mark.parametrize(
    ("cls", "name", "options"),
    [
        (SCE, "sce", {"ce_weight": 0.1, "rce_weight": 1.0}),
        (SCE, "sce", {"ce_weight": 6.0, "rce_weight": 0.1}),
        *[(APL, pair, {"losses": pair, "active_weight": 2.0, "passive_weight": 0.5})
          for pair in LOSSES],
    ],
)  # fmt: skip
def test_step_is_the_vrnl_objective_of_the_losses(cls, name, options) -> None:
    model = make(cls, **options)
    b = batch()
    model._steps = []
    objective = model.training_objective(b)
    with torch.no_grad():
        logits = model(b["image"]).tolist()
    a = options.get("ce_weight", options.get("active_weight"))
    w = options.get("rce_weight", options.get("passive_weight"))
    expected = [
        by_hand(name, softmax(z), y, a, w) for z, y in zip(logits, b["label"].tolist(), strict=True)
    ]
    assert model._steps[0].losses.tolist() == pytest.approx(expected, rel=1e-5)
    assert float(objective.detach()) == pytest.approx(vrnl_by_hand(expected), rel=1e-5)


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("cls", "options", "match"),
    [
        (SCE, {"ce_weight": -0.1}, r"--model\.ce_weight must be a finite number >= 0"),
        (SCE, {"rce_weight": math.nan}, r"--model\.rce_weight must be a finite number >= 0"),
        (SCE, {"ce_weight": 0.0, "rce_weight": 0.0}, r"--model\.ce_weight and --model\.rce_w"),
        (APL, {"losses": "nce+rce"}, r"--model\.losses must be one of \('nce_rce', 'nfl_rce'"),
        (APL, {"active_weight": math.inf}, r"--model\.active_weight must be a finite number"),
        (APL, {"passive_weight": -1.0}, r"--model\.passive_weight must be a finite number"),
        (APL, {"active_weight": 0.0, "passive_weight": 0.0}, r"both 0"),
        (APL, {"focal_gamma": -0.5}, r"--model\.focal_gamma must be a finite number >= 0"),
    ],
)
def test_bad_options_are_refused_naming_them(cls, options, match) -> None:
    with pytest.raises(InputError, match=match):
        make(cls, **options)


def test_focal_gamma_without_a_focal_loss_is_refused() -> None:
    with pytest.raises(InputError, match=r"--model\.focal_gamma 2.0 would have no effect"):
        make(APL, losses="nce_mae", focal_gamma=2.0).check_options_used()
    make(APL, losses="nfl_rce", focal_gamma=2.0).check_options_used()
    make(APL, losses="nce_rce").check_options_used()  # its default: never refused


# --------------------------------------------------------------------------- configs
def printed(*configs: str) -> dict:
    from noisylabels.cli import run

    argv = ["fit"]
    for config in configs:
        argv += ["--config", str(CONFIGS / config)]
    with pytest.raises(SystemExit) as exc:
        run([*argv, "--print_config"])
    assert exc.value.code == 0
    return exc


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        (["data/cifar10.yaml", "method/sce.yaml"],
         {"ce_weight": 0.1, "rce_weight": 1.0, "main_epochs": 120, "lr": 0.01,
          "weight_decay": 1e-2, "lr_schedule": "multistep", "milestones": [40, 80]}),
        (["cifar100_sce.yaml"], {"ce_weight": 6.0, "rce_weight": 1.0, "main_epochs": 150,
                                 "milestones": [40, 80]}),
        (["data/mnist.yaml", "method/sce_vrnl.yaml", "protocol/vrnl_sgd.yaml"],
         {"alpha": 0.1, "main_epochs": 80, "weight_decay": 1e-4, "milestones": [30, 60]}),
        (["data/cifar10.yaml", "method/apl.yaml"],
         {"losses": "nce_rce", "active_weight": 1.0, "passive_weight": 1.0, "main_epochs": 120,
          "lr_schedule": "cosine", "min_lr": 0.0, "lr": 0.01, "weight_decay": 1e-4}),
        (["mnist_apl.yaml"], {"passive_weight": 10.0, "main_epochs": 50, "min_lr": 1e-3,
                              "weight_decay": 1e-2}),
        (["cifar100_apl.yaml"], {"active_weight": 10.0, "passive_weight": 0.1,
                                 "main_epochs": 200, "lr": 0.1, "weight_decay": 1e-5}),
        (["data/clothing1m.yaml", "method/apl_vrnl.yaml", "protocol/vrnl_sgd.yaml"],
         {"alpha": 0.1, "lr_schedule": "multistep", "milestones": [30, 60], "main_epochs": 80}),
    ],
)  # fmt: skip
def test_groups_and_presets_resolve_to_the_reference_protocol(capsys, configs, expected) -> None:
    printed(*configs)
    args = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
    flat = {**args, **args["schedule"], **args["optim"]}
    assert {k: flat[k] for k in expected} == expected


# --------------------------------------------------------------------------- through the CLI
@pytest.mark.parametrize(
    ("name", "options"),
    [("SCE", []), ("APL", ["--model.losses", "nfl_rce", "--model.passive_weight", "0.5"])],
)
def test_sce_and_apl_vrnl_train_through_the_cli(run_cli, tmp_path, name, options) -> None:
    run_cli(
        "fit",
        *("--config", str(CONFIGS / "data" / "digits.yaml")),
        *("--model", f"noisylabels.methods.{name}", *options),
        *("--model.alpha", "0.05", "--model.optim.lr", "0.1", "--trainer.max_epochs", "3"),
        *("--trainer.limit_val_batches", "2", "--trainer.accelerator", "cpu"),
    )
    results = read_results(tmp_path)
    assert results["alpha"] == 0.05 and results["method"].endswith("-VRNL")
    assert results["test_acc"] > 0.3
