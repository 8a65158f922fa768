"""Reading the YAML the project writes (a run's ``config.yaml``, a config dumped for its
hyperparameters): YAML's safe loader through libyaml where PyYAML was built with it, else
PyYAML's own. Both read a document to the same values; libyaml reads a sweep's run files
faster (``report`` over the 63 runs of results/table1_mnist: 0.36 s to 0.08 s, medians of 5).
The config files a user writes are read by :mod:`noisylabels.run.compose`, whose loader also
refuses a repeated key."""

from __future__ import annotations

from typing import Any

import yaml

SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str | bytes) -> Any:
    """``yaml.safe_load(text)``, through libyaml where it is there."""
    return yaml.load(text, Loader=SafeLoader)
