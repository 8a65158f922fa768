"""An option given a value other than its default is applied or refused, never silently dropped:
for every option of the stage schedule, on schedules of every kind, a changed value either is
refused with an :class:`InputError` naming it, or changes what the run does (the learning rate
and Adam's β1 of every epoch, or what a stage change reads). The one exception is declared: a
warm-up switched off (``warmup_epochs: 0``) is switched off with its options."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from noisylabels.errors import InputError
from noisylabels.methods import CE, StageSchedule
from noisylabels.methods.core.stages import StagedLR

# schedules of every kind: multistep with and without warm-up and revision, linear, cosine
BASES = {
    "multistep": StageSchedule(main_epochs=10, milestones=(4,)),
    "staged": StageSchedule(warmup_epochs=2, main_epochs=10, milestones=(4,), revision_epochs=2),
    "linear": StageSchedule(main_epochs=10, lr_schedule="linear", decay_start=5),
    "cosine": StageSchedule(warmup_epochs=2, main_epochs=10, lr_schedule="cosine"),
}
WARMUP_OPTIONS = (
    "warmup_model",
    "warmup_momentum",
    "warmup_milestones",
    "main_stage_init",
    "milestones_from",
)
"""What a switched-off warm-up switches off with it."""
# valid values other than the defaults; some reach past a stage's end or belong to another plan
CHANGES = {
    "warmup_epochs": (3,),
    "main_epochs": (7,),
    "revision_epochs": (2,),
    "warmup_model": ("best",),
    "warmup_momentum": (0.5,),
    "warmup_milestones": ((1,), (50,)),
    "main_stage_init": ("reinit",),
    "lr_schedule": ("linear", "cosine", "multistep"),
    "milestones": ((2,), (100,), ()),
    "milestones_from": ("start",),
    "lr_gamma": (0.5,),
    "decay_start": (2, 50),
    "decay_beta1": (0.1,),
    "cosine_period": (3,),
    "min_lr": (0.001,),
    "revision_model": ("last",),
}


def behaviour(schedule: StageSchedule) -> tuple:
    """What a run of ``schedule`` does: every epoch's learning rate and Adam β1 (warm-up, the
    method's stage, the revision), and what each stage change reads where one happens."""
    warm, total = int(schedule.warmup_epochs), schedule.total_epochs
    main_end = warm + int(schedule.main_epochs)
    adam = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    lr = StagedLR(adam, schedule, warm, main_end)
    epochs = []
    for _ in range(total):
        group = adam.param_groups[0]
        epochs.append((round(group["lr"], 12), group["betas"][0]))
        adam.step()
        lr.step()
    warmup = (schedule.keeps_best_warmup, schedule.momentum_of(True, 0.9), schedule.main_stage_init)
    revision = schedule.revision_model
    return (
        total,
        tuple(epochs),
        warmup if schedule.has_warmup else None,
        revision if schedule.revision_epochs else None,
    )


CASES = [
    (base, name, value)
    for (base, name) in itertools.product(BASES, CHANGES)
    for value in CHANGES[name]
    if getattr(BASES[base], name) != value
]


@pytest.mark.parametrize(
    ("base", "name", "value"), CASES, ids=[f"{b}-{n}={v}" for b, n, v in CASES]
)
def test_a_schedule_option_is_applied_or_refused(base: str, name: str, value: object) -> None:
    before = BASES[base]
    try:
        after = dataclasses.replace(before, **{name: value})
    except InputError as err:
        assert f"--model.schedule.{name}" in str(err) or "--model.schedule." in str(err)
        return
    if value == ():  # an empty milestone list is none given
        return
    if name in WARMUP_OPTIONS and not after.has_warmup:
        return  # accepted: off with the warm-up
    assert behaviour(after) != behaviour(before), f"{name}={value!r} was accepted and unused"


def test_the_refusal_says_why_and_what_to_do() -> None:
    with pytest.raises(
        InputError,
        match=r"decay_start 5 would have no effect: lr_schedule is "
        r"multistep, not linear\. Leave it out \(or at its default, 80\)",
    ):
        StageSchedule(decay_start=5)
    with pytest.raises(
        InputError,
        match=r"milestones \[100\] would have no effect: a milestone "
        r"at or past epoch 10 .* is never reached.* or give it as \[\]",
    ):
        StageSchedule(main_epochs=10, milestones=(100,))
    StageSchedule(main_epochs=10)  # the paper's milestones past a shortened stage: the default


def test_revision_optimizer_options_need_a_revision_stage() -> None:
    with pytest.raises(InputError, match=r"--model.optim.revision_lr 0.001 would have no effect"):
        CE(optim={"revision_lr": 1e-3})
    CE(optim={"revision_lr": 1e-3}, schedule={"revision_epochs": 2})
