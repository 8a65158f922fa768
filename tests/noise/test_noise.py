"""Tests for noisylabels.noise (row-stochastic T[i, j] = P(noisy=j | clean=i))."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from noisylabels.errors import InputError
from noisylabels.noise import (
    NOISE_KINDS,
    anchor_transition,
    asymmetric_transition,
    bias_transition,
    build_transition,
    check_transition,
    corrupt_labels,
    dual_t_correction,
    dual_t_transition,
    empirical_transition,
    estimation_error,
    from_column_stochastic,
    instance_dependent_noise,
    instance_flip_probabilities,
    load_transition,
    make_noisy_labels,
    pair_transition,
    rate_actual,
    save_transition,
    semantic_transition,
    superclass_flips,
    symmetric_transition,
    to_column_stochastic,
)

CLASS_TYPES = ("none", "symmetric", "pair", "asymmetric", "semantic")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _empirical_T(clean: torch.Tensor, noisy: torch.Tensor, c: int) -> torch.Tensor:
    counts = torch.bincount(clean * c + noisy, minlength=c * c).view(c, c).double()
    return counts / counts.sum(dim=1, keepdim=True)


DIGITS = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}  # the flips a digits data module declares


def _flips_for(c: int) -> dict[int, int]:
    return superclass_flips([k // 5 for k in range(c)]) if c == 100 else DIGITS


# --- transition matrices -------------------------------------------------------------------


@pytest.mark.parametrize("noise_type", CLASS_TYPES)
@pytest.mark.parametrize("c", [10, 100])
@pytest.mark.parametrize("rate", [0.0, 0.2, 0.45])
def test_build_transition_row_stochastic(noise_type: str, c: int, rate: float) -> None:
    T = build_transition(noise_type, c, rate, seed=3, flips=_flips_for(c))
    assert T is not None and T.shape == (c, c)
    check_transition(T, c)
    assert torch.allclose(T.sum(dim=1), torch.ones(c), atol=1e-5)
    assert (T >= 0).all()
    if noise_type in ("symmetric", "pair", "asymmetric"):
        assert torch.allclose(T.diagonal(), torch.full((c,), 1.0 - rate), atol=1e-6)


@pytest.mark.parametrize("c", [2, 3, 7])
def test_small_class_counts(c: int) -> None:
    for noise_type in ("symmetric", "pair", "asymmetric"):
        check_transition(build_transition(noise_type, c, 0.3, seed=1), c)


def test_instance_file_and_real_have_no_T() -> None:
    assert build_transition("instance", 10, 0.2) is None
    assert build_transition("file", 10, 0.2) is None
    assert build_transition("real", 10, 0.2) is None
    assert torch.equal(build_transition("none", 4, 0.3), torch.eye(4))


def test_symmetric_and_pair_values() -> None:
    T = symmetric_transition(5, 0.4)
    assert torch.allclose(T[0], torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1]))
    P = pair_transition(4, 0.3)
    expected = torch.tensor(
        [[0.7, 0.3, 0, 0], [0, 0.7, 0.3, 0], [0, 0, 0.7, 0.3], [0.3, 0, 0, 0.7]]
    )
    assert torch.allclose(P, expected)


def test_validation_errors() -> None:
    with pytest.raises(ValueError, match="0.5"):
        pair_transition(10, 0.5)
    with pytest.raises(ValueError, match="0.5"):
        build_transition("pair", 10, 0.5)
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            build_transition("symmetric", 10, bad)
    with pytest.raises(ValueError, match="symmetric"):
        build_transition("gaussian", 10, 0.2)
    with pytest.raises(ValueError, match="non-empty flip map"):
        semantic_transition({}, 10, 0.2)
    with pytest.raises(ValueError, match=r"12 -> 1 .*\[0, 9\]"):
        semantic_transition({12: 1}, 10, 0.2)
    with pytest.raises(ValueError, match="different classes"):
        semantic_transition({3: 3}, 10, 0.2)
    with pytest.raises(ValueError, match="flip map"):
        build_transition("semantic", 10, 0.2)
    with pytest.raises(ValueError, match="num_classes"):
        symmetric_transition(1, 0.2)


def test_asymmetric_seeded() -> None:
    a = build_transition("asymmetric", 10, 0.3, seed=5)
    b = build_transition("asymmetric", 10, 0.3, seed=5)
    c = build_transition("asymmetric", 10, 0.3, seed=6)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)
    T = asymmetric_transition(10, 0.3, _gen(5))
    assert torch.equal(T, a)
    off = T[~torch.eye(10, dtype=torch.bool)]
    # U(0.1, 1) draws rescaled to sum to 0.3 over 9 entries: ratio max/min <= 10
    assert off.min() > 0
    assert (off.view(10, 9).max(1).values / off.view(10, 9).min(1).values <= 10 + 1e-4).all()


def test_semantic_pairs() -> None:
    T = semantic_transition(DIGITS, 10, 0.3)
    for src, dst in DIGITS.items():
        assert T[src, src] == pytest.approx(0.7) and T[src, dst] == pytest.approx(0.3)
    for k in (0, 1, 4, 8, 9):
        assert T[k, k] == 1.0
    check_transition(T, 10)


def test_superclass_flips_cycle_within_each_superclass() -> None:
    coarse = [2, 0, 2, 1, 0, 2, 1, 3]  # class 7 is alone in super-class 3: it never flips
    flips = superclass_flips(coarse)
    assert flips == {0: 2, 2: 5, 5: 0, 1: 4, 4: 1, 3: 6, 6: 3}
    T = semantic_transition(flips, 8, 0.3)
    assert T[7, 7] == 1.0
    clean = torch.arange(8).repeat(200)
    noisy, _ = make_noisy_labels(clean, "semantic", 0.3, 8, seed=0, flips=flips)
    group = torch.tensor(coarse)
    assert torch.equal(group[clean], group[noisy]) and (clean != noisy).any()


# --- check_transition and converters -------------------------------------------------------


def test_check_transition_rejects() -> None:
    with pytest.raises(ValueError, match="square"):
        check_transition(torch.ones(3, 4) / 4)
    with pytest.raises(ValueError, match="square"):
        check_transition(torch.ones(3) / 3)
    with pytest.raises(ValueError, match="expected 4 x 4"):
        check_transition(torch.eye(3), 4)
    with pytest.raises(ValueError, match="negative"):
        check_transition(torch.tensor([[1.2, -0.2], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        check_transition(torch.tensor([[1.0, 0.0], [0.3, 0.3]]))
    with pytest.raises(ValueError, match="non-finite"):
        check_transition(torch.tensor([[float("nan"), 1.0], [0.0, 1.0]]))
    out = check_transition(torch.eye(3, dtype=torch.int64))
    assert out.is_floating_point()


def test_column_converters() -> None:
    T = build_transition("asymmetric", 6, 0.35, seed=2)
    T_col = to_column_stochastic(T)
    assert torch.allclose(T_col.sum(dim=0), torch.ones(6), atol=1e-5)
    assert T_col[1, 0] == T[0, 1]  # T_col[j, i] = P(noisy=j | clean=i)
    assert torch.equal(from_column_stochastic(T_col), T)


# --- file I/O ------------------------------------------------------------------------------


def test_load_save_round_trip(tmp_path) -> None:
    T = build_transition("asymmetric", 5, 0.3, seed=4)
    for name in ("t.pt", "t.csv", "t.npy", "t.txt"):
        save_transition(T, tmp_path / name)
        assert torch.equal(load_transition(tmp_path / name, 5), T), name
    torch.save({"transition": T}, tmp_path / "d.pth")
    assert torch.equal(load_transition(tmp_path / "d.pth", 5), T)
    np.save(tmp_path / "n.npy", T.double().numpy())
    assert torch.allclose(load_transition(tmp_path / "n.npy", 5), T)
    (tmp_path / "w.txt").write_text("# comment\n0.8 0.2\n\n0.1   0.9\n")
    assert torch.allclose(
        load_transition(tmp_path / "w.txt", 2), torch.tensor([[0.8, 0.2], [0.1, 0.9]])
    )


def test_load_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_transition(tmp_path / "missing.pt", 3)
    (tmp_path / "bad.csv").write_text("0.5,0.6\n0.1,0.9\n")
    with pytest.raises(ValueError, match="bad.csv"):
        load_transition(tmp_path / "bad.csv", 2)
    (tmp_path / "junk.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="junk.csv"):
        load_transition(tmp_path / "junk.csv", 2)
    save_transition(torch.eye(3), tmp_path / "eye.csv")
    with pytest.raises(ValueError, match="num_classes=4"):
        load_transition(tmp_path / "eye.csv", 4)
    torch.save({"T": torch.eye(2)}, tmp_path / "nokey.pt")
    with pytest.raises(ValueError, match="transition"):
        load_transition(tmp_path / "nokey.pt", 2)
    (tmp_path / "t.json").write_text("[]")
    with pytest.raises(ValueError, match="unsupported"):
        load_transition(tmp_path / "t.json", 2)
    # strings, a str, UTF-16 text: one message naming the file (never a TypeError)
    np.save(tmp_path / "strings.npy", np.array([["0.5", "0.5"], ["0.5", "0.5"]]))
    with pytest.raises(InputError, match=r"strings.npy holds an array of dtype <U3"):
        load_transition(tmp_path / "strings.npy", 2)
    torch.save("eye", tmp_path / "str.pt")
    with pytest.raises(InputError, match=r"str.pt holds a str, not a C x C matrix"):
        load_transition(tmp_path / "str.pt", 2)
    torch.save({"transition": ["a", "b"]}, tmp_path / "list.pt")
    with pytest.raises(InputError, match=r"list.pt holds a list"):
        load_transition(tmp_path / "list.pt", 2)
    (tmp_path / "u16.csv").write_text("1,0\n0,1\n", encoding="utf-16")
    with pytest.raises(InputError, match=r"u16.csv is UTF-16 text"):
        load_transition(tmp_path / "u16.csv", 2)
    (tmp_path / "bom.csv").write_text("\ufeff1,0\n0,1\n")  # UTF-8 with a byte-order mark
    assert torch.equal(load_transition(tmp_path / "bom.csv", 2), torch.eye(2))
    torch.save([[1.0, 0.0], [0.0, 1.0]], tmp_path / "nested.pt")  # a nested list of numbers
    assert torch.equal(load_transition(tmp_path / "nested.pt", 2), torch.eye(2))


# --- corruption ----------------------------------------------------------------------------

# 500k balanced labels (50k per class) so that 0.01 is > 4 standard errors for every entry.
N_EMPIRICAL = 500_000


@pytest.mark.parametrize(
    ("noise_type", "rate", "flips", "flip_fraction"),
    [
        ("symmetric", 0.4, None, 1.0),
        ("pair", 0.45, None, 1.0),
        ("asymmetric", 0.3, None, 1.0),
        ("semantic", 0.3, DIGITS, 0.5),  # 5 of 10 digit classes have a partner
        ("semantic", 0.4, {9: 1, 2: 0, 4: 7, 3: 5, 5: 3}, 0.5),
    ],
)
def test_corruption_reproduces_T(noise_type, rate, flips, flip_fraction) -> None:
    c = 10
    clean = torch.arange(N_EMPIRICAL) % c
    noisy, T = make_noisy_labels(clean, noise_type, rate, c, seed=11, flips=flips)
    assert noisy.dtype == torch.long and noisy.shape == clean.shape
    assert (torch.abs(_empirical_T(clean, noisy, c) - T.double()) < 0.01).all()
    assert rate_actual(clean, noisy) == pytest.approx(rate * flip_fraction, abs=0.005)


def test_corrupt_labels_seeding() -> None:
    clean = torch.randint(0, 10, (20_000,), generator=_gen(0))
    T = symmetric_transition(10, 0.3)
    a = corrupt_labels(clean, T, _gen(1))
    b = corrupt_labels(clean, T, _gen(1))
    c = corrupt_labels(clean, T, _gen(2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    n1, _ = make_noisy_labels(clean, "symmetric", 0.3, 10, seed=7)
    n2, _ = make_noisy_labels(clean, "symmetric", 0.3, 10, seed=7)
    n3, _ = make_noisy_labels(clean, "symmetric", 0.3, 10, seed=8)
    assert torch.equal(n1, n2) and not torch.equal(n1, n3)
    # a seeded make_noisy_labels does not depend on the global RNG
    torch.manual_seed(123)
    n4, _ = make_noisy_labels(clean, "symmetric", 0.3, 10, seed=7)
    assert torch.equal(n1, n4)


def test_make_noisy_labels_none_and_file() -> None:
    clean = torch.arange(50) % 5
    noisy, T = make_noisy_labels(clean, "none", 0.0, 5, seed=0)
    assert torch.equal(noisy, clean) and noisy is not clean
    assert torch.equal(T, torch.eye(5))
    for read in ("file", "real"):
        with pytest.raises(ValueError, match="read"):
            make_noisy_labels(clean, read, 0.2, 5, seed=0)
    with pytest.raises(ValueError, match="features"):
        make_noisy_labels(clean, "instance", 0.2, 5, seed=0)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        make_noisy_labels(torch.tensor([0, 5]), "symmetric", 0.2, 5, seed=0)
    with pytest.raises(ValueError):
        make_noisy_labels(clean, "bogus", 0.2, 5, seed=0)
    assert "bogus" not in NOISE_KINDS


def test_instance_probabilities_follow_the_ptd_recipe() -> None:
    """Rows are q_i·softmax(x W[y]) with a_y = -inf and 1 - q_i at y, from raw features."""
    c, n = 4, 6
    x = torch.randint(0, 256, (n, 5), generator=_gen(0), dtype=torch.uint8)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    probs = instance_flip_probabilities(x, y, c, 0.3, _gen(9))
    gen = _gen(9)  # the same draws, in the documented order: q, then W
    # q ~ Normal(0.3, 0.1) truncated to [0, 1] = [mean - 3 std, mean + 7 std], inverse CDF
    cdf = torch.special.ndtr(torch.tensor([-3.0, 7.0], dtype=torch.float64))
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    q = (0.3 + 0.1 * torch.special.ndtri(cdf[0] + u * (cdf[1] - cdf[0]))).clamp(0, 1)
    W = torch.randn(c, 5, c, generator=gen).double()
    for i in range(n):
        logits = x[i].double() @ W[y[i]]
        logits[y[i]] = float("-inf")
        row = q[i] * torch.softmax(logits, 0)
        row[y[i]] += 1 - q[i]
        torch.testing.assert_close(probs[i], row)
    # an all-zero image has a = 0: its flips are uniform over the other classes
    flat = instance_flip_probabilities(torch.zeros(1, 5), torch.tensor([2]), c, 0.3, _gen(1))
    others = flat[0, [0, 1, 3]]
    torch.testing.assert_close(others, others.mean().expand(3))


def test_empirical_transition() -> None:
    clean = torch.tensor([0, 0, 0, 0, 1, 1, -1])
    noisy = torch.tensor([0, 1, 1, 2, 1, 1, 0])
    T = empirical_transition(clean, noisy, 3)
    expected = torch.tensor([[0.25, 0.5, 0.25], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert torch.allclose(T, expected)  # unknown clean label left out; empty class: identity


def test_rate_actual() -> None:
    assert rate_actual(torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 0, 0])) == 0.5
    assert (
        rate_actual(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)) == 0.0
    )
    with pytest.raises(ValueError):
        rate_actual(torch.tensor([0, 1]), torch.tensor([0]))


@pytest.mark.parametrize("rate", [0.2, 0.4])
def test_instance_dependent_noise(rate: float) -> None:
    c, n = 10, 20_000
    features = torch.randint(0, 256, (n, 3, 8, 8), generator=_gen(0), dtype=torch.uint8)
    clean = torch.randint(0, c, (n,), generator=_gen(1))
    noisy, T = make_noisy_labels(clean, "instance", rate, c, seed=3, features=features)
    assert T is None
    assert noisy.dtype == torch.long and noisy.shape == clean.shape
    assert noisy.min() >= 0 and noisy.max() < c
    assert abs(rate_actual(clean, noisy) - rate) < 0.05
    again = instance_dependent_noise(features, clean, c, rate, _gen(3))
    assert torch.equal(noisy, again)
    other = instance_dependent_noise(features, clean, c, rate, _gen(4))
    assert not torch.equal(noisy, other)
    # flip targets depend on the instance: for one repeated feature vector they follow
    # softmax(x @ W[y]), far from uniform over the other classes
    same = instance_dependent_noise(
        features[:1].expand(n, -1, -1, -1), torch.zeros(n, dtype=torch.long), c, rate, _gen(5)
    )
    counts = torch.bincount(same[same != 0], minlength=c)[1:].float()
    assert counts.max() > 1.5 * counts.min()


# --- estimation ----------------------------------------------------------------------------


def _synthetic_posteriors(T: torch.Tensor, n: int = 20_000, seed: int = 0) -> torch.Tensor:
    """Noisy posteriors p @ T from near-one-hot clean posteriors p; 20 % of every class are
    near-pure anchors (more than the 3 % the outlier filter drops)."""
    g = _gen(seed)
    c = T.shape[0]
    y = torch.arange(n) % c
    rest = torch.rand(n, c, generator=g)
    rest = rest / rest.sum(dim=1, keepdim=True)
    delta = torch.rand(n, generator=g) * 0.5
    anchor = torch.rand(n, generator=g) < 0.2
    delta = torch.where(anchor, delta * 0.005, delta)
    p = (1 - delta)[:, None] * torch.nn.functional.one_hot(y, c).float() + delta[:, None] * rest
    return p @ T


@pytest.mark.parametrize("filter_outliers", [True, False])
def test_anchor_recovers_T(filter_outliers: bool) -> None:
    T = build_transition("asymmetric", 5, 0.35, seed=9)
    probs = _synthetic_posteriors(T)
    before = probs.clone()
    T_hat = anchor_transition(probs, filter_outliers=filter_outliers)
    assert torch.equal(probs, before)  # input not mutated
    check_transition(T_hat, 5)
    assert (T_hat - T).abs().max() < 0.05
    assert estimation_error(T, T_hat) < 0.05


def test_anchor_filter_matches_quantile() -> None:
    probs = torch.softmax(torch.randn(3000, 4, generator=_gen(1)), dim=1)
    T_hat = anchor_transition(probs, filter_outliers=True, quantile=0.97)
    thr = torch.quantile(probs, 0.97, dim=0)
    expected = torch.stack(
        [probs[torch.where(probs[:, i] < thr[i], probs[:, i], -1.0).argmax()] for i in range(4)]
    )
    assert torch.allclose(T_hat, expected / expected.sum(1, keepdim=True))
    with pytest.raises(ValueError, match="0.97"):
        anchor_transition(probs, quantile=97)


def test_dual_t() -> None:
    probs = torch.softmax(torch.randn(2000, 6, generator=_gen(2)) * 3, dim=1)
    noisy = probs.argmax(dim=1)
    assert torch.equal(dual_t_correction(probs, noisy, 6), torch.eye(6))
    assert torch.allclose(dual_t_transition(probs, noisy), anchor_transition(probs))
    # hand example: predictions [0, 0, 1, 1], noisy [0, 1, 1, 1]; class 2 never predicted
    p = torch.tensor([[0.9, 0.05, 0.05], [0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.2, 0.7, 0.1]])
    T_spade = dual_t_correction(p, torch.tensor([0, 1, 1, 1]), 3)
    assert torch.allclose(T_spade, torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0, 0, 1.0]]))
    check_transition(dual_t_transition(p, torch.tensor([0, 1, 1, 1]), filter_outliers=False), 3)


def test_estimation_error() -> None:
    T = symmetric_transition(4, 0.2)
    assert estimation_error(T, T) == 0.0
    T_hat = torch.tensor([[0.9, 0.1], [0.0, 1.0]])
    assert estimation_error(torch.eye(2), T_hat) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        estimation_error(torch.eye(2), torch.eye(3))


def test_bias_transition() -> None:
    T = pair_transition(10, 0.45)
    b1 = bias_transition(T, 0.1, _gen(0))
    b2 = bias_transition(T, 0.1, _gen(0))
    b3 = bias_transition(T, 0.1, _gen(1))
    check_transition(b1, 10)
    assert torch.equal(b1, b2) and not torch.equal(b1, b3)
    assert 0 < estimation_error(T, b1) < 1
    assert estimation_error(T, bias_transition(T, 0.01, _gen(0))) < estimation_error(T, b1)
    assert torch.equal(bias_transition(T, 0.0, _gen(0)), T)
    with pytest.raises(ValueError, match="gamma"):
        bias_transition(T, -0.1, _gen(0))


def test_symmetric_noise_below_the_majority_limit() -> None:
    """From (C-1)/C on, a symmetric noisy label is uniform (or points away from the clean
    class): refused naming the limit, for every C."""
    from noisylabels.noise import check_noise_options, symmetric_limit

    assert symmetric_limit(10) == pytest.approx(0.9) and symmetric_limit(2) == 0.5
    symmetric_transition(10, 0.89)
    for c, rate in ((10, 0.9), (10, 0.95), (2, 0.5), (100, 0.99)):
        with pytest.raises(InputError, match=rf"\(C-1\)/C = .* for C = {c} classes"):
            symmetric_transition(c, rate)
        with pytest.raises(InputError, match="--data.noise_rate"):
            check_noise_options("symmetric", rate, num_classes=c)
    check_noise_options("symmetric", 0.95)  # without the class count nothing to compare
    check_noise_options("asymmetric", 0.6, num_classes=10)


def test_a_noise_file_needs_noise_type_file() -> None:
    from noisylabels.noise import check_noise_options

    for noise_type in ("symmetric", "pair", "none", "instance"):
        with pytest.raises(InputError, match="add --data.noise_type file"):
            check_noise_options(noise_type, 0.2, noise_file="labels.csv")
    check_noise_options("file", 0.2, noise_file="labels.csv")


def test_transition_condition() -> None:
    from noisylabels.noise import transition_condition

    sound = transition_condition(symmetric_transition(10, 0.4))
    assert not sound.degenerate and sound.rank == 10 and sound.zero_columns == ()
    assert sound.min_diagonal == pytest.approx(0.6)
    assert (
        sound.describe() == "smallest diagonal entry 0.6 (row 0), no all-zero column, rank 10 of 10"
    )
    T = torch.eye(5)
    T[1] = T[3]  # class 1 always flips to 3: column 1 is zero, rows 1 and 3 equal
    bad = transition_condition(T)
    assert bad.zero_columns == (1,) and bad.rank == 4 and bad.dependent_rows == (1, 3)
    assert bad.degenerate and bad.singular and bad.min_diagonal_row == 1
    assert "1 all-zero column (1)" in bad.describe()
    assert "rank 4 of 5 (rows 1, 3 are linearly dependent)" in bad.describe()
    chance = transition_condition(torch.full((4, 4), 0.25) * 0.5 + 0.5 * torch.eye(4).flip(0))
    assert chance.below_chance and chance.degenerate and not chance.singular
    nan = torch.eye(3)
    nan[0, 0] = float("nan")
    assert transition_condition(nan).describe() == "non-finite entries (nan or inf)"


def test_the_measured_rate_follows_the_labels() -> None:
    """``rate_actual`` is measured on the labels as they are when it is read: a label changed
    in place or a new label tensor is measured again."""
    from noisylabels.noise import SyntheticNoise

    source = SyntheticNoise("symmetric", 0.2, seed=0)
    clean = torch.arange(1000) % 10
    noisy = source.make_labels(clean, 10)
    first = source.rate_actual
    assert first == pytest.approx((noisy != clean).float().mean().item())
    assert source.rate_actual == first
    flipped = int((noisy == clean).nonzero()[0])
    noisy[flipped] = (clean[flipped] + 1) % 10  # in place
    assert source.rate_actual == pytest.approx(first + 0.001)
    source.noisy = clean.clone()  # replaced
    assert source.rate_actual == 0.0
