"""What the docs say of the shipped configs holds: a dataset's page names every preset of the
dataset, and the Forward presets estimate T as docs/methods.md says."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from noisylabels.compose import read_composed

from conftest import CONFIGS, DATASETS, METHODS, REPO, pair_configs

DOCS = REPO / "docs"
# datasets with a page of their own: docs/<dataset>.md
PAGES = sorted(p.stem for p in DOCS.glob("*.md") if any(CONFIGS.glob(f"{p.stem}_*.yaml")))


def model_option(files: list[Path], key: str) -> Any:
    """The ``model.init_args`` value ``key`` that the config ``files`` resolve to (composed files
    first, later ones win)."""
    value = None
    for _, content, _ in (part for file in files for part in read_composed(file)):
        model = content.get("model") if isinstance(content, Mapping) else None
        init_args = model.get("init_args") if isinstance(model, Mapping) else None
        if isinstance(init_args, Mapping) and key in init_args:
            value = init_args[key]
    return value


def test_a_dataset_has_a_page_of_its_own() -> None:
    assert "clothing1m" in PAGES


@pytest.mark.parametrize("dataset", PAGES)
def test_a_datasets_page_names_every_preset_of_the_dataset(dataset: str) -> None:
    page = (DOCS / f"{dataset}.md").read_text(encoding="utf-8")
    presets = sorted(p.name for p in CONFIGS.glob(f"{dataset}_*.yaml"))
    missing = [name for name in presets if f"`{name}`" not in page]
    assert not missing, f"docs/{dataset}.md does not name {missing}"


def test_the_forward_presets_estimate_t_as_the_docs_say() -> None:
    methods = [m for m in METHODS if m.startswith("forward")]
    assert len(methods) == 4  # forward, its VRNL and Dual-T variants
    forward = [f"{dataset}_{method}" for dataset in DATASETS for method in methods]
    for pair in forward:
        assert model_option(pair_configs(pair), "transition") == "estimate", pair
    with_true_t = [*read_composed(CONFIGS / "protocol" / "true_t.yaml")]
    assert with_true_t[-1][1]["model"]["init_args"]["transition"] is True
    methods = " ".join((DOCS / "methods.md").read_text(encoding="utf-8").split())
    assert "The Forward presets, like the Reweight ones, estimate T" in methods
    assert "Forward presets run 80 epochs with the true T" not in methods
