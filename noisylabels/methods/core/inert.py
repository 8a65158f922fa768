"""A method's own options are applied or refused, as the schedule's are: an option given a value
other than its default that the run would never use is refused before training.

A method lists the options its settings or the length of its own stage leave without effect in
:meth:`~noisylabels.methods.core.base.NoisyLabelMethod.inert_options`, each with the reason;
:func:`refuse_inert` refuses the first of those the run was given (a value other than the one
its ``__init__`` declares). Options at their defaults are never refused: a default is the
reference's value, which a shortened stage may leave unused (docs/methods.md says so).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from noisylabels.errors import InputError


def option_default(cls: type, name: str) -> Any:
    """The default of ``name`` in the ``__init__`` of the first class of ``cls``'s MRO that
    declares it; ``inspect.Parameter.empty`` where none does."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        parameter = inspect.signature(init).parameters.get(name)
        if parameter is not None and parameter.kind is not parameter.VAR_KEYWORD:
            return parameter.default
    return inspect.Parameter.empty


def _same(value: Any, default: Any) -> bool:
    """Whether an option's value is its default (a list and a tuple of the same items are)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if isinstance(default, Sequence) and not isinstance(default, str):
            return [_plain(v) for v in value] == [_plain(v) for v in default]
        return False
    return value == default


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else value


def text(value: Any) -> str:
    """An option's value as the command line writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ", ".join(text(v) for v in value) + "]"
    return str(value)


def given(method: Any, name: str) -> bool:
    """Whether the method's option ``name`` holds a value other than its declared default."""
    default = option_default(type(method), name)
    return default is not inspect.Parameter.empty and not _same(method.hparams[name], default)


def no_effect(option: str, value: Any, reason: str, default: Any, hint: str = "") -> InputError:
    """The refusal of ``option`` (as the command line names it) given ``value``, which the run
    would never use, for ``reason``: every option group's and method's refusal says it so."""
    return InputError(
        f"{option} {text(value)} would have no effect: {reason}. Leave it out (or at its "
        f"default, {text(default)}){hint}"
    )


def refuse_inert(method: Any, inert: list[tuple[str, str]]) -> None:
    """Raise :func:`no_effect` for the first ``(name, reason)`` of ``inert`` whose option was
    given a value other than its default."""
    for name, reason in inert:
        if given(method, name):
            default = option_default(type(method), name)
            raise no_effect(f"--model.{name}", method.hparams[name], reason, default)
