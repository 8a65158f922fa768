"""Images/s of the Clothing1M training data pipeline alone (no model).

Writes a synthetic tree in Clothing1M's distribution layout (JPEGs of a realistic size, by
default 300x400 px, smooth content plus texture so the files are ~20-60 KB like web photos)
into a temporary folder, then iterates the training DataLoader of ``Clothing1MDataModule``
exactly as ``noisylabels fit`` builds it: JPEG decoding, resize of the shorter side to 256 and a
random 224 crop in the workers, uint8 batches of 64. The first pass warms the workers and the
page cache and is not timed; the median of the timed passes is reported.

    python benchmarks/clothing1m_pipeline.py [--images 1000] [--num-workers N] [--passes 3]

``--num-workers`` defaults to the data module's default, ``min(8, CPUs)``. Pass ``--data-dir``
(with ``--max-batches``) to time a real Clothing1M copy instead.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torchvision.io import encode_jpeg

from noisylabels.data.clothing1m import ANNOTATION_FILES, Clothing1MDataModule
from noisylabels.data.files import default_num_workers

_TEXTURE = torch.randn(3, 1024, 1024, generator=torch.Generator().manual_seed(0)) * 12


def synthetic_image(seed: int, height: int, width: int) -> torch.Tensor:
    """A photo-like uint8 image: a smooth random field (upsampled) plus fine texture."""
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, height // 32 + 1, width // 32 + 1, generator=gen) * 255
    smooth = F.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)
    top, left = torch.randint(0, 1024 - max(height, width), (2,), generator=gen).tolist()
    texture = _TEXTURE[:, top : top + height, left : left + width]
    return (smooth[0] + texture).clamp(0, 255).to(torch.uint8)


def write_tree(root: Path, n: int, height: int, width: int) -> int:
    """Write ``n`` JPEGs and the annotation files; return the total JPEG bytes."""
    keys, total = [], 0
    for i in range(n):
        key = f"images/{i % 10}/{i % 100:02d}/{i:07d}.jpg"
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        h, w = (height, width) if i % 2 else (width, height)  # portrait and landscape
        data = encode_jpeg(synthetic_image(i, h, w), quality=90).numpy().tobytes()
        path.write_bytes(data)
        total += len(data)
        keys.append(key)
    labels = [i % 14 for i in range(n)]
    kv = "".join(f"{k} {y}\n" for k, y in zip(keys, labels, strict=True))
    (root / "noisy_label_kv.txt").write_text(kv)
    (root / "clean_label_kv.txt").write_text("".join(kv.splitlines(keepends=True)[:20]))
    (root / "noisy_train_key_list.txt").write_text("".join(f"{k}\n" for k in keys))
    for name in ("clean_train_key_list.txt", "clean_val_key_list.txt"):
        (root / name).write_text("".join(f"{k}\n" for k in keys[:10]))
    (root / "clean_test_key_list.txt").write_text("".join(f"{k}\n" for k in keys[10:20]))
    (root / "category_names_eng.txt").write_text("".join(f"class{c}\n" for c in range(14)))
    assert all((root / f).is_file() for f in ANNOTATION_FILES)
    return total


def time_pipeline(
    data_dir: Path, num_workers: int, batch_size: int, passes: int, max_batches: int | None
) -> list[float]:
    """Images/s of each timed pass over the training DataLoader (after one warm-up pass)."""
    dm = Clothing1MDataModule(
        data_dir=str(data_dir), batch_size=batch_size, num_workers=num_workers, val_fraction=0.0
    )
    dm.setup("fit")
    loader = dm.train_dataloader()
    rates = []
    for p in range(passes + 1):
        count, start = 0, time.perf_counter()
        for i, batch in enumerate(loader):
            count += len(batch["image"])
            if max_batches is not None and i + 1 >= max_batches:
                break
        elapsed = time.perf_counter() - start
        if p > 0:
            rates.append(count / elapsed)
    assert batch["image"].shape[1:] == (3, 224, 224) and batch["image"].dtype == torch.uint8
    return rates


def cpu_cost_ms(data_dir: Path, batch_size: int, batches: int = 8) -> float:
    """CPU milliseconds per training image in this process with one thread, as in a worker (no
    workers): a figure that, unlike images/s, hardly depends on how busy the machine is."""
    dm = Clothing1MDataModule(data_dir=str(data_dir), batch_size=batch_size, num_workers=0)
    dm.setup("fit")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loader = iter(dm.train_dataloader())
        next(loader)  # warm-up
        count, start = 0, time.process_time()
        for _, batch in zip(range(batches), loader, strict=False):
            count += len(batch["image"])
        return (time.process_time() - start) * 1000 / count
    finally:
        torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000, help="synthetic images to write")
    parser.add_argument("--height", type=int, default=300)
    parser.add_argument("--width", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=None, help="default: min(8, CPUs)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes after a warm-up")
    parser.add_argument("--data-dir", type=Path, default=None, help="time this tree instead")
    parser.add_argument("--max-batches", type=int, default=None, help="batches per pass")
    args = parser.parse_args()
    workers = default_num_workers() if args.num_workers is None else args.num_workers
    with tempfile.TemporaryDirectory(prefix="clothing1m-bench-") as tmp:
        data_dir = args.data_dir
        if data_dir is None:
            data_dir = Path(tmp) / "clothing1m"
            start = time.perf_counter()
            size = write_tree(data_dir, args.images, args.height, args.width)
            print(
                f"wrote {args.images} JPEGs of {args.height}x{args.width} px "
                f"(mean {size / args.images / 1024:.1f} KB) in {time.perf_counter() - start:.1f} s"
            )
        rates = time_pipeline(data_dir, workers, args.batch_size, args.passes, args.max_batches)
        cost = cpu_cost_ms(data_dir, args.batch_size)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"training data pipeline at 224 px: {statistics.median(rates):.0f} images/s "
        f"(median of {len(rates)} passes: {', '.join(f'{r:.0f}' for r in rates)}); "
        f"num_workers={workers}, batch {args.batch_size}, {os.cpu_count()} CPUs, "
        f"load average {load:.1f}"
    )
    print(
        f"CPU time per training image (one process): {cost:.2f} ms, i.e. about "
        f"{1000 / cost:.0f} images/s per CPU core the workers get to themselves"
    )


if __name__ == "__main__":
    main()
