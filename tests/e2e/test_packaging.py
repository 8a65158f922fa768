"""The package's metadata builds without setuptools' deprecation warnings: the licence is an
SPDX expression, which the build-system's setuptools floor accepts."""

from __future__ import annotations

import re
import sys
import warnings

from conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PYPROJECT = REPO / "pyproject.toml"


def test_the_license_is_an_spdx_expression_setuptools_accepts() -> None:
    content = tomllib.loads(PYPROJECT.read_text())
    assert content["project"]["license"] == "MIT"
    (requirement,) = [r for r in content["build-system"]["requires"] if "setuptools" in r]
    floor = re.search(r">=\s*(\d+)", requirement)
    assert floor is not None and int(floor.group(1)) >= 77  # the first to take the string form


def test_applying_the_metadata_warns_of_nothing() -> None:
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), str(PYPROJECT))
    assert [str(w.message) for w in caught] == []
    assert dist.metadata.license_expression == "MIT"
