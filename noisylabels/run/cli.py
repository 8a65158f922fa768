"""The Lightning stages of the command line: ``noisylabels fit|validate|test|predict --config
FILE.yaml`` (LightningCLI with the project's methods, data modules and defaults).

After ``fit`` the best checkpoint (by noisy-validation accuracy unless ``--checkpoint.monitor``
says otherwise) is tested on the clean test set and ``results.json`` is written to the run dir
(:func:`~noisylabels.run.fit.fit_and_test`). ``--ckpt_path last`` (or a run folder, or a
checkpoint file in one) continues that run in its own folder, checked against the config
(:mod:`noisylabels.run.resume`). Parse errors and the user errors of constructors end as one
:class:`~noisylabels.errors.NoisyLabelsError` (the ``noisylabels`` command prints it as one
paragraph).
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from argparse import ArgumentError
from pathlib import Path
from typing import Any

import lightning as L
import torch
from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_only

from noisylabels.data import NoisyDataModule
from noisylabels.errors import InputError, option_error, user_error
from noisylabels.methods import NoisyLabelMethod, describe_methods
from noisylabels.methods.core.groups import OPTION_GROUPS, option_group_of
from noisylabels.reading import parse_yaml
from noisylabels.run import identity, resume, searches
from noisylabels.run.artifacts import run_dir
from noisylabels.run.chatter import drop_tips
from noisylabels.run.checkpoints import BEST_CHECKPOINT, WarmupAwareCheckpoint
from noisylabels.run.compose import (
    ComposedConfigFile,
    default_root_dir,
    planned_epochs,
    schedule_epochs,
)
from noisylabels.run.defaults import class_path
from noisylabels.run.devices import device_error
from noisylabels.run.fit import fit_and_test
from noisylabels.run.lock import hold
from noisylabels.run.loggers import fill_save_dirs, logger_keys, share_run_folder
from noisylabels.run.predictions import PREDICTIONS_FILE, PredictionWriter
from noisylabels.run.rules import (
    check_gradient_clip,
    check_precision,
    check_run_length,
    folder_problem,
)

# one device where a config does not say otherwise; the epochs of the method's stage schedule
# and a run folder named after the config's data and method (runs/<dataset>_<method>) where no
# config names them (see before_instantiate_classes)
TRAINER_DEFAULTS: dict[str, Any] = {"max_epochs": None, "devices": 1, "default_root_dir": None}

MAX_SEED = 2**32 - 1  # numpy's seeds are unsigned 32-bit integers
# --ckpt_path values Lightning resolves itself (for validate/test/predict after a fit)
LIGHTNING_CKPT_NAMES = ("best", "registry")


class HelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help formatter, keeping the line breaks of group descriptions (the list
    of methods under ``--model``)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


def methods_help() -> str:
    """The methods of ``--model``, one line each."""
    lines = describe_methods().splitlines()
    return (
        "Methods: --model NAME (or noisylabels.methods.NAME); its options: --model.help NAME\n"
        + "\n".join("  " + line for line in lines)
    )


class NoisyLabelsParser(LightningArgumentParser):
    """Lightning's parser, accepting a logger that requires a ``save_dir`` and was given none
    (``--trainer.logger CSVLogger``): the CLI sets it to the run's root before the logger is
    built (:mod:`noisylabels.run.loggers`)."""

    def validate(self, namespace: Any, *args: Any, **kwargs: Any) -> None:
        keys = logger_keys(namespace) if kwargs.get("branch") is None else []
        if keys:
            namespace = namespace.clone()
            for key in keys:  # any folder will do for the check; the root is set later
                fill_save_dirs(namespace[key], ".")
        super().validate(namespace, *args, **kwargs)


searches.remember_searches(NoisyLabelsParser)


class NoisyLabelsCLI(LightningCLI):
    """LightningCLI with the project's checkpointing, links and post-fit test.

    Its parsers are built once per process for what they are built from
    (:func:`parser_key`) and reused by the next command that needs the same ones: building them
    reads the signatures of the trainer, the methods and the data modules for each of the four
    stages, which costs more than parsing a command line, and a process that runs several
    commands (a sweep's checks, an audit's folds, Python code calling :func:`make_cli` in a
    loop) would build the same parsers each time. A parser keeps nothing of a parse but the
    print-config request and the instantiators of its CLI, both cleared when it is put back
    (:func:`reset_parsers`); one in use is never handed to another CLI."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._parser_key: Any = None
        try:
            super().__init__(*args, **kwargs)
        finally:
            if self._parser_key is not None and hasattr(self, "parser"):
                parsers = (self.parser, getattr(self, "_subcommand_parsers", None),
                           getattr(self, "_subcommand_method_arguments", None))  # fmt: skip
                reset_parsers(parsers)
                _PARSERS.setdefault(self._parser_key, []).append(parsers)

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        """Lightning's parsers, or an idle set built for the same classes and settings."""
        self._parser_key = parser_key(self, add_subcommands, main_kwargs, subparser_kwargs)
        idle = _PARSERS.get(self._parser_key) if self._parser_key is not None else None
        if not idle:
            super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
            return
        self.parser, subcommand_parsers, method_arguments = idle.pop()
        if add_subcommands:
            self._subcommand_parsers = subcommand_parsers
            self._subcommand_method_arguments = method_arguments

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Lightning's parsing; also keeps the command line (``self.command``) for
        ``results.json``'s provenance."""
        if args is None or isinstance(args, (list, tuple)):
            self.command: list[str] | None = [
                str(a) for a in (sys.argv[1:] if args is None else args)
            ]
            nulls = with_group_nulls(self.command)
            if nulls != self.command:  # Lightning's parse (it would warn of args beside argv)
                self.config = parser.parse_args(nulls)
                return
        else:
            self.command = None
        super().parse_arguments(parser, args)

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Lightning's parser with a ``--config`` that understands ``compose:``."""
        kwargs.setdefault("dump_header", [f"lightning.pytorch=={L.__version__}"])
        kwargs.setdefault("exit_on_error", False)  # parse errors: one paragraph, see run()
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # --trainer.max_epoch is not --trainer.max_epochs
        parser = self.parser_class(**kwargs)
        parser.add_argument(
            "-c",
            "--config",
            action=ComposedConfigFile,
            help="Path to a configuration file in yaml format (may compose others with "
            "'compose: [a.yaml, b.yaml]'), or a configuration string. Repeatable.",
        )
        return parser

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        if "model" in parser.groups:
            parser.groups["model"].description = methods_help()
        parser.add_lightning_class_args(WarmupAwareCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                # the per-subset loss curves; --trainer.callbacks '[]' drops them
                "trainer.callbacks": [{"class_path": "noisylabels.callbacks.SubsetStatistics"}],
                **{f"checkpoint.{key}": value for key, value in BEST_CHECKPOINT.items()},
            }
        )
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=True,
            help="After fit, test the best checkpoint on the clean test set and write "
            "results.json in the run dir.",
        )
        parser.add_argument(
            "--tail_test_epochs",
            type=int,
            default=0,
            help="Also test the method's prediction and every further network on the clean "
            "test set at the end of each of the last N epochs (results.json: test_acc_tail, "
            "test_acc_tail_mean: the mean over the networks, or over the prediction of a method "
            "that predicts with its networks together, DivideMix; report --metric tail), as the "
            "references of Co-teaching, MentorNet and Decoupling report.",
        )
        parser.link_arguments(
            "data.num_classes", "model.init_args.num_classes", apply_on="instantiate"
        )
        parser.link_arguments(
            "data.input_shape", "model.init_args.input_shape", apply_on="instantiate"
        )

    def _set_seed(self) -> None:
        """Lightning's seeding, after refusing a seed numpy cannot take (one paragraph naming
        ``--seed_everything`` instead of Lightning's traceback)."""
        seed = self._setting("seed_everything")
        if not isinstance(seed, bool) and isinstance(seed, int) and not 0 <= seed <= MAX_SEED:
            raise InputError(
                f"--seed_everything must be an integer from 0 to {MAX_SEED} (true: a random "
                f"seed, false: no seeding), got {seed}"
            )
        super()._set_seed()

    def _parse_ckpt_path(self) -> None:
        """Locate and read ``--ckpt_path`` (``last``, ``hpc``, a run folder or a file),
        weights-only. Unlike Lightning's CLI this never applies the checkpoint's hyperparameters
        over the config: a fit continues only the same experiment (chosen and checked once the
        method and data module are built, :meth:`instantiate_trainer`)."""
        self._checkpoint: resume.Checkpoint | None = None
        self._candidates: list[tuple[Path, Path | None]] = []
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        value = config.get("ckpt_path")
        if not value:
            return
        value = str(value)
        if value in LIGHTNING_CKPT_NAMES and not Path(value).exists():
            if value == "best":
                raise InputError(
                    "--ckpt_path best names the best checkpoint of a fit in this same process; "
                    f"`noisylabels {subcommand}` runs none: pass a run folder, a checkpoint file "
                    "or `last` (the newest run under --trainer.default_root_dir)"
                )
            if subcommand == "fit":
                raise InputError(
                    f"--ckpt_path {value} is not a run to continue: pass a run folder, a "
                    "checkpoint file or `last`"
                )
            return  # registry: Lightning's model registry
        trainer = config.get("trainer") or {}
        root = Path(trainer.get("default_root_dir") or default_root_dir(config))
        self._candidates = resume.candidates(value, root, trainer.get("logger"))
        if subcommand != "fit":  # a run's: the checkpoint its fit reported; a file: that file
            path, origin = self._candidates[0]
            named = value not in (resume.LAST, resume.HPC) and Path(value).expanduser().is_file()
            chosen = path if named else resume.reported(path, origin)
            self._checkpoint = resume.load(chosen, origin)
            config.ckpt_path = str(chosen)
            what = (
                "the file named"
                if named
                else "the selected checkpoint its fit reported"
                if chosen != path
                else "its last state: the run reported no selected checkpoint"
            )
            rank_zero_only(print)(
                f"noisylabels {subcommand}: {chosen} ({what})", file=sys.stderr, flush=True
            )

    def before_instantiate_classes(self) -> None:
        """Resolve ``--trainer.max_epochs`` left unset (null): the epochs of the method's stage
        schedule, warm-up + main + revision (:func:`~noisylabels.run.compose.schedule_epochs`);
        ``--trainer.precision`` left unset: ``bf16-mixed`` where the run trains on a CUDA GPU
        with bf16 support, Lightning's ``32-true`` elsewhere; and ``--trainer.default_root_dir``
        left unset: ``runs/<dataset>_<method>``; a logger that requires a ``save_dir`` and has
        none writes under that root, as the default logger does (:mod:`noisylabels.run.loggers`).
        The resolved values are what ``config.yaml`` records. Refuse a fit that would train
        forever or whose folder cannot be made."""
        config = self.config.get(self.subcommand, self.config)
        trainer = config.get("trainer")
        if trainer is not None and trainer.get("max_epochs") is None and config.get("model"):
            trainer["max_epochs"] = schedule_epochs(config.get("model"))
        if trainer is not None:
            check_precision(trainer.get("precision"))
        if trainer is not None and trainer.get("precision") is None:
            trainer["precision"] = auto_precision(trainer.get("accelerator"))
        if trainer is not None and not trainer.get("default_root_dir"):
            trainer["default_root_dir"] = str(default_root_dir(config))
        if self.subcommand != "fit" and trainer is not None and trainer.get("logger") is None:
            trainer["logger"] = False  # an evaluation starts no run folder of its own
        if trainer is not None:
            fill_save_dirs(trainer.get("logger"), str(trainer["default_root_dir"]))
        if self.subcommand == "fit" and trainer is not None:
            check_run_length(trainer)
            check_gradient_clip(trainer.get("gradient_clip_val"))
            problem = folder_problem(Path(trainer["default_root_dir"]))
            if problem is not None:
                raise InputError(problem.replace("the run folder", "--trainer.default_root_dir"))

    def _setting(self, key: str) -> Any:
        return self.config.get(self.subcommand, self.config).get(key)

    def _identity(self) -> dict[str, Any]:
        """This run's identity as far as it is known before the data is set up."""
        return identity.of_objects(
            self.model,
            self.datamodule,
            seed=self._seed(),
            trainer_options=resume.plain_options(self._setting("trainer")),
        )

    def _seed(self) -> Any:
        seed = os.environ.get("PL_GLOBAL_SEED")
        return int(seed) if seed is not None else self._setting("seed_everything")

    def _choose_checkpoint(self) -> resume.Checkpoint:
        """The checkpoint ``--ckpt_path`` continues: for ``last`` the newest run of this same
        experiment; any other checkpoint must be of it (refused before anything is written)."""
        now = self._identity()
        first: tuple[resume.Checkpoint, dict[str, list[Any]]] | None = None
        for path, folder in self._candidates:
            checkpoint = resume.load(path, folder)
            changes = identity.differences(checkpoint.identity, now, known_after_setup=False)
            if not changes:
                return checkpoint
            first = first or (checkpoint, changes)
        assert first is not None
        checkpoint, changes = first
        if len(self._candidates) > 1:
            raise InputError(
                f"--ckpt_path last: none of the {len(self._candidates)} runs with a "
                f"{resume.CHECKPOINT_FILE} under {self._candidates[0][0].parents[2]} is of this "
                "experiment (a resume continues the same experiment only); the newest, "
                f"{checkpoint.path}, differs in {identity.describe(changes)}. Start a new run "
                "without --ckpt_path, or pass the run folder to continue with its own config"
            )
        raise InputError(resume.refusal(checkpoint.path, changes))

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        if self.subcommand == "fit" and self._candidates:
            self._checkpoint = self._choose_checkpoint()
            folder = self._checkpoint.run_folder
            logger = self._setting("trainer").get("logger")
            if folder is not None:
                pinned = resume.continue_logger(folder, logger)
                if pinned is not None:
                    kwargs["logger"] = pinned  # continue in the run's own folder
            elif self._checkpoint.finished:
                rank_zero_only(print)(
                    f"noisylabels: {self._checkpoint.origin} is a finished run, which is never "
                    "rewritten: it continues from its last.ckpt in a new run folder",
                    file=sys.stderr,
                )
        trainer = super().instantiate_trainer(**kwargs)
        share_run_folder(trainer.loggers)
        return trainer

    def _config_text(self) -> str:
        """The resolved config, as ``config.yaml`` holds it (validated when it was parsed)."""
        parser = self._parser(self.subcommand)
        return parser.dump(self.config[self.subcommand], skip_none=False, skip_validation=True)

    def _dump_config(self) -> None:
        """Lightning's dump of the config for the method's and data module's hyperparameters,
        without validating again what the parse validated (a fifth of a smoke run's time)."""
        if hasattr(self, "config_dump"):
            return
        text = self.parser.dump(
            self.config, "yaml", skip_link_targets=False, skip_none=False, skip_validation=True
        )
        self.config_dump = parse_yaml(text, "the resolved config")
        if "subcommand" in self.config:
            self.config_dump = self.config_dump[self.config.subcommand]

    def fit(
        self, model: Any, datamodule: Any = None, ckpt_path: str | None = None, **kwargs: Any
    ) -> None:
        """``noisylabels fit``: :func:`~noisylabels.run.fit.fit_and_test`, then print where the
        results are."""
        results = fit_and_test(
            model,
            datamodule,
            self.trainer,
            ckpt_path=self._checkpoint,
            weights_only=kwargs.get("weights_only"),
            test=bool(self._setting("test_after_fit")),
            seed=self._seed(),
            config=self.config[self.subcommand].as_dict(),
            config_text=self._config_text(),
            tail_test_epochs=int(self._setting("tail_test_epochs") or 0),
            command=getattr(self, "command", None),
            protocol_epochs=planned_epochs(self._setting("config"), TRAINER_DEFAULTS),
        )
        self.results = results
        if results is None:
            return
        if self.trainer.fast_dev_run:
            print("fast_dev_run: every stage ran once; a smoke test writes no results.json")
            return
        if results["test_acc"] is not None:
            # a run without validation selects no checkpoint: its figure is the last epoch's
            unselected = results.get("best_epoch") is None
            which = " (the last epoch's: no checkpoint was selected)" if unselected else ""
            print(f"clean test accuracy: {results['test_acc']:.4f} ({results['method']}){which}")
        if results.get("health", "ok") != "ok":
            print(
                f"noisylabels: warning: the run stopped learning ({results['health']}); "
                "results.json records it as its health, and `noisylabels report` leaves the run "
                "out of its means (--include-unhealthy takes it in)",
                file=sys.stderr,
            )
        print(f"run folder: {run_dir(self.trainer)}")

    def before_test(self) -> None:
        self._say_data_differences()

    def before_validate(self) -> None:
        self._say_data_differences()

    def before_predict(self) -> None:
        found = self._say_data_differences()
        checkpoint = getattr(self, "_checkpoint", None)
        if found and checkpoint is not None and checkpoint.origin is not None:
            raise InputError(
                f"predictions of other data than the run's are not written into its folder "
                f"({checkpoint.origin}), where they would pass for its own: give the run's data "
                f"options ({', '.join(found)} as in its config.yaml), or copy the checkpoint "
                "file out of the run folder and predict from the copy"
            )

    def _say_data_differences(self) -> dict[str, list]:
        """Say where the data of an evaluation of a run's checkpoint differs from its fit's
        (:func:`~noisylabels.run.identity.evaluation_differences`): its figures are then of
        other samples, labels or inputs than the run's. Returns the differences."""
        checkpoint = getattr(self, "_checkpoint", None)
        if checkpoint is None:
            return {}
        now = identity.of_objects(self.model, self.datamodule, seed=None, trainer_options=None)
        model = identity.model_differences(checkpoint.identity, now)
        if model:
            origin = checkpoint.origin
            own = (
                f"`noisylabels {self.subcommand} --config {origin / resume.CONFIG_FILE} "
                f"--ckpt_path {origin}`"
                if origin is not None
                else "the config the checkpoint was trained with"
            )
            raise InputError(
                f"--ckpt_path {checkpoint.path} holds another model than this command builds: "
                f"it differs in {identity.describe(model)}, so its weights do not load into "
                f"this one (fit refuses the same). Evaluate it with its own config: {own}"
            )
        found = identity.evaluation_differences(checkpoint.identity, now)
        if found:
            changed = ", ".join(
                f"{name} {json.dumps(b)} -> {json.dumps(a)}" for name, (b, a) in found.items()
            )
            rank_zero_only(print)(
                f"noisylabels {self.subcommand}: the data differs from the one {checkpoint.path} "
                f"was fit on ({changed}): the figures below are of this data, not the run's",
                file=sys.stderr,
                flush=True,
            )
        return found

    def predict(self, model: Any, datamodule: Any = None, **kwargs: Any) -> None:
        """``noisylabels predict``: Lightning's predict, with the class probabilities of every
        sample written to ``predictions.csv`` in the run folder of ``--ckpt_path`` (the new run
        folder where the checkpoint is of none)."""
        checkpoint = getattr(self, "_checkpoint", None)
        folder = checkpoint.origin if checkpoint is not None else None
        path = (folder or run_dir(self.trainer)) / PREDICTIONS_FILE
        self.trainer.callbacks.append(PredictionWriter(path))
        lock = None
        if self.trainer.is_global_zero:  # the one writer of the folder while it predicts
            lock = hold(path.parent, "noisylabels predict", doing="this predict")
        try:
            self.trainer.predict(model, datamodule=datamodule, **kwargs)
        finally:
            if lock is not None:
                lock.release()
        if self.trainer.is_global_zero:
            print(f"predictions: {path}")


# idle parsers by parser_key: (main parser, its stage parsers, the stage method arguments)
_PARSERS: dict[Any, list[tuple[Any, Any, Any]]] = {}


def _frozen(value: Any) -> Any:
    """``value`` as a hashable key part (mappings and sequences as tuples); raises TypeError
    for what cannot be one."""
    if isinstance(value, dict):
        return ("dict", tuple((k, _frozen(v)) for k, v in sorted(value.items(), key=repr)))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return (type(value).__name__, tuple(_frozen(v) for v in items))
    hash(value)
    return value


def parser_key(
    cli: LightningCLI, add_subcommands: bool, main_kwargs: Any, subparser_kwargs: Any
) -> Any:
    """What the parsers of ``cli`` are built from: its class, the classes and settings it
    passes Lightning, the environment jsonargparse reads at build time and the list of methods
    (the help of ``--model``); ``None`` where a setting cannot be a key (never reused)."""
    try:
        return _frozen(
            (
                type(cli),
                add_subcommands,
                main_kwargs,
                subparser_kwargs,
                cli.parser_class,
                cli.trainer_class,
                cli.model_class,
                cli.datamodule_class,
                cli.subclass_mode_model,
                cli.subclass_mode_data,
                cli.seed_everything_default,
                cli.trainer_defaults,
                cli.auto_configure_optimizers,
                os.environ.get("JSONARGPARSE_DEFAULT_ENV"),
                methods_help(),
            )
        )
    except TypeError:
        return None


def reset_parsers(parsers: tuple[Any, Any, Any]) -> None:
    """Clear what a parse and its CLI leave on ``parsers``: a ``--print_config`` request that
    an error cut short, the instantiators bound to the CLI."""
    main, stages, _ = parsers
    for parser in (main, *(stages or {}).values()):
        parser.__dict__.pop("print_config", None)
        parser._instantiators = None


def auto_precision(accelerator: Any) -> str | None:
    """The precision of a run that does not set one: ``bf16-mixed`` where ``accelerator`` (a
    name; ``auto`` picks CUDA when there is one) is a CUDA GPU with bf16 support, else ``None``
    (Lightning's ``32-true``)."""
    cuda = torch.cuda.is_available() and str(accelerator).lower() in ("auto", "gpu", "cuda")
    return "bf16-mixed" if cuda and torch.cuda.is_bf16_supported() else None


def make_cli(args: list[str] | None, **options: Any) -> NoisyLabelsCLI:
    """The ``noisylabels fit`` CLI over ``args`` (``sys.argv`` where ``None``): the project's
    method and data classes and defaults; ``options`` override LightningCLI's arguments (e.g.
    ``run=False`` to build the model and data module only)."""
    settings: dict[str, Any] = {
        "subclass_mode_model": True,
        "subclass_mode_data": True,
        "seed_everything_default": 0,
        "trainer_defaults": TRAINER_DEFAULTS,
        "save_config_callback": None,  # config.yaml is the run record's
        "auto_configure_optimizers": False,
        "parser_class": NoisyLabelsParser,
    }
    settings.update(options)
    return NoisyLabelsCLI(NoisyLabelMethod, NoisyDataModule, args=args, **settings)


def lightning_command(args: list[str] | None = None) -> NoisyLabelsCLI:
    """Run a Lightning stage (``args`` as on the command line after ``noisylabels``, e.g.
    ``["fit", "--config", "configs/quickstart.yaml"]``; ``None``: ``sys.argv``) and return the
    CLI object. Parse errors and errors of the constructors raise the user error behind them."""
    argv = list(sys.argv[1:] if args is None else args)
    if "--model.help" in argv:  # without a method name: the list of methods
        after = argv.index("--model.help") + 1
        if after == len(argv) or argv[after].startswith("-"):
            print(methods_help())
            raise SystemExit(0)
    # the project's epoch values are already reduced over DDP processes (torchmetrics' compute,
    # strategy.reduce) when they are logged: Lightning's advice to add sync_dist does not apply
    warnings.filterwarnings(
        "ignore", message=r"It is recommended to use `self\.log\('(train|val|test|subsets)/"
    )
    # last.ckpt's writer is a second checkpoint callback; "best" is the first one's, as meant
    warnings.filterwarnings("ignore", message=r".*configured with multiple `ModelCheckpoint`")
    # `test` / `predict --ckpt_path`: the fit callbacks Lightning asks for again (the run's
    # recorder, its health monitor) keep what only a fit continues; evaluation needs the weights
    warnings.filterwarnings("ignore", message=r".*callbacks used to create the checkpoint need")
    drop_tips()  # Lightning's advertising for its cloud services, printed by every trainer
    try:
        return make_cli(None if args is None else argv)
    except ArgumentError as err:
        raise with_group_hint(option_error(err)) from err
    except Exception as err:
        found = user_error(err) or constructor_error(err) or device_error(err)
        if found is None or found is err:
            raise
        raise found from err  # the user error jsonargparse wrapped into its own


GROUP_OPTION = re.compile(r"--model\.(\w+)\.(\w+)(?:=(.*))?$")


def with_group_nulls(argv: list[str]) -> list[str]:
    """``argv`` with ``--model.GROUP.OPTION null`` of an option group written as
    ``--model.GROUP '{OPTION: null}'``: jsonargparse hands an option nested in a method's
    ``init_args`` on as the text of its value, which makes null the string ``None``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        found = GROUP_OPTION.match(argv[i])
        value = found and (found.group(3) if found.group(3) is not None else None)
        if found and value is None and i + 1 < len(argv):
            value, step = argv[i + 1], 2
        else:
            step = 1
        if found and found.group(1) in OPTION_GROUPS and value in ("null", "~"):
            out += [f"--model.{found.group(1)}", f"{{{found.group(2)}: null}}"]
            i += step
        else:
            out.append(argv[i])
            i += 1
    return out


def with_group_hint(error: InputError) -> InputError:
    """``error``, refusing a method option that lives in an option group (``--model.lr``, or
    ``lr:`` under a config's ``init_args``), with where it is: ``--model.optim.lr``."""
    found = re.search(r"Option '(\w+)' is not accepted|unrecognized arguments: --(\w+)", str(error))
    option = found and (found.group(1) or found.group(2))
    group = option_group_of(option) if option else None
    if group is None:
        return error
    return type(error)(
        f"{error} The method's option {option} is --model.{group}.{option} (in a config: "
        f"{group}: {{{option}: ...}} under model.init_args)"
    )


# jsonargparse's report of a class that could not be built, and the groups the CLI builds
_BUILD_FAILED = "Does not validate against any of the Union subtypes"
_GROUPS = {NoisyLabelMethod: "model", NoisyDataModule: "data"}


def constructor_error(err: BaseException) -> InputError | None:
    """A ``ValueError`` or ``TypeError`` that the constructor of the method or the data module
    raised (jsonargparse reports it as its own ``ValueError`` raised from it), as an
    :class:`InputError` naming the option group and the class; ``None`` for anything else."""
    cause = err.__cause__
    message = str(err)
    if not message.startswith(_BUILD_FAILED) or not isinstance(cause, (ValueError, TypeError)):
        return None
    subtypes = re.search(r"Subtypes: \[(.*?)\]", message)
    line = subtypes.group(1) if subtypes else ""
    named = [(base, g) for base, g in _GROUPS.items() if class_path(base) in line]
    if not named:
        return None
    base, group = named[0]
    # the given value's class_path comes after its init_args (which may hold others)
    found = re.findall(r"class_path='([\w.]+)'", message)
    name = found[-1] if found else base.__name__
    return InputError(
        f"--{group} ({name}): {cause}. Its options: noisylabels fit --{group}.help {name}"
    )
