"""The package's layout rules (docs/extending.md, "The layout"): one file name per idea."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "noisylabels"
SHARED_NAMES = {"__init__.py", "cli.py"}  # a package's face, and each package's own command


def test_no_two_modules_share_a_name() -> None:
    names = Counter(p.name for p in PACKAGE.rglob("*.py"))
    twice = sorted(n for n, count in names.items() if count > 1 and n not in SHARED_NAMES)
    assert not twice, f"module names used more than once in noisylabels/: {twice}"
