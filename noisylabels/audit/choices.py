"""What ``noisylabels audit`` offers and writes: the scores, the defaults and the file names.

Plain names, in a module that loads neither torch nor Lightning, so that the command line
(:mod:`noisylabels.audit.cli`) answers ``--help`` and refuses a bad option at once; the scores
themselves are :mod:`noisylabels.audit.scores`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

DYNAMICS_SCORES = ("margin", "loss", "weight")  # from the run's sample_dynamics.pt
SCORES = (*DYNAMICS_SCORES, "posterior")  # posterior: K-fold cross-validation
DEFAULT_SCORE = "margin"
DEFAULT_TOP = 24
DEFAULT_FOLDS = 5

CSV_FILE = "label_issues.csv"
GRID_FILE = "label_issues.png"
SUFFIX_MAX = 80  # characters of the classes in a file name, beyond which a hash stands for them


def classes_suffix(classes: Sequence[str]) -> str:
    """The part of a file name that says which classes an audit kept: their names joined with
    ``+`` (``cat+emu``; characters other than letters, digits, ``.``, ``_``, ``-`` as ``_``),
    or, for a long list, their count and a hash (``12classes-3f2a9c01``)."""
    names = [re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)) or "_" for name in classes]
    joined = "+".join(names)
    if len(joined) <= SUFFIX_MAX:
        return joined
    digest = hashlib.sha256("\n".join(map(str, classes)).encode()).hexdigest()[:8]
    return f"{len(names)}classes-{digest}"


def issue_files(classes: Sequence[str] | None) -> tuple[str, str]:
    """The names of the ranking and the image grid of an audit: ``label_issues.csv`` and
    ``label_issues.png`` for every class; ``label_issues_<classes>.csv``/``.png`` for an audit
    of some classes (``--classes``), so that it never overwrites the full ranking."""
    if not classes:
        return CSV_FILE, GRID_FILE
    suffix = classes_suffix(classes)
    stem, grid_stem = CSV_FILE.removesuffix(".csv"), GRID_FILE.removesuffix(".png")
    return f"{stem}_{suffix}.csv", f"{grid_stem}_{suffix}.png"
