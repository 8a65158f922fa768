"""The methods with per-sample state (ELR's and ELR+'s targets, SOP's u and v, CORES²'s class
prior): one
training step's per-sample losses and VRNL objective on fixed inputs equal the papers' formulas,
computed here independently; the state moves as the references move it and survives a
checkpoint."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from noisylabels.errors import InputError
from noisylabels.methods import CORES, ELR, SOP, ELRPlus, SOPPlus
from noisylabels.methods import elr as elr_module

C, N = 4, 10
ALPHA = 0.1


def batch_of(index: list[int], labels: list[int], seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "image": torch.randn(len(index), 1, 2, 2, generator=generator),
        "label": torch.tensor(labels),
        "index": torch.tensor(index),
        "clean_label": torch.tensor(labels),
    }


def vrnl(losses: torch.Tensor, alpha: float) -> torch.Tensor:
    """``mean(l) - alpha · Var(l)``, population variance (VRNL paper, Eq. 1)."""
    mean = losses.sum() / len(losses)
    return mean - alpha * ((losses - mean) ** 2).sum() / len(losses)


# ---------------------------------------------------------------------------------- ELR
def elr(cls: type[ELR] = ELR, **kwargs) -> ELR:
    """An ELR (or ELR+) on 2x2 inputs with the target table of N samples."""
    torch.manual_seed(0)
    model = cls(
        network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2), alpha=ALPHA, **kwargs
    )
    model.init_targets(N)
    return model


def test_elr_step_is_the_papers_loss_with_the_updated_targets() -> None:
    beta, lam = 0.7, 3.0
    model = elr(beta=beta, lam=lam)
    batch = batch_of([3, 7, 1], [0, 2, 3])
    previous = torch.rand(N + 1, C)
    model.targets = previous.clone()
    logits = model(batch["image"]).detach()
    objective = model.training_objective(batch)

    p = torch.softmax(logits, 1).clamp(1e-4, 1 - 1e-4)
    t = beta * previous[[3, 7, 1]] + (1 - beta) * p / p.sum(1, keepdim=True)
    ce = -torch.log_softmax(logits, 1)[torch.arange(3), batch["label"]]
    expected = ce + lam * torch.log(1 - (t * p).sum(1))
    [step] = model._steps
    torch.testing.assert_close(step.losses, expected)
    torch.testing.assert_close(objective, vrnl(expected, ALPHA))
    # the batch's rows moved, every other row stayed
    torch.testing.assert_close(model.targets[[3, 7, 1]], t)
    others = [i for i in range(N) if i not in (3, 7, 1)]
    assert torch.equal(model.targets[others], previous[others])


def test_elr_targets_start_at_zero_and_follow_the_predictions() -> None:
    """From t = 0 the first step's target is (1 - beta) p (normalized), so the regularizer is
    log(1 - (1 - beta)|p|²); a second step averages again."""
    beta = 0.9
    model = elr(beta=beta)
    batch = batch_of([0, 1], [1, 1])
    model.training_objective(batch)
    with torch.no_grad():
        p = torch.softmax(model(batch["image"]), 1).clamp(1e-4, 1 - 1e-4)
    first = (1 - beta) * p / p.sum(1, keepdim=True)
    torch.testing.assert_close(model.targets[:2], first)
    model.training_objective(batch)
    torch.testing.assert_close(model.targets[:2], beta * first + (1 - beta) * first / (1 - beta))


def test_elr_warmup_and_validation_are_plain_cross_entropy() -> None:
    model = elr(schedule={"warmup_epochs": 1})
    batch = batch_of([2, 5], [0, 3])
    before = model.targets.clone()
    model.training_objective(batch)
    assert torch.equal(model.targets, before)  # the warm-up leaves the targets alone
    logits = model(batch["image"])
    ce = F.cross_entropy(logits, batch["label"], reduction="none")
    torch.testing.assert_close(model.per_sample_loss(logits, batch), ce)


def test_elr_targets_are_in_the_state_dict_and_come_back() -> None:
    model = elr()
    model.targets = torch.rand(N + 1, C)
    state = model.state_dict()
    assert torch.equal(state["elr_targets"], model.targets[:-1])
    other = elr()
    other.load_state_dict(state)
    assert torch.equal(other.targets[:-1], model.targets[:-1])
    assert other.targets.shape == (N + 1, C)


# ---------------------------------------------------------------------------------- ELR+
def elr_plus(**kwargs) -> ELRPlus:
    return elr(ELRPlus, **kwargs)


PARTNERS, DRAWN_LAMBDA = [2, 0, 3, 1], 0.3  # a fixed mixup draw: λ' = max(λ, 1 - λ) = 0.7


def fixed_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elr_module, "draw_partners", lambda *a: torch.tensor(PARTNERS))
    monkeypatch.setattr(elr_module, "beta_draw", lambda *a: DRAWN_LAMBDA)


@pytest.mark.parametrize("label_times_target", [False, True])
def test_elr_plus_step_is_the_references_loss(
    monkeypatch: pytest.MonkeyPatch, label_times_target: bool
) -> None:
    """shengliu66/ELR ELR_plus/model/loss.py:23-41, trainer/trainer.py:96-112, 344-356: each
    network's targets move toward the *other* network's average's prediction of the unmixed
    batch; the network trains on the mixed batch against the mixed labels (times the mixed
    targets, renormalized, where the reference has 100 classes) plus the ramped regularizer."""
    fixed_draw(monkeypatch)
    beta, lam, ramp_steps = 0.9, 7.0, 10
    model = elr_plus(beta=beta, lam=lam, coef_rampup_steps=ramp_steps,
                     label_times_target=label_times_target)  # fmt: skip
    index, labels = [3, 7, 1, 5], [0, 2, 3, 3]
    batch = batch_of(index, labels)
    previous = torch.rand(2, N + 1, C)
    model.targets = previous.clone()
    x, mix = batch["image"], 0.7
    with torch.no_grad():
        average_probs = [torch.softmax(model.averages[1 - k](x), 1) for k in range(2)]
        mixed_x = mix * x + (1 - mix) * x[PARTNERS]
        logits = [model.network_logits(mixed_x, k) for k in range(2)]
    objective = model.training_objective(batch)

    onehot = F.one_hot(torch.tensor(labels), C).float()
    y = mix * onehot + (1 - mix) * onehot[PARTNERS]
    ramp = float(torch.exp(torch.tensor(-5.0 * (1 - 1 / ramp_steps) ** 2)))  # step 1 of 10
    expected_objective = torch.tensor(0.0)
    for k, step in enumerate(model._steps):
        t = beta * previous[k, index] + (1 - beta) * average_probs[k]
        torch.testing.assert_close(model.targets[k, index], t)
        q = mix * t + (1 - mix) * t[PARTNERS]
        target = y * q / (y * q).sum(1, keepdim=True) if label_times_target else y
        p = torch.softmax(logits[k], 1).clamp(1e-4, 1 - 1e-4)
        ce = -(target * torch.log_softmax(logits[k], 1)).sum(1)
        expected = ce + ramp * lam * torch.log(1 - (q * p).sum(1))
        assert step.network == k
        torch.testing.assert_close(step.losses, expected)
        expected_objective = expected_objective + vrnl(expected, ALPHA)
    torch.testing.assert_close(objective, expected_objective)
    others = [i for i in range(N) if i not in index]
    assert torch.equal(model.targets[:, others], previous[:, others])


@pytest.mark.parametrize("rampup", [40000, 0, None])
def test_elr_plus_averages_follow_the_references_decay(rampup: int | None) -> None:
    """trainer.py:321-331: ``θ̄ <- a θ̄ + (1 - a) θ`` over the parameters after each step, ``a``
    the decay ramped up by the sigmoid over ``ema_step`` steps (or ``min(1 - 1/(s + 1), a)``)."""
    model = elr_plus(ema_decay=0.997, ema_rampup_steps=rampup)
    before = [[p.clone() for p in avg.parameters()] for avg in model.averages]
    step = 5
    model.update_averages(step)
    if rampup is None:
        a = min(1 - 1 / (step + 1), 0.997)
    elif rampup == 0:
        a = 0.997
    else:
        a = 0.997 * float(torch.exp(torch.tensor(-5.0 * (1 - (step + 1) / rampup) ** 2)))
    for k, average in enumerate(model.averages):
        params = list(model.networks[k].parameters())
        for old, new, p in zip(before[k], average.parameters(), params, strict=True):
            torch.testing.assert_close(new, a * old + (1 - a) * p.detach())
            assert not new.requires_grad
    assert sum(p.numel() for p in model.averages.parameters()) == sum(
        p.numel() for net in model.networks for p in net.parameters()
    )


def test_elr_plus_warmup_is_cross_entropy_and_the_state_comes_back() -> None:
    """In a warm-up each network's targets follow its own predictions (trainer.py:260-279) and
    its loss is plain cross-entropy; the two tables and the averages are in the state dict."""
    model = elr_plus(schedule={"warmup_epochs": 1})
    batch = batch_of([2, 5], [0, 3])
    model.training_objective(batch)
    for k, step in enumerate(model._steps):
        logits = model.network_logits(batch["image"], k).detach()
        torch.testing.assert_close(model.targets[k, [2, 5]], 0.3 * torch.softmax(logits, 1))
        torch.testing.assert_close(step.losses, F.cross_entropy(logits, batch["label"],
                                                                reduction="none"))  # fmt: skip
    state = model.state_dict()
    assert state["elr_targets"].shape == (2, N, C)
    other = elr_plus()
    with torch.no_grad():
        for p in other.averages.parameters():
            p.add_(1.0)
    other.load_state_dict(state)
    assert torch.equal(other.targets, model.targets)
    for a, b in zip(other.averages.parameters(), model.averages.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("ema_decay", 1.0, "ema_decay must be in"),
        ("ema_rampup_steps", -1, "ema_rampup_steps must be a whole number"),
        ("ema_rampup_steps", 2.5, "ema_rampup_steps must be a whole number"),
        ("coef_rampup_steps", None, "coef_rampup_steps must be a whole number"),
        ("mixup_alpha", float("nan"), "mixup_alpha must be a finite number"),
    ],
)
def test_elr_plus_refuses_bad_options(option: str, value: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        elr_plus(**{option: value})


# ---------------------------------------------------------------------------------- SOP
def sop(**kwargs) -> SOP:
    torch.manual_seed(0)
    model = SOP(
        network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2), alpha=ALPHA, **kwargs
    )
    model.init_parameters(N)
    return model


def sop_reference(model: SOP, logits: torch.Tensor, index: list[int], labels: list[int]):
    """The reference's SOP loss per sample, its corrected prediction q and (y, U, V, hard),
    computed here from model's u and v."""
    eps = 1e-4
    y = torch.eye(C)[labels]
    U = (model.u.detach()[index] ** 2 * y).clamp(0, 1)
    V = (model.v.detach()[index] ** 2 * (1 - y)).clamp(0, 1)
    q = (torch.softmax(logits, 1) + U - V).clamp(min=eps)
    q = (q / q.sum(1, keepdim=True).clamp(min=eps)).clamp(eps, 1)
    hard = torch.eye(C)[logits.argmax(1)]
    losses = -(y * q.log()).sum(1) + ((hard + U - V - y) ** 2).sum(1)
    return losses, q, (y, U, V, hard)


def test_sop_step_is_the_references_loss_of_u_and_v() -> None:
    """l_i = -<y, log q> + ||onehot(argmax z) + U - V - y||², q the prediction plus U - V
    floored, L1-normalized and clamped; the objective is VRNL's of these l_i."""
    model = sop()
    with torch.no_grad():
        model.u.copy_(torch.rand(N, 1))
        model.v.copy_(torch.rand(N, C) * 0.8)
    index, labels = [4, 0, 9], [1, 3, 1]
    batch = batch_of(index, labels)
    logits = model(batch["image"]).detach()
    objective = model.training_objective(batch)

    expected, q, (y, U, V, hard) = sop_reference(model, logits, index, labels)
    [step] = model._steps
    torch.testing.assert_close(step.losses, expected)
    torch.testing.assert_close(objective, vrnl(expected, ALPHA))
    # at alpha 0 the batch mean is the reference's loss: mean CE of q + MSE summed / batch
    model.alpha = 0.0
    mse = F.mse_loss(hard + U - V, y, reduction="sum") / len(labels)
    ce = torch.mean(-torch.sum(y * torch.log(q), dim=-1))
    torch.testing.assert_close(model.training_objective(batch), ce + mse)


def test_sop_moves_only_the_batchs_u_and_v_at_their_own_rates() -> None:
    """One SGD step of u (lr_u) and v (lr_v): the batch's rows move, the others keep their
    values; v learns through the squared term only (q sees V without gradient)."""
    model = sop(lr_u=1.0, lr_v=10.0)
    with torch.no_grad():
        model.u.fill_(0.5)
        model.v.fill_(0.3)
    batch = batch_of([2, 6], [0, 1])
    model.training_objective(batch).backward()
    _, opt_uv = model.configure_optimizers()[0]
    grad_u, grad_v = model.u.grad.clone(), model.v.grad.clone()
    before_u, before_v = model.u.detach().clone(), model.v.detach().clone()
    opt_uv.step()
    others = [i for i in range(N) if i not in (2, 6)]
    assert torch.equal(model.u[others], before_u[others])
    assert torch.equal(model.v[others], before_v[others])
    torch.testing.assert_close(model.u.detach(), before_u - 1.0 * grad_u)
    torch.testing.assert_close(model.v.detach(), before_v - 10.0 * grad_v)
    assert grad_u[[2, 6]].abs().sum() > 0 and grad_v[[2, 6]].abs().sum() > 0


def test_sop_u_and_v_are_parameters_of_the_checkpoint_shape() -> None:
    model = sop()
    state = model.state_dict()
    assert state["u"].shape == (N, 1) and state["v"].shape == (N, C)
    other = SOP(
        network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2)
    )  # made outside a run
    other.load_state_dict(state)
    assert torch.equal(other.v, model.v) and torch.equal(other.u, model.u)


def test_sopplus_adds_the_weighted_consistency_and_class_balance_terms() -> None:
    """SOP+ (shengliu66/SOP model/loss.py:102-127): l_i + 0.9 KL(sg(p_weak) ‖ p_strong) per
    sample, VRNL over those, plus 0.1 · the cross-entropy of the uniform prior to the mean
    corrected prediction; the network sees both views in one pass."""
    torch.manual_seed(0)
    model = SOPPlus(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2),
                    alpha=ALPHA)  # fmt: skip
    model.init_parameters(N)
    with torch.no_grad():
        model.u.copy_(torch.rand(N, 1))
        model.v.copy_(torch.rand(N, C) * 0.8)
    index, labels = [4, 0, 9, 2], [1, 3, 1, 0]
    batch = batch_of(index, labels)
    generator = torch.Generator().manual_seed(5)
    batch["strong"] = torch.randn(1, len(index), 1, 2, 2, generator=generator)
    logits = model(batch["image"]).detach()
    strong_logits = model(batch["strong"][0]).detach()
    objective = model.training_objective(batch)

    eps = 1e-4
    sop_losses, q, _ = sop_reference(model, logits, index, labels)
    p, p_strong = torch.softmax(logits, 1), torch.softmax(strong_logits, 1)
    kl = (p * (p.log() - p_strong.log())).sum(1)
    expected = sop_losses + 0.9 * kl
    balance = -(torch.full((C,), 1.0 / C) * q.mean(0).clamp(eps, 1).log()).sum()
    [step] = model._steps
    torch.testing.assert_close(step.losses, expected)
    torch.testing.assert_close(objective, vrnl(expected, ALPHA) + 0.1 * balance)
    # the strong view gets the consistency's gradient; the weak prediction is its target only
    model.zero_grad()
    model.training_objective(batch).backward()
    assert model.net.parameters().__next__().grad.abs().sum() > 0
    with pytest.raises(InputError, match="ratio_consistency must be positive"):
        SOPPlus(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2),
                ratio_consistency=0.0)  # fmt: skip


# -------------------------------------------------------------------------------- CORES²
def cores(**kwargs) -> CORES:
    torch.manual_seed(0)
    return CORES(
        network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2), alpha=ALPHA, **kwargs
    )


class _Trainer:
    """What CORES² reads of a trainer outside a run: the epoch and a sum over processes."""

    def __init__(self, epoch: int) -> None:
        self.current_epoch, self.fast_dev_run, self.max_epochs = epoch, False, 100
        self.strategy = type("S", (), {"reduce": staticmethod(lambda t, reduce_op: t)})()


def at_epoch(model: CORES, epoch: int) -> CORES:
    model._trainer = _Trainer(epoch)
    model.beta_now.fill_(model.beta_at(model.stage_epoch()))
    return model


def test_cores_beta_follows_the_references_plan_and_divides_the_lr() -> None:
    """β: 10 epochs of 0, then linspace(0, 2, 30), then 2; lr / (1 + β)."""
    model = cores()
    plan = [0.0] * 10 + torch.linspace(0, 2, 30).tolist() + [2.0] * 60
    assert [model.beta_at(t) for t in range(100)] == pytest.approx(plan, abs=1e-6)
    model._trainer = _Trainer(0)
    assert model.lr_factor(25) == pytest.approx(1 / (1 + plan[25]))


def test_cores_step_is_the_confidence_regularized_loss_over_the_sieved_samples() -> None:
    """l_i = CE_i - β Σ_j P_j (-log(p_ij + 1e-8)); kept: CE_i - mean_j(-log(p_ij + 1e-8)) <= 0;
    the objective is VRNL's over the kept samples; the dropped ones count per noisy class."""
    model = at_epoch(cores(sieve_epoch=0, beta_start=0, beta_ramp_epochs=1, beta=1.5), 5)
    prior = torch.tensor([0.1, 0.2, 0.3, 0.4])
    model.prior.copy_(prior)
    labels = [0, 1, 2, 3, 0, 1, 2, 3]
    batch = batch_of(list(range(8)), labels, seed=3)
    logits = model(batch["image"]).detach()
    objective = model.training_objective(batch)

    p = torch.softmax(logits, 1)
    ce = -torch.log_softmax(logits, 1)[torch.arange(8), batch["label"]]
    expected = ce - 1.5 * (prior * -torch.log(p + 1e-8)).sum(1)
    kept = ce - (-torch.log(p + 1e-8)).mean(1) <= 0
    assert 0 < int(kept.sum()) < 8  # the sieve keeps some, drops some
    [step] = model._steps
    torch.testing.assert_close(step.losses, expected)
    assert torch.equal(step.used, kept)
    torch.testing.assert_close(objective, vrnl(expected[kept], ALPHA))
    dropped = torch.bincount(batch["label"][~kept], minlength=C).float()
    assert torch.equal(model.dropped, dropped)


def test_cores_keeps_every_sample_before_the_sieve_epoch_and_revises_the_prior() -> None:
    model = at_epoch(cores(), 30)  # the reference's epoch 30 is the last unsieved one
    batch = batch_of(list(range(6)), [0, 1, 2, 3, 0, 1])
    model.training_objective(batch)
    assert model._steps[0].used is None and model.dropped.sum() == 0
    # after an epoch: P = (P0 · n - dropped) / sum
    model.initial_prior.copy_(torch.tensor([0.25, 0.25, 0.25, 0.25]))
    model.num_train.fill_(100.0)
    model.dropped = torch.tensor([5.0, 0.0, 10.0, 0.0])
    model.log = lambda *args, **kwargs: None
    model.epoch_stats.compute = lambda reduce: {}
    model.on_train_epoch_end()
    torch.testing.assert_close(model.prior, torch.tensor([20.0, 25.0, 15.0, 25.0]) / 85.0)
