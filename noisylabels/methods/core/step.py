"""What a training step hands to the epoch statistics and to callbacks.

Every method records one :class:`StepOutput` per network and training batch (through
:meth:`~noisylabels.methods.core.base.NoisyLabelMethod.vrnl`); the training step returns them under
``"steps"``, so callbacks such as :class:`~noisylabels.callbacks.SubsetStatistics` read the
per-sample values without knowing how the method computed them. :class:`EpochStatistics`
accumulates the per-epoch training metrics on the device and reduces them once per epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class StepOutput:
    """One network's training step over one batch (all tensors detached).

    Attributes:
        index: dataset indices of the batch's samples, ``(B,)``.
        labels: their training (noisy) labels, ``(B,)``.
        logits: the network's logits, ``(B, C)``.
        losses: the method's per-sample training losses, ``(B,)``, also of samples the objective
            did not use.
        weights: VRNL weights ``1 + 2 alpha (mean(l) - l_i)`` of the samples used, ``(B,)``
            (0 for samples not used).
        used: boolean mask ``(B,)`` of the samples the objective was computed over, or ``None``
            when it used all of them.
        objective: the objective value of this network's step (a scalar).
        mean, variance: mean and population variance of the used samples' losses (over all
            processes with the global variance scope).
        network: which network of the method (0 for single-network methods).
    """

    index: Tensor
    labels: Tensor
    logits: Tensor
    losses: Tensor
    weights: Tensor
    used: Tensor | None
    objective: Tensor
    mean: Tensor
    variance: Tensor
    network: int = 0

    @property
    def num_used(self) -> int:
        """How many samples the objective used (a host sync when ``used`` is a mask)."""
        return len(self.losses) if self.used is None else int(self.used.sum())


# slots of EpochStatistics' per-network sums
_FIELDS = ("loss", "loss_var", "objective", "nonpositive", "used", "correct", "seen")


class EpochStatistics:
    """Per-network sums of an epoch's training metrics, kept on the device.

    ``add`` costs a few tensor ops and no host sync; :meth:`compute` reduces the sums over
    processes (``reduce``: e.g. ``strategy.reduce``) once and returns the metrics by name:
    ``loss`` (mean per-sample loss of the used samples), ``loss_var`` (the batch variance,
    averaged with the batch's weight), ``objective``, ``nonpositive_weight_frac``, ``acc``
    (training accuracy against the noisy labels over every sample seen).
    """

    def __init__(self) -> None:
        self.sums: dict[int, Tensor] = {}

    def reset(self) -> None:
        """Start a new epoch."""
        self.sums = {}

    @torch.no_grad()
    def add(self, step: StepOutput) -> None:
        """Accumulate one step's values."""
        # a fill, not a host-to-device copy of a Python number: no host synchronization
        seen = step.losses.new_full((), float(len(step.losses)), dtype=torch.float32)
        if step.used is None:
            n = seen
            nonpositive = (step.weights <= 0).sum()
        else:
            n = step.used.sum().float()
            nonpositive = ((step.weights <= 0) & step.used).sum()
        correct = (step.logits.argmax(1) == step.labels).sum()
        values = [step.mean * n, step.variance * n, step.objective * n, nonpositive, n, correct]
        row = torch.stack([v.float() for v in (*values, seen)])
        if step.network in self.sums:
            self.sums[step.network] += row
        else:
            self.sums[step.network] = row

    def compute(self, reduce) -> dict[int, dict[str, float]]:  # noqa: ANN001 - a callable
        """Metrics by network, with the sums reduced by ``reduce(tensor)`` first."""
        metrics: dict[int, dict[str, float]] = {}
        for network in sorted(self.sums):
            values = dict(zip(_FIELDS, reduce(self.sums[network].clone()).tolist(), strict=True))
            used, seen = max(values["used"], 1.0), max(values["seen"], 1.0)
            metrics[network] = {
                "loss": values["loss"] / used,
                "loss_var": values["loss_var"] / used,
                "objective": values["objective"] / used,
                "nonpositive_weight_frac": values["nonpositive"] / used,
                "acc": values["correct"] / seen,
            }
        return metrics


def named_metrics(by_network: dict[int, dict[str, float]]) -> dict[str, float]:
    """:meth:`EpochStatistics.compute`'s metrics under their logged names: ``train/<name>`` for
    network 0, ``train/net{k}/<name>`` for the others (accuracy last)."""
    named: dict[str, float] = {}
    for network, metrics in by_network.items():
        prefix = "train/" if network == 0 else f"train/net{network}/"
        named.update({prefix + k: v for k, v in metrics.items() if k != "acc"})
        named[prefix + "acc"] = metrics["acc"]
    return named
