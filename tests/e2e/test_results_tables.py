"""Every table of docs/results.md that a ``noisylabels report`` command of its section prints is
that command's output: the section's report commands run on the committed records of
``results/``, and each row of a doc table is a row of the printed table of the same title
(a doc table may keep some of the rows the command prints, never change one). A table no
command of its section prints must say where it comes from in its caption (:data:`MADE_BY`)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from functools import cache

import pytest

from conftest import REPO

DOC = REPO / "docs" / "results.md"
FENCE = re.compile(r"^```bash[^\n]*\n(.*?)^```\n", re.S | re.M)
TITLE = re.compile(r"^\*\*(.+)\*\*$")
MADE_BY = re.compile(r"`(results\.json|results/|transition_estimate\.csv|benchmarks/)")
"""What a table's caption (or the paragraph before it) names when no report command prints it:
the records or the script it is read from."""


def report_commands(block: str) -> list[list[str]]:
    """The ``noisylabels report`` commands of a fenced block, continuation lines joined,
    comments dropped, each ``[--opt a|b]`` expanded to the command without it and with each
    alternative."""
    text = block.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line.startswith("noisylabels report "):
            continue
        variants = [line]
        while any("[" in v for v in variants):
            expanded = []
            for v in variants:
                m = re.search(r"\[([^\]]+)\]", v)
                if m is None:
                    expanded.append(v)
                    continue
                option, _, values = m.group(1).partition(" ")
                choices = [f"{option} {x}" for x in values.split("|")] if values else [option]
                for choice in ["", *choices]:
                    expanded.append(v[: m.start()] + choice + v[m.end() :])
            variants = expanded
        commands += [shlex.split(v)[1:] for v in variants]
    return commands


@cache
def printed(args: tuple[str, ...]) -> str:
    """What ``noisylabels`` prints for ``args`` in the checkout (records of ``results/``)."""
    import os

    from noisylabels.cli import run

    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out):
            run(list(args))
    finally:
        os.chdir(cwd)
    return out.getvalue()


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row, bold marks dropped (a doc table that keeps some rows
    may bold another best than the printed one)."""
    return [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]


def keyed(header: list[str]) -> list[tuple[str, str]]:
    """Each column's key: its header, with the column it follows where headers repeat (``paper``
    beside each noise column); the first (row label) column left out."""
    keys, last = [], ""
    for name in header[1:]:
        if name.startswith("paper"):
            keys.append((last, name))
        else:
            last = name
            keys.append((name, ""))
    return keys


Row = tuple[str, dict[tuple[str, str], str]]


def tables(text: str) -> list[tuple[list[Row], int]]:
    """Every Markdown table of ``text`` as ``([(row label, {column key: cell})], line)``."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            keys = keyed(cells(lines[i]))
            j, rows = i + 2, []
            while j < len(lines) and lines[j].startswith("|"):
                row = cells(lines[j])
                rows.append((row[0], dict(zip(keys, row[1:], strict=False))))
                j += 1
            found.append((rows, i))
            i = j
        else:
            i += 1
    return found


def printed_in(rows: list[Row], printed_tables: list[list[Row]]) -> bool:
    """Whether one printed table holds every row of ``rows``: a row of the same label with the
    same cell in each of its columns."""
    return any(
        all(
            any(
                label == other and all(cols.get(k) == v for k, v in row.items())
                for other, cols in table
            )
            for label, row in rows
        )
        for table in printed_tables
    )


def sections() -> list[tuple[list[list[str]], str, int]]:
    """The doc's ``## `` sections that hold a table: ``(the report commands of all its fences,
    its text, the line it starts at)``."""
    doc = DOC.read_text(encoding="utf-8")
    starts = [0, *(m.start() + 1 for m in re.finditer(r"\n## ", doc))]
    out = []
    for start, end in zip(starts, [*starts[1:], len(doc)], strict=True):
        text = doc[start:end]
        commands = [c for m in FENCE.finditer(text) for c in report_commands(m.group(1))]
        if tables(text):
            out.append((commands, text, doc[:start].count("\n") + 1))
    return out


SECTIONS = sections()


def test_the_doc_has_report_commands_and_tables_under_them() -> None:
    assert len(SECTIONS) >= 5
    assert sum(len(tables(text)) for _, text, _ in SECTIONS) >= 20


@pytest.mark.parametrize(
    ("commands", "text", "line"), SECTIONS, ids=[f"line{line}" for _, _, line in SECTIONS]
)
def test_every_table_under_a_report_command_is_its_output(
    commands: list[list[str]], text: str, line: int
) -> None:
    """Each table of a section is (a part of: some rows, some columns) a table that one of
    the section's report commands prints, cell for cell; or its caption names the record it
    is read from (:data:`MADE_BY`)."""
    outputs = [rows for args in commands for rows, _ in tables(printed(tuple(args)))]
    problems = []
    lines = text.splitlines()
    for rows, at in tables(text):
        if printed_in(rows, outputs):
            continue
        # the caption: the paragraph just above the table, or the line just below it
        above = "\n".join(lines[:at]).rstrip().rsplit("\n\n", 1)[-1]
        around = above + "\n".join(lines[at + len(rows) + 2 : at + len(rows) + 4])
        if MADE_BY.search(around):
            continue
        wrong = [label for label, row in rows if not printed_in([(label, row)], outputs)]
        problems.append(
            f"docs/results.md:{line + at}: no report command of the section prints this table "
            f"(e.g. the row {(wrong or [rows[0][0]])[0]!r}), and its caption names no record"
        )
    assert not problems, "\n".join(problems)


def test_a_commands_alternatives_are_each_run() -> None:
    block = (
        "noisylabels sweep configs/sweeps/x.yaml -- --data.data_dir DATA\n"
        "noisylabels report results/x --paired \\\n    --paper [--metric last|tail]  # note\n"
    )
    assert report_commands(block) == [
        ["report", "results/x", "--paired", "--paper"],
        ["report", "results/x", "--paired", "--paper", "--metric", "last"],
        ["report", "results/x", "--paired", "--paper", "--metric", "tail"],
    ]


def test_a_changed_cell_or_a_row_no_command_prints_fails() -> None:
    printed_table = tables("| method | A | paper |\n|---|---|---|\n| X | 1.00 | 2.00 |\n")
    outputs = [rows for rows, _ in printed_table]
    kept = tables("| method | A |\n|---|---|\n| X | **1.00** |\n")[0][0]
    changed = tables("| method | A |\n|---|---|\n| X | 1.01 |\n")[0][0]
    other = tables("| method | A |\n|---|---|\n| Y | 1.00 |\n")[0][0]
    assert printed_in(kept, outputs)
    assert not printed_in(changed, outputs) and not printed_in(other, outputs)
