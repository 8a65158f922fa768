"""Callbacks: run artifacts, model selection and observability."""

from noisylabels.callbacks.artifacts import NoiseRecorder, run_dir
from noisylabels.callbacks.checkpoint import WarmupAwareCheckpoint
from noisylabels.callbacks.divergence import DivergenceGuard
from noisylabels.callbacks.last import LastCheckpoint
from noisylabels.callbacks.subsets import SubsetStatistics
from noisylabels.callbacks.transition import TransitionMonitor, write_transition_estimate

__all__ = [
    "DivergenceGuard",
    "LastCheckpoint",
    "NoiseRecorder",
    "SubsetStatistics",
    "TransitionMonitor",
    "WarmupAwareCheckpoint",
    "run_dir",
    "write_transition_estimate",
]
