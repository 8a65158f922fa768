"""Forward loss correction (Patrini et al., "Making Deep Neural Networks Robust to Label Noise:
a Loss Correction Approach", CVPR 2017).

Per-sample loss ``l_i = -log(q_{y~_i} + 1e-12)`` with ``q = p @ T`` where ``p = softmax(z)`` and
``T`` is row-stochastic, ``T[i, j] = P(noisy = j | clean = i)``: the true T, a file, or T̂
estimated after a warm-up (see :mod:`noisylabels.methods.transition`). With ``alpha != 0`` this
is Forward-VRNL.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from noisylabels.methods.core.losses import forward_loss
from noisylabels.methods.transition import TransitionMethod


class Forward(TransitionMethod):
    """Forward correction: cross-entropy of the noisy posterior ``q = p @ T`` (Patrini 2017).

    A given T (``true`` or a file) must be invertible with every diagonal entry above chance
    (``1/C``): others are refused (see
    :meth:`~noisylabels.methods.transition.TransitionMethod.check_given_transition`).
    """

    correction = "corrects by the loss -log((p @ T)_y)"

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return forward_loss(F.softmax(logits.float(), dim=1), self.T, batch["label"])
