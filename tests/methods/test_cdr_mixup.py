"""CDR and mixup: CDR's masking of the non-critical weights' gradients and its clip rate from the
data's noise rate; mixup's per-sample loss on the mixed batch, its draws and its plain
evaluation, each against a hand computation of the reference's rule; one VRNL run of each
through the command line on the digits."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from noisylabels.errors import InputError
from noisylabels.methods import CDR, Mixup
from noisylabels.methods.cdr import mask_noncritical
from noisylabels.methods.mixup import LAMBDA_KEY, PARTNER_KEY, beta_draw

from conftest import CONFIGS, fixed_batch, read_results, synthetic_facts
from conftest import tiny_method as make

C = 3
ALPHA = 0.1


def ce_by_hand(z: list[float], y: int) -> float:
    return -math.log(math.exp(z[y]) / sum(math.exp(v) for v in z))


def vrnl_by_hand(losses: list[float], alpha: float = ALPHA) -> float:
    mean = sum(losses) / len(losses)
    return mean - alpha * sum((v - mean) ** 2 for v in losses) / len(losses)


def facts(rate: float | None, noise_type: str = "symmetric"):
    labels = torch.zeros(4, dtype=torch.long)
    f = synthetic_facts(C, labels, labels, torch.arange(4), 0.0)
    return dataclasses.replace(f, rate_nominal=rate, noise_type=noise_type)


# --------------------------------------------------------------------------- CDR: the masking
def _params() -> list[nn.Parameter]:
    """A 2-D weight, a bias and a 4-D weight with set values and gradients: scores |w·g| of
    the ranked ones (2-D, 4-D) 0.2, 3.0, 0.5, 1.2 | 0.05, 2.0."""
    w2 = nn.Parameter(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
    w2.grad = torch.tensor([[0.2, 1.5], [-1.0, 0.4]])
    bias = nn.Parameter(torch.tensor([1.0, 1.0]))
    bias.grad = torch.tensor([5.0, -5.0])
    w4 = nn.Parameter(torch.tensor([0.1, -4.0]).reshape(1, 1, 1, 2))
    w4.grad = torch.tensor([0.5, -0.5]).reshape(1, 1, 1, 2)
    return [w2, bias, w4]


@pytest.mark.parametrize(
    ("clip", "kept"),
    [
        # N = 6 ranked weights, keep int(clip * 6) highest: 3.0, 2.0, 1.2, 0.5, 0.2, 0.05
        (0.5, {(0, 1), (1, 1), (2, 1)}),  # 3 kept: 3.0 (w2[0,1]), 1.2 (w2[1,1]), 2.0 (w4[1])
        (0.7, {(0, 1), (1, 1), (2, 1), (1, 0)}),  # int(4.2) = 4: also 0.5 (w2[1,0])
        (1.0, {(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)}),  # all, times 1
    ],
)
def test_cdr_keeps_the_highest_w_times_g_over_all_weights_times_clip(clip, kept) -> None:
    params = _params()
    before = [p.grad.clone() for p in params]
    mask_noncritical(params, clip)
    w2, bias, w4 = params
    flat_before = torch.cat([before[0].reshape(-1), before[2].reshape(-1)])
    flat_after = torch.cat([w2.grad.reshape(-1), w4.grad.reshape(-1)])
    positions = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]  # w2 row-major, then w4
    for k, pos in enumerate(positions):
        expected = flat_before[k] * clip if pos in kept else 0.0
        assert float(flat_after[k]) == pytest.approx(float(expected)), pos
    assert torch.equal(bias.grad, before[1])  # 1-D: not ranked, whole gradient


def test_cdr_keeps_every_weight_tied_at_the_threshold() -> None:
    w = nn.Parameter(torch.ones(2, 2))
    w.grad = torch.full((2, 2), 2.0)
    mask_noncritical([w], 0.5)  # int(2) = 2 of 4 kept, but all 4 score the threshold
    assert torch.equal(w.grad, torch.full((2, 2), 1.0))


def test_cdr_skips_parameters_without_gradient_and_refuses_keeping_none() -> None:
    w = nn.Parameter(torch.ones(2, 2))
    mask_noncritical([w], 0.5)  # no gradient: nothing to do
    assert w.grad is None
    w.grad = torch.ones(2, 2)
    with pytest.raises(InputError, match="clip_rate"):
        mask_noncritical([w], 0.2)  # int(0.8) = 0


def test_cdr_step_masks_after_the_vrnl_backward_and_not_in_a_warmup() -> None:
    """The objective is CE-VRNL; after its backward the hook leaves int(clip · N) weights of the
    MLP's 2-D tensors with a gradient (scaled by clip) and the biases' untouched; in a warm-up
    it leaves the gradient alone."""
    model = make(CDR, clip_rate=0.6)
    batch = fixed_batch()
    model._steps = []
    objective = model.training_objective(batch)
    with torch.no_grad():
        logits = model(batch["image"]).tolist()
    losses = [ce_by_hand(z, y) for z, y in zip(logits, batch["label"].tolist(), strict=True)]
    assert model._steps[0].losses.tolist() == pytest.approx(losses, rel=1e-5)
    assert float(objective.detach()) == pytest.approx(vrnl_by_hand(losses), rel=1e-5)
    objective.backward()
    full = {name: p.grad.clone() for name, p in model.net.named_parameters()}
    model.on_before_optimizer_step(None)
    weights = {n: p for n, p in model.net.named_parameters() if p.dim() == 2}
    total = sum(p.numel() for p in weights.values())
    kept = sum(int((p.grad != 0).sum()) for p in weights.values())
    assert kept == int(0.6 * total)
    for name, p in model.net.named_parameters():
        if p.dim() == 2:
            nonzero = p.grad != 0
            assert torch.allclose(p.grad[nonzero], full[name][nonzero] * 0.6)
        else:
            assert torch.equal(p.grad, full[name])
    warm = make(CDR, clip_rate=0.6, schedule={"warmup_epochs": 1})
    warm.training_objective(batch).backward()
    grads = [p.grad.clone() for p in warm.net.parameters()]
    warm.on_before_optimizer_step(None)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, warm.net.parameters(), strict=True))


# --------------------------------------------------------------------------- CDR: the clip rate
def test_cdr_clip_rate_is_one_minus_the_noise_rate_or_refused_without_one(monkeypatch) -> None:
    model = make(CDR)
    monkeypatch.setattr(model, "data_facts", lambda: facts(0.4))
    assert model.resolve_clip() == pytest.approx(0.6)
    monkeypatch.setattr(model, "data_facts", lambda: facts(None, "file"))
    with pytest.raises(InputError, match=r"--model.clip_rate noise_rate .* 'file'"):
        model.resolve_clip()
    given = make(CDR, clip_rate=0.75)
    assert given.resolve_clip() == 0.75  # a number: the data's rate not needed


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5, "estimate"])
def test_cdr_refuses_a_clip_rate_outside_its_range(value) -> None:
    with pytest.raises(InputError, match=r"--model.clip_rate"):
        make(CDR, clip_rate=value)


# --------------------------------------------------------------------------- mixup: the loss
def test_mixup_step_is_lambda_ce_plus_one_minus_lambda_ce_of_the_partner() -> None:
    model = make(Mixup, mixup_alpha=1.0)
    batch = fixed_batch()
    model._steps = []
    objective = model.training_objective(batch)
    partners, lam = model.mix_draw(6, torch.device("cpu"))  # the same draw (seed, step 0)
    assert 0.0 < lam < 1.0 and sorted(partners.tolist()) == list(range(6))
    x = batch["image"]
    mixed = lam * x + (1 - lam) * x[partners]
    with torch.no_grad():
        logits = model(mixed).tolist()
    y = batch["label"].tolist()
    expected = [
        lam * ce_by_hand(z, y[i]) + (1 - lam) * ce_by_hand(z, y[int(partners[i])])
        for i, z in enumerate(logits)
    ]
    record = model._steps[0]
    assert record.losses.tolist() == pytest.approx(expected, rel=1e-5)
    assert float(objective.detach()) == pytest.approx(vrnl_by_hand(expected), rel=1e-5)
    assert torch.equal(record.index, batch["index"]) and torch.equal(record.labels, batch["label"])
    torch.testing.assert_close(record.logits, torch.tensor(logits))  # of the mixed images


@pytest.mark.parametrize("a", [0.0, -1.0])
def test_mixup_alpha_at_most_zero_is_plain_ce(a: float) -> None:
    """The reference's lambda = 1 for a <= 0: the unmixed cross-entropy."""
    model = make(Mixup, mixup_alpha=a)
    batch = fixed_batch()
    model._steps = []
    model.training_objective(batch)
    with torch.no_grad():
        logits = model(batch["image"]).tolist()
    y = batch["label"].tolist()
    expected = [ce_by_hand(z, y[i]) for i, z in enumerate(logits)]
    assert model._steps[0].losses.tolist() == pytest.approx(expected, rel=1e-5)


def test_mixup_evaluates_the_plain_network_and_loss() -> None:
    model = make(Mixup)
    batch = fixed_batch()
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    plain = model.per_sample_loss(logits, {"label": torch.tensor([0, 2])})
    expected = [ce_by_hand([2.0, 0.0, -1.0], 0), ce_by_hand([0.0, 1.0, 0.0], 2)]
    assert plain.tolist() == pytest.approx(expected, rel=1e-6)
    mixed = model.per_sample_loss(
        logits,
        {
            "label": torch.tensor([0, 2]),
            PARTNER_KEY: torch.tensor([1, 2]),
            LAMBDA_KEY: torch.tensor(0.25),
        },
    )
    first = 0.25 * expected[0] + 0.75 * ce_by_hand([2.0, 0.0, -1.0], 1)
    assert mixed.tolist() == pytest.approx([first, expected[1]], rel=1e-6)
    with torch.no_grad():
        assert torch.equal(model.prediction_logits(batch["image"]), model(batch["image"]))


def test_mixup_draws_reproduce_by_seed_and_step_and_follow_beta() -> None:
    model = make(Mixup, mixup_alpha=1.0)
    first = model.mix_draw(8, torch.device("cpu"))
    again = model.mix_draw(8, torch.device("cpu"))
    assert torch.equal(first[0], again[0]) and first[1] == again[1]
    torch.manual_seed(1)  # another run's seed: another draw
    other = model.mix_draw(8, torch.device("cpu"))
    assert not torch.equal(first[0], other[0]) or first[1] != other[1]
    gen = torch.Generator().manual_seed(0)
    draws = torch.tensor([beta_draw(1.0, gen) for _ in range(4000)])  # Beta(1, 1): uniform
    assert float(draws.mean()) == pytest.approx(0.5, abs=0.02)
    assert float(draws.var()) == pytest.approx(1 / 12, abs=0.01)
    small = torch.tensor([beta_draw(0.1, gen) for _ in range(2000)])  # Beta(a, a), a small
    assert float(((small < 0.05) | (small > 0.95)).float().mean()) > 0.6  # mass at the ends


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_mixup_refuses_a_non_finite_alpha(value: float) -> None:
    with pytest.raises(InputError, match=r"--model.mixup_alpha"):
        make(Mixup, mixup_alpha=value)


# --------------------------------------------------------------------------- through the CLI
@pytest.mark.parametrize(
    ("name", "options"),
    [("CDR", ["--data.noise_rate", "0.4"]), ("Mixup", ["--model.mixup_alpha", "0.5"])],
)
def test_cdr_and_mixup_vrnl_train_through_the_cli(run_cli, tmp_path, name, options) -> None:
    run_cli(
        "fit",
        *(
            "--config",
            str(CONFIGS / "data" / "digits.yaml"),
            "--model",
            f"noisylabels.methods.{name}",
        ),
        *("--model.alpha", "0.05", "--model.optim.lr", "0.1", "--trainer.max_epochs", "2"),
        *("--trainer.limit_val_batches", "2", "--trainer.accelerator", "cpu", *options),
    )
    results = read_results(tmp_path)
    assert results["alpha"] == 0.05 and results["method"] == f"{name}-VRNL"
    assert results["test_acc"] > 0.3
