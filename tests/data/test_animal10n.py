"""ANIMAL-10N on a tiny copy of its release written here: ``training/`` and ``testing/`` of
JPEGs named ``<label>_<index>.jpg``, the label in the file name."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch

from noisylabels.data import Animal10NDataModule
from noisylabels.data.animal10n import NUM_CLASSES, label_of
from noisylabels.errors import InputError, MissingFileError

from conftest import CONFIGS, fit_error, read_results, write_image

PER_CLASS = 4
SMALL = ["--data.image_size", "32", "--data.resize_size", "32", "--data.num_workers", "0"]


def make_animal10n(root: Path) -> dict:
    """Write ``PER_CLASS`` training and one test image per class (their indices interleaved,
    as the release numbers them), and a file that is not an image. Returns the names."""
    train, test = [], []
    for i in range(PER_CLASS * NUM_CLASSES):
        label = (7 * i) % NUM_CLASSES
        name = f"{label}_{i:05d}.jpg"
        write_image(root / "training" / name, label % 3, seed=i, png=False)
        train.append(name)
    for label in range(NUM_CLASSES):
        name = f"{label}_{90000 + label:05d}.jpg"
        write_image(root / "testing" / name, label % 3, seed=900 + label, png=False)
        test.append(name)
    (root / "training" / "README.txt").write_text("not an image\n")
    return {"train": sorted(train), "test": sorted(test)}


@pytest.fixture(scope="module")
def animals(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("animal10n")
    return root, make_animal10n(root)


def _module(root: Path, **kwargs) -> Animal10NDataModule:
    kwargs = {"num_workers": 0, "batch_size": 16, "image_size": 32, "resize_size": 32, **kwargs}
    dm = Animal10NDataModule(data_dir=str(root), **kwargs)
    with pytest.warns(UserWarning, match=r"holds \d+ images; ANIMAL-10N's (training|testing)/"):
        dm.setup("fit")
    return dm


def test_labels_come_from_the_file_names() -> None:
    assert label_of("3_01428.jpg") == 3 and label_of("0_00001.jpg") == 0
    assert label_of("9_x_y.png") == 9
    for name in ("cat_00001.jpg", "00001.jpg", "_3.jpg", "a3_1.jpg"):
        with pytest.raises(InputError, match="does not carry a label"):
            label_of(name)
    with pytest.raises(InputError, match="carries label 10, outside 0-9"):
        label_of("10_00001.jpg")


def test_reads_the_release_layout(animals) -> None:
    root, names = animals
    dm = _module(root)
    keys = [k.decode() for k in dm.data.train_images]
    assert keys == [f"training/{n}" for n in names["train"]]  # sorted, README.txt left out
    assert dm.noisy_labels.tolist() == [int(n.split("_")[0]) for n in names["train"]]
    assert torch.equal(dm.data.train_clean, torch.full((len(keys),), -1))
    assert dm.data.test_labels.tolist() == list(range(NUM_CLASSES))
    assert dm.transition is None and dm.input_shape == (3, 32, 32)
    info = dm.noise_info()
    assert info["type"] == "real" and info["clean_known"] == 0 and info["rate_actual"] is None
    assert info["rate_published"] == 0.08  # one name with CIFAR-N's published rates
    assert not any("published" in key for key in dm.data_info())
    batch = next(iter(dm.train_dataloader()))
    assert batch["image"].dtype == torch.uint8 and batch["image"].shape[1:] == (3, 32, 32)
    assert torch.equal(batch["label"], dm.noisy_labels[batch["index"]])
    assert Animal10NDataModule().input_shape == (3, 64, 64)


def test_a_file_without_a_label_is_named(animals, tmp_path: Path) -> None:
    root, _ = animals
    copy = tmp_path / "a10n"
    shutil.copytree(root, copy)
    write_image(copy / "testing" / "lynx_00003.jpg", 0, seed=1, png=False)
    with pytest.warns(UserWarning), pytest.raises(InputError, match="testing: 'lynx_00003.jpg'"):
        Animal10NDataModule(data_dir=str(copy), num_workers=0).setup("fit")


@pytest.mark.parametrize("missing", ["training", "testing"])
def test_a_missing_folder_is_named(animals, tmp_path: Path, missing: str) -> None:
    root, _ = animals
    copy = tmp_path / "a10n"
    shutil.copytree(root, copy)
    shutil.rmtree(copy / missing)
    with pytest.raises(MissingFileError) as exc:
        Animal10NDataModule(data_dir=str(copy), num_workers=0).setup("fit")
    listed = str(exc.value).split("missing:\n")[1].split("\nIt is")[0].splitlines()
    assert len(listed) == 1 and listed[0].strip().startswith(f"{copy / missing}/ (")
    assert "--data.data_dir" in str(exc.value)


def test_an_empty_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "testing").mkdir()
    with pytest.raises(InputError, match="training holds no .jpg/.jpeg/.png images"):
        Animal10NDataModule(data_dir=str(tmp_path), num_workers=0).setup("fit")


def test_two_epochs_of_the_preset(animals, run_cli, tmp_path: Path, tiny_backbones: None) -> None:
    """The preset (VGG-19-BN's place taken by the tiny stand-in) through the real CLI for 2
    epochs."""
    root, names = animals
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = run_cli(
            "fit",
            "--config",
            str(CONFIGS / "animal10n_ce.yaml"),
            "--data.data_dir",
            str(root),
            "--trainer.max_epochs",
            "2",
            "--trainer.accelerator",
            "cpu",
            "--data.batch_size",
            "8",
            *SMALL,
        )
    results = read_results(tmp_path)
    assert results["dataset"] == "animal10n" and results["backbone"] == "vgg19_bn"
    assert results["epochs"] == 2 and results["noise"]["type"] == "real"
    assert results["data"]["sizes"]["test"] == NUM_CLASSES
    assert 0.0 <= results["test_acc"] <= 1.0 and 0.0 <= results["test_acc_last"] <= 1.0
    assert cli.datamodule.augment is False  # SELFIE's protocol: no augmentation


def test_missing_folders_exit_2_before_training(tmp_path: Path, capsys) -> None:
    args = ["--config", str(CONFIGS / "animal10n_ce.yaml")]
    code, message = fit_error([*args, "--data.data_dir", str(tmp_path / "none")], tmp_path, capsys)
    assert code == 2 and "training/" in message and "testing/" in message
    code, message = fit_error([*args, "--data.noise_type", "symmetric"], tmp_path, capsys)
    assert code == 2 and "noise_type" in message  # real noise only
