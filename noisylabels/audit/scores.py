"""Suspicion scores of training labels, the flagged set, and their quality against known flips.

Pure torch. A score is higher for a label more likely wrong; every score ranks the samples a run
trained on (its training split):

* ``margin`` (default): minus the area under the margin (AUM; Pleiss et al. 2020), the mean
  over the training epochs of ``z_{y~} - max_{j != y~} z_j``, with the logits ``z`` of the
  step that trained on the sample and its given label ``y~``;
* ``loss``: the mean over the epochs of the method's per-sample training loss;
* ``weight``: minus the mean VRNL weight ``w_i = 1 + 2 alpha (mean(l) - l_i)`` (VRNL paper;
  0 in the epochs a sample-selecting method left the sample out); needs ``alpha != 0``;
* ``posterior``: ``1 - q_{y~}(x)``, the out-of-sample noisy posterior of the given label
  (:mod:`noisylabels.audit.crossval`), ``q = p @ T`` for methods with a transition matrix
  (row-stochastic, ``T[i, j] = P(noisy = j | clean = i)``), ``q = p`` otherwise.

The training-dynamics scores (the first three) come from the run's ``sample_dynamics.pt`` at no
cost beyond the run; ``posterior`` trains K more models. The *predicted* class is the argmax of
the clean posterior ``p`` (averaged over the epochs, or out of sample); a run flags as many
labels as it has samples whose predicted class differs from the given label: the highest-scored
ones (:func:`flag_top`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from noisylabels.audit.choices import DYNAMICS_SCORES, SCORES
from noisylabels.errors import InputError


@dataclass(frozen=True)
class Scored:
    """The audited samples (dataset indices of the training set, ``(M,)``), their given labels,
    predicted classes and scores (higher: more suspect)."""

    index: Tensor
    given: Tensor
    predicted: Tensor
    score: Tensor


def dynamics_scores(record: dict[str, Any], score: str) -> Scored:
    """Score the samples a run trained on from its ``sample_dynamics.pt`` ``record`` (see
    :class:`~noisylabels.callbacks.SampleDynamics`) by ``score`` (one of
    :data:`DYNAMICS_SCORES`)."""
    if score not in DYNAMICS_SCORES:
        raise InputError(f"--score must be one of {', '.join(SCORES)}, got {score!r}")
    epochs = record["loss_epochs"].float()
    index = torch.nonzero(epochs > 0).flatten()
    n = epochs[index]
    if score == "weight" and float(record.get("alpha", 0.0)) == 0.0:
        raise InputError(
            "--score weight ranks by the VRNL weights, but this run trained with alpha 0 "
            "(every weight is 1); use --score margin or loss, or a run with --model.alpha > 0"
        )
    values = {
        "margin": -record["margin"].float()[index] / n,
        "loss": record["loss"].float()[index] / n,
        "weight": -record["weight"].float()[index] / n,
    }[score]
    given = record["noisy_labels"].long()[index]
    predicted = record["probs"].float()[index].argmax(1)
    return Scored(index, given, predicted, values)


def posterior_scores(
    index: Tensor, labels: Tensor, clean_probs: Tensor, noisy_probs: Tensor
) -> Scored:
    """``1 - q_{y~}`` for the samples ``index`` with given labels ``labels``, out-of-sample
    clean posteriors ``p`` and noisy posteriors ``q`` (rows ``(M, C)``)."""
    given = labels.long()
    score = 1.0 - noisy_probs.float().gather(1, given[:, None]).squeeze(1)
    return Scored(index.long(), given, clean_probs.float().argmax(1), score)


def ranking(score: Tensor, index: Tensor) -> Tensor:
    """The order of the samples from most to least suspect: by descending ``score``, ties by
    ascending dataset ``index`` (so equal scores rank the same on every machine)."""
    by_index = torch.argsort(index, stable=True)
    return by_index[torch.argsort(score[by_index], descending=True, stable=True)]


def flag_top(scored: Scored) -> Tensor:
    """The flagged set, a boolean mask: the ``n`` highest-scored samples, ``n`` the number of
    samples whose predicted class differs from their given label."""
    n = int((scored.predicted != scored.given).sum())
    flagged = torch.zeros(len(scored.score), dtype=torch.bool)
    flagged[ranking(scored.score, scored.index)[:n]] = True
    return flagged


def auroc(score: Tensor, positive: Tensor) -> float | None:
    """The area under the ROC curve of ``score`` separating ``positive`` samples from the
    others (the Mann-Whitney statistic, ties counted half); ``None`` when either class is
    empty."""
    positive = positive.bool()
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = average_ranks(score.double())
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def average_ranks(values: Tensor) -> Tensor:
    """1-based ranks of ``values`` in ascending order, tied values sharing their mean rank."""
    order = torch.argsort(values, stable=True)
    sorted_values = values[order]
    _, inverse, counts = torch.unique_consecutive(
        sorted_values, return_inverse=True, return_counts=True
    )
    ends = torch.cumsum(counts, 0).double()
    mean_rank = ends - (counts.double() - 1) / 2
    ranks = torch.empty_like(values, dtype=torch.float64)
    ranks[order] = mean_rank[inverse]
    return ranks


def quality(score: Tensor, flagged: Tensor, flipped: Tensor) -> dict[str, Any]:
    """Precision and recall of the ``flagged`` set and the AUROC of ``score`` against the
    known ``flipped`` labels (boolean masks over the same samples)."""
    flagged, flipped = flagged.bool(), flipped.bool()
    hits = int((flagged & flipped).sum())
    n_flagged, n_flipped = int(flagged.sum()), int(flipped.sum())
    return {
        "samples": len(score),
        "flipped": n_flipped,
        "flagged": n_flagged,
        "precision": hits / n_flagged if n_flagged else None,
        "recall": hits / n_flipped if n_flipped else None,
        "auroc": auroc(score, flipped),
    }
