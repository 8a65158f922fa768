"""Images/s of the training data pipelines of the real-noise datasets on the CPU (no model):
Clothing1M beside Mini-WebVision, Food-101N and ANIMAL-10N.

For each, writes a synthetic tree in the dataset's own layout (list files and JPEGs of the size
its release holds: Clothing1M 300x400 px, Mini-WebVision's resized release 256 px on the
shorter side, Food-101N 384x512, ANIMAL-10N 64x64; photo-like content as
``clothing1m_pipeline.py`` makes it) into a temporary folder, then iterates the training
DataLoader of its data module exactly as ``noisylabels fit`` builds it: JPEG decoding, resize
of the shorter side and a random crop of the dataset's size in the workers (Clothing1M and
Food-101N 256 -> 224, Mini-WebVision 256 -> 227, ANIMAL-10N 64, no resize), uint8 batches.
Two figures per dataset: the median images/s of timed passes with the default workers
(``min(8, CPUs)``; the first pass warms the workers and the page cache and is not timed), and
the CPU time per image in one process with one thread, which hardly depends on how busy the
machine is.

    python benchmarks/real_noise_pipelines.py [--images 1000] [--num-workers N] [--passes 3]
        [--datasets clothing1m,miniwebvision,food101n,animal10n]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torchvision.io import encode_jpeg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clothing1m_pipeline import synthetic_image, write_tree  # noqa: E402

from noisylabels.data import (  # noqa: E402
    Animal10NDataModule,
    Clothing1MDataModule,
    Food101NDataModule,
    MiniWebVisionDataModule,
)
from noisylabels.data.files import default_num_workers  # noqa: E402

TEST_IMAGES = 10


def _jpeg(path: Path, seed: int, height: int, width: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = (height, width) if seed % 2 else (width, height)  # portrait and landscape
    data = encode_jpeg(synthetic_image(seed, h, w), quality=90).numpy().tobytes()
    path.write_bytes(data)
    return len(data)


def write_webvision(root: Path, n: int) -> int:
    """``info/`` lists, ``google/qNNNN/`` training JPEGs (256 px shorter side) and
    ``val_images_256/``; return the training JPEG bytes."""
    total, train, val = 0, [], []
    for i in range(n):
        key = f"google/q{i % 50 + 1:04d}/{i:08d}.jpg"
        total += _jpeg(root / key, i, 256, 341)
        train.append(f"{key} {i % 50}")
    for i in range(TEST_IMAGES):
        _jpeg(root / "val_images_256" / f"val{i:06d}.jpg", n + i, 256, 341)
        val.append(f"val{i:06d}.jpg {i}")
    (root / "info").mkdir(parents=True, exist_ok=True)
    (root / "info" / "train_filelist_google.txt").write_text("".join(f"{x}\n" for x in train))
    (root / "info" / "val_filelist.txt").write_text("".join(f"{x}\n" for x in val))
    return total


def write_food101n(root: Path, n: int) -> int:
    """``Food-101N_release/`` (lists, 384x512 JPEGs) and ``food-101/`` (test list and images);
    return the training JPEG bytes."""
    classes = [f"dish_{k:03d}" for k in range(101)]
    release, food = root / "Food-101N_release", root / "food-101"
    total, keys = 0, []
    for i in range(n):
        key = f"{classes[i % 101]}/{i:08d}.jpg"
        total += _jpeg(release / "images" / key, i, 384, 512)
        keys.append(key)
    tests = [f"{classes[i]}/{i}" for i in range(TEST_IMAGES)]
    for i, name in enumerate(tests):
        _jpeg(food / "images" / f"{name}.jpg", n + i, 384, 512)
    meta = release / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "classes.txt").write_text("class_name\n" + "".join(f"{c}\n" for c in classes))
    (meta / "imagelist.tsv").write_text("class_name/key\n" + "".join(f"{k}\n" for k in keys))
    header = "class_name/key\tverification_label\n"
    (meta / "verified_train.tsv").write_text(header + "".join(f"{k}\t1\n" for k in keys[:20]))
    (meta / "verified_val.tsv").write_text(header)
    (food / "meta").mkdir(parents=True, exist_ok=True)
    (food / "meta" / "test.txt").write_text("".join(f"{t}\n" for t in tests))
    return total


def write_animal10n(root: Path, n: int) -> int:
    """``training/`` and ``testing/`` of 64x64 JPEGs named ``<label>_<index>.jpg``; return the
    training JPEG bytes."""
    total = sum(_jpeg(root / "training" / f"{i % 10}_{i:05d}.jpg", i, 64, 64) for i in range(n))
    for i in range(TEST_IMAGES):
        _jpeg(root / "testing" / f"{i}_{n + i:05d}.jpg", n + i, 64, 64)
    return total


# name: (writer(root, n) -> bytes, data module factory(root, **options), the crop)
DATASETS: dict[str, tuple[Callable[[Path, int], int], Callable[..., Any], int]] = {
    "clothing1m": (
        lambda root, n: write_tree(root, n, 300, 400),
        lambda root, **kw: Clothing1MDataModule(data_dir=str(root), **kw),
        224,
    ),
    "miniwebvision": (
        write_webvision,
        lambda root, **kw: MiniWebVisionDataModule(data_dir=str(root), imagenet_test=False, **kw),
        227,
    ),
    "food101n": (
        write_food101n,
        lambda root, **kw: Food101NDataModule(data_dir=str(root), **kw),
        224,
    ),
    "animal10n": (
        write_animal10n,
        lambda root, **kw: Animal10NDataModule(data_dir=str(root), **kw),
        64,
    ),
}


def time_pipeline(make: Callable[..., Any], workers: int, batch: int, passes: int) -> list[float]:
    """Images/s of each timed pass over the training DataLoader (after one warm-up pass)."""
    dm = make(batch_size=batch, num_workers=workers, val_fraction=0.0)
    dm.setup("fit")
    loader = dm.train_dataloader()
    rates = []
    for p in range(passes + 1):
        count, start = 0, time.perf_counter()
        for batch_ in loader:
            count += len(batch_["image"])
        if p > 0:
            rates.append(count / (time.perf_counter() - start))
    return rates


def cpu_cost_ms(make: Callable[..., Any], batch: int, crop: int, batches: int = 8) -> float:
    """CPU milliseconds per training image in this process with one thread, as in a worker."""
    dm = make(batch_size=batch, num_workers=0, val_fraction=0.0)
    dm.setup("fit")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loader = iter(dm.train_dataloader())
        first = next(loader)  # warm-up
        assert first["image"].shape[1:] == (3, crop, crop) and first["image"].dtype == torch.uint8
        count, start = 0, time.process_time()
        for _, batch_ in zip(range(batches), loader, strict=False):
            count += len(batch_["image"])
        return (time.process_time() - start) * 1000 / count
    finally:
        torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000, help="training images per dataset")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=None, help="default: min(8, CPUs)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes after a warm-up")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated")
    args = parser.parse_args()
    workers = default_num_workers() if args.num_workers is None else args.num_workers
    # a synthetic ANIMAL-10N holds fewer images than the release, by design
    warnings.filterwarnings("ignore", message=r".*holds \d+ images; ANIMAL-10N's")
    names = [n for n in args.datasets.split(",") if n]
    unknown = sorted(set(names) - set(DATASETS))
    if unknown:
        parser.error(f"unknown datasets {unknown}; known: {', '.join(DATASETS)}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{os.cpu_count()} CPUs, load average {load:.1f}; num_workers={workers}, "
        f"batch {args.batch_size}, {args.images} training images per dataset"
    )
    for name in names:
        write, make, crop = DATASETS[name]
        with tempfile.TemporaryDirectory(prefix=f"{name}-bench-") as tmp:
            root = Path(tmp) / name
            size = write(root, args.images)
            rates = time_pipeline(partial(make, root), workers, args.batch_size, args.passes)
            cost = cpu_cost_ms(partial(make, root), args.batch_size, crop)
        print(
            f"{name:>13}: {statistics.median(rates):5.0f} images/s at {crop} px (median of "
            f"{len(rates)} passes: {', '.join(f'{r:.0f}' for r in rates)}); CPU {cost:.2f} ms "
            f"per image in one process (about {1000 / cost:.0f} images/s per core); JPEGs "
            f"{size / args.images / 1024:.1f} KB on average"
        )


if __name__ == "__main__":
    main()
