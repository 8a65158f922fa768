"""Label noise (pure torch, no Lightning): the noise kinds (:data:`NOISE_KINDS`, one entry per
``--data.noise_type``), transition matrices, corruption, label files, label sources, the checks
that labels can be learned at all, transition-matrix estimation, and the typed facts of a run's
data (:class:`DataFacts`) that methods and callbacks read.

The nominal noise rate (``--data.noise_rate``) is ``rate_nominal`` throughout, as in
``results.json``; the rate measured on the labels is ``rate_actual``.

Transition matrices are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``. The VRNL paper and
cleanlab use the column-stochastic transpose; see ``to_column_stochastic``.
"""

from .condition import TransitionCondition, transition_condition
from .corrupt import (
    corrupt_labels,
    empirical_transition,
    instance_dependent_noise,
    instance_flip_probabilities,
    rate_actual,
)
from .estimate import (
    anchor_points,
    anchor_transition,
    bias_transition,
    dual_t_correction,
    dual_t_parts,
    dual_t_transition,
    estimation_error,
)
from .facts import UNKNOWN_LABEL, DataFacts, ProvidesDataFacts, data_facts_of, majority_fraction
from .kinds import (
    NOISE_KINDS,
    NoiseKind,
    RateLimit,
    build_transition,
    check_noise_options,
    draw_from_transition,
    make_noisy_labels,
    noise_kind,
    noise_kinds_help,
    noise_kinds_table,
)
from .label_file import LABEL_FILE_SUFFIXES, read_label_file
from .labels import (
    FileLabels,
    LabelSource,
    ShippedLabels,
    SyntheticNoise,
    label_source,
)
from .learnable import (
    check_class_coverage,
    check_clean_majority,
    check_transition_majority,
    clean_majority_limit,
    majority_violations,
)
from .matrices import (
    asymmetric_transition,
    check_rate_below,
    check_transition,
    from_column_stochastic,
    load_transition,
    pair_transition,
    revise_transition,
    save_transition,
    semantic_transition,
    superclass_flips,
    symmetric_limit,
    symmetric_transition,
    to_column_stochastic,
)
from .parts import (
    fit_part_transitions,
    part_noisy_posterior,
    part_transition,
    part_weights,
)

__all__ = [
    "UNKNOWN_LABEL",
    "DataFacts",
    "ProvidesDataFacts",
    "data_facts_of",
    "majority_fraction",
    "NOISE_KINDS",
    "NoiseKind",
    "RateLimit",
    "draw_from_transition",
    "noise_kind",
    "noise_kinds_help",
    "noise_kinds_table",
    "LABEL_FILE_SUFFIXES",
    "symmetric_transition",
    "symmetric_limit",
    "check_rate_below",
    "TransitionCondition",
    "transition_condition",
    "pair_transition",
    "revise_transition",
    "asymmetric_transition",
    "semantic_transition",
    "superclass_flips",
    "build_transition",
    "check_transition",
    "to_column_stochastic",
    "from_column_stochastic",
    "load_transition",
    "save_transition",
    "corrupt_labels",
    "rate_actual",
    "empirical_transition",
    "instance_flip_probabilities",
    "instance_dependent_noise",
    "make_noisy_labels",
    "read_label_file",
    "LabelSource",
    "SyntheticNoise",
    "FileLabels",
    "ShippedLabels",
    "label_source",
    "check_noise_options",
    "check_transition_majority",
    "check_clean_majority",
    "check_class_coverage",
    "clean_majority_limit",
    "majority_violations",
    "anchor_points",
    "anchor_transition",
    "dual_t_correction",
    "dual_t_parts",
    "dual_t_transition",
    "estimation_error",
    "bias_transition",
    "part_weights",
    "fit_part_transitions",
    "part_transition",
    "part_noisy_posterior",
]
