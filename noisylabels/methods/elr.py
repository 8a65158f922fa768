"""ELR, early-learning regularization (Liu et al., "Early-Learning Regularization Prevents
Memorization of Noisy Labels", NeurIPS 2020).

Every training sample ``i`` keeps a target ``t_i`` (a row of a per-sample table, zero at first),
a running average of the model's own predictions: at each step where it is in the batch,
``t_i <- beta · t_i + (1 - beta) · p_i / sum(p_i)`` with ``p_i = clamp(softmax(z_i), 1e-4,
1 - 1e-4)`` detached. Its loss is then

    l_i = CE(z_i, y~_i) + lam · log(1 - <p_i, t_i>)

with the updated ``t_i`` (the reference updates the target before the loss). Minimizing
``log(1 - <p, t>)`` pulls the prediction toward the targets of the early-learning phase, where
the network fits the clean labels, and so keeps it from memorizing the wrong ones. VRNL
(``alpha != 0``) acts on the variance of ``l_i``.

The table is part of the state dict (so of every checkpoint; a resumed run continues with the
same targets), but not a buffer (DDP would broadcast it before every step). Under DDP every
process writes the rows every process updated in the step
(:func:`~noisylabels.methods.core.distributed.gather_updates`), so the table is the one-process
table after the same global batch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.distributed import gather_updates
from noisylabels.methods.core.losses import cross_entropy

TARGET_KEY = "elr_target"
"""The batch key under which a training step hands the updated targets to the loss."""
STATE_KEY = "elr_targets"
"""The state-dict key of the target table."""


class ELR(NoisyLabelMethod):
    """Early-learning regularization: CE + lam·log(1 − <p, t>), t a running average of the
    model's predictions per sample (Liu et al. 2020).

    Args:
        beta: momentum β of the per-sample targets (reference: 0.7 on CIFAR-10 with symmetric
            noise, 0.9 on CIFAR-100 and on CIFAR-10 with asymmetric noise).
        lam: weight λ of the regularizer (reference: 3 on CIFAR-10 symmetric, 1 on CIFAR-10
            asymmetric, 7 on CIFAR-100).
        clamp: the prediction is clamped to ``[clamp, 1 - clamp]`` in the regularizer and the
            target update (reference: 1e-4).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self, beta: float = 0.7, lam: float = 3.0, clamp: float = 1e-4, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= beta < 1.0:
            raise InputError(f"--model.beta (the targets' momentum) must be in [0, 1), got {beta}")
        if lam < 0:
            raise InputError(f"--model.lam (the regularizer's weight) must be >= 0, got {lam}")
        if not 0.0 <= clamp < 0.5:
            raise InputError(f"--model.clamp must be in [0, 0.5), got {clamp}")
        # t_i of every sample of the training set (training and validation split) by dataset
        # index, and one scratch row last that padded DDP rows are written to
        self.targets = torch.zeros(1, self.num_classes)
        save_hook = getattr(self, "register_state_dict_post_hook", None)
        (save_hook or self._register_state_dict_hook)(_save_targets)
        self.register_load_state_dict_pre_hook(_load_targets)

    # ---------------------------------------------------------------- the target table
    def init_targets(self, num_samples: int) -> None:
        """A zero target for each of ``num_samples`` samples (the reference's start)."""
        self.targets = torch.zeros(num_samples + 1, self.num_classes, device=self.device)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        facts = self.data_facts()
        if stage == "fit" and facts is not None and len(self.targets) != facts.num_samples + 1:
            self.init_targets(facts.num_samples)  # a checkpoint's table replaces it on resume

    def update_targets(self, index: Tensor, probs: Tensor) -> Tensor:
        """``t_i <- beta · t_i + (1 - beta) · p_i / sum(p_i)`` for the samples ``index`` of this
        process (``probs``: their clamped, detached predictions); every process writes every
        process's new rows. Returns this process's new targets."""
        if self.targets.device != probs.device:
            self.targets = self.targets.to(probs.device)
        beta = float(self.hparams.beta)
        new = beta * self.targets[index] + (1.0 - beta) * probs / probs.sum(1, keepdim=True)
        facts = self.data_facts()
        indices, rows = gather_updates(index, new, None if facts is None else facts.batch_size)
        scratch = len(self.targets) - 1  # padding (index -1) goes to the scratch row
        self.targets.index_copy_(0, torch.where(indices >= 0, indices, scratch), rows)
        return new

    # ---------------------------------------------------------------- the objective
    def clamped_probs(self, logits: Tensor) -> Tensor:
        c = float(self.hparams.clamp)
        return F.softmax(logits.float(), dim=1).clamp(c, 1.0 - c)

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """``CE + lam · log(1 - <p, t>)`` with the step's updated targets; plain CE where a
        batch has none (validation: the reference's validation loss is CE)."""
        ce = cross_entropy(logits, batch["label"])
        target = batch.get(TARGET_KEY)
        if target is None:
            return ce
        inner = (target * self.clamped_probs(logits)).sum(1)
        return ce + self.hparams.lam * torch.log(1.0 - inner)

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """Update the batch's targets from the current predictions, then the VRNL objective of
        the ELR losses (plain CE in a warm-up, without touching the targets)."""
        if self.in_warmup:
            return super().training_objective(batch)
        logits = self(batch["image"])
        with torch.no_grad():
            target = self.update_targets(batch["index"], self.clamped_probs(logits.detach()))
        losses = self.stage_loss_fn(logits, {**batch, TARGET_KEY: target})
        return self.vrnl(losses, logits, batch)


def _save_targets(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``state_dict`` hook: the target table (without its scratch row) into the state dict."""
    state_dict[prefix + STATE_KEY] = module.targets[:-1].detach().cpu().clone()


def _load_targets(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: the target table out of the state dict."""
    saved = state_dict.pop(prefix + STATE_KEY, None)
    if saved is not None:
        device = next(module.parameters()).device
        scratch = torch.zeros(1, saved.shape[1], dtype=torch.float32)
        module.targets = torch.cat([saved.float(), scratch]).to(device)
