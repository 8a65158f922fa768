"""Food-101N on a tiny copy of CleanNet's release and of Food-101 written here, side by side as
they unpack: ``Food-101N_release/meta/{classes.txt,imagelist.tsv,verified_train.tsv,
verified_val.tsv}`` with ``Food-101N_release/images/<class>/``, and ``food-101/meta/test.txt``
with ``food-101/images/<class>/``."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch

from noisylabels.data import Food101NDataModule
from noisylabels.data.food101n import NUM_CLASSES, read_classes, read_tsv, read_verification
from noisylabels.errors import InputError, MissingFileError

from conftest import CONFIGS, fit_error, read_results, write_image

NAMES = [f"dish_{k:03d}" for k in range(NUM_CLASSES)]  # written in this order, not sorted
NAMES[0], NAMES[1] = NAMES[1], NAMES[0]
PER_CLASS = 3
SMALL = ["--data.image_size", "16", "--data.resize_size", "18", "--data.num_workers", "0"]


def make_food101n(root: Path) -> dict:
    """Write both releases under ``root``: ``PER_CLASS`` training images per class and one
    test image per class; the first 40 training images verified (every fourth of them wrong),
    plus a verification of a key the image list does not have; the last class's images
    verified in verified_val.tsv. Returns facts for the asserts."""
    release, food = root / "Food-101N_release", root / "food-101"
    keys, labels = [], []
    for k, name in enumerate(NAMES):
        for i in range(PER_CLASS):
            key = f"{name}/{k:03d}{i}abcdef.jpg"
            write_image(release / "images" / key, k % 3, seed=k * 10 + i, png=False)
            keys.append(key)
            labels.append(k)
    test_names = [f"{name}/{100000 + k}" for k, name in enumerate(NAMES)]
    for k, name in enumerate(test_names):
        write_image(food / "images" / f"{name}.jpg", k % 3, seed=5000 + k, png=False)
    meta = release / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "classes.txt").write_text("class_name\n" + "".join(f"{n}\n" for n in NAMES))
    (meta / "imagelist.tsv").write_text("class_name/key\n" + "".join(f"{k}\n" for k in keys))
    verified = {i: int(i % 4 != 0) for i in range(40)}
    header = "class_name/key\tverification_label\n"
    lines = [f"{keys[i]}\t{v}\n" for i, v in verified.items()]
    (meta / "verified_train.tsv").write_text(header + "".join(lines) + "dish_005/gone.jpg\t1\n")
    last = range(len(keys) - PER_CLASS, len(keys))
    verified.update({i: 1 for i in last})
    (meta / "verified_val.tsv").write_text(header + "".join(f"{keys[i]}\t1\n" for i in last))
    (food / "meta").mkdir(parents=True, exist_ok=True)
    (food / "meta" / "test.txt").write_text("".join(f"{n}\n" for n in test_names))
    return {"keys": keys, "labels": labels, "test_names": test_names, "verified": verified}


@pytest.fixture(scope="module")
def food(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("food")
    return root, make_food101n(root)


def _module(root: Path, **kwargs) -> Food101NDataModule:
    kwargs = {"num_workers": 0, "batch_size": 16, "image_size": 16, "resize_size": 18, **kwargs}
    dm = Food101NDataModule(data_dir=str(root), **kwargs)
    dm.setup("fit")
    return dm


def test_reads_both_releases(food) -> None:
    root, facts = food
    dm = _module(root)
    keys = [k.decode() for k in dm.data.train_images]
    assert keys == [f"Food-101N_release/images/{k}" for k in facts["keys"]]
    assert dm.noisy_labels.tolist() == facts["labels"]  # the class folder, by classes.txt
    assert dm.class_names == NAMES and dm.noisy_labels[0] == 0  # classes.txt's order
    assert torch.equal(dm.data.train_clean, torch.full((len(keys),), -1))
    tests = [k.decode() for k in dm.data.test_images]
    assert tests == [f"food-101/images/{n}.jpg" for n in facts["test_names"]]
    assert dm.data.test_labels.tolist() == list(range(NUM_CLASSES))
    assert dm.transition is None and len(dm.val_indices) == len(keys) // 10
    batch = next(iter(dm.test_dataloader()))
    assert batch["image"].shape[1:] == (3, 16, 16) and dm.skipped_images == 0


def test_the_verification_labels_measure_the_noise(food) -> None:
    root, facts = food
    dm = _module(root)
    verified = facts["verified"]
    expected = torch.full((len(facts["keys"]),), -1)
    for i, v in verified.items():
        expected[i] = v
    assert torch.equal(dm.verification, expected)
    wrong = sum(1 for v in verified.values() if v == 0)
    info = dm.noise_info()
    assert info["type"] == "real" and info["rate_nominal"] is None
    assert info["rate_actual"] == pytest.approx(wrong / len(verified)) == dm.rate_actual
    assert info["verified"] == {"images": len(verified), "wrong": wrong, "unmatched": 1}
    assert info["clean_known"] == 0  # a verification says a label is wrong, not which is right
    state = dm.noise_state()
    assert (
        torch.equal(state["verification"], expected) and state["rate_actual"] == info["rate_actual"]
    )


def test_list_files_are_parsed_with_their_headers(tmp_path: Path) -> None:
    classes = tmp_path / "classes.txt"
    classes.write_text("class_name\napple_pie\nbaby_back_ribs\n")
    assert read_classes(classes) == ["apple_pie", "baby_back_ribs"]
    tsv = tmp_path / "verified_train.tsv"
    tsv.write_text("class_name/key\tverification_label\napple_pie/a.jpg\t1\napple_pie/b.jpg\t0\n")
    assert read_tsv(tsv, 2) == [(2, ["apple_pie/a.jpg", "1"]), (3, ["apple_pie/b.jpg", "0"])]
    verification = torch.full((3,), -1)
    read, unmatched = read_verification(tsv, {"apple_pie/b.jpg": 2}, verification)
    assert (read, unmatched) == (2, 1) and verification.tolist() == [-1, -1, 0]
    tsv.write_text("class_name/key\tverification_label\napple_pie/a.jpg\tyes\n")
    with pytest.raises(InputError, match=r"line 2: verification label 'yes' is not 0 or 1"):
        read_verification(tsv, {}, verification)
    tsv.write_text("class_name/key\tverification_label\napple_pie/a.jpg\n")
    with pytest.raises(InputError, match=r"line 2: expected KEY<tab>VERIFICATION"):
        read_tsv(tsv, 2)


def _copy(root: Path, to: Path) -> Path:
    shutil.copytree(root, to, symlinks=True)
    return to


def test_a_key_outside_the_classes_names_its_line(food, tmp_path: Path) -> None:
    root, _ = food
    copy = _copy(root, tmp_path / "food")
    with open(copy / "Food-101N_release/meta/imagelist.tsv", "a") as fh:
        fh.write("pizza/x.jpg\n")
    n = len((copy / "Food-101N_release/meta/imagelist.tsv").read_text().splitlines())
    with pytest.raises(InputError, match=rf"imagelist.tsv, line {n}: 'pizza/x.jpg' does not begin"):
        _module(copy)
    copy = _copy(root, tmp_path / "food2")
    (copy / "Food-101N_release/meta/classes.txt").write_text("class_name\napple_pie\n")
    with pytest.raises(InputError, match="lists 1 distinct class names; Food-101N has 101"):
        _module(copy)


@pytest.mark.parametrize(
    "missing",
    [
        "Food-101N_release/meta/imagelist.tsv",
        "Food-101N_release/meta/verified_val.tsv",
        "Food-101N_release/images",
        "food-101/meta/test.txt",
        "food-101/images",
    ],
)
def test_a_missing_file_is_named(food, tmp_path: Path, missing: str) -> None:
    root, _ = food
    copy = _copy(root, tmp_path / "food")
    target = copy / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(MissingFileError) as exc:
        _module(copy)
    listed = str(exc.value).split("missing:\n")[1].split("\nUnpack")[0].splitlines()
    assert len(listed) == 1 and listed[0].strip().startswith(str(target))
    assert "--data.data_dir" in str(exc.value)


def test_two_epochs_of_the_preset(food, run_cli, tmp_path: Path, tiny_backbones: None) -> None:
    """The preset through the real CLI for 2 epochs: trained on the noisy list, tested on
    Food-101's test set, the noise measured on the verified images."""
    root, facts = food
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_cli(
            "fit",
            "--config",
            str(CONFIGS / "food101n_ce.yaml"),
            "--data.data_dir",
            str(root),
            "--model.network.pretrained",
            "false",
            "--trainer.max_epochs",
            "2",
            "--trainer.accelerator",
            "cpu",
            *SMALL,
        )
    results = read_results(tmp_path)
    assert results["dataset"] == "food101n" and results["epochs"] == 2
    assert results["data"]["sizes"] == {
        "train": len(facts["keys"]) - len(facts["keys"]) // 10,
        "val": len(facts["keys"]) // 10,
        "test": NUM_CLASSES,
    }
    noise = results["noise"]
    wrong = sum(1 for v in facts["verified"].values() if v == 0)
    assert noise["type"] == "real" and noise["verified"]["wrong"] == wrong
    assert noise["rate_actual"] == pytest.approx(wrong / len(facts["verified"]))
    assert 0.0 <= results["test_acc"] <= 1.0 and 0.0 <= results["test_acc_last"] <= 1.0


def test_missing_files_exit_2_before_training(tmp_path: Path, capsys) -> None:
    args = ["--config", str(CONFIGS / "food101n_ce.yaml"), "--model.network.pretrained", "false"]
    code, message = fit_error([*args, "--data.data_dir", str(tmp_path / "none")], tmp_path, capsys)
    assert code == 2
    for name in ("imagelist.tsv", "verified_train.tsv", "classes.txt", "food-101/meta/test.txt"):
        assert name in message
    code, message = fit_error([*args, "--data.noise_type", "symmetric"], tmp_path, capsys)
    assert code == 2 and "noise_type" in message  # real noise only
