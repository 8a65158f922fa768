"""The per-sample state of ELR and ELR+ (their targets; ELR+'s weight averages too), DISC (both
views' probabilities and thresholds), SOP (u and v),
CORES² (the class prior its sieve revises), DivideMix (its division: each network's clean
probability of every sample) and CAL (D̂, its T̂ and prior, and the class means ℓ̄ of the
losses) under DDP is the state of one process with the global batch: each process updates its
own samples, and the table, the parameters' gradients, the sieve's counts, the pass's losses or
the sums behind ℓ̄ are combined over the processes. And CORES²'s prior, with its sieve at work,
is restored exactly on resume.

The registry-driven tests (test_ddp_methods, test_resume_methods) compare results and, on
resume, the whole state; they run CORES² with its reference schedule, whose sieve starts only at
epoch 31. Here it sieves from the first epoch of its stage, with β rising over two epochs, and
the DDP runs' final state is compared with the one-process run's (close, not bitwise: DDP
averages two half-batch gradients where one process sums the whole batch).
"""

from __future__ import annotations

import signal
import traceback
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from test_ddp_methods import (
    ACC_TOLERANCE,
    CLOSE,
    EXACT,
    GLOBAL_BATCH,
    WORLD,
    _free_port,
    join_group,
)
from test_resume import assert_same_run, last_checkpoint, run_cli_process
from test_resume_methods import fit_args as resume_args

from conftest import CONFIGS, read_results

SIEVE = ["--model.sieve_epoch", "0", "--model.beta_start", "0", "--model.beta_ramp_epochs", "2"]
CASES = {  # method: (its options, the state compared)
    "CORES": (SIEVE, ("prior",)),
    "DivideMix": (["--data.views", "2"], ("dividemix_clean_prob",)),
    "ELR": ([], ("elr_targets",)),
    "ELRPlus": ([], ("elr_targets",)),  # and the weight averages, below
    "DISC": (["--data.strong_views", "1"], ("disc_probs", "disc_thresholds")),
    "SOP": ([], ("u", "v")),
    # D̂ from the warm-up model, and ℓ̄ of sums over the processes' samples, β rising over 2
    "CAL": (["--model.beta_start", "0", "--model.beta_ramp_epochs", "2"],
            ("distilled_labels", "T", "distilled_prior", "loss_means")),
}  # fmt: skip


def ddp_args(name: str, alpha: float = 0.05) -> list[str]:
    return [
        *("fit", "--config", str(CONFIGS / "data" / "digits.yaml")),
        *("--model", f"noisylabels.methods.{name}", "--model.alpha", str(alpha), *CASES[name][0]),
        *("--model.schedule.warmup_epochs", "1", "--trainer.max_epochs", "4"),
        *("--model.optim.lr", "0.1", "--model.optim.momentum", "0.9"),
        *("--trainer.accelerator", "cpu", "--data.noise_rate", "0.3"),
        *("--data.eval_batch_size", "100", "--trainer.enable_progress_bar", "false"),
        "--trainer.enable_model_summary=false",
    ]


def _worker(rank: int, port: int, root: str, name: str) -> None:
    join_group(rank, port)
    from noisylabels.cli import run

    folder = Path(root)
    args = ddp_args(name) + ["--config", str(CONFIGS / "trainer" / "ddp_cpu.yaml")]
    args += ["--data.batch_size", str(GLOBAL_BATCH // WORLD), "--trainer.default_root_dir", root]
    try:
        run(args)
    except BaseException:  # noqa: BLE001 - recorded for the test
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"error-rank{rank}.txt").write_text(traceback.format_exc())


@pytest.mark.parametrize("name", list(CASES))
def test_the_state_under_ddp_is_the_one_process_state(name: str, run_cli, tmp_path: Path) -> None:
    # the one-process run first: the DDP processes, forked, inherit what it imported and built
    run_cli(
        *ddp_args(name),
        *("--data.batch_size", str(GLOBAL_BATCH), "--trainer.devices", "1"),
        root=tmp_path / "one",
    )
    root = tmp_path / "ddp"
    mp.start_processes(
        _worker, args=(_free_port(), str(root), name), nprocs=WORLD, start_method="fork"
    )
    errors = sorted(root.glob("error-rank*.txt"))
    assert not errors, "\n".join(p.read_text()[-3000:] for p in errors)
    ddp, one = read_results(root), read_results(tmp_path / "one")
    for key in EXACT:
        assert ddp[key] == one[key], key
    for key in CLOSE:
        assert abs(ddp[key] - one[key]) <= ACC_TOLERANCE, key
    states = [
        torch.load(last_checkpoint(r), weights_only=True)["state_dict"]
        for r in (root, tmp_path / "one")
    ]
    for key in CASES[name][1]:
        torch.testing.assert_close(states[0][key], states[1][key], atol=1e-4, rtol=1e-3)
    if name == "CORES":  # the sieve dropped samples
        assert not torch.allclose(states[1]["prior"], states[1]["initial_prior"])
    if name == "DivideMix":  # each network's division of the training split, some labeled
        division = states[0]["dividemix_clean_prob"][:, read_train_indices(root)]
        assert (division > 0.5).any(1).all() and (division <= 0.5).any(1).all()
    if name.startswith("ELR"):  # process 0 holds every network's target of every training
        moved = states[0]["elr_targets"].sum(-1) > 0  # sample, its own or not
        assert (moved.reshape(-1, moved.shape[-1]).sum(1) == ddp["data"]["sizes"]["train"]).all()
    if name == "ELRPlus":  # the averages of the networks' weights follow the same steps
        averages = [key for key in states[1] if key.startswith("averages.")]
        assert averages
        for key in averages:
            torch.testing.assert_close(states[0][key], states[1][key], atol=1e-4, rtol=1e-3)


def read_train_indices(root: Path) -> torch.Tensor:
    """The training split's dataset indices of the run under ``root``."""
    (noise,) = root.rglob("noise.pt")
    return torch.load(noise, weights_only=False)["train_indices"]


def test_a_resumed_run_continues_with_the_sieves_prior(run_cli, tmp_path: Path) -> None:
    """Killed in the last epoch and resumed: the prior of the epochs before (in last.ckpt), and
    so every weight, equal the uninterrupted run's."""
    args = [*resume_args("CORES"), *SIEVE]
    run_cli("fit", *args, root=tmp_path / "straight")
    root = tmp_path / "killed"
    killed = run_cli_process(root, *args, interrupt=(2, 1, signal.SIGKILL))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    run_cli("fit", *args, "--ckpt_path", "last", root=root)
    assert_same_run(tmp_path / "straight", root)
    state = torch.load(last_checkpoint(root), weights_only=True)["state_dict"]
    assert not torch.allclose(state["prior"], state["initial_prior"])
