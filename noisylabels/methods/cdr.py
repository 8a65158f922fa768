"""CDR, robust early-learning (Xia et al., "Robust Early-Learning: Hindering the Memorization of
Noisy Labels", ICLR 2021; reference code xiaoboxia/CDR @ 6665a8b, main.py).

Cross-entropy training in which, at every step, the weights are divided into *critical* and
*non-critical* ones by the size of ``|w · ∂L/∂w|``, and only the critical ones get the loss
gradient; the non-critical ones move by the optimizer's weight decay alone (and the momentum
they carry). The rule of the reference (main.py:257-283, ``train_one_step``):

- the weights ranked are those of every parameter tensor of 2 or 4 dimensions (linear and
  convolution weights, main.py:266); biases and normalization parameters (1-D) keep their
  whole gradient;
- the score ``|w · g|`` (``g`` the loss gradient, before the optimizer's weight decay) of all
  ranked weights is ranked *globally*, over all their tensors at once (main.py:269-271);
- the ``nz = int(clip · N)`` highest of the ``N`` scores are kept: the threshold is the
  ``nz``-th highest score, and every weight scoring at least it (ties included) is critical
  (main.py:272-279);
- a critical weight's gradient is multiplied by ``clip``, a non-critical weight's set to 0
  (main.py:279-281); then the optimizer steps (main.py:283), SGD adding the weight decay
  ``λ w`` to every gradient.

``clip = 1 - noise_rate`` (main.py:299), the same for every epoch: the linear ramp computed
just before it (main.py:294-298) is overwritten and never used. ``clip`` is both the fraction
kept and the factor of the kept gradients (main.py:311 passes it as both).

Here the rule runs in :meth:`CDR.on_before_optimizer_step`, where the gradients are final: after
the whole backward of the step (and of every accumulated batch), unscaled under 16-bit mixed
precision, and under DDP already averaged over the processes (DDP's all-reduce finishes within
the backward), so every process ranks the same gradients and computes the same mask, that of
one process with the global batch, with no communication of its own. It needs no host
synchronization: the threshold stays on the device (``kthvalue`` of the concatenated scores)
and each gradient is masked in place. In a warm-up (none by default) the step is plain CE.

With ``alpha != 0`` (CDR-VRNL) the backward is that of the VRNL objective ``mean(l) - alpha ·
Var(l)`` of the per-sample cross-entropies; the masking then acts on that gradient: the scores
are ``|w · ∂(mean - alpha Var)/∂w|``, so VRNL shapes the gradient first and CDR selects and
scales it after.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.losses import cross_entropy

CLIP_SOURCES = ("noise_rate",)
RANKED_DIMS = (2, 4)
"""Dimensions of the parameter tensors CDR ranks (reference main.py:266)."""


def ranked_parameters(params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
    """The parameters CDR ranks: the 2-D and 4-D ones (linear and convolution weights)."""
    return [p for p in params if p.requires_grad and p.dim() in RANKED_DIMS]


@torch.no_grad()
def critical_threshold(scores: list[Tensor], keep: int) -> Tensor:
    """The ``keep``-th highest of all ``scores`` (flattened together), a device scalar."""
    flat = torch.cat([s.reshape(-1) for s in scores])
    return torch.kthvalue(flat, flat.numel() - keep + 1).values


@torch.no_grad()
def mask_noncritical(params: Iterable[nn.Parameter], clip: float) -> None:
    """Reference rule on the gradients of ``params`` (those with a gradient, of 2 or 4
    dimensions): keep the ``int(clip · N)`` weights with the highest ``|w · g|`` over all of
    them (ties at the threshold kept), their gradient times ``clip``; the others' gradient 0.
    In place, without host synchronization."""
    ranked = [p for p in ranked_parameters(params) if p.grad is not None]
    if not ranked:
        return
    scores = [(p.detach().float() * p.grad.float()).abs() for p in ranked]
    total = sum(s.numel() for s in scores)
    keep = int(clip * total)
    if keep < 1:
        raise InputError(
            f"CDR keeps int(clip_rate * {total}) = 0 of the {total} ranked weights at clip "
            f"rate {clip:g}: give --model.clip_rate a larger value"
        )
    if keep >= total:  # every weight critical: only the factor clip applies
        if clip != 1.0:
            torch._foreach_mul_([p.grad for p in ranked], clip)
        return
    threshold = critical_threshold(scores, keep)
    for param, score in zip(ranked, scores, strict=True):
        factor = (score >= threshold).to(param.grad.dtype) * clip
        param.grad.mul_(factor)


class CDR(NoisyLabelMethod):
    """CDR: cross-entropy where only the critical weights (highest |w·∂L/∂w|) get the gradient,
    the others weight decay alone (Xia et al. 2021).

    Args:
        clip_rate: the reference's ``clip`` (main.py:299, 311): the fraction of the ranked
            weights kept as critical, and the factor of their gradients. ``noise_rate`` (the
            reference): ``1 - τ`` with ``τ`` the data's nominal noise rate (synthetic noise
            only: label files and real noise have none, so give a number); a number in
            ``(0, 1]``: that fraction (1: every weight critical, plain CE).
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(self, clip_rate: float | str = "noise_rate", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(clip_rate, str):
            if clip_rate not in CLIP_SOURCES:
                raise InputError(
                    f"--model.clip_rate must be a number in (0, 1] or one of {CLIP_SOURCES}, "
                    f"got {clip_rate!r}"
                )
            initial = 1.0
        else:
            initial = float(clip_rate)
            if not 0.0 < initial <= 1.0:
                raise InputError(f"--model.clip_rate must be in (0, 1], got {clip_rate}")
        self.clip_rate_source = clip_rate
        self.clip = initial  # the run's clip (set from the data's noise rate in setup)

    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return cross_entropy(logits, batch["label"])

    # ---------------------------------------------------------------- the clip rate
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            self.clip = self.resolve_clip()
            total = sum(p.numel() for p in ranked_parameters(self.net.parameters()))
            if total and int(self.clip * total) < 1:
                raise InputError(
                    f"--model.clip_rate: CDR would keep int({self.clip:g} * {total}) = 0 of the "
                    f"network's {total} ranked weights; give a larger clip rate"
                )
            rank_zero_info(f"CDR: clip rate {self.clip:g} (critical weights kept, and their scale)")

    def resolve_clip(self) -> float:
        """``clip``: the given number, or ``1 - τ`` of the data's nominal noise rate ``τ``."""
        if self.clip_rate_source != "noise_rate":
            return float(self.clip_rate_source)
        facts = self.data_facts()
        rate = None if facts is None else facts.rate_nominal
        if rate is None:
            noise = "unknown" if facts is None else facts.noise_type
            raise InputError(
                "--model.clip_rate noise_rate needs the data's nominal noise rate (CDR keeps "
                f"1 - noise_rate of the weights), which noise type {noise!r} does not have; "
                "pass --model.clip_rate with a number in (0, 1] (e.g. 1 minus the label file's "
                "known noise rate)"
            )
        clip = 1.0 - float(rate)
        if not 0.0 < clip <= 1.0:
            raise InputError(
                f"--model.clip_rate noise_rate: the data's noise rate {rate:g} gives clip rate "
                f"{clip:g}, outside (0, 1]; pass --model.clip_rate with a number"
            )
        return clip

    # ---------------------------------------------------------------- the masking
    def on_before_optimizer_step(self, optimizer: Any) -> None:
        """Mask the non-critical weights' gradients (module docstring), outside a warm-up."""
        if not self.in_warmup:
            mask_noncritical(self.net.parameters(), self.clip)
