"""``noisylabels plot`` titles a run as ``results.json`` and ``noisylabels report`` name its
method (``Forward-VRNL``), with α where it is not 0, so that a figure and a table agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from noisylabels.report.plot import default_label


def run_folder(root: Path, alpha: Any, method: str | None) -> Path:
    """A run folder's ``config.yaml`` (Forward with ``alpha``) and, where ``method`` is given,
    its ``results.json``."""
    folder = root / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    model = {"class_path": "noisylabels.methods.Forward", "init_args": {"alpha": alpha}}
    (folder / "config.yaml").write_text(yaml.safe_dump({"model": model}))
    if method is not None:
        (folder / "results.json").write_text(json.dumps({"method": method, "test_acc": 0.9}))
    return folder


@pytest.mark.parametrize(
    ("alpha", "method", "title"),
    [
        (0.1, "Forward-VRNL", "Forward-VRNL (α = 0.1)"),
        (-0.1, "Forward-VRNL", "Forward-VRNL (α = \u22120.1)"),
        (0.0, "Forward", "Forward"),
        (0.1, "Forward-DualT-VRNL", "Forward-DualT-VRNL (α = 0.1)"),  # results.json's name
        (0.01, None, "Forward-VRNL (α = 0.01)"),  # not finished yet: from its config
        (0, None, "Forward"),
    ],
)
def test_a_run_is_titled_by_its_method_as_report_names_it(
    tmp_path: Path, alpha: Any, method: str | None, title: str
) -> None:
    assert default_label(run_folder(tmp_path / "run", alpha, method)) == title


def test_a_folder_without_a_config_is_titled_by_its_name(tmp_path: Path) -> None:
    folder = tmp_path / "my_run" / "version_3"
    folder.mkdir(parents=True)
    assert default_label(folder) == "my_run"
    assert default_label(tmp_path / "my_run") == "my_run"
