"""How T̂ forms during a warm-up: :class:`TransitionTrace` estimates T̂ (row-stochastic,
``T̂[i, j] ≈ P(noisy = j | clean = i)``) from the warm-up network at the end of every warm-up
epoch, with and without the anchor points' outlier filter, and writes what each estimate gets
right and wrong to the run folder's ``transition_trace.csv``, one row per epoch:

* ``{filtered,unfiltered}/t_estimation_error``: ε_T against the true T (empty where the noise
  has none) and ``.../diag_mean``, T̂'s mean diagonal;
* ``.../flip/i``: the column of row ``i``'s largest off-diagonal entry, where clean class ``i``'s
  flips go by T̂; ``.../wrong_flips``: how many of the true T's rows with flips point elsewhere
  than its largest off-diagonal entry (for noise whose rows have one, e.g. pair; empty
  otherwise);
* ``.../anchor_clean/i``: the clean class of the image chosen as class ``i``'s anchor point
  (-1 where clean labels are unknown) and ``.../anchors_right``: how many anchors are images of
  their own class.

It answers, for a run whose estimated T̂ is far from the true one, which classes' flips T̂ points
the wrong way, from which warm-up epoch, and whether the filter matters. The run's own T̂ is the
method's (:mod:`noisylabels.methods.transition`); the trace only observes. Each epoch costs one
pass over the training split, as the estimate at the end of the warm-up does. Add it with
``--trainer.callbacks+=noisylabels.callbacks.TransitionTrace``; a run that estimates no T̂ from
a warm-up refuses it. With the Dual-T estimator it traces the anchor-point part of T̂ (T♣).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from noisylabels.callbacks.folder import run_dir
from noisylabels.callbacks.subset_stats import EPOCH_COLUMN, write_csv_row
from noisylabels.errors import InputError
from noisylabels.noise.estimate import anchor_points, anchor_transition, estimation_error

CSV_FILE = "transition_trace.csv"
FILTERS = {"filtered": True, "unfiltered": False}


def off_diagonal(T: Tensor) -> Tensor:
    """A C x C matrix with its diagonal at -inf (what row maxima of flips are taken over)."""
    return T.masked_fill(torch.eye(T.shape[0], dtype=torch.bool), float("-inf"))


def largest_off_diagonal(T: Tensor) -> Tensor:
    """``(C,)``: the column of each row's largest off-diagonal entry of a C x C matrix."""
    return off_diagonal(T).argmax(dim=1)


def single_flips(T: Tensor) -> tuple[Tensor, Tensor] | None:
    """The column of each row's one largest off-diagonal entry of the true T, and which rows
    have flips at all; ``None`` where a row with flips has no single largest one (symmetric
    noise: every flip equally likely)."""
    off = off_diagonal(T)
    top = off.topk(2, dim=1).values
    flipping = top[:, 0] > 0
    if bool((flipping & (top[:, 0] <= top[:, 1])).any()):
        return None
    return off.argmax(dim=1), flipping


def trace_row(
    probs: Tensor, clean: Tensor, T: Tensor | None, quantile: float = 0.97
) -> dict[str, Any]:
    """One epoch's row of ``transition_trace.csv`` from the softmax outputs ``probs`` (N x C) of
    the training split, its clean labels (-1 unknown) and the true T (``None`` unknown)."""
    c = probs.shape[1]
    flips_true = None if T is None else single_flips(T)
    row: dict[str, Any] = {}
    for name, filter_outliers in FILTERS.items():
        anchors = anchor_points(probs, filter_outliers, quantile)
        T_hat = anchor_transition(probs, filter_outliers, quantile)  # the rows of the anchors
        flips = largest_off_diagonal(T_hat)
        anchor_clean = clean[anchors]
        if T is not None:
            row[f"{name}/t_estimation_error"] = estimation_error(T, T_hat)
        row[f"{name}/diag_mean"] = float(T_hat.diagonal().mean())
        if flips_true is not None:
            right, flipping = flips_true
            row[f"{name}/wrong_flips"] = int(((flips != right) & flipping).sum())
        if bool((anchor_clean >= 0).all()):
            row[f"{name}/anchors_right"] = int((anchor_clean == torch.arange(c)).sum())
        for i in range(c):
            row[f"{name}/flip/{i}"] = int(flips[i])
            row[f"{name}/anchor_clean/{i}"] = int(anchor_clean[i])
    return row


def trace_columns(num_classes: int) -> list[str]:
    """The columns of ``transition_trace.csv``: ``epoch`` (from 0), then per filter setting."""
    columns = [EPOCH_COLUMN]
    for name in FILTERS:
        summary = ("t_estimation_error", "diag_mean", "wrong_flips", "anchors_right")
        columns += [f"{name}/{q}" for q in summary]
        columns += [f"{name}/flip/{i}" for i in range(num_classes)]
        columns += [f"{name}/anchor_clean/{i}" for i in range(num_classes)]
    return columns


class TransitionTrace(L.Callback):
    """Write how T̂ would come out of the warm-up network at the end of each warm-up epoch of a
    method that estimates T from it (``--model.transition estimate``), with and without the
    outlier filter, to ``transition_trace.csv`` (see the module docstring). ``quantile``: the
    filter's (default: the method's ``outlier_quantile``)."""

    def __init__(self, quantile: float | None = None) -> None:
        if quantile is not None and not 0.0 < quantile <= 1.0:
            raise InputError(
                f"TransitionTrace(quantile={quantile}): the filter's quantile is a fraction in "
                "(0, 1], e.g. 0.97"
            )
        self.quantile = quantile

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse a fit whose method estimates no T̂ from a warm-up (the trace would stay
        empty)."""
        if stage == "fit" and not getattr(pl_module, "estimates_transition", False):
            raise InputError(
                f"TransitionTrace traces how T̂ forms during a warm-up, and "
                f"{type(pl_module).__name__} here estimates none (its T is given, learned or "
                "absent); leave the callback out, or estimate T: --model.transition estimate"
            )

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not (getattr(pl_module, "estimates_transition", False) and pl_module.in_warmup):
            return
        if trainer.sanity_checking or trainer.fast_dev_run:
            return
        probs, clean = [], []
        # the pass draws a loader seed from torch's generator: the run goes on as without it
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for batch, logits in pl_module.training_split_logits(trainer.limit_train_batches):
                probs.append(F.softmax(logits.float(), dim=1).cpu())
                clean.append(batch["clean_label"].cpu())
        facts = pl_module.data_facts()
        T = None if facts is None or facts.transition is None else facts.transition.float().cpu()
        quantile = self.quantile
        if quantile is None:
            quantile = float(getattr(pl_module.hparams, "outlier_quantile", 0.97))
        row = trace_row(torch.cat(probs), torch.cat(clean), T, quantile)
        if trainer.is_global_zero:
            folder = run_dir(trainer)
            folder.mkdir(parents=True, exist_ok=True)
            columns = trace_columns(pl_module.num_classes)
            write_csv_row(folder / CSV_FILE, trainer.current_epoch, row, columns)
