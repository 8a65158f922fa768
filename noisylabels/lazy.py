"""Names a package exports but imports on first use (PEP 562), so that importing the package
loads none of what its names need: the commands that train nothing (``--help``, a sweep's dry
run, ``report``) start without torch or Lightning. This module imports nothing of the package."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package ``package`` (its ``__name__``) whose
    names ``names`` maps each to the module defining it; a name is imported once, then kept in
    the package's namespace."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
