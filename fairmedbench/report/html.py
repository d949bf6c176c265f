"""One self-contained HTML page per run: ROC and reliability per group, per-group bars with CIs, the
fairness-utility point, and the run's provenance. Inline SVG only: no network, no plotting library."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fairmedbench.engine import store
from fairmedbench.metrics.specs import board_metrics, headline_metric, metric_spec, table_metrics
from fairmedbench.metrics.thresholds import threshold_curve

W, H, PAD = 320, 260, 40
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _xy(x: float, y: float, x0: float = 0, x1: float = 1, y0: float = 0, y1: float = 1) -> tuple[float, float]:
    return (PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD), H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD))


def _frame(title: str, xlabel: str, ylabel: str, body: str, ticks: Sequence[float] = (0, 0.5, 1),
           xticks: bool = True) -> str:
    axes = [f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#333"/>',
            f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#333"/>']
    for t in ticks:
        x, _ = _xy(t, 0)
        _, y = _xy(0, t)
        if xticks:
            axes.append(f'<text x="{x:.1f}" y="{H - PAD + 14}" font-size="10" text-anchor="middle">{t:g}</text>')
        axes.append(f'<text x="{PAD - 6}" y="{y + 3:.1f}" font-size="10" text-anchor="end">{t:g}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img">'
            f'<title>{html.escape(title)}</title>'
            f'<text x="{W / 2}" y="16" font-size="12" text-anchor="middle">{html.escape(title)}</text>'
            f'<text x="{W / 2}" y="{H - 6}" font-size="11" text-anchor="middle">{html.escape(xlabel)}</text>'
            f'<text x="12" y="{H / 2}" font-size="11" text-anchor="middle" transform="rotate(-90 12 {H / 2})">'
            f'{html.escape(ylabel)}</text>{"".join(axes)}{body}</svg>')


def _legend(names: Sequence[str]) -> str:
    return "".join(f'<text x="{W - PAD - 4}" y="{PAD + 12 * i + 10}" font-size="10" text-anchor="end" '
                   f'fill="{COLORS[i % len(COLORS)]}">{html.escape(n)}</text>' for i, n in enumerate(names))


def roc_points(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FPR and TPR at every distinct threshold (score >= t), from (0, 0) to (1, 1)."""
    _, tp, fp = threshold_curve(y, s)
    return np.r_[0.0, fp / max(fp[-1], 1)], np.r_[0.0, tp / max(tp[-1], 1)]


def roc_svg(y: np.ndarray, s: np.ndarray, groups: np.ndarray, names: Sequence[str], title: str) -> str:
    """ROC curve of each group (groups with one class are left out)."""
    body = [f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{PAD}" stroke="#bbb" stroke-dasharray="4"/>']
    for i, g in enumerate(names):
        m = groups == g
        if m.sum() == 0 or y[m].min() == y[m].max():
            continue
        fpr, tpr = roc_points(y[m], s[m])
        pts = " ".join("{:.1f},{:.1f}".format(*_xy(a, b)) for a, b in zip(fpr, tpr))
        body.append(f'<polyline fill="none" stroke="{COLORS[i % len(COLORS)]}" stroke-width="1.5" points="{pts}"/>')
    return _frame(title, "false positive rate", "true positive rate", "".join(body) + _legend(names))


def reliability_svg(y: np.ndarray, s: np.ndarray, groups: np.ndarray, names: Sequence[str], title: str,
                    n_bins: int = 10) -> str:
    """Observed positive fraction against mean predicted probability, per group, in equal-width bins."""
    body = [f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{PAD}" stroke="#bbb" stroke-dasharray="4"/>']
    for i, g in enumerate(names):
        m = groups == g
        if not m.any():
            continue
        b = np.minimum((s[m] * n_bins).astype(int), n_bins - 1)
        pts = []
        for k in range(n_bins):
            sel = b == k
            if sel.any():
                pts.append(_xy(float(s[m][sel].mean()), float(y[m][sel].mean())))
        c = COLORS[i % len(COLORS)]
        body.append(f'<polyline fill="none" stroke="{c}" points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}"/>')
        body.extend(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{c}"/>' for a, b in pts)
    return _frame(title, "mean predicted probability", "observed positive fraction", "".join(body) + _legend(names))


def bars_svg(cells: dict[str, dict[str, Any]], names: Sequence[str], title: str, ylabel: str) -> str:
    """Per-group values with 95% CI whiskers (undefined groups drawn as a dash)."""
    body, k = [], max(len(names), 1)
    step = (W - 2 * PAD) / k
    for i, g in enumerate(names):
        c = cells.get(g, {})
        x = PAD + step * (i + 0.5)
        v = c.get("value")
        if v is None:
            body.append(f'<text x="{x:.1f}" y="{H - PAD - 4}" font-size="10" text-anchor="middle">—</text>')
        else:
            _, y = _xy(0, v)
            body.append(f'<rect x="{x - step * 0.3:.1f}" y="{y:.1f}" width="{step * 0.6:.1f}" '
                        f'height="{H - PAD - y:.1f}" fill="{COLORS[i % len(COLORS)]}" opacity="0.7"/>')
            if c.get("ci_low") is not None:
                _, ylo = _xy(0, c["ci_low"])
                _, yhi = _xy(0, c["ci_high"])
                body.append(f'<line x1="{x:.1f}" y1="{ylo:.1f}" x2="{x:.1f}" y2="{yhi:.1f}" stroke="#000"/>')
        body.append(f'<text x="{x:.1f}" y="{PAD - 4}" font-size="10" text-anchor="middle">{html.escape(g)}</text>')
    return _frame(title, "group", ylabel, "".join(body), ticks=(0, 0.25, 0.5, 0.75, 1), xticks=False)


def tradeoff_svg(points: Sequence[tuple[str, float, float]], title: str, xlabel: str, ylabel: str) -> str:
    """Utility (x) against a gap (y) for each point (e.g. each seed), on [0, 1] axes."""
    body = []
    for i, (label, u, g) in enumerate(points):
        if u is None or g is None or not (math.isfinite(u) and math.isfinite(g)):
            continue
        x, y = _xy(u, g)
        body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{COLORS[i % len(COLORS)]}">'
                    f'<title>{html.escape(label)}: {u:.3f}, {g:.3f}</title></circle>')
    return _frame(title, xlabel, ylabel, "".join(body))


PAGE = """<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>{title}</title><style>body{{font-family:sans-serif;margin:24px;max-width:1100px}}
svg{{margin:6px;border:1px solid #eee}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}} th{{background:#f4f4f4}}
pre{{background:#f7f7f7;padding:8px;font-size:11px;overflow:auto}}</style></head><body>{body}</body></html>"""


def _metric_table(rep: dict[str, Any], metrics: Sequence[str]) -> str:
    rows = []
    for g in ["__overall__", *rep["groups"]]:
        cells = []
        for m in metrics:
            c = rep["metrics"].get(m, {}).get(g)
            cells.append("—" if not c or c["value"] is None else
                         f"{c['value']:.3f}" + (f" [{c['ci_low']:.3f}, {c['ci_high']:.3f}]"
                                                if c.get("ci_low") is not None else ""))
        n = rep["counts"].get(g, {}).get("n", "")
        rows.append(f"<tr><td>{html.escape('all' if g == '__overall__' else g)}</td><td>{n}</td>"
                    + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    head = "".join(f"<th>{html.escape(m)}</th>" for m in metrics)
    return f"<table><tr><th>group</th><th>n</th>{head}</tr>{''.join(rows)}</table>"


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
    spec = doc["spec"]
    parts = [f"<h1>{html.escape(spec['model'])} on {html.escape(spec['dataset'])}</h1>",
             f"<p>usage {html.escape(spec['usage'])}, mitigation {html.escape(spec['mitigation'])}, "
             f"seeds {html.escape(', '.join(str(d['spec']['seed']) for d in seed_docs))}; figures show seed "
             f"{spec['seed']}, test split.</p>"]
    for rep in doc["result"]["reports"]:
        attr, rep_task = rep["attribute"], rep["task"]
        groups = test[f"attr:{attr}"].to_numpy()
        parts.append(f"<h2>{html.escape(rep_task)} by {html.escape(attr)}</h2>")
        if f"score:{rep_task}" in test.columns:  # ROC and reliability need per-sample scores
            y = test[f"label:{rep_task}"].to_numpy()
            s = test[f"score:{rep_task}"].to_numpy()
            parts.append(roc_svg(y, s, groups, rep["groups"], f"ROC by {attr}"))
            parts.append(reliability_svg(y, s, groups, rep["groups"], f"reliability by {attr}"))
        parts.append(bars_svg(rep["metrics"][util], rep["groups"], f"{u_label} by {attr} (95% CI)", u_label))
        pts = [(f"seed {d['spec']['seed']}", *_util_gap(d, rep_task, attr, util, gap)) for d in seed_docs]
        parts.append(tradeoff_svg(pts, "fairness-utility (per seed)", u_label, g_label))
        parts.append(_metric_table(rep, columns))
    prov = {k: doc.get(k) for k in ("run_id", "created_at", "fairmedbench_version", "git_commit", "spec", "inputs",
                                    "environment", "timings_s", "training", "usage")}
    parts.append("<h2>provenance</h2><pre>" + html.escape(json.dumps(prov, indent=2)) + "</pre>")
    path = Path(out_dir) / "report.html"
    text = PAGE.format(title=html.escape(f"{spec['model']} on {spec['dataset']}"), body="\n".join(parts))
    return store.write_text(path, text)


def _util_gap(doc: dict[str, Any], task: str, attr: str, util: str, gap: str) -> tuple[float | None, float | None]:
    rep = next(r for r in doc["result"]["reports"] if r["task"] == task and r["attribute"] == attr)
    return (rep["metrics"][util]["__overall__"]["value"], rep["metrics"][gap]["__gap__"]["value"])


def write_compare_report(path: Path, doc: dict[str, Any]) -> Path:
    """A utility-fairness Pareto page of a comparison: mean AUC (DSC) against mean ΔAUC (ΔDSC) per method and
    dataset."""
    task = doc.get("task", "classification")
    util, gap = headline_metric(task), board_metrics(task)["gap"].name
    name, gap_name = metric_spec(util).header, metric_spec(gap).header
    parts = [f"<h1>mitigations by {html.escape(doc['attribute'])}</h1>"]
    for ds in doc["datasets"]:
        rows = [r for r in doc["table"] if r["dataset"] == ds and r.get(util) and r.get(gap)]
        pts = [(r["method"], r[util]["mean"], r[gap]["mean"]) for r in rows]
        parts.append(f"<h2>{html.escape(ds)}</h2>")
        parts.append(tradeoff_svg(pts, "utility vs gap (mean over seeds)", name, gap_name)
                     + "".join(f'<p style="color:{COLORS[i % len(COLORS)]}">{html.escape(m)}: {name} {u:.3f}, '
                               f'{gap_name} {g:.3f}</p>' for i, (m, u, g) in enumerate(pts)))
    parts.append("<h2>data</h2><pre>" + html.escape(json.dumps(doc, indent=2)) + "</pre>")
    return store.write_text(path, PAGE.format(title="mitigation comparison", body="\n".join(parts)))
