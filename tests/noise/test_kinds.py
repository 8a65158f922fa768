"""Every noise kind of the registry passes through the same paths: its options are checked and
its refusals name the option, its labels are made (drawn with the noise seed, or read), its
class-level T, where it has one, is row-stochastic and is what the labels measure, and it is
documented. A kind added to the registry is taken by the data module without other edits.
Transition matrices are row-stochastic: ``T[i, j] = P(noisy=j | clean=i)``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from noisylabels.data import DigitsDataModule, NoisyDataModule
from noisylabels.errors import InputError
from noisylabels.noise import (
    NOISE_KINDS,
    NoiseKind,
    check_noise_options,
    check_transition,
    clean_majority_limit,
    draw_from_transition,
    empirical_transition,
    label_source,
    noise_kinds_help,
    noise_kinds_table,
)

C = 10
N = 20_000
RATE = 0.3  # below every kind's limit with 10 classes
FLIPS = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}  # the digits' semantic flips
KINDS = list(NOISE_KINDS)


def _clean(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, C, (N,), generator=torch.Generator().manual_seed(seed))


def _features() -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (N, 1, 8, 8), generator=gen, dtype=torch.uint8)


def _fitting(kind: NoiseKind, tmp_path: Path, clean: torch.Tensor) -> dict:
    """Options a kind works with (its needs met), beside its rate and seed."""
    options: dict = {}
    if kind.needs_flips:
        options["flips"] = FLIPS
    if kind.origin == "file":
        path = tmp_path / "labels.csv"
        flipped = torch.where(torch.arange(N) % 10 == 0, (clean + 1) % C, clean)
        path.write_text("\n".join(str(v) for v in flipped.tolist()) + "\n")
        options["noise_file"] = str(path)
    return options


@pytest.mark.parametrize("name", KINDS)
def test_every_kind_takes_its_options_and_refuses_naming_the_option(
    name: str, tmp_path: Path
) -> None:
    kind = NOISE_KINDS[name]
    fitting = _fitting(kind, tmp_path, _clean())
    ships = kind.origin == "shipped"

    def check(rate: float = RATE, **changed) -> None:
        options = {"num_classes": C, "ships_labels": ships, **fitting, **changed}
        check_noise_options(name, rate, **options)

    check()
    check(num_classes=None)  # before C is known (image folders), what does not need it
    refusals = {"--data.noise_rate": [lambda: check(1.5), lambda: check(-0.1)]}
    if kind.rate_limit is not None:
        limit = kind.rate_limit.bound(C)
        refusals["--data.noise_rate"].append(lambda: check(limit))
    if kind.transition is not None and kind.uses_rate:  # its T's clean class is lost
        refusals["--data.noise_rate"].append(lambda: check(0.99))
    elif not (kind.generated and kind.uses_rate):
        check(0.99)  # the rate is not used (instance noise's labels are checked once drawn)
    if kind.needs_flips:
        refusals[f"--data.noise_type {name} needs .*semantic_flips"] = [lambda: check(flips=None)]
    if kind.origin == "file":
        refusals["--data.noise_file"] = [lambda: check(noise_file=None)]
    else:
        refusals["--data.noise_type file"] = [lambda: check(noise_file="labels.csv")]
    if ships:
        refusals[f"--data.noise_type {name}"] = [lambda: check(ships_labels=False)]
    for option, calls in refusals.items():
        for call in calls:
            with pytest.raises(InputError, match=option):
                call()
    with pytest.raises(InputError, match="--data.noise_type"):
        check_noise_options(f"{name}-unknown", RATE)


@pytest.mark.parametrize("name", KINDS)
def test_every_kind_makes_its_labels_through_one_label_source(name: str, tmp_path: Path) -> None:
    kind = NOISE_KINDS[name]
    clean = _clean()
    features = _features()
    shipped = torch.where(torch.arange(N) % 5 == 0, (clean + 3) % C, clean)

    def make(seed: int) -> tuple[torch.Tensor, object]:
        source = label_source(
            name,
            rate_nominal=RATE,
            seed=seed,
            features=lambda: features,
            shipped=shipped,
            dataset="the test set",
            **_fitting(kind, tmp_path, clean),
        )
        return source.make_labels(clean, C), source

    noisy, source = make(seed=4)
    assert noisy.dtype == torch.long and noisy.shape == clean.shape
    again, _ = make(seed=4)
    other, _ = make(seed=5)
    assert torch.equal(noisy, again)  # the noise seed decides the labels
    if kind.generated and kind.uses_rate:
        assert not torch.equal(noisy, other)
    else:
        assert torch.equal(noisy, other)  # read (or clean) labels: no seed in them
    info = source.noise_info()
    assert info["type"] == name
    assert info["rate_nominal"] == (_nominal(kind, RATE))
    assert info["rate_actual"] == pytest.approx((noisy != clean).float().mean().item())
    measured = empirical_transition(clean, noisy, C).double()
    T = source.transition
    assert (T is None) == (kind.transition is None)
    if T is None:
        return
    check_transition(T, C)
    assert torch.allclose(T.sum(dim=1), torch.ones(C), atol=1e-5)
    counts = torch.bincount(clean, minlength=C).double()[:, None]
    T = T.double()
    tolerance = 5 * (T * (1 - T) / counts).sqrt() + 1e-3  # five standard errors per entry
    assert ((measured - T).abs() <= tolerance).all(), name
    if kind.uses_rate:
        flipped = float(((1 - T.diagonal()) * counts.flatten()).sum() / N)
        assert info["rate_actual"] == pytest.approx(flipped, abs=0.01)
    if kind.rate_limit is not None:  # the formula is the limit the T it builds has
        assert clean_majority_limit(T, RATE) == pytest.approx(kind.rate_limit.bound(C))


def _nominal(kind: NoiseKind, given: float) -> float | None:
    """The nominal rate a run of ``kind`` records and its methods read for ``--data.noise_rate
    given``: the rate the labels were drawn at (0 for a kind drawn without one), none for read
    labels."""
    if not kind.generated:
        return None
    return given if kind.uses_rate else 0.0


@pytest.mark.parametrize("name", KINDS)
def test_the_nominal_rate_is_the_rate_the_labels_were_drawn_at(name: str, tmp_path: Path) -> None:
    """Whatever ``--data.noise_rate`` holds, a source whose labels do not change with it records
    (and gives methods, as Co-teaching's forget rate) the same nominal rate; one whose labels do
    records the rate given."""
    kind = NOISE_KINDS[name]
    clean, features = _clean(), _features()
    shipped = torch.where(torch.arange(N) % 5 == 0, (clean + 3) % C, clean)
    made = []
    for rate in (0.1, RATE):
        source = label_source(
            name, rate_nominal=rate, seed=0, features=lambda: features, shipped=shipped,
            dataset="the test set", **_fitting(kind, tmp_path, clean),
        )  # fmt: skip
        made.append((source.make_labels(clean, C), source.rate_nominal, source.noise_info()))
    (low, low_rate, low_info), (high, high_rate, high_info) = made
    if torch.equal(low, high):
        assert low_rate == high_rate and low_info == high_info
        assert low_rate in (None, 0.0)
    else:
        assert (low_rate, high_rate) == (0.1, RATE)
    assert high_rate == _nominal(kind, RATE)


@pytest.mark.parametrize("name", KINDS)
def test_every_kind_goes_through_the_data_module(name: str, tmp_path: Path) -> None:
    """The digits take every kind they can (their clean labels written to a file for
    ``file``) and refuse the rest naming the option."""
    kind = NOISE_KINDS[name]
    options = {}
    if kind.origin == "file":
        clean = DigitsDataModule(noise_type="none")
        clean.setup("fit")
        path = tmp_path / "digits.csv"
        path.write_text("\n".join(str(v) for v in clean.clean_labels.tolist()))
        options["noise_file"] = str(path)
    if kind.origin == "shipped":  # the digits ship no noisy labels
        with pytest.raises(InputError, match=f"--data.noise_type {name}"):
            DigitsDataModule(noise_type=name)
        return
    dm = DigitsDataModule(noise_type=name, noise_rate=RATE, noise_seed=2, **options)
    dm.setup("fit")
    info = dm.noise_info()
    assert info["type"] == name and info["seed"] == 2
    assert dm.data_facts().rate_nominal == _nominal(kind, RATE)
    assert (dm.transition is None) == (kind.transition is None)


def test_every_kind_is_documented_once() -> None:
    table = noise_kinds_table().splitlines()[2:]
    help_text = noise_kinds_help()
    assert [row.split("|")[1].strip() for row in table] == [f"`{name}`" for name in KINDS]
    for name, kind in NOISE_KINDS.items():
        assert kind.doc and kind.doc in help_text and help_text.count(f"``{name}``") == 1
    assert help_text in (NoisyDataModule.__doc__ or "")  # --data.noise_type's help


def test_docs_list_every_registered_kind() -> None:
    """docs/data.md holds the table the registry makes; regenerate it with
    ``python -c 'from noisylabels.noise import noise_kinds_table; print(noise_kinds_table())'``."""
    docs = (Path(__file__).parents[2] / "docs" / "data.md").read_text(encoding="utf-8")
    assert noise_kinds_table() in docs


def _to_first(num_classes: int, rate_nominal: float, seed: int, flips) -> torch.Tensor:
    """Every label becomes class 0 with probability ε."""
    T = (1 - rate_nominal) * torch.eye(num_classes)
    T[:, 0] += rate_nominal
    return T


def test_a_kind_added_to_the_registry_is_taken_without_other_edits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kind = NoiseKind(
        "to_first",
        "each label becomes class 0 with probability ε",
        transition=_to_first,
        draw=draw_from_transition,
    )
    monkeypatch.setitem(NOISE_KINDS, kind.name, kind)
    dm = DigitsDataModule(noise_type="to_first", noise_rate=0.4, noise_seed=1)
    dm.setup("fit")
    assert torch.equal(dm.transition, _to_first(C, 0.4, 1, None))
    assert dm.noise_info()["type"] == "to_first"
    assert dm.rate_actual == pytest.approx(0.4 * (C - 1) / C, abs=0.06)
    assert "`to_first`" in noise_kinds_table()
    with pytest.raises(InputError, match="to_first noise at --data.noise_rate 0.6"):
        DigitsDataModule(noise_type="to_first", noise_rate=0.6)  # its T's clean majority


def test_a_kind_is_consistent_or_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="needs a draw"):
        NoiseKind("broken", "a generated kind without a draw", transition=_to_first)
    with pytest.raises(ValueError, match="no T"):
        NoiseKind("read", "labels read, with a T", origin="file", transition=_to_first)
