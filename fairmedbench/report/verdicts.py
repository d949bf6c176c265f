"""The verdict rules, written once: every sentence that answers a question on the terminal or on a page comes from
one function here, so a page can never print two verdicts for one question (e.g. Welch p = 0.035 beside "CI
excludes 0: no"), and undefined evidence is called undefined, with the reason.

Questions:
  (a) `result_answer`: is there a disparity? Over EVERY gap and signed difference of the result that carries a
      permutation test in its Benjamini-Yekutieli family (not only the headline gap), each read by `disparity`:
      "larger than chance (p_adj = ...)" when the adjusted p < ALPHA, else "within chance"; a raw p outside the
      family is shown as raw, with "no verdict". One sentence per (task, attribute) (`pair_answer`) names the
      metrics larger than chance; the headline counts pairs and metrics. A gap (max - min) is never below 0, so
      its bootstrap interval is never read as evidence; `interval_test_notes` says why group intervals and the
      test disagree where they do. Terminal, pages and summary.md print these same sentences.
  (b) `versus_erm`: did mitigation M change metric X over ERM? One rule: the paired t-test over seeds (same seeds,
      same splits; with repeated splits over splits, each split's seed mean; its p and the shown paired t interval
      come from the same t distribution, so they cannot disagree) and, where compare ran the paired test-set
      bootstrap for X, that interval must exclude 0 as well (both the seed-to-seed and the test set's sampling
      error count). One seed, or values undefined in a seed, is "undefined: one seed" (or the reason), never "no
      clear difference". Within chance, it is "equivalent within ±m" when the row has a margin and its 90% paired t
      interval (and the bootstrap interval where it ran) lies inside ±m, else inconclusive with what the paired
      t-test could have detected.
  (c) `compare_headline`, `board_headline`, `study_headline`: the one or two sentences a page opens with;
      `board_shift_headline` answers a board's external evaluation (does fairness hold on another site?) from
      `site_shift`.
Pure Python (plus the MetricSpec registry): no torch, no numpy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import TypeIs

ALPHA = 0.05
GAP_KEY = "__gap__"  # metrics.result.GAP, repeated to keep this module free of the metric engine's imports


@dataclass(frozen=True)
class Verdict:
    """One answer: a machine-readable `key`, the sentence shown, the evidence it rests on, its p-value (if any)."""

    key: str  # disparity | no-evidence | raw-only | not-tested | undefined | better | worse | changed | no-difference |
    # shifted | not-shifted
    sentence: str
    evidence: str
    p: float | None = None
    p_label: str = "p"  # how the p is named: 'p_adj' (adjusted over the result's family), 'raw p', 'p'

    @property
    def short(self) -> str:
        """The table cell: 'larger than chance (p_adj = 0.003)', 'no verdict (raw p = 0.04)', 'undefined: one
        seed', ..."""
        return _SHORT.get(self.key, self.key) + (f" ({self.p_label} = {fmt_p(self.p)})" if self.p is not None
                                                 else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


_SHORT = {"disparity": "larger than chance", "no-evidence": "within chance", "not-tested": "not tested",
          "equivalent": "equivalent within the margin",
          "raw-only": "no verdict",
          "undefined": "undefined", "better": "better than ERM", "worse": "worse than ERM",
          "changed": "differs from ERM", "no-difference": "no difference beyond chance",
          "shifted": "beyond sampling error", "not-shifted": "within sampling error"}


def cite(paper: str) -> str:
    """'Idrissi et al. 2022' from 'Idrissi, Arjovsky, .... Title. Venue 2022' (the first author and the last year)."""
    first = paper.split(",")[0].split(".")[0].strip()
    years = re.findall(r"\b(?:19|20)\d\d\b", paper)
    return f"{first} et al. {years[-1]}" if years else first


def fmt_p(p: float) -> str:
    """A p-value as shown everywhere: 3 significant digits, '< 0.001' below that."""
    return "< 0.001" if p < 0.001 else f"{p:.3g}"


def _finite(v: object) -> TypeIs[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _header(metric: str) -> str:
    from fairmedbench.errors import InputError
    from fairmedbench.metrics.specs import metric_spec

    try:
        return metric_spec(metric).header
    except InputError:
        return metric


def _direction(metric: str) -> bool | None:
    from fairmedbench.metrics.specs import find_spec

    spec = find_spec(metric)
    return None if spec is None else spec.higher_is_better


# ---------------------------------------------------------------------------------------- (a) disparity

def disparity(rep: dict[str, Any], metric: str) -> Verdict:
    """Is there a disparity in `metric` (a between-group metric: a gap, a two-group difference, EqOdds) on the
    report's attribute? `rep` is an AttributeReport.to_dict(). Only the Benjamini-Yekutieli adjusted p over the
    result's family of tests decides; a raw p outside that family is shown as raw, with no verdict."""
    where = f"{rep.get('task', '')} by {rep.get('attribute', '')}".strip()
    head = gap_name(rep, metric)
    cell = (rep.get("metrics", {}).get(metric) or {}).get(GAP_KEY)
    evidence = "permutation test of group labels"
    if not cell or not _finite(cell.get("value")):
        why = (rep.get("gap_notes") or {}).get(metric) or "fewer than two groups have a defined value"
        return Verdict("undefined", f"{where}: {head} is undefined ({why}), so disparity cannot be assessed.",
                       evidence)
    value = float(cell["value"])
    adjusted, raw = cell.get("p_adjusted"), cell.get("p_value")
    if not _finite(adjusted):
        if _finite(raw):
            return Verdict("raw-only", f"{where}: {head} = {value:.3f}, raw p = {fmt_p(float(raw))}: outside this "
                                       "result's adjusted family of tests, so no verdict.",
                           f"{evidence}, raw p outside the Benjamini-Yekutieli family", float(raw), "raw p")
        why = ("the result records no permutation test (it was computed without one); recompute it with a "
               "version that runs the test" if "p_value" not in cell else
               "the permutation test is undefined here (e.g. a group with one class)")
        return Verdict("not-tested", f"{where}: {head} = {value:.3f}; disparity not tested: {why}.", evidence)
    p = float(adjusted)
    evidence = f"{evidence}, p Benjamini-Yekutieli adjusted over this result's tests (raw p = {fmt_p(float(raw))})"
    if p < ALPHA:
        return Verdict("disparity", f"{where}: {head} {value:.3f} larger than chance (p_adj = {fmt_p(p)}).",
                       evidence, p, "p_adj")
    test = (rep.get("tests") or {}).get(metric) or {}
    margin, iv = test.get("margin"), test.get("tost_interval")
    if test.get("equivalent") and iv:
        return Verdict("equivalent", f"{where}: {head} {value:.3f} equivalent within ±{margin:g} (two one-sided tests: "
                                     f"90% interval [{iv[0]:.3f}, {iv[1]:.3f}]; p_adj = {fmt_p(p)}).", evidence, p,
                       "p_adj")
    return Verdict("no-evidence", f"{where}: {head} {value:.3f} within chance (p_adj = {fmt_p(p)}){_open(test)}.",
                   evidence, p, "p_adj")


def _open(test: dict[str, Any]) -> str:
    """What a test within chance could have found: its minimum detectable effect, and the margin it was not shown
    equivalent within (the inconclusive verdict's words)."""
    mde, margin = test.get("mde"), test.get("margin")
    what = "differences" if test.get("alternative") == "two-sided" else "gaps"
    out = f"; no evidence either way: this test could only detect {what} ≥ {mde:.3f}" if _finite(mde) else ""
    return out + (f"; not shown equivalent within ±{margin:g}" if _finite(margin) else "")


def gap_name(rep: dict[str, Any], metric: str) -> str:
    """How an answer names a between-group metric: its registry header ('ΔAUC', 'ΔFPR@95TPR'); a signed
    difference names its groups ('AUC difference M − F'), or is 'AUC difference' without a report's two groups."""
    from fairmedbench.metrics.specs import find_spec

    spec = find_spec(metric)
    if spec is None or spec.kind != "diff" or spec.label:
        return _header(metric)
    name = f"{_header(metric.removesuffix('_diff'))} difference"
    groups = rep.get("groups", [])
    return f"{name} {groups[1]} − {groups[0]}" if len(groups) == 2 else name


def gap_value(metric: str, value: float) -> str:
    """A between-group value as answers show it: signed ('+0.139') for a signed difference, else '0.139'."""
    from fairmedbench.metrics.specs import find_spec

    spec = find_spec(metric)
    return f"{value:+.3f}" if spec is not None and spec.kind == "diff" else f"{value:.3f}"


def _in_family(cell: object) -> TypeIs[dict[str, Any]]:
    return isinstance(cell, dict) and _finite(cell.get("p_adjusted"))


def _interval(group: str, x: dict[str, Any]) -> str:
    return f"{group} {x['value']:.3f} [{x['ci_low']:.3f}, {x['ci_high']:.3f}]"


@dataclass(frozen=True)
class PairAnswer:
    """The answer for one (task, attribute): every tested gap and difference of the result's adjusted family,
    each with its verdict (`disparity`), and the one sentence that names those larger than chance."""

    task: str
    attribute: str
    tested: tuple[tuple[str, Verdict, float], ...]  # (metric, verdict, value) in the adjusted family
    sentence: str

    @property
    def hits(self) -> list[tuple[str, Verdict, float]]:
        """The tested gaps larger than chance, largest value first."""
        return sorted((t for t in self.tested if t[1].key == "disparity"), key=lambda t: -abs(t[2]))

    @property
    def key(self) -> str:
        """'disparity' (some gap larger than chance), 'no-evidence' (every tested gap within chance) or
        'not-tested' (nothing of the pair in the adjusted family)."""
        return "disparity" if self.hits else "no-evidence" if self.tested else "not-tested"


def pair_answer(rep: dict[str, Any]) -> PairAnswer:
    """The verdict of one report over every gap and difference in its result's adjusted family (one rule:
    `disparity` on each), as one sentence naming the metrics larger than chance and those within chance."""
    from fairmedbench.metrics.specs import find_spec

    where = f"{rep.get('task', '')} by {rep.get('attribute', '')}"
    metrics = rep.get("metrics", {})
    names = [m for m, c in metrics.items() if _in_family((c or {}).get(GAP_KEY))]
    tested = tuple((m, disparity(rep, m), float(metrics[m][GAP_KEY]["value"])) for m in names)
    if not tested:
        main = next((m for m, c in metrics.items() if GAP_KEY in (c or {}) and (s := find_spec(m)) is not None
                     and s.board == "gap"), None)
        sentence = (disparity(rep, main).sentence if main else
                    f"{where}: no gap or difference was tested (the result records no permutation test).")
        return PairAnswer(rep.get("task", ""), rep.get("attribute", ""), (), sentence)
    answer = PairAnswer(rep.get("task", ""), rep.get("attribute", ""), tested, "")
    signed = {m for m in names if (s := find_spec(m)) is not None and s.kind == "diff"}
    parts = []
    for m, v, value in answer.hits:
        c = metrics[m][GAP_KEY]
        f = "{:+.3f}" if m in signed else "{:.3f}"
        ci = (f" [{f.format(c['ci_low'])}, {f.format(c['ci_high'])}]" if _finite(c.get("ci_low"))
              and _finite(c.get("ci_high")) else "")
        parts.append(f"{gap_name(rep, m)} {f.format(value)}{ci} larger than chance (p_adj = {fmt_p(v.p or 0.0)})")
    same = [m for m, v, _ in tested if v.key == "equivalent"]
    if same:
        margins = sorted({f"±{(rep.get('tests') or {})[m]['margin']:g}" for m in same})
        parts.append(f"{', '.join(gap_name(rep, m) for m in same)} equivalent within {', '.join(margins)}")
    rest = [(m, v) for m, v, _ in tested if v.key not in ("disparity", "equivalent")]
    if rest:
        low = fmt_p(min(v.p for _, v in rest if v.p is not None))
        bound = f"p_adj = {low}" if len(rest) == 1 else f"p_adj ≥ {low}"
        listed = ", ".join(gap_name(rep, m) for m, _ in rest)
        parts.append(f"{listed} within chance ({bound})" if parts else
                     f"every tested gap within chance ({listed}; {bound})")
        tests = rep.get("tests") or {}
        could = [f"{gap_name(rep, m)} ≥ {tests[m]['mde']:.3f}" for m, _ in rest if _finite(tests.get(m, {}).get("mde"))]
        if could:
            parts[-1] += (f"; no evidence either way: {'this test' if len(could) == 1 else 'these tests'} could only "
                          f"detect {', '.join(could)}")
        unshown = [f"{gap_name(rep, m)} within ±{tests[m]['margin']:g}" for m, _ in rest
                   if _finite(tests.get(m, {}).get("margin"))]
        if unshown:
            parts[-1] += f"; not shown equivalent: {', '.join(unshown)}"
    return PairAnswer(answer.task, answer.attribute, tested, f"{where}: " + "; ".join(parts) + ".")


@dataclass(frozen=True)
class Answer:
    """A result's answer, the same words on every surface: the opening `headline`, one sentence per (task,
    attribute) in `pairs`, and `why` (where group intervals and the test disagree, the reason)."""

    headline: str
    pairs: list[PairAnswer]
    why: list[str]
    n_tests: int

    @property
    def sentences(self) -> list[str]:
        """The per-pair sentences (each names its metrics larger than chance)."""
        return [p.sentence for p in self.pairs]


#: from this many (task, attribute) pairs on, pages open with one sentence and the tasks x attributes picture,
#: the per-pair sentences folded below
FOLD_AT = 4


def result_answer(reports: Sequence[dict[str, Any]]) -> Answer:
    """The answer of a result over every gap and difference tested within its Benjamini-Yekutieli family (the
    reports are one result's, so the family is theirs): how many pairs show a gap larger than chance, by metric
    (with the largest), and the metrics within chance in every pair."""
    pairs = [pair_answer(rep) for rep in reports]
    n_tests = sum(len(p.tested) for p in pairs)
    why = interval_test_notes(reports, n_tests)
    if not pairs:
        return Answer("No attribute to assess.", [], why, 0)
    tested = [p for p in pairs if p.tested]
    if len(pairs) == 1:
        return Answer(pairs[0].sentence, pairs, why, n_tests)
    if not tested:
        return Answer(f"Disparity could not be assessed for any of the {len(pairs)} task/attribute pairs (each "
                      "one's reason follows).", pairs, why, n_tests)
    hit_pairs = [p for p in tested if p.hits]
    by_metric: dict[str, list[tuple[PairAnswer, float]]] = {}
    named: dict[str, set[str]] = {}
    for p, rep in zip(pairs, reports):
        for m, v, value in p.tested:
            named.setdefault(m, set()).add(gap_name(rep, m))
            if v.key == "disparity":
                by_metric.setdefault(m, []).append((p, value))
    # a difference names its groups where every pair has the same two ('AUC difference M − F')
    metric_names = {m: next(iter(ns)) if len(ns) == 1 else gap_name({}, m) for m, ns in named.items()}
    parts = []
    for m, items in sorted(by_metric.items(), key=lambda kv: -len(kv[1])):
        big, value = max(items, key=lambda it: abs(it[1]))
        place = f"{'largest ' if len(items) > 1 else ''}{big.task} by {big.attribute}, {gap_value(m, value)}"
        parts.append(f"{metric_names[m]} in {len(items)} pair{'s' if len(items) > 1 else ''} ({place})")
    quiet = [metric_names[m] for m in metric_names if m not in by_metric]
    if quiet:
        parts.append(f"{', '.join(quiet)} within chance in every tested pair")
    untested = len(pairs) - len(tested)
    lead = (f"{len(hit_pairs)} of {len(tested)} tested task/attribute pairs show a gap larger than chance "
            f"(Benjamini-Yekutieli over the {n_tests} tests of this result, p_adj < {ALPHA})"
            + (f"; {untested} pair(s) not tested or undefined" if untested else ""))
    return Answer(lead + ": " + "; ".join(parts) + ".", pairs, why, n_tests)


def interval_test_notes(reports: Sequence[dict[str, Any]], n_tests: int | None = None) -> list[str]:
    """Where two groups' 95% intervals do not overlap but the test is within chance (or every two overlap but
    the test finds a gap larger than chance), one sentence saying why: the multiplicity adjustment (raw p
    against p_adj over the result's `n_tests`), or what the permutation test compares."""
    from fairmedbench.metrics.specs import find_spec

    if n_tests is None:
        n_tests = sum(_in_family((c or {}).get(GAP_KEY)) for rep in reports for c in rep.get("metrics", {}).values())
    out = []
    for rep in reports:
        where = f"{rep.get('task', '')} by {rep.get('attribute', '')}"
        metrics = rep.get("metrics", {})
        for m, c in metrics.items():
            cell = (c or {}).get(GAP_KEY)
            spec = find_spec(m)
            if not _in_family(cell) or spec is None or spec.kind not in ("gap", "diff"):
                continue
            base = m.rsplit("_", 1)[0]
            if spec.kind == "diff" and _in_family((metrics.get(f"{base}_gap") or {}).get(GAP_KEY)):
                continue  # two groups: the gap is |difference|, and its sentence says it once
            per = {g: metrics.get(base, {}).get(g) or {} for g in rep.get("groups", [])}
            per = {g: x for g, x in per.items() if _finite(x.get("ci_low")) and _finite(x.get("ci_high"))}
            if len(per) < 2:
                continue
            high = max(per, key=lambda g: per[g]["ci_low"])
            low = min(per, key=lambda g: per[g]["ci_high"])
            apart = high != low and per[high]["ci_low"] > per[low]["ci_high"]
            v = disparity(rep, m)
            raw, adj = float(cell["p_value"]), float(cell["p_adjusted"])
            name = gap_name(rep, m)
            base_name = name[1:] if name.startswith("Δ") else _header(base)  # 'ΔFPR@95TPR' -> 'FPR@95TPR'
            if apart and v.key != "disparity":
                lead = (f"{where}: the {base_name} intervals of {_interval(high, per[high])} and "
                        f"{_interval(low, per[low])} do not overlap, yet {name} is within chance")
                if raw < ALPHA:
                    out.append(f"{lead} because of multiplicity: its raw p = {fmt_p(raw)} becomes p_adj = "
                               f"{fmt_p(adj)} after Benjamini-Yekutieli over the {n_tests} tests of this result.")
                else:
                    unit = ("whole patients" if (rep.get("resampling") or {}).get("unit") == "patient" else "rows")
                    over = (f" and judges max − min over all {len(rep['groups'])} groups, not the two picked after "
                            "looking" if len(rep.get("groups", [])) > 2 and spec.kind == "gap" else "")
                    out.append(f"{lead} (raw p = {fmt_p(raw)}): the permutation test compares {name} with its spread "
                               f"when the group labels of {unit} are permuted within label strata{over}, which "
                               "separate per-group intervals do not.")
            elif not apart and v.key == "disparity" and spec.kind in ("gap", "diff"):
                out.append(f"{where}: every two groups' {base_name} intervals overlap, yet {name} is larger than "
                           f"chance (p_adj = {fmt_p(adj)}): overlapping 95% intervals are no test of a difference "
                           "(the difference of two estimates is more precise than either interval shows).")
    return out


# ---------------------------------------------------------------------------------------- (b) versus ERM

def versus_erm(row: dict[str, Any], n_seeds: int, boot: dict[str, Any] | None = None) -> Verdict:
    """Did the row's method change its metric against ERM? `row` is a compare `versus_erm` entry (mean_diff,
    ci_low/ci_high: paired t interval over seeds, paired_p); `boot` the method's paired test-set bootstrap
    interval of the same metric against ERM ({value, ci_low, ci_high}) when compare ran one. With repeated splits
    the row's `unit` is "split" and `n_seeds` counts splits."""
    method, metric, unit = row.get("method", "?"), row.get("metric", "?"), row.get("unit", "seed")
    head, seeds = _header(metric), f"paired t-test over {n_seeds} {unit}s"
    evidence = seeds + (" and the paired test-set bootstrap" if boot else "")
    if n_seeds < 2:
        return Verdict("undefined", f"{method} vs ERM on {head}: undefined: one {unit} (no {unit}-to-{unit} spread "
                                    "to test against).", evidence)
    diff, lo, hi = row.get("mean_diff"), row.get("ci_low"), row.get("ci_high")
    if not _finite(diff):
        return Verdict("undefined", f"{method} vs ERM on {head}: undefined: the metric is undefined in some seed.",
                       evidence)
    p = row.get("paired_p")
    if _finite(p):
        seed_hit = float(p) < ALPHA
    elif _finite(lo) and _finite(hi):  # older comparisons: the same paired t rule read from its interval
        seed_hit, p = lo > 0 or hi < 0, None
    else:
        return Verdict("undefined", f"{method} vs ERM on {head}: undefined: every seed gives the same difference "
                                    "(no spread to test).", evidence)
    size = f"{float(diff):+.3f}" + (f" [{lo:+.3f}, {hi:+.3f}]" if _finite(lo) and _finite(hi) else "")
    boot_hit, boot_text = True, ""
    if boot:
        if _finite(boot.get("ci_low")) and _finite(boot.get("ci_high")):
            boot_hit = boot["ci_low"] > 0 or boot["ci_high"] < 0
            boot_text = (f"; with the test set's sampling error {boot['value']:+.3f} [{boot['ci_low']:+.3f}, "
                         f"{boot['ci_high']:+.3f}]")
        else:
            boot_hit, boot_text = False, "; the test-set bootstrap interval is undefined"
    ptext = f"p = {fmt_p(float(p))}" if p is not None else "paired t interval"
    if not (seed_hit and boot_hit):
        margin, tost = row.get("margin"), row.get("tost_interval")
        if _finite(margin) and tost and -margin < tost[0] and tost[1] < margin and (
                not boot or (_finite(boot.get("ci_low")) and _finite(boot.get("ci_high"))
                             and -margin < boot["ci_low"] and boot["ci_high"] < margin)):
            return Verdict("equivalent", f"{method} is equivalent to ERM on {head} within ±{margin:g} ({size}; two "
                                         f"one-sided tests: 90% paired t interval [{tost[0]:+.3f}, {tost[1]:+.3f}]"
                                         f"{boot_text}).", evidence, None if p is None else float(p))
        why = ptext if not seed_hit else f"{ptext} over {unit}s, but not beyond the test set's sampling error"
        return Verdict("no-difference", f"{method} did not change {head} beyond chance against ERM ({size}; "
                                        f"{why}{boot_text}){_paired_open(row, unit)}.", evidence,
                       None if p is None else float(p))
    up = float(diff) > 0
    better = _direction(metric)
    key = "changed" if better is None else ("better" if up == better else "worse")
    verb = {"better": "improved", "worse": "worsened", "changed": "changed"}[key]
    return Verdict(key, f"{method} {verb} {head} against ERM beyond chance: {size} ({ptext}{boot_text}).",
                   evidence, None if p is None else float(p))


def _paired_open(row: dict[str, Any], unit: str) -> str:
    """What a paired comparison within chance could have found (the inconclusive verdict's words): the paired
    t-test's minimum detectable difference, and the margin it was not shown equivalent within."""
    mde, margin = row.get("mde"), row.get("margin")
    out = (f"; no evidence either way: the paired t-test over {unit}s could only detect differences ≥ {mde:.3f}"
           if _finite(mde) else "")
    return out + (f"; not shown equivalent within ±{margin:g}" if _finite(margin) else "")


def compare_verdicts(doc: dict[str, Any]) -> list[tuple[dict[str, Any], Verdict]]:
    """Every (versus_erm row, verdict) of a compare document, the bootstrap read where compare ran it."""
    n_seeds = {(r["dataset"], r["method"]): int(r.get("n_units") or r.get("n_seeds") or 0)
               for r in doc.get("table", [])}
    out = []
    for row in doc.get("versus_erm", []):
        b = (doc.get("test_bootstrap") or {}).get(row["dataset"]) or {}
        boot = None
        if f"{row['metric']}_vs_erm" in b.get("keys", ()):  # the worst-group value, and the gap where bootstrapped
            boot = (b.get("methods", {}).get(row["method"]) or {}).get(f"{row['metric']}_vs_erm")
        out.append((row, versus_erm(row, n_seeds.get((row["dataset"], row["method"]), 0), boot)))
    return out


# ---------------------------------------------------------------------------------------- (c) headlines

def compare_headline(doc: dict[str, Any]) -> list[str]:
    """The compare page's (and terminal's) opening sentences, one per dataset: which mitigations changed the
    worst-group metric beyond chance (or were shown equivalent to ERM within a margin), and which changed utility."""
    pairs = compare_verdicts(doc)
    out = []
    for ds in doc.get("datasets", []):
        mine = [(r, v) for r, v in pairs if r["dataset"] == ds]
        if not mine:
            out.append(f"{ds}: no mitigation could be compared with ERM (undefined values in every seed).")
            continue
        metrics = list(dict.fromkeys(r["metric"] for r, _ in mine))
        parts = []
        for metric in metrics:
            vs = [v for r, v in mine if r["metric"] == metric]
            head = _header(metric)
            moved = [v.sentence.rstrip(".") for v in vs if v.key in ("better", "worse", "changed", "equivalent")]
            undefined = [v for v in vs if v.key == "undefined"]
            if moved:
                parts.append("; ".join(moved))
            elif len(undefined) == len(vs):
                parts.append(f"{head}: {undefined[0].sentence.split(': ', 1)[1].rstrip('.')}")
            else:
                ps = [v.p for v in vs if v.p is not None]
                bound = (f" (p = {fmt_p(ps[0])})" if len(ps) == 1 else
                         f" (p ≥ {fmt_p(min(ps))} for all {len(ps)})" if ps else "")
                mdes = [r["mde"] for r, v in mine if r["metric"] == metric and v.key == "no-difference"
                        and _finite(r.get("mde"))]
                could = ("" if not mdes else f"; no evidence either way: the paired t-test could only detect "
                         f"differences ≥ {min(mdes):.3f}" + ("" if len(mdes) == 1 else f" to {max(mdes):.3f}"))
                parts.append(f"no mitigation changed {head} against ERM beyond chance{bound}{could}")
        out.append(f"{ds}: " + "; ".join(parts) + ".")
    return out


def board_headline(rows: Sequence[dict[str, Any]]) -> str:
    """The board page's opening sentence: what is ranked (verified rows only) and what is listed unranked."""
    ranked = [r for r in rows if r.get("rank") is not None]
    self_reported = [r for r in rows if r.get("tier") != "verified"]
    if not rows:
        return "Nothing is ranked yet: no submission on this board."
    if not ranked:
        lead = (f"No row is ranked: none of the {len(rows)} row(s) has been verified by a re-run "
                "(`benchmark verify`)" if len(self_reported) == len(rows) else
                "No row is ranked: every verified row carries a flag that keeps it unranked")
    else:
        tops = sorted({(r["dataset"], r["usage"], r["attribute"]) for r in ranked})
        firsts = [next(r for r in ranked if (r["dataset"], r["usage"], r["attribute"]) == k and r["rank"] == 1)
                  for k in tops if any(r["rank"] == 1 and (r["dataset"], r["usage"], r["attribute"]) == k
                                       for r in ranked)]
        leaders = "; ".join(f"{r['dataset']} / {r['attribute']}: {r['model']} {r['revision']}" for r in firsts[:4])
        lead = (f"{len(ranked)} verified row(s) are ranked in {len(tops)} (dataset, usage, attribute) group(s); "
                f"first by ES: {leaders}" + ("; ..." if len(firsts) > 4 else ""))
    tail = (f". {len(self_reported)} self-reported row(s) are listed unranked below (their numbers were recomputed "
            "from the submitted predictions, but the model was not re-run)." if self_reported else ".")
    return lead + tail


def study_friedman(chi2: float | None, p: float | None, n_blocks: int, k: int) -> str | None:
    """Why a Friedman test (and its critical-difference plot, whose Nemenyi post-hoc follows a defined Friedman
    test) is undefined, or None when it is defined: too few blocks or methods, or every value tied."""
    if n_blocks < 2 or k < 3:
        return (f"undefined: it needs at least three methods and two blocks ({k} method(s), {n_blocks} block(s)); "
                "average ranks only, no critical-difference plot")
    if not (_finite(chi2) and _finite(p)):
        return ("undefined: every block ranks the methods the same way with ties throughout (all values tie), so "
                "the Friedman statistic is 0/0; no critical-difference plot")
    return None


def study_mitigation(diff: float | None, lo: float | None, hi: float | None, n_seeds: int,
                     higher_is_better: bool | None) -> str:
    """One study configuration's paired difference against ERM: better / worse / n.s. / 'undefined: one seed'
    (the same paired-over-seeds rule as `versus_erm`, read from the paired t interval)."""
    if n_seeds < 2:
        return "undefined: one seed"
    if not (_finite(diff) and _finite(lo) and _finite(hi)):
        return "undefined"
    if not (lo > 0 or hi < 0) or higher_is_better is None:
        return "n.s." if not (lo > 0 or hi < 0) else "changed"
    return "better" if (lo > 0) == bool(higher_is_better) else "worse"


def site_shift(entry: dict[str, Any] | None, what: str = "the shift") -> Verdict:
    """Did a value change between the internal and an external test set? The shift is a signed difference of two
    independent estimates, so its interval (from independent bootstraps of the two sets) can include 0 and is the
    evidence; without an interval (a group below the minimum size) it is undefined."""
    evidence = ("95% interval of external - internal from one paired bootstrap of the two overlapping test sets"
                if entry and entry.get("paired") else
                "95% interval of external - internal from independent bootstraps of the two test sets")
    if not entry or not _finite(entry.get("shift")):
        return Verdict("undefined", f"{what} is undefined.", evidence)
    lo, hi = entry.get("ci_low"), entry.get("ci_high")
    if not (_finite(lo) and _finite(hi)):
        return Verdict("undefined", f"{what} has no interval (a group below the minimum size).", evidence)
    if lo > 0 or hi < 0:
        return Verdict("shifted", f"{what} is beyond the two test sets' sampling error.", evidence)
    return Verdict("not-shifted", f"{what} is within the two test sets' sampling error.", evidence)


def shift_quantity(shift: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What a shift answer reads: the signed difference of two groups ('difference male - female'), else the gap."""
    if "diff" in shift:
        return f"difference {shift['diff']['of']}", shift["diff"]
    return "gap (max - min)", shift["gap"]


def board_shift_headline(rows: Sequence[dict[str, Any]]) -> str:
    """A board's answer to 'does the fairness measured on the internal test set hold on another site?': per (internal
    dataset, external dataset) and attribute, in how many rows the shift of the group difference (or gap) is beyond
    the two test sets' sampling error (`site_shift`), with the largest such shift; '' when no row has one."""
    found: dict[tuple[str, str], dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]] = {}
    for r in rows:
        for ext in r.get("external") or []:
            if ext.get("shift"):
                found.setdefault((r["dataset"], ext["label"]), {}).setdefault(r["attribute"], []).append(
                    (r, ext["shift"]))
    parts = []
    for (dataset, label), by_attr in found.items():  # in the order of the rows and of each entry's externals
        said = []
        for attribute, items in by_attr.items():
            what, _ = shift_quantity(items[0][1])
            cells = [shift_quantity(sh)[1] for _, sh in items]
            keys = [site_shift(c).key for c in cells]
            moved = [(r, c) for (r, _), c, k in zip(items, cells, keys) if k == "shifted"]
            text = (f"{attribute} ({_header(items[0][1]['metric'])} {what}): {len(moved)} of "
                    f"{len(items) - keys.count('undefined')} row(s)")
            if moved:
                r, c = max(moved, key=lambda m: abs(m[1]["shift"]))
                text += (f", largest {r['model']} {r['revision']}: {c['internal']:+.3f} → {c['external']:+.3f}, "
                         f"shift {c['shift']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]")
            if "undefined" in keys:
                text += f" ({keys.count('undefined')} more without an interval)"
            said.append(text)
        parts.append(f"trained on {dataset} and tested on {label}, the shift is beyond the two test sets' sampling "
                     f"error for " + "; ".join(said))
    if not parts:
        return ""
    joined = "; ".join(parts[:3]) + ("; ..." if len(parts) > 3 else "")
    return f"Does fairness hold on another site? {joined[0].upper()}{joined[1:]}."


def resampling_sentence(rep: dict[str, Any]) -> str:
    """What every interval and test of a report resampled: 'patients (F 412, M 503): ...' or rows."""
    rs = rep.get("resampling") or {}
    n = rs.get("n_clusters", {})
    per = ", ".join(f"{g} {n[g]}" for g in rep.get("groups", []) if g in n)
    if rs.get("unit") == "patient":
        return (f"intervals resample whole patients ({per} patients); the permutation tests move whole patients "
                "between groups")
    if rs.get("unit") == "row":
        return f"intervals resample rows ({per} rows): no patient ids, so rows of one patient count as independent"
    return "resampling unit not recorded (a result written before patient-level resampling)"


def crossed_cell_notes(rows: list[dict[str, Any]]) -> list[str]:
    """Why crossed cells have no value or no interval (compare's `cells` reasons), one line per dataset and reason
    naming its cells."""
    said: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        for g, c in (r.get("cells") or {}).items():
            if c.get("reason") and g not in (cells := said.setdefault((r["dataset"], c["reason"]), [])):
                cells.append(g)
    return [f"{ds}, cell{'s' if len(gs) > 1 else ''} {', '.join(gs)}: {why}" for (ds, why), gs in said.items()]
