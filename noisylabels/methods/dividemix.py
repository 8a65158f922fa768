"""DivideMix (Li, Socher & Hoi, "DivideMix: Learning with Noisy Labels as Semi-supervised
Learning", ICLR 2020).

Two networks. After a warm-up of plain cross-entropy (plus a confidence penalty, the negative
entropy ``Σ_c p_c log p_c``, where the reference uses it: asymmetric noise, Clothing1M), every
epoch of the method's own stage starts with a pass over the whole training set in eval mode
without augmentation (:meth:`~noisylabels.methods.core.base.NoisyLabelMethod.on_training_pass`):
each network's per-sample cross-entropies, min-max normalized, are fitted by a two-component
Gaussian mixture, and a sample's *clean probability* ``w_i`` is the posterior of the component
with the smaller mean. Each network then trains on the division made by the *other* network:
the samples with ``w_i > p_threshold`` are labeled, the others unlabeled, and the batch is
trained MixMatch-style on two augmented views of every image (``--data.views 2``):

- co-refinement (labeled): ``sharpen(w_i y_i + (1 - w_i) p̄_i, T)``, ``p̄_i`` the training
  network's mean softmax over the two views;
- co-guessing (unlabeled): ``sharpen(mean of both networks' softmax over both views, T)``, the
  other network in eval mode;
  ``sharpen(p, T) = p^(1/T) / Σ p^(1/T)``;
- mixup of the ``2B`` rows (both views of the batch) with a random permutation of them and one
  ``λ' = max(λ, 1 - λ)``, ``λ ~ Beta(mix_alpha, mix_alpha)`` per step;
- ``L = mean_labeled(l_i) + λ_u(t) · mean_unlabeled(u_i) + Σ_c π_c log(π_c / p̂_c)``: ``l_i``
  the soft cross-entropy of sample ``i``'s mixed rows against their mixed targets (averaged
  over its two rows), ``u_i`` the mean squared error of their softmax against them (averaged
  over classes and rows), ``λ_u(t) = lambda_u · clip(t / lambda_u_ramp_epochs, 0, 1)`` with
  ``t`` the (fractional) epochs into the method's stage, ``π`` uniform and ``p̂`` the mean
  softmax over all mixed rows (``prior_penalty``).

Where the data's two views are equal (its facts say it is not augmented), each network's targets
come from one pass of view 0, the same logits as two (:func:`stateful` networks still get two).

With ``alpha != 0`` (DivideMix-VRNL) the labeled part is ``mean(l) - alpha · Var(l)`` over the
labeled samples' ``l_i``: the supervised per-sample losses, the only ones against a (refined)
given label; see docs/methods.md. Validation and test score the two networks' averaged logits.

The division is the method's per-sample state: ``clean_prob`` ``(2, N)`` (network ``k``'s
``w_i`` of every sample by dataset index, 0 outside the training split) is in every
checkpoint; the pass's losses are gathered exactly over DDP processes, the mixture is fitted
with a seed of the run's seed and the epoch, and process 0's result is broadcast, so every
process holds the division one process computes. Under DDP with the global variance scope the
mixup permutation runs over the global batch (the inputs and targets of all processes'
samples), and the labeled, unlabeled and prior terms are means over the global batch, so a step
is the step of one process with the global batch. ``λ`` and the permutation are drawn from a
generator of the run's seed, the step and the network, so a resumed run draws the same.

Differences from the reference (docs/methods.md): each batch of ``B`` samples of the whole
training set is divided in place (the reference pairs a batch of labeled samples with an equal
batch of unlabeled ones, cycling the smaller set), and both networks step on every batch (the
reference trains one network for an epoch, then the other).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.distributed import gather_rows_with_grad, world
from noisylabels.methods.core.evaluation import TrainingPass
from noisylabels.methods.core.losses import cross_entropy
from noisylabels.methods.core.vrnl import masked_mean

STATE_KEY = "dividemix_clean_prob"
"""The state-dict key of the division (``(2, N)`` clean probabilities)."""


def sharpen(probs: Tensor, temperature: float) -> Tensor:
    """``p^(1/T) / Σ_c p_c^(1/T)`` row-wise."""
    powered = probs ** (1.0 / temperature)
    return powered / powered.sum(1, keepdim=True)


def negative_entropy(logits: Tensor) -> Tensor:
    """``Σ_c p_c log p_c`` per sample (the reference's confidence penalty), float32."""
    probs = F.softmax(logits.float(), dim=1)
    return (probs * F.log_softmax(logits.float(), dim=1)).sum(1)


def clean_probability(
    losses: Tensor,
    max_iter: int = 10,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int = 0,
) -> Tensor:
    """Each sample's posterior of the low-loss component of a two-component Gaussian mixture
    fitted to ``losses`` (``(n,)``) after min-max normalization (DivideMix's division), as a
    float32 tensor on the losses' device. ``seed`` seeds the mixture's initialization."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    x = losses.detach().float().cpu()
    span = x.max() - x.min()
    x = (x - x.min()) / (span if span > 0 else 1.0)
    column = x.numpy().reshape(-1, 1)
    gmm = GaussianMixture(
        n_components=2, max_iter=max_iter, tol=tol, reg_covar=reg_covar, random_state=seed
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter 10 is the reference's
        gmm.fit(column)
    prob = gmm.predict_proba(column)[:, int(np.argmin(gmm.means_.ravel()))]
    return torch.as_tensor(prob, dtype=torch.float32).to(losses.device)


class DivideMix(NoisyLabelMethod):
    """DivideMix: two networks, each training semi-supervised (MixMatch) on the division of the
    other's loss mixture (Li et al. 2020).

    Args:
        lambda_u: weight of the unlabeled loss once ramped up (reference code: 25; Clothing1M:
            0).
        lambda_u_ramp_epochs: epochs over which the unlabeled weight rises linearly from 0,
            counted from the first epoch of the method's stage (reference: 16).
        p_threshold: a sample is labeled for the other network where its clean probability
            exceeds this (reference: 0.5).
        temperature: sharpening temperature ``T`` of the refined and guessed targets
            (reference: 0.5).
        mix_alpha: mixup's ``Beta(mix_alpha, mix_alpha)`` (reference: 4 on CIFAR, 0.5 on
            Clothing1M); not VRNL's ``alpha``.
        confidence_penalty: add the negative entropy ``Σ_c p_c log p_c`` to the warm-up's
            cross-entropy (reference: asymmetric noise and Clothing1M).
        prior_penalty: add ``Σ_c π_c log(π_c / p̂_c)`` (uniform ``π``, ``p̂`` the mean
            prediction over the mixed batch) in the method's stage (reference: on).
        gmm_max_iter, gmm_tol, gmm_reg_covar: the Gaussian mixture's EM iterations,
            tolerance and covariance regularization (reference: 10, 1e-2, 5e-4).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    views_needed = 2  # co-refinement, co-guessing and mixup use two views of every image
    # the test, predict and the tail score the two networks' averaged logits (the reference
    # tests their sum: the same prediction)
    ensemble_prediction = True

    def __init__(
        self,
        lambda_u: float = 25.0,
        lambda_u_ramp_epochs: int = 16,
        p_threshold: float = 0.5,
        temperature: float = 0.5,
        mix_alpha: float = 4.0,
        confidence_penalty: bool = False,
        prior_penalty: bool = True,
        gmm_max_iter: int = 10,
        gmm_tol: float = 1e-2,
        gmm_reg_covar: float = 5e-4,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if lambda_u < 0:
            raise InputError(f"--model.lambda_u must be >= 0, got {lambda_u}")
        if int(lambda_u_ramp_epochs) < 0:
            raise InputError(
                f"--model.lambda_u_ramp_epochs must be >= 0, got {lambda_u_ramp_epochs}"
            )
        if not 0.0 <= p_threshold < 1.0:
            raise InputError(f"--model.p_threshold must be in [0, 1), got {p_threshold}")
        if not temperature > 0:
            raise InputError(f"--model.temperature must be positive, got {temperature}")
        if not mix_alpha > 0:
            raise InputError(f"--model.mix_alpha must be positive, got {mix_alpha}")
        if int(gmm_max_iter) < 1 or not gmm_tol > 0 or not gmm_reg_covar >= 0:
            raise InputError(
                "--model.gmm_max_iter must be >= 1, gmm_tol > 0 and gmm_reg_covar >= 0, got "
                f"{gmm_max_iter}, {gmm_tol}, {gmm_reg_covar}"
            )
        self.add_network()
        # w_i of network k for every sample by dataset index; made in setup (or by a checkpoint)
        self.clean_prob = torch.zeros(2, 0)
        self.division_stats: dict[str, float] = {}
        self._batch_idx = 0
        # the data's training views are equal copies (no augmentation): read once in setup
        self.equal_views = False
        save_hook = getattr(self, "register_state_dict_post_hook", None)
        (save_hook or self._register_state_dict_hook)(_save_division)
        self.register_load_state_dict_pre_hook(_load_division)

    # ---------------------------------------------------------------- set-up
    def setup(self, stage: str) -> None:
        super().setup(stage)
        facts = self.data_facts()
        self.equal_views = facts is not None and not facts.views_differ
        if stage == "fit" and facts is not None and self.clean_prob.shape[1] != facts.num_samples:
            # a checkpoint's division replaces it on resume
            self.clean_prob = torch.zeros(2, facts.num_samples, device=self.device)

    # ---------------------------------------------------------------- the division
    def wants_training_pass(self) -> bool:
        """Every epoch of the method's own stage starts with the division."""
        return not self.in_warmup

    def on_training_pass(self, result: TrainingPass) -> None:
        """Fit each network's mixture to its losses over the training split; its clean
        probabilities divide the data for the other network."""
        hp = self.hparams
        indices = result.indices[result.counts[result.indices] > 0]  # unreadable images out
        losses = result.values[:, indices]
        probs = torch.zeros(2, result.values.shape[1], device=self.device)
        for k in range(2):
            seed = (torch.initial_seed() * 1_000_003 + 2 * self.current_epoch + k) % 2**32
            probs[k, indices] = clean_probability(
                losses[k], int(hp.gmm_max_iter), float(hp.gmm_tol), float(hp.gmm_reg_covar), seed
            ).to(self.device)
        if world()[0] > 1:  # one mixture for all: process 0's
            dist.broadcast(probs, src=0)
        self.clean_prob = probs
        facts = self.data_facts()
        labeled = probs[:, indices] > float(hp.p_threshold)
        self.division_stats = {
            f"train/{'' if k == 0 else f'net{k}/'}labeled_frac": float(labeled[k].float().mean())
            for k in range(2)
        }
        if facts is not None:
            clean = facts.clean_labels[indices.cpu()].to(self.device)
            noisy = facts.noisy_labels[indices.cpu()].to(self.device)
            known = clean >= 0
            if bool(known.any()):
                correct = (clean == noisy) & known
                for k in range(2):
                    kept = labeled[k] & known
                    prefix = "" if k == 0 else f"net{k}/"
                    precision = (kept & correct).sum() / kept.sum().clamp_min(1)
                    self.division_stats[f"train/{prefix}labeled_precision"] = float(precision)

    # ---------------------------------------------------------------- the objective
    def warmup_losses(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Cross-entropy, plus the negative entropy with ``confidence_penalty``."""
        losses = cross_entropy(logits, batch["label"])
        if self.hparams.confidence_penalty:
            losses = losses + negative_entropy(logits)
        return losses

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Cross-entropy against the noisy label: what the division's mixture is fitted to
        (and the validation loss)."""
        return cross_entropy(logits, batch["label"])

    def inert_options(self) -> list[tuple[str, str]]:
        """The warm-up's confidence penalty without a warm-up; the ramp of a zero ``λ_u``."""
        inert = super().inert_options()
        if not self.schedule.has_warmup:
            inert.append(("confidence_penalty", "there is no warm-up, whose loss it penalizes"))
        if float(self.hparams.lambda_u) == 0.0:
            inert.append(("lambda_u_ramp_epochs", "lambda_u is 0: no unlabeled loss to ramp"))
        return inert

    def current_lambda_u(self) -> float:
        """``λ_u`` at this step: ``lambda_u · clip(t / ramp, 0, 1)``, ``t`` the epochs into the
        method's stage with the fraction of the current epoch's batches done."""
        hp = self.hparams
        ramp = int(hp.lambda_u_ramp_epochs)
        trainer = self._trainer
        batches = 1.0 if trainer is None else float(trainer.num_training_batches or 1)
        if batches == float("inf"):
            batches = 1.0
        t = self.current_epoch - self.warmup_length() + self._batch_idx / batches
        factor = 1.0 if ramp == 0 else min(max(t / ramp, 0.0), 1.0)
        return float(hp.lambda_u) * factor

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_start(batch, batch_idx)
        self._batch_idx = batch_idx

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """Both networks' objectives, summed (the networks share no parameter): the warm-up's
        cross-entropy on one view, then each network's MixMatch objective on the division of
        the other."""
        if self.in_warmup:
            objectives = []
            for k in range(2):
                logits = self.network_logits(batch["image"], k)
                losses = self.warmup_losses(logits, batch)
                objectives.append(self.vrnl(losses, logits, batch, network=k))
            return torch.stack(objectives).sum()
        views = batch.get("views")
        if views is None or len(views) < 2:
            raise InputError(
                "DivideMix's training batches need two augmented views: add --data.views 2"
            )
        return torch.stack([self.mixmatch_objective(batch, views, k) for k in range(2)]).sum()

    @torch.no_grad()
    def targets(
        self, views: Tensor, labels: Tensor, w: Tensor, labeled: Tensor, k: int
    ) -> tuple[Tensor, Tensor]:
        """Network ``k``'s sharpened targets ``(B, C)``: co-refined labels where ``labeled``,
        co-guessed ones elsewhere (the other network in eval mode); and network ``k``'s logits
        of view 0 (what the step records of its samples)."""
        temperature = float(self.hparams.temperature)
        # equal views (data without augmentation, e.g. MNIST, as its facts say): one pass
        # stands for both where a second would give the same logits and change nothing (no
        # dropout or normalization statistics in training mode; the peer is in eval mode)
        same = self.equal_views
        own_logits = self._view_logits(views, k, same and not stateful(self.networks[k]))
        own = [F.softmax(z.float(), dim=1) for z in own_logits]
        other = self.networks[1 - k]
        mode = other.training
        other.eval()
        try:
            peer = [F.softmax(z.float(), dim=1) for z in self._view_logits(views, 1 - k, same)]
        finally:
            other.train(mode)
        onehot = F.one_hot(labels, self.num_classes).float()
        w = w.float()[:, None]
        refined = sharpen(w * onehot + (1.0 - w) * (own[0] + own[1]) / 2.0, temperature)
        guessed = sharpen((own[0] + own[1] + peer[0] + peer[1]) / 4.0, temperature)
        return torch.where(labeled[:, None], refined, guessed), own_logits[0]

    def _view_logits(self, views: Tensor, k: int, once: bool) -> list[Tensor]:
        """Network ``k``'s logits of the first two views; with ``once``, of view 0 for both."""
        if once:
            return [self.network_logits(views[0], k)] * 2
        return [self.network_logits(v, k) for v in views[:2]]

    def mix_partners(self, n: int, k: int, device: torch.device) -> tuple[Tensor, float, int]:
        """This step's mixup of network ``k``: for each of this process's ``2n`` rows (view 0
        of its samples, then view 1) the position of its partner in the pool of the (global,
        under DDP with the global variance scope) batch's rows, ``λ' = max(λ, 1 - λ)``, and the
        pool's capacity per view. Drawn from the run's seed, the step and ``k``; the same on
        every process, and as one process with the global batch draws them."""
        size, rank = self.batch_world()
        capacity = self.batch_capacity(n)
        slots = size * capacity
        count = torch.full((1,), float(n), device=device)
        counts = gather_rows_with_grad(count, 1) if size > 1 else count  # every process's n
        # slot j * size + r holds process r's sample j where j < its count
        valid = torch.arange(capacity, device=device)[:, None] < counts[None, :]
        valid = torch.cat([valid.reshape(-1), valid.reshape(-1)])  # view 0, then view 1
        seed = ((torch.initial_seed() * 1_000_003 + self.global_step) * 2 + k) % 2**63
        gen = torch.Generator().manual_seed(seed)
        keys = torch.rand(2 * slots, generator=gen).to(device)
        shuffled = torch.where(valid, keys, torch.inf).argsort()  # valid rows first, shuffled
        in_order = torch.argsort((~valid).to(torch.int8), stable=True)  # valid rows first
        partner = torch.empty_like(in_order)
        partner[in_order] = shuffled  # a random bijection of the valid rows
        own = torch.arange(n, device=device) * size + rank
        mine = partner[torch.cat([own, own + slots])]
        mix_alpha = float(self.hparams.mix_alpha)
        lam = float(np.random.default_rng(seed).beta(mix_alpha, mix_alpha))
        return mine, max(lam, 1.0 - lam), capacity

    def pool(self, rows: Tensor, capacity: int) -> Tensor:
        """The ``(2 · W · capacity, ...)`` pool of the global batch's rows from this process's
        ``(2n, ...)`` rows (view 0 of its samples, then view 1), no gradient."""
        n = len(rows) // 2
        size = self.batch_world()[0]
        parts = []
        for view in rows[:n], rows[n:]:
            if size > 1:
                parts.append(gather_rows_with_grad(view.detach(), capacity))
            else:
                parts.append(torch.cat([view, view.new_zeros(capacity - n, *view.shape[1:])]))
        return torch.cat(parts)

    def mixmatch_objective(self, batch: dict[str, Tensor], views: Tensor, k: int) -> Tensor:
        """Network ``k``'s objective on the other network's division: the VRNL objective of
        the labeled samples' soft cross-entropies, plus ``λ_u`` times the unlabeled samples'
        mean squared error and the prior penalty (module docstring)."""
        hp = self.hparams
        index, labels = batch["index"], batch["label"]
        n = len(index)
        if self.clean_prob.device != index.device:
            self.clean_prob = self.clean_prob.to(index.device)
        w = self.clean_prob[1 - k, index]
        labeled = w > float(hp.p_threshold)
        targets, own_logits = self.targets(views, labels, w, labeled, k)
        partners, lam, capacity = self.mix_partners(n, k, index.device)
        inputs = torch.cat([views[0], views[1]])
        mixed_targets = torch.cat([targets, targets])
        inputs = lam * inputs + (1.0 - lam) * self.pool(inputs, capacity)[partners]
        mixed_targets = (
            lam * mixed_targets + (1.0 - lam) * self.pool(mixed_targets, capacity)[partners]
        )
        logits = self.network_logits(inputs, k).float()
        soft_ce = -(F.log_softmax(logits, dim=1) * mixed_targets).sum(1)
        squared = (F.softmax(logits, dim=1) - mixed_targets).square().mean(1)
        l_x = (soft_ce[:n] + soft_ce[n:]) / 2.0  # per sample, over its two rows
        l_u = (squared[:n] + squared[n:]) / 2.0
        extra = self.current_lambda_u() * masked_mean(l_u, ~labeled, self.variance_scope)
        if hp.prior_penalty:
            mean_pred = masked_mean(F.softmax(logits, dim=1), None, self.variance_scope)
            prior = torch.full_like(mean_pred, 1.0 / self.num_classes)
            extra = extra + (prior * torch.log(prior / mean_pred)).sum()
        return self.vrnl(l_x, own_logits, batch, used=labeled, network=k, extra=extra)

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        if not self.in_warmup:
            for name, value in self.division_stats.items():
                self.log(name, value)
            self.log("train/lambda_u", self.current_lambda_u())


def stateful(network: nn.Module) -> bool:
    """Whether a training-mode pass of ``network`` draws random numbers or updates state
    (dropout, batch-normalization statistics), so that two passes of one input differ."""
    return any(
        module.training
        and (
            isinstance(module, nn.modules.dropout._DropoutNd)
            or (isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats)
        )
        for module in network.modules()
    )


def _save_division(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``state_dict`` hook: the clean probabilities into the state dict."""
    state_dict[prefix + STATE_KEY] = module.clean_prob.detach().cpu().clone()


def _load_division(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: the clean probabilities out of the state dict."""
    saved = state_dict.pop(prefix + STATE_KEY, None)
    if saved is not None:
        device = next(module.parameters()).device
        module.clean_prob = saved.float().to(device)
