"""A run's own options, as one object: :class:`RunPlan`.

What a run does beyond its method, data and trainer (test after fit, the tail test, how the
best checkpoint is chosen, the per-subset statistics, its seed, what it continues) is declared,
defaulted, checked and documented here once. The command line adds it as options
(:meth:`RunPlan.add_arguments`: ``--test_after_fit``, ``--tail_test_epochs``,
``--checkpoint.*``, ``--seed_everything``, ``--ckpt_path``) and reads it back
(:meth:`RunPlan.from_config`); Python builds one (``RunPlan(tail_test_epochs=10)``). Either way
:meth:`RunPlan.attach` alone builds a run's callbacks and :meth:`RunPlan.checkpoint_to_resume`
alone chooses the checkpoint a fit continues, so a run from Python and one from the command line
are equal by construction.

One rule for a callback the caller gives too: a caller's callback of a type the plan builds runs
instead of the plan's, with its options (``DivergenceGuard(check_every=10)``, a
``ModelCheckpoint`` with settings of its own, a ``SubsetStatistics``); a :class:`TailTest` is
refused, as the tail test is :attr:`RunPlan.tail_test_epochs`; Lightning's default checkpoint,
which monitors nothing and so keeps the last epoch, is replaced by the best one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, Checkpoint, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from noisylabels.callbacks import (
    DivergenceGuard,
    EpochLog,
    HealthMonitor,
    SampleDynamics,
    SubsetStatistics,
    TailTest,
    TransitionMonitor,
)
from noisylabels.data import NoisyDataModule
from noisylabels.errors import InputError
from noisylabels.methods import NoisyLabelMethod
from noisylabels.run import identity, resume
from noisylabels.run.artifacts import defer_hp_metric
from noisylabels.run.checkpoints import BEST_CHECKPOINT, WarmupAwareCheckpoint
from noisylabels.run.record import RunRecorder
from noisylabels.run.rules import check_seed
from noisylabels.run.source import RunSource

# the per-subset statistics as the command line's default trainer callback, so that config.yaml
# lists them and --trainer.callbacks.init_args sets their options
SUBSET_STATISTICS = {"class_path": "noisylabels.callbacks.SubsetStatistics"}
# --ckpt_path values Lightning resolves itself (for validate/test/predict after a fit)
LIGHTNING_CKPT_NAMES = ("best", "registry")
# marks a callback the plan built (an earlier run's, replaced by the next run's plan)
BUILT = "_noisylabels_run_default"


def not_a_run(value: str, stage: str) -> InputError:
    """The refusal of ``--ckpt_path best|registry`` where no fit of this process made one."""
    if value == "best":
        return InputError(
            "--ckpt_path best names the best checkpoint of a fit in this same process; "
            f"`noisylabels {stage}` runs none: pass a run folder, a checkpoint file or `last` "
            "(the newest run under --trainer.default_root_dir)"
        )
    return InputError(
        f"--ckpt_path {value} is not a run to continue: pass a run folder, a checkpoint file "
        "or `last`"
    )


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """What a run does beyond its method, data and trainer.

    Parameters
    ----------
    seed : int, bool or None, default None
        The training seed, part of the run's identity (``--seed_everything``; ``False``: none
        set); ``None``: the seed ``seed_everything`` set (``PL_GLOBAL_SEED``), or none.
    resume : str, path, resume.Checkpoint or None, default None
        The run to continue (``--ckpt_path``): a checkpoint file, a run folder (its
        ``checkpoints/last.ckpt``), ``"last"`` (the newest run of this same experiment under the
        trainer's logger) or ``"hpc"``. In the checkpoint's own folder where the trainer writes
        there and the run is unfinished, else in the trainer's new folder.
    weights_only : bool or None, default None
        How Lightning loads ``resume`` (``--weights_only``), after the run read it weights-only.
    test_after_fit : bool, default True
        Test the best checkpoint and the last epoch's model on the clean test set
        (``--test_after_fit``); without it ``results.json`` has ``test_acc: null``.
    tail_test_epochs : int, default 0
        Also test the method's prediction and every further network on the clean test set at
        the end of each of the last N epochs (``--tail_test_epochs``; ``results.json``:
        ``test_acc_tail``, ``test_acc_tail_mean``).
    test_every_epoch : bool, default False
        Test every epoch as the tail test does (``--test_every_epoch``; ``results.json``:
        ``test_acc_max``, the highest figure over the epochs, and ``test_acc_max_epoch``; its
        epochs in ``test_acc_tail``): test-set selection, an optimistic figure, recorded only
        where asked.
    checkpoint : mapping or None, default BEST_CHECKPOINT
        The options of the best checkpoint (a :class:`WarmupAwareCheckpoint`, never a warm-up
        epoch; ``--checkpoint.*``) that replaces Lightning's default checkpoint: by default the
        highest noisy-validation accuracy (``val/acc``, max) as ``best-epochNNN.ckpt``.
        ``None``: keep the trainer's checkpoints as they are (Lightning's default one keeps,
        and so tests, the last epoch). A checkpoint of the caller's with settings of its own (a
        monitor, every epoch, keep all) is kept either way; a trainer with
        ``enable_checkpointing=False`` gets none.
    subset_statistics : bool, default True
        Record the per-subset loss statistics of a ``NoisyLabelMethod``
        (:class:`SubsetStatistics`, ``subsets.csv``) where the trainer has none.
    """

    seed: int | bool | None = None
    resume: str | os.PathLike | resume.Checkpoint | None = None
    weights_only: bool | None = None
    test_after_fit: bool = True
    tail_test_epochs: int = 0
    test_every_epoch: bool = False
    checkpoint: Mapping[str, Any] | None = field(default_factory=lambda: dict(BEST_CHECKPOINT))
    subset_statistics: bool = True

    def __post_init__(self) -> None:
        check_seed(self.seed)
        epochs = self.tail_test_epochs
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
            raise InputError(
                f"--tail_test_epochs must be a whole number of epochs, 0 or more, got {epochs!r}"
            )
        if self.checkpoint is not None:
            object.__setattr__(self, "checkpoint", dict(self.checkpoint))

    __hash__ = None  # type: ignore[assignment]  # its checkpoint options are a mapping

    # ---------------------------------------------------------------- the command line
    @staticmethod
    def add_arguments(parser: Any) -> None:
        """Add the plan's options to a command-line ``parser``, with their defaults
        (``--seed_everything`` and ``--ckpt_path`` are Lightning's own)."""
        parser.add_class_arguments(
            WarmupAwareCheckpoint, "checkpoint", fail_untyped=False, instantiate=False,
            sub_configs=True,
        )  # fmt: skip
        parser.set_defaults(
            {
                "trainer.callbacks": [dict(SUBSET_STATISTICS)],
                **{f"checkpoint.{key}": value for key, value in BEST_CHECKPOINT.items()},
            }
        )
        for name, kind, help_text in _OPTIONS:
            default = getattr(RunPlan, name)
            parser.add_argument(f"--{name}", type=kind, default=default, help=help_text)

    @classmethod
    def from_config(cls, config: Any) -> RunPlan:
        """The plan of a parsed command-line ``config`` (a namespace of one stage)."""
        options = config.get("checkpoint")
        checkpoint = options.as_dict() if hasattr(options, "as_dict") else dict(options or {})
        return cls(
            seed=config.get("seed_everything"),
            resume=config.get("ckpt_path"),
            weights_only=config.get("weights_only"),
            test_after_fit=bool(config.get("test_after_fit", True)),
            tail_test_epochs=int(config.get("tail_test_epochs") or 0),
            test_every_epoch=bool(config.get("test_every_epoch", False)),
            checkpoint=checkpoint,
        )

    def run_seed(self) -> int | bool | None:
        """The run's seed: :attr:`seed`, else the one ``seed_everything`` set."""
        if self.seed is not None:
            return self.seed
        found = os.environ.get("PL_GLOBAL_SEED")
        return int(found) if found is not None else None

    def run_options(self, trainer: L.Trainer) -> dict[str, Any]:
        """What decides the run's result beyond its hyperparameters and trainer settings (part
        of its identity): how the best checkpoint is chosen, how many last epochs are tested."""
        best = trainer.checkpoint_callback
        monitor = getattr(best, "monitor", None)
        options = {
            "checkpoint.monitor": monitor,
            "checkpoint.mode": getattr(best, "mode", None) if monitor else None,
            "tail_test_epochs": int(self.tail_test_epochs),
        }
        if self.test_every_epoch:  # only where set: the identity of the runs made before
            options["test_every_epoch"] = True
        return options

    # ---------------------------------------------------------------- the callbacks
    def attach(
        self,
        trainer: L.Trainer,
        model: Any,
        datamodule: Any,
        *,
        source: RunSource,
        checkpoint: resume.Checkpoint | None,
        trainer_options: Mapping[str, Any],
    ) -> RunRecorder:
        """Give ``trainer`` the run's callbacks of the types the caller did not give it (the
        health check, the best checkpoint, the per-subset statistics, the
        :func:`run_callbacks`), then the run record, the only writer of the run folder, which
        it returns; checkpoint callbacks run last, in Lightning's order."""
        given = [c for c in trainer.callbacks if not getattr(c, BUILT, False)]
        if any(isinstance(c, TailTest) for c in given):
            raise InputError(
                "a TailTest among the trainer's callbacks: the tail test is an option of the "
                "run, recorded in results.json; set it with --tail_test_epochs N "
                "(RunPlan(tail_test_epochs=N)) instead"
            )
        wanted: list[Callback] = [HealthMonitor()]
        if self.subset_statistics and isinstance(model, NoisyLabelMethod):
            wanted.append(SubsetStatistics())
        wanted += run_callbacks(datamodule, self.tail_test_epochs, self.test_every_epoch)
        built = [c for c in wanted if not any(isinstance(g, type(c)) for g in given)]
        checkpoints = [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
        # Lightning's default checkpoint (it monitors nothing) or one an earlier plan built
        defaults = [c for c in checkpoints if getattr(c, BUILT, False) or is_lightnings(c)]
        if self.checkpoint is not None and defaults and len(defaults) == len(checkpoints):
            built.append(WarmupAwareCheckpoint(**self.checkpoint))
        for callback in built:
            setattr(callback, BUILT, True)
        attach_callbacks(trainer, built)
        defer_hp_metric(trainer)
        protocol = source.protocol_epochs
        if checkpoint is not None and checkpoint.protocol_epochs is not None:
            protocol = checkpoint.protocol_epochs  # the first part's protocol holds
        recorder = RunRecorder(
            config_text=source.config_text,
            trainer_options=trainer_options,
            run_options=self.run_options(trainer),
            seed=self.run_seed(),
            resume_from=checkpoint,
            protocol_epochs=protocol,
        )
        attach_callbacks(trainer, [recorder])
        return recorder

    # ---------------------------------------------------------------- the checkpoint to resume
    def checkpoint_to_resume(
        self, root: Path, logger: Any, now: Mapping[str, Any]
    ) -> resume.Checkpoint | None:
        """The checkpoint the fit continues, read weights-only (nothing in the file executed):
        for ``last`` the newest run under the logger's folder that is of this same experiment
        (``now``, its identity before the data is set up); any other must be of it. Refused,
        before anything is written, with one paragraph per case."""
        if self.resume is None or isinstance(self.resume, resume.Checkpoint):
            return self.resume
        value = str(self.resume)
        if value in LIGHTNING_CKPT_NAMES and not Path(value).exists():
            raise not_a_run(value, "fit")
        found = resume.candidates(value, root, logger)
        first: tuple[resume.Checkpoint, dict[str, list[Any]]] | None = None
        for path, folder in found:
            checkpoint = resume.load(path, folder)
            changes = identity.differences(checkpoint.identity, now, known_after_setup=False)
            if not changes:
                return checkpoint
            first = first or (checkpoint, changes)
        assert first is not None
        checkpoint, changes = first
        if len(found) > 1:
            raise InputError(
                f"--ckpt_path last: none of the {len(found)} runs with a "
                f"{resume.CHECKPOINT_FILE} under {found[0][0].parents[2]} is of this "
                "experiment (a resume continues the same experiment only); the newest, "
                f"{checkpoint.path}, differs in {identity.describe(changes)}. Start a new run "
                "without --ckpt_path, or pass the run folder to continue with its own config"
            )
        raise InputError(resume.refusal(checkpoint.path, changes))

    def resolved(self, checkpoint: resume.Checkpoint | None) -> RunPlan:
        """This plan, continuing ``checkpoint`` (chosen by :meth:`checkpoint_to_resume`)."""
        return dataclasses.replace(self, resume=checkpoint)


# the plan's own command-line options: name, type, help (their defaults are the dataclass's)
_OPTIONS = (
    (
        "test_after_fit",
        bool,
        "After fit, test the best checkpoint on the clean test set and write results.json in "
        "the run dir.",
    ),
    (
        "tail_test_epochs",
        int,
        "Also test the method's prediction and every further network on the clean test set at "
        "the end of each of the last N epochs (results.json: test_acc_tail, test_acc_tail_mean: "
        "the mean over the networks, or over the prediction of a method that predicts with its "
        "networks together, DivideMix; report --metric tail), as the references of "
        "Co-teaching, MentorNet and Decoupling report.",
    ),
    (
        "test_every_epoch",
        bool,
        "Also test on the clean test set at the end of every epoch (results.json: "
        "test_acc_max, the highest accuracy over the epochs, and test_acc_max_epoch; report "
        "--metric best-test), the CIFAR-N paper's reporting rule. The epoch is then chosen by "
        "the test set itself, so the figure is optimistic; recorded only where asked.",
    ),
)


def run_callbacks(
    datamodule: L.LightningDataModule | None = None,
    tail_test_epochs: int = 0,
    test_every_epoch: bool = False,
) -> list[Callback]:
    """The observers of every run: T̂ and ε_T, every training sample's record over the epochs
    (``sample_dynamics.pt``), the stop on a NaN/Inf loss, a line per epoch where there is no
    progress bar, and whatever the data module needs (e.g. a skipped-image report); with
    ``tail_test_epochs``, the clean test accuracy of every network over that many last epochs
    (:class:`TailTest`), and with ``test_every_epoch`` of every epoch.
    :meth:`RunPlan.attach` gives them to every run."""
    callbacks: list[Callback] = [TransitionMonitor(), SampleDynamics(), DivergenceGuard()]
    callbacks.append(EpochLog())
    if tail_test_epochs or test_every_epoch:
        callbacks.insert(1, TailTest(tail_test_epochs, every_epoch=test_every_epoch))
    if isinstance(datamodule, NoisyDataModule):
        callbacks.extend(datamodule.callbacks())
    return callbacks


# the settings by which a checkpoint differs from Lightning's default one
_CHECKPOINT_SETTINGS = ("monitor", "dirpath", "filename", "save_last", "save_top_k",
                        "save_weights_only", "_every_n_epochs", "_every_n_train_steps",
                        "_train_time_interval", "_save_on_train_epoch_end")  # fmt: skip


def is_lightnings(checkpoint: ModelCheckpoint) -> bool:
    """Whether ``checkpoint`` is Lightning's default one (``ModelCheckpoint()``: it monitors
    nothing and keeps the last epoch), which the best checkpoint replaces; a checkpoint of the
    caller's with settings of its own (every epoch, ``save_top_k=-1``) is kept, and tested."""
    if type(checkpoint) is not ModelCheckpoint:
        return False
    default = ModelCheckpoint()
    return all(
        getattr(checkpoint, name, None) == getattr(default, name, None)
        for name in _CHECKPOINT_SETTINGS
    )


def attach_callbacks(trainer: L.Trainer, callbacks: list[Callback]) -> None:
    """Add ``callbacks`` to ``trainer``: each replaces the trainer's callbacks of its type (or a
    base type), and checkpoint callbacks come last, in the order Lightning runs them (a
    checkpoint then holds what the other callbacks did in the same hook)."""
    types = {type(c) for c in callbacks}
    kept = [
        c
        for c in trainer.callbacks
        if type(c) is Callback or not any(issubclass(t, type(c)) for t in types)
    ]
    merged = [*kept, *callbacks]
    others = [c for c in merged if not isinstance(c, Checkpoint)]
    checkpoints = [c for c in merged if isinstance(c, Checkpoint)]
    trainer.callbacks = others + checkpoints


def logger_spec(trainer: L.Trainer) -> Any:
    """The trainer's first logger as :func:`~noisylabels.run.resume.logger_base` reads a
    config's (``False`` without one)."""
    if not trainer.loggers:
        return False
    logger = trainer.loggers[0]
    if not isinstance(logger, (TensorBoardLogger, CSVLogger)):
        return SimpleNamespace(class_path=type(logger).__name__, init_args={})
    return SimpleNamespace(
        class_path=type(logger).__name__,
        init_args={"save_dir": logger.save_dir, "name": logger.name},
    )


def checkpoint_to_evaluate(
    value: Any, stage: str, root: Path, logger: Any
) -> tuple[str | None, resume.Checkpoint | None]:
    """The checkpoint ``noisylabels validate|test|predict --ckpt_path value`` evaluates and
    the path Lightning loads: a run's (a folder, ``last``) the checkpoint its fit reported; a
    file, that file; ``registry`` is Lightning's. Says which on standard error."""
    if not value:
        return None, None
    value = str(value)
    if value in LIGHTNING_CKPT_NAMES and not Path(value).exists():
        if value == "best":
            raise not_a_run(value, stage)
        return value, None  # registry: Lightning's model registry
    path, origin = resume.candidates(value, root, logger)[0]
    named = value not in (resume.LAST, resume.HPC) and Path(value).expanduser().is_file()
    chosen = path if named else resume.reported(path, origin)
    what = (
        "the file named"
        if named
        else "the selected checkpoint its fit reported"
        if chosen != path
        else "its last state: the run reported no selected checkpoint"
    )
    checkpoint = resume.load(chosen, origin)
    rank_zero_only(print)(f"noisylabels {stage}: {chosen} ({what})", file=sys.stderr, flush=True)
    return str(chosen), checkpoint


def check_evaluation(
    checkpoint: resume.Checkpoint | None, model: Any, datamodule: Any, stage: str
) -> dict[str, list]:
    """Refuse to evaluate a run's checkpoint with another model than it holds; say where the
    data differs from its fit's (:func:`~noisylabels.run.identity.evaluation_differences`:
    the figures are then of other samples, labels or inputs than the run's). Returns the
    differences of the data."""
    if checkpoint is None:
        return {}
    now = identity.of_objects(model, datamodule, seed=None, trainer_options=None)
    model = identity.model_differences(checkpoint.identity, now)
    if model:
        origin = checkpoint.origin
        own = (
            f"`noisylabels {stage} --config {origin / resume.CONFIG_FILE} --ckpt_path {origin}`"
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
            f"noisylabels {stage}: the data differs from the one {checkpoint.path} "
            f"was fit on ({changed}): the figures below are of this data, not the run's",
            file=sys.stderr,
            flush=True,
        )
    return found
