"""Every file one command writes and another reads back is read by one reader with limits:
whichever command reads a run's ``results.json``, ``config.yaml``, ``subsets.csv``,
``sweep_run.json`` or ``run.lock``, and whatever lies there instead (an alias bomb, a file past
its size limit, a named pipe, a folder, an empty file), the command ends soon, with one line
naming the file: the run skipped (report, plot, a sweep's states) or the command refused
(audit, fit), never a hang, a traceback or a run of gigabytes."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from noisylabels.disk.reading import LIMITS, UnreadableFile, read_json, read_text, read_yaml

from conftest import copy_run

BAD = ("alias-bomb", "too-large", "named-pipe", "folder", "empty")


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def plant(path: Path, kind: str, limit: int) -> None:
    """Put the bad ``kind`` of file at ``path`` (replacing what is there)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "alias-bomb":
        path.write_text(alias_bomb())
    elif kind == "too-large":
        with open(path, "wb") as fh:  # sparse: no disk is used, but a reader would read it all
            fh.truncate(limit + 1)
    elif kind == "named-pipe":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text("")


def finishes(call: Callable[[], Any], seconds: float = 60) -> Any:
    """``call()``, failing the test where it has not returned within ``seconds`` (a reader
    blocked on a named pipe, or expanding a bomb)."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = call()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the reader has not returned after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize(
    ("reader", "limit"),
    [(read_yaml, LIMITS["yaml"]), (read_json, LIMITS["json"]), (read_text, LIMITS["yaml"])],
)
def test_the_one_reader_refuses_each_bad_file_in_one_line(tmp_path, reader, limit, kind) -> None:
    path = tmp_path / "file"
    plant(path, kind, limit)
    if reader is read_yaml and kind == "empty":
        assert finishes(lambda: reader(path)) is None  # an empty YAML document is null
        return
    if reader is read_text and kind in ("alias-bomb", "empty"):
        finishes(lambda: reader(path))  # text is text
        return
    with pytest.raises(UnreadableFile) as refused:
        finishes(lambda: reader(path, "run file"))
    message = str(refused.value)
    assert f"run file {path}" in message and "\n" not in message


GOOD = {
    "method": "Forward", "alpha": 0.0, "dataset": "mnist", "backbone": "lenet5", "seed": 0,
    "noise": {"type": "symmetric", "rate_nominal": 0.2}, "test_acc": 0.9, "test_acc_last": 0.9,
    "health": "ok",
}  # fmt: skip


def _limit(name: str) -> int:
    return LIMITS["yaml"] if name.endswith(".yaml") else LIMITS["json"]


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("name", ["results.json", "config.yaml"])
def test_report_skips_a_run_whose_file_is_bad_with_one_line(tmp_path, capsys, name, kind):
    from noisylabels.report.cli import main

    for seed in (0, 1):
        folder = tmp_path / "runs" / f"seed-{seed}"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps({**GOOD, "seed": seed}))
        (folder / "config.yaml").write_text("model: {class_path: noisylabels.methods.Forward}\n")
    bad = tmp_path / "runs" / "seed-1" / name
    plant(bad, kind, _limit(name))
    text = finishes(lambda: main([str(tmp_path / "runs"), "--include-short"]))
    err = capsys.readouterr().err
    if name == "config.yaml" and kind == "empty":  # an empty document: a config of no options
        assert "| Forward | **90.00 ± 0.00 (2)** |" in text and "Traceback" not in err
        return
    assert "| Forward | **90.00 (1)** |" in text  # the good run alone
    lines = [line for line in err.splitlines() if str(bad) in line]
    assert len(lines) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("name", ["results.json", "config.yaml", "subsets.csv"])
def test_plot_draws_or_refuses_a_run_whose_file_is_bad_in_one_line(
    finished_run: Path, tmp_path: Path, capsys, name: str, kind: str
) -> None:
    """A run's label (results.json, config.yaml) is read with the one reader: a bad one is said
    in one line and the curves are drawn under the folder's name; its statistics (subsets.csv)
    bad, the plot is refused in one line (from the event files where the csv is gone)."""
    from noisylabels.report.plot import main

    run = copy_run(finished_run, tmp_path / "run")
    plant(run / name, kind, _limit(name))
    out = tmp_path / "fig.png"
    if name == "subsets.csv":  # drawn from the run's event files, or refused naming the file
        try:
            finishes(lambda: main([str(run), "--out", str(out)]))
        except SystemExit as refused:
            err = capsys.readouterr().err
            assert refused.code == 2 and str(run / name) in err and "Traceback" not in err
            assert kind in ("too-large", "alias-bomb"), err
        else:
            assert out.is_file() and kind in ("named-pipe", "folder", "empty")
        return
    finishes(lambda: main([str(run), "--out", str(out)]))
    err = capsys.readouterr().err
    assert out.is_file()
    if kind != "empty" or name == "results.json":  # an empty config.yaml is no config at all
        assert len([line for line in err.splitlines() if str(run / name) in line]) == 1, err


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("name", ["results.json", "config.yaml"])
def test_audit_refuses_a_run_whose_file_is_bad_in_one_paragraph(
    finished_run: Path, tmp_path: Path, name: str, kind: str
) -> None:
    from noisylabels.audit.cli import main
    from noisylabels.errors import NoisyLabelsError

    run = copy_run(finished_run, tmp_path / "run")
    plant(run / name, kind, _limit(name))
    with pytest.raises(NoisyLabelsError) as refused:
        finishes(lambda: main([str(run)]))
    message = str(refused.value)
    assert "\n" not in message
    assert str(run / name) in message or f"lacks {name}" in message, message


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("name", ["results.json", "sweep_run.json", "run.lock"])
def test_a_sweeps_states_read_a_bad_run_file_without_hanging(
    tmp_path: Path, capsys, name: str, kind: str
) -> None:
    from noisylabels.cli import run as cli

    from conftest import CONFIGS

    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"name: s\nbase: [{CONFIGS / 'quickstart.yaml'}]\n"
                     "axes:\n  seed: {values: [0], options: [seed_everything]}\n")  # fmt: skip
    point = tmp_path / "runs" / "s" / "seed-0"
    version = point / "lightning_logs" / "version_0"
    version.mkdir(parents=True)
    (version / "results.json").write_text(json.dumps(GOOD))
    (point / "sweep_run.json").write_text(json.dumps({"command": ["fit"]}))
    where = version if name == "results.json" else point
    plant(where / name, kind, _limit(name))
    code = finishes(lambda: cli(["sweep", str(sweep), "--root", str(tmp_path / "runs"),
                                 "--dry-run"]))  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "seed-0" in out


@pytest.mark.parametrize("kind", BAD)
def test_a_resume_reads_a_bad_results_file_of_its_run_without_hanging(tmp_path, kind) -> None:
    from noisylabels.run import resume

    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    last = checkpoints / "last.ckpt"
    last.write_bytes(b"x")
    plant(tmp_path / "results.json", kind, LIMITS["json"])
    assert finishes(lambda: resume.reported(last, tmp_path)) == last


@pytest.mark.parametrize("kind", ["named-pipe", "folder", "empty", "too-large"])
def test_a_checkpoint_that_is_no_file_is_refused_in_one_line(tmp_path, kind) -> None:
    from noisylabels.errors import InputError
    from noisylabels.run import resume

    path = tmp_path / "last.ckpt"
    plant(path, kind, LIMITS["json"])
    with pytest.raises(InputError) as refused:
        finishes(lambda: resume.read(path))
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
