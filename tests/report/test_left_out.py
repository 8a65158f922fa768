"""``noisylabels report`` believes no number blindly: a value enters a mean only if it is a
finite accuracy in [0, 1] of a healthy run that trained its protocol's epochs (at a sweep's grid
point: made with the sweep's options), and every run left out is listed with why. A named pipe
where a run's file should be is named as damaged, never opened."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random
import statistics
import threading
from pathlib import Path
from typing import Any

import pytest

from noisylabels.report.cells import screen
from noisylabels.report.cli import main
from noisylabels.report.collect import collect

SYM = {"type": "symmetric", "rate_nominal": 0.2}
MISSING = object()  # the metric's key is absent from results.json


def write_run(folder: Path, method: str, seed: int, **fields: Any) -> Path:
    """A results.json in ``folder``: a run of ``method`` on MNIST Sym-20 % with ``fields``
    (``MISSING``: leave the key out); written as Python's json writes NaN and Infinity."""
    folder.mkdir(parents=True, exist_ok=True)
    results = {
        "method": method,
        "alpha": 0.1 if method.endswith("-VRNL") else 0.0,
        "backbone": "lenet5",
        "dataset": "mnist",
        "noise": SYM,
        "seed": seed,
        "test_acc": 0.9,
        "test_acc_last": 0.9,
    }
    results.update(fields)
    results = {k: v for k, v in results.items() if v is not MISSING}
    file = folder / "results.json"
    file.write_text(json.dumps(results))
    return file


def cells(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """The CSV report as ``(kind, method) -> row``."""
    return {(r["kind"], r["method"]): r for r in csv.DictReader(io.StringIO(text))}


# each kind of value that is no accuracy, and the reason the report gives
BAD_VALUES = [
    (math.nan, "test_acc is nan"),
    (math.inf, "test_acc is inf"),
    (-math.inf, "test_acc is -inf"),
    (87.0, "test_acc is 87.0, outside [0, 1]"),
    (-0.1, "test_acc is -0.1, outside [0, 1]"),
    ("0.9", 'test_acc is "0.9", not a number'),
    (True, "test_acc is true, not a number"),
    (None, "test_acc is not recorded"),
    (MISSING, "test_acc is not recorded"),
]


@pytest.mark.parametrize(
    ("bad", "reason"),
    BAD_VALUES,
    ids=["nan", "inf", "-inf", "87.0", "-0.1", "str", "true", "null", "missing"],
)
def test_a_value_that_is_no_accuracy_never_counts(
    bad: Any, reason: str, tmp_path: Path, capsys
) -> None:
    """Whatever the bad value and whichever seed has it: the base row's mean is the mean of its
    good runs only, the bold cell is the best of the good means, the paired difference is over
    the seeds whose both runs are good, and the bad run is listed with its reason. Its other
    metric (the last epoch's, a good number) still counts."""
    rng = random.Random(repr(bad))
    seeds = range(5)
    bad_seed = rng.choice(seeds)
    base = {s: round(rng.uniform(0.80, 0.85), 4) for s in seeds}
    vrnl = {s: round(rng.uniform(0.86, 0.90), 4) for s in seeds}  # the better row, bad aside
    root = tmp_path / "runs"
    for s in seeds:
        write_run(root / "vrnl" / str(s), "Forward-VRNL", s, test_acc=vrnl[s])
        acc = bad if s == bad_seed else base[s]
        write_run(root / "base" / str(s), "Forward", s, test_acc=acc, test_acc_last=base[s])
    bad_file = root / "base" / str(bad_seed) / "results.json"
    good = [s for s in seeds if s != bad_seed]

    capsys.readouterr()
    rows = cells(main([str(root), "--format", "csv", "--paired"]))
    err = capsys.readouterr().err
    cell = rows[("cell", "Forward")]
    assert cell["n"] == "4"
    assert float(cell["mean"]) == pytest.approx(100 * statistics.mean(base[s] for s in good))
    assert float(cell["std"]) == pytest.approx(100 * statistics.stdev(base[s] for s in good))
    assert cell["best"] == "False" and rows[("cell", "Forward-VRNL")]["best"] == "True"
    paired = rows[("paired", "Forward-VRNL - Forward")]
    assert paired["n"] == "4"
    assert float(paired["mean"]) == pytest.approx(
        100 * statistics.mean(vrnl[s] - base[s] for s in good)
    )
    assert f"- {bad_file}: {reason}\n" in err  # the CSV on stdout stays CSV

    text = main([str(root), "--paired"])
    table, _, left_out = text.partition("Left out of every mean, bold and paired difference")
    rows_text = "".join(line for line in table.splitlines() if line.startswith("| "))
    assert "nan" not in rows_text.lower() and "inf" not in rows_text
    base_line = next(line for line in table.splitlines() if line.startswith("| Forward |"))
    assert base_line.endswith("(4) |") and "**" not in base_line
    assert "**" in next(line for line in table.splitlines() if line.startswith("| Forward-VRNL |"))
    paired = next(line for line in table.splitlines() if line.startswith("| Forward-VRNL − "))
    assert paired.endswith("(4) |")
    assert left_out.startswith(": 1 run(s):") and f"- {bad_file}: {reason}\n" in left_out

    last = cells(main([str(root), "--format", "csv", "--metric", "last"]))
    assert last[("cell", "Forward")]["n"] == "5"  # a problem of test_acc only


def test_a_number_set_in_a_record_by_hand_is_still_screened(tmp_path: Path) -> None:
    """The screen checks the value itself, not only the problems found when reading it."""
    write_run(tmp_path / "a", "CE", 0)
    record = collect(tmp_path)[0]
    for value in (math.nan, math.inf, 87.0, True, None):
        record.metrics["best"] = value
        screened = screen([record], "best")
        assert not screened.used
        assert "not a finite accuracy in [0, 1]" in str(screened.left_out[0][1][0])


def test_an_unhealthy_run_is_left_out_unless_included(tmp_path: Path) -> None:
    reason = "collapsed: noisy-validation accuracy at chance for 5 epochs (epochs 3-7)"
    write_run(tmp_path / "ok", "CE", 0, test_acc=0.90, health="ok")
    write_run(tmp_path / "old", "CE", 1, test_acc=0.92)  # health not recorded: no problem
    sick = write_run(tmp_path / "sick", "CE", 2, test_acc=0.10, health=reason)
    odd = write_run(tmp_path / "odd", "CE", 3, test_acc=0.11, health=False)

    text = main([str(tmp_path)])
    assert "| CE | **91.00 ± 1.41 (2)** |" in text
    assert f"- {sick}: health: {reason}\n" in text
    assert f'- {odd}: health: false, neither "ok" nor a reason\n' in text
    assert "(--include-unhealthy averages the unhealthy ones)" in text

    text = main([str(tmp_path), "--include-unhealthy"])
    table, _, listing = text.partition("Averaged despite a problem")
    assert "| CE | **50.75 ± 46.49 (4)** |" in table and "Left out" not in text
    assert f"- {sick}: health: {reason}\n" in listing and f"- {odd}: health: false" in listing


@pytest.mark.parametrize("health", [MISSING, None])
def test_a_run_that_records_no_health_is_judged_by_the_runs_rule(tmp_path: Path, health) -> None:
    """No ``health`` (an older record, or one edited) or ``null``: judged by the rule a run
    applies to itself (an accuracy at chance is a collapse); a run above chance counts."""
    write_run(tmp_path / "ok", "CE", 0, test_acc=0.85, health=health)
    sick = write_run(tmp_path / "sick", "CE", 1, test_acc=0.07, health=health)
    text = main([str(tmp_path)])
    assert "| CE | **85.00 (1)** |" in text
    assert (
        f"- {sick}: health not recorded; judged from its accuracies: collapsed: clean test "
        "accuracy of the selected checkpoint (test_acc) 0.070 at chance (1/C = 0.100"
    ) in text
    text = main([str(tmp_path), "--include-unhealthy"])
    assert "| CE | **46.00 ± 55.15 (2)** |" in text and "Averaged despite a problem" in text


def test_a_short_run_is_left_out_unless_included(tmp_path: Path, capsys) -> None:
    write_run(tmp_path / "full", "CE", 0, test_acc=0.90, epochs=80, protocol_epochs=80)
    write_run(tmp_path / "more", "CE", 1, test_acc=0.92, epochs=100, protocol_epochs=80)
    write_run(tmp_path / "free", "CE", 2, test_acc=0.94, epochs=2, protocol_epochs=None)
    write_run(tmp_path / "old", "CE", 3, test_acc=0.96, epochs=2)  # protocol not recorded
    trial = write_run(tmp_path / "trial", "CE", 4, test_acc=0.50, epochs=2, protocol_epochs=80)
    odd = write_run(tmp_path / "odd", "CE", 5, test_acc=0.51, epochs=80, protocol_epochs="80")

    text = main([str(tmp_path)])
    assert "| CE | **93.00 ± 2.58 (4)** |" in text
    assert f"- {trial}: short run: 2 of its protocol's 80 epochs\n" in text
    assert f'- {odd}: protocol_epochs is "80", not a whole number\n' in text

    text = main([str(tmp_path), "--include-short"])
    assert "(6)" in text and "Left out" not in text
    assert (
        f"- {trial}: short run: 2 of its protocol's 80 epochs\n"
        in text.partition(
            "Averaged despite a problem (--include-unhealthy, --include-short): 2 run(s):"
        )[2]
    )

    for name in ("full", "more", "free", "old", "odd"):  # every run short: an error says why
        (tmp_path / name / "results.json").unlink()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"every run under {tmp_path} is left out of the table" in err
    assert "short run: 2 of its protocol's 80 epochs (--include-short averages" in err


def write_point(folder: Path, sha: str | None) -> None:
    """A sweep's grid-point folder: its sweep_run.json, planning the command ``sha``."""
    folder.mkdir(parents=True)
    run_file = {"sweep": "t", "point": {"method": "ce", "seed": "seed-0"}}
    (folder / "sweep_run.json").write_text(json.dumps(run_file | {"command_sha256": sha}))


def write_version(folder: Path, version: int, sha: str | None, acc: float, age: int) -> Path:
    """A results.json of version ``version`` recording command ``sha``, ``age`` seconds old."""
    provenance = {"command_sha256": sha} if sha is not None else MISSING
    file = write_run(folder / f"version_{version}", "CE", 0, test_acc=acc, provenance=provenance)
    stamp = 1_700_000_000 - age
    os.utime(file, (stamp, stamp))
    return file


def test_a_grid_point_is_the_run_made_with_the_sweeps_options(tmp_path: Path) -> None:
    """Of a grid point's results, the one made with the sweep's command counts, not the newest
    (a trial's); with none made so, the newest is listed as made with other options; where
    the results or the sweep_run.json record no command (older files): the newest."""
    sha, other, third = "a" * 64, "b" * 64, "c" * 64
    real = tmp_path / "real" / "ce" / "seed-0"
    write_point(real, sha)
    write_version(real, 0, sha, 0.90, age=100)
    write_version(real, 1, other, 0.10, age=10)  # the newest: a trial's
    text = main([str(tmp_path / "real")])
    assert "| CE | **90.00 (1)** |" in text and "Left out" not in text

    trial = tmp_path / "trial" / "ce" / "seed-0"
    write_point(trial, sha)
    newest = write_version(trial, 0, other, 0.10, age=10)
    write_version(trial, 1, third, 0.20, age=100)
    write_run(tmp_path / "trial" / "forward", "Forward", 0)  # a run that counts, beside it
    text = main([str(tmp_path / "trial")])
    assert "| CE |" not in text and "| Forward | **90.00 (1)** |" in text
    assert f"- {newest}: its options differ from the sweep's: a trial? (its command_sha256 " in (
        text
    )

    older = tmp_path / "older" / "ce" / "seed-0"
    write_point(older, sha)
    write_version(older, 0, other, 0.90, age=100)
    write_version(older, 1, None, 0.80, age=10)  # records no command: the newest, as before
    assert "| CE | **80.00 (1)** |" in main([str(tmp_path / "older")])
    unknown = tmp_path / "unknown" / "ce" / "seed-0"
    write_point(unknown, None)  # a sweep_run.json without the hash: the newest
    write_version(unknown, 0, sha, 0.90, age=100)
    write_version(unknown, 1, other, 0.80, age=10)
    assert "| CE | **80.00 (1)** |" in main([str(tmp_path / "unknown")])


def test_a_named_pipe_is_named_as_damaged_not_opened(tmp_path: Path, capsys) -> None:
    """A FIFO named results.json, config.yaml or sweep_run.json (nothing writes to it: a reader
    would wait for ever) is skipped with a warning, and named by --strict."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    root = tmp_path / "runs"
    write_run(root / "good", "CE", 0)
    pipes = [root / "pipe" / "results.json", root / "config" / "config.yaml"]
    pipes.append(root / "point" / "sweep_run.json")
    write_run(root / "config", "CE", 1)
    write_run(root / "point" / "version_0", "CE", 2)
    (root / "pipe").mkdir()
    for pipe in pipes:
        os.mkfifo(pipe)

    def run(argv: list[str]) -> dict[str, Any]:
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["text"] = main(argv)
            except SystemExit as exc:
                outcome["exit"] = exc.code

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(timeout=30)
        if thread.is_alive():
            for pipe in pipes:  # a writer that closes at once ends the blocked read
                try:
                    os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
            thread.join(timeout=5)
            pytest.fail("the report blocked on a named pipe")
        return outcome

    capsys.readouterr()
    outcome = run([str(root)])
    err = capsys.readouterr().err
    assert "| CE | **90.00 (1)** |" in outcome["text"]
    assert "noisylabels report: warning: 3 run(s) skipped" in err
    for pipe in pipes:
        assert f"{pipe} is a named pipe (FIFO), not a regular file" in err
    assert run([str(root), "--strict"]) == {"exit": 2}
    assert "is a named pipe (FIFO), not a regular file" in capsys.readouterr().err


def test_the_bias_figure_leaves_out_runs_without_a_believable_number(
    tmp_path: Path, capsys
) -> None:
    root = tmp_path / "runs"
    for seed in range(2):
        write_run(root / str(seed), "Forward", seed, t_estimation_error=0.1 * (seed + 1))
    nan_eps = write_run(root / "nan", "Forward", 2, t_estimation_error=math.nan)
    bad_acc = write_run(root / "bad", "Forward", 3, t_estimation_error=0.1, test_acc=87.0)
    records = collect(root)
    used = screen(records, "best", eps_t=True).used
    assert sorted(r.seed for r in used) == [0, 1]
    capsys.readouterr()
    out = tmp_path / "fig3.png"
    assert main([str(root), "--kind", "bias", "--out", str(out)]) == f"wrote {out}"
    err = capsys.readouterr().err
    assert "Left out of the figure: 2 run(s):" in err
    assert f"- {nan_eps}: t_estimation_error is nan, not a finite number >= 0\n" in err
    assert f"- {bad_acc}: test_acc is 87.0, outside [0, 1]\n" in err


def test_latex_lists_the_left_out_runs_as_comments(tmp_path: Path) -> None:
    write_run(tmp_path / "a", "CE", 0)
    bad = write_run(tmp_path / "b", "CE", 1, test_acc=math.inf)
    text = main([str(tmp_path), "--format", "latex"])
    assert "% Left out of every mean, bold and paired difference: 1 run(s):" in text
    assert f"% - {bad}: test_acc is inf\n" in text


@pytest.mark.parametrize("selected", [True, False, None])
def test_the_selected_checkpoints_table_holds_selected_checkpoints_only(
    tmp_path: Path, selected: bool | None
) -> None:
    """A run that records it selected no checkpoint (``best_epoch: null``: no validation data)
    has its last epoch's accuracy as ``test_acc``: it is left out of the selected checkpoint's
    table, saying why, and counts in the last epoch's. A record without ``best_epoch`` (one
    written before it was recorded) is taken as it is."""
    write_run(tmp_path / "a", "CE", 0, test_acc=0.90, test_acc_last=0.80, best_epoch=4)
    fields = {True: {"best_epoch": 7}, False: {"best_epoch": None}, None: {}}[selected]
    other = write_run(tmp_path / "b", "CE", 1, test_acc=0.70, test_acc_last=0.70, **fields)
    best = main([str(tmp_path)])
    last = main([str(tmp_path), "--metric", "last"])
    assert "| CE | **75.00 ± 7.07 (2)** |" in last and "Left out" not in last
    if selected is False:
        assert "| CE | **90.00 (1)** |" in best
        assert f"- {other}: no checkpoint was selected (best_epoch is null" in best
    else:
        assert "| CE | **80.00 ± 14.14 (2)** |" in best and "Left out" not in best
