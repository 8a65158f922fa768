"""One writer per run folder, even when commands race: a run folder is claimed atomically and
locked for as long as one process writes it; a second writer is refused naming the holder, a
stale lock is taken over; what a resume reads back (its checkpoint, noise.pt) it checks; a
killed write leaves nothing behind that the next writer does not remove."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from as_command import run_command, run_commands_together

from noisylabels.disk.lock import (
    FolderBusy,
    RunLock,
    claim_version,
    hold,
    holder,
    remove_temporary,
)

from conftest import CONFIGS

# the digits, a few batches an epoch: each fit of these tests takes a second or two
QUICK = [
    "--config", str(CONFIGS / "quickstart.yaml"),
    "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2",
    "--trainer.enable_model_summary", "false", "--trainer.enable_progress_bar", "false",
]  # fmt: skip
RUN_FILE_NAMES = ("config.yaml", "noise.pt", "results.json", "checkpoints/last.ckpt")


def _claim_at(base: str, start: float, out: multiprocessing.Queue) -> None:
    while time.time() < start:  # every process claims at the same moment
        pass
    out.put(claim_version(Path(base)).name)


@pytest.mark.parametrize("repetition", range(5))
def test_processes_claiming_together_get_one_version_folder_each(
    tmp_path: Path, repetition: int
) -> None:
    """8 processes that claim a version folder of one root at the same instant get 8 distinct
    folders, above the versions already there, every time."""
    base = tmp_path / "lightning_logs"
    (base / "version_3").mkdir(parents=True)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    start = time.time() + 0.5
    workers = [context.Process(target=_claim_at, args=(str(base), start, out)) for _ in range(8)]
    for worker in workers:
        worker.start()
    names = [out.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert sorted(names) == sorted(f"version_{n}" for n in range(4, 12))


HOLD = (
    "import sys, time; from noisylabels.disk.lock import hold; hold(sys.argv[1], 'a test'); "
    "print('held', flush=True); time.sleep(60)"
)


def test_a_second_writer_is_refused_naming_the_holder_and_a_stale_lock_is_taken_over(
    tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "run"
    other = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout.readline().strip() == "held"
        found = holder(folder)
        assert found is not None and found.pid == other.pid and found.by == "a test"
        with pytest.raises(FolderBusy) as refused:
            hold(folder, "noisylabels fit", doing="this fit")
        message = str(refused.value)
        assert f"PID {other.pid} on " in message and "(a test), since " in message
        assert "this fit is refused and nothing was written" in message
        assert "\n" not in message
    finally:
        other.send_signal(signal.SIGKILL)  # its lock file stays, naming it: a stale lock
        other.wait()
    assert (folder / "run.lock").is_file() and holder(folder) is None
    capsys.readouterr()
    lock = hold(folder, "noisylabels fit")
    err = capsys.readouterr().err
    assert f"took over the lock of {folder}: its holder, PID {other.pid}" in err
    assert "no longer running" in err
    assert holder(folder).pid == os.getpid()
    lock.release()
    assert not (folder / "run.lock").exists()


INHERIT = (
    "import sys; from noisylabels.disk.lock import RunLock; lock = RunLock(sys.argv[1], 'child'); "
    "print(lock.acquire() is None, lock.inherited)"
)


def test_a_process_started_with_the_lock_holds_it_and_no_other_does(tmp_path: Path) -> None:
    """A sweep starts its run's process with the lock of the run's folder: that process holds
    it (and does not release it for the sweep); any other process is refused."""
    lock = RunLock(tmp_path, "a sweep")
    assert lock.acquire() is None
    try:
        child = subprocess.run(
            [sys.executable, "-c", INHERIT, str(tmp_path)],
            pass_fds=(lock.fd,),
            capture_output=True,
            text=True,
            check=True,
        )
        assert child.stdout.split() == ["True", "True"]
        stranger = subprocess.run(
            [sys.executable, "-c", INHERIT, str(tmp_path)], capture_output=True, text=True
        )
        assert stranger.stdout.split() == ["False", "False"]
        assert holder(tmp_path).pid == os.getpid()  # the child left it as it was
    finally:
        lock.release()


def test_the_next_writer_removes_the_temporary_files_of_a_killed_write(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    left = [
        tmp_path / ".results.123.tmp.json",
        tmp_path / "checkpoints" / ".last.4567.tmp.ckpt",
        tmp_path / "checkpoints" / ".last.tmp",
        tmp_path / ".noise.99.tmp.pt",
    ]
    kept = [tmp_path / "results.json", tmp_path / ".hidden", tmp_path / "a.tmp.json"]
    for path in left + kept:
        path.write_text("x")
    assert sorted(remove_temporary(tmp_path)) == sorted(left)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in left)


def _run_folders(root: Path) -> list[Path]:
    return sorted(p for p in (root / "lightning_logs").iterdir() if p.is_dir())


def _event_pids(folder: Path) -> set[str]:
    """The PIDs of the processes that wrote the folder's TensorBoard event files (their names
    end in ``HOST.PID.N``)."""
    return {p.name.split(".")[-2] for p in folder.glob("events.out.tfevents.*")}


@pytest.mark.parametrize("repetition", range(2))
def test_fits_started_together_into_one_root_get_distinct_complete_run_folders(
    tmp_path: Path, repetition: int
) -> None:
    root = tmp_path / "runs"
    argv = ["fit", *QUICK, "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(root)]
    done = run_commands_together([argv] * 3)
    assert [d.returncode for d in done] == [0, 0, 0], [d.stderr[-2000:] for d in done]
    printed = [re.search(r"run folder: (\S+)", d.stdout).group(1) for d in done]
    folders = _run_folders(root)
    assert sorted(printed) == [str(f) for f in folders] and len(folders) == 3
    writers = []
    for folder in folders:
        assert all((folder / name).is_file() for name in RUN_FILE_NAMES), folder
        assert not (folder / "run.lock").exists()
        writers.append(_event_pids(folder))
        assert len(writers[-1]) == 1, (folder, writers[-1])  # one process wrote it
    assert len(set.union(*writers)) == 3


@pytest.fixture()
def stopped(tmp_path: Path) -> Path:
    """The folder of a quickstart run of 4 planned epochs stopped by SIGTERM in its second
    epoch: its last.ckpt holds epoch 0."""
    root = tmp_path / "runs"
    plan = tmp_path / "signals.json"  # sent once, not again by a resume from its config.yaml
    plan.write_text(json.dumps([{"where": "train", "index": 1, "batch": 0, "signal": "SIGTERM"}]))
    stop = run_command(
        ["fit", *QUICK, "--trainer.max_epochs", "4", "--trainer.default_root_dir", str(root),
         "--trainer.callbacks+=interrupt.SignalPlan", "--trainer.callbacks.plan", str(plan)]
    )  # fmt: skip
    assert stop.returncode != 0 and "Stopped by SIGTERM" in stop.stderr, stop.stderr[-2000:]
    (folder,) = _run_folders(root)
    assert (folder / "unfinished.txt").is_file()
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_resumes_started_together_one_writes_and_the_others_are_refused(stopped: Path) -> None:
    """Three resumes of one stopped run at once (to 2, 3 and 4 epochs): one continues it, the
    others are refused before writing anything; the folder is what the one writer wrote."""
    plans = (2, 3, 4)
    done = run_commands_together(
        [
            ["fit", *QUICK, "--trainer.max_epochs", str(n), "--ckpt_path", str(stopped)]
            for n in plans
        ]  # fmt: skip
    )
    ran = [i for i, d in enumerate(done) if d.returncode == 0]
    assert len(ran) == 1, [(d.returncode, d.stderr[-600:]) for d in done]
    (winner,) = ran
    for i, d in enumerate(done):
        if i != winner:
            assert d.returncode == 2 and "Traceback" not in d.stderr, d.stderr[-2000:]
            busy = "is being written by PID" in d.stderr
            assert busy or "holds a finished run" in d.stderr, d.stderr[-2000:]
    results = json.loads((stopped / "results.json").read_text())
    assert results["epochs"] == plans[winner]
    printed = re.search(r"clean test accuracy: (\d\.\d+)", done[winner].stdout).group(1)
    assert f"{results['test_acc']:.4f}" == printed
    last = torch.load(stopped / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == plans[winner]
    bests = sorted(p.name for p in (stopped / "checkpoints").glob("best-*.ckpt"))
    assert bests == [Path(results["checkpoint"]).name]
    assert len(_event_pids(stopped)) == 2  # the stopped part's process and the winner's
    assert not (stopped / "run.lock").exists() and not (stopped / "unfinished.txt").exists()


def _resume(folder: Path, *more: str) -> subprocess.CompletedProcess:
    return run_command(["fit", *QUICK, "--trainer.max_epochs", "4", "--ckpt_path", str(folder),
                        *more])  # fmt: skip


def test_a_resume_refuses_a_noise_record_of_another_run_and_touches_nothing(
    stopped: Path, tmp_path: Path
) -> None:
    other = run_command(
        ["fit", *QUICK, "--trainer.max_epochs", "1", "--data.noise_rate", "0.2",
         "--test_after_fit", "false", "--trainer.default_root_dir", str(tmp_path / "other")]
    )  # fmt: skip
    assert other.returncode == 0, other.stderr[-2000:]
    (other_folder,) = _run_folders(tmp_path / "other")
    (stopped / "noise.pt").write_bytes((other_folder / "noise.pt").read_bytes())
    before = _snapshot(stopped)
    refused = _resume(stopped)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert f"{stopped / 'noise.pt'} is not the noise this run was trained with" in refused.stderr
    assert "noisy_labels" in refused.stderr and "rate_nominal" in refused.stderr
    assert _snapshot(stopped) == before
    (stopped / "noise.pt").write_bytes(b"not a torch file")
    refused = _resume(stopped)
    assert refused.returncode == 2 and "noise.pt cannot be read" in refused.stderr


def test_a_resume_writes_a_missing_noise_record_again_and_says_so(stopped: Path) -> None:
    saved = torch.load(stopped / "noise.pt", weights_only=True)
    (stopped / "noise.pt").unlink()
    resumed = _resume(stopped)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"{stopped / 'noise.pt'} was missing; written again" in resumed.stderr
    again = torch.load(stopped / "noise.pt", weights_only=True)
    assert again.keys() == saved.keys()
    for key, value in saved.items():
        assert torch.equal(value, again[key]) if torch.is_tensor(value) else value == again[key]


def test_a_short_run_resumed_from_its_own_config_keeps_its_protocol(stopped: Path) -> None:
    """The run was started from the quickstart (a protocol of 15 epochs) with
    --trainer.max_epochs 4; resumed from its own config.yaml (which plans 4), it is still a
    short run of the quickstart's protocol, as a report reads it."""
    resumed = run_command(
        ["fit", "--config", str(stopped / "config.yaml"), "--ckpt_path", str(stopped)]
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    results = json.loads((stopped / "results.json").read_text())
    assert results["epochs"] == 4 and results["protocol_epochs"] == 15


def test_a_run_killed_after_a_new_best_keeps_the_selected_one_and_resumes_with_one(
    tmp_path: Path,
) -> None:
    """Killed at the end of an epoch, after its best checkpoint was replaced and before its
    last.ckpt was written: the checkpoint its last.ckpt selected is still there (the replaced
    one goes only once last.ckpt no longer names it), and the resumed run ends with one best
    checkpoint, the one its results name."""
    root = tmp_path / "runs"
    for epoch in (1, 2):
        killed = run_command(
            ["fit", *QUICK, "--trainer.max_epochs", "4", "--trainer.default_root_dir", str(root),
             "--trainer.callbacks+=interrupt.KillAtEpochEnd", "--trainer.callbacks.epoch",
             str(epoch)] if epoch == 1 else
            ["fit", *QUICK, "--trainer.max_epochs", "4", "--ckpt_path", str(_run_folders(root)[0]),
             "--trainer.callbacks+=interrupt.KillAtEpochEnd", "--trainer.callbacks.epoch",
             str(epoch)]
        )  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        (folder,) = _run_folders(root)
        last = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)
        states = [s for s in last["callbacks"].values() if "best_model_path" in s]
        selected = Path(states[0]["best_model_path"]).name
        assert (folder / "checkpoints" / selected).is_file()
    resumed = _resume(folder)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    results = json.loads((folder / "results.json").read_text())
    bests = sorted(p.name for p in (folder / "checkpoints").glob("*.ckpt"))
    assert bests == sorted(["last.ckpt", Path(results["checkpoint"]).name])
