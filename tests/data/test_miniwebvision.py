"""Mini-WebVision on a tiny copy of WebVision 1.0's resized release written here: its list files
(``info/train_filelist_google.txt``, ``info/val_filelist.txt``, ``info/synsets.txt``), the
Google images under ``google/``, ``val_images_256/`` and ILSVRC2012's validation images under
``imagenet/val/`` (class-number folders as DivideMix reads them, or WordNet-id folders)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch

from noisylabels.data import MiniWebVisionDataModule
from noisylabels.data.files import read_label_kv
from noisylabels.data.webvision import NUM_CLASSES, first_classes, read_synsets
from noisylabels.errors import InputError, MissingFileError

from conftest import CONFIGS, fit_error, read_results, tiny_trainer, write_image

PER_CLASS = 3  # training images of each of the 50 classes: every class keeps one after the split
WNIDS = [f"n{1440764 + 17 * c:08d}" for c in range(1000)]
SMALL = ["--data.image_size", "16", "--data.resize_size", "18", "--data.num_workers", "0"]


def make_webvision(root: Path, imagenet: str = "number") -> dict:
    """Write a tiny WebVision tree under ``root``: per class of the first 50, ``PER_CLASS``
    Google images and one validation image, lines of other classes (50-999, without images),
    one ILSVRC2012 validation image per class in ``imagenet/val/<c>/`` (``imagenet="number"``)
    or ``imagenet/val/<wnid>/`` (``"wnid"``) or none (``None``). Returns facts for the asserts."""
    train_lines, train_keys, train_labels = [], [], []
    val_lines, val_names, val_labels = [], [], []
    for c in range(NUM_CLASSES):
        for i in range(PER_CLASS):
            key = f"google/q{c + 1:04d}/{i:08d}.jpg"
            write_image(root / key, c % 3, seed=c * 10 + i, png=False)
            train_lines.append(f"{key} {c}")
            train_keys.append(key)
            train_labels.append(c)
        if c % 10 == 0:  # another class's lines between them, left out of Mini-WebVision
            train_lines.append(f"google/q{900 + c:04d}/00000000.jpg {600 + c}")
            val_lines.append(f"val{900 + c:06d}.jpg {999 - c}")
        name = f"val{c:06d}.jpg"
        write_image(root / "val_images_256" / name, c % 3, seed=1000 + c, png=False)
        val_lines.append(f"{name} {c}")
        val_names.append(name)
        val_labels.append(c)
        if imagenet is not None:
            folder = str(c) if imagenet == "number" else WNIDS[c]
            path = root / "imagenet" / "val" / folder / f"ILSVRC2012_val_{c:08d}.JPEG"
            write_image(path, c % 3, seed=2000 + c, png=False)
    info = root / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "train_filelist_google.txt").write_text("".join(f"{x}\n" for x in train_lines))
    (info / "val_filelist.txt").write_text("".join(f"{x}\n" for x in val_lines))
    (info / "synsets.txt").write_text(
        "".join(f"{w} class {k}, a thing\n" for k, w in enumerate(WNIDS))
    )
    return {
        "train_keys": train_keys,
        "train_labels": train_labels,
        "val_names": val_names,
        "val_labels": val_labels,
    }


@pytest.fixture(scope="module")
def webvision(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("webvision") / "webvision"
    return root, make_webvision(root)


def _module(root: Path, **kwargs) -> MiniWebVisionDataModule:
    kwargs = {"num_workers": 0, "batch_size": 16, "image_size": 16, "resize_size": 18, **kwargs}
    dm = MiniWebVisionDataModule(data_dir=str(root), **kwargs)
    dm.setup("fit")
    return dm


def test_reads_the_release_layout(webvision) -> None:
    root, facts = webvision
    dm = _module(root)
    keys = [k.decode() for k in dm.data.train_images]
    assert keys == facts["train_keys"]  # the first 50 classes, in the list's order
    assert dm.noisy_labels.tolist() == facts["train_labels"]
    assert torch.equal(dm.data.train_clean, torch.full((len(keys),), -1))
    tests = [k.decode() for k in dm.data.test_images]
    assert tests == [f"val_images_256/{n}" for n in facts["val_names"]]
    assert dm.data.test_labels.tolist() == facts["val_labels"]
    assert dm.imagenet_labels.tolist() == list(range(NUM_CLASSES))
    assert dm.imagenet_keys[7] == "imagenet/val/7/ILSVRC2012_val_00000007.JPEG"
    assert dm.transition is None and dm.num_classes == 50
    info = dm.noise_info()
    assert info["type"] == "real" and info["rate_nominal"] is None
    assert info["clean_known"] == 0 and info["rate_actual"] is None
    assert len(dm.val_indices) == len(keys) // 10  # the noisy validation split
    assert dm.input_shape == (3, 16, 16)
    assert MiniWebVisionDataModule().input_shape == (3, 227, 227)  # DivideMix's crop
    batch = next(iter(dm.train_dataloader()))
    assert batch["image"].dtype == torch.uint8 and batch["image"].shape[1:] == (3, 16, 16)
    images = torch.cat([b["label"] for b in dm._loader(dm.imagenet_dataset(), 20, False)])
    assert images.tolist() == list(range(NUM_CLASSES))


def test_imagenet_folders_named_by_synset(tmp_path: Path) -> None:
    """ILSVRC2012's validation images in WordNet-id folders (torchvision's layout) are mapped
    to WebVision's classes by info/synsets.txt."""
    root = tmp_path / "webvision"
    make_webvision(root, imagenet="wnid")
    dm = _module(root)
    assert dm.imagenet_labels.tolist() == list(range(NUM_CLASSES))
    assert dm.imagenet_keys[3] == f"imagenet/val/{WNIDS[3]}/ILSVRC2012_val_00000003.JPEG"
    (root / "info" / "synsets.txt").unlink()
    with pytest.raises(MissingFileError, match="50 of the 50 classes.*synsets.txt"):
        _module(root)


def test_a_class_without_imagenet_images_is_named(tmp_path: Path) -> None:
    root = tmp_path / "webvision"
    make_webvision(root)
    shutil.rmtree(root / "imagenet" / "val" / "42")
    with pytest.raises(MissingFileError, match=r"1 of the 50 classes \(class 42 \(n"):
        _module(root)


@pytest.mark.parametrize(
    "missing",
    ["info/train_filelist_google.txt", "info/val_filelist.txt", "val_images_256", "google"],
)
def test_a_missing_list_or_folder_is_named(webvision, tmp_path: Path, missing: str) -> None:
    root, _ = webvision
    copy = tmp_path / "wv"
    shutil.copytree(root, copy)
    target = copy / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(MissingFileError) as exc:
        _module(copy)
    listed = str(exc.value).split("missing:\n")[1].split("\nIt is")[0].splitlines()
    assert len(listed) == 1 and listed[0].strip().startswith(str(target))
    assert "--data.data_dir" in str(exc.value)


def test_without_imagenet_the_second_test_is_optional(tmp_path: Path) -> None:
    root = tmp_path / "webvision"
    make_webvision(root, imagenet=None)
    with pytest.raises(MissingFileError, match="imagenet/val/.*--data.imagenet_test false"):
        _module(root)
    dm = _module(root, imagenet_test=False)
    assert dm.imagenet_labels is None and "imagenet_val" not in dm.data_info()
    assert not any(type(c).__name__ == "ImageNetTest" for c in dm.callbacks())


def test_list_lines_are_parsed_and_filtered(tmp_path: Path) -> None:
    path = tmp_path / "train_filelist_google.txt"
    path.write_text("google/q0001/a.jpg 0\n\ngoogle/q0700/b.jpg 699\ngoogle/q0002/c.jpg 49\n")
    keys, labels = first_classes(read_label_kv(path, 1000))
    assert keys == ["google/q0001/a.jpg", "google/q0002/c.jpg"] and labels.tolist() == [0, 49]
    path.write_text("google/q0001/a.jpg 0\ngoogle/q0001/b.jpg 1000\n")
    with pytest.raises(InputError, match=r"line 2: label 1000 is outside 0-999"):
        read_label_kv(path, 1000)
    path.write_text("google/q0001/a.jpg\n")
    with pytest.raises(InputError, match=r"line 1: expected 'KEY LABEL'"):
        read_label_kv(path, 1000)
    synsets = tmp_path / "synsets.txt"
    synsets.write_text("n01440764 tench, Tinca tinca\nn01443537 goldfish\n")
    assert read_synsets(synsets) == ["n01440764", "n01443537"]
    synsets.write_text("n01440764 tench\ntench n01443537\n")
    with pytest.raises(InputError, match="line 2: 'tench' is not a WordNet id"):
        read_synsets(synsets)


def test_a_train_list_without_the_first_classes_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "webvision"
    make_webvision(root)
    (root / "info" / "train_filelist_google.txt").write_text("google/q0999/a.jpg 998\n")
    with pytest.raises(InputError, match="lists no image of classes 0-49"):
        _module(root)


def test_two_epochs_of_the_dividemix_preset_test_on_both_sets(
    webvision, run_cli, tmp_path: Path, tiny_backbones: None
) -> None:
    """The preset through the real CLI for 2 epochs (the warm-up and one DivideMix epoch):
    results.json records WebVision's test accuracy as test_acc and ILSVRC2012's beside it, for
    the selected and the last epoch's model, logged as test/imagenet/acc(_last)."""
    root, _ = webvision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = run_cli(
            "fit",
            "--config",
            str(CONFIGS / "miniwebvision_dividemix.yaml"),
            "--data.data_dir",
            str(root),
            "--trainer.max_epochs",
            "2",
            "--trainer.accelerator",
            "cpu",
            "--data.batch_size",
            "32",
            *SMALL,
        )
    results = read_results(tmp_path)
    assert results["dataset"] == "miniwebvision" and results["method"] == "DivideMix"
    assert results["epochs"] == 2 and results["noise"]["type"] == "real"
    assert 0.0 <= results["test_acc"] <= 1.0 and 0.0 <= results["test_acc_last"] <= 1.0
    imagenet = results["data"]["imagenet_val"]
    assert imagenet["size"] == NUM_CLASSES and imagenet["skipped"] == 0
    assert 0.0 <= imagenet["test_acc"] <= 1.0 and 0.0 <= imagenet["test_acc_last"] <= 1.0
    assert results["data"]["sizes"]["test"] == NUM_CLASSES
    logged = cli.trainer.callback_metrics
    assert float(logged["test/imagenet/acc"]) == pytest.approx(imagenet["test_acc"])
    assert float(logged["test/acc"]) == pytest.approx(results["test_acc"])


def test_the_imagenet_test_scores_the_methods_prediction(webvision) -> None:
    """The second test counts the argmax of the model's predict_step against the class of each
    ILSVRC2012 image (in class order here): a model that always predicts class 7 is right on 1
    of 50."""
    import lightning as L

    root, _ = webvision
    dm = _module(root, eval_batch_size=16)

    class Always7(L.LightningModule):
        def predict_step(self, batch, batch_idx):
            scores = torch.zeros(len(batch["image"]), NUM_CLASSES)
            scores[:, 7] = 1.0
            return scores

    counts = dm.imagenet_counts(Always7(), tiny_trainer())
    assert counts.tolist() == [1, NUM_CLASSES]
    # as many batches as the main test runs: one under fast_dev_run, 2 of 16 images here
    assert dm.imagenet_counts(Always7(), tiny_trainer(fast_dev_run=True)).tolist() == [1, 16]
    assert dm.imagenet_counts(Always7(), tiny_trainer(limit_test_batches=2)).tolist() == [1, 32]


def test_missing_files_exit_2_before_training(tmp_path: Path, capsys) -> None:
    args = ["--config", str(CONFIGS / "miniwebvision_dividemix.yaml")]
    code, message = fit_error([*args, "--data.data_dir", str(tmp_path / "none")], tmp_path, capsys)
    assert code == 2
    for name in ("train_filelist_google.txt", "val_filelist.txt", "val_images_256", "imagenet/val"):
        assert name in message
    code, message = fit_error([*args, "--data.noise_type", "symmetric"], tmp_path, capsys)
    assert code == 2 and "noise_type" in message  # real noise only
