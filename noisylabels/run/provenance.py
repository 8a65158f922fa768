"""Where a result came from: versions, the project commit, hashes of the config and the labels.

``results.json`` gets a ``provenance`` block from :func:`provenance`, so two results can be told
apart (or matched) without their run folders: the versions of noisylabels, torch, lightning and
Python, the git commit of the project checkout the package was imported from (``null`` when it
is not a git checkout, e.g. an installed wheel; ``git_dirty`` when it has uncommitted changes),
a SHA-256 of the resolved configuration and a SHA-256 of the noisy training labels; for a run
of the command line also the command (``command``) and :func:`command_sha256`, the hash a sweep
compares to tell a finished run of its grid point from one run with other options.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import stat
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import noisylabels
from noisylabels.compose import CONFIG_OPTIONS, config_files

# options that say where things are or how a run started, not what the experiment is
CONFIG_KEYS_IGNORED = ("config", "ckpt_path")
TRAINER_KEYS_IGNORED = ("default_root_dir",)
# command-line options (each with its value) that say where a run goes or how it shows
# progress, not what it is: a command hashes alike with or without them
COMMAND_OPTIONS_IGNORED = (
    "--trainer.default_root_dir",
    "--ckpt_path",
    "--trainer.enable_progress_bar",
)


def labels_sha256(datamodule: Any) -> str | None:
    """SHA-256 of the noisy training labels (int64, in sample order) of a set-up data module,
    or ``None`` when it has none."""
    import torch  # start-up time: a sweep hashes commands with this module, without torch

    labels = getattr(datamodule, "noisy_labels", None)
    if not isinstance(labels, torch.Tensor):
        return None
    data = labels.detach().to("cpu", torch.int64).contiguous().numpy().tobytes()
    return hashlib.sha256(data).hexdigest()


def input_files_sha256(paths: Iterable[str | Path]) -> dict[str, str]:
    """``{absolute path: SHA-256 of its content}`` of the input files among ``paths`` (a run's
    label file and T file): existing regular files only (``estimate``, a missing path or a
    folder is left out), each hashed in 1 MiB chunks. A path is made absolute without resolving
    its symbolic links, so a link pointed at another file hashes as that file."""
    hashes: dict[str, str] = {}
    for given in paths:
        path = os.path.abspath(os.path.expanduser(os.fspath(given)))
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                continue
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
        except OSError:  # gone, or not readable: nothing to record
            continue
        hashes[path] = digest.hexdigest()
    return hashes


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


def _config_digest(value: str) -> str:
    """A ``--config`` value as what it holds: ``sha256:...`` of the file and of every file it
    composes, in order (so a moved file hashes alike and an edited one does not); config text
    as it is."""
    files = config_files(value)
    if not files:
        return value
    digest = hashlib.sha256()
    for file in files:
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()}"


def command_identity(argv: Sequence[str]) -> list[str]:
    """The arguments of a ``noisylabels fit`` command (``["fit", "--config", "X.yaml", ...]``)
    that say what the experiment is: :data:`COMMAND_OPTIONS_IGNORED` left out and each config
    file replaced by the digest of its content (with the files it composes)."""
    out: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        arg = str(items[i])
        key, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        has_value = not eq and i + 1 < len(items)
        value = inline if eq else (str(items[i + 1]) if has_value else None)
        step = 1 if eq or not has_value else 2
        if key in COMMAND_OPTIONS_IGNORED:
            i += step
            continue
        if key in CONFIG_OPTIONS and value is not None:
            out += ["--config", _config_digest(value)]
            i += step
            continue
        out.append(arg)
        i += 1
    return out


def command_sha256(argv: Sequence[str]) -> str:
    """SHA-256 of :func:`command_identity`: equal for two commands of the same experiment,
    wherever their runs are written and whether or not they resume."""
    text = json.dumps(command_identity(argv))
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
    (no ``.git`` there), has no commit yet, or git is not installed. ``dirty``: a tracked file
    differs from the commit (untracked files do not count). One git call (a run makes one per
    results file)."""
    root = Path(noisylabels.__file__).resolve().parents[1] if root is None else root
    if not (root / ".git").exists():  # a folder inside a checkout is not its top
        return None, None
    status = _git(root, "status", "--porcelain=v2", "--branch", "--untracked-files=no")
    if status is None:
        return None, None
    lines = status.splitlines()
    commit = next((ln.split()[2] for ln in lines if ln.startswith("# branch.oid ")), None)
    if commit is None or commit == "(initial)":
        return None, None
    return commit, any(not ln.startswith("#") for ln in lines)


def code_state() -> dict[str, Any]:
    """The code a run executes: the versions of noisylabels, torch, lightning and Python, and
    the :func:`git_state` of the project checkout (``git_commit``, ``git_dirty``)."""
    # start-up time: a sweep hashes commands with this module, without Lightning or torch
    import lightning as L
    import torch

    commit, dirty = git_state()
    return {
        "noisylabels": noisylabels.__version__,
        "torch": str(torch.__version__),  # a TorchVersion: plain text in checkpoints
        "lightning": str(L.__version__),
        "python": platform.python_version(),
        "git_commit": commit,
        "git_dirty": dirty,
    }


def provenance(
    model: Any,
    datamodule: Any,
    config: Mapping[str, Any] | None = None,
    command: Sequence[str] | None = None,
    inputs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``provenance`` block of ``results.json``. ``config``: the resolved command-line
    configuration; without it (a run from Python) the hash is of the model's and data
    module's hyperparameters. ``command``: the command line (``command`` and
    ``command_sha256`` are ``null`` without it). ``inputs``: the SHA-256 of each input file
    the run read (:func:`input_files_sha256`)."""
    if config is None:
        config = {
            "model": dict(getattr(model, "hparams", {})),
            "data": dict(getattr(datamodule, "hparams", {})),
        }
    return {
        **code_state(),
        "config_sha256": config_sha256(config),
        "noisy_labels_sha256": labels_sha256(datamodule),
        "command": None if command is None else [str(a) for a in command],
        "command_sha256": None if command is None else command_sha256(command),
        "inputs": dict(inputs or {}),
    }
