"""The docs point at files that exist: every config path README.md and docs/ name (placeholders
such as ``<dataset>`` and the examples of a new method aside); docs/methods.md's tables of the
methods' option groups are those the groups' docstrings give (``python tests/e2e/test_docs.py``
writes them)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import docstring_parser

from noisylabels.methods.core.groups import OPTION_GROUPS as GROUPS

REPO = Path(__file__).resolve().parents[2]
METHODS_DOC = REPO / "docs" / "methods.md"
BLOCK = re.compile(
    r"(<!-- options: (\w+), generated [^\n]*-->\n)(.*?)(<!-- end of options -->)", re.S
)

EXAMPLES = {"configs/X.yaml", "configs/method/bootstrap.yaml"}  # placeholders in the prose


def test_every_config_path_in_the_docs_exists() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "docker/README.md"]
    named = {
        path
        for doc in docs
        for path in re.findall(r"configs/[A-Za-z0-9_./-]+\.yaml", doc.read_text())
    }
    assert len(named) > 20
    missing = sorted(p for p in named - EXAMPLES if not (REPO / p).is_file())
    assert not missing, f"docs name configs that do not exist: {missing}"


def _default(value: object) -> str:
    """A field's default as a config gives it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return format(value, "g").replace("e-0", "e-")


def option_table(cls: type) -> str:
    """The Markdown table of an option group: each field, its default and its description from
    the dataclass's docstring (``Attributes:``), in the order of the fields."""
    described = {
        p.arg_name: " ".join((p.description or "").split())
        for p in docstring_parser.parse(cls.__doc__ or "").params
    }
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for field in dataclasses.fields(cls):
        assert described.get(field.name), f"{cls.__name__}.{field.name} has no description"
        meaning = described[field.name].replace("``", "`").replace("|", "\\|")
        rows.append(f"| `{field.name}` | {_default(field.default)} | {meaning} |")
    return "\n".join(rows)


def generated(text: str) -> str:
    """``text`` with every option-group block replaced by its :func:`option_table`."""
    return BLOCK.sub(lambda m: m[1] + option_table(GROUPS[m[2]]) + "\n" + m[4], text)


def test_the_option_group_tables_are_the_groups_docstrings() -> None:
    text = METHODS_DOC.read_text()
    assert sorted(m[2] for m in BLOCK.finditer(text)) == sorted(GROUPS)
    assert text == generated(text), "run python tests/e2e/test_docs.py to rewrite the tables"


if __name__ == "__main__":
    METHODS_DOC.write_text(generated(METHODS_DOC.read_text()))
