"""CIFAR-10N and CIFAR-100N: the label sets of the published label files, the clean labels
checked against the CIFAR files, the measured noise rate recorded, through the real CLI on tiny
CIFAR batches with a label file in the release's format; and the real label files' rates."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from noisylabels.data import CIFAR10NDataModule, CIFAR100NDataModule
from noisylabels.data.cifar import CIFAR10DataModule, CIFAR100DataModule, read_cifar_batches
from noisylabels.data.loaded import LoadedData
from noisylabels.errors import InputError, MissingFileError

from conftest import CONFIGS, make_cifar, read_results

CIFAR10_SETS = ("aggre", "random1", "random2", "random3", "worse")


def _train_labels(root: Path, num_classes: int) -> np.ndarray:
    if num_classes == 10:
        files = [root / "cifar-10-batches-py" / f"data_batch_{i}" for i in range(1, 6)]
        return read_cifar_batches(files, "labels")[1].numpy()
    return read_cifar_batches([root / "cifar-100-python" / "train"], "fine_labels")[1].numpy()


def _flip(labels: np.ndarray, rate: float, classes: int, seed: int) -> np.ndarray:
    """``labels`` with ``rate`` of each class's samples (rounded down) moved to the next class,
    at random: every class stays the majority label of its images."""
    rng = np.random.default_rng(seed)
    out = labels.copy()
    for c in range(classes):
        members = rng.permutation(np.flatnonzero(labels == c))
        idx = members[: int(rate * len(members))]
        out[idx] = (c + 1) % classes
    return out


def write_cifar10n(root: Path, rates: dict[str, float], where: str = "CIFAR-N") -> Path:
    """CIFAR-10_human.pt for the tiny CIFAR-10 under ``root``, as the release has it (a dict of
    int64 numpy arrays), each label set flipped at its rate; returns the file."""
    clean = _train_labels(root, 10)
    keys = {"aggre": "aggre_label", "worse": "worse_label"}
    keys |= {f"random{i}": f"random_label{i}" for i in (1, 2, 3)}
    content = {"clean_label": clean.astype(np.int64)}
    for i, (name, key) in enumerate(keys.items()):
        content[key] = _flip(clean, rates.get(name, 0.1), 10, seed=i).astype(np.int64)
    path = root / where / "CIFAR-10_human.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(content, path)
    return path


@pytest.fixture
def cifar10n(tmp_path: Path) -> Path:
    root = make_cifar(tmp_path / "data", 10, n_train=200, n_test=50)
    write_cifar10n(root, {"aggre": 0.1, "worse": 0.4})
    return root


def _fit(run_cli, root: Path, out: Path, *args: str) -> dict:
    run_cli(
        "fit",
        "--config", str(CONFIGS / "data" / "cifar10.yaml"),
        "--config", str(CONFIGS / "method" / "ce.yaml"),
        "--config", str(CONFIGS / "data" / "cifar10n.yaml"),
        "--data.data_dir", str(root),
        "--trainer.max_epochs", "2",
        "--data.batch_size", "32",
        "--trainer.accelerator", "cpu",
        *args,
        root=out,
    )  # fmt: skip
    return read_results(out)


@pytest.mark.parametrize(("label_set", "rate"), [("aggre", 0.1), ("worse", 0.4)])
def test_cifar10n_trains_on_its_label_set_and_records_the_measured_rate(
    run_cli, cifar10n, tmp_path, tiny_backbones, label_set, rate
) -> None:
    """Two epochs through the CLI: the labels are the set's, the noise is ``real`` with the
    rate measured against CIFAR's labels, and the run records the set, its file and the
    published rate."""
    results = _fit(run_cli, cifar10n, tmp_path / "run", "--data.label_set", label_set)
    assert results["noise"]["type"] == "real"
    assert results["noise"]["rate_actual"] == pytest.approx(rate, abs=1e-6)
    published = {"aggre": 0.0903, "worse": 0.4021}[label_set]
    assert results["noise"]["label_set"] == label_set
    assert results["noise"]["rate_published"] == pytest.approx(published)
    assert results["data"]["label_set"] == label_set
    assert results["data"]["label_file"].endswith("CIFAR-N/CIFAR-10_human.pt")
    assert results["epochs"] == 2 and 0.0 <= results["test_acc"] <= 1.0


def test_the_label_file_is_found_in_the_data_folder_or_given(run_cli, tmp_path, tiny_backbones):
    root = make_cifar(tmp_path / "data", 10, n_train=200, n_test=50)
    write_cifar10n(root, {"worse": 0.3}, where=".")  # DATA/CIFAR-10_human.pt
    results = _fit(run_cli, root, tmp_path / "a")
    assert results["noise"]["rate_actual"] == pytest.approx(0.3)
    elsewhere = write_cifar10n(root, {"worse": 0.2}, where="../labels")
    results = _fit(run_cli, root, tmp_path / "b", "--data.label_file", str(elsewhere))
    assert results["noise"]["rate_actual"] == pytest.approx(0.2)


def test_a_missing_label_file_says_where_it_goes(run_cli, tmp_path) -> None:
    root = make_cifar(tmp_path / "data", 10, n_train=200, n_test=50)
    with pytest.raises(MissingFileError) as exc:
        _fit(run_cli, root, tmp_path / "run")
    message = str(exc.value)
    assert "CIFAR-10_human.pt" in message and "UCSC-REAL/cifar-10-100n" in message
    assert str(root / "CIFAR-10_human.pt") in message
    assert str(root / "CIFAR-N" / "CIFAR-10_human.pt") in message
    with pytest.raises(MissingFileError, match="--data.label_file .*does not exist"):
        _fit(run_cli, root, tmp_path / "run", "--data.label_file", str(tmp_path / "none.pt"))


def test_clean_labels_that_are_not_cifars_are_refused_naming_the_first_index(
    run_cli, cifar10n, tmp_path
) -> None:
    path = cifar10n / "CIFAR-N" / "CIFAR-10_human.pt"
    content = torch.load(path, weights_only=False)
    content["clean_label"][[7, 30]] = (content["clean_label"][[7, 30]] + 1) % 10
    torch.save(content, path)
    with pytest.raises(InputError, match=r"at 2 of 200 indices, the first at index 7"):
        _fit(run_cli, cifar10n, tmp_path / "run")


def test_a_label_file_of_another_length_is_refused(run_cli, cifar10n, tmp_path) -> None:
    path = cifar10n / "CIFAR-N" / "CIFAR-10_human.pt"
    content = {k: v[:150] for k, v in torch.load(path, weights_only=False).items()}
    torch.save(content, path)
    with pytest.raises(InputError, match="150"):
        _fit(run_cli, cifar10n, tmp_path / "run")


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        ("no key", "has no 'worse_label'"),
        ("npy", "is a .npy file"),
        ("array", "holds a single array, not a dict"),
    ],
)
def test_a_label_file_not_in_cifar_ns_layout_is_refused_naming_the_label_sets(
    run_cli, cifar10n, tmp_path, kind: str, match: str
) -> None:
    """The advice names this module's options (the label sets), never the label file
    source's --data.noise_file_key, which the module does not take."""
    content = torch.load(cifar10n / "CIFAR-N" / "CIFAR-10_human.pt", weights_only=False)
    path = tmp_path / ("labels.npy" if kind == "npy" else "labels.pt")
    if kind == "no key":
        torch.save({k: v for k, v in content.items() if k != "worse_label"}, path)
    elif kind == "npy":
        np.save(path, np.asarray(content["worse_label"]))
    else:
        torch.save(torch.as_tensor(content["worse_label"]), path)
    with pytest.raises(InputError) as err:
        _fit(run_cli, cifar10n, tmp_path / "run", "--data.label_file", str(path))
    assert match in str(err.value) and "--data.label_set (aggre, random1" in str(err.value)
    assert "noise_file_key" not in str(err.value)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"label_set": "worst"}, "--data.label_set must be one of aggre, random1"),
        ({"noise_type": "symmetric"}, "--data.noise_type real, the only kind"),
        ({"noise_rate": 0.2}, "--data.noise_rate 0.2 would have no effect"),
    ],
)
def test_bad_options_are_refused(options, match) -> None:
    with pytest.raises(InputError, match=match):
        CIFAR10NDataModule(**options)


def test_cifar100n_noisy_coarse_has_the_twenty_superclasses(run_cli, tmp_path, tiny_backbones):
    """``noisy_coarse``: 20 outputs, CIFAR-100's coarse labels as the clean and test labels."""
    root = make_cifar(tmp_path / "data", 100, n_train=400, n_test=100)
    clean = _train_labels(root, 100)
    coarse = clean // 5  # make_cifar's coarse labels
    content = {
        "clean_label": clean,
        "noisy_label": _flip(clean, 0.25, 100, seed=0),
        "clean_coarse_label": coarse,
        "noisy_coarse_label": _flip(coarse, 0.25, 20, seed=1),
    }
    torch.save({k: v.astype(np.int64) for k, v in content.items()}, root / "CIFAR-100_human.pt")
    for label_set, rate, classes in (("noisy", 0.25, 100), ("noisy_coarse", 0.25, 20)):
        out = tmp_path / label_set
        run_cli(
            "fit",
            "--config", str(CONFIGS / "data" / "cifar100.yaml"),
            "--config", str(CONFIGS / "method" / "ce.yaml"),
            "--config", str(CONFIGS / "data" / "cifar100n.yaml"),
            "--data.label_set", label_set,
            "--data.data_dir", str(root),
            "--trainer.max_epochs", "2",
            "--data.batch_size", "64",
            "--trainer.accelerator", "cpu",
            root=out,
        )  # fmt: skip
        results = read_results(out)
        assert results["noise"]["rate_actual"] == pytest.approx(rate), label_set
        assert results["data"]["label_set"] == label_set
        module = CIFAR100NDataModule(data_dir=str(root), label_set=label_set)
        module.setup()
        assert module.num_classes == classes
        assert int(module.data.test_labels.max()) < classes
    assert int(module.data.test_labels.max()) == 19


# ---------------------------------------------------------------- the real label files
def _real_file(name: str) -> Path | None:
    value = os.environ.get("NOISYLABELS_DATA_DIR")
    path = Path(value) / "CIFAR-N" / name if value else None
    return path if path is not None and path.is_file() else None


REAL_RATES = {  # measured here on the distributed files (docs/data.md), % of 50,000
    (CIFAR10NDataModule, "aggre"): 9.01,
    (CIFAR10NDataModule, "random1"): 17.234,
    (CIFAR10NDataModule, "random2"): 18.122,
    (CIFAR10NDataModule, "random3"): 17.64,
    (CIFAR10NDataModule, "worse"): 40.208,
    (CIFAR100NDataModule, "noisy"): 40.20,
}


def _labels_only(monkeypatch, clean: torch.Tensor) -> None:
    """CIFAR's loaders return ``clean`` as the training labels, without pixels."""

    def load(self) -> LoadedData:
        images = torch.zeros(len(clean), 3, 1, 1, dtype=torch.uint8)
        return LoadedData(images, clean.clone(), images[:10], clean[:10].clone())

    monkeypatch.setattr(CIFAR10DataModule, "load", load)
    monkeypatch.setattr(CIFAR100DataModule, "load", load)


@pytest.mark.parametrize(
    ("cls", "label_set"), list(REAL_RATES), ids=[f"{c.name}-{s}" for c, s in REAL_RATES]
)
def test_the_real_label_files_give_their_published_rates(monkeypatch, cls, label_set) -> None:
    """Each label set of the distributed files, read by the module against CIFAR's training
    labels (the file's ``clean_label``, which are CIFAR's; the images are not needed for the
    labels), has the noise rate measured here, within 0.03 points of the published one."""
    path = _real_file(cls.label_file_name)
    if path is None:
        pytest.skip(f"set NOISYLABELS_DATA_DIR to a folder with CIFAR-N/{cls.label_file_name}")
    _labels_only(monkeypatch, torch.from_numpy(torch.load(path, weights_only=False)["clean_label"]))
    module = cls(data_dir=str(path.parent.parent), label_set=label_set)
    module.setup()
    measured = 100 * module.rate_actual
    assert measured == pytest.approx(REAL_RATES[(cls, label_set)], abs=1e-3)
    assert abs(measured - cls.published_rates[label_set]) <= 0.03
    assert module.data_info()["label_file"] == str(path)


def test_the_real_coarse_labels_are_not_cifars_superclasses_and_are_refused() -> None:
    """The distributed CIFAR-100_human.pt's ``clean_coarse_label`` is not CIFAR-100's
    super-class labels (``coarse_labels``, :data:`CIFAR100_COARSE` of the fine ones): it holds
    12 of the 20 values and agrees on 60 % of the images, so ``noisy_coarse`` is refused on it,
    naming the first index that differs."""
    from noisylabels.data.cifar import CIFAR100_COARSE

    path = _real_file("CIFAR-100_human.pt")
    if path is None:
        pytest.skip("set NOISYLABELS_DATA_DIR to a folder with CIFAR-N/CIFAR-100_human.pt")
    shipped = torch.load(path, weights_only=False)
    cifar_coarse = torch.tensor(CIFAR100_COARSE)[torch.from_numpy(shipped["clean_label"])]
    assert len(np.unique(shipped["clean_coarse_label"])) == 12
    agree = (cifar_coarse.numpy() == shipped["clean_coarse_label"]).mean()
    assert agree == pytest.approx(0.6, abs=0.005)
    module = CIFAR100NDataModule(data_dir=str(path.parent.parent), label_set="noisy_coarse")
    with pytest.raises(InputError, match=r"clean_coarse_label disagrees .* the first at index"):
        module.read_labels(cifar_coarse, 20, "clean_coarse_label")


def test_report_keeps_the_label_sets_apart(run_cli, cifar10n, tmp_path, tiny_backbones, capsys):
    """A report of runs on two label sets has a column each (``CIFAR-10N aggre``, ``worse``):
    the label set is part of the run's noise, not merged into one ``real`` column."""
    from noisylabels.cli import run

    for label_set in ("aggre", "worse"):
        _fit(run_cli, cifar10n, tmp_path / "runs" / label_set, "--data.label_set", label_set)
    capsys.readouterr()
    flags = ["--include-unhealthy", "--include-short"]  # two tiny epochs
    run(["report", str(tmp_path / "runs"), "--metric", "last", *flags])
    header = next(line for line in capsys.readouterr().out.splitlines() if "method" in line)
    assert "CIFAR-10N aggre" in header and "CIFAR-10N worse" in header, header


@pytest.mark.parametrize(("sweep", "labels"), [
    ("cifar_n.yaml", {"aggre", "random1", "random2", "random3", "worse"}),
    ("cifar100_n.yaml", {"noisy"}),
])  # fmt: skip
def test_the_cifar_n_sweeps_run_every_method_group_on_every_label_set(sweep, labels) -> None:
    """Every method group (base and VRNL) is a row of the CIFAR-N sweeps, each on every label
    set, with the CIFAR-N data group composed last; a new method group without its row fails."""
    from noisylabels.sweep.grid import load_sweep

    from conftest import METHODS

    runs = load_sweep(CONFIGS / "sweeps" / sweep).runs
    assert {r.point["method"] for r in runs} == set(METHODS)
    assert {r.point["labels"] for r in runs} == labels
    for run in runs:
        assert Path(run.configs[-1]).name in ("cifar10n.yaml", "cifar100n.yaml"), run.name
