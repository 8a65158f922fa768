"""Hardware the machine does not have: a GPU config without a GPU, an accelerator that is not
here, a device count the accelerator does not take. Each ends ``noisylabels fit`` with one
paragraph (what was asked, what the machine has, what to use instead), exit status 2 and no
run folder, through the real command. CUDA is hidden from Lightning, so the tests behave alike
on machines with and without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator

from noisylabels.run.devices import describe

from conftest import CONFIGS

QUICKSTART = str(CONFIGS / "quickstart.yaml")
DDP = str(CONFIGS / "trainer" / "ddp.yaml")


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without CUDA or Apple GPUs, as Lightning and torch see it."""
    import torch

    for accelerator in (CUDAAccelerator, MPSAccelerator):
        monkeypatch.setattr(accelerator, "is_available", staticmethod(lambda: False))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def fail(args: list[str], root: Path, capsys: pytest.CaptureFixture) -> str:
    """Run ``noisylabels fit ARGS``; the one paragraph it ends with (status 2, no folder)."""
    from noisylabels.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", QUICKSTART, *args, "--trainer.default_root_dir", str(root)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err[-3000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("noisylabels: error:")]
    assert len(lines) == 1, err[-3000:]
    assert not root.exists()
    return lines[0]


def test_a_gpu_config_without_a_gpu(no_gpu, tmp_path: Path, capsys) -> None:
    line = fail(["--config", DDP], tmp_path / "runs", capsys)
    assert "--trainer.accelerator gpu --trainer.devices -1 --trainer.strategy ddp" in line
    assert "asks for CUDA GPUs, but no CUDA GPU is visible on this machine" in line
    assert "configs/trainer/ddp_cpu.yaml" in line and "--trainer.accelerator cpu" in line


@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_a_gpu_accelerator_without_a_gpu(no_gpu, accelerator, tmp_path: Path, capsys) -> None:
    line = fail(["--trainer.accelerator", accelerator], tmp_path / "runs", capsys)
    assert f"--trainer.accelerator {accelerator} --trainer.devices 1 asks for CUDA GPUs" in line
    assert "--trainer.accelerator cpu" in line


def test_an_accelerator_this_machine_lacks(no_gpu, tmp_path: Path, capsys) -> None:
    line = fail(["--trainer.accelerator", "mps"], tmp_path / "runs", capsys)
    assert "asks for the MPS accelerator, which this machine does not have" in line
    assert "the accelerators here: cpu" in line


@pytest.mark.parametrize("devices", ["0", "-1"])
def test_a_device_count_the_cpu_does_not_take(devices, tmp_path: Path, capsys) -> None:
    args = ["--trainer.accelerator", "cpu", "--trainer.devices", devices]
    line = fail(args, tmp_path / "runs", capsys)
    assert f"--trainer.devices {devices} is not a number of devices" in line


def test_an_accelerator_name_that_does_not_exist(tmp_path: Path, capsys) -> None:
    line = fail(["--trainer.accelerator", "gpux"], tmp_path / "runs", capsys)
    assert "--trainer.accelerator gpux is not an accelerator; the names are auto" in line


def test_more_gpus_than_the_machine_has(no_gpu) -> None:
    err = RuntimeError("You requested gpu: [3]\n But your machine only has: [0]")
    text = describe(err, {"accelerator": "cuda", "devices": [3]})
    assert text is not None
    assert text.startswith("--trainer.accelerator cuda --trainer.devices [3] asks for more GPUs")
    assert "(Lightning: You requested gpu: [3] But your machine only has: [0])" in text


def test_other_errors_are_left_alone() -> None:
    assert describe(ValueError("something else"), {"accelerator": "cpu"}) is None
