"""Data modules: noise from the noise seed, the split, batches, transforms and bad input."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import lightning as L
import pytest
import torch

from noisylabels.data import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    DigitsDataModule,
    MNISTDataModule,
    random_crop,
    random_hflip,
)
from noisylabels.data.cifar import CIFAR100_COARSE
from noisylabels.data.transforms import BatchTransform
from noisylabels.errors import InputError
from noisylabels.noise import (
    check_transition,
    instance_dependent_noise,
    instance_flip_probabilities,
    make_noisy_labels,
    semantic_transition,
)

from conftest import CONFIGS, make_cifar, make_mnist, tiny_trainer


def test_digits_split_batches_and_noise() -> None:
    dm = DigitsDataModule(noise_type="symmetric", noise_rate=0.4, noise_seed=3, batch_size=32)
    dm.setup("fit")
    n_train = len(dm.clean_labels)
    assert n_train + len(dm.data.test_labels) == 1797
    assert len(dm.train_indices) + len(dm.val_indices) == n_train
    assert len(dm.val_indices) == int(n_train * 0.1)
    assert not set(dm.train_indices.tolist()) & set(dm.val_indices.tolist())
    assert abs(dm.rate_actual - 0.4) < 0.05
    check_transition(dm.transition, 10)
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"image", "label", "clean_label", "index"}
    assert batch["image"].dtype == torch.uint8 and batch["image"].shape[1:] == (1, 8, 8)
    assert torch.equal(batch["label"], dm.noisy_labels[batch["index"]])
    assert torch.equal(batch["clean_label"], dm.clean_labels[batch["index"]])
    test = next(iter(dm.test_dataloader()))
    assert torch.equal(test["label"], test["clean_label"])  # the test set is clean


def test_training_seed_never_changes_noisy_labels() -> None:
    def labels(train_seed: int, noise_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        L.seed_everything(train_seed)
        torch.rand(100)  # advance the global RNG as training would
        dm = DigitsDataModule(noise_rate=0.3, noise_seed=noise_seed)
        dm.setup("fit")
        return dm.noisy_labels, dm.val_indices

    a, va = labels(1, 0)
    b, vb = labels(2, 0)
    c, _ = labels(1, 5)
    assert torch.equal(a, b) and torch.equal(va, vb)
    assert not torch.equal(a, c)


def test_every_epoch_covers_the_training_split_once() -> None:
    dm = DigitsDataModule(batch_size=50)
    dm.setup("fit")
    seen = torch.cat([b["index"] for b in dm.train_dataloader()])
    assert torch.equal(seen.sort().values, dm.train_indices)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"noise_rate": 1.0}, "noise_rate"),
        ({"noise_rate": -0.1}, "noise_rate"),
        ({"noise_type": "pair", "noise_rate": 0.5}, "pair noise"),
        ({"noise_type": "gaussian"}, "unknown noise_type"),
        ({"noise_type": "file"}, "noise_file"),
        ({"noise_type": "real"}, "ships with"),
        ({"val_fraction": 1.0}, "val_fraction"),
    ],
)
def test_bad_noise_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DigitsDataModule(**kwargs)


# What each data module declares for semantic noise (Patrini et al. 2017), and the labels the
# flips gave before they moved from noise/ into the data modules: sha256 of the int64 noisy
# labels of clean = arange(2000) % C, rate 0.3, noise seed 5.
CIFAR100_NEXT = (
    51, 32, 11, 42, 30, 20, 7, 14, 13, 10, 16, 35, 17, 48, 18, 19, 28, 37, 24, 21,
    25, 31, 39, 33, 6, 84, 45, 29, 61, 44, 55, 38, 67, 49, 63, 46, 50, 68, 15, 40,
    86, 69, 43, 88, 78, 77, 98, 52, 58, 60, 65, 53, 56, 57, 62, 72, 59, 83, 90, 96,
    71, 9, 70, 64, 66, 74, 75, 73, 76, 81, 82, 23, 95, 91, 80, 34, 12, 79, 93, 99,
    36, 85, 92, 0, 94, 89, 87, 22, 97, 41, 8, 1, 54, 27, 5, 4, 47, 3, 2, 26,
)  # fmt: skip
SEMANTIC_LABELS = {
    MNISTDataModule: "df28b7dfe7f4b7d5b749cf486989d82eeb9d56e15ecca47dbe6cc9771dfe0163",
    CIFAR10DataModule: "69c01f1db1bc6910aacfde8619fa701f13ee4702484494a68ea9dbaa4fc5e274",
    CIFAR100DataModule: "c41bb91525b233e61c8354acd59709c90efe6b2ed0e83ab553f16c3f9fbd5365",
}


def test_each_dataset_declares_its_semantic_flips() -> None:
    assert MNISTDataModule.semantic_flips == {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}
    assert DigitsDataModule.semantic_flips == MNISTDataModule.semantic_flips
    # truck -> automobile, bird -> airplane, deer -> horse, cat <-> dog
    assert CIFAR10DataModule.semantic_flips == {9: 1, 2: 0, 4: 7, 3: 5, 5: 3}
    flips = CIFAR100DataModule.semantic_flips
    assert [flips[k] for k in range(100)] == list(CIFAR100_NEXT)
    coarse = torch.tensor(CIFAR100_COARSE)
    assert torch.bincount(coarse).tolist() == [5] * 20
    assert all(coarse[k] == coarse[flips[k]] for k in range(100))  # within the super-class
    T = semantic_transition(flips, 100, 0.3)
    assert torch.allclose(T.diagonal(), torch.full((100,), 0.7))  # every class has a partner


@pytest.mark.parametrize("module", list(SEMANTIC_LABELS), ids=lambda m: m.name)
def test_semantic_noise_gives_the_same_labels_as_before(module) -> None:
    c = module.num_classes
    clean = torch.arange(2000) % c
    noisy, T = make_noisy_labels(clean, "semantic", 0.3, c, seed=5, flips=module.semantic_flips)
    assert hashlib.sha256(noisy.numpy().tobytes()).hexdigest() == SEMANTIC_LABELS[module]
    assert torch.equal(T, semantic_transition(module.semantic_flips, c, 0.3))


def test_instance_noise_is_instance_dependent_at_the_pixel_scale() -> None:
    """PTD's generator (Xia et al. 2020) on raw 0-255 pixels: softmax(x W[y]) is nearly one-hot,
    so each sample has its own flip target; the class-level flips are far from uniform."""
    rate, seed = 0.3, 1
    dm = DigitsDataModule(noise_type="instance", noise_rate=rate, noise_seed=seed)
    dm.setup("fit")
    clean = dm.clean_labels
    features = dm.noise_features(dm.data.train_images)
    assert features.dtype == torch.uint8 and int(features.max()) > 200  # raw pixel scale
    again = instance_dependent_noise(features, clean, 10, rate, torch.Generator().manual_seed(seed))
    assert torch.equal(dm.noisy_labels, again)  # the data module feeds the raw pixels
    probs = instance_flip_probabilities(
        features, clean, 10, rate, torch.Generator().manual_seed(seed)
    )
    assert torch.allclose(probs.sum(dim=1), torch.ones(len(clean), dtype=probs.dtype))
    flip = probs.clone()
    flip[torch.arange(len(clean)), clean] = 0
    flip = flip / flip.sum(dim=1, keepdim=True)  # where a sample flips to, given it flips
    assert flip.max(dim=1).values.mean() > 0.9  # (0.3 with unit-length features)
    target = flip.argmax(dim=1)
    distinct = [len(target[clean == k].unique()) for k in range(10)]
    assert sum(d >= 2 for d in distinct) >= 8  # same class, different flip targets
    assert abs(dm.rate_actual - rate) < 0.05
    assert dm.transition is None
    T = dm.noise_state()["empirical_transition"]
    check_transition(T, 10)
    off = T.clone().fill_diagonal_(0)
    share = off.max(dim=1).values / off.sum(dim=1)  # largest flip target's share of a row
    assert share.mean() > 0.4  # uniform flips over 9 classes would give about 0.2


def test_the_run_record_saves_the_measured_T_where_there_is_no_true_T(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from noisylabels.noise import load_transition
    from noisylabels.run import RunRecorder

    for noise_type, name in (("instance", "empirical_transition.csv"), ("pair", "transition.csv")):
        dm = DigitsDataModule(noise_type=noise_type, noise_rate=0.3)
        dm.setup("fit")
        out = tmp_path / noise_type
        trainer = SimpleNamespace(
            datamodule=dm, is_global_zero=True, loggers=[], default_root_dir=str(out)
        )
        RunRecorder()._write_noise(trainer)
        assert sorted(p.name for p in out.iterdir()) == sorted([name, "noise.pt"])
        expected = dm.noise_state()[
            "empirical_transition" if noise_type == "instance" else "transition"
        ]
        assert torch.allclose(load_transition(out / name, 10), expected)


def test_mnist_reads_torchvision_layout(mnist_dir: Path) -> None:
    dm = MNISTDataModule(data_dir=str(mnist_dir), noise_type="pair", noise_rate=0.3)
    dm.setup("fit")
    assert dm.data.train_images.shape == (320, 1, 28, 28)
    assert dm.data.test_images.shape == (64, 1, 28, 28)
    assert abs(dm.rate_actual - 0.3) < 0.1


def test_missing_mnist_says_what_to_put_where(tmp_path: Path) -> None:
    dm = MNISTDataModule(data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        dm.setup("fit")
    msg = str(err.value)
    assert "train-images-idx3-ubyte" in msg and "MNIST/raw" in msg
    assert "--data.download true" in msg


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda b: b[: len(b) // 2], r"truncated or corrupt: its header announces 320 x 28 x 28"),
        (lambda b: b[:10], r"has 10 bytes, fewer than an MNIST images header needs"),
        (lambda b: b"\x1f\x8b" + b[2:], r"not an MNIST images file .*gzip"),
    ],
    ids=["truncated", "header", "gzip"],
)
def test_damaged_mnist_file_is_named(tmp_path: Path, damage, match: str) -> None:
    root = make_mnist(tmp_path)
    path = root / "MNIST" / "raw" / "train-images-idx3-ubyte"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(InputError, match=match) as err:
        MNISTDataModule(data_dir=str(root)).setup("fit")
    assert str(path) in str(err.value) and "--data.download true" in str(err.value)


@pytest.mark.parametrize(
    "content, match",
    [
        (None, r"data_batch_3 is truncated or not a CIFAR batch"),
        (b"this is not a pickle", r"data_batch_3 is truncated or not a CIFAR batch"),
        ({"labels": [1]}, r"data_batch_3 is not a CIFAR batch: expected a dict with 'data'"),
        ({"data": [1, 2, 3], "labels": [1]}, r"3 pixel values for 1 labels"),
    ],
    ids=["truncated", "garbage", "keys", "size"],
)
def test_damaged_cifar_batch_is_named(tmp_path: Path, content, match: str) -> None:
    root = make_cifar(tmp_path)
    path = root / "cifar-10-batches-py" / "data_batch_3"
    if content is None:
        path.write_bytes(path.read_bytes()[:1000])
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_bytes(pickle.dumps(content))
    with pytest.raises(InputError, match=match):
        CIFAR10DataModule(data_dir=str(root)).setup("fit")


def test_cifar_reads_pickles(cifar10_dir: Path, cifar100_dir: Path) -> None:
    dm10 = CIFAR10DataModule(data_dir=str(cifar10_dir), noise_type="semantic", noise_rate=0.4)
    dm10.setup("fit")
    assert dm10.data.train_images.shape == (200, 3, 32, 32)
    dm100 = CIFAR100DataModule(data_dir=str(cifar100_dir), noise_rate=0.2)
    dm100.setup("fit")
    assert dm100.data.train_images.shape == (400, 3, 32, 32)
    assert dm100.transition.shape == (100, 100)


def test_missing_cifar_lists_the_batches(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        CIFAR10DataModule(data_dir=str(tmp_path)).setup("fit")
    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        CIFAR100DataModule(data_dir=str(tmp_path)).setup("fit")


def test_noise_file_round_trip(tmp_path: Path) -> None:
    dm = DigitsDataModule(noise_rate=0.3, noise_seed=7)
    dm.setup("fit")
    torch.save(dm.noise_state(), tmp_path / "noise.pt")
    path = str(tmp_path / "noise.pt")
    again = DigitsDataModule(noise_type="file", noise_file=path, noise_seed=7)  # same split
    again.setup("fit")
    assert torch.equal(again.noisy_labels, dm.noisy_labels)
    assert torch.equal(again.val_indices, dm.val_indices) and again.transition is None
    info = again.noise_info()
    assert info["type"] == "file" and info["file"] == str(tmp_path / "noise.pt")
    assert info["key"] is None and info["rate_nominal"] is None
    assert info["rate_actual"] == pytest.approx(dm.rate_actual)
    (tmp_path / "short.txt").write_text("1\n2\n3\n")
    bad = DigitsDataModule(noise_type="file", noise_file=str(tmp_path / "short.txt"))
    with pytest.raises(ValueError, match="has 3 labels"):
        bad.setup("fit")


def test_training_and_validation_never_measure_the_noise_rate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Methods read the data facts per validation batch: those give the label source's nominal
    rate, and the measured one (a pass over every label) is left to the run's summary."""
    from noisylabels.methods import CE
    from noisylabels.noise import corrupt

    measured: list[int] = []
    rate_actual = corrupt.rate_actual

    def counting(*args: torch.Tensor) -> float:
        measured.append(1)
        return rate_actual(*args)

    monkeypatch.setattr(corrupt, "rate_actual", counting)
    dm = DigitsDataModule(noise_type="pair", noise_rate=0.3, batch_size=32)
    model = CE(
        network={"backbone": "mlp", "backbone_kwargs": {"hidden": [16]}}, input_shape=(1, 8, 8)
    )
    trainer = tiny_trainer(
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=4,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=dm)
    assert dm.data_facts().rate_nominal == 0.3
    assert measured == []
    flipped = (dm.noisy_labels != dm.clean_labels).float().mean().item()
    assert dm.noise_info()["rate_actual"] == pytest.approx(flipped)
    assert len(measured) == 1


def test_random_crop_is_a_window_of_the_padded_image() -> None:
    x = torch.rand(8, 3, 6, 6)
    out = random_crop(x, padding=2, generator=torch.Generator().manual_seed(0))
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for b in range(8):
        windows = [
            torch.equal(out[b], padded[b, :, i : i + 6, j : j + 6])
            for i in range(5)
            for j in range(5)
        ]
        assert any(windows)
    assert out.shape == x.shape


def test_flip_and_normalize() -> None:
    x = torch.rand(64, 1, 4, 4)
    out = random_hflip(x, generator=torch.Generator().manual_seed(1))
    flipped = torch.tensor([torch.equal(o, i.flip(-1)) for o, i in zip(out, x, strict=True)])
    kept = torch.tensor([torch.equal(o, i) for o, i in zip(out, x, strict=True)])
    assert bool((flipped | kept).all()) and 10 < int(flipped.sum()) < 54
    t = BatchTransform((0.5,), (0.25,))
    img = torch.full((1, 1, 2, 2), 255, dtype=torch.uint8)
    assert torch.allclose(t(img), torch.full((1, 1, 2, 2), 2.0))


def test_cli_rejects_bad_noise_before_training(run_cli, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pair noise"):
        run_cli(
            "fit",
            "--config",
            str(CONFIGS / "quickstart.yaml"),
            "--data.noise_type",
            "pair",
            "--data.noise_rate",
            "0.6",
        )
    assert not list(tmp_path.rglob("*.ckpt"))


def test_train_eval_batches_are_ordered_normalized_and_limited() -> None:
    dm = DigitsDataModule(batch_size=32, augment=True)
    dm.setup("fit")
    batches = list(dm.train_eval_batches("cpu"))
    index = torch.cat([b["index"] for b in batches])
    assert torch.equal(index, dm.train_indices)  # the whole split, in order
    first = batches[0]
    raw = dm.data.train_images[first["index"]]
    assert torch.allclose(first["image"], dm.transform(raw, train=False))  # never augmented
    n = len(batches)
    assert len(list(dm.train_eval_batches("cpu", limit=2))) == 2
    assert len(list(dm.train_eval_batches("cpu", limit=0.5))) == max(1, int(n * 0.5))
    shares = [list(dm.train_eval_batches("cpu", rank=r, world_size=2)) for r in (0, 1)]
    assert sum(len(s) for s in shares) == n


class _RunsCode:
    """A pickled object whose loading would run a command (the payload of a hostile file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("suffix", [".pt", ".npy"])
def test_noise_file_that_would_run_code_is_refused(tmp_path: Path, suffix: str) -> None:
    """A label file holding pickled code is refused without executing it."""
    import numpy as np

    marker = tmp_path / "executed"
    path = tmp_path / f"evil{suffix}"
    payload = _RunsCode(marker)
    if suffix == ".pt":
        torch.save({"noisy_labels": payload}, path)
    else:
        np.save(path, np.array([payload, 1], dtype=object), allow_pickle=True)
    dm = DigitsDataModule(noise_type="file", noise_file=str(path))
    with pytest.raises(ValueError, match="evil"):
        dm.setup("fit")
    assert not marker.exists(), "loading the label file ran its payload"


@pytest.mark.parametrize("module", [MNISTDataModule, CIFAR10DataModule, CIFAR100DataModule])
def test_a_download_that_fails_says_what_to_put_where(module, tmp_path, monkeypatch) -> None:
    """``--data.download true`` on a machine without network: one error naming the files the
    dataset needs and where, not urllib's traceback."""
    import urllib.error

    from noisylabels.errors import MissingFileError

    def offline(self) -> None:
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(module, "fetch", offline)
    data = module(data_dir=str(tmp_path), download=True)
    with pytest.raises(MissingFileError) as refused:
        data.prepare_data()
    message = str(refused.value)
    assert "--data.download true could not fetch" in message and "Name or service" in message
    assert str(tmp_path) in message and "Expected these files" in message
    assert "Pass --data.download" not in message  # not the advice that just failed
