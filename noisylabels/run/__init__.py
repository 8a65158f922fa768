"""One run, from the command line or from Python: fit, test, and everything a run records.

:func:`fit_and_test` is ``noisylabels fit``'s run (:mod:`noisylabels.run.fit`); the command line
is :mod:`noisylabels.run.cli`; composed config files :mod:`~noisylabels.compose`; the run
record, the only writer of a run folder :mod:`~noisylabels.run.record`, and what makes a run the
same experiment :mod:`~noisylabels.run.identity`; the best checkpoint
:mod:`~noisylabels.run.checkpoints`; the content of its noise and T̂ files
:mod:`~noisylabels.run.artifacts`; reading the checkpoint a run continues from
:mod:`~noisylabels.run.resume`; ``results.json`` :mod:`~noisylabels.run.results` and its
provenance :mod:`~noisylabels.run.provenance`; how a run stops on a signal and requeues itself on
SLURM :mod:`~noisylabels.run.stops`; atomic writes and a full disk
:mod:`~noisylabels.disk.storage`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from noisylabels.lazy import exports

if TYPE_CHECKING:
    from noisylabels.run.artifacts import run_dir
    from noisylabels.run.checkpoints import WarmupAwareCheckpoint
    from noisylabels.run.fit import fit_and_test
    from noisylabels.run.plan import RunPlan, attach_callbacks, run_callbacks
    from noisylabels.run.record import RunRecorder
    from noisylabels.run.results import build_results
    from noisylabels.run.source import RunSource

# name -> the module defining it. The names are imported on first use (PEP 562), not with the
# package: every module of the package imports this file first, and the commands that need no
# training (a sweep's dry run, its hashes of commands) would otherwise load Lightning with it.
EXPORTS = {
    "RunRecorder": "noisylabels.run.record",
    "WarmupAwareCheckpoint": "noisylabels.run.checkpoints",
    "RunPlan": "noisylabels.run.plan",
    "RunSource": "noisylabels.run.source",
    "attach_callbacks": "noisylabels.run.plan",
    "build_results": "noisylabels.run.results",
    "fit_and_test": "noisylabels.run.fit",
    "run_callbacks": "noisylabels.run.plan",
    "run_dir": "noisylabels.run.artifacts",
}

__all__ = [
    "RunPlan",
    "RunRecorder",
    "RunSource",
    "WarmupAwareCheckpoint",
    "attach_callbacks",
    "build_results",
    "fit_and_test",
    "run_callbacks",
    "run_dir",
]


__getattr__, __dir__ = exports(__name__, EXPORTS)
