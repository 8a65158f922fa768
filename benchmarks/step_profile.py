"""Where a training step of ``noisylabels fit`` spends its time: wall seconds per function.

Runs Forward-VRNL (true T) on MNIST for a few epochs without validation, with timing wrappers
around the network's forward, the backward, the optimizer step (which holds Lightning's closure),
the training step, the VRNL record, the batch fetch and the data module's batch hooks, Lightning's
callback and module hook dispatch (by hook name), and every per-step and epoch-end hook of the
run's callbacks. Prints each function's calls, total seconds and milliseconds per training step.
Functions nest (the optimizer step holds the training step, which holds the forward), so the
rows do not add up; the wrappers cost about a microsecond per call. The plain loop's figures to
set beside them come from ``benchmarks/epoch.py``.

    python benchmarks/step_profile.py --data-dir /folder/holding/MNIST [--epochs 3] [-- fit options]

Measured on a 2-core CPU machine, one thread, nothing else running (ms per step): LeNet-5
forward 5.59, backward 5.51, the rest of the training step 0.5 (loss and the VRNL record 0.29),
the optimizer step and Lightning's closure beyond those 0.77, the callbacks' per-step hooks 0.38
(6 hooks x 10 callbacks; the NaN/Inf check 0.07), the batch fetch 0.34, the data module's batch
hooks (normalization) 0.30; the callbacks' epoch ends about 0.08 s per epoch after the first.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loops import fetchers
from lightning.pytorch.loops import training_epoch_loop as epoch_loop
from lightning.pytorch.trainer import call

import noisylabels.callbacks as callbacks
import noisylabels.run.checkpoints as checkpoints
import noisylabels.run.record as record
from noisylabels.cli import run
from noisylabels.data import memory
from noisylabels.data import module as data_module
from noisylabels.methods.core import base
from noisylabels.models import LeNet5

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
HOOKS = (
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
    "on_train_epoch_end",
)
TIMES: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])


def timed(function: Any, label: str) -> Any:
    """``function`` adding its calls and wall seconds to ``TIMES[label]``."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            entry = TIMES[label]
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    return wrapper


def wrap(owner: Any, name: str, label: str | None = None) -> None:
    setattr(owner, name, timed(getattr(owner, name), label or f"{owner.__name__}.{name}"))


def install() -> None:
    """Wrap what the step runs (see the module's docstring)."""
    dispatch = call._call_callback_hooks

    def callback_hooks(trainer: L.Trainer, hook_name: str, *args: Any, **kwargs: Any) -> Any:
        return timed(dispatch, f"callbacks' {hook_name} (dispatch)")(
            trainer, hook_name, *args, **kwargs
        )

    call._call_callback_hooks = callback_hooks
    wrap(call, "_call_lightning_module_hook", "module hooks (dispatch)")
    wrap(call, "_call_lightning_datamodule_hook", "data module hooks (dispatch)")
    wrap(LeNet5, "forward")
    wrap(torch.Tensor, "backward")
    wrap(torch.optim.SGD, "step", "SGD.step (with Lightning's closure)")
    wrap(base.NoisyLabelMethod, "training_step")
    wrap(base.NoisyLabelMethod, "vrnl")
    wrap(data_module.NoisyDataModule, "on_after_batch_transfer")
    wrap(memory.TensorDictDataset, "__getitems__")
    wrap(fetchers._PrefetchDataFetcher, "__next__", "batch fetch")
    wrap(epoch_loop._TrainingEpochLoop, "advance", "training step, whole")
    for module in (callbacks, checkpoints, record):
        for name in dir(module):
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, L.Callback):
                for hook in HOOKS:
                    if hook in cls.__dict__:
                        wrap(cls, hook, f"{name}.{hook}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("NOISYLABELS_DATA_DIR"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("fit_options", nargs="*", help="more `noisylabels fit` options, after --")
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("pass --data-dir or set NOISYLABELS_DATA_DIR (folder holding MNIST/raw)")
    torch.set_num_threads(args.threads)
    install()
    sys.argv = sys.argv[:1]  # the run's arguments are LightningCLI's ``args``
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        run(
            [
                "fit",
                *("--config", str(CONFIGS / "data" / "mnist.yaml")),
                *("--config", str(CONFIGS / "method" / "forward_vrnl.yaml")),
                *("--config", str(CONFIGS / "protocol" / "true_t.yaml")),
                *("--data.data_dir", args.data_dir, "--trainer.max_epochs", str(args.epochs)),
                *("--trainer.accelerator", "cpu", "--trainer.default_root_dir", out),
                *("--test_after_fit", "false", "--trainer.enable_progress_bar", "false"),
                *("--trainer.enable_model_summary", "false", "--trainer.limit_val_batches", "0"),
                *("--trainer.num_sanity_val_steps", "0"),
                *args.fit_options,
            ]
        )
    steps = max(TIMES["training step, whole"][0], 1)
    print(f"{args.epochs} epochs, {steps} steps, {time.perf_counter() - start:.1f} s in all")
    print(f"{'function':58s} {'calls':>7s} {'seconds':>9s} {'ms/step':>8s}")
    for label, (calls, seconds) in sorted(TIMES.items(), key=lambda item: -item[1][1]):
        print(f"{label:58s} {calls:7d} {seconds:9.3f} {1000 * seconds / steps:8.3f}")


if __name__ == "__main__":
    main()
