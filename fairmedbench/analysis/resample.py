"""Test-set resampling for subgroup analysis: groups balanced in size while keeping each group's
disease prevalence (optionally matching the age distribution across groups), and prevalence-corrected
balanced sets (equal positives and negatives in every group). Seeded; the chosen ids are returned."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.card import DatasetCard


@dataclass(frozen=True)
class Resampled:
    """A resampled test set: positions into the input table, sample ids, and how it was drawn."""

    method: str
    seed: int
    positions: np.ndarray
    ids: tuple[str, ...]
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    params: dict = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """sha256 over the sorted resampled ids (with multiplicity)."""
        return hashlib.sha256("\n".join(sorted(self.ids)).encode()).hexdigest()

    def to_dict(self) -> dict:
        """JSON-ready record (ids sorted) to store beside a result."""
        return {"method": self.method, "seed": self.seed, "params": self.params, "counts": self.counts,
                "fingerprint": self.fingerprint, "ids": sorted(self.ids)}


def _prepare(samples: pd.DataFrame, group_col: str, label_col: str, id_col: str) -> pd.DataFrame:
    for col in (group_col, label_col, id_col):
        if col not in samples.columns:
            raise InputError(f"resampling: column {col!r} not in the sample table (have {list(samples.columns)[:15]})")
    labels = samples[label_col]
    if not set(pd.unique(labels.dropna())) <= {0, 1}:
        raise InputError(f"resampling: label column {label_col!r} must be binary 0/1, "
                         f"has {sorted(pd.unique(labels.dropna()))[:5]}")
    df = pd.DataFrame({"pos": np.arange(len(samples)), "group": samples[group_col].to_numpy(),
                       "label": labels.to_numpy(), "id": samples[id_col].astype(str).to_numpy()})
    df = df[df["group"].notna() & df["label"].notna()]
    if df["group"].nunique() < 2:
        raise InputError(f"resampling: column {group_col!r} has fewer than two groups with samples")
    df["label"] = df["label"].astype(int)
    return df


def _draw(rng: np.random.Generator, pool: np.ndarray, k: int, replace: bool, what: str) -> np.ndarray:
    if k > len(pool) and not replace:
        raise InputError(f"resampling: {what} needs {k} samples but has {len(pool)}; lower n_per_group or pass "
                         "replace=True")
    if k == 0:
        return pool[:0]
    if len(pool) == 0:
        raise InputError(f"resampling: {what} needs {k} samples but has none")
    return rng.choice(pool, size=k, replace=k > len(pool) and replace)


def _split_counts(n: int, weights: Sequence[float]) -> list[int]:
    w = np.asarray(weights, dtype=float)
    raw = n * w / w.sum()
    out = np.floor(raw).astype(int)
    for k in np.argsort(-(raw - out), kind="stable")[: n - out.sum()]:
        out[k] += 1
    return out.tolist()


def _result(method, seed, chosen, df, params) -> Resampled:
    chosen = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    by_pos = df.set_index("pos")
    sub = by_pos.loc[chosen]
    counts: dict[str, dict[str, int]] = {}
    for g, part in sub.groupby("group", sort=True):
        counts[str(g)] = {"n": int(len(part)), "n_pos": int(part["label"].sum()),
                          "n_neg": int((part["label"] == 0).sum())}
    return Resampled(method, int(seed), chosen.astype(np.int64), tuple(sub["id"].tolist()), counts, params)


def balance_groups(
    samples: pd.DataFrame,
    group_col: str,
    label_col: str = "label",
    seed: int = 0,
    n_per_group: int | None = None,
    age_col: str | None = None,
    age_bins: Sequence[float] = (0, 20, 40, 60, 80, np.inf),
    replace: bool = False,
    id_col: str = "sample_id",
) -> Resampled:
    """Equal-size groups, each keeping its own prevalence; with `age_col`, every group also gets the
    pooled age-bin distribution (per label), so groups differ in neither size nor age."""
    df = _prepare(samples, group_col, label_col, id_col)
    rng = np.random.default_rng(seed)
    if age_col is not None:
        if age_col not in samples.columns:
            raise InputError(f"resampling: age column {age_col!r} not in the sample table")
        ages = pd.to_numeric(samples[age_col], errors="coerce").to_numpy()[df["pos"].to_numpy()]
        df = df.assign(age_bin=pd.cut(ages, list(age_bins), right=False, labels=False))
        n_drop = int(df["age_bin"].isna().sum())
        df = df[df["age_bin"].notna()]
    sizes = df.groupby("group").size()
    if n_per_group is not None:
        n = int(n_per_group)
    else:
        n = int(sizes.min()) if age_col is None else _largest_matched_n(df, int(sizes.min()))
    if n <= 0:
        raise InputError(f"resampling: n_per_group must be positive, got {n}")
    chosen = []
    for g in sorted(df["group"].unique(), key=str):
        part = df[df["group"] == g]
        n_pos = int(round(n * part["label"].mean()))
        for y, k in ((1, n_pos), (0, n - n_pos)):
            cell = part[part["label"] == y]
            if age_col is None:
                chosen.append(_draw(rng, cell["pos"].to_numpy(), k, replace, f"group {g!r} label {y}"))
                continue
            pooled = df[df["label"] == y]["age_bin"].value_counts().sort_index()
            for b, kb in zip(pooled.index, _split_counts(k, pooled.to_numpy())):
                pool = cell[cell["age_bin"] == b]["pos"].to_numpy()
                chosen.append(_draw(rng, pool, kb, replace, f"group {g!r} label {y} age bin {int(b)}"))
    params = {"group_col": group_col, "label_col": label_col, "n_per_group": n, "replace": replace}
    if age_col is not None:
        params.update(age_col=age_col, age_bins=[float(b) for b in age_bins], rows_without_age=n_drop)
    return _result("balanced_groups" + ("+age" if age_col else ""), seed, chosen, df, params)


def _matched_counts(df: pd.DataFrame, n: int) -> dict[tuple, int]:
    """Samples per (group, label, age bin) that an age-matched draw of `n` per group takes (as balance_groups)."""
    need = {}
    for g in df["group"].unique():
        part = df[df["group"] == g]
        n_pos = int(round(n * part["label"].mean()))
        for y, k in ((1, n_pos), (0, n - n_pos)):
            pooled = df[df["label"] == y]["age_bin"].value_counts().sort_index()
            need.update({(g, y, b): kb for b, kb in zip(pooled.index, _split_counts(k, pooled.to_numpy()))})
    return need


def _largest_matched_n(df: pd.DataFrame, upper: int) -> int:
    """The largest group size (<= the smallest group) an age-matched draw without replacement can fill: taking
    a whole group rarely fits, as its age mix differs from the pooled one. Bisection: feasibility is monotone up
    to rounding, and only a size that was checked to fit is returned."""
    have = df.groupby(["group", "label", "age_bin"]).size().to_dict()

    def fits(n: int) -> bool:
        return all(k <= have.get(key, 0) for key, k in _matched_counts(df, n).items())

    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def prevalence_balanced(
    samples: pd.DataFrame,
    group_col: str,
    label_col: str = "label",
    seed: int = 0,
    n_per_cell: int | None = None,
    replace: bool = False,
    id_col: str = "sample_id",
) -> Resampled:
    """Prevalence-corrected balanced set: the same number of positives and of negatives in every
    group (by default the smallest group x label cell)."""
    df = _prepare(samples, group_col, label_col, id_col)
    rng = np.random.default_rng(seed)
    cells = df.groupby(["group", "label"]).size()
    groups = sorted(df["group"].unique(), key=str)
    full = [cells.get((g, y), 0) for g in groups for y in (0, 1)]
    n = int(n_per_cell) if n_per_cell is not None else int(min(full))
    if n <= 0:
        raise InputError(
            f"resampling: a group has no positives or no negatives (cell sizes {dict(cells)}); "
            "prevalence-balanced sets need both in every group"
        )
    chosen = [
        _draw(rng, df[(df["group"] == g) & (df["label"] == y)]["pos"].to_numpy(), n, replace, f"group {g!r} label {y}")
        for g in groups for y in (0, 1)
    ]
    params = {"group_col": group_col, "label_col": label_col, "n_per_cell": n, "replace": replace}
    return _result("prevalence_balanced", seed, chosen, df, params)


#: the --test-resample methods: spec word -> what it draws
RESAMPLE_METHODS = {
    "balanced": "equal-size groups, each keeping its own prevalence (balance_groups)",
    "prevalence": "the same number of positives and of negatives in every group (prevalence_balanced)",
    "matched": "equal-size groups, each keeping its prevalence, with the pooled age-bin distribution per label "
               "(balance_groups with an age column)",
}
#: what the original and resampled test sets are compared on, side by side (rates at the global FPR-0.2 threshold)
RESAMPLE_METRICS = ("prevalence", "auc", "tpr_at_fpr20", "fpr_at_fpr20", "youden_j_at_fpr20")
RESAMPLE_SYNTAX = "balanced:ATTR | prevalence:ATTR | matched:ATTR:AGE_BINS (e.g. matched:sex:0,40,60,80)"


@dataclass(frozen=True)
class ResampleSpec:
    """A parsed --test-resample value: the method, the attribute whose groups are resampled and, for
    `matched`, the age-bin edges (left-closed [e_i, e_i+1); ages outside them are left out)."""

    method: str
    attribute: str
    age_bins: tuple[float, ...] = ()

    def __str__(self) -> str:
        bins = ":" + ",".join(f"{b:g}" for b in self.age_bins) if self.method == "matched" else ""
        return f"{self.method}:{self.attribute}{bins}"


def parse_test_resample(text: str) -> ResampleSpec:
    """Parse 'balanced:ATTR', 'prevalence:ATTR' or 'matched:ATTR:AGE_BINS' (AGE_BINS increasing edges
    such as 0,40,60,80); anything else is an InputError that shows the syntax."""
    method, sep, rest = (text or "").strip().partition(":")
    if method not in RESAMPLE_METHODS or not sep or not rest.strip():
        raise InputError(f"--test-resample {text!r}: expected {RESAMPLE_SYNTAX}")
    if method != "matched":
        return ResampleSpec(method, rest.strip())
    attr, sep, edges = rest.rpartition(":")
    if not sep or not attr.strip():
        raise InputError(f"--test-resample {text!r}: matched needs the age bins after the attribute, "
                         "e.g. matched:sex:0,40,60,80")
    try:
        bins = tuple(float(e) for e in edges.split(","))
    except ValueError:
        raise InputError(f"--test-resample {text!r}: age bins {edges!r} must be numbers, e.g. 0,40,60,80") from None
    if len(bins) < 2 or any(not b < c for b, c in zip(bins, bins[1:])) or any(np.isnan(bins)):
        raise InputError(f"--test-resample {text!r}: age bins need at least two strictly increasing edges, "
                         "e.g. 0,40,60,80")
    return ResampleSpec(method, attr.strip(), bins)


def matched_age_column(spec: ResampleSpec, dcard: DatasetCard) -> str | None:
    """The raw numeric age column `matched` draws by (the dataset card's binned attribute named age); None for the
    other methods; a card without one: InputError."""
    if spec.method != "matched":
        return None
    ages = [a for a in dcard.attributes if a.bins and a.name.startswith("age")]
    if not ages:
        raise InputError(f"--test-resample {spec}: matched needs each sample's age; dataset {dcard.name!r} has no "
                         "numeric age attribute")
    return ages[0].column


def resample_test_set(spec: ResampleSpec, groups: ArrayLike, labels: ArrayLike, ids: ArrayLike, seed: int,
                      ages: ArrayLike | None = None, columns: dict[str, str] | None = None) -> Resampled:
    """`apply_test_resample` on arrays of the test rows: each row's group (None = missing), 0/1 label, id and,
    for `matched`, age. `columns` names where they came from (group_col, label_col, age_col), recorded in the
    params; the positions index these arrays."""
    table = pd.DataFrame({"group": np.asarray(groups, dtype=object), "label": np.asarray(labels),
                          "sample_id": np.asarray(ids).astype(str)})
    if spec.method == "matched":
        if ages is None:
            raise InputError(f"--test-resample {spec}: matched resampling needs each test sample's age")
        table["age"] = np.asarray(ages)
    res = apply_test_resample(table, spec, "label", seed=seed, id_col="sample_id", age_col="age", group_col="group")
    return replace(res, params={**res.params, **(columns or {})})


def apply_test_resample(samples: pd.DataFrame, spec: ResampleSpec, label_col: str = "label", seed: int = 0,
                        id_col: str = "sample_id", age_col: str = "age", group_col: str | None = None
                        ) -> Resampled:
    """Draw the test set `spec` asks for from `samples` (one row per test sample). Groups are read from
    `group_col` (default: the spec's attribute); `age_col` is used by `matched` only."""
    col = group_col or spec.attribute
    if spec.method == "balanced":
        res = balance_groups(samples, col, label_col, seed=seed, id_col=id_col)
    elif spec.method == "prevalence":
        res = prevalence_balanced(samples, col, label_col, seed=seed, id_col=id_col)
    else:
        if age_col not in samples.columns:
            raise InputError(f"--test-resample {spec}: age column {age_col!r} not in the test table; name it "
                             "with the age-column option")
        res = balance_groups(samples, col, label_col, seed=seed, age_col=age_col,
                             age_bins=spec.age_bins, id_col=id_col)
    return Resampled(res.method, res.seed, res.positions, res.ids, res.counts,
                     {**res.params, "spec": str(spec)})
