"""Encoding inspection (Glocker et al., "Algorithmic encoding of protected characteristics in chest X-ray
disease detection models", eBioMedicine 2023): how well frozen features predict a protected attribute
(SPLIT probe), a multitask head, PCA modes / t-SNE, and two-sample KS tests between groups on each mode,
corrected for multiple testing over the whole family of comparisons.

Torch-free: numpy, scipy and scikit-learn only (sklearn is imported inside the functions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import ArrayLike

from fairmedbench.errors import InputError
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics.auc import weighted_auc
from fairmedbench.metrics.groups import make_attribute
from fairmedbench.metrics.stats import ADJUST_METHODS, KSRecord, correct_ks, ks_between_groups

CORRECT_PER = ("family", "attribute")


@dataclass(frozen=True)
class Target:
    """A categorical variable to probe or compare: a code per row (-1 = missing) and the class names."""

    name: str
    codes: np.ndarray
    classes: tuple[str, ...]


def make_target(name: str, values: ArrayLike, *, min_classes: int = 2, what: str = "attribute") -> Target:
    """Encode a label or attribute column; one class (or none) is an InputError naming the column."""
    a = make_attribute(name, values)
    present = np.unique(a.codes[a.codes >= 0])
    if present.size < min_classes:
        only = ", ".join(a.groups[int(c)] for c in present) or "no values"
        raise InputError(f"{what} column {name!r} has {present.size} distinct value(s) ({only}); it needs at "
                         f"least {min_classes} to be probed or compared: pick another column")
    return Target(name, a.codes, a.groups)


def check_features(x: ArrayLike, names: Sequence[str] | None = None, what: str = "embeddings") -> np.ndarray:
    """A finite (n, d) float64 matrix; NaN or infinite entries are an InputError naming row and column."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{what}: feature values must be numbers") from None
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputError(f"{what}: expected a non-empty (samples, features) matrix, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        col = names[c] if names is not None else str(c)
        raise InputError(f"{what}: {int(bad.sum())} feature value(s) are NaN or infinite (first at row {r}, "
                         f"column {col!r}); drop or impute those rows first")
    return arr


def check_rows(n_features: int, **columns: Sized) -> None:
    """Every label/attribute column has one value per feature row."""
    bad = {k: len(v) for k, v in columns.items() if len(v) != n_features}
    if bad:
        desc = ", ".join(f"{k} has {n}" for k, n in bad.items())
        raise InputError(f"row counts differ: the features have {n_features} rows but {desc}; "
                         "give one row per sample, in the same order")


def holdout_split(n: int, strata: np.ndarray, holdout: float, seed: int,
                  units: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of held-out rows: a seeded share `holdout` of each stratum, drawn by unit (patient)
    when `units` is given so that no patient is on both sides."""
    if not 0.05 <= holdout <= 0.95:
        raise InputError(f"--holdout must be in [0.05, 0.95], got {holdout}")
    rng = np.random.default_rng([seed, 0x5917])
    unit = np.arange(n) if units is None else np.unique(np.asarray(units).astype(str), return_inverse=True)[1]
    # a unit's stratum = the stratum of its first row (a patient's rows share a label in practice)
    first = np.full(unit.max() + 1, -1)
    first[unit[::-1]] = np.arange(n)[::-1]
    unit_stratum = np.asarray(strata)[first]
    held = np.zeros(unit.max() + 1, dtype=bool)
    for s in np.unique(unit_stratum):
        members = np.flatnonzero(unit_stratum == s)
        k = int(round(members.size * holdout))
        held[rng.permutation(members)[:k]] = True
    return held[unit]


def _standardise(x_train: np.ndarray, x: np.ndarray) -> np.ndarray:
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    return (x - mean) / np.where(std > 1e-12, std, 1.0)


def logistic_probe(x: np.ndarray, codes: np.ndarray, train: np.ndarray, test: np.ndarray, seed: int = 0,
                   c: float = 1.0) -> np.ndarray:
    """Class probabilities (n_test, K) of a logistic regression (multinomial for K > 2) fitted on the
    standardised train rows; rows with a missing code (-1) are left out of the fit."""
    from sklearn.linear_model import LogisticRegression

    fit = train & (codes >= 0)
    classes = np.unique(codes[fit])
    k = int(codes.max()) + 1
    if classes.size < 2:
        raise InputError("the train part holds one class only: the probe cannot be fitted (more samples or "
                         "another --holdout)")
    model = LogisticRegression(C=c, max_iter=2000, random_state=seed)
    model.fit(_standardise(x[fit], x[fit]), codes[fit])
    prob = np.zeros((int(test.sum()), k))
    prob[:, classes] = model.predict_proba(_standardise(x[fit], x[test]))
    return prob


@dataclass(frozen=True)
class AUCRecord:
    """One held-out AUC (one-vs-rest for a class or group, or `__macro__` = mean over classes) with CI."""

    target: str
    features: str
    group: str
    n: int
    n_pos: int
    value: float
    ci_low: float
    ci_high: float


def _ovr_aucs(codes: np.ndarray, prob: np.ndarray, classes: Sequence[str], weights: np.ndarray) -> np.ndarray:
    """(B, K) one-vs-rest AUC of each class (NaN for a class absent from the evaluated rows)."""
    out = np.full((weights.shape[0], len(classes)), np.nan)
    for k in range(len(classes)):
        y = codes == k
        if y.any() and (~y).any():
            out[:, k] = weighted_auc(y, prob[:, k], weights)
    return out


def binary_columns(classes: Sequence[str]) -> list[int]:
    """Which classes get their own AUC row: both of a binary target report the same AUC, so only the
    second is kept (e.g. 'M' vs 'F'); a multi-class target reports each class one-vs-rest."""
    return [1] if len(classes) == 2 else list(range(len(classes)))


def held_out_aucs(target: str, codes: np.ndarray, probs: Mapping[str, np.ndarray], classes: Sequence[str], *,
                  reference: str | None = None, n_boot: int = bs.N_BOOT, seed: int = 0,
                  level: float = 0.95) -> list[AUCRecord]:
    """AUC of each feature set's probabilities on the same held-out rows, one-vs-rest per class plus the
    macro mean, with percentile CIs from one shared bootstrap (stratified by class) so that differences
    to `reference` ("<name> - <reference>" rows) are paired."""
    bs.check_settings(n_boot, level, 0)
    keep = codes >= 0
    codes = codes[keep]
    n = codes.size
    rng = bs.stable_seed(seed, "split-probe", target)
    weights = np.zeros((n_boot, n))
    for k in np.unique(codes):
        idx = np.flatnonzero(codes == k)
        weights[:, idx] = bs.resample_counts(rng, idx.size, n_boot)
    cols = binary_columns(classes)
    point, boot = {}, {}
    for name, prob in probs.items():
        p = np.asarray(prob)[keep]
        pt = _ovr_aucs(codes, p, classes, np.ones((1, n)))[0]
        bt = _ovr_aucs(codes, p, classes, weights) if n_boot else np.empty((0, len(classes)))
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                macro_pt, macro_bt = np.nanmean(pt[cols]), np.nanmean(bt[:, cols], axis=1)
        point[name] = np.r_[pt[cols], macro_pt] if len(cols) > 1 else pt[cols]
        boot[name] = np.column_stack([bt[:, cols], macro_bt]) if len(cols) > 1 else bt[:, cols]
    labels = [str(classes[k]) for k in cols] + (["__macro__"] if len(cols) > 1 else [])
    n_pos = [int((codes == k).sum()) for k in cols] + ([n] if len(cols) > 1 else [])
    rows = []
    series = list(point.items())
    if reference is not None and reference in point:
        series += [(f"{name} - {reference}", point[name] - point[reference]) for name in point if name != reference]
        for name in list(point):
            if name != reference:
                boot[f"{name} - {reference}"] = boot[name] - boot[reference]
    for name, pt in series:
        lo, hi = bs.percentile_ci(boot[name], level) if n_boot else (np.full(len(pt), np.nan),) * 2
        for j, lab in enumerate(labels):
            rows.append(AUCRecord(target, name, lab, n, n_pos[j], float(pt[j]), float(lo[j]), float(hi[j])))
    return rows


def multitask_head(x: np.ndarray, targets: Sequence[Target], train: np.ndarray, test: np.ndarray, *,
                   hidden: int = 64, seed: int = 0, n_boot: int = bs.N_BOOT) -> list[AUCRecord]:
    """One head with a shared hidden layer predicting every target at once (sklearn MLPClassifier with
    one sigmoid output per class of each target), fitted on the train rows; held-out AUC per target
    (one-vs-rest per class, macro for multi-class) with bootstrap CIs. Rows missing any target are left out."""
    from sklearn.neural_network import MLPClassifier

    complete = np.all([t.codes >= 0 for t in targets], axis=0)
    fit, ev = train & complete, test & complete
    blocks: list[np.ndarray] = []
    spans: list[tuple[int, int]] = []
    for t in targets:
        onehot = (t.codes[:, None] == np.arange(len(t.classes))[None, :]).astype(int)
        spans.append((sum(b.shape[1] for b in blocks), len(t.classes)))
        blocks.append(onehot)
    y = np.hstack(blocks)
    for t in targets:
        if np.unique(t.codes[fit]).size < 2:
            raise InputError(f"multitask head: the train part holds one class of {t.name!r} only")
    head = MLPClassifier(hidden_layer_sizes=(hidden,), max_iter=1000, random_state=seed, early_stopping=False)
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        head.fit(_standardise(x[fit], x[fit]), y[fit])
    prob = head.predict_proba(_standardise(x[fit], x[ev]))
    rows: list[AUCRecord] = []
    for t, (start, k) in zip(targets, spans):
        rows += held_out_aucs(t.name, t.codes[ev], {"multitask": prob[:, start:start + k]}, t.classes,
                              n_boot=n_boot, seed=seed)
    return rows


@dataclass(frozen=True)
class Modes:
    """Features projected on their first principal modes (or given modes), with explained variance."""

    values: np.ndarray
    names: tuple[str, ...]
    explained_variance_ratio: tuple[float, ...] | None
    projected_in_input: bool


def pca_modes(x: np.ndarray, n_modes: int = 4, seed: int = 0) -> Modes:
    """The first `n_modes` PCA modes (sklearn PCA on all rows) and their explained-variance ratios."""
    from sklearn.decomposition import PCA

    k = min(n_modes, x.shape[0], x.shape[1])
    pca = PCA(n_components=k, random_state=seed)
    values = pca.fit_transform(x)
    return Modes(values, tuple(f"PCA Mode {i + 1}" for i in range(k)),
                 tuple(float(v) for v in pca.explained_variance_ratio_), False)


def tsne_2d(x: np.ndarray, seed: int = 0, perplexity: float = 30.0) -> np.ndarray:
    """A 2-D t-SNE of the rows (scikit-learn; perplexity capped below the number of rows)."""
    from sklearn.manifold import TSNE

    p = min(perplexity, max(2.0, (x.shape[0] - 1) / 3))
    return TSNE(n_components=2, init="pca", learning_rate="auto", perplexity=p, random_state=seed).fit_transform(x)


@dataclass
class KSFamily:
    """Every KS test, corrected together (`per="family"`) or within each variable (`per="attribute"`); each
    record names its `variable`, its mode as `feature`, and its groups in the variable's class order."""

    rows: list[KSRecord]
    correction: str
    per: str
    alpha: float
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)


def ks_family(modes: np.ndarray, mode_names: Sequence[str], variables: Sequence[Target], *,
              pairs: Mapping[str, Sequence[tuple[str, str]]] | None = None, correction: str = "by",
              per: str = "family", alpha: float = 0.05) -> KSFamily:
    """Two-sample KS tests (scipy ks_2samp via metrics.stats) of every mode between each pair of classes of
    each variable (or only the `pairs` given for a variable), then one multiple-testing correction over
    the whole family (default) or per variable."""
    if correction not in ADJUST_METHODS:
        raise InputError(f"--correction {correction!r}: choose one of {', '.join(ADJUST_METHODS)}")
    if per not in CORRECT_PER:
        raise InputError(f"--correct-per {per!r}: choose one of {', '.join(CORRECT_PER)}")
    pairs = pairs or {}
    raw: list[KSRecord] = []
    skipped: dict[str, dict[str, str]] = {}
    for v in variables:
        names = np.array(v.classes, dtype=object)
        present = v.codes >= 0
        wanted = pairs.get(v.name)
        if wanted:
            unknown = sorted({g for p in wanted for g in p} - set(v.classes))
            if unknown:
                raise InputError(f"pair(s) for {v.name!r} name unknown class(es) {unknown}; its classes are "
                                 f"{', '.join(v.classes)}")
        labels = names[np.maximum(v.codes, 0)]
        res = ks_between_groups(modes[present], labels[present].astype(str), list(mode_names), correction="none",
                                alpha=alpha)
        if res.skipped:
            skipped[v.name] = {str(k): s for k, s in res.skipped.items()}
        order = {c: i for i, c in enumerate(v.classes)}
        for r in res.records:
            a, b = sorted((str(r.group_a), str(r.group_b)), key=order.__getitem__)
            na, nb = (r.n_a, r.n_b) if a == str(r.group_a) else (r.n_b, r.n_a)
            if wanted and (a, b) not in {tuple(sorted(p, key=order.__getitem__)) for p in wanted}:
                continue
            raw.append(replace(r, variable=v.name, group_a=a, group_b=b, n_a=na, n_b=nb))
    mode_rank = {m: i for i, m in enumerate(mode_names)}
    var_names = [x.name for x in variables]
    raw.sort(key=lambda r: (mode_rank[r.feature], var_names.index(r.variable)))
    if per == "family":
        rows = correct_ks(raw, correction, alpha)
    else:
        per_variable = {name: iter(correct_ks([r for r in raw if r.variable == name], correction, alpha))
                        for name in var_names}
        rows = [next(per_variable[r.variable]) for r in raw]
    return KSFamily(rows, correction, per, alpha, skipped)


def class_pairs(spec: str) -> list[tuple[str, str]]:
    """'A:B,C:D' -> [('A', 'B'), ('C', 'D')]."""
    out = []
    for part in spec.split(","):
        a, sep, b = part.partition(":")
        if not sep or not a.strip() or not b.strip() or a.strip() == b.strip():
            raise InputError(f"--label-pair {spec!r}: expected CLASS_A:CLASS_B (two different classes), "
                             "e.g. 'Pleural Effusion:No Finding'")
        out.append((a.strip(), b.strip()))
    return out
