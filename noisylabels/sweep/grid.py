"""Sweep files: a grid of ``noisylabels fit`` runs written in YAML, expanded into named runs.

A sweep file names the configs every run composes, the axes of the grid (each value a config
file and/or options) and rules that add options where axis values meet::

    name: table1_mnist                # runs go to <root>/table1_mnist/<method>/<noise>/<seed>/
    base: [../data/mnist.yaml]        # configs every run composes first (optional)
    args: {data.data_dir: data}       # options of every run (optional)
    axes:                             # in folder order
      method:
        forward: {config: ../method/forward.yaml}   # or a list of files
        forward_vrnl: {config: ../method/forward_vrnl.yaml}
      noise:
        sym-0.2: {data.noise_type: symmetric, data.noise_rate: 0.2}
        pair-0.45: {data.noise_type: pair, data.noise_rate: 0.45}
      seed: {values: [0, 1, 2, 3, 4], options: [seed_everything, data.noise_seed]}
    rules:                            # options of the grid points that match every 'where'
      - where: {method: [forward_vrnl], noise: [pair-0.45]}
        args: {model.alpha: 0.01}

Config paths are relative to the sweep file. An axis written as ``{values, options}`` sets each
option to the value, and its folders are named ``<axis>-<value>`` (``seed-2``). Every run is
one ``noisylabels fit`` process with ``--trainer.default_root_dir`` set to its folder; a folder
holding a ``results.json`` of the run's command is a finished run, and a folder holding only a
``last.ckpt`` (a run that was stopped) is resumed from it (``--ckpt_path last``; see
:mod:`noisylabels.sweep.records` for runs done with other options). Launching is in
:mod:`noisylabels.sweep.launch`; the command line ``noisylabels sweep`` in
:mod:`noisylabels.sweep.cli`.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from noisylabels.compose import import_class, listed_files, read_composed, read_yaml
from noisylabels.errors import InputError, MissingFileError
from noisylabels.run.provenance import command_sha256
from noisylabels.run.resume import CHECKPOINT_FILE as LAST
from noisylabels.run.rules import RESULTS_FILE

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
CONFIG_KEY = "config"
RUN_FILE = "sweep_run.json"
LAST_CHECKPOINT = f"*/version_*/checkpoints/{LAST}"  # under the run's logger folder
SECTIONS = ("name", "base", "args", "axes", "rules")


@dataclass
class Run:
    """One grid point: its axis values, folder, configs and options."""

    point: dict[str, str]
    folder: Path
    configs: list[Path] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The grid point as a path: ``forward_vrnl/pair-0.45/seed-2``."""
        return "/".join(self.point.values())

    def is_done(self) -> bool:
        """Whether a ``results.json`` exists under the run's folder (a finished run)."""
        return self.folder.is_dir() and any(self.folder.rglob(RESULTS_FILE))

    def partial_checkpoint(self) -> Path | None:
        """The ``last.ckpt`` of an unfinished run in the run's folder (the newest, where several
        were started), which a new attempt resumes from; ``None`` for a finished or new run."""
        if not self.folder.is_dir() or self.is_done():
            return None
        found = sorted(self.folder.glob(LAST_CHECKPOINT), key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None

    def fit_args(self, extra: Iterable[str] = (), resume: bool | None = None) -> list[str]:
        """The arguments of ``noisylabels fit`` for this run: configs first, then options,
        no progress bar (its output goes to a log file), ``extra``, the run's folder, and
        ``--ckpt_path last`` where ``resume`` (``None``: where the folder holds a stopped run's
        ``last.ckpt``; the sweep decides with :func:`noisylabels.sweep.records.run_state`)."""
        argv = ["fit"]
        for config in self.configs:
            argv += ["--config", display_path(config)]
        for key, value in self.args.items():
            argv += [f"--{key}", format_value(value)]
        argv += ["--trainer.enable_progress_bar", "false", *extra]
        argv += ["--trainer.default_root_dir", display_path(self.folder)]
        if resume is None:
            resume = self.partial_checkpoint() is not None
        if resume:  # a stopped run goes on where it stopped
            argv += ["--ckpt_path", "last"]
        return argv

    def command_sha256(self, extra: Iterable[str] = ()) -> str:
        """The hash of this run's command (:func:`noisylabels.run.provenance.command_sha256`),
        which its ``results.json`` records: equal for runs of the same options."""
        return command_sha256(self.fit_args(extra, resume=False))


@dataclass
class Sweep:
    """A parsed sweep file and its expanded runs."""

    name: str
    path: Path
    root: Path
    axes: dict[str, list[str]]
    runs: list[Run]

    @property
    def folder(self) -> Path:
        return self.root / self.name


def display_path(path: Path) -> str:
    """``path`` relative to the working directory where it lies below it, else absolute."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def format_value(value: Any) -> str:
    """A YAML value as a command-line value: ``true``, ``0.01``, ``[50, 80]``, ``null``."""
    if isinstance(value, str):
        return value
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def _entry(path: Path, where: str, value: Any) -> tuple[list[Path], dict[str, Any]]:
    """An axis value's (or the base's) configs and options."""
    if value is None:
        return [], {}
    if not isinstance(value, Mapping):
        raise InputError(f"{path}: {where} must be a mapping of options (and '{CONFIG_KEY}')")
    options = dict(value)
    for key in options:
        if not isinstance(key, str) or key.startswith("-"):
            raise InputError(f"{path}: {where}: option {key!r} is written without dashes")
    configs = listed_files(path, options.pop(CONFIG_KEY, []), f"{where}: '{CONFIG_KEY}'")
    return [c.resolve() for c in configs], options


def _axis(path: Path, axis: str, spec: Any) -> dict[str, tuple[list[Path], dict[str, Any]]]:
    """The values of one axis: name -> (configs, options)."""
    if isinstance(spec, Mapping) and "values" in spec:
        options = spec.get("options")
        options = [options] if isinstance(options, str) else options
        values = spec["values"]
        if not options or not isinstance(values, list) or not values:
            raise InputError(
                f"{path}: axis {axis!r} with 'values' needs a non-empty list of values and "
                "'options' (the option, or list of options, each value sets)"
            )
        entries = {f"{axis}-{format_value(v)}": ([], {o: v for o in options}) for v in values}
    elif isinstance(spec, Mapping) and spec:
        entries = {str(n): _entry(path, f"axis {axis!r}, value {n!r}", v) for n, v in spec.items()}
    else:
        raise InputError(
            f"{path}: axis {axis!r} must map value names to options, or be "
            "{values: [...], options: ...}"
        )
    for name in entries:
        if not NAME.match(name):
            raise InputError(
                f"{path}: axis {axis!r} value {name!r} is not a folder name (letters, digits, "
                "'.', '_', '+', '-')"
            )
    return entries


def _value_name(axes: Mapping[str, Any], axis: str, value: str) -> str:
    """A value of ``axis`` by its name, or bare for a ``values`` axis (``2`` for ``seed-2``)."""
    names = axes.get(axis, {})
    return f"{axis}-{value}" if value not in names and f"{axis}-{value}" in names else value


def _matches(point: Mapping[str, str], where: Mapping[str, list[str]]) -> bool:
    return all(point[axis] in wanted for axis, wanted in where.items())


def _check_where(
    path: Path, where: Any, axes: Mapping[str, Any], what: str
) -> dict[str, list[str]]:
    """``where`` (axis -> value name(s); a ``values`` axis's values may be bare) checked
    against the axes, as axis -> list of value names."""
    if not isinstance(where, Mapping) or not where:
        raise InputError(f"{path}: {what} needs 'where': a mapping of axis -> value(s)")
    checked = {}
    for axis, wanted in where.items():
        if axis not in axes:
            raise InputError(f"{path}: {what} names axis {axis!r}; axes: {', '.join(axes)}")
        wanted = wanted if isinstance(wanted, list) else [wanted]
        names = [_value_name(axes, axis, str(w)) for w in wanted]
        unknown = [n for n in names if n not in axes[axis]]
        if unknown:
            raise InputError(
                f"{path}: {what} names {axis} value(s) {', '.join(unknown)}; "
                f"values: {', '.join(axes[axis])}"
            )
        checked[axis] = names
    return checked


def load_sweep(
    path: str | Path, root: str | Path = "runs", where: Mapping[str, list[str]] | None = None
) -> Sweep:
    """Parse the sweep file at ``path`` and expand its grid (in axis order) into runs under
    ``root/<name>/``; ``where`` keeps the runs whose axis values are listed (``{axis: [values]}``).
    Raises :class:`~noisylabels.errors.InputError` naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"sweep file {path} does not exist (e.g. configs/sweeps/*.yaml)")
    content = read_yaml(path, "sweep file")
    if not isinstance(content, Mapping):
        raise InputError(f"{path}: a sweep file is a mapping with {', '.join(SECTIONS)}")
    unknown = sorted(set(content) - set(SECTIONS))
    if unknown:
        raise InputError(f"{path}: unknown section(s) {', '.join(unknown)}; sections: {SECTIONS}")
    name = str(content.get("name") or path.stem)
    if not NAME.match(name):
        raise InputError(f"{path}: name {name!r} is not a folder name")
    base = content.get("base") or []
    base_configs, _ = _entry(path, "base", {CONFIG_KEY: base})
    _, base_args = _entry(path, "args", content.get("args"))
    raw_axes = content.get("axes")
    if not isinstance(raw_axes, Mapping) or not raw_axes:
        raise InputError(f"{path}: 'axes' must map each axis name to its values")
    axes = {str(a): _axis(path, str(a), spec) for a, spec in raw_axes.items()}
    rules = content.get("rules") or []
    if not isinstance(rules, list):
        raise InputError(f"{path}: 'rules' must be a list of {{where, args}}")
    checked_rules = []
    for i, rule in enumerate(rules):
        rule = rule if isinstance(rule, Mapping) else {}
        rule_where = _check_where(path, rule.get("where"), axes, f"rule {i + 1}")
        if not isinstance(rule.get("args"), Mapping):
            raise InputError(f"{path}: rule {i + 1} needs 'args': the options it sets")
        checked_rules.append((rule_where, dict(rule["args"])))
    where = _check_where(path, where, axes, "--where") if where else {}
    root = Path(root)
    runs = []
    for values in itertools.product(*(entries.items() for entries in axes.values())):
        point = {axis: value_name for axis, (value_name, _) in zip(axes, values, strict=True)}
        if where and not _matches(point, where):
            continue
        configs, args = list(base_configs), dict(base_args)
        for _, (value_configs, value_args) in values:
            configs += value_configs
            args.update(value_args)
        for rule_where, rule_args in checked_rules:
            if _matches(point, rule_where):
                args.update(rule_args)
        folder = root.joinpath(name, *point.values())
        runs.append(Run(point=point, folder=folder, configs=configs, args=args))
    axis_names = {axis: list(entries) for axis, entries in axes.items()}
    return Sweep(name=name, path=path, root=root, axes=axis_names, runs=runs)


# ------------------------------------------------------------------------ what runs name
def _class_path(run: Run, section: str, cache: dict[Path, list] | None = None) -> str | None:
    """The ``model``/``data`` class a run names (its configs, then its options; last wins);
    ``cache`` keeps each config file's composed content across runs."""
    found = None
    cache = {} if cache is None else cache
    for config in run.configs:
        if config not in cache:
            cache[config] = read_composed(config)
        for _, content, _ in cache[config]:
            value = (content or {}).get(section) if isinstance(content, Mapping) else None
            if isinstance(value, Mapping) and value.get("class_path"):
                found = value["class_path"]
            elif isinstance(value, str):
                found = value
    for key in (section, f"{section}.class_path"):
        if isinstance(run.args.get(key), str):
            found = run.args[key]
    return found


def _available(package: str, base: type) -> list[str]:
    module = importlib.import_module(package)
    return sorted(
        n for n, obj in vars(module).items() if inspect.isclass(obj) and issubclass(obj, base)
    )


def _resolve_class(name: str, package: str, base: type) -> type | None:
    obj = import_class(name, package)
    return obj if inspect.isclass(obj) and issubclass(obj, base) else None


def check_classes(sweep: Sweep) -> None:
    """Fail before anything runs where a run names a method or dataset this project lacks,
    naming it, the run and the classes that exist."""
    # start-up time: the methods and datasets load torch and Lightning, which expanding a
    # sweep and its dry run do without
    from noisylabels.data import NoisyDataModule
    from noisylabels.methods import NoisyLabelMethod

    kinds = {
        "model": ("method", "noisylabels.methods", NoisyLabelMethod),
        "data": ("dataset", "noisylabels.data", NoisyDataModule),
    }
    seen: dict[tuple[str, str | None], bool] = {}
    composed: dict[Path, list] = {}
    for run in sweep.runs:
        for section, (what, package, base) in kinds.items():
            name = _class_path(run, section, composed)
            if (section, name) not in seen:
                seen[(section, name)] = name is not None and bool(
                    _resolve_class(name, package, base)
                )
            if seen[(section, name)]:
                continue
            have = ", ".join(_available(package, base))
            said = f"names {what} {name!r}" if name else f"names no {what} ({section}.class_path)"
            raise InputError(
                f"sweep {sweep.name}: run {run.name} {said}, which this project does not have; "
                f"{what}s here: {have}"
            )
