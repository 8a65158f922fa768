"""A method's option groups: ``--model.network.*`` (:class:`NetworkOptions`),
``--model.schedule.*`` (:class:`StageSchedule`), ``--model.optim.*`` (:class:`OptimizerOptions`)
and ``--model.speed.*`` (:class:`SpeedOptions`), each a frozen
dataclass that declares, defaults, checks and documents its options. A method takes each group
as its dataclass or as a mapping of some of its options (a checkpoint's hyperparameters hold
them as mappings; a config nests them under ``model.init_args``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from noisylabels.errors import InputError
from noisylabels.methods.core.acceleration import SpeedOptions
from noisylabels.methods.core.networks import NetworkOptions
from noisylabels.methods.core.optim import OptimizerOptions
from noisylabels.methods.core.stages import StageSchedule

Group = TypeVar("Group")
OPTION_GROUPS: dict[str, type] = {
    "network": NetworkOptions,
    "schedule": StageSchedule,
    "optim": OptimizerOptions,
    "speed": SpeedOptions,
}
"""The option groups of every method by name, and their dataclasses."""


def option_group(name: str, value: Group | Mapping[str, Any]) -> Group:
    """The option group ``name`` as its dataclass (:data:`OPTION_GROUPS`): ``value`` itself, or
    the dataclass of a mapping of its options (the others at their defaults)."""
    cls = OPTION_GROUPS[name]
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise InputError(f"--model.{name} must be a {cls.__name__} or a mapping, got {value!r}")
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise InputError(
            f"--model.{name} has no option {unknown[0]!r}; its options: {', '.join(sorted(known))}"
        )
    return cls(**value)


def option_group_of(option: str) -> str | None:
    """The group that holds the method option ``option`` (``warmup_epochs``: ``schedule``), or
    ``None`` where no group has it."""
    for name, cls in OPTION_GROUPS.items():
        if option in {field.name for field in dataclasses.fields(cls)}:
            return name
    return None
