"""docker/: the image installs this project and runs its console script; the SLURM example
matches the trainer flags it passes. (No Docker engine is needed: the files are parsed.)"""

from __future__ import annotations

import importlib
import json
import re
import shlex
from pathlib import PurePosixPath

import pytest
import yaml

from conftest import CONFIGS, REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

DOCKER = REPO / "docker"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def build_arg_defaults(steps: list[tuple[str, str]]) -> dict[str, str]:
    defaults = {}
    for keyword, args in steps:
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            defaults[name.strip()] = value.strip()
    return defaults


def simulate(steps: list[tuple[str, str]]) -> dict[str, object]:
    """Follow WORKDIR and COPY: which repository paths land where, and where ``pip install``
    runs."""
    workdir = PurePosixPath("/")
    copied: dict[PurePosixPath, str] = {}  # image path -> repository path
    installs: list[tuple[PurePosixPath, str]] = []
    for keyword, args in steps:
        if keyword == "WORKDIR":
            workdir = workdir / args
        elif keyword == "COPY":
            parts = [p for p in shlex.split(args) if not p.startswith("--")]
            *sources, dest = parts
            target = workdir / dest
            many = len(sources) > 1 or dest.endswith("/") or dest in (".", "./")
            for src in sources:
                name = PurePosixPath(src).name
                copied[target / name if many else target] = src
        elif keyword == "RUN":
            for match in re.finditer(r"pip install ((?:-\S+\s+)*)(\S+)", args):
                installs.append((workdir, match.group(2)))
    return {"workdir": workdir, "copied": copied, "installs": installs}


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return instructions((DOCKER / "Dockerfile").read_text())


def test_base_image_has_cuda(dockerfile) -> None:
    (base,) = [args for keyword, args in dockerfile if keyword == "FROM"]
    base = re.sub(r"\$\{?(\w+)\}?", lambda m: build_arg_defaults(dockerfile)[m.group(1)], base)
    assert "cuda" in base.lower(), base


def test_copied_files_exist_in_the_repository(dockerfile) -> None:
    for src in simulate(dockerfile)["copied"].values():
        assert (REPO / src).exists(), f"Dockerfile copies {src}, which the repository lacks"


def test_installs_this_project_with_its_package_and_readme(dockerfile) -> None:
    state = simulate(dockerfile)
    copied = state["copied"]
    assert state["installs"], "the Dockerfile never runs pip install"
    (where, target), *_ = state["installs"]
    root = where / target
    assert copied.get(root / "pyproject.toml") == "pyproject.toml"
    readme = PYPROJECT["project"].get("readme")
    if isinstance(readme, str):
        assert (root / readme) in copied, f"pyproject's readme {readme} is not copied"
    for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*").rstrip(".")
        assert copied.get(root / package) == package, f"package {package} is not copied"


def test_entrypoint_is_the_console_script(dockerfile) -> None:
    (entry,) = [args for keyword, args in dockerfile if keyword == "ENTRYPOINT"]
    command = json.loads(entry)  # exec form, so arguments of `docker run` are appended
    scripts = PYPROJECT["project"]["scripts"]
    assert command == ["noisylabels"] and "noisylabels" in scripts
    module, _, func = scripts["noisylabels"].partition(":")
    assert callable(getattr(importlib.import_module(module), func))


def test_volumes_match_the_configs_relative_paths(dockerfile) -> None:
    """Shipped configs say ``data_dir: data`` and their runs go to ``runs/...`` (the folder the
    code derives): relative to the final WORKDIR, which must hold them as volumes (and the
    configs)."""
    from noisylabels.compose import RUNS

    state = simulate(dockerfile)
    (volumes,) = [json.loads(args) for keyword, args in dockerfile if keyword == "VOLUME"]
    final = state["workdir"]
    assert {str(final / "data"), str(final / "runs")} <= set(volumes)
    assert state["copied"].get(final / "configs") == "configs"
    data = yaml.safe_load((CONFIGS / "data" / "cifar10.yaml").read_text())
    assert data["data"]["init_args"]["data_dir"] == "data"
    assert str(RUNS) == "runs"
    for config in sorted(CONFIGS.rglob("*.yaml")):
        root = (yaml.safe_load(config.read_text()).get("trainer") or {}).get("default_root_dir")
        assert root is None or root.startswith("runs/"), config


def test_slurm_example_matches_its_trainer_flags() -> None:
    script = (DOCKER / "slurm.sbatch").read_text()
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", script, flags=re.M))
    command = " ".join(
        line.rstrip("\\").strip() for line in script.splitlines() if not line.startswith("#")
    )
    assert re.search(r"\bsrun\b.*\bnoisylabels fit\b", command)
    flags = dict(re.findall(r"--(trainer\.\w+) (\S+)", command))
    assert flags["trainer.devices"] == sbatch["ntasks-per-node"] == sbatch["gpus-per-node"]
    assert flags["trainer.num_nodes"] == sbatch["nodes"]
    for config in re.findall(r"--config (\S+)", command):
        assert (REPO / config).is_file(), config
