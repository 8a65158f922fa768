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

import re
import sys
import warnings
from argparse import ArgumentError
from pathlib import Path
from typing import Any

import lightning as L
import torch
from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_only

from noisylabels.data import NoisyDataModule
from noisylabels.errors import InputError, option_error, user_error
from noisylabels.methods import NoisyLabelMethod, describe_methods
from noisylabels.run import resume
from noisylabels.run.artifacts import run_dir
from noisylabels.run.checkpoints import BEST_CHECKPOINT, WarmupAwareCheckpoint
from noisylabels.run.compose import ComposedConfigFile, default_root_dir
from noisylabels.run.defaults import add_config_text, class_path
from noisylabels.run.fit import fit_and_test
from noisylabels.run.predictions import PREDICTIONS_FILE, PredictionWriter
from noisylabels.run.storage import write_text

# the paper's protocol, where a config does not say otherwise; a run folder named after the
# config's data and method where no config names one (runs/<dataset>_<method>, see compose)
TRAINER_DEFAULTS: dict[str, Any] = {"max_epochs": 80, "devices": 1, "default_root_dir": None}

MAX_SEED = 2**32 - 1  # numpy's seeds are unsigned 32-bit integers
# --ckpt_path values Lightning resolves itself (for validate/test/predict after a fit)
LIGHTNING_CKPT_NAMES = ("best", "hpc", "registry")


class SaveConfigToTensorBoard(SaveConfigCallback):
    """Save the resolved config as ``config.yaml`` in the run dir (atomically: a reader never
    sees half of it) and in TensorBoard's text tab (not under ``fast_dev_run``, which writes no
    run folder)."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if trainer.fast_dev_run or self.already_saved:
            return
        if self.multifile or not self.overwrite or not self.save_to_log_dir:
            super().setup(trainer, pl_module, stage)  # Lightning's own writing
            return
        log_dir = trainer.log_dir  # a broadcast every process joins
        if trainer.is_global_zero:
            text = self.parser.dump(self.config, skip_none=False)
            write_text(Path(log_dir) / self.config_filename, text)
            add_config_text(trainer, text)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)

    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """After Lightning's own writing of the config: the config in TensorBoard's text tab."""
        add_config_text(trainer, self.parser.dump(self.config, skip_none=False))


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


class NoisyLabelsCLI(LightningCLI):
    """LightningCLI with the project's checkpointing, links and post-fit test."""

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Lightning's parsing; also keeps the command line (``self.command``) for
        ``results.json``'s provenance."""
        if args is None or isinstance(args, (list, tuple)):
            self.command: list[str] | None = [
                str(a) for a in (sys.argv[1:] if args is None else args)
            ]
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
            help="Also test every network on the clean test set at the end of each of the last "
            "N epochs (results.json: test_acc_tail, test_acc_tail_mean; report --metric tail), "
            "as the references of Co-teaching, MentorNet and Decoupling report.",
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

    def before_instantiate_classes(self) -> None:
        """Resolve ``--trainer.precision`` left unset (null): ``bf16-mixed`` where the run
        trains on a CUDA GPU with bf16 support, Lightning's ``32-true`` elsewhere; and
        ``--trainer.default_root_dir`` left unset: ``runs/<dataset>_<method>``. The resolved
        values are what ``config.yaml`` records."""
        config = self.config.get(self.subcommand, self.config)
        trainer = config.get("trainer")
        if trainer is not None and trainer.get("precision") is None:
            trainer["precision"] = auto_precision(trainer.get("accelerator"))
        if trainer is not None and not trainer.get("default_root_dir"):
            trainer["default_root_dir"] = str(default_root_dir(config))

    def _setting(self, key: str) -> Any:
        return self.config.get(self.subcommand, self.config).get(key)

    def _parse_ckpt_path(self) -> None:
        """Locate and read ``--ckpt_path`` (``last``, a run folder or a file). Unlike
        Lightning's CLI this never applies the checkpoint's hyperparameters over the config;
        :meth:`after_instantiate_classes` checks that they describe the same experiment."""
        self._checkpoint: resume.Checkpoint | None = None
        self._resume_logger: Any = None
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        value = config.get("ckpt_path")
        if not value or (value in LIGHTNING_CKPT_NAMES and not Path(value).exists()):
            return
        trainer = config.get("trainer") or {}
        root = Path(trainer.get("default_root_dir") or default_root_dir(config))
        logger = trainer.get("logger")
        self._checkpoint = resume.load(str(value), root, logger)
        config.ckpt_path = str(self._checkpoint.path)
        if subcommand == "fit" and self._checkpoint.run_folder is not None:
            self._resume_logger = resume.continue_logger(self._checkpoint.run_folder, logger)

    def after_instantiate_classes(self) -> None:
        if self._checkpoint is None:
            return
        changed = resume.check(self._checkpoint, self.model, self.datamodule)
        options = resume.plain_options(self._setting("trainer"))
        changed.update(resume.changed_options(self._checkpoint.trainer_options, options, "trainer"))
        if changed:
            rank_zero_only(print)(
                resume.describe_changes(self._checkpoint.path, changed), file=sys.stderr
            )

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        if getattr(self, "_resume_logger", None) is not None:
            kwargs["logger"] = self._resume_logger  # continue in the run's own folder
        return super().instantiate_trainer(**kwargs)

    def fit(
        self, model: Any, datamodule: Any = None, ckpt_path: str | None = None, **kwargs: Any
    ) -> None:
        """``noisylabels fit``: :func:`~noisylabels.run.fit.fit_and_test`, then print where the
        results are."""
        results = fit_and_test(
            model,
            datamodule,
            self.trainer,
            ckpt_path=ckpt_path,
            weights_only=kwargs.get("weights_only"),
            test=bool(self._setting("test_after_fit")),
            seed=self._setting("seed_everything"),
            config=self.config[self.subcommand].as_dict(),
            tail_test_epochs=int(self._setting("tail_test_epochs") or 0),
            # the command line's checkpoint, statistics and config.yaml are its options'
            select_best=False,
            subset_statistics=False,
            save_config=False,
            command=getattr(self, "command", None),
        )
        self.results = results
        if results is None:
            return
        if self.trainer.fast_dev_run:
            print("fast_dev_run: every stage ran once; a smoke test writes no results.json")
            return
        if results["test_acc"] is not None:
            print(f"clean test accuracy: {results['test_acc']:.4f} ({results['method']})")
        print(f"run folder: {run_dir(self.trainer)}")

    def predict(self, model: Any, datamodule: Any = None, **kwargs: Any) -> None:
        """``noisylabels predict``: Lightning's predict, with the class probabilities of every
        sample written to ``predictions.csv`` in the run folder of ``--ckpt_path`` (the new run
        folder where the checkpoint is of none)."""
        checkpoint = getattr(self, "_checkpoint", None)
        folder = checkpoint.run_folder if checkpoint is not None else None
        path = (folder or run_dir(self.trainer)) / PREDICTIONS_FILE
        self.trainer.callbacks.append(PredictionWriter(path))
        self.trainer.predict(model, datamodule=datamodule, **kwargs)
        if self.trainer.is_global_zero:
            print(f"predictions: {path}")


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
        "save_config_callback": SaveConfigToTensorBoard,
        "save_config_kwargs": {"overwrite": True},
        "auto_configure_optimizers": False,
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
    try:
        return make_cli(None if args is None else argv)
    except ArgumentError as err:
        raise option_error(err) from err
    except Exception as err:
        found = user_error(err) or constructor_error(err)
        if found is None or found is err:
            raise
        raise found from err  # the user error jsonargparse wrapped into its own


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
