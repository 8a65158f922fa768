"""ImageFolderDataModule on tiny trees of JPEG and PNG files written here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from noisylabels.data import ImageFolderDataModule
from noisylabels.errors import InputError, MissingFileError
from noisylabels.noise import check_transition

from conftest import CONFIGS, SORTED, make_image_folder, read_results, write_image


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("imgs"), {"train": 20, "test": 4})


def _module(root: Path, **kwargs) -> ImageFolderDataModule:
    kwargs = {"num_workers": 0, "batch_size": 8, "image_size": 16, "resize_size": 18, **kwargs}
    dm = ImageFolderDataModule(data_dir=str(root), **kwargs)
    dm.setup("fit")
    return dm


def test_reads_the_folder_layout(folder: Path) -> None:
    dm = _module(folder, noise_type="none")
    assert dm.class_names == SORTED and dm.num_classes == 3
    assert dm.input_shape == (3, 16, 16)
    keys = [k.decode() for k in dm.data.train_images]
    assert keys[0] == "train/cat/000.jpg" and keys[1] == "train/cat/001.png"
    expected = torch.tensor([SORTED.index(k.split("/")[1]) for k in keys])
    assert torch.equal(dm.clean_labels, expected)
    assert torch.equal(dm.noisy_labels, expected)  # noise_type none
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"image", "label", "clean_label", "index"}
    assert batch["image"].dtype == torch.uint8 and batch["image"].shape[1:] == (3, 16, 16)
    assert torch.equal(batch["label"], dm.noisy_labels[batch["index"]])
    test = [b for b in dm.test_dataloader()]
    labels = torch.cat([b["label"] for b in test])
    assert len(labels) == 3 * 4 and torch.equal(labels, torch.cat([b["clean_label"] for b in test]))
    assert dm.skipped_images == 0  # JPEG, PNG and grayscale PNG all decode


def test_synthetic_noise_applies_like_to_any_dataset(folder: Path) -> None:
    dm = _module(folder, noise_type="symmetric", noise_rate=0.4, noise_seed=3)
    again = _module(folder, noise_type="symmetric", noise_rate=0.4, noise_seed=3)
    check_transition(dm.transition, 3)
    assert torch.equal(dm.noisy_labels, again.noisy_labels)
    assert torch.equal(dm.val_indices, again.val_indices) and len(dm.val_indices) == 6
    assert (dm.noisy_labels != dm.clean_labels).any()
    info = dm.noise_info()
    assert info["type"] == "symmetric" and info["rate_nominal"] == 0.4 and info["seed"] == 3
    # instance-dependent noise reads the decoded pixels of every training image
    inst = _module(folder, noise_type="instance", noise_rate=0.3)
    assert inst.transition is None
    features = inst.noise_features(inst.data.train_images)
    assert features.shape == (60, 3 * 16 * 16) and features.dtype == torch.uint8
    assert int(features.float().std()) > 0


def test_semantic_noise_needs_a_flip_map(folder: Path) -> None:
    with pytest.raises(InputError, match="semantic_flips"):
        ImageFolderDataModule(data_dir=str(folder), noise_type="semantic")


def test_val_folder_is_the_clean_validation_set(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path, {"train": 6, "val": 2, "test": 2})
    dm = _module(root)
    assert dm.clean_validation and len(dm.val_indices) == 0
    batch = next(iter(dm.val_dataloader()))
    assert torch.equal(batch["label"], batch["clean_label"]) and len(batch["label"]) == 6
    held_out = _module(root, use_val_folder=False)
    assert not held_out.clean_validation and len(held_out.val_indices) == 1


def test_missing_layout_is_spelled_out(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match=r"train/<class>") as err:
        ImageFolderDataModule(data_dir=str(tmp_path))
    assert "--data.data_dir" in str(err.value)


def test_unknown_or_too_few_classes_are_refused(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "a", {"train": 2, "test": 1})
    write_image(root / "test" / "yak" / "0.jpg", 0, 0, png=False)
    with pytest.raises(InputError, match=r"test has class folder\(s\) \['yak'\]"):
        _module(root)
    single = make_image_folder(tmp_path / "b", {"train": 2, "test": 1}, classes=("cat",))
    with pytest.raises(InputError, match="at least 2"):
        ImageFolderDataModule(data_dir=str(single))


def test_cli_fit_on_an_image_folder(folder: Path, run_cli, tmp_path: Path) -> None:
    run_cli(
        "fit",
        "--config",
        str(CONFIGS / "quickstart.yaml"),
        "--data",
        "noisylabels.data.ImageFolderDataModule",
        "--data.data_dir",
        str(folder),
        "--data.image_size",
        "16",
        "--data.resize_size",
        "16",
        "--data.num_workers",
        "0",
        "--trainer.fast_dev_run",
        "1",
    )
    results = read_results(tmp_path)
    assert results["dataset"] == "image_folder"
    assert results["noise"]["type"] == "symmetric" and results["noise"]["rate_nominal"] == 0.4
    assert results["test_acc"] is not None
