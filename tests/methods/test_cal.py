"""CAL: the per-sample losses and the batch loss against a hand computation of its reference's
rule on a tiny batch (value and gradient), the covariance term as the covariance it estimates,
D̂ (the sieve's rule, T̂ and P̂), β_t and the learning rate, the hand-over from the CORES² warm-up
to CAL in a real fit (D̂ from the warm-up model, a new network, ℓ̄ of the epoch before), compiled
= eager with a D̂, option validation and refusals, the groups and the preset resolved through
the command line, and one short CAL-VRNL run on the digits."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
import yaml
from torch import nn

from noisylabels.data import DigitsDataModule
from noisylabels.errors import InputError
from noisylabels.methods import CAL
from noisylabels.methods.cal import beta_at, distill

from conftest import CONFIGS, read_results, tiny_trainer

C = 3
ALPHA = 0.1
# D̂ of 8 samples (dataset indices 0-7): class 0 has noisy labels 0, 1, 0 (T̂[0] = [2/3, 1/3, 0]);
# class 1 noisy 1, 2 (T̂[1] = [0, 1/2, 1/2]); class 2 noisy 2, 2 (T̂[2, 2] = 1: outside the
# covariance term); index 5 is not in D̂
DISTILLED = [0, 0, 1, 1, 2, -1, 0, 2]
NOISY = [0, 1, 1, 2, 2, 0, 0, 2]
CLEAN = [0, 0, 1, 1, 2, 0, 1, 2]
T_HAND = [[2 / 3, 1 / 3, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 1.0]]
P_HAND = [3 / 7, 2 / 7, 2 / 7]
INDEX = [0, 2, 4, 5, 1, 3]  # the batch: D̂ classes 0, 1, 2, none, 0, 1
LOGITS = [
    [2.0, -1.0, 0.5],
    [0.0, 0.3, -0.2],
    [-1.5, 1.0, 2.5],
    [0.7, 0.7, -2.0],
    [1.2, 0.4, -0.3],
    [-0.5, 2.0, 1.0],
]
MEANS = [[0.4, 1.5, 2.0], [1.1, 0.2, 0.9], [3.0, 2.0, 0.1]]  # ℓ̄ of the epoch before
PRIOR = [0.5, 0.3, 0.2]
BETA = 0.7


def make(**kwargs) -> CAL:
    torch.manual_seed(0)
    kwargs.setdefault("alpha", ALPHA)
    kwargs.setdefault("schedule", {"warmup_epochs": 1, "main_epochs": 4, "milestones": []})
    return CAL(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 1, 2), **kwargs)


def in_cal_stage(model: CAL) -> CAL:
    """``model`` in its own stage with the D̂ above, ℓ̄, the prior and ``β_t`` set."""
    model.load_state_dict({**model.state_dict(), "main_started": torch.tensor(True)})
    model.store_distillation(torch.tensor(DISTILLED), torch.tensor(NOISY))
    model.loss_means.copy_(torch.tensor(MEANS))
    model.prior.copy_(torch.tensor(PRIOR))
    model.beta_now.fill_(BETA)
    return model


def batch_of(index: list[int]) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    labels = torch.tensor([NOISY[i] for i in index])
    return {
        "image": torch.randn(len(index), 1, 1, 2, generator=gen),
        "label": labels,
        "clean_label": torch.tensor([CLEAN[i] for i in index]),
        "index": torch.tensor(index),
    }


def softmax(z: list[float]) -> list[float]:
    e = [math.exp(v) for v in z]
    return [v / sum(e) for v in e]


def dlog(p: list[float], j: int, k: int, eps: float) -> float:
    """``∂(-log(p_j + eps)) / ∂z_k`` of ``p = softmax(z)``."""
    return -p[j] / (p[j] + eps) * ((j == k) - p[k])


def hand(logits: list[list[float]], index: list[int]) -> tuple[list[float], float, list]:
    """Per-sample ``l_n``, the reference's batch loss and ``∂l_n / ∂z_n``, written out."""
    labels = [NOISY[i] for i in index]
    classes = [DISTILLED[i] for i in index]
    used = [d >= 0 and T_HAND[d][y] < 1 for d, y in zip(classes, labels, strict=True)]
    pairs = list(zip(classes, used, strict=True))
    count = {i: sum(1 for d, u in pairs if u and d == i) for i in range(C)}
    n = len(index)
    losses, grads, base, covariance = [], [], 0.0, 0.0
    for z, y, d, u in zip(logits, labels, classes, used, strict=True):
        p = softmax(z)
        ce = -math.log(p[y] + 1e-8)
        cr = sum(PRIOR[j] * -math.log(p[j] + 1e-5) for j in range(C))
        grad = [
            dlog(p, y, k, 1e-8) - BETA * sum(PRIOR[j] * dlog(p, j, k, 1e-5) for j in range(C))
            for k in range(C)
        ]
        loss = ce - BETA * cr
        base += loss / n
        if u:
            centred = [(j == y) - T_HAND[d][j] for j in range(C)]
            c = sum(centred[j] * (-math.log(p[j] + 1e-5) - MEANS[d][j]) for j in range(C))
            # the reference's term: Σ_i P̂_i Σ_j (1/B_i) Σ_{n: ŷ_n = i} centred_j (ℓ_nj - ℓ̄_ij)
            covariance += P_HAND[d] / count[d] * c
            scale = n * P_HAND[d] / count[d]
            loss -= scale * c
            for k in range(C):
                grad[k] -= scale * sum(centred[j] * dlog(p, j, k, 1e-5) for j in range(C))
        losses.append(loss)
        grads.append(grad)
    return losses, base - covariance, grads


def vrnl_by_hand(losses: list[float], alpha: float = ALPHA) -> float:
    mean = sum(losses) / len(losses)
    return mean - alpha * sum((v - mean) ** 2 for v in losses) / len(losses)


# --------------------------------------------------------------------------- D̂, T̂ and P̂
def test_the_distillation_gives_the_references_t_hat_and_prior() -> None:
    model = make()
    details = model.store_distillation(
        torch.tensor(DISTILLED), torch.tensor(NOISY), torch.tensor(CLEAN)
    )
    assert model.T.tolist() == [pytest.approx(row) for row in T_HAND]
    assert model.distilled_prior.tolist() == pytest.approx(P_HAND)
    assert model.distilled.tolist() == DISTILLED and not model.loss_means.any()
    assert details["distilled"] == 7 and details["diag"] == pytest.approx([2 / 3, 0.5, 1.0])
    assert details["kept_noisy"] == pytest.approx(5 / 7)  # ŷ = y~ at indices 0, 2, 4, 6, 7
    assert details["distilled_accuracy"] == pytest.approx(6 / 7)  # ŷ = y but at index 6
    # a class D̂ never holds (no sample reads its row) gets the identity's: T̂ row-stochastic
    model.store_distillation(torch.tensor([0, 0, 2, -1]), torch.tensor([0, 1, 2, 1]))
    assert model.T.tolist() == [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert model.distilled_prior.tolist() == pytest.approx([2 / 3, 0.0, 1 / 3])


def test_the_sieve_keeps_a_confident_noisy_label_and_else_takes_the_prediction() -> None:
    """``-log(p_y + 1e-8) - mean_j(-log(p_j + 1e-8)) < -8``: the noisy label; above: argmax z."""
    logits = torch.tensor([[20.0, 0.0, 0.0], [20.0, 0.0, 0.0], [0.0, 3.0, 1.0], [1.0, 1.0, 1.0]])
    labels = torch.tensor([0, 2, 0, 2])
    gaps = []
    for z, y in zip(logits.tolist(), labels.tolist(), strict=True):
        losses = [-math.log(p + 1e-8) for p in softmax(z)]
        gaps.append(losses[y] - sum(losses) / C)
    assert gaps[0] < -8 < min(gaps[1:])
    assert distill(logits, labels, -8.0).tolist() == [0, 0, 1, 0]  # argmax of ties: the first
    assert distill(logits, labels, 100.0).tolist() == labels.tolist()  # every label kept
    assert distill(logits, labels, gaps[2]).tolist()[2] == -1  # exactly at it: in neither


# --------------------------------------------------------------------------- the loss
def test_the_loss_is_the_references_batch_loss_by_hand_value_and_gradient() -> None:
    """``l_n = CE - β CR - s_n c_n`` (``s_n = B P̂_ŷ / B_ŷ``, 0 outside the covariance term)
    per sample, whose mean is the reference's ``CE - β CR - Σ_i P̂_i Σ_j (1/B_i) Σ_n (1{y~ = j}
    - T̂_ij)(ℓ_nj - ℓ̄_ij)``; and its gradient."""
    model = in_cal_stage(make())
    batch = batch_of(INDEX)
    inputs = model.covariance_inputs(batch)
    assert inputs["cal_scale"].tolist() == pytest.approx(
        [6 * 3 / 7 / 2, 6 * 2 / 7 / 2, 0.0, 0.0, 6 * 3 / 7 / 2, 6 * 2 / 7 / 2]
    )
    logits = torch.tensor(LOGITS, requires_grad=True)
    losses = model.per_sample_loss(logits, {**batch, **inputs})
    expected, batch_loss, grads = hand(LOGITS, INDEX)
    assert losses.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert float(losses.detach().mean()) == pytest.approx(batch_loss, rel=1e-5, abs=1e-6)
    losses.sum().backward()
    assert logits.grad.tolist() == [pytest.approx(g, rel=1e-4, abs=1e-6) for g in grads]
    # validation (no D̂ in the batch): the regularized CE alone
    plain = model.per_sample_loss(logits.detach(), batch)
    ce_cr = [
        -math.log(softmax(z)[y] + 1e-8)
        - BETA * sum(PRIOR[j] * -math.log(softmax(z)[j] + 1e-5) for j in range(C))
        for z, y in zip(LOGITS, batch["label"].tolist(), strict=True)
    ]
    assert plain.tolist() == pytest.approx(ce_cr, rel=1e-5)


def test_the_training_step_is_vrnl_of_the_cal_losses_and_sums_the_class_losses() -> None:
    model = in_cal_stage(make())
    batch = batch_of(INDEX)
    model._steps = []
    objective = model.training_objective(batch)
    with torch.no_grad():
        logits = model(batch["image"]).tolist()
    expected, _, _ = hand(logits, INDEX)
    [step] = model._steps
    assert step.losses.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert float(objective.detach()) == pytest.approx(vrnl_by_hand(expected), rel=1e-5, abs=1e-6)
    # ℓ_nj of the samples in the covariance term, summed by D̂-class for ℓ̄
    sums, counts = torch.zeros(C, C), torch.zeros(C)
    for n, i in enumerate(INDEX):
        d = DISTILLED[i]
        if d >= 0 and T_HAND[d][NOISY[i]] < 1:
            sums[d] += torch.tensor([-math.log(p + 1e-5) for p in softmax(logits[n])])
            counts[d] += 1
    torch.testing.assert_close(model.loss_sums, sums)
    assert model.loss_counts.tolist() == counts.tolist() == [2.0, 2.0, 0.0]


def test_the_covariance_term_is_the_covariance_it_estimates() -> None:
    """With ``T̂`` and ``ℓ̄`` the batch's own means over each D̂-class, the term is ``Σ_i P̂_i Σ_j
    Cov_i(1{y~ = j}, ℓ_j)``, the population covariance within class ``i`` (the paper's
    second-order correction), and 0 where ``ℓ`` does not vary with the noisy label."""
    gen = torch.Generator().manual_seed(3)
    n, c = 40, 4
    model = CAL(network={"backbone": "mlp"}, num_classes=c, input_shape=(1, 1, 2),
                schedule={"warmup_epochs": 1})  # fmt: skip
    model.load_state_dict({**model.state_dict(), "main_started": torch.tensor(True)})
    distilled = torch.randint(0, c, (n,), generator=gen)
    flips = torch.randint(0, c, (n,), generator=gen)
    noisy = torch.where(torch.rand(n, generator=gen) < 0.6, distilled, flips)
    model.store_distillation(distilled, noisy)
    logits = torch.randn(n, c, generator=gen) * 2
    ell = -torch.log(torch.softmax(logits, 1) + 1e-5)
    means = torch.stack([ell[distilled == i].mean(0) for i in range(c)]).nan_to_num()
    model.loss_means.copy_(means)
    model.beta_now.fill_(0.0)
    batch = {"label": noisy, "index": torch.arange(n)}
    losses = model.per_sample_loss(logits, {**batch, **model.covariance_inputs(batch)})
    term = float(model.per_sample_loss(logits, batch).mean() - losses.mean())
    expected = 0.0
    for i in range(c):
        rows = distilled == i
        indicator = nn.functional.one_hot(noisy[rows], c).float()
        for j in range(c):
            pair = torch.stack([indicator[:, j], ell[rows, j]])
            expected += float(model.distilled_prior[i]) * float(torch.cov(pair, correction=0)[0, 1])
    assert abs(expected) > 1e-3 and term == pytest.approx(expected, rel=1e-4)
    flat = logits.clone()
    flat[:] = logits[0]  # the same prediction for every sample: no covariance
    model.loss_means.copy_((-torch.log(torch.softmax(flat, 1) + 1e-5))[:1].expand(c, c))
    flat_losses = model.per_sample_loss(flat, {**batch, **model.covariance_inputs(batch)})
    torch.testing.assert_close(flat_losses, model.per_sample_loss(flat, batch))


def test_the_warmup_is_cores_loss_with_the_square_root_prior() -> None:
    model = make(schedule={"warmup_epochs": 2})
    model.warmup_class_prior.copy_(torch.tensor(PRIOR))
    model.beta_now.fill_(BETA)
    batch = batch_of(INDEX)
    model._steps = []
    objective = model.training_objective(batch)
    with torch.no_grad():
        logits = model(batch["image"]).tolist()
    expected = [
        -math.log(softmax(z)[y] + 1e-8)
        - BETA * sum(PRIOR[j] * -math.log(softmax(z)[j] + 1e-5) for j in range(C))
        for z, y in zip(logits, batch["label"].tolist(), strict=True)
    ]
    assert model._steps[0].losses.tolist() == pytest.approx(expected, rel=1e-5)
    assert float(objective.detach()) == pytest.approx(sum(expected) / len(expected), rel=1e-5)


# --------------------------------------------------------------------------- β_t and the rate
def test_beta_follows_the_references_segments_and_divides_the_learning_rate() -> None:
    """``SegAlpha`` over [10, 40, 80] with [0, top, top]: 0 to epoch 10, then top/30 more every
    epoch to top at 40; every epoch's rate divided by ``1 + β_t``, with the milestones."""
    assert [beta_at(t, 10, 30, 2.0) for t in (0, 9, 10, 11, 25, 40, 99)] == pytest.approx(
        [0, 0, 0, 2 / 30, 1.0, 2.0, 2.0]
    )
    assert beta_at(3, 3, 0, 1.5) == 1.5 and beta_at(2, 3, 0, 1.5) == 0.0
    schedule = {"warmup_epochs": 3, "warmup_milestones": [2], "main_epochs": 3, "milestones": [2]}
    model = make(schedule=schedule, beta_start=0, beta_ramp_epochs=1, warmup_beta=2.0, beta=1.0,
                 optim={"lr": 0.1})  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = model.make_scheduler(optimizer)
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    warm = [0.1, 0.1 / 3, 0.01 / 3]  # β 0, 2, 2; ÷10 at warm-up epoch 2
    main = [0.1, 0.1 / 2, 0.01 / 2]  # β 0, 1, 1; ÷10 at the stage's epoch 2
    assert rates == pytest.approx(warm + main)
    assert make(schedule=schedule, scale_lr=False).lr_factor(1) == 1.0


# --------------------------------------------------------------------------- the hand-over
class Handover(L.Callback):
    """Records the last warm-up model's D̂ (by the sieve's rule, from its eval-mode outputs
    without augmentation) and weights, what the first CAL step sees, and the class losses of
    the first CAL epoch's steps."""

    def __init__(self) -> None:
        self.expected: torch.Tensor | None = None
        self.warm_state: dict[str, torch.Tensor] = {}
        self.seen: dict[int, dict] = {}
        self.sums, self.counts = torch.zeros(10, 10), torch.zeros(10)

    @torch.no_grad()
    def on_train_epoch_end(self, trainer, model) -> None:
        if trainer.current_epoch != 1:  # the last of the 2 warm-up epochs
            return
        facts = model.data_facts()
        threshold = model.hparams.sieve_threshold
        expected = torch.full((facts.num_samples,), -1)
        model.eval()
        for batch in facts.eval_batches(model.device, None, 0, 1, "train"):
            logits = model(batch["image"])
            losses = -torch.log(torch.softmax(logits, 1) + 1e-8)
            labels = batch["label"]
            gap = losses.gather(1, labels[:, None]).squeeze(1) - losses.mean(1)
            assert not (gap == threshold).any()
            expected[batch["index"]] = torch.where(gap < threshold, labels, logits.argmax(1))
        model.train()
        self.expected = expected
        self.warm_state = {k: v.clone() for k, v in model.net.state_dict().items()}

    def on_train_batch_start(self, trainer, model, batch, batch_idx) -> None:
        if batch_idx == 0 and trainer.current_epoch >= 2:
            self.seen[trainer.current_epoch] = {
                "in_warmup": model.in_warmup,
                "distilled": model.distilled.clone(),
                "T": model.T.clone(),
                "loss_means": model.loss_means.clone(),
                "beta": float(model.beta_now),
                "lr": trainer.optimizers[0].param_groups[0]["lr"],
                "net": {k: v.clone() for k, v in model.net.state_dict().items()},
            }

    def on_train_batch_end(self, trainer, model, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch != 2:
            return
        step = outputs["steps"][0]
        classes = model.distilled[step.index]
        kept = model.T[classes.clamp_min(0), step.labels]
        used = (classes >= 0) & (kept < 1)
        ell = -torch.log(torch.softmax(step.logits.float(), 1) + 1e-5)
        for n in torch.nonzero(used).flatten().tolist():
            self.sums[classes[n]] += ell[n]
            self.counts[classes[n]] += 1


def test_the_warmup_model_gives_d_hat_and_cal_starts_a_new_network() -> None:
    torch.manual_seed(0)
    dm = DigitsDataModule(noise_rate=0.3, batch_size=64)
    model = CAL(
        network={"backbone": "mlp"}, input_shape=(1, 8, 8), beta_start=0, beta_ramp_epochs=1,
        sieve_threshold=-3.0, optim={"lr": 0.1},
        schedule={"warmup_epochs": 2, "main_epochs": 2, "milestones": [],
                  "main_stage_init": "reinit"},
    )  # fmt: skip
    probe = Handover()
    trainer = tiny_trainer(max_epochs=4, limit_val_batches=1, callbacks=[probe])
    trainer.fit(model, dm)
    first, second = probe.seen[2], probe.seen[3]
    assert not first["in_warmup"] and model.estimation_epoch == 1
    facts = model.data_facts()
    train = facts.train_indices
    assert torch.equal(first["distilled"], probe.expected)
    assert (probe.expected[train] >= 0).all()  # every training sample has a D̂ label here
    assert (probe.expected[train] == facts.noisy_labels[train]).float().mean() > 0.2  # some kept
    counts = torch.zeros(10, 10)
    for i, j in zip(
        probe.expected[train].tolist(), facts.noisy_labels[train].tolist(), strict=True
    ):
        counts[i, j] += 1
    rows = counts.sum(1, keepdim=True)
    expected_T = torch.where(rows > 0, counts / rows.clamp_min(1), torch.eye(10))
    torch.testing.assert_close(first["T"], expected_T)
    assert model.estimate_details["distilled"] == len(train)
    # a newly initialised network, ℓ̄ 0 in the first CAL epoch, β_0 = 0 and the stage's lr
    assert all(not torch.equal(first["net"][k], v) for k, v in probe.warm_state.items()
               if v.is_floating_point())  # fmt: skip
    assert not first["loss_means"].any() and first["beta"] == 0.0
    assert first["lr"] == pytest.approx(0.1)
    # ℓ̄ of the next epoch: the first CAL epoch's mean class losses per D̂-class
    means = probe.sums / probe.counts.clamp_min(1)[:, None]
    torch.testing.assert_close(second["loss_means"], means, rtol=1e-4, atol=1e-5)
    assert probe.counts.sum() > 0 and second["beta"] == 1.0
    assert second["lr"] == pytest.approx(0.1 / 2)  # ÷ (1 + β_1)
    # D̂ is state: in the state dict, restored by a load
    restored = CAL(network={"backbone": "mlp"}, input_shape=(1, 8, 8),
                   schedule={"warmup_epochs": 2})  # fmt: skip
    restored.load_state_dict(model.state_dict())
    assert torch.equal(restored.distilled, model.distilled.cpu())
    assert torch.equal(restored.T, model.T) and torch.equal(restored.loss_means, model.loss_means)


def test_compiled_step_equals_eager_after_the_class_means_and_beta_change() -> None:
    """The compiled loss reads T̂, ℓ̄, the prior and ``β_t`` as they are at each step (buffers
    changed in place between epochs), as the eager one does."""
    eager, compiled = (
        in_cal_stage(make(speed={"compile": c, "compile_backend": "aot_eager"}))
        for c in (False, True)
    )
    for model in (eager, compiled):
        model.resolve_acceleration(torch.device("cpu"))
    assert compiled.speed.mode == "default" and eager.speed.mode is None
    batch = batch_of(INDEX)
    for step in range(2):
        if step:
            for model in (eager, compiled):
                model.loss_means.mul_(0.5).add_(1.0)
                model.beta_now.fill_(0.2)
        values = []
        for model in (eager, compiled):
            model.zero_grad(set_to_none=True)
            loss = model.training_objective(batch)
            loss.backward()
            values.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
        torch.testing.assert_close(values[1][0], values[0][0], rtol=1e-5, atol=1e-6)
        for g_c, g_e in zip(values[1][1], values[0][1], strict=True):
            torch.testing.assert_close(g_c, g_e, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"beta": -0.5}, r"--model\.beta must be a finite number >= 0"),
        ({"warmup_beta": math.nan}, r"--model\.warmup_beta must be a finite number >= 0"),
        ({"beta": math.inf}, r"--model\.beta must be a finite number >= 0"),
        ({"beta_start": -1}, r"--model\.beta_start must be a whole number of epochs >= 0"),
        ({"beta_ramp_epochs": 2.5}, r"--model\.beta_ramp_epochs must be a whole number"),
        ({"warmup_prior": "uniform"}, r"--model\.warmup_prior must be one of \('sqrt', 'noisy'\)"),
        ({"prior_scale": 0.0}, r"--model\.prior_scale must be a finite number > 0"),
        ({"prior_scale": -10.0}, r"--model\.prior_scale must be a finite number > 0"),
        ({"sieve_threshold": -math.inf}, r"--model\.sieve_threshold must be a finite number"),
        ({"schedule": {"warmup_epochs": 0}}, r"CAL's D̂ .* is estimated from the warm-up model"),
    ],
)
def test_bad_options_are_refused_with_one_sentence(options: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        make(**options)


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"beta": 0.0, "warmup_beta": 0.0, "beta_ramp_epochs": 5}, "beta_ramp_epochs"),
        ({"beta": 0.0, "warmup_beta": 0.0, "prior_scale": 10.0}, "prior_scale"),
        ({"beta_start": 0, "warmup_beta": 0.0, "warmup_prior": "noisy"}, "warmup_prior"),
        ({"beta_start": 3}, "beta_start"),  # β_t 0 through the 1 + 4 epochs
        ({"beta_start": 1, "beta_ramp_epochs": 0, "warmup_beta": 1.0}, "warmup_beta"),
        ({"beta_start": 4, "beta_ramp_epochs": 0, "beta": 2.0, "warmup_beta": 0.0}, "beta"),
    ],
)
def test_an_option_the_run_would_never_use_is_refused(options: dict, refused: str) -> None:
    with pytest.raises(InputError, match=rf"--model\.{refused} .* would have no effect"):
        make(**options).check_options_used()


def test_the_options_that_act_are_accepted() -> None:
    for options in (
        {},
        {"beta_start": 0, "beta_ramp_epochs": 0, "warmup_prior": "noisy", "prior_scale": 10.0},
        {"beta_start": 1, "beta_ramp_epochs": 1, "beta": 2.0},  # the CAL stage's only
        {"beta": 0.0, "warmup_beta": 0.0},  # plain CE in both stages
        {"sieve_threshold": -2.0, "scale_lr": True},
    ):
        make(**options).check_options_used()
    assert make(beta_start=0, beta_ramp_epochs=1).val_loss_changes()
    assert make().val_loss_changes() is None  # β_t 0 in all 4 epochs of the stage


# --------------------------------------------------------------------------- configs, CLI
def _resolved(capsys, *files: str) -> dict:
    from noisylabels.cli import run

    argv = ["fit"]
    for name in files:
        argv += ["--config", str(CONFIGS / name)]
    with pytest.raises(SystemExit):
        run([*argv, "--print_config"])
    return yaml.safe_load(capsys.readouterr().out)


def test_the_groups_and_preset_resolve_to_the_reference_protocol(capsys) -> None:
    config = _resolved(capsys, "data/cifar10.yaml", "method/cal.yaml")
    args = config["model"]["init_args"]
    assert config["model"]["class_path"] == "noisylabels.methods.CAL"
    assert args["alpha"] == 0.0 and args["beta"] == 1.0 and args["warmup_beta"] == 2.0
    assert (args["beta_start"], args["beta_ramp_epochs"], args["sieve_threshold"]) == (10, 30, -8)
    assert args["warmup_prior"] == "sqrt" and args["prior_scale"] == 1.0 and args["scale_lr"]
    schedule = args["schedule"]
    assert (schedule["warmup_epochs"], schedule["main_epochs"]) == (66, 100)
    assert schedule["warmup_milestones"] == [60] and schedule["milestones"] == [60]
    assert schedule["warmup_model"] == "last" and schedule["main_stage_init"] == "reinit"
    assert schedule["warmup_momentum"] is None
    assert args["optim"] == {**args["optim"], "optimizer": "sgd", "lr": 0.1, "momentum": 0.9,
                             "weight_decay": 5e-4}  # fmt: skip
    assert config["data"]["init_args"]["batch_size"] == 128
    vrnl = _resolved(capsys, "data/mnist.yaml", "method/cal_vrnl.yaml", "protocol/vrnl_sgd.yaml")
    assert vrnl["model"]["init_args"]["alpha"] == 0.1
    assert vrnl["model"]["init_args"]["schedule"]["milestones"] == [30, 60]
    assert vrnl["model"]["init_args"]["optim"]["lr"] == 0.01
    c100 = _resolved(capsys, "cifar100_cal.yaml")["model"]["init_args"]
    assert c100["warmup_beta"] == 1.0 and c100["prior_scale"] == 10.0 and c100["beta"] == 1.0
    assert c100["schedule"] == schedule and c100["optim"] == args["optim"]


def test_cal_vrnl_trains_through_the_cli_and_learns(run_cli, tmp_path) -> None:
    """The CORES² warm-up, D̂, then CAL-VRNL on the digits, with the groups."""
    run_cli(
        "fit",
        *("--config", str(CONFIGS / "data" / "digits.yaml")),
        *("--config", str(CONFIGS / "method" / "cal_vrnl.yaml")),
        *("--model.schedule.warmup_epochs", "4", "--model.schedule.warmup_milestones", "[]"),
        *("--model.schedule.main_epochs", "4", "--model.schedule.milestones", "[]"),
        *("--model.beta_start", "1", "--model.beta_ramp_epochs", "2", "--model.alpha", "0.05"),
        *("--model.optim.lr", "0.05", "--trainer.accelerator", "cpu"),
        *("--data.noise_rate", "0.3", "--trainer.limit_val_batches", "2"),
    )
    results = read_results(tmp_path)
    assert results["method"] == "CAL-VRNL" and results["alpha"] == 0.05
    assert results["epochs"] == 8 and results["best_epoch"] >= 4  # selected after the warm-up
    assert results["estimation_epoch"] == 3 and results["t_estimate"]["estimator"] == "cal_sieve"
    assert results["t_estimation_error"] is not None  # T̂ of D̂ against the true T
    assert results["test_acc"] > 0.6 and results["health"] == "ok"
