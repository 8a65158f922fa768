"""Command line: ``noisylabels fit|validate|test|predict --config FILE.yaml`` (LightningCLI).

After ``fit`` the best checkpoint (by noisy-validation accuracy unless ``--checkpoint.monitor``
says otherwise) is tested on the clean test set and ``results.json`` is written to the run dir.
Project subcommands that are not Lightning stages are dispatched in :data:`EXTRA_COMMANDS`.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger

from noisylabels.callbacks import WarmupAwareCheckpoint, run_dir
from noisylabels.config import ComposedConfigFile
from noisylabels.data import NoisyDataModule
from noisylabels.methods import NoisyLabelMethod
from noisylabels.run import fit_and_test

# the paper's protocol and the project's layout, where a config does not say otherwise
TRAINER_DEFAULTS: dict[str, Any] = {"max_epochs": 80, "devices": 1, "default_root_dir": "runs"}

# name -> (module, function): project subcommands beside Lightning's stages.
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {"plot": ("noisylabels.plot", "main")}


class SaveConfigToTensorBoard(SaveConfigCallback):
    """Save the resolved config as ``config.yaml`` in the run dir and in TensorBoard's text tab."""

    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
        text = self.parser.dump(self.config, skip_none=False)
        block = "\n".join("    " + line for line in text.splitlines())  # markdown code block
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_text("config", block)


class NoisyLabelsCLI(LightningCLI):
    """LightningCLI with the project's checkpointing, links and post-fit test."""

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Lightning's parser with a ``--config`` that understands ``compose:``."""
        kwargs.setdefault("dump_header", [f"lightning.pytorch=={L.__version__}"])
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
        parser.add_lightning_class_args(WarmupAwareCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                # the per-subset loss curves; --trainer.callbacks '[]' drops them
                "trainer.callbacks": [{"class_path": "noisylabels.callbacks.SubsetStatistics"}],
                "checkpoint.monitor": "val/acc",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best-epoch{epoch:03d}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=True,
            help="After fit, test the best checkpoint on the clean test set and write "
            "results.json in the run dir.",
        )
        parser.link_arguments(
            "data.num_classes", "model.init_args.num_classes", apply_on="instantiate"
        )
        parser.link_arguments(
            "data.input_shape", "model.init_args.input_shape", apply_on="instantiate"
        )

    def before_instantiate_classes(self) -> None:
        """Resolve ``--trainer.precision`` left unset (null): ``bf16-mixed`` where the run
        trains on a CUDA GPU with bf16 support, Lightning's ``32-true`` elsewhere. The resolved
        value is what ``config.yaml`` records."""
        trainer = self.config.get(self.subcommand, self.config).get("trainer")
        if trainer is not None and trainer.get("precision") is None:
            trainer["precision"] = auto_precision(trainer.get("accelerator"))

    def _setting(self, key: str) -> Any:
        return self.config.get(self.subcommand, self.config).get(key)

    def fit(
        self, model: Any, datamodule: Any = None, ckpt_path: str | None = None, **kwargs: Any
    ) -> None:
        """``noisylabels fit``: :func:`noisylabels.run.fit_and_test`, then print where the
        results are."""
        results = fit_and_test(
            model,
            datamodule,
            self.trainer,
            ckpt_path=ckpt_path,
            weights_only=kwargs.get("weights_only"),
            test=bool(self._setting("test_after_fit")),
            seed=self._setting("seed_everything"),
        )
        if results is None:
            return
        if results["test_acc"] is not None:
            print(f"clean test accuracy: {results['test_acc']:.4f} ({results['method']})")
        print(f"run folder: {run_dir(self.trainer)}")


def auto_precision(accelerator: Any) -> str | None:
    """The precision of a run that does not set one: ``bf16-mixed`` where ``accelerator`` (a
    name; ``auto`` picks CUDA when there is one) is a CUDA GPU with bf16 support, else ``None``
    (Lightning's ``32-true``)."""
    cuda = torch.cuda.is_available() and str(accelerator).lower() in ("auto", "gpu", "cuda")
    return "bf16-mixed" if cuda and torch.cuda.is_bf16_supported() else None


def _dispatch_extra(argv: list[str]) -> Callable[[list[str]], Any] | None:
    if not argv or argv[0] not in EXTRA_COMMANDS:
        return None
    import importlib

    module, func = EXTRA_COMMANDS[argv[0]]
    return getattr(importlib.import_module(module), func)


def run(args: list[str] | None = None) -> NoisyLabelsCLI | Any:
    """Run one command (``args`` as on the command line) and return the CLI object or the
    project subcommand's return value."""
    argv = list(sys.argv[1:] if args is None else args)
    extra = _dispatch_extra(argv)
    if extra is not None:
        return extra(argv[1:])
    # the project's epoch values are already reduced over DDP processes (torchmetrics' compute,
    # strategy.reduce) when they are logged: Lightning's advice to add sync_dist does not apply
    warnings.filterwarnings(
        "ignore", message=r"It is recommended to use `self\.log\('(train|val|test|subsets)/"
    )
    return NoisyLabelsCLI(
        NoisyLabelMethod,
        NoisyDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        seed_everything_default=0,
        trainer_defaults=TRAINER_DEFAULTS,
        save_config_callback=SaveConfigToTensorBoard,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=None if args is None else argv,
    )


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``noisylabels`` command."""
    run(args)


if __name__ == "__main__":
    main()
