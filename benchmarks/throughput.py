"""One MNIST training epoch: ``noisylabels fit`` against a plain PyTorch loop.

Both sides use the same in-memory uint8 tensors, LeNet-5, batch size, optimizer and objective
(Forward-VRNL with the true T: ``mean(l) - alpha * Var(l)`` of ``-log((softmax(z) @ T)_y)``)
in the same process. The application's epoch is timed from the start of its training epoch to
the end of its last training batch (data loading, device-side transforms, metrics, logging and
the progress bar included; validation excluded), the plain loop's over the same work. The first
epoch of every run is a warm-up and is not counted. Runs alternate so both see the same machine
load. Reported: the median and the minimum epoch time of each side and their ratios; on a shared
machine the minimum is the figure least disturbed by other load. Both wall-clock and process CPU
time are given; the CPU time leaves out time a virtual machine's host gave to others.

    python benchmarks/throughput.py --data-dir /folder/holding/MNIST [--repeats 3] [--epochs 4]
        [--floor] [--default-allocator]

``--floor`` also times a bare ``Trainer`` (no logger, callbacks, checkpoint or progress bar)
running exactly the plain loop's step on the plain loop's batches: what Lightning's own loop
costs, the least any Lightning application can pay. glibc's ``malloc`` keeps the memory it frees
unless ``--default-allocator`` (:func:`steady_allocator` says why).

Measured on a 2-core CPU machine (``--repeats 2 --epochs 3 --floor --no-progress-bar``, one
thread, nothing else running, two such processes pooled, median seconds per training epoch):
plain loop 5.34, bare Lightning 5.65 (1.06x), ``noisylabels fit`` 5.92 (1.11x).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))  # so the CLI can import ``throughput.EpochTimer``

from noisylabels.cli import run  # noqa: E402
from noisylabels.data import MNISTDataModule  # noqa: E402
from noisylabels.methods import vrnl_objective  # noqa: E402
from noisylabels.models import LeNet5  # noqa: E402

DATA_GROUP = REPO / "configs" / "data" / "mnist.yaml"
CONFIG = REPO / "configs" / "method" / "forward_vrnl.yaml"  # after the data group
TRUE_T = REPO / "configs" / "protocol" / "true_t.yaml"  # the group estimates T after a warm-up
ALPHA, LR, MOMENTUM, WD, BATCH, NOISE = 0.1, 0.01, 0.9, 1e-4, 128, 0.2
MEAN, STD = 0.1307, 0.3081


class EpochTimer(L.Callback):
    """Seconds from each training epoch's start to the end of its last training batch."""

    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []  # (wall, process CPU) seconds
        self._start = self._last = (0.0, 0.0)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = clocks()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._last = clocks()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.times.append((self._last[0] - self._start[0], self._last[1] - self._start[1]))


def steady_allocator() -> bool:
    """Tell glibc's ``malloc`` (``mallopt``) to keep the memory it frees and to serve blocks up
    to 32 MiB from its heap rather than mapping each afresh, so that no run in this process pays
    page faults for what an earlier run left behind. Without it, in one process alternating the
    two sides, a later run's epochs took up to 1.4x an earlier identical run's (636,722 and
    1,204,256 minor page faults in the second plain-loop and bare-Lightning runs against 72,622
    and 50,027 in the first; with it, 44,800 and 44,810). Returns whether it applied (glibc
    only)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3  # glibc's malloc.h
    options = ((m_mmap_threshold, 32 << 20), (m_trim_threshold, 1 << 30), (m_top_pad, 64 << 20))
    return all(mallopt(option, value) == 1 for option, value in options)


def add_allocator_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--default-allocator",
        action="store_true",
        help="leave glibc's malloc as it is (default: keep freed memory, see steady_allocator)",
    )


def set_allocator(default: bool) -> None:
    """Apply :func:`steady_allocator` unless ``default``, and say which allocator runs."""
    steady = not default and steady_allocator()
    print(f"allocator: {'steady (mallopt)' if steady else 'default'}")


def clocks() -> tuple[float, float]:
    """Wall-clock and process CPU time (the latter excludes time the VM gave to others)."""
    return time.perf_counter(), time.process_time()


def app_epochs(data_dir: str, progress_bar: bool, epochs: int) -> list[tuple[float, float]]:
    """Seconds of each training epoch of ``noisylabels fit`` after the first (a warm-up)."""
    with tempfile.TemporaryDirectory() as out:
        cli = run(
            [
                "fit",
                "--config",
                str(DATA_GROUP),
                "--config",
                str(CONFIG),
                "--config",
                str(TRUE_T),
                "--data.data_dir",
                data_dir,
                "--trainer.max_epochs",
                str(epochs),
                "--trainer.accelerator",
                "cpu",
                "--trainer.default_root_dir",
                out,
                "--test_after_fit",
                "false",
                "--trainer.enable_progress_bar",
                str(progress_bar).lower(),
                "--trainer.enable_model_summary",
                "false",
                "--trainer.limit_val_batches",
                "1",
                "--trainer.num_sanity_val_steps",
                "0",
                "--trainer.callbacks+=throughput.EpochTimer",
            ]
        )
    timer = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "EpochTimer")
    return timer.times[1:]


def mnist_splits(data_dir: str):
    """``(train images, noisy labels)``, ``(validation images, noisy labels)`` (uint8 images)
    and the true T of the app's MNIST with symmetric noise :data:`NOISE`, noise seed 0."""
    dm = MNISTDataModule(data_dir=data_dir, noise_rate=NOISE, noise_seed=0)
    dm.setup("fit")
    train = (dm.data.train_images[dm.train_indices], dm.noisy_labels[dm.train_indices])
    val = (dm.data.train_images[dm.val_indices], dm.noisy_labels[dm.val_indices])
    return train, val, dm.transition.float()


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 MNIST images as the plain loops feed them: scaled to [0, 1], then standardized."""
    return (images.float() / 255.0 - MEAN) / STD


def _batches(images: torch.Tensor, labels: torch.Tensor):
    """One epoch of the plain loop's batches: shuffled slices, normalized."""
    perm = torch.randperm(len(labels))
    for i in range(0, len(labels), BATCH):
        idx = perm[i : i + BATCH]
        yield normalize(images[idx]), labels[idx]


def forward_vrnl_objective(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, T: torch.Tensor
) -> torch.Tensor:
    """The plain loops' Forward-VRNL objective: ``mean(l) - ALPHA * Var(l)`` of
    ``l = -log((softmax(model(x)) @ T)_y + 1e-12)``."""
    q = F.softmax(model(x), dim=1) @ T
    losses = -torch.log(q.gather(1, y.unsqueeze(1)).squeeze(1) + 1e-12)
    return vrnl_objective(losses, ALPHA, "local").objective


def plain_epochs(data_dir: str, epochs: int) -> list[tuple[float, float]]:
    """Seconds of each epoch after the first of a hand-written loop over the same tensors."""
    L.seed_everything(0)
    (images, labels), _, T = mnist_splits(data_dir)
    model = LeNet5(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    times = []
    for _ in range(epochs):
        start = clocks()
        model.train()
        for x, y in _batches(images, labels):
            loss = forward_vrnl_objective(model, x, y, T)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        end = clocks()
        times.append((end[0] - start[0], end[1] - start[1]))
    return times[1:]


class PlainStep(L.LightningModule):
    """The plain loop's training step as a ``LightningModule``, nothing else."""

    def __init__(self, T: torch.Tensor) -> None:
        super().__init__()
        self.net = LeNet5(10, 1)
        self.register_buffer("T", T)

    def training_step(self, batch, batch_idx):
        return forward_vrnl_objective(self.net, *batch, self.T)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)


class _Epochs:
    """The plain loop's batches, a new shuffle per pass, as a ``Trainer`` iterates them."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return -(-len(self.labels) // BATCH)

    def __iter__(self):
        return _batches(self.images, self.labels)


def lightning_epochs(data_dir: str, epochs: int) -> list[tuple[float, float]]:
    """Seconds of each epoch after the first of a bare ``Trainer`` (no logger, callbacks,
    checkpoint or progress bar) fitting :class:`PlainStep` on the plain loop's batches: what
    Lightning's own loop costs over the plain loop."""
    L.seed_everything(0)
    (images, labels), _, T = mnist_splits(data_dir)
    timer = EpochTimer()
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[timer],
    )
    trainer.fit(PlainStep(T), train_dataloaders=_Epochs(images, labels))
    return timer.times[1:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("NOISYLABELS_DATA_DIR"))
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run (first not timed)")
    parser.add_argument(
        "--progress-bar",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the application with its progress bar on (default) or off",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also time a bare Lightning Trainer running the plain loop's step (what "
        "Lightning's own loop costs)",
    )
    add_allocator_option(parser)
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("pass --data-dir or set NOISYLABELS_DATA_DIR (folder holding MNIST/raw)")
    sys.argv = sys.argv[:1]  # the run's arguments are LightningCLI's ``args``, not these
    set_allocator(args.default_allocator)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}")
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first epoch is a warm-up)")
    app, plain, floor = [], [], []
    for r in range(args.repeats):
        p_times = plain_epochs(args.data_dir, args.epochs)
        f_times = lightning_epochs(args.data_dir, args.epochs) if args.floor else []
        a_times = app_epochs(args.data_dir, args.progress_bar, args.epochs)
        plain += p_times
        floor += f_times
        app += a_times
        line = f"repeat {r + 1} wall: plain loop {' '.join(f'{t[0]:.2f}' for t in p_times)} s; "
        if args.floor:
            line += f"bare Lightning {' '.join(f'{t[0]:.2f}' for t in f_times)} s; "
        print(line + f"noisylabels fit {' '.join(f'{t[0]:.2f}' for t in a_times)} s")
    if args.floor:
        print_ratios(plain, floor, label="bare Lightning")
    print_ratios(plain, app)


def print_ratios(
    plain: list[tuple[float, float]],
    app: list[tuple[float, float]],
    prefix: str = "",
    label: str = "noisylabels fit",
) -> None:
    """Median and min epoch seconds of the plain loop and of ``label``, wall and CPU, and the
    ratio."""
    for clock, k in (("wall", 0), ("cpu", 1)):
        for name, pick in (("median", statistics.median), ("min", min)):
            p, a = pick(t[k] for t in plain), pick(t[k] for t in app)
            print(
                f"{prefix}{name} epoch ({clock}): plain loop {p:.2f} s, "
                f"{label} {a:.2f} s, ratio {a / p:.3f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
