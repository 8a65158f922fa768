"""Co-teaching+ and JoCoR, one training step on fixed inputs: which samples each network trains
on and the objective, against the reference code's rule computed here independently (NumPy for
the selection, the reference's own loss expressions for the objective and its gradients).

Co-teaching+ (xingruiyu/coteaching_plus ``loss.py``): the samples whose argmax predictions
differ; among those, each network's ``int((1 - τ) n)`` smallest losses (all ``n`` where that is
0) go to its peer, which trains on their mean loss. JoCoR (hongxin001/JoCoR ``algorithm/loss.py``):
``(1 - λ)(CE1 + CE2) + λ (KL(p2‖p1) + KL(p1‖p2))`` per sample, the ``int((1 - τ) B)`` smallest
kept, both networks trained on their mean.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback

from noisylabels.data import DigitsDataModule
from noisylabels.errors import InputError
from noisylabels.methods import CoTeaching, CoTeachingPlus, JoCoR
from noisylabels.methods.jocor import symmetric_kl

C = 3
B = 16


def make(cls: type, **kwargs):
    """A two-network method on 1x1x2 inputs with seeded random networks, at forget rate 0.5."""
    torch.manual_seed(0)
    model = cls(
        network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 1, 2), forget_rate=0.5, **kwargs
    )
    model.current_forget_rate = 0.5
    return model


def a_batch(seed: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, C, (B,), generator=g)
    return {
        "image": 3 * torch.randn(B, 1, 1, 2, generator=g),
        "label": labels,
        "index": torch.arange(B),
        "clean_label": labels,
    }


def logits_of(model, batch) -> list[torch.Tensor]:
    with torch.no_grad():
        return [model.network_logits(batch["image"], k) for k in range(2)]


def np_cross_entropy(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    z = z - z.max(1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
    return -log_p[np.arange(len(y)), y]


def np_softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def steps_by_network(model) -> dict[int, object]:
    return {step.network: step for step in model._steps}


def as_mask(indices: np.ndarray) -> torch.Tensor:
    mask = torch.zeros(B, dtype=torch.bool)
    mask[torch.as_tensor(indices, dtype=torch.long)] = True
    return mask


# --------------------------------------------------------------------------- Co-teaching+
def reference_coteaching_plus(z, y, rate: float, softmax_ce: bool) -> tuple[np.ndarray, ...]:
    """The reference's rule: the disagreement samples, then each network's small-loss ones among
    them (batch positions), and the losses they are ranked and trained by."""
    z1, z2, y = z[0].numpy().astype(np.float64), z[1].numpy().astype(np.float64), y.numpy()
    disagree = np.flatnonzero(z1.argmax(1) != z2.argmax(1))
    if softmax_ce:  # the reference feeds the softmax outputs to the cross-entropy
        z1, z2 = np_softmax(z1), np_softmax(z2)
    l1, l2 = np_cross_entropy(z1, y), np_cross_entropy(z2, y)
    keep = int((1 - rate) * len(disagree)) or len(disagree)
    small_1 = disagree[np.argsort(l1[disagree], kind="stable")[:keep]]
    small_2 = disagree[np.argsort(l2[disagree], kind="stable")[:keep]]
    return disagree, small_1, small_2, l1, l2


@pytest.mark.parametrize("loss", ["ce", "softmax_ce"])
@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_coteachingplus_exchanges_small_loss_samples_among_disagreements(
    loss: str, alpha: float
) -> None:
    model = make(CoTeachingPlus, loss=loss, alpha=alpha)
    batch = a_batch()
    z = logits_of(model, batch)
    disagree, small_1, small_2, l1, l2 = reference_coteaching_plus(
        z, batch["label"], 0.5, loss == "softmax_ce"
    )
    assert 4 <= len(disagree) < B, "the example needs agreeing and disagreeing samples"
    assert set(small_1) != set(small_2), "the example needs two different selections"

    objective = model.training_objective(batch)
    steps = steps_by_network(model)
    # network 0 trains on network 1's small-loss disagreement samples, and vice versa
    assert torch.equal(steps[0].used, as_mask(small_2))
    assert torch.equal(steps[1].used, as_mask(small_1))
    expected = 0.0
    for own, peer in ((l1, small_2), (l2, small_1)):
        chosen = own[peer]
        expected += chosen.mean() - alpha * chosen.var()  # population variance
    assert float(objective.detach()) == pytest.approx(expected, rel=1e-5)

    # the gradient of each network is that of the reference's loss over its peer's selection
    objective.backward()
    for k, peer in ((0, small_2), (1, small_1)):
        net = model.networks[k]
        got = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        out = net(batch["image"][peer])
        if loss == "softmax_ce":
            out = F.softmax(out, dim=1)
        per_sample = F.cross_entropy(out, batch["label"][peer], reduction="none")
        (per_sample.mean() - alpha * per_sample.var(unbiased=False)).backward()
        for g, p in zip(got, net.parameters(), strict=True):
            assert torch.allclose(g, p.grad, atol=1e-6)


def test_coteachingplus_keeps_all_candidates_when_the_rate_leaves_none_and_none_without_any() -> (
    None
):
    model = make(CoTeachingPlus)
    model.current_forget_rate = 0.6
    losses = torch.tensor([0.3, 0.1, 0.2, 0.4, 0.5])
    two = torch.tensor([True, False, False, True, False])  # int(0.4 * 2) = 0: both kept
    three = torch.tensor([True, True, False, True, False])  # int(0.4 * 3) = 1: the smallest
    none = torch.zeros(5, dtype=torch.bool)
    assert model.small_loss_masks([losses], among=two)[0].tolist() == two.tolist()
    assert model.small_loss_masks([losses], among=three)[0].tolist() == [0, 1, 0, 0, 0]
    assert not model.small_loss_masks([losses], among=none)[0].any()

    # a batch on which the networks agree everywhere trains neither
    model.peers[0].load_state_dict(model.net.state_dict())
    model.training_objective(a_batch()).backward()
    assert all(not step.used.any() for step in model._steps)
    assert all(p.grad is None or (p.grad == 0).all() for p in model.parameters())


class _Stages(Callback):
    def __init__(self) -> None:
        self.seen: list[bool] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.append(pl_module.disagreement_stage)


def test_coteachingplus_is_coteaching_for_init_epochs_of_its_stage(make_trainer) -> None:
    """Before ``init_epochs`` epochs of the method's stage (after a warm-up) the selection is
    Co-teaching's over the whole batch; from then on, among the disagreement samples."""
    torch.manual_seed(0)
    model = CoTeachingPlus(
        network={"backbone": "mlp"},
        input_shape=(1, 8, 8),
        forget_rate=0.3,
        init_epochs=2,
        schedule={"warmup_epochs": 1},
    )
    assert not model.disagreement_stage
    stages = _Stages()
    trainer = make_trainer(
        max_epochs=4, limit_train_batches=1, limit_val_batches=1, callbacks=[stages]
    )
    trainer.fit(model, datamodule=DigitsDataModule(noise_rate=0.3, batch_size=64))
    assert stages.seen == [False, False, False, True]  # warm-up, 2 of Co-teaching, then +

    batch = a_batch()
    plus, plain = make(CoTeachingPlus, init_epochs=1), make(CoTeaching)
    plus.disagreement_stage = False
    plus.training_objective(batch)
    plain.training_objective(batch)
    for got, expected in zip(plus._steps, plain._steps, strict=True):
        assert torch.equal(got.used, expected.used) and got.used.sum() == B // 2
    with pytest.raises(InputError, match="loss"):
        make(CoTeachingPlus, loss="mae")


# --------------------------------------------------------------------------- JoCoR
def reference_joint_loss(z1: torch.Tensor, z2: torch.Tensor, y: torch.Tensor, lam: float):
    """The reference's joint loss, with its own expressions (``F.kl_div`` of one network's
    log-probabilities against the other's probabilities, both ways)."""

    def kl(pred, soft_targets):
        return F.kl_div(
            F.log_softmax(pred, dim=1), F.softmax(soft_targets, dim=1), reduction="none"
        ).sum(1)

    ce = F.cross_entropy(z1, y, reduction="none") + F.cross_entropy(z2, y, reduction="none")
    return (1 - lam) * ce + lam * kl(z1, z2) + lam * kl(z2, z1)


@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_jocor_trains_both_networks_on_the_small_joint_loss_samples(alpha: float) -> None:
    lam = 0.4
    model = make(JoCoR, co_lambda=lam, alpha=alpha)
    batch = a_batch()
    z = logits_of(model, batch)
    joint = reference_joint_loss(z[0], z[1], batch["label"], lam).numpy()
    kept = np.argsort(joint, kind="stable")[: int(0.5 * B)]
    ce_0 = F.cross_entropy(z[0], batch["label"], reduction="none").numpy()
    assert set(kept) != set(np.argsort(ce_0)[: B // 2]), "the example needs the joint loss"

    objective = model.training_objective(batch)
    steps = steps_by_network(model)
    for k in range(2):  # one selection, one set of weights, each network's own logits
        assert torch.equal(steps[k].used, as_mask(kept))
        assert torch.allclose(steps[k].losses, torch.as_tensor(joint), atol=1e-6)
        assert torch.equal(steps[k].weights, steps[0].weights)
        assert torch.equal(steps[k].logits, z[k])
    chosen = joint[kept]
    expected = chosen.mean() - alpha * chosen.var()  # population variance
    assert float(objective.detach()) == pytest.approx(expected, rel=1e-5)

    # both networks get the gradient of the reference's mean joint loss over the kept samples
    objective.backward()
    got = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    images, labels = batch["image"][kept], batch["label"][kept]
    z1, z2 = model.network_logits(images, 0), model.network_logits(images, 1)
    picked = reference_joint_loss(z1, z2, labels, lam)
    (picked.mean() - alpha * picked.var(unbiased=False)).backward()
    expected = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(got) == len(expected) == 2 * len(list(model.net.parameters()))
    for g, e in zip(got, expected, strict=True):
        assert torch.allclose(g, e, atol=1e-6)


def test_jocor_co_regularization_is_the_symmetric_kl() -> None:
    z1, z2 = torch.randn(5, C), torch.randn(5, C)
    p1, p2 = F.softmax(z1, 1), F.softmax(z2, 1)
    expected = (p1 * (p1 / p2).log()).sum(1) + (p2 * (p2 / p1).log()).sum(1)
    assert torch.allclose(symmetric_kl(z1, z2), expected, atol=1e-6)
    assert torch.allclose(symmetric_kl(z1, z1), torch.zeros(5))
    # lam 0: each network's plain cross-entropy, summed
    model = make(JoCoR, co_lambda=0.0)
    batch = a_batch()
    z = logits_of(model, batch)
    ce = sum(F.cross_entropy(zk, batch["label"], reduction="none") for zk in z)
    assert torch.allclose(model.joint_loss(z, batch), ce)
    with pytest.raises(InputError, match="co_lambda"):
        make(JoCoR, co_lambda=1.5)


def test_jocor_warmup_trains_each_network_on_plain_cross_entropy() -> None:
    model = make(JoCoR, co_lambda=0.9, schedule={"warmup_epochs": 1})
    assert model.in_warmup
    batch = a_batch()
    z = logits_of(model, batch)
    model.training_objective(batch)
    steps = steps_by_network(model)
    for k in range(2):
        assert steps[k].used is None
        ce = F.cross_entropy(z[k], batch["label"], reduction="none")
        assert torch.allclose(steps[k].losses, ce, atol=1e-6)


def test_jocor_steps_each_network_by_its_own_optimizer(make_trainer) -> None:
    """A short fit: both networks move, from one joint objective per batch."""
    L.seed_everything(0)
    model = JoCoR(
        network={"backbone": "mlp"}, input_shape=(1, 8, 8), forget_rate=0.3, co_lambda=0.5
    )
    before = [{k: v.clone() for k, v in net.state_dict().items()} for net in model.networks]
    trainer = make_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, datamodule=DigitsDataModule(noise_rate=0.3, batch_size=64))
    for net, old in zip(model.networks, before, strict=True):
        assert any(not torch.equal(v, old[k]) for k, v in net.state_dict().items())
