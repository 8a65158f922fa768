"""One MNIST training epoch: ``noisylabels fit`` against a plain PyTorch loop.

Both sides use the same in-memory uint8 tensors, LeNet-5, batch size, optimizer and objective
(Forward-VRNL with the true T: ``mean(l) - alpha * Var(l)`` of ``-log((softmax(z) @ T)_y)``)
in the same process. The application's epoch is timed from the start of its training epoch to
the end of its last training batch (data loading, device-side transforms, metrics, logging and
the progress bar included; validation excluded), the plain loop's over the same work. Runs
alternate so both see the same machine load; medians are reported.

    python benchmarks/throughput.py --data-dir /folder/holding/MNIST [--repeats 3]
"""

from __future__ import annotations

import argparse
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

CONFIG = REPO / "configs" / "mnist_forward_vrnl.yaml"
ALPHA, LR, MOMENTUM, WD, BATCH = 0.1, 0.01, 0.9, 1e-4, 128


class EpochTimer(L.Callback):
    """Seconds from each training epoch's start to the end of its last training batch."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = self._last = 0.0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._last = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.times.append(self._last - self._start)


def app_epoch(data_dir: str, progress_bar: bool) -> float:
    """Seconds of the second training epoch of ``noisylabels fit`` (the first warms up)."""
    with tempfile.TemporaryDirectory() as out:
        cli = run(
            [
                "fit",
                "--config",
                str(CONFIG),
                "--data.data_dir",
                data_dir,
                "--trainer.max_epochs",
                "2",
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
    return timer.times[-1]


def plain_epoch(data_dir: str) -> float:
    """Seconds of the second epoch of a hand-written loop over the same tensors."""
    L.seed_everything(0)
    dm = MNISTDataModule(data_dir=data_dir, noise_rate=0.2, noise_seed=0)
    dm.setup("fit")
    images = dm.data.train_images[dm.train_indices]
    labels = dm.noisy_labels[dm.train_indices]
    T = dm.transition.float()
    mean, std = 0.1307, 0.3081
    model = LeNet5(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        model.train()
        perm = torch.randperm(len(labels))
        for i in range(0, len(labels), BATCH):
            idx = perm[i : i + BATCH]
            x = (images[idx].float() / 255.0 - mean) / std
            q = F.softmax(model(x), dim=1) @ T
            losses = -torch.log(q.gather(1, labels[idx].unsqueeze(1)).squeeze(1) + 1e-12)
            loss = vrnl_objective(losses, ALPHA, "local").objective
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - start)
    return times[-1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("NOISYLABELS_DATA_DIR"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--progress-bar",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the application with its progress bar on (default) or off",
    )
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("pass --data-dir or set NOISYLABELS_DATA_DIR (folder holding MNIST/raw)")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}")
    app, plain = [], []
    for r in range(args.repeats):
        plain.append(plain_epoch(args.data_dir))
        app.append(app_epoch(args.data_dir, args.progress_bar))
        print(f"repeat {r + 1}: plain loop {plain[-1]:.2f} s, noisylabels fit {app[-1]:.2f} s")
    p, a = statistics.median(plain), statistics.median(app)
    print(f"median epoch: plain loop {p:.2f} s, noisylabels fit {a:.2f} s, ratio {a / p:.3f}x")


if __name__ == "__main__":
    main()
