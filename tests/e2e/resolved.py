"""What a shipped config resolves to, as the values that decide its run: the method's and the data
module's class and every option, the trainer's settings with the epochs the run trains, and the
run's own options (seed, tail test). ``tests/e2e/resolved_configs.json`` records them for every
preset, group and sweep run as they resolved before the method's options moved into groups
(:data:`MOVED` maps each old name to its new one), with the folder each run writes to;
``test_configs.py`` keeps every shipped config resolving to the same run."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from noisylabels.run.identity import ADDED_SINCE

from conftest import CONFIGS, REPO

RECORD = Path(__file__).with_name("resolved_configs.json")

SCHEDULE = (
    "warmup_epochs",
    "warmup_model",
    "main_stage_init",
    "warmup_momentum",
    "warmup_milestones",
    "milestones",
    "milestones_from",
    "lr_gamma",
    "lr_schedule",
    "decay_start",
    "decay_beta1",
    "revision_epochs",
    "revision_model",
)
OPTIM = ("optimizer", "lr", "momentum", "weight_decay", "revision_lr", "revision_weight_decay")
SPEED = ("compile", "compile_backend", "channels_last")
NETWORK = ("backbone", "pretrained", "weights_path", "backbone_kwargs")
MOVED: dict[str, str] = {
    **{f"model.{name}": f"model.network.{name}" for name in NETWORK},
    **{f"model.{name}": f"model.schedule.{name}" for name in SCHEDULE},
    **{f"model.{name}": f"model.optim.{name}" for name in OPTIM},
    **{f"model.{name}": f"model.speed.{name}" for name in SPEED},
}
"""Every method option that moved into a group: old name -> new name (flat, dotted)."""
NEW = ("model.schedule.main_epochs", "model.schedule.cosine_period", "model.schedule.min_lr")
"""Options that did not exist before the move (their effect is checked through the epochs)."""
ADDED_DEFAULTS = {"data.views": 1, "test_every_epoch": False, **ADDED_SINCE}
"""Options of every run added after the record was made, at the value that is the run of before
(one augmented view; no test of every epoch; VRNL's paper form): a run's record leaves them out
at that value."""
# not what a run computes: where it logs and what the terminal shows
SKIPPED = (
    "config",
    "ckpt_path",
    "weights_only",
    "checkpoint.",
    "trainer.max_epochs",
    "trainer.callbacks",
    "trainer.logger",
    "trainer.profiler",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
)
TRANSITION_METHODS = ("Forward", "Reweight", "TRevision", "Backward")


def flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """A resolved config as ``{"model.optim.lr": 0.01, ...}``: ``class_path`` as ``.class``,
    ``init_args`` dropped from the names, nested groups by dotted names."""
    if hasattr(node, "as_dict"):
        node = node.as_dict()
    if isinstance(node, Mapping) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            key = {"class_path": "class", "init_args": ""}.get(str(key), str(key))
            name = ".".join(p for p in (prefix, key) if p)
            out.update(flat(value, name))
        return out
    if isinstance(node, tuple):
        node = list(node)
    return {prefix: node} if prefix else {}


def epochs(config: Any) -> int | None:
    """The epochs a run of ``config`` trains: ``trainer.max_epochs``, or where it is unset the
    stage schedule's, as ``noisylabels fit`` derives them."""
    from noisylabels.compose import schedule_epochs

    given = config["trainer"]["max_epochs"]
    return given if given is not None else schedule_epochs(config["model"])


def root(config: Any) -> str:
    """The folder a run of ``config`` writes to: ``trainer.default_root_dir``, or where it is
    unset the one ``noisylabels fit`` derives from the data and method
    (:func:`noisylabels.compose.default_root_dir`)."""
    from noisylabels.compose import default_root_dir

    return str(config["trainer"]["default_root_dir"] or default_root_dir(config))


def run_values(config: Any) -> dict[str, Any]:
    """The values that decide a run of the resolved ``config``, by their current names, with
    the epochs it trains and the folder it writes to."""
    kept = ("checkpoint.monitor", "checkpoint.mode")
    values = {k: v for k, v in flat(config).items() if k in kept or not k.startswith(SKIPPED)}
    values["epochs"] = epochs(config)
    values["trainer.default_root_dir"] = root(config)
    method = str(values.get("model.class", "")).rsplit(".", 1)[-1]
    warmup = MOVED["model.warmup_epochs"]
    for name in ("model.warmup_epochs", warmup):  # a given T runs no warm-up, whatever it says
        if method in TRANSITION_METHODS and values.get("model.transition") != "estimate":
            if name in values:
                values[name] = 0
    return json.loads(json.dumps(values, default=str))  # as the record holds them


def as_old(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` by the names of before the move (:data:`MOVED`), without :data:`NEW` options."""
    back = {new: old for old, new in MOVED.items()}

    def old(name: str) -> str:  # a moved option, or an entry of a moved mapping option
        for new, was in back.items():
            if name == new or name.startswith(new + "."):
                return was + name[len(new) :]
        return name

    return {old(k): v for k, v in values.items() if k not in NEW}


def digest(values: Mapping[str, Any]) -> str:
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Resolver:
    """Resolves configs with one command-line parser (as ``noisylabels fit`` parses them)."""

    def __init__(self) -> None:
        from noisylabels.run.cli import make_cli

        digits, ce = CONFIGS / "data" / "digits.yaml", CONFIGS / "method" / "ce.yaml"
        args = ["--config", str(digits), "--config", str(ce), "--trainer.accelerator", "cpu"]
        self.parser = make_cli(args, run=False).parser
        self.parsed: dict[tuple, Any] = {}
        self.cache: dict[tuple, dict[str, Any]] = {}

    def namespace(self, configs: Sequence[Path | str], args: Sequence[str] = ()) -> Any:
        """The parsed config of ``--config`` each of ``configs``, then ``args`` (parsed once;
        a caller must not change it)."""
        key = (tuple(str(c) for c in configs), tuple(args))
        if key not in self.parsed:
            argv = [a for c in configs for a in ("--config", str(c))]
            from noisylabels.run.parsing import with_group_nulls  # as the command line does

            self.parsed[key] = self.parser.parse_args(with_group_nulls([*argv, *args]))
        return self.parsed[key]

    def __call__(self, configs: Sequence[Path], args: Sequence[str] = ()) -> dict[str, Any]:
        key = (tuple(str(c) for c in configs), tuple(args))
        if key not in self.cache:
            self.cache[key] = run_values(self.namespace(configs, args))
        return self.cache[key]


# the method group a protocol is resolved after (CE's where not named): one it is written for
PROTOCOL_METHODS = {
    "true_t.yaml": "forward.yaml",
    "cifar100_estimate.yaml": "forward.yaml",
    "gls_warmup.yaml": "gls.yaml",
}


def shipped_configs() -> dict[str, list[Path]]:
    """Every shipped config file by its path under ``configs/``, with the files it is resolved
    after: presets and the quickstart alone, a data group after the CE group, a method or
    trainer group after the digits group, a protocol after the digits group and a method group
    (:data:`PROTOCOL_METHODS`)."""
    digits = CONFIGS / "data" / "digits.yaml"
    out: dict[str, list[Path]] = {}
    for path in sorted(CONFIGS.rglob("*.yaml")):
        name = str(path.relative_to(CONFIGS))
        group = path.parent.name
        if group == "sweeps":
            continue
        if group == "data":
            out[name] = [CONFIGS / "method" / "ce.yaml", path]
        elif group in ("method", "trainer"):
            out[name] = [digits, path]
        elif group == "protocol":
            method = CONFIGS / "method" / PROTOCOL_METHODS.get(path.name, "ce.yaml")
            out[name] = [digits, method, path]
        else:
            out[name] = [path]
    return out


def is_moved(option: str) -> bool:
    """Whether a sweep's option is one that moved (or is new, or sets the epochs)."""
    moved = option in MOVED or option in MOVED.values() or option in NEW
    return moved or option.startswith("trainer.")


def sweep_values(resolve: Resolver, known: set[str]) -> dict[str, dict[str, str]]:
    """For every shipped sweep file, each run's :func:`digest` of its values (by the names of
    before the move, those of ``known`` and the options added since, ``ADDED_DEFAULTS``, where
    a run sets them to another value): its configs and the moved options it sets resolved,
    the others (noise, seeds, alpha) laid over them as the sweep file gives them."""
    from noisylabels.sweep.grid import format_value, load_sweep

    out: dict[str, dict[str, str]] = {}
    for path in sorted((CONFIGS / "sweeps").glob("*.yaml")):
        sweep = load_sweep(path)
        runs: dict[str, str] = {}
        for run in sweep.runs:
            parsed = [(k, v) for k, v in run.args.items() if is_moved(k)]
            args = [a for k, v in parsed for a in (f"--{k}", format_value(v))]
            values = dict(resolve(run.configs, args))
            values.update({k: v for k, v in run.args.items() if not is_moved(k)})
            runs[run.name] = digest(
                {
                    k: v
                    for k, v in as_old(values).items()
                    if (k in known or k in ADDED_DEFAULTS)
                    and not (k in ADDED_DEFAULTS and v == ADDED_DEFAULTS[k])
                }
            )
        out[str(path.relative_to(REPO))] = runs
    return out


def record() -> dict[str, Any]:
    """Every shipped config's and sweep run's values, by the names of before the move; the
    values all configs share once, under ``common``."""
    resolve = Resolver()
    configs = {name: as_old(resolve(files)) for name, files in shipped_configs().items()}
    first, *others = configs.values()
    common = {k: v for k, v in first.items() if all(k in o and o[k] == v for o in others)}
    own = {
        name: {k: v for k, v in values.items() if k not in common}
        for name, values in configs.items()
    }
    known = {k for values in configs.values() for k in values}
    return {"common": {"": common}, "configs": own, "sweeps": sweep_values(resolve, known)}


def recorded() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]]]:
    """The record: every config's values (with the common ones), and the sweeps' digests."""
    content = json.loads(RECORD.read_text())
    common = content["common"][""]
    configs = {name: {**common, **own} for name, own in content["configs"].items()}
    return configs, content["sweeps"]


def write(content: Mapping[str, Mapping[str, Any]]) -> str:
    """The record as JSON text, one line per config or sweep."""
    lines = [
        f"  {json.dumps(section)}: {{\n"
        + ",\n".join(
            f"    {json.dumps(name)}: {json.dumps(value, sort_keys=True, default=str)}"
            for name, value in sorted(entries.items())
        )
        + "\n  }"
        for section, entries in content.items()
    ]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def add_new() -> list[str]:
    """Add the shipped configs the record does not have yet (a new preset, group or protocol),
    each by its values that differ from the common ones, and the sweep runs it does not have
    yet (of a new sweep file or new in one); recorded entries stay as they are. Returns the
    names added."""
    content = json.loads(RECORD.read_text())
    common = content["common"][""]
    resolve = Resolver()
    added = []
    for name, files in shipped_configs().items():
        if name in content["configs"]:
            continue
        values = as_old(resolve(files))
        lacking = sorted(set(common) - set(values))
        assert not lacking, f"{name} lacks the common values {lacking}"
        own = {k: v for k, v in values.items() if k not in common or common[k] != v}
        content["configs"][name] = own
        added.append(name)
    known = {k for own in content["configs"].values() for k in {**common, **own}}
    for sweep, runs in sweep_values(resolve, known).items():
        recorded_runs = content["sweeps"].setdefault(sweep, {})
        for run, value in runs.items():  # a new sweep file, or new runs of one
            if run not in recorded_runs:
                recorded_runs[run] = value
                added.append(f"{sweep}: {run}")
    RECORD.write_text(write(content))
    return added


if __name__ == "__main__":  # python tests/e2e/resolved.py: records the configs added since
    print("\n".join(add_new()))
