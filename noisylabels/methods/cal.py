"""CAL, the covariance-assisted loss (Zhu, Liu & Liu, "A Second-Order Approach to Learning with
Instance-Dependent Label Noise", CVPR 2021), on CORES²'s estimates; reference code
UCSC-REAL/CAL @ bdb376b (bdb376bb0300616937c5369f24350617f495c61b), two runs of one script
(README.md:29-55; run_exptPRLD_C10_CAL.py, run_exptPRLD_C100_CAL.py).

Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``; CAL's ``T̂`` is
that of the noisy labels given D̂'s labels.

**Stage 1, the warm-up here: CORES²'s confidence-regularized CE, then D̂.** The reference's
first run (``lossfunc = "crossentropy"``) trains, per sample,

    l_i = -log(p_{y~_i} + 1e-8) - β_t · Σ_j P_j · (-log(p_ij + 1e-5))

(lossfuncs/peerloss.py:21, :29 the CE; :34, :49-52 the regularizer; :164-170 the sum), the
CORES² loss without its sieve, with ``P`` the square root of the noisy labels' class
distribution, renormalized (``warmup_prior: sqrt``; experiments/exptPeerReg.py:103-105; the
distribution itself: datamanage/peerdatasets/DatasetNumerical.py:193-207), times 10 on 100
classes (exptPeerReg.py:107-108; ``prior_scale``), and ``β_t`` rising to 2 on CIFAR-10, 1 on
CIFAR-100 (``warmup_beta``; run_exptPRLD_C10_CAL.py:54-56, run_exptPRLD_C100_CAL.py:54-56).
D̂ is what its epoch 65 records (exptPeerReg.py:219-222): every sample gets a label,

    ŷ_i = y~_i   if  -log(p_{y~_i} + 1e-8) - mean_j(-log(p_ij + 1e-8)) < -8
    ŷ_i = argmax_j z_ij   if that difference is > -8 (neither at exactly -8)

(models/peerreg_CAL.py:105, :110-128, ``is_check_loss_dist`` on by default,
options/baseoption.py:28-29; ``sieve_threshold``), and weight 1 (:125-126). From D̂
(exptPeerReg.py:114-130; datamanage/peerdatasets/CIFAR.py:199-205):
``T̂[i, j] = #(ŷ = i, y~ = j) / max(#(ŷ = i), 1)`` and ``P̂_i = #(ŷ = i) / #D̂``. A sample
``n`` of D̂ takes part in the covariance term where ``T̂[ŷ_n, y~_n] < 1`` (its centred
indicator is positive somewhere: peerloss.py:76-77).

**Stage 2, the method's stage: CAL.** The reference's second run (``crossentropy_CAL``) trains a
new network (``main_stage_init: reinit``) on

    loss = mean_n [-log(p_{y~_n} + 1e-8) - β_t Σ_j P_j (-log(p_nj + 1e-5))]
           - Σ_i P̂_i Σ_j (1 / B_i) Σ_{n: ŷ_n = i} (1{y~_n = j} - T̂[i, j]) (ℓ_nj - ℓ̄[i, j])

with ``ℓ_nj = -log(p_nj + 1e-5)`` (peerloss.py:56, :75-96, :164-168), ``P`` now the noisy
labels' class distribution itself (exptPeerReg.py:100-102; times 10 on 100 classes), ``β_t``
rising to 1 (``beta``; run_exptPRLD_C10_CAL.py:58-60, run_exptPRLD_C100_CAL.py:58-60), ``B_i``
the batch's samples of D̂-class ``i`` taking part (zero counts as 1: peerloss.py:90-91) and
``ℓ̄[i, j]`` the mean of ``ℓ_nj`` over the samples of D̂-class ``i`` in the previous epoch (0 in
the first: exptPeerReg.py:30, :184-187, :208-214): the second-order (covariance) correction of
the paper, ``Cov_D̂(1{Y~ = j} - T_ij, ℓ(f(X), j))`` per class pair, weighted by ``P̂``.

**The per-sample losses VRNL sees.** Sample ``n``'s share of the covariance term is
``s_n · c_n`` with ``c_n = Σ_j (1{y~_n = j} - T̂[ŷ_n, j]) (ℓ_nj - ℓ̄[ŷ_n, j])`` and
``s_n = B · P̂_{ŷ_n} / B_{ŷ_n}`` (``B`` the batch size; 0 for a sample not taking part), so that

    l_n = -log(p_{y~_n} + 1e-8) - β_t Σ_j P_j (-log(p_nj + 1e-5)) - s_n c_n

has the reference's batch loss as its mean. CAL-VRNL is ``mean(l) - alpha · Var(l)`` of these
``l_n`` (the warm-up trains without VRNL, as every warm-up does). The epsilons bound every term
(``CE <= -log 1e-8 ≈ 18.4``, each ``-log(p + 1e-5) <= 11.5``, so ``|c_n| <= 23`` and ``s_n <=
B``), so the objective is bounded below, but its losses spread over tens: with ``alpha > 0``
many weights ``1 + 2 alpha (mean(l) - l_i)`` turn negative (``vrnl_form: bounded`` floors
them).

**β_t and the learning rate.** The reference's ``SegAlpha`` over milestones [10, 40, 80] with
values [0, top, top] (models/schedulers/alpha_scheduler.py:96-127, stepped after every epoch,
experiments/baseexperiment.py:125-128) gives at epoch ``t`` of a stage
``β_t = top · clip((t - 10) / 30, 0, 1)``: ``beta_start`` 10, ``beta_ramp_epochs`` 30, counted
from the start of each stage. Every epoch's learning rate is divided by ``1 + β_t``
(``scale_lr``; models/schedulers/lr_scheduler.py:13-46, models/basemodel.py:298-303,
baseexperiment.py:132-136). Both runs: SGD lr 0.1, momentum 0.9, weight decay 5e-4, batch 128,
lr ÷10 at epoch 60 (``StepLR`` step 60; run_exptPRLD_C10_CAL.py:81-87,
options/baseoption.py:39), 100 epochs (:41), a ResNet-34 (:22; networks/resnet_cifar.py:198-199),
seed 10086 (:6-11), no validation split (:89-90), the best test accuracy kept
(baseexperiment.py:139-142).

**What differs here, and why.**

- The warm-up is 66 epochs (0-65): the reference's first run trains 100, but CAL reads only its
  epoch 65's D̂; its last 34 epochs change nothing CAL uses.
- D̂ comes from one pass over the training split at the estimation point, in eval mode without
  augmentation, on the model ``warmup_model`` names (the last warm-up epoch's by default); the
  reference records it during epoch 65's training steps (train mode, augmented, the model
  moving over the epoch). A pass is what every estimation point of the project runs on, the same
  on every DDP process (:func:`~noisylabels.methods.core.evaluation.training_pass`).
- ``ℓ̄[i, j]`` is divided by the samples of class ``i`` the epoch trained on, where the reference
  divides by the class's size in D̂ (exptPeerReg.py:187): the same where an epoch sees every
  sample once.
- The CAL stage's network is newly initialised; the reference's second run, seeded as the
  first, starts from the first run's initial weights.
- ``T̂``'s row of a class D̂ does not hold is the identity's (the reference's is 0): no sample
  reads it, and ``T̂`` is then row-stochastic (the run's T̂, written and compared with the true
  T as every method's).
- 10 % of the noisy training set is held out for validation and the best noisy-validation epoch
  is selected; the validation loss is the regularized CE without the covariance term (D̂ holds
  the training split only).
- Backbone, normalisation and augmentation are the data group's (CIFAR-100's reference also
  rotates by up to 15°, exptPeerReg.py:249-257), the noise the data module's (the reference
  trains on its instance-dependent label files, run_exptPRLD_C10_CAL.py:47).

**State and DDP.** D̂'s label of every sample (by dataset index; -1 outside D̂) is in the state
dict (so in every checkpoint), not a buffer (which DDP would broadcast before every step);
``T̂``, ``P̂`` and ``ℓ̄`` are buffers, the same on every process. Under DDP with the global
variance scope the counts ``B`` and ``B_i`` are the global batch's (one all-reduce of ``C + 1``
numbers a step), and the sums behind ``ℓ̄`` are summed over the processes at the end of every
epoch, so a step and ``ℓ̄`` are those of one process with the global batch.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.evaluation import training_pass
from noisylabels.methods.core.stages import StageSchedule

CE_EPS = 1e-8
"""Added to the softmax inside the cross-entropy and the sieve's losses (peerloss.py:21,
peerreg_CAL.py:111)."""
CR_EPS = 1e-5
"""Added to the softmax inside the confidence regularizer and the covariance term's losses
(peerloss.py:34, :56)."""
WARMUP_PRIORS = ("sqrt", "noisy")
SCALE_KEY = "cal_scale"
"""The batch key of ``s_n`` (0 for a sample outside the covariance term) in a training step."""
CLASS_KEY = "cal_class"
"""The batch key of D̂'s label of each sample (0 where ``s_n`` is 0) in a training step."""
STATE_KEY = "distilled_labels"
"""The state-dict key of D̂'s labels."""


def beta_at(t: int, start: int, ramp: int, top: float) -> float:
    """``β_t = top · clip((t - start) / ramp, 0, 1)`` at epoch ``t`` of a stage (``ramp`` 0: a
    step to ``top`` at ``start``): the reference's ``SegAlpha`` over [start, start + ramp]."""
    if t < start or top == 0.0:
        return 0.0
    return top if ramp <= 0 else top * min((t - start) / ramp, 1.0)


def regularized_ce(logits: Tensor, labels: Tensor, prior: Tensor, beta: Tensor) -> Tensor:
    """``-log(p_y + 1e-8) - β Σ_j P_j (-log(p_j + 1e-5))`` per sample, float32."""
    probs = F.softmax(logits.float(), dim=1)
    ce = -torch.log(probs.gather(1, labels.unsqueeze(1)).squeeze(1) + CE_EPS)
    return ce - beta * (prior * -torch.log(probs + CR_EPS)).sum(1)


def class_losses(logits: Tensor) -> Tensor:
    """``ℓ_nj = -log(p_nj + 1e-5)``, the loss of every sample against every class, ``(B, C)``."""
    return -torch.log(F.softmax(logits.float(), dim=1) + CR_EPS)


def covariance_term(
    logits: Tensor, labels: Tensor, classes: Tensor, T: Tensor, means: Tensor
) -> Tensor:
    """``c_n = Σ_j (1{y~_n = j} - T̂[ŷ_n, j]) (ℓ_nj - ℓ̄[ŷ_n, j])`` per sample (``classes``:
    ``ŷ_n``; ``T``: ``T̂``; ``means``: ``ℓ̄``)."""
    centred = F.one_hot(labels, T.shape[0]).float() - T[classes]
    return (centred * (class_losses(logits) - means[classes])).sum(1)


def distill(logits: Tensor, labels: Tensor, threshold: float) -> Tensor:
    """D̂'s label of each sample: the noisy label where ``-log(p_y + 1e-8) - mean_j(-log(p_j +
    1e-8))`` is below ``threshold``, the argmax prediction where it is above, -1 at exactly
    ``threshold`` (the reference's two strict comparisons), ``(B,)`` long."""
    losses = -torch.log(F.softmax(logits.float(), dim=1) + CE_EPS)
    gap = losses.gather(1, labels.unsqueeze(1)).squeeze(1) - losses.mean(1)
    predicted = logits.argmax(1)
    none = torch.full_like(labels, -1)
    return torch.where(gap < threshold, labels, torch.where(gap > threshold, predicted, none))


class CAL(NoisyLabelMethod):
    """CAL: CORES²'s confidence-regularized CE minus the covariance of the noisy labels' centred
    indicators with the per-class losses over D̂, CORES²'s relabelled set (Zhu, Liu & Liu 2021).

    Args:
        beta: the largest ``β_t`` of the CAL stage's regularizer (reference: 1).
        warmup_beta: the largest ``β_t`` of the warm-up's (the CORES² stage D̂ comes from;
            reference: 2 on CIFAR-10, 1 on CIFAR-100); 0: a warm-up of plain CE.
        beta_start: epochs of each stage with ``β_t = 0`` (reference: 10).
        beta_ramp_epochs: epochs after ``beta_start`` over which ``β_t`` rises linearly to
            its largest value (reference: 30; 0: at once).
        warmup_prior: the warm-up regularizer's class prior: ``sqrt`` (the square root of the
            noisy labels' class distribution, renormalized: the reference's) or ``noisy`` (the
            distribution itself, as the CAL stage's).
        prior_scale: both priors' factor (reference: 10 on 100 classes, 1 otherwise).
        sieve_threshold: D̂ keeps a noisy label where its loss is this far below the sample's
            mean loss over the classes, else takes the prediction (reference: -8).
        scale_lr: divide every epoch's learning rate by ``1 + β_t`` (reference).
        schedule: the stages (:class:`~noisylabels.methods.core.stages.StageSchedule`), by
            default the reference's: a 66-epoch warm-up (D̂ from its last epoch), then 100
            epochs of CAL from a newly initialised network, lr ÷10 at 60.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self,
        beta: float = 1.0,
        warmup_beta: float = 2.0,
        beta_start: int = 10,
        beta_ramp_epochs: int = 30,
        warmup_prior: str = "sqrt",
        prior_scale: float = 1.0,
        sieve_threshold: float = -8.0,
        scale_lr: bool = True,
        schedule: StageSchedule = StageSchedule(
            warmup_epochs=66, main_stage_init="reinit", main_epochs=100, milestones=(60,)
        ),
        **kwargs: Any,
    ) -> None:
        super().__init__(schedule=schedule, **kwargs)
        for name, value in (("beta", beta), ("warmup_beta", warmup_beta)):
            if not (math.isfinite(float(value)) and float(value) >= 0):
                raise InputError(
                    f"--model.{name} must be a finite number >= 0 (the confidence "
                    f"regularizer's largest weight), got {value}"
                )
        for name, value in (("beta_start", beta_start), ("beta_ramp_epochs", beta_ramp_epochs)):
            if int(value) != value or int(value) < 0:
                raise InputError(
                    f"--model.{name} must be a whole number of epochs >= 0, got {value}"
                )
        if warmup_prior not in WARMUP_PRIORS:
            raise InputError(
                f"--model.warmup_prior must be one of {WARMUP_PRIORS}, got {warmup_prior!r}"
            )
        if not (math.isfinite(float(prior_scale)) and float(prior_scale) > 0):
            raise InputError(
                f"--model.prior_scale must be a finite number > 0 (the priors' factor), got "
                f"{prior_scale}"
            )
        if not math.isfinite(float(sieve_threshold)):
            raise InputError(
                f"--model.sieve_threshold must be a finite number (the reference's: -8), got "
                f"{sieve_threshold}"
            )
        self.schedule.require_warmup(
            "CAL's D̂ (its labels, T̂ and class prior)", " (the reference: 66, its epochs 0-65)"
        )
        c = self.num_classes
        self.register_buffer("T", torch.zeros(c, c))  # T̂ of D̂, set at the estimation point
        self.register_buffer("distilled_prior", torch.zeros(c))  # P̂
        self.register_buffer("loss_means", torch.zeros(c, c))  # ℓ̄ of the previous epoch
        # the regularizers' priors, from the data at setup (the same on every process)
        self.register_buffer("prior", torch.full((c,), 1.0 / c), persistent=False)
        self.register_buffer("warmup_class_prior", torch.full((c,), 1.0 / c), persistent=False)
        self.register_buffer("beta_now", torch.tensor(0.0), persistent=False)
        # D̂'s label of every sample of the training set by dataset index (-1: not in D̂), in
        # the state dict by the hooks below, not a buffer (DDP would broadcast it every step)
        self.distilled = torch.empty(0, dtype=torch.long)
        # this epoch's sums of ℓ_nj per (ŷ_n, j) and counts per ŷ_n, summed over the processes
        # at its end: not buffers, which DDP would overwrite with process 0's
        self.loss_sums = torch.zeros(c, c)
        self.loss_counts = torch.zeros(c)
        save_hook = getattr(self, "register_state_dict_post_hook", None)
        (save_hook or self._register_state_dict_hook)(_save_distilled)
        self.register_load_state_dict_pre_hook(_load_distilled)

    # ---------------------------------------------------------------- β_t and the rate
    def beta_of(self, t: int, warmup: bool) -> float:
        """``β_t`` at epoch ``t`` of the warm-up (``warmup``) or of the CAL stage."""
        hp = self.hparams
        top = float(hp.warmup_beta if warmup else hp.beta)
        return beta_at(t, int(hp.beta_start), int(hp.beta_ramp_epochs), top)

    def current_beta(self) -> float:
        """``β_t`` of the current epoch, of the stage the run is in."""
        if self.in_warmup:
            return self.beta_of(self.current_epoch, True)
        return self.beta_of(self.current_epoch - self.warmup_length(), False)

    def lr_factor(self, epoch: int) -> float:
        """``1 / (1 + β_t)`` at (absolute) ``epoch`` with ``scale_lr``."""
        if not self.hparams.scale_lr:
            return 1.0
        warm = self.warmup_length()
        beta = self.beta_of(epoch, True) if epoch < warm else self.beta_of(epoch - warm, False)
        return 1.0 / (1.0 + beta)

    def val_loss_changes(self) -> str | None:
        """``β_t`` weights the regularizer by the epoch."""
        hp = self.hparams
        start, ramp = int(hp.beta_start), int(hp.beta_ramp_epochs)
        main = range(int(self.schedule.main_epochs))
        if len({beta_at(t, start, ramp, float(hp.beta)) for t in main}) > 1:
            return (
                "its loss subtracts β_t times the prior-weighted cross-entropy, and β_t changes "
                "over the epochs (--model.beta_start, --model.beta_ramp_epochs)"
            )
        return None

    def inert_options(self) -> list[tuple[str, str]]:
        """The regularizer's options where ``β_t`` is 0 in every epoch of both stages (both
        largest values 0, or ``beta_start`` past both stages' ends); the warm-up's own where
        it is 0 in every warm-up epoch, the CAL stage's ``beta`` where it is in every epoch of
        that stage."""
        inert = super().inert_options()
        hp = self.hparams
        start = int(hp.beta_start)
        warm, main = int(self.schedule.warmup_epochs), int(self.schedule.main_epochs)
        warm_top, top = float(hp.warmup_beta), float(hp.beta)
        warm_acts = any(self.beta_of(t, True) > 0 for t in range(warm))
        main_acts = any(self.beta_of(t, False) > 0 for t in range(main))
        plan = ("beta_start", "beta_ramp_epochs", "scale_lr", "prior_scale", "warmup_prior")
        if not warm_acts and not main_acts:
            if warm_top == 0 and top == 0:
                off = "beta and warmup_beta are 0: there is no confidence regularizer"
                return inert + [(name, off) for name in plan]
            off = (
                f"β_t is 0 in every epoch of both stages ({warm} warm-up and {main} CAL epochs; "
                f"0 for the first beta_start = {start} of each, then rising from 0), so the "
                "confidence regularizer never acts; --model.beta 0 --model.warmup_beta 0 train "
                "without it"
            )
            return inert + [(name, off) for name in ("beta", "warmup_beta", *plan)]
        if not warm_acts:
            if warm_top == 0:
                inert.append(("warmup_prior", "warmup_beta is 0: the warm-up has no regularizer"))
            else:
                off = (
                    f"β_t is 0 in every one of the warm-up's {warm} epochs (0 for the first "
                    f"beta_start = {start}, then rising from 0), so its regularizer never acts"
                )
                inert += [("warmup_beta", off), ("warmup_prior", off)]
        if not main_acts and top > 0:
            off = (
                f"β_t is 0 in every one of the CAL stage's {main} epochs (0 for the first "
                f"beta_start = {start}, then rising from 0), so its regularizer never acts"
            )
            inert.append(("beta", off))
        return inert

    # ---------------------------------------------------------------- the priors
    def setup(self, stage: str) -> None:
        super().setup(stage)
        facts = self.data_facts()
        if stage != "fit" or facts is None:
            return
        labels = facts.noisy_labels[facts.train_indices].long().cpu()
        labels = labels[labels >= 0]
        counts = torch.bincount(labels, minlength=self.num_classes).float()
        noisy = counts / counts.sum().clamp_min(1.0)
        root = noisy.sqrt()
        warm = root / root.sum().clamp_min(1e-12) if self.hparams.warmup_prior == "sqrt" else noisy
        scale = float(self.hparams.prior_scale)
        self.prior.copy_(noisy * scale)
        self.warmup_class_prior.copy_(warm * scale)

    # ---------------------------------------------------------------- D̂
    def store_distillation(
        self, distilled: Tensor, noisy_labels: Tensor, clean_labels: Tensor | None = None
    ) -> dict[str, Any]:
        """Set D̂ from the label ``distilled[n]`` of every sample (``-1``: not in D̂) and the
        noisy labels (both by dataset index): ``T̂[i, j] = #(ŷ = i, y~ = j) / #(ŷ = i)``
        (row-stochastic; the identity's row for a class D̂ does not hold, which no sample
        reads), ``P̂_i = #(ŷ = i) / #D̂``, and ``ℓ̄ = 0``. Returns what it found
        (``estimate_details``): T̂'s diagonal, the size of D̂, the fraction keeping its noisy
        label and, where the clean labels are known, the fraction equal to them."""
        distilled = distilled.long().cpu()
        noisy = noisy_labels.long().cpu()
        inside = (distilled >= 0) & (noisy >= 0)
        distilled = torch.where(inside, distilled, -1)
        c = self.num_classes
        pairs = distilled[inside] * c + noisy[inside]
        counts = torch.bincount(pairs, minlength=c * c).float().view(c, c)
        rows = counts.sum(1)
        T = counts / rows.clamp_min(1.0)[:, None]
        # a class D̂ never holds: its row is never read (no sample has it); the identity's
        # keeps T̂ row-stochastic (the reference's stays 0)
        T[rows == 0] = torch.eye(c)[rows == 0]
        self.T.copy_(T)
        self.distilled_prior.copy_(rows / rows.sum().clamp_min(1.0))
        self.loss_means.zero_()
        self.distilled = distilled.to(self.T.device)
        size = int(inside.sum())
        details: dict[str, Any] = {
            "estimator": "cal_sieve",
            "diag": self.T.diagonal().tolist(),
            "distilled": size,
            "kept_noisy": float((distilled[inside] == noisy[inside]).float().mean())
            if size
            else None,
            "distilled_accuracy": None,
        }
        if clean_labels is not None:
            clean = clean_labels.long().cpu()
            known = inside & (clean >= 0)
            if bool(known.any()):
                details["distilled_accuracy"] = float(
                    (distilled[known] == clean[known]).float().mean()
                )
        return details

    def on_main_stage_start(self) -> None:
        """D̂ from one pass of the warm-up model over the training split (the same on every
        process), then T̂ and P̂ from it."""
        facts = self.data_facts()
        if facts is None:
            raise InputError("CAL needs a noisylabels data module (one with data_facts) for D̂")
        threshold = float(self.hparams.sieve_threshold)
        result = training_pass(
            self, facts, lambda logits, batch: distill(logits, batch["label"], threshold)
        )
        distilled = torch.nan_to_num(result.values[0], nan=-1.0).long()
        self.estimate_details = self.store_distillation(
            distilled, facts.noisy_labels, facts.clean_labels
        )
        self.beta_now.fill_(self.beta_of(0, False))
        self.loss_sums.zero_()
        self.loss_counts.zero_()
        details = self.estimate_details
        if not details["distilled"]:
            raise InputError(
                "CAL's pass over the training split gave D̂ no sample (no readable image with a "
                "noisy label): there is nothing to estimate T̂ from"
            )
        accuracy = details["distilled_accuracy"]
        found = "" if accuracy is None else f"; {accuracy:.3f} of its labels are the clean ones"
        error = self.t_estimation_error(self.T)
        err = "" if error is None else f", ε_T = {error:.4f}"
        rank_zero_info(
            f"CAL: D̂ of {details['distilled']} samples at epoch {self.current_epoch} "
            f"({details['kept_noisy']:.3f} keep their noisy label{found}); T̂ mean diag "
            f"{self.T.diagonal().mean():.3f}{err}"
        )

    def transition(self) -> Tensor | None:
        """``T̂`` of D̂ (row-stochastic), once D̂ is made."""
        return None if self.in_warmup or len(self.distilled) == 0 else self.T

    # ---------------------------------------------------------------- the losses
    def stage_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The warm-up's regularized CE (its own prior and ``β_t``), then CAL's."""
        if self.in_warmup:
            return regularized_ce(logits, batch["label"], self.warmup_class_prior, self.beta_now)
        return self.per_sample_loss(logits, batch)

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """``l_n``: the regularized CE minus ``s_n c_n``, the sample's share of the covariance
        term, where the batch holds ``s_n`` (a training step); the regularized CE alone where
        it does not (validation: D̂ holds no validation sample)."""
        labels = batch["label"]
        loss = regularized_ce(logits, labels, self.prior, self.beta_now)
        scale = batch.get(SCALE_KEY)
        if scale is None:
            return loss
        cov = covariance_term(logits, labels, batch[CLASS_KEY], self.T, self.loss_means)
        return loss - scale * cov

    def covariance_inputs(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """``ŷ_n`` and ``s_n = B · P̂_{ŷ_n} / B_{ŷ_n}`` of the batch's samples (``s_n`` 0 for a
        sample outside the covariance term: not in D̂, or ``T̂[ŷ_n, y~_n] = 1``), with ``B`` and
        ``B_i`` counted over the global batch under DDP with the global variance scope."""
        index, labels = batch["index"], batch["label"]
        if self.distilled.device != index.device:
            self.distilled = self.distilled.to(index.device)
        if len(self.distilled) == 0:  # no D̂ (a state without one): no covariance term
            classes = torch.full_like(labels, -1)
        else:
            classes = self.distilled[index]
        present = classes >= 0
        classes = classes.clamp_min(0)
        kept = self.T[classes].gather(1, labels.unsqueeze(1)).squeeze(1)
        used = present & (1.0 - kept > 0)
        c = self.num_classes
        counts = torch.zeros(c + 1, device=labels.device)
        counts.index_add_(0, classes, used.float())
        counts[c] = float(len(labels))
        size, _ = self.batch_world()
        if size > 1:
            dist.all_reduce(counts, op=dist.ReduceOp.SUM)
        scale = counts[c] * self.distilled_prior[classes] / counts[classes].clamp_min(1.0)
        return {SCALE_KEY: torch.where(used, scale, 0.0), CLASS_KEY: classes}

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The VRNL objective of the CAL losses ``l_n`` (the warm-up's regularized CE, without
        VRNL, in the warm-up); the step's ``ℓ_nj`` are summed per D̂-class for ``ℓ̄``."""
        if self.in_warmup:
            return super().training_objective(batch)
        logits = self(batch["image"])
        inputs = self.covariance_inputs(batch)
        losses = self.stage_loss_fn(logits, {**batch, **inputs})
        with torch.no_grad():
            used = (inputs[SCALE_KEY] > 0).float()
            classes = inputs[CLASS_KEY]
            if self.loss_sums.device != logits.device:
                self.loss_sums = self.loss_sums.to(logits.device)
                self.loss_counts = self.loss_counts.to(logits.device)
            self.loss_sums.index_add_(0, classes, class_losses(logits.detach()) * used[:, None])
            self.loss_counts.index_add_(0, classes, used)
        return self.vrnl(losses, logits, batch)

    # ---------------------------------------------------------------- epochs
    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()  # the stage change (and D̂) first
        self.beta_now.fill_(self.current_beta())
        self.loss_sums = torch.zeros_like(self.loss_sums, device=self.device)
        self.loss_counts = torch.zeros_like(self.loss_counts, device=self.device)

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        if self.in_warmup:
            return
        strategy = self.trainer.strategy
        sums = strategy.reduce(self.loss_sums, reduce_op="sum")
        counts = strategy.reduce(self.loss_counts, reduce_op="sum")
        self.loss_means.copy_(sums / counts.clamp_min(1.0)[:, None])
        self.log("train/cal_beta", float(self.beta_now))


def _save_distilled(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``state_dict`` hook: D̂'s labels into the state dict."""
    state_dict[prefix + STATE_KEY] = module.distilled.detach().cpu().clone()


def _load_distilled(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: D̂'s labels out of the state dict."""
    saved = state_dict.pop(prefix + STATE_KEY, None)
    if saved is not None:
        module.distilled = saved.long().to(module.T.device)
