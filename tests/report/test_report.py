"""``noisylabels report`` over hand-written results.json files: means, stds, seed counts, best
per column, the paired VRNL-vs-base statistics against values computed by hand, the paper's
numbers, the formats, and the bias figure."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from noisylabels.report.cells import paired_difference

SYM = {"type": "symmetric", "rate_nominal": 0.2, "rate_actual": 0.2, "seed": 0}
PAIR = {"type": "pair", "rate_nominal": 0.45, "rate_actual": 0.45, "seed": 0}
# (method, alpha, noise, seed, best, last)
RUNS = [
    ("Forward", 0.0, SYM, 0, 0.970, 0.960),
    ("Forward", 0.0, SYM, 1, 0.975, 0.965),
    ("Forward", 0.0, SYM, 2, 0.980, 0.955),
    ("Forward-VRNL", 0.1, SYM, 0, 0.975, 0.962),
    ("Forward-VRNL", 0.1, SYM, 1, 0.985, 0.970),
    ("Forward-VRNL", 0.1, SYM, 2, 0.995, 0.978),
    ("Forward", 0.0, PAIR, 0, 0.900, 0.800),
    ("Forward", 0.0, PAIR, 1, 0.910, 0.820),
    ("VolMinNet", 0.0, SYM, 0, 0.980, 0.979),
]
# by hand: Forward-VRNL − Forward on Sym-20 %, per seed 0.5, 1.0, 1.5 points: mean 1, sd 0.5,
# se 0.5/√3, t = 2√3; with 2 degrees of freedom the t CDF is 1/2 + t / (2√(2 + t²)), so
# p = 1 − t/√(2 + t²) = 1 − √(6/7), and t_0.975 solves t/√(2 + t²) = 0.95
P_HAND = 1 - math.sqrt(6 / 7)
T975 = math.sqrt(2 * 0.95**2 / (1 - 0.95**2))
HALF = T975 * 0.5 / math.sqrt(3)


def write_runs(root: Path, runs=RUNS, bias: dict | None = None) -> Path:
    for i, (method, alpha, noise, seed, best, last) in enumerate(runs):
        folder = root / f"{method}-{noise['type']}" / f"seed-{seed}" / "version_0"
        folder.mkdir(parents=True, exist_ok=True)
        results = {
            "method": method,
            "alpha": alpha,
            "backbone": "lenet5",
            "dataset": "mnist",
            "noise": noise,
            "seed": seed,
            "test_acc": best,
            "test_acc_last": last,
            "t_estimation_error": None if bias is None else bias["eps"][i],
        }
        (folder / "results.json").write_text(json.dumps(results))
        if bias is not None:
            config = {"model": {"init_args": {"transition_bias": bias["gamma"][i]}}}
            (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return root


def report(*args: str) -> str:
    from noisylabels.cli import run

    return run(["report", *map(str, args)])


def test_paired_difference_by_hand() -> None:
    result = paired_difference({0: 97.5, 1: 98.5, 2: 99.5}, {0: 97.0, 1: 97.5, 2: 98.0, 3: 1})
    assert result.n == 3 and result.mean == pytest.approx(1.0)
    assert result.low == pytest.approx(1 - HALF) and result.high == pytest.approx(1 + HALF)
    assert result.p == pytest.approx(P_HAND, rel=1e-9)
    single = paired_difference({0: 98.0}, {0: 97.0})
    assert single.n == 1 and single.low is None and single.p is None
    assert paired_difference({0: 98.0}, {1: 97.0}) is None
    # two equal differences: no interval of width 0 and no p-value, which would read as certain
    equal = paired_difference({0: 98.0, 1: 97.5}, {0: 97.0, 1: 96.5})
    assert equal.n == 2 and equal.mean == pytest.approx(1.0)
    assert equal.low is None and equal.high is None and equal.p is None
    from noisylabels.report.render import fmt_paired

    assert fmt_paired(equal) == "+1.00 [equal on every seed: no interval] (2)"
    assert fmt_paired(single) == "+1.00 (1)"
    # equal as the records hold them: float32 fractions in per cent (DISC's two seeds, last
    # epoch: 98.69 - 98.65 and 98.79 - 98.75)
    f32 = {k: float(np.float32(v)) * 100 for k, v in
           {"a0": 0.9869, "a1": 0.9879, "b0": 0.9865, "b1": 0.9875}.items()}  # fmt: skip
    stored = paired_difference({0: f32["a0"], 1: f32["a1"]}, {0: f32["b0"], 1: f32["b1"]})
    assert stored.low is None and stored.p is None and stored.mean == pytest.approx(0.04, abs=1e-4)


def test_markdown_means_stds_counts_best_and_paired(tmp_path: Path) -> None:
    out = report(write_runs(tmp_path), "--paired")
    lines = out.splitlines()
    assert "| method | MNIST Sym-20% | MNIST Pair-45% |" in lines
    assert "| Forward | 97.50 ± 0.50 (3) | **90.50 ± 0.71 (2)** |" in lines
    assert "| Forward-VRNL | **98.50 ± 1.00 (3)** | — |" in lines
    assert "| VolMinNet | 98.00 (1) | — |" in lines
    paired = next(line for line in lines if line.startswith("| Forward-VRNL − Forward |"))
    assert paired == (
        f"| Forward-VRNL − Forward | +1.00 [{1 - HALF:+.2f}, {1 + HALF:+.2f}] "
        f"p={P_HAND:.3f} (3) | — |"
    )
    assert "paired t-test" in out


def test_last_epoch_metric_and_paper_column(tmp_path: Path) -> None:
    out = report(write_runs(tmp_path), "--metric", "last", "--paper", "--paired")
    lines = out.splitlines()
    header = "| method | MNIST Sym-20% | paper | MNIST Pair-45% | paper |"
    assert header in lines
    assert (
        "| Forward | 96.00 ± 0.50 (3) | 97.47 ± 0.15 | **81.00 ± 1.41 (2)** | 96.45 ± 4.03 |"
        in lines
    )
    # VolMinNet's one seed is not ranked against the three-seed means, however high
    assert "| Forward-VRNL | **97.00 ± 0.80 (3)** | 98.89 ± 0.04 | — | 96.55 ± 3.88 |" in lines
    assert "| VolMinNet | 97.90 (1) | 98.66 ± 0.14 | — | 99.08 ± 0.06 |" in lines
    assert any(
        line.startswith("| Forward-VRNL − Forward | +1.00") and "| +1.42 |" in line
        for line in lines
    )
    assert "last epoch" in out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_only_cells_over_all_of_a_columns_seeds_are_ranked(tmp_path: Path, seed: int) -> None:
    """Bold (and CSV's ``best``) goes to the best mean among the cells that hold every seed of
    their column: a cell missing a seed another cell has is never bold, whatever its mean; a
    column where no cell holds every seed has no bold cell."""
    runs = [*RUNS, ("Reweight", 0.0, SYM, seed, 0.999, 0.999)]  # the highest of all, one seed
    out = report(write_runs(tmp_path, runs), "--format", "csv")
    cells = [r for r in csv.DictReader(io.StringIO(out)) if r["kind"] == "cell"]
    for noise in {r["noise"] for r in cells}:
        column = [r for r in cells if r["noise"] == noise]
        seeds = max(int(r["n"]) for r in column)
        ranked = [r for r in column if int(r["n"]) == seeds]
        bold = [r["method"] for r in column if r["best"] == "True"]
        if seed == 3 and noise.startswith("Sym"):  # seeds 0-2 and 3: no cell holds them all
            assert bold == []
        else:
            assert bold == [max(ranked, key=lambda r: float(r["mean"]))["method"]]
            assert "Reweight" not in bold


def test_latex_and_csv(tmp_path: Path) -> None:
    root = write_runs(tmp_path)
    latex = report(root, "--format", "latex", "--paired")
    assert "\\begin{tabular}{lll}" in latex and "\\toprule" in latex
    assert "\\textbf{98.50 $\\pm$ 1.00 (3)}" in latex
    assert "MNIST Sym-20\\%" in latex and "Forward-VRNL $-$ Forward" in latex
    rows = list(csv.DictReader(io.StringIO(report(root, "--format", "csv", "--paired"))))
    cell = next(r for r in rows if r["kind"] == "cell" and r["method"] == "Forward-VRNL")
    assert float(cell["mean"]) == pytest.approx(98.5) and float(cell["std"]) == pytest.approx(1.0)
    assert cell["n"] == "3" and cell["best"] == "True" and cell["noise"] == "Sym-20%"
    pair = next(r for r in rows if r["kind"] == "paired")
    assert float(pair["p_value"]) == pytest.approx(P_HAND, rel=1e-9)
    assert float(pair["ci_low"]) == pytest.approx(1 - HALF)


def _point(root: Path, name: str, point: dict, config: dict | None = None) -> None:
    """A sweep's grid point ``name`` under ``root`` (its ``sweep_run.json``) with one finished
    Forward-VRNL run of seed 0, and ``config`` as its ``config.yaml``."""
    folder = root / name
    write_runs(folder, [("Forward-VRNL", 0.1, SYM, 0, 0.97, 0.96)])
    (folder / "sweep_run.json").write_text(json.dumps({"point": point}))
    if config is not None:
        (next(folder.rglob("results.json")).parent / "config.yaml").write_text(
            yaml.safe_dump(config)
        )


def test_a_cell_collision_names_the_field_the_runs_differ_in(tmp_path: Path, capsys) -> None:
    """Two runs of one seed and the same alpha, apart only in a sweep's axis: the refusal
    names that axis, not alpha."""
    root = tmp_path / "runs"
    for size in ("1", "2"):
        _point(root, f"ws{size}", {"world_size": size, "seed": "0"})
    with pytest.raises(SystemExit) as exc:
        report(root)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "to --rows or --cols: they differ in world_size" in err, err
    assert "alpha" not in err
    out = report(root, "--rows", "method,world_size")
    assert "| Forward-VRNL | 1 | **97.00 (1)** |" in out and "| Forward-VRNL | 2 |" in out


def test_a_cell_collision_names_the_config_option_the_runs_differ_in(
    tmp_path: Path, capsys
) -> None:
    """Apart in no field: the options of their config.yaml files that differ, by the dotted
    name --rows takes; the seeds and the folders do not count."""
    root = tmp_path / "runs"
    for lr, devices in (("0.01", 1), ("0.1", 2)):
        config = {
            "seed_everything": int(float(lr) * 100),
            "trainer": {"devices": devices, "default_root_dir": f"runs/{lr}"},
            "model": {"class_path": "noisylabels.methods.Forward",
                      "init_args": {"optim": {"lr": float(lr)}, "alpha": 0.1}},
        }  # fmt: skip
        _point(root, f"lr{lr}", {}, config)
    with pytest.raises(SystemExit):
        report(root)
    err = capsys.readouterr().err
    assert "they differ in model.optim.lr, trainer.devices" in err, err
    out = report(root, "--rows", "method,model.optim.lr")
    assert "| Forward-VRNL | 0.01 | **97.00 (1)** |" in out and "| Forward-VRNL | 0.1 |" in out


def test_a_cell_collision_of_the_same_run_twice_says_so(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    for copy in ("a", "b"):
        _point(root, copy, {}, {"trainer": {"max_epochs": 3}})
    with pytest.raises(SystemExit):
        report(root)
    err = capsys.readouterr().err
    assert "they differ in no field and no option of their config.yaml" in err, err
    assert "alpha" not in err


def test_paired_without_pairs_says_so(tmp_path: Path) -> None:
    out = report(write_runs(tmp_path, RUNS[:3]), "--paired")
    assert "no pairs: no X-VRNL row has its X row" in out


def test_cells_with_two_runs_of_one_seed_need_another_field(tmp_path: Path, capsys) -> None:
    runs = [("Forward-VRNL", 0.1, SYM, 0, 0.97, 0.96), ("Forward-VRNL", 0.2, SYM, 0, 0.98, 0.97)]
    root = tmp_path / "a"
    for i, run in enumerate(runs):
        write_runs(root / str(i), [run])
    with pytest.raises(SystemExit):
        report(root)
    err = capsys.readouterr().err
    assert "add the field that tells them apart to --rows or --cols: they differ in alpha" in err
    out = report(root, "--rows", "method,alpha")
    assert (
        "| Forward-VRNL | 0.1 | 97.00 (1) |" in out
        and "| Forward-VRNL | 0.2 | **98.00 (1)** |" in out
    )


def test_sweep_axes_and_config_options_are_fields(tmp_path: Path) -> None:
    runs = [("Forward", 0.0, SYM, s, 0.9 + s / 100, 0.9) for s in (0, 1)]
    root = write_runs(tmp_path / "r", runs, bias={"eps": [0.1, 0.2], "gamma": [0.05, 0.1]})
    out = report(root, "--cols", "model.transition_bias")
    assert "| method | 0.05 | 0.1 |" in out and "| Forward | **90.00 (1)** | **91.00 (1)** |" in out
    run_file = root / "Forward-symmetric" / "seed-0" / "sweep_run.json"
    run_file.write_text(json.dumps({"point": {"lr": "lr-0.1", "seed": "seed-0"}}))
    assert "| Forward | lr-0.1 | 90.00 (1) |" in report(root, "--rows", "method,lr", "--cols", "")


def test_bias_figure(tmp_path: Path) -> None:
    runs = [
        (m, a, SYM, s, acc, acc)
        for m, a, acc in (("Forward", 0.0, 0.95), ("Forward-VRNL", 0.1, 0.97))
        for s in (0, 1)
    ]
    runs += [(m, a, SYM, s, acc - 0.05, acc) for m, a, _, s, acc, _ in runs]
    bias = {
        "eps": [0.05, 0.06, 0.05, 0.06, 0.3, 0.32, 0.3, 0.32],
        "gamma": [0.0, 0.0, 0.0, 0.0, 0.1, 0.1, 0.1, 0.1],
    }
    for i, run in enumerate(runs):
        write_runs(tmp_path / "runs" / str(i), [run], bias={k: [v[i]] for k, v in bias.items()})
    out = tmp_path / "fig3.png"
    assert "wrote" in report(tmp_path / "runs", "--kind", "bias", "--out", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_errors(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    runs = write_runs(tmp_path / "r")
    for args, message in (
        ((tmp_path / "none",), "does not exist"),
        ((tmp_path / "empty",), "no results.json"),
        ((runs, "--paired", "--rows", "noise", "--cols", "dataset"), "put method among --rows"),
        ((runs, "--kind", "bias"), "--out FILE.png"),
        ((runs, "--rows", "method", "--cols", "method"), "both --rows and --cols"),
    ):
        with pytest.raises(SystemExit):
            report(*args)
        assert message in capsys.readouterr().err


def test_dual_t_runs_are_their_own_rows_and_match_the_papers_dual_t(tmp_path: Path) -> None:
    from noisylabels.methods import Forward
    from noisylabels.report.collect import method_key

    estimate = {"transition": "estimate", "schedule": {"warmup_epochs": 20}}
    assert Forward(estimator="dual_t", **estimate).method_name == "Forward-DualT"
    assert Forward(estimator="dual_t", alpha=0.1, **estimate).method_name == "Forward-DualT-VRNL"
    assert Forward(**estimate).method_name == "Forward"
    assert method_key("Forward-DualT") == method_key("Dual T") == "dualt"
    runs = [("Forward-DualT", 0.0, SYM, 0, 0.984, 0.980), *RUNS[:3]]
    lines = report(write_runs(tmp_path, runs), "--paper").splitlines()
    assert "| Forward-DualT | 98.40 (1) | 98.43 ± 0.05 |" in lines  # one seed: not ranked
    assert any(line.startswith("| Forward | **97.50 ± 0.50 (3)** |") for line in lines)


def test_damaged_runs_are_skipped_with_a_warning_at_the_end(tmp_path: Path, capsys) -> None:
    """A run whose results.json is empty, cut short or not a run's (or whose config.yaml is
    damaged) is named and skipped, the rest reported; --strict fails on the first instead. A
    readable run whose accuracy is a word is no damaged file: it is left out of the table and
    listed after it."""
    from noisylabels.report.cli import main

    root = write_runs(tmp_path / "runs", RUNS[:3])
    damaged = {
        "empty": ("results.json", ""),
        "cut": ("results.json", '{"method": "Forward", "test_acc": 0.9'),
        "list": ("results.json", "[0.9]"),
        "word": ("results.json", json.dumps({"method": "CE", "test_acc": "high"})),
        "deep": ("results.json", "[" * 100_000),
        "digits": ("results.json", '{"method": "CE", "test_acc": 1' + "0" * 5000 + "}"),
        "yaml": ("config.yaml", "model: [unclosed\n"),
    }
    for name, (file, text) in damaged.items():
        folder = root / name
        folder.mkdir()
        if file == "config.yaml":
            (folder / "results.json").write_text(json.dumps({"method": "CE", "test_acc": 0.5}))
        (folder / file).write_text(text)
    capsys.readouterr()
    text = main([str(root)])
    out, err = capsys.readouterr()
    table, _, left_out = text.partition("Left out of every mean")
    assert "| Forward | **97.50 ± 0.50 (3)** |" in table and out.startswith(text)
    assert "CE" not in table  # the damaged runs are not in the table
    assert f'- {root / "word" / "results.json"}: test_acc is "high", not a number' in left_out
    warning, *listed = err.strip().splitlines()
    assert warning.startswith("noisylabels report: warning: 6 run(s) skipped")
    assert "--strict" in warning
    for name, expected in (
        ("cut", "is not valid JSON (line 1, column 38"),
        ("deep", "cannot be read as JSON: maximum recursion depth exceeded"),
        ("digits", "cannot be read as JSON: Exceeds the limit (4300 digits)"),
        ("empty", "is empty"),
        ("list", "holds a JSON list, not a run's results"),
        ("yaml", "config.yaml is not valid YAML"),
    ):
        assert any(f"{root / name}" in line and expected in line for line in listed), name
    with pytest.raises(SystemExit) as exc:
        main([str(root), "--strict"])
    assert exc.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"noisylabels report: error: {root / 'cut' / 'results.json'}")
    assert error.endswith("without --strict such a run is skipped with a warning")


def test_report_out_that_cannot_be_written_is_one_message(tmp_path: Path, capsys) -> None:
    import os

    runs = write_runs(tmp_path / "r")
    (tmp_path / "a_file").write_text("")
    targets = [tmp_path / "a_file" / "table.md"]  # a folder that is a file
    if os.geteuid() != 0:  # permissions bind everyone but root
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        targets.append(locked / "table.md")
    for out in targets:
        with pytest.raises(SystemExit) as exc:
            report(runs, "--out", out)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"noisylabels report: error: cannot write --out {out}: " in err
        assert "Traceback" not in err
        if out.parent.name == "a_file":
            assert f"{out.parent} is a file, not a folder" in err


def test_several_metrics_side_by_side(tmp_path: Path, capsys) -> None:
    """--metric best,last: each column once per metric in one table, the best of each bold;
    a metric given twice or unknown is refused, and so is CSV with several."""
    from noisylabels.report.cli import main

    for method, alpha, best, last in (
        ("Forward", 0.0, 0.94, 0.90),
        ("Forward-VRNL", 0.1, 0.93, 0.92),
    ):
        folder = tmp_path / method
        folder.mkdir()
        results = {"method": method, "alpha": alpha, "dataset": "digits", "seed": 0,
                   "noise": {"type": "symmetric", "rate_nominal": 0.4}, "test_acc": best,
                   "test_acc_last": last}  # fmt: skip
        (folder / "results.json").write_text(json.dumps(results))
    text = main([str(tmp_path), "--metric", "best,last"])
    header = "| method | digits Sym-40% (selected checkpoint) | digits Sym-40% (last epoch) |"
    assert header in text
    assert "| Forward | **94.00 (1)** | 90.00 (1) |" in text
    assert "| Forward-VRNL | 93.00 (1) | **92.00 (1)** |" in text
    for wrong in ("best,best", "best,first", ""):
        with pytest.raises(SystemExit):
            main([str(tmp_path), "--metric", wrong])
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--metric", "best,last", "--format", "csv"])
    assert "take one metric at a time" in capsys.readouterr().err


def test_runs_kind_lists_every_run_with_its_estimate(tmp_path: Path) -> None:
    """``--kind runs``: a row per run, healthy or not, ordered by the row and column fields
    and the seed, with the selected epoch, the accuracies in %, the epoch T̂ came from, ε_T
    and T̂'s mean diagonal read from each results.json."""
    root = write_runs(tmp_path)
    first = root / "Forward-pair" / "seed-1" / "version_0" / "results.json"
    results = json.loads(first.read_text())
    results.update(best_epoch=7, estimation_epoch=18, t_estimation_error=0.5312,
                   t_estimate={"diag": [0.5, 0.7]}, health="collapsed: at chance",
                   execution={"device": "cuda", "precision": "bf16-mixed",
                              "compile_mode": "reduce-overhead", "cuda_graphs": True,
                              "compile_fallback": None})  # fmt: skip
    first.write_text(json.dumps(results))
    out = report(root, "--kind", "runs", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == len(RUNS)
    keys = [(r["method"], r["noise"], r["seed"]) for r in rows]
    assert keys == sorted(keys)
    row = next(r for r in rows if r["method"] == "Forward" and r["noise"] == "Pair-45%"
               and r["seed"] == "1")  # fmt: skip
    assert row["selected epoch"] == "7" and row["T̂ from epoch"] == "18"
    assert row["selected"] == "91.00" and row["last epoch"] == "82.00"
    assert row["ε_T"] == "0.531" and row["T̂ mean diagonal"] == "0.600"
    assert row["health"] == "collapsed: at chance"  # listed, not left out
    assert row["executed"] == "cuda bf16-mixed compiled (CUDA graphs)"
    other = next(r for r in rows if r["method"] == "VolMinNet")
    assert other["ε_T"] == other["T̂ from epoch"] == other["executed"] == "—"
    markdown = report(root, "--kind", "runs")
    assert markdown.count("\n| Forward |") == 5 and "every run" in markdown


@pytest.mark.parametrize("apart", [None, 0, 1, 2])
def test_a_seed_pairs_only_runs_trained_on_the_same_noisy_labels(tmp_path: Path, apart) -> None:
    """The paired difference pairs seed s of X-VRNL with seed s of X only where both runs
    trained on the same noisy labels (their recorded ``noisy_labels_sha256``); a seed whose runs
    did not (another noise seed, another label file) is left out of the pair and named."""
    write_runs(tmp_path, RUNS[:6])
    for file in tmp_path.rglob("results.json"):
        results = json.loads(file.read_text())
        vrnl = results["method"].endswith("-VRNL")
        other = vrnl and results["seed"] == apart
        results["provenance"] = {"noisy_labels_sha256": f"labels-of-seed-{results['seed']}"
                                 + ("-other" if other else "")}  # fmt: skip
        file.write_text(json.dumps(results))
    text = report(tmp_path, "--paired", "--format", "csv")
    row = next(r for r in csv.DictReader(io.StringIO(text)) if r["kind"] == "paired")
    assert row["n"] == ("3" if apart is None else "2")
    if apart is None:
        assert float(row["mean"]) == pytest.approx(1.0)
        assert "no pair" not in report(tmp_path, "--paired")
    else:
        kept = [s for s in (0, 1, 2) if s != apart]
        by_seed = {0: 0.5, 1: 1.0, 2: 1.5}
        assert float(row["mean"]) == pytest.approx(sum(by_seed[s] for s in kept) / 2)
        markdown = report(tmp_path, "--paired")
        assert f"seed(s) {apart}, whose two runs trained on different noisy labels" in markdown


# an option a seed's X-VRNL run sets otherwise than its X run, and whether the two still pair
PAIR_OPTIONS = [
    (("model", "init_args", "optim", "lr"), 0.02, False),  # another experiment
    (("model", "init_args", "co_lambda"), 0.95, False),
    (("trainer", "max_epochs"), 40, False),
    (("model", "init_args", "variance_scope"), "local", True),  # only VRNL uses it
    (("data", "init_args", "data_dir"), "/elsewhere", True),  # where the data is read
    (("seed_everything",), 7, True),  # the seed is the pair's own key
]


@pytest.mark.parametrize(("where", "value", "pairs"), PAIR_OPTIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("seed", [0, 2])
def test_a_seed_pairs_only_runs_that_differ_in_nothing_but_vrnl(
    tmp_path: Path, where: tuple, value, pairs: bool, seed: int
) -> None:
    """Seed s of X-VRNL pairs with seed s of X only where their configs differ in what only
    VRNL uses (α, its variance's scope) and where the runs were written or read: a seed whose
    runs differ in a hyperparameter is left out of the pair, naming the option and both values."""
    write_runs(tmp_path, RUNS[:6])
    for file in tmp_path.rglob("results.json"):
        results = json.loads(file.read_text())
        config = {
            "seed_everything": results["seed"],
            "trainer": {"max_epochs": 20},
            "model": {"init_args": {"alpha": results["alpha"], "optim": {"lr": 0.01},
                                    "co_lambda": 0.9, "variance_scope": "global"}},
            "data": {"init_args": {"data_dir": "data"}},
        }  # fmt: skip
        if results["method"].endswith("-VRNL") and results["seed"] == seed:
            node = config
            for key in where[:-1]:
                node = node[key]
            node[where[-1]] = value
        (file.parent / "config.yaml").write_text(yaml.safe_dump(config))
    text = report(tmp_path, "--paired", "--format", "csv")
    row = next(r for r in csv.DictReader(io.StringIO(text)) if r["kind"] == "paired")
    by_seed = {0: 0.5, 1: 1.0, 2: 1.5}
    kept = [s for s in by_seed if pairs or s != seed]
    assert row["n"] == str(len(kept))
    assert float(row["mean"]) == pytest.approx(sum(by_seed[s] for s in kept) / len(kept))
    markdown = report(tmp_path, "--paired")
    option = ".".join(where)
    if pairs:
        assert "no pair" not in markdown
    else:
        assert f"seed(s) {seed}, whose two runs differ in more than VRNL's options" in markdown
        assert f"{option} = {value} / " in markdown


@pytest.mark.parametrize("other", [None, 0, 2])
def test_runs_in_other_precisions_are_named_in_the_cell_and_the_pair(tmp_path: Path, other) -> None:
    """A cell whose seeds ran in different precisions (``execution.precision``: ``auto`` gives
    bf16 on a GPU, float32 on a CPU) says so under the table, and so does a pair whose seed ran
    in one precision for X and another for X-VRNL; runs that record no precision, or the same
    one, add no such note."""
    write_runs(tmp_path, RUNS[:6])
    for file in tmp_path.rglob("results.json"):
        results = json.loads(file.read_text())
        vrnl = results["method"].endswith("-VRNL")
        gpu = vrnl and results["seed"] == other
        results["execution"] = {"precision": "bf16-mixed" if gpu else "32-true"}
        file.write_text(json.dumps(results))
    markdown = report(tmp_path, "--paired")
    cell_note = "its seeds ran in different precisions (32-true, bf16-mixed)"
    pair_note = f"seed {other}'s two runs ran in different precisions (32-true, bf16-mixed)"
    if other is None:
        assert "different precisions" not in markdown
    else:
        assert f"_Forward-VRNL in MNIST Sym-20%: {cell_note}" in markdown
        assert f"_in Forward-VRNL − Forward in MNIST Sym-20%: {pair_note}" in markdown
        assert markdown.count("different precisions") == 2


def test_the_executed_column_names_device_precision_compiling_and_a_fall_back() -> None:
    from noisylabels.report.render import executed

    cpu = {"device": "cpu", "precision": "32-true", "compile_mode": None}
    assert executed({"execution": cpu}) == "cpu 32-true"
    gave_up = {"device": "cuda", "precision": "bf16-mixed", "compile_mode": None,
               "compile_fallback": "a capture error"}  # fmt: skip
    assert executed({"execution": gave_up}) == "cuda bf16-mixed fell back to eager"
    assert executed({}) == "—"
    # a resumed run: each part where it differs from the part before, in order
    gpu = {"device": "cuda", "precision": "32-true", "compile_mode": "reduce-overhead",
           "cuda_graphs": True}  # fmt: skip
    parts = [{"part": {"execution": gpu}}, {"part": {"execution": gpu}}, {"part": None}]
    assert executed({"execution": cpu, "resumed": parts}) == (
        "cuda 32-true compiled (CUDA graphs) then cpu 32-true"
    )
    assert executed({"execution": cpu, "resumed": [{"part": {"execution": cpu}}]}) == "cpu 32-true"


def test_the_commit_column_names_the_commit_of_each_part() -> None:
    from noisylabels.report.render import commits

    a, b = "a" * 40, "b" * 40
    assert commits({"provenance": {"git_commit": a, "git_dirty": False}}) == "aaaaaaa"
    run = {
        "provenance": {"git_commit": b, "git_dirty": True},
        "resumed": [{"part": {"code": {"git_commit": a}}}, {"part": {"code": {"git_commit": a}}}],
    }
    assert commits(run) == "aaaaaaa then bbbbbbb+changes"
    assert commits({"provenance": {"git_commit": None}}) == commits({}) == "—"


@pytest.mark.parametrize("resumed_without_total", [False, True])
def test_runs_kind_adds_up_the_hours_and_says_when_they_are_a_lower_bound(
    tmp_path: Path, resumed_without_total: bool
) -> None:
    """``--kind runs``' hours: ``wall_time_total_s`` where recorded, else ``wall_time_s``,
    which for a resumed run is its last part only: marked ``≥`` there, and the total under the
    table is then "at least"."""
    root = write_runs(tmp_path)
    files = sorted(root.rglob("results.json"))
    for i, path in enumerate(files):
        results = json.loads(path.read_text())
        results.update(wall_time_s=1800.0, wall_time_total_s=3600.0 * (i + 1), resumed=[{}])
        if i == 0 and resumed_without_total:
            del results["wall_time_total_s"]  # a run from before the parts were recorded
        path.write_text(json.dumps(results))
    rows = list(csv.DictReader(io.StringIO(report(root, "--kind", "runs", "--format", "csv"))))
    hours = sorted(r["hours"] for r in rows)
    expected = [f"{h:.2f}" for h in range(1, len(files) + 1)]
    if resumed_without_total:
        expected = [*expected[1:], "≥ 0.50"]
    assert hours == sorted(expected)
    total = sum(range(2, len(files) + 1)) + (0.5 if resumed_without_total else 1)
    bound = "at least " if resumed_without_total else ""
    assert f"; {bound}{total:.2f} hours in all_" in report(root, "--kind", "runs")
