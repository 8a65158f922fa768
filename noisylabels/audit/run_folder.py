"""A finished run folder, read for an audit: its results, noise record, per-sample record and
the data module its ``config.yaml`` describes.

Every file is checked before anything is computed; a folder that is not a finished run, a run
without the per-sample record (``sample_dynamics.pt``) or a data folder that no longer gives the
run's labels fails with a :class:`~noisylabels.errors.InputError` or
:class:`~noisylabels.errors.MissingFileError` that says what to do. ``.pt`` files load with
``torch.load(weights_only=True)``: nothing in them is executed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from noisylabels.data import ImageFileDataModule, NoisyDataModule
from noisylabels.disk.reading import UnreadableFile, load_torch, read_json, read_yaml
from noisylabels.disk.runs import newest_run
from noisylabels.errors import InputError, MissingFileError
from noisylabels.run.artifacts import DYNAMICS_FILE, NOISE_FILE
from noisylabels.run.rules import RESULTS_FILE, UNFINISHED
from noisylabels.run.source import CONFIG_FILE


@dataclass
class RunFolder:
    """What an audit reads of a finished run."""

    path: Path
    results: dict[str, Any]
    noise: dict[str, Any]
    config: dict[str, Any]

    @property
    def dynamics_path(self) -> Path:
        return self.path / DYNAMICS_FILE

    def dynamics(self) -> dict[str, Any]:
        """The run's ``sample_dynamics.pt``, checked against its noise record."""
        path = self.dynamics_path
        if not path.is_file():
            raise MissingFileError(
                f"{self.path} has no per-sample record ({DYNAMICS_FILE}): the run was made "
                "before noisylabels kept one, or trained without `noisylabels fit` / "
                "noisylabels.run.fit_and_test. Rank its labels by the out-of-sample posterior "
                f"instead (--score posterior trains --folds models from its {CONFIG_FILE}), or "
                f"train it again and audit in one go: noisylabels audit --config "
                f"{self.path / CONFIG_FILE}"
            )
        record = load_pt(path)
        needed = ("probs", "loss", "margin", "weight", "loss_epochs", "noisy_labels")
        if not isinstance(record, dict) or not all(k in record for k in needed):
            raise InputError(
                f"{path} is not a per-sample record of noisylabels (it lacks "
                f"{', '.join(k for k in needed if not isinstance(record, dict) or k not in record)}"
                f"); remove it and train the run again"
            )
        if not torch.equal(record["noisy_labels"].long(), self.noisy_labels):
            raise InputError(
                f"{path} and {self.path / NOISE_FILE} hold different training labels: the files "
                "are not of the same run; train it again"
            )
        return record

    @property
    def noisy_labels(self) -> torch.Tensor:
        return self.noise["noisy_labels"].long()

    @property
    def clean_labels(self) -> torch.Tensor:
        return self.noise["clean_labels"].long()

    @property
    def train_indices(self) -> torch.Tensor:
        return self.noise["train_indices"].long()

    @property
    def num_classes(self) -> int:
        """The number of classes (the size of the run's measured T)."""
        measured = self.noise.get("empirical_transition")
        if isinstance(measured, torch.Tensor) and measured.ndim == 2:
            return int(measured.shape[0])
        return int(max(self.noisy_labels.max(), self.clean_labels.max())) + 1

    @property
    def true_labels_known(self) -> bool:
        """Whether the clean labels are known apart from the training labels: synthetic noise,
        a label file or real noise with some clean labels, not ``noise_type: none``."""
        return self.noise.get("type", self.results.get("noise", {}).get("type")) != "none"

    @property
    def seed(self) -> int:
        seed = self.results.get("seed")
        return int(seed) if seed is not None else 0


def load_pt(path: Path) -> Any:
    """A ``.pt`` file of a run, loaded without running code; a damaged file is a user error."""
    try:
        return load_torch(path, "")
    except UnreadableFile as err:
        raise UnreadableFile(f"{err}; train the run again", path) from None


def read_run(path: str | Path) -> RunFolder:
    """The finished run at ``path``: a run folder, or a folder above runs (the newest finished
    one, named on stderr where there are several)."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise MissingFileError(
            f"no run folder {folder}: give the folder of a finished run (the 'run folder: ...' "
            f"that `noisylabels fit` prints, holding {RESULTS_FILE})"
        )
    if not folder.is_dir():
        raise InputError(f"{folder} is a file; give the run folder that holds {RESULTS_FILE}")
    if not (folder / RESULTS_FILE).is_file():
        folder = _run_below(folder)
    missing = [name for name in (NOISE_FILE, CONFIG_FILE) if not (folder / name).is_file()]
    if missing:
        raise MissingFileError(
            f"the run folder {folder} lacks {' and '.join(missing)}, which every run of "
            "`noisylabels fit` writes; give the folder of a run made by `noisylabels fit`"
        )
    try:
        results = read_json(folder / RESULTS_FILE, "")
        config = read_yaml(folder / CONFIG_FILE, "")
    except UnreadableFile as err:
        raise UnreadableFile(f"{err}; train the run again", err.path) from None
    if not isinstance(results, dict):
        raise InputError(f"{folder / RESULTS_FILE} is not a run's results (not a JSON object)")
    noise = load_pt(folder / NOISE_FILE)
    if not isinstance(noise, dict) or "noisy_labels" not in noise or "train_indices" not in noise:
        raise InputError(f"{folder / NOISE_FILE} is not the noise record of a run")
    if not isinstance(config, dict) or not isinstance(config.get("data"), dict):
        raise InputError(f"{folder / CONFIG_FILE} has no data section; it is not a run's config")
    return RunFolder(folder, results, noise, config)


def _run_below(folder: Path) -> Path:
    """The finished run under ``folder``: the newest where there are several
    (:func:`~noisylabels.disk.runs.newest_run`, the rule ``plot`` follows too)."""
    finished = list(folder.rglob(RESULTS_FILE))
    if finished:
        return newest_run(folder, finished, "finished runs", command="audit")
    if (folder / UNFINISHED).is_file():
        raise InputError(
            f"{folder} is a run that did not finish ({UNFINISHED} says why); resume it with "
            f"`noisylabels fit --config {folder / CONFIG_FILE} --ckpt_path {folder}` and audit "
            "it once it has finished"
        )
    raise MissingFileError(
        f"{folder} holds no {RESULTS_FILE}: it is not the folder of a finished run (the 'run "
        "folder: ...' that `noisylabels fit` prints)"
    )


def data_class(run: RunFolder) -> type[NoisyDataModule]:
    """The data module class of the run's ``config.yaml``."""
    class_path = str(run.config["data"].get("class_path", ""))
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise InputError(
            f"{run.path / CONFIG_FILE}: data class {class_path!r} cannot be imported ({err})"
        ) from err
    if not (isinstance(cls, type) and issubclass(cls, NoisyDataModule)):
        raise InputError(f"{run.path / CONFIG_FILE}: {class_path!r} is not a noisylabels dataset")
    return cls


def data_module(run: RunFolder, data_dir: str | None = None) -> NoisyDataModule:
    """The run's data module from its ``config.yaml`` (``data_dir`` overrides the config's),
    set up and checked to give the run's training labels."""
    cls = data_class(run)
    kwargs = dict(run.config["data"].get("init_args") or {})
    if data_dir is not None:
        kwargs["data_dir"] = data_dir
    if issubclass(cls, ImageFileDataModule):
        kwargs["num_workers"] = 0  # the audit reads a few images, not epochs of them
    dm = cls(**kwargs)
    dm.setup("fit")
    if dm.noisy_labels is None or not torch.equal(dm.noisy_labels.long(), run.noisy_labels):
        raise InputError(
            f"the data under {dm.data_dir} gives other training labels than the run "
            f"{run.path} trained on (another dataset, or files added, removed or renamed "
            "since); point --data.data_dir at the run's data"
        )
    return dm
