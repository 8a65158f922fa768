"""Label-noise generation and transition-matrix estimation (pure torch, no Lightning).

Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``. The VRNL paper and
cleanlab use the column-stochastic transpose; see ``to_column_stochastic``.
"""

from .corrupt import corrupt_labels, instance_dependent_noise, make_noisy_labels, noise_rate
from .estimate import (
    anchor_transition,
    bias_transition,
    dual_t_correction,
    dual_t_transition,
    estimation_error,
)
from .transition import (
    CIFAR100_COARSE,
    NOISE_TYPES,
    SEMANTIC_DATASETS,
    asymmetric_transition,
    build_transition,
    check_transition,
    from_column_stochastic,
    load_transition,
    pair_transition,
    save_transition,
    semantic_transition,
    symmetric_transition,
    to_column_stochastic,
)

__all__ = [
    "NOISE_TYPES",
    "SEMANTIC_DATASETS",
    "CIFAR100_COARSE",
    "symmetric_transition",
    "pair_transition",
    "asymmetric_transition",
    "semantic_transition",
    "build_transition",
    "check_transition",
    "to_column_stochastic",
    "from_column_stochastic",
    "load_transition",
    "save_transition",
    "corrupt_labels",
    "noise_rate",
    "instance_dependent_noise",
    "make_noisy_labels",
    "anchor_transition",
    "dual_t_correction",
    "dual_t_transition",
    "estimation_error",
    "bias_transition",
]
