"""Co-teaching+ (Yu et al., "How does Disagreement Help Generalization against Label
Corruption?", ICML 2019).

Two networks, as in Co-teaching; after ``init_epochs`` epochs of plain Co-teaching (counted from
the first epoch of the method's own stage), each batch is first narrowed to the samples on which
the two networks' predictions (argmax of the logits) disagree, and among those each network keeps
the ``1 - tau_t`` fraction with its smallest loss for its *peer* to train on. Of ``n`` disagreement
samples in a batch, ``floor((1 - tau_t) n)`` are kept, all ``n`` where that is 0; a batch without a
disagreement trains neither network (its objective is 0). ``tau_t`` ramps from 0 to ``tau`` over
``ramp_epochs`` epochs, with ``tau`` the noise rate, a number, or ``1 - mean(diag T̂)`` of an
estimated row-stochastic T̂ (``T̂[i, j] ≈ P(noisy=j | clean=i)``); see
:mod:`noisylabels.methods.selection`.

``loss``: ``softmax_ce`` (the default) is what the reference code (xingruiyu/coteaching_plus)
computes once the disagreement stage begins: the cross-entropy of the softmax outputs taken as
logits, ``-log softmax(softmax(z))_y``, a bounded loss, for selection and training alike; ``ce`` is
the cross-entropy of the paper's Algorithm 1, with which the networks memorize the disagreement
set on MNIST Sym-50 % (docs/results.md).

With ``alpha != 0`` each network's objective is the VRNL objective over the losses of the samples
it trains on (its peer's small-loss selection among the disagreement samples); network 0 is
validated and tested.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.losses import cross_entropy
from noisylabels.methods.selection import SmallLossMethod

LOSSES = ("ce", "softmax_ce")


class CoTeachingPlus(SmallLossMethod):
    """Co-teaching+ (Yu et al. 2019): Co-teaching among the samples the networks disagree on.

    Args:
        init_epochs: epochs of plain Co-teaching at the start of the method's own stage before
            the disagreement rule applies (the reference: MNIST 0, CIFAR-10 20, CIFAR-100 5).
        loss: ``softmax_ce`` (the reference code's loss in the disagreement stage:
            cross-entropy of the softmax outputs) or ``ce`` (the paper's Algorithm 1).
        **kwargs: see :class:`~noisylabels.methods.selection.SmallLossMethod`.
    """

    def __init__(self, init_epochs: int = 0, loss: str = "softmax_ce", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if int(init_epochs) < 0:
            raise InputError(f"--model.init_epochs must be >= 0, got {init_epochs}")
        if loss not in LOSSES:
            raise InputError(f"--model.loss must be one of {LOSSES}, got {loss!r}")
        self.init_epochs = int(init_epochs)
        self.loss_kind = loss
        self.disagreement_stage = self.init_epochs == 0  # set at each epoch's start

    def inert_options(self) -> list[tuple[str, str]]:
        """``init_epochs`` and ``loss`` where the disagreement stage would never start."""
        inert = super().inert_options()
        length = int(self.schedule.main_epochs)
        if self.init_epochs >= length:
            reason = (
                f"the method's own stage has {length} epochs, so the disagreement stage never "
                "starts and the whole run is plain Co-teaching (--model CoTeaching)"
            )
            inert += [("init_epochs", reason), ("loss", reason)]
        return inert

    def val_loss_changes(self) -> str | None:
        """With ``loss: softmax_ce``, the plain epochs' cross-entropy becomes the cross-entropy
        of the softmax once the disagreement stage begins."""
        if self.loss_kind == "softmax_ce" and 0 < self.init_epochs < int(self.schedule.main_epochs):
            return (
                f"its loss is the cross-entropy for its first {self.init_epochs} epochs "
                "(--model.init_epochs), then the cross-entropy of the softmax (--model.loss "
                "softmax_ce)"
            )
        return None

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()
        stage_epoch = self.current_epoch - self.warmup_length()
        self.disagreement_stage = not self.in_warmup and stage_epoch >= self.init_epochs

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Cross-entropy; of the softmax outputs with ``loss: softmax_ce`` in the disagreement
        stage."""
        if self.loss_kind == "softmax_ce" and self.disagreement_stage:
            return cross_entropy(F.softmax(logits.float(), dim=1), batch["label"])
        return cross_entropy(logits, batch["label"])

    def select(self, losses: list[Tensor], logits: list[Tensor]) -> list[Tensor]:
        """Network 0 trains on network 1's small-loss samples and vice versa, chosen among the
        samples the networks disagree on once the disagreement stage has begun."""
        among = None
        if self.disagreement_stage:
            among = logits[0].argmax(1) != logits[1].argmax(1)
        mine = self.small_loss_masks(losses, among=among)
        return [mine[1], mine[0]]
