"""Training throughput (images/s) of ``noisylabels fit`` against a plain eager PyTorch loop.

In one process, for CIFAR-10 ResNet-18 (Forward-VRNL), CIFAR-100 ResNet-32 (VolMinNet-VRNL) and
MNIST LeNet-5 (Forward-VRNL), each from its shipped preset at batch 128:

* ``app, speed options off``: eager, fp32, contiguous, batches gathered on the host;
* ``app as shipped``: the defaults (``auto``: on CUDA compiled with CUDA graphs, bf16-mixed,
  channels-last, data on the device; on the CPU eager fp32 with host batches);
* ``app, compile MODE``: every speed option on explicitly, one row per ``--compile-modes``;
* ``plain eager loop``: a hand-written loop doing the same work on the same data (the preset's
  network, optimizer(s), augmentation, per-sample loss and VRNL objective; data on the device;
  bf16 autocast and channels-last on CUDA);

then N concurrent ``noisylabels fit`` processes of MNIST on the one device (as a sweep's
``--parallel N`` runs them), for each N of ``--parallel``. Each run trains ``--warmup-steps``
steps (compilation, CUDA-graph recording), then ``--steps`` timed steps in ``--blocks`` blocks
(the device is synchronized at block ends only; by default all within the first epoch, so the
figures are of steady-state steps, without epoch ends); reported are the median images/s over the
blocks, the seconds to the end of the first step (compilation included), and ratios; per row
also the wall milliseconds per step beside the host's (in the training step, of every timed step
and of the steps right after a synchronization, which no full launch queue holds up; and between
steps), which tell a step the host limits from one the device does, and for a compiled row what
``torch.compile`` made (graphs, graph breaks with their reasons, CUDA-graph skips). After the
timed steps of the ``app as shipped`` run on CUDA, ``--sync-steps`` steps run under
``torch.cuda.set_sync_debug_mode("error")`` around the training step, then as many around the
whole loop (data, augmentation, Lightning): a synchronization anywhere there is reported with
its stack.

Real datasets are read from ``--data-dir`` where they are; ``--fake-data`` writes random data of
the real sizes in the real formats for the others.

    python benchmarks/gpu_throughput.py --fake-data                       # GPU, the full set
    python benchmarks/gpu_throughput.py --fake-data --device cpu --steps 12 --warmup-steps 3

``--only cifar10-resnet18 cifar10-resnet18-dividemix`` times DivideMix (its CIFAR-10 preset,
every step one of its own stage) beside Forward-VRNL; it has no plain-loop row. It runs without
VRNL: on the random fake data, with α 0.1 and no warm-up, its loss reaches NaN in the first epochs
(the divergence guard stops the row), and the variance term costs the same few reductions as in
the other rows. ``--fake-size N``
writes fake data of N training images (a CPU check: DivideMix's pass over the training set
comes before its first step).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import pickle
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
import torch._dynamo
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]  # ``gpu_throughput.StepTimer``; this checkout's package
sys.modules.setdefault("gpu_throughput", sys.modules[__name__])  # the CLI finds this module

from noisylabels.cli import run  # noqa: E402
from noisylabels.data import NoisyDataModule  # noqa: E402
from noisylabels.methods import NoisyLabelMethod, VolMinNet, vrnl_objective  # noqa: E402
from noisylabels.methods.core.losses import forward_loss  # noqa: E402
from noisylabels.run.cli import make_cli  # noqa: E402

WORKLOADS = {  # name: (dataset_method pair, dataset)
    "cifar10-resnet18": ("cifar10_forward_vrnl", "cifar10"),
    "cifar100-resnet32": ("cifar100_volmin_vrnl", "cifar100"),
    "mnist-lenet5": ("mnist_forward_vrnl", "mnist"),
    "cifar10-resnet18-dividemix": ("cifar10_dividemix", "cifar10"),
}
DEFAULT_WORKLOADS = ["cifar10-resnet18", "cifar100-resnet32", "mnist-lenet5"]
TRUE_T = ["--config", str(REPO / "configs" / "protocol" / "true_t.yaml")]
"""The true T of the synthetic noise and no warm-up (a method with a transition-matrix option)."""
OWN_STAGE = {  # pair: options that make every step one of the method's own stage
    "cifar10_forward_vrnl": TRUE_T,
    "mnist_forward_vrnl": TRUE_T,
    "cifar100_volmin_vrnl": [],  # T is learned with the classifier from the first step
    "cifar10_dividemix": ["--model.schedule.warmup_epochs", "0", "--model.alpha", "0.0"],
}
"""Each workload's options for timing steady-state steps of its method's own stage. DivideMix:
its MixMatch step from the first one (two networks, two views; the epoch's pass over the training
set comes before the first step and counts in its time), without VRNL (see the module
docstring)."""
PLAIN_LOOP = {"cifar10_forward_vrnl", "mnist_forward_vrnl", "cifar100_volmin_vrnl"}
"""Presets with a hand-written twin (:func:`plain_loop`): Forward-VRNL and VolMinNet-VRNL."""
REAL_FILE = {
    "cifar10": "cifar-10-batches-py/data_batch_1",
    "cifar100": "cifar-100-python/train",
    "mnist": "MNIST/raw/train-images-idx3-ubyte",
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timing:
    """Step timing: block ends synchronize the device; the median block is reported."""

    def __init__(self, device: torch.device, warmup: int, steps: int, blocks: int) -> None:
        self.device, self.warmup, self.blocks = device, warmup, blocks
        self.block_steps = max(1, steps // blocks)
        self.rates: list[float] = []
        self.first_step_s = float("nan")
        self.step, self.images = 0, 0
        self.start = self.mark = time.perf_counter()
        # host seconds of timed steps, without synchronizing: inside the training step (batch
        # start to end) and between steps (the loop, data, hooks). A host ahead of the device
        # waits inside CUDA calls once its launch queue is full, so the steps right after a
        # synchronization (an empty queue) also count apart: their host time is the host's own
        self.in_step: list[float] = []
        self.between: list[float] = []
        self.after_sync: list[float] = []
        self._synced = False

    def host(self, in_step: float, between: float | None) -> None:
        """Record one step's host times (``between``: ``None`` for the first)."""
        if self.step >= self.warmup and not self.done:
            self.in_step.append(in_step)
            if between is not None:
                self.between.append(between)
            if self._synced:
                self.after_sync.append(in_step)

    def after_step(self, images: int, barrier: Any = None) -> None:
        self.step += 1
        self.images += images
        if self.step == 1:
            sync(self.device)
            self.first_step_s = time.perf_counter() - self.start
        timed = self.step - self.warmup
        self._synced = False
        if timed == 0 or (timed > 0 and timed % self.block_steps == 0 and not self.done):
            self._synced = True  # the next step starts with an empty launch queue
            sync(self.device)
            now = time.perf_counter()
            if timed == 0 and barrier is not None:
                barrier()
                now = time.perf_counter()
            elif timed > 0:
                self.rates.append(self.images / (now - self.mark))
            self.mark, self.images = now, 0

    @property
    def done(self) -> bool:
        return len(self.rates) >= self.blocks

    def result(self) -> dict[str, Any]:
        median = statistics.median(self.rates) if self.rates else float("nan")
        return {
            "images_per_s": median,
            "rates": self.rates,
            "first_step_s": self.first_step_s,
            "host_ms_in_step": _median_ms(self.in_step),
            "host_ms_between": _median_ms(self.between),
            "host_ms_after_sync": _median_ms(self.after_sync),
        }


def _median_ms(seconds: list[float]) -> float:
    return 1000 * statistics.median(seconds) if seconds else float("nan")


def compile_counts() -> dict[str, Any]:
    """What ``torch.compile`` did since the counters were cleared: graphs compiled, graph
    breaks (with their most frequent reasons) and CUDA-graph skips (a compiled graph that runs
    without CUDA graphs)."""
    counters = torch._dynamo.utils.counters
    breaks = counters["graph_break"]
    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(breaks.values())),
        "break_reasons": [reason[:160] for reason, _ in breaks.most_common(3)],
        "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"]),
    }


class StepTimer(L.Callback):
    """A :class:`Timing` of a ``noisylabels fit`` run, plus the synchronization checks.
    Its settings come from :attr:`settings` (the CLI instantiates it by class path)."""

    settings: ClassVar[dict[str, Any]] = {}
    last: ClassVar[StepTimer | None] = None

    def __init__(self) -> None:
        s = self.settings
        self.timing = Timing(s["device"], s["warmup"], s["steps"], s["blocks"])
        self.sync_steps, self.barrier = s.get("sync_steps", 0), s.get("barrier")
        self.checked = {"step": 0, "loop": 0}
        self._mode: str | None = None
        StepTimer.last = self

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.timing.start = time.perf_counter()
        self._began: float | None = None
        self._ended: float | None = None

    def _debug(self, on: bool) -> None:
        torch.cuda.set_sync_debug_mode("error" if on else "default")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._began = time.perf_counter()
        if self._mode is None and self.timing.done and self.checked["step"] < self.sync_steps:
            self._mode = "step"
            self._debug(True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._mode is not None:
            self._debug(False)
            self.checked[self._mode] += 1
            self._mode = None
        now = time.perf_counter()
        if self._began is not None:
            between = None if self._ended is None else self._began - self._ended
            self.timing.host(now - self._began, between)
        self.timing.after_step(len(batch["label"]), self.barrier)
        self._ended = time.perf_counter()
        last_of_epoch = batch_idx + 2 >= trainer.num_training_batches
        wanted = self.timing.done and self.checked["step"] >= self.sync_steps
        if wanted and self.checked["loop"] < self.sync_steps and not last_of_epoch:
            self._mode = "loop"  # until the next batch's end: data, augmentation, the loop
            self._debug(True)

    def on_train_end(self, trainer, pl_module) -> None:
        if self._mode is not None:
            self._debug(False)

    def on_exception(self, trainer, pl_module, exception) -> None:
        if self.timing.device.type == "cuda":
            self._debug(False)  # before Lightning's teardown, which may synchronize


OFF = ["--model.speed.compile", "false", "--model.speed.channels_last", "false"]
OFF += ["--trainer.precision", "32-true", "--data.on_device", "false"]


def fast(mode: str, device: torch.device) -> list[str]:
    cuda = device.type == "cuda"
    return [
        *("--model.speed.compile", mode, "--data.on_device", "true"),
        *("--model.speed.channels_last", str(cuda).lower()),
        *("--trainer.precision", "bf16-mixed" if cuda else "32-true"),
    ]


PROTOCOLS = {"cifar10_dividemix": "dividemix_cifar"}
"""The protocol a pair without a preset composes after its groups (configs/protocol/)."""


def config_args(pair: str) -> list[str]:
    """``--config`` options of a pair: its preset, or its data and method groups (and protocol)."""
    configs = REPO / "configs"
    if (configs / f"{pair}.yaml").is_file():
        return ["--config", str(configs / f"{pair}.yaml")]
    dataset, _, method = pair.partition("_")
    files = [configs / "data" / f"{dataset}.yaml", configs / "method" / f"{method}.yaml"]
    files += [configs / "protocol" / f"{PROTOCOLS[pair]}.yaml"] if pair in PROTOCOLS else []
    return [arg for file in files for arg in ("--config", str(file))]


def app_args(preset: str, data_dir: str, root: str, args: argparse.Namespace) -> list[str]:
    steps = args.warmup_steps + args.steps + 2 * args.sync_steps
    return [
        *("fit", *config_args(preset), "--data.data_dir", data_dir),
        *OWN_STAGE[preset],
        *("--trainer.accelerator", args.device, "--trainer.max_steps", str(steps)),
        *("--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0"),
        *("--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"),
        *("--trainer.default_root_dir", root, "--test_after_fit", "false"),
        *("--data.batch_size", str(args.batch_size)),
        "--trainer.callbacks+=gpu_throughput.StepTimer",
    ]


def run_app(
    preset: str,
    data_dir: str,
    extra: list[str],
    args: argparse.Namespace,
    sync_steps: int = 0,
    barrier: Any = None,
) -> dict[str, Any]:
    """One ``noisylabels fit`` run; its timing, and any synchronization caught."""
    device = torch.device(args.device)
    StepTimer.settings = dict(
        device=device,
        warmup=args.warmup_steps,
        steps=args.steps,
        blocks=args.blocks,
        sync_steps=sync_steps if device.type == "cuda" else 0,
        barrier=barrier,
    )
    torch._dynamo.reset()  # every run compiles afresh (the on-disk code cache still applies)
    torch._dynamo.utils.counters.clear()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    StepTimer.last, error = None, None
    with tempfile.TemporaryDirectory() as root:
        try:
            run(app_args(preset, data_dir, root, args) + extra)
        except RuntimeError as err:  # a synchronization under the debug mode, or a failure
            error = f"{err}\n" + "".join(traceback.format_tb(err.__traceback__)[-6:])
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode("default")
    timer = StepTimer.last
    if timer is None:  # failed before training started
        return {
            "images_per_s": float("nan"),
            "rates": [],
            "first_step_s": float("nan"),
            "checked": {"step": 0, "loop": 0},
            "error": error or "no training step ran",
        }
    out: dict[str, Any] = timer.timing.result()
    out.update(checked=timer.checked, error=error, compiled=compile_counts())
    return out


def instantiate(preset: str, data_dir: str) -> tuple[NoisyLabelMethod, NoisyDataModule]:
    """The preset's method and data module, as ``noisylabels fit`` would build them."""
    cli = make_cli(
        [*config_args(preset), "--data.data_dir", data_dir] + OWN_STAGE[preset],
        run=False,
        save_config_callback=None,
    )
    return cli.model, cli.datamodule


def plain_loop(preset: str, data_dir: str, args: argparse.Namespace) -> dict[str, float]:
    """The preset's training step, hand-written: data on the device, eager, no Lightning."""
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model, dm = instantiate(preset, data_dir)
    dm.setup("fit")
    hp, volmin = model.hparams, isinstance(model, VolMinNet)
    images = dm.data.train_images[dm.train_indices].to(device)
    labels = dm.noisy_labels[dm.train_indices].to(device)
    transform = dm.transform.to(device)
    T = None if volmin else dm.transition.float().to(device)
    model.to(device)
    net = model.net.to(memory_format=torch.channels_last) if cuda else model.net
    o = model.optim  # the optimizer's options moved into their group
    opts = [model.make_optimizer(net.parameters(), o.optimizer, o.lr, o.weight_decay)]
    if volmin:
        opts.append(model.make_optimizer([model.W], hp.t_optimizer, hp.t_lr, hp.t_weight_decay))
    timing = Timing(device, args.warmup_steps, args.steps, args.blocks)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)
    while not timing.done:
        order = torch.randperm(len(labels), device=device)
        ended = None
        for start in range(0, len(order), args.batch_size):
            began = time.perf_counter()
            idx = order[start : start + args.batch_size]
            x = transform(images[idx], train=True)
            x = x.contiguous(memory_format=torch.channels_last) if cuda else x
            y = labels[idx]
            with autocast:
                logits = net(x)
            probs = F.softmax(logits.float(), dim=1)
            T_now = model.transition() if volmin else T
            losses = forward_loss(probs, T_now, y)
            detached = forward_loss(probs, T_now.detach(), y) if volmin else None
            loss = vrnl_objective(losses, model.alpha, "local", detached).objective
            if volmin:
                loss = loss + model.volume_term()
            for opt in opts:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in opts:
                opt.step()
            timing.host(time.perf_counter() - began, None if ended is None else began - ended)
            timing.after_step(len(y))
            ended = time.perf_counter()
            if timing.done:
                break
    return timing.result()


def write_fake(root: Path, dataset: str, size: int | None = None) -> None:
    """Random data of the real size (or ``size`` training images, a fifth of that for test) in
    the dataset's on-disk format."""
    rng = np.random.default_rng(0)
    train = size or (60000 if dataset == "mnist" else 50000)
    test = max(1, train // 5) if size else 10000
    if dataset == "mnist":
        raw = root / "MNIST" / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        for prefix, n in (("train", train), ("t10k", test)):
            with open(raw / f"{prefix}-images-idx3-ubyte", "wb") as fh:
                fh.write(struct.pack(">IIII", 2051, n, 28, 28))
                fh.write(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8).tobytes())
            with open(raw / f"{prefix}-labels-idx1-ubyte", "wb") as fh:
                fh.write(struct.pack(">II", 2049, n))
                fh.write(rng.integers(0, 10, n, dtype=np.uint8).tobytes())
        return
    classes, key = (10, "labels") if dataset == "cifar10" else (100, "fine_labels")
    folder = root / REAL_FILE[dataset].split("/")[0]
    folder.mkdir(parents=True, exist_ok=True)
    names = (
        [(f"data_batch_{i}", train // 5) for i in range(1, 6)] + [("test_batch", test)]
        if dataset == "cifar10"
        else [("train", train), ("test", test)]
    )
    for name, n in names:
        entry = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)}
        entry[key] = rng.integers(0, classes, n).tolist()
        with open(folder / name, "wb") as fh:
            pickle.dump(entry, fh)


def concurrent(n: int, data_dir: str, args: argparse.Namespace) -> list[float]:
    """Images/s of each of ``n`` simultaneous MNIST runs (as shipped), timed together."""
    with tempfile.TemporaryDirectory() as barrier:
        worker = [sys.executable, __file__, "--worker", barrier, "--parallel", str(n)]
        for key in ("device", "steps", "warmup_steps", "blocks", "batch_size", "threads"):
            worker += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
        pipe = subprocess.PIPE
        procs = [
            subprocess.Popen([*worker, "--data-dir", data_dir], stdout=pipe, stderr=pipe, text=True)
            for _ in range(n)
        ]
        outs = [p.communicate() for p in procs]
    rates = []
    for proc, (out, err) in zip(procs, outs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"a concurrent run failed:\n{err[-3000:]}")
        rates.append(json.loads(out.strip().splitlines()[-1])["images_per_s"])
    return rates


def worker_main(args: argparse.Namespace) -> None:
    """One of the concurrent runs: wait for all of them after the warm-up, then time."""
    folder, n = Path(args.worker), int(args.parallel)

    def barrier() -> None:
        (folder / f"ready-{os.getpid()}").touch()
        while len(list(folder.glob("ready-*"))) < n:
            time.sleep(0.01)

    out = run_app(WORKLOADS["mnist-lenet5"][0], args.data_dir, [], args, barrier=barrier)
    print(json.dumps({"images_per_s": out["images_per_s"]}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--data-dir", default=os.environ.get("NOISYLABELS_DATA_DIR", "data"))
    parser.add_argument("--fake-data", action="store_true", help="random data where none is")
    parser.add_argument(
        "--fake-size", type=int, default=None, help="training images of fake data (default: real)"
    )
    parser.add_argument("--only", nargs="+", choices=list(WORKLOADS), default=DEFAULT_WORKLOADS)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup-steps", type=int, default=40)
    parser.add_argument("--steps", type=int, default=240, help="timed steps per run")
    parser.add_argument("--blocks", type=int, default=6, help="timed blocks per run")
    parser.add_argument("--sync-steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1, help="rounds of all rows (medians)")
    parser.add_argument("--compile-modes", nargs="*", default=None, help="default: 'default'")
    parser.add_argument("--parallel", default="1,2,4,8", help="concurrent MNIST runs; '' skips")
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help="CPU threads of each process (1 gives steadier CPU figures)",
    )
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # the figures, not the logs
    for message in ("LightningCLI's args", "`ModelCheckpoint", ".*LeafSpec"):
        warnings.filterwarnings("ignore", message=message)
    if min(args.warmup_steps, args.steps, args.blocks) < 1 or args.steps < args.blocks:
        parser.error("--warmup-steps, --steps and --blocks must be >= 1, --steps >= --blocks")
    if args.worker:
        return worker_main(args)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"device: {name}; torch {torch.__version__}; batch {args.batch_size}; "
        f"{args.warmup_steps} warm-up steps, then {args.steps} timed steps in {args.blocks} "
        f"blocks (median block reported); {torch.get_num_threads()} CPU threads",
        flush=True,
    )
    modes = ["default"] if args.compile_modes is None else args.compile_modes
    fake = tempfile.TemporaryDirectory()
    dirs = {}
    for dataset in {WORKLOADS[w][1] for w in args.only} | ({"mnist"} if args.parallel else set()):
        if (Path(args.data_dir) / REAL_FILE[dataset]).is_file():
            dirs[dataset] = args.data_dir
        elif args.fake_data:
            write_fake(Path(fake.name), dataset, args.fake_size)
            dirs[dataset] = fake.name
        else:
            parser.error(f"no {dataset} under --data-dir {args.data_dir}; pass --fake-data")
    kinds = {d: "real" if path == args.data_dir else "fake" for d, path in dirs.items()}
    figures: dict[str, Any] = {}
    print("data: " + ", ".join(f"{d} {kind}" for d, kind in sorted(kinds.items())))
    for workload in args.only:
        preset, data = WORKLOADS[workload][0], dirs[WORKLOADS[workload][1]]
        plan = [("app, speed options off", OFF, 0), ("app as shipped", [], args.sync_steps)]
        plan += [(f"app, compile {mode}", fast(mode, device), 0) for mode in modes]
        if preset in PLAIN_LOOP:
            plan += [("plain eager loop", None, 0)]
        rows: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeats):  # rounds: every row sees the machine's load alike
            for row, extra, sync_steps in plan:
                if extra is None:
                    result = plain_loop(preset, data, args)
                else:
                    result = run_app(preset, data, extra, args, sync_steps)
                if row in rows:  # the first round's compile times; every round's blocks
                    rows[row]["rates"] += result["rates"]
                    rows[row]["error"] = rows[row].get("error") or result.get("error")
                else:
                    rows[row] = result
        for result in rows.values():
            result["images_per_s"] = statistics.median(result["rates"] or [float("nan")])
            result["ms_per_step"] = 1000 * args.batch_size / result["images_per_s"]
        report(workload, rows)
        keys = ("images_per_s", "ms_per_step", "first_step_s", "host_ms_in_step")
        keys += ("host_ms_after_sync", "host_ms_between")
        figures[workload] = {
            row: {key: r.get(key) for key in (*keys, "compiled", "error")}
            for row, r in rows.items()
        }
        figures[workload]["app as shipped"]["sync_checked"] = rows["app as shipped"].get("checked")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
    if args.parallel:
        print("\nconcurrent MNIST LeNet-5 runs (as shipped) on one device:")
        for n in (int(v) for v in args.parallel.split(",")):
            rates = concurrent(n, dirs["mnist"], args)
            print(
                f"  N={n}: {sum(rates):9,.0f} img/s in total, "
                f"{statistics.median(rates):9,.0f} per run (median)",
                flush=True,
            )


def host_line(r: dict[str, Any]) -> str:
    """Milliseconds per step: the wall time (from the median rate); the host's time in the
    training step (of every timed step, and of those right after a synchronization, which no
    full launch queue holds up) and between steps."""
    nan = float("nan")
    return (
        f"ms/step: {r['ms_per_step']:.2f} wall; host in the step "
        f"{r.get('host_ms_in_step', nan):.2f} ({r.get('host_ms_after_sync', nan):.2f} right "
        "after a sync), between steps "
        f"{r.get('host_ms_between', nan):.2f}"
    )


def report(workload: str, rows: dict[str, dict[str, Any]]) -> None:
    print(f"\n{workload}")
    for row, r in rows.items():
        print(
            f"  {row:28s} {r['images_per_s']:9,.0f} img/s   first step {r['first_step_s']:6.1f} s"
        )
        print(f"    {host_line(r)}")
        if r.get("compiled") and r["compiled"]["graphs"]:
            c = r["compiled"]
            print(
                f"    compiled: {c['graphs']} graphs, {c['graph_breaks']} graph breaks, "
                f"{c['cudagraph_skips']} CUDA-graph skips"
                + "".join(f"\n      break: {reason}" for reason in c["break_reasons"])
            )
        if r.get("error"):
            print(f"    FAILED: {r['error']}")
    shipped = rows["app as shipped"]["images_per_s"]
    off = rows["app, speed options off"]["images_per_s"]
    print(f"  ratios: shipped/off {shipped / off:.2f}x", end="")
    if "plain eager loop" in rows:
        plain = rows["plain eager loop"]["images_per_s"]
        print(
            f", shipped/plain loop {shipped / plain:.2f}x, off/plain loop {off / plain:.2f}x",
            end="",
        )
        for row, r in rows.items():
            if row.startswith("app, compile"):
                print(f", {row[5:]}/plain loop {r['images_per_s'] / plain:.2f}x", end="")
    checked = rows["app as shipped"].get("checked", {})
    if any(checked.values()) or rows["app as shipped"].get("error"):
        ok = "no synchronization" if not rows["app as shipped"].get("error") else "SYNCHRONIZED"
        print(
            f"\n  sync check (as shipped): {ok} in {checked['step']} training steps and "
            f"{checked['loop']} whole-loop steps",
            end="",
        )
    print(flush=True)


if __name__ == "__main__":
    main()
