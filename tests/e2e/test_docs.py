"""The docs point at files that exist: every config path README.md and docs/ name (placeholders
such as ``<dataset>`` and the examples of a new method aside)."""

from __future__ import annotations

import re

from conftest import REPO

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
