"""A finished run whose label file or T file changed (or is gone) since it ran is ``[stale]``,
not ``[done]``: its ``results.json`` records the SHA-256 of each (``provenance.inputs``), and
the sweep compares them with the files now."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from noisylabels.run.provenance import input_files_sha256
from noisylabels.sweep.grid import Run, load_sweep
from noisylabels.sweep.records import run_state

from conftest import CONFIGS

SWEEP = """\
name: inputs
base: [{quickstart}]
args: {{data.noise_type: file, data.noise_file: {labels}}}
axes:
  method:
    forward: {{model.alpha: 0.0}}
  seed: {{values: [0], options: [seed_everything]}}
"""


def test_input_files_are_hashed_by_absolute_path(tmp_path: Path, monkeypatch) -> None:
    big = tmp_path / "labels.npy"
    big.write_bytes(bytes(range(256)) * 9000)  # more than one 1 MiB chunk
    (tmp_path / "folder").mkdir()
    (tmp_path / "link.csv").symlink_to(big)
    monkeypatch.chdir(tmp_path)
    hashes = input_files_sha256(["labels.npy", "estimate", "folder", "nope.csv", "link.csv"])
    expected = hashlib.sha256(big.read_bytes()).hexdigest()
    assert hashes == {str(big): expected, str(tmp_path / "link.csv"): expected}
    assert input_files_sha256([]) == {}


@pytest.fixture()
def finished(tmp_path: Path) -> tuple[Run, Path, Path]:
    """A sweep's only run, finished with a label file (named on its command line) and a T file
    (named in its config.yaml only); returns the run, the label file and the T file."""
    labels, transition = tmp_path / "labels.csv", tmp_path / "T.csv"
    labels.write_text("0\n1\n2\n")
    transition.write_text("1,0\n0,1\n")
    sweep_file = tmp_path / "inputs.yaml"
    sweep_file.write_text(SWEEP.format(quickstart=CONFIGS / "quickstart.yaml", labels=labels))
    (run,) = load_sweep(sweep_file, tmp_path / "runs").runs
    folder = run.folder / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    command = run.fit_args(resume=False)
    provenance = {
        "command": command,
        "command_sha256": run.command_sha256(),
        "inputs": input_files_sha256([labels, transition]),
    }
    (folder / "results.json").write_text(json.dumps({"test_acc": 0.9, "provenance": provenance}))
    (folder / "config.yaml").write_text(
        f"model:\n  class_path: noisylabels.methods.Forward\n  init_args:\n"
        f"    transition: {transition}\n"
    )
    return run, labels, transition


def test_a_run_whose_inputs_are_unchanged_is_done(finished) -> None:
    run, _, _ = finished
    assert run_state(run).kind == "done"


def test_a_changed_label_file_makes_the_run_stale(finished) -> None:
    run, labels, _ = finished
    labels.write_text("0\n1\n1\n")
    state = run_state(run)
    assert state.kind == "stale"
    assert f"label file {labels} changed since the run" in state.note


def test_a_changed_t_file_named_in_the_config_makes_the_run_stale(finished) -> None:
    run, _, transition = finished
    transition.write_text("0.9,0.1\n0.1,0.9\n")
    state = run_state(run)
    assert state.kind == "stale" and f"T file {transition} changed since the run" in state.note


def test_a_label_file_that_is_gone_makes_the_run_stale(finished) -> None:
    run, labels, _ = finished
    labels.unlink()
    state = run_state(run)
    assert state.kind == "stale" and f"label file {labels} is gone since the run" in state.note


def test_results_without_inputs_are_done_as_before(finished) -> None:
    run, labels, _ = finished
    results = next(run.folder.rglob("results.json"))
    content = json.loads(results.read_text())
    del content["provenance"]["inputs"]
    results.write_text(json.dumps(content))
    labels.write_text("2\n2\n2\n")
    assert run_state(run).kind == "done"


def test_dry_run_lists_the_run_as_stale_and_names_the_file(finished, tmp_path, capsys) -> None:
    from noisylabels.cli import run as cli

    run, labels, _ = finished
    labels.write_text("0\n1\n1\n")
    assert cli(["sweep", str(tmp_path / "inputs.yaml"), "--root", str(tmp_path / "runs"),
                "--dry-run"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "0 finished, 1 finished or stopped with other options or inputs (rerun)" in out
    assert "[stale] forward/seed-0:" in out and "[done]" not in out
    assert f"finished, but its label file {labels} changed since the run" in out
