"""Where a result came from: versions, the project commit, hashes of the config and the labels.

``results.json`` gets a ``provenance`` block from :func:`provenance`, so two results can be told
apart (or matched) without their run folders: the versions of noisylabels, torch, lightning and
Python, the git commit of the project checkout the package was imported from (``null`` when it
is not a git checkout, e.g. an installed wheel; ``git_dirty`` when it has uncommitted changes),
a SHA-256 of the resolved configuration and a SHA-256 of the noisy training labels.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch

import noisylabels

# options that say where things are or how a run started, not what the experiment is
CONFIG_KEYS_IGNORED = ("config", "ckpt_path")
TRAINER_KEYS_IGNORED = ("default_root_dir",)


def labels_sha256(datamodule: Any) -> str | None:
    """SHA-256 of the noisy training labels (int64, in sample order) of a set-up data module,
    or ``None`` when it has none."""
    labels = getattr(datamodule, "noisy_labels", None)
    if not isinstance(labels, torch.Tensor):
        return None
    data = labels.detach().to("cpu", torch.int64).contiguous().numpy().tobytes()
    return hashlib.sha256(data).hexdigest()


def config_sha256(config: Mapping[str, Any]) -> str:
    """SHA-256 of a resolved configuration (JSON with sorted keys; the keys in
    :data:`CONFIG_KEYS_IGNORED` and the trainer's :data:`TRAINER_KEYS_IGNORED` left out, so a
    resumed run hashes like the run it continues, wherever it was written)."""
    kept = {k: v for k, v in config.items() if k not in CONFIG_KEYS_IGNORED}
    if isinstance(kept.get("trainer"), Mapping):
        kept["trainer"] = {
            k: v for k, v in kept["trainer"].items() if k not in TRAINER_KEYS_IGNORED
        }
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(root: Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the project checkout at ``root`` (default: the folder holding the
    imported ``noisylabels`` package); ``(None, None)`` when it is not the top of a git checkout
    or git is not installed."""
    root = Path(noisylabels.__file__).resolve().parents[1] if root is None else root
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return None, None
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit, (None if status is None else bool(status))


def provenance(
    model: Any, datamodule: Any, config: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``provenance`` block of ``results.json``. ``config``: the resolved command-line
    configuration; without it (a run from Python) the hash is of the model's and data
    module's hyperparameters."""
    if config is None:
        config = {
            "model": dict(getattr(model, "hparams", {})),
            "data": dict(getattr(datamodule, "hparams", {})),
        }
    commit, dirty = git_state()
    return {
        "noisylabels": noisylabels.__version__,
        "torch": torch.__version__,
        "lightning": L.__version__,
        "python": platform.python_version(),
        "git_commit": commit,
        "git_dirty": dirty,
        "config_sha256": config_sha256(config),
        "noisy_labels_sha256": labels_sha256(datamodule),
    }
