"""Shipped configs: every preset is its row's protocol (the paper's, or the reference code's for
the baselines, as docs/methods.md tabulates it), groups parse and compose on the command line,
each paper α has one home, and compose errors name their files."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import resolved
from conftest import CONFIGS, DATASETS, REPO, pair_configs

PRESETS = sorted(p for p in CONFIGS.glob("*.yaml") if p.stem != "quickstart")
GROUPS = sorted(
    p for group in ("data", "method", "trainer", "protocol") for p in (CONFIGS / group).glob("*")
)


def resolve(capsys: pytest.CaptureFixture, *configs: Path | str, args: tuple = ()) -> dict:
    """The config ``noisylabels fit --config ... --print_config`` prints."""
    from noisylabels.cli import run

    argv = ["fit"]
    for config in configs:
        argv += ["--config", str(config)]
    with pytest.raises(SystemExit) as exc:
        run([*argv, *args, "--print_config"])
    assert exc.value.code == 0
    return yaml.safe_load(capsys.readouterr().out)


@pytest.fixture(scope="module")
def resolver() -> resolved.Resolver:
    return resolved.Resolver()


@pytest.fixture(scope="module")
def printed(resolver: resolved.Resolver) -> Callable[..., dict]:
    """What :func:`resolve` gives, from the one parser of ``resolver`` (the command's parser,
    built once) rather than a command of its own per config: the many configs of the tests
    below parse in a fraction of the time; ``test_the_shared_parser_prints_what_the_command_
    prints`` holds the two to each other."""
    cache: dict[tuple, str] = {}

    def _printed(*configs: Path | str, args: tuple = ()) -> dict:
        key = (tuple(str(c) for c in configs), tuple(args))
        if key not in cache:
            namespace = resolver.namespace(configs, args)  # one parse for both fixtures
            cache[key] = resolver.parser.dump(namespace, skip_none=False)
        return yaml.safe_load(cache[key])

    return _printed


def test_the_shared_parser_prints_what_the_command_prints(capsys, printed) -> None:
    """``printed`` of a preset, of groups with an option, and of a protocol after a method is
    what ``noisylabels fit ... --print_config`` prints (the parser of a run is the command's,
    ``--ckpt_path`` and ``--weights_only`` included)."""
    cases = [
        ((CONFIGS / "cifar10_ptd.yaml",), ()),
        ((CONFIGS / "data" / "mnist.yaml", CONFIGS / "method" / "forward_vrnl.yaml"),
         ("--model.schedule.warmup_epochs", "3")),
        ((CONFIGS / "data" / "digits.yaml", CONFIGS / "method" / "forward.yaml",
          CONFIGS / "protocol" / "true_t.yaml"), ()),
    ]  # fmt: skip
    for configs, args in cases:
        command = resolve(capsys, *configs, args=args)
        assert command["ckpt_path"] is None and command["weights_only"] is None
        assert printed(*configs, args=args) == command, configs


def test_presets_compose_their_data_and_method_group(resolver) -> None:
    """``<dataset>_<method>.yaml`` composes ``data/<dataset>.yaml``, ``method/<method>.yaml`` and at
    most protocol files, and holds settings of its own, few, and not the folder the code derives
    (``runs/<dataset>_<method>``): a pair that would hold nothing else is composed from its
    groups instead."""
    # the paper's datasets, and the real-noise ones with a preset of their field's protocol
    assert set(DATASETS) <= {p.stem.partition("_")[0] for p in PRESETS}
    for preset in PRESETS:
        dataset, _, method = preset.stem.partition("_")
        content = yaml.safe_load(preset.read_text())
        data, group, *protocols = content.pop("compose")
        assert (data, group) == (f"data/{dataset}.yaml", f"method/{method}.yaml"), preset.name
        assert all(p.startswith("protocol/") for p in protocols), preset.name
        assert "trainer" not in content, f"{preset.name}: the code derives its trainer settings"
        assert resolved.root(resolver.namespace([preset])) == f"runs/{preset.stem}", preset.name
        model = (content.get("model") or {}).get("init_args") or {}
        assert content and len(model) <= 3, f"{preset.name} holds nothing or repeats its groups"


def test_a_runs_folder_is_named_by_its_data_and_method_groups(resolver) -> None:
    """A run that names no folder goes to ``runs/<data>_<method>``, the stems of the data and
    method group files it composes, for every data group x method group pair (VolMinNet's
    ``volmin`` included, not its class name)."""
    from noisylabels.compose import default_root_dir

    for data in sorted((CONFIGS / "data").glob("*.yaml")):
        for method in sorted((CONFIGS / "method").glob("*.yaml")):
            config = resolver.namespace([data, method])
            expected = Path("runs") / f"{data.stem}_{method.stem}"
            assert default_root_dir(config) == expected, (data.name, method.name)


def test_no_config_restates_the_epochs_the_code_derives() -> None:
    """No shipped config or sweep sets ``trainer.max_epochs``: a run trains its stage schedule's
    epochs (warm-up + main + revision) unless the command line says otherwise."""
    for path in sorted(CONFIGS.rglob("*.yaml")):
        content = yaml.safe_load(path.read_text()) or {}
        sweep_args = [content.get("args") or {}] + [
            value
            for axis in (content.get("axes") or {}).values()
            if isinstance(axis, dict)
            for value in axis.values()
            if isinstance(value, dict)
        ]
        assert "max_epochs" not in (content.get("trainer") or {}), path
        assert all("trainer.max_epochs" not in args for args in sweep_args), path


def test_groups_compose_on_the_command_line(capsys) -> None:
    """data + method groups given as repeated --config, with the preset's own settings as
    options, resolve like the preset of the pair, in either order."""
    preset = resolve(capsys, CONFIGS / "mnist_jocor.yaml")
    own = ("--model.co_lambda", "0.95")
    data, method = CONFIGS / "data" / "mnist.yaml", CONFIGS / "method" / "jocor.yaml"
    assert resolve(capsys, data, method, args=own) == preset
    # order does not matter for disjoint groups: the data file may set the backbone first
    assert resolve(capsys, method, data, args=own) == preset


def test_an_option_of_a_group_is_set_alone_on_the_command_line(capsys) -> None:
    """``--model.schedule.X`` changes that option only (the group's others stay the config's),
    null included, in either spelling."""
    config = resolve(
        capsys,
        *pair_configs("mnist_forward"),
        args=("--model.schedule.warmup_momentum", "null", "--model.schedule.decay_beta1=null",
              "--model.schedule.warmup_epochs", "15", "--model.optim.lr", "0.05"),
    )  # fmt: skip
    schedule, optim = (
        config["model"]["init_args"]["schedule"],
        config["model"]["init_args"]["optim"],
    )
    assert schedule["warmup_momentum"] is None and schedule["decay_beta1"] is None
    assert schedule["warmup_epochs"] == 15 and schedule["main_stage_init"] == "reinit"
    assert optim == {**optim, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}


def test_every_group_file_parses(printed) -> None:
    """Every group file parses and prints after the files it composes with: a data group after
    a method group, a method or trainer group after a data group, a protocol after both (as
    ``resolved.shipped_configs`` resolves them, so that the parses are those of
    ``test_every_shipped_config_resolves_to_the_run_it_recorded``, made once)."""
    shipped = resolved.shipped_configs()
    for group in GROUPS:
        files = shipped.get(str(group.relative_to(CONFIGS)))
        if files is not None:
            printed(*files)
            continue
        # a file that is not .yaml, in a group's folder: parsed as a group all the same
        other = "method/ce.yaml" if "/data/" in str(group) else "data/digits.yaml"
        if "/protocol/" in str(group):  # a protocol composes after a method
            printed(CONFIGS / "data" / "digits.yaml", CONFIGS / "method/forward.yaml", group)
        else:
            printed(CONFIGS / other, group)


def test_compose_errors_name_the_files(tmp_path: Path) -> None:
    from noisylabels.cli import run
    from noisylabels.errors import InputError, MissingFileError

    (tmp_path / "a.yaml").write_text("compose: [b.yaml]\n")
    (tmp_path / "b.yaml").write_text("compose: [a.yaml]\n")
    with pytest.raises(InputError, match="cycle"):
        run(["fit", "--config", str(tmp_path / "a.yaml"), "--print_config"])
    (tmp_path / "c.yaml").write_text("compose: [missing.yaml]\n")
    with pytest.raises(MissingFileError, match="missing.yaml"):
        run(["fit", "--config", str(tmp_path / "c.yaml"), "--print_config"])


# ---------------------------------------------------------------- the same runs as recorded
def changes(before: dict[str, Any], now: dict[str, Any]) -> dict[str, list[Any]]:
    """``{name: [recorded, now]}`` for the values of a run that differ, by the names of before
    the options moved; a method option that did not exist then is a change too (data options
    added since are not the method's; one added at the value every run of before had,
    ``resolved.ADDED_DEFAULTS``, is not a change)."""
    old = resolved.as_old(now)
    out = {k: [v, old.get(k, "missing")] for k, v in before.items() if old.get(k, "missing") != v}
    for key in sorted(set(old) - set(before)):
        added_at_default = resolved.ADDED_DEFAULTS.get(key, object()) == old[key]
        if key.startswith("model.") and not added_at_default:
            out[key] = ["missing", old[key]]
    return out


def test_every_shipped_config_resolves_to_the_run_it_recorded(resolver) -> None:
    """Every preset, the quickstart and every group (and every preset since composed from its
    groups, as the pair's groups) resolve to the method, options, data, epochs and folder
    recorded in ``resolved_configs.json`` (before the method options moved into groups:
    ``resolved.MOVED`` names where each went)."""
    configs, _ = resolved.recorded()
    shipped = resolved.shipped_configs()
    different = {}
    for name, before in configs.items():  # a preset no longer shipped: its pair's groups
        files = shipped.get(name) or pair_configs(name.removesuffix(".yaml"))
        found = changes(before, resolver(files))
        if found:
            different[name] = found
    assert not different


def test_the_epochs_a_preset_plans_are_those_its_run_trains(resolver) -> None:
    """``results.json``'s ``protocol_epochs`` (what the config files plan, read from the files
    with the method class's own schedule defaults) equal the epochs ``noisylabels fit`` derives
    for every preset and group."""
    from noisylabels.compose import planned_epochs
    from noisylabels.run.cli import TRAINER_DEFAULTS

    for name, files in resolved.shipped_configs().items():
        assert planned_epochs(files, TRAINER_DEFAULTS) == resolver(files)["epochs"], name


def test_every_sweep_run_is_the_run_it_recorded(resolver) -> None:
    """Every run of every shipped sweep file resolves to the values recorded for it."""
    configs, sweeps = resolved.recorded()
    known = {k for values in configs.values() for k in values}
    now = resolved.sweep_values(resolver, known)
    assert set(now) == set(sweeps)
    for sweep, runs in sweeps.items():
        assert set(now[sweep]) == set(runs), sweep
        different = sorted(run for run, value in runs.items() if now[sweep][run] != value)
        assert not different, f"{sweep}: {len(different)} runs differ, e.g. {different[:3]}"


# ---------------------------------------------------------------- the paper's protocol
PAPER_PROTOCOL = {  # Forward and Reweight under the paper's Table 1 protocol
    "forward": {"warmup_model": "best", "warmup_momentum": 0.0, "main_stage_init": "reinit"},
    "reweight": {"warmup_model": "best", "warmup_momentum": 0.0, "main_stage_init": "restart"},
}


@pytest.mark.parametrize("dataset", DATASETS)
def test_forward_and_reweight_presets_are_the_papers_protocol(printed, dataset: str) -> None:
    """T̂ estimated after an early-stopped warm-up without momentum (20 epochs; 15 on
    CIFAR-100), then a new network for Forward and the estimation model for Reweight, and the
    paper's 80 epochs (milestones 30, 60 of the corrected stage)."""
    for method in ("forward", "forward_vrnl", "reweight", "reweight_vrnl"):
        config = printed(*pair_configs(f"{dataset}_{method}"))
        args = config["model"]["init_args"]
        schedule = args["schedule"]
        assert args["transition"] == "estimate" and args["estimator"] == "anchor", method
        for key, value in PAPER_PROTOCOL[method.split("_")[0]].items():
            assert schedule[key] == value, (dataset, method, key)
        warmup = 15 if dataset == "cifar100" else 20
        assert schedule["warmup_epochs"] == warmup and schedule["main_epochs"] == 80
        assert config["trainer"]["max_epochs"] is None  # derived: warm-up + 80
        assert resolved.epochs(config) == warmup + 80
        assert schedule["milestones"] == [30, 60] and schedule["milestones_from"] == "main"
        assert args["filter_outliers"] == (dataset != "cifar100")


def test_true_t_is_one_composable_file(capsys) -> None:
    """The paper's Fig.-1 protocol (the true T, 80 epochs) composes after a method group."""
    pair = pair_configs("mnist_forward_vrnl")
    config = resolve(capsys, *pair, CONFIGS / "protocol/true_t.yaml")
    assert config["model"]["init_args"]["transition"] is True
    assert config["model"]["init_args"]["schedule"]["warmup_epochs"] == 0
    assert resolved.epochs(config) == 80
    quickstart = resolve(capsys, CONFIGS / "quickstart.yaml")
    assert quickstart["model"]["init_args"]["transition"] is True


def test_each_paper_alpha_has_one_home(printed) -> None:
    """Forward/Reweight-VRNL 0.1 and VolMinNet-VRNL 0.05 in their method groups, VolMinNet-VRNL's
    0.005 on MNIST and Clothing1M in those presets, 0.01 on pair noise in the sweeps' rules: no
    other file sets them."""
    expected = {
        "method/forward_vrnl.yaml": 0.1,
        "method/reweight_vrnl.yaml": 0.1,
        "method/volmin_vrnl.yaml": 0.05,
        "mnist_volmin_vrnl.yaml": 0.005,
        "clothing1m_volmin_vrnl.yaml": 0.005,
    }
    paper_files = {
        str(p.relative_to(CONFIGS))
        for p in CONFIGS.rglob("*.yaml")
        if re.search(r"^\s*alpha: (?!0\.0\b)", p.read_text(), re.M)
        and "sweeps" not in p.parts
        and not re.search(r"not a paper value", p.read_text())
    }
    assert paper_files == set(expected)
    for name, alpha in expected.items():
        if "/" not in name:
            assert printed(CONFIGS / name)["model"]["init_args"]["alpha"] == alpha


# ---------------------------------------------------------------- the baselines' references
def reference_table() -> list[dict[str, str]]:
    """The rows of docs/methods.md's reference-protocol table."""
    text = (REPO / "docs" / "methods.md").read_text()
    block = text.split("<!-- reference-protocols: parsed by tests/e2e/test_configs.py -->")[1]
    lines = block.strip().split("\n\n")[0].splitlines()  # the table, up to the blank line
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def _number(value: float) -> str:
    return f"{value:.0e}".replace("e-0", "e-") if value else "0"


def protocol_row(config: dict[str, Any]) -> dict[str, str]:
    """A resolved config in the columns of the reference table."""
    args = config["model"]["init_args"]
    optim, schedule = args["optim"], args["schedule"]
    optimizer = optim["optimizer"]
    warmup = schedule["warmup_epochs"]
    stages = int(resolved.epochs(config))
    revision = int(schedule["revision_epochs"])
    epochs = [warmup, stages - warmup - revision, revision] if warmup or revision else [stages]
    epochs = [str(e) for e in epochs if e] if len(epochs) > 1 else [str(stages)]
    if schedule["lr_schedule"] == "linear":
        lr_schedule = f"linear from {schedule['decay_start']}, β1 {schedule['decay_beta1']}"
    elif schedule["lr_schedule"] == "cosine":
        period = schedule["cosine_period"]
        lr_schedule = "cosine" + (f", restart every {period}" if period else "")
        lr_schedule += f", to {_number(schedule['min_lr'])}"
    elif schedule["milestones"]:
        divisor = f"÷{1 / schedule['lr_gamma']:.4g} at "
        lr_schedule = divisor + ", ".join(str(m) for m in schedule["milestones"])
        if schedule["warmup_milestones"]:
            warm = ", ".join(str(m) for m in schedule["warmup_milestones"])
            lr_schedule = f"warm-up ÷10 at {warm}; {lr_schedule}"
    else:
        lr_schedule = "constant"
    momentum = "—"
    if optimizer == "sgd":
        warm = schedule["warmup_momentum"]
        warm = optim["momentum"] if warm is None else warm
        momentum = f"{warm:g} / {optim['momentum']:g}"
    start = "—"
    if warmup:
        start = f"{schedule['warmup_model']} / {schedule['main_stage_init']}"
    rev = "—"
    if revision:
        rev = (
            f"adam {optim['revision_lr']:.0e}, wd {_number(optim['revision_weight_decay'])}, "
            f"from {schedule['revision_model']}"
        ).replace("e-07", "e-7")
    return {
        "optimizer": optimizer,
        "lr": _number(optim["lr"]),
        "weight decay": _number(optim["weight_decay"]),
        "momentum": momentum,
        "schedule": lr_schedule,
        "epochs": " + ".join(epochs),
        "T̂ / start": start,
        "revision": rev,
    }


OWN = "method options"
"""The reference table's column of a method's own options (``name value, ...``; ``—``: none)."""


def own_options(config: dict[str, Any], listed: str) -> str:
    """The resolved values of the options ``listed`` names, in its form."""
    if listed == "—":
        return listed
    args = config["model"]["init_args"]
    parts = []
    for name in (item.split()[0] for item in listed.split(", ")):
        value = args[name]
        parts.append(f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}")
    return ", ".join(parts)


def test_baseline_presets_follow_the_reference_table(printed) -> None:
    """Every baseline preset's resolved protocol is its row of docs/methods.md's table
    (optimizer, lr, weight decay, momentum, schedule, epochs, warm-up, revision, and the
    reported metric: ``tail`` runs record the last 10 epochs' test accuracy, and the method's
    own options the table names, e.g. Co-teaching+'s ``init_epochs``, JoCoR's ``co_lambda``);
    the two-network presets also feed the network unnormalised, unaugmented pixels, as their
    reference does."""
    rows = reference_table()
    methods = ("coteaching", "mentornet", "decoupling", "trevision", "forward_dualt", "ptd")
    assert {r["pair"] for r in rows} >= {
        f"{d}_{m}"
        for d in ("mnist", "cifar10", "cifar100")
        for m in (*methods, "coteachingplus", "jocor")
    }
    for row in rows:
        config = printed(*pair_configs(row["pair"]))
        expected = {k: v for k, v in row.items() if k not in ("pair", "reports", OWN)}
        assert protocol_row(config) == expected, row["pair"]
        assert own_options(config, row[OWN]) == row[OWN], row["pair"]
        tail = config.get("tail_test_epochs", 0)
        assert (tail == 10) == (row["reports"] == "tail"), row["pair"]
        if row["reports"] == "tail":
            data = config["data"]["init_args"]
            assert data["normalize"] is False and data["augment"] is False, row["pair"]


def report_commands_in_comments() -> list[tuple[str, list[str]]]:
    """``(file:line, argv)`` of each ``noisylabels report`` command in a shipped config's
    comments (a sweep file says how to read its table)."""
    import shlex

    found = []
    for path in sorted(CONFIGS.rglob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            comment = line.partition("#")[2]
            _, command, rest = comment.partition("noisylabels report ")
            if command:
                argv = shlex.split(rest.split(" #", 1)[0])
                found.append((f"{path.relative_to(REPO)}:{number}", argv))
    return found


def test_every_report_command_in_a_configs_comments_parses() -> None:
    """A command a config's comment tells users to run has only options ``report`` knows."""
    from noisylabels.report.cli import build_parser

    commands = report_commands_in_comments()
    assert len(commands) >= 10
    wrong = []
    for where, argv in commands:
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            wrong.append(f"{where}: noisylabels report {' '.join(argv)}")
    assert not wrong, "\n".join(wrong)


VRNL_OPTIONS = {"model.alpha", "model.vrnl_form"}
"""The options by which a VRNL row of a sweep may differ from its base row."""


@pytest.mark.parametrize("path", sorted((CONFIGS / "sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_vrnl_row_of_a_shipped_sweep_is_its_base_rows_run_with_vrnl(
    path: Path, resolver: resolved.Resolver
) -> None:
    """A sweep's ``X_vrnl`` run resolves to its ``X`` run at the same grid point but for VRNL's
    options (:data:`VRNL_OPTIONS`): otherwise ``report --paired`` compares two protocols (a
    protocol file given to the base row only, as the CIFAR-N sweeps once had)."""
    from noisylabels.sweep.grid import format_value, load_sweep

    sweep = load_sweep(path)
    if "method" not in sweep.runs[0].point:
        pytest.skip(f"{path.name} has no method axis")

    def values(run: Any) -> dict[str, Any]:
        moved = [(k, v) for k, v in run.args.items() if resolved.is_moved(k)]
        out = dict(
            resolver(run.configs, [a for k, v in moved for a in (f"--{k}", format_value(v))])
        )
        out.update({k: v for k, v in run.args.items() if not resolved.is_moved(k)})
        return out

    runs = {tuple(sorted(run.point.items())): run for run in sweep.runs}
    wrong, pairs = [], 0
    for run in sweep.runs:
        base_method = run.point["method"].removesuffix("_vrnl")
        base = runs.get(tuple(sorted({**run.point, "method": base_method}.items())))
        if base is None or base is run:
            continue
        pairs += 1
        mine, theirs = values(run), values(base)
        differ = {k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k)}
        differ -= VRNL_OPTIONS | {"trainer.default_root_dir"}
        if differ:
            wrong.append(
                f"{run.name}: "
                + ", ".join(
                    f"{k} {mine.get(k)!r} (base {theirs.get(k)!r})" for k in sorted(differ)[:4]
                )
            )
    assert not wrong, f"{path.name}:\n" + "\n".join(wrong[:10])
    if not pairs:
        pytest.skip(f"{path.name} has no X / X_vrnl rows")
