"""The machinery every method shares, none of it a method: the base LightningModule, the VRNL
objective, the typed step record, the option groups (network, stage schedule, optimizer, speed),
optimization, networks, acceleration, what DDP needs beyond Lightning (distributed), losses and
the method registry."""

from noisylabels.methods.core.acceleration import SpeedOptions
from noisylabels.methods.core.base import NoisyLabelMethod
from noisylabels.methods.core.networks import NetworkOptions
from noisylabels.methods.core.optim import OptimizerOptions
from noisylabels.methods.core.registry import describe_methods, registry
from noisylabels.methods.core.stages import StageSchedule
from noisylabels.methods.core.step import EpochStatistics, StepOutput
from noisylabels.methods.core.vrnl import VRNLOutput, vrnl_objective

__all__ = [
    "EpochStatistics",
    "NetworkOptions",
    "NoisyLabelMethod",
    "OptimizerOptions",
    "SpeedOptions",
    "StageSchedule",
    "StepOutput",
    "VRNLOutput",
    "describe_methods",
    "registry",
    "vrnl_objective",
]
