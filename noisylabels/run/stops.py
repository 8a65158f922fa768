"""How a run stops on a signal, and how it comes back on SLURM: one checkpoint story.

A run keeps ``checkpoints/last.ckpt``, the end of its last completed epoch
(:class:`~noisylabels.run.record.RunRecorder`). Whatever stops it, that file is what it
continues from (``--ckpt_path last``), in the same run folder; the interrupted epoch is redone,
so the continued run ends with the results of an uninterrupted one.

:class:`StopSignals` is installed for the whole of a run (fitting, both final tests and writing
``results.json``, see :func:`~noisylabels.run.fit.fit_and_test`):

* **SIGTERM** (``kill``, a scheduler's stop or preemption) ends the run at the next safe point:
  after the current batch while Lightning trains or tests, at once between those phases. The run
  folder gets ``unfinished.txt`` and the command exits with status 143.
* **SIGINT** (Ctrl-C) is a stop on request, the same way: one line saying so and how to
  continue, ``unfinished.txt``, exit status 130 (never requeued on SLURM).
* **Under SLURM** (a batch job, :meth:`SlurmJob.detect`) the run also asks SLURM to requeue its
  job (``scontrol requeue JOB``): on **SIGUSR1**, which ``#SBATCH --signal=SIGUSR1@90`` sends
  before the time limit (the run then stops as on SIGTERM), and on **SIGTERM** (preemption),
  unless the job was cancelled (``scancel``). Lightning's own SLURM handling (an
  ``hpc_ckpt_N.ckpt`` written mid-epoch and picked up by the next ``fit`` or ``test`` that names
  no checkpoint) is switched off: the requeued task continues from ``last.ckpt``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities.exceptions import SIGTERMException

from noisylabels.errors import InputError

SCONTROL = "scontrol"
SCONTROL_TIMEOUT_S = 30
HPC_CHECKPOINTS = "hpc_ckpt_*.ckpt"
SIGNAL_TEXT = {
    signal.SIGTERM: "SIGTERM",
    signal.SIGINT: "SIGINT (Ctrl-C)",
    signal.SIGUSR1: "SIGUSR1 (SLURM's notice that the job's time limit is near)",
}


class StopRequested(SIGTERMException):
    """A run stopped by a signal (see the module docstring): ``exit_code`` is the status a
    shell reports for a process the signal ended (143 for SIGTERM, 130 for Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(SIGNAL_TEXT.get(signum, f"signal {signum}"))
        self.signum = signum
        self.exit_code = 128 + int(signum)


class SlurmJob:
    """The SLURM batch job this process runs in: its id for ``scontrol`` (``ARRAYJOB_TASK``
    for an array task) and whether this is the job's first process (``SLURM_PROCID`` 0)."""

    def __init__(self, job_id: str, first: bool) -> None:
        self.job_id, self.first = job_id, first

    @classmethod
    def detect(cls) -> SlurmJob | None:
        """The job, where this process is a task of a SLURM batch job (Lightning's test:
        ``SLURM_NTASKS`` set, job name not ``bash``/``interactive``); else ``None``."""
        if not SLURMEnvironment.detect():
            return None
        array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        job_id = f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")
        if not job_id:
            return None
        return cls(job_id, os.environ.get("SLURM_PROCID", "0") == "0")

    def _scontrol(self, *args: str) -> subprocess.CompletedProcess | str:
        try:
            return subprocess.run(
                [SCONTROL, *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S
            )
        except (OSError, subprocess.SubprocessError) as err:
            return f"{SCONTROL} {' '.join(args)} failed: {err}"

    def cancelled(self) -> bool:
        """Whether SLURM reports the job as cancelled (``scancel``); ``False`` where unknown."""
        out = self._scontrol("show", "job", "-o", self.job_id)
        return not isinstance(out, str) and "JobState=CANCELLED" in out.stdout

    def requeue(self) -> str:
        """Ask SLURM to requeue the job; returns what happened, as a sentence."""
        out = self._scontrol("requeue", self.job_id)
        if isinstance(out, str):
            return f"requeuing SLURM job {self.job_id} failed ({out})"
        if out.returncode != 0:
            why = (out.stderr or out.stdout).strip() or f"exit status {out.returncode}"
            return f"requeuing SLURM job {self.job_id} failed ({SCONTROL}: {why})"
        return f"SLURM job {self.job_id} was requeued"


def _cluster_environment(trainer: L.Trainer) -> Any:
    # the trainer's cluster environment (Lightning keeps it on its accelerator connector)
    return getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)


LIGHTNING_SIGNALS = "lightning.pytorch.trainer.connectors.signal_connector"
"""The logger of Lightning's signal handlers, which log "Received SIGTERM" for any stop (a
Ctrl-C included, which the run turns into a SIGTERM): the run's own line says what stopped it."""


def _drop_sigterm_notice(record: logging.LogRecord) -> bool:
    return "Received SIGTERM" not in record.getMessage()


class StopSignals:
    """The signal handlers of one run (see the module docstring); a context manager. After a
    stop, :meth:`describe` says what stopped the run and whether the job was requeued."""

    def __init__(self, trainer: L.Trainer) -> None:
        self.trainer = trainer
        self.slurm = SlurmJob.detect()
        self.signum: int | None = None
        self.requeue_note: str | None = None
        self._handler = self._handle  # one bound method, to recognise it when installed
        self._previous: dict[int, Any] = {}

    # ---------------------------------------------------------------- install / restore
    def __enter__(self) -> StopSignals:
        logging.getLogger(LIGHTNING_SIGNALS).addFilter(_drop_sigterm_notice)
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set from the main thread
        environment = _cluster_environment(self.trainer)
        if self.slurm is not None and isinstance(environment, SLURMEnvironment):
            environment.auto_requeue = False  # no hpc_ckpt: last.ckpt is the one story
        signals = [signal.SIGTERM, signal.SIGINT]
        signals += [signal.SIGUSR1] if self.slurm is not None else []
        for signum in signals:
            self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        logging.getLogger(LIGHTNING_SIGNALS).removeFilter(_drop_sigterm_notice)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    # ---------------------------------------------------------------- the signals
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum  # what stopped the run: the first signal
        requested = signum == signal.SIGINT  # the user's own stop: no requeue
        if (
            self.slurm is not None
            and self.slurm.first
            and self.requeue_note is None
            and not requested
        ):
            if signum == signal.SIGUSR1 or not self.slurm.cancelled():
                self.requeue_note = "requeuing"  # a signal while scontrol runs: ask once
                self.requeue_note = self.slurm.requeue()
            else:
                self.requeue_note = f"SLURM job {self.slurm.job_id} was cancelled: not requeued"
        if signum != signal.SIGTERM:
            os.kill(os.getpid(), signal.SIGTERM)  # stop as on SIGTERM
            return
        if signal.getsignal(signal.SIGTERM) == self._handler:
            # between Lightning's loops (which stop after the current batch themselves)
            raise SIGTERMException()

    @property
    def stopped(self) -> bool:
        """Whether a stop signal arrived."""
        return self.signum is not None

    def check(self) -> None:
        """Raise :class:`SIGTERMException` if a stop signal arrived (called between the phases
        of a run, where Lightning does not look)."""
        if self.stopped:
            raise SIGTERMException()

    def what(self) -> str:
        """``"SIGTERM"``, ``"SIGINT (Ctrl-C)"`` or the SIGUSR1 notice: the signal that stopped
        the run."""
        return SIGNAL_TEXT.get(self.signum, "SIGTERM") if self.signum is not None else "SIGTERM"

    def stopped_by(self, err: BaseException) -> BaseException:
        """``err``, a stop of the run, as :class:`StopRequested` naming the signal that
        stopped it (Lightning's loops raise their own exception for any of them)."""
        if isinstance(err, StopRequested) or self.signum is None:
            return err
        stop = StopRequested(self.signum)
        stop.__cause__ = err
        return stop


def refuse_hpc_checkpoints(trainer: L.Trainer, ckpt_path: Any) -> None:
    """Refuse to start a fit that names no checkpoint under SLURM where Lightning's HPC
    checkpoints lie in ``default_root_dir``: Lightning would silently resume from them."""
    if ckpt_path is not None or SlurmJob.detect() is None:
        return
    found = sorted(Path(trainer.default_root_dir).glob(HPC_CHECKPOINTS))
    if found:
        raise InputError(
            f"{trainer.default_root_dir} holds Lightning's SLURM checkpoint(s) "
            f"{', '.join(p.name for p in found)}, from which Lightning would resume this run "
            "mid-epoch; runs here continue from their checkpoints/last.ckpt instead: pass "
            "--ckpt_path last to continue the run, or remove those files to start a new one"
        )
