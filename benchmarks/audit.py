"""How well ``noisylabels audit`` finds flipped labels, against cleanlab's confident learning.

For every dataset x noise kind x rate (MNIST with LeNet-5, the scikit-learn digits with the
quickstart's MLP; symmetric, pair and instance-dependent noise at 20 % and 40 %), in one
process with one thread:

1. one run of ``noisylabels fit`` (CE with VRNL, alpha 0.01, SGD with momentum, a few epochs)
   records every sample's training dynamics; ``noisylabels audit`` ranks its training split by
   each training-dynamics score (``margin``, ``loss``, ``weight``): no training beyond the run;
2. K-fold cross-validation of the same configuration (K models on K-1 folds each, stratified)
   gives every training sample's out-of-sample predicted probabilities; the audit's
   ``posterior`` score ranks by them, and cleanlab's ``find_label_issues`` (default
   ``prune_by_noise_rate``) is fed exactly the same probabilities; its AUROC is that of
   ``cleanlab.rank.get_label_quality_scores`` (self-confidence, the default).

Printed per cell and scorer: precision and recall of the flagged set and the AUROC of the score,
against the labels the noise really flipped; the training seconds each needs (the run, or the K
fold models) and the seconds of the ranking itself. The table is also written as JSON.
cleanlab is a benchmark-only dependency: ``pip install -e ".[audit-bench]"``.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/audit.py --data-dir /folder/holding/MNIST \
        --json audit_benchmark.json
    python benchmarks/audit.py --render audit_benchmark.json     # the table again

The recipe is fixed beforehand (no tuning on the flipped labels); the benchmark chose only the
audit's default score.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from noisylabels.audit import audit, quality  # noqa: E402
from noisylabels.audit.issues import out_of_sample  # noqa: E402
from noisylabels.audit.run_folder import read_run  # noqa: E402
from noisylabels.cli import run  # noqa: E402
from noisylabels.run import run_dir  # noqa: E402

CONFIGS = REPO / "configs"
# dataset: (configs, options) of the one recipe, fixed before any measurement
RECIPES: dict[str, tuple[list[str], list[str]]] = {
    "mnist": (
        ["data/mnist.yaml", "method/ce.yaml"],
        ["--model.alpha", "0.01", "--trainer.max_epochs", "{epochs}"],
    ),
    "digits": (  # the quickstart's data, network and schedule, with CE-VRNL
        ["data/digits.yaml", "method/ce.yaml"],
        ["--model.alpha", "0.01", "--model.optim.lr", "0.05", "--model.schedule.milestones", "[10]",
         "--trainer.max_epochs", "15"],
    ),
}  # fmt: skip
DYNAMICS = ("margin", "loss", "weight")


def quiet_lightning() -> None:
    """Lightning's per-fit banners and tips would drown the table."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def fit(dataset: str, noise: str, rate: float, args: argparse.Namespace, root: Path) -> Path:
    """One run of the recipe; returns its folder."""
    configs, options = RECIPES[dataset]
    argv = ["fit"]
    for config in configs:
        argv += ["--config", str(CONFIGS / config)]
    argv += [o.format(epochs=args.epochs) for o in options]
    if dataset == "mnist":
        argv += ["--data.data_dir", args.data_dir]
    argv += [
        "--data.noise_type", noise, "--data.noise_rate", str(rate),
        "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(root),
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--test_after_fit", "false",
    ]  # fmt: skip
    cli = run(argv)
    return run_dir(cli.trainer)


def cell(dataset: str, noise: str, rate: float, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every scorer's row of one dataset x noise x rate."""
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores

    root = Path(args.runs_dir) / f"{dataset}-{noise}-{rate}"
    start = time.perf_counter()
    folder = fit(dataset, noise, rate, args, root)
    run_seconds = time.perf_counter() - start
    rows: list[dict[str, Any]] = []
    base = {"dataset": dataset, "noise": noise, "rate": rate}
    for score in DYNAMICS:
        start = time.perf_counter()
        issues = audit(folder, score=score, grid=False)
        seconds = time.perf_counter() - start
        times = {"train_s": run_seconds, "rank_s": seconds}
        rows.append({**base, "scorer": f"audit {score}", **times, **issues.quality})
    # K-fold: trained once (kept in the run folder), scored by the audit and by cleanlab
    run_folder = read_run(folder)
    oos = out_of_sample(run_folder, args.folds)
    start = time.perf_counter()
    issues = audit(folder, score="posterior", folds=args.folds, grid=False)
    times = {"train_s": oos.seconds, "rank_s": time.perf_counter() - start}
    rows.append(
        {**base, "scorer": f"audit posterior ({args.folds}-fold)", **times, **issues.quality}
    )
    labels = run_folder.noisy_labels[oos.index].numpy()
    flipped = torch.from_numpy(labels != run_folder.clean_labels[oos.index].numpy())
    pred_probs = oos.noisy_probs.double()
    pred_probs = (pred_probs / pred_probs.sum(1, keepdim=True)).numpy()
    start = time.perf_counter()
    mask = find_label_issues(labels, pred_probs, n_jobs=1)
    label_quality = get_label_quality_scores(labels, pred_probs)
    seconds = time.perf_counter() - start
    measured = quality(
        torch.from_numpy(1.0 - label_quality), torch.from_numpy(np.asarray(mask)), flipped
    )
    times = {"train_s": oos.seconds, "rank_s": seconds}
    rows.append({**base, "scorer": f"cleanlab ({args.folds}-fold)", **times, **measured})
    return rows


def fmt(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as Markdown, then the best one-run score against cleanlab per cell."""
    lines = [
        "| dataset | noise | rate | scorer | precision | recall | AUROC | flagged / flipped "
        "| train s | rank s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['noise']} | {r['rate']:.0%} | {r['scorer']} | "
            f"{fmt(r['precision'])} | {fmt(r['recall'])} | {fmt(r['auroc'], 4)} | "
            f"{r['flagged']} / {r['flipped']} | {r['train_s']:.0f} | {r['rank_s']:.2f} |"
        )
    lines += ["", "| dataset | noise | rate | best one-run score | AUROC | cleanlab AUROC | "
              "difference |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    cells = list(dict.fromkeys((r["dataset"], r["noise"], r["rate"]) for r in rows))
    for key in cells:
        mine = [r for r in rows if (r["dataset"], r["noise"], r["rate"]) == key]
        ours = max(
            (r for r in mine if r["scorer"].split()[-1] in DYNAMICS),
            key=lambda r: r["auroc"] or 0.0,
        )
        theirs = next(r for r in mine if r["scorer"].startswith("cleanlab"))
        diff = (ours["auroc"] or 0.0) - (theirs["auroc"] or 0.0)
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]:.0%} | {ours['scorer']} | {fmt(ours['auroc'], 4)} "
            f"| {fmt(theirs['auroc'], 4)} | {diff:+.5f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=os.environ.get("NOISYLABELS_DATA_DIR", "data"))
    p.add_argument("--datasets", default="mnist,digits")
    p.add_argument("--noise", default="symmetric,pair,instance")
    p.add_argument("--rates", default="0.2,0.4")
    p.add_argument("--epochs", type=int, default=5, help="MNIST epochs of the recipe")
    p.add_argument("--folds", type=int, default=5, help="K of the cross-validation")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs-dir", help="keep the runs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    p.add_argument("--render", type=Path, help="only print the table of a JSON file written before")
    args = p.parse_args(argv)
    if args.render is not None:
        print(table(json.loads(args.render.read_text())["rows"]))
        return
    torch.set_num_threads(args.threads)
    quiet_lightning()
    temporary = None
    if args.runs_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="audit_bench_")
        args.runs_dir = temporary.name
    rows: list[dict[str, Any]] = []
    for dataset in args.datasets.split(","):
        for noise in args.noise.split(","):
            for rate in (float(r) for r in args.rates.split(",")):
                rows += cell(dataset, noise, rate, args)
                print(table([r for r in rows if r["dataset"] == dataset][-5:]), flush=True)
    print()
    print(table(rows))
    if args.json is not None:
        import cleanlab

        settings = {k: v for k, v in vars(args).items() if k != "json"}
        meta = {
            "command": " ".join(sys.argv),
            "settings": settings,
            "recipes": {k: {"configs": c, "options": o} for k, (c, o) in RECIPES.items()},
            "cleanlab": cleanlab.__version__,
            "torch": torch.__version__,
            "machine": platform.platform(),
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
        print(f"wrote {args.json}")
    if temporary is not None:
        temporary.cleanup()


if __name__ == "__main__":
    main()
