"""Hidden-subgroup (slice) discovery: coherent regions of a model's embedding space where it errs more.

Method: Domino's error-aware mixture model (Eyuboglu et al., "Domino: Discovering Systematic Errors with
Cross-Modal Embeddings", ICLR 2022). It was chosen because it is the published slice-discovery method with the
strongest benchmark evidence (dcbench: 1,235 settings, medical images included, where it beat clustering and
error-only baselines), it needs only embeddings, labels and scores (no retraining), and its slices can be named
by the text prompts closest to them when the embedding space is shared with text. Here: a diagonal Gaussian
mixture (scikit-learn's GaussianMixture) over [the embedding's whitened PCA components, a per-sample error
term]; the error term is |y - r| with r the score's rank on the discovery half (so logits and probabilities give
the same slices), repeated `error_weight` times, which with diagonal covariances multiplies its log-likelihood
by that weight (Domino's y/ŷ weights). Weight 1 is the default: on the simulated acceptance data (10 seeds,
6 components) the hidden subgroup was found in 6 seeds with weight 0 (embedding alone), 9 with 1, 1 with 2 and
0 with 8 (a heavy error term makes components of error levels, not of regions).

No double dipping: patients are split in two seeded halves. The mixture is fitted, and its components ranked by
their AUC gap, on the discovery half only. On the held-out half every row joins the component that its
embedding alone makes most likely (the mixture's marginal over the embedding dimensions), so a held-out row's
own error never chooses its slice; each candidate's gap (AUC of the rest minus AUC of the slice) is tested
there by permuting slice membership of (patient, in-slice) units within label strata, as the metric engine
permutes group labels (one-sided: the slice is worse), and the p-values
are adjusted over the candidates tested (Benjamini-Yekutieli by default). Each slice is described by the
enrichment of every recorded attribute on the held-out half (its share in the slice against the rest, Fisher's
exact test, adjusted over the family) and, with text embeddings, by the prompts closest to the direction from
the held-out mean to the slice's mean."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fairmedbench.analysis.encoding import Target, holdout_split, logistic_probe
from fairmedbench.errors import InputError
from fairmedbench.metrics.auc import weighted_auc
from fairmedbench.metrics.bootstrap import label_strata, make_units, permutation_p, permuted_groups, unit_group
from fairmedbench.metrics.stats import ADJUST_METHODS, adjust_pvalues

#: fewer held-out positives or negatives than this in a slice (or in its rest): the gap is not tested
MIN_PER_CLASS = 5


@dataclass(frozen=True)
class Enrichment:
    """One recorded group's share of a slice against the rest of the held-out half (Fisher's exact test)."""

    attribute: str
    group: str
    n_in_slice: int
    share_slice: float
    share_rest: float
    share_all: float
    p_value: float
    p_adjusted: float = math.nan


@dataclass(frozen=True)
class Prompt:
    """A text prompt and its cosine similarity to the slice's direction in the embedding space."""

    text: str
    similarity: float


@dataclass
class Slice:
    """One candidate slice: its mixture component, sizes, discovery and held-out gaps, test and description."""

    component: int
    n_discovery: int
    discovery_gap: float
    n: int
    n_pos: int
    share: float
    auc_slice: float
    auc_rest: float
    gap: float
    p_value: float
    p_adjusted: float = math.nan
    significant: bool = False
    why_untested: str | None = None
    enrichment: list[Enrichment] = field(default_factory=list)
    prompts: list[Prompt] = field(default_factory=list)


@dataclass
class Discovery:
    """Every candidate slice (most significant first), the halves, each row's component and the settings."""

    slices: list[Slice]
    holdout: np.ndarray
    component: np.ndarray
    settings: dict[str, float | int | str]
    notes: list[str]

    def members(self, s: Slice) -> np.ndarray:
        """Held-out rows in slice `s` (a boolean mask over every row)."""
        return self.holdout & (self.component == s.component)


def _check(x: np.ndarray, y: np.ndarray, score: np.ndarray) -> None:
    if x.ndim != 2 or y.shape != (x.shape[0],) or score.shape != (x.shape[0],):
        raise InputError(f"slice discovery: features {x.shape}, labels {y.shape} and scores {score.shape} need one "
                         "row per sample")
    if not np.isfinite(score).all():
        bad = int(np.flatnonzero(~np.isfinite(score))[0])
        raise InputError(f"slice discovery: the scores hold NaN or infinite values (first at row {bad}); drop them")
    if not np.isin(y, (0, 1)).all() or np.unique(y).size < 2:
        raise InputError("slice discovery needs a binary label with both classes present (0/1); choose one class "
                         "against the rest with --discover-positive CLASS")


def _error_terms(y: np.ndarray, score: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """|y - r| with r each score's mid-rank among the discovery half's scores, in [0, 1]."""
    ref = np.sort(score[fit])
    r = (np.searchsorted(ref, score, side="left") + np.searchsorted(ref, score, side="right")) / (2.0 * ref.size)
    return np.abs(y - r)


def _auc_gap(y: np.ndarray, s: np.ndarray, member: np.ndarray) -> np.ndarray:
    """AUC of the rest minus AUC of the slice, for each row of the (B, n) membership matrix."""
    m = np.atleast_2d(member).astype(np.float64)
    return weighted_auc(y, s, 1.0 - m) - weighted_auc(y, s, m)


def _permutation_p(y: np.ndarray, s: np.ndarray, member: np.ndarray, patients: np.ndarray | None, n_perm: int,
                   rng: np.random.Generator) -> float:
    """One-sided p of the held-out gap: membership of the (patient, in-slice) units permuted within label strata,
    as the metric engine permutes group labels (a patient's rows move together)."""
    codes = member.astype(np.int64)
    units = make_units(codes, patients)
    strata = label_strata(units, np.arange(len(y)), y, (1, 0))
    perm = permuted_groups(rng, strata, unit_group(units, codes), n_perm)[:, units.of_row]
    return permutation_p(float(_auc_gap(y, s, member)[0]), _auc_gap(y, s, perm == 1), "greater")[0]


def _classes_ok(y: np.ndarray, member: np.ndarray) -> bool:
    return all(int(((y == c) & part).sum()) >= MIN_PER_CLASS for c in (0, 1) for part in (member, ~member))


def _enrichment(member: np.ndarray, attributes: Sequence[Target], held: np.ndarray) -> list[Enrichment]:
    from scipy.stats import fisher_exact

    out = []
    for t in attributes:
        codes = t.codes[held]
        ok = codes >= 0
        m = member[held][ok]
        c = codes[ok]
        if m.sum() == 0 or (~m).sum() == 0:
            continue
        for g, name in enumerate(t.classes):
            a, b = int((m & (c == g)).sum()), int((~m & (c == g)).sum())
            if a + b == 0:
                continue
            p = float(fisher_exact([[a, int(m.sum()) - a], [b, int((~m).sum()) - b]]).pvalue)
            out.append(Enrichment(t.name, name, a, a / m.sum(), b / (~m).sum(), (a + b) / ok.sum(), p))
    return out


def _prompts(x: np.ndarray, member: np.ndarray, held: np.ndarray, text: np.ndarray, prompts: Sequence[str],
             top: int) -> list[Prompt]:
    """Prompts closest (cosine) to the slice mean minus the held-out mean (Domino's description step)."""
    direction = x[member].mean(axis=0) - x[held].mean(axis=0)
    norm = np.linalg.norm(direction) * np.linalg.norm(text, axis=1)
    sim = (text @ direction) / np.where(norm > 0, norm, 1.0)
    order = np.argsort(-sim, kind="stable")[:top]
    return [Prompt(prompts[i], float(sim[i])) for i in order]


def _components(x: np.ndarray, y: np.ndarray, score: np.ndarray, fit: np.ndarray, n_components: int, n_pca: int,
                error_weight: int, seed: int) -> tuple[np.ndarray, int]:
    """Each row's mixture component (fitted on the `fit` rows over whitened PCA components and the error term;
    the other rows by the marginal over the embedding dimensions) and the number of PCA components."""
    from sklearn.decomposition import PCA
    from sklearn.mixture import GaussianMixture

    k_pca = min(n_pca, x.shape[1], int(fit.sum()) - 1)
    z = PCA(n_components=k_pca, whiten=True, random_state=seed).fit(x[fit]).transform(x)
    err = _error_terms(y.astype(np.float64), score, fit)
    feats = np.hstack([z, np.repeat(err[:, None], error_weight, axis=1)])
    gmm = GaussianMixture(n_components, covariance_type="diag", reg_covar=1e-4, n_init=3, random_state=seed)
    gmm.fit(feats[fit])
    component = np.empty(len(y), dtype=np.int64)
    component[fit] = gmm.predict(feats[fit])
    # held-out rows: the marginal over the embedding dimensions (diagonal covariances: drop the error columns)
    mu, var = gmm.means_[:, :k_pca], gmm.covariances_[:, :k_pca]
    zh = z[~fit]
    loglik = (np.log(gmm.weights_)[None, :]
              - 0.5 * (((zh[:, None, :] - mu[None]) ** 2) / var[None] + np.log(2 * np.pi * var)[None]).sum(axis=2))
    component[~fit] = loglik.argmax(axis=1)
    return component, k_pca


def _adjust(slices: list[Slice], correction: str, alpha: float) -> None:
    """Adjust the tested slices' p-values, and separately their attribute enrichments', over the family."""
    tested = [s for s in slices if math.isfinite(s.p_value)]
    if tested:
        for s, p in zip(tested, adjust_pvalues([s.p_value for s in tested], correction)):
            s.p_adjusted, s.significant = float(p), bool(p < alpha)
    family = [e for s in slices for e in s.enrichment]
    if family:
        adj = iter(adjust_pvalues([e.p_value for e in family], correction))
        for s in slices:
            s.enrichment = [Enrichment(**{**e.__dict__, "p_adjusted": float(next(adj))}) for e in s.enrichment]


def discover_slices(x: np.ndarray, y: np.ndarray, score: np.ndarray | None, *, attributes: Sequence[Target] = (),
                    patients: np.ndarray | None = None, n_components: int = 6, n_pca: int = 16,
                    error_weight: int = 1, n_perm: int = 1000, correction: str = "by", alpha: float = 0.05,
                    min_size: int = 20, seed: int = 0, text: np.ndarray | None = None,
                    prompts: Sequence[str] = (), top_prompts: int = 3) -> Discovery:
    """Fit the error-aware mixture on one half of the patients and test its worse-than-rest components on the
    other half (see the module docstring); `score=None` uses a logistic probe fitted on the discovery half."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    _check(x, y, np.zeros(len(y)) if score is None else np.asarray(score, dtype=np.float64))
    y = y.astype(np.int64)
    if correction not in ADJUST_METHODS:
        raise InputError(f"--correction {correction!r}: choose one of {', '.join(ADJUST_METHODS)}")
    if n_components < 2 or n_pca < 1 or error_weight < 0 or n_perm < 1 or min_size < 1:
        raise InputError("slice discovery: --slices must be >= 2, --slice-pca >= 1, --error-weight >= 0, "
                         "--n-perm >= 1 and --min-slice >= 1")
    if text is not None and (text.ndim != 2 or text.shape[1] != x.shape[1] or len(prompts) != text.shape[0]):
        raise InputError(f"text embeddings: {text.shape} for {len(prompts)} prompts; they need one row per prompt "
                         f"and the image embeddings' {x.shape[1]} dimensions")
    held = holdout_split(len(y), y, 0.5, seed, patients)
    fit = ~held
    notes = []
    if score is None:  # no model scores: a logistic probe fitted on the discovery half stands in for the model
        score = logistic_probe(x, y, fit, np.ones(len(y), dtype=bool), seed=seed)[:, 1]
        notes.append("scores: none given, so a logistic probe on the embeddings, fitted on the discovery half, "
                     "stands in for the model (its held-out scores are out of sample)")
    score = np.asarray(score, dtype=np.float64)
    if fit.sum() < 4 * n_components or held.sum() < 2 * min_size:
        raise InputError(f"slice discovery: {int(fit.sum())} discovery and {int(held.sum())} held-out rows are too "
                         f"few for {n_components} components and slices of >= {min_size} rows; give more samples "
                         "or fewer --slices")
    component, k_pca = _components(x, y, score, fit, n_components, n_pca, error_weight, seed)
    notes.insert(0, f"slice discovery: Domino-style mixture ({n_components} diagonal Gaussian components over {k_pca} "
             f"whitened PCA components and the error term x{error_weight}) fitted on {int(fit.sum())} rows; "
             f"tested on {int(held.sum())} held-out rows"
             + (" (split by patient)" if patients is not None else " (no patient column: split by row)"))
    rng = np.random.default_rng([seed, 0x511CE])
    yh, sh = y[held], score[held]
    ph = None if patients is None else np.asarray(patients)[held]
    slices: list[Slice] = []
    for k in range(n_components):
        disc = fit & (component == k)
        if disc.sum() < min_size or not _classes_ok(y[fit], disc[fit]):
            continue
        dgap = float(_auc_gap(y[fit], score[fit], disc[fit])[0])
        if not dgap > 0:
            continue
        mh = component[held] == k
        member = held & (component == k)
        n_in = int(mh.sum())
        auc_s = float(weighted_auc(yh, sh, mh[None].astype(float))[0]) if n_in else math.nan
        auc_r = float(weighted_auc(yh, sh, (~mh)[None].astype(float))[0])
        sl = Slice(k, int(disc.sum()), dgap, n_in, int(yh[mh].sum()), n_in / int(held.sum()), auc_s, auc_r,
                   auc_r - auc_s, math.nan)
        if n_in < min_size or not _classes_ok(yh, mh):
            sl.why_untested = (f"held-out slice has {n_in} rows ({sl.n_pos} positive); a test needs >= {min_size} "
                               f"rows and >= {MIN_PER_CLASS} of each class in the slice and the rest")
        else:
            sl.p_value = _permutation_p(yh, sh, mh, ph, n_perm, rng)
        if n_in:
            sl.enrichment = _enrichment(member, attributes, held)
            if text is not None:
                sl.prompts = _prompts(x, member, held, text, prompts, top_prompts)
        slices.append(sl)
    _adjust(slices, correction, alpha)
    slices.sort(key=lambda s: (not math.isfinite(s.p_adjusted), s.p_adjusted if math.isfinite(s.p_adjusted) else 1,
                               -s.gap if math.isfinite(s.gap) else 0.0))
    settings: dict[str, float | int | str] = {
        "method": "domino-gmm", "n_components": n_components, "n_pca": k_pca, "error_weight": error_weight,
        "n_perm": n_perm, "correction": correction, "alpha": alpha, "min_size": min_size, "seed": seed,
        "n_discovery": int(fit.sum()), "n_holdout": int(held.sum()),
        "split": "by patient" if patients is not None else "by row"}
    return Discovery(slices, held, component, settings, notes)


def hidden_subgroup_table(n: int = 2000, dim: int = 32, seed: int = 0, hidden: bool = True,
                          share: float = 0.15, strength: float = 4.0) -> dict[str, np.ndarray]:
    """A simulated embedding table with an unrecorded subgroup (`share` of the patients carry an acquisition
    artefact: a direction in the embedding and noisier scores), or its clean twin (`hidden=False`: the same
    draw without the artefact's effects). Columns: emb (n, dim), label, score, sex, site, patient_id, hidden."""
    rng = np.random.default_rng([seed, 0xA27E])
    label = rng.random(n) < 0.3
    sex = rng.random(n) < 0.5
    site = rng.integers(0, 3, n)
    art = rng.random(n) < share
    basis = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    emb = rng.normal(size=(n, dim))
    emb += 1.5 * label[:, None] * basis[0] + 1.0 * sex[:, None] * basis[1] + 2.0 * (site[:, None] == 1) * basis[2]
    logit = 2.5 * (label - 0.3) + rng.normal(size=n)
    if hidden:
        emb += strength * art[:, None] * basis[3]
        logit = np.where(art, 0.8 * (label - 0.3) + 1.5 * rng.normal(size=n), logit)
    return {"emb": emb, "label": label.astype(np.int64), "score": 1.0 / (1.0 + np.exp(-logit)),
            "sex": np.where(sex, "F", "M"), "site": np.array(["A", "B", "C"])[site],
            "patient_id": np.array([f"p{i}" for i in range(n)]), "hidden": art}
