"""Noisy labels from files: every supported format, and refusals that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from noisylabels.data import DigitsDataModule
from noisylabels.errors import InputError, MissingFileError
from noisylabels.noise import FileLabels, ShippedLabels, SyntheticNoise, read_label_file

from conftest import config_args

LABELS = [3, 0, 2, 2, 1]


def _write(path: Path, obj) -> Path:
    if path.suffix in (".pt", ".pth"):
        torch.save(obj, path)
    elif path.suffix == ".npy":
        np.save(path, obj)
    else:
        path.write_text(obj)
    return path


@pytest.mark.parametrize(
    "name, content, key",
    [
        ("t.pt", torch.tensor(LABELS), None),
        ("t.pth", torch.tensor(LABELS, dtype=torch.float32), None),  # integral floats are fine
        ("d.pt", {"noisy_labels": torch.tensor(LABELS), "other": torch.zeros(5)}, None),
        ("k.pt", {"worse_label": torch.tensor(LABELS).view(-1, 1)}, "worse_label"),
        ("a.npy", np.array(LABELS, dtype=np.uint8), None),
        ("one.csv", "3\n0\n2\n2\n1\n", None),
        ("row.txt", "3, 0 2\n\n2,1\n", None),
        ("floats.csv", "3.0\n0\n2\n2e0\n1\n", None),
        ("bom.csv", "\ufeff3\n0\n2\n2\n1\n", None),  # "CSV UTF-8" of spreadsheet programs
    ],
)
def test_formats(tmp_path: Path, name: str, content, key: str | None) -> None:
    labels = read_label_file(_write(tmp_path / name, content), 5, 4, key)
    assert labels.dtype == torch.long and labels.tolist() == LABELS


@pytest.mark.parametrize(
    "name, content, key, match",
    [
        ("short.csv", "1\n2\n3\n", None, r"short.csv has 3 labels; the training set has 5"),
        ("big.pt", torch.tensor([0, 1, 2, 3, 4]), None, r"big.pt: labels must lie in \[0, 3\]"),
        ("neg.npy", np.array([0, -1, 2, 3, 1]), None, r"label -1 at position 1"),
        ("frac.csv", "3\n0\n6.9\n2\n1\n", None, r"frac.csv, line 3: '6.9' is not an integer"),
        ("word.csv", "3\n0\nlabel\n2\n1\n", None, r"word.csv, line 3: 'label' is not a number"),
        ("f.pt", torch.tensor([3.0, 0.5, 2, 2, 1]), None, r"f.pt: label 0.5 at position 1"),
        ("nan.npy", np.array([3.0, np.nan, 2, 2, 1]), None, r"label nan at position 1"),
        ("bool.pt", torch.ones(5, dtype=torch.bool), None, r"bool.pt holds torch.bool"),
        ("2d.pt", torch.zeros(5, 2, dtype=torch.long), None, r"shape \(5, 2\)"),
        ("obj.npy", np.array([1, 2, 3, 0, 1], dtype=object), None, r"obj.npy: .*integer array"),
        ("s.npy", np.array(["3", "0", "2", "2", "1"]), None, r"dtype <U1; labels must be"),
        ("keys.pt", {"a": torch.zeros(5), "b": torch.zeros(5)}, None, r"keys \['a', 'b'\]"),
        ("keys2.pt", {"a": torch.zeros(5)}, "worse", r"has no key 'worse'.*noise_file_key"),
        ("flat.pt", torch.zeros(5, dtype=torch.long), "worse", r"drop --data.noise_file_key"),
        ("text.csv", "1\n", "worse", r"drop --data.noise_file_key"),
        ("labels.json", "[]", None, r"unsupported label file type '.json'"),
        ("empty.npy", b"", None, r"empty.npy cannot be read as a .npy array .*empty, truncated"),
        ("cut.npy", "cut", None, r"cut.npy: .*integer array|cut.npy cannot be read"),
        ("u16.csv", "3\n0\n2\n2\n1\n".encode("utf-16"), None, r"u16.csv is UTF-16 text"),
        ("latin.csv", "3\n0\n\xe9\n".encode("latin-1"), None, r"latin.csv is not UTF-8 text"),
    ],
)
def test_refusals_name_the_file(tmp_path: Path, name: str, content, key, match: str) -> None:
    if name == "obj.npy":
        np.save(tmp_path / name, content, allow_pickle=True)
        path = tmp_path / name
    elif name == "cut.npy":  # a .npy file cut short after its header
        np.save(tmp_path / name, np.arange(5))
        path = tmp_path / name
        path.write_bytes(path.read_bytes()[:-12])
    elif isinstance(content, bytes):
        path = tmp_path / name
        path.write_bytes(content)
    else:
        path = _write(tmp_path / name, content)
    with pytest.raises(InputError, match=match):
        read_label_file(path, 5, 4, key)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match=r"gone.pt does not exist.*--data.noise_file"):
        read_label_file(tmp_path / "gone.pt", 5, 4)


def test_label_sources_describe_their_noise(tmp_path: Path) -> None:
    clean = torch.tensor([3, 0, 2, 1, 1])
    synthetic = SyntheticNoise("symmetric", 0.4, seed=2)
    noisy = synthetic.make_labels(clean, 4)
    assert synthetic.noise_info() == {
        "type": "symmetric",
        "rate_nominal": 0.4,
        "rate_actual": (noisy != clean).float().mean().item(),
        "seed": 2,
    }
    source = FileLabels(_write(tmp_path / "l.csv", "3\n0\n2\n2\n1\n"))
    assert source.make_labels(clean, 4).tolist() == LABELS
    info = source.noise_info()
    assert info["type"] == "file" and info["rate_nominal"] is None
    assert info["rate_actual"] == pytest.approx(0.2) and info["file"].endswith("l.csv")
    assert source.transition is None
    # shipped labels: the rate is over the samples whose clean label is known
    shipped = ShippedLabels(torch.tensor(LABELS))
    shipped.make_labels(torch.tensor([3, -1, -1, 1, 1]), 4)
    info = shipped.noise_info()
    assert info == {
        "type": "real",
        "rate_nominal": None,
        "rate_actual": pytest.approx(1 / 3),
        "clean_known": 3,
    }
    # the nominal rate: the synthetic source's configured one, none for the others
    assert (synthetic.rate_nominal, source.rate_nominal, shipped.rate_nominal) == (0.4, None, None)
    T = shipped.empirical_transition()
    assert T[3, 3] == 1 and T[1].tolist() == [0.0, 0.5, 0.5, 0.0] and T[0, 0] == 1  # no sample
    with pytest.raises(InputError, match="ships 5 noisy labels for 4"):
        ShippedLabels(torch.tensor(LABELS)).make_labels(torch.zeros(4, dtype=torch.long), 4)
    with pytest.raises(InputError, match="flip map"):
        SyntheticNoise("semantic", 0.2, seed=0)


def test_a_bad_label_file_fails_setup_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "labels.csv", "1\n2\n")
    dm = DigitsDataModule(noise_type="file", noise_file=str(path))
    with pytest.raises(InputError, match=r"labels.csv has 2 labels; the training set has 1438"):
        dm.setup("fit")


# --- human label files (CIFAR-10N / CIFAR-100N, Wei et al. 2022) -----------------------------


def _flip_every_third(clean: torch.Tensor, num_classes: int) -> torch.Tensor:
    noisy = clean.clone()
    noisy[::3] = (noisy[::3] + 1) % num_classes
    return noisy


def _legacy_numpy_names(path: Path) -> None:
    """Rewrite a torch file as numpy 1 writes it (``numpy.core.multiarray``), as the
    published CIFAR-N files are."""
    import zipfile

    with zipfile.ZipFile(path) as zin:
        entries = [(info, zin.read(info.filename)) for info in zin.infolist()]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zout:
        for info, data in entries:
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
            zout.writestr(info, data)


def cifar10n_file(path: Path, clean: torch.Tensor, legacy: bool = False) -> torch.Tensor:
    """A CIFAR-10N-shaped file: a dict of numpy int arrays in training-set order."""
    worse = _flip_every_third(clean, 10)
    arrays = {"clean_label": clean.numpy(), "worse_label": worse.numpy()}
    arrays["aggre_label"] = clean.numpy().astype(np.int32)
    for k in (1, 2, 3):
        arrays[f"random_label{k}"] = np.roll(clean.numpy(), k)
    torch.save(arrays, path)
    if legacy:
        _legacy_numpy_names(path)
    return worse


@pytest.fixture(scope="module")
def cifar10_clean(cifar10_dir: Path) -> torch.Tensor:
    from noisylabels.data import CIFAR10DataModule

    dm = CIFAR10DataModule(data_dir=str(cifar10_dir))
    dm.setup("fit")
    return dm.clean_labels


@pytest.mark.parametrize("legacy", [False, True], ids=["numpy2", "numpy1"])
def test_a_dict_of_numpy_arrays_loads_weights_only(tmp_path, cifar10_clean, legacy) -> None:
    path = tmp_path / "CIFAR-10_human.pt"
    worse = cifar10n_file(path, cifar10_clean, legacy=legacy)
    if legacy:
        assert b"numpy.core.multiarray" in path.read_bytes()
    labels = read_label_file(path, len(worse), 10, "worse_label", clean=cifar10_clean)
    assert torch.equal(labels, worse)
    aggre = read_label_file(path, len(worse), 10, "aggre_label")
    assert torch.equal(aggre, cifar10_clean)


def test_human_label_file_errors(tmp_path, cifar10_clean) -> None:
    path = tmp_path / "CIFAR-10_human.pt"
    cifar10n_file(path, cifar10_clean)
    n = len(cifar10_clean)
    with pytest.raises(InputError, match=r"has no key 'worst_label'.*'aggre_label'"):
        read_label_file(path, n, 10, "worst_label")
    with pytest.raises(InputError, match=rf"has {n} labels; the training set has {n + 1}"):
        read_label_file(path, n + 1, 10, "worse_label")
    with pytest.raises(InputError, match=r"labels must lie in \[0, 3\]"):
        read_label_file(path, n, 4, "worse_label")
    shuffled = cifar10_clean.flip(0)
    with pytest.raises(InputError, match="clean_label entry disagrees"):
        read_label_file(path, n, 10, "worse_label", clean=shuffled)
    one_off = cifar10_clean.clone()
    one_off[5] = (one_off[5] + 1) % 10
    with pytest.raises(InputError, match=r"at 1 of \d+ positions, the first at index 5 "):
        read_label_file(path, n, 10, "worse_label", clean=one_off)


def _fit_with_label_file(run_cli, pair: str, data_dir: Path, path: Path, key: str) -> Any:
    return run_cli(
        "fit",
        *config_args(pair),
        "--data.data_dir",
        str(data_dir),
        "--data.noise_type",
        "file",
        "--data.noise_file",
        str(path),
        "--data.noise_file_key",
        key,
        "--trainer.fast_dev_run",
        "1",
        "--trainer.accelerator",
        "cpu",
        "--data.batch_size",
        "16",
    )


def test_cifar10n_worse_label_through_the_cli(
    run_cli, tmp_path: Path, cifar10_dir: Path, cifar10_clean: torch.Tensor
) -> None:
    path = tmp_path / "CIFAR-10_human.pt"
    worse = cifar10n_file(path, cifar10_clean, legacy=True)
    cli = _fit_with_label_file(run_cli, "cifar10_ce", cifar10_dir, path, "worse_label")
    noise = cli.results["noise"]  # fast_dev_run: the results, but no results.json
    expected = (worse != cifar10_clean).float().mean().item()
    assert noise["type"] == "file" and noise["file"] == str(path)
    assert noise["key"] == "worse_label" and noise["rate_nominal"] is None
    assert noise["rate_actual"] == pytest.approx(expected) and expected > 0.3


def test_cifar100n_noisy_label_through_the_cli(run_cli, tmp_path: Path, cifar100_dir) -> None:
    from noisylabels.data import CIFAR100DataModule

    dm = CIFAR100DataModule(data_dir=str(cifar100_dir))
    dm.setup("fit")
    clean = dm.clean_labels
    noisy = _flip_every_third(clean, 100)
    path = tmp_path / "CIFAR-100_human.pt"  # CIFAR-100N's shape, here as a dict of tensors
    torch.save({"clean_label": clean, "noisy_label": noisy, "noisy_coarse_label": clean // 5}, path)
    cli = _fit_with_label_file(run_cli, "cifar100_ce", cifar100_dir, path, "noisy_label")
    noise = cli.results["noise"]
    assert noise["key"] == "noisy_label" and noise["rate_nominal"] is None
    assert noise["rate_actual"] == pytest.approx((noisy != clean).float().mean().item())
    # a wrong key fails before training and lists the keys present
    with pytest.raises(InputError, match=r"'clean_label', 'noisy_coarse_label', 'noisy_label'"):
        _fit_with_label_file(run_cli, "cifar100_ce", cifar100_dir, path, "noisy")
