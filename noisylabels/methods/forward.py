"""Forward loss correction (Patrini et al., "Making Deep Neural Networks Robust to Label Noise:
a Loss Correction Approach", CVPR 2017), and the fixed-or-estimated transition matrix it shares
with importance reweighting.

Per-sample loss ``l_i = -log(q_{y~_i} + 1e-12)`` with ``q = p @ T`` where ``p = softmax(z)`` and
``T`` is row-stochastic, ``T[i, j] = P(noisy = j | clean = i)``. With ``alpha != 0`` this is
Forward-VRNL.

``T`` is the true T of the synthetic noise, a file, or estimated in two stages: a plain-CE
warm-up, then anchor points (or Dual-T) on the warm-up model's outputs over the training split
without augmentation. The estimate is a persistent buffer, so checkpoints carry it and a resumed
run never estimates it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from noisylabels.methods.base import NoisyLabelMethod
from noisylabels.noise import (
    anchor_transition,
    bias_transition,
    dual_t_transition,
    estimation_error,
    load_transition,
)

EPS = 1e-12
ESTIMATORS = ("anchor", "dual_t")
ESTIMATE = "estimate"


def apply_transition(probs: Tensor, T: Tensor) -> Tensor:
    """Noisy posteriors ``q = p @ T`` in float32 (also under mixed precision), for clean
    posteriors ``probs`` (B x C) and a row-stochastic ``T[i, j] = P(noisy=j | clean=i)``."""
    with torch.autocast(probs.device.type, enabled=False):
        return probs.float() @ T.float()


def forward_loss(probs: Tensor, T: Tensor, labels: Tensor) -> Tensor:
    """``-log((p @ T)_{y~} + 1e-12)`` per sample, for clean posteriors ``probs`` (B x C) and a
    row-stochastic ``T`` (``T[i, j] = P(noisy=j | clean=i)``)."""
    q = apply_transition(probs, T)
    return -torch.log(q.gather(1, labels.unsqueeze(1)).squeeze(1) + EPS)


def _sync_ready_flag(module: nn.Module, incompatible_keys: Any) -> None:
    """After ``load_state_dict``: mirror the loaded ``t_ready`` buffer in the Python flag."""
    module._t_ready = bool(module.t_ready)


class TransitionMethod(NoisyLabelMethod):
    """A method that corrects with a transition matrix ``T`` (row-stochastic,
    ``T[i, j] = P(noisy=j | clean=i)``): given, loaded, or estimated after a warm-up.

    Args:
        transition: ``true``: the true T of the synthetic noise; ``estimate``: train plain CE for
            ``warmup_epochs``, then estimate T̂ from the model's outputs on the training split
            (without augmentation) and correct with it; otherwise a path to a T file (``.pt``,
            ``.npy``, ``.csv``).
        estimator: ``anchor`` (anchor points; Patrini et al. 2017) or ``dual_t`` (Yao et al.
            2020) for ``transition: estimate``.
        warmup_epochs: epochs of plain CE (no VRNL) before the estimate (paper: 20; 15 on
            CIFAR-100). Must be smaller than ``max_epochs``; under ``fast_dev_run`` T̂ is
            estimated at once so every stage runs.
        filter_outliers: ignore outputs at or above each column's ``outlier_quantile`` when
            picking anchor points (paper: on for MNIST and CIFAR-10, off for CIFAR-100).
        outlier_quantile: the filter's quantile, a fraction (0.97 = 97th percentile).
        transition_bias: ``γ > 0`` perturbs T to ``T + γ|Δ|``, ``Δ ~ N(0, 1)`` seeded by
            ``bias_seed``, rows renormalised (VRNL paper §4.4, robustness to a biased T).
        bias_seed: seed of ``Δ``.
        **kwargs: see :class:`~noisylabels.methods.base.NoisyLabelMethod`.
    """

    def __init__(
        self,
        transition: bool | str = True,
        estimator: str = "anchor",
        warmup_epochs: int = 20,
        filter_outliers: bool = True,
        outlier_quantile: float = 0.97,
        transition_bias: float = 0.0,
        bias_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if transition is False:
            raise ValueError(
                "transition: false leaves nothing to correct with; use the CE method, "
                "transition: true (the true T), estimate, or a path to a T file"
            )
        if isinstance(transition, str) and transition != ESTIMATE:
            if not Path(transition).expanduser().is_file():
                raise FileNotFoundError(
                    f"transition file {transition} does not exist; --model.transition takes "
                    "true, estimate, or the path of a T file"
                )
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        if int(warmup_epochs) < 0:
            raise ValueError(f"warmup_epochs must be >= 0, got {warmup_epochs}")
        if not 0.0 < outlier_quantile <= 1.0:
            raise ValueError(
                f"outlier_quantile must be a fraction in (0, 1] (0.97, not 97), "
                f"got {outlier_quantile}"
            )
        if not transition_bias >= 0.0:
            raise ValueError(f"transition_bias (γ) must be >= 0, got {transition_bias}")
        self.transition_source = transition
        self.register_buffer("T", torch.eye(self.num_classes))
        # set once T is final (fixed at setup, or estimated after the warm-up); checkpointed
        self.register_buffer("t_ready", torch.tensor(False))
        self._t_ready = False
        self.register_load_state_dict_post_hook(_sync_ready_flag)

    # ---------------------------------------------------------------- state
    @property
    def estimates_transition(self) -> bool:
        """Whether T̂ is estimated from a warm-up model (``transition: estimate``)."""
        return self.transition_source == ESTIMATE

    @property
    def in_warmup(self) -> bool:
        return self.estimates_transition and not self._t_ready

    def warmup_length(self) -> int:
        """Warm-up epochs of this run: ``warmup_epochs``, or 0 under ``fast_dev_run``."""
        trainer = self._trainer
        if trainer is not None and trainer.fast_dev_run:
            return 0
        return int(self.hparams.warmup_epochs)

    def transition(self) -> Tensor | None:
        """The T this method corrects with; ``None`` while T̂ is not estimated yet."""
        return None if self.in_warmup else self.T

    def noisy_posterior(self, probs: Tensor) -> Tensor:
        return apply_transition(probs, self.T)

    def store_transition(self, T: Tensor) -> None:
        """Make ``T`` (row-stochastic) the final transition matrix of this run."""
        self.T.copy_(T.to(self.T))
        self.t_ready.fill_(True)
        self._t_ready = True

    # ---------------------------------------------------------------- fixed T
    def setup(self, stage: str) -> None:
        if stage != "fit":
            return
        if self.estimates_transition:
            self._check_warmup_fits()
            return
        self.store_transition(self.biased(self.resolve_transition()))

    def resolve_transition(self) -> Tensor:
        """The given T of this run: the data module's true T or the T file."""
        source = self.transition_source
        if source == ESTIMATE:
            raise ValueError("transition: estimate has no given T; it is estimated after warm-up")
        if isinstance(source, str):
            return load_transition(source, self.num_classes)
        true_t = self._true_transition()
        if true_t is None:
            datamodule = getattr(self.trainer, "datamodule", None)
            noise = getattr(datamodule, "noise_type", "unknown")
            raise ValueError(
                f"transition: true needs the true T, which noise type {noise!r} does not have; "
                "pass --model.transition estimate, or a path to a T file"
            )
        return true_t

    def _true_transition(self) -> Tensor | None:
        datamodule = getattr(self._trainer, "datamodule", None)
        true_t = getattr(datamodule, "transition", None)
        return None if true_t is None else true_t.float()

    def biased(self, T: Tensor) -> Tensor:
        """``T`` perturbed by ``transition_bias`` (seeded by ``bias_seed``); ``T`` if γ = 0."""
        gamma = float(self.hparams.transition_bias)
        if gamma == 0.0:
            return T
        gen = torch.Generator().manual_seed(int(self.hparams.bias_seed))
        biased = bias_transition(T.detach().float().cpu(), gamma, gen)
        self._report(f"biased T (γ = {gamma:g})", biased)
        return biased

    def _report(self, what: str, T: Tensor) -> None:
        true_t = self._true_transition()
        err = "" if true_t is None else f": ε_T = {estimation_error(true_t, T):.4f}"
        rank_zero_info(f"{type(self).__name__}: {what}{err}")

    # ---------------------------------------------------------------- estimated T
    def _check_warmup_fits(self) -> None:
        trainer = self._trainer
        if trainer is None or trainer.fast_dev_run or self._t_ready:
            return
        max_epochs = trainer.max_epochs
        warmup = int(self.hparams.warmup_epochs)
        if max_epochs is not None and max_epochs >= 0 and warmup >= max_epochs:
            raise ValueError(
                f"warmup_epochs={warmup} leaves no epoch of the corrected stage with "
                f"max_epochs={max_epochs}; lower --model.warmup_epochs or raise "
                "--trainer.max_epochs"
            )

    def on_train_start(self) -> None:
        self._maybe_estimate()

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()
        self._maybe_estimate()

    def _maybe_estimate(self) -> None:
        if self.in_warmup and self.current_epoch >= self.warmup_length():
            T_hat = self.estimate_transition()
            self._report(
                f"estimated T̂ ({self.hparams.estimator}) at epoch {self.current_epoch}", T_hat
            )
            T_hat = self.biased(T_hat)
            self.store_transition(T_hat)

    @torch.no_grad()
    def train_outputs(self) -> tuple[Tensor, Tensor]:
        """Softmax outputs (N x C, CPU) and noisy labels of the training split, in order and
        without augmentation, with the model in eval mode. Honours ``limit_train_batches``."""
        trainer = self.trainer
        datamodule = trainer.datamodule
        if datamodule is None or not hasattr(datamodule, "train_eval_batches"):
            raise ValueError(
                "transition: estimate needs a NoisyDataModule (with train_eval_batches) "
                "to run the warm-up model over the training set"
            )
        modes = {m: m.training for m in self.modules()}
        self.eval()
        probs, labels = [], []
        try:
            with trainer.precision_plugin.forward_context():
                for batch in datamodule.train_eval_batches(
                    self.device, trainer.limit_train_batches
                ):
                    probs.append(F.softmax(self(batch["image"]).float(), dim=1).cpu())
                    labels.append(batch["label"].cpu())
        finally:
            for module, mode in modes.items():
                module.train(mode)
        return torch.cat(probs), torch.cat(labels)

    def estimate_transition(self) -> Tensor:
        """Estimate T̂ from the current model (anchor points or Dual-T, ``filter_outliers`` at
        ``outlier_quantile``); every process gets process 0's estimate."""
        hp = self.hparams
        probs, labels = self.train_outputs()
        if hp.estimator == "dual_t":
            T_hat = dual_t_transition(probs, labels, hp.filter_outliers, hp.outlier_quantile)
        else:
            T_hat = anchor_transition(probs, hp.filter_outliers, hp.outlier_quantile)
        return self.trainer.strategy.broadcast(T_hat, src=0)

    # ---------------------------------------------------------------- loss
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Plain cross-entropy during the warm-up, then :meth:`corrected_loss`."""
        if self.in_warmup:
            return F.cross_entropy(logits.float(), batch["label"], reduction="none")
        return self.corrected_loss(logits, batch)

    def corrected_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The method's loss with the transition matrix, shape ``(B,)``."""
        raise NotImplementedError


class Forward(TransitionMethod):
    """Forward correction: cross-entropy of the noisy posterior ``q = p @ T`` (Patrini 2017)."""

    def corrected_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return forward_loss(F.softmax(logits.float(), dim=1), self.T, batch["label"])
