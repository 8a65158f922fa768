"""The methods of the package, discovered: every concrete :class:`NoisyLabelMethod` subclass
defined in a module of :mod:`noisylabels.methods` is a method of the command line
(``--model NAME``), of ``noisylabels fit --model.help`` and of the test that trains every method
through the command line. Adding a method is adding a module with its class; a base class that
is not a method itself says so with ``abstract = True`` in its own body.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

from noisylabels.methods.core.base import NoisyLabelMethod

PACKAGE = "noisylabels.methods"


def registry() -> dict[str, type[NoisyLabelMethod]]:
    """Every method of the package by class name (sorted), importing all its modules first."""
    package = importlib.import_module(PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{PACKAGE}.{module.name}")
    found: dict[str, type[NoisyLabelMethod]] = {}
    pending = [NoisyLabelMethod]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if not cls.__module__.startswith(PACKAGE + ".") or vars(cls).get("abstract", False):
            continue
        if getattr(sys.modules.get(cls.__module__), cls.__name__, None) is not cls:
            continue  # a class of a module no longer loaded
        other = found.setdefault(cls.__name__, cls)
        if other is not cls:
            raise TypeError(
                f"two methods are named {cls.__name__}: {other.__module__} and {cls.__module__}"
            )
    return dict(sorted(found.items()))


def summary(cls: type) -> str:
    """The first paragraph of a class's docstring, on one line."""
    paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split())


def describe_methods() -> str:
    """One line per method: ``NAME  first docstring line``."""
    methods = registry()
    width = max(len(name) for name in methods)
    return "\n".join(f"{name:<{width}}  {summary(cls)}" for name, cls in methods.items())
