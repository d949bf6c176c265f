"""The audit page of `benchmark evaluate --report`: one self-contained HTML file that answers "is there a
disparity, and how sure are we" first (report/verdicts.py's answer over every tested gap, a tasks x attributes
picture when there are many pairs, then headline gaps and signed differences with CIs and the permutation-test
verdicts, worst group, notes on
small groups and undefined metrics), then per (task, attribute) ROC/PR/calibration by group, rates at the
global FPR-0.2 threshold, sAUROC and balanced Brier, score-distribution KS tests by group, the resampled test
set when one was drawn, and the provenance collapsed at the end. Built from report.html's components."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.metrics.groups import Attribute
from fairmedbench.metrics.result import GAP, OVERALL

if TYPE_CHECKING:
    from fairmedbench.metrics.stats import KSRecord
    from fairmedbench.report.html import Table

#: per-group columns of the audit's group table (all in the MetricSpec registry)
GROUP_METRICS = ("prevalence", "auc", "ap", "sauroc", "balanced_brier", "calibration_loss", "ece")
#: the rates at the global threshold with overall FPR <= 0.2 (the engine's default operating point)
RATE_METRICS = ("tpr_at_fpr20", "fpr_at_fpr20", "youden_j_at_fpr20")
VERSIONS = ("numpy", "scipy", "scikit-learn", "pandas", "matplotlib", "jinja2")


@dataclass
class AuditData:
    """The evaluated (test) rows: labels and scores (n, tasks) and each attribute's groups as evaluated
    (binned, crossed)."""

    tasks: list[str]
    y: np.ndarray
    s: np.ndarray
    attributes: dict[str, Attribute]

    def labels(self, attribute: str) -> np.ndarray:
        """Each row's group name (None where the attribute is missing)."""
        a = self.attributes[attribute]
        return np.array(list(a.groups) + [None], dtype=object)[a.codes]


#: the label class a score KS test is run within, by label value
WITHIN = ("negatives", "positives")


def score_ks(data: AuditData, correction: str = "by", alpha: float = 0.05) -> tuple[list[KSRecord], list[str]]:
    """KS tests (scipy ks_2samp via metrics.stats) of the score distributions of every pair of groups of every
    attribute, within negatives and within positives (so a prevalence difference alone is no finding), with
    one `correction` over the whole family of the page; also the reasons groups were left out. Each record's
    `feature` is the task, `variable` the attribute and `within` the label class."""
    from fairmedbench.metrics.stats import correct_ks, ks_between_groups

    raw: list[KSRecord] = []
    skipped: list[str] = []
    for k, task in enumerate(data.tasks):
        for name in data.attributes:
            labels = data.labels(name)
            for cls in (0, 1):
                m = (data.y[:, k] == cls) & (labels != None)  # noqa: E711 (element-wise)
                if len(set(labels[m])) < 2:
                    continue
                res = ks_between_groups(data.s[m, k], labels[m].astype(str), [task], correction="none")
                skipped += [f"{task} / {name} = {g}, label {cls}: {why}" for g, why in res.skipped.items()]
                raw += [replace(r, group_a=str(r.group_a), group_b=str(r.group_b), variable=name, within=WITHIN[cls])
                        for r in res.records]
    return correct_ks(raw, correction, alpha), skipped


def _ks_table(tests: Sequence[KSRecord], correction: str, alpha: float = 0.05) -> Table:
    from fairmedbench.report.html import Cell, Table

    rows = [[Cell(t.feature), Cell(t.variable), Cell(t.within), Cell(str(t.group_a)), Cell(str(t.group_b)),
             Cell(f"{t.n_a} / {t.n_b}", "num"), Cell(f"{t.statistic:.3f}", "num"),
             Cell(f"{t.p_value:.3g}", "num"), Cell(f"{t.p_adjusted:.3g}", "num"),
             Cell("yes" if t.reject else "no", "yes" if t.reject else "no")]
            for t in tests]
    name = correction.upper()
    return Table(["task", "attribute", "within", "group A", "group B", "n A / n B", "KS D", "p", f"p ({name})",
                  f"differ at {alpha:g}?"], rows,
                 f"score distributions by group: two-sample KS (scipy ks_2samp), {name}-corrected over all "
                 f"{len(tests)} tests of this page")


def _rates(rep: dict[str, Any]) -> tuple[Any, tuple[float, list[float], list[float]] | None]:
    """The table of TPR, FPR and Youden's J per group at the global FPR-0.2 threshold, and the points to mark."""
    from fairmedbench.report.html import Cell, Table, header, metric_cell

    thr = rep.get("thresholds", {}).get("rates_at_fpr20", {})
    t = thr.get("value")  # a number, "inf" (no score above the cut) or None (no negatives)
    shown = "—" if t is None else t if isinstance(t, str) else f"{t:.4g}"
    rows = [[Cell({GAP: "gap (max − min)"}.get(g, "all" if g == OVERALL else g)),
             *[metric_cell(rep, m if g != GAP else f"{m}_gap", g) for m in RATE_METRICS]]
            for g in [OVERALL, *rep["groups"], GAP]]
    caption = (f"rates at one global threshold, {thr.get('rule', 'the smallest with overall FPR <= 0.2')}: "
               f"positive iff score {thr.get('comparator', '>=')} {shown}")
    table = Table(["group", *[header(m) for m in RATE_METRICS]], rows, caption)
    if t is None:
        return table, None

    def values(metric: str) -> list[float]:
        cells = [rep["metrics"].get(metric, {}).get(g) or {} for g in rep["groups"]]
        return [np.nan if c.get("value") is None else c["value"] for c in cells]

    return table, (t, values("fpr_at_fpr20"), values("tpr_at_fpr20"))


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in VERSIONS:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def write_audit_report(path: Path, doc: dict[str, Any], data: AuditData, command: Sequence[str] = (),
                       correction: str = "by") -> Path:
    """Write the audit page of an evaluate result document and its evaluated rows."""
    from fairmedbench.engine import store
    from fairmedbench.report.figures import score_ecdf_by_group
    from fairmedbench.report.html import (
        TEMPLATES,
        Img,
        answer_section,
        group_figures,
        group_table,
        headline_table,
        resampled_section,
        result_notes,
        signed_difference_table,
    )

    reports = doc["result"]["reports"]
    meta = doc["result"]["meta"]
    sections = []
    for rep in reports:
        k = data.tasks.index(rep["task"])
        y, s, labels = data.y[:, k], data.s[:, k], data.labels(rep["attribute"])
        rates, points = _rates(rep)
        figures = group_figures(y, s, labels, rep["groups"], rep["attribute"], points)
        figures.append(Img(score_ecdf_by_group(y, s, labels, rep["groups"], f"scores by {rep['attribute']}"),
                           f"score distributions by {rep['attribute']} within each label (what the KS tests compare)"))
        sections.append({"title": f"{rep['task']} by {rep['attribute']}", "groups": group_table(
            rep, GROUP_METRICS, "per group (95% CI); sAUROC: all positives against the group's negatives; "
            "balanced Brier: mean of the Brier score over positives and over negatives; calibration loss: Brier "
            "minus the Brier of the PAV-recalibrated scores (Mosquera et al.)"),
            "rates": rates, "diffs": signed_difference_table(rep), "figures": figures})
    tests, ks_skipped = score_ks(data, correction)
    from fairmedbench.analysis.data_checks import sentences

    notes = [n for rep in reports for n in result_notes(rep, meta.get("min_group_size"))] + [
        n for n in doc.get("notes", []) if not n.startswith("data check: ")]  # those have their own box
    inputs = doc.get("inputs", {})
    first: dict[str, Any] = next(iter(inputs.values()), {})
    source = first.get("path", "demo predictions") if inputs else "predictions"
    prov = {"inputs": inputs, "command (process arguments)": list(command), "options": doc.get("spec"),
            "run_id": doc.get("run_id"), "created_at": doc.get("created_at"),
            "fairmedbench_version": doc.get("fairmedbench_version"), "git_commit": doc.get("git_commit"),
            "versions": _versions(), "environment": doc.get("environment"), "metric settings": meta}
    text = TEMPLATES.get_template("report/audit.html.j2").render(
        title=f"fairness audit: {source}", source=source, meta=meta, n=meta.get("n_samples"),
        data_checks=sentences(meta.get("data_checks") or {}),
        headline=headline_table(reports, "classification", [f"{m}_gap" for m in RATE_METRICS[:2]]),
        answer=answer_section(reports),
        notes=notes, sections=sections, ks=_ks_table(tests, correction) if tests else None, ks_skipped=ks_skipped,
        resampled=resampled_section(reports, doc.get("test_resample")), provenance=prov,
        provenance_heading="provenance: inputs, command, versions")
    return store.write_text(path, text)
