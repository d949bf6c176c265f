"""Tests for fairmedbench.metrics.multiclass: kappa."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from fairmedbench.errors import InputError
from fairmedbench.metrics.multiclass import cohen_kappa

# ---------------------------------------------------------------- kappa


def test_kappa_binary_hand():
    # y_true [0,0,1,1], y_pred [0,1,1,1]: O = [[1,1],[0,2]], rows (2,2), cols (1,3)
    # po = 3/4, pe = (2*1 + 2*3)/16 = 1/2, kappa = (3/4 - 1/2)/(1/2) = 1/2 (linear = same for 2 classes)
    assert cohen_kappa([0, 0, 1, 1], [0, 1, 1, 1]) == pytest.approx(0.5)
    assert cohen_kappa([0, 0, 1, 1], [0, 1, 1, 1], weights="linear") == pytest.approx(0.5)


def test_kappa_linear_three_class_hand():
    # y_true [0,1,2,2], y_pred [0,2,2,1]: disagreements (1,2) and (2,1), each weight |i-j| = 1 -> sum w*O = 2
    # rows = cols = (1,1,2); sum w*E = (1/4)[1*(1*1+2*2) + 1*(1*1+2*1) + 2*(1*2+1*1)] = 14/4 = 3.5
    # kappa = 1 - 2/3.5 = 3/7
    assert cohen_kappa([0, 1, 2, 2], [0, 2, 2, 1], weights="linear") == pytest.approx(3 / 7)


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_kappa_matches_sklearn(weights):
    rng = np.random.default_rng(5)
    t = rng.integers(0, 5, 300)
    p = np.where(rng.random(300) < 0.6, t, rng.integers(0, 5, 300))
    assert abs(cohen_kappa(t, p, weights) - cohen_kappa_score(t, p, weights=weights)) < 1e-12
    # explicit label order with an unseen class changes the ordinal distances; sklearn agrees
    lab = [4, 3, 2, 1, 0, 9]
    assert abs(cohen_kappa(t, p, weights, lab) - cohen_kappa_score(t, p, weights=weights, labels=lab)) < 1e-12


def test_kappa_string_labels_and_undefined():
    want = cohen_kappa_score(["a", "b", "b"], ["a", "b", "a"])
    assert cohen_kappa(["a", "b", "b"], ["a", "b", "a"]) == pytest.approx(want)
    # one class everywhere: no expected disagreement -> NaN, not 0 or 1
    assert math.isnan(cohen_kappa([1, 1, 1], [1, 1, 1]))


def test_kappa_input_errors():
    with pytest.raises(InputError, match="y_pred"):
        cohen_kappa([0, 1], [0, 1, 1])
    with pytest.raises(InputError, match="y_true"):
        cohen_kappa([0.0, np.nan], [0, 1])
    with pytest.raises(InputError, match="labels"):
        cohen_kappa([0, 1, 2], [0, 1, 1], labels=[0, 1])
    with pytest.raises(InputError, match="weights"):
        cohen_kappa([0, 1], [0, 1], weights="cubic")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=2, max_size=40))
def test_kappa_property_matches_sklearn(pairs):
    t, p = map(np.array, zip(*pairs))
    ours = cohen_kappa(t, p, "linear")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns where kappa is undefined (one label); we compare NaNs
        ref = cohen_kappa_score(t, p, weights="linear")
    assert (math.isnan(ours) and math.isnan(ref)) or abs(ours - ref) < 1e-12
