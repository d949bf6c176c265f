"""`benchmark monitor`: post-market monitoring per group. Given the audit (an `evaluate` result and its per-sample
predictions) and later prediction files with a window column: per window and group the AUC, and the TPR and FPR
at the audit's operating threshold, with patient-level bootstrap intervals; score drift against the audit's
per-group score distribution (tested, for windows whose labels lag too); alerts from a one-sided CUSUM on each
group's standardised AUC drop, its threshold calibrated by simulation so that the whole monitor raises a false
alarm in at most --alpha of streams over the horizon; an alert file, a result JSON and a page."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairmedbench.engine import store
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.metrics.bootstrap import N_BOOT, missing_id
from fairmedbench.metrics.groups import Attribute, Bins, make_attribute
from fairmedbench.metrics.sequential import (
    CUSUM_K,
    MONITOR_ALPHA,
    MONITOR_HORIZON,
    PERFORMANCE_SHARE,
    auc_look,
    clustered_auc_variance,
    cusum,
    cusum_threshold,
    rule_text,
)
from fairmedbench.spec import option

#: the audit kind monitor reads (binary classification: an AUC and an operating threshold per task)
BASELINE_KIND = "evaluate-classification"


@dataclass
class MonitorOptions:
    """Everything `benchmark monitor` takes. Field metadata: the options (cli.py builds the parser from them)."""

    baseline: str = field(default="", metadata=option(
        "the audit: a result JSON of benchmark evaluate (binary classification), its per-sample predictions file "
        "beside it", required=True, metavar="RESULT.json"))
    stream: list[str] = field(default_factory=list, metadata=option(
        "later prediction files (CSV/TSV/Parquet), each with the window column, the score, the attributes and, "
        "once known, the label (missing labels: score drift only)", nargs="+", required=True, metavar="FILE"))
    window_column: str = field(default="", metadata=option(
        "the window of each row: a window id or a date (numbers and dates in their order, other ids in order of "
        "first appearance)", required=True, metavar="COL"))
    window_bins: str | None = field(default=None, metadata=option(
        "bin a numeric window column into windows [E0,E1),[E1,E2),..., e.g. 0,1,2,4,8,200", metavar="E0,E1,.."))
    labels: list[str] = field(default_factory=list, metadata=option(
        "label column (default: the audit's; one of its tasks)", flag="--label", action="append", csv=True,
        default=None, metavar="COL"))
    scores: list[str] = field(default_factory=list, metadata=option(
        "score column (default: the audit's for that label)", flag="--score", action="append", csv=True,
        default=None, metavar="COL"))
    attributes: list[str] = field(default_factory=list, metadata=option(
        "attributes to monitor (default: every attribute of the audit; its bins apply)", flag="--attribute",
        action="append", csv=True, default=None, metavar="COLS"))
    patient_column: str | None = field(default=None, metadata=option(
        "resample whole patients by this column (default: the audit's, or 'patient_id' / 'Patient ID' when "
        "present; 'none' resamples rows)", metavar="COL"))
    alpha: float = field(default=MONITOR_ALPHA, metadata=option(
        "false-alarm rate of the whole monitor over the horizon, split evenly between the AUC rule and the drift "
        "tests"))
    horizon: int = field(default=MONITOR_HORIZON, metadata=option(
        "windows the false-alarm rate covers (at least the number of windows given)"))
    n_boot: int = field(default=N_BOOT, metadata=option("bootstrap resamples per window interval (0 = none)"))
    seed: int = field(default=0, metadata=option("seed of the bootstrap and of the threshold simulation"))
    out: str | None = field(default=None, metadata=option(
        "output folder: monitor.json, alerts.json (and monitor.html with --report); default "
        "results/monitor/<id>/", metavar="DIR"))
    report: bool = field(default=False, metadata=option("also write the page monitor.html in the output folder"))
    json: bool = field(default=False, metadata=option("print the monitor JSON instead of the summary"))


@dataclass
class Baseline:
    """What the audit fixes for monitoring: the task's columns, the operating threshold, each attribute's groups
    (binned as audited), each group's audited AUC with its interval, the AUC's patient-clustered variance and the
    group's scores (one per patient) for the drift tests."""

    label: str
    score: str
    threshold: float
    attributes: dict[str, tuple[str, ...]]
    bins: dict[str, Bins]
    audited: dict[tuple[str, str], dict[str, Any]]
    variance: dict[tuple[str, str], float]
    scores: dict[tuple[str, str], np.ndarray]
    logits: bool = False
    mde: dict[str, float | None] = field(default_factory=dict)
    source: str = ""


@dataclass
class Window:
    """One window's rows: label (NaN where not yet known), score, each attribute's group codes (the audit's
    groups), patient ids (None: rows)."""

    name: str
    y: np.ndarray
    s: np.ndarray
    codes: dict[str, np.ndarray]
    patients: np.ndarray | None = None


@dataclass
class MonitorOutcome:
    """The monitor document, its alerts and where the files went."""

    document: dict[str, Any]
    paths: dict[str, str]


def _first_per_patient(mask: np.ndarray, patients: np.ndarray | None) -> np.ndarray:
    """`mask` keeping each patient's first row only (rows without an id each count as one patient)."""
    if patients is None:
        return mask
    keep = mask.copy()
    seen: set[str] = set()
    for i in np.nonzero(mask)[0]:
        p = patients[i]
        if missing_id(p):
            continue
        if str(p) in seen:
            keep[i] = False
        seen.add(str(p))
    return keep


def baseline_from(result: dict[str, Any], label: str, score: str, y: np.ndarray, s: np.ndarray,
                  attributes: dict[str, Attribute], patients: np.ndarray | None, bins: dict[str, Bins],
                  logits: bool = False, source: str = "") -> Baseline:
    """The Baseline of an evaluate result (`result`: its "result" block) and its evaluated rows; the rows must give
    the audited AUC of every group back (else the predictions are not the audit's)."""
    thresholds = result["meta"].get("thresholds", {}).get(label) or {}
    if "value" not in thresholds or thresholds.get("comparator", ">=") != ">=":
        raise InputError(f"the audit's operating threshold for {label!r} is per attribute or uses another "
                         "comparator than >= (a compatibility profile); monitor needs one global threshold: "
                         "re-run evaluate with the default profile")
    groups, audited, variance, dist, mde = {}, {}, {}, {}, {}
    for rep in result["reports"]:
        if rep["task"] != label or rep["attribute"] not in attributes:
            continue
        a = attributes[rep["attribute"]]
        groups[a.name] = tuple(rep["groups"])
        mde[a.name] = (rep.get("tests") or {}).get("auc_gap", {}).get("mde")
        for g in rep["groups"]:
            cell = rep["metrics"]["auc"].get(g) or {}
            rows = a.codes == a.groups.index(g) if g in a.groups else np.zeros(len(y), dtype=bool)
            audited[(a.name, g)] = {k: cell.get(k) for k in ("value", "ci_low", "ci_high")}
            value = cell.get("value")
            if value is not None:
                from fairmedbench.metrics.auc import auc

                if abs(auc(y[rows], s[rows]) - value) > 1e-9:
                    raise InputError(f"the audit's predictions do not give its {a.name}={g} AUC back "
                                     f"({auc(y[rows], s[rows]):.6f} against {value:.6f} in the result): they are "
                                     "not the audited rows; re-run evaluate")
            variance[(a.name, g)] = clustered_auc_variance(y[rows], s[rows],
                                                           None if patients is None else patients[rows])
            dist[(a.name, g)] = s[_first_per_patient(rows, patients)]
    missing = [n for n in attributes if n not in groups]
    if missing:
        raise InputError(f"the audit has no report of {label!r} by {missing}; monitor the audit's attributes")
    return Baseline(label, score, float(thresholds["value"]), groups, bins, audited, variance, dist, logits, mde,
                    source)


def _windows_in_order(values: np.ndarray, bins: str | None, column: str) -> tuple[np.ndarray, list[str]]:
    """Each row's window name and the windows in order: binned numbers, numbers, dates, else first appearance."""
    import pandas as pd

    raw = pd.Series(values, dtype=object)
    if raw.map(missing_id).any():
        raise InputError(f"window column {column!r}: {int(raw.map(missing_id).sum())} row(s) without a window; "
                         "fill or drop them")
    num = pd.to_numeric(raw, errors="coerce")
    if bins is not None:
        try:
            edges = Bins([float(e) for e in bins.split(",") if e.strip()])
        except ValueError:
            raise InputError(f"--window-bins {bins!r}: give increasing numbers, e.g. 0,1,2,4,8,200") from None
        if num.isna().any():
            raise InputError(f"--window-bins needs a numeric window column; {column!r} holds "
                             f"{raw[num.isna()].iloc[0]!r}")
        if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
            raise InputError(f"--window-bins {bins!r}: give at least two increasing edges")
        a = make_attribute(column, num.to_numpy(), edges)  # refuses values outside the edges
        names = np.array([f"[{lo:g}, {hi:g})" for lo, hi in zip(edges, edges[1:])], dtype=object)
        return names[a.codes], [g for k, g in enumerate(names) if (a.codes == k).any()]
    text = raw.astype(str).str.strip()
    if not num.isna().any():
        order = sorted(set(zip(num, text)))
        return text.to_numpy(dtype=object), list(dict.fromkeys(t for _, t in order))
    dates = pd.to_datetime(text, errors="coerce", format="ISO8601")
    if not dates.isna().any():
        order = sorted(set(zip(dates, text)))
        return text.to_numpy(dtype=object), list(dict.fromkeys(t for _, t in order))
    return text.to_numpy(dtype=object), list(dict.fromkeys(text))


def _labels(values: np.ndarray, what: str) -> np.ndarray:
    """0/1 labels as floats, NaN where missing (not yet known)."""
    import pandas as pd

    num = pd.to_numeric(pd.Series(values, dtype=object).map(lambda v: None if missing_id(v) else v),
                        errors="coerce").to_numpy(dtype=np.float64)
    known = pd.Series(values, dtype=object).map(lambda v: not missing_id(v)).to_numpy()
    bad = known & ~np.isin(num, (0.0, 1.0))
    if bad.any():
        raise InputError(f"{what}: labels must be 0 or 1 (or empty while not yet known), found "
                         f"{values[np.nonzero(bad)[0][0]]!r}")
    return num


def _rate_cell(cell: dict[str, Any] | None) -> dict[str, Any]:
    cell = cell or {}
    return {k: cell.get(k) for k in ("value", "ci_low", "ci_high")}


def _window_metrics(b: Baseline, w: Window, n_boot: int, seed: int) -> dict[tuple[str, str], dict[str, Any]]:
    """AUC, TPR and FPR per group of the window's labelled rows at the audit's threshold, with patient-level
    bootstrap intervals (the metric engine's)."""
    from fairmedbench.spec import ScoreSettings
    from fairmedbench.tasks.base import PATIENT_COLUMN, PredictionTable, get_task

    lab = np.isfinite(w.y)
    if not lab.any() or len(np.unique(w.y[lab])) < 2:
        return {}
    keep = np.flatnonzero(lab)
    table: dict[str, np.ndarray] = {f"label:{b.label}": w.y[keep].astype(np.int8), f"score:{b.label}": w.s[keep]}
    for n, groups in b.attributes.items():  # the audit's groups by name (a code < 0: not in any, left out)
        codes = w.codes[n][keep]
        names = np.asarray(groups, dtype=object)[np.maximum(codes, 0)]
        names[codes < 0] = None
        table[f"attr:{n}"] = names
    if w.patients is not None:
        table[PATIENT_COLUMN] = w.patients[keep]
    settings = ScoreSettings(threshold=f"fixed:{b.threshold!r}", n_boot=n_boot, n_perm=0, seed=seed,
                             resampling_unit="row" if w.patients is None else "patient",
                             groups={n: list(g) for n, g in b.attributes.items()}, data_checks="record")
    res = get_task("classification").score(PredictionTable(table, (b.label,), tuple(b.attributes)),
                                           settings).to_dict()
    out = {}
    for rep in res["reports"]:
        for g in rep["groups"]:
            out[(rep["attribute"], g)] = {m: _rate_cell(rep["metrics"][m].get(g)) for m in ("auc", "tpr", "fpr")}
    return out


def _drift(b: Baseline, key: tuple[str, str], in_g: np.ndarray, w: Window, n_tests: int) -> dict[str, Any] | None:
    """This window's scores of the group (one per patient) against the audit's, labelled or not: the KS test
    (Bonferroni over `n_tests`); None without scores on either side."""
    from scipy.stats import ks_2samp

    if not (in_g.any() and len(b.scores[key])):
        return None
    keep = _first_per_patient(in_g, w.patients)
    test = ks_2samp(w.s[keep], b.scores[key])
    return {"ks_d": float(test.statistic), "p_value": float(test.pvalue),
            "p_bonferroni": min(1.0, float(test.pvalue) * n_tests), "n": int(keep.sum()),
            "n_baseline": len(b.scores[key]), "median_shift": float(np.median(w.s[keep]) - np.median(b.scores[key]))}


def _row_alerts(row: dict[str, Any], attr: str, g: str, audited: float, st: float, h: float, a_drift: float,
                n_groups: int, horizon: int) -> list[dict[str, Any]]:
    """A window row's alerts: the CUSUM alarm of its AUC drop, the drift test below its level."""
    alerts = []
    if row["alert"]:
        alerts.append({"window": row["window"], "attribute": attr, "group": g, "metric": "auc",
                       "value": row["auc"]["value"], "baseline": audited, "statistic": st, "threshold": h,
                       "reason": (f"{attr}={g}: AUC {row['auc']['value']:.3f} against {audited:.3f} audited (drop "
                                  f"{audited - row['auc']['value']:.3f}); the CUSUM of standardised drops reached "
                                  f"{st:.2f} > h = {h:.2f}")})
    d = row["drift"]
    if d is not None and d["p_value"] < a_drift:
        alerts.append({"window": row["window"], "attribute": attr, "group": g, "metric": "score_ks",
                       "value": d["ks_d"], "baseline": None, "statistic": d["p_value"], "threshold": a_drift,
                       "reason": (f"{attr}={g}: score distribution moved from the audit's (KS D = {d['ks_d']:.3f}, "
                                  f"median {d['median_shift']:+.3f}, p = {d['p_value']:.2g} < {a_drift:.2g}, "
                                  f"Bonferroni over {n_groups} groups x {horizon} windows)")})
    return alerts


def monitor_windows(b: Baseline, windows: list[Window], alpha: float = MONITOR_ALPHA,
                    horizon: int = MONITOR_HORIZON, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """Per window and group: the rates with intervals, the CUSUM look and the drift test; the alerts; the rule."""
    horizon = max(horizon, len(windows))
    n_groups = sum(len(g) for g in b.attributes.values())
    a_auc = alpha * PERFORMANCE_SHARE / n_groups  # Bonferroni over groups
    a_drift = alpha * (1 - PERFORMANCE_SHARE) / (n_groups * horizon)  # Bonferroni over groups and looks
    per_window = {w.name: _window_metrics(b, w, n_boot, seed) for w in windows}
    rows: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    for attr, groups in b.attributes.items():
        for g in groups:
            key = (attr, g)
            base, v_b = b.audited[key], b.variance[key]
            target = b.mde.get(attr)
            drops, ratios, ks, hs, looks = [], [], [], [], []
            for w in windows:
                code = groups.index(g)
                in_g = w.codes[attr] == code
                lab = in_g & np.isfinite(w.y)
                n_pos, n_neg = int((w.y[lab] == 1).sum()), int((w.y[lab] == 0).sum())
                row: dict[str, Any] = {"window": w.name, "attribute": attr, "group": g, "n": int(in_g.sum()),
                                       "n_labelled": int(lab.sum()), "n_pos": n_pos, "n_neg": n_neg}
                metrics = per_window[w.name].get(key, {})
                row.update(metrics or {m: _rate_cell(None) for m in ("auc", "tpr", "fpr")})
                value = row["auc"]["value"]
                z = math.nan
                if not in_g.any():
                    row["reason"] = "no rows of this group in the window"
                elif not lab.any():
                    row["reason"] = f"labels not yet known ({int(in_g.sum())} rows): score drift only"
                elif value is None:
                    row["reason"] = f"one class ({n_pos} positives, {n_neg} negatives): no AUC, no look"
                elif base["value"] is None or not math.isfinite(v_b):
                    row["reason"] = "the audit has no AUC for this group: no look"
                else:
                    v_w = clustered_auc_variance(w.y[lab], w.s[lab], None if w.patients is None else w.patients[lab])
                    look = auc_look(base["value"], v_b, value, v_w, target)
                    if look is not None:
                        z = look.z
                        ratios.append(look.ratio)
                        ks.append(look.k)
                    else:
                        row["reason"] = "AUC variance undefined (fewer than two patients): no look"
                drops.append(z)
                hs.append(cusum_threshold(ratios, ks, horizon, a_auc, seed=seed) if math.isfinite(z) else math.nan)
                row["k"] = ks[-1] if math.isfinite(z) else None
                looks.append(row)
                row["drift"] = _drift(b, key, in_g, w, n_groups * horizon)
            look_k = iter(ks)
            stats, alarms = cusum(drops, [next(look_k) if math.isfinite(z) else 0.0 for z in drops],
                                  [h if math.isfinite(h) else math.inf for h in hs])
            for row, z, st, h, alarm in zip(looks, drops, stats, hs, alarms):
                row["z_drop"] = z if math.isfinite(z) else None
                row["cusum"] = st if math.isfinite(z) else None
                row["threshold"] = h if math.isfinite(h) else None
                row["alert"] = bool(alarm)
                alerts += _row_alerts(row, attr, g, base["value"], st, h, a_drift, n_groups, horizon)
            rows += looks
    order = {w.name: i for i, w in enumerate(windows)}
    alerts.sort(key=lambda a: (order[a["window"]], a["metric"] != "auc", a["attribute"], a["group"]))
    rule = {"kind": "one-sided CUSUM of standardised AUC drops per group", "k_default": CUSUM_K, "alpha": alpha,
            "alpha_auc_per_group": a_auc, "alpha_drift_per_test": a_drift, "horizon": horizon,
            "n_groups": n_groups, "text": rule_text(alpha, horizon, n_groups)}
    return {"rule": rule, "windows": [w.name for w in windows], "rows": rows, "alerts": alerts}


def _check_options(opts: MonitorOptions) -> None:
    if not 0.0 < opts.alpha < 1.0:
        raise InputError(f"--alpha {opts.alpha}: give a false-alarm rate between 0 and 1, e.g. 0.05")
    if opts.horizon < 1:
        raise InputError(f"--horizon {opts.horizon}: give the number of windows the false-alarm rate covers (>= 1)")
    if opts.n_boot < 0:
        raise InputError(f"--n-boot {opts.n_boot}: give 0 (no intervals) or more resamples")
    if len(opts.labels) > 1 or len(opts.scores) > 1:
        raise InputError("monitor follows one task: give one --label (and at most one --score) column")


def load_baseline(opts: MonitorOptions) -> tuple[Baseline, dict[str, Any], str | None]:
    """The Baseline of --baseline (its result JSON and the per-sample predictions beside it), the task and
    attributes chosen by the options; also the result document and the audit's patient column."""
    from fairmedbench.benchmark.evaluate import PATIENT_COLUMNS, read_table

    path = Path(opts.baseline)
    if not path.is_file():
        raise MissingResourceError(f"--baseline {path}: no such file; give the result JSON of benchmark evaluate")
    try:
        doc = store.read_json(path)
    except ValueError:
        raise InputError(f"--baseline {path} is not JSON; give the result JSON of benchmark evaluate") from None
    if not isinstance(doc, dict) or doc.get("kind") != BASELINE_KIND:
        kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise InputError(f"--baseline {path} is a {kind!r} document; monitor needs a binary classification audit "
                         f"({BASELINE_KIND!r}, written by benchmark evaluate)")
    spec = doc.get("spec", {})
    tasks = list(spec.get("labels") or [])
    label = opts.labels[0] if opts.labels else (tasks[0] if len(tasks) == 1 else "")
    if label not in tasks:
        raise InputError(f"--label {label or '?'}: the audit's tasks are {tasks}; name one of them with --label"
                         if label or not tasks else f"the audit {path} names no label column")
    score = str(spec["scores"][tasks.index(label)])
    attrs = list(opts.attributes or spec.get("attributes") or [])
    unknown = [a for a in attrs if a not in (spec.get("attributes") or [])]
    if unknown:
        raise InputError(f"--attribute {unknown}: not audited (the audit's attributes are {spec.get('attributes')}); "
                         "monitor the audit's attributes")
    pred_name = (doc.get("files") or {}).get("predictions")
    pred = path.parent / str(pred_name)
    if not pred_name or not pred.is_file():
        raise MissingResourceError(f"the audit's per-sample predictions {pred} are missing; monitor compares each "
                                   "window's scores with them: keep the file evaluate wrote beside the result")
    table = read_table(pred, "audit predictions")
    logits = bool(spec.get("logits"))
    s_col = f"{score}__prob" if logits else score
    missing = [c for c in [label, s_col, *attrs] if c not in table.columns]
    if missing:
        raise InputError(f"the audit's predictions {pred} lack the column(s) {missing}; re-run evaluate")
    bins = {k: Bins(v, spec.get("bins_closed", "left")) for k, v in (spec.get("bins") or {}).items() if k in attrs}
    patient = spec.get("patient_column")
    if patient is not None and patient.strip().lower() == "none":
        patient = None
    elif patient is None:
        patient = next((c for c in PATIENT_COLUMNS if c in table.columns), None)
    patients = None if patient is None or patient not in table.columns else np.asarray(table[patient], dtype=object)
    y = np.asarray(table[label], dtype=np.float64).astype(np.int8)
    s = np.asarray(table[s_col], dtype=np.float64)
    codes = {a: make_attribute(a, table[a], bins.get(a)) for a in attrs}
    base = baseline_from(doc["result"], label, score, y, s, codes, patients, bins, logits, str(path))
    return base, doc, patient


def read_stream(opts: MonitorOptions, b: Baseline, patient: str | None) -> tuple[list[Window], list[str]]:
    """The stream files as windows in order, every check made before any metric: columns, labels, scores, groups
    the audit knows; notes on what was left out."""
    import pandas as pd

    from fairmedbench.benchmark.evaluate import read_predictions
    from fairmedbench.metrics._validate import as_scores

    score = opts.scores[0] if opts.scores else b.score
    asked = opts.patient_column
    if asked is not None:
        patient = None if asked.strip().lower() == "none" else asked
    frames, notes = [], []
    for f in opts.stream:
        df = read_predictions(Path(f), "stream")
        need = [opts.window_column, score, *b.attributes] + ([patient] if patient else [])
        missing = [c for c in need if c not in df.columns]
        if missing:
            have = ", ".join(map(str, df.columns[:30]))
            raise InputError(f"{f}: no column(s) {missing} (window, score, attributes"
                             f"{', patient' if patient else ''}); its columns are: {have}")
        if b.label not in df.columns:
            notes.append(f"{f}: no label column {b.label!r}: its {len(df)} rows are scored for drift only")
            df = df.assign(**{b.label: np.nan})
        frames.append(df[[*dict.fromkeys(need + [b.label])]].assign(__file=f))
    data = pd.concat(frames, ignore_index=True)
    names, order = _windows_in_order(data[opts.window_column].to_numpy(dtype=object), opts.window_bins,
                                     opts.window_column)
    y = _labels(data[b.label].to_numpy(dtype=object), f"label column {b.label!r} of the stream")
    s = as_scores(data[score].to_numpy(), f"score column {score!r} of the stream", logits=b.logits)
    codes = {}
    for a, groups in b.attributes.items():
        attr = make_attribute(a, data[a].to_numpy(dtype=object), b.bins.get(a))
        new = [g for g in attr.groups if g not in groups and (attr.codes == attr.groups.index(g)).any()]
        if new:
            first = names[np.isin(np.array(attr.groups, dtype=object)[np.maximum(attr.codes, 0)], new)
                          & (attr.codes >= 0)][0]
            raise InputError(f"attribute {a!r}: group(s) {new} of the stream are not among the audit's {list(groups)} "
                             f"(first in window {first}); an unaudited group has no baseline to monitor against: "
                             "audit it, or map or drop those rows")
        lookup = np.array([groups.index(g) for g in attr.groups] + [-1], dtype=np.int64)
        codes[a] = lookup[attr.codes]
        if (attr.codes < 0).any():
            notes.append(f"{int((attr.codes < 0).sum())} stream row(s) without {a!r}: left out of its groups")
    pids = None if patient is None else data[patient].to_numpy(dtype=object)
    windows = []
    for name in order:
        m = names == name
        windows.append(Window(str(name), y[m], s[m], {a: c[m] for a, c in codes.items()},
                              None if pids is None else pids[m]))
    return windows, notes


def headline(doc: dict[str, Any]) -> list[str]:
    """The sentences the page and the terminal open with: the first AUC alert (or that there is none, and whether
    any window fell below its audited interval), then the drift alerts."""
    rows, alerts, audited = doc["rows"], doc["alerts"], doc["baseline"]["auc"]
    looked = sorted({r["window"] for r in rows if r["cusum"] is not None}, key=doc["windows"].index)
    auc_alerts = [a for a in alerts if a["metric"] == "auc"]
    drift = [a for a in alerts if a["metric"] == "score_ks"]
    if auc_alerts:
        a = auc_alerts[0]
        more = len(auc_alerts) - 1
        first = (f"{a['attribute']}={a['group']}'s AUC fell by {a['baseline'] - a['value']:.2f} in window "
                 f"{a['window']} ({a['baseline']:.3f} audited, {a['value']:.3f} there): its CUSUM reached "
                 f"{a['statistic']:.2f} > {a['threshold']:.2f}" + (f"; {more} more AUC alert(s) below." if more
                                                                  else "."))
    else:
        below = [r for r in rows if r["auc"]["value"] is not None
                 and (c := audited.get(f"{r['attribute']}={r['group']}", {})).get("ci_low") is not None
                 and r["auc"]["value"] < c["ci_low"]]
        intervals = all(c.get("ci_low") is not None for c in audited.values())
        first = (f"No AUC alert in {len(looked)} labelled windows (the audit has no intervals to compare with)."
                 if not intervals else
                 f"No group's AUC has fallen below its audited interval in {len(looked)} labelled windows."
                 if not below else
                 f"No AUC alert in {len(looked)} labelled windows: {len(below)} window value(s) fell below the "
                 "audited interval without a sustained drop (the CUSUM stayed under its threshold).")
    second = ("No group's score distribution moved beyond chance." if not drift else
              f"Scores moved in {len(drift)} (window, group) pair(s), first "
              f"{drift[0]['attribute']}={drift[0]['group']} in window {drift[0]['window']} "
              f"(KS D = {drift[0]['value']:.3f}).")
    return [first, second]


def run_monitor(opts: MonitorOptions, command: list[str] | None = None) -> MonitorOutcome:
    """`benchmark monitor`: check everything, compute the windows, write monitor.json, alerts.json (and the page)."""
    _check_options(opts)
    b, doc, patient = load_baseline(opts)
    windows, notes = read_stream(opts, b, patient)
    out = monitor_windows(b, windows, opts.alpha, opts.horizon, opts.n_boot, opts.seed)
    result = {
        "schema_version": "1.0", "kind": "monitor", "command": command or [],
        "baseline": {"path": b.source, "run_id": doc.get("run_id"), "label": b.label, "score": b.score,
                     "threshold": b.threshold, "attributes": {k: list(v) for k, v in b.attributes.items()},
                     "auc": {f"{a}={g}": v for (a, g), v in b.audited.items()},
                     "auc_se": {f"{a}={g}": math.sqrt(v) if math.isfinite(v) else None
                                for (a, g), v in b.variance.items()},
                     "mde_auc_gap": b.mde},
        "stream": {"files": [{"path": f, "sha256": store.sha256_file(f)} for f in opts.stream],
                   "window_column": opts.window_column, "window_bins": opts.window_bins,
                   "patient_column": opts.patient_column if opts.patient_column is not None else patient},
        "n_boot": opts.n_boot, "seed": opts.seed, "notes": notes, **out}
    result["headline"] = headline(result)
    result = store.jsonable(result)
    run = store.run_id({"baseline": result["baseline"], "stream": result["stream"], "alpha": opts.alpha,
                        "horizon": opts.horizon, "n_boot": opts.n_boot, "seed": opts.seed})
    folder = Path(opts.out) if opts.out else Path("results") / "monitor" / run
    paths = {"monitor": str(store.write_json(folder / "monitor.json", result)),
             "alerts": str(store.write_json(folder / "alerts.json", {
                 "rule": result["rule"]["text"], "windows": result["windows"], "alerts": result["alerts"]}))}
    if opts.report:
        from fairmedbench.report.monitor import write_monitor_page

        paths["report"] = str(write_monitor_page(folder / "monitor.html", result))
    return MonitorOutcome(result, paths)
