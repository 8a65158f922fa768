"""Transition-matrix machinery shared by the methods that correct with a T: where T comes from
(the true T of synthetic noise, a file, or estimated after a warm-up), its estimation and bias,
and its error ε_T against the true T.

Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``. An estimate is
made from the warm-up model's outputs over the training split without augmentation, by anchor
points (Patrini et al. 2017) or Dual-T (Yao et al. 2020), at the estimation point of the stage
schedule; it is a persistent buffer, so checkpoints carry it and a resumed run never estimates
it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from noisylabels.errors import InputError, MissingFileError, warn
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.losses import apply_transition
from noisylabels.noise import (
    anchor_transition,
    bias_transition,
    dual_t_parts,
    load_transition,
    transition_condition,
)

ESTIMATORS = ("anchor", "dual_t")
ESTIMATE = "estimate"
# a warm-up model within this fraction of the way from chance (1/C) to perfect is "near chance"
NEAR_CHANCE = 0.1


class TransitionMethod(NoisyLabelMethod):
    """A method that corrects with a transition matrix ``T`` (row-stochastic,
    ``T[i, j] = P(noisy=j | clean=i)``): given, loaded, or estimated after a warm-up.

    Args:
        transition: ``true``: the true T of the synthetic noise; ``estimate``: train plain CE
            for the schedule's ``warmup_epochs`` (at least 1; the paper: 20, 15 on CIFAR-100),
            then estimate T̂ from the model's outputs on the training split (without
            augmentation) and correct with it; otherwise a path to a T file (``.pt``, ``.npy``,
            ``.csv``). A given T (``true``, a file) has nothing to estimate, so its schedule has
            no warm-up. Under ``fast_dev_run`` the first half of the batches is the warm-up,
            then T̂ is estimated (a degenerate estimate replaced by the identity) and the
            corrected stage runs.
        estimator: ``anchor`` (anchor points; Patrini et al. 2017) or ``dual_t`` (Yao et al.
            2020) for ``transition: estimate``.
        filter_outliers: ignore outputs at or above each column's ``outlier_quantile`` when
            picking anchor points (paper: on for MNIST and CIFAR-10, off for CIFAR-100).
        outlier_quantile: the filter's quantile, a fraction (0.97 = 97th percentile).
        transition_bias: ``γ > 0`` perturbs T to ``T + γ|Δ|``, ``Δ ~ N(0, 1)`` seeded by
            ``bias_seed``, rows renormalised (VRNL paper §4.4, robustness to a biased T).
        bias_seed: seed of ``Δ``.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    abstract = True  # a base of methods, not one itself (see methods.registry)
    #: how the method corrects with T, for the messages that refuse a T it cannot correct with
    correction: ClassVar[str] = "corrects with p @ T"

    def __init__(
        self,
        transition: bool | str = True,
        estimator: str = "anchor",
        filter_outliers: bool = True,
        outlier_quantile: float = 0.97,
        transition_bias: float = 0.0,
        bias_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if transition is False:
            raise InputError(
                "--model.transition false leaves nothing to correct with; use the CE method, "
                "transition: true (the true T), estimate, or a path to a T file"
            )
        if isinstance(transition, str) and transition != ESTIMATE:
            if not Path(transition).expanduser().is_file():
                raise MissingFileError(
                    f"transition file {transition} does not exist; --model.transition takes "
                    "true, estimate, or the path of a T file"
                )
        if estimator not in ESTIMATORS:
            raise InputError(f"--model.estimator must be one of {ESTIMATORS}, got {estimator!r}")
        if not 0.0 < outlier_quantile <= 1.0:
            raise InputError(
                f"--model.outlier_quantile must be a fraction in (0, 1] (0.97, not 97), "
                f"got {outlier_quantile}"
            )
        if not transition_bias >= 0.0:
            raise InputError(f"--model.transition_bias (γ) must be >= 0, got {transition_bias}")
        if transition == ESTIMATE:
            self.schedule.require_warmup(
                f"{type(self).__name__} with --model.transition estimate: T̂",
                " (the paper: 20; 15 on CIFAR-100), or correct with a known T: "
                "--model.transition true or a T file",
            )
        elif self.schedule.has_warmup:
            raise InputError(
                f"--model.transition {'true' if transition is True else transition} corrects "
                "with a given T, which "
                "has nothing to estimate from a warm-up, but --model.schedule.warmup_epochs is "
                f"{self.schedule.warmup_epochs}: set --model.schedule.warmup_epochs 0 "
                "(configs/protocol/true_t.yaml does), or estimate T: --model.transition estimate"
            )
        self.transition_source = transition
        self.register_buffer("T", torch.eye(self.num_classes))

    def inert_options(self) -> list[tuple[str, str]]:
        """The estimator's options where T is given rather than estimated; ``bias_seed``
        without a bias."""
        inert = super().inert_options()
        if not self.estimates_transition:
            source = "true" if self.transition_source is True else self.transition_source
            reason = f"T is given (--model.transition {source}), not estimated"
            for name in ("estimator", "filter_outliers", "outlier_quantile"):
                inert.append((name, reason))
        if float(self.hparams.transition_bias) == 0.0:
            inert.append(("bias_seed", "transition_bias is 0: T is not perturbed"))
        return inert

    # ---------------------------------------------------------------- state
    @property
    def estimates_transition(self) -> bool:
        """Whether T̂ is estimated from a warm-up model (``transition: estimate``)."""
        return self.transition_source == ESTIMATE

    @property
    def base_method_name(self) -> str:
        """``Forward-DualT`` / ``Reweight-DualT`` where T̂ comes from the Dual-T estimator, so
        tables keep them apart from the anchor-point runs."""
        name = type(self).__name__
        dual_t = self.estimates_transition and self.hparams.estimator == "dual_t"
        return f"{name}-DualT" if dual_t else name

    def transition(self) -> Tensor | None:
        """The T this method corrects with; ``None`` while T̂ is not estimated yet."""
        return None if self.in_warmup else self.T

    def noisy_posterior(self, probs: Tensor, index: Tensor | None = None) -> Tensor:
        return apply_transition(probs, self.T)

    def store_transition(self, T: Tensor) -> None:
        """Make ``T`` (row-stochastic) the transition matrix this run corrects with."""
        self.T.copy_(T.to(self.T))

    # ---------------------------------------------------------------- given T
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit" and not self.estimates_transition:
            T = self.biased(self.resolve_transition())
            self.check_given_transition(T)
            self.store_transition(T)

    def check_given_transition(self, T: Tensor) -> None:
        """Refuse a given T (row-stochastic, ``T[i, j] = P(noisy=j | clean=i)``) that the
        method cannot correct with: an all-zero column ``j`` while training labels ``j`` occur
        (their Forward loss is constant, their importance weight unbounded), a singular T (rank
        below C: where rows coincide, ``p @ T`` is the same for different clean classes, so
        Forward's loss ``-log((p @ T)_y)`` cannot tell them apart and reweighting by
        ``p_y / (p @ T)_y`` cannot invert T) or a diagonal entry at or below chance (``1/C``: a
        class kept no more often than a random label; a reweighting weight reaches
        ``1 / T[y, y]``). Every method that corrects with a given T checks it; the message
        names the columns or rows."""
        source = self.transition_source
        what = f"the T file {source}" if isinstance(source, str) else "the true T"
        condition = transition_condition(T)
        facts = self.data_facts()
        name = type(self).__name__
        if condition.zero_columns and facts is not None:
            labels = facts.noisy_labels[facts.train_indices].long()
            counts = torch.bincount(labels, minlength=self.num_classes)
            used = [j for j in condition.zero_columns if int(counts[j]) > 0]
            if used:
                j = used[0]
                columns = f"column {j}" if len(used) == 1 else f"columns {used[:10]}"
                raise InputError(
                    f"{what}: {columns} of T {'is' if len(used) == 1 else 'are'} all zero, so T "
                    f"says no sample is ever labelled {j} (T[i, j] = P(noisy=j | clean=i): rows "
                    f"are clean classes, columns noisy ones), yet {int(counts[j])} training "
                    f"labels are {j}; {name} cannot correct those samples. Fix "
                    "T (a file written column-stochastic, as the VRNL paper writes T, must be "
                    "transposed: noisylabels.noise.from_column_stochastic)"
                )
        row = condition.min_diagonal_row
        if condition.singular:
            raise InputError(
                f"{what} is singular ({condition.describe()}); {name} {self.correction}, and "
                "where rows of T (T[i, j] = P(noisy=j | clean=i)) depend on each other, p @ T "
                "is the same for different clean classes: the correction cannot tell them "
                "apart, and the run learns nothing about them. Fix T, or estimate it: "
                "--model.transition estimate"
            )
        if condition.below_chance:
            raise InputError(
                f"{what} has T[{row}, {row}] = {condition.min_diagonal:.3g}, at or below chance "
                f"(1/C = {1 / self.num_classes:.3g}): T says class {row} keeps its label no "
                f"more often than a random label would, and {name} {self.correction} cannot "
                "correct such a class (a reweighting weight p_y / (p @ T)_y of the samples "
                f"labelled {row} reaches 1/T[{row}, {row}]). Fix T, or estimate it: "
                "--model.transition estimate"
            )

    def resolve_transition(self) -> Tensor:
        """The given T of this run: the data module's true T or the T file."""
        source = self.transition_source
        if source == ESTIMATE:
            raise ValueError("transition: estimate has no given T; it is estimated after warm-up")
        if isinstance(source, str):
            return load_transition(source, self.num_classes)
        facts = self.data_facts()
        if facts is None or facts.transition is None:
            noise = "unknown" if facts is None else facts.noise_type
            raise InputError(
                f"transition: true needs the true T, which noise type {noise!r} does not have; "
                "pass --model.transition estimate, or a path to a T file"
            )
        return facts.transition.detach().float().cpu()

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
        error = self.t_estimation_error(T)
        err = "" if error is None else f": ε_T = {error:.4f}"
        rank_zero_info(f"{type(self).__name__}: {what}{err}")

    # ---------------------------------------------------------------- estimated T
    def on_main_stage_start(self) -> None:
        """The estimation point: T̂ from the warm-up model (then biased, if asked); a
        degenerate T̂ is replaced by the identity under ``fast_dev_run`` and warned about
        otherwise (:meth:`guard_estimate`)."""
        T_hat = self.estimate_transition()
        details = self.estimate_details or {}
        diag = f"mean diag {T_hat.diagonal().mean():.3f}"
        if "anchor_diag" in details:  # Dual-T: T♣'s too, the part it recovers T from
            anchor = details["anchor_diag"]
            diag += f" (T♣: {sum(anchor) / len(anchor):.3f})"
        self._report(
            f"estimated T̂ ({self.hparams.estimator}) at epoch {self.current_epoch}, {diag}", T_hat
        )
        self.store_transition(self.biased(self.guard_estimate(T_hat)))

    def guard_estimate(self, T_hat: Tensor) -> Tensor:
        """``T_hat``, checked once: where it is degenerate (a zero column, rank below C, a
        diagonal entry at or below chance; see :func:`~noisylabels.noise.transition_condition`)
        a ``fast_dev_run``, whose estimate comes from a few batches of a barely trained
        network, goes on with the identity, and a real run warns that the corrected stage may
        diverge."""
        condition = transition_condition(T_hat)
        if not condition.degenerate:
            return T_hat
        trainer = self._trainer
        name = type(self).__name__
        if trainer is not None and trainer.fast_dev_run:
            warn(
                f"fast_dev_run: {name}'s T̂, estimated from a few batches of a barely trained "
                f"network, is degenerate ({condition.describe()}); the smoke test goes on with "
                "T̂ = I (the identity). A real run estimates T̂ after its warm-up epochs."
            )
            return torch.eye(self.num_classes, dtype=T_hat.dtype)
        warn(
            f"{name}: the T̂ estimated at epoch {self.current_epoch} is degenerate "
            f"({condition.describe()}): the corrected stage may diverge or learn little. A "
            "longer warm-up (--model.schedule.warmup_epochs), the other estimator "
            "(--model.estimator) or a known T (--model.transition true or a T file) avoids it."
        )
        return T_hat

    def train_outputs(self) -> tuple[Tensor, Tensor]:
        """Softmax outputs and noisy labels of the training split (see :func:`train_outputs`)."""
        return train_outputs(self)

    def estimate_transition(self) -> Tensor:
        """Estimate T̂ from the current model (anchor points or Dual-T, ``filter_outliers`` at
        ``outlier_quantile``); every process gets process 0's estimate."""
        hp = self.hparams
        return estimate_from_model(self, hp.estimator, hp.filter_outliers, hp.outlier_quantile)


def train_outputs(model: NoisyLabelMethod) -> tuple[Tensor, Tensor]:
    """Softmax outputs (N x C, CPU) of a method's network 0 and the noisy labels of the training
    split, in order and without augmentation, with the model in eval mode. Honours
    ``limit_train_batches``."""
    probs, labels = [], []
    for batch, logits in model.training_split_logits(model.trainer.limit_train_batches):
        probs.append(F.softmax(logits.float(), dim=1).cpu())
        labels.append(batch["label"].cpu())
    return torch.cat(probs), torch.cat(labels)


def estimate_from_model(
    model: NoisyLabelMethod,
    estimator: str = "anchor",
    filter_outliers: bool = True,
    quantile: float = 0.97,
) -> Tensor:
    """T̂ (row-stochastic, ``T̂[i, j] ≈ P(noisy=j | clean=i)``) from a method's current network 0
    over the training split without augmentation: anchor points (Patrini et al. 2017) or
    Dual-T (Yao et al. 2020), the anchors picked below each column's ``quantile`` with
    ``filter_outliers``. Every process gets process 0's estimate. ``model.estimate_details``
    records its diagonal (and, for Dual-T, that of the anchor estimate T♣), which
    ``results.json`` keeps as ``t_estimate``."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    probs, labels = train_outputs(model)
    if estimator == "dual_t":
        T_club, _, T_hat = dual_t_parts(probs, labels, filter_outliers, quantile)
        details = {"anchor_diag": T_club.diagonal().tolist()}
    else:
        T_hat = anchor_transition(probs, filter_outliers, quantile)
        details = {}
    T_hat = model.trainer.strategy.broadcast(T_hat, src=0)
    model.estimate_details = {
        "estimator": estimator,
        "diag": T_hat.diagonal().tolist(),
        **model.trainer.strategy.broadcast(details, src=0),
    }
    val_acc = model.trainer.callback_metrics.get("val/acc")  # the last warm-up validation
    warn_near_chance(T_hat, None if val_acc is None else float(val_acc))
    return T_hat


def near_chance(value: float, num_classes: int) -> bool:
    """Whether an accuracy-like ``value`` (a T̂ diagonal, a noisy-validation accuracy) is within
    :data:`NEAR_CHANCE` of the way from chance (``1/C``) to 1."""
    chance = 1.0 / num_classes
    return value < chance + NEAR_CHANCE * (1.0 - chance)


def warn_near_chance(T_hat: Tensor, warmup_val_acc: float | None = None) -> bool:
    """Warn (and return ``True``) when T̂ (row-stochastic, ``T̂[i, j] ≈ P(noisy=j | clean=i)``)
    comes from a warm-up model near chance: the mean of its diagonal, or the warm-up's
    noisy-validation accuracy, close to ``1/C``. Such a T̂ says nothing about the noise (ε_T
    near or above 1), and a method correcting with it learns little."""
    c = T_hat.shape[0]
    diag = float(T_hat.diagonal().mean())
    if not (
        near_chance(diag, c) or (warmup_val_acc is not None and near_chance(warmup_val_acc, c))
    ):
        return False
    acc = (
        ""
        if warmup_val_acc is None
        else f", warm-up noisy-validation accuracy {warmup_val_acc:.3f}"
    )
    warn(
        f"T̂ was estimated from a warm-up model near chance (mean diagonal of T̂ {diag:.3f}{acc}; "
        f"chance is 1/C = {1.0 / c:.3f}): it does not describe the noise, and the method "
        "corrects with it from now on. Give the warm-up more epochs or a larger learning rate "
        "(--model.schedule.warmup_epochs, --model.optim.lr), or give T (--model.transition "
        "true or a T file)."
    )
    return True
