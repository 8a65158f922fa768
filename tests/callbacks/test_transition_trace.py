"""TransitionTrace: how T̂ forms during a warm-up (noisylabels.callbacks.transition_trace)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from noisylabels.callbacks.transition_trace import single_flips, trace_columns, trace_row
from noisylabels.noise import build_transition

from conftest import CONFIGS


def outputs_of(T: torch.Tensor, per_class: int = 30, seed: int = 0) -> tuple:
    """Softmax outputs of a network that learned the noisy posterior ``T[clean]`` (with a
    little spread), and the clean labels, ``per_class`` images of each class."""
    gen = torch.Generator().manual_seed(seed)
    c = T.shape[0]
    clean = torch.arange(c).repeat_interleave(per_class)
    logits = T[clean].clamp_min(1e-6).log() + 0.1 * torch.randn(len(clean), c, generator=gen)
    return logits.softmax(dim=1), clean


@pytest.mark.parametrize("rate", [0.2, 0.45])
def test_a_network_that_learned_the_noise_points_every_flip_the_right_way(rate: float) -> None:
    T = build_transition("pair", 10, rate)
    probs, clean = outputs_of(T)
    row = trace_row(probs, clean, T)
    for name in ("filtered", "unfiltered"):
        assert row[f"{name}/wrong_flips"] == 0
        assert row[f"{name}/anchors_right"] == 10
        flips = torch.tensor([row[f"{name}/flip/{i}"] for i in range(10)])
        right, flipping = single_flips(T)
        assert torch.equal(flips[flipping], right[flipping])
        assert row[f"{name}/t_estimation_error"] < 0.5
    assert set(row) <= set(trace_columns(10))


def test_a_network_that_flips_some_classes_backwards_is_named_class_by_class() -> None:
    """Where the network learned, for the images of classes 0 and 1, the flips of pair noise
    backwards (to class 9 and 0), the rows of 0 and 1 and only they point the wrong way."""
    T = build_transition("pair", 10, 0.45)
    backwards = T.clone()
    for k in (0, 1):
        backwards[k] = 0.0
        backwards[k, k], backwards[k, (k - 1) % 10] = 0.55, 0.45
    probs, clean = outputs_of(backwards)
    row = trace_row(probs, clean, T)
    assert [row[f"filtered/flip/{i}"] for i in range(3)] == [9, 0, 3]
    assert row["filtered/wrong_flips"] == 2 and row["filtered/anchors_right"] == 10


def test_symmetric_noise_has_no_flip_direction_and_unknown_clean_labels_no_anchor_count() -> None:
    T = build_transition("symmetric", 10, 0.4)
    probs, clean = outputs_of(T)
    row = trace_row(probs, torch.full_like(clean, -1), T)
    assert "filtered/wrong_flips" not in row and "filtered/anchors_right" not in row
    assert row["filtered/anchor_clean/0"] == -1
    assert "filtered/t_estimation_error" not in trace_row(probs, clean, None)


def test_the_trace_observes_the_warmup_and_changes_nothing(run_cli, tmp_path: Path) -> None:
    """A row per warm-up epoch, both filter settings; the last warm-up epoch's filtered ε_T is
    the run's own (its T̂ comes from the last warm-up model); and the traced run is the run
    without the trace, to the last digit."""
    args = ["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--model.transition", "estimate",
            "--model.schedule.warmup_epochs", "3", "--model.schedule.warmup_model", "last",
            "--model.schedule.main_epochs", "1", "--model.schedule.milestones", "[]",
            "--trainer.limit_train_batches", "4",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    traced = run_cli(*args, "--trainer.callbacks+=noisylabels.callbacks.TransitionTrace",
                     root=tmp_path / "traced")  # fmt: skip
    plain = run_cli(*args, root=tmp_path / "plain")
    folder = Path(traced.trainer.log_dir)
    with (folder / "transition_trace.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert all(r["unfiltered/diag_mean"] and r["filtered/anchor_clean/9"] for r in rows)
    results = json.loads((folder / "results.json").read_text())
    assert float(rows[-1]["filtered/t_estimation_error"]) == pytest.approx(
        results["t_estimation_error"], abs=1e-6
    )
    other = json.loads((Path(plain.trainer.log_dir) / "results.json").read_text())
    assert results["test_acc"] == other["test_acc"]
    assert results["t_estimation_error"] == other["t_estimation_error"]
    for a, b in zip(traced.model.parameters(), plain.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_run_that_estimates_no_transition_refuses_the_trace(run_cli) -> None:
    from noisylabels.errors import InputError

    with pytest.raises(InputError, match="TransitionTrace .* Forward here estimates none"):
        run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"),  # the true T
                "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
                "--trainer.callbacks+=noisylabels.callbacks.TransitionTrace")  # fmt: skip


def test_a_quantile_that_is_no_fraction_is_refused_before_the_run(run_cli, tmp_path: Path) -> None:
    from noisylabels.errors import InputError

    with pytest.raises(InputError, match=r"quantile=97.0\): the filter's quantile is a fraction"):
        run_cli("fit", "--config", str(CONFIGS / "quickstart.yaml"), "--model.transition",
                "estimate", "--model.schedule.warmup_epochs", "2",
                "--trainer.callbacks+=noisylabels.callbacks.TransitionTrace",
                "--trainer.callbacks.init_args.quantile", "97")  # fmt: skip
    assert not list(tmp_path.rglob("*.ckpt"))
