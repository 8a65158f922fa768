"""Labels that cannot be learned are refused before any training, for every noise kind: the
clean class must stay the majority of its noisy labels (on the class-level T, else on the
measured one) and every class must keep a label in the training split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from noisylabels.data import DigitsDataModule
from noisylabels.errors import InputError
from noisylabels.noise import (
    NOISE_KINDS,
    FileLabels,
    ShippedLabels,
    SyntheticNoise,
    build_transition,
    check_class_coverage,
    check_clean_majority,
    clean_majority_limit,
    empirical_transition,
    majority_violations,
    read_label_file,
    symmetric_limit,
)
from noisylabels.noise.learnable import MIN_MEASURED

C = 10
FLIPS = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}  # the digits' semantic flips
CLASS_LEVEL = ("symmetric", "pair", "asymmetric", "semantic")
RATES = [round(0.05 * k, 2) for k in range(20)]  # 0.0 ... 0.95
CIFAR_N = Path("/work/shared/data/CIFAR-N")


def _clean(n: int = 20_000, c: int = C, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(seed))


def _features(n: int, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 1, 8, 8), generator=gen, dtype=torch.uint8)


def _source(kind: str, rate: float, seed: int = 0, n: int = 20_000) -> SyntheticNoise:
    return SyntheticNoise(kind, rate, seed, flips=FLIPS, features=_features(n))


def _limit(kind: str, seed: int = 0) -> float:
    """The rate at which ``kind``'s clean class stops being the majority of every row."""
    T = build_transition(kind, C, 0.25, seed=seed, flips=FLIPS)
    limit = clean_majority_limit(T, 0.25)
    assert limit is not None
    return limit


# ----------------------------------------------------------------------- the clean majority
@pytest.mark.parametrize("kind", [k.name for k in NOISE_KINDS.values() if k.generated])
def test_every_noise_kind_keeps_the_clean_majority_or_is_refused(kind: str) -> None:
    """The property, over every synthetic kind and rates from 0 to 0.95: either the labels are
    refused, or in every row of their T (class-level, else measured) the clean class is the
    most frequent noisy label, also in the labels actually drawn; and once a rate is refused,
    every higher rate is too."""
    clean = _clean()
    refused_from = None
    for rate in RATES:
        source = _source(kind, rate)
        try:
            noisy = source.make_labels(clean, C)
        except ValueError:  # InputError, or pair noise's builder at 0.5 and above
            refused_from = rate if refused_from is None else refused_from
            continue
        assert refused_from is None, f"{kind}: {rate} passes after {refused_from} was refused"
        measured = empirical_transition(clean, noisy, C)
        T = measured if source.transition is None else source.transition
        assert majority_violations(T) == [], (kind, rate)
        off = T.masked_fill(torch.eye(C, dtype=torch.bool), 0).max(dim=1).values
        if float((T.diagonal() - off).min()) > 0.05:  # the drawn labels follow T
            assert majority_violations(measured) == [], (kind, rate)
    if kind == "none":
        assert refused_from is None
    else:
        assert refused_from is not None, f"{kind} noise is never refused up to 0.95"


@pytest.mark.parametrize("kind", CLASS_LEVEL)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_class_level_noise_is_refused_exactly_from_its_limit(kind: str, seed: int) -> None:
    """Below the limit 1 / (1 + max S) the labels are made, at and above it they are refused,
    through the data module as through the label source, naming the rate and the limit."""
    limit = _limit(kind, seed)
    expected = {"symmetric": symmetric_limit(C), "pair": 0.5, "semantic": 0.5}
    if kind in expected:
        assert limit == pytest.approx(expected[kind])
    else:  # asymmetric: drawn from the seed; its largest flip share is above uniform
        assert 0.5 < limit < symmetric_limit(C)
    clean = _clean(2_000)
    below = SyntheticNoise(kind, limit - 1e-3, seed, flips=FLIPS)
    below.make_labels(clean, C)
    assert majority_violations(below.transition) == []
    DigitsDataModule(noise_type=kind, noise_rate=limit - 1e-3, noise_seed=seed).setup("fit")
    exact = () if kind == "asymmetric" else (limit,)  # a drawn limit is not exact in float32
    for rate in (*exact, limit + 1e-3, 0.99):
        with pytest.raises(ValueError, match="noise rate|noise_rate"):
            SyntheticNoise(kind, rate, seed, flips=FLIPS).make_labels(clean, C)
        with pytest.raises(InputError, match="--data.noise_rate"):
            DigitsDataModule(noise_type=kind, noise_rate=rate, noise_seed=seed).setup("fit")


def test_asymmetric_noise_at_099_names_the_rate_and_the_limit() -> None:
    """The T of a class-level kind is checked with the options, before any data is read, as
    the labels drawn from it are by the label source."""
    limit = _limit("asymmetric")
    with pytest.raises(InputError) as err:
        DigitsDataModule(noise_type="asymmetric", noise_rate=0.99)
    with pytest.raises(InputError) as by_source:
        SyntheticNoise("asymmetric", 0.99, 0).make_labels(_clean(2_000), C)
    message = str(err.value)
    assert str(by_source.value) == message
    assert "asymmetric noise at --data.noise_rate 0.99" in message
    assert f"below a rate of {limit:.4g}; the rate given is 0.99" in message
    assert "T[i, j] = P(noisy=j | clean=i)" in message and "Lower --data.noise_rate" in message


def test_the_limit_formula_matches_the_builders() -> None:
    for c in (2, 3, 10, 100):
        T = build_transition("symmetric", c, 0.3)
        assert clean_majority_limit(T, 0.3) == pytest.approx(symmetric_limit(c))
    assert clean_majority_limit(build_transition("pair", 10, 0.2), 0.2) == pytest.approx(0.5)
    assert clean_majority_limit(torch.eye(4), 0.0) is None


def test_instance_noise_is_judged_on_its_measured_T() -> None:
    """Instance-dependent noise has no class-level T: its measured T is checked, strictly."""
    clean = _clean(4_000)
    source = SyntheticNoise("instance", 0.9, 0, features=_features(4_000))
    with pytest.raises(InputError, match=r"instance noise at --data.noise_rate 0.9: .*measured T"):
        source.make_labels(clean, C)
    ok = SyntheticNoise("instance", 0.3, 0, features=_features(4_000))
    noisy = ok.make_labels(clean, C)
    assert majority_violations(empirical_transition(clean, noisy, C)) == []


# ------------------------------------------------------------------- labels from a file
def _confused(clean: torch.Tensor, lost: int, to: int, share: float) -> torch.Tensor:
    """Labels where ``share`` of class ``lost``'s images are labelled ``to``."""
    noisy = clean.clone()
    where = torch.nonzero(clean == lost).flatten()
    noisy[where[: int(share * len(where))]] = to
    return noisy


def test_real_labellers_may_confuse_a_class_whose_label_still_marks_its_own(
    tmp_path: Path,
) -> None:
    """A class more often labelled as a sibling passes in a label file when the samples
    labelled with it are still mostly its own (CIFAR-100N's pine trees), but not as synthetic
    noise, whose limit is the row's majority; a class whose label also marks other images
    more often is refused in a file too."""
    clean = _clean(5_000)
    sibling = _confused(clean, lost=4, to=9, share=0.6)  # "4" still marks mostly 4s
    np.savetxt(tmp_path / "sibling.csv", sibling.numpy(), fmt="%d")
    FileLabels(tmp_path / "sibling.csv").make_labels(clean, C)
    with pytest.raises(InputError, match=r"class 4's images are labelled 9 at least as often"):
        check_clean_majority(sibling, clean, C, noise="instance noise")
    lost = sibling.clone()
    lost[torch.nonzero(clean == 1).flatten()[:-1]] = 4  # "4" now marks mostly 1s
    np.savetxt(tmp_path / "lost.csv", lost.numpy(), fmt="%d")
    with pytest.raises(InputError) as err:
        FileLabels(tmp_path / "lost.csv").make_labels(clean, C)
    message = str(err.value)
    assert message.startswith(f"--data.noise_file {tmp_path / 'lost.csv'}: the labels do not")
    assert "the samples labelled 4 are at least as often of class 1" in message
    assert "training-set order" in message


def test_a_label_file_of_a_single_class_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    np.savetxt(path, np.full(1438, 3), fmt="%d")
    dm = DigitsDataModule(noise_type="file", noise_file=str(path))
    with pytest.raises(InputError, match=r"one.csv: .*labelled 3 at least as often .*no sample is"):
        dm.setup("fit")


def test_shipped_labels_and_unknown_clean_labels() -> None:
    clean = _clean(2_000)
    shuffled = clean[torch.randperm(len(clean), generator=torch.Generator().manual_seed(0))]
    with pytest.raises(InputError, match=r"the noisy labels Toy ships \(--data.noise_type real\)"):
        ShippedLabels(shuffled, dataset="Toy").make_labels(clean, C)
    unknown = torch.full_like(clean, -1)
    ShippedLabels(shuffled).make_labels(unknown, C)  # nothing known, nothing to measure
    few = unknown.clone()
    few[: MIN_MEASURED * C // 2] = clean[: MIN_MEASURED * C // 2]  # too few per class to judge
    ShippedLabels(shuffled).make_labels(few, C)


@pytest.mark.skipif(not CIFAR_N.is_dir(), reason="needs the CIFAR-N label files")
@pytest.mark.parametrize(
    "name, keys, classes",
    [
        (
            "CIFAR-10_human.pt",
            ["aggre_label", "worse_label", "random_label1", "random_label2", "random_label3"],
            10,
        ),
        ("CIFAR-100_human.pt", ["noisy_label"], 100),
    ],
)
def test_the_human_label_files_pass(name: str, keys: list[str], classes: int) -> None:
    """CIFAR-10N and CIFAR-100N as published (their clean labels are in the files); CIFAR-100N
    has three classes more often labelled as a sibling, whose own label still marks mostly
    their images."""
    path = CIFAR_N / name
    clean = read_label_file(path, 50_000, classes, "clean_label")
    for key in keys:
        noisy = FileLabels(path, key).make_labels(clean, classes)
        assert (noisy != clean).any()
    if classes == 100:
        rows = {i for i, _ in majority_violations(empirical_transition(clean, noisy, 100))}
        assert rows == {59, 74, 81}  # pine tree, shrew, streetcar


# ----------------------------------------------------------------------- every class trains
def test_every_class_keeps_a_training_label_or_the_split_is_refused() -> None:
    """The property over validation fractions: a data module that sets up has every class
    among its training split's labels; one that is refused names the option."""
    refused = []
    for val_fraction in (0.0, 0.1, 0.5, 0.9, 0.97, 0.98, 0.99, 0.995):
        dm = DigitsDataModule(noise_rate=0.2, val_fraction=val_fraction)
        try:
            dm.setup("fit")
        except InputError as err:
            held_out = f"--data.val_fraction {val_fraction:g} holds out every sample labelled"
            assert held_out in str(err)
            refused.append(val_fraction)
            continue
        train = dm.noisy_labels[dm.train_indices]
        assert torch.bincount(train, minlength=C).min() > 0
    assert refused and refused == sorted(refused) and refused[0] >= 0.97 and 0.995 in refused


def test_the_coverage_message_names_each_cause() -> None:
    noisy = torch.tensor([0, 0, 1, 1, 2, 3, 3])
    clean = torch.tensor([0, 4, 1, 1, 2, 3, 3])
    with pytest.raises(InputError) as err:
        check_class_coverage(
            noisy,
            torch.tensor([0, 1, 2, 3, 5, 6]),  # the only 2 is held out
            6,
            clean=clean,
            noise="--data.noise_file f.csv",
            held_out="--data.val_fraction 0.1",
        )
    message = str(err.value)
    assert message.startswith("3 of 6 classes (2, 4, 5) have no sample in the training split")
    assert "--data.val_fraction 0.1 holds out every sample labelled 2" in message
    assert "no sample is labelled 4 by --data.noise_file f.csv, though the training set" in message
    assert "no sample of the training set is labelled 5 by --data.noise_file f.csv" in message
    check_class_coverage(noisy, torch.arange(7), 4)  # all of 0..3 present
