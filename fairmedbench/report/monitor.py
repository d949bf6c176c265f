"""The page of `benchmark monitor`: the opening sentences (the first AUC alert, or that there is none), the rule
and its error rate, the alerts, one time series per group (AUC with its interval against the audited value and
interval, and the CUSUM against its threshold; matplotlib, inlined), the per-window table and the provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fairmedbench.engine import store


def _ival(c: dict[str, Any] | None) -> str:
    from fairmedbench.report.html import interval_text

    return interval_text(c)


def group_series(doc: dict[str, Any], attribute: str, group: str) -> str:
    """One group's time series as a data: URI: AUC per window with its 95% interval, the audited AUC and
    interval as a band, alerts in red; below, the CUSUM and its threshold per look."""
    from fairmedbench.report.figures import COLORS, _pyplot, data_uri

    rows = [r for r in doc["rows"] if r["attribute"] == attribute and r["group"] == group]
    audited = doc["baseline"]["auc"][f"{attribute}={group}"]
    x = np.arange(len(rows))
    plt = _pyplot()
    fig, (top, low) = plt.subplots(2, 1, figsize=(6.4, 4.2), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    if audited.get("value") is not None:
        top.axhline(audited["value"], color="#555", lw=1, ls="--", label="audited AUC")
        if audited.get("ci_low") is not None:
            top.axhspan(audited["ci_low"], audited["ci_high"], color="#ddd", alpha=0.6, label="audited 95% CI")
    for i, r in enumerate(rows):
        c = r["auc"]
        if c["value"] is None:
            top.text(i, audited.get("value") or 0.5, "—", ha="center", color="#999")
            continue
        err = None if c["ci_low"] is None else [[c["value"] - c["ci_low"]], [c["ci_high"] - c["value"]]]
        color = COLORS[1] if r["alert"] else COLORS[0]
        top.errorbar([i], [c["value"]], yerr=err, fmt="o", color=color, capsize=3, ms=5)
    top.set_ylabel("AUC (95% CI)")
    top.set_title(f"{attribute} = {group}", fontsize=10)
    top.grid(axis="y", color="#eee")
    top.legend(fontsize=7, loc="lower left")
    s = [np.nan if r["cusum"] is None else r["cusum"] for r in rows]
    h = [np.nan if r["threshold"] is None else r["threshold"] for r in rows]
    low.plot(x, s, "o-", color=COLORS[0], ms=3, lw=1, label="CUSUM S")
    low.plot(x, h, "_", color=COLORS[1], ms=12, mew=2, label="threshold h")
    for i, r in enumerate(rows):
        if r["alert"]:
            low.plot([i], [r["cusum"]], "o", color=COLORS[1], ms=6)
    low.set_ylabel("CUSUM")
    low.set_xticks(x)
    low.set_xticklabels([r["window"] for r in rows], fontsize=7, rotation=30 if len(rows) > 8 else 0)
    low.set_xlabel("window")
    low.legend(fontsize=7, loc="upper left")
    low.grid(axis="y", color="#eee")
    return data_uri(fig, plt)


def _tables(doc: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The AUC alerts, the drift matrix (groups x windows) and the per-window table."""
    from fairmedbench.report.html import Cell, Table

    auc = [a for a in doc["alerts"] if a["metric"] == "auc"]
    alerts = Table(["window", "group", "AUC", "audited", "drop", "CUSUM S", "threshold h"], [
        [Cell(a["window"]), Cell(f"{a['attribute']}={a['group']}"), Cell(f"{a['value']:.3f}", "num"),
         Cell(f"{a['baseline']:.3f}", "num"), Cell(f"{a['baseline'] - a['value']:.3f}", "num"),
         Cell(f"{a['statistic']:.2f}", "num"), Cell(f"{a['threshold']:.2f}", "num")]
        for a in auc], "AUC alerts (every alert, drift included, with its reason: alerts.json)")
    drifted = {(a["window"], a["attribute"], a["group"]) for a in doc["alerts"] if a["metric"] == "score_ks"}
    by_key = {(r["window"], r["attribute"], r["group"]): r for r in doc["rows"]}
    matrix = []
    for attr, groups in doc["baseline"]["attributes"].items():
        for g in groups:
            cells = [Cell(f"{attr}={g}")]
            for w in doc["windows"]:
                d = by_key[(w, attr, g)].get("drift")
                cells.append(Cell("—", "na") if not d else Cell(
                    f"{d['ks_d']:.2f} ({d['median_shift']:+.2f})", "yes" if (w, attr, g) in drifted else "num",
                    f"KS p = {d['p_value']:.2g}; {d['n']} patients against {d['n_baseline']} audited"))
            matrix.append(cells)
    drift = Table(["group", *doc["windows"]], matrix, "score drift against the audit: KS D (median shift); red: "
                  f"alert at p < {doc['rule']['alpha_drift_per_test']:.3g}; one row per patient")
    rows = []
    for r in doc["rows"]:
        rows.append([Cell(r["window"]), Cell(f"{r['attribute']}={r['group']}"), Cell(str(r["n"]), "num"),
                     Cell(f"{r['n_pos']} / {r['n_neg']}", "num"), Cell(_ival(r["auc"]), "num"),
                     Cell(_ival(r["tpr"]), "num"), Cell(_ival(r["fpr"]), "num"),
                     Cell("—" if r["z_drop"] is None else f"{r['z_drop']:+.2f}", "num"),
                     Cell("—" if r["cusum"] is None else f"{r['cusum']:.2f} / {r['threshold']:.2f}",
                          "yes" if r["alert"] else "num"), Cell(r.get("reason", ""))])
    table = Table(["window", "group", "n", "n+ / n−", "AUC", "TPR", "FPR", "z drop", "CUSUM / h", "note"], rows,
                  f"per window and group (95% patient-level bootstrap intervals, {doc['n_boot']} resamples; TPR and "
                  f"FPR at the audit's threshold {doc['baseline']['threshold']:.4g})")
    return alerts if auc else None, drift, table


def write_monitor_page(path: Path, doc: dict[str, Any]) -> Path:
    """Write the monitor page of a monitor document."""
    from fairmedbench.report.html import TEMPLATES, Img

    figures = [Img(group_series(doc, a, g), f"{a} = {g}: AUC per window against the audit (grey band), and the "
                   "CUSUM against its threshold")
               for a, groups in doc["baseline"]["attributes"].items() for g in groups]
    alerts, drift, table = _tables(doc)
    text = TEMPLATES.get_template("report/monitor.html.j2").render(
        title=f"monitoring: {doc['baseline']['label']} against {doc['baseline']['path']}", doc=doc,
        headline=doc["headline"], alerts=alerts, drift=drift, figures=figures, per_window=table,
        notes=doc["notes"], provenance={k: doc[k] for k in ("baseline", "stream", "rule", "command", "seed")},
        provenance_heading="provenance: baseline, stream files, rule, command")
    return store.write_text(path, text)
