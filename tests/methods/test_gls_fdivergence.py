"""GLS and f-divergence: each per-sample loss against a hand computation of its reference's rule
(value and gradient), the f-divergence's peers drawn within the batch and its validation
pairing, the warm-up's own learning rate, option validation, the groups and presets resolved
through the command line, and one short VRNL run of each on the digits."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from torch import nn

from noisylabels.errors import InputError
from noisylabels.methods import GLS, FDivergence
from noisylabels.methods.fdivergence import BOUNDS, DIVERGENCES, REFERENCE_NAMES
from noisylabels.methods.gls import gls_loss

from conftest import CONFIGS, fixed_batch, read_results
from conftest import tiny_method as make

C = 3
ALPHA = 0.1


def softmax_by_hand(z: list[float]) -> list[float]:
    e = [math.exp(v) for v in z]
    return [v / sum(e) for v in e]


def vrnl_by_hand(losses: list[float], alpha: float = ALPHA) -> float:
    mean = sum(losses) / len(losses)
    return mean - alpha * sum((v - mean) ** 2 for v in losses) / len(losses)


LOGITS = [[2.0, -1.0, 0.5], [0.0, 0.3, -0.2], [-1.5, 1.0, 2.5]]
LABELS = [0, 2, 1]


# --------------------------------------------------------------------------- GLS: the loss
@pytest.mark.parametrize("r", [0.3, 0.0, -0.5, -4.0])
def test_gls_is_ce_against_the_smoothed_target_value_and_gradient(r: float) -> None:
    """``-Σ_j ỹ_j log p_j`` with ``ỹ = (1 - r) onehot + r / K``; its gradient ``p - ỹ``."""
    logits = torch.tensor(LOGITS, requires_grad=True)
    loss = gls_loss(logits, torch.tensor(LABELS), r)
    expected, grads = [], []
    for z, y in zip(LOGITS, LABELS, strict=True):
        p = softmax_by_hand(z)
        target = [(1 - r) * (j == y) + r / C for j in range(C)]
        expected.append(-sum(t * math.log(q) for t, q in zip(target, p, strict=True)))
        grads.append([q - t for q, t in zip(p, target, strict=True)])
    assert loss.tolist() == pytest.approx(expected, rel=1e-5)
    loss.sum().backward()
    assert logits.grad.tolist() == [pytest.approx(g, rel=1e-5, abs=1e-6) for g in grads]


def test_gls_at_zero_is_cross_entropy_and_its_step_is_vrnl() -> None:
    model = make(GLS, smooth_rate=-0.2)
    batch = fixed_batch()
    model._steps = []
    objective = model.training_objective(batch)
    with torch.no_grad():
        logits = model(batch["image"])
    expected = gls_loss(logits, batch["label"], -0.2).tolist()
    assert model._steps[0].losses.tolist() == pytest.approx(expected, rel=1e-6)
    assert float(objective.detach()) == pytest.approx(vrnl_by_hand(expected), rel=1e-5)
    ce = nn.functional.cross_entropy(logits, batch["label"], reduction="none")
    assert make(GLS, smooth_rate=0.0).per_sample_loss(logits, batch).tolist() == pytest.approx(
        ce.tolist(), rel=1e-6
    )


def test_gls_warmup_is_plain_ce() -> None:
    model = make(GLS, smooth_rate=-2.0, schedule={"warmup_epochs": 1})
    batch = fixed_batch()
    model._steps = []
    model.training_objective(batch)
    with torch.no_grad():
        logits = model(batch["image"])
    ce = nn.functional.cross_entropy(logits, batch["label"], reduction="none")
    assert model._steps[0].losses.tolist() == pytest.approx(ce.tolist(), rel=1e-6)


@pytest.mark.parametrize("value", [1.0, 1.5, math.nan, math.inf, -math.inf])
def test_gls_refuses_a_smooth_rate_outside_its_range(value: float) -> None:
    with pytest.raises(InputError, match=r"--model\.smooth_rate must be a finite number below 1"):
        make(GLS, smooth_rate=value)


# --------------------------------------------------------------------------- f-divergence
def _psi_phi_by_hand(name: str, v: float) -> tuple[float, float, float, float]:
    """ψ(v), φ(v), ψ'(v), φ'(v) of the reference's activation and conjugate."""
    th, e, s = math.tanh(v), math.exp(v), 1 / (1 + math.exp(v))  # s: sigmoid(-v)
    table = {
        "total_variation": (th / 2, th / 2, (1 - th * th) / 2, (1 - th * th) / 2),
        "jensen_shannon": (
            -math.log(1 + math.exp(-v)) + math.log(2),
            v + math.log(1 + math.exp(-v)) - math.log(2),
            s,
            1 - s,
        ),
        "pearson": (v, v * v / 4 + v, 1.0, v / 2 + 1),
        "kl": (v, math.exp(v - 1), 1.0, math.exp(v - 1)),
        "jeffrey": (v, v + v * v / 4 + v**3 / 16, 1.0, 1 + v / 2 + 3 * v * v / 16),
        "squared_hellinger": (1 - e, (1 - e) / e, -e, -1 / e),
        "reverse_kl": (-e, -1 - v, -e, -1.0),
        "neyman": (1 - e, 2 - 2 * math.sqrt(1 - v), -e, 1 / math.sqrt(1 - v)),
    }
    return table[name]


@pytest.mark.parametrize("name", list(DIVERGENCES))
def test_fdivergence_loss_is_minus_psi_plus_phi_of_the_peer_value_and_gradient(name) -> None:
    """``l_i = -ψ(p_{y_i}(z_i)) + φ(p_{y'_i}(z'_i))``; the gradient through ``dp_y/dz_k = p_y
    (δ_{ky} - p_k)`` to the sample's logits (``-ψ'``) and to its peer's (``φ'``)."""
    model = make(FDivergence, divergence=name)
    logits = torch.tensor(LOGITS, requires_grad=True)
    peer_logits = torch.tensor([[0.4, 0.1, -0.3], [1.2, -0.7, 0.0], [0.0, 0.0, 0.9]])
    peer_logits.requires_grad_(True)
    peer_labels = [2, 0, 0]
    batch = {"label": torch.tensor(LABELS), "peer_logits": peer_logits,
             "peer_label": torch.tensor(peer_labels)}  # fmt: skip
    loss = model.per_sample_loss(logits, batch)
    expected, own_grads, peer_grads = [], [], []
    for z, y, zp, yp in zip(LOGITS, LABELS, peer_logits.tolist(), peer_labels, strict=True):
        p, q = softmax_by_hand(z), softmax_by_hand(zp)
        psi, _, dpsi, _ = _psi_phi_by_hand(name, p[y])
        _, phi, _, dphi = _psi_phi_by_hand(name, q[yp])
        expected.append(-psi + phi)
        own_grads.append([-dpsi * p[y] * ((k == y) - p[k]) for k in range(C)])
        peer_grads.append([dphi * q[yp] * ((k == yp) - q[k]) for k in range(C)])
    assert loss.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    low, high = BOUNDS[name]
    assert all(low <= v <= high for v in loss.tolist())
    loss.sum().backward()
    assert logits.grad.tolist() == [pytest.approx(g, rel=1e-4, abs=1e-6) for g in own_grads]
    assert peer_logits.grad.tolist() == [pytest.approx(g, rel=1e-4, abs=1e-6) for g in peer_grads]


@pytest.mark.parametrize("name", list(DIVERGENCES))
def test_fdivergence_losses_stay_within_their_bounds(name: str) -> None:
    """``v, v' ∈ [0, 1]`` bound every ``l_i`` by the ranges of the docs (confident logits
    reach their ends), with finite gradients (Neyman's at ``p = 1`` too)."""
    model = make(FDivergence, divergence=name)
    logits = torch.randn(400, C, generator=torch.Generator().manual_seed(0)) * 30
    logits.requires_grad_(True)
    labels = torch.arange(400) % C
    loss = model.per_sample_loss(logits, {"label": labels})
    low, high = BOUNDS[name]
    values = loss.detach()
    assert float(values.min()) >= low - 1e-6 and float(values.max()) <= high + 1e-6
    assert float(values.max() - values.min()) > 0.9 * (high - low)
    loss.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_fdivergence_step_pairs_each_sample_with_two_independent_random_peers() -> None:
    """The step's per-sample losses use the peers of two random permutations of the batch
    (seeded by the run's seed and the step): the peer output of sample ``i`` is sample
    ``π1(i)``'s logits, its peer label sample ``π2(i)``'s label; the objective is their VRNL."""
    model = make(FDivergence, divergence="jensen_shannon")
    batch = fixed_batch()
    n = len(batch["label"])
    torch.manual_seed(7)  # the run's seed
    seed = (torch.initial_seed() * 1_000_003 + model.global_step) % 2**63
    first, second = torch.rand(2, n, generator=torch.Generator().manual_seed(seed)).argsort(1)
    model._steps = []
    objective = model.training_objective(batch)
    with torch.no_grad():
        logits = model(batch["image"]).tolist()
    labels = batch["label"].tolist()
    expected = []
    for i in range(n):
        psi = _psi_phi_by_hand("jensen_shannon", softmax_by_hand(logits[i])[labels[i]])[0]
        peer = softmax_by_hand(logits[int(first[i])])[labels[int(second[i])]]
        expected.append(-psi + _psi_phi_by_hand("jensen_shannon", peer)[1])
    record = model._steps[0]
    assert record.losses.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert float(objective.detach()) == pytest.approx(vrnl_by_hand(expected), rel=1e-5)
    assert torch.equal(record.index, batch["index"]) and torch.equal(record.labels, batch["label"])
    # the mean is the reference's loss: mean(-ψ) over the batch minus mean(-φ) over the peers
    objective.backward()
    assert all(p.grad is not None for p in model.net.parameters())


def test_fdivergence_validation_pairs_with_the_next_samples_and_warmup_is_ce() -> None:
    model = make(FDivergence, divergence="kl")
    logits = torch.tensor([*LOGITS, [0.2, 0.2, -1.0]])
    labels = torch.tensor([*LABELS, 0])
    p = [softmax_by_hand(z) for z in logits.tolist()]
    y = labels.tolist()
    expected = [-p[i][y[i]] + math.exp(p[(i + 1) % 4][y[(i + 2) % 4]] - 1) for i in range(4)]
    assert model.per_sample_loss(logits, {"label": labels}).tolist() == pytest.approx(
        expected, rel=1e-5
    )
    warm = make(FDivergence, schedule={"warmup_epochs": 1})
    batch = fixed_batch()
    warm._steps = []
    warm.training_objective(batch)
    with torch.no_grad():
        ce = nn.functional.cross_entropy(warm(batch["image"]), batch["label"], reduction="none")
    assert warm._steps[0].losses.tolist() == pytest.approx(ce.tolist(), rel=1e-6)


def test_fdivergence_names_follow_the_reference() -> None:
    assert set(REFERENCE_NAMES) == set(DIVERGENCES)
    assert REFERENCE_NAMES["jensen_shannon"] == "Jenson-Shannon"  # the reference's spelling


@pytest.mark.parametrize("value", ["Total-Variation", "tv", "chi2", ""])
def test_fdivergence_refuses_an_unknown_divergence(value: str) -> None:
    with pytest.raises(InputError, match=r"--model\.divergence must be one of"):
        make(FDivergence, divergence=value)


# --------------------------------------------------------------------------- the warm-up's lr
def _lrs(model: nn.Module, epochs: int) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=model.optim.lr)
    scheduler = model.make_scheduler(optimizer)
    out = []
    for _ in range(epochs):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


@pytest.mark.parametrize("cls", [GLS, FDivergence])
def test_the_warmup_runs_at_warmup_lr_and_the_stage_at_lr(cls: type) -> None:
    """The reference's two runs: CE at 0.1, ÷10 at its milestones, then the method at 0.01 with
    its own (the f-divergence's CIFAR plan, shortened)."""
    schedule = {
        **{"warmup_epochs": 4, "warmup_milestones": [2], "main_epochs": 4, "milestones": [2]},
        **{"warmup_model": "best", "main_stage_init": "restart"},
    }
    model = make(cls, warmup_lr=0.1, schedule=schedule, optim={"lr": 0.01})
    assert _lrs(model, 8) == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 1e-3, 1e-3])
    plain = make(cls, schedule=schedule, optim={"lr": 0.01})
    assert _lrs(plain, 8) == pytest.approx([0.01, 0.01, 1e-3, 1e-3, 0.01, 0.01, 1e-3, 1e-3])


@pytest.mark.parametrize("cls", [GLS, FDivergence])
def test_warmup_lr_is_refused_without_a_warmup_or_out_of_range(cls: type) -> None:
    with pytest.raises(InputError, match=r"--model\.warmup_lr 0\.1 would have no effect"):
        make(cls, warmup_lr=0.1).check_options_used()
    make(cls, warmup_lr=0.1, schedule={"warmup_epochs": 2}).check_options_used()
    make(cls).check_options_used()
    for value in (0.0, -0.1, math.nan, math.inf):
        with pytest.raises(InputError, match=r"--model\.warmup_lr must be a positive"):
            make(cls, warmup_lr=value)


# --------------------------------------------------------------------------- configs, CLI
def _resolved(capsys, *files: str) -> dict:
    from noisylabels.cli import run

    argv = ["fit"]
    for name in files:
        argv += ["--config", str(CONFIGS / name)]
    with pytest.raises(SystemExit):
        run([*argv, "--print_config"])
    return yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]


def test_the_groups_and_presets_resolve_to_their_reference_protocols(capsys) -> None:
    gls = _resolved(capsys, "data/cifar10.yaml", "method/gls.yaml")
    assert gls["smooth_rate"] == 0.1 and gls["alpha"] == 0.0 and gls["warmup_lr"] is None
    assert gls["schedule"]["main_epochs"] == 200 and gls["schedule"]["milestones"] == [100, 150]
    assert gls["optim"] == {**gls["optim"], "optimizer": "sgd", "lr": 0.1, "weight_decay": 1e-4}
    warm = _resolved(
        capsys, "data/cifar100.yaml", "method/gls_vrnl.yaml", "protocol/gls_warmup.yaml"
    )
    assert warm["alpha"] == 0.1 and warm["warmup_lr"] == 0.1 and warm["optim"]["lr"] == 1e-6
    assert warm["schedule"]["warmup_epochs"] == 120 and warm["schedule"]["milestones"] == []
    assert warm["schedule"]["warmup_milestones"] == [40, 80]
    assert warm["schedule"]["warmup_momentum"] == 0.0
    mnist = _resolved(capsys, "data/mnist.yaml", "method/fdivergence_vrnl.yaml")
    assert mnist["divergence"] == "total_variation" and mnist["alpha"] == 0.1
    assert mnist["optim"]["optimizer"] == "adam" and mnist["schedule"]["milestones"] == [21]
    for dataset in ("cifar10", "cifar100"):
        cifar = _resolved(capsys, f"{dataset}_fdivergence.yaml")
        assert cifar["warmup_lr"] == 0.1 and cifar["optim"]["weight_decay"] == 5e-4
        assert cifar["schedule"]["warmup_epochs"] == 240
        assert cifar["schedule"]["main_stage_init"] == "restart"
        assert cifar["schedule"]["milestones"] == [30, 60, 90]
    c1m = _resolved(capsys, "clothing1m_fdivergence.yaml")
    assert c1m["warmup_lr"] == 0.002 and c1m["optim"]["lr"] == 5e-5
    assert c1m["schedule"]["lr_gamma"] ** 2 == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("GLS", ["--model.smooth_rate", "0.3"]),
        ("FDivergence", ["--model.divergence", "total_variation"]),
    ],
)
def test_gls_and_fdivergence_vrnl_train_through_the_cli(run_cli, tmp_path, name, options) -> None:
    run_cli(
        "fit",
        *("--config", str(CONFIGS / "data" / "digits.yaml")),
        *("--model", f"noisylabels.methods.{name}"),
        *("--model.alpha", "0.05", "--model.optim.lr", "0.1", "--trainer.max_epochs", "2"),
        *("--trainer.limit_val_batches", "2", "--trainer.accelerator", "cpu", *options),
    )
    results = read_results(tmp_path)
    assert results["alpha"] == 0.05 and results["method"] == f"{name}-VRNL"
    assert results["test_acc"] > 0.3
