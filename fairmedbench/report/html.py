"""The report pages' shared components and the run and compare pages. Every page (run, compare, audit in
report/audit.py, and the leaderboard) is a jinja2 template under report/templates (autoescaped, extending
base.html.j2) built from the macros of components.html.j2: tables of Cells, captioned figures (matplotlib PNGs
inlined as data: URIs, report/figures.py), notes and the collapsed provenance. The functions here turn result
documents into those tables and notes, so run, compare and audit pages show a number the same way. `Figure`
and `Shape` are the leaderboard's inline SVG (its scatter carries per-point tooltips)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from jinja2 import Environment, PackageLoader, PrefixLoader, StrictUndefined, select_autoescape

from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.metrics.result import GAP, OVERALL
from fairmedbench.metrics.specs import board_metrics, find_spec, headline_metric, metric_spec, table_metrics

if TYPE_CHECKING:
    from fairmedbench.report.verdicts import PairAnswer, Verdict

# Every page of the package: "report/<name>" from fairmedbench/report/templates, "leaderboards/<name>" from
# fairmedbench/leaderboards/templates; both extend report/base.html.j2. Autoescape is on for every template.
TEMPLATES = Environment(
    loader=PrefixLoader({"report": PackageLoader("fairmedbench.report"),
                         "leaderboards": PackageLoader("fairmedbench.leaderboards")}),
    autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default=True),
    undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
TEMPLATES.filters["json_pretty"] = lambda value: json.dumps(value, indent=2, default=str)


@dataclass(frozen=True)
class Shape:
    """One SVG element: tag, attributes (formatted strings), text and tooltip; the `svg` macro escapes them."""

    tag: str
    attrs: dict[str, str]
    text: str = ""
    title: str = ""


@dataclass(frozen=True)
class Figure:
    """An inline SVG: the <svg> element's attributes, an accessible title and the shapes in drawing order."""

    attrs: dict[str, str]
    shapes: list[Shape] = field(default_factory=list)
    title: str = ""




# --- components: what every page's tables, notes and figures are made of ------------------------------------

@dataclass(frozen=True)
class Img:
    """A figure as a base64 PNG data: URI with its caption (the `figure` macro)."""

    uri: str
    caption: str


@dataclass(frozen=True)
class Cell:
    """One table cell: text, a css class (num, yes, no, na) and a tooltip (the `table` macro)."""

    text: str
    css: str = ""
    title: str = ""


@dataclass
class Table:
    """A table for the `table` macro: header, rows of Cells and a caption."""

    header: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    css: str = "metrics"


def interval_text(c: dict[str, Any] | None, signed: bool = False) -> str:
    """'0.812 [0.800, 0.830]' (CI when there is one), '—' when undefined; `signed` shows the sign."""
    if not c or c.get("value") is None:
        return "—"
    f = "{:+.3f}" if signed else "{:.3f}"
    ci = f" [{f.format(c['ci_low'])}, {f.format(c['ci_high'])}]" if c.get("ci_low") is not None else ""
    return f.format(c["value"]) + ci


def group_label(g: str) -> str:
    """How a result's group key is shown: the overall row is 'all', the between-group row 'between groups'."""
    return {OVERALL: "all", GAP: "between groups"}.get(g, g)


def metric_cell(rep: dict[str, Any], metric: str, group: str, signed: bool = False) -> Cell:
    """A value with its CI; the tooltip says why there is no CI when the result records a reason."""
    c = rep["metrics"].get(metric, {}).get(group)
    why = rep.get("ci_notes", {}).get(metric, {}).get(group, "")
    return Cell(interval_text(c, signed), "num", why)


def verdict_cell(v: Verdict) -> Cell:
    """A report.verdicts.Verdict as a table cell: its short answer, the full sentence and evidence as tooltip."""
    css = {"disparity": "yes", "no-evidence": "no", "raw-only": "na", "better": "no", "worse": "yes", "changed": "yes",
           "no-difference": "no", "shifted": "yes", "not-shifted": "no", "equivalent": "no"}.get(v.key, "na")
    return Cell(v.short, css, f"{v.sentence} Evidence: {v.evidence}.")


def pair_cell(pa: PairAnswer, rep: dict[str, Any]) -> Cell:
    """A (task, attribute)'s verdict over every tested gap as a cell: the metrics larger than chance (or 'within
    chance'), the pair's sentence as tooltip."""
    from fairmedbench.report.verdicts import fmt_p, gap_name

    if pa.hits:
        named = ", ".join(gap_name(rep, m) for m, _, _ in pa.hits)
        top = fmt_p(max(v.p or 0.0 for _, v, _ in pa.hits))
        return Cell(f"larger than chance: {named} (p_adj {'=' if len(pa.hits) == 1 else '≤'} {top})", "yes",
                    pa.sentence)
    return Cell("within chance" if pa.tested else "not tested", "no" if pa.tested else "na", pa.sentence)


def answer_section(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a run or audit page opens with (report/verdicts.py `result_answer`, the terminal's and summary.md's
    words): the headline sentence; from FOLD_AT (task, attribute) pairs on, the tasks x attributes picture and
    the per-pair sentences folded below it (else the sentences shown); where intervals and tests disagree, why."""
    from fairmedbench.report.verdicts import FOLD_AT, result_answer

    ans = result_answer(reports)
    many = len(ans.pairs) >= FOLD_AT
    sentences = ans.sentences if len(ans.pairs) > 1 else []
    return {"headline": ans.headline, "sentences": sentences, "folded": many,
            "picture": answer_picture(reports) if many else None, "why": ans.why}


def answer_picture(reports: Sequence[dict[str, Any]]) -> Table:
    """Tasks x attributes: each cell the largest tested gap larger than chance (marked, with the metric's name
    and how many more there are), the rest muted ('within chance', 'not tested')."""
    from fairmedbench.report.verdicts import gap_name, gap_value, pair_answer

    tasks = list(dict.fromkeys(r["task"] for r in reports))
    attributes = list(dict.fromkeys(r["attribute"] for r in reports))
    cells: dict[tuple[str, str], Cell] = {}
    for rep in reports:
        pa = pair_answer(rep)
        if pa.hits:
            m, _, value = pa.hits[0]
            more = f" +{len(pa.hits) - 1}" if len(pa.hits) > 1 else ""
            cells[rep["task"], rep["attribute"]] = Cell(f"●\u00a0{gap_name(rep, m)} {gap_value(m, value)}{more}", "yes",
                                                        pa.sentence)
        else:
            cells[rep["task"], rep["attribute"]] = Cell("within chance" if pa.tested else "not tested", "muted",
                                                        pa.sentence)
    rows = [[Cell(t), *[cells.get((t, a), Cell("—", "muted")) for a in attributes]] for t in tasks]
    return Table(["task", *attributes], rows, "each cell: the largest tested gap larger than chance (● marked; +k: k "
                 "more in that pair), Benjamini-Yekutieli adjusted over this result's tests; hover a cell for its "
                 "sentence", "grid")


def group_table(rep: dict[str, Any], metrics: Sequence[str], caption: str = "") -> Table:
    """Per-group values with CIs: n, positives (or empty ground truths), then `metrics`; small groups flagged."""
    counts = rep.get("counts", {})
    second = "empty GT" if "n_empty_gt" in counts.get(OVERALL, {}) else "n+"
    rows = []
    for g in [OVERALL, *rep["groups"]]:
        c = counts.get(g, {})
        small = " (small)" if g in rep.get("small_groups", []) else ""
        rows.append([Cell(group_label(g) + small), Cell(str(c.get("n", "")), "num"),
                     Cell(str(c.get("n_empty_gt", c.get("n_pos", ""))), "num"),
                     *[metric_cell(rep, m, g) for m in metrics]])
    return Table(["group", "n", second, *[header(m) for m in metrics]], rows, caption)


def headline_table(reports: Sequence[dict[str, Any]], task: str, extra_gaps: Sequence[str] = ()) -> Table:
    """One row per (task, attribute): utility, the signed difference between two groups with its CI, the
    disparity verdict over every tested gap (report/verdicts.py `pair_answer`), the worst group, then the
    registry's between-group columns (gaps with CIs) and `extra_gaps`."""
    from fairmedbench.report.verdicts import pair_answer

    util = headline_metric(task)
    gaps = [s.name for s in table_metrics(task, between_groups=True)] + list(extra_gaps)
    rows = []
    for rep in reports:
        counts = rep.get("counts", {})
        groups = ", ".join(f"{g} ({counts.get(g, {}).get('n', '?')})" for g in rep["groups"])
        diff = rep["metrics"].get(f"{util}_diff", {}).get(GAP)
        if len(rep["groups"]) == 2:
            first, second = rep["groups"]
            diff_cell = Cell(f"{second} − {first}: {interval_text(diff, signed=True)}", "num",
                             rep.get("ci_notes", {}).get(f"{util}_diff", {}).get(GAP, ""))
        else:
            diff_cell = Cell("—", "na")
        judged = pair_cell(pair_answer(rep), rep)
        worst = rep.get("worst_group", {}).get(util)
        worst_cell = Cell("—" if worst is None else f"{worst}: {interval_text(rep['metrics'][util].get(worst))}")
        rows.append([Cell(rep["task"]), Cell(rep["attribute"]), Cell(groups), metric_cell(rep, util, OVERALL),
                     diff_cell, judged, worst_cell, *[metric_cell(rep, g, GAP) for g in gaps]])
    u = metric_spec(util).header
    return Table(["task", "attribute", "groups (n)", f"{u} (all)", f"signed {u} difference",
                  "disparity (permutation tests, p_adj)", f"worst group ({u})",
                  *[header(g) for g in gaps]], rows,
                 "headline: gaps (max − min over groups) and signed differences with 95% bootstrap CIs (a gap's "
                 "interval never contains 0, so the disparity verdict reads the permutation tests of every tested gap "
                 "and difference, Benjamini-Yekutieli adjusted over this result's tests)", "headline")


def signed_difference_table(rep: dict[str, Any]) -> Table | None:
    """For a two-group attribute: every signed difference (second − first group) with CI and verdict."""
    if len(rep["groups"]) != 2:
        return None
    from fairmedbench.report.verdicts import disparity

    first, second = rep["groups"]
    rows = [[Cell(header(m)), metric_cell(rep, m, GAP, signed=True), verdict_cell(disparity(rep, m))]
            for m, c in rep["metrics"].items() if GAP in c and _kind(m) == "diff"]
    return Table(["metric", f"{second} − {first} [95% CI]", "larger than chance? (permutation test, p_adj; raw p: "
                  "outside the adjusted family, no verdict)"], rows,
                 f"signed differences, {rep['task']} by {rep['attribute']}") if rows else None


def result_notes(rep: dict[str, Any], min_group_size: int | None = None) -> list[str]:
    """The resampling unit of every interval, warnings, and why numbers are missing or have no CI: skipped
    (one-class, empty) groups, gaps without two groups, small groups, degenerate bootstrap distributions (the
    engine's ci_notes), samples without an attribute value."""
    from fairmedbench.report.verdicts import resampling_sentence

    where = f"{rep['task']} / {rep['attribute']}"
    out = [f"{where}: {resampling_sentence(rep)}"] + [f"{where}: {w}" for w in rep.get("warnings", [])]
    out += [f"{where} = {g}: {why}" for g, why in rep.get("skipped", {}).items()]
    out += [f"{where}, {header(m)}: {why}" for m, why in rep.get("gap_notes", {}).items()]
    small = rep.get("small_groups", [])
    for g in small:
        n = rep.get("counts", {}).get(g, {}).get("n", "?")
        below = f" < {min_group_size}" if min_group_size else ""
        out.append(f"{where} = {g}: small group ({n} samples{below}): point estimates only, no CI")
    other: dict[str, list[str]] = {}
    for m, per in rep.get("ci_notes", {}).items():
        for g, why in per.items():
            if g not in small:
                other.setdefault(why, []).append(f"{m} ({group_label(g)})")
    out += [f"{where}: no CI for {', '.join(items)}: {why}" for why, items in other.items()]
    if rep.get("n_missing_attribute"):
        out.append(f"{where}: {rep['n_missing_attribute']} sample(s) without a {rep['attribute']} value, left out")
    return out


def _kind(metric: str) -> str | None:
    spec = find_spec(metric)
    return None if spec is None else spec.kind


def header(metric: str) -> str:
    """A metric's short header from the MetricSpec registry (its name when it is not registered)."""
    try:
        return metric_spec(metric).header
    except InputError:
        return metric


def resampled_section(reports: Sequence[dict[str, Any]], sample: dict[str, Any] | None) -> dict[str, Any] | None:
    """The original and the resampled test set side by side per (task, attribute), from a document's
    `test_resample` block (analysis.resample.Resampled.to_dict() plus the metrics on it under `result`)."""
    from fairmedbench.analysis.resample import RESAMPLE_METRICS

    if not sample:
        return None
    tables = []
    for rep in reports:
        rr = next(r for r in sample["result"]["reports"]
                  if r["task"] == rep["task"] and r["attribute"] == rep["attribute"])
        rows = []
        for g in [OVERALL, *rep["groups"], GAP]:
            key = OVERALL if g == GAP else g
            n = " / ".join(str(x.get("counts", {}).get(key, {}).get("n", "—")) for x in (rep, rr))
            cells = []
            for m in RESAMPLE_METRICS:
                name = f"{m}_gap" if g == GAP else m
                cells += [metric_cell(rep, name, g), metric_cell(rr, name, g)]
            rows.append([Cell({GAP: "gap (max − min)"}.get(g, group_label(g))), Cell(n, "num"), *cells])
        head = [h for m in RESAMPLE_METRICS for h in (f"{header(m)} original", f"{header(m)} resampled")]
        tables.append(Table(["group", "n original / resampled", *head], rows, f"{rep['task']} by {rep['attribute']}",
                            "metrics wide"))
    return {"spec": sample["params"].get("spec", sample["method"]), "seed": sample["seed"], "n": len(sample["ids"]),
            "fingerprint": sample["fingerprint"], "counts": sample["counts"],
            "label_column": sample["params"].get("label_col"), "tables": tables}


def external_section(doc: dict[str, Any], task: str, columns: Sequence[str],
                     seed_docs: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Each external dataset of a seed document: its headline and per-group tables (the metric engine's, as for the
    internal test set) and its shift tables (external − internal per group, of the gap and of the difference, with
    the interval of independent bootstraps of the two test sets, or of a paired one with overlap=paired); with
    several `seed_docs`, the shift over every seed (each seed's, their mean ± std and t interval across seeds)."""
    from fairmedbench.analysis.shift import SHIFT_METHOD_PAIRED, external_summary
    from fairmedbench.report.verdicts import site_shift

    seeds = external_summary(seed_docs) if len(seed_docs) > 1 else []
    out = []
    for k, ext in enumerate(doc.get("external", [])):
        reports = ext["result"]["reports"]
        tables = [headline_table(reports, task)]
        tables += [group_table(rep, columns, f"{ext['label']}: {rep['task']} by {rep['attribute']}") for rep in reports]
        for sh in ext["shift"]:
            m = metric_spec(sh["metric"]).header
            rows = [*sh["per_group"].items(), ("gap (max − min)", sh["gap"])]
            if "diff" in sh:
                rows.append((f"difference {sh['diff']['of']}", sh["diff"]))
            body = []
            for label, e in rows:
                shift = {"value": e["shift"], "ci_low": e["ci_low"], "ci_high": e["ci_high"]}
                body.append([Cell(label), Cell(interval_text({"value": e["internal"]}), "num"),
                             Cell(interval_text({"value": e["external"]}), "num"),
                             Cell(interval_text(shift, signed=True), "num"), verdict_cell(site_shift(e))])
            tables.append(Table(["", f"internal {m}", f"external {m}", "shift (external − internal) [95% CI]",
                                 "shift?"], body, f"shift of {m} by {sh['attribute']}: {ext['label']} − internal, "
                                                  f"seed {doc['spec']['seed']}"))
        if seeds:
            tables += [_seeds_shift_table(ext["label"], attr) for attr in seeds[k]["attributes"]]
        paired = ext["shift_method"] == SHIFT_METHOD_PAIRED
        out.append({"label": ext["label"], "n": ext["n_test"], "tables": tables,
                    "what": "samples (all)" if ext.get("split") == "all" else "test samples",
                    "method": ext["shift_method"], "seeds_note": seeds[k]["note"] if seeds else None,
                    "paired": ("Paired: this set shares items with the run's test set (overlap=paired), so its shift "
                               "intervals come from one paired bootstrap, the shared items drawn jointly in both."
                               if paired else None),
                    "alignment": ext["alignment"]})
    return out


def _seeds_shift_table(label: str, attr: dict[str, Any]) -> Table:
    """The shift of one attribute over every seed: each seed's with its bootstrap interval, then the mean ± std and
    the t 95% interval across seeds."""
    m = metric_spec(attr["metric"]).header
    rows = attr["shift"]
    seeds = [r["seed"] for r in next(iter(rows.values()))["per_seed"]]
    body = []
    for key, row in rows.items():
        name = key[6:] if key.startswith("group:") else {"gap": "gap (max − min)"}.get(
            key, f"difference {attr.get('diff_of', '')}")
        across = "—" if row.get("mean") is None else (
            f"{row['mean']:+.3f}" if row.get("std") is None
            else f"{row['mean']:+.3f} ± {row['std']:.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]")
        body.append([Cell(name), *[Cell(interval_text({"value": c["shift"], "ci_low": c["ci_low"],
                                                       "ci_high": c["ci_high"]}, signed=True), "num")
                                   for c in row["per_seed"]], Cell(across, "num")])
    return Table(["", *[f"seed {sd} [95% CI]" for sd in seeds], "mean ± std [t 95% CI across seeds]"], body,
                 f"shift of {m} by {attr['attribute']}: {label} − internal, all {len(seeds)} seeds")


def group_figures(y: np.ndarray, s: np.ndarray, labels: np.ndarray, names: Sequence[str], what: str,
                  rates: tuple[float, Sequence[float], Sequence[float]] | None = None) -> list[Img]:
    """ROC, precision-recall and reliability curves by group (matplotlib, inlined)."""
    from fairmedbench.report import figures as F

    return [Img(F.roc_by_group(y, s, labels, names, f"ROC by {what}", rates), f"ROC curves by {what}" + (
                "; dots: each group's (FPR, TPR) at the global FPR-0.2 threshold" if rates else "")),
            Img(F.pr_by_group(y, s, labels, names, f"precision-recall by {what}"),
                f"precision-recall by {what}; dotted: each group's prevalence (chance)"),
            Img(F.reliability_by_group(y, s, labels, names, f"reliability by {what}"),
                f"calibration (reliability) by {what}, 10 equal-width bins")]


def interval_figure(rep: dict[str, Any], metric: str) -> Img:
    """A metric per group with CI whiskers."""
    from fairmedbench.report.figures import intervals_by_group

    cells = [rep["metrics"].get(metric, {}).get(g) or {} for g in rep["groups"]]
    head = metric_spec(metric).header
    return Img(intervals_by_group(rep["groups"], [c.get("value") for c in cells], [c.get("ci_low") for c in cells],
                                  [c.get("ci_high") for c in cells], f"{head} by {rep['attribute']} (95% CI)", head),
               f"{head} per group of {rep['attribute']} with 95% bootstrap CIs")


def pareto_front(utility: Sequence[float], gap: Sequence[float], higher_utility: bool = True) -> list[bool]:
    """Which points are non-dominated: no other point has utility at least as good and a gap at least as small,
    one of them strictly (the gap is always better lower)."""
    u = np.asarray(utility, dtype=float) * (1 if higher_utility else -1)
    g = np.asarray(gap, dtype=float)
    return [not any(u[j] >= u[i] and g[j] <= g[i] and (u[j] > u[i] or g[j] < g[i]) for j in range(len(u)) if j != i)
            for i in range(len(u))]


# --- the run page -------------------------------------------------------------------------------------------

def write_run_report(out_dir: Path, seed_docs: list[dict[str, Any]]) -> Path:
    """Write report.html into the run folder from its result documents and predictions: the headline table,
    then per (task, attribute) the per-group table, curves by group and per-seed utility against gap."""
    import pandas as pd

    from fairmedbench.report.figures import utility_gap_scatter

    doc = seed_docs[0]
    task = doc["kind"].removeprefix("run-")
    util, gap = headline_metric(task), board_metrics(task)["gap"].name
    columns = [s.name for s in table_metrics(task, between_groups=False)]
    pred = pd.read_parquet(Path(out_dir) / doc["predictions"]["file"])
    test = pred[pred["split"] == "test"]
    reports = doc["result"]["reports"]
    sections = []
    for rep in reports:
        attr, rep_task = rep["attribute"], rep["task"]
        labels = test[f"attr:{attr}"].astype(object).to_numpy()
        figures = []
        if f"score:{rep_task}" in test.columns:  # curves need per-sample scores
            figures += group_figures(test[f"label:{rep_task}"].to_numpy(), test[f"score:{rep_task}"].to_numpy(),
                                     labels, rep["groups"], attr)
        figures.append(interval_figure(rep, util))
        pts = [(f"seed {d['spec']['seed']}", *_util_gap(d, rep_task, attr, util, gap)) for d in seed_docs]
        pts = [p for p in pts if p[1] is not None and p[2] is not None]
        if pts:
            figures.append(Img(utility_gap_scatter(*zip(*pts), title="fairness-utility per seed",
                                                   xlabel=metric_spec(util).header, ylabel=metric_spec(gap).header),
                               "utility against gap, one point per seed"))
        sections.append({"title": f"{rep_task} by {attr}", "tables": [group_table(rep, columns)],
                         "figures": figures,
                         "notes": result_notes(rep, doc["result"].get("meta", {}).get("min_group_size"))})
    prov = {k: doc.get(k) for k in ("run_id", "created_at", "fairmedbench_version", "git_commit", "spec", "inputs",
                                    "environment", "timings_s", "training", "usage")}
    text = TEMPLATES.get_template("report/run.html.j2").render(
        spec=doc["spec"], seeds=[d["spec"]["seed"] for d in seed_docs], headline=headline_table(reports, task),
        answer=answer_section(reports),
        sections=sections, resampled=resampled_section(reports, doc.get("test_resample")), provenance=prov,
        externals=external_section(doc, task, columns, seed_docs),
        provenance_heading="provenance")
    return store.write_text(Path(out_dir) / "report.html", text)


def _util_gap(doc: dict[str, Any], task: str, attr: str, util: str, gap: str) -> tuple[float | None, float | None]:
    rep = next(r for r in doc["result"]["reports"] if r["task"] == task and r["attribute"] == attr)
    return (rep["metrics"][util]["__overall__"]["value"], rep["metrics"][gap]["__gap__"]["value"])


# --- the compare page ---------------------------------------------------------------------------------------

def _summary_cell(c: dict[str, Any] | None) -> Cell:
    if not c or c.get("mean") is None:
        return Cell("—", "num")
    ci = f" [{c['ci_low']:.3f}, {c['ci_high']:.3f}]" if c.get("ci_low") is not None else ""
    return Cell(f"{c['mean']:.3f}{ci}", "num")


def _interval_cell(c: dict[str, Any] | None, signed: bool = True) -> Cell:
    return Cell(interval_text(c, signed), "num") if c else Cell("—", "na")


def _crossed_cells_table(rows: list[dict[str, Any]], head: str, unit: str) -> Table | None:
    """A crossed attribute's cells per method (compare's `cells`), each headed by its test count; the caption says
    why a cell has no value or interval. None for a plain attribute."""
    from fairmedbench.report.verdicts import crossed_cell_notes

    mine = [r for r in rows if r.get("cells")]
    if not mine:
        return None
    names = list(mine[0]["cells"])
    why = crossed_cell_notes(mine)
    return Table(["method", *[f"{g} (n={mine[0]['cells'][g].get('n')})" for g in names]],
                 [[Cell(r["method"]), *[_summary_cell(r["cells"].get(g)) for g in names]] for r in mine],
                 f"{head} per crossed cell, mean over {unit}s [95% CI across {unit}s]"
                 + (f"; {'; '.join(why)}" if why else ""))


def write_compare_report(path: Path, doc: dict[str, Any]) -> Path:
    """A comparison of mitigations: per dataset, every method's seed means with CIs, utility against gap with
    error bars and the non-dominated (Pareto) methods marked, paired differences from ERM over seeds, and the
    paired test-set bootstrap."""
    from fairmedbench.report.figures import utility_gap_scatter
    from fairmedbench.report.verdicts import compare_headline, compare_verdicts, fmt_p

    task = doc.get("task", "classification")
    util, gap = headline_metric(task), board_metrics(task)["gap"].name
    u_name, g_name = metric_spec(util).header, metric_spec(gap).header
    metrics = list(doc.get("metrics") or [m for m in (util, gap) if any(m in r for r in doc["table"])])
    split_seeds = ", ".join(map(str, doc.get("split_seeds") or []))
    unit = "split" if split_seeds else "seed"
    datasets = []
    for ds in doc["datasets"]:
        rows = [r for r in doc["table"] if r["dataset"] == ds]
        summary = Table(["method", "seeds", *[header(m) for m in metrics]],
                        [[Cell(r["method"]), Cell(str(r.get("n_seeds", "")), "num"),
                          *[_summary_cell(r.get(m)) for m in metrics]] for r in rows],
                        f"mean over splits [95% CI across splits {split_seeds}; each split's mean over its seeds]"
                        if split_seeds else "mean over seeds [95% CI across seeds]")
        cells = _crossed_cells_table(rows, u_name, unit)
        pts = [r for r in rows if (r.get(util) or {}).get("mean") is not None and (r.get(gap) or {}).get("mean")
               is not None]
        figures, pareto = [], None
        if pts:
            u = [r[util]["mean"] for r in pts]
            g = [r[gap]["mean"] for r in pts]
            front = pareto_front(u, g, metric_spec(util).higher_is_better is not False)

            def err(r: dict[str, Any], m: str) -> tuple[float, float]:
                c = r[m]
                return (c["ci_low"], c["ci_high"]) if c.get("ci_low") is not None else (c["mean"], c["mean"])

            figures.append(Img(utility_gap_scatter(
                [r["method"] for r in pts], u, g, title=f"{ds}: {u_name} vs {g_name} (mean, 95% CI over {unit}s)",
                xlabel=u_name, ylabel=g_name, xerr=[err(r, util) for r in pts], yerr=[err(r, gap) for r in pts],
                front=front), f"{u_name} against {g_name} per method; filled and joined: non-dominated (Pareto front)"))
            pareto = Table(["method", u_name, g_name, "Pareto front"],
                           [[Cell(r["method"]), _summary_cell(r[util]), _summary_cell(r[gap]),
                             Cell("non-dominated" if f else "dominated", "no" if f else "na")]
                            for r, f in zip(pts, front)],
                           f"non-dominated methods: no other has {u_name} at least as good and {g_name} at least as "
                           "small")
        paired = [(v, judged) for v, judged in compare_verdicts(doc) if v["dataset"] == ds]
        paired_table = Table(
            ["method", "metric", f"mean paired difference vs ERM [t 95% CI over {unit}s]", "paired p", "verdict"],
            [[Cell(v["method"]), Cell(header(v["metric"])),
              _interval_cell({"value": v["mean_diff"], "ci_low": v.get("ci_low"), "ci_high": v.get("ci_high")}),
              Cell("—" if v.get("paired_p") is None else fmt_p(v["paired_p"]), "num"), verdict_cell(judged)]
             for v, judged in paired],
            (f"per-split differences from ERM (each split's mean over the same seeds; splits {split_seeds}); verdict: "
             "the paired t-test over splits" if split_seeds else
             "per-seed differences from ERM (same seeds, same splits); verdict: the paired t-test over seeds")
            + ", and for the worst-group metric and the gap also the paired test-set bootstrap below (one rule, "
              "report/verdicts.py)"
        ) if paired else None
        boot = (doc.get("test_bootstrap") or {}).get(ds) or {}
        boot_table = None
        if boot.get("methods"):
            order = boot["keys"]  # the task's worst-group metric, its signed difference, the worst group vs ERM
            keys = [k for k in order if any(k in e for e in boot["methods"].values())]
            boot_table = Table(["method", *keys], [[Cell(m), *[_interval_cell(e.get(k), k != order[0])
                                                               for k in keys]]
                                                   for m, e in boot["methods"].items()],
                               f"paired test-set bootstrap ({boot.get('n_boot')} resamples of whole "
                               f"{boot.get('unit', 'row')}s, {boot.get('n_clusters', '?')} of them; seed means, "
                               f"groups {', '.join(map(str, boot.get('groups', [])))})")
        by_method: dict[str, list[str]] = {}
        for v, judged in paired:  # one sentence per method: its verdicts, each with both intervals where both ran
            by_method.setdefault(v["method"], []).append(judged.sentence.rstrip("."))
        datasets.append({"name": ds, "tables": [t for t in (summary, cells, pareto, paired_table, boot_table) if t],
                         "figures": figures, "sentences": [f"{'; '.join(x)}." for x in by_method.values()]})
    text = TEMPLATES.get_template("report/compare.html.j2").render(
        attribute=doc["attribute"], datasets=datasets, answer=compare_headline(doc), notes=doc.get("notes", []),
        provenance=doc,
        provenance_heading="data")
    return store.write_text(path, text)


def write_claims_report(path: Path, doc: dict[str, Any]) -> Path:
    """The claims page (benchmark claims --report): one sentence per claim first, then a table of each claim's
    paper, table, setting, claimed and measured difference and answer."""
    from fairmedbench.report.verdicts import cite

    css = {"holds": "no", "contradicted": "yes", "not-supported": "na", "undefined": "na"}
    rows = []
    for c in doc["claims"]:
        a, ev = c["answer"], c["answer"]["evidence"]
        measured = ("—" if ev.get("mean_diff") is None else
                    interval_text({"value": ev["mean_diff"], "ci_low": ev["ci_low"], "ci_high": ev["ci_high"]}, True))
        boot = interval_text(ev.get("bootstrap"), True) if ev.get("bootstrap") else "—"
        known = ([Cell(c["known_answer"]), Cell("yes" if c["gave_known_answer"] else "NO",
                                                "no" if c["gave_known_answer"] else "yes")]
                 if doc.get("stand_in") else [])
        rows.append([Cell(c["id"], title=c["statement"]), Cell(cite(c["paper"]), title=c["paper"]), Cell(c["table"]),
                     Cell(f"{', '.join(c['methods'])} · {c['metric']}"),
                     Cell(f"{c['direction']} {c['size']:.3f}", "num"),
                     Cell(measured, "num", f"over {ev.get('n_units')} {ev.get('unit')}s"), Cell(boot, "num"),
                     Cell("—" if ev.get("mde") is None else f"{ev['mde']:.3f}", "num"),
                     Cell(a["key"], css.get(a["key"], "na"), a["sentence"]), *known])
    summary = Table(["claim", "paper", "table", "methods · metric", "claimed", "measured [t 95% CI]",
                     "with test-set error", "paired MDE", "answer",
                     *(["known answer", "gave it"] if doc.get("stand_in") else [])], rows,
                    "measured: method − baseline, paired over splits (each split's seed mean) or seeds; "
                    "with test-set error: the paired test-set bootstrap pooled over every run, where it ran; "
                    "paired MDE: the mean difference these units detect with 80% power at the 5% level")
    notes = (["synthetic stand-ins (random-weight encoders, small n): each has a known answer by construction; the "
              "answers say whether the harness finds it, not whether the paper is right"] if doc.get("stand_in")
             else [])
    text = TEMPLATES.get_template("report/claims.html.j2").render(answer=doc["sentences"], notes=notes,
                                                                   summary=summary, provenance=doc,
                                                                   provenance_heading="claims data")
    return store.write_text(path, text)
