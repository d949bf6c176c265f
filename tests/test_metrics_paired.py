"""Paired test-set bootstrap: weighted AUC by hand and against sklearn, shared resamples across score sets."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from fairmedbench.errors import InputError
from fairmedbench.metrics.classification import evaluate_classification
from fairmedbench.metrics.paired import paired_group_auc, weighted_auc


def test_weighted_auc_by_hand_with_ties_and_weights() -> None:
    y = np.array([1, 1, 0, 0, 0])
    s = np.array([0.9, 0.5, 0.5, 0.2, 0.7])
    # pairs (pos, neg): 0.9 beats all 3; 0.5 ties 0.5 (1/2), beats 0.2, loses to 0.7 -> (3 + 1.5) / 6
    assert weighted_auc(y, s, np.ones((1, 5)))[0] == pytest.approx(4.5 / 6)
    # weights = counts: the 0.7 negative drawn twice, the 0.2 one not at all -> (3 + 0.5) / (2 * 3)
    assert weighted_auc(y, s, np.array([[1, 1, 1, 0, 2]]))[0] == pytest.approx(3.5 / 6)
    assert np.isnan(weighted_auc(y, s, np.array([[0, 0, 1, 1, 1]]))[0])


def test_weighted_auc_matches_sklearn_sample_weight() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.random(300), 2)  # ties
    w = rng.integers(0, 4, (5, 300)).astype(float)
    got = weighted_auc(y, s, w)
    want = [roc_auc_score(y, s, sample_weight=row) for row in w]
    np.testing.assert_allclose(got, want, atol=1e-12)


def _data(n: int = 400, gap: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    g = np.where(rng.random(n) < 0.5, "female", "male")
    y = rng.integers(0, 2, n)
    signal = np.where(g == "male", 1.5 + gap, 1.5)
    return y, y * signal + rng.standard_normal(n), g


def test_point_matches_engine_and_identical_sets_differ_by_exactly_zero() -> None:
    y, s, g = _data()
    res = paired_group_auc(y, np.stack([s, s]), g, n_boot=200)
    eng = evaluate_classification(y, s, {"sex": g}, n_boot=0, logits=True).reports[0]
    assert res.groups == ["female", "male"]
    for i, name in enumerate(res.groups):
        assert res.point[0, i] == pytest.approx(eng.value("auc", name), abs=1e-12)
    assert res.resampled.shape == (200, 2, 2)
    assert (res.resampled[:, 0] == res.resampled[:, 1]).all()  # shared resamples


def test_signed_difference_interval_finds_a_real_gap_and_not_a_null_one() -> None:
    for gap, expect in ((2.0, True), (0.0, False)):
        y, s, g = _data(gap=gap, seed=3)
        res = paired_group_auc(y, s[None], g, n_boot=1000, seed=1)
        diff = res.resampled[:, 0, 1] - res.resampled[:, 0, 0]
        lo, hi = np.percentile(diff, [2.5, 97.5])
        assert (lo > 0) == expect and hi > 0


def test_same_seed_and_label_give_the_same_resamples() -> None:
    y, s, g = _data()
    a = paired_group_auc(y, s[None], g, n_boot=50, label="x").resampled
    b = paired_group_auc(y, s[None], g, n_boot=50, label="x").resampled
    c = paired_group_auc(y, s[None], g, n_boot=50, label="y").resampled
    assert (a == b).all() and not (a == c).all()


@pytest.mark.parametrize("kw, needle", [
    ({"scores": np.zeros((2, 3))}, "one score per test sample"),
    ({"y": np.array([0, 2] * 200)}, "labels must be 0/1"),
    ({"n_boot": -1}, "n_boot"),
])
def test_bad_input(kw: dict, needle: str) -> None:
    y, s, g = _data()
    args = {"y": y, "scores": s[None], "groups": g, **kw}
    n_boot = args.pop("n_boot", 10)
    with pytest.raises(InputError, match=needle):
        paired_group_auc(args["y"], args["scores"], args["groups"], n_boot=n_boot)


def test_paired_group_macro_auc_matches_the_multiclass_engine() -> None:
    from fairmedbench.metrics.multiclass import evaluate_multiclass
    from fairmedbench.metrics.paired import paired_group_macro_auc

    rng = np.random.default_rng(3)
    n, k = 90, 3
    y = np.tile(np.arange(k), n // k)
    g = np.where(np.arange(n) % 2 == 0, "a", "b")
    g[(y == 2) & (g == "b")] = "a"  # group b has no class 2: its macro AUC averages classes 0 and 1 only
    scores = rng.dirichlet(np.ones(k), size=(2, n)) + 0.5 * np.eye(k)[y][None]
    scores /= scores.sum(axis=2, keepdims=True)
    res = paired_group_macro_auc(y, scores, g, n_boot=200, seed=1, label="x")
    assert res.groups == ["a", "b"] and res.resampled.shape == (200, 2, 2)
    for si in range(2):
        ev = evaluate_multiclass(y, scores[si], {"attr": g}, n_boot=0).report()
        assert res.point[si] == pytest.approx([ev.value("macro_auc", "a"), ev.value("macro_auc", "b")])
    # hand: group b, classes 0 and 1 only (one-vs-rest within the group)
    b = g == "b"
    hand = np.mean([roc_auc_score(y[b] == c, scores[0, b, c]) for c in (0, 1)])
    assert res.point[0, 1] == pytest.approx(hand)
    # stratified by group x class: every resample keeps each group's class counts, so every value is defined
    assert np.isfinite(res.resampled).all()
    # the same resamples for both score sets: identical scores give identical resampled values
    same = paired_group_macro_auc(y, np.stack([scores[0], scores[0]]), g, n_boot=50, seed=1, label="x")
    assert np.array_equal(same.resampled[:, 0], same.resampled[:, 1])
    with pytest.raises(InputError, match="class indices 0..2"):
        paired_group_macro_auc(y + 1, scores, g, n_boot=10)
