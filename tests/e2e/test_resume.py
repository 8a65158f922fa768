"""Crash-proof runs: kill the real command line at any point, resume with ``--ckpt_path last``,
and end with the results of an uninterrupted run; SIGTERM; resuming against the config."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from as_command import run_command

from conftest import CONFIGS, copy_run, read_results

# the digits and a small MLP with dropout, so the resumed run depends on the restored random
# state as well as on the data order
QUICK = [
    "--config", str(CONFIGS / "quickstart.yaml"),
    "--model.network.backbone_kwargs", "{hidden: [64], dropout: 0.2}",
    "--trainer.limit_train_batches", "10", "--trainer.enable_model_summary", "false",
]  # fmt: skip
REWEIGHT = [
    "--config", str(CONFIGS / "data" / "digits.yaml"),
    "--config", str(CONFIGS / "method" / "reweight.yaml"),
    "--model.schedule.warmup_epochs", "2", "--model.schedule.milestones", "[1]",
    "--model.network.backbone_kwargs", "{hidden: [64], dropout: 0.2}",
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
    """``noisylabels fit ARGS`` as the real command in a process of its own (with this process's
    number of torch threads, so its arithmetic is this process's), optionally signalled at
    ``(epoch, batch, signal)``."""
    argv = ["fit", *args]
    argv += ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    if interrupt is not None:
        epoch, batch, sig = interrupt
        argv += [
            "--trainer.callbacks+=interrupt.InterruptAt",
            "--trainer.callbacks.epoch", str(epoch),
            "--trainer.callbacks.batch", str(batch),
            "--trainer.callbacks.sig", str(sig),
        ]  # fmt: skip
    return run_command(argv, threads=torch.get_num_threads())


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


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root of a run of QUICK over 3 epochs, never interrupted: what the killed and resumed
    run, and the run continued in a copied folder, end as."""
    from noisylabels.cli import run

    root = tmp_path_factory.mktemp("straight")
    run(["fit", *QUICK, "--trainer.max_epochs", "3", "--trainer.default_root_dir", str(root),
         "--trainer.enable_progress_bar", "false"])  # fmt: skip
    return root


def test_sigkill_mid_epoch_then_resume_equals_uninterrupted(
    straight_run: Path, run_cli, tmp_path: Path
) -> None:
    """SIGKILL in the middle of epoch 1 of 3; ``--ckpt_path last`` continues the same run folder
    from the end of epoch 0 and ends bit-identical to the run that was never interrupted."""
    root = tmp_path / "killed"
    killed = run_cli_process(
        root, *QUICK, "--trainer.max_epochs", "3", interrupt=(1, 4, signal.SIGKILL)
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not list(root.rglob("results.json"))
    last = last_checkpoint(root)
    state = torch.load(last, weights_only=True)
    assert state["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 1
    assert {"torch", "numpy", "python"} <= set(state["callbacks"]["RunRecorder"]["rng"])

    run_cli("fit", *QUICK, "--trainer.max_epochs", "3", "--ckpt_path", "last", root=root)
    resumed = assert_same_run(straight_run, root)
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
    assert not list(root.rglob("results.json"))
    folder = last_checkpoint(root).parent.parent
    assert len(notes) == 1 and "SIGTERM" in notes[0] and f"--ckpt_path {folder}" in notes[0]
    assert "SIGTERM" in (folder / "unfinished.txt").read_text()

    resumed = run_cli_process(root, *QUICK, "--trainer.max_epochs", "2", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    results = json.loads((folder / "results.json").read_text())
    assert results["resumed"][0]["epochs_done"] == 1
    assert not (folder / "unfinished.txt").exists()


# what decides what a run computes, changed on resume: each is refused with every file as it was
# (the optimizer and schedule would keep the checkpoint's values while the record said otherwise)
IDENTITY_CHANGES = {
    "model.optim.lr": ["--model.optim.lr", "1e-7"],
    "model.optim.weight_decay": ["--model.optim.weight_decay", "0.1"],
    "model.optim.momentum": ["--model.optim.momentum", "0.5"],
    "model.alpha": ["--model.alpha", "0.3"],
    "model.schedule.milestones": ["--model.schedule.milestones", "[1]"],
    "model.schedule.lr_gamma": ["--model.schedule.lr_gamma", "0.5"],
    "model.optim.optimizer": [
        "--model.optim.optimizer",
        "adam",
        "--model.schedule.warmup_momentum",
        "null",
    ],
    "seed": ["--seed_everything", "7"],
    "data.noise_seed": ["--data.noise_seed", "5"],
    "data.noise_rate": ["--data.noise_rate", "0.3"],
    "data.batch_size": ["--data.batch_size", "32"],
    "trainer.gradient_clip_val": ["--trainer.gradient_clip_val", "0.5"],
    "trainer.accumulate_grad_batches": ["--trainer.accumulate_grad_batches", "2"],
    "checkpoint.monitor": ["--checkpoint.monitor", "val/loss", "--checkpoint.mode", "min"],
}
ONE_EPOCH = [*QUICK, "--trainer.limit_train_batches", "3"]


def snapshot(root: Path) -> dict[Path, bytes]:
    """Every file under ``root`` with its bytes."""
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def one_epoch_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root of a finished run of ONE_EPOCH over 1 epoch (a test copies it to change it)."""
    from noisylabels.cli import run

    root = tmp_path_factory.mktemp("finished")
    run(["fit", *ONE_EPOCH, "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(root),
         "--trainer.enable_progress_bar", "false"])  # fmt: skip
    return root


@pytest.fixture(scope="module")
def stopped_run(one_epoch_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root of a run stopped after 1 of its epochs (its results.json not yet written): the
    finished run, copied."""
    root = copy_run(one_epoch_run, tmp_path_factory.mktemp("stopped") / "root")
    next(root.rglob("results.json")).unlink()  # as a run killed in its final test leaves it
    return root


@pytest.mark.parametrize("option", list(IDENTITY_CHANGES))
def test_a_resume_that_changes_the_experiment_is_refused_and_touches_nothing(
    option: str, stopped_run: Path, run_cli, tmp_path: Path
) -> None:
    """A resume continues the same experiment: an optimization option, the seed, the data or
    the model selection changed on resume is refused, naming it, and every file of the run is
    byte for byte what it was (no file added)."""
    from noisylabels.errors import InputError

    root = tmp_path / "run"
    shutil.copytree(stopped_run, root)
    before = snapshot(root)
    with pytest.raises(InputError, match=re.escape(option)) as refused:
        run_cli("fit", *ONE_EPOCH, "--trainer.max_epochs", "2", *IDENTITY_CHANGES[option],
                "--ckpt_path", "last", root=root)  # fmt: skip
    assert "was trained as another experiment" in str(refused.value)
    assert snapshot(root) == before


def test_a_resume_records_the_options_it_may_change(
    one_epoch_run: Path, stopped_run: Path, run_cli, tmp_path
) -> None:
    """The options that may change on resume (identity.RESUMABLE: the run's length, logging,
    what the terminal shows) are announced and recorded, and the run continues in its folder."""
    root = tmp_path / "run"
    shutil.copytree(stopped_run, root)
    run_cli("fit", *ONE_EPOCH, "--trainer.max_epochs", "2", "--trainer.log_every_n_steps", "1",
            "--ckpt_path", "last", root=root)  # fmt: skip
    results = read_results(root)
    assert results["epochs"] == 2
    assert results["resumed"][0]["changed"] == {
        "trainer.default_root_dir": [str(one_epoch_run), str(root)],  # the run folder was copied
        "trainer.log_every_n_steps": [5, 1],
        "trainer.max_epochs": [1, 2],
    }


def test_a_resume_below_the_epochs_done_is_refused(stopped_run: Path, run_cli, tmp_path) -> None:
    from noisylabels.errors import InputError

    root = tmp_path / "run"
    shutil.copytree(stopped_run, root)
    before = snapshot(root)
    with pytest.raises(InputError, match="completed 1 epochs, more than --trainer.max_epochs 0"):
        run_cli("fit", *ONE_EPOCH, "--trainer.max_epochs", "0", "--ckpt_path", "last", root=root)
    assert snapshot(root) == before


def test_last_continues_the_newest_run_of_the_same_experiment(
    one_epoch_run: Path, run_cli, tmp_path: Path
) -> None:
    """Two experiments under one root (README's estimated-T and true-T Forward runs share
    their preset's folder): --ckpt_path last continues the one of this experiment, not the
    newest, and refuses where none is of it."""
    from noisylabels.errors import InputError

    shutil.copytree(one_epoch_run, tmp_path, dirs_exist_ok=True)  # a run of the preset's alpha, 0.1
    run_cli("fit", *ONE_EPOCH, "--trainer.max_epochs", "1", "--model.alpha", "0.0")  # a newer one
    for results in tmp_path.rglob("results.json"):
        results.unlink()
    run_cli("fit", *ONE_EPOCH, "--trainer.max_epochs", "2", "--model.alpha", "0.1",
            "--ckpt_path", "last")  # fmt: skip
    finished = json.loads(next(tmp_path.rglob("results.json")).read_text())
    assert finished["alpha"] == 0.1 and finished["epochs"] == 2
    assert "/version_0/" in finished["resumed"][0]["from"]
    with pytest.raises(InputError, match="none of the 2 runs"):
        run_cli("fit", *ONE_EPOCH, "--trainer.max_epochs", "2", "--model.alpha", "0.2",
                "--ckpt_path", "last")  # fmt: skip


def test_a_finished_run_is_never_rewritten(
    one_epoch_run: Path, run_cli, tmp_path: Path, capsys
) -> None:
    """Continuing a finished run (to train it longer) starts a new run folder from its
    last.ckpt and leaves the finished one as it was; with the same length it is refused."""
    from noisylabels.errors import InputError

    shutil.copytree(one_epoch_run, tmp_path, dirs_exist_ok=True)
    before = snapshot(tmp_path)
    with pytest.raises(InputError, match="trains nothing more"):
        run_cli("fit", *ONE_EPOCH, "--trainer.max_epochs", "1", "--ckpt_path", "last")
    assert snapshot(tmp_path) == before
    capsys.readouterr()
    run_cli("fit", *ONE_EPOCH, "--trainer.max_epochs", "2", "--ckpt_path", "last")
    assert "is a finished run, which is never rewritten" in capsys.readouterr().err
    after = snapshot(tmp_path)
    assert {p: v for p, v in after.items() if p in before} == before
    longer = json.loads((tmp_path / "lightning_logs/version_1/results.json").read_text())
    assert longer["epochs"] == 2 and longer["resumed"][0]["epochs_done"] == 1


def test_a_copied_run_folder_keeps_its_best_checkpoint(
    straight_run: Path, run_cli, tmp_path: Path
) -> None:
    """A run folder copied elsewhere and continued there keeps the best checkpoint and score
    it had (Lightning's own bookkeeping resets them where the folder's path changed, and would
    then select a worse epoch): it ends as the uninterrupted run does."""
    run_cli("fit", *QUICK, "--trainer.max_epochs", "2", root=tmp_path / "first")
    next((tmp_path / "first").rglob("results.json")).unlink()
    shutil.copytree(tmp_path / "first", tmp_path / "copy")
    shutil.rmtree(tmp_path / "first")
    folder = next((tmp_path / "copy").rglob("last.ckpt")).parents[1]
    run_cli("fit", *QUICK, "--trainer.max_epochs", "3", "--ckpt_path", str(folder),
            root=tmp_path / "copy")  # fmt: skip
    straight, copied = read_results(straight_run), read_results(tmp_path / "copy")
    assert copied["checkpoint"].startswith(str(folder))
    for key in ("best_epoch", "monitor_score", "test_acc", "test_acc_last"):
        assert copied[key] == straight[key], key


def test_resume_from_python_records_the_changed_run_length(tmp_path: Path) -> None:
    """fit_and_test from Python (no config): the trainer's run-length settings are recorded
    where they changed; the finished run is continued in another folder."""
    from lightning import Trainer

    from noisylabels.data import DigitsDataModule
    from noisylabels.methods import CE
    from noisylabels.run import RunPlan, fit_and_test

    def run(epochs: int, root: Path, ckpt_path: str | None = None) -> dict:
        trainer = Trainer(
            max_epochs=epochs, limit_train_batches=2, default_root_dir=root, logger=False,
            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        )  # fmt: skip
        model = CE(network={"backbone": "mlp"}, num_classes=10, input_shape=(1, 8, 8))
        return fit_and_test(
            model, DigitsDataModule(), trainer, RunPlan(resume=ckpt_path, test_after_fit=False)
        )

    run(1, tmp_path / "first")
    results = run(2, tmp_path / "longer", str(last_checkpoint(tmp_path / "first")))
    assert results["resumed"][0]["changed"] == {"trainer.max_epochs": [1, 2]}


def test_resume_with_other_noisy_labels_is_refused(run_cli, tmp_path: Path) -> None:
    """The labels a run trains on are part of what it is: a label file edited since the run
    started is refused on resume (its content's hash, and the labels' own), files untouched."""
    from noisylabels.errors import InputError

    labels = tmp_path / "labels.csv"
    ce = [*QUICK, "--model", "CE", "--model.schedule.warmup_epochs", "0"]
    run_cli("fit", *ce, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
            "--data.noise_type", "file", "--data.noise_file", str(labels_file(labels)),
            root=tmp_path / "runs")  # fmt: skip
    next((tmp_path / "runs").rglob("results.json")).unlink()
    flipped = labels.read_text().splitlines()
    flipped[0] = str((int(flipped[0]) + 1) % 10)
    labels.write_text("\n".join(flipped) + "\n")
    before = snapshot(tmp_path / "runs")
    with pytest.raises(InputError, match="inputs.data.noise_file") as refused:
        run_cli("fit", *ce, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2",
                "--data.noise_type", "file", "--data.noise_file", str(labels),
                "--ckpt_path", "last", root=tmp_path / "runs")  # fmt: skip
    assert "labels.sha256" in str(refused.value)
    assert snapshot(tmp_path / "runs") == before


def labels_file(path: Path) -> Path:
    """A label file of the digits' training labels with 20 % of them flipped."""
    from noisylabels.data import DigitsDataModule

    clean = DigitsDataModule(noise_type="none").load().train_clean
    noisy = clean.clone()
    noisy[::5] = (noisy[::5] + 1) % 10
    path.write_text("\n".join(str(int(v)) for v in noisy) + "\n")
    return path


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
