"""The shift of a fairness result between two test sets (analysis.shift): parsing of --eval-dataset, alignment of
two dataset cards, and the shift with intervals from independent bootstraps, checked by hand and against sklearn."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from fairmedbench.analysis.shift import (
    GroupDraws,
    check_alignment,
    group_draws,
    parse_eval_dataset,
    seeds_shift_block,
    shift_block,
    split_eval_list,
)
from fairmedbench.errors import InputError
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.registry.datasets import get_card
from fairmedbench.registry.datasets.card import age_attributes


def test_parse_eval_dataset_options_root_and_split() -> None:
    r = parse_eval_dataset('synth-flip:n=40:config={"size":64,"split_fractions":[0.5,0.2,0.3]}:root=/d:split=all')
    assert (r.name, r.root, r.split) == ("synth-flip", "/d", "all")
    assert r.options == {"n": 40, "config": {"size": 64, "split_fractions": [0.5, 0.2, 0.3]}}
    assert r.label == 'synth-flip:config={"size":64,"split_fractions":[0.5,0.2,0.3]}:n=40:split=all'
    assert parse_eval_dataset("nih-cxr14:view=AP").label == "nih-cxr14:view=AP"
    assert split_eval_list('a, b:config={"x":[1,2]},c:k=v') == ["a", 'b:config={"x":[1,2]}', "c:k=v"]
    for bad in ("", "nih:x", "nih-cxr14:split=val"):
        with pytest.raises(InputError):
            parse_eval_dataset(bad)


def test_alignment_maps_groups_through_the_cards_and_refuses_what_cannot_be_aligned() -> None:
    contrast, flip = get_card("synth-contrast"), get_card("synth-flip")
    rec = check_alignment(contrast, flip, "classification", ("sex", "age"), "main", "synth-flip")
    assert rec["sex"]["groups"] == ["female", "male"] and rec["sex"]["external"]["mapping"] == {"F": "female",
                                                                                               "M": "male"}
    # NIH codes sex as Patient Gender M/F, the synthetic cards as sex F/M: both map to female/male
    nih = get_card("nih-cxr14")
    with pytest.raises(InputError, match="class names differ"):  # no finding/finding vs negative/positive
        check_alignment(contrast, nih, "classification", ("sex",), "main", "nih-cxr14")
    with pytest.raises(InputError, match="offers multiclass"):
        check_alignment(contrast, get_card("synth-ordinal"), "classification", ("sex",), "main", "synth-ordinal")
    with pytest.raises(InputError, match="is 3D"):
        check_alignment(contrast, get_card("synth3d-control"), "classification", ("sex",), "main", "synth3d")
    no_sex = replace(flip, attributes=tuple(a for a in flip.attributes if a.name != "sex"))
    with pytest.raises(InputError, match="has no attribute 'sex'"):
        check_alignment(contrast, no_sex, "classification", ("sex",), "main", "no-sex")
    other_age = replace(flip, attributes=(flip.attribute("sex"), *age_attributes("age", 50)))
    with pytest.raises(InputError, match="other bin edges"):  # same attribute name, groups '<50' vs '<60'
        check_alignment(contrast, other_age, "classification", ("age",), "main", "other-age")
    check_alignment(contrast, other_age, "classification", ("sex",), "main", "other-age")  # sex alone aligns


def test_shift_of_group_dsc_by_hand() -> None:
    """Segmentation: group means, their difference, and the interval from the two named bootstrap streams."""
    g_int = np.array(["female"] * 3 + ["male"] * 3, dtype=object)
    d_int = np.array([0.5, 0.6, 0.7, 0.9, 0.8, 1.0])
    g_ext = np.array(["female"] * 2 + ["male"] * 2 + [None], dtype=object)  # a missing group is left out
    d_ext = np.array([0.9, 0.7, 0.4, 0.6, 0.0])
    a = group_draws(None, d_int, g_int, 200, 7, "internal")
    b = group_draws(None, d_ext, g_ext, 200, 7, "external:x")
    sh = shift_block("segmentation", "sex", a, b, 200)
    assert sh["per_group"]["female"]["internal"] == pytest.approx(0.6)
    assert sh["per_group"]["female"]["external"] == pytest.approx(0.8)
    assert sh["per_group"]["female"]["shift"] == pytest.approx(0.2)
    assert sh["per_group"]["male"]["shift"] == pytest.approx(0.5 - 0.9)
    assert sh["gap"]["shift"] == pytest.approx(abs(0.8 - 0.5) - abs(0.9 - 0.6))
    assert sh["diff"]["of"] == "male - female" and sh["diff"]["shift"] == pytest.approx((0.5 - 0.8) - (0.9 - 0.6))
    # the interval by hand: each set resampled within its groups on its own stream, differences of the draws
    draws = {}
    for name, d, g in (("internal", d_int, g_int), ("external:x", d_ext, g_ext)):
        rng = bs.stable_seed(7, "shift-group-dsc", name)
        keep = np.array([isinstance(v, str) for v in g])
        cols = []
        for grp in ("female", "male"):
            v = d[keep][g[keep].astype(str) == grp]
            cols.append(bs.resample_counts(rng, v.size, 200) @ v / v.size)
        draws[name] = np.stack(cols, axis=1)
    diff = (draws["external:x"][:, 1] - draws["external:x"][:, 0]) - (draws["internal"][:, 1] - draws["internal"][:, 0])
    lo, hi = np.percentile(diff, [2.5, 97.5])
    assert sh["diff"]["ci_low"] == pytest.approx(lo) and sh["diff"]["ci_high"] == pytest.approx(hi)
    assert sh["diff"]["excludes_0"] == bool(lo > 0 or hi < 0)


def test_shift_of_group_auc_matches_sklearn_and_a_same_distribution_set_shows_none() -> None:
    rng = np.random.default_rng(0)
    n = 400
    g = np.where(rng.random(n) < 0.5, "female", "male").astype(object)
    y = (rng.random(n) < 0.5).astype(int)
    s = y + rng.normal(0, np.where(g == "female", 1.5, 0.5))  # females harder
    y2 = (rng.random(n) < 0.5).astype(int)
    g2 = np.where(rng.random(n) < 0.5, "female", "male").astype(object)
    s2 = y2 + rng.normal(0, np.where(g2 == "female", 1.5, 0.5))  # same distribution, other samples
    a = group_draws(y, s, g, 500, 0, "internal")
    b = group_draws(y2, s2, g2, 500, 0, "external:twin")
    for k, grp in enumerate(a.groups):
        assert a.point[k] == pytest.approx(roc_auc_score(y[g == grp], s[g == grp]))
    sh = shift_block("classification", "sex", a, b, 500)
    assert sh["diff"]["ci_low"] < 0 < sh["diff"]["ci_high"]  # no shift: the interval includes 0
    s3 = y2 + rng.normal(0, np.where(g2 == "female", 0.5, 1.5))  # the bias flipped
    c = group_draws(y2, s3, g2, 500, 0, "external:flip")
    flipped = shift_block("classification", "sex", a, c, 500)
    assert flipped["diff"]["shift"] < 0 and flipped["diff"]["ci_high"] < 0 and flipped["diff"]["excludes_0"]


def test_no_shift_interval_for_a_group_below_the_minimum_size() -> None:
    """As the metric engine: a group below min_group_size in either test set gets a point shift, no interval."""
    g = np.array(["female"] * 3 + ["male"] * 40, dtype=object)
    d = np.linspace(0.2, 0.9, 43)
    a = group_draws(None, d, g, 100, 0, "internal")
    b = group_draws(None, d[::-1].copy(), g, 100, 0, "external:x")
    assert a.counts == (3, 40)
    sh = shift_block("segmentation", "sex", a, b, 100, min_group_size=30)
    assert sh["per_group"]["female"]["ci_low"] is None and "female" in sh["per_group"]["female"]["no_ci"]
    assert sh["per_group"]["male"]["ci_low"] is not None
    assert sh["diff"]["ci_low"] is None and sh["gap"]["ci_low"] is None and sh["diff"]["shift"] is not None


def test_seed_mean_shift_averages_each_quantity_over_seeds_on_shared_resamples() -> None:
    """Two training seeds scored on the same two test sets, drawn with one seed and stream names: every quantity
    (a group's AUC, the gap, the difference) is averaged over seeds row by row, so the points are the means of the
    seeds' own shifts (the gap too: a mean of gaps, not the gap of mean AUCs) and the interval is the percentile
    interval of the averaged draws; one seed is `shift_block`."""
    rng = np.random.default_rng(1)
    n = 300
    g_int = np.where(rng.random(n) < 0.5, "female", "male").astype(object)
    g_ext = np.where(rng.random(n) < 0.5, "female", "male").astype(object)
    y_int, y_ext = (rng.random(n) < 0.5).astype(int), (rng.random(n) < 0.5).astype(int)
    seeds = [(y_int + rng.normal(0, np.where(g_int == "female", 1.5, 0.6)),
              y_ext + rng.normal(0, np.where(g_ext == "female", 0.6, 1.5 + 0.3 * k))) for k in range(2)]
    draws = [(group_draws(y_int, si, g_int, 300, 0, "internal"), group_draws(y_ext, se, g_ext, 300, 0, "external:x"))
             for si, se in seeds]
    one = shift_block("classification", "sex", *draws[0], 300)
    assert seeds_shift_block("classification", "sex", [draws[0][0]], [draws[0][1]], 300) == one
    both = seeds_shift_block("classification", "sex", [d[0] for d in draws], [d[1] for d in draws], 300)
    own = [shift_block("classification", "sex", *d, 300) for d in draws]
    for key in ("gap", "diff"):
        for field in ("internal", "external", "shift"):
            assert both[key][field] == pytest.approx(np.mean([o[key][field] for o in own]))
    assert both["per_group"]["male"]["shift"] == pytest.approx(np.mean([o["per_group"]["male"]["shift"] for o in own]))

    def diff_rows(d: GroupDraws) -> np.ndarray:  # (B,) difference male - female of each resample
        return d.resampled[:, 1] - d.resampled[:, 0]
    averaged = np.mean([diff_rows(e) - diff_rows(i) for i, e in draws], axis=0)
    lo, hi = np.percentile(averaged, [2.5, 97.5])
    assert (both["diff"]["ci_low"], both["diff"]["ci_high"]) == pytest.approx((lo, hi))
    other = group_draws(y_int, seeds[0][0], np.where(g_int == "female", "F", "M").astype(object), 300, 0, "internal")
    with pytest.raises(InputError, match="different groups"):
        seeds_shift_block("classification", "sex", [draws[0][0], other], [d[1] for d in draws], 300)
