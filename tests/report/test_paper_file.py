"""``report --paper-file``: a published table's figures beside ours with the rule they were
reported under, a note under each table saying whether that rule is the table's metric, and a
paper file checked where read (one paragraph and exit 2 naming the line of what is wrong)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from test_report import report, write_runs

from noisylabels.report.cells import PAPER_COLUMNS, Published, load_paper
from noisylabels.report.cli import UNUSED_BY_KIND
from noisylabels.report.collect import METRICS, PAPER_FILE

HEADER = "table,dataset,noise,method,mean,std,rule\n"


def with_best_test(root: Path) -> Path:
    """The runs of :data:`RUNS`, each with the highest test accuracy over its epochs recorded
    (0.5 points above its selected checkpoint)."""
    write_runs(root)
    for path in root.rglob("results.json"):
        results = json.loads(path.read_text())
        results["test_acc_max"] = results["test_acc"] + 0.005
        path.write_text(json.dumps(results))
    return root


def paper_file(tmp_path: Path, rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "cifar_n_paper.csv"
    path.write_text("# a published table, its best test accuracy over the epochs\n" + header + rows)
    return path


def test_the_shipped_file_states_its_rule_on_every_row() -> None:
    paper = load_paper()
    assert len(paper) == 210
    assert {value.rule for value in paper.values()} == {"best"}
    assert paper[("MNIST", "Sym-20%", "forwardvrnl")] == Published(98.89, 0.04, "best")
    assert paper[("Clothing1M", "real", "volminnet")].std is None


def test_a_papers_rule_beside_its_figures_and_whether_it_is_the_tables(tmp_path: Path) -> None:
    runs = with_best_test(tmp_path / "runs")
    path = paper_file(
        tmp_path,
        "t,MNIST,Sym-20%,Forward,97.90,0.20,best-test\nt,MNIST,Sym-20%,Forward-VRNL,99.10,,best-test\n",
    )
    selected = report(runs, "--paper-file", path, "--paired").splitlines()
    assert "| Forward | 97.50 ± 0.50 (3) | 97.90 ± 0.20 | **90.50 ± 0.71 (2)** | — |" in selected
    assert "| Forward-VRNL | **98.50 ± 1.00 (3)** | 99.10 | — | — |" in selected
    assert any(
        line.startswith("| Forward-VRNL − Forward |") and "| +1.20 |" in line for line in selected
    )
    note = (
        "_paper: the published figures report the highest test accuracy over the epochs (chosen "
        "by the test set: optimistic); this table's are the selected checkpoint: another rule, "
        "so the columns do not compare like for like_"
    )
    assert note in selected
    assert f"(paper: {path})" in selected
    # under the paper's own rule the note says the rules agree
    best_test = report(runs, "--paper-file", path, "--metric", "best-test").splitlines()
    assert "| Forward | 98.00 ± 0.50 (3) | 97.90 ± 0.20 | **91.00 ± 0.71 (2)** | — |" in best_test
    assert any(line.endswith("the rule of this table_") for line in best_test)
    # the CSV carries the rule of each published figure
    rows = list(csv.DictReader(io.StringIO(report(runs, "--paper-file", path, "--format", "csv"))))
    forward = next(r for r in rows if r["method"] == "Forward" and r["noise"] == "Sym-20%")
    assert (forward["paper_mean"], forward["paper_std"], forward["paper_rule"]) == (
        "97.9",
        "0.2",
        "best-test",
    )
    pair = next(r for r in rows if r["noise"] == "Pair-45%")
    assert pair["paper_rule"] == ""


def test_rules_mixed_or_unstated_are_counted_in_the_note(tmp_path: Path) -> None:
    runs = write_runs(tmp_path / "runs")
    path = paper_file(
        tmp_path,
        "t,MNIST,Sym-20%,Forward,97.90,0.20,last\nt,MNIST,Sym-20%,Forward-VRNL,99.10,,\n",
    )
    out = report(runs, "--paper-file", path, "--metric", "last")
    assert (
        "_paper: the published figures report the last epoch (1 of 2) and a rule its paper does "
        "not state (1 of 2); where the rule is not stated, the columns may not compare_"
    ) in out.splitlines()


def test_the_shipped_papers_note_under_the_last_epoch_table(tmp_path: Path) -> None:
    out = report(write_runs(tmp_path), "--paper", "--metric", "best,last").splitlines()
    assert (
        "_paper: the published figures report the selected checkpoint, as this table's "
        "selected checkpoint_"
    ) in out
    assert "(paper: paper_results.csv, the VRNL paper's Tables 1 and 2)" in out


BAD_FILES = {
    "no rows": (HEADER, "has a header and no rows"),
    "empty": ("", "has no header and no rows"),
    "unknown column": (
        "dataset,noise,method,mean,stdev\nMNIST,Sym-20%,CE,97.0,0.1\n",
        "unknown column(s) 'stdev'",
    ),
    "missing column": ("dataset,noise,method\nMNIST,Sym-20%,CE\n", "missing column(s) mean"),
    "a column twice": (
        "dataset,noise,method,mean,mean\nMNIST,Sym-20%,CE,97.0,97.0\n",
        "a column named twice",
    ),
    "fraction written as %": (HEADER + "t,MNIST,Sym-20%,CE,970,,best\n", "mean '970'"),
    "mean not a number": (HEADER + "t,MNIST,Sym-20%,CE,n/a,,best\n", "mean 'n/a'"),
    "NaN": (HEADER + "t,MNIST,Sym-20%,CE,nan,,best\n", "mean 'nan'"),
    "negative std": (HEADER + "t,MNIST,Sym-20%,CE,97.0,-1,best\n", "std '-1'"),
    "unknown rule": (HEADER + "t,MNIST,Sym-20%,CE,97.0,,selected\n", "rule 'selected'"),
    "short row": (HEADER + "t,MNIST,Sym-20%,CE,97.0\n", "5 value(s) for 7 columns"),
    "no method": (HEADER + "t,MNIST,Sym-20%,,97.0,,best\n", "must each be given"),
    "a cell twice": (
        HEADER + "t,MNIST,Sym-20%,CE,97.0,,best\nt,MNIST,Sym-20%,ce,96.0,,best\n",
        "line 3: MNIST Sym-20% ce is given again (first on line 2)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_paper_file_is_refused_naming_what_and_where(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text, expected = BAD_FILES[case]
    path = tmp_path / "paper.csv"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        report(write_runs(tmp_path / "runs"), "--paper-file", path)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--paper-file {path}" in err and expected in err
    assert ", ".join(PAPER_COLUMNS) in err and ", ".join(METRICS) in err


@pytest.mark.parametrize("kind", ["missing", "folder", "binary"])
def test_an_unreadable_paper_file_is_refused(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "paper.csv"
    if kind == "folder":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00dataset")
    with pytest.raises(SystemExit) as exc:
        report(write_runs(tmp_path / "runs"), "--paper-file", path)
    assert exc.value.code == 2
    assert f"--paper-file {path}: " in capsys.readouterr().err


def test_the_shipped_file_reads_through_the_same_door() -> None:
    """One reader for paper files: the shipped one passes every check a user's file meets."""
    assert load_paper(PAPER_FILE) == load_paper()


NON_DEFAULT = {
    "rows": ["--rows", "alpha"],
    "cols": ["--cols", "noise"],
    "paired": ["--paired"],
    "paper": ["--paper"],
    "paper_file": ["--paper-file", str(PAPER_FILE)],
    "format": ["--format", "csv"],
    "metric": ["--metric", "last"],
    "include_unhealthy": ["--include-unhealthy"],
    "include_short": ["--include-short"],
}


@pytest.mark.parametrize(
    ("kind", "dest"),
    [(kind, dest) for kind, dests in sorted(UNUSED_BY_KIND.items()) for dest in dests],
)
def test_an_option_a_kind_leaves_unused_is_refused(
    kind: str, dest: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Every option a ``--kind`` does not read, given, is refused naming it (never ignored)."""
    extra = ["--out", str(tmp_path / "fig.png")] if kind == "bias" else []
    with pytest.raises(SystemExit) as exc:
        report(write_runs(tmp_path / "runs"), "--kind", kind, *extra, *NON_DEFAULT[dest])
    assert exc.value.code == 2
    option = "--" + dest.replace("_", "-")
    assert f"{option} would have no effect with --kind {kind}" in capsys.readouterr().err


def test_the_options_each_kind_leaves_unused_are_options_of_the_parser() -> None:
    """Each option a kind is said not to read is one of the parser's, and each is tried above
    (a renamed option cannot leave the lists stale)."""
    from noisylabels.report.cli import build_parser

    dests = {action.dest for action in build_parser()._actions}
    assert set(NON_DEFAULT) <= dests
    assert {d for dests in UNUSED_BY_KIND.values() for d in dests} == set(NON_DEFAULT)


def test_a_plus_in_a_method_name_is_its_own_method(tmp_path: Path) -> None:
    """``Co-teaching+`` is CoTeachingPlus's figure, not Co-teaching's; both rows may be given."""
    from test_report import SYM

    runs = [("CoTeaching", 0.0, SYM, 0, 0.91, 0.90), ("CoTeachingPlus", 0.0, SYM, 0, 0.93, 0.92)]
    path = paper_file(
        tmp_path,
        "t,MNIST,Sym-20%,Co-teaching,90.50,,best\nt,MNIST,Sym-20%,Co-teaching+,93.35,,best\n",
    )
    lines = report(write_runs(tmp_path / "runs", runs), "--paper-file", path).splitlines()
    assert "| CoTeaching | 91.00 (1) | 90.50 |" in lines
    assert "| CoTeachingPlus | **93.00 (1)** | 93.35 |" in lines


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("t,MNIST,Sym-20%,---,97.0,,best\n", "method '---' has no letter or digit"),
        ("t,MNIST,Sym-20%,CE,9_7,,best\n", "mean '9_7'"),
    ],
)
def test_names_and_numbers_that_match_nothing_are_refused(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exc:
        report(write_runs(tmp_path / "runs"), "--paper-file", paper_file(tmp_path, text))
    assert exc.value.code == 2 and expected in capsys.readouterr().err


def test_a_spreadsheets_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes(("\ufeff" + HEADER + "t,MNIST,Sym-20%,Forward,97.90,0.20,best\n").encode())
    assert "| Forward | 97.50 ± 0.50 (3) | 97.90 ± 0.20 |" in report(
        write_runs(tmp_path / "runs"), "--paper-file", path, "--cols", "dataset,noise"
    ).replace(" **90.50 ± 0.71 (2)** | — |", "")


@pytest.mark.parametrize("cols", ["noise", "dataset"])
def test_paper_figures_need_dataset_noise_and_method_in_the_table(
    cols: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A table whose cells lack a field a published figure is found by is refused with
    ``--paper``, not printed with every paper cell empty."""
    with pytest.raises(SystemExit) as exc:
        report(write_runs(tmp_path / "runs"), "--paper", "--cols", cols)
    assert exc.value.code == 2
    missing = "dataset" if cols == "noise" else "noise"
    assert f"put {missing} among --rows or --cols" in capsys.readouterr().err


def test_latex_output_keeps_every_line_outside_the_tables_a_comment(tmp_path: Path) -> None:
    """The paper's source line and the notes are LaTeX comments: the file compiles."""
    out = report(write_runs(tmp_path / "runs"), "--paper", "--format", "latex", "--paired")
    outside = [line for line in out.splitlines() if line and not line.startswith("%")]
    tabular = [line for line in outside if not line.startswith("\\") and "&" not in line]
    assert not tabular, tabular
    assert "% (paper: paper_results.csv, the VRNL paper's Tables 1 and 2)" in out
