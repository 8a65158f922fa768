"""ImageFolderDataModule on tiny trees of JPEG and PNG files written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from noisylabels.data import ImageFolderDataModule
from noisylabels.errors import InputError, MissingFileError
from noisylabels.noise import check_transition

from conftest import CONFIGS, SORTED, make_image_folder, write_image


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
    cli = run_cli(
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
    results = cli.results  # fast_dev_run: the results, but no results.json
    assert results["dataset"] == "image_folder"
    assert results["noise"]["type"] == "symmetric" and results["noise"]["rate_nominal"] == 0.4
    assert results["test_acc"] is not None


def test_data_help_shows_every_inherited_option(capsys) -> None:
    """The module takes the options of the modules it derives from as keywords; the help
    still shows each of them, described, beside its own, and its own batch-size default."""
    import inspect

    from noisylabels.cli import run
    from noisylabels.data import ImageFileDataModule, NoisyDataModule

    with pytest.raises(SystemExit) as exc:
        run(["fit", "--data.help", "noisylabels.data.ImageFolderDataModule"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    options = {"use_val_folder"}
    for base in (NoisyDataModule, ImageFileDataModule):
        options |= set(inspect.signature(base.__init__).parameters) - {"self", "kwargs"}
    for name in sorted(options):
        assert f"--data.{name} " in out, name
    assert "(type: int, default: 64)" in out  # batch_size, its own default
    assert "crop size fed to the network" in out  # image_size, described
    for kind in ("symmetric", "pair", "instance", "file", "real"):
        assert f"``{kind}``" in out  # --data.noise_type lists the noise kinds


def test_download_is_refused_naming_the_option(folder: Path) -> None:
    dm = ImageFolderDataModule(data_dir=str(folder), download=True)
    with pytest.raises(InputError, match="--data.download"):
        dm.prepare_data()


# --- unreadable images ------------------------------------------------------------------------


def _break(*paths: Path) -> None:
    for path in paths:
        path.write_bytes(b"\xff\xd8\xff\xe0 not really an image")


def _fit(run_cli, root: Path, *extra: str) -> Any:
    return run_cli(
        "fit",
        "--config",
        str(CONFIGS / "quickstart.yaml"),
        "--data",
        "noisylabels.data.ImageFolderDataModule",
        "--data.data_dir",
        str(root),
        "--data.image_size",
        "16",
        "--data.resize_size",
        "16",
        "--data.num_workers",
        "0",
        *extra,
    )


def test_unreadable_images_are_counted_per_split(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path, {"train": 10, "test": 4})
    _break(root / "train/cat/000.jpg", root / "train/emu/004.jpg", root / "test/dog/002.jpg")
    dm = _module(root, noise_type="none", batch_size=4, eval_batch_size=4)
    keys = [k.decode() for k in dm.data.train_images]
    bad = torch.tensor([keys.index("train/cat/000.jpg"), keys.index("train/emu/004.jpg")])
    with pytest.warns(UserWarning, match="skipping unreadable or corrupt image"):
        for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
            assert all(len(batch["index"]) > 0 for batch in loader)
    in_val = torch.isin(bad, dm.val_indices)
    info = dm.data_info()
    assert info["skipped_images"] == {
        "train": int((~in_val).sum()),
        "val": int(in_val.sum()),
        "test": 1,
    }
    assert info["sizes"] == {"train": 27, "val": 3, "test": 12}
    with pytest.warns(UserWarning, match="3 unreadable or corrupt image_folder image"):
        assert dm.report_skipped("epoch 0") == 3
    assert dm.report_skipped("epoch 1") == 0


def test_an_evaluation_batch_of_unreadable_images_is_dropped(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path, {"train": 2, "test": 2})
    _break(*sorted((root / "test" / "cat").iterdir()))  # the first batch of two
    dm = _module(root, eval_batch_size=2)
    with pytest.warns(UserWarning, match="skipping unreadable"):
        batches = list(dm.test_dataloader())
    assert [len(b["index"]) for b in batches] == [2, 2]
    assert torch.cat([b["label"] for b in batches]).tolist() == [1, 1, 2, 2]


def test_a_tree_without_one_readable_image_says_so(tmp_path: Path, run_cli) -> None:
    root = make_image_folder(tmp_path / "imgs", {"train": 10, "test": 2})
    _break(*(p for p in root.rglob("*") if p.is_file()))
    dm = _module(root)
    decoded = r"none of \d+ images tried under .* could be decoded; check that --data.data_dir"
    with pytest.warns(UserWarning), pytest.raises(InputError, match=decoded):
        next(iter(dm.val_dataloader()))
    with pytest.warns(UserWarning), pytest.raises(InputError, match=decoded):
        next(iter(dm.train_dataloader()))
    # a run stops with that message (validation's sanity check reads images first)
    with pytest.warns(UserWarning), pytest.raises(InputError, match=decoded):
        _fit(run_cli, root, "--trainer.max_epochs", "1")


def test_a_test_with_too_many_unreadable_images_is_refused(tmp_path: Path, run_cli) -> None:
    root = make_image_folder(tmp_path / "imgs", {"train": 6, "test": 4})
    _break(root / "test/dog/002.jpg")  # 1 of 12 test images: 8.33 %
    refused = str(tmp_path / "refused")
    with pytest.warns(UserWarning), pytest.raises(InputError) as err:
        _fit(run_cli, root, "--trainer.fast_dev_run", "1", "--trainer.default_root_dir", refused)
    message = str(err.value)
    assert "1 of the 12 image_folder test images (8.33%) could not be read" in message
    assert "--data.max_skipped_fraction 0.01" in message
    with pytest.warns(UserWarning) as record:
        cli = _fit(
            run_cli, root, "--trainer.fast_dev_run", "1", "--data.max_skipped_fraction", "0.1"
        )
    loud = [str(w.message) for w in record if "could not be read" in str(w.message)]
    assert loud == [
        "1 of the 12 image_folder test images (8.33%) could not be read and were left out of "
        "the test accuracy"
    ]
    results = cli.results
    assert results["data"]["skipped_images"] == {"train": 0, "val": 0, "test": 1}
    assert results["test_acc"] is not None
