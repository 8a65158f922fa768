"""Observers of a run: per-subset loss statistics, every sample's training dynamics, the
transition-matrix monitor, the divergence stop, the stop of a run that no longer learns
(:class:`HealthMonitor`, with :func:`results_health` for finished runs) and a line per epoch.
They read what a training step hands out (its
:class:`~noisylabels.methods.core.step.StepOutput` records) and a method's public outputs (T̂),
never a method's insides; what a run records on disk is :mod:`noisylabels.run`'s, but for the
statistics' own ``subsets.csv`` and the warm-up's ``transition_trace.csv`` in the run folder
(:func:`~noisylabels.callbacks.folder.run_dir`).
"""

from noisylabels.callbacks.divergence import DivergenceGuard
from noisylabels.callbacks.dynamics import SampleDynamics
from noisylabels.callbacks.epoch_log import EpochLog
from noisylabels.callbacks.health import HealthMonitor, results_health
from noisylabels.callbacks.subsets import SubsetStatistics
from noisylabels.callbacks.tail_test import TailTest
from noisylabels.callbacks.transition_monitor import TransitionMonitor
from noisylabels.callbacks.transition_trace import TransitionTrace

__all__ = [
    "DivergenceGuard",
    "EpochLog",
    "HealthMonitor",
    "SampleDynamics",
    "SubsetStatistics",
    "TailTest",
    "TransitionMonitor",
    "TransitionTrace",
    "results_health",
]
