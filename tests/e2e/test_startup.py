"""Start-up: the commands that train nothing import neither torch nor Lightning (which take
seconds to load), each checked in a fresh interpreter; the packages' names still load on use, and
a fit stopped by SIGTERM still exits 143. ``benchmarks/startup.py`` measures the times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CONFIGS, REPO

HEAVY = ("torch", "lightning", "torchvision", "torchmetrics", "pytorch_lightning")

# runs the command as `noisylabels ARGS` does, then prints the heavy modules it imported
PROBE = """\
import json, sys
from noisylabels.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code or 0
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))
sys.stderr.write("\\nPROBE " + json.dumps({"code": code, "heavy": heavy}) + "\\n")
"""

COMMANDS = {
    "help": ["--help"],
    "version": ["--version"],
    "report-help": ["report", "--help"],
    "plot-help": ["plot", "--help"],
    "sweep-help": ["sweep", "--help"],
    "sweep-dry-run": ["sweep", str(CONFIGS / "sweeps" / "table1_mnist.yaml"), "--dry-run"],
    "audit-help": ["audit", "--help"],
}


def probe(args: list[str], cwd: Path, stderr: bool = False) -> tuple[dict, str]:
    """Run ``noisylabels ARGS`` in a fresh interpreter in ``cwd``: what the probe reports, and
    the standard output (``stderr``: the standard error)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("NOISYLABELS_DEBUG", None)
    code = f"HEAVY = {HEAVY!r}\n{PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    line = next((raw for raw in done.stderr.splitlines() if raw.startswith("PROBE ")), None)
    assert line is not None, done.stderr[-3000:]
    return json.loads(line.removeprefix("PROBE ")), done.stderr if stderr else done.stdout


@pytest.mark.parametrize("args", list(COMMANDS.values()), ids=list(COMMANDS))
def test_a_command_that_trains_nothing_imports_no_torch_or_lightning(
    args: list[str], tmp_path: Path
) -> None:
    report, out = probe(args, tmp_path)
    assert report["code"] == 0, out[-2000:]
    assert report["heavy"] == [], f"noisylabels {' '.join(args)} imported {report['heavy']}"
    assert out.strip()
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_the_dry_run_lists_every_run_of_the_sweep(tmp_path: Path) -> None:
    report, out = probe(COMMANDS["sweep-dry-run"], tmp_path)
    assert report["code"] == 0
    assert "sweep table1_mnist: 360 run(s)" in out
    assert out.count("[to run]") == 360
    assert "--dry-run --check" in out  # says what it did not check


def test_the_packages_names_load_on_first_use() -> None:
    import noisylabels.audit as audit
    import noisylabels.run as run
    from noisylabels.audit.issues import audit as audit_function
    from noisylabels.run.fit import fit_and_test

    assert run.fit_and_test is fit_and_test
    assert audit.audit is audit_function
    assert audit.SCORES == ("margin", "loss", "weight", "posterior")
    assert "fit_and_test" in dir(run) and "audit" in dir(audit)
    for package in (run, audit):
        assert all(hasattr(package, name) for name in package.__all__)
        with pytest.raises(AttributeError):
            package.no_such_name  # noqa: B018


def test_plot_reads_the_file_the_statistics_are_written_to() -> None:
    from noisylabels.callbacks.subset_stats import CSV_FILE
    from noisylabels.report import plot

    assert plot.CSV_FILE == CSV_FILE


def test_a_fit_stopped_by_sigterm_is_told_apart_from_other_exits(monkeypatch) -> None:
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    import noisylabels.cli as cli

    assert cli.stopped_by_sigterm(SIGTERMException(143))
    assert not cli.stopped_by_sigterm(SystemExit(0))
    assert not cli.stopped_by_sigterm(ValueError("x"))

    def stopped(args: list[str]) -> None:
        raise SIGTERMException(1)

    monkeypatch.setattr(cli, "run", stopped)
    assert cli._main(["fit"], debug=False) == cli.SIGTERM_EXIT
    monkeypatch.setattr(cli, "run", lambda args: sys.exit(4))
    with pytest.raises(SystemExit) as exit_:
        cli._main(["fit"], debug=False)
    assert exit_.value.code == 4


BROKEN_CONFIGS = {
    "not-yaml": "trainer:\n  max_epochs: 2\nmodel:\n  a: [1, 2\n",
    "a-list": "- 1\n- 2\n",
    "a-key-twice": "trainer:\n  max_epochs: 1\ntrainer:\n  max_epochs: 2\n",
    "composes-a-missing-file": "compose: [nothere.yaml]\n",
    "composes-itself": "compose: [composes-itself.yaml]\n",
    "composes-a-broken-file": "compose: [not-yaml.yaml]\n",
}


def test_a_broken_config_file_fails_as_the_parse_does_before_the_training_stack_loads(
    tmp_path: Path,
) -> None:
    """Each kind of broken ``--config`` file (after a good one; the option in each of its forms
    in turn) ends a Lightning stage with the parse's own error and exit status, in a fresh
    interpreter that imported neither torch nor Lightning."""
    from noisylabels.errors import NoisyLabelsError
    from noisylabels.run.cli import lightning_command

    good = tmp_path / "good.yaml"
    good.write_text("trainer:\n  max_epochs: 2\n")
    for name, text in BROKEN_CONFIGS.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    forms = ["--config", "-c", "--config="]
    for i, name in enumerate(BROKEN_CONFIGS):
        path, form = str(tmp_path / f"{name}.yaml"), forms[i % len(forms)]
        args = [
            "fit",
            "--config",
            str(good),
            *([form + path] if form.endswith("=") else [form, path]),
        ]
        with pytest.raises(NoisyLabelsError) as parsed:  # the parse itself, with no check before
            lightning_command(args)
        report, stderr = probe(args, tmp_path, stderr=True)
        assert report["heavy"] == [], name
        assert report["code"] == parsed.value.exit_code == 2, name
        assert " ".join(str(parsed.value).split()) in " ".join(stderr.split()), name
