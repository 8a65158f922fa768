"""No warning reaches a user that the project causes or that no user can act on, and the
project's own warnings name the project: every warning of the package goes through
``noisylabels.errors.warn`` and prints as ``noisylabels warning: ...`` (not under the Lightning
file that called the package's hook); Lightning's notices that do not apply to the project's
runs are filtered, each for a stated reason, and no other."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest
from as_command import run_command

import noisylabels
from noisylabels.errors import WARNING_PREFIX, NoisyLabelsWarning, warn
from noisylabels.run.chatter import NOT_FOR_USERS, quiet_lightning
from noisylabels.run.resume import continue_logger

from conftest import CONFIGS

PACKAGE = Path(noisylabels.__file__).parent
# a warning as Python (or Lightning's formatter) prints it: "path/file.py:123: ..."
SOURCE_LINE = re.compile(r"^\S+\.py:\d+: ")


def _warning_calls(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
            if name == "rank_zero_warn" or (name == "warn" and owner == "warnings"):
                lines.append(node.lineno)
    return lines


def test_every_warning_of_the_package_goes_through_one_function() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        calls = _warning_calls(ast.parse(path.read_text(), str(path)))
        if calls:
            found[str(path.relative_to(PACKAGE))] = calls
    assert not found, f"warnings raised around noisylabels.errors.warn: {found}"


def test_a_warning_of_the_package_names_it() -> None:
    with pytest.warns(NoisyLabelsWarning, match="lower alpha") as caught:
        warn("lower alpha")
    (record,) = caught
    text = warnings.formatwarning(record.message, record.category, record.filename, 1)
    assert text == f"{WARNING_PREFIX}lower alpha\n"
    assert issubclass(NoisyLabelsWarning, UserWarning)  # filters on UserWarning still apply
    other = warnings.formatwarning("x", UserWarning, "/a/b.py", 3)
    assert other.startswith("/a/b.py:3: ")  # anyone else's warnings as they were


# what each filtered notice says, as Lightning (or torch under it) words it
SAID = [
    "It is recommended to use `self.log('val/acc', ..., sync_dist=True)` when logging on epoch "
    "level in distributed setting to accumulate the metric across devices.",
    "The trainer is configured with multiple `ModelCheckpoint` callbacks",
    "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be "
    "provided during `Trainer` instantiation.",
    "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec) and "
    "treespec.is_leaf()` instead.",
    "The dirpath has changed from '/r/version_0/checkpoints' to '/r/version_1/checkpoints', "
    "therefore `best_model_score` won't be reloaded.",
    "Checkpoint directory /r/version_0/checkpoints exists and is not empty.",
]


@pytest.mark.parametrize("index", range(len(NOT_FOR_USERS)))
def test_each_filtered_notice_is_dropped_with_its_reason(index: int) -> None:
    assert len(SAID) == len(NOT_FOR_USERS)  # a sample of each
    pattern, category, why = NOT_FOR_USERS[index]
    assert len(why) > 40  # each filter says why no user needs it
    assert re.match(pattern, SAID[index], re.I)
    kind = UserWarning if category is Warning else category
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        quiet_lightning()
        warnings.warn(SAID[index], kind, stacklevel=1)
        warnings.warn("a warning of someone else's", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["a warning of someone else's"]


def _warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if SOURCE_LINE.match(line)]


def test_the_commands_of_a_run_print_only_the_projects_warnings(tmp_path: Path) -> None:
    """fit (with an alpha too large, so the project warns), a finished run continued into a
    new folder, test and predict of its checkpoint: no warning line of Lightning or torch, and
    the project's warning under its name."""
    quick = ["--config", str(CONFIGS / "quickstart.yaml"), "--trainer.enable_progress_bar",
             "false", "--trainer.default_root_dir", str(tmp_path)]  # fmt: skip
    quick += ["--model.alpha", "5.0"]
    fit = run_command(["fit", *quick, "--trainer.max_epochs", "2"])
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert not _warnings_in(fit.stderr), _warnings_in(fit.stderr)
    said = [line for line in fit.stderr.splitlines() if line.startswith(WARNING_PREFIX)]
    assert any(line.startswith(f"{WARNING_PREFIX}alpha=5.0: ") for line in said), said
    folder = tmp_path / "lightning_logs" / "version_0"
    more = run_command(["fit", *quick, "--trainer.max_epochs", "3", "--ckpt_path", str(folder)])
    assert more.returncode == 0 and "new run folder" in more.stderr, more.stderr[-3000:]
    ckpt = str(folder / "checkpoints" / "last.ckpt")
    for stage in ("test", "predict"):
        out = run_command([stage, "--config", str(folder / "config.yaml"), "--ckpt_path", ckpt,
                           "--trainer.enable_progress_bar", "false"])  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        assert not _warnings_in(out.stderr), (stage, _warnings_in(out.stderr))
    assert not _warnings_in(more.stderr), _warnings_in(more.stderr)


def test_a_resumed_run_keeps_its_version_number() -> None:
    """The logger of a resumed run has the folder's version as a number, as a new run's has it
    (the progress bar shows a string version by its last four characters: v_num=on_0)."""
    root = Path("/nonexistent/lightning_logs")
    assert continue_logger(root / "version_3", None).version == 3
    assert continue_logger(root / "version_007", None).version == "version_007"
    assert continue_logger(root / "mine", None).version == "mine"
