"""MentorNet, in its self-paced form (Jiang et al., "MentorNet: Learning Data-Driven Curriculum
for Very Deep Neural Networks on Corrupted Labels", ICML 2018), as the label-noise baselines of
Co-teaching and Dual-T reimplement it.

Each of two networks keeps the ``1 - tau_t`` fraction of every batch with its *own* smallest
cross-entropy and trains on it (Co-teaching without the exchange). ``tau_t`` ramps from 0 to
``tau`` over the first ``ramp_epochs`` epochs, with ``tau`` the noise rate, a number, or
``1 - mean(diag T̂)`` of an estimated row-stochastic T̂ (``T̂[i, j] ≈ P(noisy=j | clean=i)``);
see :mod:`noisylabels.methods.selection`.

With ``alpha != 0`` each network's objective is the VRNL objective over the cross-entropies of
its own selection; network 0 is validated and tested.
"""

from __future__ import annotations

from torch import Tensor

from noisylabels.methods.selection import SmallLossMethod


class MentorNet(SmallLossMethod):
    """Self-paced MentorNet (Jiang et al. 2018): each network trains on its small-loss samples."""

    def select(self, losses: list[Tensor], logits: list[Tensor]) -> list[Tensor]:
        """Each network trains on the samples with its own smallest losses."""
        return self.small_loss_masks(losses)
