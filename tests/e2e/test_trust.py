"""What a command may trust in what it is given: a data file is read, never executed, and a YAML
file that says one thing twice is refused, each with one paragraph and exit status 2 (their cases
are in the error catalogue, test_errors.py); a command
whose output cannot be written (``> /dev/full``) ends the same way, or quietly where the reader
of a pipe is gone (``| head``), and so does an audit of a run folder it cannot write into. The
docs say which files are data and which are code."""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from as_command import run_command
from test_errors import GOOD_RESULTS, RunsCode, error_lines

from conftest import CONFIGS, REPO, copy_run

QUICKSTART = str(CONFIGS / "quickstart.yaml")


@dataclass
class Inputs:
    """Files the cases point at, written once."""

    root: Path
    marker: Path  # created if a payload ever runs


SWEEP = """\
name: demo
base: [{quickstart}]
axes:
  seed: {{values: [0, 1, 2, 3], options: [seed_everything, data.noise_seed]}}
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    root = tmp_path_factory.mktemp("trust")
    marker = root / "payload_ran"
    (root / "runs" / "good").mkdir(parents=True)
    (root / "runs" / "good" / "results.json").write_text(json.dumps(GOOD_RESULTS))
    (root / "sweep.yaml").write_text(SWEEP.format(quickstart=QUICKSTART))
    return Inputs(root, marker)


def test_yaml_keys_merged_in_may_be_overridden(tmp_path: Path) -> None:
    from noisylabels.compose import read_yaml

    path = tmp_path / "anchors.yaml"
    path.write_text("base: &b {lr: 0.1, alpha: 0.2}\nmodel:\n  <<: *b\n  lr: 0.01\n")
    assert read_yaml(path)["model"] == {"lr": 0.01, "alpha": 0.2}


def test_yaml_duplicate_keys_of_a_flow_mapping_are_named(tmp_path: Path) -> None:
    from noisylabels.compose import read_yaml
    from noisylabels.errors import InputError

    path = tmp_path / "flow.yaml"
    path.write_text("args: {data.noise_rate: 0.2, data.noise_rate: 0.4}\n")
    with pytest.raises(InputError, match=r"'data.noise_rate' twice .*\(both on line 1\)"):
        read_yaml(path, "sweep file")


def test_yaml_tags_that_would_run_code_stay_refused(inputs: Inputs, tmp_path: Path) -> None:
    from noisylabels.compose import read_yaml
    from noisylabels.errors import InputError

    path = tmp_path / "tagged.yaml"
    path.write_text(f"x: !!python/object/apply:os.system ['touch {inputs.marker}']\n")
    with pytest.raises(InputError, match="tagged.yaml is not valid YAML"):
        read_yaml(path)
    assert not inputs.marker.exists()


def test_resnet50_weights_that_would_run_code_are_refused(inputs: Inputs, tmp_path: Path) -> None:
    import torch

    from noisylabels.errors import InputError
    from noisylabels.models.resnet_imagenet import resnet50

    path = tmp_path / "evil.pth"
    torch.save({"state_dict": {}, "payload": RunsCode(inputs.marker)}, path)
    with pytest.raises(InputError, match="evil.pth cannot be read as a ResNet-50 state dict"):
        resnet50(num_classes=3, pretrained=True, weights_path=str(path))
    assert not inputs.marker.exists()


# ---------------------------------------------------------------- an output that cannot be written
OUTPUT_COMMANDS: dict[str, Callable[[Inputs], list[str]]] = {
    "help": lambda f: ["--help"],
    "report": lambda f: ["report", str(f.root / "runs")],
    "sweep-dry-run": lambda f: [
        "sweep",
        str(f.root / "sweep.yaml"),
        "--dry-run",
        "--root",
        str(f.root / "sweep_runs"),
    ],  # fmt: skip
}


def _command_env(unbuffered: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("NOISYLABELS_DEBUG", None)
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("name", list(OUTPUT_COMMANDS))
def test_a_full_output_device_ends_with_one_paragraph(
    name: str, unbuffered: bool, inputs: Inputs
) -> None:
    """``noisylabels ... > /dev/full``: the write fails in a print (unbuffered output) or in the
    last flush (buffered); either way one paragraph on stderr and status 2."""
    with open("/dev/full", "w") as full:
        out = subprocess.run(
            [sys.executable, "-m", "noisylabels.cli", *OUTPUT_COMMANDS[name](inputs)],
            cwd=REPO, env=_command_env(unbuffered), stdout=full, stderr=subprocess.PIPE,
            text=True, timeout=300,
        )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith("noisylabels: error: cannot write to the standard output")
    assert "/dev/full" in lines[0] and "No space left on device" in lines[0]


class _FullStream:
    """An output whose every write fails as on a full device, with no file descriptor (as the
    output of a caller that captures it)."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        pass


def test_an_output_without_a_file_descriptor_fails_the_same_way(monkeypatch, capsys) -> None:
    """In-process: the paragraph and status 2, and sys.stdout is given back afterwards."""
    from noisylabels.cli import main

    full = _FullStream()
    monkeypatch.setattr(sys, "stdout", full)
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 2
    (message,) = error_lines(capsys.readouterr().err)
    assert "cannot write to the standard output: the device is full" in message
    assert sys.stdout is full


@pytest.mark.parametrize("name", ["help", "report"])
def test_a_closed_pipe_ends_quietly(name: str, inputs: Inputs) -> None:
    """``noisylabels ... | head`` where head has gone: no message, the status of SIGPIPE."""
    process = subprocess.Popen(
        [sys.executable, "-m", "noisylabels.cli", *OUTPUT_COMMANDS[name](inputs)],
        cwd=REPO, env=_command_env(unbuffered=False), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    process.stdout.close()  # the reader is gone before the command writes anything
    err = process.stderr.read()
    assert process.wait(timeout=300) == 141, err[-2000:]
    assert err == ""


# ---------------------------------------------------------------- an audit that cannot write
def _can_mount_read_only(folder: Path) -> bool:
    """Whether this process may bind-mount ``folder`` read-only in a mount namespace of its own
    (root with CAP_SYS_ADMIN and util-linux's unshare); the mount never leaves that namespace."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    at = shlex.quote(str(folder))
    script = f"mount --bind {at} {at} && mount -o remount,ro,bind {at} {at}"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, timeout=60)
    return probe.returncode == 0


def test_audit_of_a_read_only_run_folder_names_it(finished_run: Path, tmp_path: Path) -> None:
    """The run folder on a read-only mount (chmod does not stop root, which the tests may run
    as): one paragraph naming the folder, status 2, before any work, and nothing written. The
    command runs as a process of its own (tests/as_command.py) that alone sees the mount."""
    folder = copy_run(finished_run, tmp_path / "run")
    if not _can_mount_read_only(folder):
        pytest.skip("needs a read-only bind mount (root in a mount namespace: unshare -m)")
    out = run_command(["audit", str(folder)], read_only=[folder])
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-2000:]
    assert f"into the run folder {folder}: the file system is read-only" in lines[0]
    assert not list(folder.glob("*label_issues*"))


@pytest.mark.parametrize(
    ("broken", "raised", "said"),
    [
        ("write_csv", PermissionError(errno.EACCES, "Permission denied"),
         "the folder is not writable by this user"),
        ("write_csv", OSError(errno.EROFS, "Read-only file system"),
         "the file system is read-only"),
        ("draw_grid", OSError(errno.ENOSPC, "No space left on device"), "the disk is full"),
    ],
    ids=["csv-permission", "csv-read-only", "grid-disk-full"],
)  # fmt: skip
def test_an_audit_write_that_fails_names_the_run_folder(
    broken: str,
    raised: OSError,
    said: str,
    finished_run: Path,
    tmp_path: Path,
    monkeypatch,
    capsys,
) -> None:
    """A write into the run folder that fails during the audit (the folder made read-only or
    the disk filled after the check): one paragraph naming the folder, status 2."""
    from noisylabels.audit import issues
    from noisylabels.cli import main

    folder = copy_run(finished_run, tmp_path / "run")  # the audit may write before it fails

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(issues, broken, fail)
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", str(folder)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err[-2000:]
    assert "Traceback" not in err
    (message,) = error_lines(err)
    assert (
        f"cannot write the audit (label_issues.csv, label_issues.png) into the run folder "
        f"{folder}: {said}" in message
    )


# ---------------------------------------------------------------- the trust model, documented
def test_the_docs_say_what_is_data_and_what_is_code() -> None:
    """docs/runs.md names each file a run reads as data with how it is read, and what is code
    by design; README.md and docs/data.md link to it."""
    text = (REPO / "docs" / "runs.md").read_text()
    heading = "## What is data and what is code"
    assert heading in text
    section = text[text.index(heading) :]
    for named in ("--data.noise_file", "--model.transition PATH", "--ckpt_path", "MNIST",
                  "CIFAR-10/100", "results.json", "noise.pt", "sample_dynamics.pt",
                  "config.yaml", "weights_only=True", "allow_pickle=False", "yaml.safe_load",
                  "restricted unpickler", "class_path", "Sweep files", "--trainer.callbacks",
                  "noisylabels audit"):  # fmt: skip
        assert named in section, named
    link = "runs.md#what-is-data-and-what-is-code"
    assert f"docs/{link}" in (REPO / "README.md").read_text()
    assert link in (REPO / "docs" / "data.md").read_text()
