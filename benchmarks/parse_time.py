"""Parse time of the ``noisylabels`` Lightning stages: the median wall time of
``LightningCLI.parse_arguments`` for each command below, warm (in one process, after a first
parse that builds the parsers), stopping each command once it is parsed.

Commands are measured in turn, ``--repeats`` rounds (the order alternates between rounds, so
drift of the machine's load hits them alike); the median over the rounds is printed. A busy
machine makes every figure larger: compare figures taken together.

    python benchmarks/parse_time.py --repeats 15
    python benchmarks/parse_time.py --only quickstart overrides
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"

# name -> arguments after `noisylabels`
COMMANDS: dict[str, list[str]] = {
    "quickstart": ["fit", "--config", str(CONFIGS / "quickstart.yaml"),
                   "--trainer.fast_dev_run", "true"],
    "preset": ["fit", "--config", str(CONFIGS / "mnist_volmin_vrnl.yaml")],
    "overrides": [
        "fit", "--config", str(CONFIGS / "data" / "digits.yaml"),
        "--config", str(CONFIGS / "method" / "forward.yaml"),
        "--model.alpha", "0.05", "--model.optim.lr", "0.02",
        "--model.schedule.main_epochs", "3", "--data.noise_rate", "0.3",
        "--data.batch_size", "32", "--trainer.accelerator", "cpu", "--seed_everything", "3",
    ],
    "print_config": ["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--print_config"],
}  # fmt: skip


class _Parsed(Exception):
    """Raised after the parse: the command goes no further."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--only", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    options = parser.parse_args()
    sys.argv = ["noisylabels"]  # the commands pass their own arguments

    from noisylabels.run import cli

    times: list[float] = []
    original = cli.NoisyLabelsCLI.parse_arguments

    def timed(self, parser, args):  # noqa: ANN001, ANN202
        start = time.perf_counter()
        try:
            original(self, parser, args)
        finally:
            times.append(time.perf_counter() - start)
        raise _Parsed

    cli.NoisyLabelsCLI.parse_arguments = timed

    def once(args: list[str]) -> float:
        times.clear()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(_Parsed, SystemExit):
            cli.lightning_command(list(args))
        return times[-1]

    names = options.only
    for name in names:  # warm: build the parsers, read the files
        once(COMMANDS[name])
    results: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(options.repeats):
        order = names if round_ % 2 == 0 else names[::-1]
        for name in order:
            results[name].append(once(COMMANDS[name]))
    for name in names:
        median = statistics.median(results[name])
        low = min(results[name])
        print(f"{name:14s} median {median * 1000:7.1f} ms   min {low * 1000:7.1f} ms")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
