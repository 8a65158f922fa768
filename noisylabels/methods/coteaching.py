"""Co-teaching (Han et al., "Co-teaching: Robust Training of Deep Neural Networks with
Extremely Noisy Labels", NeurIPS 2018).

Two networks; in every batch each keeps the ``1 - tau_t`` fraction of the samples with its
smallest cross-entropy, and its *peer* trains on that selection: network 0 learns from the
samples network 1 finds easy and vice versa, so the errors of one network are not confirmed by
itself. ``tau_t`` ramps from 0 to ``tau`` over the first ``ramp_epochs`` epochs (10), with
``tau`` the noise rate, a number, or ``1 - mean(diag T̂)`` of an estimated row-stochastic T̂
(``T̂[i, j] ≈ P(noisy=j | clean=i)``); see :mod:`noisylabels.methods.selection`.

With ``alpha != 0`` each network's objective is the VRNL objective over the cross-entropies of
the samples it trains on (the peer's selection); network 0 is validated and tested.
"""

from __future__ import annotations

from torch import Tensor

from noisylabels.methods.selection import SmallLossMethod


class CoTeaching(SmallLossMethod):
    """Co-teaching (Han et al. 2018): each network trains on its peer's small-loss samples."""

    def select(self, losses: list[Tensor], logits: list[Tensor]) -> list[Tensor]:
        """Network 0 trains on network 1's small-loss samples, network 1 on network 0's."""
        mine = self.small_loss_masks(losses)
        return [mine[1], mine[0]]
