"""Callbacks: run artifacts and observability."""

from noisylabels.callbacks.artifacts import NoiseRecorder, run_dir
from noisylabels.callbacks.subsets import SubsetStatistics
from noisylabels.callbacks.transition import TransitionMonitor, WarmupAwareCheckpoint

__all__ = [
    "NoiseRecorder",
    "SubsetStatistics",
    "TransitionMonitor",
    "WarmupAwareCheckpoint",
    "run_dir",
]
