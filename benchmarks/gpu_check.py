"""The GPU acceptance check (``make gpu-check``): one command that proves the CUDA path.

On a machine with a CUDA GPU it runs, in at most ``--budget`` seconds (8 minutes), and prints one
summary table, also written as JSON (``--out``):

1. ``toolchain``: ``torch.compile`` with CUDA graphs (``reduce-overhead``) of a toy function;
2. ``cuda-tests``: the tests that need CUDA (``pytest -m cuda``), among them steady-state
   training under ``torch.cuda.set_sync_debug_mode("error")``;
3. ``stage-change``: Forward (T̂ estimated after a warm-up epoch, a newly initialised network)
   and Co-teaching (τ estimated, two networks) through their stage change, compiled with CUDA
   graphs and eagerly, in float32: both finish and agree within float tolerance (per-epoch
   training loss, validation and test accuracy);
4. ``throughput``: ``benchmarks/gpu_throughput.py --fake-data`` for CIFAR-10 ResNet-18,
   CIFAR-100 ResNet-32 and MNIST LeNet-5: images/s with the speed options off, as shipped,
   compiled with CUDA graphs, and of the plain eager loop (short settings); for the compiled
   rows and the plain loop also the host's milliseconds in a step against the wall time per step
   and the graphs, graph breaks and CUDA-graph skips (where a compiled step's time goes);
5. ``cifar-fit``: ``noisylabels fit`` of Forward-VRNL (ResNet-18) on random CIFAR-10-shaped data
   written in CIFAR-10's on-disk format, 2 epochs (warm-up and stage change) as shipped, with
   ``--model.speed.compile true`` and with ``--model.speed.compile false``: each finishes;
   images/s per epoch, graphs compiled, recompiles, CUDA-graph skips;
6. ``mnist`` (with ``--data-dir`` holding MNIST, ``make gpu-check DATA=...``): 3 epochs of
   ``configs/data/mnist.yaml`` + ``configs/method/forward_vrnl.yaml``, compiled and eager: the
   test accuracy of each.

A step that would not fit in what is left of the budget is skipped and says so. The exit status
is 1 if a step failed. Without CUDA this is a dry run: it says so, lists what it would run and
exits 0 (CI runs it); ``--device cpu`` rehearses every step on the CPU with tiny sizes and the
``aot_eager`` backend, to check the script itself (its figures mean nothing).

It needs only the project's dependencies (and pytest for step 2) and no network; it runs the
checkout it is in (``PYTHONPATH`` is set for its subprocesses), so nothing needs installing but
missing dependencies: on a machine without network, install their wheels, brought along, first
(``pip install --no-index --no-deps --target DIR WHEELS`` and ``PYTHONPATH=DIR``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROBE_ENV = "NOISYLABELS_GPU_CHECK_PROBE"
BUDGET_S = 480
LOSS_RTOL, ACC_ATOL = 1e-3, 0.01
"""Compiled vs eager in float32 (``stage-change``): per-epoch training loss within a relative
1e-3, accuracies within 0.01 (kernels sum in another order; the difference grows a little over
the epochs)."""
TARGETS = {"cifar10-resnet18": 30_000, "cifar100-resnet32": 25_000}
"""Images/s the compiled app should reach on one H100-class GPU at batch 128."""


class RunProbe(L.Callback):
    """What a ``noisylabels fit`` of the check did, written as JSON to ``$NOISYLABELS_GPU_CHECK_
    PROBE`` at the end of training: per epoch the training seconds (the device synchronized),
    images, images/s and the logged ``train/*`` and ``val/*`` values; the compile mode, a
    fall-back to eager if there was one, graphs compiled, graph breaks and CUDA-graph skips."""

    def __init__(self) -> None:
        self.path = Path(os.environ[PROBE_ENV])
        self.epochs: list[dict[str, Any]] = []
        self.start, self.images = 0.0, 0

    def _sync(self, module: L.LightningModule) -> None:
        if module.device.type == "cuda":
            torch.cuda.synchronize(module.device)

    def _metrics(self, trainer: L.Trainer) -> None:
        if self.epochs:  # the epoch's end logs train/* after the callbacks' epoch end
            self.epochs[-1]["metrics"] = {
                k: float(v)
                for k, v in trainer.callback_metrics.items()
                if k.startswith(("train/", "val/"))
            }

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._metrics(trainer)
        self._sync(pl_module)
        self.start, self.images = time.perf_counter(), 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.images += len(batch["label"])

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._sync(pl_module)
        seconds = time.perf_counter() - self.start
        self.epochs.append(
            {"seconds": seconds, "images": self.images, "images_per_s": self.images / seconds}
        )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._metrics(trainer)
        counters = torch._dynamo.utils.counters
        speed = getattr(pl_module, "speed", None)
        record = {
            "epochs": self.epochs,
            "mode": getattr(speed, "mode", None),
            "cudagraphs": getattr(speed, "cudagraphs", None),
            "fallback": getattr(speed, "failure", None),
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
        }
        if trainer.is_global_zero:
            self.path.write_text(json.dumps(record, indent=2))


# ---------------------------------------------------------------- running things
class Check:
    """The settings and the clock of one check."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.rehearsal = args.device == "cpu"
        self.deadline = time.monotonic() + args.budget
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1",
        }

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, cmd: list[str]) -> subprocess.CompletedProcess:
        """Run ``cmd`` (from the repository root) within what is left of the budget."""
        return self.run_many({"run": (cmd, {})})["run"]

    def run_many(
        self, commands: dict[str, tuple[list[str], dict[str, str]]]
    ) -> dict[str, subprocess.CompletedProcess]:
        """Run the ``commands`` (name: command and extra environment) side by side, within what
        is left of the budget; a command still running then is stopped and returns 124. Its
        output (stdout and stderr together) is the result's ``stdout``."""
        procs = {}
        for name, (cmd, extra) in commands.items():
            log = open(self.work / f"{name}.log", "w+")  # noqa: SIM115 - closed below
            proc = subprocess.Popen(
                cmd, cwd=REPO, env={**self.env, **extra}, stdout=log, stderr=subprocess.STDOUT
            )
            procs[name] = (proc, log, cmd)
        results = {}
        for name, (proc, log, cmd) in procs.items():
            try:
                code = proc.wait(timeout=max(1.0, self.left()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = 124
            log.seek(0)
            out = log.read()
            log.close()
            if code == 124:
                out += "\ntimed out: the time budget was spent"
            results[name] = subprocess.CompletedProcess(cmd, code, out, "")
        return results

    def fit(self, name: str, args: list[str]) -> dict[str, Any]:
        """``noisylabels fit ARGS`` with the probe (see :meth:`fit_many`)."""
        return self.fit_many({name: args})[name]

    def fit_many(self, runs: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
        """``noisylabels fit ARGS`` of each run, side by side, with the probe: its results.json,
        the probe's record, the recompiles logged, and the error if it failed."""
        commands = {}
        for name, args in runs.items():
            cmd = [sys.executable, "-m", "noisylabels.cli", "fit", *args]
            cmd += ["--trainer.default_root_dir", str(self.work / name)]
            cmd += ["--trainer.enable_progress_bar", "false"]
            cmd += ["--trainer.callbacks+=gpu_check.RunProbe"]
            if self.rehearsal:
                cmd += ["--trainer.accelerator", "cpu"]
            commands[name] = (cmd, {PROBE_ENV: str(self.work / f"{name}.probe.json")})
        outs = {}
        for name, proc in self.run_many(commands).items():
            found = sorted((self.work / name).rglob("results.json"))
            probe = self.work / f"{name}.probe.json"
            out: dict[str, Any] = {
                "ok": proc.returncode == 0 and bool(found),
                "recompiles": proc.stdout.count("Recompiling function"),
                "results": json.loads(found[0].read_text()) if found else None,
                "probe": json.loads(probe.read_text()) if probe.is_file() else None,
            }
            if not out["ok"]:
                out["error"] = _tail(proc.stdout)
            outs[name] = out
        return outs

    def compiled(self) -> list[str]:
        """Options of a compiled run: CUDA graphs on CUDA; the quick backend in a rehearsal."""
        backend = ["--model.speed.compile_backend", "aot_eager"] if self.rehearsal else []
        return ["--model.speed.compile", "true", *backend]


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------- the steps
def toolchain(check: Check) -> dict[str, Any]:
    """A toy function compiled with CUDA graphs: the compiler, Triton and the C toolchain."""
    device, mode = ("cpu", "default") if check.rehearsal else ("cuda", "reduce-overhead")
    code = (
        "import torch\n"
        f"f = torch.compile(lambda x: (x.sin() + 1).sum(), mode={mode!r})\n"
        f"x = torch.randn(4096, device={device!r})\n"
        "for _ in range(3):\n    y = f(x)\n"
        "print('toolchain ok', float(y))\n"
    )
    proc = check.run([sys.executable, "-c", code])
    ok = proc.returncode == 0 and "toolchain ok" in proc.stdout
    return {
        "status": "pass" if ok else "fail",
        "summary": "compiled and ran" if ok else _tail(proc.stdout),
        "figures": {},
    }


def cuda_tests(check: Check) -> dict[str, Any]:
    """``pytest -m cuda``: every test that needs CUDA."""
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "tests"]
    if importlib.util.find_spec("xdist") is not None and not check.rehearsal:
        cmd += ["-n", "4"]  # the tests compile: 4 processes share the machine's cores
    proc = check.run(cmd)
    lines = proc.stdout.strip().splitlines()
    last = lines[-1] if lines else "no output"
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", last)}
    ok = proc.returncode == 0 and counts.get("passed", 0) > 0
    if check.rehearsal:  # no CUDA: every such test is skipped
        ok = proc.returncode == 0 and counts.get("skipped", 0) > 0
    summary = last if ok else _tail(proc.stdout, 30)
    return {"status": "pass" if ok else "fail", "summary": summary, "figures": counts}


STAGE_METHODS = {
    "forward": [
        "--config",
        "configs/method/forward_vrnl.yaml",
        "--model.schedule.warmup_epochs",
        "1",
    ],
    "coteaching": [
        *("--config", "configs/method/coteaching.yaml", "--model.schedule.warmup_epochs", "1"),
        *("--model.forget_rate", "estimate", "--model.ramp_epochs", "1"),
    ],
}


def stage_change(check: Check) -> dict[str, Any]:
    """Two-stage Forward and Co-teaching, compiled vs eager, float32, data on the device."""
    common = [
        *("--config", "configs/data/digits.yaml", "--trainer.max_epochs", "3"),
        *("--trainer.precision", "32-true", "--data.on_device", "true"),
    ]
    variants = {"eager": ["--model.speed.compile", "false"], "compiled": check.compiled()}
    runs = check.fit_many(  # side by side: nothing here is timed
        {
            f"stage-{method}-{kind}": common + extra + options
            for method, extra in STAGE_METHODS.items()
            for kind, options in variants.items()
        }
    )
    figures, problems = {}, []
    for method in STAGE_METHODS:
        pair = {kind: runs[f"stage-{method}-{kind}"] for kind in variants}
        figures[method] = pair
        problems += [f"{method} {k}: {r.get('error', '')}" for k, r in pair.items() if not r["ok"]]
        if all(r["ok"] for r in pair.values()):
            problems += [f"{method}: {p}" for p in _agree(pair["eager"], pair["compiled"])]
    status = "fail" if problems else "pass"
    summary = (
        "; ".join(problems)
        if problems
        else ("Forward and Co-teaching: compiled = eager within tolerance through the stage change")
    )
    return {"status": status, "summary": summary, "figures": figures}


def _agree(eager: dict[str, Any], compiled: dict[str, Any]) -> list[str]:
    """How a compiled run differs from its eager twin beyond the tolerances."""
    problems = []
    if compiled["probe"]["fallback"]:
        problems.append(f"compiling fell back to eager: {compiled['probe']['fallback']}")
    pairs = zip(eager["probe"]["epochs"], compiled["probe"]["epochs"], strict=True)
    for epoch, (e, c) in enumerate(pairs):
        for key, value in e.get("metrics", {}).items():
            other = c.get("metrics", {}).get(key, math.nan)
            tol = ACC_ATOL if key.endswith("acc") else LOSS_RTOL * max(abs(value), 1e-8)
            if key in ("train/loss", "val/acc") and not abs(other - value) <= tol:
                problems.append(f"epoch {epoch} {key} {other:.6g} vs eager {value:.6g}")
    for key in ("test_acc", "test_acc_last"):
        a, b = eager["results"][key], compiled["results"][key]
        if not abs(a - b) <= ACC_ATOL:
            problems.append(f"{key} {b:.4f} vs eager {a:.4f}")
    return problems


def write_fake_cifar10(root: Path, n_train: int, n_test: int) -> Path:
    """Random CIFAR-10-shaped images and labels in its on-disk format (5 training batches and
    ``test_batch``), read as the loader reads CIFAR-10."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in [
        *((f"data_batch_{i}", n_train // 5) for i in range(1, 6)),
        ("test_batch", n_test),
    ]:
        entry = {
            "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            "labels": rng.integers(0, 10, n).tolist(),
        }
        with open(folder / name, "wb") as fh:
            pickle.dump(entry, fh)
    return root


def cifar_fit(check: Check) -> dict[str, Any]:
    """Forward-VRNL ResNet-18 on random CIFAR-10-shaped data, 2 epochs (warm-up, estimate, own
    stage), as shipped, compiled and eager."""
    n_train, n_test = (500, 100) if check.rehearsal else (10_000, 2_000)
    data = write_fake_cifar10(check.work / "cifar", n_train, n_test)
    common = [
        *("--config", "configs/data/cifar10.yaml", "--config", "configs/method/forward_vrnl.yaml"),
        *("--data.data_dir", str(data)),
        *("--trainer.max_epochs", "2", "--model.schedule.warmup_epochs", "1"),
    ]
    if check.rehearsal:
        common += ["--model.network.backbone", "resnet18", "--data.batch_size", "64"]
    variants = {
        "as shipped": [],
        "compile true": check.compiled(),
        "compile false": ["--model.speed.compile", "false"],
    }
    figures = {
        name: check.fit(f"cifar-{i}", common + extra)
        for i, (name, extra) in enumerate(variants.items())
    }
    failed = [f"{name}: {r['error']}" for name, r in figures.items() if not r["ok"]]
    fallback = [
        f"{name}: fell back to eager ({r['probe']['fallback']})"
        for name, r in figures.items()
        if r["ok"] and r["probe"]["fallback"]
    ]
    parts = []
    for name, r in figures.items():
        if r["ok"]:
            rates = "/".join(f"{e['images_per_s']:,.0f}" for e in r["probe"]["epochs"])
            parts.append(
                f"{name}: {rates} img/s, {r['probe']['graphs']} graphs, "
                f"{r['recompiles']} recompiles, {r['probe']['cudagraph_skips']} "
                "CUDA-graph skips"
            )
    status = "fail" if failed or fallback else "pass"
    return {"status": status, "summary": "; ".join(failed + fallback + parts), "figures": figures}


def throughput(check: Check) -> dict[str, Any]:
    """``gpu_throughput.py --fake-data`` with short settings (no concurrent runs)."""
    out = check.work / "throughput.json"
    cmd = [
        sys.executable,
        str(HERE / "gpu_throughput.py"),
        "--fake-data",
        "--parallel",
        "",
        "--json",
        str(out),
    ]
    if check.rehearsal:
        cmd += [
            *("--device", "cpu", "--batch-size", "8", "--fake-size", "1500"),
            "--warmup-steps",
            "1",
            "--steps",
            "2",
            "--blocks",
            "1",
            "--sync-steps",
            "0",
            "--compile-modes",
        ]
    else:
        cmd += [
            "--warmup-steps",
            "20",
            "--steps",
            "120",
            "--blocks",
            "4",
            "--sync-steps",
            "5",
            "--compile-modes",
            "reduce-overhead",
        ]
    proc = check.run(cmd)
    figures = json.loads(out.read_text()) if out.is_file() else {}
    errors = [
        f"{w} / {row}: {r['error'][:200]}"
        for w, rows in figures.items()
        for row, r in rows.items()
        if r.get("error")
    ]
    parts = []
    for workload, rows in figures.items():
        rates = ", ".join(f"{row}: {r['images_per_s']:,.0f}" for row, r in rows.items())
        target = TARGETS.get(workload)
        best = max(
            (r["images_per_s"] for row, r in rows.items() if row.startswith("app")),
            default=math.nan,
        )
        verdict = "met" if best >= (target or 0) else "missed"
        met = "" if target is None else f" (target {target:,}: {verdict})"
        parts.append(f"{workload}: {rates} img/s{met}{_where_time_goes(rows)}")
    ok = proc.returncode == 0 and figures and not errors
    summary = "; ".join(errors + parts) if figures else _tail(proc.stdout)
    return {"status": "pass" if ok else "fail", "summary": summary, "figures": figures}


def _where_time_goes(rows: dict[str, Any]) -> str:
    """Of the compiled rows and the plain loop: the host's milliseconds in a step right after a
    synchronization (nothing queued holds it up) against the wall time per step, and what was
    compiled (graphs, graph breaks, CUDA-graph skips)."""
    words = []
    for row, r in rows.items():
        wall, host = r.get("ms_per_step"), r.get("host_ms_after_sync")
        compiled = r.get("compiled") or {}
        if (
            host is None
            or wall is None
            or not (compiled.get("graphs") or row == "plain eager loop")
        ):
            continue
        word = f"{row}: host {host:.1f} of {wall:.1f} ms/step"
        if compiled.get("graphs"):
            word += (
                f", {compiled['graphs']} graphs, {compiled['graph_breaks']} breaks, "
                f"{compiled['cudagraph_skips']} CUDA-graph skips"
            )
        words.append(word)
    return f" [{'; '.join(words)}]" if words else ""


def mnist(check: Check) -> dict[str, Any]:
    """3 epochs of the MNIST and Forward-VRNL groups, compiled and eager, on real MNIST."""
    data = check.args.data_dir
    if not data or not (Path(data) / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file():
        return {
            "status": "skip",
            "summary": "no MNIST under --data-dir (make gpu-check DATA=...)",
            "figures": {},
        }
    common = [
        *("--config", "configs/data/mnist.yaml", "--config", "configs/method/forward_vrnl.yaml"),
        *("--data.data_dir", str(data)),
        *("--trainer.max_epochs", "3", "--model.schedule.warmup_epochs", "1"),
    ]
    if check.rehearsal:
        common += ["--trainer.limit_train_batches", "5", "--trainer.limit_val_batches", "2"]
    runs = {
        "compiled": check.fit("mnist-compiled", common + check.compiled()),
        "eager": check.fit("mnist-eager", common + ["--model.speed.compile", "false"]),
    }
    failed = [f"{k}: {r['error']}" for k, r in runs.items() if not r["ok"]]
    accs = [f"{k}: test_acc {r['results']['test_acc']:.4f}" for k, r in runs.items() if r["ok"]]
    return {
        "status": "fail" if failed else "pass",
        "summary": "; ".join(failed + accs),
        "figures": runs,
    }


STEPS: list[tuple[str, Callable[[Check], dict[str, Any]], int, str]] = [
    ("toolchain", toolchain, 20, "torch.compile (reduce-overhead) of a toy function"),
    ("cuda-tests", cuda_tests, 60, "pytest -m cuda (CUDA graphs = eager, no host sync)"),
    ("stage-change", stage_change, 60, "Forward, Co-teaching: stage change compiled vs eager"),
    ("throughput", throughput, 90, "gpu_throughput.py --fake-data: ResNet-18, ResNet-32, LeNet-5"),
    ("cifar-fit", cifar_fit, 60, "fit fake CIFAR-10 ResNet-18: shipped, compile true/false"),
    ("mnist", mnist, 40, "MNIST Forward-VRNL groups, 3 epochs, compiled and eager"),
]
"""(name, step, seconds it needs at least, what it does), in the order they run: the compiled
throughput rows fill inductor's on-disk cache, from which the fits' graphs then load."""


def table(rows: list[dict[str, Any]]) -> str:
    """The summary as a Markdown table."""
    lines = ["| step | status | seconds | result |", "|---|---|---|---|"]
    for r in rows:
        summary = r["summary"].replace("\n", " ").replace("|", "/")
        lines.append(f"| {r['step']} | {r['status']} | {r['seconds']:.0f} | {summary} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default="cuda",
        choices=["cuda", "cpu"],
        help="cpu: rehearse the steps with tiny sizes (checks this script)",
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("NOISYLABELS_DATA_DIR"),
        help="a folder with MNIST/raw (step mnist)",
    )
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds in all")
    parser.add_argument("--out", default="runs/gpu-check.json", help="the JSON summary")
    parser.add_argument("--only", nargs="+", choices=[s[0] for s in STEPS])
    parser.add_argument(
        "--work",
        help="keep the steps' logs, probes and runs in this folder (default: a temporary one)",
    )
    args = parser.parse_args(argv)
    steps = [s for s in STEPS if args.only is None or s[0] in args.only]
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu-check needs a CUDA GPU (torch.cuda.is_available() is False here): dry run, "
            f"nothing runs. On a GPU it runs, within {args.budget:.0f} s:"
        )
        for name, _, _, what in steps:
            print(f"  {name:13s} {what}")
        print(f"and prints one table, also written to {args.out}.")
        return 0
    device = "CPU (rehearsal)" if args.device == "cpu" else torch.cuda.get_device_name()
    print(
        f"gpu-check on {device}, torch {torch.__version__}, budget {args.budget:.0f} s", flush=True
    )
    rows: list[dict[str, Any]] = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as temporary:
        work = Path(args.work or temporary)
        work.mkdir(parents=True, exist_ok=True)
        check = Check(args, work)
        for name, step, needs, what in steps:
            start = time.monotonic()
            if check.left() < needs:
                row = {
                    "status": "skip",
                    "summary": f"{check.left():.0f} s of the budget left, {needs} s needed",
                    "figures": {},
                }
            else:
                print(f"[{name}] {what} ...", flush=True)
                try:
                    row = step(check)
                except Exception as err:  # noqa: BLE001 - a broken step is a failed one
                    row = {
                        "status": "fail",
                        "summary": f"{type(err).__name__}: {err}",
                        "figures": {},
                    }
            row = {"step": name, "seconds": time.monotonic() - start, **row}
            rows.append(row)
            done = f"[{name}] {row['status']} ({row['seconds']:.0f} s)"
            print(f"{done}: {row['summary']}", flush=True)
            out.write_text(
                json.dumps(
                    {"device": device, "torch": torch.__version__, "steps": rows},
                    indent=2,
                    default=str,
                )
            )
    print("\n" + table(rows))
    print(f"\n(JSON: {out})")
    return 1 if any(r["status"] == "fail" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
