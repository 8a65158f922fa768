"""Generalized cross-entropy (Zhang & Sabuncu, "Generalized Cross Entropy Loss for Training Deep
Neural Networks with Noisy Labels", NeurIPS 2018), with its truncated variant.

``L_q(p, y) = (1 - p_y^q) / q`` for the clean posterior ``p = softmax(z)`` and ``q ∈ (0, 1]``:
cross-entropy as ``q → 0``, the (noise-robust) mean absolute error at ``q = 1``. The truncated
loss keeps a per-sample weight ``w_i ∈ {0, 1}`` over the training set and trains on
``w_i · (L_q(p, y~_i) - L_q(k))``, ``L_q(k) = (1 - k^q) / q``: every ``prune_every`` epochs from
``prune_start`` on, the best model so far by noisy-validation accuracy (``prune_model: best``)
sets ``w_i = 1`` where ``L_q(p, y~_i) < L_q(k)`` (its ``p_y > k``) and 0 elsewhere, so that the
samples it fits worst stop contributing. Reference constants (AlanChou/Truncated-Loss, the
widely used implementation): ``q = 0.7``, ``k = 0.5``, pruning every 10 epochs from epoch 40
(CIFAR-100: 80), the loss averaged over the whole batch (pruned samples count with 0).

With ``alpha != 0`` this is GCE-VRNL: ``mean(l) - alpha * Var(l)`` of the per-sample (truncated)
losses ``l_i`` of the batch, pruned samples included at 0 as in the mean.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.networks import better_model

PRUNE_MODELS = ("best", "last")
CHECKPOINT_KEY = "gce_prune_best"


def gce_loss(logits: Tensor, labels: Tensor, q: float, floor: float | None = None) -> Tensor:
    """``L_q = (1 - p_y^q) / q`` per sample (Zhang & Sabuncu 2018, Eq. 6), in float32, with
    ``p_y^q = exp(q · log softmax(z)_y)`` (finite gradient where ``p_y`` underflows);
    ``floor``: ``p_y`` clamped from below at it first (DISC's reference: 1e-7), no gradient
    beneath it."""
    log_p = F.log_softmax(logits.float(), dim=1).gather(1, labels.unsqueeze(1)).squeeze(1)
    if floor is not None:
        log_p = log_p.clamp_min(math.log(floor))
    return (1.0 - torch.exp(q * log_p)) / q


def truncation_threshold(q: float, k: float) -> float:
    """``L_q(k) = (1 - k^q) / q``, the loss of a sample whose ``p_y`` is ``k``."""
    return (1.0 - k**q) / q


class GCE(NoisyLabelMethod):
    """Generalized cross-entropy ``(1 - p_y^q) / q`` (Zhang & Sabuncu 2018), truncated by default.

    Args:
        q: the exponent ``q ∈ (0, 1]`` (reference: 0.7).
        truncate: train on the truncated loss ``w_i · (L_q - L_q(k))`` with per-sample weights
            ``w_i`` pruned every ``prune_every`` epochs (the reference); ``false``: plain ``L_q``.
        k: the truncation threshold on ``p_y`` (reference: 0.5).
        prune_start: the first pruning is at the start of the method stage's epoch
            ``prune_start - 1`` (counted from 0; reference: 40, 80 on CIFAR-100), then every
            ``prune_every`` epochs.
        prune_every: epochs between prunings (reference: 10).
        prune_model: the model that prunes: the ``best`` so far by noisy-validation accuracy
            (the GCE paper's) or the ``last`` (the current one).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self,
        q: float = 0.7,
        truncate: bool = True,
        k: float = 0.5,
        prune_start: int = 40,
        prune_every: int = 10,
        prune_model: str = "best",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not 0.0 < q <= 1.0:
            raise InputError(f"--model.q must be in (0, 1] (GCE's exponent), got {q}")
        if not 0.0 < k < 1.0:
            raise InputError(f"--model.k must be in (0, 1) (a threshold on p_y), got {k}")
        if int(prune_start) < 1 or int(prune_every) < 1:
            raise InputError(
                f"--model.prune_start and --model.prune_every must be >= 1, got "
                f"{prune_start} and {prune_every}"
            )
        if prune_model not in PRUNE_MODELS:
            raise InputError(
                f"--model.prune_model must be one of {PRUNE_MODELS}, got {prune_model!r}"
            )
        self.q, self.k, self.truncate = float(q), float(k), bool(truncate)
        # w_i of every sample of the training set (train and validation split) by dataset index;
        # empty: all 1. Part of the state dict (checkpoints), not a buffer (DDP would broadcast
        # it before every step).
        self.prune_weights = torch.empty(0)
        self._prune_best: dict[str, Any] | None = None
        save_hook = getattr(self, "register_state_dict_post_hook", None)
        (save_hook or self._register_state_dict_hook)(_save_prune_weights)
        self.register_load_state_dict_pre_hook(_load_prune_weights)

    # ---------------------------------------------------------------- the loss
    def sample_weights(self, index: Tensor | None, n: int, device: torch.device) -> Tensor:
        """``w_i`` of the samples ``index`` (1 where nothing was pruned yet)."""
        if index is None or len(self.prune_weights) == 0:
            return torch.ones(n, device=device)
        if self.prune_weights.device != index.device:
            self.prune_weights = self.prune_weights.to(index.device)
        return self.prune_weights[index]

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        loss = gce_loss(logits, batch["label"], self.q)
        if not self.truncate:
            return loss
        weights = self.sample_weights(batch.get("index"), len(loss), loss.device)
        return weights * (loss - truncation_threshold(self.q, self.k))

    # ---------------------------------------------------------------- pruning
    def prunes_at(self, epoch: int) -> bool:
        """Whether the pruning runs at the start of absolute epoch ``epoch``: the method
        stage's epoch ``e`` (from 0) with ``e + 1 >= prune_start`` and ``(e + 1) %
        prune_every == 0``, the reference's condition."""
        e = epoch - self.warmup_length() + 1
        hp = self.hparams
        return self.truncate and e >= int(hp.prune_start) and e % int(hp.prune_every) == 0

    def inert_options(self) -> list[tuple[str, str]]:
        """The truncation's options without truncation, or where no pruning falls in the
        method's stage (with every ``w_i`` at 1 the truncated loss is ``L_q`` less a constant,
        the same gradient)."""
        names = ("k", "prune_start", "prune_every", "prune_model")
        if not self.truncate:
            return [(name, "truncate is false: plain L_q, nothing is pruned") for name in names]
        length, hp = int(self.schedule.main_epochs), self.hparams
        start, every = int(hp.prune_start), int(hp.prune_every)
        if any(e >= start and e % every == 0 for e in range(1, length + 1)):
            return []
        reason = (
            f"no pruning falls in the method's {length} epochs (one at the start of each "
            f"epoch e + 1 >= prune_start = {start} that is a multiple of prune_every = {every}), "
            "and without one the truncated loss trains as plain L_q"
        )
        return [(name, reason) for name in names]

    @torch.no_grad()
    def pruned_weights(self, logits: Tensor, labels: Tensor) -> Tensor:
        """``w_i = 1`` where ``L_q(p_i, y~_i) < L_q(k)``, else 0 (float)."""
        keep = gce_loss(logits, labels, self.q) < truncation_threshold(self.q, self.k)
        return keep.float()

    def update_prune_weights(self) -> None:
        """Run the pruning model over the training split (without augmentation; every process
        the whole split, so every process gets the same weights) and set ``w_i``."""
        best = self._prune_best if self.hparams.prune_model == "best" else None
        current = self.network_state() if best is not None else None
        if best is not None:
            self.load_network_state(best["state"])
        try:
            facts = self.data_facts()
            weights = torch.ones(facts.num_samples)
            for batch, logits in self.training_split_logits(self.trainer.limit_train_batches):
                weights[batch["index"].cpu()] = self.pruned_weights(logits, batch["label"]).cpu()
        finally:
            if current is not None:
                self.load_network_state(current)
        self.prune_weights = weights.to(self.device)
        model = "the last model" if best is None else f"the model of epoch {best['epoch']}"
        kept = float(weights[facts.train_indices].mean())
        rank_zero_info(
            f"GCE: pruned by {model} at epoch {self.current_epoch}: {kept:.1%} of the training "
            "split kept"
        )

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()
        if not self.in_warmup and self.prunes_at(self.current_epoch):
            self.update_prune_weights()

    def on_validation_epoch_end(self) -> None:
        """Keep the best model so far (noisy-validation accuracy, the method's stage only) for
        ``prune_model: best``."""
        score = self.val_acc.compute()
        super().on_validation_epoch_end()
        trainer = self._trainer
        if (
            self.truncate
            and self.hparams.prune_model == "best"
            and not self.in_warmup
            and not (trainer is not None and trainer.sanity_checking)
        ):
            self._prune_best = better_model(
                self._prune_best, score, self.current_epoch, self.networks
            )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[CHECKPOINT_KEY] = self._prune_best

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self._prune_best = checkpoint.get(CHECKPOINT_KEY)


def _save_prune_weights(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """``state_dict`` hook: the per-sample pruning weights go into the state dict."""
    state_dict[prefix + "prune_weights"] = module.prune_weights.detach().cpu()


def _load_prune_weights(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """``load_state_dict`` pre-hook: take the per-sample pruning weights out of the state dict."""
    saved = state_dict.pop(prefix + "prune_weights", None)
    if saved is not None:
        module.prune_weights = saved.to(module.device, torch.float32)
