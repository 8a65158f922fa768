"""Several augmented views of every training image (``--data.views K``): each view an
independent draw of the dataset's augmentation, under the batch key ``views``; one view (the
default) is the batch of before, and evaluation batches never have more."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from noisylabels.data import CIFAR10DataModule
from noisylabels.data.files import ImageFileDataset, collate_images, key_array
from noisylabels.data.module import augmented_views
from noisylabels.data.transforms import BatchTransform
from noisylabels.errors import InputError

from conftest import make_image_folder


def _cifar(cifar10_dir: Path, views: int) -> CIFAR10DataModule:
    dm = CIFAR10DataModule(data_dir=str(cifar10_dir), batch_size=16, views=views)
    dm.setup("fit")
    return dm


def _augmentations(image: torch.Tensor, transform: BatchTransform, padding: int = 4) -> list:
    """Every output the crop (``padding``) and flip can make of one uint8 image, normalized."""
    x = F.pad(image.float()[None] / 255.0, (padding,) * 4)[0]
    _, h, w = image.shape
    out = []
    for i in range(2 * padding + 1):
        for j in range(2 * padding + 1):
            window = x[:, i : i + h, j : j + w]
            for candidate in (window, window.flip(-1)):
                out.append((candidate[None] - transform.mean) / transform.std)
    return out


def _training(dm, batch: dict, training: bool = True) -> dict:
    dm.trainer = SimpleNamespace(training=training)
    return dm.on_after_batch_transfer(dict(batch), 0)


def test_views_are_independent_draws_of_the_augmentation(cifar10_dir: Path) -> None:
    dm = _cifar(cifar10_dir, views=3)
    raw = next(iter(dm.train_dataloader()))
    torch.manual_seed(0)
    batch = _training(dm, raw)
    views = batch["views"]
    assert views.shape == (3, *raw["image"].shape)
    assert batch["image"].data_ptr() == views[0].data_ptr()  # views[0] is "image"
    for b in range(len(raw["image"])):
        candidates = _augmentations(raw["image"][b], dm.transform)
        for k in range(3):  # each view is one crop and flip of this image
            assert any(torch.allclose(views[k, b][None], c, atol=1e-6) for c in candidates)
    different = [(views[0, b] != views[1, b]).any() for b in range(len(raw["image"]))]
    assert sum(bool(d) for d in different) >= len(different) - 1  # 1/162 to draw the same


def test_one_view_is_the_batch_of_before(cifar10_dir: Path) -> None:
    dm = _cifar(cifar10_dir, views=1)
    raw = next(iter(dm.train_dataloader()))
    torch.manual_seed(1)
    batch = _training(dm, raw)
    torch.manual_seed(1)
    expected = dm.transform(raw["image"], train=True)
    assert "views" not in batch
    assert torch.equal(batch["image"], expected)


def test_evaluation_batches_have_one_unaugmented_view(cifar10_dir: Path) -> None:
    dm = _cifar(cifar10_dir, views=2)
    raw = next(iter(dm.val_dataloader()))
    batch = _training(dm, raw, training=False)
    assert "views" not in batch
    assert torch.equal(batch["image"], dm.transform(raw["image"], train=False))


def test_views_must_be_positive() -> None:
    with pytest.raises(InputError, match="--data.views"):
        CIFAR10DataModule(views=0)


def test_file_images_are_cropped_once_per_view(tmp_path: Path) -> None:
    """Workers crop every decoded image once per view; the device flips and normalizes each."""
    root = make_image_folder(tmp_path, {"train": 3})
    keys = sorted(str(p.relative_to(root)) for p in root.rglob("*.*"))
    labels = torch.zeros(len(keys), dtype=torch.long)
    dataset = ImageFileDataset(
        root, key_array(keys), labels, labels, torch.arange(len(keys)), True, 8, 12, views=2
    )
    torch.manual_seed(0)
    raw = dataset.__getitems__(list(range(len(keys))))
    assert raw["image"].shape == (len(keys), 2, 3, 8, 8)
    assert any((raw["image"][b, 0] != raw["image"][b, 1]).any() for b in range(len(keys)))
    transform = BatchTransform((0.5,) * 3, (0.25,) * 3, augment=True, crop_padding=0)
    views = augmented_views(raw["image"], transform, 2)
    assert views.shape == (2, len(keys), 3, 8, 8)
    for k in range(2):
        for b in range(len(keys)):
            x = (raw["image"][b, k].float() / 255.0 - transform.mean[0]) / transform.std[0]
            assert torch.allclose(views[k, b], x) or torch.allclose(views[k, b], x.flip(-1))
    single = ImageFileDataset(
        root, key_array(keys), labels, labels, torch.arange(len(keys)), False, 8, 12, views=2
    )  # evaluation: one centre crop
    assert single.__getitems__([0, 1])["image"].shape == (2, 3, 8, 8)
    assert collate_images([], 8, 2)["image"].shape == (0, 2, 3, 8, 8)
