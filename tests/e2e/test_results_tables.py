"""Every table of docs/results.md that a ``noisylabels report`` command of its section prints is
that command's output: the section's report commands run on the committed records of
``results/``, and each row of a doc table is a row of the printed table of the same title
(a doc table may keep some of the rows the command prints, never change one). A table no
command of its section prints must say where it comes from in its caption (:data:`MADE_BY`).
Every figure of a section's reading (its prose) must be held by a table of the section, the
output of one of its report commands or a record it names; the figures a reading derives
are listed (:data:`UNCHECKED`), and a figure that leaves the reading leaves the list."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from conftest import REPO

DOC = REPO / "docs" / "results.md"
FENCE = re.compile(r"^```bash[^\n]*\n(.*?)^```\n", re.S | re.M)
TITLE = re.compile(r"^\*\*(.+)\*\*$")
SEPARATOR = re.compile(r"^\|\s*:?-{3,}")
"""A Markdown table's header separator row, ``|---|`` or ``| --- |``."""
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
        if lines[i].startswith("|") and i + 1 < len(lines) and SEPARATOR.match(lines[i + 1]):
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


# ---------------------------------------------------------------------------- the readings' figures
FIGURE = re.compile(r"(?<![\w.])[+−-]?\d+\.\d{2,}(?!\w)")
"""A figure of a reading: a number with two or more decimals (accuracies, differences, ε_T)."""
RECORD_PATH = re.compile(r"results/[\w.-]+(?:/[\w.-]+)*")

UNCHECKED: dict[str, tuple[str, ...]] = {
    # the replaced records' figures, in the tree of 8db172b (the reading says so)
    "Table 1, MNIST, Sym-20 %: Forward and VolMinNet, each with and without VRNL": (
        "98.79",
        "97.03",
        "0.03",
    ),
    "Table 1, MNIST, Sym-50 %: every row under its own protocol": (
        "0.527",
        "0.060",
        "0.068",
    ),
    "Table 1, MNIST, all six columns: the seven VRNL-family rows": (
        "0.97",
        "7.73",
        "87.58",
        "2.48",
        "4.10",
        "9.32",
        "39.76",
        "+2.54",
        "+3.47",
        "+2.49",
        "+4.17",
        "+1.86",
        "+3.17",
        "+4.18",
        "+6.62",
        "+1.32",
        "−10.23",
    ),
    "Pair-45 %: where Forward's estimated T̂ points the flips": (
        "96.45",
        "4.03",
        "59.18",
        "0.40",
        "0.43",
        "0.44",
        "0.531219447995646",
        "0.17457227722801227",
        "0.78",
        "0.85",
        "0.009",
    ),
    "The baselines of the paper's tables: a short run on MNIST, Sym-50 %": (
        "0.01",
        "0.29",
        "0.54",
        "90.57",
    ),
    "VRNL on later methods: MNIST Sym-50 %": (
        "0.71",
        "0.21",
        "8.13",
        "12.34",
        "0.31",
        "−3.80",
        "−3.18",
        "−7.33",
        "−12.93",
        "−22.91",
        "−22.93",
        "−12.87",
        "−22.83",
        "0.479",
        "0.0985",
        "0.1013",
        "1.86",
        "0.819",
        "0.131",
        "0.29",
        "0.91",
        "0.118",
        "14.2343",
        "0.30",
        "+9.10",
        "+7.39",
    ),
    "Co-teaching+ on MNIST Sym-50 % under its paper's protocol": (
        "96.77",
        "0.03",
        "96.41",
        "−0.11",
        "−0.62",
        "+0.40",
        "−0.16",
        "+1.62",
        "+0.27",
        "−0.26",
        "0.27",
        "0.76",
        "0.444",
        "0.18",
        "0.36",
        "0.483",
        "0.488",
        "0.29",
    ),
}
"""The figures of each section's reading (by its heading) that no record or table of the section
holds as printed: differences of two cells, values read from a run's TensorBoard scalars or epoch
log, a mean of a subset of seeds. Each is to be given a record or a table row it is read from,
and then leaves this list; a figure added to a reading without one fails the test."""


def reading(text: str) -> str:
    """A section's prose: its text without fenced blocks and table rows."""
    text = FENCE.sub("", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("|"))


def bare(figure: str) -> str:
    return figure.lstrip("+−-")


def record_figures(text: str, root: Path = REPO) -> set[str]:
    """Every float of the ``results.json`` files under the ``results/`` paths a section names,
    as printed at 2 to 4 decimals, as it is and in per cent."""
    out: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, float):
            out.update(f"{abs(v):.{k}f}" for v in (value, 100 * value) for k in (2, 3, 4))

    for named in set(RECORD_PATH.findall(text)):
        path = root / named.rstrip(".")
        files = [path] if path.is_file() else sorted(path.rglob("results.json"))
        for file in files:
            if file.suffix == ".json":
                walk(json.loads(file.read_text(encoding="utf-8")))
    return out


def supported(commands: list[list[str]], text: str, root: Path = REPO) -> set[str]:
    """The figures a section's tables, its report commands' output and its records hold."""
    tables_text = "\n".join(line for line in text.splitlines() if line.startswith("|"))
    shown = [tables_text, *(printed(tuple(args)) for args in commands)]
    return {bare(f) for t in shown for f in FIGURE.findall(t)} | record_figures(text, root)


def unsupported(commands: list[list[str]], text: str) -> list[str]:
    """The figures of a section's reading that nothing of :func:`supported` holds."""
    held = supported(commands, text)
    return [f for f in FIGURE.findall(reading(text)) if bare(f) not in held]


@pytest.mark.parametrize(
    ("commands", "text", "line"), SECTIONS, ids=[f"line{line}" for _, _, line in SECTIONS]
)
def test_every_figure_of_a_reading_is_held_by_a_record_or_table_of_its_section(
    commands: list[list[str]], text: str, line: int
) -> None:
    """Each figure of a section's prose is a cell of one of its tables, a figure one of its
    report commands prints, or a value of a ``results.json`` under a ``results/`` path it names;
    or one of the section's :data:`UNCHECKED` figures (each still in the reading)."""
    heading = text.splitlines()[0].removeprefix("## ")
    known = set(UNCHECKED.get(heading, ()))
    found = unsupported(commands, text)
    new = sorted(set(found) - known)
    assert not new, (
        f"docs/results.md:{line}: figures of the reading that no table, report output or record "
        f"of the section holds: {new}"
    )
    stale = sorted(known - set(FIGURE.findall(reading(text))))
    assert not stale, f"UNCHECKED lists figures this section's reading no longer has: {stale}"


def test_a_figure_no_record_holds_is_found(tmp_path) -> None:
    run = tmp_path / "results" / "x" / "seed-0"
    run.mkdir(parents=True)
    (run / "results.json").write_text('{"test_acc": 0.9876}')
    table = "| method | A |\n|---|---|\n| X | 97.10 |\n"
    text = "## s\n\nIn `results/x`: 98.76 and 97.10, but 95.55.\n\n" + table
    assert record_figures(text, tmp_path) >= {"98.76"}
    held = supported([], text, tmp_path)
    assert "97.10" in held and "98.76" in held and "95.55" not in held
    assert reading(text).count("97.10") == 1 and "| X |" not in reading(text)
