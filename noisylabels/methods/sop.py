"""SOP, sparse over-parameterization (Liu et al., "Robust Training under Label Noise by
Over-parameterization", ICML 2022).

The label noise of every training sample ``i`` is modelled by parameters of its own, ``u_i``
(a scalar) and ``v_i`` (``C`` values), learned with the network by SGD at their own learning
rates: with ``y_i`` the one-hot noisy label, ``U_i = clamp(u_i² y_i, 0, 1)`` (mass added to the
labelled class) and ``V_i = clamp(v_i² (1 - y_i), 0, 1)`` (mass taken from the others), the
per-sample loss is the reference's CIFAR loss (without SOP+'s consistency and class-balance
terms, which need two augmented views of every image)

    q_i = clamp(normalize_1(clamp(p_i + U_i - sg(V_i), eps)), eps, 1)
    l_i = -<y_i, log q_i> + ||onehot(argmax z_i) + U_i - V_i - y_i||²

(``sg``: no gradient; ``eps`` 1e-4). ``u`` and ``v`` start near 0 (normal, std 1e-8), so early
on the loss is cross-entropy; small-norm solutions of this over-parameterization explain the
labels the network cannot fit (the sparse noise) by ``u`` and ``v`` rather than by the network.
VRNL (``alpha != 0``) acts on the variance of ``l_i``.

``u`` (``N x 1``) and ``v`` (``N x C``), ``N`` the training set with its validation split, are
parameters of the module, indexed by the batch's dataset indices: they are in every checkpoint,
and under DDP their gradients are averaged like the network's (a row gets its gradient from the
process that holds its sample), which with the global VRNL objective is the one-process
gradient. Their optimizer is plain SGD (no momentum, no weight decay, a constant rate), so the
rows of samples outside a batch do not move.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.vrnl import masked_mean


class SOP(NoisyLabelMethod):
    """Sparse over-parameterization: per-sample noise parameters ``u_i``, ``v_i`` learned with
    the network (Liu et al. 2022).

    Args:
        lr_u: learning rate of ``u`` (reference: 1 on CIFAR-100 with symmetric noise, 0.1 with
            asymmetric noise).
        lr_v: learning rate of ``v`` (reference: 10 symmetric, 100 asymmetric).
        init_std: ``u`` and ``v`` start as normal draws of this standard deviation
            (reference: 1e-8).
        init_mean: and of this mean (reference: 0).
        eps: the floor of the corrected prediction (reference: 1e-4).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self,
        lr_u: float = 1.0,
        lr_v: float = 10.0,
        init_std: float = 1e-8,
        init_mean: float = 0.0,
        eps: float = 1e-4,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        for name, value in (("lr_u", lr_u), ("lr_v", lr_v)):
            if not value > 0:
                raise InputError(f"--model.{name} must be positive, got {value}")
        if init_std < 0:
            raise InputError(f"--model.init_std must be >= 0, got {init_std}")
        if not 0 < eps < 1:
            raise InputError(f"--model.eps must be in (0, 1), got {eps}")
        self.automatic_optimization = False  # u and v have their own optimizer
        # one row per sample of the training set, made in setup (or by a checkpoint's shape)
        self.u = nn.Parameter(torch.zeros(0, 1))
        self.v = nn.Parameter(torch.zeros(0, self.num_classes))
        self.register_load_state_dict_pre_hook(_shape_like_checkpoint)

    def init_parameters(self, num_samples: int) -> None:
        """``u`` and ``v`` for ``num_samples`` samples, normal(``init_mean``, ``init_std``)
        draws from a generator of the run's seed (the global random state is left alone)."""
        hp = self.hparams
        generator = torch.Generator().manual_seed(torch.initial_seed())
        shapes = {"u": (num_samples, 1), "v": (num_samples, self.num_classes)}
        for name, shape in shapes.items():
            value = torch.randn(*shape, generator=generator) * hp.init_std + hp.init_mean
            setattr(self, name, nn.Parameter(value.to(self.device)))

    def setup(self, stage: str) -> None:
        facts = self.data_facts()
        if stage == "fit" and facts is not None and len(self.u) != facts.num_samples:
            self.init_parameters(facts.num_samples)  # a checkpoint's replace them on resume
        super().setup(stage)

    # ---------------------------------------------------------------- the loss
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """``-<y, log q> + ||onehot(argmax z) + U - V - y||²`` per sample (module docstring)."""
        return self.losses_and_prediction(logits, batch)[0]

    def losses_and_prediction(
        self, logits: Tensor, batch: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor]:
        """The per-sample losses and the corrected prediction ``q`` (``(B, C)``)."""
        eps = float(self.hparams.eps)
        y = F.one_hot(batch["label"], self.num_classes).float()
        index = batch["index"]
        U = (self.u[index] ** 2 * y).clamp(0.0, 1.0)
        V = (self.v[index] ** 2 * (1.0 - y)).clamp(0.0, 1.0)
        probs = F.softmax(logits.float(), dim=1)
        q = (probs + U - V.detach()).clamp_min(eps)
        q = F.normalize(q, p=1, dim=1, eps=eps).clamp(eps, 1.0)
        hard = F.one_hot(logits.detach().argmax(1), self.num_classes).float()
        return -(y * torch.log(q)).sum(1) + (hard + U - V - y).square().sum(1), q

    def unused_parameters(self) -> list[nn.Parameter]:
        """``u`` and ``v`` in a warm-up (plain cross-entropy)."""
        return [self.u, self.v] if self.in_warmup else []

    def configure_optimizers(self) -> Any:
        """The network's optimizer (with the schedule) and plain SGD over ``u`` (``lr_u``) and
        ``v`` (``lr_v``) without momentum, weight decay or schedule (the reference's)."""
        hp = self.hparams
        opt_net = self.make_optimizer(self.net.parameters())
        groups = [{"params": [self.u], "lr": hp.lr_u}, {"params": [self.v], "lr": hp.lr_v}]
        opt_uv = torch.optim.SGD(groups, lr=hp.lr_u, momentum=0.0, weight_decay=0.0)
        return [opt_net, opt_uv], [self.make_scheduler(opt_net)]


class SOPPlus(SOP):
    """SOP+: SOP with the consistency of a weakly and a strongly augmented view of every image
    and a class-balance term (Liu et al., "Robust Training under Label Noise by
    Over-parameterization", ICML 2022).

    Reference code: shengliu66/SOP@4d991ce (``model/loss.py:55-127``; the constants are
    ``config_cifar100.json:34-37``, ``:82-83``, the repository's one config). The network runs
    once over the weak and the strong view of the batch together (``trainer/trainer.py:94``;
    batch normalization sees both), and with the SOP loss ``l_i`` of the weak view (its
    corrected prediction ``q_i``; see :class:`SOP`) the objective is

        mean_i(l_i + ratio_consistency · KL(sg(p_i) ‖ p'_i))
            + ratio_balance · (-(1/C) Σ_c log clamp(mean_i q_ic, eps, 1))

    with ``p_i`` and ``p'_i`` the softmax of the weak and the strong view. The balance term
    (the cross-entropy of the uniform prior to the batch's mean corrected prediction) is a
    term of the batch, not of a sample: under DDP its mean runs over the global batch
    (``--model.variance_scope global``), so that the gradient is the one-process one. VRNL
    (``alpha != 0``) acts on the variance of the per-sample ``l_i + ratio_consistency · KL_i``;
    the balance term is added outside it. A warm-up, where given, is cross-entropy on the
    weak view (the reference has none). The strong views are the data's
    (``--data.strong_views 1``; :mod:`noisylabels.data.strong`: AutoAugment's CIFAR-10
    policy and Cutout 16 in the reference). No transition matrix.

    Args:
        ratio_consistency: weight of the consistency term (reference: 0.9); 0 is refused (the
            strong views would be drawn and never used: that is :class:`SOP` with a
            class-balance term).
        ratio_balance: weight of the class-balance term (reference: 0.1).
        **kwargs: see :class:`SOP`.
    """

    strong_views_needed = 1

    def __init__(
        self, ratio_consistency: float = 0.9, ratio_balance: float = 0.1, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if not ratio_consistency > 0:
            raise InputError(
                f"--model.ratio_consistency must be positive, got {ratio_consistency}: SOP+ "
                "without its consistency term would draw the strong views and never use them"
            )
        if not ratio_balance >= 0:
            raise InputError(f"--model.ratio_balance must be >= 0, got {ratio_balance}")

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The objective of one batch over its weak and strong views (class docstring)."""
        if self.in_warmup:
            return super().training_objective(batch)
        hp = self.hparams
        weak, strong = batch["image"], batch["strong"][0]
        n = weak.shape[0]
        both = self(torch.cat([weak, strong]))
        logits, strong_logits = both[:n], both[n:]
        losses, q = self.losses_and_prediction(logits, batch)
        target = F.softmax(logits.float(), dim=1).detach()
        consistency = F.kl_div(
            F.log_softmax(strong_logits.float(), dim=1), target, reduction="none"
        ).sum(1)
        losses = losses + float(hp.ratio_consistency) * consistency
        extra = None
        if float(hp.ratio_balance) > 0:
            eps = float(hp.eps)
            mean_q = masked_mean(q, None, self.variance_scope).clamp(eps, 1.0)
            extra = float(hp.ratio_balance) * -torch.log(mean_q).mean()
        return self.vrnl(losses, logits, batch, extra=extra)


def _shape_like_checkpoint(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """``load_state_dict`` pre-hook: give ``u`` and ``v`` the checkpoint's shape (a module made
    outside a run has none yet), so that the values load in place."""
    for name in ("u", "v"):
        saved = state_dict.get(prefix + name)
        current = getattr(module, name)
        if saved is not None and saved.shape != current.shape:
            fresh = torch.zeros(saved.shape, dtype=current.dtype, device=current.device)
            setattr(module, name, nn.Parameter(fresh))
