"""``noisylabels audit --classes``: the audit of some classes is written under its own names
(``label_issues_<classes>.csv``/``.png``) and leaves the ranking of every class as it was."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from noisylabels.audit.choices import CSV_FILE, GRID_FILE, issue_files

from conftest import copy_run


@pytest.fixture(scope="module")
def run_folder(finished_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-epoch quickstart run (the digits, 40 % symmetric noise): a copy of the session's
    finished run, which the audits here write into."""
    return copy_run(finished_run, tmp_path_factory.mktemp("classes_run") / "run")


def _given(path: Path) -> set[str]:
    with open(path, newline="") as fh:
        return {row["given_label"] for row in csv.DictReader(fh)}


def test_an_audit_of_some_classes_keeps_the_full_ranking(run_folder: Path, capsys) -> None:
    from noisylabels.cli import main

    main(["audit", str(run_folder), "--top", "4"])
    full = (run_folder / CSV_FILE).read_bytes()
    assert len(_given(run_folder / CSV_FILE)) == 10
    capsys.readouterr()
    main(["audit", str(run_folder), "--classes", "8,3", "--top", "4"])
    out = capsys.readouterr().out
    some = run_folder / "label_issues_3+8.csv"
    assert _given(some) == {"3", "8"}
    assert (run_folder / CSV_FILE).read_bytes() == full  # left as the full audit wrote it
    assert (run_folder / "label_issues_3+8.png").is_file() and (run_folder / GRID_FILE).is_file()
    assert f"wrote {some}" in out and f"wrote {run_folder / 'label_issues_3+8.png'}" in out


def test_the_file_names_of_an_audit_of_some_classes() -> None:
    assert issue_files(None) == (CSV_FILE, GRID_FILE)
    assert issue_files([]) == (CSV_FILE, GRID_FILE)
    assert issue_files(["cat", "emu"]) == ("label_issues_cat+emu.csv", "label_issues_cat+emu.png")
    assert issue_files(["t shirt", "a/b"])[0] == "label_issues_t_shirt+a_b.csv"
    many = issue_files([f"class number {i}" for i in range(40)])[0]
    assert many.startswith("label_issues_40classes-") and len(many) < 60
