"""What a user sees when something they gave is wrong: one paragraph naming the file or option
and what to do, a non-zero exit status, no traceback (``--debug`` shows it), and no folder that
looks like a run; programming errors keep their traceback."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from as_command import run_command

from conftest import CONFIGS, REPO, config_args, make_cifar, make_mnist

QUICKSTART = str(CONFIGS / "quickstart.yaml")
MNIST_CE = config_args("mnist_ce")  # --config data/mnist.yaml --config method/ce.yaml
CIFAR10_CE = config_args("cifar10_ce")
CE_ON_DIGITS = ["--model", "CE", "--model.schedule.warmup_epochs", "0"]
REWEIGHT = ["--model.class_path", "noisylabels.methods.Reweight"]
ESTIMATE = ["--model.transition", "estimate"]
SECRET = "s3cr3t-token-never-printed"  # in a file given as a config by mistake
OTHER_SUBCOMMANDS = ("report", "plot", "sweep", "audit")  # cases run as given, not as `fit`
STAGES = ("test", "validate", "predict")  # Lightning's other stages, given first in a case
# the options of the fixtures' runs besides their config (a resume of them repeats them)
FIXTURE_RUN = ["--trainer.limit_train_batches", "2"]


DUPLICATE_OPTION = """\
model:
  init_args:
    lr: 0.1
    alpha: 0.2
    lr: 0.01
"""

DUPLICATE_AXIS = """\
name: duplicates
base: [{quickstart}]
axes:
  noise:
    sym-0.2: {{data.noise_type: symmetric, data.noise_rate: 0.2}}
    pair-0.2: {{data.noise_type: pair, data.noise_rate: 0.2}}
    sym-0.2: {{data.noise_type: symmetric, data.noise_rate: 0.4}}
"""


class RunsCode:
    """A pickled object whose loading would run a command (a hostile file's payload)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@dataclass
class Files:
    """Inputs the cases point at, written once."""

    root: Path
    digits_ckpt: Path  # a CE run on the digits
    mnist_ckpt: Path  # a CE run on the tiny MNIST
    mnist_dir: Path
    marker: Path  # created if a payload ever runs


def _fit(root: Path, *args: str) -> Path:
    from noisylabels.cli import run

    run(["fit", *args, "--trainer.default_root_dir", str(root), "--trainer.max_epochs", "1",
         "--trainer.limit_train_batches", "2", "--trainer.enable_progress_bar", "false",
         "--test_after_fit", "false"])  # fmt: skip
    return next(root.rglob("last.ckpt"))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("inputs")
    mnist = make_mnist(root / "mnist", n_train=200, n_test=40)
    digits_ckpt = _fit(root / "digits_run", "--config", QUICKSTART, *CE_ON_DIGITS)
    mnist_ckpt = _fit(root / "mnist_run", *MNIST_CE, "--data.data_dir", str(mnist))
    marker = root / "payload_ran"
    (root / "bad.yaml").write_text("model:\n  init_args:\n    lr: [0.1\n")
    (root / "garbage.ckpt").write_bytes(b"this is not a checkpoint\n" * 10)
    (root / "truncated.ckpt").write_bytes(mnist_ckpt.read_bytes()[:4000])
    torch.save({"state_dict": {}, "payload": RunsCode(marker)}, root / "evil.ckpt")
    torch.save(torch.zeros(3), root / "tensor.ckpt")
    torch.save({"noisy_labels": RunsCode(marker)}, root / "evil.pt")
    (root / "words.csv").write_text("1\n2\nx\n")
    (root / "floats.csv").write_text("\n".join(["6.9"] * 1437) + "\n")
    (root / "short.csv").write_text("1\n2\n3\n")
    np.save(root / "objects.npy", np.array([RunsCode(marker), 1], dtype=object), allow_pickle=True)
    (root / "T_2x2.csv").write_text("0.5,0.5\n0.5,0.5\n")
    (root / "T_garbage.pt").write_bytes(b"\x80\x04garbage")
    (root / "empty.npy").write_bytes(b"")
    (root / "utf16.csv").write_text("\n".join(["1"] * 1437) + "\n", encoding="utf-16")
    eye = np.eye(10)
    (root / "T_utf16.csv").write_text(
        "\n".join(",".join(map(str, row)) for row in eye) + "\n", encoding="utf-16"
    )
    np.save(root / "T_strings.npy", np.array([["0.1"] * 10] * 10))
    torch.save("the transition matrix", root / "T_str.pt")
    zero_column = eye.copy()  # class 3 always flips to 4: column 3 is all zero
    zero_column[3] = eye[4]
    np.savetxt(root / "T_zero_column.csv", zero_column, delimiter=",")
    singular = eye.copy()  # rows 2 and 5 equal
    singular[2] = singular[5] = 0.0
    singular[[2, 2, 5, 5], [2, 5, 2, 5]] = 0.5
    np.savetxt(root / "T_singular.csv", singular, delimiter=",")
    tiny_diagonal = eye.copy()  # class 3 keeps its label with probability 1e-5
    tiny_diagonal[3, 3], tiny_diagonal[3, 4] = 1e-5, 1 - 1e-5
    np.savetxt(root / "T_tiny_diagonal.csv", tiny_diagonal, delimiter=",")
    (root / "notes.txt").write_text(f"notes of the run, token {SECRET}\nand more notes\n")
    (root / "composes_notes.yaml").write_text("compose: [notes.txt]\n")
    (root / "a_list.yaml").write_text(f"- {SECRET}\n- 2\n")
    runs = root / "report_runs"
    for name, text in (("good", json.dumps(GOOD_RESULTS)), ("empty", ""), ("cut", '{"method"')):
        (runs / name).mkdir(parents=True)
        (runs / name / "results.json").write_text(text)
    for name, text in (("empty", ""), ("cut", "[1, 2")):
        (root / "damaged_runs" / name).mkdir(parents=True)
        (root / "damaged_runs" / name / "results.json").write_text(text)
    (root / "a_file").write_text("a file, not a folder\n")
    (root / "one_class.csv").write_text("0\n" * 1438)  # every digit labelled 0
    planted = make_cifar(root / "planted_cifar", n_train=50, n_test=10)
    with open(planted / "cifar-10-batches-py" / "data_batch_1", "wb") as fh:
        pickle.dump({"data": [], "labels": [], "x": RunsCode(marker)}, fh, protocol=2)
    (root / "duplicate_option.yaml").write_text(DUPLICATE_OPTION)
    (root / "composes_duplicate.yaml").write_text("compose: [duplicate_option.yaml]\n")
    (root / "duplicate_axis.yaml").write_text(DUPLICATE_AXIS.format(quickstart=QUICKSTART))
    np.savetxt(root / "T_rank_one.csv", np.full((10, 10), 0.1), delimiter=",")
    (root / "hpc_root").mkdir()  # a planted Lightning SLURM checkpoint that runs code
    torch.save({"state_dict": {}, "payload": RunsCode(marker)}, root / "hpc_root/hpc_ckpt_1.ckpt")
    _fit(root / "flat_run", "--config", QUICKSTART, *CE_ON_DIGITS, "--trainer.logger", "false")
    bad_mnist = root / "bad_mnist"
    make_mnist(bad_mnist, n_train=200, n_test=40)
    images = bad_mnist / "MNIST" / "raw" / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:5000])
    (root / "bomb.yaml").write_text(ALIAS_BOMB)
    (root / "empty.yaml").write_text("# nothing but a comment\n")
    os.mkfifo(root / "fifo.yaml")  # a reader that opened it would wait for a writer for ever
    (root / "folder.yaml").mkdir()
    unhealthy = root / "unhealthy_run"
    shutil.copytree(digits_ckpt.parents[1], unhealthy)
    results = json.loads((unhealthy / "results.json").read_text())
    results["health"] = "collapsed: noisy-validation accuracy 0.098 at chance (0.112)"
    (unhealthy / "results.json").write_text(json.dumps(results))
    return Files(root, digits_ckpt, mnist_ckpt, mnist, marker)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A YAML "billion laughs": a few lines whose aliases expand to ``width ** levels`` values."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


ALIAS_BOMB = alias_bomb()


GOOD_RESULTS = {
    "method": "Forward", "alpha": 0.0, "dataset": "mnist", "backbone": "lenet5", "seed": 0,
    "noise": {"type": "symmetric", "rate_nominal": 0.2}, "test_acc": 0.9, "test_acc_last": 0.9,
}  # fmt: skip

Case = Callable[[Files], tuple[list[str], str]]
# (id, args for `noisylabels fit` given the inputs, what the message must name, exit status)
CASES: list[tuple[str, Case, int]] = [
    # ---- label files
    ("noise-file-runs-code", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file",
     "--data.noise_file", str(f.root / "evil.pt")], "evil.pt"), 2),
    ("noise-npy-of-objects", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file",
     "--data.noise_file", str(f.root / "objects.npy")], "objects.npy"), 2),
    ("noise-csv-not-numbers", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file",
     "--data.noise_file", str(f.root / "words.csv")], "words.csv"), 2),
    ("noise-csv-float-labels", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file",
     "--data.noise_file", str(f.root / "floats.csv")], "floats.csv"), 2),
    ("noise-file-wrong-length", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file",
     "--data.noise_file", str(f.root / "short.csv")], "short.csv"), 2),
    ("noise-file-missing", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file",
     "--data.noise_file", str(f.root / "nope.csv")], "nope.csv"), 2),
    ("noise-file-not-given", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file"],
     "--data.noise_file"), 2),
    # ---- config files and option values
    ("yaml-malformed", lambda f: (["--config", str(f.root / "bad.yaml")], "bad.yaml"), 2),
    ("config-missing", lambda f: (["--config", str(f.root / "nope.yaml")], "--config"), 2),
    ("option-not-a-number", lambda f: (["--config", QUICKSTART, "--model.optim.lr", "abc"],
     "--model.optim.lr"), 2),
    ("option-negative-lr", lambda f: (["--config", QUICKSTART, "--model.optim.lr", "-1"],
     "--model.optim.lr"), 2),
    ("option-unknown", lambda f: (["--config", QUICKSTART, "--model.lrr", "3"], "lrr"), 2),
    ("option-of-a-group", lambda f: (["--config", QUICKSTART, "--model.warmup_epochs", "3"],
     "is --model.schedule.warmup_epochs"), 2),
    ("schedule-negative-warmup", lambda f: (["--config", QUICKSTART,
     "--model.schedule.warmup_epochs", "-1"], "--model.schedule.warmup_epochs must be >= 0"), 2),
    ("given-T-with-a-warmup", lambda f: (["--config", QUICKSTART,
     "--model.schedule.warmup_epochs", "2"], "set --model.schedule.warmup_epochs 0"), 2),
    ("option-trainer-type", lambda f: (["--config", QUICKSTART, "--trainer.max_epochs", "x"],
     "--trainer.max_epochs"), 2),
    ("noise-rate-out-of-range", lambda f: (["--config", QUICKSTART, "--data.noise_rate", "1.5"],
     "--data.noise_rate"), 2),
    ("batch-size-zero", lambda f: (["--config", QUICKSTART, "--data.batch_size", "0"],
     "--data.batch_size"), 2),
    ("compile-unknown-mode", lambda f: (["--config", QUICKSTART, "--model.speed.compile", "fast"],
     "--model.speed.compile"), 2),
    ("on-device-unknown", lambda f: (["--config", QUICKSTART, "--data.on_device", "gpu"],
     "--data.on_device"), 2),
    ("backbone-unknown", lambda f: (["--config", QUICKSTART, "--model.network.backbone", "vgg"],
     "--model.network.backbone"), 2),
    ("optimizer-unknown", lambda f: (["--config", QUICKSTART, "--model.optim.optimizer", "lbfgs"],
     "--model.optim.optimizer"), 2),
    ("warmup-longer-than-run", lambda f: (["--config", QUICKSTART, "--model.transition",
     "estimate", "--model.schedule.warmup_epochs", "5", "--trainer.max_epochs", "3"],
     "--model.schedule.warmup_epochs"), 2),
    # ---- transition matrix files
    ("T-file-wrong-shape", lambda f: (["--config", QUICKSTART, "--model.transition",
     str(f.root / "T_2x2.csv")], "T_2x2.csv"), 2),
    ("T-file-garbage", lambda f: (["--config", QUICKSTART, "--model.transition",
     str(f.root / "T_garbage.pt")], "T_garbage.pt"), 2),
    ("T-file-missing", lambda f: (["--config", QUICKSTART, "--model.transition",
     str(f.root / "T_nope.csv")], "--model.transition"), 2),
    # ---- dataset files
    ("mnist-truncated", lambda f: ([*MNIST_CE, "--data.data_dir",
     str(f.root / "bad_mnist")], "train-images-idx3-ubyte"), 2),
    ("mnist-missing", lambda f: ([*MNIST_CE, "--data.data_dir",
     str(f.root / "no_data")], "no_data"), 2),
    # ---- checkpoints
    ("ckpt-truncated", lambda f: (["--config", QUICKSTART, "--ckpt_path",
     str(f.root / "truncated.ckpt")], "truncated.ckpt"), 2),
    ("ckpt-garbage", lambda f: (["--config", QUICKSTART, "--ckpt_path",
     str(f.root / "garbage.ckpt")], "garbage.ckpt"), 2),
    ("ckpt-runs-code", lambda f: (["--config", QUICKSTART, "--ckpt_path",
     str(f.root / "evil.ckpt")], "evil.ckpt"), 2),
    ("ckpt-not-a-checkpoint", lambda f: (["--config", QUICKSTART, "--ckpt_path",
     str(f.root / "tensor.ckpt")], "tensor.ckpt"), 2),
    ("ckpt-missing", lambda f: (["--config", QUICKSTART, "--ckpt_path",
     str(f.root / "nope.ckpt")], "--ckpt_path"), 2),
    ("ckpt-last-without-runs", lambda f: (["--config", QUICKSTART, "--ckpt_path", "last"],
     "--ckpt_path last"), 2),
    ("ckpt-other-method", lambda f: (["--config", QUICKSTART, "--ckpt_path",
     str(f.digits_ckpt)], "model.class"), 2),
    ("ckpt-other-dataset", lambda f: (["--config", QUICKSTART, "--ckpt_path",
     str(f.mnist_ckpt)], "data.class"), 2),
    ("ckpt-other-backbone", lambda f: (["--config", QUICKSTART, *CE_ON_DIGITS,
     "--model.network.backbone_kwargs", "{hidden: [32]}", "--ckpt_path", str(f.digits_ckpt)],
     "backbone_kwargs"), 2),
    ("noise-npy-empty-file", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file",
     "--data.noise_file", str(f.root / "empty.npy")], "empty.npy"), 2),
    ("noise-csv-utf16", lambda f: (["--config", QUICKSTART, "--data.noise_type", "file",
     "--data.noise_file", str(f.root / "utf16.csv")], "utf16.csv is UTF-16"), 2),
    ("noise-file-without-type-file", lambda f: (["--config", QUICKSTART, "--data.noise_file",
     str(f.root / "short.csv")], "--data.noise_type file"), 2),
    ("symmetric-noise-at-the-limit", lambda f: (["--config", QUICKSTART, "--data.noise_rate",
     "0.9"], "(C-1)/C = 0.9"), 2),
    ("symmetric-noise-beyond-the-limit", lambda f: (["--config", QUICKSTART, "--data.noise_rate",
     "0.95"], "(C-1)/C = 0.9"), 2),
    # ---- what would train nothing, or estimate from an untrained network
    ("max-epochs-zero", lambda f: (["--config", QUICKSTART, "--trainer.max_epochs", "0"],
     "--trainer.max_epochs 0 trains nothing"), 2),
    ("max-steps-zero", lambda f: (["--config", QUICKSTART, *CE_ON_DIGITS, "--trainer.max_steps",
     "0"], "--trainer.max_steps 0 trains nothing"), 2),
    ("no-training-batches", lambda f: (["--config", QUICKSTART, "--trainer.limit_train_batches",
     "0"], "--trainer.limit_train_batches 0"), 2),
    ("stopped-in-the-warmup", lambda f: (["--config", QUICKSTART, *ESTIMATE,
     "--model.schedule.warmup_epochs", "2", "--trainer.max_steps", "3"],
     "still in its warm-up"), 2),
    ("estimate-without-warmup", lambda f: (["--config", QUICKSTART, *ESTIMATE,
     "--model.schedule.warmup_epochs", "0"], "--model.schedule.warmup_epochs N"), 2),
    ("reweight-estimate-without-warmup", lambda f: (["--config", QUICKSTART, *REWEIGHT,
     *ESTIMATE, "--model.schedule.warmup_epochs", "0"],
     "Reweight with --model.transition estimate"), 2),
    ("trevision-on-a-ce-preset", lambda f: ([*MNIST_CE, "--data.data_dir",
     str(f.mnist_dir), "--model.class_path", "noisylabels.methods.TRevision"],
     "--model.schedule.warmup_epochs N"), 2),
    ("seed-negative", lambda f: (["--config", QUICKSTART, "--seed_everything", "-5"],
     "--seed_everything must be an integer from 0 to 4294967295"), 2),
    ("config-not-a-config", lambda f: (["--config", str(f.root / "notes.txt")],
     "notes.txt is not a config"), 2),
    ("config-a-yaml-list", lambda f: (["--config", str(f.root / "a_list.yaml")],
     "a_list.yaml is not a config"), 2),
    ("compose-not-a-config", lambda f: (["--config", str(f.root / "composes_notes.yaml")],
     "notes.txt is not a config"), 2),
    ("T-file-zero-column", lambda f: (["--config", QUICKSTART, "--model.transition",
     str(f.root / "T_zero_column.csv")], "column 3 of T is all zero"), 2),
    ("T-file-singular-for-reweight", lambda f: (["--config", QUICKSTART, *REWEIGHT,
     "--model.transition", str(f.root / "T_singular.csv")],
     "rows 2, 5 are linearly dependent"), 2),
    ("T-file-diagonal-below-chance-for-reweight", lambda f: (["--config", QUICKSTART, *REWEIGHT,
     "--model.transition", str(f.root / "T_tiny_diagonal.csv")], "T[3, 3] = 1e-05"), 2),
    ("T-csv-utf16", lambda f: (["--config", QUICKSTART, "--model.transition",
     str(f.root / "T_utf16.csv")], "T_utf16.csv is UTF-16"), 2),
    ("T-npy-of-strings", lambda f: (["--config", QUICKSTART, "--model.transition",
     str(f.root / "T_strings.npy")], "T_strings.npy holds an array of dtype <U3"), 2),
    ("T-pt-holding-a-str", lambda f: (["--config", QUICKSTART, "--model.transition",
     str(f.root / "T_str.pt")], "T_str.pt holds a str"), 2),
    # ---- a run that diverges
    ("diverged", lambda f: (["--config", QUICKSTART, "--model.optim.lr", "1e6"],
     "--model.optim.lr"), 3),
    # ---- inputs that cannot be learned
    ("asymmetric-noise-beyond-the-majority", lambda f: (["--config", QUICKSTART,
     "--data.noise_type", "asymmetric", "--data.noise_rate", "0.99"],
     "asymmetric noise at --data.noise_rate 0.99"), 2),
    ("label-file-of-one-class", lambda f: (["--config", QUICKSTART, *CE_ON_DIGITS,
     "--data.noise_type", "file", "--data.noise_file", str(f.root / "one_class.csv")],
     "the labels do not identify their classes"), 2),
    ("validation-takes-whole-classes", lambda f: (["--config", QUICKSTART,
     "--data.val_fraction", "0.995"], "have no sample in the training split"), 2),
    ("vrnl-with-one-sample-per-batch", lambda f: (["--config", QUICKSTART,
     "--data.batch_size", "1"], "the variance of one loss is always 0"), 2),
    ("T-file-of-rank-one-for-forward", lambda f: (["--config", QUICKSTART, "--model.transition",
     str(f.root / "T_rank_one.csv")], "T_rank_one.csv is singular"), 2),
    # ---- runs, folders and resumes
    ("max-epochs-forever", lambda f: (["--config", QUICKSTART, "--trainer.max_epochs", "-1"],
     "trains forever"), 2),
    ("min-epochs-over-max", lambda f: (["--config", QUICKSTART, "--trainer.min_epochs", "5",
     "--trainer.max_epochs", "2"], "--trainer.min_epochs 5 is more than"), 2),
    ("root-is-a-file", lambda f: (["--config", QUICKSTART, "--trainer.default_root_dir",
     str(f.root / "a_file" / "runs")], "is a file, not a folder"), 2),
    ("root-name-too-long", lambda f: (["--config", QUICKSTART, "--trainer.default_root_dir",
     str(f.root / ("x" * 300))], "bytes long, more than"), 2),
    ("monitor-misspelt", lambda f: (["--config", QUICKSTART, "--trainer.max_epochs", "1",
     "--checkpoint.monitor", "val/accuracy"], "--checkpoint.monitor val/accuracy"), 2),
    ("monitor-loss-upwards", lambda f: (["--config", QUICKSTART, "--checkpoint.monitor",
     "val/loss"], "--checkpoint.mode max with --checkpoint.monitor val/loss would select"), 2),
    ("test-best-without-a-fit", lambda f: (["test", "--config", QUICKSTART, "--ckpt_path",
     "best"], "--ckpt_path best"), 2),
    ("hpc-checkpoint-none-there", lambda f: (["--config", QUICKSTART, "--ckpt_path", "hpc"],
     "--ckpt_path hpc"), 2),
    ("hpc-checkpoint-runs-code", lambda f: (["--config", QUICKSTART, "--trainer.default_root_dir",
     str(f.root / "hpc_root"), "--ckpt_path", "hpc", "--weights_only", "false"],
     "hpc_ckpt_1.ckpt"), 2),
    ("resume-with-another-lr", lambda f: (["--config", QUICKSTART, *CE_ON_DIGITS,
     *FIXTURE_RUN, "--trainer.max_epochs", "2", "--model.optim.lr", "0.5", "--ckpt_path",
     str(f.digits_ckpt)], "model.optim.lr 0.05 (now 0.5)"), 2),
    ("resume-with-another-seed", lambda f: (["--config", QUICKSTART, *CE_ON_DIGITS,
     *FIXTURE_RUN, "--trainer.max_epochs", "2", "--seed_everything", "3", "--ckpt_path",
     str(f.digits_ckpt)], "seed 0 (now 3)"), 2),
    ("resume-finished-run-same-length", lambda f: (["--config", QUICKSTART, *CE_ON_DIGITS,
     *FIXTURE_RUN, "--trainer.max_epochs", "1", "--ckpt_path", str(f.digits_ckpt)],
     "trains nothing more"), 2),
    ("second-run-in-a-run-folder", lambda f: (["--config", QUICKSTART, *CE_ON_DIGITS,
     "--trainer.logger", "false", "--trainer.default_root_dir", str(f.root / "flat_run")],
     "already holds a run"), 2),
    # ---- data files are never executed; a YAML file says each thing once
    ("cifar-batch-runs-code", lambda f: ([*CIFAR10_CE, "--data.data_dir",
     str(f.root / "planted_cifar")], "data_batch_1 is not a CIFAR batch: it holds the Python "
     "global posix.system"), 2),
    ("config-duplicate-key", lambda f: (["--config", QUICKSTART, "--config",
     str(f.root / "duplicate_option.yaml")], "duplicate_option.yaml sets 'lr' twice in one "
     "mapping (lines 3 and 5)"), 2),
    ("composed-config-duplicate-key", lambda f: (["--config",
     str(f.root / "composes_duplicate.yaml")], "duplicate_option.yaml sets 'lr' twice"), 2),
    ("sweep-duplicate-axis-value", lambda f: (["sweep", str(f.root / "duplicate_axis.yaml"),
     "--dry-run", "--root", str(f.root / "sweep_runs")], "sweep file "
     f"{f.root / 'duplicate_axis.yaml'} sets 'sym-0.2' twice in one mapping (lines 5 and 7)"), 2),
    # ---- the other subcommands
    ("report-damaged-results-strict", lambda f: (["report", str(f.root / "report_runs"),
     "--strict"], "cut/results.json is not valid JSON"), 2),
    ("report-every-run-damaged", lambda f: (["report", str(f.root / "damaged_runs")],
     "every run under"), 2),
    ("report-out-not-writable", lambda f: (["report", str(f.root / "report_runs"), "--out",
     str(f.root / "a_file" / "table.md")], "cannot write --out"), 2),
    ("plot-out-not-writable", lambda f: (["plot", str(f.digits_ckpt.parents[1]), "--out",
     str(f.root / "a_file" / "fig.png")], "cannot write --out"), 2),
    ("report-unknown-row-field", lambda f: (["report", str(f.root / "report_runs"), "--rows",
     "methd"], "--rows methd: no run has a field 'methd'"), 2),
    ("report-unknown-col-field", lambda f: (["report", str(f.root / "report_runs"), "--cols",
     "dataset,nosuchfield"], "no run has a field 'nosuchfield'; the runs' fields are "), 2),
    ("audit-an-unhealthy-run", lambda f: (["audit", str(f.root / "unhealthy_run")],
     "is a run that did not learn (collapsed: "), 2),
    ("audit-more-folds-than-a-class", lambda f: (["audit", str(f.digits_ckpt.parents[1]),
     "--score", "posterior", "--folds", "100000"], "--folds 100000: the run's training split "
     "has"), 2),
    # ---- files read back, with limits; options applied or refused before anything is written
    ("config-alias-bomb", lambda f: (["--config", str(f.root / "bomb.yaml")],
     "bomb.yaml cannot be read: its aliases (*name) expand it to more than 1,000,000"), 2),
    ("config-text-alias-bomb", lambda f: (["--config", QUICKSTART, "--config", ALIAS_BOMB],
     "--config text cannot be read: its aliases"), 2),
    ("config-empty", lambda f: (["--config", QUICKSTART, "--config", str(f.root / "empty.yaml")],
     "empty.yaml is empty (or holds only comments)"), 2),
    ("config-a-named-pipe", lambda f: (["--config", str(f.root / "fifo.yaml")],
     "fifo.yaml is a named pipe (FIFO), not a regular file"), 2),
    ("config-a-folder", lambda f: (["--config", str(f.root / "folder.yaml")],
     "folder.yaml is a folder, not a regular file"), 2),
    ("precision-64-true", lambda f: (["--config", QUICKSTART, "--trainer.precision", "64-true"],
     "--trainer.precision 64-true: the methods run in 32-true, 16-mixed, bf16-mixed"), 2),
    ("precision-bf16-true", lambda f: (["--config", QUICKSTART, "--trainer.precision",
     "bf16-true"], "--trainer.precision bf16-true"), 2),
    ("gradient-clip-negative", lambda f: (["--config", QUICKSTART,
     "--trainer.gradient_clip_val", "-1"], "must be a finite number >= 0"), 2),
    ("gradient-clip-nan", lambda f: (["--config", QUICKSTART, "--trainer.gradient_clip_val",
     "nan"], "--trainer.gradient_clip_val: nan is not a finite number"), 2),
    ("alpha-nan", lambda f: (["--config", QUICKSTART, "--model.alpha", "nan"],
     "--model.alpha: nan is not a finite number"), 2),
    ("test-another-methods-checkpoint", lambda f: (["test", "--config", QUICKSTART,
     "--ckpt_path", str(f.digits_ckpt.parents[1])], "holds another model than this command "
     "builds: it differs in model.class"), 2),
    ("validate-another-methods-checkpoint", lambda f: (["validate", "--config", QUICKSTART,
     "--ckpt_path", str(f.digits_ckpt)], "Evaluate it with its own config"), 2),
    ("predict-another-methods-checkpoint", lambda f: (["predict", "--config", QUICKSTART,
     "--ckpt_path", str(f.digits_ckpt)], "holds another model than this command builds"), 2),
]  # fmt: skip


def command_line(args: list[str], root: Path) -> list[str]:
    """The argv of a case: a ``fit`` (or the stage it names first) into ``root`` (unless it
    names its own root), or another subcommand as given."""
    if args[0] in OTHER_SUBCOMMANDS:
        return list(args)
    stage, args = (args[0], args[1:]) if args[0] in STAGES else ("fit", args)
    if "--trainer.default_root_dir" not in args:
        args = [*args, "--trainer.default_root_dir", str(root)]
    return [stage, *args, "--trainer.enable_progress_bar", "false"]


def error_lines(err: str) -> list[str]:
    """The error paragraphs in ``err``: ``noisylabels: error: ...`` (``fit``), or
    ``noisylabels report: error: ...`` (argparse of the other subcommands)."""
    return [line for line in err.splitlines() if re.match(r"noisylabels( \w+)?: error: ", line)]


# what torch and Lightning say on the way to two cases' paragraphs: a garbage T file is a pickle
# of another protocol, a run stopped within its first epoch has validated nothing
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.filterwarnings("ignore:.ModelCheckpoint.monitor='val/acc'.. could not find")
@pytest.mark.parametrize(
    ("case", "code"), [(c, n) for _, c, n in CASES], ids=[i for i, *_ in CASES]
)
def test_bad_input_ends_with_one_paragraph(
    case: Case, code: int, files: Files, tmp_path: Path, capsys
) -> None:
    from noisylabels.cli import main

    args, named = case(files)
    root = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_info:
        main(command_line(args, root))
    err = capsys.readouterr().err
    assert exit_info.value.code == code, err[-2000:]
    assert "Traceback" not in err
    assert SECRET not in err, "the content of a file given by mistake was printed"
    messages = error_lines(err)
    assert len(messages) == 1, err[-2000:]
    assert named in messages[0]
    assert not files.marker.exists(), "a file's pickled payload was executed"
    assert not list(root.rglob("results.json"))
    # a failed run leaves no folder that looks like a run: gone, or marked with why it stopped
    for folder in root.rglob("version_*"):
        assert (folder / "unfinished.txt").is_file(), sorted(folder.rglob("*"))
        assert list(folder.rglob("last.ckpt")), "only a resumable folder is kept"


def test_a_diverged_run_names_where_and_keeps_the_state_before(files, tmp_path, capsys) -> None:
    from noisylabels.cli import main

    root = tmp_path / "runs"
    with pytest.raises(SystemExit):
        main(["fit", "--config", QUICKSTART, "--model.optim.lr", "1e6",
              "--trainer.default_root_dir", str(root),
              "--trainer.enable_progress_bar", "false"])  # fmt: skip
    message = capsys.readouterr().err
    assert "epoch 0, training step" in message and "alpha=0.1" in message
    folder = next(root.rglob("version_*"))
    assert "diverged" in (folder / "unfinished.txt").read_text()
    assert not list(folder.rglob("best-*.ckpt"))
    weights = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(bool(torch.isfinite(v).all()) for v in weights.values() if v.is_floating_point())


def test_a_run_that_fails_before_training_leaves_no_folder(files, tmp_path, capsys) -> None:
    """The T file is checked at setup, after the config and noise record were written."""
    from noisylabels.cli import main

    root = tmp_path / "runs"
    with pytest.raises(SystemExit):
        main(["fit", "--config", QUICKSTART, "--model.transition", str(files.root / "T_2x2.csv"),
              "--trainer.default_root_dir", str(root)])  # fmt: skip
    assert not list(root.rglob("version_*"))


def test_debug_shows_the_traceback(files, tmp_path, monkeypatch) -> None:
    from noisylabels.cli import main
    from noisylabels.errors import InputError

    args = ["fit", "--config", QUICKSTART, "--model.optim.lr", "-1"]
    with pytest.raises(InputError, match="--model.optim.lr"):
        main([*args, "--debug"])
    monkeypatch.setenv("NOISYLABELS_DEBUG", "1")
    with pytest.raises(InputError, match="--model.optim.lr"):
        main(args)


def test_programming_errors_keep_their_traceback(tmp_path, monkeypatch) -> None:
    from noisylabels.cli import main
    from noisylabels.methods import Forward

    def broken(self, logits, batch):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(Forward, "per_sample_loss", broken)
    with pytest.raises(ZeroDivisionError):
        main(["fit", "--config", QUICKSTART, "--trainer.default_root_dir", str(tmp_path),
              "--trainer.max_epochs", "1"])  # fmt: skip


def test_the_installed_command_exits_with_the_paragraph(files, tmp_path) -> None:
    """The real process: exit status 2 and one line on stderr for a malformed config."""
    out = subprocess.run(
        [sys.executable, "-m", "noisylabels.cli", "fit", "--config", str(files.root / "bad.yaml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("noisylabels: error: config file")
    assert "bad.yaml is not valid YAML at line 4" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_pickle_payload_fixture_would_run(tmp_path) -> None:
    """The hostile files above are real: unpickling the payload without the safe loader runs it."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(RunsCode(marker)))
    assert marker.exists()


@pytest.mark.parametrize("which", ["every 6th", pytest.param("all", marks=pytest.mark.slow)])
def test_no_case_of_the_catalogue_prints_a_traceback(
    which: str, files: Files, tmp_path: Path
) -> None:
    """Cases of the catalogue run as the real command (a process whose uncaught exception the
    interpreter prints): each exits with its status, and none prints a Python traceback. Each
    command line is a process forked from one that imported the package
    (tests/as_command.py); the default run takes every 6th case, ``-m slow`` all of them
    (every case also runs in-process in test_bad_input_ends_with_one_paragraph)."""
    cases = CASES if which == "all" else CASES[::6]
    results = {
        name: run_command(command_line(case(files)[0], tmp_path / name)) for name, case, _ in cases
    }
    expected = {name: code for name, _, code in cases}
    printed = sorted(name for name, r in results.items() if "Traceback" in r.stderr)
    assert not printed, "\n\n".join(f"{n}:\n{results[n].stderr[-1500:]}" for n in printed)
    statuses = {name: r.returncode for name, r in results.items()}
    assert statuses == expected
    assert all(len(error_lines(r.stderr)) == 1 for r in results.values())
