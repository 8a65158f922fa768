"""Methods: one LightningModule each, all on :class:`NoisyLabelMethod` (VRNL via ``alpha``)."""

from noisylabels.methods.base import NoisyLabelMethod
from noisylabels.methods.ce import CE
from noisylabels.methods.forward import Forward
from noisylabels.methods.reweight import Reweight
from noisylabels.methods.step import EpochStatistics, StepOutput
from noisylabels.methods.transition import TransitionMethod
from noisylabels.methods.volminnet import VolMinNet
from noisylabels.methods.vrnl import VRNLOutput, vrnl_objective

__all__ = [
    "CE",
    "EpochStatistics",
    "Forward",
    "NoisyLabelMethod",
    "Reweight",
    "StepOutput",
    "TransitionMethod",
    "VolMinNet",
    "VRNLOutput",
    "vrnl_objective",
]
