"""Decoupling (Malach & Shalev-Shwartz, "Decoupling "when to update" from "how to update"",
NeurIPS 2017).

Two networks, updated only on the samples of a batch where their predictions (argmax of the
logits) disagree; a batch without a disagreement updates neither (its objective is 0, though
momentum and weight decay of the optimizers still act). The two networks start from different
random initialisations, so they disagree at first. No noise rate or transition matrix is used.

With ``alpha != 0`` each network's objective is the VRNL objective over the cross-entropies of
the disagreement samples (the same samples for both); as the networks converge these become a
handful per batch, so the variance is taken over few samples. Network 0 is validated and
tested.
"""

from __future__ import annotations

from torch import Tensor

from noisylabels.methods.selection import TwoNetworkMethod


class Decoupling(TwoNetworkMethod):
    """Decoupling (Malach & Shalev-Shwartz 2017): two networks update where they disagree."""

    def select(self, losses: list[Tensor], logits: list[Tensor]) -> list[Tensor]:
        """The samples where the two networks predict different classes, for both."""
        disagree = logits[0].argmax(1) != logits[1].argmax(1)
        return [disagree, disagree]
