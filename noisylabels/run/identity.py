"""What a run is: the options that determine its result, and the few that may change on resume.

A run's **identity** is a flat mapping of dotted names to plain values: the method's class and
hyperparameters (``model.optim.lr``, ``model.alpha``, ``model.schedule.milestones``, ...), the
data module's class and options (``data.noise_type``, ``data.noise_rate``, ``data.noise_seed``,
...), the training seed (``seed``), the trainer's settings (``trainer.precision``,
``trainer.accumulate_grad_batches``, ...), how the best checkpoint is chosen
(``checkpoint.monitor``, ``checkpoint.mode``), ``tail_test_epochs``, and, once the data is set up,
the SHA-256 of the noisy training labels (``labels.sha256``) and of every input file the run
reads (``inputs.<path>``: a label file, a T file).

A resume (``--ckpt_path``, a sweep's resume, ``fit_and_test(ckpt_path=...)``) continues a run
only where the identity is the checkpoint's; any difference is refused before a file is
touched, naming each option with both values. The options that may change on resume are
:data:`RESUMABLE`, each with why it cannot change the result; they are announced and recorded
in ``results.json`` (``resumed[].changed``). Nothing else is ever "used from here on" while the
optimizer keeps the checkpoint's state: a different learning rate, weight decay, momentum, α,
schedule or seed is another experiment, started as a new run.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

from noisylabels.run.provenance import input_files_sha256, labels_sha256

RESUMABLE: dict[str, str] = {
    "trainer.max_epochs": "how long to train: a resumed run may train longer (never fewer "
    "epochs than it has done; a stopped run whose plan ends with its last epoch keeps its own, "
    "rules.admission)",
    "trainer.max_steps": "how long to train",
    "trainer.max_time": "how long to train",
    "trainer.default_root_dir": "where runs are written",
    "trainer.logger": "where and how metrics are logged",
    "trainer.callbacks": "observers of the run (the subset statistics, a learning-rate "
    "monitor; a callback that changes training is the user's own experiment)",
    "trainer.enable_progress_bar": "what the terminal shows",
    "trainer.enable_model_summary": "what the terminal shows",
    "trainer.log_every_n_steps": "how often metrics are logged",
    "trainer.profiler": "timing only",
    "trainer.num_sanity_val_steps": "a check before training, which trains nothing",
    "data.data_dir": "where the data is read (the noisy labels are compared by their hash)",
    "data.download": "whether a missing dataset may be downloaded",
    "data.num_workers": "how many processes load batches (the order is the sampler's)",
    "data.eval_batch_size": "the batch size of evaluation passes, which train nothing",
    "model.weight_warning": "when the VRNL weight warning is printed",
    "model.speed.compile": "how the network is executed (the same arithmetic, compiled or eager)",
    "model.speed.compile_backend": "how the network is executed",
    "model.speed.channels_last": "the memory layout of activations",
    "test_after_fit": "whether the final test runs",
}
"""The options a resume may change, with why each cannot change what the run computes."""

# keys compared whichever side lacks them (hyperparameters, which every checkpoint holds):
# elsewhere an option only one side records is unknown, not a change (e.g. a checkpoint
# written before identities were kept, or a run from Python resumed from the command line)
ALWAYS_COMPARED = ("model.", "data.", "labels.", "inputs.")
DEFAULT_PREFIX = "default."
"""An identity's ``default.<name>``: what a null option ``<name>`` resolves to in this run (a
module's ``resolved_defaults``), so that the option given null and given that value are one
identity, and a checkpoint that recorded null matches a run that spells the value out."""
ADDED_SINCE: dict[str, Any] = {
    "model.vrnl_form": "paper",
    "data.strong_views": 0,
    "data.strong_augment": None,
    "data.cutout": None,
}
"""Options added after runs were first recorded, with the value a record without them ran at
(a checkpoint written before ``vrnl_form`` existed trained the paper's form; one written before
the strong views existed drew none)."""
AFTER_SETUP = ("labels.", "inputs.")


def plain(value: Any) -> Any:
    """``value`` as YAML-safe data: tuples as lists, paths and other objects as text, tensors
    as numbers or lists."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return plain(value.value)
    torch = sys.modules.get("torch")  # a value is a tensor only where torch is loaded
    if torch is not None and isinstance(value, torch.Tensor):
        return plain(value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))  # an option group (e.g. a method's schedule)
    if hasattr(value, "as_dict"):  # a jsonargparse namespace
        return plain(value.as_dict())
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    return str(value)


def class_path(obj: Any) -> str:
    """``module.ClassName`` of ``obj``, a class, or else of ``obj``'s class."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _flat(prefix: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` as ``{"prefix.name": plain value}``, a nested group's options by their dotted
    names (``model.schedule.warmup_epochs``); internal ``_...`` keys left out."""
    out: dict[str, Any] = {}
    for key, value in plain(dict(options or {})).items():
        if str(key).startswith("_"):
            continue
        name = f"{prefix}.{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(name, value))
        else:
            out[name] = value
    return out


def _flatter(identity: Mapping[str, Any]) -> dict[str, Any]:
    """``identity`` with any mapping value spread into its dotted options."""
    out: dict[str, Any] = {}
    for name, value in identity.items():
        if isinstance(value, Mapping) and value:
            out.update(_flat(name, value))
        else:
            out[name] = value
    return out


def resumable(name: str) -> bool:
    """Whether the option ``name`` (flat) may change on resume: one of :data:`RESUMABLE`, or an
    option inside one (``trainer.logger.init_args.save_dir``)."""
    return any(name == r or name.startswith(r + ".") for r in RESUMABLE)


def identity(
    model_hparams: Mapping[str, Any] | None,
    data_hparams: Mapping[str, Any] | None,
    *,
    model_class: str | None,
    data_class: str | None,
    seed: Any,
    trainer_options: Mapping[str, Any] | None,
    run_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The identity of a run (see the module docstring), without :data:`RESUMABLE` options;
    ``None`` values of ``model_class``, ``data_class`` and ``seed`` are left out (unknown)."""
    out: dict[str, Any] = {}
    if model_class:
        out["model.class"] = model_class
    if data_class:
        out["data.class"] = data_class
    if seed is not None:
        out["seed"] = plain(seed)
    out.update(_flat("model", model_hparams))
    out.update(_flat("data", data_hparams))
    out.update(_flat("trainer", trainer_options))
    out.update({key: plain(value) for key, value in dict(run_options or {}).items()})
    return {key: value for key, value in out.items() if not resumable(key)}


def of_objects(
    model: Any,
    datamodule: Any,
    *,
    seed: Any,
    trainer_options: Mapping[str, Any] | None,
    run_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`identity` of a built model and data module (their saved hyperparameters), each
    null option that a module resolves (its ``resolved_defaults()``) recorded as the value it
    runs with, beside ``default.<name>``."""
    out = identity(
        getattr(model, "hparams", None),
        getattr(datamodule, "hparams", None),
        model_class=class_path(model),
        data_class=None if datamodule is None else class_path(datamodule),
        seed=seed,
        trainer_options=trainer_options,
        run_options=run_options,
    )
    for prefix, obj in (("model", model), ("data", datamodule)):
        resolve = getattr(obj, "resolved_defaults", None)
        for key, value in (resolve() if callable(resolve) else {}).items():
            name = f"{prefix}.{key}"
            out[DEFAULT_PREFIX + name] = plain(value)
            if name in out and out[name] is None:
                out[name] = plain(value)
    return out


def input_paths(model: Any, datamodule: Any) -> dict[str, str]:
    """The input files a run reads, by option (``data.noise_file``, ``model.transition``,
    ...): the hyperparameters of the method and the data module that name an existing file."""
    out: dict[str, str] = {}
    for prefix, obj in (("model", model), ("data", datamodule)):
        for key, value in dict(getattr(obj, "hparams", None) or {}).items():
            if isinstance(value, str) and not str(key).startswith("_") and value:
                path = os.path.abspath(os.path.expanduser(value))  # as its hash is keyed
                if os.path.isfile(path):
                    out[f"{prefix}.{key}"] = path
    return out


def of_run(
    model: Any,
    datamodule: Any,
    seed: Any,
    trainer_options: Mapping[str, Any] | None,
    run_options: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """A set-up run's ``(identity, resumable options, input files' hashes)``: its
    :func:`of_objects` identity with the hash of its noisy training labels (``labels.sha256``)
    and of each input file by option (``inputs.data.noise_file``), the :data:`RESUMABLE`
    options it runs with (flat), and ``{absolute path: SHA-256}`` of its input files."""
    out = of_objects(
        model, datamodule, seed=seed, trainer_options=trainer_options, run_options=run_options
    )
    labels = labels_sha256(datamodule)
    if labels is not None:
        out["labels.sha256"] = labels
    paths = input_paths(model, datamodule)
    hashes = input_files_sha256(paths.values())
    for option, path in paths.items():
        out[f"inputs.{option}"] = hashes.get(path)
    options = resumable_options(
        flat_options(
            getattr(model, "hparams", None),
            getattr(datamodule, "hparams", None),
            trainer_options,
            run_options,
        )
    )
    return out, options, {path: hashes[path] for path in paths.values() if path in hashes}


def _class_of(hparams: Mapping[str, Any]) -> str | None:
    value = hparams.get("_class_path")
    return str(value) if value else None


def of_checkpoint(content: Mapping[str, Any], state: Mapping[str, Any] | None) -> dict[str, Any]:
    """The identity a checkpoint was trained with: the one its run recorded (``state``, the
    recorder's state in the checkpoint), or, for a checkpoint written before runs kept one,
    what the checkpoint holds (hyperparameters, trainer options, the labels' hash)."""
    state = dict(state or {})
    if "identity" in state:
        return dict(state["identity"])
    model_hp = dict(content.get("hyper_parameters") or {})
    data_hp = dict(content.get("datamodule_hyper_parameters") or {})
    out = identity(
        model_hp,
        data_hp,
        model_class=_class_of(model_hp),
        data_class=_class_of(data_hp),
        seed=None,
        trainer_options=state.get("trainer_options"),
    )
    if state.get("noisy_labels_sha256"):
        out["labels.sha256"] = state["noisy_labels_sha256"]
    return out


def _same_class(a: Any, b: Any) -> bool:
    # a class path recorded by the command line may name a class where it was re-exported
    # (noisylabels.methods.Forward) and an object's its module (noisylabels.methods.forward)
    return str(a).rsplit(".", 1)[-1] == str(b).rsplit(".", 1)[-1]


def differences(
    saved: Mapping[str, Any], now: Mapping[str, Any], known_after_setup: bool = True
) -> dict[str, list[Any]]:
    """``{name: [checkpoint's value, this run's value]}`` for the identity options that differ
    (see :data:`ALWAYS_COMPARED` for options only one side knows). ``known_after_setup=False``
    leaves out what is known once the data is set up (the labels' and input files' hashes)."""
    saved, now = _flatter(saved), _flatter(now)  # a group kept as one value: its options
    out: dict[str, list[Any]] = {}
    for name in sorted(set(saved) | set(now)):
        if resumable(name) or (not known_after_setup and name.startswith(AFTER_SETUP)):
            continue
        if name.startswith(DEFAULT_PREFIX):  # what null resolves to: compared through the option
            continue
        both = name in saved and name in now
        if not both and not name.startswith(ALWAYS_COMPARED):
            continue
        before = saved.get(name, ADDED_SINCE.get(name))
        after = now.get(name, ADDED_SINCE.get(name))
        if name.endswith(".class") and before and after:
            if _same_class(before, after):
                continue
        elif _same_value(before, after) or _null_resolving_to(before, after, now, name):
            continue
        elif _null_resolving_to(after, before, saved, name):
            continue
        out[name] = [before, after]
    return out


def _null_resolving_to(null: Any, value: Any, side: Mapping[str, Any], name: str) -> bool:
    """Whether ``null`` is null and ``value`` what the option ``name`` resolves to on the side
    of ``value`` (an identity recorded before its module resolved the option kept null)."""
    key = DEFAULT_PREFIX + name
    return null is None and key in side and _same_value(side[key], value)


EVALUATION_NEUTRAL: dict[str, str] = {
    "data.batch_size": "training batches only",
    "data.eval_batch_size": "the batches, not the samples or their values",
    "data.num_workers": "how the batches are loaded",
    "data.data_dir": "where the same dataset lies",
    "data.download": "whether a missing dataset is fetched",
    "data.on_device": "where the same batches are made",
}
"""Data options whose value cannot change an evaluation's figures, each with why."""


def evaluation_differences(saved: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, list]:
    """``{name: [the fit's value, this evaluation's]}`` for the data options in which an
    evaluation (``test``, ``validate``, ``predict``) of a run's checkpoint differs from the
    run's fit (``saved``: the checkpoint's identity), leaving out :data:`EVALUATION_NEUTRAL`:
    the samples, labels or inputs of the evaluation are then other than the fit's."""
    found = differences(saved, now, known_after_setup=False)
    return {
        name: values
        for name, values in found.items()
        if name.startswith("data.") and name not in EVALUATION_NEUTRAL
    }


MODEL_SHAPE = ("model.class", "model.network.", "model.num_classes", "model.input_shape")
"""The options of a method that decide which weights it has (its class, its network)."""


def model_differences(saved: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, list]:
    """``{name: [the checkpoint's value, this model's]}`` for the options that decide the
    weights a model has (:data:`MODEL_SHAPE`) and differ: a checkpoint of such another model
    does not load into this one."""
    found = differences(saved, now, known_after_setup=False)
    return {
        name: values
        for name, values in found.items()
        if name == "model.class" or name.startswith(MODEL_SHAPE)
    }


def _same_value(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def resumable_changes(
    saved: Mapping[str, Any] | None, now: Mapping[str, Any] | None
) -> dict[str, list[Any]]:
    """``{name: [before, now]}`` for the :data:`RESUMABLE` options (flat, as in ``saved`` and
    ``now``) that differ, where both sides know them."""
    saved, now = dict(saved or {}), dict(now or {})
    return {
        name: [saved[name], now[name]]
        for name in sorted(set(saved) & set(now))
        if resumable(name) and not _same_value(saved[name], now[name])
    }


def resumable_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`RESUMABLE` options among flat ``options`` (as plain values)."""
    return {name: plain(value) for name, value in options.items() if resumable(name)}


def flat_options(
    model_hparams: Mapping[str, Any] | None,
    data_hparams: Mapping[str, Any] | None,
    trainer_options: Mapping[str, Any] | None,
    run_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every option of a run, flat (``model.optim.lr``, ``trainer.max_epochs``, ...)."""
    out = _flat("model", model_hparams)
    out.update(_flat("data", data_hparams))
    out.update(_flat("trainer", trainer_options))
    out.update({key: plain(value) for key, value in dict(run_options or {}).items()})
    return out


def describe(changes: Mapping[str, list[Any]], limit: int = 12) -> str:
    """``model.optim.lr 0.05 (now 1e-07); seed 0 (now 1)`` for the first ``limit``
    differences."""
    items = [f"{name} {_short(a)} (now {_short(b)})" for name, (a, b) in changes.items()]
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def _short(value: Any, width: int = 60) -> str:
    text = "not set" if value is None else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."
