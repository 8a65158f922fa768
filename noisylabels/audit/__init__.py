"""Which training labels are wrong: ``noisylabels audit`` ranks a run's labels by how suspect
they are and writes ``label_issues.csv`` and an image grid of the most suspect ones.

The scores (:mod:`~noisylabels.audit.scores`) are the training dynamics every run records
(``sample_dynamics.pt``: the area under the margin, the mean loss, the mean VRNL weight) and
the out-of-sample posterior of K-fold cross-validation (:mod:`~noisylabels.audit.crossval`).
:func:`audit` audits a finished run folder (:mod:`~noisylabels.audit.run_folder` reads it),
:func:`fit_and_audit` trains one first; the command is :mod:`~noisylabels.audit.cli`.
"""

from noisylabels.audit.crossval import OutOfSample, cross_validate, stratified_folds
from noisylabels.audit.issues import CSV_FILE, GRID_FILE, LabelIssues, audit, fit_and_audit
from noisylabels.audit.scores import (
    DEFAULT_SCORE,
    DYNAMICS_SCORES,
    SCORES,
    Scored,
    auroc,
    dynamics_scores,
    flag_top,
    posterior_scores,
    quality,
    ranking,
)

__all__ = [
    "CSV_FILE",
    "DEFAULT_SCORE",
    "DYNAMICS_SCORES",
    "GRID_FILE",
    "SCORES",
    "LabelIssues",
    "OutOfSample",
    "Scored",
    "audit",
    "auroc",
    "cross_validate",
    "dynamics_scores",
    "fit_and_audit",
    "flag_top",
    "posterior_scores",
    "quality",
    "ranking",
    "stratified_folds",
]
