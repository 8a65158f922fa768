"""DivideMix: one training step's objective on fixed inputs equals the paper's MixMatch objective
with co-refinement, co-guessing and the prior penalty (computed here independently, the mixup
draw fixed); the division is the reference's Gaussian mixture (scikit-learn, its constants) on
min-max normalized losses; the division is state."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.mixture import GaussianMixture

from noisylabels.data import DigitsDataModule
from noisylabels.errors import InputError
from noisylabels.methods import DivideMix
from noisylabels.methods.core.evaluation import TrainingPass
from noisylabels.methods.dividemix import STATE_KEY, clean_probability, stateful

C, B, N = 4, 6, 12
ALPHA = 0.1


def model_of(**kwargs) -> DivideMix:
    torch.manual_seed(0)
    options = {"lambda_u": 3.0, "lambda_u_ramp_epochs": 0, "temperature": 0.5, **kwargs}
    return DivideMix(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [8]}},
        num_classes=C,
        input_shape=(1, 2, 2),
        alpha=ALPHA,
        **options,
    )


def batch_of(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    views = torch.randn(2, B, 1, 2, 2, generator=gen)
    return {
        "image": views[0],
        "views": views,
        "label": torch.tensor([0, 1, 2, 3, 1, 2]),
        "clean_label": torch.tensor([0, 1, 2, 3, 1, 2]),
        "index": torch.tensor([7, 0, 3, 11, 5, 9]),
    }


def sharpen(p: torch.Tensor, T: float) -> torch.Tensor:
    q = p ** (1 / T)
    return q / q.sum(1, keepdim=True)


def vrnl(losses: torch.Tensor, alpha: float) -> torch.Tensor:
    mean = losses.mean()
    return mean - alpha * ((losses - mean) ** 2).mean()


def expected_objective(model: DivideMix, batch, perm: torch.Tensor, lam: float, k: int):
    """The network ``k`` part of the objective, from the paper's definitions."""
    nets = model.networks
    T, j = 0.5, 1 - k
    views, y = batch["views"], F.one_hot(batch["label"], C).float()
    w = model.clean_prob[j, batch["index"]][:, None]  # the other network's division
    labeled = (w > 0.5).squeeze(1)
    with torch.no_grad():
        own = [F.softmax(nets[k](v.reshape(B, -1)), 1) for v in views]
        peer = [F.softmax(nets[j](v.reshape(B, -1)), 1) for v in views]
        refined = sharpen(w * y + (1 - w) * (own[0] + own[1]) / 2, T)
        guessed = sharpen((own[0] + own[1] + peer[0] + peer[1]) / 4, T)
        target = torch.where(labeled[:, None], refined, guessed)
    x = torch.cat([views[0], views[1]]).reshape(2 * B, -1)
    t = torch.cat([target, target])
    mixed_x, mixed_t = lam * x + (1 - lam) * x[perm], lam * t + (1 - lam) * t[perm]
    logits = nets[k](mixed_x)
    rows_l = -(F.log_softmax(logits, 1) * mixed_t).sum(1)
    rows_u = ((F.softmax(logits, 1) - mixed_t) ** 2).mean(1)
    rows_labeled = torch.cat([labeled, labeled])
    per_sample = (rows_l[:B] + rows_l[B:]) / 2
    l_x = vrnl(per_sample[labeled], ALPHA)
    l_u = rows_u[~rows_labeled].mean()  # the reference's mean over rows and classes
    mean_pred = F.softmax(logits, 1).mean(0)
    prior = torch.full((C,), 1 / C)
    penalty = (prior * torch.log(prior / mean_pred)).sum()
    return l_x + 3.0 * l_u + penalty, per_sample, labeled


def test_one_step_is_mixmatch_on_the_other_networks_division(monkeypatch) -> None:
    model = model_of()
    model.clean_prob = torch.rand(2, N, generator=torch.Generator().manual_seed(3))
    batch = batch_of()
    draws = {
        k: (torch.randperm(2 * B, generator=torch.Generator().manual_seed(5 + k)), lam)
        for k, lam in ((0, 0.7), (1, 0.9))
    }
    monkeypatch.setattr(model, "mix_partners", lambda n, k, device: (*draws[k], n))
    objective = model.training_objective(batch)
    expected = [expected_objective(model, batch, *draws[k], k) for k in range(2)]
    torch.testing.assert_close(objective, expected[0][0] + expected[1][0])
    assert [s.network for s in model._steps] == [0, 1]
    for step, (_, per_sample, labeled) in zip(model._steps, expected, strict=True):
        torch.testing.assert_close(step.losses, per_sample.detach())
        assert torch.equal(step.used, labeled)
    # the two networks divide differently, so the test covers both labeled and unlabeled rows
    assert 0 < int(expected[0][2].sum()) < B and not torch.equal(expected[0][2], expected[1][2])


def test_equal_views_take_one_pass_that_changes_nothing(monkeypatch) -> None:
    """Views that are equal (data without augmentation, e.g. MNIST) are passed through each
    network once for the targets, and the step is the step of two passes; a network whose
    training pass draws random numbers or updates statistics gets both passes."""
    model = model_of()
    model.clean_prob = torch.rand(2, N, generator=torch.Generator().manual_seed(3))
    model.equal_views = True  # what setup reads of data without augmentation
    batch = batch_of()
    batch["views"] = torch.stack([batch["views"][0], batch["views"][0].clone()])
    draws = {
        k: (torch.randperm(2 * B, generator=torch.Generator().manual_seed(5 + k)), lam)
        for k, lam in ((0, 0.7), (1, 0.9))
    }
    monkeypatch.setattr(model, "mix_partners", lambda n, k, device: (*draws[k], n))
    calls = []
    real = model.network_logits
    monkeypatch.setattr(model, "network_logits", lambda x, k=0: calls.append(k) or real(x, k))
    objective = model.training_objective(batch)
    expected = sum(expected_objective(model, batch, *draws[k], k)[0] for k in range(2))
    torch.testing.assert_close(objective, expected)
    assert calls == [0, 1, 0, 1, 0, 1]  # per network: its own pass, the peer's, the mixed rows
    assert not stateful(model.networks[0])
    model.networks[0].add_module("dropout", torch.nn.Dropout(0.0))  # a pass that would draw
    calls.clear()
    model.training_objective(batch)
    assert calls == [0, 0, 1, 0, 1, 0, 1]
    for module, expected_state in (
        (torch.nn.Dropout(0.5), True),
        (torch.nn.BatchNorm1d(3), True),
        (torch.nn.BatchNorm1d(3, track_running_stats=False), False),
        (torch.nn.Linear(3, 3), False),
    ):
        assert stateful(torch.nn.Sequential(module)) is expected_state
        assert stateful(torch.nn.Sequential(module).eval()) is False


def test_the_mixup_draw_is_a_bijection_of_the_batchs_rows_with_lambda_at_least_half() -> None:
    model = model_of(mix_alpha=4.0)
    seen = set()
    for n in (B, 4):  # a full batch, and a last one smaller than the batch size
        partners, lam, capacity = model.mix_partners(n, 0, torch.device("cpu"))
        assert capacity == n and 0.5 <= lam <= 1.0
        rows = torch.cat([torch.arange(n), torch.arange(n) + capacity])
        assert sorted(partners.tolist()) == sorted(rows.tolist())
        seen.add(tuple(partners.tolist()))
    again = model.mix_partners(4, 0, torch.device("cpu"))
    assert tuple(again[0].tolist()) in seen  # drawn from the seed and the step
    cpu = torch.device("cpu")  # each network its own draw
    assert not torch.equal(model.mix_partners(B, 1, cpu)[0], model.mix_partners(B, 0, cpu)[0])


def test_warmup_is_cross_entropy_with_the_confidence_penalty_where_asked() -> None:
    for penalty in (False, True):
        model = model_of(schedule={"warmup_epochs": 1}, confidence_penalty=penalty)
        batch = batch_of()
        objective = model.training_objective(batch)
        total = 0
        for k, net in enumerate(model.networks):
            logits = net(batch["image"].reshape(B, -1))
            losses = F.cross_entropy(logits, batch["label"], reduction="none")
            if penalty:
                p = F.softmax(logits, 1)
                losses = losses + (p * p.log()).sum(1)
            torch.testing.assert_close(model._steps[k].losses, losses.detach())
            total = total + losses.mean()  # VRNL is off in a warm-up
        torch.testing.assert_close(objective, total)


def test_the_division_is_the_references_gaussian_mixture() -> None:
    gen = torch.Generator().manual_seed(0)
    losses = torch.cat([torch.rand(300, generator=gen) * 0.5, 2 + torch.rand(100, generator=gen)])
    losses = losses[torch.randperm(400, generator=gen)] * 3.0
    prob = clean_probability(losses, max_iter=10, tol=1e-2, reg_covar=5e-4, seed=4)
    x = ((losses - losses.min()) / (losses.max() - losses.min())).numpy().reshape(-1, 1)
    gmm = GaussianMixture(n_components=2, max_iter=10, tol=1e-2, reg_covar=5e-4, random_state=4)
    gmm.fit(x)
    expected = gmm.predict_proba(x)[:, np.argmin(gmm.means_.ravel())]
    np.testing.assert_allclose(prob.numpy(), expected, atol=1e-6)
    labeled = prob > 0.5  # the low-loss cluster is labeled
    assert bool(labeled[losses < 1.5 * 3].all()) and not bool(labeled[losses > 2 * 3].any())


def test_a_pass_divides_the_data_and_the_division_is_state() -> None:
    model = model_of()
    values = torch.full((2, N), float("nan"))
    indices = torch.tensor([0, 2, 3, 5, 7, 8, 9, 11])
    gen = torch.Generator().manual_seed(1)
    values[:, indices] = torch.rand(2, len(indices), generator=gen)
    counts = torch.zeros(N, dtype=torch.long)
    counts[indices] = 1
    model.on_training_pass(TrainingPass(values, counts, indices))
    for k in range(2):
        seed = (torch.initial_seed() * 1_000_003 + k) % 2**32
        expected = clean_probability(values[k, indices], seed=seed)
        torch.testing.assert_close(model.clean_prob[k, indices], expected)
    outside = torch.ones(N, dtype=torch.bool)
    outside[indices] = False
    assert bool((model.clean_prob[:, outside] == 0).all())
    state = model.state_dict()
    assert torch.equal(state[STATE_KEY], model.clean_prob)
    fresh = model_of()
    fresh.load_state_dict(state)
    assert torch.equal(fresh.clean_prob, model.clean_prob)


def test_bad_options_are_refused() -> None:
    for options, match in (
        ({"p_threshold": 1.0}, "p_threshold"),
        ({"temperature": 0.0}, "temperature"),
        ({"mix_alpha": 0.0}, "mix_alpha"),
        ({"lambda_u": -1.0}, "lambda_u"),
    ):
        with pytest.raises(InputError, match=match):
            model_of(**options)


@pytest.mark.parametrize("augment", [False, True])
def test_whether_views_are_equal_is_read_once_from_the_data(augment: bool) -> None:
    """The data's facts say whether its views can differ, and they hold of its batches: without
    augmentation every view is the same image (one pass stands for both), with it the views are
    independent draws (two passes); a step never compares the views itself."""
    dm = DigitsDataModule(views=2, augment=augment, batch_size=32)
    dm.setup("fit")
    assert dm.data_facts().views_differ is augment
    dm.trainer = SimpleNamespace(training=True)
    batch = dm.on_after_batch_transfer(next(iter(dm.train_dataloader())), 0)
    assert torch.equal(batch["views"][0], batch["views"][1]) is not augment
    model = DivideMix(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [8]}},
        num_classes=dm.num_classes,
        input_shape=dm.input_shape,
    )
    model._trainer = SimpleNamespace(datamodule=dm, fast_dev_run=False, max_epochs=5)
    model.setup("fit")
    assert model.equal_views is not augment
