"""What ``noisylabels audit`` offers and writes: the scores, the defaults and the file names.

Plain names, in a module that loads neither torch nor Lightning, so that the command line
(:mod:`noisylabels.audit.cli`) answers ``--help`` and refuses a bad option at once; the scores
themselves are :mod:`noisylabels.audit.scores`.
"""

from __future__ import annotations

DYNAMICS_SCORES = ("margin", "loss", "weight")  # from the run's sample_dynamics.pt
SCORES = (*DYNAMICS_SCORES, "posterior")  # posterior: K-fold cross-validation
DEFAULT_SCORE = "margin"
DEFAULT_TOP = 24
DEFAULT_FOLDS = 5

CSV_FILE = "label_issues.csv"
GRID_FILE = "label_issues.png"
