"""Out-of-sample posteriors of every training sample by K-fold cross-validation.

The run's training split is cut into K folds, stratified by the given label; K models of the
run's own configuration (method, backbone, optimizer, epochs, noisy validation split) train on
K-1 folds each and predict the fold they did not see: the clean posterior ``p`` and the noisy
posterior ``q`` (``q = p @ T`` for methods with a transition matrix, row-stochastic
``T[i, j] = P(noisy = j | clean = i)``; ``q = p`` otherwise). This is what confident learning
(cleanlab's ``find_label_issues``) is fed, and the audit's ``posterior`` score; it costs about
K - 1 training runs.
"""

from __future__ import annotations

import copy
import logging
import time
from argparse import ArgumentError
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
import yaml
from torch import Tensor

from noisylabels.audit.run_folder import RunFolder
from noisylabels.data import NoisyDataModule
from noisylabels.errors import InputError, option_error
from noisylabels.methods import NoisyLabelMethod
from noisylabels.run.cli import make_cli
from noisylabels.run.source import CONFIG_FILE

# options of `noisylabels fit` itself, not of the method, data or trainer
FIT_ONLY = ("ckpt_path", "weights_only")
# the run's trainer settings a fold keeps; the rest (loggers, callbacks, devices) is the fold's
TRAINER_KEYS = (
    "accelerator",
    "precision",
    "max_epochs",
    "min_epochs",
    "max_steps",
    "limit_train_batches",
    "limit_val_batches",
    "check_val_every_n_epoch",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "deterministic",
    "benchmark",
)


@dataclass
class OutOfSample:
    """Out-of-sample posteriors of the training split: dataset ``index`` ``(M,)``, the clean
    posterior ``probs`` and the noisy posterior ``noisy_probs`` ``(M, C)``, the ``folds`` and
    ``seed`` they were made with, and the ``seconds`` the K trainings took."""

    index: Tensor
    probs: Tensor
    noisy_probs: Tensor
    folds: int
    seed: int
    seconds: float

    def state(self) -> dict[str, Any]:
        """As saved in a run folder (tensors and numbers only)."""
        return {
            "index": self.index,
            "probs": self.probs,
            "noisy_probs": self.noisy_probs,
            "folds": self.folds,
            "seed": self.seed,
            "seconds": self.seconds,
        }


def stratified_folds(labels: Tensor, folds: int, seed: int) -> Tensor:
    """The fold ``0..folds-1`` of each sample: within each label, a seeded shuffle dealt
    round-robin, so every fold holds about ``1/folds`` of every class."""
    gen = torch.Generator().manual_seed(seed)
    fold = torch.empty(len(labels), dtype=torch.long)
    offset = 0
    for label in torch.unique(labels):
        members = torch.nonzero(labels == label).flatten()
        members = members[torch.randperm(len(members), generator=gen)]
        fold[members] = (torch.arange(len(members)) + offset) % folds
        offset += len(members)
    return fold


def _quiet_lightning() -> dict[str, int]:
    """Silence Lightning's per-fit banners (devices, tips) for the folds; returns the levels to
    restore."""
    levels = {}
    for name in ("lightning.pytorch", "lightning.fabric"):
        levels[name] = logging.getLogger(name).level
        logging.getLogger(name).setLevel(logging.WARNING)
    return levels


def check_folds(folds: int) -> None:
    """``--folds``: the K of K-fold cross-validation, at least 2."""
    if folds < 2:
        raise InputError(f"--folds must be at least 2 (K-fold cross-validation), got {folds}")


def cross_validate(
    run: RunFolder,
    folds: int,
    seed: int,
    data_dir: str | None = None,
    log: Callable[[str], None] | None = None,
) -> OutOfSample:
    """Out-of-sample posteriors of the training split of the finished ``run`` (the run its
    ``config.yaml`` describes), from ``folds`` models (seeds ``seed``, ``seed + 1``, ...)."""
    check_folds(folds)
    config_path = run.path / CONFIG_FILE
    # the run's config without the options of the fit subcommand itself
    settings = {k: v for k, v in run.config.items() if k not in FIT_ONLY}
    args = ["--config", yaml.safe_dump(settings)]
    if data_dir is not None:
        args += ["--data.data_dir", data_dir]
    try:
        cli = make_cli(args, run=False, save_config_callback=None)
    except ArgumentError as err:
        raise option_error(err) from err
    model, dm = cli.model, cli.datamodule
    if not isinstance(model, NoisyLabelMethod) or not isinstance(dm, NoisyDataModule):
        raise InputError(f"{config_path} does not describe a noisylabels method and dataset")
    dm.setup("fit")
    assert dm.train_indices is not None and dm.noisy_labels is not None
    train = dm.train_indices.clone()
    if not torch.equal(train, run.train_indices):
        raise InputError(
            f"the config of {run.path} now gives another training split than the run's; "
            "point --data.data_dir at the run's data"
        )
    fold_of = stratified_folds(dm.noisy_labels[train].long(), folds, seed)
    trainer_settings = cli.config.get("trainer")
    if hasattr(trainer_settings, "as_dict"):
        trainer_settings = trainer_settings.as_dict()
    trainer_settings = dict(trainer_settings or {})
    initial = copy.deepcopy(model)
    c = dm.num_classes
    probs = torch.zeros(len(train), c)
    noisy = torch.zeros(len(train), c)
    position = torch.full((len(dm.noisy_labels),), -1, dtype=torch.long)
    position[train] = torch.arange(len(train))
    kept = {k: v for k, v in trainer_settings.items() if k in TRAINER_KEYS and v is not None}
    if log is not None:
        log(f"training {folds} models on {folds - 1}/{folds} of the training split each")
    start = time.perf_counter()
    levels = _quiet_lightning()
    try:
        for k in range(folds):
            fold_start = time.perf_counter()
            L.seed_everything(seed + k, verbose=False)
            model = copy.deepcopy(initial)
            dm.train_indices = train[fold_of != k]
            trainer = L.Trainer(
                **kept,
                devices=1,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                num_sanity_val_steps=0,
                default_root_dir=str(run.path),
            )
            trainer.fit(model, datamodule=dm)
            dm.train_indices = train[fold_of == k]
            for batch, logits in model.training_split_logits():
                p = F.softmax(logits.float(), dim=1)
                q = model.noisy_posterior(p, batch["index"]).float()
                rows = position[batch["index"].cpu()]
                probs[rows], noisy[rows] = p.cpu(), q.cpu()
            if log is not None:
                seconds = time.perf_counter() - fold_start
                log(
                    f"fold {k + 1}/{folds}: trained on {int((fold_of != k).sum())} samples, "
                    f"predicted {int((fold_of == k).sum())} ({seconds:.0f} s)"
                )
    finally:
        dm.train_indices = train
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    return OutOfSample(train, probs, noisy, folds, seed, time.perf_counter() - start)
