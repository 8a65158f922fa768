"""GCE, Backward and Peer loss: one training step's per-sample losses and VRNL objective on a
fixed batch equal their formulas, written out here from the logits by hand (softmax as
``exp(z) / Σ exp(z)``), and the pieces around them (GCE's pruning rule and plan, Backward's
unbiasedness, Peer's α plan and peers)."""

from __future__ import annotations

import math

import pytest
import torch

from noisylabels.errors import InputError
from noisylabels.methods import GCE, Backward, Peer
from noisylabels.methods.peer import alpha_schedule

C = 3
ALPHA = 0.1


def make(cls: type, **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return cls(
        network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 1, 2), alpha=ALPHA, **kwargs
    )


def fixed_batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return {
        "image": torch.randn(6, 1, 1, 2, generator=gen),
        "label": torch.tensor([0, 1, 2, 0, 2, 1]),
        "clean_label": torch.tensor([0, 1, 2, 0, 2, 1]),
        "index": torch.tensor([4, 0, 5, 2, 1, 3]),
    }


def softmax_by_hand(z: torch.Tensor) -> list[list[float]]:
    rows = []
    for row in z.tolist():
        e = [math.exp(v) for v in row]
        rows.append([v / sum(e) for v in e])
    return rows


def step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[list[float], float]:
    """One training step's per-sample losses and objective, as the step records them."""
    model._steps = []
    objective = model.training_objective(batch)
    record = model._steps[0]
    assert torch.allclose(record.objective, objective.detach())
    return record.losses.tolist(), float(objective.detach())


def vrnl_by_hand(losses: list[float], alpha: float = ALPHA) -> float:
    mean = sum(losses) / len(losses)
    variance = sum((v - mean) ** 2 for v in losses) / len(losses)
    return mean - alpha * variance


def logits_of(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(batch["image"])


# --------------------------------------------------------------------------- GCE
@pytest.mark.parametrize("q", [0.7, 1.0, 0.3])
def test_gce_step_is_one_minus_p_to_the_q_over_q(q: float) -> None:
    model = make(GCE, q=q, truncate=False)
    batch = fixed_batch()
    probs = softmax_by_hand(logits_of(model, batch))
    expected = [(1 - probs[i][y] ** q) / q for i, y in enumerate(batch["label"].tolist())]
    losses, objective = step(model, batch)
    assert losses == pytest.approx(expected, rel=1e-5)
    assert objective == pytest.approx(vrnl_by_hand(expected), rel=1e-5)


def test_truncated_gce_step_weights_the_loss_past_the_threshold() -> None:
    model = make(GCE, q=0.7, k=0.5)
    batch = fixed_batch()
    weights = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # by dataset index
    model.prune_weights = weights
    probs = softmax_by_hand(logits_of(model, batch))
    threshold = (1 - 0.5**0.7) / 0.7
    index, labels = batch["index"].tolist(), batch["label"].tolist()
    expected = [
        float(weights[index[n]]) * ((1 - probs[n][labels[n]] ** 0.7) / 0.7 - threshold)
        for n in range(len(labels))
    ]
    losses, objective = step(model, batch)
    assert losses == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert objective == pytest.approx(vrnl_by_hand(expected), rel=1e-5)
    # before any pruning every weight is 1
    model.prune_weights = torch.empty(0)
    losses, _ = step(model, batch)
    assert all(v != 0 for v in losses)


def test_gce_prunes_the_samples_whose_p_y_is_at_most_k() -> None:
    model = make(GCE, q=0.7, k=0.5)
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1], [0.4, 0.5, 0.1], [0.2, 0.2, 0.6]]))
    kept = model.pruned_weights(logits, torch.tensor([0, 0, 2]))
    assert kept.tolist() == [1.0, 0.0, 1.0]


def test_gce_prunes_at_the_references_epochs() -> None:
    model = make(GCE, prune_start=40, prune_every=10)
    assert [e for e in range(100) if model.prunes_at(e)] == [39, 49, 59, 69, 79, 89, 99]
    assert not any(make(GCE, truncate=False).prunes_at(e) for e in range(100))


def test_gce_refuses_bad_options() -> None:
    for kwargs in ({"q": 0.0}, {"q": 1.5}, {"k": 1.0}, {"prune_every": 0}, {"prune_model": "x"}):
        with pytest.raises(InputError):
            make(GCE, **kwargs)


def test_gce_pruning_weights_are_checkpointed() -> None:
    model = make(GCE)
    model.prune_weights = torch.tensor([1.0, 0.0, 1.0])
    state = model.state_dict()
    other = make(GCE)
    other.load_state_dict(state)
    assert other.prune_weights.tolist() == [1.0, 0.0, 1.0]


# --------------------------------------------------------------------------- Backward
T = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.1, 0.7]])


def test_backward_step_is_the_row_of_t_inverse_times_the_losses() -> None:
    model = make(Backward, transition=True)
    model.store_transition(T)
    batch = fixed_batch()
    probs = softmax_by_hand(logits_of(model, batch))
    T_inv = torch.linalg.inv(T.double()).tolist()
    expected = [
        sum(T_inv[y][j] * -math.log(probs[i][j]) for j in range(C))
        for i, y in enumerate(batch["label"].tolist())
    ]
    losses, objective = step(model, batch)
    assert losses == pytest.approx(expected, rel=1e-5)
    assert objective == pytest.approx(vrnl_by_hand(expected), rel=1e-5)


def test_backward_loss_is_unbiased_over_the_noise() -> None:
    """``Σ_j T[i, j] l(p, j) = -log p_i``: over the noisy labels of a clean label ``i`` the
    corrected loss averages to the clean cross-entropy (Patrini et al., Theorem 1)."""
    model = make(Backward, transition=True)
    model.store_transition(T)
    logits = torch.tensor([[1.0, -0.5, 0.3]])
    p = softmax_by_hand(logits)[0]
    for clean in range(C):
        expected = sum(
            float(T[clean, noisy])
            * float(model.per_sample_loss(logits, {"label": torch.tensor([noisy])}))
            for noisy in range(C)
        )
        assert expected == pytest.approx(-math.log(p[clean]), rel=1e-5)


def test_backward_clips_p_as_the_reference() -> None:
    model = make(Backward, transition=True)
    model.store_transition(T)
    logits = torch.tensor([[50.0, 0.0, -50.0]])  # p = (1, 2e-22, 4e-44): all clipped
    loss = float(model.per_sample_loss(logits, {"label": torch.tensor([0])}))
    T_inv = torch.linalg.inv(T.double())[0].tolist()
    expected = T_inv[0] * -math.log(1 - 1e-7) + (T_inv[1] + T_inv[2]) * -math.log(1e-7)
    assert loss == pytest.approx(expected, rel=1e-4)


# --------------------------------------------------------------------------- Peer
def test_peer_step_subtracts_the_loss_of_an_independent_peer() -> None:
    model = make(Peer, peer_alpha=0.5)
    batch = fixed_batch()
    n = len(batch["label"])
    torch.manual_seed(7)  # the run's seed
    seed = (torch.initial_seed() * 1_000_003 + model.global_step) % 2**63
    first, second = torch.rand(2, n, generator=torch.Generator().manual_seed(seed)).argsort(1)
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(n))
    probs = softmax_by_hand(logits_of(model, batch))
    labels = batch["label"].tolist()
    expected = [
        -math.log(probs[i][labels[i]] + 1e-5)
        - 0.5 * -math.log(probs[int(first[i])][labels[int(second[i])]] + 1e-5)
        for i in range(n)
    ]
    losses, objective = step(model, batch)
    assert losses == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert objective == pytest.approx(vrnl_by_hand(expected), rel=1e-5, abs=1e-6)


def test_peer_draws_peers_from_the_seed_and_the_step() -> None:
    model = make(Peer)
    logits, labels = torch.randn(8, C), torch.arange(8) % C
    torch.manual_seed(3)
    a = model.draw_peers(logits, labels)
    b = model.draw_peers(logits, labels)
    assert torch.equal(a["peer_logits"], b["peer_logits"])
    assert torch.equal(a["peer_label"], b["peer_label"])
    torch.manual_seed(4)
    c = model.draw_peers(logits, labels)
    assert not torch.equal(a["peer_logits"], c["peer_logits"])


def test_peer_validation_loss_pairs_with_the_next_samples() -> None:
    model = make(Peer, peer_alpha=1.0)
    logits = torch.randn(4, C)
    labels = torch.tensor([0, 1, 2, 1])
    p = softmax_by_hand(logits)
    expected = [
        -math.log(p[i][labels[i]] + 1e-5) + math.log(p[(i + 1) % 4][labels[(i + 2) % 4]] + 1e-5)
        for i in range(4)
    ]
    loss = model.per_sample_loss(logits, {"label": labels})
    assert loss.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_peer_alpha_follows_the_references_plan() -> None:
    mnist = [(120, 0.0, 0.0), (180, 0.0, 1.0)]  # MNIST/runner.py's f_alpha
    assert alpha_schedule(mnist, 0) == 0.0 and alpha_schedule(mnist, 119) == 0.0
    assert alpha_schedule(mnist, 120) == 0.0
    assert alpha_schedule(mnist, 210) == pytest.approx(90 / 179)
    assert alpha_schedule(mnist, 299) == pytest.approx(1.0)
    assert alpha_schedule(mnist, 400) == pytest.approx(1.0)
    assert alpha_schedule([(1, 0.95, 0.95)], 5) == 0.95
    assert make(Peer, peer_alpha=0.3).current_peer_alpha() == 0.3
    with pytest.raises(InputError):
        make(Peer, peer_alpha_segments=[(0, 0.0, 1.0)])


def test_gce_prunes_in_a_run_and_checkpoints_the_weights(run_cli, tmp_path) -> None:
    """Pruning at the start of epochs 1 and 2 (``prune_start 2``, ``prune_every 1``) by the best
    model so far: the weights cover the training set, some samples are kept and some pruned, and
    the last checkpoint carries them."""
    from conftest import CONFIGS

    cli = run_cli(
        "fit",
        *("--config", str(CONFIGS / "data" / "digits.yaml"), "--model", "noisylabels.methods.GCE"),
        *("--model.prune_start", "2", "--model.prune_every", "1", "--model.alpha", "0.05"),
        *("--model.optim.lr", "0.1", "--data.noise_rate", "0.4", "--trainer.max_epochs", "3"),
        *("--trainer.limit_val_batches", "2", "--trainer.accelerator", "cpu"),
    )
    facts = cli.model.data_facts()
    last = next(tmp_path.rglob("last.ckpt"))
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    weights = checkpoint["state_dict"]["prune_weights"]
    assert len(weights) == facts.num_samples
    train = weights[facts.train_indices]
    assert 0.0 < float(train.mean()) < 1.0 and set(train.tolist()) <= {0.0, 1.0}
    assert checkpoint["gce_prune_best"]["epoch"] in (0, 1, 2)
