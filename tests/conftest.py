"""Shared fixtures: tiny datasets written in their real on-disk formats, and a CLI runner."""

from __future__ import annotations

import gc
import json
import os
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests marked ``cuda`` where there is no CUDA GPU."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (pytest -m cuda, make gpu-check)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what the imports made (torch, Lightning, the test modules) out of the collector's
    reach: every later collection, automatic or a test's own ``gc.collect()``, then walks only
    what the tests make, not the half a million objects of the imports."""
    gc.collect()
    gc.freeze()


DATASETS = ("mnist", "cifar10", "cifar100", "clothing1m")
"""The datasets of the paper's tables, each a data group ``configs/data/<dataset>.yaml``."""
METHODS = tuple(sorted(p.stem for p in (CONFIGS / "method").glob("*.yaml")))
"""Every method group, ``configs/method/<method>.yaml``."""
PAIR_PROTOCOLS: dict[str, tuple[str, ...]] = {
    **{f"cifar100_{m}": ("cifar100_estimate",) for m in
       ("forward", "forward_vrnl", "reweight", "reweight_vrnl", "reweight_dualt")},
    **{f"cifar{n}_sop": ("sop_cifar",) for n in ("10", "100")},
    **{f"cifar{n}_sopplus": ("sopplus_cifar",) for n in ("10", "100")},
    "cifar10_dividemix": ("dividemix_cifar",),
    "cifar10_elr": ("elr_cifar10",),
    "cifar10_elrplus": ("elrplus_cifar",),
    "cifar10_disc": ("disc_cifar",),
    "mnist_disc": ("disc_mnist",),
    **{f"mnist_{m}": ("vrnl_sgd",) for m in ("gce", "mixup", "sce", "gls", "cal")},
    **{
        f"clothing1m_{m}": ("vrnl_sgd",)
        for m in ("cores", "decoupling", "gce", "mixup", "trevision", "sce", "apl", "gls", "cal")
    },
}  # fmt: skip
PAIR_PROTOCOLS |= {  # a VRNL group runs its base method's protocol
    f"{pair}_vrnl": protocols
    for pair, protocols in list(PAIR_PROTOCOLS.items())
    if (CONFIGS / "method" / f"{pair.partition('_')[2]}_vrnl.yaml").is_file()
}
"""The protocols (``configs/protocol/``) a pair without a preset composes after its groups, as
those files' comments say; a ``_vrnl`` pair those of its base pair."""


def pair_configs(pair: str) -> list[Path]:
    """The config files of a run of ``<dataset>_<method>``: its preset where the pair has
    settings of its own, else ``data/<dataset>.yaml``, ``method/<method>.yaml`` and the
    protocols of :data:`PAIR_PROTOCOLS`."""
    preset = CONFIGS / f"{pair}.yaml"
    if preset.is_file():
        return [preset]
    dataset, _, method = pair.partition("_")
    protocols = PAIR_PROTOCOLS.get(pair, ())
    files = [CONFIGS / "data" / f"{dataset}.yaml", CONFIGS / "method" / f"{method}.yaml"]
    files += [CONFIGS / "protocol" / f"{name}.yaml" for name in protocols]
    missing = [str(f) for f in files if not f.is_file()]
    assert not missing, f"{pair}: no preset, and no {missing}"
    return files


def config_args(pair: str) -> list[str]:
    """``--config FILE`` for each of :func:`pair_configs`, as a command line gives them."""
    return [arg for file in pair_configs(pair) for arg in ("--config", str(file))]


def pairs(*datasets: str) -> list[str]:
    """Every ``<dataset>_<method>`` of ``datasets`` and the method groups, but a ``_vrnl`` group
    on a dataset where its base method has a preset and it has none: the groups lack the pair's
    settings (Clothing1M's Co-teaching sets ``forget_rate: estimate``, without which real noise
    is refused); such a run is the base's preset with ``--model.alpha``."""
    out = []
    for dataset in datasets:
        for method in METHODS:
            base = method.removesuffix("_vrnl")
            preset = CONFIGS / f"{dataset}_{method}.yaml"
            if base != method and (CONFIGS / f"{dataset}_{base}.yaml").is_file():
                if not preset.is_file():
                    continue
            out.append(f"{dataset}_{method}")
    return out


def pair_params(names: list[str]) -> list[Any]:
    """The pairs ``names`` as test parameters for end-to-end runs of every pair: in the default
    run every MNIST pair (each method group once), each dataset's CE (each data group once) and
    every pair with a preset (settings of its own); the other pairs, compositions of groups that
    already run, only under ``-m slow``."""
    params = []
    for name in names:
        dataset, _, method = name.partition("_")
        preset = (CONFIGS / f"{name}.yaml").is_file()
        default = dataset == "mnist" or method == "ce" or preset
        marks = () if default else (pytest.mark.slow,)
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def write_idx_images(path: Path, images: np.ndarray) -> None:
    """Write uint8 images (N, H, W) as an IDX3 file (MNIST's format)."""
    n, h, w = images.shape
    with open(path, "wb") as fh:
        fh.write(struct.pack(">IIII", 2051, n, h, w))
        fh.write(images.astype(np.uint8).tobytes())


def write_idx_labels(path: Path, labels: np.ndarray) -> None:
    """Write uint8 labels (N,) as an IDX1 file (MNIST's format)."""
    with open(path, "wb") as fh:
        fh.write(struct.pack(">II", 2049, len(labels)))
        fh.write(labels.astype(np.uint8).tobytes())


def _class_images(labels: np.ndarray, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Images whose mean brightness depends on the class, so a model can learn something."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 60, size=(len(labels), *shape))
    return np.clip(base + labels.reshape(-1, *([1] * len(shape))) * 19, 0, 255).astype(np.uint8)


def make_mnist(root: Path, n_train: int = 320, n_test: int = 64, seed: int = 0) -> Path:
    """Write a tiny MNIST in torchvision's layout ``root/MNIST/raw/*-ubyte``; return ``root``."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, size=n)
        write_idx_images(raw / f"{prefix}-images-idx3-ubyte", _class_images(labels, (28, 28), n))
        write_idx_labels(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return root


def make_cifar(
    root: Path, num_classes: int = 10, n_train: int = 200, n_test: int = 50, seed: int = 0
) -> Path:
    """Write a tiny CIFAR-10/100 in torchvision's pickle layout; return ``root``. The classes
    take turns (sample ``i`` of a batch is of class ``(i + seed) % C``), so every class keeps
    training labels after the validation split, as in the real data sets."""

    def batch(n: int, key: str) -> dict[str, Any]:
        labels = (np.arange(n) + seed) % num_classes
        data = _class_images(labels % 10, (3072,), n)
        entry = {"data": data, key: labels.tolist(), "filenames": [f"{i}.png" for i in range(n)]}
        if num_classes == 100:
            entry["coarse_labels"] = (labels // 5).tolist()
        return entry

    if num_classes == 10:
        folder = root / "cifar-10-batches-py"
        folder.mkdir(parents=True, exist_ok=True)
        per = n_train // 5
        for i in range(1, 6):
            with open(folder / f"data_batch_{i}", "wb") as fh:
                pickle.dump(batch(per, "labels"), fh)
        with open(folder / "test_batch", "wb") as fh:
            pickle.dump(batch(n_test, "labels"), fh)
    else:
        folder = root / "cifar-100-python"
        folder.mkdir(parents=True, exist_ok=True)
        for name, n in (("train", n_train), ("test", n_test)):
            with open(folder / name, "wb") as fh:
                pickle.dump(batch(n, "fine_labels"), fh)
    return root


@pytest.fixture(scope="session")
def mnist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_mnist(tmp_path_factory.mktemp("mnist"))


@pytest.fixture(scope="session")
def cifar10_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_cifar(tmp_path_factory.mktemp("cifar10"), 10)


@pytest.fixture(scope="session")
def cifar100_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_cifar(tmp_path_factory.mktemp("cifar100"), 100, n_train=400, n_test=100)


class TinyConvNet(nn.Module):
    """A 4-channel convolution, global pooling and a linear layer: a stand-in backbone."""

    def __init__(self, num_classes: int, in_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


# what a test's own Lightning trainer leaves out unless it asks: loggers, checkpoints, the
# progress bar and the model summary; one CPU device
TINY_TRAINER = {
    "accelerator": "cpu",
    "devices": 1,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def tiny_trainer(**options: Any) -> Any:
    """A Lightning trainer for a test's small fit: :data:`TINY_TRAINER`, then ``options``."""
    import lightning as L

    return L.Trainer(**{**TINY_TRAINER, **options})


@pytest.fixture()
def make_trainer(tmp_path: Path) -> Callable[..., Any]:
    """:func:`tiny_trainer` whose files, if it writes any, go under ``tmp_path``."""
    return lambda **options: tiny_trainer(**{"default_root_dir": tmp_path, **options})


REAL_BACKBONES = ("resnet18", "resnet32", "resnet34", "resnet50", "vgg19_bn")


@pytest.fixture()
def tiny_backbones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the ResNets of the registry by :class:`TinyConvNet` (as torchgeo's tests patch
    their models), so that CLI tests of every config check the plumbing in seconds; the real
    architectures are tested in test_models.py and, end to end, by the ``slow`` tests."""
    from noisylabels.models import BACKBONES

    def tiny(num_classes: int, input_shape: tuple[int, int, int], **kwargs: Any) -> nn.Module:
        return TinyConvNet(num_classes, input_shape[0])

    for name in REAL_BACKBONES:
        monkeypatch.setitem(BACKBONES, name, tiny)


def reset_dynamo() -> None:
    """Empty Dynamo's caches (compiled functions share them across tests). Collected first: a
    compiled function that goes while the reset walks the backend cache changes the cache under
    the walk; where one still does, the reset walks it again."""
    for _ in range(3):
        gc.collect()
        try:
            torch._dynamo.reset()
            return
        except RuntimeError as err:
            if "changed size during iteration" not in str(err):
                raise
    torch._dynamo.reset()


@pytest.fixture()
def fresh_dynamo() -> Any:
    """Dynamo's caches empty before and after the test (:func:`reset_dynamo`)."""
    reset_dynamo()
    yield
    reset_dynamo()


FINISHED_RUN_EPOCHS = 2


@pytest.fixture(scope="session")
def finished_cli(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """What ``noisylabels.cli.run`` returned for the run of :func:`finished_run` (its
    ``results``, its trainer): ``noisylabels fit --config configs/quickstart.yaml
    --trainer.max_epochs 2`` into a root of its own, progress bar off."""
    from noisylabels.cli import run

    root = tmp_path_factory.mktemp("finished_run")
    return run(["fit", "--config", str(CONFIGS / "quickstart.yaml"),
                "--trainer.max_epochs", str(FINISHED_RUN_EPOCHS),
                "--trainer.default_root_dir", str(root),
                "--trainer.enable_progress_bar", "false"])  # fmt: skip


@pytest.fixture(scope="session")
def finished_run(finished_cli: Any) -> Path:
    """The run folder of a finished quickstart run of 2 epochs (Forward-VRNL on the digits,
    tested after its fit), made once per test session and shared: a test reads it, or copies it
    (:func:`copy_run`) to change it, audit it or continue it."""
    return Path(finished_cli.trainer.log_dir)


def copy_run(folder: Path, to: Path) -> Path:
    """A copy of the run folder ``folder`` at ``to`` (a shared run, copied to be changed)."""
    import shutil

    return Path(shutil.copytree(folder, to))


@pytest.fixture()
def run_cli(tmp_path: Path) -> Callable[..., Any]:
    """Run ``noisylabels`` in-process with ``args``; the run dir defaults to ``tmp_path``."""
    from noisylabels.cli import run

    def _run(*args: str, root: Path | None = None) -> Any:
        argv = list(args)
        if not any(a.startswith("--trainer.default_root_dir") for a in argv):
            argv += ["--trainer.default_root_dir", str(root or tmp_path)]
        if argv and argv[0] in ("fit", "validate", "test", "predict"):
            argv += ["--trainer.enable_progress_bar", "false"]
        return run(argv)

    return _run


def tiny_method(cls: type, **kwargs: Any) -> Any:
    """A method of ``cls`` on a 2-pixel MLP with 3 classes and VRNL's alpha 0.1 (``kwargs``
    override), its weights from seed 0: the unit tests' model of one method."""
    import torch

    torch.manual_seed(0)
    kwargs.setdefault("alpha", 0.1)
    return cls(network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 1, 2), **kwargs)


def fixed_batch(n: int = 6) -> dict[str, Any]:
    """A batch of ``n`` (up to 8) samples of :func:`tiny_method`'s shape, the same every call."""
    import torch

    gen = torch.Generator().manual_seed(1)
    labels = torch.tensor([0, 1, 2, 0, 2, 1, 1, 0])[:n]
    return {
        "image": torch.randn(n, 1, 1, 2, generator=gen),
        "label": labels,
        "clean_label": labels,
        "index": torch.tensor([4, 0, 5, 2, 1, 3, 7, 6])[:n],
    }


def read_results(root: Path) -> dict[str, Any]:
    """The single ``results.json`` written under ``root``."""
    found = sorted(root.rglob("results.json"))
    assert len(found) == 1, f"expected one results.json under {root}, found {found}"
    return json.loads(found[0].read_text())


def fit_error(args: list[str], root: Path, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """Run ``noisylabels fit ARGS`` as the command does (``noisylabels.cli.main``) into
    ``root``, expecting it to fail: its exit status and its one ``noisylabels: error:``
    paragraph (no traceback), after checking that it trained nothing (no checkpoint, no
    ``results.json``)."""
    from noisylabels.cli import main

    argv = ["fit", *args, "--trainer.default_root_dir", str(root)]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--trainer.enable_progress_bar", "false"])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("noisylabels: error: ")]
    assert len(lines) == 1, err[-2000:]
    assert not list(root.rglob("*.ckpt")) and not list(root.rglob("results.json"))
    return int(exit_info.value.code), lines[0]


CLASSES = ("emu", "cat", "dog")  # written unsorted: class k is the k-th *sorted* name
SORTED = sorted(CLASSES)


def write_image(path: Path, label: int, seed: int, png: bool, gray: bool = False) -> None:
    """A small image whose colour depends on the class, as JPEG or PNG."""
    import torch
    from torchvision.io import encode_jpeg, encode_png, write_file

    gen = torch.Generator().manual_seed(seed)
    h, w = 18 + seed % 5, 22 - seed % 3
    image = torch.randint(0, 40, (1 if gray else 3, h, w), generator=gen, dtype=torch.uint8)
    image[label % image.shape[0]] += 60 * label
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(str(path), encode_png(image) if png else encode_jpeg(image, quality=90))


def make_image_folder(
    root: Path, per_class: dict[str, int], classes: tuple[str, ...] = CLASSES
) -> Path:
    """Write ``root/<split>/<class>/NNN.jpg|png`` with ``per_class[split]`` images per class
    (every other image a PNG, one grayscale PNG per folder); return ``root``."""
    for split, n in per_class.items():
        for name in classes:
            label = SORTED.index(name) if name in SORTED else 0
            for i in range(n):
                png = i % 2 == 1
                suffix = ".png" if png else ".jpg"
                path = root / split / name / f"{i:03d}{suffix}"
                write_image(path, label, seed=i + 100 * label, png=png, gray=png and i == 1)
    return root


def real_mnist_dir() -> Path | None:
    """Folder holding real MNIST (``MNIST/raw``), from ``NOISYLABELS_DATA_DIR``; else None."""
    value = os.environ.get("NOISYLABELS_DATA_DIR")
    if not value:
        return None
    path = Path(value)
    return path if (path / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file() else None


def synthetic_facts(
    num_classes: int, noisy: Any, clean: Any, train_indices: Any, rate_nominal: float
) -> Any:
    """The data facts of synthetic symmetric noise on ``noisy``/``clean`` labels, no true T
    and no evaluation batches: what a callback reads of a stand-in data module."""
    from noisylabels.noise import DataFacts

    return DataFacts(
        num_classes=num_classes,
        noise_type="symmetric",
        rate_nominal=rate_nominal,
        transition=None,
        clean_validation=False,
        noisy_labels=noisy,
        clean_labels=clean,
        train_indices=train_indices,
        eval_batches=lambda *args: iter(()),
    )


class TwoThreadAllReduce:
    """A stand-in of ``strategy.reduce(tensor, reduce_op="sum")`` for two threads playing two
    processes: ``reducer(rank)`` is rank's ``reduce``; each call waits for the other rank's and
    returns the sum of both tensors. ``calls[rank]`` counts rank's calls."""

    def __init__(self) -> None:
        import threading

        self._barrier = threading.Barrier(2)
        self._deposited: dict[int, torch.Tensor] = {}
        self.calls = {0: 0, 1: 0}

    def reducer(self, rank: int) -> Callable[..., torch.Tensor]:
        def reduce(tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
            self.calls[rank] += 1
            self._deposited[rank] = tensor.clone()
            self._barrier.wait(timeout=30)
            total = self._deposited[0] + self._deposited[1]
            self._barrier.wait(timeout=30)
            return total

        return reduce
