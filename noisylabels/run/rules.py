"""The rules of a run: how long it may train, what its folder holds, whether it may be recorded.

A run trains for a limited time (:func:`check_run_length`). A run folder holds one run. A new
run is never recorded in a folder that holds another run's files (:data:`RUN_FILES`,
checkpoints), whether finished or not: it is refused instead, before anything is written. A run
continued from a checkpoint (:mod:`noisylabels.run.resume`) must be the same experiment
(:mod:`noisylabels.run.identity`); it continues in its own folder where that run is unfinished
and the checkpoint is its newest state (``last.ckpt``), and elsewhere in a new folder; a
finished run is never rewritten. :func:`admission` says which, or why not.
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path
from typing import Any

from noisylabels.disk.lock import LOCK_FILE
from noisylabels.errors import InputError
from noisylabels.run import identity as ident
from noisylabels.run import resume

# the names are here, in a module that loads neither torch nor Lightning, so that a sweep and
# the audit's command line can name a run's files without loading the training stack
LAST = resume.CHECKPOINT_FILE
RESULTS_FILE = resume.RESULTS_FILE
CONFIG_FILE = resume.CONFIG_FILE
NOISE_FILE = "noise.pt"
ESTIMATE_FILE = "transition_estimate.csv"
ERROR_FILE = "transition_estimate.json"
DYNAMICS_FILE = "sample_dynamics.pt"
UNFINISHED = "unfinished.txt"
TRANSITION_FILE = "transition.csv"
EMPIRICAL_FILE = "empirical_transition.csv"
CHECKPOINTS = "checkpoints"
RUN_FILES = (
    CONFIG_FILE,
    NOISE_FILE,
    TRANSITION_FILE,
    EMPIRICAL_FILE,
    RESULTS_FILE,
    ESTIMATE_FILE,
    ERROR_FILE,
    DYNAMICS_FILE,
    UNFINISHED,
)
"""The files of a run folder, all written by :class:`RunRecorder` (and the checkpoints)."""
# what a run folder holds before its first checkpoint: such a folder is removed when it fails
SETUP_FILES = {CONFIG_FILE, NOISE_FILE, TRANSITION_FILE, EMPIRICAL_FILE, "hparams.yaml", LOCK_FILE}
NAME_MAX = 255  # bytes of a file name, where the file system does not say


def run_files(folder: Path) -> list[str]:
    """The run files (and checkpoints) that ``folder`` holds: a folder holding any holds a run."""
    found = [name for name in RUN_FILES if (folder / name).exists()]
    found += [f"{CHECKPOINTS}/{p.name}" for p in sorted((folder / CHECKPOINTS).glob("*.ckpt"))]
    return found


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return NAME_MAX


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long, a loop of links: not a usable folder either
        return False


def folder_problem(folder: Path) -> str | None:
    """What makes ``folder`` unusable as a run folder (a name longer than the file system
    allows, a part of its path that is a file), as a sentence; ``None`` where it is usable."""
    folder = Path(os.path.abspath(folder))
    existing = next(p for p in (folder, *folder.parents) if _exists(p))
    limit = _name_max(existing) if existing.is_dir() else NAME_MAX
    long = [part for part in folder.parts if len(os.fsencode(part)) > limit]
    if long:
        return (
            f"the run folder {folder} cannot be made: its part {long[0][:40]}... is "
            f"{len(os.fsencode(long[0]))} bytes long, more than the {limit} a name may have "
            "here; choose a shorter --trainer.default_root_dir (or logger name/version)"
        )
    if not existing.is_dir():
        return (
            f"the run folder {folder} cannot be made: {existing} is a file, not a folder; "
            "choose another --trainer.default_root_dir (or logger save_dir)"
        )
    return None


def same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def admission(
    folder: Path,
    resume_from: resume.Checkpoint | None,
    identity: dict[str, Any],
    max_epochs: int | None,
    ends_with_the_run: str | None = None,
) -> tuple[str | None, bool]:
    """Whether a run of ``identity`` (continuing ``resume_from``, or new) may be recorded in
    ``folder``: ``(None, in_place)`` where it may (``in_place``: it continues its checkpoint's
    own run folder), ``(why not, False)`` where not, as one paragraph. ``ends_with_the_run``:
    why the run's plan depends on its last epoch
    (:meth:`~noisylabels.methods.core.stages.StageSchedule.ends_with_the_run`), which makes an
    unfinished run's ``max_epochs`` part of the experiment."""
    problem = folder_problem(folder)
    if problem is not None:
        return problem, False
    ckpt = resume_from
    present = run_files(folder) if folder.is_dir() else []
    if ckpt is None:
        if present:
            return (
                f"the run folder {folder} already holds a run ({', '.join(present[:4])}): a "
                "run never writes over another. Write this run elsewhere "
                "(--trainer.default_root_dir, or the logger's folder), or continue that run "
                f"with --ckpt_path {folder}"
            ), False
        return None, False
    changes = ident.differences(ckpt.identity, identity)
    if changes:
        return resume.refusal(ckpt.path, changes), False
    done, limit = ckpt.epochs_done, max_epochs
    if done is not None and limit is not None and 0 <= limit < done:
        return (
            f"--ckpt_path {ckpt.path} has completed {done} epochs, more than "
            f"--trainer.max_epochs {limit}: a resume cannot train fewer epochs than were "
            f"done. Resume with --trainer.max_epochs {done} or more"
        ), False
    planned = ckpt.options.get("trainer.max_epochs")
    if ends_with_the_run and not ckpt.finished and planned is not None and planned != limit:
        return (
            f"--ckpt_path {ckpt.path} was trained to end at epoch {planned}, and its method's "
            f"plan depends on the run's last epoch ({ends_with_the_run}): resumed with "
            f"--trainer.max_epochs {limit} it would follow neither the plan it started nor a new "
            f"one. Resume with --trainer.max_epochs {planned} (or leave it out, as the run did), "
            "then continue the finished run longer if wanted (a new run folder from its "
            f"{LAST})"
        ), False
    if ckpt.origin is not None and same_folder(folder, ckpt.origin):
        if ckpt.finished:
            return (
                f"{ckpt.origin} holds a finished run ({RESULTS_FILE}), which is never "
                "rewritten; continue it in another run folder (a new version of the "
                "logger, or another --trainer.default_root_dir)"
            ), False
        if ckpt.path.name != LAST:
            return (
                f"--ckpt_path {ckpt.path} is not the newest state of its run "
                f"({CHECKPOINTS}/{LAST}): continuing from it in its own folder would "
                "rewrite the run's later epochs; continue from its last.ckpt, or write the "
                "continued run elsewhere"
            ), False
        return None, True
    if present:
        return (
            f"the run folder {folder} already holds a run ({', '.join(present[:4])}): a "
            "run never writes over another; write the continued run elsewhere"
        ), False
    if ckpt.finished and done is not None and limit is not None and 0 <= limit <= done:
        return (
            f"--ckpt_path {ckpt.path} is of a finished run of {done} epochs: continuing it "
            f"with --trainer.max_epochs {limit} trains nothing more (give more epochs)"
        ), False
    return None, False


def only_setup_files(folder: Path, root: Path) -> bool:
    """Whether ``folder`` is a logger's run folder holding nothing but what a run writes before
    training (no checkpoint, no results)."""
    if folder.resolve() == root.resolve():
        return False
    for path in folder.rglob("*"):
        name = path.name
        if path.is_dir():
            if name != CHECKPOINTS:
                return False
        elif name not in SETUP_FILES and not name.startswith("events.out.tfevents."):
            return False
    return True


def check_run_length(trainer: Any) -> None:
    """Refuse a fit that would train forever (``--trainer.max_epochs -1`` with no step or
    time limit) or whose ``min_epochs`` exceed its ``max_epochs``."""
    max_epochs, min_epochs = trainer.get("max_epochs"), trainer.get("min_epochs")
    max_steps, max_time = trainer.get("max_steps"), trainer.get("max_time")
    endless_steps = max_steps is None or max_steps == -1
    if max_epochs == -1 and endless_steps and not max_time:
        raise InputError(
            "--trainer.max_epochs -1 trains forever (no --trainer.max_steps or max_time "
            "either): give the number of epochs to train"
        )
    if max_epochs is not None and max_epochs < -1:
        raise InputError(f"--trainer.max_epochs must be -1 or more, got {max_epochs}")
    if (
        isinstance(min_epochs, int)
        and isinstance(max_epochs, int)
        and max_epochs >= 0
        and min_epochs > max_epochs
    ):
        raise InputError(
            f"--trainer.min_epochs {min_epochs} is more than --trainer.max_epochs {max_epochs}: "
            "give min_epochs <= max_epochs"
        )


RUNNABLE_PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
"""The precisions every method runs in: float32 weights, and float16 or bfloat16 arithmetic
under autocast. A "true" half or double precision (``16-true``, ``bf16-true``, ``64-true``)
converts the weights but not the method's own float32 tensors (T, the statistics), and
Transformer Engine's needs a library and a GPU that few have."""
_PRECISION_ALIASES = {"32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "64": "64-true"}


def check_precision(precision: Any) -> None:
    """Refuse a ``--trainer.precision`` that the methods cannot run (:data:`RUNNABLE_PRECISIONS`;
    ``None``: the default), before anything is built or written."""
    if precision is None:
        return
    name = _PRECISION_ALIASES.get(str(precision), str(precision))
    if name in RUNNABLE_PRECISIONS:
        return
    raise InputError(
        f"--trainer.precision {precision}: the methods run in {', '.join(RUNNABLE_PRECISIONS)} "
        "only (float32 weights; float16 or bfloat16 arithmetic under autocast). A 'true' half "
        "or double precision converts the network but not the method's own float32 tensors (T, "
        "its statistics), so it fails in the first step; leave --trainer.precision unset (bf16-"
        "mixed on a GPU with bf16, 32-true elsewhere) or give one of those"
    )


def check_gradient_clip(value: Any) -> None:
    """Refuse a ``--trainer.gradient_clip_val`` that clips nothing the way it reads: a negative
    or non-finite bound (``None`` and ``0``: no clipping)."""
    if value is None or isinstance(value, bool):
        return
    try:
        bound = float(value)
    except (TypeError, ValueError):
        return  # the parser refuses what is not a number
    if not math.isfinite(bound) or bound < 0:
        raise InputError(
            f"--trainer.gradient_clip_val {value}: the bound on the gradients' norm (or values) "
            "must be a finite number >= 0 (0 or unset: no clipping); a negative or non-finite "
            "bound would be recorded as given and clip nothing"
        )


MAX_SEED = 2**32 - 1  # numpy's seeds are unsigned 32-bit integers


def check_seed(seed: Any) -> None:
    """Refuse a seed numpy cannot take (one paragraph naming ``--seed_everything`` instead of
    Lightning's traceback); ``True``/``False`` (a random seed, none) pass."""
    if not isinstance(seed, bool) and isinstance(seed, int) and not 0 <= seed <= MAX_SEED:
        raise InputError(
            f"--seed_everything must be an integer from 0 to {MAX_SEED} (true: a random "
            f"seed, false: no seeding), got {seed}"
        )


def random_seed() -> int:
    """A seed drawn from the operating system's randomness, for ``--seed_everything true``."""
    return secrets.randbelow(MAX_SEED + 1)
