"""The rule that says whether a finished run learned, read from its ``results.json`` alone: the
same rule the run's :class:`~noisylabels.callbacks.HealthMonitor` applies while it trains, for
the runs that recorded no verdict (older ones, or a file edited since). ``report`` judges such a
run with it; this module imports nothing of the package, so a report loads no training code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MARGIN = 0.02
"""Accuracy above chance (absolute, as a fraction) that a learning run exceeds. Small on purpose:
a network that learned nothing scores at most chance, while a learning one at the highest noise
the label checks allow (symmetric noise just below (C-1)/C) may score little above it."""
OK = "ok"
NO_ACCURACY = "unknown: no accuracy recorded"

NUM_CLASSES = {"mnist": 10, "digits": 10, "cifar10": 10, "cifar100": 100, "clothing1m": 14}
"""Classes of the datasets a ``results.json`` names (``dataset``); others are unknown."""


def results_health(results: Mapping[str, Any], margin: float = MARGIN) -> str:
    """Judge a finished run's ``results.json`` (a dict as it is recorded): ``"ok"``,
    ``"collapsed: ..."`` where an accuracy it records is at or below chance + ``margin``, or
    ``"unknown: ..."`` where the number of classes of its ``dataset`` is not known (mnist,
    digits, cifar10: 10; cifar100: 100; clothing1m: 14) or it records no accuracy.

    Chance is ``1/C`` (the labels are not in the file). The accuracies judged, in this order:
    ``val_acc`` (the selected checkpoint's on the validation split, noisy unless the run
    validated on clean labels), ``test_acc`` (its clean test accuracy) and ``test_acc_last``
    (the last epoch's).
    """
    dataset = str(results.get("dataset", "")).lower()
    classes = NUM_CLASSES.get(dataset)
    if classes is None:
        return f"unknown: the number of classes of dataset {dataset or '(none)'!r} is not known"
    chance = 1.0 / classes
    fields = (
        ("val_acc", "validation accuracy of the selected checkpoint"),
        ("test_acc", "clean test accuracy of the selected checkpoint"),
        ("test_acc_last", "clean test accuracy of the last epoch"),
    )
    judged = 0
    for key, what in fields:
        value = results.get(key)
        if value is None:
            continue
        judged += 1
        if not math.isfinite(float(value)) or float(value) <= chance + margin:
            return (
                f"collapsed: {what} ({key}) {float(value):.3f} at chance (1/C = {chance:.3f} "
                f"for {classes} classes, + margin {margin:g})"
            )
    return OK if judged else NO_ACCURACY
