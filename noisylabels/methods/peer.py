"""Peer loss (Liu & Guo, "Peer Loss Functions: Learning from Noisy Labels without Knowing Noise
Rates", ICML 2020).

Per-sample loss ``l_i = CE(f(x_i), y~_i) - α_peer · CE(f(x_{p1(i)}), y~_{p2(i)})``: the loss of
the sample minus that of a *peer*, the output of a randomly drawn sample ``p1(i)`` scored
against the label of another, independently drawn sample ``p2(i)``. In expectation the peer
term is the loss under labels independent of the inputs, so subtracting it removes what a
classifier gains by following the noisy labels' marginal rather than the inputs (Liu & Guo,
Theorem 1 for the binary case; the reference code's multi-class version).

Peers are drawn within the step's batch: ``p1`` and ``p2`` are two independent random
permutations of the batch (each sample is once a peer output and once a peer label), from a
generator seeded by the run's seed and the step, so a resumed run draws the same peers. Under
DDP with the global variance scope the batch is the global one (every process's logits, with
gradient, and labels;
:func:`~noisylabels.methods.core.distributed.gather_rows_with_grad`), so a step draws the
peers one process with the global batch draws. The reference draws peer outputs and peer labels
from two further batches of a separate shuffled loader over the training set; the batch is such
a sample too, at no extra forward pass.

``α_peer`` is constant (``peer_alpha``), or follows the reference's per-epoch plan
(``peer_alpha_segments``: pieces ``(epochs, first, last)`` of a piecewise-linear schedule,
each ``linspace(first, last, epochs)`` as the reference builds it, over the epochs of the
method's own stage; the last value after the last piece). Both cross-entropies are the
reference's ``-log(p_y + 1e-5)``, which bounds the peer term; ``l_i`` can be negative.

With ``alpha != 0`` (Peer-VRNL) the variance is that of the per-sample peer losses ``l_i``
above, the values whose mean the base method minimizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from noisylabels.errors import InputError
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.distributed import gather_batch, gather_rows_with_grad

EPS = 1e-5
"""Added to the softmax inside both cross-entropies (the reference's "stable" cross-entropy): it
bounds each at ``-log(1e-5) ≈ 11.5``, so the peer loss is bounded below."""


def stable_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """``-log(softmax(z)_y + 1e-5)`` per sample, float32."""
    probs = F.softmax(logits.float(), dim=1)
    return -torch.log(probs.gather(1, labels.unsqueeze(1)).squeeze(1) + EPS)


def peer_loss(
    logits: Tensor, labels: Tensor, peer_logits: Tensor, peer_labels: Tensor, peer_alpha: Tensor
) -> Tensor:
    """``CE(z_i, y_i) - α_peer · CE(z'_i, y'_i)`` per sample (Liu & Guo 2020), each CE
    :func:`stable_cross_entropy`, float32."""
    own = stable_cross_entropy(logits, labels)
    return own - peer_alpha * stable_cross_entropy(peer_logits, peer_labels)


def alpha_schedule(segments: Sequence[Sequence[float]], epoch: int) -> float:
    """``α_peer`` of the method stage's epoch ``epoch`` (from 0) for the pieces ``(epochs,
    first, last)``: ``linspace(first, last, epochs)`` concatenated (the reference's plan), the
    last value after the end."""
    values: list[float] = []
    for count, first, last in segments:
        count = int(count)
        step = (last - first) / (count - 1) if count > 1 else 0.0
        values.extend(first + step * t for t in range(count))
    if not values:
        return 0.0
    return values[min(max(epoch, 0), len(values) - 1)]


def draw_random_peers(
    method: NoisyLabelMethod, logits: Tensor, labels: Tensor
) -> tuple[Tensor, Tensor]:
    """Peer outputs (with gradient) and peer labels of this process's samples: rows of two
    independent random permutations of the (global, under DDP with ``method``'s global variance
    scope) batch. The draw depends on the run's seed, ``method``'s step and the global batch's
    size, not on how it is split over processes (Peer loss, f-divergence)."""
    size, rank = method.batch_world()
    n = len(labels)
    capacity = method.batch_capacity(n)
    if size > 1:
        all_logits = gather_rows_with_grad(logits, capacity)
        all_labels, valid = gather_batch(labels.float()[None], capacity)
        all_labels = all_labels[0].long()
    else:
        all_logits = torch.cat([logits, logits.new_zeros(capacity - n, logits.shape[1])])
        all_labels = torch.cat([labels, labels.new_zeros(capacity - n)])
        valid = torch.arange(capacity, device=labels.device) < n
    seed = (torch.initial_seed() * 1_000_003 + method.global_step) % 2**63
    gen = torch.Generator().manual_seed(seed)
    keys = torch.rand(2, len(valid), generator=gen).to(valid.device)
    keys = torch.where(valid, keys, torch.inf)  # padding sorts last
    first, second = keys.argsort(dim=1)  # random permutations of the valid positions
    own = torch.arange(n, device=labels.device) * size + rank
    return all_logits[first[own]], all_labels[second[own]]


class Peer(NoisyLabelMethod):
    """Peer loss: the sample's CE minus ``α_peer`` times a random peer's (Liu & Guo 2020).

    Args:
        peer_alpha: the weight ``α_peer`` of the peer term where ``peer_alpha_segments`` is
            not given (1: the unweighted peer loss of the paper).
        peer_alpha_segments: the reference's per-epoch plan of ``α_peer``: a list of pieces
            ``[epochs, first, last]``, each ``linspace(first, last, epochs)``, over the epochs
            of the method's own stage (the last value after the last piece); null: constant
            ``peer_alpha``.
        **kwargs: see :class:`~noisylabels.methods.core.base.NoisyLabelMethod`.
    """

    def __init__(
        self,
        peer_alpha: float = 1.0,
        peer_alpha_segments: list[tuple[int, float, float]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not peer_alpha >= 0:
            raise InputError(f"--model.peer_alpha must be >= 0, got {peer_alpha}")
        for piece in peer_alpha_segments or []:
            if len(piece) != 3 or int(piece[0]) < 1 or min(piece[1], piece[2]) < 0:
                raise InputError(
                    "--model.peer_alpha_segments takes pieces [epochs, first, last] with "
                    f"epochs >= 1 and alpha values >= 0, got {list(piece)}"
                )
        self.peer_alpha = float(peer_alpha)
        self.peer_alpha_segments = [tuple(p) for p in peer_alpha_segments or []]

    def val_loss_changes(self) -> str | None:
        """``peer_alpha_segments`` weights the peer term by the epoch."""
        if not self.peer_alpha_segments:
            return None
        epochs = range(int(self.schedule.main_epochs))
        if len({alpha_schedule(self.peer_alpha_segments, e) for e in epochs}) > 1:
            return (
                "its peer term's weight α_peer changes over the epochs "
                "(--model.peer_alpha_segments)"
            )
        return None

    def inert_options(self) -> list[tuple[str, str]]:
        """``peer_alpha`` where ``peer_alpha_segments`` gives every epoch's ``α_peer``."""
        inert = super().inert_options()
        if self.peer_alpha_segments:
            inert.append(("peer_alpha", "peer_alpha_segments gives α_peer of every epoch"))
        return inert

    # ---------------------------------------------------------------- α_peer
    def current_peer_alpha(self) -> float:
        """``α_peer`` of the current epoch."""
        if not self.peer_alpha_segments:
            return self.peer_alpha
        epoch = self.current_epoch - self.warmup_length() if self._trainer is not None else 0
        return alpha_schedule(self.peer_alpha_segments, epoch)

    # ---------------------------------------------------------------- the peers
    def draw_peers(self, logits: Tensor, labels: Tensor) -> dict[str, Tensor]:
        """Peer outputs (with gradient) and peer labels of this process's samples
        (:func:`draw_random_peers`)."""
        peer_logits, peer_labels = draw_random_peers(self, logits, labels)
        return {"peer_logits": peer_logits, "peer_label": peer_labels}

    # ---------------------------------------------------------------- the loss
    def per_sample_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The peer loss of each sample; a batch without drawn peers (validation) pairs
        sample ``i`` with the output of sample ``i + 1`` and the label of sample ``i + 2``."""
        labels = batch["label"]
        peer_logits = batch.get("peer_logits")
        peer_labels = batch.get("peer_label")
        if peer_logits is None or peer_labels is None:
            peer_logits, peer_labels = logits.roll(-1, 0), labels.roll(-2, 0)
        alpha = batch.get("peer_alpha")
        if alpha is None:
            alpha = torch.tensor(self.current_peer_alpha(), device=logits.device)
        return peer_loss(logits, labels, peer_logits, peer_labels, alpha)

    def training_objective(self, batch: dict[str, Tensor]) -> Tensor:
        """The VRNL objective of the per-sample peer losses (plain CE in a warm-up)."""
        logits = self(batch["image"])
        if self.in_warmup:
            return self.vrnl(self.stage_loss_fn(logits, batch), logits, batch)
        alpha = torch.tensor(self.current_peer_alpha(), device=logits.device)
        peers = {**self.draw_peers(logits, batch["label"]), "peer_alpha": alpha}
        return self.vrnl(self.stage_loss_fn(logits, {**batch, **peers}), logits, batch)

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        if not self.in_warmup:
            self.log("train/peer_alpha", self.current_peer_alpha())
