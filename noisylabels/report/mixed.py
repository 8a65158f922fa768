"""Cells that average unlike runs: a report warns where the runs of one cell differ in more
than their seed (e.g. a trial sweep's short runs beside the real ones)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from noisylabels.report.collect import Record

CELL_OPTIONS_IGNORED = (
    "seed_everything",
    "data.init_args.noise_seed",
    "data.init_args.data_dir",
    "trainer.default_root_dir",
    "trainer.enable_progress_bar",
    "ckpt_path",
    "config",
)


# what only a VRNL run uses (α and how its variance is taken and warned of): the options a
# paired X-VRNL run may differ from its X run in
PAIR_OPTIONS_IGNORED = (
    *CELL_OPTIONS_IGNORED,
    "model.init_args.alpha",
    "model.init_args.variance_scope",
    "model.init_args.vrnl_form",
    "model.init_args.weight_warning",
)


def _flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """A config as ``{"model.init_args.lr": "0.01", ...}`` (leaves and lists as JSON)."""
    if isinstance(node, Mapping) and node:
        out: dict[str, str] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: json.dumps(node, sort_keys=True, default=str)} if prefix else {}


def mixed_cells(records: Iterable[Record], rows: Sequence[str], cols: Sequence[str]) -> list[str]:
    """One line per cell whose runs differ in more than their seed: the options of their
    ``config.yaml`` files (those all of them have; the seeds and the run and data folders left
    out) that take several values, each with the seeds that have it; e.g. a trial's runs with
    fewer epochs beside the real ones."""
    cells: dict[tuple[tuple, tuple], list[Record]] = {}
    for record in records:
        if record.config:
            row = tuple(record.get(f) for f in rows)
            col = tuple(record.get(f) for f in cols)
            cells.setdefault((row, col), []).append(record)
    lines = []
    for (row, col), members in cells.items():
        if len(members) < 2:
            continue
        flats = [flat_config(member.config) for member in members]
        common = set.intersection(*(set(flat) for flat in flats)) - set(CELL_OPTIONS_IGNORED)
        differences = []
        for key in sorted(common):
            seeds: dict[str, list[str]] = {}
            for member, flat in zip(members, flats, strict=True):
                seeds.setdefault(flat[key], []).append(str(member.seed))
            if len(seeds) > 1:
                values = ", ".join(f"{v} (seed {', '.join(s)})" for v, s in seeds.items())
                differences.append(f"{key} = {values}")
        if differences:
            where = " x ".join(str(v) for v in (*row, *col))
            lines.append(
                f"cell {where}: its runs differ in more than the seed: " + "; ".join(differences)
            )
    return lines


def flat_config(config: Mapping[str, Any] | None) -> dict[str, str]:
    """A run's ``config.yaml`` as ``{"model.init_args.lr": "0.01", ...}`` (empty without one)."""
    return _flatten(dict(config or {}))


def pair_differences(vrnl: Mapping[str, str], base: Mapping[str, str]) -> list[str]:
    """The options (of :func:`flat_config`) in which a run of X-VRNL and the run of X it is
    paired with differ beyond what only VRNL uses (:data:`PAIR_OPTIONS_IGNORED`), as
    ``option = X-VRNL's value / X's value``: a seed whose runs differ so is no paired
    difference of VRNL. Only options both configs hold compare (a config written by an older
    version may name them otherwise)."""
    common = (set(vrnl) & set(base)) - set(PAIR_OPTIONS_IGNORED)
    differ = sorted(key for key in common if vrnl[key] != base[key])
    return [f"{key} = {vrnl[key]} / {base[key]}" for key in differ]
