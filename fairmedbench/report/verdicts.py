"""The verdict rules, written once: every sentence that answers a question on the terminal or on a page comes from
one function here, so a page can never print two verdicts for one question (e.g. Welch p = 0.035 beside "CI
excludes 0: no"), and undefined evidence is called undefined, with the reason.

Questions:
  (a) `disparity`: is there a disparity on attribute A? Read from the gap's permutation test (Benjamini-Yekutieli
      adjusted p over the result's family of tests where recorded, else the raw p): "larger than chance: p = ..."
      when p < ALPHA. A gap (max - min) is never below 0, so its bootstrap interval never contains 0 and is never
      read as evidence; a result without a test is "not tested", with the reason.
  (b) `versus_erm`: did mitigation M change metric X over ERM? One rule: the paired t-test over seeds (same seeds,
      same splits; its p and the shown paired t interval come from the same t distribution, so they cannot
      disagree) and, where compare ran the paired test-set bootstrap for X, that interval must exclude 0 as well
      (both the seed-to-seed and the test set's sampling error count). One seed, or values undefined in a seed,
      is "undefined: one seed" (or the reason), never "no clear difference".
  (c) `compare_headline`, `board_headline`, `study_headline`: the one or two sentences a page opens with;
      `board_shift_headline` answers a board's external evaluation (does fairness hold on another site?) from
      `site_shift`.
Pure Python (plus the MetricSpec registry): no torch, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import TypeIs

ALPHA = 0.05
GAP_KEY = "__gap__"  # metrics.result.GAP, repeated to keep this module free of the metric engine's imports


@dataclass(frozen=True)
class Verdict:
    """One answer: a machine-readable `key`, the sentence shown, the evidence it rests on, its p-value (if any)."""

    key: str  # disparity | no-evidence | not-tested | undefined | better | worse | changed | no-difference | shifted |
    # not-shifted
    sentence: str
    evidence: str
    p: float | None = None

    @property
    def short(self) -> str:
        """The table cell: 'larger than chance (p = 0.003)', 'undefined: one seed', ..."""
        raw = ", unadjusted" if self.evidence.endswith("unadjusted") else ""
        return _SHORT.get(self.key, self.key) + (f" (p = {fmt_p(self.p)}{raw})" if self.p is not None else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


_SHORT = {"disparity": "larger than chance", "no-evidence": "within chance", "not-tested": "not tested",
          "undefined": "undefined", "better": "better than ERM", "worse": "worse than ERM",
          "changed": "differs from ERM", "no-difference": "no difference beyond chance",
          "shifted": "beyond sampling error", "not-shifted": "within sampling error"}


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
    report's attribute? `rep` is an AttributeReport.to_dict()."""
    where = f"{rep.get('task', '')} by {rep.get('attribute', '')}".strip()
    head = _header(metric)
    cell = (rep.get("metrics", {}).get(metric) or {}).get(GAP_KEY)
    evidence = "permutation test of group labels"
    if not cell or not _finite(cell.get("value")):
        why = (rep.get("gap_notes") or {}).get(metric) or "fewer than two groups have a defined value"
        return Verdict("undefined", f"{where}: {head} is undefined ({why}), so disparity cannot be assessed.",
                       evidence)
    value = float(cell["value"])
    adjusted = cell.get("p_adjusted")
    p = adjusted if _finite(adjusted) else cell.get("p_value")
    if not _finite(p):
        why = ("the result records no permutation test (it was computed without one); recompute it with a "
               "version that runs the test" if "p_value" not in cell else
               "the permutation test is undefined here (e.g. a group with one class)")
        return Verdict("not-tested", f"{where}: {head} = {value:.3f}; disparity not tested: {why}.", evidence)
    p = float(p)
    which = "Benjamini-Yekutieli adjusted over this result's tests" if _finite(adjusted) else "unadjusted"
    evidence = f"{evidence}, p {which}"
    if p < ALPHA:
        return Verdict("disparity", f"{where}: {head} = {value:.3f} is larger than chance: p = {fmt_p(p)} "
                                    f"({which}).", evidence, p)
    return Verdict("no-evidence", f"{where}: {head} = {value:.3f} is within what chance gives between groups "
                                  f"of these sizes: p = {fmt_p(p)} ({which}); no evidence of a disparity.",
                   evidence, p)


def report_disparities(reports: Sequence[dict[str, Any]], metric_of: Callable[[dict[str, Any]], str]
                       ) -> list[Verdict]:
    """`disparity` for every report, on the metric `metric_of(rep)` names (the task's headline gap)."""
    return [disparity(rep, metric_of(rep)) for rep in reports]


def disparity_headline(verdicts: Sequence[Verdict]) -> str:
    """One sentence over a page's disparity verdicts: how many are larger than chance, and which."""
    if not verdicts:
        return "No attribute to assess."
    hits = [v for v in verdicts if v.key == "disparity"]
    tested = [v for v in verdicts if v.key in ("disparity", "no-evidence")]
    if not tested:
        return (verdicts[0].sentence if len(verdicts) == 1 else
                f"Disparity could not be assessed for any of the {len(verdicts)} task/attribute pairs (each one's "
                "reason follows).")
    lead = (f"{len(hits)} of {len(tested)} tested task/attribute pair(s) show a gap larger than chance"
            + (f" ({len(verdicts) - len(tested)} not tested or undefined)" if len(tested) < len(verdicts) else ""))
    return lead + (": " + " ".join(v.sentence for v in hits[:3]) if hits else ".")


# ---------------------------------------------------------------------------------------- (b) versus ERM

def versus_erm(row: dict[str, Any], n_seeds: int, boot: dict[str, Any] | None = None) -> Verdict:
    """Did the row's method change its metric against ERM? `row` is a compare `versus_erm` entry (mean_diff,
    ci_low/ci_high: paired t interval over seeds, paired_p); `boot` the method's paired test-set bootstrap
    interval of the same metric against ERM ({value, ci_low, ci_high}) when compare ran one."""
    method, metric = row.get("method", "?"), row.get("metric", "?")
    head, seeds = _header(metric), f"paired t-test over {n_seeds} seeds"
    evidence = seeds + (" and the paired test-set bootstrap" if boot else "")
    if n_seeds < 2:
        return Verdict("undefined", f"{method} vs ERM on {head}: undefined: one seed (no seed-to-seed spread to "
                                    "test against).", evidence)
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
        why = ptext if not seed_hit else f"{ptext} over seeds, but not beyond the test set's sampling error"
        return Verdict("no-difference", f"{method} did not change {head} beyond chance against ERM ({size}; "
                                        f"{why}{boot_text}).", evidence, None if p is None else float(p))
    up = float(diff) > 0
    better = _direction(metric)
    key = "changed" if better is None else ("better" if up == better else "worse")
    verb = {"better": "improved", "worse": "worsened", "changed": "changed"}[key]
    return Verdict(key, f"{method} {verb} {head} against ERM beyond chance: {size} ({ptext}{boot_text}).",
                   evidence, None if p is None else float(p))


def compare_verdicts(doc: dict[str, Any]) -> list[tuple[dict[str, Any], Verdict]]:
    """Every (versus_erm row, verdict) of a compare document, the bootstrap read where compare ran it."""
    n_seeds = {(r["dataset"], r["method"]): int(r.get("n_seeds") or 0) for r in doc.get("table", [])}
    out = []
    for row in doc.get("versus_erm", []):
        b = (doc.get("test_bootstrap") or {}).get(row["dataset"]) or {}
        boot = None
        if b.get("keys") and row["metric"] == b["keys"][0]:
            boot = (b.get("methods", {}).get(row["method"]) or {}).get(f"{b['keys'][0]}_vs_erm")
        out.append((row, versus_erm(row, n_seeds.get((row["dataset"], row["method"]), 0), boot)))
    return out


# ---------------------------------------------------------------------------------------- (c) headlines

def compare_headline(doc: dict[str, Any]) -> list[str]:
    """The compare page's (and terminal's) opening sentences, one per dataset: which mitigations changed the
    worst-group metric beyond chance, and which changed utility."""
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
            moved = [v.sentence.rstrip(".") for v in vs if v.key in ("better", "worse", "changed")]
            undefined = [v for v in vs if v.key == "undefined"]
            if moved:
                parts.append("; ".join(moved))
            elif len(undefined) == len(vs):
                parts.append(f"{head}: {undefined[0].sentence.split(': ', 1)[1].rstrip('.')}")
            else:
                ps = [v.p for v in vs if v.p is not None]
                bound = (f" (p = {fmt_p(ps[0])})" if len(ps) == 1 else
                         f" (p ≥ {fmt_p(min(ps))} for all {len(ps)})" if ps else "")
                parts.append(f"no mitigation changed {head} against ERM beyond chance{bound}")
        out.append(f"{ds}: " + "; ".join(parts) + ".")
    return out


def board_headline(rows: Sequence[dict[str, Any]]) -> str:
    """The board page's opening sentence: what is ranked (verified rows only) and what is listed unranked."""
    ranked = [r for r in rows if r.get("rank") is not None]
    self_reported = [r for r in rows if r.get("tier") != "verified"]
    if not rows:
        return "No submission on this board yet."
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
