"""Standard training: cross-entropy on the noisy labels, the baseline row of every table.

With ``alpha != 0`` it is CE-VRNL, ``mean(l) - alpha * Var(l)`` of the per-sample cross-entropies
(VRNL paper, Eq. 1).
"""

from __future__ import annotations

from torch import Tensor

from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.losses import cross_entropy


class CE(NoisyLabelMethod):
    """Standard training: cross-entropy on the noisy labels (the baseline of every table)."""

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return cross_entropy(logits, batch["label"])
