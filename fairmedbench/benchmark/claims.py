"""`benchmark claims`: does a published fairness claim hold on this harness?

One YAML per claim (shipped: fairmedbench/claims/*.yaml) names the paper, its table and statement, the dataset,
model and usage it is tested on, the baseline and the method, the metric, and the claimed direction and size, plus a
synthetic stand-in with a known answer (`expected`) that CI runs. Each claim is one `compare` of the two methods
(same splits, features and seeds; with `split_seeds`, repeated splits), read by one rule (`judge`):

- holds: the paired difference (method - baseline) is in the claimed direction and larger than chance: the paired
  t-test over the units (splits when there are several split seeds, each split's mean over its training seeds;
  else seeds) gives p < 0.05 and, where compare ran the paired test-set bootstrap for the metric, its interval
  excludes 0 (the one rule of report/verdicts.py `versus_erm`);
- contradicted: larger than chance in the opposite direction;
- not supported at this size: neither; the sentence names the paired minimum detectable effect (`paired_mde`: the
  true mean difference the t-test over these units detects with 80% power at the 5% level, from their spread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.metrics.result import MDE_ALPHA, MDE_POWER
from fairmedbench.report.verdicts import cite
from fairmedbench.spec import RunOptions, option

#: the shipped claim files (package data)
CLAIM_DIR = Path(__file__).resolve().parents[1] / "claims"
DIRECTIONS = ("increase", "decrease")
EXPECTED = ("holds", "not-supported", "contradicted")
_REQUIRED = ("id", "paper", "table", "statement", "dataset", "model", "usage", "attribute", "baseline", "method",
             "metric", "direction", "size", "stand_in")
_STAND_IN = ("dataset", "expected")
_STAND_IN_OPTIONAL = ("model", "weights", "dataset_options", "seeds", "split_seeds", "hparams", "n_boot",
                      "train_group_share", "share_group", "train_size", "note")


@dataclass(frozen=True)
class Claim:
    """One published claim and its synthetic stand-in."""

    id: str
    paper: str
    table: str
    statement: str
    dataset: str
    model: str
    usage: str
    attribute: str
    baseline: str
    method: str
    metric: str
    direction: str
    size: float
    stand_in: dict[str, Any]
    path: Path = field(default=Path(), compare=False)


def shipped_claims() -> list[Path]:
    """The shipped claim files, sorted."""
    return sorted(CLAIM_DIR.glob("*.yaml"))


def load_claim(path: Path) -> Claim:
    """A claim file, checked: every field present, a known metric, direction and expected answer."""
    import yaml

    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.mitigation import MITIGATIONS

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"claim {path}: cannot be read ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise InputError(f"claim {path}: a mapping of {', '.join(_REQUIRED)} is expected")
    missing = [k for k in _REQUIRED if k not in doc]
    extra = sorted(set(doc) - set(_REQUIRED))
    if missing or extra:
        what = [f"missing {', '.join(missing)}"] if missing else []
        what += [f"unknown {', '.join(extra)}"] if extra else []
        raise InputError(f"claim {path}: " + "; ".join(what))
    stand = doc["stand_in"]
    if not isinstance(stand, dict) or any(k not in stand for k in _STAND_IN) or set(stand) - {
            *_STAND_IN, *_STAND_IN_OPTIONAL}:
        raise InputError(f"claim {path}: stand_in needs {', '.join(_STAND_IN)} (optional: "
                         f"{', '.join(_STAND_IN_OPTIONAL)})")
    if doc["direction"] not in DIRECTIONS:
        raise InputError(f"claim {path}: direction {doc['direction']!r}: choose {' or '.join(DIRECTIONS)}")
    if stand["expected"] not in EXPECTED:
        raise InputError(f"claim {path}: stand_in.expected {stand['expected']!r}: choose one of {', '.join(EXPECTED)}")
    if metric_spec(doc["metric"]).higher_is_better is None:
        raise InputError(f"claim {path}: metric {doc['metric']!r} has no direction to claim")
    for m in (doc["baseline"], doc["method"]):
        MITIGATIONS.get(m)  # an unknown method is refused with the registry's message
    return Claim(**{k: doc[k] for k in _REQUIRED}, path=path)


def paired_mde(diffs: np.ndarray) -> float:
    """The true mean of `diffs` that the two-sided paired t-test over them detects with MDE_POWER at MDE_ALPHA:
    (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n); NaN with fewer than two units."""
    from scipy.stats import t

    n = len(diffs)
    if n < 2:
        return math.nan
    df = n - 1
    return float((t.ppf(1 - MDE_ALPHA / 2, df) + t.ppf(MDE_POWER, df)) * np.std(diffs, ddof=1) / math.sqrt(n))


@dataclass(frozen=True)
class ClaimAnswer:
    """A claim's answer: its key (holds | not-supported | contradicted | undefined), sentence and evidence."""

    claim: str
    key: str
    sentence: str
    evidence: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"claim": self.claim, "key": self.key, "sentence": self.sentence, "evidence": self.evidence}


def judge(claim: Claim, diffs: np.ndarray, unit: str, boot: dict[str, Any] | None, where: str) -> ClaimAnswer:
    """The claim's answer from the per-unit paired differences (method - baseline) and the pooled test-set
    bootstrap interval of the same difference (None where compare has none for the metric)."""
    from fairmedbench.metrics.stats import seed_summary
    from fairmedbench.report.verdicts import fmt_p, versus_erm

    head = f"{cite(claim.paper)}: {claim.statement}"
    finite = diffs[np.isfinite(diffs)]
    evidence: dict[str, Any] = {"unit": unit, "n_units": int(len(diffs)), "diffs": diffs.tolist(), "bootstrap": boot,
                                "where": where, "claimed": {"direction": claim.direction, "size": claim.size}}
    if len(finite) < len(diffs) or len(diffs) < 2 or np.ptp(diffs) == 0:
        why = "fewer than two units" if len(diffs) < 2 else (
            "the metric is undefined in some run" if len(finite) < len(diffs) else "every unit gives the same value")
        return ClaimAnswer(claim.id, "undefined", f"{head} — undefined on {where}: {why}.", evidence)
    from scipy.stats import ttest_1samp

    s = seed_summary(diffs)
    p = float(ttest_1samp(diffs, 0.0).pvalue)
    row = {"method": claim.method, "metric": claim.metric, "unit": unit, "mean_diff": s.mean, "ci_low": s.ci_low,
           "ci_high": s.ci_high, "paired_p": p}
    verdict = versus_erm(row, len(diffs), boot)
    mde = paired_mde(diffs)
    evidence.update(mean_diff=s.mean, ci_low=s.ci_low, ci_high=s.ci_high, paired_p=p, mde=mde,
                    verdict=verdict.to_dict())
    ptext = f"p {fmt_p(p)}" if fmt_p(p).startswith("<") else f"p = {fmt_p(p)}"
    size = (f"{s.mean:+.3f} [{s.ci_low:+.3f}, {s.ci_high:+.3f}] over {len(diffs)} {unit}s ({ptext})"
            + (f", {boot['value']:+.3f} [{boot['ci_low']:+.3f}, {boot['ci_high']:+.3f}] with the test set's "
               "sampling error" if boot else ""))
    claimed = f"claimed: {claim.direction} of {claim.size:.3f}"
    beyond = verdict.key in ("better", "worse", "changed")
    agrees = (s.mean > 0) == (claim.direction == "increase")
    if beyond and agrees:
        smaller = " (smaller than claimed)" if abs(s.ci_high if s.mean > 0 else s.ci_low) < claim.size else ""
        return ClaimAnswer(claim.id, "holds", f"{head} — holds on {where}{smaller}: {claim.method} − {claim.baseline} "
                                              f"{claim.metric} {size}; {claimed}.", evidence)
    if beyond:
        return ClaimAnswer(claim.id, "contradicted", f"{head} — contradicted on {where}: {claim.method} − "
                                                     f"{claim.baseline} {claim.metric} {size}; {claimed}.", evidence)
    return ClaimAnswer(claim.id, "not-supported",
                       f"{head} — not supported at this size on {where}: {claim.method} − {claim.baseline} "
                       f"{claim.metric} {size}; these {len(diffs)} {unit}s detect a mean difference ≥ {mde:.3f} "
                       f"(paired minimum detectable effect, 80% power); {claimed}.", evidence)


@dataclass(frozen=True, kw_only=True)
class ClaimsOptions:
    """`benchmark claims`'s options."""

    claim: tuple[str, ...] = field(default=(), metadata=option(
        "claim ids or YAML files (default: every shipped claim; benchmark list studies shows them)", csv=True,
        metavar="IDS"))
    stand_in: bool = field(default=False, metadata=option(
        "run each claim on its synthetic stand-in (random weights, known answer) instead of its real dataset"))
    report: bool = field(default=False, metadata=option("also write the claims page (one sentence per claim first)"))
    json: bool = field(default=False, metadata=option())


def select_claims(names: tuple[str, ...]) -> list[Claim]:
    """The claims named (ids of shipped claims or paths to YAML files), or every shipped claim."""
    shipped = {load_claim(p).id: p for p in shipped_claims()}
    if not names:
        return [load_claim(p) for p in shipped.values()]
    out = []
    for n in names:
        if n in shipped:
            out.append(load_claim(shipped[n]))
        elif Path(n).suffix in (".yaml", ".yml") and Path(n).is_file():
            out.append(load_claim(Path(n)))
        else:
            raise InputError(f"claim {n!r}: neither a shipped claim ({', '.join(shipped)}) nor a YAML file")
    return out


def check_claim(claim: Claim, stand_in: bool) -> None:
    """Refuse, before any run, a claim whose compare would be refused (names, hyperparameters, data)."""
    from fairmedbench.benchmark.resolve import check_spec

    for spec in _specs(claim, stand_in):
        check_spec(spec)


def _setting(claim: Claim, stand_in: bool) -> dict[str, Any]:
    """What the compare runs on: the claim's real dataset and model, or its stand-in's."""
    st = claim.stand_in
    if not stand_in:
        return {"dataset": claim.dataset, "model": claim.model, "weights": None, "dataset_options": {},
                "seeds": (0, 1, 2, 3, 4), "split_seeds": (0, 1, 2), "hparams": {}, "n_boot": 500, "sampling": {}}
    return {"dataset": st["dataset"], "model": st.get("model", claim.model), "weights": st.get("weights", "random"),
            "dataset_options": dict(st.get("dataset_options") or {}), "seeds": tuple(st.get("seeds", (0, 1, 2))),
            "split_seeds": tuple(st.get("split_seeds", ())), "hparams": dict(st.get("hparams") or {}),
            "n_boot": int(st.get("n_boot", 200)),
            "sampling": {k: st[k] for k in ("train_group_share", "share_group", "train_size") if k in st}}


def _specs(claim: Claim, stand_in: bool) -> list[Any]:
    from fairmedbench.spec import RunSpec

    s = _setting(claim, stand_in)
    return [RunSpec(model=s["model"], dataset=s["dataset"], attributes=(claim.attribute,), usage=claim.usage,
                    mitigation=m, seeds=s["seeds"], weights=s["weights"], dataset_options=s["dataset_options"],
                    hparams=s["hparams"], n_boot=s["n_boot"], split_seeds=s["split_seeds"], **s["sampling"])
            for m in (claim.baseline, claim.method)]


def run_claim(claim: Claim, opts: RunOptions, stand_in: bool) -> ClaimAnswer:
    """Compare the claim's method with its baseline and judge the claim."""
    from fairmedbench.benchmark.compare import compare

    s = _setting(claim, stand_in)
    if claim.baseline != "erm":
        raise InputError(f"claim {claim.id}: compare pairs every method with erm; baseline {claim.baseline!r} "
                         "is not supported")
    out = compare(s["model"], [s["dataset"]], claim.attribute, claim.usage, [claim.method], s["seeds"], opts,
                  weights=s["weights"], n_boot=s["n_boot"], dataset_options=s["dataset_options"],
                  hparams=s["hparams"], split_seeds=s["split_seeds"], sampling=s["sampling"])
    ds = s["dataset"]
    n_splits, n_seeds = max(len(s["split_seeds"]), 1), len(s["seeds"])

    def units(m: str) -> np.ndarray:  # per split (its seed mean), else per seed
        v = np.array(out.values[(ds, m, claim.metric)], dtype=float).reshape(n_splits, n_seeds)
        return v.mean(axis=1) if n_splits > 1 else v[0]

    diffs = units(claim.method) - units(claim.baseline)
    boot = ((out.test_bootstrap.get(ds) or {}).get("methods", {}).get(claim.method) or {}).get(
        f"{claim.metric}_vs_erm")
    where = (f"{ds} ({'synthetic stand-in, ' if stand_in else ''}{s['model']}"
             f"{', random weights' if s['weights'] == 'random' else ''}, {claim.usage}, {n_seeds} seeds"
             f"{f' x {n_splits} splits' if n_splits > 1 else ''})")
    return judge(claim, diffs, "split" if n_splits > 1 else "seed", boot, where)


def claims_document(claims: list[Claim], answers: list[ClaimAnswer], stand_in: bool) -> dict[str, Any]:
    """The claims JSON: each claim's fields, its answer, and for a stand-in whether it gave the known answer."""
    rows = []
    for c, a in zip(claims, answers):
        row = {"id": c.id, "paper": c.paper, "table": c.table, "statement": c.statement, "dataset": c.dataset,
               "model": c.model, "usage": c.usage, "attribute": c.attribute, "methods": [c.baseline, c.method],
               "metric": c.metric, "direction": c.direction, "size": c.size, "answer": a.to_dict()}
        if stand_in:
            row["stand_in"] = c.stand_in
            row["known_answer"] = c.stand_in["expected"]
            row["gave_known_answer"] = a.key == c.stand_in["expected"]
        rows.append(row)
    return {"kind": "claims", "stand_in": stand_in, "claims": rows, "sentences": [a.sentence for a in answers]}


def run_claims(o: ClaimsOptions, opts: RunOptions, out_root: str) -> tuple[dict[str, Any], Path, Path | None]:
    """Every selected claim checked first, then compared and judged; the claims JSON (and with `report` its page)
    written under <out_root>/claims/."""
    from fairmedbench.engine import store

    claims = select_claims(o.claim)
    for c in claims:
        check_claim(c, o.stand_in)
    answers = [run_claim(c, opts, o.stand_in) for c in claims]
    doc = claims_document(claims, answers, o.stand_in)
    name = "claims-stand-in" if o.stand_in else "claims"
    key = store.run_id({"claims": [c.id for c in claims]})
    path = Path(out_root) / "claims" / f"{name}-{key}.json"
    store.write_json(path, doc)
    page = None
    if o.report:
        from fairmedbench.report.html import write_claims_report

        page = write_claims_report(path.with_suffix(".html"), doc)
    return doc, path, page
