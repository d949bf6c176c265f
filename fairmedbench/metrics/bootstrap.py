"""Vectorised stratified bootstrap: resample counts per stratum, chunked, seeded, no Python loop per resample."""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.metrics.result import AttributeReport

#: Upper bound on resample-by-sample cells held at once (bounds memory; about 32 MB per float64 array).
CHUNK_CELLS = 4_000_000


def check_settings(n_boot: int, ci_level: float, min_group_size: int) -> None:
    """Reject bootstrap/reporting settings that would give a numpy error or a silently wrong interval."""
    if int(n_boot) != n_boot or n_boot < 0:
        raise InputError(f"n_boot must be a whole number >= 0 (0 = no intervals), got {n_boot}")
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
    if m == 0:
        return np.zeros((b, 0))
    dtype = np.int32 if b * m < 2**31 - 1 else np.int64
    idx = rng.integers(0, m, size=(b, m), dtype=dtype)
    idx += (np.arange(b, dtype=dtype) * m)[:, None]
    return np.bincount(idx.ravel(), minlength=b * m).reshape(b, m).astype(np.float64)


def chunks(n_boot: int, n_samples: int) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges of resamples so that one chunk holds about CHUNK_CELLS cells."""
    step = max(1, min(n_boot, CHUNK_CELLS // max(n_samples, 1)))
    for start in range(0, n_boot, step):
        yield start, min(n_boot, start + step)


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


def group_interval(report: "AttributeReport", metric: str, group: str, value: float, n: int,
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
