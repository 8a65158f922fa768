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

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.distributed import gather_updates
from noisylabels.methods.core.losses import cross_entropy
from noisylabels.methods.mixup import beta_draw, draw_partners, pool_rows

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
        # index, and one scratch row last that padded DDP rows are written to (one table per
        # network where :attr:`target_tables` says so)
        self.targets = torch.zeros(*self.target_tables, 1, self.num_classes)
        save_hook = getattr(self, "register_state_dict_post_hook", None)
        (save_hook or self._register_state_dict_hook)(_save_targets)
        self.register_load_state_dict_pre_hook(_load_targets)

    # ---------------------------------------------------------------- the target table
    target_tables: tuple[int, ...] = ()
    """The leading shape of the target table: ``()`` one table, ``(K,)`` one per network."""

    def init_targets(self, num_samples: int) -> None:
        """A zero target for each of ``num_samples`` samples (the reference's start)."""
        shape = (*self.target_tables, num_samples + 1, self.num_classes)
        self.targets = torch.zeros(shape, device=self.device)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        facts = self.data_facts()
        if stage == "fit" and facts is not None and self.targets.shape[-2] != facts.num_samples + 1:
            self.init_targets(facts.num_samples)  # a checkpoint's table replaces it on resume

    def update_targets(self, index: Tensor, probs: Tensor, network: int | None = None) -> Tensor:
        """``t_i <- beta · t_i + (1 - beta) · p_i / sum(p_i)`` for the samples ``index`` of this
        process (``probs``: their detached predictions) in the table of ``network`` (the one
        table: ``None``); every process writes every process's new rows. Returns this process's
        new targets."""
        if self.targets.device != probs.device:
            self.targets = self.targets.to(probs.device)
        table = self.targets if network is None else self.targets[network]
        beta = float(self.hparams.beta)
        new = beta * table[index] + (1.0 - beta) * probs / probs.sum(1, keepdim=True)
        facts = self.data_facts()
        indices, rows = gather_updates(index, new, None if facts is None else facts.batch_size)
        scratch = len(table) - 1  # padding (index -1) goes to the scratch row
        table.index_copy_(0, torch.where(indices >= 0, indices, scratch), rows)
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
    state_dict[prefix + STATE_KEY] = module.targets[..., :-1, :].detach().cpu().clone()


def _load_targets(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: the target table out of the state dict."""
    saved = state_dict.pop(prefix + STATE_KEY, None)
    if saved is not None:
        device = next(module.parameters()).device
        scratch = torch.zeros(*saved.shape[:-2], 1, saved.shape[-1], dtype=torch.float32)
        module.targets = torch.cat([saved.float(), scratch], dim=-2).to(device)


SOFT_LABEL_KEY = "elr_plus_soft_label"
"""The batch key of ELR+'s mixed one-hot labels ``λ ỹ_i + (1 - λ) ỹ_π(i)``."""
RAMP_KEY = "elr_plus_ramp"
"""The batch key of the regularizer's ramp-up factor at this step (a float32 device scalar)."""


def sigmoid_rampup(step: float, length: float) -> float:
    """``exp(-5 (1 - clip(step / length, 0, 1))²)``; 1 for ``length`` 0 (the reference's
    ``utils/util.py:45-52``)."""
    if length == 0:
        return 1.0
    phase = 1.0 - min(max(float(step), 0.0), float(length)) / float(length)
    return math.exp(-5.0 * phase * phase)


class ELRPlus(ELR):
    """ELR+: two networks, each trained on mixup of its batch with ELR's regularizer, whose
    targets come from the *other* network's weight average (Liu et al. 2020).

    Liu, Niles-Weed, Razavian & Fernandez-Granda, "Early-Learning Regularization Prevents
    Memorization of Noisy Labels", NeurIPS 2020, §4 and Appendix; reference code
    shengliu66/ELR@934af53, ``ELR_plus/``. No transition matrix is estimated or used.

    Each network ``k`` (with its own SGD) keeps a weight average ``θ̄_k`` (EMA; not trained),
    and a target table ``t^k`` over the training set. At every step of the method's stage, for
    ``k`` in 0, 1, on the batch ``x`` with one-hot noisy labels ``y`` (``trainer/trainer.py:
    96-120``):

    - the other network's average in training mode scores the unmixed batch, and
      ``t^k_i <- β t^k_i + (1 - β) softmax(f_θ̄_{1-k}(x_i))`` (``model/loss.py:38-40``);
    - mixup: ``λ ~ Beta(a, a)``, ``λ' = max(λ, 1 - λ)``, a permutation ``π`` of the batch,
      ``x̃ = λ' x + (1 - λ') x_π``, ``ỹ = λ' y + (1 - λ') y_π`` and ``q = λ' t^k + (1 - λ') t^k_π``
      (``trainer.py:344-356``, ``loss.py:41``);
    - with ``label_times_target`` the label becomes ``ỹ ⊙ q / Σ(ỹ ⊙ q)`` (by default where the
      data has 100 classes, the reference's rule, ``loss.py:28-30``);
    - ``l_i = -Σ_c ỹ_ic log softmax(f_θ_k(x̃_i))_c + r(s) · λ · log(1 - <q_i, p_i>)``, ``p_i``
      the softmax clamped to ``[clamp, 1 - clamp]``, ``r(s)`` :func:`sigmoid_rampup` of the
      step ``s`` over ``coef_rampup_steps`` (``loss.py:23-36``);
    - after the optimizer step, ``θ̄_k <- a θ̄_k + (1 - a) θ_k`` over the parameters, ``a =
      r(s + 1; ema_rampup_steps) · ema_decay``, or ``min(1 - 1 / (s + 1), ema_decay)`` with
      ``ema_rampup_steps: null`` (``trainer.py:321-331``).

    The reference's batch mean of ``l_i`` is its loss; with ``alpha != 0`` (ELR+-VRNL) the
    objective is ``mean(l) - alpha · Var(l)`` per network. A warm-up (none in the reference's
    presets) trains each network by plain cross-entropy on unmixed images and updates its
    targets from its own predictions (``trainer.py:260-279``). Validation, test and prediction
    use the two networks' averaged logits (``trainer.py:182-185``); the validation loss is their
    cross-entropy.

    Differences from the reference (docs/methods.md): both networks step on every batch against
    the other's average as it was at the batch's start (the reference on one GPU trains network
    1 for an epoch, then network 2, each with a data loader of its own); the step ``s`` counts
    the run's batches from its first (the reference's from its stage's first: equal without a
    warm-up). The averages start as networks of their own initialization, as the reference's.

    Under DDP with the global variance scope the permutation runs over the global batch (each
    process mixes with partners from every process's images, labels and targets, gathered
    without gradient) and every process writes every process's target rows, so a step is the
    step of one process with the global batch. ``λ`` and ``π`` are drawn from a generator of the
    run's seed, the step and the network, so a resumed run draws the same.

    Args:
        beta: the targets' momentum β (reference: 0.7 CIFAR-10 symmetric and Clothing1M, 0.9
            CIFAR-10 asymmetric and CIFAR-100).
        lam: the regularizer's weight λ (reference: 3 CIFAR-10 symmetric and Clothing1M, 1
            CIFAR-10 asymmetric, 7 CIFAR-100).
        clamp: ``p`` clamped to ``[clamp, 1 - clamp]`` in the regularizer (reference: 1e-4).
        mixup_alpha: ``a`` of ``Beta(a, a)`` (reference: 1); ``<= 0``: no mixing. Not VRNL's
            ``alpha``.
        ema_decay: the averages' decay (reference: 0.997 CIFAR, 0.9999 Clothing1M).
        ema_rampup_steps: steps over which the decay ramps up by :func:`sigmoid_rampup`
            (reference: 40000 CIFAR); ``None``: ``min(1 - 1 / (s + 1), ema_decay)``, the true
            average while it is the closer (reference: Clothing1M).
        coef_rampup_steps: steps over which the regularizer ramps up (reference: 0 CIFAR-10
            and Clothing1M, 40000 CIFAR-100).
        label_times_target: train on ``ỹ ⊙ q`` renormalized instead of ``ỹ``; ``None``: the
            reference's rule, where the data has 100 classes (``loss.py:28-30``).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    ensemble_prediction = True  # the test, predict and the tail score the averaged logits
    target_tables = (2,)  # one table per network

    def __init__(
        self,
        beta: float = 0.7,
        lam: float = 3.0,
        clamp: float = 1e-4,
        mixup_alpha: float = 1.0,
        ema_decay: float = 0.997,
        ema_rampup_steps: int | None = 40000,
        coef_rampup_steps: int = 0,
        label_times_target: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(beta=beta, lam=lam, clamp=clamp, **kwargs)
        if not math.isfinite(float(mixup_alpha)):
            raise InputError(
                f"--model.mixup_alpha must be a finite number (> 0: Beta(a, a); <= 0: no "
                f"mixing), got {mixup_alpha}"
            )
        if not 0.0 <= float(ema_decay) < 1.0:
            raise InputError(f"--model.ema_decay must be in [0, 1), got {ema_decay}")
        for name, value in (
            ("ema_rampup_steps", ema_rampup_steps),
            ("coef_rampup_steps", coef_rampup_steps),
        ):
            if value is not None and (isinstance(value, bool) or int(value) != value or value < 0):
                raise InputError(f"--model.{name} must be a whole number >= 0, got {value}")
        if coef_rampup_steps is None:
            raise InputError("--model.coef_rampup_steps must be a whole number >= 0, got null")
        if label_times_target is None:
            label_times_target = self.num_classes == 100
        self.label_times_target = bool(label_times_target)
        self.add_network()
        averages = [self.build_network() for _ in range(2)]
        for net in averages:
            net.requires_grad_(False)
        self.averages = nn.ModuleList(averages)

    def resolved_defaults(self) -> dict[str, Any]:
        """What ``label_times_target`` given null resolves to, the reference's rule (100
        classes), whatever this module was given: the run's identity records it
        (:func:`noisylabels.run.identity.of_objects`)."""
        return {"label_times_target": self.num_classes == 100}

    def inert_options(self) -> list[tuple[str, str]]:
        """The decay's ramp where the decay is 0, the regularizer's options where its weight
        is 0."""
        inert = super().inert_options()
        hp = self.hparams
        if float(hp.ema_decay) == 0.0:
            inert.append(("ema_rampup_steps", "ema_decay is 0: the averages copy the networks"))
        if float(hp.lam) == 0.0:
            reason = "lam is 0: there is no regularizer to ramp up or clamp"
            inert += [("coef_rampup_steps", reason), ("clamp", reason)]
        return inert

    # ---------------------------------------------------------------- the schedule
    def step_number(self) -> int:
        """``s``: the 1-based number of this training batch in the run."""
        return int(self.global_step) + 1

    def ema_factor(self, step: int) -> float:
        """The averages' decay ``a`` after step ``step``."""
        decay = float(self.hparams.ema_decay)
        ramp = self.hparams.ema_rampup_steps
        if ramp is None:
            return min(1.0 - 1.0 / (step + 1), decay)
        return sigmoid_rampup(step + 1, int(ramp)) * decay

    @torch.no_grad()
    def update_averages(self, step: int) -> None:
        """``θ̄_k <- a θ̄_k + (1 - a) θ_k`` over every network's parameters (not its buffers)."""
        a = self.ema_factor(step)
        for average, net in zip(self.averages, self.networks, strict=True):
            targets = list(average.parameters())
            sources = [p.detach() for p in net.parameters()]
            torch._foreach_mul_(targets, a)
            torch._foreach_add_(targets, sources, alpha=1.0 - a)

    # ---------------------------------------------------------------- the objective
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """``-Σ ỹ log softmax(z) + r λ log(1 - <q, p>)`` of a mixed training batch; plain CE
        of any other (validation)."""
        soft = batch.get(SOFT_LABEL_KEY)
        if soft is None:
            return cross_entropy(logits, batch["label"])
        q = batch[TARGET_KEY]
        if self.label_times_target:
            soft = soft * q  # a row that underflows to 0 stays 0 (the reference's 0/0 is nan)
            soft = soft / soft.sum(1, keepdim=True).clamp_min(torch.finfo(soft.dtype).tiny)
        ce = -(soft * F.log_softmax(logits.float(), dim=1)).sum(1)
        inner = (q * self.clamped_probs(logits)).sum(1)
        return ce + batch[RAMP_KEY] * self.hparams.lam * torch.log(1.0 - inner)

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """Both networks' objectives, summed (they share no parameter): in a warm-up plain CE
        with each network's targets following its own predictions, then the mixed ELR losses
        against targets from the other network's average."""
        images, index = batch["image"], batch["index"]
        if self.in_warmup:
            objectives = []
            for k in range(2):
                logits = self.network_logits(images, k)
                with torch.no_grad():
                    self.update_targets(index, F.softmax(logits.detach().float(), 1), k)
                losses = self.stage_loss_fn(logits, batch)
                objectives.append(self.vrnl(losses, logits, batch, network=k))
            return torch.stack(objectives).sum()
        with torch.no_grad():  # both averages as they were at the batch's start
            new = []
            for k in range(2):
                scores = self.averages[1 - k](self.network_input(images)).float()
                new.append(self.update_targets(index, F.softmax(scores, 1), k))
        step = self.step_number()
        ramp = sigmoid_rampup(step, int(self.hparams.coef_rampup_steps))
        ramp_t = torch.tensor(ramp, dtype=torch.float32).to(images.device, non_blocking=True)
        onehot = F.one_hot(batch["label"], self.num_classes).float()
        # the step's (global) batch of images and labels, pooled once for both networks' mixup
        pools = []
        if float(self.hparams.mixup_alpha) > 0:
            capacity, size = self.batch_capacity(len(images)), self.batch_world()[0]
            pools = [pool_rows(rows, capacity, size) for rows in (images, onehot)]
        return torch.stack(
            [self.mixed_objective(batch, onehot, new[k], pools, ramp_t, k) for k in range(2)]
        ).sum()

    def mixed_objective(
        self,
        batch: dict[str, Tensor],
        onehot: Tensor,
        targets: Tensor,
        pools: list[Tensor],
        ramp: Tensor,
        k: int,
    ) -> Tensor:
        """Network ``k``'s VRNL objective of the mixed batch (class docstring); ``pools``:
        the step's pooled images and one-hot labels."""
        images = batch["image"]
        rows = {"image": images, SOFT_LABEL_KEY: onehot, TARGET_KEY: targets}
        mixed_batch = {**batch, **rows, RAMP_KEY: ramp}
        a = float(self.hparams.mixup_alpha)
        if a > 0:
            n, capacity = len(images), self.batch_capacity(len(images))
            seed = ((torch.initial_seed() * 1_000_003 + self.global_step) * 2 + k) % 2**63
            gen = torch.Generator().manual_seed(seed)
            partners = draw_partners(n, capacity, self.batch_world(), gen, images.device)
            lam = beta_draw(a, gen)
            lam = max(lam, 1.0 - lam)
            target_pool = pool_rows(targets, capacity, self.batch_world()[0])
            for key, pool in zip(rows, [*pools, target_pool], strict=True):
                mixed_batch[key] = lam * rows[key] + (1.0 - lam) * pool[partners]
        logits = self.network_logits(mixed_batch["image"], k)
        losses = self.stage_loss_fn(logits, mixed_batch)
        return self.vrnl(losses, logits, batch, network=k)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Any]:
        """The step of both networks, then their averages' update (in the method's stage)."""
        step = self.step_number()
        out = super().training_step(batch, batch_idx)
        if not self.in_warmup:
            self.update_averages(step)
        return out
