"""A method's own option given a value other than its default is applied or refused, as the
schedule's are (test_applied_or_refused.py): refused before training where the run would never
use it (``NoisyLabelMethod.inert_options``), and then only then.

The cases below change one option of one method on a 5-epoch stage. Each refused case names a
reference run the changed value is claimed to equal (the default, or the value it is claimed to
be indistinguishable from); each accepted case is claimed to change the run. The default run
checks the claims of refusal and acceptance on the methods themselves; the ``slow`` one trains
every case with the refusal switched off and shows the claim: a refused value trains exactly
the reference's networks, an accepted one other networks.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

from noisylabels.errors import InputError
from noisylabels.methods import NoisyLabelMethod, StageSchedule, registry
from noisylabels.methods.core.inert import given, option_default

from conftest import CONFIGS

STAGE = 5  # epochs of the method's own stage in every case
SCHEDULE = {"main_epochs": STAGE, "milestones": ()}
WARM = {"warmup_epochs": 1, "main_epochs": STAGE - 1, "milestones": ()}

# refused: (method, options, the option the refusal names, the reference run's options)
REFUSED = [
    ("CE", {"alpha": 0.0, "variance_scope": "local"}, "variance_scope", {"alpha": 0.0}),
    ("ELR", {"alpha": 0.0, "weight_warning": 0.5}, "weight_warning", {"alpha": 0.0}),
    ("ELRPlus", {"ema_decay": 0.0, "ema_rampup_steps": 100}, "ema_rampup_steps",
     {"ema_decay": 0.0}),
    ("ELRPlus", {"lam": 0.0, "coef_rampup_steps": 100}, "coef_rampup_steps", {"lam": 0.0}),
    ("ELRPlus", {"lam": 0.0, "clamp": 1e-3}, "clamp", {"lam": 0.0}),
    ("DISC", {"lambda_h": 0.0, "q": 0.5}, "q", {"lambda_h": 0.0}),
    ("Forward", {"alpha": 0.0, "vrnl_form": "bounded"}, "vrnl_form", {"alpha": 0.0}),
    (
        "CE",
        {"alpha": 0.1, "vrnl_form": "bounded", "weight_warning": 0.2},
        "weight_warning",
        {"alpha": 0.1, "vrnl_form": "bounded"},
    ),
    ("CORES", {"sieve_epoch": 9}, "sieve_epoch", {}),
    ("CORES", {"beta_start": 9}, "beta_start", {}),
    ("CORES", {"beta": 0.0, "scale_lr": False}, "scale_lr", {"beta": 0.0}),
    ("CORES", {"beta": 0.0, "prior": "uniform"}, "prior", {"beta": 0.0}),
    ("GCE", {"prune_start": 9}, "prune_start", {}),
    ("GCE", {"prune_every": 7}, "prune_every", {}),
    ("GCE", {"truncate": False, "k": 0.3}, "k", {"truncate": False}),
    ("GCE", {"truncate": False, "prune_start": 2}, "prune_start", {"truncate": False}),
    ("CoTeachingPlus", {"init_epochs": 9}, "init_epochs", {"init_epochs": STAGE}),
    ("CoTeaching", {"forget_rate": 0.3, "filter_outliers": False}, "filter_outliers",
     {"forget_rate": 0.3}),
    ("MentorNet", {"forget_rate": 0.0, "ramp_epochs": 3}, "ramp_epochs", {"forget_rate": 0.0}),
    ("Peer", {"peer_alpha_segments": [(2, 0.5, 1.0)], "peer_alpha": 0.5}, "peer_alpha",
     {"peer_alpha_segments": [(2, 0.5, 1.0)]}),
    ("Forward", {"transition": True, "outlier_quantile": 0.9}, "outlier_quantile",
     {"transition": True}),
    ("Reweight", {"transition": True, "estimator": "dual_t"}, "estimator", {"transition": True}),
    ("Forward", {"transition": True, "bias_seed": 3}, "bias_seed", {"transition": True}),
    ("DivideMix", {"confidence_penalty": True}, "confidence_penalty", {}),
    ("DivideMix", {"lambda_u": 0.0, "lambda_u_ramp_epochs": 3}, "lambda_u_ramp_epochs",
     {"lambda_u": 0.0}),
    ("GLS", {"warmup_lr": 0.05}, "warmup_lr", {}),
    ("FDivergence", {"warmup_lr": 0.05}, "warmup_lr", {}),
    ("APL", {"focal_gamma": 1.0}, "focal_gamma", {}),
    ("CAL", {"beta_start": 3}, "beta_start", {}),
    ("CAL", {"beta": 0.0, "warmup_beta": 0.0, "scale_lr": False}, "scale_lr",
     {"beta": 0.0, "warmup_beta": 0.0}),
    ("CAL", {"beta": 0.0, "warmup_beta": 0.0, "prior_scale": 10.0}, "prior_scale",
     {"beta": 0.0, "warmup_beta": 0.0}),
    ("CAL", {"warmup_beta": 0.0, "beta_start": 0, "warmup_prior": "noisy"}, "warmup_prior",
     {"warmup_beta": 0.0, "beta_start": 0}),
]  # fmt: skip
# accepted, and claimed to change the run: (method, options, the reference run's options)
ACCEPTED = [
    ("CE", {"alpha": 0.5}, {"alpha": 0.0}),
    ("CORES", {"sieve_epoch": 2}, {}),
    ("CORES", {"beta_start": 1, "beta_ramp_epochs": 2}, {}),
    ("CORES", {"beta_start": 0, "prior": "uniform"}, {"beta_start": 0}),
    ("GCE", {"prune_start": 2, "prune_every": 2}, {}),
    ("GCE", {"prune_start": 2, "prune_every": 2, "k": 0.1}, {"prune_start": 2, "prune_every": 2}),
    ("CoTeachingPlus", {"init_epochs": 2}, {}),
    ("CoTeachingPlus", {"init_epochs": 2, "loss": "ce"}, {"init_epochs": 2}),
    ("CoTeaching", {"forget_rate": 0.3, "ramp_epochs": 3}, {"forget_rate": 0.3}),
    ("Peer", {"peer_alpha": 0.5}, {}),
    ("Forward", {"transition": True, "transition_bias": 0.2, "bias_seed": 3},
     {"transition": True, "transition_bias": 0.2}),
    ("DivideMix", {"lambda_u_ramp_epochs": 2}, {}),
    ("GLS", {"smooth_rate": -0.5}, {}),
    ("FDivergence", {"divergence": "kl"}, {}),
    ("APL", {"losses": "nfl_rce", "focal_gamma": 1.0}, {"losses": "nfl_rce"}),
    ("CAL", {"beta_start": 0, "beta_ramp_epochs": 2}, {"beta_start": 0}),
    ("CAL", {"beta_start": 0, "beta_ramp_epochs": 0, "warmup_prior": "noisy"},
     {"beta_start": 0, "beta_ramp_epochs": 0}),
    ("CAL", {"sieve_threshold": 0.0}, {}),
]  # fmt: skip
# under a warm-up (T estimated from it)
WARMUP_CASES = [("Forward", {"transition": "estimate", "outlier_quantile": 0.9},
                 {"transition": "estimate"})]  # fmt: skip
WARMUP_METHODS = {"CAL"}
"""Methods that estimate from a warm-up whatever their options (CAL: its D̂)."""


def _schedule(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """A warm-up where the method estimates from it; else the method's stage alone."""
    estimates = options.get("transition") == "estimate" or name in WARMUP_METHODS
    return WARM if estimates else SCHEDULE


def _method(name: str, options: dict[str, Any]) -> NoisyLabelMethod:
    cls = registry()[name]
    if cls.__name__ in ("Forward", "Reweight") and "transition" not in options:
        options = {**options, "transition": True}
    return cls(
        network={"backbone": "mlp"},
        num_classes=10,
        input_shape=(1, 8, 8),
        schedule=StageSchedule(**_schedule(name, options)),
        **options,
    )


def _ids(cases: list[tuple]) -> list[str]:
    return [f"{c[0]}-" + ",".join(f"{k}={v}" for k, v in c[1].items()) for c in cases]


@pytest.mark.parametrize(("name", "options", "refused", "reference"), REFUSED, ids=_ids(REFUSED))
def test_an_option_the_run_would_never_use_is_refused_naming_it(
    name: str, options: dict[str, Any], refused: str, reference: dict[str, Any]
) -> None:
    method = _method(name, options)
    with pytest.raises(InputError, match=rf"--model\.{refused} .* would have no effect: "):
        method.check_options_used()
    if refused not in reference:  # the reference itself is a run (else a value as inert)
        _method(name, reference).check_options_used()


@pytest.mark.parametrize(
    ("name", "options", "reference"), ACCEPTED + WARMUP_CASES, ids=_ids(ACCEPTED + WARMUP_CASES)
)
def test_an_option_the_run_uses_is_accepted(
    name: str, options: dict[str, Any], reference: dict[str, Any]
) -> None:
    _method(name, options).check_options_used()
    _method(name, reference).check_options_used()


def test_only_options_given_other_than_their_default_are_refused() -> None:
    """A default the stage is too short for is the reference's, not given: CORES's sieve from
    epoch 31 in a 5-epoch stage runs (and says nothing); the same value given is no change."""
    method = _method("CORES", {})
    assert method.inert_options()[0][0] == "sieve_epoch"  # listed as unused, at its default
    method.check_options_used()
    _method("CORES", {"sieve_epoch": 31}).check_options_used()
    assert not given(method, "sieve_epoch")
    assert option_default(type(method), "sieve_epoch") == 31
    assert option_default(registry()["TRevision"], "transition") == "estimate"  # Reweight's
    assert option_default(type(method), "no_such_option") is inspect.Parameter.empty


def test_every_listed_option_is_one_of_the_methods_own() -> None:
    """Each name a case refuses is an ``__init__`` option of its method (a renamed option
    cannot leave a rule that never fires)."""
    for name, options, refused, _ in REFUSED:
        cls = registry()[name]
        assert option_default(cls, refused) is not inspect.Parameter.empty, (name, refused)
        names = [n for n, _ in _method(name, options).inert_options()]
        assert refused in names, (name, options, names)


def test_the_command_line_refuses_before_training(run_cli, tmp_path: Path) -> None:
    """Through the command: the refusal comes at setup, before any epoch, and leaves no run."""
    with pytest.raises(InputError, match=r"--model\.sieve_epoch 9 would have no effect"):
        run_cli(
            "fit", "--config", str(CONFIGS / "data" / "digits.yaml"),
            "--model", "noisylabels.methods.CORES", "--model.sieve_epoch", "9",
            "--model.schedule.main_epochs", str(STAGE), "--model.schedule.milestones", "[]",
        )  # fmt: skip
    assert not list(tmp_path.rglob("*.ckpt"))


# ---------------------------------------------------------------------------- the claims, trained
def _networks_after(
    name: str, options: dict[str, Any], root: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A digest of the method's trained networks after a short run of ``options`` with the
    refusal switched off."""
    from noisylabels.cli import run

    monkeypatch.setattr(NoisyLabelMethod, "check_options_used", lambda self: None)
    cls = registry()[name]
    args = [f"--model.{k}={_cli(v)}" for k, v in options.items()]
    if cls.__name__ in ("Forward", "Reweight") and "transition" not in options:
        args.append("--model.transition=true")
    schedule = _schedule(name, options)
    args += [f"--model.schedule.{k}={_cli(v)}" for k, v in schedule.items()]
    epochs = int(schedule.get("warmup_epochs", 0)) + int(schedule["main_epochs"])
    args += cls.data_options()
    cli = run(
        ["fit", "--config", str(CONFIGS / "data" / "digits.yaml"), "--data.noise_rate", "0.4",
         "--model", f"noisylabels.methods.{name}", *args, "--model.optim.lr", "0.05",
         "--trainer.max_epochs", str(epochs), "--trainer.limit_train_batches", "4",
         "--trainer.limit_val_batches", "2", "--test_after_fit", "false",
         "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(root)]
    )  # fmt: skip
    digest = hashlib.sha1()
    for network in cli.model.networks:
        for key, value in sorted(network.state_dict().items()):
            digest.update(key.encode() + value.detach().float().numpy().tobytes())
    return digest.hexdigest()


def _cli(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_cli(v) for v in value) + "]"
    return str(value)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "options", "refused", "reference"), REFUSED, ids=_ids(REFUSED))
def test_a_refused_value_trains_the_reference_run(
    name: str, options: dict, refused: str, reference: dict, tmp_path: Path, monkeypatch
) -> None:
    ran = _networks_after(name, options, tmp_path / "changed", monkeypatch)
    assert ran == _networks_after(name, reference, tmp_path / "reference", monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "options", "reference"), ACCEPTED + WARMUP_CASES, ids=_ids(ACCEPTED + WARMUP_CASES)
)
def test_an_accepted_value_changes_the_run(
    name: str, options: dict, reference: dict, tmp_path: Path, monkeypatch
) -> None:
    ran = _networks_after(name, options, tmp_path / "changed", monkeypatch)
    assert ran != _networks_after(name, reference, tmp_path / "reference", monkeypatch)


def test_the_cases_cover_every_method_with_conditional_options() -> None:
    """Every method whose ``inert_options`` can list something has a refused case."""
    overriding = {
        name
        for name, cls in registry().items()
        if any("inert_options" in vars(k) for k in cls.__mro__ if k is not NoisyLabelMethod)
    }
    # JoCoR, Backward and TRevision inherit the rules of CoTeaching's and Forward's bases
    assert overriding <= {case[0] for case in REFUSED} | {"JoCoR", "Backward", "TRevision"}


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_method_takes_exactly_the_views_it_trains_on(name: str, monkeypatch) -> None:
    """``--data.views`` and ``--data.strong_views``: fewer views than the method trains on are
    refused, and so are more (drawn every step, never used)."""
    import dataclasses

    from conftest import synthetic_facts

    try:
        method = _method(name, {})
    except InputError:  # a method that estimates from a warm-up (PTD, T-Revision)
        method = registry()[name](
            network={"backbone": "mlp"}, num_classes=10, input_shape=(1, 8, 8), schedule=WARM
        )
    needed, strong = type(method).views_needed, type(method).strong_views_needed
    labels = torch.zeros(4, dtype=torch.long)
    facts = synthetic_facts(10, labels, labels, torch.arange(4), 0.2)
    cases = [({"views": v, "strong_views": strong}, v == needed, "views") for v in range(1, 4)]
    cases += [  # and the strong views (SOP+)
        ({"views": needed, "strong_views": s}, s == strong, "strong_views") for s in range(3)
    ]
    for served_views, accepted, option in cases:
        served = dataclasses.replace(facts, **served_views)
        monkeypatch.setattr(method, "data_facts", lambda served=served: served)
        if accepted:
            method.check_views()
            continue
        with pytest.raises(InputError, match=rf"--data\.{option}"):
            method.check_views()


@pytest.mark.parametrize("name", sorted(registry()))
def test_vrnl_refuses_gradient_accumulation_and_the_base_method_takes_it(name: str) -> None:
    """With ``alpha != 0`` the variance of an accumulated part is not the batch's: refused,
    naming the option; the mean alone (``alpha`` 0) accumulates exactly and is accepted."""
    for alpha in (0.0, 0.1):
        try:
            method = _method(name, {"alpha": alpha})
        except InputError:  # a method that estimates from a warm-up (PTD, T-Revision)
            method = registry()[name](
                network={"backbone": "mlp"}, num_classes=10, input_shape=(1, 8, 8),
                schedule=WARM, alpha=alpha,
            )  # fmt: skip
        method.check_variance_accumulation(1)
        if alpha == 0:
            method.check_variance_accumulation(4)
            continue
        with pytest.raises(InputError, match=r"--trainer\.accumulate_grad_batches 4 with VRNL"):
            method.check_variance_accumulation(4)
