"""Every command of the docs runs: each fenced ``bash`` block of README.md and docs/*.md is read at
test time, and each ``noisylabels`` command in it runs as written, in document order, in a
scratch folder (``configs/`` and ``results/`` linked from the checkout, ``runs/`` its own).

What the test changes, and only that:

* placeholders become real things (:data:`PLACEHOLDERS`): ``DATA`` a tiny MNIST, CIFAR-10 and
  CIFAR-100 in their real formats (tests/conftest.py), ``RUN_DIR`` a finished run (one on an
  image folder where the command names classes), ``X.yaml`` the quickstart, ...; a folder under
  ``runs/`` that no earlier command made is a finished run too; optional parts in brackets
  (``[--model.alpha 0.1]``) are included, the first of ``a|b`` alternatives; the files the docs
  assume the reader has (a CIFAR-10N label file, a SLURM setup file) are made up small;
* a line ``python NAME.py`` runs the doc's own ```python block that begins ``# NAME.py``;
* a fit whose run a later command of its doc continues or reads (``--ckpt_path``, ``audit``,
  ``plot``) is shortened (:data:`SHORT`; a warm-up longer than that takes one epoch); any other
  fit runs every stage once (:data:`SMOKE`, ``--trainer.fast_dev_run``); the ResNets are
  replaced by a tiny network, as the suite's other CLI tests do (the ``slow`` test shortens
  every fit and runs the real networks);
* a sweep runs with ``--dry-run`` (its runs would be the fits the docs show elsewhere), which
  still checks every run's options with ``noisylabels fit --print_config``: each distinct check
  runs once per test session; a report on a sweep's folder reads the committed records of
  ``results/``;
* ``--ckpt_path last`` of a config no earlier command ran runs that config first;
* a command that needs GPUs or several processes is parsed (``--print_config``); the DDP command
  over two CPU processes runs as a real process under ``-m slow``.

Lines that are not ``noisylabels`` commands (installation, make, benchmarks, the test suite) are
listed in :data:`NOT_RUN` with the reason; a line no rule knows fails the test, so a doc that
gains a command this test cannot run fails CI until the test learns it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import (
    REAL_BACKBONES,
    REPO,
    TinyConvNet,
    make_cifar,
    make_image_folder,
    make_mnist,
)

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```bash[^\n]*\n(.*?)^```", re.S | re.M)
# a fit whose run a later command of its doc reads (continues, audits, plots) runs shortened;
# any other runs every stage once (Lightning's smoke test), or shortened under -m slow
SMOKE = [
    "--trainer.fast_dev_run", "true",
    "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip
SHORT = [
    "--trainer.max_epochs", "1",
    "--trainer.limit_train_batches", "2",
    "--trainer.limit_val_batches", "1",
    "--trainer.limit_test_batches", "1",
    "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip
# lines that are not noisylabels commands: (pattern of the line, why the test does not run it)
NOT_RUN: list[tuple[str, str]] = [
    (r"make demo\b", "installs, then trains the quickstart (its fit is a command run here)"),
    (r"make test\b", "the test suite, this test included"),
    (r"make lint\b", "ruff over the code"),
    (r"make gpu-check\b", "the GPU acceptance check (benchmarks/gpu_check.py): a CUDA GPU"),
    (r"NOISYLABELS_DATA_DIR=\S+ make test", "the test suite with real MNIST"),
    (r"python3 -m venv", "creating the environment these tests run in"),
    (r"(\.venv/bin/)?pip install", "installing packages"),
    (r"source \S+/activate", "activating the environment"),
    (r"(\w+=\S+ )*(\.venv/bin/)?python -m pytest\b", "the test suite itself"),
    (
        r"(\w+=\S+ )*(nice -n \d+ )?python (benchmarks/\S+\.py)",
        "a benchmark: timings over minutes (its script must exist)",
    ),
]
# the python script a line runs, written out in the same doc as a ```python block beginning
# with "# NAME.py": the test runs that block
DOC_SCRIPT = re.compile(r"python (\w+\.py)$")
TORCHRUN = re.compile(r"torchrun .* -m noisylabels\.cli (.*)$")
# what needs hardware the test has not: parsed only
GPU_CONFIGS = ("configs/trainer/ddp.yaml",)
PROCESS_CONFIGS = ("configs/trainer/ddp_cpu.yaml",)
# a report on the folder of a sweep (run with --dry-run here): the committed records of one
REPORT_RECORDS = "results/table1_mnist"
WARMUP_ERROR = re.compile(r"(\w+_epochs)=\d+")
# what the docs' placeholders stand for: {data} the tiny datasets, {finished} a finished run
PLACEHOLDERS = {
    "DATA": "{data}",
    "/data": "{data}",
    "/path/to/data": "{data}",
    "RUN_DIR": "{finished}",
    "RUN": "{finished}",
    "runs/x/lightning_logs/version_3": "{finished}",
    "X.yaml": "configs/quickstart.yaml",
    "configs/X.yaml": "configs/quickstart.yaml",
    "my_config.yaml": "configs/quickstart.yaml",
    "configs/method/<method>.yaml": "configs/method/forward.yaml",
}


@dataclass
class Command:
    """One command line of a doc: where it is, its text, its words."""

    doc: str
    line: int
    text: str
    argv: list[str]

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def _optional_parts(text: str) -> str:
    """``[--opt a|b]`` as ``--opt a``: optional parts included, the first alternative."""
    return re.sub(r"\[(--[^\]]*)\]", lambda m: re.sub(r"(\S+?)\|\S+", r"\1", m.group(1)), text)


def doc_blocks(path: Path) -> list[list[Command]]:
    """The commands of each ```bash block of ``path`` (continued lines joined, comments and
    blank lines left out)."""
    text = path.read_text()
    name = str(path.relative_to(REPO))
    blocks = []
    for match in FENCE.finditer(text):
        first = text[: match.start(1)].count("\n") + 1
        commands, pending, start = [], "", 0
        for offset, line in enumerate(match.group(1).splitlines()):
            if not pending:
                start = first + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            joined = (pending + line).strip()
            pending = ""
            words = shlex.split(_optional_parts(joined), comments=True)
            shown = joined.split(" #")[0].strip()
            while words:  # `a && b`: two commands
                cut = next((i for i, w in enumerate(words) if w in ("&&", "||", ";")), None)
                commands.append(Command(name, start, shown, words[:cut]))
                words = [] if cut is None else words[cut + 1 :]
        blocks.append(commands)
    return blocks


def doc_script(doc: str, name: str) -> str | None:
    """The ```python block of ``doc`` whose first line is ``# NAME``."""
    text = (REPO / doc).read_text()
    for code in re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M):
        if code.startswith(f"# {name}"):
            return code
    return None


def not_run_reason(command: Command) -> str | None:
    """Why a line that is no noisylabels command is not run; None where no rule knows it."""
    line = " ".join(command.argv)
    for pattern, reason in NOT_RUN:
        found = re.match(pattern + r"(\s|$)", line)
        if found:
            script = next((g for g in found.groups() if g and g.endswith(".py")), None)
            if script is not None:
                assert (REPO / script).is_file(), f"{command}: {script} does not exist"
            return reason
    return None


# ---------------------------------------------------------------------------- the runner
@dataclass
class Outcome:
    command: Command
    how: str  # ran, smoke-tested, parsed (needs ...), dry-run, not run: REASON
    argv: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


class DocRunner:
    """Runs doc commands in ``cwd`` (its ``runs/`` collects what they make)."""

    def __init__(
        self, cwd: Path, data: Path, finished: Path, named: Path, slow: bool = False
    ) -> None:
        self.cwd, self.data, self.finished = cwd, data, finished
        self.named = named  # a finished run whose classes have names (an image folder)
        # every fit shortened (not smoke-tested), DDP over CPU processes as a real process
        self.slow = slow
        self.read_later: set[int] = set()  # ids of the fits a later command reads
        self.placeholders = {
            word: value.format(data=data, finished=finished) for word, value in PLACEHOLDERS.items()
        }

    # ------------------------------------------------------------ words
    def _word(self, word: str) -> str:
        if word in self.placeholders:
            return self.placeholders[word]
        head, sep, rest = word.partition("/")
        if sep and head in self.placeholders and head.isupper():  # RUN/checkpoints/last.ckpt
            return f"{self.placeholders[head]}/{rest}"
        return word

    def _run_folders(self, words: list[str], kind: str) -> list[str]:
        """Positional folders under runs/ that no command made: a finished run (plot,
        audit), a sweep's committed records (report)."""
        out = []
        for word in words:
            if word.startswith("runs/") and not (self.cwd / word).exists():
                word = REPORT_RECORDS if kind == "report" else str(self.finished)
            out.append(word)
        return out

    # ------------------------------------------------------------ commands
    def run_doc(self, doc: Path) -> list[Outcome]:
        """The outcomes of a doc's commands, run in order."""
        commands = [command for block in doc_blocks(doc) for command in block]
        self.read_later = {
            id(c) for i, c in enumerate(commands) if self._read(c, commands[i + 1 :])
        }
        return [self.outcome(command) for command in commands]

    def _read(self, fit: Command, later: list[Command]) -> bool:
        """Whether a later command continues the run of ``fit`` (``--ckpt_path last`` of the
        same configs) or reads its folder (audit, plot)."""
        words = [self._word(w) for w in fit.argv]
        if words[:2] != ["noisylabels", "fit"]:
            return False
        configs = _values(words, "--config")
        root = (_values(words, "--trainer.default_root_dir") or [None])[-1]
        if root is None and configs:
            root = f"runs/{Path(configs[-1]).stem}"
        for command in later:
            other = [self._word(w) for w in command.argv]
            if "--ckpt_path" in other and _values(other, "--config") == configs:
                return True
            if other[1:2] in (["audit"], ["plot"]) and any(
                w == root or w.startswith(f"{root}/") for w in other[2:]
            ):
                return True
        return False

    def outcome(self, command: Command) -> Outcome:
        words = command.argv
        if words[0] != "noisylabels":
            torchrun = TORCHRUN.match(" ".join(words))
            if torchrun:
                args = shlex.split(torchrun.group(1))
                return self._parse(command, [self._word(w) for w in args], "several nodes")
            script = DOC_SCRIPT.match(" ".join(words))
            if script and doc_script(command.doc, script.group(1)) is not None:
                return self._script(command, script.group(1))
            reason = not_run_reason(command)
            if reason is None:
                return Outcome(command, "unknown", error="no rule of this test runs or skips it")
            return Outcome(command, f"not run: {reason}")
        args = [self._word(w) for w in words[1:]]
        sub = args[0] if args else ""
        if sub in ("fit", "validate", "test", "predict"):
            return self._lightning(command, args)
        if sub == "sweep":
            args = [a for a in args if a != "--submit"]  # --dry-run shows what it would submit
            cut = args.index("--") if "--" in args else len(args)
            return self._invoke(command, [*args[:cut], "--dry-run", *args[cut:]], "dry-run")
        if sub in ("report", "plot"):
            return self._invoke(command, [sub, *self._run_folders(args[1:], sub)], "ran")
        if sub == "audit":
            args = [sub, *self._run_folders(args[1:], sub)]
            if "--classes" in args:  # class names: a run on an image folder with named classes
                args = [str(self.named) if a == str(self.finished) else a for a in args]
            if "--config" in args:  # trains a run first: shortened
                args += ([] if "--" in args else ["--"]) + SHORT
            return self._invoke(command, args, "ran")
        return self._invoke(command, args, "ran")  # --help, --version

    def _lightning(self, command: Command, args: list[str]) -> Outcome:
        if "--help" in args or "--print_config" in args:
            return self._invoke(command, args, "ran")
        if any(config in args for config in GPU_CONFIGS):
            return self._parse(command, args, "GPUs")
        if any(config in args for config in PROCESS_CONFIGS):
            if self.slow:
                return self._process(command, [*args, *SHORT])
            return self._parse(command, args, "two processes (-m slow runs it)")
        if not (self.slow or "--ckpt_path" in args or id(command) in self.read_later):
            return self._invoke(command, [*args, *SMOKE], "smoke-tested")
        args = [*args, *SHORT]
        if "--ckpt_path" in args:  # continues a run of one shortened epoch
            args += ["--trainer.max_epochs", "2"]
        outcome = self._invoke(command, args, "ran")
        if outcome.error and "no epoch of the method's own stage" in outcome.error:
            # a warm-up (and revision) longer than the shortened run: one epoch each
            stages = dict.fromkeys(WARMUP_ERROR.findall(outcome.error))
            extra = [
                w
                for name in stages
                if name != "max_epochs"
                for w in (f"--model.schedule.{name}", "1")
            ]
            epochs = str(len(extra) // 2 + 1)
            if "warmup_epochs" in stages:  # a warm-up's milestones lie past its one epoch
                extra += ["--model.schedule.warmup_milestones", "[]"]
            outcome = self._invoke(command, [*args, *extra, "--trainer.max_epochs", epochs], "ran")
            if outcome.error and "β_t is 0 in every one of the warm-up's" in outcome.error:
                # a β plan that starts past the one warm-up epoch (CAL's CORES² warm-up): at once
                extra += ["--model.beta_start", "0", "--model.beta_ramp_epochs", "0"]
                outcome = self._invoke(
                    command, [*args, *extra, "--trainer.max_epochs", epochs], "ran"
                )
        if outcome.error and "--ckpt_path last: no run under" in outcome.error:
            # continuing "the newest run" of a config presumes one: made first, then continued
            at = args.index("--ckpt_path")
            first = self._invoke(command, [*args[:at], *args[at + 2 :], *SHORT], "ran")
            if first.error:
                return first
            outcome = self._invoke(command, args, "ran after a first run of its config")
        return outcome

    def _invoke(self, command: Command, args: list[str], how: str) -> Outcome:
        from noisylabels.cli import run
        from noisylabels.errors import NoisyLabelsError

        start = time.process_time()
        error = None
        try:
            result = run(args)
            if isinstance(result, int) and not isinstance(result, bool) and result:
                error = f"exit status {result}"
        except SystemExit as done:
            if done.code not in (0, None):
                error = f"exit status {done.code}"
        except NoisyLabelsError as err:
            error = f"{type(err).__name__}: {err}"
        return Outcome(command, how, args, error, time.process_time() - start)

    def _parse(self, command: Command, args: list[str], needs: str) -> Outcome:
        outcome = self._invoke(command, [*args, "--print_config"], "parsed")
        outcome.how = f"parsed (needs {needs})"
        return outcome

    def _process(self, command: Command, args: list[str]) -> Outcome:
        """``noisylabels ARGS`` as a process of this checkout (its DDP launcher starts the
        others from its command line); its seconds are wall-clock ones."""
        start = time.perf_counter()
        path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
        done = subprocess.run(
            [sys.executable, "-m", "noisylabels.cli", *args],
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path},
        )
        error = None if done.returncode == 0 else f"exit {done.returncode}: {done.stderr[-2000:]}"
        return Outcome(command, "ran as a process", args, error, time.perf_counter() - start)

    def _script(self, command: Command, name: str) -> Outcome:
        code = doc_script(command.doc, name)
        assert code is not None
        path = self.cwd / name
        path.write_text(code)
        start = time.process_time()
        runpy.run_path(str(path), run_name="__main__")
        return Outcome(command, f"ran {command.doc}'s {name}", [name], None,
                       time.process_time() - start)  # fmt: skip


def _values(words: list[str], option: str) -> list[str]:
    """The values of every ``option VALUE`` in ``words``."""
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == option]


# ---------------------------------------------------------------------------- fixtures
def tiny_backbone(num_classes: int, input_shape: tuple[int, int, int], **kwargs: Any) -> Any:
    return TinyConvNet(num_classes, input_shape[0])


@pytest.fixture()
def tiny_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ResNets replaced by a tiny network (the ``slow`` test runs the real ones)."""
    from noisylabels.models import BACKBONES

    for name in REAL_BACKBONES:
        monkeypatch.setitem(BACKBONES, name, tiny_backbone)


@pytest.fixture(scope="module")
def doc_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DATA: a tiny MNIST, CIFAR-10 and CIFAR-100 in one folder."""
    root = tmp_path_factory.mktemp("data")
    make_mnist(root)
    make_cifar(root, 10)
    make_cifar(root, 100, n_train=1000, n_test=100)  # every class keeps samples under pair noise
    return root


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RUN_DIR: a finished (shortened) quickstart run."""
    from noisylabels.cli import run

    root = tmp_path_factory.mktemp("finished")
    config = str(REPO / "configs" / "quickstart.yaml")
    run(["fit", "--config", config, "--trainer.default_root_dir", str(root), *SHORT])
    return next(root.rglob("results.json")).parent


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RUN_DIR where a command names classes: a finished CE run on an image folder of the
    classes of conftest's CLASSES."""
    from noisylabels.cli import run

    root = tmp_path_factory.mktemp("named")
    folder = make_image_folder(root / "images", {"train": 8, "val": 2, "test": 2})
    run(
        ["fit", "--config", str(REPO / "configs" / "quickstart.yaml"), "--model", "CE",
         "--model.schedule.warmup_epochs", "0", "--model.alpha", "0",
         "--data", "noisylabels.data.ImageFolderDataModule", "--data.data_dir", str(folder),
         "--data.image_size", "8", "--data.resize_size", "8", "--data.noise_type", "none",
         "--trainer.default_root_dir", str(root / "runs"), *SHORT]
    )  # fmt: skip
    return next(root.rglob("results.json")).parent


def scratch(folder: Path) -> Path:
    """A folder for one doc's commands, as a reader's checkout: configs/ and results/, the
    files the docs assume the reader has (a CIFAR-10N label file, a SLURM setup file)."""
    for name in ("configs", "results"):
        (folder / name).symlink_to(REPO / name)
    (folder / "setup.sh").write_text("source .venv/bin/activate\n")
    labels = torch.arange(200) % 10  # the tiny CIFAR-10's training labels; every 7th flipped
    flipped = (labels + (torch.arange(200) % 7 == 0).long()) % 10
    torch.save({"worse_label": flipped}, folder / "CIFAR-10_human.pt")
    return folder


@pytest.fixture(scope="module")
def option_checks() -> Iterator[None]:
    """A sweep checks each run's options with `noisylabels fit --print_config`; the docs' sweeps
    share most of their runs, so each distinct check runs once per session."""
    import noisylabels.run.cli as run_cli  # the sweep imports it from there when it checks

    real = run_cli.lightning_command
    seen: dict[tuple[str, ...], tuple[str, str, BaseException | None]] = {}

    def once(args: list[str] | None = None) -> Any:
        if args is None or "--print_config" not in args:  # a command's own fit or test
            return real(args)
        key = tuple(args)
        if key not in seen:
            out, err = io.StringIO(), io.StringIO()
            failure = None
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    real(args)
                except BaseException as raised:  # SystemExit of --print_config, or a refusal
                    failure = raised
            seen[key] = (out.getvalue(), err.getvalue(), failure)
        text, errors, failure = seen[key]
        print(text, end="")
        print(errors, end="", file=sys.stderr)
        if failure is not None:
            raise failure

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_cli, "lightning_command", once)
        yield


@pytest.fixture()
def make_runner(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    option_checks: None,
    doc_data: Path,
    finished: Path,
    named: Path,
) -> Any:
    """A runner in a new scratch folder (the current folder while the test runs)."""
    monkeypatch.chdir(scratch(tmp_path))
    return lambda slow=False: DocRunner(tmp_path, doc_data, finished, named, slow=slow)


def _report(outcomes: list[Outcome]) -> str:
    lines = []
    for o in outcomes:
        state = f"FAILED ({o.error})" if o.error else o.how
        lines.append(f"  {o.command}\n    -> {state} [{o.seconds:.1f} s] {' '.join(o.argv)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- tests
def test_the_docs_have_commands() -> None:
    """The extraction finds the docs' commands (so a change of the fence style cannot empty
    the test)."""
    commands = [c for doc in DOCS for block in doc_blocks(doc) for c in block]
    assert sum(c.argv[0] == "noisylabels" for c in commands) > 40
    joined = next(c for c in commands if "--model.transition RUN/transition_estimate.csv" in c.text)
    assert joined.argv[-2:] == ["--model.transition", "RUN/transition_estimate.csv"]  # one line


def test_every_line_is_run_or_skipped_for_a_reason() -> None:
    """Every line of a bash block is a noisylabels command, or one NOT_RUN (or the doc's own
    script, or a torchrun of noisylabels) accounts for."""
    unknown = [
        str(c)
        for doc in DOCS
        for block in doc_blocks(doc)
        for c in block
        if c.argv[0] != "noisylabels"
        and not TORCHRUN.match(" ".join(c.argv))
        and not (DOC_SCRIPT.match(" ".join(c.argv)) and doc_script(c.doc, c.argv[1]))
        and not_run_reason(c) is None
    ]
    assert not unknown, "lines no rule of this test runs or skips:\n" + "\n".join(unknown)


# docs/observability.md appends a second SubsetStatistics and says that a warning follows
@pytest.mark.filterwarnings("ignore:2 SubsetStatistics callbacks would write the same")
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_doc_commands_run(tiny_networks: None, make_runner: Any, doc: Path) -> None:
    """Each doc's commands, in order, in a folder of their own."""
    _check(make_runner().run_doc(doc))


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_doc_commands_run_in_full(make_runner: Any, doc: Path) -> None:
    """The same with the real networks, every fit shortened rather than smoke-tested, and DDP
    over two CPU processes as the real command in a process."""
    _check(make_runner(slow=True).run_doc(doc))


def _check(outcomes: list[Outcome]) -> None:
    print(_report(outcomes))
    failed = [o for o in outcomes if o.error]
    assert not failed, f"doc commands that fail:\n{_report(failed)}\n\nall:\n{_report(outcomes)}"
