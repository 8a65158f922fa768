"""A whole MNIST epoch as a run lives it: ``noisylabels fit`` against a plain PyTorch loop.

The application's epoch is what a 100-epoch run pays per epoch: training (54,000 images), noisy
validation (6,000), the callbacks (subset statistics, T̂ monitor, divergence check), logging,
``last.ckpt`` and the best checkpoint. It is timed from the start of one training epoch to the
start of the next. The plain loop does the same training and validation over the same in-memory
tensors with the same network, optimizer and objective, and writes one checkpoint (weights and
optimizer state) per epoch. Three workloads:

* ``forward-vrnl``: Forward-VRNL with the true T (LeNet-5, SGD, α 0.1);
* ``reweight``: importance reweighting with T̂ (after a one-epoch warm-up, the reweighted epochs
  are timed; the plain loop reweights with the same fixed T);
* ``coteaching``: Co-teaching, two LeNet-5 networks, each on its peer's small-loss selection.

Both sides run in this process, one thread each unless ``--threads``, alternating (plain, app,
plain, app, ...) so both see the same machine load. The first epoch of every run is a warm-up and
is not counted. Reported per workload: median and minimum epoch time of each side (wall clock and
process CPU time) and their ratios; on a shared machine the minimum is the figure least disturbed
by other load.

    python benchmarks/epoch.py --data-dir /folder/holding/MNIST [--repeats 3] [--epochs 3]
        [--workloads forward-vrnl,reweight,coteaching] [--default-allocator]

glibc's ``malloc`` keeps the memory it frees unless ``--default-allocator`` (see
``throughput.steady_allocator``). Measured on a 2-core CPU machine (``--repeats 2 --epochs 2``,
one thread, median wall seconds per epoch): Forward-VRNL 6.47 s against the plain loop's 5.33 s
(1.22x), Reweight 6.17 against 5.44 (1.13x), Co-teaching 11.93 against 11.02 (1.08x); the same
code's ratios moved by several points between processes. README.md ("Speed") says where the
difference goes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))  # so the CLI can import ``epoch.EpochClock``

from throughput import (  # noqa: E402
    BATCH,
    LR,
    MOMENTUM,
    NOISE,
    WD,
    add_allocator_option,
    clocks,
    forward_vrnl_objective,
    mnist_splits,
    normalize,
    print_ratios,
    set_allocator,
)

from noisylabels.cli import run  # noqa: E402
from noisylabels.models import LeNet5  # noqa: E402

CONFIGS = REPO / "configs"

# the application's command line per workload (the plain loops below do the same work)
APP_ARGS: dict[str, list[str]] = {
    "forward-vrnl": [
        *("--config", str(CONFIGS / "data" / "mnist.yaml")),
        *("--config", str(CONFIGS / "method" / "forward_vrnl.yaml")),
        *("--config", str(CONFIGS / "protocol" / "true_t.yaml")),
    ],
    "reweight": [
        *("--config", str(CONFIGS / "data" / "mnist.yaml")),
        *("--config", str(CONFIGS / "method" / "reweight.yaml")),
        *("--model.schedule.warmup_epochs", "1", "--model.schedule.warmup_model", "last"),
        *("--model.schedule.main_stage_init", "continue"),
        *("--model.schedule.warmup_momentum", "null"),
    ],
    "coteaching": [
        *("--config", str(CONFIGS / "data" / "mnist.yaml")),
        *("--config", str(CONFIGS / "method" / "coteaching.yaml")),
        *("--config", str(CONFIGS / "protocol" / "vrnl_sgd.yaml")),
        *("--model.forget_rate", str(NOISE), "--model.ramp_epochs", "1"),
    ],
}
# epochs the application needs before the timed ones (the warm-up of Reweight)
APP_LEAD = {"forward-vrnl": 0, "reweight": 1, "coteaching": 0}


class EpochClock(L.Callback):
    """Wall and CPU clocks at the start of every training epoch and at the end of fitting."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.marks.append(clocks())

    def on_fit_end(self, trainer, pl_module) -> None:
        self.marks.append(clocks())


def intervals(marks: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:], strict=False)]


def app_epochs(workload: str, data_dir: str, epochs: int) -> list[tuple[float, float]]:
    """Seconds of each whole epoch of ``noisylabels fit`` after the first timed one."""
    lead = APP_LEAD[workload]
    with tempfile.TemporaryDirectory() as out:
        cli = run(
            [
                "fit",
                *APP_ARGS[workload],
                *("--data.data_dir", data_dir, "--data.noise_rate", str(NOISE)),
                *("--trainer.max_epochs", str(lead + epochs + 1)),
                *("--trainer.accelerator", "cpu", "--trainer.default_root_dir", out),
                *("--test_after_fit", "false", "--trainer.enable_progress_bar", "false"),
                *("--trainer.enable_model_summary", "false"),
                "--trainer.callbacks+=epoch.EpochClock",
            ]
        )
    clock = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "EpochClock")
    return intervals(clock.marks)[lead + 1 :]


def _data(data_dir: str):
    L.seed_everything(0)
    return mnist_splits(data_dir)


def _validate(models: list[torch.nn.Module], val, T: torch.Tensor | None) -> None:
    images, labels = val
    with torch.no_grad():
        for model in models:
            model.eval()
            correct = 0
            for i in range(0, len(labels), BATCH):
                p = F.softmax(model(normalize(images[i : i + BATCH])), dim=1)
                q = p if T is None else p @ T
                correct += int((q.argmax(1) == labels[i : i + BATCH]).sum())
            model.train()


def plain_epochs(workload: str, data_dir: str, epochs: int) -> list[tuple[float, float]]:
    """Seconds of each epoch after the first of a hand-written loop doing the same work."""
    (images, labels), val, T = _data(data_dir)
    two = workload == "coteaching"
    models = [LeNet5(10, 1) for _ in range(2 if two else 1)]
    opts = [
        torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD) for m in models
    ]
    step = _STEPS[workload]
    marks = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(epochs + 1):
            marks.append(clocks())
            perm = torch.randperm(len(labels))
            for i in range(0, len(labels), BATCH):
                idx = perm[i : i + BATCH]
                loss = step(models, normalize(images[idx]), labels[idx], T)
                for opt in opts:
                    opt.zero_grad(set_to_none=True)
                loss.backward()
                for opt in opts:
                    opt.step()
            _validate(models, val, None if two else T)
            state = {
                "models": [m.state_dict() for m in models],
                "opts": [o.state_dict() for o in opts],
            }
            torch.save(state, Path(out) / "last.ckpt")
        marks.append(clocks())
    return intervals(marks)[1:]


def _forward_vrnl(models, x, y, T):
    return forward_vrnl_objective(models[0], x, y, T)


def _reweight(models, x, y, T):
    logits = models[0](x)
    p = F.softmax(logits, dim=1).detach()
    beta = p.gather(1, y.unsqueeze(1)).squeeze(1) / (p @ T).gather(1, y.unsqueeze(1)).squeeze(1)
    return (beta * F.cross_entropy(logits, y, reduction="none")).mean()


def _coteaching(models, x, y, T):
    losses = [F.cross_entropy(m(x), y, reduction="none") for m in models]
    keep = int((1 - NOISE) * len(y))
    masks = []
    for loss in losses:
        mask = torch.zeros_like(loss, dtype=torch.bool)
        mask[torch.argsort(loss.detach(), stable=True)[:keep]] = True
        masks.append(mask)
    return sum(torch.where(masks[1 - k], losses[k], 0.0).sum() / keep for k in range(2))


_STEPS: dict[str, Callable] = {
    "forward-vrnl": _forward_vrnl,
    "reweight": _reweight,
    "coteaching": _coteaching,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("NOISYLABELS_DATA_DIR"))
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per run (+1 warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--workloads", default=",".join(_STEPS), help=f"comma-separated of {', '.join(_STEPS)}"
    )
    add_allocator_option(parser)
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("pass --data-dir or set NOISYLABELS_DATA_DIR (folder holding MNIST/raw)")
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = sorted(set(workloads) - set(_STEPS))
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {sorted(_STEPS)}")
    torch.set_num_threads(args.threads)
    set_allocator(args.default_allocator)
    sys.argv = sys.argv[:1]  # the runs' arguments are LightningCLI's ``args``, not these
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch {BATCH}")
    for workload in workloads:
        app, plain = [], []
        for r in range(args.repeats):
            p_times = plain_epochs(workload, args.data_dir, args.epochs)
            a_times = app_epochs(workload, args.data_dir, args.epochs)
            plain += p_times
            app += a_times
            print(
                f"{workload} repeat {r + 1} wall: plain loop "
                f"{' '.join(f'{t[0]:.2f}' for t in p_times)} s; noisylabels fit "
                f"{' '.join(f'{t[0]:.2f}' for t in a_times)} s",
                flush=True,
            )
        print_ratios(plain, app, prefix=f"{workload} ")


if __name__ == "__main__":
    main()
