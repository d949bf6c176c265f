"""Vectorised stratified bootstrap: resample counts per stratum, chunked, seeded, no Python loop per resample."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.metrics.defaults import N_BOOT, N_PERM

__all__ = ["N_BOOT", "N_PERM"]  # read here by the engine (bs.N_BOOT) and by its callers

if TYPE_CHECKING:
    from fairmedbench.metrics.result import AttributeReport

#: Upper bound on resample-by-sample cells held at once (bounds memory; about 32 MB per float64 array).
CHUNK_CELLS = 4_000_000


#: Cells (resamples x samples) scored per pass over a chunk: a chunk's draws are made at once (the draw order, hence
#: every number, depends on the chunk), then scored a few rows at a time so that each (rows, n) array stays in cache
#: and below the allocator's fresh-pages size (at n = 22,000: 13% less CPU than 32 rows a pass, 25% less than whole
#: chunks, system time 0.9 -> 0.1 s; every row is scored alone, so the numbers are the same).
PASS_CELLS = 2**18


def check_settings(n_boot: int, ci_level: float, min_group_size: int, n_perm: int = 0) -> None:
    """Reject bootstrap/reporting settings that would give a numpy error or a silently wrong interval."""
    if int(n_boot) != n_boot or n_boot < 0:
        raise InputError(f"n_boot must be a whole number >= 0 (0 = no intervals), got {n_boot}")
    if int(n_perm) != n_perm or n_perm < 0:
        raise InputError(f"n_perm must be a whole number >= 0 (0 = no permutation tests), got {n_perm}")
    if not 0.0 < ci_level < 1.0:
        raise InputError(f"ci_level must be between 0 and 1 (e.g. 0.95), got {ci_level}")
    if min_group_size < 0:
        raise InputError(f"min_group_size must be >= 0, got {min_group_size}")


def stable_seed(seed: int, *parts: str) -> np.random.Generator:
    """A generator seeded by `seed` and names, so results do not depend on evaluation order."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def resample_counts(rng: np.random.Generator, m: int, b: int) -> np.ndarray:
    """(b, m) float64 counts: how often each of m items is drawn in each of b resamples of size m."""
    return _counts(rng, m, b).astype(np.float64)


def _counts(rng: np.random.Generator, m: int, b: int) -> np.ndarray:
    """`resample_counts`' draws as int64 (the same numbers from the same generator state)."""
    if m == 0:
        return np.zeros((b, 0), dtype=np.int64)
    dtype = np.int32 if b * m < 2**31 - 1 else np.int64
    idx = rng.integers(0, m, size=(b, m), dtype=dtype)
    idx += (np.arange(b, dtype=dtype) * m)[:, None]
    return np.bincount(idx.ravel(), minlength=b * m).reshape(b, m)


def chunks(n_boot: int, n_samples: int) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges of resamples so that one chunk holds about CHUNK_CELLS cells."""
    step = max(1, min(n_boot, CHUNK_CELLS // max(n_samples, 1)))
    for start in range(0, n_boot, step):
        yield start, min(n_boot, start + step)


def passes(b: int, n_samples: int) -> Iterator[slice]:
    """Row slices of a chunk of b resamples of n_samples each, about PASS_CELLS cells (at least 4 rows) at a time."""
    step = max(4, PASS_CELLS // max(n_samples, 1))
    for start in range(0, b, step):
        yield slice(start, min(b, start + step))


def stratified_counts(
    rng: np.random.Generator, sizes: Sequence[int], b: int
) -> list[np.ndarray]:
    """Counts for each stratum (each resampled to its own size), one (b, m_k) array per stratum."""
    return [resample_counts(rng, m, b) for m in sizes]


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval along axis 0, ignoring resamples where the metric is undefined (NaN)."""
    alpha = (1.0 - level) / 2.0 * 100.0
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lo = np.nanpercentile(samples, alpha, axis=0)
            hi = np.nanpercentile(samples, 100.0 - alpha, axis=0)
    return lo, hi


def interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float, str | None]:
    """Percentile interval of one quantity's resampled values, or (NaN, NaN, reason) when there is none.

    A constant bootstrap distribution (a group of one sample, one positive and one negative, perfect
    separation) would give a zero-width interval that reads as certainty; it gets no interval and a reason.
    """
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return math.nan, math.nan, "undefined in every bootstrap resample"
    if np.ptp(finite) <= 1e-12 * max(1.0, float(np.abs(finite).max())):
        return (math.nan, math.nan, f"every bootstrap resample gives {float(finite[0]):.6g}: the resampled "
                "distribution is degenerate, so a zero-width interval would claim a certainty the data lack")
    lo, hi = percentile_ci(finite, level)
    return float(lo), float(hi), None


def small_group_reason(n: int, min_group_size: int) -> str:
    """Why a small group's values carry no interval."""
    return (f"n={n} is below min_group_size={min_group_size}: point estimate only, a bootstrap interval from "
            "this few samples is not reliable")


def group_interval(report: AttributeReport, metric: str, group: str, value: float, n: int,
                   draws: Sequence[np.ndarray] | None, min_group_size: int,
                   ci_level: float) -> tuple[float, float, float]:
    """(value, low, high) of one group's metric: no interval for a small group, else the bootstrap percentile
    interval of its `draws`; the reason for a missing interval goes into `report.ci_notes`."""
    if group in report.small_groups:
        why: str | None = small_group_reason(n, min_group_size)
        lo = hi = math.nan
    else:
        lo, hi, why = interval(np.concatenate(draws or []), ci_level)
    if why:
        report.ci_notes.setdefault(metric, {})[group] = why
    return (float(value), lo, hi)


# ----------------------------------------------------------------------------------------------- resampling units
# Rows of one patient are not independent: where patient ids are known, the bootstrap draws patients (all of a
# patient's rows together, a cluster bootstrap) and the permutation test moves whole patients between groups.
# A unit is a patient WITHIN one group: a patient whose rows fall in two groups (age bins over follow-ups) forms
# one unit per group, so every unit belongs to exactly one group and the group sizes stay those of the data.

UNIT_PATIENT = "patient"
UNIT_ROW = "row"


@dataclass(frozen=True)
class Units:
    """The resampling unit of each evaluated row (`of_row`, indices 0..n_units-1) and its kind."""

    of_row: np.ndarray
    kind: str

    @property
    def n_units(self) -> int:
        """Number of units (patients within groups, or rows)."""
        return int(self.of_row.max()) + 1 if self.of_row.size else 0


def make_units(codes: np.ndarray, patient_ids: np.ndarray | None) -> Units:
    """Units of rows with group `codes`: (patient, group) clusters when `patient_ids` is given (a missing id is
    its own unit), else each row."""
    n = len(codes)
    if patient_ids is None:
        return Units(np.arange(n), UNIT_ROW)
    pid = np.asarray(patient_ids, dtype=object)
    if len(pid) != n:
        raise InputError(f"patient ids: {len(pid)} values for {n} rows; give one patient id per row")
    keys = np.array([f"\x00row{i}" if missing_id(v) else str(v) for i, v in enumerate(pid.tolist())], dtype=object)
    keyed = np.char.add(np.char.add(keys.astype(str), "\x1f"), np.asarray(codes).astype(str))
    _, inv = np.unique(keyed, return_inverse=True)
    return Units(inv.astype(np.int64).ravel(), UNIT_PATIENT)


def missing_id(v: object) -> bool:
    """Whether a patient or sample id is missing: None, NaN, or empty text (also 'nan')."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and v.strip() in ("", "nan"))


def units_in_order(units: Units, rows: np.ndarray) -> np.ndarray:
    """The distinct units of `rows`, in order of first appearance."""
    u: np.ndarray = units.of_row[rows]
    _, first = np.unique(u, return_index=True)
    return u[np.sort(first)]


def label_strata(units: Units, rows: np.ndarray, row_label: np.ndarray, label_order: Sequence[int]
                 ) -> list[np.ndarray]:
    """The units of `rows` stratified by label at the unit level: one array per label of `label_order` (units whose
    rows all carry it) and a last one of units with rows of several labels; units in first-appearance order.

    With one row per unit this is the row-level stratification by label, item for item."""
    order = units_in_order(units, rows)
    lab = row_label[rows]
    u = units.of_row[rows]
    lo = np.full(units.n_units, np.iinfo(np.int64).max)
    hi = np.full(units.n_units, np.iinfo(np.int64).min)
    np.minimum.at(lo, u, lab)
    np.maximum.at(hi, u, lab)
    single = lo[order] == hi[order]
    return [order[single & (lo[order] == lab_k)] for lab_k in label_order] + [order[~single]]


def unit_weights(rng: np.random.Generator, strata: Sequence[np.ndarray], n_units: int, b: int) -> np.ndarray:
    """(b, n_units) counts: each stratum (unit indices, in draw order) resampled to its own size."""
    w = np.zeros((b, n_units))
    for st in strata:
        if len(st):
            w[:, st] = resample_counts(rng, len(st), b)
    return w


def strata_columns(strata: Sequence[np.ndarray], n_units: int) -> np.ndarray:
    """Each unit's column in `strata_weights`' array (units in no stratum: its last column, always 0)."""
    flat = np.concatenate([np.asarray(st, dtype=np.int64) for st in strata]) if strata else np.zeros(0, np.int64)
    col = np.full(n_units, len(flat), dtype=np.int64)
    col[flat] = np.arange(len(flat))
    return col


def strata_weights(rng: np.random.Generator, strata: Sequence[np.ndarray], b: int) -> np.ndarray:
    """The draws of `unit_weights` with the strata side by side (b, total + 1; a last column of zeros), as int32
    counts (whole numbers: half the bytes to gather, summed exactly in integers): unit u's counts are column
    strata_columns(...)[u], so a caller gathers its rows' weights once, not scatter then gather."""
    parts = [_counts(rng, len(st), b) for st in strata if len(st)]
    return np.concatenate([*parts, np.zeros((b, 1), dtype=np.int64)], axis=1, dtype=np.int32)


def permuted_groups(rng: np.random.Generator, strata: Sequence[np.ndarray], unit_group: np.ndarray, b: int
                    ) -> np.ndarray:
    """(b, n_units) group codes with the group labels of the units shuffled within each stratum, per row."""
    out = np.empty((b, len(unit_group)), dtype=np.int64)
    for st in strata:
        if len(st):
            out[:, st] = rng.permuted(np.broadcast_to(unit_group[st], (b, len(st))), axis=1)
    return out


def unit_group(units: Units, codes: np.ndarray) -> np.ndarray:
    """The group code of each unit (a unit lies in one group by construction)."""
    out = np.full(units.n_units, -1, dtype=np.int64)
    out[units.of_row] = codes
    return out


def clusters_per_group(units: Units, codes: np.ndarray, n_groups: int) -> list[int]:
    """Number of units in each group."""
    g = unit_group(units, codes)
    return [int((g == k).sum()) for k in range(n_groups)]


def permutation_p(observed: float, null: np.ndarray, alternative: str) -> tuple[float, int]:
    """(p, permutations used): (1 + #{null at least as extreme}) / (1 + #valid), 'greater' for a gap (>= observed),
    'two-sided' for a signed difference (|null| >= |observed|); NaN when the observed value or every permuted one
    is undefined."""
    null = null[np.isfinite(null)]
    if not np.isfinite(observed) or null.size == 0:
        return math.nan, int(null.size)
    tol = 1e-12 * max(1.0, abs(observed))
    hits = (np.abs(null) >= abs(observed) - tol) if alternative == "two-sided" else (null >= observed - tol)
    return float((1 + int(hits.sum())) / (1 + null.size)), int(null.size)


def bias_corrected(value: float, draws: np.ndarray) -> float:
    """Efron's bootstrap bias correction 2·value − mean(resampled), clipped at 0 (for a gap, never below 0)."""
    finite = draws[np.isfinite(draws)]
    if not np.isfinite(value) or finite.size == 0:
        return math.nan
    return max(0.0, 2.0 * float(value) - float(finite.mean()))
