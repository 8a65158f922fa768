"""DISC: the epoch's selection and correction, the thresholds' update and one step's objective
on fixed inputs equal the reference's rules (JackYFL/DISC algorithms/DISC.py:283-360), computed
here sample by sample; mixup pairs within the selected and corrected samples."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from noisylabels.errors import InputError
from noisylabels.methods import DISC
from noisylabels.methods.mixup import draw_partners

C, N = 5, 40


def disc(**kwargs) -> DISC:
    torch.manual_seed(0)
    model = DISC(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2), **kwargs)
    model.init_tables(N)
    return model


def random_tables(model: DISC, seed: int = 0) -> torch.Tensor:
    """Both views' probabilities, thresholds and noisy labels drawn at random; the labels."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, N, C, generator=gen) * 3
    model.probs[:, :-1] = logits.softmax(-1)
    model.thresholds[:, :-1] = torch.rand(2, N, generator=gen) * 0.6
    labels = torch.randint(0, C, (N,), generator=gen)
    model.labels[:-1] = labels
    return labels


def test_the_selection_and_correction_are_the_reference_s() -> None:
    """Clean where both views pass their threshold on the label, hard where one does,
    corrected where neither does and the mean confidence passes the mean threshold + sigma
    (at most 0.99); then each threshold moves toward its view's top probability."""
    model = disc(momentum=0.9, sigma=0.2)
    labels = random_tables(model)
    probs, thresholds = model.probs[:, :-1].clone(), model.thresholds[:, :-1].clone()
    model.select()
    clean, hard, corrected = model.selection[:, :-1]
    assert int(clean.sum()) > 0 and int(hard.sum()) > 0 and int(corrected.sum()) > 0
    for i in range(N):
        y = int(labels[i])
        w = float(probs[0, i, y]) > float(thresholds[0, i])
        s = float(probs[1, i, y]) > float(thresholds[1, i])
        mean = (probs[0, i] + probs[1, i]) / 2
        bar = min((float(thresholds[0, i]) + float(thresholds[1, i])) / 2 + 0.2, 0.99)
        fix = float(mean.max()) > bar and not (w or s)
        assert (bool(clean[i]), bool(hard[i]), bool(corrected[i])) == (w and s, w != s, fix), i
        expected_label = int(mean.argmax()) if fix else y
        assert int(model.labels[i]) == expected_label, i
        for v in range(2):
            moved = 0.9 * float(thresholds[v, i]) + 0.1 * float(probs[v, i].max())
            assert float(model.thresholds[v, i]) == pytest.approx(moved, rel=1e-6)


def test_a_sample_left_out_keeps_its_last_corrected_label() -> None:
    """The reference writes the labels of the selected and corrected only: a sample in
    neither set keeps the label of its last correction."""
    model = disc(sigma=0.0)
    random_tables(model, seed=1)
    model.labels[:-1] = (model.labels[:-1] + 1) % C  # as after an earlier correction
    before = model.labels.clone()
    model.probs[:, :-1] = 1.0 / C  # nothing passes a threshold above 1/C now
    model.thresholds[:, :-1] = 0.5
    model.select()
    assert not model.selection.any()
    assert torch.equal(model.labels, before)


def _batch(model: DISC, n: int = 12, seed: int = 2) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "image": torch.randn(n, 1, 2, 2, generator=gen),
        "strong": torch.randn(1, n, 1, 2, 2, generator=gen),
        "label": model.labels[:n].clone(),
        "index": torch.arange(n),
    }


@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_the_objective_is_the_reference_loss(alpha: float) -> None:
    """Without mixing (``mixup_alpha`` 0: λ = 1), the step's objective is the reference's
    ``(1/B)(Σ_clean λ_ce(CE_w + CE_s) + Σ_hard λ_h(GCE_w + GCE_s)) + mean_mix CE_w +
    mean_mix CE_s`` over the selected and corrected samples with their labels; with VRNL the
    first term is ``(n/B)(mean - alpha Var)`` of the clean and hard samples' terms."""
    model = disc(alpha=alpha, mixup_alpha=0.0, lambda_ce=1.5, lambda_h=0.5)
    random_tables(model, seed=3)
    flags = torch.arange(N + 1) % 4  # clean, hard, corrected, neither
    model.selection = torch.stack([flags == k for k in range(3)])
    model.labels = (torch.arange(N + 1) * 3) % C  # the corrected labels
    batch = _batch(model)
    batch["label"] = torch.arange(12) % C  # the noisy labels
    objective = model.training_objective(batch)
    with torch.no_grad():
        zw, zs = model(batch["image"]), model(batch["strong"][0])
    y, tilde = batch["label"], model.labels[:12]
    terms = []
    for i in range(12):
        kind = int(flags[i])
        ce = [float(F.cross_entropy(z[i : i + 1], y[i : i + 1])) for z in (zw, zs)]
        p = [float(z[i].softmax(0)[y[i]]) for z in (zw, zs)]
        gce = [(1 - max(v, 1e-7) ** 0.7) / 0.7 for v in p]
        if kind == 0:
            terms.append(1.5 * sum(ce))
        elif kind == 1:
            terms.append(0.5 * sum(gce))
    terms = torch.tensor(terms, dtype=torch.float64)
    mean = float(terms.mean())
    variance = float(((terms - mean) ** 2).mean())
    supervised = len(terms) / 12 * (mean - alpha * variance)
    mixed = [i for i in range(12) if int(flags[i]) < 3]
    mix = sum(
        float(F.cross_entropy(z[mixed], tilde[mixed])) for z in (zw, zs)
    )  # the mean over the mixed set, each view
    assert float(objective.detach()) == pytest.approx(supervised + mix, rel=1e-5)
    step = model._steps[-1]
    assert torch.equal(step.used, flags[:12] < 2)


def test_mixup_partners_are_drawn_within_the_members() -> None:
    """A random bijection of the members; the others are paired among themselves."""
    members = torch.tensor([True, False, True, True, False, True, False, True])
    seen = set()
    for seed in range(40):
        gen = torch.Generator().manual_seed(seed)
        partners = draw_partners(8, 10, (1, 0), gen, torch.device("cpu"), members)
        assert sorted(partners.tolist()) == list(range(8))
        assert bool(members[partners][members].all()) and not bool(
            members[partners][~members].any()
        )
        seen.add(tuple(partners[members].tolist()))
    assert len(seen) > 20  # drawn anew


def test_the_tables_survive_a_checkpoint() -> None:
    model = disc()
    random_tables(model, seed=4)
    model.select()
    state = model.state_dict()
    assert state["disc_probs"].shape == (2, N, C) and state["disc_selection"].shape == (3, N)
    fresh = DISC(network={"backbone": "mlp"}, num_classes=C, input_shape=(1, 2, 2))
    fresh.load_state_dict(state)
    for name in ("probs", "thresholds", "selection", "labels"):  # the scratch row apart
        assert torch.equal(getattr(fresh, name)[..., :-1], getattr(model, name)[..., :-1]), name
    assert int(fresh.selected_epoch) == int(model.selected_epoch)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"momentum": 1.0}, r"--model\.momentum .* must be in \[0, 1\)"),
        ({"sigma": -0.1}, r"--model\.sigma must be a number >= 0"),
        ({"correction_cap": 0.0}, r"--model\.correction_cap must be in \(0, 1\]"),
        ({"lambda_h": math.nan}, r"--model\.lambda_h must be a number >= 0"),
        ({"q": 1.5}, r"--model\.q .* must be in \(0, 1\]"),
        ({"mixup_alpha": math.inf}, r"--model\.mixup_alpha must be a finite number"),
    ],
)
def test_bad_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        DISC(**options)
