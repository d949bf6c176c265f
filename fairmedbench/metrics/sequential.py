"""Monitoring statistics for repeated looks: the patient-clustered DeLong variance of an AUC (Obuchowski 1997), a
one-sided CUSUM of standardised AUC drops, and its threshold calibrated by simulation to a false-alarm rate over
a horizon of windows. Pure numpy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fairmedbench.errors import InputError

#: CUSUM reference value k in standard deviations where the audit names no detectable effect (tuned to a drop of
#: 2k = 1 SD per window); else k is half the audit's MDE in each look's standard deviations
CUSUM_K = 0.5
#: simulated null paths per threshold calibration
N_SIM = 20_000
#: `benchmark monitor`'s defaults: the false-alarm rate of the whole monitor and the windows it covers
MONITOR_ALPHA = 0.05
MONITOR_HORIZON = 12
#: the share of the false-alarm rate spent on the AUC rule; the rest on the score-drift tests
PERFORMANCE_SHARE = 0.7


def clustered_auc_variance(y: np.ndarray, s: np.ndarray, clusters: np.ndarray | None = None) -> float:
    """Variance of the Mann-Whitney AUC of scores `s` for 0/1 labels `y`, rows of one cluster (patient) kept
    together (Obuchowski 1997; with one row per cluster, DeLong's with an I/(I-1) factor); NaN with one class
    or fewer than two clusters."""
    y, s = np.asarray(y), np.asarray(s, dtype=np.float64)
    pos, neg = s[y == 1], s[y == 0]
    m, n = len(pos), len(neg)
    if m == 0 or n == 0:
        return math.nan
    neg_sorted, pos_sorted = np.sort(neg), np.sort(pos)
    v10 = (np.searchsorted(neg_sorted, pos, "left") + np.searchsorted(neg_sorted, pos, "right")) / (2.0 * n)
    v01 = 1.0 - (np.searchsorted(pos_sorted, neg, "left") + np.searchsorted(pos_sorted, neg, "right")) / (2.0 * m)
    theta = float(v10.mean())
    ids = np.arange(len(y)) if clusters is None else np.unique(np.asarray(clusters).astype(str),
                                                               return_inverse=True)[1].ravel()
    n_cl = int(ids.max()) + 1
    if n_cl < 2:
        return math.nan
    per10 = np.bincount(ids[y == 1], weights=v10, minlength=n_cl)
    per01 = np.bincount(ids[y == 0], weights=v01, minlength=n_cl)
    mi = np.bincount(ids[y == 1], minlength=n_cl)
    ni = np.bincount(ids[y == 0], minlength=n_cl)
    d10, d01 = per10 - mi * theta, per01 - ni * theta
    f = n_cl / (n_cl - 1)
    s10, s01, s11 = f * (d10 @ d10) / m, f * (d01 @ d01) / n, f * (d10 @ d01)
    return float(s10 / m + s01 / n + 2.0 * s11 / (m * n))


@dataclass(frozen=True)
class Look:
    """One look of the rule: the standardised drop z, the share of its variance that the audit contributes (shared
    by every look), and the CUSUM reference k."""

    z: float
    ratio: float
    k: float


def auc_look(audited: float, v_audit: float, value: float, v_value: float, target: float | None) -> Look | None:
    """The look of a window AUC `value` (variance `v_value`) against the `audited` one (variance `v_audit`):
    z = (audited - value) / sqrt(v_audit + v_value); k is half the `target` drop (the audit's MDE) in that standard
    deviation (CUSUM_K without a target). None when the variances are undefined."""
    if not (math.isfinite(v_audit) and math.isfinite(v_value)) or v_audit + v_value <= 0:
        return None
    sd = math.sqrt(v_audit + v_value)
    k = target / (2.0 * sd) if target is not None and math.isfinite(target) and target > 0 else CUSUM_K
    return Look((audited - value) / sd, v_audit / (v_audit + v_value), k)


def cusum(drops: Sequence[float], k: float | Sequence[float], h: float | Sequence[float]
          ) -> tuple[list[float], list[bool]]:
    """One-sided CUSUM S_w = max(0, S_{w-1} + z_w - k_w) of standardised drops z_w (NaN: no look, S unchanged),
    alarming where S_w > h_w and restarting at 0 after an alarm (k and h per look, or one for all);
    (S per look, alarm per look)."""
    ks, hs = _per_look(k, len(drops)), _per_look(h, len(drops))
    out, alarms, prev = [], [], 0.0
    for z, kw, hw in zip(drops, ks, hs):
        cur = prev if not math.isfinite(z) else max(0.0, prev + float(z) - kw)
        alarm = math.isfinite(z) and cur > hw
        out.append(cur)
        alarms.append(alarm)
        prev = 0.0 if alarm else cur
    return out, alarms


def _per_look(v: float | Sequence[float], n: int) -> list[float]:
    return [float(v)] * n if isinstance(v, (int, float)) else [float(x) for x in v]


def cusum_threshold(ratios: Sequence[float], ks: Sequence[float], horizon: int, alpha: float, n_sim: int = N_SIM,
                    seed: int = 0) -> float:
    """The threshold h that a CUSUM (reference `ks[w]` per look) of standardised drops z_w = (A_audit - A_w) /
    sqrt(v_audit + v_w) exceeds within `horizon` looks with probability <= `alpha` when nothing
    changed. The audit's error is shared by every look, so the z_w are correlated: `ratios[w]` = v_audit /
    (v_audit + v_w). Given for the looks seen so far; the later ones repeat their medians."""
    if not 0.0 < alpha < 1.0:
        raise InputError(f"the false-alarm rate must be between 0 and 1, got {alpha}")
    if horizon < 1 or not ratios or len(ratios) != len(ks) or len(ratios) > horizon:
        raise InputError(f"{len(ratios)} looks (and {len(ks)} reference values) for a horizon of {horizon}")
    r = [float(x) for x in ratios] + [float(np.median(ratios))] * (horizon - len(ratios))
    kk = [float(x) for x in ks] + [float(np.median(ks))] * (horizon - len(ks))
    own, shared = _null_draws(n_sim, horizon, seed)
    s = np.zeros(n_sim)
    peak = np.zeros(n_sim)
    for w in range(horizon):
        s = np.maximum(0.0, s + math.sqrt(1.0 - r[w]) * own[:, w] + math.sqrt(r[w]) * shared - kk[w])
        np.maximum(peak, s, out=peak)
    return float(np.quantile(peak, 1.0 - alpha))


@lru_cache(maxsize=8)
def _null_draws(n_sim: int, horizon: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal draws of the simulated null paths: one per look and one shared by all looks (the audit's
    error); the same for every calibration with this seed (common random numbers: h is a smooth function of the
    ratios)."""
    rng = np.random.default_rng(seed)
    own, shared = rng.standard_normal((n_sim, horizon)), rng.standard_normal(n_sim)
    own.flags.writeable = shared.flags.writeable = False
    return own, shared


def rule_text(alpha: float, horizon: int, n_groups: int) -> str:
    """The alert rule and its error rate, in words."""
    return ("Each group's look at a window is z = (audited AUC - window AUC) / sqrt(v_audit + v_window), both "
            "variances patient-clustered DeLong (Obuchowski 1997); a one-sided CUSUM S = max(0, S + z - k) alerts "
            "when S > h and then restarts, with k half the audit's ΔAUC MDE in that look's standard deviations "
            f"(the drop the audit could detect; {CUSUM_K} without one). h is calibrated by simulation ({N_SIM:,} "
            "null paths with the audit's error shared by every look, on the looks' variances so far) so that a "
            f"group with no change alerts within {horizon} windows with probability "
            f"{alpha * PERFORMANCE_SHARE / n_groups:.3g} (Bonferroni over {n_groups} groups: "
            f"{alpha * PERFORMANCE_SHARE:g} in all). Each window's scores per group (one row per patient) are tested "
            "against the audit's by a two-sample KS test at "
            f"{alpha * (1 - PERFORMANCE_SHARE) / (n_groups * horizon):.3g} (Bonferroni over groups x windows: "
            f"{alpha * (1 - PERFORMANCE_SHARE):g} in all). Together: at most {alpha:g} of streams with no change "
            f"raise an alert within {horizon} windows.")
