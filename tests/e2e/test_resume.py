"""Crash-proof runs: kill the real command line at any point, resume with ``--ckpt_path last``,
and end with the results of an uninterrupted run; SIGTERM; resuming against the config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import CONFIGS, REPO, read_results

TESTS = Path(__file__).resolve().parent
# the digits and a small MLP with dropout, so the resumed run depends on the restored random
# state as well as on the data order
QUICK = [
    "--config", str(CONFIGS / "quickstart.yaml"),
    "--model.backbone_kwargs", "{hidden: [64], dropout: 0.2}",
    "--trainer.limit_train_batches", "10", "--trainer.enable_model_summary", "false",
]  # fmt: skip
REWEIGHT = [
    "--config", str(CONFIGS / "data" / "digits.yaml"),
    "--config", str(CONFIGS / "method" / "reweight.yaml"),
    "--model.warmup_epochs", "2", "--model.milestones", "[1]",
    "--model.backbone_kwargs", "{hidden: [64], dropout: 0.2}",
    "--trainer.max_epochs", "4", "--trainer.accelerator", "cpu",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip
METRICS = (
    "method", "alpha", "backbone", "dataset", "noise", "data", "seed", "epochs", "best_epoch",
    "monitor", "monitor_score", "val_acc", "test_acc", "t_estimation_error",
)  # fmt: skip
DYNAMICS = "sample_dynamics.pt"


def run_cli_process(
    root: Path, *args: str, interrupt: tuple[int, int, int] | None = None
) -> subprocess.CompletedProcess:
    """``python -m noisylabels.cli fit ARGS`` in a new process (with this process's number of
    torch threads, so its arithmetic is this process's), optionally signalled at
    ``(epoch, batch, signal)``."""
    argv = [sys.executable, "-m", "noisylabels.cli", "fit", *args]
    argv += ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    if interrupt is not None:
        epoch, batch, sig = interrupt
        argv += [
            "--trainer.callbacks+=interrupt.InterruptAt",
            "--trainer.callbacks.epoch", str(epoch),
            "--trainer.callbacks.batch", str(batch),
            "--trainer.callbacks.sig", str(sig),
        ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)]),
        "OMP_NUM_THREADS": str(torch.get_num_threads()),
    }
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def last_checkpoint(root: Path) -> Path:
    found = sorted(root.rglob("last.ckpt"))
    assert len(found) == 1, found
    return found[0]


def assert_same_run(uninterrupted: Path, resumed: Path) -> dict:
    """The resumed run's results.json metrics and final weights equal the uninterrupted run's
    bit for bit; returns the resumed results."""
    a, b = read_results(uninterrupted), read_results(resumed)
    assert {k: a[k] for k in METRICS} == {k: b[k] for k in METRICS}
    assert a["provenance"]["config_sha256"] == b["provenance"]["config_sha256"]
    assert a["resumed"] == [] and len(b["resumed"]) == 1
    final_a = torch.load(last_checkpoint(uninterrupted), weights_only=True)["state_dict"]
    final_b = torch.load(last_checkpoint(resumed), weights_only=True)["state_dict"]
    assert final_a.keys() == final_b.keys()
    for name in final_a:
        assert torch.equal(final_a[name], final_b[name]), name
    # and so does every sample's record over the epochs (what `noisylabels audit` ranks by)
    (path_a,), (path_b,) = uninterrupted.rglob(DYNAMICS), resumed.rglob(DYNAMICS)
    record_a = torch.load(path_a, weights_only=True)
    record_b = torch.load(path_b, weights_only=True)
    assert record_a.keys() == record_b.keys() and record_b["epochs"] == record_b["trained_epochs"]
    for name, value in record_a.items():
        if torch.is_tensor(value):
            assert torch.equal(value, record_b[name]), name
        else:
            assert value == record_b[name], name
    return b


def test_sigkill_mid_epoch_then_resume_equals_uninterrupted(run_cli, tmp_path: Path) -> None:
    """SIGKILL in the middle of epoch 1 of 2; ``--ckpt_path last`` continues the same run folder
    from the end of epoch 0 and ends bit-identical to the run that was never interrupted."""
    run_cli("fit", *QUICK, "--trainer.max_epochs", "2", root=tmp_path / "straight")
    root = tmp_path / "killed"
    killed = run_cli_process(
        root, *QUICK, "--trainer.max_epochs", "2", interrupt=(1, 4, signal.SIGKILL)
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not list(root.rglob("results.json"))
    last = last_checkpoint(root)
    state = torch.load(last, weights_only=True)
    assert state["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 1
    assert {"torch", "numpy", "python"} <= set(state["callbacks"]["LastCheckpoint"]["rng"])

    run_cli("fit", *QUICK, "--trainer.max_epochs", "2", "--ckpt_path", "last", root=root)
    resumed = assert_same_run(tmp_path / "straight", root)
    # in the same run folder, which says it was resumed and from what
    assert last_checkpoint(root) == last
    assert next(root.rglob("results.json")).parent == last.parent.parent
    # the one trainer option that differs is the interrupting callback, recorded as changed
    [record] = resumed["resumed"]
    assert {k: record[k] for k in ("from", "epochs_done")} == {"from": str(last), "epochs_done": 1}
    assert list(record["changed"]) == ["trainer.callbacks"]
    before, after = record["changed"]["trainer.callbacks"]
    assert [c["class_path"] for c in before] == [
        *(c["class_path"] for c in after),
        "interrupt.InterruptAt",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "interrupt",
    [(1, 3), (2, 0)],
    ids=["during-warmup", "right-after-T-estimation"],
)
def test_reweight_killed_across_warmup_and_estimation(
    run_cli, tmp_path: Path, interrupt: tuple[int, int]
) -> None:
    """Reweight (2 warm-up epochs, T̂ estimated at the start of epoch 2, LR milestone after the
    first reweighted epoch) killed in the warm-up or right after estimating T̂ resumes to the
    uninterrupted run's results, T̂ included."""
    run_cli("fit", *REWEIGHT, root=tmp_path / "straight")
    root = tmp_path / "killed"
    killed = run_cli_process(root, *REWEIGHT, interrupt=(*interrupt, signal.SIGKILL))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    run_cli("fit", *REWEIGHT, "--ckpt_path", "last", root=root)
    resumed = assert_same_run(tmp_path / "straight", root)
    assert resumed["resumed"][0]["epochs_done"] == interrupt[0]
    straight_t = next((tmp_path / "straight").rglob("transition_estimate.csv")).read_text()
    assert next(root.rglob("transition_estimate.csv")).read_text() == straight_t


@pytest.mark.slow
def test_sigterm_keeps_last_checkpoint_exits_nonzero_and_resumes(tmp_path: Path) -> None:
    """SIGTERM (a batch scheduler's stop): one paragraph, exit status 143, no results.json, the
    run folder marked unfinished with its last.ckpt; the resumed run finishes it."""
    root = tmp_path / "run"
    stopped = run_cli_process(
        root, *QUICK, "--trainer.max_epochs", "2", interrupt=(1, 3, signal.SIGTERM)
    )
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    notes = [line for line in stopped.stderr.splitlines() if line.startswith("noisylabels:")]
    assert len(notes) == 1 and "SIGTERM" in notes[0] and "--ckpt_path last" in notes[0]
    assert not list(root.rglob("results.json"))
    folder = last_checkpoint(root).parent.parent
    assert "SIGTERM" in (folder / "unfinished.txt").read_text()

    resumed = run_cli_process(root, *QUICK, "--trainer.max_epochs", "2", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    results = json.loads((folder / "results.json").read_text())
    assert results["resumed"][0]["epochs_done"] == 1
    assert not (folder / "unfinished.txt").exists()


def test_resume_with_a_changed_hyperparameter_uses_and_records_it(
    run_cli, tmp_path: Path, capsys
) -> None:
    """A hyperparameter given on the command line wins over the checkpoint's, is announced and
    recorded; the checkpoint's value is never applied over the config."""
    run_cli("fit", *QUICK, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3")
    capsys.readouterr()
    cli = run_cli(
        "fit", *QUICK, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3",
        "--model.alpha", "0.3", "--ckpt_path", "last",
    )  # fmt: skip
    assert cli.model.alpha == 0.3
    notice = capsys.readouterr().err
    assert "model.alpha: 0.1 -> 0.3" in notice and "trainer.max_epochs: 1 -> 2" in notice
    results = read_results(tmp_path)
    assert results["alpha"] == 0.3 and results["epochs"] == 2
    assert results["resumed"][0]["changed"] == {
        "model.alpha": [0.1, 0.3],
        "trainer.max_epochs": [1, 2],
    }


def test_resume_records_every_changed_trainer_option(run_cli, tmp_path: Path, capsys) -> None:
    """Trainer options (not only the method's and the data's) that differ from the checkpoint's
    run are printed and recorded: a longer run and another gradient clipping; an option given
    again with its old value is not a change."""
    run_cli("fit", *QUICK, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3")
    capsys.readouterr()
    run_cli(
        "fit", *QUICK, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3",
        "--trainer.gradient_clip_val", "0.5", "--ckpt_path", "last",
    )  # fmt: skip
    notice = [line for line in capsys.readouterr().err.splitlines() if "resuming from" in line]
    assert len(notice) == 1
    assert "trainer.max_epochs: 1 -> 2" in notice[0]
    assert "trainer.gradient_clip_val: None -> 0.5" in notice[0]
    assert "limit_train_batches" not in notice[0]
    assert read_results(tmp_path)["resumed"][0]["changed"] == {
        "trainer.gradient_clip_val": [None, 0.5],
        "trainer.max_epochs": [1, 2],
    }


def test_resume_from_python_records_the_changed_run_length(tmp_path: Path) -> None:
    """fit_and_test from Python (no config): the trainer's run-length settings are compared."""
    from lightning import Trainer

    from noisylabels.data import DigitsDataModule
    from noisylabels.methods import CE
    from noisylabels.run import fit_and_test

    def run(epochs: int, ckpt_path: str | None = None) -> dict:
        trainer = Trainer(
            max_epochs=epochs, limit_train_batches=2, default_root_dir=tmp_path, logger=False,
            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        )  # fmt: skip
        model = CE(backbone="mlp", num_classes=10, input_shape=(1, 8, 8))
        return fit_and_test(model, DigitsDataModule(), trainer, ckpt_path=ckpt_path, test=False)

    run(1)
    results = run(2, str(last_checkpoint(tmp_path)))
    assert results["resumed"][0]["changed"] == {"trainer.max_epochs": [1, 2]}


def test_resume_with_other_noisy_labels_is_refused(run_cli, tmp_path: Path) -> None:
    from noisylabels.errors import InputError

    run_cli("fit", *QUICK, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(InputError, match="noisy labels of this run differ"):
        run_cli(
            "fit", *QUICK, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2",
            "--data.noise_seed", "5", "--ckpt_path", "last",
        )  # fmt: skip
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    # the refused resume changed nothing the finished run wrote (results, checkpoints)
    assert {p: v for p, v in after.items() if p.suffix in (".json", ".ckpt")} == {
        p: v for p, v in before.items() if p.suffix in (".json", ".ckpt")
    }
    assert not list(tmp_path.rglob("unfinished.txt"))


def test_last_checkpoint_is_written_every_epoch_in_the_warmup(run_cli, tmp_path: Path) -> None:
    """last.ckpt follows every epoch, warm-up epochs included, though none of them can be a best
    checkpoint."""
    cli = run_cli(
        "fit", *REWEIGHT, "--trainer.max_epochs", "3", "--trainer.limit_train_batches", "2",
        "--test_after_fit", "false", "--trainer.callbacks+=interrupt.LastCheckpointProbe",
    )  # fmt: skip
    probe = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "LastCheckpointProbe")
    assert probe.completed == [0, 1, 2]  # written at the start, then after epochs 0 and 1
    final = torch.load(last_checkpoint(tmp_path), weights_only=True)["loops"]["fit_loop"]
    assert final["epoch_progress"]["current"]["completed"] == 3
    assert [p.name for p in tmp_path.rglob("best-*.ckpt")] == ["best-epoch002.ckpt"]
