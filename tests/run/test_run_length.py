"""A run's length is "how long to train" only where its plan does not end with the run: a resume
with another ``--trainer.max_epochs`` is refused where the learning rate or a stage is placed
from the last epoch, and the test of the last epochs covers the run's last epochs as it ends."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from noisylabels.callbacks.tail_test import TailTest
from noisylabels.errors import InputError
from noisylabels.methods.core.stages import StagedLR, StageSchedule

from conftest import CONFIGS, read_results


def plan(schedule: StageSchedule, max_epochs: int, epochs: int) -> tuple[list[float], int | None]:
    """The learning rate of the first ``epochs`` epochs of a run of ``max_epochs``, and where
    its revision stage starts, as :meth:`StagedModule.make_scheduler` builds them."""
    revision = int(schedule.revision_epochs)
    start = schedule.revision_start(max_epochs, revision)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    scheduler = StagedLR(optimizer, schedule, int(schedule.warmup_epochs), start or max_epochs)
    rates = []
    for _ in range(epochs):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates, start


# each kind with the options it uses (the schedule refuses the others), its decay within the run
KINDS = [
    {"lr_schedule": "multistep", "milestones": (3, 5)},
    {"lr_schedule": "linear", "decay_start": 2},
    {"lr_schedule": "cosine"},
    {"lr_schedule": "cosine", "cosine_period": 3},
]
SCHEDULES = [
    StageSchedule(warmup_epochs=warmup, main_epochs=8, revision_epochs=revision, **kind)
    for warmup, revision, kind in itertools.product((0, 2), (0, 2), KINDS)
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
def test_a_plan_ends_with_the_run_exactly_where_another_length_changes_it(
    schedule: StageSchedule,
) -> None:
    """For every kind of schedule: the epochs two runs of different lengths share get the same
    learning rates and the same stages, unless the schedule says its plan ends with the run."""
    epochs = schedule.total_epochs
    same = plan(schedule, epochs, epochs) == plan(schedule, epochs + 3, epochs)
    assert (schedule.ends_with_the_run() is None) == same


COTEACHING = [
    "--config", str(CONFIGS / "data" / "digits.yaml"),
    "--config", str(CONFIGS / "method" / "coteaching.yaml"),
    "--model.schedule.main_epochs", "3", "--model.schedule.decay_start", "1",
    "--trainer.limit_train_batches", "3", "--trainer.enable_model_summary", "false",
]  # fmt: skip
CE = [
    "--config", str(CONFIGS / "quickstart.yaml"),
    "--trainer.limit_train_batches", "3", "--trainer.enable_model_summary", "false",
]  # fmt: skip


def unfinished(root: Path) -> Path:
    """The run folder under ``root`` made into a stopped run (its results.json taken away, as
    a run killed after its last checkpoint has none)."""
    results = next(root.rglob("results.json"))
    results.unlink()
    return results.parent


def test_a_stopped_run_whose_plan_ends_with_it_resumes_only_at_its_own_length(
    run_cli, tmp_path: Path
) -> None:
    """Co-teaching decays its learning rate to 0 at the last epoch: its stopped run resumed with
    another ``--trainer.max_epochs`` is refused before anything is written, naming why; with
    its own length it resumes. A multistep run (the quickstart) may train longer."""
    run_cli("fit", *COTEACHING, "--trainer.max_epochs", "2", root=tmp_path)
    folder = unfinished(tmp_path)
    before = sorted(p.name for p in folder.rglob("*"))
    with pytest.raises(InputError, match="depends on the run's last epoch") as refused:
        run_cli("fit", *COTEACHING, "--trainer.max_epochs", "3", "--ckpt_path", "last",
                root=tmp_path)  # fmt: skip
    assert "decays linearly to 0" in str(refused.value)
    assert "--trainer.max_epochs 2" in str(refused.value)
    assert sorted(p.name for p in folder.rglob("*")) == before
    run_cli("fit", *COTEACHING, "--trainer.max_epochs", "2", "--ckpt_path", "last", root=tmp_path)
    assert read_results(tmp_path)["epochs"] == 2

    run_cli("fit", *CE, "--trainer.max_epochs", "1", root=tmp_path / "ce")
    unfinished(tmp_path / "ce")
    run_cli("fit", *CE, "--trainer.max_epochs", "2", "--ckpt_path", "last", root=tmp_path / "ce")
    longer = read_results(tmp_path / "ce")
    assert longer["epochs"] == 2 and longer["resumed"][0]["changed"] == {
        "trainer.max_epochs": [1, 2]
    }


def test_the_tail_of_a_continued_run_is_its_own_last_epochs(run_cli, tmp_path: Path) -> None:
    """A finished run with ``--tail_test_epochs 2`` continued longer (a new run from its
    last.ckpt): its tail is the new run's last 2 epochs, the finished run's records left out."""
    run_cli("fit", *CE, "--trainer.max_epochs", "3", "--tail_test_epochs", "2",
            root=tmp_path / "first")  # fmt: skip
    first = read_results(tmp_path / "first")
    assert first["test_acc_tail"]["epochs"] == [1, 2]
    folder = next((tmp_path / "first").rglob("results.json")).parent
    run_cli("fit", *CE, "--trainer.max_epochs", "5", "--tail_test_epochs", "2",
            "--ckpt_path", str(folder), root=tmp_path / "longer")  # fmt: skip
    tail = read_results(tmp_path / "longer")["test_acc_tail"]
    assert tail["epochs"] == [3, 4]
    assert tail["mean"] == pytest.approx(sum(a for acc in tail["acc"] for a in acc) / 2)


@pytest.mark.parametrize(
    ("recorded", "max_epochs", "epochs", "mean"),
    [
        ([7, 8, 9], 10, [7, 8, 9], 0.8),  # the whole tail
        ([3, 5, 6, 7], 8, [5, 6, 7], 0.8),  # an older plan's epoch 3 is not this run's tail
        ([7, 8], 9, [7, 8], None),  # epoch 6 was never recorded: no mean
        ([1, 2], 6, None, None),  # nothing of this run's tail
    ],
)
def test_a_tail_is_the_run_s_last_epochs_or_has_no_mean(
    recorded: list[int], max_epochs: int, epochs: list[int] | None, mean: float | None
) -> None:
    """The summary holds the recorded epochs inside the run's last ``epochs`` only; a tail that
    lacks one of them names it and has no mean."""
    tail = TailTest(epochs=3)
    tail.records = [{"epoch": e, "acc": [0.7, 0.9], "score": 0.8} for e in recorded]
    summary = tail.summary(max_epochs)
    if epochs is None:
        assert summary is None
        return
    assert summary["epochs"] == epochs
    if mean is None:
        assert summary["mean"] is None
        assert summary["missing"] == sorted(set(range(max_epochs - 3, max_epochs)) - set(epochs))
    else:
        assert summary["mean"] == pytest.approx(mean) and "missing" not in summary
