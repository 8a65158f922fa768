"""The defining rule of each baseline of the paper's tables, on hand-made batches: Co-teaching,
MentorNet and Decoupling (which samples each network trains on), T-Revision (ΔT learns, T stays
row-stochastic) and PTD (T(x) = Σ_r w_r(x) A_r is row-stochastic)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from noisylabels.data import DigitsDataModule
from noisylabels.errors import InputError
from noisylabels.methods import PTD, CoTeaching, Decoupling, MentorNet, TRevision
from noisylabels.methods.core.losses import apply_transition
from noisylabels.methods.selection import small_loss_mask
from noisylabels.noise import (
    anchor_transition,
    fit_part_transitions,
    part_noisy_posterior,
    part_transition,
    part_weights,
    revise_transition,
)

from conftest import read_results

C = 3


def two_networks(cls: type, **kwargs) -> nn.Module:
    """A two-network method on 1x1x2 inputs, with seeded random networks."""
    torch.manual_seed(0)
    model = cls(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 1, 2), **kwargs)
    return model


def batch_of(images: torch.Tensor, labels: list[int]) -> dict[str, torch.Tensor]:
    return {
        "image": images,
        "label": torch.tensor(labels),
        "index": torch.arange(len(labels)),
        "clean_label": torch.tensor(labels),
    }


def steps_by_network(model: nn.Module) -> dict[int, object]:
    return {step.network: step for step in model._steps}


# --------------------------------------------------------------------------- small-loss selection
def test_small_loss_mask_keeps_the_smallest_losses_first_on_ties() -> None:
    losses = torch.tensor([0.5, 0.1, 0.9, 0.1, 0.3])
    assert small_loss_mask(losses, 2).tolist() == [False, True, False, True, False]
    assert small_loss_mask(losses, 3).tolist() == [False, True, False, True, True]


def _losses_known(model: nn.Module) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """A batch of 6 samples on which network 0 and network 1 have opposite loss orders."""
    images = torch.randn(6, 1, 1, 2)
    batch = batch_of(images, [0, 1, 2, 0, 1, 2])
    with torch.no_grad():
        losses = [
            F.cross_entropy(model.network_logits(images, k), batch["label"], reduction="none")
            for k in range(2)
        ]
    return batch, losses


def test_coteaching_each_network_trains_on_its_peers_small_loss_samples() -> None:
    model = two_networks(CoTeaching, forget_rate=0.5)
    model.current_forget_rate = 0.5  # tau_t of the epoch: keep int(0.5 * 6) = 3 samples
    batch, losses = _losses_known(model)
    mine = [small_loss_mask(l, 3) for l in losses]
    assert not torch.equal(mine[0], mine[1]), "the example needs two different selections"

    objective = model.training_objective(batch)
    steps = steps_by_network(model)
    assert torch.equal(steps[0].used, mine[1]) and torch.equal(steps[1].used, mine[0])
    assert (steps[0].weights[~mine[1]] == 0).all() and (steps[0].weights[mine[1]] > 0).all()

    # network 0's gradient is exactly that of its mean CE over network 1's selection
    objective.backward()
    for k, peer_selection in ((0, mine[1]), (1, mine[0])):
        net = model.networks[k]
        got = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        logits = net(batch["image"][peer_selection])
        F.cross_entropy(logits, batch["label"][peer_selection]).backward()
        for g, p in zip(got, net.parameters(), strict=True):
            assert torch.allclose(g, p.grad, atol=1e-6)


def test_mentornet_each_network_trains_on_its_own_small_loss_samples() -> None:
    model = two_networks(MentorNet, forget_rate=0.5)
    model.current_forget_rate = 0.5
    batch, losses = _losses_known(model)
    model.training_objective(batch)
    steps = steps_by_network(model)
    for k in range(2):
        assert torch.equal(steps[k].used, small_loss_mask(losses[k], 3))
    model.current_forget_rate = 0.0  # the first epoch of the ramp keeps every sample
    model._steps = []
    model.training_objective(batch)
    assert all(step.used.all() for step in model._steps)


def test_forget_rate_ramps_linearly_to_tau_over_ramp_epochs() -> None:
    model = two_networks(CoTeaching, forget_rate=0.45, ramp_epochs=10)
    rates = [model.forget_rate_at(t) for t in range(12)]
    assert rates[0] == 0.0 and rates[9] == pytest.approx(0.45) and rates[11] == pytest.approx(0.45)
    assert rates[3] == pytest.approx(0.45 * 3 / 9)
    model.current_forget_rate = 0.45
    assert model.keep_count(128) == int(0.55 * 128) and model.keep_count(1) == 1
    # the device count (the global batch under DDP) is the same number, as a tensor
    for size in (1, 7, 100, 128, 1000):
        assert float(model.keep_count(torch.tensor(size))) == model.keep_count(size), size
    assert two_networks(CoTeaching, forget_rate=0.3, ramp_epochs=0).forget_rate_at(
        0
    ) == pytest.approx(0.3)


def test_forget_rate_from_the_data_or_a_clear_error() -> None:
    model = two_networks(CoTeaching)  # forget_rate: noise_rate
    dm = DigitsDataModule(noise_type="pair", noise_rate=0.35)
    dm.setup()
    model._trainer = SimpleNamespace(datamodule=dm, fast_dev_run=False, max_epochs=5)
    model.setup("fit")
    assert float(model.tau) == pytest.approx(0.35)
    real = SimpleNamespace(noise_info=lambda: {"type": "file", "rate_nominal": None})
    model._trainer = SimpleNamespace(datamodule=real, fast_dev_run=False, max_epochs=5)
    with pytest.raises(InputError, match="forget_rate estimate"):
        model.setup("fit")
    with pytest.raises(InputError, match="warmup_epochs"):
        two_networks(MentorNet, forget_rate="estimate")
    with pytest.raises(InputError, match=r"\[0, 1\)"):
        two_networks(MentorNet, forget_rate=1.2)


def test_forget_rate_estimated_from_T_hat_through_the_cli(run_cli, tmp_path: Path) -> None:
    """``forget_rate: estimate``: tau from T̂ after the warm-up, T̂ reported; the per-subset
    curves of network 1 on request."""
    cli = run_cli(
        "fit",
        "--config",
        "configs/data/digits.yaml",
        "--model",
        "noisylabels.methods.CoTeaching",
        "--model.forget_rate",
        "estimate",
        "--model.schedule.warmup_epochs",
        "1",
        "--trainer.max_epochs",
        "2",
        "--trainer.limit_train_batches",
        "4",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.callbacks.init_args.network",
        "1",
    )
    results = read_results(tmp_path)
    # tau = 1 - mean(diag T̂) of the reported T̂
    folder = next(tmp_path.rglob("results.json")).parent
    T_hat = torch.tensor(
        [
            [float(v) for v in line.split(",")]
            for line in (folder / "transition_estimate.csv").read_text().split()
        ]
    )
    assert results["t_estimation_error"] is not None
    state = torch.load(results["checkpoint"], map_location="cpu", weights_only=False)
    tau = float(state["state_dict"]["tau"])
    assert tau == pytest.approx(1.0 - float(T_hat.diagonal().mean()), abs=1e-5)
    (stats,) = [cb for cb in cli.trainer.callbacks if type(cb).__name__ == "SubsetStatistics"]
    assert stats.network == 1
    assert stats.last["subsets/count/mislabeled"] + stats.last["subsets/count/correct"] > 0
    assert 0.0 < stats.last["subsets/weight_mean/correct"] <= 2.0


# --------------------------------------------------------------------------- Decoupling
def test_decoupling_updates_only_where_the_networks_disagree() -> None:
    model = two_networks(Decoupling)
    images = torch.randn(8, 1, 1, 2, requires_grad=True)
    batch = batch_of(images, [0, 1, 2, 0, 1, 2, 0, 1])
    with torch.no_grad():
        preds = [model.network_logits(images, k).argmax(1) for k in range(2)]
    disagree = preds[0] != preds[1]
    assert disagree.any() and not disagree.all(), "the example needs both kinds of samples"
    model.training_objective(batch).backward()
    assert all(torch.equal(step.used, disagree) for step in model._steps)
    assert (images.grad[~disagree] == 0).all()
    assert (images.grad[disagree].abs().sum((1, 2, 3)) > 0).all()

    # identical networks never disagree: no gradient at all
    model.peers[0].load_state_dict(model.net.state_dict())
    model.zero_grad()
    model._steps = []
    model.training_objective(batch).backward()
    assert all(not step.used.any() for step in model._steps)
    assert all(p.grad is None or (p.grad == 0).all() for p in model.parameters())


def test_two_networks_have_one_optimizer_each() -> None:
    model = two_networks(Decoupling)
    assert not model.automatic_optimization and len(model.networks) == 2
    optimizers, schedulers = model.configure_optimizers()
    assert len(optimizers) == len(schedulers) == 2
    for optimizer, net in zip(optimizers, model.networks, strict=True):
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        assert params == {id(p) for p in net.parameters()}


# --------------------------------------------------------------------------- T-Revision
def trevision(**kwargs) -> TRevision:
    model = TRevision(
        network={"backbone": "mlp"},
        num_classes=C,
        input_shape=(1, 1, 2),
        transition=True,
        schedule={"warmup_epochs": 0},
        **kwargs,
    )
    T_hat = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.0, 0.7]])
    model.store_transition(T_hat)
    return model


def test_trevision_delta_gets_gradient_and_T_stays_row_stochastic() -> None:
    model = trevision()
    assert torch.equal(model.revised_transition(), model.T)  # ΔT starts at 0
    images = torch.randn(5, 1, 1, 2)
    batch = batch_of(images, [0, 1, 2, 2, 1])
    model.per_sample_loss(model(images), batch).mean().backward()
    assert model.delta.grad is not None and model.delta.grad.abs().sum() > 0
    # whatever ΔT becomes, the revised T is row-stochastic
    with torch.no_grad():
        model.delta.copy_(torch.randn(C, C) * 3)
    T = model.revised_transition()
    assert (T >= 0).all() and torch.allclose(T.sum(1), torch.ones(C))
    optimizer = torch.optim.SGD([model.delta], lr=10.0)
    for _ in range(5):
        optimizer.zero_grad()
        model.per_sample_loss(model(images), batch).mean().backward()
        optimizer.step()
        T = model.revised_transition()
        assert (T >= 0).all() and torch.allclose(T.sum(1), torch.ones(C))


def test_trevision_adds_delta_once_per_batch_not_per_sample() -> None:
    """A sample's loss does not depend on where in the batch it is: ΔT is not accumulated."""
    model = trevision()
    with torch.no_grad():
        model.delta.copy_(torch.full((C, C), 0.05))
    images = torch.randn(6, 1, 1, 2)
    batch = batch_of(images, [0, 1, 2, 0, 1, 2])
    together = model.per_sample_loss(model(images), batch)
    alone = torch.cat(
        [
            model.per_sample_loss(model(images[i : i + 1]), batch_of(images[i : i + 1], [int(y)]))
            for i, y in enumerate(batch["label"])
        ]
    )
    assert torch.allclose(together, alone, atol=1e-6)
    probs = F.softmax(model(images), 1)
    T = revise_transition(model.T, model.delta)
    q_y = apply_transition(probs, T).gather(1, batch["label"][:, None]).squeeze(1)
    p_y = probs.gather(1, batch["label"][:, None]).squeeze(1)
    ce = F.cross_entropy(model(images), batch["label"], reduction="none")
    assert torch.allclose(together, p_y / q_y * ce, atol=1e-6)


def test_trevision_has_delta_optimizer_at_its_own_rate() -> None:
    model = trevision()
    (opt_net, opt_delta), schedulers = model.configure_optimizers()
    assert isinstance(opt_delta, torch.optim.Adam) and opt_delta.param_groups[0]["lr"] == 5e-7
    assert opt_delta.param_groups[0]["params"] == [model.delta]
    assert len(schedulers) == 1 and not model.automatic_optimization


def test_trevision_variance_term_reaches_the_network_not_delta() -> None:
    images = torch.randn(6, 1, 1, 2)
    batch = batch_of(images, [0, 1, 2, 0, 1, 2])
    grads = {}
    for alpha in (0.0, 0.5):
        model = trevision(alpha=alpha)
        torch.manual_seed(1)
        model.net.load_state_dict(trevision().net.state_dict())
        model.training_objective(batch).backward()
        grads[alpha] = (model.delta.grad.clone(), next(model.net.parameters()).grad.clone())
    assert torch.allclose(grads[0.0][0], grads[0.5][0])  # ΔT: the same gradient
    assert not torch.allclose(grads[0.0][1], grads[0.5][1])  # the network: VRNL acts


# --------------------------------------------------------------------------- PTD
def test_ptd_T_of_x_is_row_stochastic_and_q_is_p_times_T_of_x() -> None:
    torch.manual_seed(0)
    weights = torch.rand(7, 4)
    weights = weights / weights.sum(1, keepdim=True)
    A = torch.softmax(torch.randn(4, C, C) * 2, dim=2)
    T = part_transition(weights, A)
    assert T.shape == (7, C, C)
    assert torch.allclose(T.sum(2), torch.ones(7, C)) and (T >= 0).all()
    assert torch.allclose(T[2], sum(weights[2, r] * A[r] for r in range(4)))
    probs = torch.softmax(torch.randn(7, C), 1)
    expected = torch.einsum("nc,ncd->nd", probs, T)
    assert torch.allclose(part_noisy_posterior(probs, weights, A), expected, atol=1e-6)


def test_ptd_parts_from_features_and_part_matrices_from_anchor_points() -> None:
    torch.manual_seed(0)
    features = torch.rand(60, 8)
    features[5] = 0.0  # no feature at all: equal weights
    weights, error = part_weights(features, 4)
    assert weights.shape == (60, 4) and (weights >= 0).all() and 0.0 <= error < 1.0
    assert torch.allclose(weights.sum(1), torch.ones(60)) and torch.allclose(
        weights[5], 0.25 * torch.ones(4)
    )
    probs = torch.softmax(torch.randn(60, C) * 3, 1)
    A = fit_part_transitions(probs, weights, [0.97, 0.98, 0.99], steps=50)
    assert A.shape == (4, C, C) and torch.allclose(A.sum(2), torch.ones(4, C))
    # the ridge pulls every part toward the anchor estimate T̂
    T_hat = anchor_transition(probs, True, 0.97)
    tight = fit_part_transitions(probs, weights, [0.97, 0.98, 0.99], ridge=100.0, steps=100)
    assert (tight - T_hat).abs().max() < 0.05
    loose = fit_part_transitions(probs, weights, [0.97, 0.98, 0.99], ridge=0.0, steps=100)
    assert (loose - T_hat).abs().max() > (tight - T_hat).abs().max()


def test_ptd_method_T_of_x_by_sample_and_checkpoint_round_trip() -> None:
    model = PTD(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 1, 2), parts=2)
    weights = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    A = torch.softmax(torch.randn(2, C, C), 2)
    model.weights = weights
    model.part_matrices.copy_(A)
    T = model.transition_at(torch.tensor([2, 0]))
    assert torch.allclose(T[0], 0.5 * (A[0] + A[1])) and torch.allclose(T[1], A[0])
    assert torch.allclose(T.sum(2), torch.ones(2, C))
    fresh = PTD(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 1, 2), parts=2)
    fresh.load_state_dict(model.state_dict())  # the per-sample weights buffer is resized
    assert torch.equal(fresh.weights, weights)
    with pytest.raises(InputError, match="--model.schedule.warmup_epochs is 0"):
        PTD(
            network={"backbone": "mlp"},
            num_classes=C,
            input_shape=(1, 1, 2),
            schedule={"warmup_epochs": 0},
        )
