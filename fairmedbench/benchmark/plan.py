"""`benchmark plan`: how many patients per group an audit needs to detect a difference in AUC, TPR, FPR or DSC
between two groups (the permutation test of `evaluate`, two-sided), or to show equivalence within ±margin (its
TOST); normal approximation with Hanley-McNeil (AUC), binomial (TPR/FPR) or a per-image SD (DSC) variances and
the design effect 1 + (m-1)·ICC of m images per patient. `--check` re-derives the power by simulating audits of
the planned size and running the project's own test on each."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.spec import option

METRICS = ("auc", "tpr", "fpr", "dsc")
AUC_VARIANCES = ("hanley-mcneil", "binormal")
#: permutations per simulated audit (p = (1 + #)/(1 + n_perm) < alpha); bootstrap resamples per audit for the
#: reported MDE (a difference) or the TOST 90% interval (a margin)
CHECK_N_PERM = 199
CHECK_N_BOOT_MDE = 50
CHECK_N_BOOT_TOST = 200
#: how far the simulated power may stray from the asked one before --check fails (acceptance: ±10 points)
CHECK_TOLERANCE = 0.10
#: the largest simulated audit --check runs (images in both groups), and the largest plan searched
CHECK_MAX_IMAGES = 20_000
MAX_PATIENTS = 10_000_000
#: the fewest patients of a class (or, for DSC, of a group) a plan may rest on
MIN_UNITS = 2
Z = NormalDist()


@dataclass(frozen=True)
class PlanOptions:
    """`benchmark plan`'s options (field metadata: the flags)."""

    metric: str = field(default="auc", metadata=option(
        "the metric whose two-group difference the audit tests", choices=list(METRICS)))
    baseline: float | None = field(default=None, metadata=option(
        "its expected value in the first group, e.g. 0.80 (a DSC: the mean per-image DSC)", type=float,
        required=True))
    difference: float | None = field(default=None, metadata=option(
        "the true difference second group - first group: the one to detect (required), or with --margin the one "
        "assumed while showing equivalence (default 0)", type=float))
    prevalence: str | None = field(default=None, metadata=option(
        "expected share of positive patients per group: one value for both (0.3) or two named groups "
        "(F=0.2,M=0.3; the first is the baseline group); auc, tpr and fpr", metavar="P"))
    dsc_sd: float | None = field(default=None, metadata=option(
        "standard deviation of the per-image DSC within a group (dsc only), e.g. 0.1", type=float, metavar="SD"))
    auc_variance: str = field(default="hanley-mcneil", metadata=option(
        "Q1, Q2 of the AUC variance: Hanley & McNeil's exponential approximation, or binormal scores of equal "
        "variance (Q1 = Q2 = Φ2(h, h; 0.5), h = Φ^-1(AUC))", choices=list(AUC_VARIANCES)))
    images_per_patient: int = field(default=1, metadata=option(
        "images per patient m (all of a patient's images share its label and group)", metavar="M"))
    icc: float = field(default=0.0, metadata=option(
        "intra-patient correlation of the per-image outcome (score, prediction or DSC): design effect "
        "1 + (m-1)·ICC"))
    power: float = field(default=0.8, metadata=option("the power the audit should have"))
    alpha: float = field(default=0.05, metadata=option(
        "level: two-sided for a difference; each one-sided test of TOST with --margin (0.05 = the 90%% interval "
        "evaluate --margin uses)"))
    margin: float | None = field(default=None, metadata=option(
        "plan to show equivalence within ±M (TOST, as evaluate --margin) instead of detecting a difference",
        type=float, metavar="M"))
    check: bool = field(default=False, metadata=option(
        "verify by simulation: draw --replicates audits at the planned size, run evaluate's own test on each and "
        "compare the share that detects (or shows equivalence) with --power; cost grows with the plan's images: "
        "200 replicates of the AUC 0.80 vs 0.75 plan (3,760 images an audit) took 48 CPU-seconds on a 2-core "
        f"EPYC; audits over {CHECK_MAX_IMAGES:,} images are refused"))
    replicates: int = field(default=200, metadata=option("simulated audits for --check (at least 10)"))
    seed: int = field(default=0, metadata=option("seed of --check's simulation"))
    json: bool = field(default=False, metadata=option("print the plan as JSON"))


@dataclass(frozen=True)
class Group:
    """One group of the plan: its name, the metric's expected value and its prevalence (None for DSC)."""

    name: str
    value: float
    prevalence: float | None


@dataclass(frozen=True)
class Design:
    """A checked plan request: the two groups, the test and the clustering."""

    metric: str
    groups: tuple[Group, Group]
    difference: float
    margin: float | None
    sd: float  # the per-image DSC standard deviation (0 for other metrics)
    auc_variance: str
    images_per_patient: int
    icc: float
    power: float
    alpha: float

    @property
    def design_effect(self) -> float:
        """Variance inflation of a per-image mean over m images sharing a patient: 1 + (m-1)·ICC."""
        return 1.0 + (self.images_per_patient - 1) * self.icc


@dataclass
class Check:
    """What --check found: detections (or equivalences) among the replicates and the simulated power."""

    replicates: int
    hits: int
    power: float
    ci: tuple[float, float]
    asked: float
    passed: bool
    median_mde: float | None
    method: str


@dataclass
class Plan:
    """Patients per group and what they mean in images and positives, the formula and its assumptions."""

    design: Design
    patients: int
    power: float  # the normal-approximation power at `patients`
    formula: str
    assumptions: list[str]
    check: Check | None = None

    @property
    def passed(self) -> bool:
        """False only when a --check missed the asked power by more than CHECK_TOLERANCE."""
        return self.check is None or self.check.passed

    def counts(self) -> list[dict[str, Any]]:
        """Per group: patients, images, and (classification) positive and negative patients and images."""
        d, out = self.design, []
        for g in d.groups:
            row: dict[str, Any] = {"group": g.name, "value": g.value, "patients": self.patients,
                                   "images": self.patients * d.images_per_patient}
            if g.prevalence is not None:
                pos = round(g.prevalence * self.patients)
                row.update(prevalence=g.prevalence, positive_patients=pos, negative_patients=self.patients - pos,
                           positive_images=pos * d.images_per_patient)
            out.append(row)
        return out

    def document(self) -> dict[str, Any]:
        """JSON-ready plan."""
        return {"design": {**asdict(self.design), "design_effect": self.design.design_effect},
                "patients_per_group": self.patients, "groups": self.counts(), "normal_power": self.power,
                "formula": self.formula, "assumptions": self.assumptions,
                "check": None if self.check is None else asdict(self.check)}

    def lines(self) -> list[str]:
        """The plan in a few lines: the ask, the answer, the formula, the assumptions, the check."""
        d = self.design
        a, b = d.groups
        what = f"{d.metric.upper()} {b.name} {b.value:g} vs {a.name} {a.value:g} (difference {d.difference:+g})"
        if d.margin is None:
            ask = f"detect {what} with power {d.power:g}, alpha {d.alpha:g} two-sided (evaluate's permutation test)"
        else:
            ask = (f"show equivalence within ±{d.margin:g} when the truth is {what}, with power {d.power:g}, TOST at "
                   f"{d.alpha:g} a side (evaluate --margin {d.margin:g})")
        rows = self.counts()
        cases = [f"{r['positive_patients']:,} positive, {r['negative_patients']:,} negative (prevalence "
                 f"{r['prevalence']:g})" for r in rows if "prevalence" in r]
        if len(set(cases)) == 2:
            cases = [f"{r['group']}: {c}" for r, c in zip(rows, cases)]
        parts = [f"{self.patients * d.images_per_patient:,} images"] if d.images_per_patient > 1 else []
        parts += [*dict.fromkeys(cases), f"normal-approximation power {self.power:.3f}"]  # equal groups: once
        out = [f"plan: {ask}",
               f"patients per group: {self.patients:,} ({'; '.join(parts)})",
               f"formula: {self.formula}",
               "assumes: " + "; ".join(self.assumptions)]
        if (c := self.check) is not None:
            verdict = "within" if c.passed else "NOT within"
            mde = "" if c.median_mde is None else f"; median reported mde {c.median_mde:.3f}"
            out.append(f"check: simulated power {c.power:.3f} ({c.hits}/{c.replicates} replicates, 95% CI "
                       f"{c.ci[0]:.3f}-{c.ci[1]:.3f}) against {c.asked:g} asked: {verdict} ±"
                       f"{round(100 * CHECK_TOLERANCE)} points{mde} ({c.method})")
        return out


# --- the request -------------------------------------------------------------------------------------------------


def _prevalences(text: str | None, metric: str) -> list[tuple[str, float]] | None:
    """Two (group, prevalence) pairs from --prevalence; None for DSC. InputError on anything else."""
    if metric == "dsc":
        if text is not None:
            raise InputError("--prevalence does not apply to dsc (a DSC is averaged over every image); leave it out")
        return None
    if text is None:
        raise InputError(f"--prevalence is needed for {metric}: the expected share of positive patients per group, "
                         "e.g. --prevalence 0.3 or --prevalence F=0.2,M=0.3")
    parts = [p.strip() for p in text.split(",") if p.strip()]
    named = all("=" in p for p in parts)
    if not parts or (len(parts) == 1 and not named):
        pairs = [("group 1", text.strip()), ("group 2", text.strip())]
    elif named and len(parts) == 2:
        pairs = [(p.partition("=")[0].strip(), p.partition("=")[2]) for p in parts]
    else:
        pairs = []
    out = []
    for name, value in pairs:
        try:
            p = float(value)
        except ValueError:
            p = math.nan
        if not name or not 0.0 < p < 1.0:
            break
        out.append((name, p))
    if len(out) != 2 or out[0][0] == out[1][0]:
        raise InputError(f"--prevalence {text}: give one share in (0, 1) for both groups (0.3) or two named groups "
                         "(F=0.2,M=0.3)")
    return out


def make_design(o: PlanOptions) -> Design:
    """The checked request; InputError (one line, exit 2) on any input the plan cannot rest on."""
    if o.metric not in METRICS:
        raise InputError(f"--metric {o.metric}: one of {', '.join(METRICS)}")
    name = o.metric.upper()
    if o.baseline is None or not 0.0 < o.baseline < 1.0:
        raise InputError(f"--baseline {o.baseline}: the first group's {name} must be strictly between 0 and 1")
    if o.margin is not None and not (math.isfinite(o.margin) and o.margin > 0):
        raise InputError(f"--margin {o.margin}: an equivalence margin is a positive number, e.g. 0.05")
    if o.margin is None and o.difference is None:
        raise InputError("--difference is needed: the true difference to detect, e.g. --difference -0.05 (or plan "
                         "an equivalence with --margin)")
    diff = 0.0 if o.difference is None else o.difference
    if not math.isfinite(diff) or (o.margin is None and diff == 0):
        raise InputError(f"--difference {o.difference}: a nonzero difference to detect (to rule one out, plan an "
                         "equivalence with --margin)")
    second = o.baseline + diff
    if not 0.0 < second < 1.0:
        raise InputError(f"--difference {diff:+g}: the second group's {name} would be {second:g}, outside (0, 1)")
    if o.margin is not None and abs(diff) >= o.margin:
        raise InputError(f"--difference {diff:+g} is not inside the margin ±{o.margin:g}: equivalence cannot be shown "
                         "for a true difference at or beyond the margin")
    if o.images_per_patient < 1:
        raise InputError(f"--images-per-patient {o.images_per_patient}: at least 1")
    if not 0.0 <= o.icc <= 1.0:
        raise InputError(f"--icc {o.icc}: an intra-patient correlation between 0 and 1")
    if not 0.5 <= o.power < 1.0:
        raise InputError(f"--power {o.power}: a power in [0.5, 1), e.g. 0.8")
    if not 0.0 < o.alpha < 0.5:
        raise InputError(f"--alpha {o.alpha}: a level in (0, 0.5), e.g. 0.05")
    if o.metric == "dsc":
        if o.dsc_sd is None or not (math.isfinite(o.dsc_sd) and o.dsc_sd > 0):
            raise InputError("--dsc-sd is needed for dsc: the per-image DSC standard deviation within a group (> 0), "
                             "e.g. 0.1")
        for mean in (o.baseline, second):
            if o.dsc_sd >= math.sqrt(mean * (1 - mean)):
                raise InputError(f"--dsc-sd {o.dsc_sd:g}: a DSC in [0, 1] with mean {mean:g} has a standard deviation "
                                 f"below {math.sqrt(mean * (1 - mean)):.3f}")
    elif o.dsc_sd is not None:
        raise InputError(f"--dsc-sd applies to dsc only; {o.metric}'s variance follows from its value and prevalence")
    if o.check and o.replicates < 10:
        raise InputError(f"--replicates {o.replicates}: at least 10 simulated audits for --check")
    if o.check and o.margin is not None and o.alpha != 0.05:
        raise InputError(f"--check with --margin runs evaluate's TOST, whose interval is the 90% one (alpha 0.05 per "
                         f"side); --alpha {o.alpha:g} cannot be checked")
    prev = _prevalences(o.prevalence, o.metric)
    names = ("group 1", "group 2") if prev is None else (prev[0][0], prev[1][0])
    groups = (Group(names[0], o.baseline, None if prev is None else prev[0][1]),
              Group(names[1], second, None if prev is None else prev[1][1]))
    return Design(o.metric, groups, diff, o.margin, o.dsc_sd or 0.0, o.auc_variance, o.images_per_patient, o.icc,
                  o.power, o.alpha)


# --- the formula -------------------------------------------------------------------------------------------------


def hanley_mcneil_variance(auc: float, n_pos: float, n_neg: float, model: str = "hanley-mcneil") -> float:
    """Variance of an empirical AUC (Hanley & McNeil 1982, Radiology 143:29-36): [A(1-A) + (nP-1)(Q1-A²) +
    (nN-1)(Q2-A²)] / (nP·nN); Q1 (two positives above one negative) and Q2 (one positive above two negatives) by
    their exponential approximation Q1 = A/(2-A), Q2 = 2A²/(1+A), or for binormal scores of equal
    variance Q1 = Q2 = Φ2(h, h; 0.5) = Φ(h) - 2·T(h, 1/√3), h = Φ^-1(A), T Owen's T function."""
    if model == "binormal":
        from scipy.special import owens_t

        h = Z.inv_cdf(auc)
        q1 = q2 = Z.cdf(h) - 2 * float(owens_t(h, 1 / math.sqrt(3)))
    else:
        q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    a2 = auc * auc
    return (auc * (1 - auc) + (n_pos - 1) * (q1 - a2) + (n_neg - 1) * (q2 - a2)) / (n_pos * n_neg)


def _units(d: Design, g: Group, patients: int) -> tuple[float, float]:
    """Effective (independent) positive and negative images of group `g` at `patients` a group: images / DE."""
    n = patients * d.images_per_patient / d.design_effect
    p = 1.0 if g.prevalence is None else g.prevalence
    return n * p, n * (1 - p)


def _variance(d: Design, g: Group, value: float, patients: int) -> float:
    """Variance of group `g`'s estimate of the metric, were its true value `value`."""
    pos, neg = _units(d, g, patients)
    if d.metric == "auc":
        return hanley_mcneil_variance(value, pos, neg, d.auc_variance)
    if d.metric == "dsc":
        return d.sd ** 2 / pos
    return value * (1 - value) / (pos if d.metric == "tpr" else neg)


def _null_value(d: Design, patients: int) -> float:
    """The metric both groups share under the permutation null (group labels shuffled within label strata): the
    mean of the two values weighted by the units they are computed on (positives for AUC and TPR)."""
    a, b = d.groups
    weight = [_units(d, g, patients)[1 if d.metric == "fpr" else 0] for g in (a, b)]
    return (weight[0] * a.value + weight[1] * b.value) / (weight[0] + weight[1])


def normal_power(d: Design, patients: int) -> float:
    """Power at `patients` a group by the normal approximation: a difference's two-sided test with SE0 (null) and
    SE1 (truth), or TOST's two one-sided tests against ±margin with SE1."""
    a, b = d.groups
    se1 = math.sqrt(_variance(d, a, a.value, patients) + _variance(d, b, b.value, patients))
    if d.margin is not None:
        z = Z.inv_cdf(1 - d.alpha)
        return max(0.0, Z.cdf((d.margin - d.difference) / se1 - z) + Z.cdf((d.margin + d.difference) / se1 - z) - 1)
    null = _null_value(d, patients)
    se0 = math.sqrt(_variance(d, a, null, patients) + _variance(d, b, null, patients))
    return Z.cdf((abs(d.difference) - Z.inv_cdf(1 - d.alpha / 2) * se0) / se1)


def _enough(d: Design, patients: int) -> bool:
    """Whether `patients` a group reach the power (and at least MIN_UNITS patients of each class used)."""
    for g in d.groups:
        p = 1.0 if g.prevalence is None else g.prevalence
        classes = {"auc": (p, 1 - p), "tpr": (p,), "fpr": (1 - p,), "dsc": (1.0,)}[d.metric]
        if min(classes) * patients < MIN_UNITS:
            return False
    return normal_power(d, patients) >= d.power


def _formula(d: Design) -> str:
    if d.metric == "auc":
        q = ("Q1 = A/(2-A), Q2 = 2A²/(1+A)" if d.auc_variance == "hanley-mcneil" else
             "binormal Q1 = Q2 = Φ2(h, h; 0.5), h = Φ^-1(A)")
        se = f"SE² of each AUC by Hanley & McNeil (1982): [A(1-A) + (nP-1)(Q1-A²) + (nN-1)(Q2-A²)]/(nP·nN), {q}"
    elif d.metric == "dsc":
        se = f"SE² of each mean DSC = {d.sd:g}²/n"
    else:
        se = f"SE² of each {d.metric.upper()} = p(1-p)/n_{'positive' if d.metric == 'tpr' else 'negative'} (binomial)"
    if d.margin is None:
        return (f"smallest n with z(1-alpha/2)·SE0 + z(power)·SE1 <= |difference| (SE1 at the two true values, SE0 "
                f"at their pooled value: the permutation null; at this n evaluate's mde equals the difference); {se}; "
                "n = images / design effect")
    return (f"smallest n with Φ((M-d)/SE - z(1-alpha)) + Φ((M+d)/SE - z(1-alpha)) - 1 >= power (TOST, SE at the "
            f"two true values); {se}; n = images / design effect")


def _assumptions(d: Design) -> list[str]:
    out = ["normal approximation of the difference of two independent groups of equal size"]
    if d.metric == "auc":
        out.append("Hanley & McNeil's exponential Q1, Q2 (exact for exponential scores; for binormal ones it "
                   "overstates the variance when positives are the minority, understates it when the majority)"
                   if d.auc_variance == "hanley-mcneil" else "binormal scores of equal variance in both classes")
    elif d.metric in ("tpr", "fpr"):
        out.append(f"a fixed operating threshold; {d.metric.upper()} binomial within a group")
    else:
        out.append(f"per-image DSC with standard deviation {d.sd:g} in both groups")
    if d.groups[0].prevalence is not None:
        out.append("the prevalences as given, a patient's images sharing its label")
    m = d.images_per_patient
    out.append(f"design effect 1 + (m-1)·ICC = {d.design_effect:g} ({m} image{'s' if m > 1 else ''} per patient, "
               f"ICC {d.icc:g}; effective n = images / {d.design_effect:g})")
    return out


def plan_sample_size(d: Design) -> Plan:
    """The smallest patient count a group (binary search on the monotone power) and the plan's text."""
    if not _enough(d, MAX_PATIENTS):
        raise InputError(f"more than {MAX_PATIENTS:,} patients a group would be needed: the difference is too small "
                         "for this variance (ask for a larger difference or margin)")
    lo, hi = 1, MAX_PATIENTS  # _enough(hi) holds; find the first n where it does
    while lo < hi:
        mid = (lo + hi) // 2
        if _enough(d, mid):
            hi = mid
        else:
            lo = mid + 1
    return Plan(d, lo, normal_power(d, lo), _formula(d), _assumptions(d))


# --- the check ---------------------------------------------------------------------------------------------------


def _patients(rng: np.random.Generator, d: Design, patients: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One simulated audit: per image, its label, the patient's group index (0, 1), the patient id, and a shared
    patient effect u·sqrt(ICC) + e·sqrt(1 - ICC) (standard normal per image, correlation ICC within a patient)."""
    m = d.images_per_patient
    labels = []
    for g in d.groups:
        pos = round((1.0 if g.prevalence is None else g.prevalence) * patients)
        labels.append(np.r_[np.ones(pos, dtype=np.int8), np.zeros(patients - pos, dtype=np.int8)])
    y_p = np.concatenate(labels)
    g_p = np.repeat([0, 1], patients)
    rep = np.repeat(np.arange(2 * patients), m)
    z = (math.sqrt(d.icc) * rng.standard_normal(2 * patients)[rep]
         + math.sqrt(1 - d.icc) * rng.standard_normal(rep.size))
    return y_p[rep], g_p[rep], rep, z


def _beta_binomial_rates(rng: np.random.Generator, rate: np.ndarray, icc: float, m: int) -> np.ndarray:
    """Per-patient rates (n_patients,) with mean `rate` whose Bernoulli images correlate by `icc` within a patient
    (Beta(rate·k, (1-rate)·k), k = 1/ICC - 1); the rates themselves when ICC is 0 or m is 1."""
    if icc == 0 or m == 1:
        return rate
    k = 1 / icc - 1
    return rng.beta(rate * k, (1 - rate) * k) if icc < 1 else (rng.random(rate.size) < rate).astype(float)


@dataclass
class Audit:
    """One simulated audit: per image its label (None for DSC), score (a logit for AUC, 0.25/0.75 for a call at the
    0.5 threshold) or DSC, group ('a' first, 'b' second: the engine's difference is b - a) and patient id."""

    y: np.ndarray | None
    values: np.ndarray
    group: np.ndarray
    patient: np.ndarray


def simulate_audit(rng: np.random.Generator, d: Design, patients: int) -> Audit:
    """Two groups of `patients` patients with m images each and the design's values, prevalences and ICC:
    binormal scores (AUC = Φ(μ/√2)) with a shared patient effect; beta-binomial calls (TPR/FPR); Beta DSC with
    the design's mean and SD, correlated within a patient through a Gaussian copula."""
    from scipy import stats

    y, gi, pid, z = _patients(rng, d, patients)
    value = np.array([d.groups[0].value, d.groups[1].value])[gi]
    group = np.array(["a", "b"])[gi]
    if d.metric == "dsc":
        nu = value * (1 - value) / d.sd ** 2 - 1  # Beta(μν, (1-μ)ν) has mean μ and variance sd²
        dsc = stats.beta.ppf(stats.norm.cdf(z), value * nu, (1 - value) * nu)
        return Audit(None, np.clip(dsc, 0.0, 1.0), group, pid)
    if d.metric == "auc":
        mu = math.sqrt(2) * np.array([Z.inv_cdf(g.value) for g in d.groups])[gi]
        return Audit(y, mu * y + z, group, pid)
    first = pid.searchsorted(np.arange(2 * patients))  # each patient's first image
    rate = _beta_binomial_rates(rng, value[first], d.icc, d.images_per_patient)[pid]
    called = rng.random(y.size) < rate
    graded = y == (1 if d.metric == "tpr" else 0)  # the class the rate is of; the other class is called right
    return Audit(y, np.where(graded, called, y == 1) * 0.5 + 0.25, group, pid)


def evaluate_audit(audit: Audit, metric: str, seed: int, n_boot: int, n_perm: int) -> dict[str, Any]:
    """evaluate's test of the two-group difference on a simulated audit (patients resampled and permuted whole)."""
    from fairmedbench.spec import ScoreSettings
    from fairmedbench.tasks.base import PATIENT_COLUMN, PredictionTable, get_task

    common = {"attr:g": audit.group, PATIENT_COLUMN: audit.patient}
    if audit.y is None:
        table = PredictionTable({"dsc": audit.values, "empty_gt": np.zeros(audit.values.size, bool), **common},
                                ("segmentation",), ("g",))
        settings = ScoreSettings(n_boot=n_boot, n_perm=n_perm, seed=seed, data_checks="record")
        res = get_task("segmentation").score(table, settings)
    else:
        table = PredictionTable({"label:y": audit.y, "score:y": audit.values, **common}, ("y",), ("g",))
        settings = ScoreSettings(threshold="fixed:0.5", logits=metric == "auc", n_boot=n_boot, n_perm=n_perm,
                                 seed=seed, data_checks="record")
        res = get_task("classification").score(table, settings)
    return res.report().tests[f"{metric}_diff"]


def check_plan(plan: Plan, replicates: int, seed: int = 0,
               progress: Callable[[str, int, int], None] | None = None) -> Check:
    """Simulate `replicates` audits at the plan's size and count those evaluate's test calls a difference (p <
    alpha) or equivalent within the margin (TOST); the plan passes when that share is within ±CHECK_TOLERANCE of
    the asked power."""
    from scipy import stats

    from fairmedbench.metrics.result import equivalent_within

    d = plan.design
    images = 2 * plan.patients * d.images_per_patient
    if images > CHECK_MAX_IMAGES:
        raise InputError(f"--check would evaluate {images:,} images {replicates} times; it runs up to "
                         f"{CHECK_MAX_IMAGES:,} images an audit (ask for a larger difference, or plan without --check)")
    tost = d.margin is not None
    n_boot, n_perm = (CHECK_N_BOOT_TOST, 19) if tost else (CHECK_N_BOOT_MDE, CHECK_N_PERM)
    hits, mdes = 0, []
    for r in range(replicates):
        audit = simulate_audit(np.random.default_rng([seed, r]), d, plan.patients)
        test = evaluate_audit(audit, d.metric, seed + r, n_boot, n_perm)
        if d.margin is not None:
            hits += bool(equivalent_within(test, d.margin))
        else:
            hits += bool(test["p_value"] < d.alpha)
            mdes.append(test["mde"])
        if progress is not None:
            progress(f"plan check ({d.metric})", r + 1, replicates)
    ci = stats.binomtest(hits, replicates).proportion_ci(method="wilson")
    sim = hits / replicates
    scores = {"auc": "binormal scores", "tpr": "beta-binomial calls", "fpr": "beta-binomial calls",
              "dsc": "Beta-distributed DSC"}[d.metric]
    how = (f"TOST on the bootstrap 90% interval ({n_boot} patient resamples)" if tost else
           f"permutation test, {n_perm} permutations, p < {d.alpha:g}")
    method = (f"{scores}, {d.images_per_patient} image(s) a patient with ICC {d.icc:g} through a shared patient "
              f"effect; evaluate's {how}, patients resampled and permuted whole")
    median = float(np.nanmedian(mdes)) if mdes and np.isfinite(mdes).any() else None
    return Check(replicates, hits, sim, (float(ci.low), float(ci.high)), d.power,
                 abs(sim - d.power) <= CHECK_TOLERANCE, median, method)


def plan_with(o: PlanOptions, progress: Callable[[str, int, int], None] | None = None) -> Plan:
    """`benchmark plan`: the plan for the options, checked by simulation with --check."""
    plan = plan_sample_size(make_design(o))
    if o.check:
        plan.check = check_plan(plan, o.replicates, o.seed, progress)
    return plan
