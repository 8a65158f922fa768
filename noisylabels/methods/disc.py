"""DISC, dynamic instance-specific selection and correction (Li, Xia, Ge & Liu, "DISC: Learning
from Noisy Labels via Dynamic Instance-Specific Selection and Correction", CVPR 2023).

Reference code: JackYFL/DISC@a21e910, ``algorithms/DISC.py`` (the method), ``losses/
loss_other.py:38-50`` (GCE), ``losses/loss_mixup.py:23-35`` (mixup), ``datasets/
randaugment.py:242-283`` (the strong view), ``configs/DISC_CIFAR.py`` and ``main.py:25``
(constants). No transition matrix is estimated or used.

One network sees a weakly and a strongly augmented view of every image in one pass
(``DISC.py:277-281``). Every sample ``i`` keeps, from the epoch's training forward passes, the
softmax of each view, ``p^w_i`` and ``p^s_i``, and a threshold per view, ``τ^w_i`` and ``τ^s_i``
(``1/N`` at first, ``N`` the training set). At the end of every epoch (here: at the start of the
next), with ``y_i`` the noisy label (``DISC.py:328-360``):

- selected by a view where its probability of the label passes the view's threshold,
  ``p^w_i[y_i] > τ^w_i``; *clean* where both views select the sample, *hard* where one does;
- *corrected* where neither does but ``max_c (p^w_i + p^s_i)_c / 2 > min((τ^w_i + τ^s_i) / 2
  + σ, 0.99)``: its label becomes that argmax; the selected keep ``y_i``;
- then ``τ^v_i <- m τ^v_i + (1 - m) max_c p^v_ic`` for both views (the thresholds move after
  the selection that used them).

For ``start_epoch`` epochs (the warm-up, ``--model.schedule.warmup_epochs``) the loss is
``CE(weak) + CE(strong)`` (``DISC.py:244-269``); the selection runs from the end of the first
epoch on, the warm-up's included (``DISC.py:328``, after either branch). Then, for a batch of
``B`` (``DISC.py:283-323``)

    L = (1/B) Σ_{i clean} λ_ce (CE(z^w_i, y_i) + CE(z^s_i, y_i))
        + (1/B) Σ_{i hard} λ_h (GCE(z^w_i, y_i) + GCE(z^s_i, y_i))
        + mixup_w + mixup_s

with GCE ``(1 - p_y^q) / q`` (``q`` 0.7, ``p`` floored at 1e-7) and ``mixup_v`` the mean over
the batch's selected and corrected samples of the soft cross-entropy of the mixed view ``λ x_i +
(1 - λ) x_π(i)`` against ``λ ỹ_i + (1 - λ) ỹ_π(i)`` (``ỹ`` the one-hot of the kept or corrected
label; ``λ ~ Beta(a, a)``, ``λ' = max(λ, 1 - λ)``, ``π`` a permutation of those samples, drawn
apart for each view). With ``alpha != 0`` (DISC-VRNL) the first two terms are ``(n/B) (mean(l)
- alpha Var(l))`` over the ``n`` clean and hard samples' ``l_i`` (their CE or GCE terms): ``n/B``
times their mean is the reference's sum over ``B``, and the variance is that of the losses the
selection keeps; the mixup terms are added outside it.

Differences from the reference (docs/methods.md): the mixed views run through the network for
the whole batch, the samples outside the selected and corrected set masked out of the mean (the
reference forwards only those samples: its batch normalization sees fewer rows); a step whose
loss is 0 (nothing selected) still steps the optimizer (the reference skips it: with weight decay
the weights shrink once). ``N`` is the training set with its validation split (the split's rows
are never visited, so never selected). The crops, the normalization and the held-out split are
the data's (docs/methods.md lists where they differ from the reference's).

The tables (both views' probabilities, the thresholds, the selection, the corrected labels) are
part of the state dict, so of every checkpoint. Under DDP every process writes every process's
rows of a step (:func:`~noisylabels.methods.core.distributed.gather_updates`) and the selection
is a function of the tables, so it is the one-process selection; with the global variance scope
the permutation runs over the global batch's selected and corrected samples and the means over
the global batch. ``λ`` and ``π`` are drawn from a generator of the run's seed, the step and the
view, so a resumed run draws the same.
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
from noisylabels.methods.core.vrnl import masked_mean
from noisylabels.methods.gce import gce_loss
from noisylabels.methods.mixup import beta_draw, draw_partners, pool_rows

CLEAN_KEY = "disc_clean"
"""The batch key of the step's clean samples (both views select them)."""
HARD_KEY = "disc_hard"
"""The batch key of the step's hard samples (one view selects them)."""
STATE_PREFIX = "disc_"
"""The state-dict keys of the tables: ``disc_probs``, ``disc_thresholds``, ``disc_selection``,
``disc_labels``, ``disc_selected_epoch``."""
TABLES = ("probs", "thresholds", "selection", "labels", "selected_epoch")
GCE_FLOOR = 1e-7
"""GCE's floor of the probability (``losses/loss_other.py:47``)."""


class DISC(NoisyLabelMethod):
    """Dynamic instance-specific selection and correction: per-sample, per-view thresholds that
    follow the model's confidence select clean (CE), hard (GCE) and corrected (mixup) samples
    (Li et al. 2023).

    Args:
        momentum: the thresholds' momentum ``m`` (reference: 0.99, ``main.py:25``; 0.95 with
            asymmetric noise, at 60 % and 80 % noise and on Clothing1M, ``DISC.py:63-113``).
        sigma: the margin ``σ`` a correction needs above the mean threshold (reference: 0.5).
        correction_cap: the correction's threshold is at most this (reference: 0.99).
        lambda_ce: weight ``λ_ce`` of the clean samples' CE (reference: 1).
        lambda_h: weight ``λ_h`` of the hard samples' GCE (reference: 1; 0.2 at 60 % and 80 %
            noise).
        q: GCE's exponent (reference: 0.7).
        mixup_alpha: ``a`` of mixup's ``Beta(a, a)`` (reference: 5, ``configs/DISC_CIFAR.py:
            23``); ``<= 0``: ``λ = 1`` (the images unmixed). Not VRNL's ``alpha``.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    strong_views_needed = 1

    def __init__(
        self,
        momentum: float = 0.99,
        sigma: float = 0.5,
        correction_cap: float = 0.99,
        lambda_ce: float = 1.0,
        lambda_h: float = 1.0,
        q: float = 0.7,
        mixup_alpha: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= float(momentum) < 1.0:
            raise InputError(
                f"--model.momentum (the thresholds') must be in [0, 1), got {momentum}"
            )
        if not math.isfinite(float(sigma)) or sigma < 0:
            raise InputError(f"--model.sigma must be a number >= 0, got {sigma}")
        if not 0.0 < float(correction_cap) <= 1.0:
            raise InputError(f"--model.correction_cap must be in (0, 1], got {correction_cap}")
        for name, value in (("lambda_ce", lambda_ce), ("lambda_h", lambda_h)):
            if not math.isfinite(float(value)) or value < 0:
                raise InputError(f"--model.{name} must be a number >= 0, got {value}")
        if not 0.0 < float(q) <= 1.0:
            raise InputError(f"--model.q (GCE's exponent) must be in (0, 1], got {q}")
        if not math.isfinite(float(mixup_alpha)):
            raise InputError(
                f"--model.mixup_alpha must be a finite number (> 0: Beta(a, a); <= 0: no "
                f"mixing), got {mixup_alpha}"
            )
        self.init_tables(0)
        save_hook = getattr(self, "register_state_dict_post_hook", None)
        (save_hook or self._register_state_dict_hook)(_save_tables)
        self.register_load_state_dict_pre_hook(_load_tables)
        self.selection_stats: dict[str, float] = {}

    def inert_options(self) -> list[tuple[str, str]]:
        """GCE's exponent where hard samples weigh nothing."""
        inert = super().inert_options()
        if float(self.hparams.lambda_h) == 0.0:
            inert.append(("q", "lambda_h is 0: the hard samples' GCE weighs nothing"))
        return inert

    # ---------------------------------------------------------------- the tables
    def init_tables(self, num_samples: int) -> None:
        """The reference's start for ``num_samples`` samples (and one scratch row last, which
        padded DDP rows are written to): probabilities 0, thresholds ``1 / num_samples``,
        nothing selected or corrected, the labels (what mixup trains on: the kept or corrected
        ones) those of the data."""
        n, c = num_samples + 1, self.num_classes
        device = self.device
        self.probs = torch.zeros(2, n, c, device=device)  # the weak and the strong view
        self.thresholds = torch.full((2, n), 1.0 / max(num_samples, 1), device=device)
        self.selection = torch.zeros(3, n, dtype=torch.bool, device=device)  # clean, hard, corr.
        self.labels = torch.zeros(n, dtype=torch.long, device=device)
        self.selected_epoch = torch.zeros((), dtype=torch.long)  # the last selection's epoch
        facts = self.data_facts()
        if facts is not None and num_samples > 0:
            self.labels[:-1] = facts.noisy_labels.to(device).long().clamp_min(0)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        facts = self.data_facts()
        if stage == "fit" and facts is not None and self.probs.shape[1] != facts.num_samples + 1:
            self.init_tables(facts.num_samples)  # a checkpoint's tables replace them on resume

    def record_probs(self, index: Tensor, weak: Tensor, strong: Tensor) -> None:
        """Write the batch's detached softmax of both views into the table (every process
        writes every process's rows)."""
        if self.probs.device != weak.device:
            self.move_tables(weak.device)
        c = self.num_classes
        rows = torch.cat([F.softmax(weak.float(), 1), F.softmax(strong.float(), 1)], 1)
        facts = self.data_facts()
        indices, rows = gather_updates(index, rows, None if facts is None else facts.batch_size)
        scratch = self.probs.shape[1] - 1
        at = torch.where(indices >= 0, indices, scratch)
        self.probs[0].index_copy_(0, at, rows[:, :c])
        self.probs[1].index_copy_(0, at, rows[:, c:])

    def move_tables(self, device: torch.device) -> None:
        for name in ("probs", "thresholds", "selection", "labels"):
            setattr(self, name, getattr(self, name).to(device))

    @torch.no_grad()
    def select(self) -> None:
        """The selection and correction of the tables' probabilities under the thresholds,
        then the thresholds' update (module docstring), with its statistics."""
        hp = self.hparams
        probs, thresholds = self.probs[:, :-1], self.thresholds[:, :-1]
        facts = self.data_facts()
        noisy = self.labels[:-1] if facts is None else facts.noisy_labels.to(probs.device)
        noisy = noisy.long().clamp_min(0)
        label_probs = probs.gather(2, noisy.view(1, -1, 1).expand(2, -1, 1)).squeeze(2)
        by_view = label_probs > thresholds
        clean, selected = by_view[0] & by_view[1], by_view[0] | by_view[1]
        hard = selected & ~clean
        ws_max, ws_label = ((probs[0] + probs[1]) / 2).max(1)
        bar = (thresholds.mean(0) + float(hp.sigma)).clamp_max(float(hp.correction_cap))
        corrected = (ws_max > bar) & ~selected
        self.selection[:, :-1] = torch.stack([clean, hard, corrected])
        new_labels = torch.where(corrected, ws_label, noisy)  # the selected keep theirs
        self.labels[:-1] = torch.where(selected | corrected, new_labels, self.labels[:-1])
        m = float(hp.momentum)
        self.thresholds[:, :-1] = m * thresholds + (1.0 - m) * probs.amax(2)
        self.selected_epoch = torch.tensor(int(self.current_epoch))
        self.selection_stats = self.statistics(clean, hard, corrected, ws_label)

    def statistics(
        self, clean: Tensor, hard: Tensor, corrected: Tensor, corrected_label: Tensor
    ) -> dict[str, float]:
        """The sets' shares of the training split and, where its clean labels are known, the
        share of each set whose (kept or corrected) label is the clean one."""
        facts = self.data_facts()
        if facts is None:
            return {}
        train = torch.zeros_like(clean)
        train[facts.train_indices.to(clean.device)] = True
        truth = facts.clean_labels.to(clean.device)
        noisy = facts.noisy_labels.to(clean.device)
        stats = {}
        for name, chosen, label in (
            ("clean", clean, noisy),
            ("hard", hard, noisy),
            ("corrected", corrected, corrected_label),
        ):
            chosen = chosen & train
            stats[f"train/disc_{name}_frac"] = float(chosen.sum() / train.sum().clamp_min(1))
            known = chosen & (truth >= 0)
            if bool(known.any()):
                right = (label == truth) & known
                stats[f"train/disc_{name}_precision"] = float(right.sum() / known.sum())
        return stats

    def on_train_epoch_start(self) -> None:
        """The selection of the epoch before's probabilities, once per epoch from the second on
        (a run resumed mid-epoch keeps its checkpoint's)."""
        epoch = int(self.current_epoch)
        if epoch >= 1 and epoch > int(self.selected_epoch):
            self.select()
        super().on_train_epoch_start()

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        for name, value in self.selection_stats.items():
            self.log(name, value)

    # ---------------------------------------------------------------- the objective
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """One view's term of each sample: ``λ_ce CE`` where clean, ``λ_h GCE`` where hard, CE
        elsewhere (recorded, not trained on); plain CE outside a training step."""
        ce = cross_entropy(logits, batch["label"])
        clean = batch.get(CLEAN_KEY)
        if clean is None:
            return ce
        hp = self.hparams
        gce = gce_loss(logits, batch["label"], float(hp.q), GCE_FLOOR)
        out = torch.where(batch[HARD_KEY], float(hp.lambda_h) * gce, ce)
        return torch.where(clean, float(hp.lambda_ce) * ce, out)

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The objective of one batch over its weak and strong views (module docstring)."""
        weak, strong, index = batch["image"], batch["strong"][0], batch["index"]
        n = weak.shape[0]
        both = self(torch.cat([weak, strong]))
        weak_logits, strong_logits = both[:n], both[n:]
        with torch.no_grad():
            self.record_probs(index, weak_logits.detach(), strong_logits.detach())
        if self.in_warmup:
            losses = self.stage_loss_fn(weak_logits, batch) + self.stage_loss_fn(
                strong_logits, batch
            )
            return self.vrnl(losses, weak_logits, batch)
        at = index.to(self.selection.device)
        clean, hard, corrected = (self.selection[k][at] for k in range(3))
        flagged = {**batch, CLEAN_KEY: clean, HARD_KEY: hard}
        losses = self.stage_loss_fn(weak_logits, flagged) + self.stage_loss_fn(
            strong_logits, flagged
        )
        used = clean | hard
        share = masked_mean(used.float(), None, self.variance_scope).detach()
        weak_set = used | corrected
        targets = F.one_hot(self.labels[at], self.num_classes).float()
        pool = pool_rows(targets, self.batch_capacity(n), self.batch_world()[0])  # once: both views
        mixed = [
            self.mixup_term(images, targets, pool, weak_set, v)
            for v, images in enumerate((weak, strong))
        ]
        return self.vrnl(
            losses, weak_logits, batch, used=used, scale=share, extra=mixed[0] + mixed[1]
        )

    def mixup_term(
        self, images: Tensor, targets: Tensor, target_pool: Tensor, members: Tensor, view: int
    ) -> Tensor:
        """The mean over ``members`` of the soft cross-entropy of view ``view``'s mixed images
        (``losses/loss_mixup.py:23-35``), partners drawn among the members; ``target_pool``:
        the step's pooled targets (:func:`~noisylabels.methods.mixup.pool_rows`)."""
        n = len(images)
        a = float(self.hparams.mixup_alpha)
        seed = ((torch.initial_seed() * 1_000_003 + self.global_step) * 2 + view) % 2**63
        gen = torch.Generator().manual_seed(seed)
        capacity, world_rank = self.batch_capacity(n), self.batch_world()
        partners = draw_partners(n, capacity, world_rank, gen, images.device, members)
        lam = beta_draw(a, gen) if a > 0 else 1.0
        lam = max(lam, 1.0 - lam)
        size = world_rank[0]
        mixed = lam * images + (1.0 - lam) * pool_rows(images, capacity, size)[partners]
        soft = lam * targets + (1.0 - lam) * target_pool[partners]
        logits = self(mixed)
        soft_ce = -(soft * F.log_softmax(logits.float(), dim=1)).sum(1)
        return masked_mean(soft_ce, members, self.variance_scope)


def _save_tables(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``state_dict`` hook: the tables (without their scratch row) into the state dict."""
    for name in TABLES:
        value = getattr(module, name)
        if name != "selected_epoch":
            value = value[..., :-1, :] if value.ndim == 3 else value[..., :-1]
        state_dict[prefix + STATE_PREFIX + name] = value.detach().cpu().clone()


def _load_tables(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: the tables out of the state dict."""
    saved = {name: state_dict.pop(prefix + STATE_PREFIX + name, None) for name in TABLES}
    if any(value is None for value in saved.values()):
        return
    device = next(module.parameters()).device
    module.selected_epoch = saved.pop("selected_epoch").long()
    for name, value in saved.items():
        pad = torch.zeros_like(value[..., :1, :] if value.ndim == 3 else value[..., :1])
        joined = torch.cat([value, pad], dim=-2 if value.ndim == 3 else -1)
        setattr(module, name, joined.to(device))
