"""Several networks in one method (Co-teaching, MentorNet, Decoupling, ...).

:meth:`Networks.add_network` gives a method network ``k = 1, 2, ...`` beside ``self.net``
(network 0), built by the method's ``build_network``. Each network gets its own optimizer
(:meth:`~noisylabels.methods.optim.Optimization.configure_optimizers`), stepped once per batch by
the shared manual-optimization step, and its own noisy-validation and clean test accuracy,
logged as ``val/net{k}/acc`` and ``test/net{k}/acc`` (``test/net{k}/acc_last`` for the last
epoch's model); ``val/acc`` (model selection) and ``test/acc`` (``results.json``) stay those of
network 0.
"""

from __future__ import annotations

from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy


class Networks:
    """Mixin of :class:`~noisylabels.methods.base.NoisyLabelMethod` holding networks 1, 2, ...
    and their accuracies; :meth:`init_networks` must run in ``__init__`` after ``self.net``,
    ``self.val_acc`` and ``self.test_acc`` exist."""

    def init_networks(self) -> None:
        """Register the (empty) lists of further networks and of their accuracies."""
        self.peers = nn.ModuleList()
        self.peer_metrics = nn.ModuleList()

    def add_network(self) -> nn.Module:
        """Add network ``k = len(self.networks)``: a new :meth:`build_network` that the method
        trains beside ``self.net`` (network 0), with its own optimizer and accuracies. The
        method then optimizes manually; as the networks share no parameter, its objective may
        simply be the sum of the networks' objectives."""
        net = self.compile_network(self.build_network())
        self.peers.append(net)
        metrics = {
            stage: MulticlassAccuracy(self.num_classes, average="micro", validate_args=False)
            for stage in ("val", "test")
        }
        self.peer_metrics.append(nn.ModuleDict(metrics))
        self.automatic_optimization = False  # one optimizer per network
        return net

    @property
    def networks(self) -> list[nn.Module]:
        """The method's networks: ``self.net`` (network 0), then those of :meth:`add_network`."""
        return [self.net, *self.peers]

    def network_logits(self, images: Tensor, network: int = 0) -> Tensor:
        """Logits of network ``network`` (0: :meth:`forward`)."""
        if network == 0:
            return self(images)
        return self.peers[network - 1](self._network_input(images))

    def _accuracies(self, stage: str) -> list[MulticlassAccuracy]:
        first = self.val_acc if stage == "val" else self.test_acc
        return [first, *(metrics[stage] for metrics in self.peer_metrics)]

    def _log_accuracies(self, stage: str, prog_bar: bool = False) -> None:
        first = self.test_metric if stage == "test" else f"{stage}/acc"
        for k, accuracy in enumerate(self._accuracies(stage)):
            name = first if k == 0 else first.replace(f"{stage}/", f"{stage}/net{k}/", 1)
            self.log(name, accuracy.compute(), prog_bar=prog_bar and k == 0)
            accuracy.reset()
