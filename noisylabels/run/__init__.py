"""One run, from the command line or from Python: fit, test, and everything a run records.

:func:`fit_and_test` is ``noisylabels fit``'s run (:mod:`noisylabels.run.fit`); the command line
is :mod:`noisylabels.run.cli`; composed config files :mod:`~noisylabels.run.compose`; the run
record, the only writer of a run folder :mod:`~noisylabels.run.record`, and what makes a run the
same experiment :mod:`~noisylabels.run.identity`; the best checkpoint
:mod:`~noisylabels.run.checkpoints`; the content of its noise and T̂ files
:mod:`~noisylabels.run.artifacts`; reading the checkpoint a run continues from
:mod:`~noisylabels.run.resume`; ``results.json`` :mod:`~noisylabels.run.results` and its
provenance :mod:`~noisylabels.run.provenance`; how a run stops on a signal and requeues itself on
SLURM :mod:`~noisylabels.run.stops`; atomic writes and a full disk
:mod:`~noisylabels.run.storage`.
"""

from noisylabels.run.artifacts import run_dir
from noisylabels.run.checkpoints import WarmupAwareCheckpoint
from noisylabels.run.fit import attach_callbacks, fit_and_test, run_callbacks
from noisylabels.run.record import RunRecorder
from noisylabels.run.results import build_results

__all__ = [
    "RunRecorder",
    "WarmupAwareCheckpoint",
    "attach_callbacks",
    "build_results",
    "fit_and_test",
    "run_callbacks",
    "run_dir",
]
