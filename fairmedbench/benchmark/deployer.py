"""The deployer-facing sections of an evidence pack's summary.md: EU AI Act Art. 13 (a model card: intended use,
the groups and their measured performance, known limits), Art. 14 (what a human overseer should watch, from the
measured disparities and the monitoring rule) and Art. 72 (the post-market monitoring plan `benchmark monitor`
executes: its windows, its CUSUM rule and false-alarm bound, the command lines). Every figure is read from a
result's reports; the verdict words are report/verdicts.py's; names from the data are escaped (`md`, which
evidence.py uses too)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from fairmedbench.metrics.bootstrap import N_BOOT
from fairmedbench.metrics.sequential import CUSUM_K, MONITOR_ALPHA, MONITOR_HORIZON, rule_text

#: the result kind `benchmark monitor` can follow (an AUC per group and one operating threshold)
MONITORED_KIND = "classification"


#: characters that start markdown or HTML inside a line: backslash-escaped (CommonMark escapes any ASCII
#: punctuation), and <, >, & as entities (HTML blocks and tags; entities render as the characters)
_MD_ESCAPE = str.maketrans({**{c: "\\" + c for c in "\\`*_[]|~#!"}, "<": "&lt;", ">": "&gt;", "&": "&amp;",
                            "\n": " ", "\r": " "})


def md(text: object) -> str:
    """`text` (a group, column or file name, a sentence built from them) as literal markdown: no emphasis, link,
    code, table cell break or HTML can come from it."""
    return str(text).translate(_MD_ESCAPE)


@dataclass(frozen=True)
class Audit:
    """One audited model's result as the deployer sections read it: its reports (one seed's), what it was meant
    for, and how `benchmark monitor` gets its baseline from the pack (shell lines run in the pack folder)."""

    name: str  # "" for a pack of one result; else the method, run or row it is (shown before its lines)
    reports: list[dict[str, Any]]
    kind: str  # the metric engine's kind of the result (classification, segmentation, multiclass)
    intended_use: str  # one markdown sentence: model, usage, task(s), population
    baseline: str  # the evaluate result JSON the monitor reads (in the pack, or made by `baseline_steps`)
    baseline_steps: tuple[str, ...] = ()  # commands that write `baseline` from the pack's files
    label_columns: dict[str, str] = field(default_factory=dict)  # task -> its label column in the baseline
    attribute_columns: dict[str, str] = field(default_factory=dict)  # attribute -> its column in the baseline
    n_rows: int | None = None  # test rows evaluated
    sites: tuple[str, ...] = ()  # other test sites measured (run --eval-dataset)
    level: int = 95  # the intervals' confidence level in percent (the result's meta.ci_level)


def result_audit(doc: dict[str, Any], name: str, intended_use: str, folder: str = "") -> Audit:
    """The Audit of one run seed's result document (`doc`, stored in the pack as `folder`/seed<k>.json beside its
    predictions): the monitor's baseline is an evaluate audit of that seed's test and validation rows (evaluate
    finds the runs' patient_id column by its name)."""
    result = doc["result"]
    block = doc.get("predictions") or {}
    cols = block.get("columns") or {}
    tasks = list(result.get("meta", {}).get("tasks", []))
    labels = dict(zip(tasks, cols.get("labels", [])))
    scores = dict(zip(tasks, cols.get("scores", [])))
    attrs = {a: f"attr:{a}" for a in result.get("meta", {}).get("attributes", [])}
    pred = f"{folder}/{block.get('file')}" if folder else str(block.get("file"))
    policy = next((rep["thresholds"]["operating"].get("policy") for rep in result["reports"]
                   if (rep.get("thresholds") or {}).get("operating")), None)
    out = f"{folder}/audit.json" if folder else "audit.json"
    step = shlex.join(["benchmark", "evaluate", "--predictions", pred, "--label", ",".join(labels.values()),
                       "--score", ",".join(scores[t] for t in labels), "--attribute", ",".join(attrs.values()),
                       *(["--threshold", str(policy)] if policy else []), "--out", out])
    return Audit(name, result["reports"], result["meta"]["kind"], intended_use, out, (step,), labels, attrs,
                 result["meta"].get("n_samples"), tuple(str(e.get("label")) for e in doc.get("external", [])),
                 level_of(result["meta"]))


def level_of(meta: dict[str, Any]) -> int:
    """The intervals' confidence level of a result, in percent (its meta.ci_level; 95 when it records none)."""
    return round(100 * float(meta.get("ci_level", 0.95)))


def _headline(kind: str) -> str:
    from fairmedbench.metrics.specs import headline_metric

    return headline_metric(kind)


def _value(cell: dict[str, Any] | None) -> str:
    if not cell or cell.get("value") is None:
        return "undefined"
    ci = f" [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]" if cell.get("ci_low") is not None else ""
    return f"{cell['value']:.3f}{ci}"


def _lowest(rep: dict[str, Any], metric: str) -> str | None:
    """The group with the lowest defined `metric` value in a report (None when no group has one)."""
    per = rep["metrics"].get(metric) or {}
    defined = [g for g in rep["groups"] if (per.get(g) or {}).get("value") is not None]
    return min(defined, key=lambda g: per[g]["value"]) if defined else None


def _zero_rates(rep: dict[str, Any]) -> list[str]:
    """Groups whose sensitivity or specificity is exactly 0 at the operating threshold, as sentences."""
    out = []
    for metric, what in (("tpr", "sensitivity"), ("tnr", "specificity")):
        per = rep["metrics"].get(metric) or {}
        zero = [g for g in rep["groups"] if (per.get(g) or {}).get("value") == 0]
        if zero:
            out.append(f"{md(rep['task'])} by {md(rep['attribute'])}: the {what} is 0 at the operating threshold "
                       f"in group(s) {', '.join(md(g) for g in zero)}")
    return out


def card(a: Audit) -> list[str]:
    """Art. 13: intended use, each group's measured headline metric with its interval (the lowest named), and the
    known limits (the result's own notes, undefined and zero-rate groups, what was not measured)."""
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.report.html import result_notes
    from fairmedbench.report.verdicts import result_answer

    metric = _headline(a.kind)
    head = metric_spec(metric).header
    out = [f"- Intended use (as examined): {a.intended_use}"]
    if any((rep.get("thresholds") or {}).get("operating") for rep in a.reports):
        out.append("- Operating point: sensitivity and specificity hold at the operating threshold stated above; a "
                   "deployment at another threshold has other rates.")
    for rep in a.reports:
        per = rep["metrics"].get(metric) or {}
        counts = rep.get("counts", {})
        cells = "; ".join(f"{md(g)} {_value(per.get(g))} (n {counts.get(g, {}).get('n', '?')})"
                          for g in rep["groups"])
        low = _lowest(rep, metric)
        lowest = f"; lowest: {md(low)}" if low is not None and len(rep["groups"]) > 1 else ""
        out.append(f"- Measured performance, {md(rep['task'])} by {md(rep['attribute'])} ({head}, {a.level}% "
                   f"interval): all {_value(per.get('__overall__'))}; {cells}{lowest}.")
    undefined = {(rep["task"], rep["attribute"]): [g for g in rep["groups"]
                                                   if ((rep["metrics"].get(metric) or {}).get(g) or {}).get("value")
                                                   is None] for rep in a.reports}
    limits = [*(f"{md(task)} by {md(attr)}: {head} undefined in group(s) {', '.join(md(g) for g in groups)}"
                for (task, attr), groups in undefined.items() if groups),
              *(z for rep in a.reports for z in _zero_rates(rep)),
              *(md(n) for rep in a.reports for n in result_notes(rep) if "resampl" not in n),
              *(md(w) for w in result_answer(a.reports).why)]
    rows = f" on {a.n_rows} test rows" if a.n_rows is not None else ""
    limits.append(f"measured{rows} of one test population"
                  + (f" and on other site(s) {', '.join(md(s) for s in a.sites)}" if a.sites else
                     "; no other site, scanner or population was measured"))
    out += [f"- Known limit: {line}." if not line.endswith(".") else f"- Known limit: {line}" for line in limits]
    return out


def _worst(rep: dict[str, Any], metric: str) -> str | None:
    """The group with the worst value of a per-group `metric` by its direction (None: no direction, or fewer than
    two groups with a value)."""
    from fairmedbench.metrics.specs import find_spec

    spec = find_spec(metric)
    per = rep["metrics"].get(metric) or {}
    defined = [g for g in rep["groups"] if (per.get(g) or {}).get("value") is not None]
    if spec is None or spec.higher_is_better is None or len(defined) < 2:
        return None
    pick = min if spec.higher_is_better else max
    return pick(defined, key=lambda g: per[g]["value"])


def oversight(a: Audit) -> list[str]:
    """Art. 14: per (task, attribute) the verdict (report/verdicts.py) and, for each gap larger than chance, the
    group with the worst value of the metric it is a gap of; groups never called positive or negative; what a
    monitoring alert means."""
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.report.verdicts import gap_name, pair_answer

    out = []
    for rep in a.reports:
        pair = pair_answer(rep)
        out.append(f"- {md(pair.sentence)}")
        for m, _, _ in pair.hits:
            base = m.removesuffix("_gap") if m.endswith("_gap") else m.removesuffix("_diff")
            group = _worst(rep, base) if base in rep["metrics"] else None
            if group is not None:
                cell = _value(rep["metrics"][base][group])
                out.append(f"- Watch {md(group)} ({md(rep['task'])} by {md(rep['attribute'])}): the worst "
                           f"{md(metric_spec(base).header)} of its groups, {cell}, where {md(gap_name(rep, m))} is "
                           "larger than chance.")
    out += [f"- Watch: {z}." for rep in a.reports for z in _zero_rates(rep)]
    if a.kind == MONITORED_KIND:
        out.append("- An alert of the monitoring rule (Art. 72 below) names a group whose AUC fell beyond the "
                   "audit's sampling error over the windows seen; until it is explained, that group's outputs need "
                   "the overseer's review.")
    return out


def monitoring_plan(a: Audit, alpha: float = MONITOR_ALPHA, horizon: int = MONITOR_HORIZON) -> list[str]:
    """Art. 72: what `benchmark monitor` computes per window and group, its windows, its rule with the false-alarm
    bound for this result's groups (metrics.sequential.rule_text), the audit's MDE that sets k, and the commands."""
    if a.kind != MONITORED_KIND:
        return [f"- `benchmark monitor` follows binary classification (an AUC per group and one operating "
                f"threshold); this result is {md(a.kind)}, so no monitoring plan here is executed by it."]
    out = []
    for task, label in a.label_columns.items():
        reps = [r for r in a.reports if r["task"] == task and r["attribute"] in a.attribute_columns]
        if not reps:
            continue
        n_groups = sum(len(r["groups"]) for r in reps)
        thr = next(((r.get("thresholds") or {}).get("operating") or {} for r in reps), {})
        attrs = ", ".join(md(r["attribute"]) for r in reps)
        mdes = "; ".join(f"{md(r['attribute'])} {(r.get('tests') or {})['auc_gap']['mde']:.3f}" for r in reps
                         if (r.get("tests") or {}).get("auc_gap", {}).get("mde") is not None)
        command = ["benchmark", "monitor", "--baseline", a.baseline, "--stream", "LATER.parquet",
                   "--window-column", "WINDOW", "--label", label, "--attribute",
                   ",".join(a.attribute_columns[r["attribute"]] for r in reps), "--report", "--out",
                   str(PurePosixPath(a.baseline).parent / "monitor")]
        out += [f"- {md(task)}: per window and group ({n_groups} groups of {attrs}) the AUC, and the TPR and FPR at "
                f"the audit's operating threshold {thr.get('value')}, with patient-level bootstrap intervals "
                f"({N_BOOT} resamples), and each group's score drift against the audit's scores.",
                "- Windows: each later prediction file (the audit's columns) with a WINDOW column, a window id or a "
                f"date (`--window-bins` bins a numeric one); the false-alarm bound covers {horizon} windows.",
                f"- Rule: {md(rule_text(alpha, horizon, n_groups))}",
                f"- k from the audit's ΔAUC MDE: {mdes}." if mdes else
                f"- k: the audit records no ΔAUC MDE, so k = {CUSUM_K}.",
                "- Commands (in this folder):", "",
                "```", *a.baseline_steps, shlex.join(command), "```", ""]
    return out or ["- No task of this result has a report by an audited attribute to monitor."]


def articles(audits: Sequence[Audit]) -> str:
    """The three sections (Art. 13, 14, 72) as markdown, one block per audit when there are several."""
    sections = [("EU AI Act Art. 13: for deployers (model card)", card),
                ("EU AI Act Art. 14: what a human overseer should watch", oversight),
                ("EU AI Act Art. 72: post-market monitoring plan (executed by `benchmark monitor`)", monitoring_plan)]
    out = []
    for title, lines in sections:
        out += [f"## {title}", ""]
        for a in audits:
            if a.name:
                out += [f"### {md(a.name)}", ""]
            out += [*lines(a), ""]
    return "\n".join(out)


__all__ = ["Audit", "articles", "card", "level_of", "md", "monitoring_plan", "oversight", "result_audit"]
