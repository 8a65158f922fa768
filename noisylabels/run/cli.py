"""The Lightning stages of the command line: ``noisylabels fit|validate|test|predict --config
FILE.yaml`` (LightningCLI with the project's methods, data modules and defaults).

One stock :class:`~lightning.pytorch.cli.LightningCLI` per stage (``run=False``: it parses and
builds the method, the data module and the trainer through its public hooks), then the stage:
``fit`` is :func:`~noisylabels.run.fit.fit_and_test` with the run's
:class:`~noisylabels.run.plan.RunPlan` and :class:`~noisylabels.run.source.RunSource`;
``validate``/``test`` are the trainer's; ``predict`` writes ``predictions.csv``
(:mod:`noisylabels.run.predictions`). Parse errors and the user errors of constructors end as
one :class:`~noisylabels.errors.NoisyLabelsError` (the ``noisylabels`` command prints it as one
paragraph).
"""

from __future__ import annotations

import inspect
import sys
from argparse import ArgumentError
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_only

from noisylabels.compose import (
    ComposedConfigFile,
    default_root_dir,
    planned_epochs,
    schedule_epochs,
)
from noisylabels.data import NoisyDataModule
from noisylabels.disk.reading import parse_yaml
from noisylabels.errors import InputError, option_error, user_error
from noisylabels.methods import NoisyLabelMethod
from noisylabels.run import identity, resume
from noisylabels.run.chatter import quiet_lightning
from noisylabels.run.devices import device_error
from noisylabels.run.fit import fit_and_test, say_results
from noisylabels.run.loggers import fill_save_dirs, share_run_folder
from noisylabels.run.parsing import (
    STAGE_HELP,
    HelpFormatter,
    NoisyLabelsParser,
    auto_precision,
    constructor_error,
    methods_help,
    parser_key,
    with_group_hint,
    with_group_nulls,
    with_option_hint,
)
from noisylabels.run.plan import RunPlan, check_evaluation, checkpoint_to_evaluate
from noisylabels.run.predictions import predict_into
from noisylabels.run.rules import (
    check_gradient_clip,
    check_precision,
    check_run_length,
    check_seed,
    folder_problem,
    random_seed,
)
from noisylabels.run.source import RunSource

# one device where a config does not say otherwise; the epochs of the method's stage schedule
# and a run folder named after the config's data and method (runs/<dataset>_<method>) where no
# config names them (see before_instantiate_classes)
TRAINER_DEFAULTS: dict[str, Any] = {"max_epochs": None, "devices": 1, "default_root_dir": None}
BATCH_LIMITS = (
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
)
"""The Trainer's options whose integer is a number of batches and whose float a fraction."""
INTEGER_FIRST = {name: int | float | None for name in BATCH_LIMITS}
INTEGER_FIRST["val_check_interval"] = int | float | str | timedelta | dict[str, int] | None
"""Their annotations, integer first (``val_check_interval`` 1: every batch; 1.0: once an
epoch; int-first in Lightning's source, but a union equal to a float-first one may be what
``typing`` hands back)."""


def integers_first() -> None:
    """Annotate :data:`BATCH_LIMITS` ``int | float | None`` on ``L.Trainer.__init__``, so that
    ``--trainer.limit_train_batches 1`` parses to the integer 1 (one batch): Lightning annotates
    them float first, and the parser takes the first member of a union that accepts the text,
    which made it 1.0, every batch. A float (``0.5``, ``1.0``) stays a float."""
    annotations = L.Trainer.__init__.__annotations__
    for name, hint in INTEGER_FIRST.items():
        if name in annotations:
            annotations[name] = hint


STAGES = ("fit", "validate", "test", "predict")
# the arguments of a stage's Trainer method that are the CLI's objects, not options
OBJECTS = {"model", "train_dataloaders", "val_dataloaders", "dataloaders", "datamodule"}


class NoisyLabelsCLI(LightningCLI):
    """LightningCLI of one ``stage``, with the project's options and defaults.

    Its parser is built once per process for each stage and setting (:func:`parser_key`) and
    reused by the next command that needs the same one: building it reads the signatures of the
    trainer, the methods and the data modules, which costs more than parsing a command line,
    and a process that runs several commands (a sweep's checks, an audit's folds) would build
    the same parser each time. A parser is handed back after a parse that succeeded or ended
    on purpose (``--help``, ``--print_config``); one in use is never handed to another CLI."""

    def __init__(self, *args: Any, stage: str = "fit", **kwargs: Any) -> None:
        self.stage = stage
        self.command: list[str] | None = None
        self.checkpoint: resume.Checkpoint | None = None  # what the stage continues or evaluates
        self.results: dict[str, Any] | None = None
        self.plan: RunPlan | None = None  # a fit's, once its checkpoint to resume is chosen
        self._in_use: tuple[Any, Any] | None = None
        try:
            super().__init__(*args, run=False, **kwargs)
        except SystemExit as done:
            self._hand_back(kept=not done.code)
            raise
        self._hand_back()

    def _hand_back(self, kept: bool = True) -> None:
        if kept and self._in_use is not None and self._in_use[0] is not None:
            _PARSERS.setdefault(self._in_use[0], []).append(self._in_use[1])
        self._in_use = None

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        """Lightning's parser of this stage, or an idle one built for the same settings."""
        key = parser_key(self, main_kwargs)
        if idle := _PARSERS.get(key):  # (a key of None is never stored)
            self.parser = idle.pop()
        else:
            super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        self._in_use = (key, self.parser)

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Lightning's parser with a ``--config`` that understands ``compose:``."""
        kwargs.setdefault("prog", f"noisylabels {self.stage}")
        kwargs.setdefault("description", STAGE_HELP.get(self.stage))
        kwargs.setdefault("dump_header", [f"lightning.pytorch=={L.__version__}"])
        kwargs.setdefault("exit_on_error", False)  # parse errors: one paragraph
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
        RunPlan.add_arguments(parser)  # every stage: a run's config.yaml holds them
        parser.link_arguments(
            "data.num_classes", "model.init_args.num_classes", apply_on="instantiate"
        )
        parser.link_arguments(
            "data.input_shape", "model.init_args.input_shape", apply_on="instantiate"
        )
        parser.add_method_arguments(L.Trainer, self.stage, skip=OBJECTS, fail_untyped=False)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Lightning's parsing; also keeps the command line (``self.command``) for
        ``results.json``'s provenance, names the closest real options of an unknown one
        (:func:`~noisylabels.run.parsing.with_option_hint`), refuses a seed numpy cannot take
        and draws the random seed ``--seed_everything true`` asks for (Lightning's would be
        0)."""
        if args is None or isinstance(args, (list, tuple)):
            argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
            self.command = [self.stage, *argv]
            try:
                self.config = parser.parse_args(with_group_nulls(argv))
            except ArgumentError as err:  # an unknown option: with the closest real ones
                raise with_option_hint(err, parser, argv) from err
        else:  # a dict or Namespace of options, parsed as Lightning's would (without its warning
            # against args beside a command line: a command of this package is both)
            self.config = parser.parse_object(args)
        check_seed(self.config.get("seed_everything"))
        if self.config.get("seed_everything") is True:  # as its help says: a random seed, which
            self.config["seed_everything"] = random_seed()  # config.yaml then records

    def before_instantiate_classes(self) -> None:
        """Resolve ``--trainer.max_epochs`` left unset (null): the epochs of the method's stage
        schedule, warm-up + main + revision (:func:`~noisylabels.compose.schedule_epochs`);
        ``--trainer.precision`` left unset: ``bf16-mixed`` where the run trains on a CUDA GPU
        with bf16 support, Lightning's ``32-true`` elsewhere; and ``--trainer.default_root_dir``
        left unset: ``runs/<dataset>_<method>``; a logger that requires a ``save_dir`` and has
        none writes under that root, as the default logger does (:mod:`noisylabels.run.loggers`).
        The resolved values are what ``config.yaml`` records. Refuse a fit that would train
        forever or whose folder cannot be made."""
        config, trainer = self.config, self.config.get("trainer")
        if trainer.get("max_epochs") is None and config.get("model"):
            trainer["max_epochs"] = schedule_epochs(config.get("model"))
        check_precision(trainer.get("precision"))
        if trainer.get("precision") is None:
            trainer["precision"] = auto_precision(trainer.get("accelerator"))
        if not trainer.get("default_root_dir"):
            trainer["default_root_dir"] = str(default_root_dir(config))
        if self.stage != "fit":  # the run it evaluates, found as the fit's logger wrote it
            path, self.checkpoint = checkpoint_to_evaluate(
                config.get("ckpt_path"), self.stage, Path(trainer["default_root_dir"]),
                trainer.get("logger"),
            )  # fmt: skip
            config["ckpt_path"] = path
        if self.stage != "fit" and trainer.get("logger") is None:
            trainer["logger"] = False  # an evaluation starts no run folder of its own
        fill_save_dirs(trainer.get("logger"), str(trainer["default_root_dir"]))
        if self.stage == "fit":
            check_run_length(trainer)
            check_gradient_clip(trainer.get("gradient_clip_val"))
            problem = folder_problem(Path(trainer["default_root_dir"]))
            if problem is not None:
                raise InputError(problem.replace("the run folder", "--trainer.default_root_dir"))
        # the hyperparameters Lightning saves, dumped without validating the parse again
        self.config_dump = parse_yaml(
            self.parser.dump(self.config, skip_link_targets=False, skip_none=False,
                             skip_validation=True),
            "the resolved config",
        )  # fmt: skip

    @property
    def config_text(self) -> str:
        """The resolved config, as ``config.yaml`` holds it (validated when it was parsed)."""
        return self.parser.dump(self.config, skip_none=False, skip_validation=True)

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        """Lightning's trainer; a fit that continues a run writes into the run's own folder
        (the checkpoint chosen by the plan, :meth:`RunPlan.checkpoint_to_resume`)."""
        trainer_config = self.config.get("trainer")
        root, logger = Path(trainer_config["default_root_dir"]), trainer_config.get("logger")
        if self.stage == "fit":
            plan = RunPlan.from_config(self.config)
            now = identity.of_objects(
                self.model, self.datamodule, seed=plan.run_seed(),
                trainer_options=resume.plain_options(trainer_config),
            )  # fmt: skip
            self.checkpoint = plan.checkpoint_to_resume(root, logger, now)
            self.plan = plan.resolved(self.checkpoint)
            folder = self.checkpoint.run_folder if self.checkpoint is not None else None
            if folder is not None and (pinned := resume.continue_logger(folder, logger)):
                kwargs["logger"] = pinned  # continue in the run's own folder
            elif self.checkpoint is not None and self.checkpoint.finished:
                rank_zero_only(print)(
                    f"noisylabels: {self.checkpoint.origin} is a finished run, which is never "
                    "rewritten: it continues from its last.ckpt in a new run folder",
                    file=sys.stderr,
                )
        trainer = super().instantiate_trainer(**kwargs)
        share_run_folder(trainer.loggers)
        return trainer


def run_stage(cli: NoisyLabelsCLI) -> None:
    """Run the stage ``cli`` was built for, on its method, data module and trainer."""
    config = cli.config
    if cli.stage == "fit":
        source = RunSource(
            command=cli.command,
            config=config.as_dict(),
            config_text=cli.config_text,
            protocol_epochs=planned_epochs(config.get("config"), TRAINER_DEFAULTS),
        )
        cli.results = fit_and_test(cli.model, cli.datamodule, cli.trainer, cli.plan, source=source)
        say_results(cli.trainer, cli.results)
        return
    found = check_evaluation(cli.checkpoint, cli.model, cli.datamodule, cli.stage)
    # every option of the stage's Trainer method the parser added (add_method_arguments)
    named = inspect.signature(getattr(L.Trainer, cli.stage)).parameters
    options = {k: config.get(k) for k in named if k not in OBJECTS and k != "self" and k in config}
    if cli.stage == "predict":
        predict_into(cli.trainer, cli.model, cli.datamodule, cli.checkpoint, found, options)
        return
    getattr(cli.trainer, cli.stage)(cli.model, datamodule=cli.datamodule, **options)


# idle parsers by parser_key
_PARSERS: dict[Any, list[Any]] = {}


def make_cli(
    args: list[str] | None = None, *, stage: str | None = None, run: bool = True, **options: Any
) -> NoisyLabelsCLI:
    """The CLI of ``stage`` (default: the first of ``args`` where it names one, else ``fit``)
    over ``args`` (``sys.argv`` where ``None``): the project's method and data classes and
    defaults, built; with ``run`` the stage runs too. ``options`` override LightningCLI's
    arguments."""
    argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
    if stage is None:
        stage = argv.pop(0) if argv and argv[0] in STAGES else "fit"
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
    integers_first()
    cli = NoisyLabelsCLI(NoisyLabelMethod, NoisyDataModule, args=argv, stage=stage, **settings)
    if run:
        run_stage(cli)
    return cli


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
    quiet_lightning()  # its advice that does not apply here, its advertising
    try:
        return make_cli(argv)
    except ArgumentError as err:
        stage = next((a for a in argv if not a.startswith("-")), "fit")
        stage = stage if stage in ("fit", "validate", "test", "predict") else "fit"
        raise with_group_hint(option_error(err, stage)) from err
    except Exception as err:
        found = user_error(err) or constructor_error(err) or device_error(err)
        if found is None or found is err:
            raise
        raise found from err  # the user error jsonargparse wrapped into its own
