"""Methods: one LightningModule each, all on :class:`NoisyLabelMethod` (VRNL via ``alpha``), with
its option groups :class:`NetworkOptions`, :class:`StageSchedule`, :class:`OptimizerOptions` and
:class:`SpeedOptions`.

``core/`` holds the machinery the methods share; ``transition.py`` the transition-matrix
family, ``selection.py`` the two-network family, then one small file per method.
:func:`registry` lists every method of the package (each concrete subclass defined in one of
its modules), which is what ``noisylabels fit --model.help`` prints and the tests train.
"""

from noisylabels.methods.apl import APL
from noisylabels.methods.backward import Backward
from noisylabels.methods.cal import CAL
from noisylabels.methods.cdr import CDR
from noisylabels.methods.ce import CE
from noisylabels.methods.core import (
    EpochStatistics,
    NetworkOptions,
    NoisyLabelMethod,
    OptimizerOptions,
    SpeedOptions,
    StageSchedule,
    StepOutput,
    VRNLOutput,
    describe_methods,
    registry,
    vrnl_objective,
)
from noisylabels.methods.cores import CORES
from noisylabels.methods.coteaching import CoTeaching
from noisylabels.methods.coteachingplus import CoTeachingPlus
from noisylabels.methods.decoupling import Decoupling
from noisylabels.methods.disc import DISC
from noisylabels.methods.dividemix import DivideMix
from noisylabels.methods.elr import ELR, ELRPlus
from noisylabels.methods.fdivergence import FDivergence
from noisylabels.methods.forward import Forward
from noisylabels.methods.gce import GCE
from noisylabels.methods.gls import GLS
from noisylabels.methods.jocor import JoCoR
from noisylabels.methods.mentornet import MentorNet
from noisylabels.methods.mixup import Mixup
from noisylabels.methods.peer import Peer
from noisylabels.methods.ptd import PTD
from noisylabels.methods.reweight import Reweight
from noisylabels.methods.sce import SCE
from noisylabels.methods.selection import SmallLossMethod, TwoNetworkMethod
from noisylabels.methods.sop import SOP, SOPPlus
from noisylabels.methods.transition import TransitionMethod
from noisylabels.methods.trevision import TRevision
from noisylabels.methods.volminnet import VolMinNet

__all__ = [
    "APL",
    "Backward",
    "CAL",
    "CDR",
    "CE",
    "CORES",
    "CoTeaching",
    "CoTeachingPlus",
    "Decoupling",
    "DISC",
    "DivideMix",
    "ELR",
    "ELRPlus",
    "EpochStatistics",
    "FDivergence",
    "Forward",
    "GCE",
    "GLS",
    "JoCoR",
    "MentorNet",
    "Mixup",
    "NetworkOptions",
    "NoisyLabelMethod",
    "OptimizerOptions",
    "PTD",
    "Peer",
    "Reweight",
    "SCE",
    "SmallLossMethod",
    "SOP",
    "SOPPlus",
    "SpeedOptions",
    "StageSchedule",
    "StepOutput",
    "TRevision",
    "TransitionMethod",
    "TwoNetworkMethod",
    "VolMinNet",
    "VRNLOutput",
    "describe_methods",
    "registry",
    "vrnl_objective",
]
