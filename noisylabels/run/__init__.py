"""One run, from the command line or from Python: fit, test, and everything a run records.

:func:`fit_and_test` is ``noisylabels fit``'s run (:mod:`noisylabels.run.fit`); the command line
is :mod:`noisylabels.run.cli`; composed config files :mod:`~noisylabels.run.compose`; the
checkpoints of a run :mod:`~noisylabels.run.checkpoints`, its noise and T̂ files
:mod:`~noisylabels.run.artifacts`, resuming :mod:`~noisylabels.run.resume`, ``results.json``
:mod:`~noisylabels.run.results` and its provenance :mod:`~noisylabels.run.provenance`; how a
run stops on a signal and requeues itself on SLURM :mod:`~noisylabels.run.stops`; atomic writes
and a full disk :mod:`~noisylabels.run.storage`.
"""

from noisylabels.run.artifacts import NoiseRecorder, run_dir, write_transition_estimate
from noisylabels.run.checkpoints import LastCheckpoint, WarmupAwareCheckpoint
from noisylabels.run.fit import attach_callbacks, fit_and_test, run_callbacks
from noisylabels.run.results import build_results, write_results

__all__ = [
    "LastCheckpoint",
    "NoiseRecorder",
    "WarmupAwareCheckpoint",
    "attach_callbacks",
    "build_results",
    "fit_and_test",
    "run_callbacks",
    "run_dir",
    "write_results",
    "write_transition_estimate",
]
