"""Every stop leaves an honest run folder: SIGTERM in the final tests, a full disk or a read-only
folder (one paragraph naming the folder and its free space, nothing half-written), files written
atomically and checkpoints staged in the run's own folder rather than in $TMPDIR."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
from as_command import run_command

from conftest import CONFIGS, read_results

QUICK = [
    "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs", "2",
    "--trainer.limit_train_batches", "5", "--trainer.enable_model_summary", "false",
]  # fmt: skip


def fit_process(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``noisylabels fit QUICK ARGS`` as the real command in a process of its own, the test
    callbacks importable."""
    argv = ["fit", *QUICK, *args]
    argv += ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    return run_command(argv)


def notes(process: subprocess.CompletedProcess) -> list[str]:
    return [line for line in process.stderr.splitlines() if line.startswith("noisylabels:")]


def leftovers(root: Path) -> list[Path]:
    """Temporary files and empty files under ``root``."""
    files = [p for p in root.rglob("*") if p.is_file()]
    return [p for p in files if ".tmp" in p.name or p.stat().st_size == 0]


@pytest.mark.parametrize(
    ("test", "batch"),
    [
        pytest.param(1, 1, id="in-the-best-checkpoint-test"),
        pytest.param(0, -1, id="between-the-two-tests", marks=pytest.mark.slow),
    ],
)
def test_sigterm_in_the_final_tests_marks_the_folder_and_resumes(
    run_cli, tmp_path: Path, test: int, batch: int
) -> None:
    """SIGTERM while the final tests run, or between them (where Lightning's loops do not
    look): one line saying so, exit status 143, no results.json, unfinished.txt; the resumed
    run only tests and writes the results."""
    root = tmp_path / "run"
    stopped = fit_process(
        root,
        "--trainer.callbacks+=interrupt.InterruptAtTest",
        "--trainer.callbacks.test", str(test),
        "--trainer.callbacks.batch", str(batch),
    )  # fmt: skip
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    assert len(notes(stopped)) == 1, stopped.stderr[-3000:]
    assert "Stopped by SIGTERM during the final test (training had finished)" in notes(stopped)[0]
    assert not list(root.rglob("results.json"))
    unfinished = next(root.rglob("unfinished.txt"))
    assert "SIGTERM" in unfinished.read_text()

    run_cli("fit", *QUICK, "--ckpt_path", "last", root=root)
    results = read_results(root)
    assert results["resumed"][0]["epochs_done"] == 2 and results["test_acc"] is not None
    assert not unfinished.exists()


def test_ctrl_c_is_a_stop_on_request_that_resumes(run_cli, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) in the middle of an epoch stops the run as asked, not as a crash: one
    line saying so and how to continue, exit status 130, unfinished.txt; it resumes."""
    root = tmp_path / "run"
    stopped = fit_process(
        root, "--trainer.callbacks+=interrupt.InterruptAt", "--trainer.callbacks.epoch", "1",
        "--trainer.callbacks.batch", "2", "--trainer.callbacks.sig", str(int(signal.SIGINT)),
    )  # fmt: skip
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr and "KeyboardInterrupt" not in stopped.stderr
    [note] = notes(stopped)
    assert "Stopped on request (SIGINT, Ctrl-C) in epoch 1" in note
    folder = next(root.rglob("unfinished.txt")).parent
    assert "holds the run at the end of epoch 0, its last completed one" in note
    assert f"`noisylabels fit --config {folder / 'config.yaml'} --ckpt_path {folder}`" in note
    assert "Received SIGTERM" not in stopped.stderr  # the run's own line says what stopped it
    unfinished = next(root.rglob("unfinished.txt")).read_text()
    assert "Stopped on request (SIGINT, Ctrl-C)" in unfinished
    run_cli("fit", *QUICK, "--ckpt_path", "last", root=root)
    assert read_results(root)["resumed"][0]["epochs_done"] == 1


def test_a_stop_in_the_first_epoch_says_no_epoch_completed(tmp_path: Path) -> None:
    root = tmp_path / "run"
    stopped = fit_process(
        root, "--trainer.callbacks+=interrupt.InterruptAt", "--trainer.callbacks.epoch", "0",
        "--trainer.callbacks.batch", "2", "--trainer.callbacks.sig", str(int(signal.SIGINT)),
    )  # fmt: skip
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    [note] = notes(stopped)
    assert "in epoch 0" in note and "as it started, before its first epoch completed" in note
    assert "last completed" not in note


def test_a_full_disk_stops_the_run_with_one_paragraph_and_nothing_half_written(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """The disk fills while last.ckpt of epoch 0 is written: the command ends with one
    paragraph naming the file, its folder and the free space there (exit status 2); the
    last.ckpt written before is intact, no temporary or empty file is left, and unfinished.txt
    says why the run stopped. In this process: the exit status is main's (the process's own
    for this path is test_errors.py's installed command)."""
    from noisylabels.cli import main
    from noisylabels.disk import storage

    monkeypatch.setattr(storage, "_write_file", storage._write_file)  # FailWrites replaces it
    root = tmp_path / "run"
    with pytest.raises(SystemExit) as done:
        main(["fit", *QUICK, "--trainer.callbacks+=interrupt.FailWrites",
              "--trainer.callbacks.epoch", "0", "--trainer.callbacks.name", "last.ckpt",
              "--trainer.default_root_dir", str(root),
              "--trainer.enable_progress_bar", "false"])  # fmt: skip
    stderr = capsys.readouterr().err
    assert done.value.code == 2, stderr[-3000:]
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("noisylabels: error:")]
    assert len(errors) == 1, stderr[-3000:]
    last = next(root.rglob("last.ckpt"))
    assert f"cannot write {last}: the disk is full (No space left on device)" in errors[0]
    assert f"{last.parent} has " in errors[0] and " free of " in errors[0]
    assert torch.load(last, weights_only=True)["epoch"] == 0  # the one of the fit's start
    assert leftovers(root) == []
    assert "No space left on device" in (last.parent.parent / "unfinished.txt").read_text()


@pytest.mark.slow
def test_a_read_only_folder_leaves_no_empty_unfinished_note(tmp_path: Path) -> None:
    """From epoch 1 on nothing can be written (a read-only file system): one paragraph saying
    so, and neither an empty unfinished.txt nor a half-written checkpoint."""
    root = tmp_path / "run"
    frozen = fit_process(
        root,
        "--trainer.callbacks+=interrupt.FailWrites",
        "--trainer.callbacks.epoch", "1",
        "--trainer.callbacks.errno", str(errno.EROFS),
    )  # fmt: skip
    assert frozen.returncode == 2, frozen.stderr[-3000:]
    errors = [line for line in notes(frozen) if line.startswith("noisylabels: error:")]
    assert len(errors) == 1 and "the file system is read-only" in errors[0], errors
    assert not list(root.rglob("unfinished.txt"))
    assert leftovers(root) == []
    last = next(root.rglob("last.ckpt"))
    assert (
        torch.load(last, weights_only=True)["loops"]["fit_loop"]["epoch_progress"]["current"][
            "completed"
        ]
        == 1
    )


def test_checkpoints_are_staged_in_the_run_folder_not_in_tmpdir(
    run_cli, tmp_path: Path, monkeypatch
) -> None:
    """With no usable temporary folder (a full /tmp) a run still writes its checkpoints and
    results: they are staged beside their final names."""

    def no_tmp(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device (the temporary folder)")

    monkeypatch.setattr(tempfile, "mkstemp", no_tmp)
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", no_tmp)
    run_cli("fit", *QUICK)
    results = read_results(tmp_path)
    assert Path(results["checkpoint"]).is_file()
    assert leftovers(tmp_path) == []


def test_atomic_writes_keep_the_previous_file_when_a_write_fails(
    tmp_path: Path, monkeypatch
) -> None:
    from noisylabels.disk import storage
    from noisylabels.errors import StorageError

    path = storage.write_json(tmp_path / "results.json", {"test_acc": 0.5})

    def full(target: Path, data: bytes) -> None:
        Path(target).write_bytes(data[:3])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    monkeypatch.setattr(storage, "_write_file", full)
    with pytest.raises(StorageError, match=f"{tmp_path} has .* free of"):
        storage.write_json(path, {"test_acc": 0.9})
    assert path.read_text() == '{\n  "test_acc": 0.5\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    denied = storage.storage_error(PermissionError(errno.EACCES, "denied", "/x/y/z.json"))
    assert denied is not None and "cannot write /x/y/z.json" in str(denied)
    assert "not writable by this user" in str(denied) and "/x/y has " in str(denied)
    assert storage.storage_error(ValueError("x")) is None


def test_sigterm_outside_lightning_is_a_clean_stop(tmp_path: Path) -> None:
    """The run's handler raises Lightning's SIGTERM stop where Lightning does not listen."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from noisylabels.run.stops import StopSignals

    class Trainer:  # no SLURM here, so the handler needs nothing of a trainer
        pass

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SIGTERMException), StopSignals(Trainer()) as signals:  # type: ignore[arg-type]
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs at the next bytecode
        for _ in range(1000):
            pass
    assert signals.stopped and signals.what() == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before  # restored
