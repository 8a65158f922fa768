"""How a sweep's runs stop, restart and share their folders: a trial sweep's runs are [stale]
for the real one and rerun; SIGTERM/Ctrl-C to a sweep stops its runs (no orphans) and lists
them; a run folder written by a live process is never started twice; the SLURM script refuses
what it cannot carry and --dry-run prints copy-paste-safe commands and the script."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noisylabels.disk.lock import RunLock, holder
from noisylabels.sweep import launch
from noisylabels.sweep.grid import load_sweep

from conftest import CONFIGS, REPO

SWEEP = """\
name: demo
base: [{quickstart}]
args: {{model.network.backbone_kwargs: {{hidden: [64], dropout: 0.2}}}}
axes:
  method:
    forward: {{model.alpha: 0.0}}
    forward_vrnl: {{model.alpha: 0.1}}
  seed: {{values: [0, 1], options: [seed_everything, data.noise_seed]}}
"""
# a stand-in for `noisylabels fit`: records its command's hash in results.json as the real
# one does (run/provenance.py), or, with FAKE_FIT_WAIT, waits for SIGTERM like a long run
FAKE_FIT = """\
import json, os, pathlib, signal, sys, time
from noisylabels.run.provenance import command_sha256
argv = sys.argv[1:]
folder = pathlib.Path(argv[argv.index("--trainer.default_root_dir") + 1])
with open(os.environ["FAKE_FIT_RECORD"], "a") as fh:
    fh.write(json.dumps({"folder": str(folder), "pid": os.getpid(), "argv": argv}) + "\\n")
if os.environ.get("FAKE_FIT_WAIT"):
    def stop(signum, frame):
        (folder / "got_sigterm").write_text(str(os.getpid()))
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    (folder / "started").write_text(str(os.getpid()))
    while True:
        time.sleep(0.1)
out = folder / "lightning_logs" / f"version_{len(list(folder.glob('lightning_logs/*')))}"
out.mkdir(parents=True)
provenance = {"command": argv, "command_sha256": command_sha256(argv)}
(out / "results.json").write_text(json.dumps({"test_acc": 0.9, "provenance": provenance}, indent=2))
"""
# the sweep command with the stand-in fit, and without the checks of the runs' methods and options
# before they start (test_sweep.py tests them): they load Lightning, whose import and teardown
# would take most of the process's seconds, and a stand-in fit needs no training code
DRIVER = """\
import sys
from noisylabels.sweep import cli, launch
launch.FIT_COMMAND = [sys.executable, {fake!r}]
cli.check_classes = cli.check_options = lambda *args: None
from noisylabels.cli import main
main(sys.argv[1:])
"""


@pytest.fixture()
def sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text(SWEEP.format(quickstart=CONFIGS / "quickstart.yaml"))
    return path


@pytest.fixture()
def fake_fit(tmp_path: Path, monkeypatch) -> Path:
    """The stand-in fit as the sweep's command; returns the file it records its starts in."""
    fake = tmp_path / "fake_fit.py"
    fake.write_text(FAKE_FIT)
    record = tmp_path / "record.jsonl"
    monkeypatch.setattr(launch, "FIT_COMMAND", [sys.executable, str(fake)])
    monkeypatch.setenv("FAKE_FIT_RECORD", str(record))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return record


def sweep_cli(*args: str) -> int:
    from noisylabels.cli import run

    return run(["sweep", *args])


def started(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


@pytest.mark.slow
def test_a_trial_sweep_then_the_real_one_reruns_every_run_as_stale(
    sweep_file: Path, fake_fit: Path, tmp_path: Path, capsys
) -> None:
    root = str(tmp_path / "runs")
    only = ["--where", "method=forward"]
    trial = ["--", "--trainer.max_epochs", "1"]
    assert sweep_cli(str(sweep_file), "--root", root, *only, *trial) == 0
    assert len(started(fake_fit)) == 2
    capsys.readouterr()
    # the real sweep (without the trial's option): every run is stale, and says why
    assert sweep_cli(str(sweep_file), "--root", root, *only, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "2 run(s)" in out and "0 finished, 2 finished or stopped with other options" in out
    assert out.count("[stale]") == 2 and "[done]" not in out
    assert out.count("finished with other options: --trainer.max_epochs 1 (now not given)") == 2
    assert sweep_cli(str(sweep_file), "--root", root, *only) == 0
    assert len(started(fake_fit)) == 4  # every run again
    run_file = json.loads(next(Path(root).rglob("sweep_run.json")).read_text())
    assert "--trainer.max_epochs" not in run_file["command"] and run_file["command_sha256"]
    capsys.readouterr()
    # now they are done: nothing runs
    assert sweep_cli(str(sweep_file), "--root", root, *only) == 0
    assert "2 finished" in capsys.readouterr().out and len(started(fake_fit)) == 4


def test_the_command_hash_ignores_where_a_run_goes_and_follows_its_config_files(
    tmp_path: Path,
) -> None:
    from noisylabels.run.provenance import command_sha256

    config = tmp_path / "a.yaml"
    config.write_text("trainer: {max_epochs: 2}\n")
    base = ["fit", "--config", str(config), "--model.alpha", "0.1"]
    sha = command_sha256(base)
    moved = tmp_path / "b.yaml"
    moved.write_text(config.read_text())
    assert command_sha256(["fit", f"--config={moved}", "--model.alpha", "0.1"]) == sha
    assert command_sha256([*base, "--trainer.default_root_dir", "x", "--ckpt_path", "last"]) == sha
    assert command_sha256([*base, "--trainer.enable_progress_bar", "false"]) == sha
    assert command_sha256([*base, "--trainer.max_epochs", "1"]) != sha
    config.write_text("trainer: {max_epochs: 1}\n")  # an edited config file
    assert command_sha256(base) != sha


def test_runs_finished_before_runs_recorded_their_command_count_as_done(
    sweep_file: Path, fake_fit: Path, tmp_path: Path, capsys
) -> None:
    """results.json and sweep_run.json of an earlier version (no command hash): the finished
    run is done, the stopped one is resumed; neither is stale."""
    root = tmp_path / "runs"
    done = root / "demo" / "forward" / "seed-0"
    (done / "lightning_logs" / "version_0").mkdir(parents=True)
    (done / "lightning_logs" / "version_0" / "results.json").write_text(
        json.dumps({"test_acc": 0.5, "provenance": {"config_sha256": "abc"}})
    )
    (done / "sweep_run.json").write_text(json.dumps({"command": ["python", "fit"]}))
    stopped = root / "demo" / "forward" / "seed-1" / "lightning_logs" / "version_0"
    (stopped / "checkpoints").mkdir(parents=True)
    (stopped / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (stopped.parent.parent / "sweep_run.json").write_text(json.dumps({"command": ["fit"]}))
    assert sweep_cli(str(sweep_file), "--root", str(root), "--dry-run") == 0
    out = capsys.readouterr().out
    assert "1 finished, 1 to resume from their last.ckpt" in out
    assert "(1 of the finished runs recorded no command" in out
    assert "[done] forward/seed-0:" in out and "[stale]" not in out
    line = next(line for line in out.splitlines() if "[to resume] forward/seed-1" in line)
    assert line.endswith("--ckpt_path last")


def test_dry_run_commands_are_copy_paste_safe(sweep_file: Path, tmp_path: Path, capsys) -> None:
    root = tmp_path / "my runs"
    assert (
        sweep_cli(str(sweep_file), "--root", str(root), "--dry-run", "--", "--data.data_dir", "d x")
        == 0
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if "[to run]" in line]
    sweep = load_sweep(sweep_file, root)
    for line, run in zip(lines, sweep.runs, strict=True):
        command = line.split(": ", 1)[1]
        assert shlex.split(command) == ["noisylabels", *run.fit_args(["--data.data_dir", "d x"])]


def _start_sweep(tmp_path: Path, sweep_file: Path, *args: str) -> subprocess.Popen:
    """The real `noisylabels sweep` command in a new process, its fit the waiting stand-in."""
    fake = tmp_path / "fake_fit.py"
    fake.write_text(FAKE_FIT)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(fake=str(fake)))
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        FAKE_FIT_RECORD=str(tmp_path / "record.jsonl"),
        FAKE_FIT_WAIT="1",
    )
    argv = [sys.executable, str(driver), "sweep", str(sweep_file), "--root", str(tmp_path / "runs")]
    return subprocess.Popen(
        [*argv, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(condition, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return True


@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGTERM, id="SIGTERM"),
        pytest.param(signal.SIGINT, id="Ctrl-C", marks=pytest.mark.slow),
    ],
)
def test_a_stop_signal_stops_the_runs_waits_and_lists_them(
    sweep_file: Path, tmp_path: Path, sig: int
) -> None:
    """Two of four runs running: the signal reaches them as SIGTERM, the sweep waits for them,
    starts no other, lists what was stopped and exits with 128 + the signal; no run is left
    going and no lock is left held."""
    sweep = _start_sweep(tmp_path, sweep_file, "--parallel", "2")
    runs = tmp_path / "runs" / "demo"
    _wait_for(lambda: len(list(runs.rglob("started"))) == 2)
    pids = [int(p.read_text()) for p in runs.rglob("started")]
    sweep.send_signal(sig)
    out, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 128 + sig, err[-3000:]
    assert "Traceback" not in err
    assert f"{signal.Signals(sig).name} received: starting no new run; stopping 2 running" in out
    assert (
        f"stopped by {signal.Signals(sig).name}; 0 run(s) finished, 2 stopped, 2 not started" in out
    )
    stopped = [p.parent.relative_to(runs).as_posix() for p in runs.rglob("got_sigterm")]
    assert len(stopped) == 2 and all(
        f"  {name}: stopped (exit status 143)" in out for name in stopped
    )
    assert not any(_alive(pid) for pid in pids)
    assert not list(runs.rglob("run.lock"))
    assert len(started(tmp_path / "record.jsonl")) == 2


@pytest.mark.slow
def test_a_run_folder_written_by_a_live_process_is_never_started_twice(
    sweep_file: Path, tmp_path: Path, fake_fit: Path, capsys
) -> None:
    """A first sweep runs forward/seed-0 and is killed (SIGKILL): its run goes on and keeps
    the folder's lock. A second sweep shows the run as [running] with its PID, leaves it
    alone and runs the others; once the run is gone, its stale lock is taken over."""
    first = _start_sweep(tmp_path, sweep_file, "--where", "method=forward", "--where", "seed=0")
    folder = tmp_path / "runs" / "demo" / "forward" / "seed-0"
    _wait_for(lambda: (folder / "started").exists())
    orphan = int((folder / "started").read_text())
    first.kill()  # the sweep dies at once; its run lives on
    first.communicate(timeout=60)
    try:
        assert _alive(orphan) and holder(folder).pid == orphan
        root = str(tmp_path / "runs")
        assert sweep_cli(str(sweep_file), "--root", root, "--dry-run") == 0
        out = capsys.readouterr().out
        assert "1 being written by another process (left alone)" in out
        assert "[running] forward/seed-0:" in out and f"written by PID {orphan}" in out
        assert sweep_cli(str(sweep_file), "--root", root, "--where", "method=forward") == 0
        out = capsys.readouterr().out
        assert f"forward/seed-0: written by PID {orphan}" in out and "left alone" in out
        folders = [Path(r["folder"]).relative_to(tmp_path / "runs" / "demo").as_posix()
                   for r in started(fake_fit)]  # fmt: skip
        assert folders == ["forward/seed-0", "forward/seed-1"]  # the first sweep's, then one
    finally:
        os.kill(orphan, signal.SIGKILL)
    _wait_for(lambda: holder(folder) is None)
    lock = RunLock(folder, "test")
    assert lock.acquire() is None and lock.stale is not None and lock.stale.pid == orphan
    lock.release()


def test_the_lock_is_exclusive_between_processes(tmp_path: Path) -> None:
    lock = RunLock(tmp_path, "first")
    assert lock.acquire() is None
    other = subprocess.run(
        [sys.executable, "-c", "import sys; from noisylabels.disk.lock import RunLock;"
         f"h = RunLock(__import__('pathlib').Path({str(tmp_path)!r}), 'second').acquire();"
         "print(h.pid)"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), check=True,
    )  # fmt: skip
    assert other.stdout.strip() == str(os.getpid())
    lock.release()
    assert holder(tmp_path) is None and not (tmp_path / "run.lock").exists()


# --------------------------------------------------------------------------------- SLURM
def launcher_options() -> list[tuple[str, str, list[str]]]:
    """``(launcher, option, a non-default value)`` for every option of each launcher's group."""
    from noisylabels.sweep.cli import LAUNCHER_GROUPS, build_parser

    values = {"--parallel": ["2"], "--threads": ["1"], "--gpus": ["0"], "--slurm-gpus": ["0"]}
    values |= {"--slurm-max-parallel": ["3"], "--slurm-cpus": ["2"], "--slurm-time": ["1:00:00"]}
    found = []
    for launcher, title in LAUNCHER_GROUPS.items():
        group = next(g for g in build_parser()._action_groups if g.title.startswith(title))
        for action in group._group_actions:
            option = action.option_strings[0]
            value = [] if action.nargs == 0 else values.get(option, ["x"])
            found.append((launcher, option, value))
    return found


@pytest.mark.parametrize(("launcher", "option", "value"), launcher_options())
def test_an_option_of_the_other_launcher_is_refused(
    sweep_file: Path, tmp_path: Path, capsys, launcher: str, option: str, value: list[str]
) -> None:
    """Each option of a launcher's group, given with the other launcher, is refused naming
    it before anything is written (it would be left unused)."""
    other = "slurm" if launcher == "local" else "local"
    argv = [str(sweep_file), "--root", str(tmp_path / "runs"), "--launcher", other]
    with pytest.raises(SystemExit) as exc:
        sweep_cli(*argv, f"{option}={value[0]}" if value else option, "--dry-run")
    assert exc.value.code == 2
    assert f"{option} would have no effect: it is an option of --launcher {launcher}" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slurm-partition", "gpu\n#SBATCH --exclusive"], "holds a line break"),
        (["--slurm-setup", "module load a\nmodule load b"], "--slurm-setup-file"),
        (["--sbatch-option=--account=a\n--qos=b"], "holds a line break"),
        (["--slurm-time", "8 hours"], "is not a SLURM time"),
        (["--slurm-mem", "lots"], "write a size"),
        (["--slurm-setup-file", "missing.sh"], "missing.sh does not exist"),
    ],
    ids=["partition", "setup", "sbatch-option", "time", "mem", "setup-file"],
)
def test_slurm_values_that_would_break_the_script_are_refused(
    sweep_file: Path, tmp_path: Path, capsys, args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        sweep_cli(str(sweep_file), "--root", str(tmp_path / "runs"), "--launcher", "slurm", *args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_root_the_sbatch_output_line_cannot_carry_is_refused(
    sweep_file: Path, tmp_path: Path, capsys
) -> None:
    with pytest.raises(SystemExit):
        sweep_cli(str(sweep_file), "--root", str(tmp_path / "my runs"), "--launcher", "slurm")
    err = capsys.readouterr().err
    assert "cannot carry" in err and "--root" in err


def test_slurm_dry_run_prints_the_script_with_a_multi_line_setup(
    sweep_file: Path, tmp_path: Path, capsys
) -> None:
    setup = tmp_path / "setup.sh"
    setup.write_text("#!/bin/bash\nmodule load cuda/12\nsource .venv/bin/activate\n")
    root = tmp_path / "runs"
    args = ["--root", str(root), "--launcher", "slurm", "--slurm-setup-file", str(setup)]
    assert sweep_cli(str(sweep_file), *args, "--dry-run", "--", "--data.data_dir", "d x") == 0
    out = capsys.readouterr().out
    script = out[out.index("#!/bin/bash") :]
    assert "(not written: --dry-run)" in out and not root.exists()
    for line in (
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=16G",
        "#SBATCH --requeue",
        "#SBATCH --signal=SIGUSR1@90",
        "set +u  # environment setup scripts may read unset variables\n"
        "module load cuda/12\nsource .venv/bin/activate\nset -u",
        "'d x'",
        "flock -n 9",
    ):
        assert line in script, line
    path = tmp_path / "array.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_the_sweep_waits_for_its_runs_without_spinning(
    sweep_file: Path, tmp_path: Path, monkeypatch
) -> None:
    """While its runs go on the sweep looks for a stop signal every WAIT_S seconds, not in a
    busy loop once a first run has finished (it spun at half a core on a long sweep)."""
    runs = load_sweep(sweep_file, root=tmp_path / "runs").runs[:2]
    monkeypatch.setattr(launch, "WAIT_S", 0.05)

    def slow(sweep, run, extra, env, started, resume):  # the first ends at once, then 0.5 s
        time.sleep(0.0 if run is runs[0] else 0.5)
        return launch.Outcome(run, 0.0, run.folder / launch.LOG_FILE, kind="finished")

    calls = []
    real_wait = launch.wait
    monkeypatch.setattr(launch, "run_process", slow)
    monkeypatch.setattr(launch, "wait", lambda *a, **k: calls.append(1) or real_wait(*a, **k))
    sweep = load_sweep(sweep_file, root=tmp_path / "runs")
    launch.run_local(sweep, runs, parallel=2, print_fn=lambda line: None)
    assert len(calls) < 40, f"{len(calls)} waits in 0.5 s: the sweep spins"


def test_a_run_another_sweep_finished_since_this_one_looked_is_not_run_again(
    sweep_file: Path, fake_fit: Path, tmp_path: Path
) -> None:
    """Two sweeps over one root, the second planned while the first still had the run to do:
    when the second comes to the run, it holds the folder's lock, finds the run finished with
    its very command, and leaves it as it is (no second version folder, no second start)."""
    root = tmp_path / "runs"
    sweep = load_sweep(sweep_file, root)
    run = next(r for r in sweep.runs if r.name == "forward/seed-0")
    first = launch.run_process(sweep, run, (), dict(os.environ), lambda process: None)
    assert first.ok and len(started(fake_fit)) == 1  # the other sweep's run
    calls = []
    second = launch.run_process(sweep, run, (), dict(os.environ), calls.append)
    assert second.ok and "finished meanwhile by another process" in second.reason
    assert calls == [] and len(started(fake_fit)) == 1
    assert [p.name for p in (run.folder / "lightning_logs").iterdir()] == ["version_0"]
    assert second.results == first.results and holder(run.folder) is None
    # a run finished with another command is still run again (a stale one)
    third = launch.run_process(sweep, run, ("--trainer.max_epochs", "1"), dict(os.environ),
                               calls.append)  # fmt: skip
    assert third.ok and not third.reason and len(calls) == 1 and len(started(fake_fit)) == 2
