"""Callbacks: run artifacts and observability."""

from noisylabels.callbacks.artifacts import NoiseRecorder, run_dir

__all__ = ["NoiseRecorder", "run_dir"]
