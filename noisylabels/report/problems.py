"""What makes a number of a ``results.json`` unbelievable: a run's :class:`Problem` (a metric
that is not a finite accuracy in [0, 1], a health other than ``"ok"``, fewer epochs than its
protocol's, results made with other options than its sweep's)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noisylabels.verdicts import NO_ACCURACY, OK, results_health

METRIC_PROBLEM = "metric"  # one metric's value (Problem.metric: a METRICS name, or "eps_t")
UNHEALTHY = "unhealthy"  # its health is not "ok" (--include-unhealthy admits it)
SHORT = "short"  # fewer epochs than its protocol's (--include-short admits it)
NOT_THE_SWEEPS = "sweep"  # a grid point's results made with other options than the sweep's
EPS_T = "eps_t"


@dataclass(frozen=True)
class Problem:
    """Why a run's number is not to be believed: ``kind`` (:data:`METRIC_PROBLEM` with the
    ``metric`` it concerns, :data:`UNHEALTHY`, :data:`SHORT`, :data:`NOT_THE_SWEEPS`) and the
    reason as a report lists it (``test_acc is nan``, ``health: collapsed: ...``)."""

    kind: str
    text: str
    metric: str | None = None

    def __str__(self) -> str:
        return self.text


def shown(value: Any, limit: int = 60) -> str:
    """A value of a results.json as a reason shows it: ``nan``, ``87.0``, ``"0.9"``, ``true``."""
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
        text = repr(value)
    else:
        text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(value: Any) -> bool:
    """A finite number (not a boolean; an integer of any size is finite)."""
    return _is_number(value) and not (isinstance(value, float) and not math.isfinite(value))


def accuracy(value: Any) -> float | None:
    """``value`` as an accuracy: a finite number in [0, 1] (a fraction), ``None`` otherwise
    (``NaN``, ``inf``, ``87.0``, ``-0.1``, a string, a boolean, ``None``)."""
    return float(value) if finite(value) and 0 <= value <= 1 else None


def metric_of(results: Mapping[str, Any], key: str) -> tuple[float | None, str | None]:
    """An accuracy of ``results`` and, where it is not one, why."""
    value = results.get(key)
    if value is None:
        return None, f"{key} is not recorded"
    if not _is_number(value):
        return None, f"{key} is {shown(value)}, not a number"
    if not finite(value):
        return None, f"{key} is {shown(value)}"
    if accuracy(value) is None:
        return None, f"{key} is {shown(value)}, outside [0, 1]"
    return float(value), None


def selection_problem(results: Mapping[str, Any]) -> str | None:
    """Why ``test_acc`` is no selected checkpoint's accuracy: the run records that it selected
    none (``best_epoch: null``; no validation data, or no validation epoch), so its
    ``test_acc`` is its last epoch's. ``None`` where it selected one, or where the record does
    not say (a record without ``best_epoch``)."""
    if "best_epoch" in results and results["best_epoch"] is None:
        return (
            "no checkpoint was selected (best_epoch is null: no validation data or no "
            "validation epoch), so its test_acc is the last epoch's"
        )
    return None


def eps_t_of(results: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """ε_T of ``results`` (a finite number ≥ 0) and, where it is not one, why."""
    value = results.get("t_estimation_error")
    if value is None:
        return None, "t_estimation_error is not recorded (the run's true T is not known)"
    if not _is_number(value):
        return None, f"t_estimation_error is {shown(value)}, not a number"
    if not finite(value) or value < 0:
        return None, f"t_estimation_error is {shown(value)}, not a finite number >= 0"
    return float(value), None


JUDGED = ("val_acc", "test_acc", "test_acc_last")  # what results_health reads


def _accuracy(value: Any) -> bool:
    return _is_number(value) and finite(value) and 0 <= value <= 1


def health_problems(results: Mapping[str, Any]) -> list[Problem]:
    """The run's ``health`` when it is not ``"ok"``; a run that records none (``null``, or no
    ``health``: written before runs recorded it, or edited) is judged by the rule its run would
    have applied (:func:`noisylabels.verdicts.results_health`), and its verdict, where not ok,
    is the problem."""
    health = results.get("health")
    if health is None:
        # judged on the accuracies that are accuracies (another value is a problem of its own)
        judged = {k: v for k, v in results.items() if k not in JUDGED or _accuracy(v)}
        verdict = results_health(judged)
        if verdict == OK or verdict == NO_ACCURACY:
            return []
        return [Problem(UNHEALTHY, f"health not recorded; judged from its accuracies: {verdict}")]
    if health == OK:
        return []
    if isinstance(health, str) and health.strip():
        return [Problem(UNHEALTHY, "health: " + " ".join(health.split()))]  # on one line
    return [Problem(UNHEALTHY, f'health: {shown(health)}, neither "ok" nor a reason')]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def protocol_problems(results: Mapping[str, Any]) -> list[Problem]:
    """A run that trained fewer ``epochs`` than its ``protocol_epochs`` (the epochs its config
    files plan); none where the protocol is not recorded."""
    planned, trained = results.get("protocol_epochs"), results.get("epochs")
    if planned is None:
        return []
    if not _whole(planned):
        text = f"protocol_epochs is {shown(planned)}, not a whole number"
    elif trained is None:
        text = f"its protocol plans {planned} epochs, and how many it trained is not recorded"
    elif not _whole(trained):
        text = f"epochs is {shown(trained)}, not a whole number (its protocol plans {planned})"
    elif trained < planned:
        text = f"short run: {trained} of its protocol's {planned} epochs"
    else:
        return []
    return [Problem(SHORT, text)]
