"""One self-contained HTML page per run and per comparison: ROC and reliability per group, per-group bars with
CIs, the fairness-utility points, and the provenance. Pages are jinja2 templates (report/templates, autoescaped,
sharing base.html.j2 with the leaderboard page); figures are inline SVG whose geometry is computed here and
written, escaped, by the `svg` macro. No network, no plotting library (a later issue brings one)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from jinja2 import Environment, PackageLoader, PrefixLoader, StrictUndefined, select_autoescape

from fairmedbench.engine import store
from fairmedbench.metrics.specs import board_metrics, headline_metric, metric_spec, table_metrics
from fairmedbench.metrics.thresholds import threshold_curve

W, H, PAD = 320, 260, 40
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")

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


def _n(v: float) -> str:
    return f"{v:.1f}"


def _xy(x: float, y: float, x0: float = 0, x1: float = 1, y0: float = 0, y1: float = 1) -> tuple[float, float]:
    return (PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD), H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD))


def _text(x: float, y: float, text: str, size: int = 10, anchor: str = "middle", **attrs: str) -> Shape:
    return Shape("text", {"x": _n(x), "y": _n(y), "font-size": str(size), "text-anchor": anchor, **attrs}, text)


def _line(x1: float, y1: float, x2: float, y2: float, **attrs: str) -> Shape:
    return Shape("line", {"x1": _n(x1), "y1": _n(y1), "x2": _n(x2), "y2": _n(y2), **attrs})


def _diagonal() -> Shape:
    return _line(PAD, H - PAD, W - PAD, PAD, stroke="#bbb", **{"stroke-dasharray": "4"})


def _frame(title: str, xlabel: str, ylabel: str, body: list[Shape], ticks: Sequence[float] = (0, 0.5, 1),
           xticks: bool = True) -> Figure:
    shapes = [_text(W / 2, 16, title, 12), _text(W / 2, H - 6, xlabel, 11),
              _text(12, H / 2, ylabel, 11, transform=f"rotate(-90 12 {H / 2:g})"),
              _line(PAD, H - PAD, W - PAD, H - PAD, stroke="#333"), _line(PAD, PAD, PAD, H - PAD, stroke="#333")]
    for t in ticks:
        x, _ = _xy(t, 0)
        _, y = _xy(0, t)
        if xticks:
            shapes.append(_text(x, H - PAD + 14, f"{t:g}"))
        shapes.append(_text(PAD - 6, y + 3, f"{t:g}", anchor="end"))
    return Figure({"width": str(W), "height": str(H), "role": "img"}, shapes + body, title)


def _legend(names: Sequence[str]) -> list[Shape]:
    return [_text(W - PAD - 4, PAD + 12 * i + 10, n, anchor="end", fill=COLORS[i % len(COLORS)])
            for i, n in enumerate(names)]


def _polyline(pts: Sequence[tuple[float, float]], color: str, **attrs: str) -> Shape:
    return Shape("polyline", {"fill": "none", "stroke": color, **attrs,
                              "points": " ".join(f"{_n(a)},{_n(b)}" for a, b in pts)})


def roc_points(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FPR and TPR at every distinct threshold (score >= t), from (0, 0) to (1, 1)."""
    _, tp, fp = threshold_curve(y, s)
    return np.r_[0.0, fp / max(fp[-1], 1)], np.r_[0.0, tp / max(tp[-1], 1)]


def roc_figure(y: np.ndarray, s: np.ndarray, groups: np.ndarray, names: Sequence[str], title: str) -> Figure:
    """ROC curve of each group (groups with one class are left out)."""
    body = [_diagonal()]
    for i, g in enumerate(names):
        m = groups == g
        if m.sum() == 0 or y[m].min() == y[m].max():
            continue
        fpr, tpr = roc_points(y[m], s[m])
        body.append(_polyline([_xy(a, b) for a, b in zip(fpr, tpr)], COLORS[i % len(COLORS)],
                              **{"stroke-width": "1.5"}))
    return _frame(title, "false positive rate", "true positive rate", body + _legend(names))


def reliability_figure(y: np.ndarray, s: np.ndarray, groups: np.ndarray, names: Sequence[str], title: str,
                       n_bins: int = 10) -> Figure:
    """Observed positive fraction against mean predicted probability, per group, in equal-width bins."""
    body = [_diagonal()]
    for i, g in enumerate(names):
        m = groups == g
        if not m.any():
            continue
        b = np.minimum((s[m] * n_bins).astype(int), n_bins - 1)
        pts = [_xy(float(s[m][b == k].mean()), float(y[m][b == k].mean())) for k in range(n_bins) if (b == k).any()]
        c = COLORS[i % len(COLORS)]
        body.append(_polyline(pts, c))
        body.extend(Shape("circle", {"cx": _n(a), "cy": _n(v), "r": "2.5", "fill": c}) for a, v in pts)
    return _frame(title, "mean predicted probability", "observed positive fraction", body + _legend(names))


def bars_figure(cells: dict[str, dict[str, Any]], names: Sequence[str], title: str, ylabel: str) -> Figure:
    """Per-group values with 95% CI whiskers (undefined groups drawn as a dash)."""
    body: list[Shape] = []
    step = (W - 2 * PAD) / max(len(names), 1)
    for i, g in enumerate(names):
        c = cells.get(g, {})
        x = PAD + step * (i + 0.5)
        v = c.get("value")
        if v is None:
            body.append(_text(x, H - PAD - 4, "—"))
        else:
            _, y = _xy(0, v)
            body.append(Shape("rect", {"x": _n(x - step * 0.3), "y": _n(y), "width": _n(step * 0.6),
                                       "height": _n(H - PAD - y), "fill": COLORS[i % len(COLORS)],
                                       "opacity": "0.7"}, title=f"{g}: {v:.3f}"))
            if c.get("ci_low") is not None:
                body.append(_line(x, _xy(0, c["ci_low"])[1], x, _xy(0, c["ci_high"])[1], stroke="#000"))
        body.append(_text(x, PAD - 4, g))
    return _frame(title, "group", ylabel, body, ticks=(0, 0.25, 0.5, 0.75, 1), xticks=False)


def tradeoff_figure(points: Sequence[tuple[str, float | None, float | None]], title: str, xlabel: str,
                    ylabel: str) -> Figure:
    """Utility (x) against a gap (y) for each point (e.g. each seed), on [0, 1] axes."""
    body = []
    for i, (label, u, g) in enumerate(points):
        if u is None or g is None or not (math.isfinite(u) and math.isfinite(g)):
            continue
        x, y = _xy(u, g)
        body.append(Shape("circle", {"cx": _n(x), "cy": _n(y), "r": "4", "fill": COLORS[i % len(COLORS)]},
                          title=f"{label}: {u:.3f}, {g:.3f}"))
    return _frame(title, xlabel, ylabel, body)


def _cell_text(c: dict[str, Any] | None) -> str:
    if not c or c["value"] is None:
        return "—"
    ci = f" [{c['ci_low']:.3f}, {c['ci_high']:.3f}]" if c.get("ci_low") is not None else ""
    return f"{c['value']:.3f}{ci}"


def _metric_rows(rep: dict[str, Any], metrics: Sequence[str]) -> list[dict[str, Any]]:
    return [{"group": "all" if g == "__overall__" else g, "n": rep["counts"].get(g, {}).get("n", ""),
             "cells": [_cell_text(rep["metrics"].get(m, {}).get(g)) for m in metrics]}
            for g in ["__overall__", *rep["groups"]]]


def write_run_report(out_dir: Path, seed_docs: list[dict[str, Any]]) -> Path:
    """Write report.html into the run folder from its result documents and predictions."""
    import pandas as pd

    doc = seed_docs[0]
    task = doc["kind"].removeprefix("run-")
    util, gap = headline_metric(task), board_metrics(task)["gap"].name
    u_label, g_label = metric_spec(util).header, metric_spec(gap).header
    columns = [s.name for s in table_metrics(task, between_groups=False)]
    pred = pd.read_parquet(Path(out_dir) / doc["predictions"]["file"])
    test = pred[pred["split"] == "test"]
    sections = []
    for rep in doc["result"]["reports"]:
        attr, rep_task = rep["attribute"], rep["task"]
        groups = test[f"attr:{attr}"].to_numpy()
        figures = []
        if f"score:{rep_task}" in test.columns:  # ROC and reliability need per-sample scores
            y = test[f"label:{rep_task}"].to_numpy()
            s = test[f"score:{rep_task}"].to_numpy()
            figures += [roc_figure(y, s, groups, rep["groups"], f"ROC by {attr}"),
                        reliability_figure(y, s, groups, rep["groups"], f"reliability by {attr}")]
        figures.append(bars_figure(rep["metrics"][util], rep["groups"], f"{u_label} by {attr} (95% CI)", u_label))
        pts = [(f"seed {d['spec']['seed']}", *_util_gap(d, rep_task, attr, util, gap)) for d in seed_docs]
        figures.append(tradeoff_figure(pts, "fairness-utility (per seed)", u_label, g_label))
        sections.append({"task": rep_task, "attribute": attr, "figures": figures, "columns": columns,
                         "rows": _metric_rows(rep, columns)})
    prov = {k: doc.get(k) for k in ("run_id", "created_at", "fairmedbench_version", "git_commit", "spec", "inputs",
                                    "environment", "timings_s", "training", "usage")}
    text = TEMPLATES.get_template("report/run.html.j2").render(
        spec=doc["spec"], seeds=[d["spec"]["seed"] for d in seed_docs], sections=sections,
        provenance=prov, provenance_heading="provenance")
    return store.write_text(Path(out_dir) / "report.html", text)


def _util_gap(doc: dict[str, Any], task: str, attr: str, util: str, gap: str) -> tuple[float | None, float | None]:
    rep = next(r for r in doc["result"]["reports"] if r["task"] == task and r["attribute"] == attr)
    return (rep["metrics"][util]["__overall__"]["value"], rep["metrics"][gap]["__gap__"]["value"])


def write_compare_report(path: Path, doc: dict[str, Any]) -> Path:
    """A utility-fairness Pareto page of a comparison: mean AUC (DSC) against mean ΔAUC (ΔDSC) per method and
    dataset."""
    task = doc.get("task", "classification")
    util, gap = headline_metric(task), board_metrics(task)["gap"].name
    name, gap_name = metric_spec(util).header, metric_spec(gap).header
    datasets = []
    for ds in doc["datasets"]:
        rows = [r for r in doc["table"] if r["dataset"] == ds and r.get(util) and r.get(gap)]
        pts = [(r["method"], r[util]["mean"], r[gap]["mean"]) for r in rows]
        datasets.append({"name": ds, "figure": tradeoff_figure(pts, "utility vs gap (mean over seeds)", name, gap_name),
                         "points": [{"method": m, "color": COLORS[i % len(COLORS)], "utility": u, "gap": g}
                                    for i, (m, u, g) in enumerate(pts)]})
    text = TEMPLATES.get_template("report/compare.html.j2").render(
        attribute=doc["attribute"], datasets=datasets, utility_name=name, gap_name=gap_name,
        provenance=doc, provenance_heading="data")
    return store.write_text(path, text)
