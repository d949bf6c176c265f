"""Binary classification metrics per group with a vectorised, stratified bootstrap (definitions:
fairmedbench/metrics/specs.py).

Every metric is computed from per-sample weights: ones for the point estimate, resample counts for the
bootstrap, so the point value and each resample go through the same code. Scores of a subset are sorted
once; AUC, AP, ECE, Youden and threshold rates then come from cumulative sums and gathers, O(n) per
resample, for a whole chunk of resamples at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics._validate import as_labels, as_scores, check_lengths
from fairmedbench.metrics.auc import auc_from_sorted
from fairmedbench.metrics.calibration import NAMES as CALIBRATION_NAMES
from fairmedbench.metrics.calibration import Segments, decompose
from fairmedbench.metrics.defaults import CI_LEVEL, ECE_BINS, MIN_GROUP_SIZE, threshold_policy
from fairmedbench.metrics.groups import Attribute, make_attribute
from fairmedbench.metrics.groups import intersect as cross
from fairmedbench.metrics.profiles import Profile, check_threshold, get_profile
from fairmedbench.metrics.result import (
    GAP,
    OVERALL,
    AttributeReport,
    FairnessResult,
    adjust_tests,
    attach_tests,
    equity_scaled,
    gap_stats,
    resampling_record,
    signed_differences,
)
from fairmedbench.metrics.specs import has_gap
from fairmedbench.metrics.thresholds import Threshold, choose_threshold

Binner = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, int]]
Side = Literal["left", "right"]  # numpy.searchsorted's: at or above a threshold ("left"), above it ("right")


def _pct(x: float) -> str:
    return f"{x * 100:g}".replace(".", "p")


def equal_width_binner(n_bins: int = ECE_BINS) -> Binner:
    """Bins k/B <= p < (k+1)/B on [0, 1], last bin closed: bin = min(floor(p*B), B-1)."""

    def bin_of(s: np.ndarray) -> np.ndarray:
        bins: np.ndarray = np.minimum(np.floor(s * n_bins), n_bins - 1).astype(np.int64)
        return bins

    def binner(sp: np.ndarray, sn: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        return bin_of(sp), bin_of(sn), n_bins

    return binner


def observed_range_binner(n_bins: int = 10) -> Binner:
    """FairMedFM's ECE bins: equal width over the observed score range, right-closed (pandas.cut rule)."""

    def binner(sp: np.ndarray, sn: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        both = np.concatenate([sp, sn])
        if len(both) == 0:
            return sp.astype(np.int64), sn.astype(np.int64), n_bins
        mn, mx = float(both.min()), float(both.max())
        if mn == mx:
            mn -= 0.001 * abs(mn) if mn != 0 else 0.001
            mx += 0.001 * abs(mx) if mx != 0 else 0.001
            edges = np.linspace(mn, mx, n_bins + 1)
        else:
            edges = np.linspace(mn, mx, n_bins + 1)
            edges[0] -= (mx - mn) * 0.001

        def bin_of(s: np.ndarray) -> np.ndarray:
            return np.clip(np.searchsorted(edges, s, side="left") - 1, 0, n_bins - 1)

        return bin_of(sp), bin_of(sn), n_bins

    return binner


def _cum0(w: np.ndarray) -> np.ndarray:
    """Cumulative sum along axis 1 with a leading zero column, in float64. Whole-number weights (an integer or
    boolean array) are summed in int64: exact, as float64 would be, and several times faster (a float running sum
    waits on each addition's latency)."""
    out = np.empty((w.shape[0], w.shape[1] + 1))
    out[:, 0] = 0.0
    if w.dtype.kind in "biu":
        out[:, 1:] = np.cumsum(w, axis=1, dtype=np.int64)
    else:
        np.cumsum(w, axis=1, out=out[:, 1:])
    return out


class _Ranges:
    """Column ranges bounds[k]:bounds[k + 1] (bounds non-decreasing) of arrays `width` columns wide, summed by rows."""

    def __init__(self, bounds: np.ndarray, width: int) -> None:
        self.k = len(bounds) - 1
        self.full = np.flatnonzero(bounds[1:] > bounds[:-1])
        # reduceat sums from each start to the next; a closing start at bounds[-1] keeps a tail out of the last range
        self.starts = np.r_[bounds[self.full], bounds[-1]] if bounds[-1] < width else bounds[self.full]

    def sums(self, x: np.ndarray) -> np.ndarray:
        """Row sums of x (B, width) over each range, 0 where a range is empty."""
        out = np.zeros((x.shape[0], self.k))
        if len(self.full):
            out[:, self.full] = np.add.reduceat(x, self.starts, axis=1)[:, :len(self.full)]
        return out


class _Block:
    """One subset's positives and negatives sorted by score, with the search positions every metric needs."""

    def __init__(self, sp: np.ndarray, sn: np.ndarray, thr: Threshold, binner: Binner) -> None:
        self.sp, self.sn = sp, sn
        self.lo = np.searchsorted(sn, sp, side="left")
        self.hi = np.searchsorted(sn, sp, side="right")
        lo_pp = np.searchsorted(sp, sp, side="left")
        # distinct positive scores (the usual case): cp[:, lo_pp] is the view cp[:, :-1], no gather
        self.lo_pp: np.ndarray | slice = slice(0, len(sp)) if np.array_equal(lo_pp, np.arange(len(sp))) else lo_pp
        side: Side = "left" if thr.comparator == ">=" else "right"
        self.undefined_threshold = bool(np.isnan(thr.value))
        self.kp = int(np.searchsorted(sp, thr.value, side=side))
        self.kn = int(np.searchsorted(sn, thr.value, side=side))
        bp, bn, nb = binner(sp, sn)
        self.bin_p = np.searchsorted(bp, np.arange(nb + 1), side="left")
        self.bin_n = np.searchsorted(bn, np.arange(nb + 1), side="left")
        self.ranges_p, self.ranges_n = _Ranges(self.bin_p, len(sp)), _Ranges(self.bin_n, len(sn))
        self.sq_p = (1.0 - sp) ** 2
        self.sq_n = sn**2
        self.segments = Segments(sp, sn)

    def stats(self, wp: np.ndarray, wn: np.ndarray, calibration: bool = True) -> dict[str, np.ndarray]:
        """All per-subset metrics for each row of weights (B, p) and (B, n); also returns the cumulative sums for
        reuse. The engine's weights are whole numbers (ones, resample counts, 0/1 memberships) in integer or boolean
        arrays: their cumulative sums and every count below are then exact."""
        cp, cn = _cum0(wp), _cum0(wn)
        wp, wn = wp.astype(np.float64, copy=False), wn.astype(np.float64, copy=False)
        P, N = cp[:, -1], cn[:, -1]
        cn_lo = np.take(cn, self.lo, axis=1)  # np.take keeps rows contiguous (cn[:, lo] would not), so do the sums
        tp_ge = P[:, None] - (cp[:, self.lo_pp] if isinstance(self.lo_pp, slice) else np.take(cp, self.lo_pp, axis=1))
        fp_ge = N[:, None] - cn_lo
        auc = auc_from_sorted(wp, cn, self.lo, self.hi, cn_lo, P)
        with np.errstate(divide="ignore", invalid="ignore"):
            # precision at each positive's score; where its weight is 0 it does not enter AP (0 there)
            prec = np.divide(tp_ge, tp_ge + fp_ge, out=np.zeros_like(tp_ge), where=wp > 0)
            # a group without negatives has AP = 1 whatever the scores: undefined, like its AUC
            ap = np.where(N > 0, (wp * prec).sum(axis=1) / P, np.nan)
            j_all = tp_ge / P[:, None] - fp_ge / N[:, None]
            youden_max = np.maximum(0.0, j_all.max(axis=1, initial=-np.inf))
            youden_max = np.where((P > 0) & (N > 0), youden_max, np.nan)
            bpos, bneg = wp @ self.sq_p, wn @ self.sq_n
            pos_in_bin = np.diff(np.take(cp, self.bin_p, axis=1), axis=1)
            # the scores' weight per bin summed directly (cumulative sums of w·s cost two passes over B x n more)
            s_in_bin = self.ranges_p.sums(wp * self.sp) + self.ranges_n.sums(wn * self.sn)
            total = P + N
            ece = np.abs(s_in_bin - pos_in_bin).sum(axis=1) / total
            tp = P - cp[:, self.kp]
            fp = N - cn[:, self.kn]
            if self.undefined_threshold:  # no operating point: rates at it are undefined, never 0
                tp = fp = np.full_like(P, np.nan)
            tpr, fpr = tp / P, fp / N
            out = {
                "prevalence": P / total,
                "auc": auc,
                "ap": ap,
                "brier": (bpos + bneg) / total,
                "brier_pos": bpos / P,
                "brier_neg": bneg / N,
                "ece": ece,
                "tpr": tpr,
                "fpr": fpr,
                "tnr": 1.0 - fpr,
                "ppv": tp / (tp + fp),
                "acc": (tp + N - fp) / total,
                # recall is undefined without positives, so F1 is too (not 0)
                "f1": np.where(P > 0, 2 * tp / (2 * tp + fp + (P - tp)), np.nan),
                "selection_rate": (tp + fp) / total,
                "youden_j": tpr - fpr,
                "youden_j_max": youden_max,
            }
        out["balanced_brier"] = 0.5 * (out["brier_pos"] + out["brier_neg"])
        if calibration:
            out.update(decompose(self.segments, cp, cn, bpos, bneg))
        else:  # a permutation test's population: all ones in every row, and no gap reads it
            out.update({m: np.full(wp.shape[0], np.nan) for m in CALIBRATION_NAMES})
        out["_cp"], out["_cn"], out["_tp_ge"] = cp, cn, tp_ge
        return out


def _rate_at(c: np.ndarray, sorted_scores: np.ndarray, t: np.ndarray, side: Side) -> np.ndarray:
    """Weight of sorted scores at or above (side='left') / above (side='right') per-row thresholds t.

    NaN where t is NaN (no operating point: the population lacks a class), never a count of 0.
    """
    k = np.searchsorted(sorted_scores, t, side=side)
    w = c[:, -1] - np.take_along_axis(c, k[:, None], axis=1)[:, 0]
    return np.where(np.isnan(t), np.nan, w)


@dataclass
class _Plan:
    """Static structure of one (task, attribute) analysis: blocks per group and the population, and the rows
    (indices into the evaluated arrays) behind each block's sorted positives and negatives."""

    groups: list[str]
    blocks: list[_Block]
    pop: _Block
    slot_p: list[np.ndarray]
    slot_n: list[np.ndarray]
    sauroc_lo: list[np.ndarray]
    sauroc_hi: list[np.ndarray]
    rows_p: list[np.ndarray]
    rows_n: list[np.ndarray]
    rows_p_all: np.ndarray
    rows_n_all: np.ndarray

    def pooled(self) -> _Plan:
        """The plan of a permutation test: every group is the whole population under 0/1 weights (the permuted
        membership), so each group's sAUROC searches all negatives."""
        k = len(self.groups)
        return _Plan(self.groups, [self.pop] * k, self.pop, [], [], [self.pop.lo] * k, [self.pop.hi] * k,
                     [self.rows_p_all] * k, [self.rows_n_all] * k, self.rows_p_all, self.rows_n_all)


def _plan(y: np.ndarray, s: np.ndarray, codes: np.ndarray, groups: Sequence[str], thr: Threshold,
          binner: Binner) -> _Plan:
    order = np.argsort(s, kind="mergesort")
    ys, ss, cs = y[order], s[order], codes[order]
    pos, neg = ys == 1, ys == 0
    sp_all, sn_all = ss[pos], ss[neg]
    cp_codes, cn_codes = cs[pos], cs[neg]
    rp_all, rn_all = order[pos], order[neg]
    blocks, slot_p, slot_n, lo, hi = [], [], [], [], []
    for g in range(len(groups)):
        ip, in_ = np.nonzero(cp_codes == g)[0], np.nonzero(cn_codes == g)[0]
        slot_p.append(ip)
        slot_n.append(in_)
        sn_g = sn_all[in_]
        blocks.append(_Block(sp_all[ip], sn_g, thr, binner))
        lo.append(np.searchsorted(sn_g, sp_all, side="left"))
        hi.append(np.searchsorted(sn_g, sp_all, side="right"))
    return _Plan(list(groups), blocks, _Block(sp_all, sn_all, thr, binner), slot_p, slot_n, lo, hi,
                 [rp_all[i] for i in slot_p], [rn_all[i] for i in slot_n], rp_all, rn_all)


#: group i's (positive weights, negative weights) along its block's sorted positives and negatives
GroupWeights = Callable[[int], tuple[np.ndarray, np.ndarray]]


def _evaluate_weights(plan: _Plan, b: int, weights_of: GroupWeights, pop_w: tuple[np.ndarray, np.ndarray] | None,
                      names: _Names) -> dict[str, dict[str, np.ndarray]]:
    """Per-group and population metrics for b rows of weights (point: one row of ones; bootstrap: counts, `pop_w`
    the population's; a permutation plan: 0/1 memberships over the whole population, `pop_w` None as its weights
    are all ones). Each group's weights are asked for, used and dropped in turn: one group's arrays at a time."""
    per: dict[str, dict[str, np.ndarray]] = {}
    if pop_w is None:  # every row weighs the whole population by ones: its metrics are computed once, then repeated
        wp_all = np.broadcast_to(np.ones((1, len(plan.pop.sp))), (b, len(plan.pop.sp)))
        one = plan.pop.stats(wp_all[:1], np.ones((1, len(plan.pop.sn))), calibration=False)
        pop = {k: np.broadcast_to(v, (b, *v.shape[1:])) for k, v in one.items()}
    else:
        wp_all = pop_w[0]
        pop = plan.pop.stats(*pop_w)
    P, N = pop["_cp"][:, -1], pop["_cn"][:, -1]
    # Global operating points: one threshold for the population, rates reported per group.
    sp, sn = plan.pop.sp, plan.pop.sn
    if len(sp) and len(sn):
        j = (pop["_tp_ge"] >= names.tpr_target * P[:, None] * (1 - 1e-12)).sum(axis=1) - 1
        t_tpr = sp[np.maximum(j, 0)]
        excl = (N[:, None] - pop["_cn"] > names.fpr_target * N[:, None] * (1 + 1e-12)).sum(axis=1)
        cut = np.where(excl > 0, sn[np.maximum(excl - 1, 0)], -np.inf)
    else:
        t_tpr = cut = np.full(b, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, g in enumerate([OVERALL, *plan.groups], start=-1):
            blk = plan.pop if i < 0 else plan.blocks[i]
            st = pop if i < 0 else blk.stats(*weights_of(i))
            cp, cn = st["_cp"], st["_cn"]
            Pg, Ng = cp[:, -1], cn[:, -1]
            vals = {k: v for k, v in st.items() if not k.startswith("_")}
            vals[names.fpr_at_tpr] = _rate_at(cn, blk.sn, t_tpr, "left") / Ng
            tpr_c = _rate_at(cp, blk.sp, cut, "right") / Pg
            fpr_c = _rate_at(cn, blk.sn, cut, "right") / Ng
            vals[names.tpr_at_fpr], vals[names.fpr_at_fpr] = tpr_c, fpr_c
            vals[names.youden_at_fpr] = tpr_c - fpr_c
            if i >= 0:
                vals["sauroc"] = auc_from_sorted(wp_all, cn, plan.sauroc_lo[i], plan.sauroc_hi[i], P=P)
            for k, v in vals.items():
                per.setdefault(k, {})[g] = v
    per["_t_tpr"] = {OVERALL: t_tpr}
    per["_cut_fpr"] = {OVERALL: cut}
    return per


def _stack(parts: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """The rows of several `_evaluate_weights` results as one result (metric -> group -> all rows in order)."""
    return {m: {g: np.concatenate([p[m][g] for p in parts]) for g in per_g} for m, per_g in parts[0].items()}


@dataclass(frozen=True)
class _Names:
    tpr_target: float
    fpr_target: float

    @property
    def fpr_at_tpr(self) -> str:
        return f"fpr_at_tpr{_pct(self.tpr_target)}"

    @property
    def tpr_at_fpr(self) -> str:
        return f"tpr_at_fpr{_pct(self.fpr_target)}"

    @property
    def fpr_at_fpr(self) -> str:
        return f"fpr_at_fpr{_pct(self.fpr_target)}"

    @property
    def youden_at_fpr(self) -> str:
        return f"youden_j_at_fpr{_pct(self.fpr_target)}"


#: the order of the engine's gaps (its tidy table's rows), besides the operating points, which _Names names by
#: their targets; which metrics have a gap is metrics.specs.has_gap's (tests/test_metric_gaps.py: all listed)
_GAP_ORDER = ("auc", "ap", "brier", "balanced_brier", *CALIBRATION_NAMES, "ece", "tpr", "fpr", "tnr", "ppv", "acc",
              "f1", "selection_rate", "youden_j", "youden_j_max", "sauroc")
GAP_BASE = tuple(m for m in _GAP_ORDER if has_gap(m))


DIFF_BASE = ("auc", "ap", "tpr", "fpr", "ece", "balanced_brier")

#: held fixed by the bootstrap's stratification (label counts per group), so it has no interval
FIXED_BY_STRATIFICATION = ("prevalence",)


def _between_groups(per: dict[str, dict[str, np.ndarray]], groups: list[str], defined: dict[str, list[str]],
                    names: _Names, profile: Profile) -> dict[str, np.ndarray]:
    """Gaps, equity-scaled AUC, worst-group AUC and the named fairness differences, per row.

    `defined` lists per metric the groups that enter its gap (the caller has already left one-class groups
    out of every list when the profile says so).
    """
    out: dict[str, np.ndarray] = {}
    for m in GAP_BASE + (names.fpr_at_tpr, names.tpr_at_fpr, names.fpr_at_fpr, names.youden_at_fpr):
        out[f"{m}_gap"] = gap_stats(per[m], defined[m])[0]
    out["worst_group_auc"] = gap_stats(per["auc"], defined["auc"])[1]
    out["auc_es"] = equity_scaled(per["auc"][OVERALL], per["auc"], defined["auc"])
    out["n_groups_auc"] = np.full_like(out["auc_es"], float(len(defined["auc"])))
    out["eqodds_diff"] = np.fmax(out["tpr_gap"], out["fpr_gap"])
    out["eqodds_diff"] = np.where(np.isnan(out["tpr_gap"]) | np.isnan(out["fpr_gap"]), np.nan, out["eqodds_diff"])
    out["eqodds_mean"] = 0.5 * (out["tpr_gap"] + out["fpr_gap"])
    out["eqopp_diff"] = out["tpr_gap"]
    out["dp_diff"] = out["selection_rate_gap"]
    for m, diff in signed_differences(per, groups, DIFF_BASE).items():
        both = all(g in defined[m[:-len("_diff")]] for g in groups)
        out[m] = diff if both else np.full_like(diff, np.nan)
    if profile.eod:
        out["eod"] = 1.0 - 0.5 * (out["tpr_gap"] + out["tnr_gap"])
    return out


def _permutation_null(plan: _Plan, units: bs.Units, y: np.ndarray, codes: np.ndarray, defined: dict[str, list[str]],
                      names: _Names, profile: Profile, n_perm: int, rng: np.random.Generator,
                      tick: Callable[[int, str], None] | None = None) -> dict[str, np.ndarray]:
    """Between-group values under H0 (the group label is exchangeable): group labels of the units permuted within
    label strata (a unit's label stratum: the one label its rows carry, or 'mixed'), the threshold held fixed."""
    k = len(plan.groups)
    strata = bs.label_strata(units, np.arange(len(y)), y, (1, 0))
    ugroup = bs.unit_group(units, codes)
    pooled = plan.pooled()
    up, un = units.of_row[plan.rows_p_all], units.of_row[plan.rows_n_all]
    code = np.min_scalar_type(max(k - 1, 0))  # the permuted group codes gathered and compared in the least bytes
    parts = []
    for start, stop in bs.chunks(n_perm, len(y) * max(k, 1)):
        perm = bs.permuted_groups(rng, strata, ugroup, stop - start).astype(code)
        for rows in bs.passes(stop - start, len(y)):
            gp, gn = perm[rows][:, up], perm[rows][:, un]

            def members(g: int, gp: np.ndarray = gp, gn: np.ndarray = gn) -> tuple[np.ndarray, np.ndarray]:
                return gp == g, gn == g

            parts.append(_evaluate_weights(pooled, len(gp), members, None, names))
        if tick is not None:
            tick(stop - start, "permutations")
    # between-group values are row by row: computed once over every permutation, not per pass
    return _between_groups(_stack(parts), plan.groups, defined, names, profile)


def _skip_reason(n: int, n_pos: int, n_neg: int) -> str | None:
    if n == 0:
        return "empty group: no samples, every metric undefined"
    if n_pos == 0:
        return ("one class (no positives): auc, ap, tpr, f1, youden_j (every variant), balanced_brier, brier_pos "
                "and tpr_at_fpr undefined (NaN, not 0) and left out of their gaps; defined for this group: fpr, tnr, "
                "ece, brier, brier_neg, fpr_at_tpr and sauroc (all positives against this group's negatives)")
    if n_neg == 0:
        return ("one class (no negatives): auc, ap, fpr, tnr, youden_j (every variant), balanced_brier, brier_neg, "
                "sauroc, fpr_at_tpr and fpr_at_fpr undefined (NaN, not 0) and left out of their gaps; defined for "
                "this group: tpr, f1, ece, brier, brier_pos and tpr_at_fpr")
    return None


@dataclass(frozen=True)
class _Settings:
    """What every (task, attribute) analysis of one evaluation shares: ECE bins, metric names, profile and the
    resampling settings."""

    binner: Binner
    names: _Names
    profile: Profile
    n_boot: int
    seed: int
    ci_level: float
    min_group_size: int
    n_perm: int
    patient_ids: np.ndarray | None


def _analyse(y: np.ndarray, s: np.ndarray, attr: Attribute, task: str, thr: Threshold, cfg: _Settings,
             tick: Callable[[int, str], None] | None = None) -> AttributeReport:
    """One task and attribute: point values, bootstrap intervals and permutation tests; `tick(k, phase)` after
    each chunk of k resamples ('bootstrap') or permutations ('permutations')."""
    keep = attr.codes >= 0
    y, s, codes = y[keep], s[keep], attr.codes[keep]
    units = bs.make_units(codes, None if cfg.patient_ids is None else cfg.patient_ids[keep])
    groups = list(attr.groups)
    plan = _plan(y, s, codes, groups, thr, cfg.binner)
    point, defined, point_between = _point_values(plan, cfg.names, cfg.profile)
    boot = (_bootstrap(plan, units, y, defined, cfg, bs.stable_seed(cfg.seed, task, attr.name), tick)
            if cfg.n_boot > 0 else {})
    null = _permutation_null(plan, units, y, codes, defined, cfg.names, cfg.profile, cfg.n_perm,
                             bs.stable_seed(cfg.seed, task, attr.name, "permutation"), tick) if cfg.n_perm else {}
    report = AttributeReport(task, attr.name, groups, _counts(y, plan), n_missing=attr.n_missing)
    _note_groups(report, cfg.min_group_size)
    _fill_values(report, point, point_between, defined, boot, cfg)
    attach_tests(report, point_between, {m: per[GAP] for m, per in boot.items() if GAP in per}, null, cfg.n_perm)
    n_units = bs.clusters_per_group(units, codes, len(groups))
    report.resampling = resampling_record(units.kind, {OVERALL: units.n_units, **dict(zip(groups, n_units))})
    _flag_single_case_groups(report, plan, units, cfg.n_boot)
    report.thresholds = _threshold_records(point, s, thr, cfg.names)
    return report


def _point_values(plan: _Plan, names: _Names, profile: Profile) -> tuple[
        dict[str, dict[str, np.ndarray]], dict[str, list[str]], dict[str, np.ndarray]]:
    """Point values (every weight 1), the groups that enter each metric's gap (one-class groups out when the
    profile says so) and the between-group values."""

    def ones(i: int) -> tuple[np.ndarray, np.ndarray]:
        blk = plan.pop if i < 0 else plan.blocks[i]
        return np.ones((1, len(blk.sp)), dtype=np.int64), np.ones((1, len(blk.sn)), dtype=np.int64)

    point = _evaluate_weights(plan, 1, ones, ones(-1), names)
    defined = {m: [g for g in plan.groups if np.isfinite(point[m][g][0])] for m in point if not m.startswith("_")}
    if profile.exclude_one_class_groups:
        two_class = [g for b, g in zip(plan.blocks, plan.groups) if len(b.sp) and len(b.sn)]
        defined = {m: [g for g in defs if g in two_class] for m, defs in defined.items()}
    return point, defined, _between_groups(point, plan.groups, defined, names, profile)


def _bootstrap(plan: _Plan, units: bs.Units, y: np.ndarray, defined: dict[str, list[str]], cfg: _Settings,
               rng: np.random.Generator,
               tick: Callable[[int, str], None] | None) -> dict[str, dict[str, list[np.ndarray]]]:
    """Every metric's resampled values per group (the gaps' under GAP), from cfg.n_boot stratified resamples."""
    drawn_all = _resampled_metrics(plan, units, y, cfg.n_boot, rng, cfg.names, tick)
    boot = {m: {g: [v] for g, v in per_g.items()} for m, per_g in drawn_all.items() if not m.startswith("_")}
    # between-group values are row by row: computed once over every resample, not per pass
    for m, v in _between_groups(drawn_all, plan.groups, defined, cfg.names, cfg.profile).items():
        boot.setdefault(m, {})[GAP] = [v]
    return boot


def _resampled_metrics(plan: _Plan, units: bs.Units, y: np.ndarray, n_boot: int, rng: np.random.Generator,
                       names: _Names, tick: Callable[[int, str], None] | None) -> dict[str, dict[str, np.ndarray]]:
    """Per-group and population metrics of n_boot resamples stratified by group and label, one row each."""
    # strata in the row-level draw order (every group's positives, then every group's negatives, each sorted
    # by score), so that one row per patient reproduces the row bootstrap draw for draw
    per_group = [bs.label_strata(units, np.concatenate([rp, rn]), y, (1, 0))
                 for rp, rn in zip(plan.rows_p, plan.rows_n)]
    strata = [st for kind in range(3) for st in (pg[kind] for pg in per_group)]
    col = bs.strata_columns(strata, units.n_units)  # each row's weight column, gathered straight from the draws
    up = [col[units.of_row[r]] for r in plan.rows_p]
    un = [col[units.of_row[r]] for r in plan.rows_n]
    up_all, un_all = col[units.of_row[plan.rows_p_all]], col[units.of_row[plan.rows_n_all]]
    parts = []
    for start, stop in bs.chunks(n_boot, len(y)):
        w_all = bs.strata_weights(rng, strata, stop - start)
        for rows in bs.passes(stop - start, len(y)):
            w = w_all[rows]

            def drawn(i: int, w: np.ndarray = w) -> tuple[np.ndarray, np.ndarray]:
                return np.take(w, up[i], axis=1), np.take(w, un[i], axis=1)

            pop_w = np.take(w, up_all, axis=1), np.take(w, un_all, axis=1)
            parts.append(_evaluate_weights(plan, len(w), drawn, pop_w, names))
        if tick is not None:
            tick(stop - start, "bootstrap")
    return _stack(parts)


def _counts(y: np.ndarray, plan: _Plan) -> dict[str, dict[str, int]]:
    """Samples, positives and negatives overall and per group."""
    counts = {OVERALL: {"n": int(len(y)), "n_pos": int(y.sum()), "n_neg": int(len(y) - y.sum())}}
    for g, blk in zip(plan.groups, plan.blocks):
        n_pos, n_neg = len(blk.sp), len(blk.sn)
        counts[g] = {"n": n_pos + n_neg, "n_pos": n_pos, "n_neg": n_neg}
    return counts


def _note_groups(report: AttributeReport, min_group_size: int) -> None:
    """Record the groups whose metrics are (partly) undefined, and those below min_group_size."""
    for g in report.groups:
        c = report.counts[g]
        reason = _skip_reason(c["n"], c["n_pos"], c["n_neg"])
        if reason:
            report.skipped[g] = reason
        if c["n"] < min_group_size:
            report.small_groups.append(g)


def _fill_values(report: AttributeReport, point: dict[str, dict[str, np.ndarray]],
                 point_between: dict[str, np.ndarray], defined: dict[str, list[str]],
                 boot: dict[str, dict[str, list[np.ndarray]]], cfg: _Settings) -> None:
    """Each metric's (value, CI low, CI high) per group and for its gap, the gap notes and the worst AUC group."""

    def triple(metric: str, group: str, value: float) -> tuple[float, float, float]:
        if cfg.n_boot == 0 or not np.isfinite(value) or metric in FIXED_BY_STRATIFICATION:
            return (float(value), math.nan, math.nan)
        n = report.counts[group]["n"] if group in report.counts else 0  # the gap "group" has no count (never small)
        return bs.group_interval(report, metric, group, value, n, boot[metric].get(group), cfg.min_group_size,
                                 cfg.ci_level)

    for m, per_g in point.items():
        if m.startswith("_"):
            continue
        report.values[m] = {g: triple(m, g, v[0]) for g, v in per_g.items()}
    for m, v in point_between.items():
        report.values.setdefault(m, {})[GAP] = triple(m, GAP, v[0]) if m != "n_groups_auc" else (v[0], math.nan,
                                                                                                    math.nan)
    for m, defs in defined.items():
        if len(defs) < 2 and m in GAP_BASE:
            report.gap_notes[f"{m}_gap"] = f"fewer than two groups with a defined {m} ({len(defs)})"
    if defined["auc"]:
        report.worst_group["auc"] = min(defined["auc"], key=lambda g: point["auc"][g][0])


def _threshold_records(point: dict[str, dict[str, np.ndarray]], s: np.ndarray, thr: Threshold,
                       names: _Names) -> dict[str, Any]:
    """The operating threshold and the population thresholds behind the rates at a target TPR and FPR."""
    t_tpr, cut = point["_t_tpr"][OVERALL][0], point["_cut_fpr"][OVERALL][0]
    above = s[s > cut]
    return {
        "operating": thr.to_dict(),
        names.fpr_at_tpr: {"rule": f"largest threshold with overall TPR >= {names.tpr_target:g}",
                           "value": _finite(t_tpr), "comparator": ">="},
        f"rates_at_fpr{_pct(names.fpr_target)}": {
            "rule": f"smallest threshold with overall FPR <= {names.fpr_target:g}",
            "value": None if np.isnan(cut) else _finite(above.min()) if len(above) else "inf", "comparator": ">="},
    }


#: rank metrics of a group: one positive or one negative unit makes them the rank of that one case
RANK_METRICS = ("auc", "ap", "sauroc", "youden_j_max")


def _flag_single_case_groups(report: AttributeReport, plan: _Plan, units: bs.Units, n_boot: int) -> None:
    """A group with exactly one positive or one negative unit keeps its AUC-type point values but no interval:
    the stratified bootstrap redraws that one case every time, so the interval would ignore its uncertainty."""
    def one_unit(rows: np.ndarray) -> bool:  # exactly one distinct unit, without sorting or hashing the rows
        ids = units.of_row[rows]
        return len(ids) > 0 and bool((ids == ids[0]).all())

    for g, rp, rn in zip(plan.groups, plan.rows_p, plan.rows_n):
        single = "positive" if one_unit(rp) else "negative" if one_unit(rn) else None
        if single is None:
            continue
        why = (f"only one {single} {units.kind} in this group: its {'/'.join(RANK_METRICS)} is the rank of that one "
               "case, and a bootstrap that redraws it every time cannot show how uncertain that is")
        for m in RANK_METRICS:
            v = report.values.get(m, {}).get(g)
            if v is not None and np.isfinite(v[0]):
                report.values[m][g] = (v[0], math.nan, math.nan)
                if n_boot:  # a reason already given (a small group) stays
                    report.ci_notes.setdefault(m, {}).setdefault(g, why)
        report.warnings.append(f"{report.attribute}={g}: {why}")


def _finite(v: float) -> float | str | None:
    if v is None or np.isnan(v):
        return None
    return float(v) if np.isfinite(v) else "inf"


def _threshold_for(where: str, policy: str, val_y: np.ndarray | None, val_s: np.ndarray | None,
                   comparator: str = ">=") -> Threshold:
    """choose_threshold, with errors naming the task (a rare finding may have one class in validation)."""
    try:
        return choose_threshold(policy, val_y, val_s, comparator, undefined_ok=True)
    except InputError as err:
        raise InputError(f"{where}: {err}") from None


def _as_2d(a: np.ndarray) -> np.ndarray:
    return a[:, None] if a.ndim == 1 else a


def patient_column_values(patient_ids: ArrayLike | None, n: int) -> np.ndarray | None:
    """Patient ids as an object array of length n (None stays None: rows are the resampling unit)."""
    if patient_ids is None:
        return None
    pid = np.asarray(patient_ids, dtype=object).ravel()
    if len(pid) != n:
        raise InputError(f"patient ids: {len(pid)} values for {n} samples; give one patient id per sample")
    return pid


def resampling_unit_description(patient_ids: np.ndarray | None) -> str:
    """What the bootstrap and the permutation test draw."""
    if patient_ids is None:
        return ("row: every row is resampled on its own (no patient ids given; if a patient has several rows, "
                "the intervals are too narrow)")
    return ("patient: all of a patient's rows are drawn together (cluster bootstrap), stratified by label at the "
            "patient level (patients whose rows carry one label form its stratum, the others a 'mixed' one); a "
            "patient whose rows fall in two groups counts as one unit per group")


def resolve_attributes(
    attributes: Mapping[str, ArrayLike | Attribute], n: int, bins: Mapping[str, Sequence[float]] | None = None,
    intersect: bool = False,
) -> list[Attribute]:
    """Encode raw attribute columns (binning those named in `bins`) and optionally add their crossing."""
    if not attributes:
        raise InputError("no sensitive attribute given; name at least one (e.g. --attribute sex)")
    bins = dict(bins or {})
    unknown = set(bins) - set(attributes)
    if unknown:
        raise InputError(f"bins given for {sorted(unknown)}, which are not among the attributes {list(attributes)}")
    out = []
    for name, values in attributes.items():
        a = values if isinstance(values, Attribute) else make_attribute(name, values, bins.get(name))
        if len(a.codes) != n:
            raise InputError(f"attribute {name!r} has {len(a.codes)} values for {n} samples")
        if not a.groups:
            raise InputError(f"attribute {name!r} has no non-missing values")
        out.append(a)
    if intersect:
        out.append(cross(out))
    return out


def evaluate_classification(
    y_true: ArrayLike,
    y_score: ArrayLike,
    attributes: Mapping[str, ArrayLike | Attribute],
    *,
    task_names: Sequence[str] | None = None,
    bins: Mapping[str, Sequence[float]] | None = None,
    intersect: bool = False,
    threshold: str | None = None,
    val_y_true: ArrayLike | None = None,
    val_y_score: ArrayLike | None = None,
    profile: str | Profile = "default",
    n_boot: int = bs.N_BOOT,
    seed: int = 0,
    ci_level: float = CI_LEVEL,
    min_group_size: int = MIN_GROUP_SIZE,
    fpr_at_tpr: float = 0.95,
    rates_at_fpr: float = 0.2,
    ece_bins: int = ECE_BINS,
    logits: bool = False,
    on_step: Callable[[int, int, str], None] | None = None,
    patient_ids: ArrayLike | None = None,
    n_perm: int = bs.N_PERM,
) -> FairnessResult:
    """Every classification metric of fairmedbench/metrics/specs.py per task and attribute, with bootstrap CIs.

    `y_true`/`y_score` are (n,) or (n, K) for K tasks (multi-label: one binary task per column, never
    one-hot). The operating threshold comes from `threshold`, a policy ('val_*' policies use only the
    validation arrays; default val_youden when validation arrays are given, else fixed:0.5);
    `on_step(done, total, label)` reports progress in resamples and permutations (each task-attribute pair
    counts n_boot + n_perm, or 1 without either; label 'task / attribute: bootstrap' or ': permutations').
    `profile` names a registered metric profile (metrics/profiles.py), e.g. 'fairmedfm': best-F1 on the
    evaluated set, '>', ECE in 10 bins over the observed range, `eod`, one-class groups out of every gap; a
    `threshold` under a profile that fixes its own is an error.
    `patient_ids` (n,): resample and permute whole patients (cluster bootstrap) instead of rows; `n_perm`
    permutations test every gap and two-group difference (0 = no tests).
    """
    prof = get_profile(profile)
    _check_options(prof, threshold, n_boot, ci_level, min_group_size, n_perm, ece_bins, fpr_at_tpr, rates_at_fpr)
    y, s, n, tasks = _task_arrays(y_true, y_score, attributes, task_names, logits)
    vy, vs = _validation_arrays(val_y_true, val_y_score, logits, y.shape)
    attrs = resolve_attributes(attributes, n, bins, intersect)
    n_bins = prof.ece_bins if prof.ece_bins is not None else ece_bins
    binner = observed_range_binner(n_bins) if prof.ece_binning == "observed_range" else equal_width_binner(n_bins)
    cfg = _Settings(binner, _Names(fpr_at_tpr, rates_at_fpr), prof, n_boot, seed, ci_level, min_group_size, n_perm,
                    patient_column_values(patient_ids, n))
    policy = prof.threshold_policy or threshold or threshold_policy(vy is not None)
    reports, thresholds = _analyse_tasks(y, s, vy, vs, tasks, attrs, policy, cfg, on_step)
    meta = {"kind": "classification", "profile": prof.name, "n_boot": n_boot, "seed": seed, "ci_level": ci_level,
            "ci_method": "percentile bootstrap, stratified by label within each group (so prevalence has no "
                         "interval); none for groups below min_group_size or degenerate resamples (ci_notes)",
            "resampling_unit": resampling_unit_description(cfg.patient_ids), "n_perm": n_perm,
            "tests": adjust_tests(reports) if n_perm else None,
            "min_group_size": min_group_size,
            "operating_points": {"fpr_at_tpr": fpr_at_tpr, "rates_at_fpr": rates_at_fpr},
            "ece": prof.ece_description(ece_bins),
            "thresholds": thresholds, "n_samples": n, "tasks": tasks,
            "attributes": [a.name for a in attrs]}
    return FairnessResult(reports, meta)


def _check_options(prof: Profile, threshold: str | None, n_boot: int, ci_level: float, min_group_size: int,
                   n_perm: int, ece_bins: int, fpr_at_tpr: float, rates_at_fpr: float) -> None:
    """The settings that are not arrays, checked before any array is read."""
    check_threshold(prof, threshold)
    bs.check_settings(n_boot, ci_level, min_group_size, n_perm)
    if int(ece_bins) != ece_bins or ece_bins < 1:
        raise InputError(f"ece_bins must be a whole number >= 1, got {ece_bins}")
    if not 0.0 < fpr_at_tpr <= 1.0:
        raise InputError(f"fpr_at_tpr is a target TPR in (0, 1], got {fpr_at_tpr}")
    if not 0.0 <= rates_at_fpr <= 1.0:
        raise InputError(f"rates_at_fpr is a target FPR in [0, 1], got {rates_at_fpr}")


def _task_arrays(y_true: ArrayLike, y_score: ArrayLike, attributes: Mapping[str, ArrayLike | Attribute],
                 task_names: Sequence[str] | None, logits: bool) -> tuple[np.ndarray, np.ndarray, int, list[str]]:
    """Labels and scores as (n, K) arrays, the sample count n (checked against every attribute) and the K task
    names (default 'task', or 'task0'.. for several)."""
    y = _as_2d(as_labels(y_true))
    s = _as_2d(as_scores(y_score, logits=logits))
    if y.shape != s.shape:
        raise InputError(f"labels have shape {y.shape} but scores have shape {s.shape}; one score per label")
    n = check_lengths({"y_true": y, **{f"attribute {k!r}": v.codes if isinstance(v, Attribute) else np.asarray(v)
                                       for k, v in attributes.items()}})
    tasks = list(task_names) if task_names is not None else (
        ["task"] if y.shape[1] == 1 else [f"task{k}" for k in range(y.shape[1])])
    if len(tasks) != y.shape[1]:
        raise InputError(f"{len(tasks)} task names for {y.shape[1]} label columns")
    return y, s, n, tasks


def _validation_arrays(val_y_true: ArrayLike | None, val_y_score: ArrayLike | None, logits: bool,
                       shape: tuple[int, ...]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Validation labels and scores as (m, K) arrays matching the K tasks of `shape`, or (None, None) if not given."""
    if val_y_true is None:
        return None, None
    if val_y_score is None:
        raise InputError("val y_score: validation labels were given without their scores")
    vy = _as_2d(as_labels(val_y_true, "val y_true"))
    vs = _as_2d(as_scores(val_y_score, "val y_score", logits=logits))
    if vy.shape[1] != shape[1] or vy.shape != vs.shape:
        raise InputError(f"validation labels {vy.shape} / scores {vs.shape} do not match the tasks {shape}")
    return vy, vs


class _Progress:
    """Progress in resamples and permutations over every task and attribute: each pair counts n_boot + n_perm
    steps, or one without either."""

    def __init__(self, on_step: Callable[[int, int, str], None] | None, n_pairs: int, per_pair: int) -> None:
        self.on_step, self.per_pair = on_step, per_pair
        self.total, self.done = n_pairs * per_pair, 0

    def ticker(self, label: str) -> Callable[[int, str], None]:
        """The `tick(k, phase)` of one pair: k more steps, reported as '<label>: <phase>'."""

        def tick(k: int, phase: str) -> None:
            self.done += k
            if self.on_step is not None:
                self.on_step(self.done, self.total, f"{label}: {phase}")

        return tick

    def pairs_done(self, pairs: int, label: str) -> None:
        """After `pairs` pairs: a pair without resamples or permutations reports its one step here."""
        if self.done != pairs * self.per_pair:
            self.done = pairs * self.per_pair
            if self.on_step is not None:
                self.on_step(self.done, self.total, label)


def _analyse_tasks(y: np.ndarray, s: np.ndarray, vy: np.ndarray | None, vs: np.ndarray | None, tasks: list[str],
                   attrs: list[Attribute], policy: str, cfg: _Settings,
                   on_step: Callable[[int, int, str], None] | None) -> tuple[list[AttributeReport], dict[str, Any]]:
    """Every (task, attribute) analysis in order, and the thresholds used: per task, or per task and attribute
    when the profile chooses them on the evaluated set."""
    prof = cfg.profile
    reports: list[AttributeReport] = []
    thresholds: dict[str, Any] = {}
    progress = _Progress(on_step, len(tasks) * len(attrs), max(cfg.n_boot + cfg.n_perm, 1))
    for k, task in enumerate(tasks):
        if not prof.threshold_on_evaluated_set:
            thr = _threshold_for(f"task {task!r}", policy, None if vy is None else vy[:, k],
                                 None if vs is None else vs[:, k], prof.comparator)
            thresholds[task] = thr.to_dict()
        for a in attrs:
            if prof.threshold_on_evaluated_set:
                # e.g. FairMedFM: best F1 on the samples evaluated for this attribute (missing values out)
                keep = a.codes >= 0
                thr = _threshold_for(f"task {task!r}, attribute {a.name!r}", policy, y[keep, k], s[keep, k],
                                     prof.comparator)
                thresholds.setdefault(task, {})[a.name] = thr.to_dict()
            label = f"{task} / {a.name}"
            reports.append(_analyse(y[:, k], s[:, k], a, task, thr, cfg, progress.ticker(label)))
            progress.pairs_done(len(reports), label)
    return reports, thresholds
