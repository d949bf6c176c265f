"""Sensitive attributes: raw values -> named groups, age-style binning, intersectional crossing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError

MAX_GROUPS = 50
#: joins the attributes of a crossed attribute: 'sex*age' (its groups are the cells, 'female|>=60')
CROSS = "*"


@dataclass(frozen=True)
class Attribute:
    """One sensitive attribute: a group code per sample (-1 = missing) and the group names."""

    name: str
    codes: np.ndarray
    groups: tuple[str, ...]

    @property
    def n_missing(self) -> int:
        """Samples with no value for this attribute (left out of its analysis)."""
        return int((self.codes < 0).sum())


CLOSED = ("left", "right")


class Bins(list[float]):
    """Bin edges (a list of floats) and the side each bin includes: 'left' = [e_i, e_i+1) (default),
    'right' = (e_i, e_i+1] (pandas.cut's default)."""

    def __init__(self, edges: Sequence[float], closed: str = "left") -> None:
        if closed not in CLOSED:
            raise InputError(f"bins closed={closed!r}: choose 'left' ([a, b)) or 'right' ((a, b])")
        super().__init__(float(e) for e in edges)
        self.closed = closed


def bin_labels(edges: Sequence[float] | np.ndarray, closed: str = "left") -> list[str]:
    """Readable names: left-closed [e_i, e_i+1) -> '<40', '40-60', '>=60'; right-closed (e_i, e_i+1] ->
    '<=40', '(40,60]', '>60' (distinct names, so a table says which rule made it)."""
    fmt = [f"{e:g}" for e in edges]
    k = len(edges) - 1
    if closed == "right":
        if k == 1:
            return [f"({fmt[0]},{fmt[1]}]"]
        return [f"<={fmt[1]}"] + [f"({fmt[i]},{fmt[i + 1]}]" for i in range(1, k - 1)] + [f">{fmt[k - 1]}"]
    if k == 1:
        return [f"{fmt[0]}-{fmt[1]}"]
    return [f"<{fmt[1]}"] + [f"{fmt[i]}-{fmt[i + 1]}" for i in range(1, k - 1)] + [f">={fmt[k - 1]}"]


def parse_bins(spec: str, closed: str = "left") -> tuple[str, Bins]:
    """Parse 'age=0,40,60,200' into ('age', Bins([0, 40, 60, 200], closed)); edges must increase."""
    name, sep, rest = spec.partition("=")
    try:
        edges = [float(x) for x in rest.split(",")] if sep else []
    except ValueError:
        edges = []
    if not name or len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise InputError(f"--bins {spec!r}: expected NAME=E0,E1,...,Ek with increasing edges, e.g. age=0,40,60,200")
    return name, Bins(edges, closed)


def _is_missing_value(v: object) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and np.isnan(v)) or (
        isinstance(v, str) and v.strip() in ("", "nan", "NaN", "None"))


def _label(v: object) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v).strip()


def _factorize(values: ArrayLike) -> tuple[np.ndarray, list[Any]]:
    """Codes into the distinct raw values (-1 for missing) and those values; loops only over distinct values."""
    arr = np.asarray(values).ravel()
    if arr.dtype.kind in "iub":
        uniq, inv = np.unique(arr, return_inverse=True)
        return inv.astype(np.int64), list(uniq.tolist())
    if arr.dtype.kind == "f":
        missing = np.isnan(arr)
        uniq, inv = np.unique(arr[~missing], return_inverse=True)
        codes = np.full(len(arr), -1, dtype=np.int64)
        codes[~missing] = inv
        return codes, list(uniq.tolist())
    keys = arr.astype(str)
    uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    reps = [arr[i] for i in first]
    missing = np.array([_is_missing_value(v) for v in reps], dtype=bool)
    remap = np.full(len(uniq), -1, dtype=np.int64)
    remap[~missing] = np.arange(int((~missing).sum()))
    return remap[inv], [v for v, m in zip(reps, missing) if not m]


def make_attribute(
    name: str, values: ArrayLike, bins: Sequence[float] | None = None, max_groups: int = MAX_GROUPS
) -> Attribute:
    """Encode raw values (strings or numbers) as groups; numeric values are binned when `bins` is given
    (edges, left-closed, or a `Bins` that says which side is closed)."""
    codes, raw = _factorize(values)
    if bins is not None:
        edges = np.asarray(bins, dtype=np.float64)
        try:
            num = np.array([float(v) for v in raw], dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"attribute {name!r}: bins need numeric values, found {raw[0]!r}") from None
        right = getattr(bins, "closed", "left") == "right"
        out = ((num <= edges[0]) | (num > edges[-1])) if right else ((num < edges[0]) | (num >= edges[-1]))
        if out.any():
            n_out = int(np.isin(codes, np.nonzero(out)[0]).sum())
            span = f"({edges[0]:g}, {edges[-1]:g}]" if right else f"[{edges[0]:g}, {edges[-1]:g})"
            raise InputError(
                f"attribute {name!r}: {n_out} value(s) outside the bins {span}, "
                f"e.g. {num[out][0]:g}; widen the outer edges"
            )
        bin_of = np.searchsorted(edges, num, side="left" if right else "right") - 1
        binned = np.where(codes >= 0, bin_of[np.maximum(codes, 0)] if len(raw) else -1, -1)
        return Attribute(name, binned.astype(np.int64), tuple(bin_labels(edges, "right" if right else "left")))
    labels = [_label(v) for v in raw]
    uniq = sorted(set(labels), key=_sort_key)
    if len(uniq) > max_groups:
        raise InputError(
            f"attribute {name!r} has {len(uniq)} distinct values (more than {max_groups}); "
            f"give bins for it, e.g. --bins {name}=0,40,60,200"
        )
    lookup = np.array([uniq.index(lab) for lab in labels] + [-1], dtype=np.int64)
    return Attribute(name, lookup[codes], tuple(uniq))


def _sort_key(v: str) -> tuple[int, float, str]:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def crossed_parts(name: str) -> tuple[str, ...]:
    """The attributes a crossed name joins ('sex*age' -> ('sex', 'age')); () for a plain name. InputError for an
    empty or repeated part."""
    if CROSS not in name:
        return ()
    parts = tuple(p.strip() for p in name.split(CROSS))
    if any(not p for p in parts) or len(set(parts)) != len(parts):
        raise InputError(f"attribute {name!r}: a crossed attribute joins distinct attribute names with "
                         f"'{CROSS}', e.g. sex{CROSS}age")
    return parts


def cell_names(attribute: Attribute) -> np.ndarray:
    """Each sample's group name (None where missing), as an object array."""
    names: np.ndarray = np.array(list(attribute.groups) + [None], dtype=object)[attribute.codes]
    return names


def intersect(attributes: Sequence[Attribute], name: str | None = None) -> Attribute:
    """Cross attributes into intersectional groups named 'F|>=60'; missing in any part is missing. The crossed
    attribute is called `name` (default: the parts' names joined by '|')."""
    if len(attributes) < 2:
        raise InputError("intersecting needs at least two attributes")
    n = len(attributes[0].codes)
    combo = np.zeros(n, dtype=np.int64)
    missing = np.zeros(n, dtype=bool)
    for a in attributes:
        combo = combo * len(a.groups) + np.maximum(a.codes, 0)
        missing |= a.codes < 0
    present = np.unique(combo[~missing])
    names = []
    for c in present:
        parts = []
        for a in reversed(attributes):
            parts.append(a.groups[c % len(a.groups)])
            c //= len(a.groups)
        names.append("|".join(reversed(parts)))
    codes = np.full(n, -1, dtype=np.int64)
    codes[~missing] = np.searchsorted(present, combo[~missing])
    return Attribute(name or "|".join(a.name for a in attributes), codes, tuple(names))
