"""Cost of SubsetStatistics in its free mode (``source: train_step``) on an MNIST epoch.

Trains Forward (LeNet-5, true T, symmetric 20 % noise, batch 128) for one epoch with and
without the callback, alternating so both see the same machine load, and prints the median
training-epoch time of each, their ratio, and the time spent inside the callback's hooks as a
share of the epoch (measured directly, so it does not depend on run-to-run noise). The epoch is
timed from its start to the end of its last hook (the callback's end-of-epoch reduction,
summary and TensorBoard writes included; validation excluded).

    python benchmarks/subset_overhead.py --data-dir /folder/holding/MNIST [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger

from noisylabels.callbacks import SubsetStatistics
from noisylabels.data import MNISTDataModule
from noisylabels.methods import Forward


class EpochTimer(L.Callback):
    """Seconds from the start of each training epoch to the end of its last hook."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.times.append(time.perf_counter() - self._start)


class TimedSubsetStatistics(SubsetStatistics):
    """SubsetStatistics that adds up the seconds spent in its per-epoch and per-step hooks."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seconds = 0.0

    def _timed(self, hook: Any, *args: Any) -> None:
        start = time.perf_counter()
        hook(*args)
        self.seconds += time.perf_counter() - start

    def on_train_epoch_start(self, *args: Any) -> None:
        self._timed(super().on_train_epoch_start, *args)

    def on_train_batch_end(self, *args: Any) -> None:
        self._timed(super().on_train_batch_end, *args)

    def on_train_epoch_end(self, *args: Any) -> None:
        self._timed(super().on_train_epoch_end, *args)


def epoch(data_dir: str, with_callback: bool, limit: int | float) -> tuple[float, float]:
    """One training epoch; returns (epoch seconds, seconds inside the callback)."""
    L.seed_everything(0, verbose=False)
    datamodule = MNISTDataModule(data_dir=data_dir, batch_size=128, noise_rate=0.2)
    model = Forward(network={"backbone": "lenet5"}, alpha=0.1, transition=True)
    timer = EpochTimer()
    stats = TimedSubsetStatistics() if with_callback else None
    with tempfile.TemporaryDirectory() as out:
        trainer = L.Trainer(
            max_epochs=1,
            limit_train_batches=limit,
            limit_val_batches=0,
            logger=TensorBoardLogger(out),
            callbacks=[cb for cb in (stats, timer) if cb is not None],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="auto",
            devices=1,
        )
        trainer.fit(model, datamodule=datamodule)
    return timer.times[0], stats.seconds if stats else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("NOISYLABELS_DATA_DIR"),
        help="folder holding MNIST/raw/*-ubyte (default: $NOISYLABELS_DATA_DIR)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="epochs per variant")
    parser.add_argument(
        "--limit-batches",
        type=float,
        default=1.0,
        help="training batches per epoch (int) or fraction (float); default: the whole epoch",
    )
    args = parser.parse_args()
    if not args.data_dir:
        parser.error("pass --data-dir or set NOISYLABELS_DATA_DIR")
    limit = int(args.limit_batches) if args.limit_batches > 1 else args.limit_batches
    times: dict[bool, list[float]] = {False: [], True: []}
    hook_share: list[float] = []
    for r in range(args.repeats):
        for with_callback in (False, True):
            seconds, inside = epoch(args.data_dir, with_callback, limit)
            times[with_callback].append(seconds)
            if with_callback:
                hook_share.append(inside / seconds)
            label = "with" if with_callback else "without"
            extra = f", {inside:.3f} s in the callback" if with_callback else ""
            print(f"repeat {r + 1}: epoch {label} callback {seconds:.2f} s{extra}", flush=True)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"median MNIST epoch without SubsetStatistics: {off:.2f} s")
    print(f"median MNIST epoch with SubsetStatistics (train_step): {on:.2f} s")
    print(f"ratio with / without: {on / off:.4f} ({(on / off - 1) * 100:+.2f} %)")
    share = statistics.median(hook_share) * 100
    print(f"time inside the callback's hooks: {share:.2f} % of the epoch")


if __name__ == "__main__":
    main()
