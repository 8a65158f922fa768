"""Methods: one LightningModule each, all on :class:`NoisyLabelMethod` (VRNL via ``alpha``)."""

from noisylabels.methods.base import CE, NoisyLabelMethod
from noisylabels.methods.forward import Forward, TransitionMethod
from noisylabels.methods.reweight import Reweight
from noisylabels.methods.volminnet import VolMinNet
from noisylabels.methods.vrnl import VRNLOutput, vrnl_objective

__all__ = [
    "CE",
    "Forward",
    "NoisyLabelMethod",
    "Reweight",
    "TransitionMethod",
    "VolMinNet",
    "VRNLOutput",
    "vrnl_objective",
]
