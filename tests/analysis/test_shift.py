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
    a = group_draws("segmentation", None, d_int, g_int, 200, 7, "internal")
    b = group_draws("segmentation", None, d_ext, g_ext, 200, 7, "external:x")
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
    a = group_draws("classification", y, s, g, 500, 0, "internal")
    b = group_draws("classification", y2, s2, g2, 500, 0, "external:twin")
    for k, grp in enumerate(a.groups):
        assert a.point[k] == pytest.approx(roc_auc_score(y[g == grp], s[g == grp]))
    sh = shift_block("classification", "sex", a, b, 500)
    assert sh["diff"]["ci_low"] < 0 < sh["diff"]["ci_high"]  # no shift: the interval includes 0
    s3 = y2 + rng.normal(0, np.where(g2 == "female", 0.5, 1.5))  # the bias flipped
    c = group_draws("classification", y2, s3, g2, 500, 0, "external:flip")
    flipped = shift_block("classification", "sex", a, c, 500)
    assert flipped["diff"]["shift"] < 0 and flipped["diff"]["ci_high"] < 0 and flipped["diff"]["excludes_0"]


def test_no_shift_interval_for_a_group_below_the_minimum_size() -> None:
    """As the metric engine: a group below min_group_size in either test set gets a point shift, no interval."""
    g = np.array(["female"] * 3 + ["male"] * 40, dtype=object)
    d = np.linspace(0.2, 0.9, 43)
    a = group_draws("segmentation", None, d, g, 100, 0, "internal")
    b = group_draws("segmentation", None, d[::-1].copy(), g, 100, 0, "external:x")
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
    draws = [(group_draws("classification", y_int, si, g_int, 300, 0, "internal"),
              group_draws("classification", y_ext, se, g_ext, 300, 0, "external:x")) for si, se in seeds]
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
    other = group_draws("classification", y_int, seeds[0][0], np.where(g_int == "female", "F", "M").astype(object),
                        300, 0, "internal")
    with pytest.raises(InputError, match="different groups"):
        seeds_shift_block("classification", "sex", [draws[0][0], other], [d[1] for d in draws], 300)


# ------------------------------------------------------------------------------------------------ overlap

def test_overlap_option_is_parsed_into_the_label() -> None:
    r = parse_eval_dataset("synth-control:n=40:overlap=paired")
    assert (r.overlap, r.options) == ("paired", {"n": 40})
    assert r.label == "synth-control:n=40:overlap=paired"
    assert parse_eval_dataset("synth-control:overlap=refuse").label == "synth-control"  # the default
    with pytest.raises(InputError, match="overlap=refuse .* or overlap=paired"):
        parse_eval_dataset("synth-control:overlap=joint")


def _loaded(name: str, **options: object) -> tuple[object, object]:
    from fairmedbench.benchmark.datasets import load_with_split

    return load_with_split(name, None, seed=0, **options)


@pytest.mark.parametrize("external, options, n_test", [
    # 40 images: a 12-image test split of 6 per sex, 3 of each sex with a lesion. synth-control (seed 0) renders
    # synth-contrast's male images and lesion-free images pixel for pixel: 6 + 3 shared
    ("synth-control", {}, 9),
    # synth-flip at seed 0 would differ in every lesion (0.35x on males, 1x on females): the 3 + 3 lesion-free shared
    ("synth-flip", {"data_seed": 0}, 6),
    ("synth-flip", {}, 0),  # its own seed: disjoint
    ("synth-control", {"data_seed": 3}, 0),
])
def test_find_overlap_counts_items_with_the_same_pixels(external: str, options: dict[str, object], n_test: int) -> None:
    from fairmedbench.analysis.shift import find_overlap

    ds, split = _loaded("synth-contrast", n=40)
    eds, esplit = _loaded(external, n=40, **options)
    trained = np.concatenate([split.train, split.val])
    ov = find_overlap(ds, split.test, trained, eds, esplit.test)
    assert (ov.n_test, ov.n_trained, ov.n_external) == (n_test, 0, 12)
    assert len(ov.pairs) == n_test
    if n_test:  # each pair holds the same pixels; the twins' table is the same, so the same row position
        a, b = ov.pairs[0]
        assert np.array_equal(ds.load_image(int(a)), eds.load_image(int(b))) and a == b


def test_an_external_set_holding_trained_items_is_refused_always() -> None:
    from fairmedbench.analysis.shift import check_overlap, find_overlap

    ds, split = _loaded("synth-contrast", n=40)
    trained = np.concatenate([split.train, split.val])
    # the run's own dataset evaluated whole: its 24 train + 4 validation items are trained on
    ov = find_overlap(ds, split.test, trained, ds, np.arange(40))
    assert (ov.n_test, ov.n_trained, ov.n_external) == (12, 28, 40)
    for text in ("synth-contrast:n=40:split=all", "synth-contrast:n=40:split=all:overlap=paired"):
        with pytest.raises(InputError, match="28 of its 40 items are in the run's training or validation split"):
            check_overlap(parse_eval_dataset(text), ov)


def test_check_overlap_refuses_shared_test_items_unless_paired() -> None:
    from fairmedbench.analysis.shift import Overlap, check_overlap

    shared = Overlap(np.array([[1, 5], [2, 6]]), 2, 0, 12)
    with pytest.raises(InputError, match="2 of its 12 items are also in the run's test split.*:overlap=paired"):
        check_overlap(parse_eval_dataset("synth-control"), shared)
    check_overlap(parse_eval_dataset("synth-control:overlap=paired"), shared)
    disjoint = Overlap(np.zeros((0, 2), dtype=np.int64), 0, 0, 12)
    check_overlap(parse_eval_dataset("synth-control"), disjoint)
    with pytest.raises(InputError, match="shares no item .* drop overlap=paired"):
        check_overlap(parse_eval_dataset("synth-control:overlap=paired"), disjoint)


def _site(rows: np.ndarray, y: np.ndarray | None, s: np.ndarray, g: np.ndarray, pids: np.ndarray | None = None):
    from fairmedbench.analysis.shift import SiteScores

    return SiteScores(None if y is None else y[rows], s[rows], {"sex": g[rows]},
                      None if pids is None else pids[rows], rows)


@pytest.mark.parametrize("kind", ["auc", "macro_auc", "dsc"])
def test_paired_draws_of_one_set_with_itself_move_together(kind: str) -> None:
    """Two identical, fully shared test sets: every paired resample weighs each item the same in both, so every
    resampled shift is exactly 0; the point values are `group_draws`' own."""
    from fairmedbench.analysis.shift import paired_group_draws

    rng = np.random.default_rng(0)
    n = 60
    g = np.where(np.arange(n) % 2 == 0, "female", "male").astype(object)
    y: np.ndarray | None = (np.arange(n) // 2) % (3 if kind == "macro_auc" else 2)
    s = {"auc": rng.random(n), "macro_auc": rng.dirichlet(np.ones(3), n), "dsc": rng.random(n)}[kind]
    y = None if kind == "dsc" else y
    pids = np.array([f"p{i // 2}" for i in range(n)], dtype=object)  # two images per patient (one per group)
    rows = np.arange(n)
    a, b = paired_group_draws(_site(rows, y, s, g, pids), _site(rows, y, s, g, pids), "sex",
                              np.c_[rows, rows], 50, 0, "x")
    assert np.array_equal(a.resampled, b.resampled) and np.array_equal(a.point, b.point)
    assert a.resampled.std(axis=0).min() > 0  # the resamples do vary
    task = {"auc": "classification", "macro_auc": "multiclass", "dsc": "segmentation"}[kind]
    plain = group_draws(task, y, s, g, 50, 0, "internal", pids)
    assert plain.groups == a.groups and np.allclose(plain.point, a.point)


def test_paired_interval_covers_a_zero_shift_and_independent_one_is_too_wide() -> None:
    """Simulation against a known truth: 200 replicates of two test sets drawn from one population (the true shift
    of each group's AUC is 0) that share 160 of their 200 items. The paired interval covers 0 near 95% of the time;
    the independent-samples interval ignores the shared items' correlation, so it is more than twice as wide and
    covers 0 in every replicate (it is mis-sized, not a 95% interval)."""
    from fairmedbench.analysis.shift import site_shifts

    rng = np.random.default_rng(1)
    n_shared, n_own = 160, 40
    n = n_shared + 2 * n_own
    g = np.where(np.arange(n) % 2 == 0, "female", "male").astype(object)
    y = (np.arange(n) // 2) % 2
    rows_i, rows_e = np.r_[0:n_shared + n_own], np.r_[0:n_shared, n_shared + n_own:n]
    pairs = np.c_[np.arange(n_shared), np.arange(n_shared)]
    cover: dict[str, list[bool]] = {"paired": [], "independent": []}
    width: dict[str, list[float]] = {"paired": [], "independent": []}
    for r in range(200):
        s = y + rng.standard_normal(n)
        for how, link in (("paired", pairs), ("independent", None)):
            [block] = site_shifts("classification", _site(rows_i, y, s, g), _site(rows_e, y, s, g), 200, r, "x", 0,
                                  link)
            e = block["per_group"]["female"]
            assert e.get("paired", False) == (how == "paired")
            if e["ci_low"] is None:  # a degenerate resample distribution has no interval (rare): not covered
                cover[how].append(False)
                continue
            cover[how].append(e["ci_low"] <= 0 <= e["ci_high"])
            width[how].append(e["ci_high"] - e["ci_low"])
    assert 0.90 <= np.mean(cover["paired"]) <= 0.985
    assert np.mean(cover["independent"]) >= 0.99
    assert np.mean(width["independent"]) > 2 * np.mean(width["paired"])


def test_the_synthetic_shift_board_sites_share_no_image_with_its_test_set() -> None:
    """The board's external sites are disjoint from synth-contrast's test set (synth-flip by its own seed,
    synth-control by data_seed 3), while synth-control at the twins' seed 0 shares 68 of the 90 test images: its 45
    male and 23 lesion-free female ones (45 females, round(22.5) = 22 with a lesion)."""
    from fairmedbench.analysis.shift import find_overlap
    from fairmedbench.leaderboards.suites import get_suite

    [entry] = get_suite("synthetic-shift").entries
    ds, split = _loaded(entry.dataset, **entry.dataset_options)
    trained = np.concatenate([split.train, split.val])
    for x in entry.externals:
        request = parse_eval_dataset(x.dataset)
        eds, esplit = _loaded(request.name, **request.options)
        ov = find_overlap(ds, split.test, trained, eds, esplit.test)
        assert (ov.n_test, ov.n_trained, ov.n_external) == (0, 0, 90), x.dataset
    twin, tsplit = _loaded("synth-control", **entry.dataset_options)
    ov = find_overlap(ds, split.test, trained, twin, tsplit.test)
    assert (ov.n_test, ov.n_trained) == (68, 0)
