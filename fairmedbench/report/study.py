"""The study report: every finished run of a study's plan aggregated into one tidy table (Parquet and CSV), the
FairMedFM figures (PNG and SVG) and one self-contained HTML page that leads with the answers.

Input: a sweep plan (<out>/studies/<name>/plan.json, written by `benchmark sweep`) whose done cells point at run
folders under the results root. Each run's per-seed result documents are read with `RunResult` and summarised
across seeds (mean, std, t interval clipped to the metric's bounds, metrics/stats.seed_summary). Names,
directions and bounds of metrics come from the MetricSpec registry only.

Sections: Figs 2/3 (ΔAUC / ΔDSC per FM x dataset), Fig 4 (equity-scaled score against utility by usage, FM
category and prompt), Fig 5 (per-group utility of each FM on one dataset against the equal-utility diagonal,
with a sign test of which group is favoured), Table 2 (mitigations against ERM, paired over seeds), Friedman
test with Nemenyi ranks across datasets, the fairness-law sweep (train_group_share), the imbalance sweep
(prevalence), repeated splits (split_seeds: the t interval across split seeds beside each split's test-set
bootstrap interval; also the table's across_splits_* columns) and external evaluation. A section without data is
left out with a one-line note.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.engine import store
from fairmedbench.engine.results import RunResult
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.metrics.result import GAP, OVERALL
from fairmedbench.metrics.specs import MetricSpec, board_metrics, headline_metric, metric_spec, task_metrics
from fairmedbench.metrics.stats import seed_summary
from fairmedbench.report.verdicts import ALPHA, study_mitigation
from fairmedbench.spec import BASELINE_MITIGATION

if TYPE_CHECKING:
    import pandas as pd

    from fairmedbench.metrics.stats import FriedmanResult, SeedSummary
    from fairmedbench.report.html import Cell, Img, Table

CELL_FIELDS = ("model", "dataset", "usage", "mitigation", "prompt", "attributes", "seeds", "hparams",
               "train_group_share", "share_group", "train_size", "prevalence", "prevalence_on")
STATUSES = ("planned", "done", "failed", "skipped")
#: what one configuration is, apart from its mitigation (the pairing key against ERM)
CONFIG = ("task_kind", "model", "dataset", "usage", "prompt", "attributes", "hparams", "train_group_share",
          "share_group", "train_size", "prevalence", "prevalence_on", "split_seed", "task", "attribute")
#: what one configuration is across split seeds: every field but the split seed, and the row's metric and scope
SPLIT_KEY = ("mitigation", *(c for c in CONFIG if c != "split_seed"), "seeds", "eval_dataset", "metric", "scope",
             "group")
#: the tidy table's across-split columns (NaN on rows of a configuration run on fewer than two split seeds)
ACROSS_SPLITS = ("across_splits_mean", "across_splits_std", "across_splits_ci_low", "across_splits_ci_high",
                 "n_splits")
LAW_METRICS = ("auc", "sauroc")
IMBALANCE_METRICS = ("auc", "ap", "balanced_brier", "ece", "calibration_loss", "balanced_calibration_loss")


@dataclass
class StudyReport:
    """What `write_study_report` wrote: the tidy table (also as a DataFrame), the page, the figure files, the
    answers shown first on the page, and the notes (sections left out and why)."""

    study: str
    table: pd.DataFrame
    parquet: Path
    csv: Path
    html: Path
    figures: list[Path] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------- the plan

def read_plan(plan_path: Path) -> dict[str, Any]:
    """The plan document, checked: its study name and a list of cells with the fields the report reads."""
    plan_path = Path(plan_path)
    if not plan_path.is_file():
        raise MissingResourceError(f"study plan {plan_path} not found; run `benchmark sweep STUDY` first")
    try:
        plan = json.loads(plan_path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"study plan {plan_path}: not valid JSON ({exc})") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("cells"), list) or "study" not in plan:
        raise InputError(f"study plan {plan_path}: needs 'study' and a list 'cells' (as `benchmark sweep` writes)")
    for i, c in enumerate(plan["cells"]):
        if not isinstance(c, dict) or not isinstance(c.get("cell"), dict) or c.get("status") not in STATUSES:
            raise InputError(f"study plan {plan_path}: cell {i} needs a 'cell' mapping and a status in "
                             f"{', '.join(STATUSES)}")
        missing = [k for k in CELL_FIELDS if k not in c["cell"]]
        if missing:
            raise InputError(f"study plan {plan_path}: cell {i} lacks {', '.join(missing)}")
        if c["status"] == "done" and not c.get("run_dir"):
            raise InputError(f"study plan {plan_path}: cell {i} is done but has no run_dir")
    return plan


def _cell_columns(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell's fields as flat table columns (lists joined, hparams as sorted JSON)."""
    def num(v: Any) -> float | None:
        return None if v is None else float(v)

    return {"model": cell["model"], "dataset": cell["dataset"], "usage": cell["usage"],
            "mitigation": cell["mitigation"], "prompt": cell["prompt"],
            "attributes": ",".join(cell["attributes"] or ()), "seeds": ",".join(str(s) for s in cell["seeds"] or ()),
            "hparams": json.dumps(cell["hparams"] or {}, sort_keys=True),
            "train_group_share": num(cell["train_group_share"]), "share_group": cell["share_group"],
            "train_size": None if cell["train_size"] is None else int(cell["train_size"]),
            "prevalence": num(cell["prevalence"]), "prevalence_on": cell["prevalence_on"],
            # repeated splits and external evaluation (cells of plans written before them have neither)
            "split_seed": None if not cell.get("split_seeds") else int(cell["split_seeds"][0]),
            "eval_datasets": ",".join(cell.get("eval_datasets") or ()), "eval_dataset": None}


def _bounds(metric: str) -> tuple[float, float] | None:
    try:
        return metric_spec(metric).bounds
    except InputError:  # a metric of another engine version: summarised without clipping
        return None


def _model_facts(name: str) -> dict[str, str | None]:
    """The FM category fields of the model card (kind, family); None for a model this install lacks."""
    from fairmedbench.registry.models import get_card

    try:
        card = get_card(name)
    except InputError:
        return {"model_kind": None, "model_family": None}
    return {"model_kind": card.kind, "model_family": card.family}


def _resolved_sampling(cols: dict[str, Any], sampling: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The cell's sampling columns with the run's resolved values (defaults such as the share group and the
    training size are filled in by the run); a cell that names another value than its run is an error."""
    out = dict(cols)
    for k, v in sampling.items():
        if k not in out:
            continue
        mine = out[k]
        if mine is not None and mine != v and not (isinstance(v, float) and math.isclose(float(mine), v)):
            raise InputError(f"run {run_id}: the plan's cell says {k}={mine!r} but the run was made with {v!r}; "
                             "the plan and the results disagree (rerun `benchmark sweep`)")
        out[k] = v
    return out


def _run_rows(cols: dict[str, Any], run_id: str, folder: Path) -> list[dict[str, Any]]:
    """One row per (task column, attribute, metric, scope/group) of one finished run, summarised across seeds."""
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        raise MissingResourceError(f"run {run_id}: {summary_path} is missing although the plan says done; rerun "
                                   "`benchmark sweep` to finish it")
    summary = store.read_json(summary_path)
    results = [RunResult(store.read_json(folder / f), folder) for f in summary["files"]]
    kind = results[0].kind.removeprefix("run-")
    cols = _resolved_sampling(cols, results[0].spec.get("sampling") or {}, run_id)
    keys: dict[tuple[str, str, str, str], int] = {}
    per_seed: list[dict[tuple[str, str, str, str], tuple[float, float, float, int, float]]] = []
    for res in results:
        vals = {}
        for rec in res.fairness().records():
            k = (rec["task"], rec["attribute"], rec["metric"], rec["group"])
            keys.setdefault(k, len(keys))
            vals[k] = (rec["value"], rec["ci_low"], rec["ci_high"], rec["n"], rec["p_value"])
        per_seed.append(vals)
    tasks = list(dict.fromkeys(k[0] for k in keys))
    small = {(r.task, r.attribute): ",".join(r.small_groups) for r in results[0].fairness().reports}
    seeds = [r.seed for r in results]
    rows = []
    for k in keys:
        task, attribute, metric, group = k
        cells = [v.get(k, (math.nan, math.nan, math.nan, 0, math.nan)) for v in per_seed]
        seed_p = [float(c[4]) for c in cells]
        tested = [p for p in seed_p if math.isfinite(p)]
        values = np.array([c[0] for c in cells], dtype=float)
        ok = values[np.isfinite(values)]
        s = seed_summary(ok, bounds=_bounds(metric)) if ok.size else None
        scope = "overall" if group == OVERALL else "between" if group == GAP else "group"
        rows.append({**cols, "run_id": run_id, "task_kind": kind, "task": task, "task_index": tasks.index(task),
                     "attribute": attribute, "small_groups": small.get((task, attribute), ""),
                     "metric": metric, "scope": scope,
                     "group": None if scope != "group" else group,
                     "mean": s.mean if s else math.nan, "std": s.std if s else math.nan,
                     "ci_low": s.ci_low if s else math.nan, "ci_high": s.ci_high if s else math.nan,
                     "n_seeds": int(ok.size), "n_undefined": int(values.size - ok.size), "n": int(cells[-1][3]),
                     "run_seeds": seeds, "seed_values": values.tolist(),
                     "seed_ci_low": [c[1] for c in cells], "seed_ci_high": [c[2] for c in cells],
                     "seed_p_values": seed_p,
                     # the permutation test across seeds: the largest seed's p (every seed must reject: an
                     # intersection-union test, valid whatever the seeds' dependence)
                     "p_value": max(tested) if len(tested) == len(seed_p) and tested else math.nan})
    return rows + _external_rows(rows[0] if rows else cols, [r.doc for r in results])


def _external_rows(base: dict[str, Any], docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's external evaluations as tidy rows beside its own (`eval_dataset` names the external set): scope
    'external' for the external set's whole-population and between-group metrics, scope 'shift' for the shift
    (external − internal) of each group (`<metric>_shift`), of the gap (`<metric>_gap_shift`) and of the signed
    difference (`<metric>_diff_shift`), each summarised across seeds with the per-seed bootstrap intervals (the
    independent bootstraps of the two test sets)."""
    if not docs or not docs[0].get("external"):
        return []
    keep = {k: base[k] for k in base if k not in ("task", "task_index", "attribute", "small_groups", "metric", "scope",
                                                 "group", "mean", "std", "ci_low", "ci_high", "n_seeds",
                                                 "n_undefined", "n", "run_seeds", "seed_values", "seed_ci_low",
                                                 "seed_ci_high", "seed_p_values", "p_value")}
    seeds = [d["spec"]["seed"] for d in docs]
    rows = []

    def row(label: str, task: str, attribute: str, metric: str, scope: str, group: str | None,
            cells: list[tuple[float | None, float | None, float | None]], n: int) -> dict[str, Any]:
        values = np.array([math.nan if c[0] is None else c[0] for c in cells], dtype=float)
        ok = values[np.isfinite(values)]
        s = seed_summary(ok) if ok.size else None
        return {**keep, "eval_dataset": label, "task": task, "task_index": 0, "attribute": attribute,
                "small_groups": "", "metric": metric, "scope": scope, "group": group,
                "mean": s.mean if s else math.nan, "std": s.std if s else math.nan,
                "ci_low": s.ci_low if s else math.nan, "ci_high": s.ci_high if s else math.nan,
                "n_seeds": int(ok.size), "n_undefined": int(values.size - ok.size), "n": n, "run_seeds": seeds,
                "seed_values": values.tolist(), "seed_ci_low": [c[1] for c in cells],
                "seed_ci_high": [c[2] for c in cells]}

    for k, first in enumerate(docs[0]["external"]):
        exts = [d["external"][k] for d in docs]
        for rep in first["result"]["reports"]:
            for m, per in rep["metrics"].items():
                for g in (OVERALL, GAP):
                    if g in per:
                        cells = []
                        for e in exts:
                            r = next(x for x in e["result"]["reports"]
                                     if x["task"] == rep["task"] and x["attribute"] == rep["attribute"])
                            c = r["metrics"].get(m, {}).get(g) or {}
                            cells.append((c.get("value"), c.get("ci_low"), c.get("ci_high")))
                        rows.append(row(first["label"], rep["task"], rep["attribute"], m,
                                        "external", None if g == OVERALL else "between", cells, first["n_test"]))
        for j, sh in enumerate(first["shift"]):
            items: list[tuple[str, str | None, Callable[[dict[str, Any]], dict[str, Any]]]]
            items = [(f"{sh['metric']}_shift", g, _group_shift(g)) for g in sh["per_group"]]
            items.append((f"{sh['metric']}_gap_shift", None, lambda s: s["gap"]))
            if "diff" in sh:
                items.append((f"{sh['metric']}_diff_shift", None, lambda s: s.get("diff", {})))
            for metric, group, pick in items:
                cells = [(pick(e["shift"][j]).get("shift"), pick(e["shift"][j]).get("ci_low"),
                          pick(e["shift"][j]).get("ci_high")) for e in exts]
                rows.append(row(first["label"], first["result"]["reports"][0]["task"], sh["attribute"], metric,
                                "shift", group, cells, first["n_test"]))
    return rows


def _group_shift(group: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Picks one group's block from an external result's shift entry (absent: {})."""
    return lambda s: s["per_group"].get(group, {})


def tidy_table(plan: dict[str, Any], out_root: Path) -> pd.DataFrame:
    """Every done run of the plan as tidy rows: the cell's fields, the model card's category, run_id, task
    column, attribute, metric, scope (overall | group | between) and group, then mean, std, ci_low, ci_high and
    n_seeds across seeds (undefined seeds left out and counted in n_undefined), and the per-seed values."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    facts: dict[str, dict[str, str | None]] = {}
    for c in plan["cells"]:
        if c["status"] != "done":
            continue
        cols = _cell_columns(c["cell"])
        facts.setdefault(cols["model"], _model_facts(cols["model"]))
        run_rows = _run_rows({**cols, **facts[cols["model"]]}, str(c.get("run_id")), Path(out_root) / c["run_dir"])
        rows.extend(run_rows)
    return with_across_splits(pd.DataFrame(rows))


def with_across_splits(table: pd.DataFrame) -> pd.DataFrame:
    """The tidy table with the summary across split seeds on every row of a configuration (`SPLIT_KEY`) run on two or
    more split seeds (the `split_seeds` axis: test split fixed, train/val re-drawn): the mean, std (ddof 1) and
    Student-t 95% interval over split seeds of each split's `mean` (its mean over training seeds), clipped to the
    metric's bounds, and n_splits; NaN elsewhere. Each row keeps its own per-seed test-set bootstrap intervals."""
    out = table.copy()
    for c in ACROSS_SPLITS:
        out[c] = np.nan
    if not len(out) or out["split_seed"].isna().all():
        return out
    swept = out[out["split_seed"].notna()]
    for _, g in swept.groupby(list(SPLIT_KEY), dropna=False, sort=False):
        values = g["mean"].to_numpy(dtype=float)
        if g["split_seed"].nunique() < 2 or not np.isfinite(values).all():
            continue
        s = seed_summary(values, bounds=_bounds(str(g["metric"].iloc[0])))
        out.loc[g.index, list(ACROSS_SPLITS)] = [s.mean, s.std, s.ci_low, s.ci_high, s.n]
    return out


def one_per_configuration(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a configuration run on several split seeds folded into one, so that the FairMedFM figures,
    tables and answers count it once: its value and interval across split seeds (`with_across_splits`), every
    (split seed, training seed) in run_seeds ('split/seed') and the per-seed columns, and the largest p (every seed
    of every split must reject); split_seed empty and run_id the runs' ids joined. Other rows unchanged."""
    import pandas as pd

    if not len(table) or "split_seed" not in table or table["split_seed"].isna().all():  # no split sweep
        return table
    rows: list[dict[Hashable, Any]] = []
    for _, g in table.groupby(list(SPLIT_KEY), dropna=False, sort=False):
        if g["split_seed"].nunique() < 2:
            rows += g.to_dict("records")
            continue
        row = g.iloc[0].to_dict()
        p_values = [math.nan if p is None else float(p) for ps in g["seed_p_values"] for p in ps]  # None: read back
        row.update(mean=row["across_splits_mean"], std=row["across_splits_std"], ci_low=row["across_splits_ci_low"],
                   ci_high=row["across_splits_ci_high"], n_seeds=int(g["n_seeds"].sum()),
                   n_undefined=int(g["n_undefined"].sum()), split_seed=None, run_id=",".join(g["run_id"]),
                   run_seeds=[f"{int(sp)}/{sd}" for sp, seeds in zip(g["split_seed"], g["run_seeds"]) for sd in seeds],
                   **{c: [v for vs in g[c] for v in vs] for c in ("seed_values", "seed_ci_low", "seed_ci_high")},
                   seed_p_values=p_values,
                   p_value=max(p_values) if p_values and all(map(math.isfinite, p_values)) else math.nan)
        rows.append(row)
    return pd.DataFrame(rows, columns=table.columns)


# ----------------------------------------------------------------------------------------------- helpers

def _fmt(mean: float, lo: float = math.nan, hi: float = math.nan) -> str:
    if mean is None or not math.isfinite(mean):
        return "—"
    ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{mean:.3f}{ci}"


def _names(kind: str) -> dict[str, MetricSpec]:
    """The task kind's utility and gap specs, and its equity-scaled and signed-difference specs where the task has
    them (a multi-class task has no equity-scaled score), from the registry."""
    util = metric_spec(headline_metric(kind))
    board = board_metrics(kind)
    diff = next((s for s in task_metrics(kind) if s.kind == "diff" and s.name == f"{util.name}_diff"), None)
    return {"util": util, "gap": board["gap"], **({"es": board["es"]} if "es" in board else {}),
            **({"diff": diff} if diff else {})}


def _pick(df: pd.DataFrame, metric: str, scope: str) -> pd.DataFrame:
    """One row per (run, task, attribute) of `metric` in `scope`, indexed by the configuration keys."""
    sub = df[(df["metric"] == metric) & (df["scope"] == scope)]
    return sub.set_index(["mitigation", *CONFIG, "run_id"])


def _entry_label(r: pd.Series, multi_usage: bool, multi_attr: bool) -> str:
    label = str(r["model"])
    if multi_usage:
        label += f" · {r['usage']}"
    if multi_attr:
        label += f" · {r['attribute']}"
    return label


def _img(paths: Sequence[Path], alt: str) -> Img:
    """The PNG of a saved figure as the pages' shared Img component (a data: URI), its files named in the caption."""
    from fairmedbench.report.html import Img

    png = next(p for p in paths if p.suffix == ".png")
    uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    return Img(uri, f"{alt} ({', '.join(p.name for p in paths)})")


@dataclass
class _Section:
    id: str
    title: str
    note: str | None = None
    text: list[str] = field(default_factory=list)
    figures: list[Img] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


def _table(caption: str, frame: pd.DataFrame) -> Table:
    """A DataFrame as the pages' shared Table component (numbers right-aligned, undefined shown as —)."""
    from fairmedbench.report.html import Cell, Table

    def cell(v: object) -> Cell:
        if v is None:
            return Cell("")
        if isinstance(v, float):
            return Cell("—" if not math.isfinite(v) else f"{v:.4g}", "num")
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return Cell(str(v), "num")
        return Cell(str(v))

    return Table([str(c) for c in frame.columns], [[cell(v) for v in row] for row in frame.itertuples(index=False)],
                 caption, css="wide")


# ----------------------------------------------------------------------------------------------- sections

class _Builder:
    """Builds the sections and answers of one study page from the tidy table."""

    def __init__(self, table: pd.DataFrame, fig_dir: Path) -> None:
        self.fig_dir = fig_dir
        self.figures: list[Path] = []
        self.answers: list[str] = []
        self.first = table[table["task_index"] == 0]  # figures and answers use each run's first task column
        # a configuration run on several split seeds counts once (its interval across split seeds)
        self.base = one_per_configuration(self.first[self.first["train_group_share"].isna()
                                                     & self.first["prevalence"].isna()])
        self.erm = self.base[self.base["mitigation"] == BASELINE_MITIGATION]

    def _save(self, paths: list[Path], alt: str) -> Img:
        self.figures.extend(paths)
        return _img(paths, alt)

    def kinds(self, frame: pd.DataFrame) -> list[str]:
        return sorted(frame["task_kind"].unique())

    # -- Figs 2/3 and the bias answer
    def gaps(self) -> _Section:
        sec = _Section("gaps", "Bias across FMs and datasets (FairMedFM Figs 2/3)")
        if not len(self.erm):
            sec.note = "no ERM run without a sampling sweep: nothing to show"
            return sec
        multi_usage = self.erm["usage"].nunique() > 1
        multi_attr = self.erm["attribute"].nunique() > 1
        if self.erm["run_id"].str.contains(",").any():
            sec.text.append("A configuration run on several split seeds is shown once: its mean and Student-t 95% "
                            "interval across split seeds (section 'Repeated splits' shows each split).")
        for kind in self.kinds(self.erm):
            names = _names(kind)
            sub = self.erm[self.erm["task_kind"] == kind]
            gap = sub[(sub["metric"] == names["gap"].name) & (sub["scope"] == "between")]
            rows = [{"dataset": r["dataset"], "label": _entry_label(r, multi_usage, multi_attr), "mean": r["mean"],
                     "ci_low": r["ci_low"], "ci_high": r["ci_high"]} for _, r in gap.iterrows()]
            if rows:
                from fairmedbench.report.study_figures import gap_panels

                label = names["gap"].header
                sec.figures.append(self._save(gap_panels(rows, metric_label=f"{label} (mean, 95% CI over seeds)",
                                                         stem=self.fig_dir / f"fig2-gap-{kind}",
                                                         title=f"{label} per FM and dataset ({kind})"),
                                              f"{label} per FM and dataset"))
            if "diff" in names:
                self._bias_answer(sub, names, kind, sec)
        return sec

    def _bias_answer(self, sub: pd.DataFrame, names: dict[str, MetricSpec], kind: str, sec: _Section) -> None:
        """A configuration shows bias when the signed group difference is larger than chance in every seed (each
        seed's permutation test p < ALPHA: the largest p decides) and points the same way in every seed; the
        verdict reads the test, the intervals are shown beside it (one verdict per question:
        fairmedbench/report/verdicts.py)."""
        diff = sub[(sub["metric"] == names["diff"].name) & (sub["scope"] == "between")]
        rows, hits, untested = [], 0, 0
        for _, r in diff.iterrows():
            p = float(r.get("p_value", math.nan))
            signs = {np.sign(v) for v in r["seed_values"] if math.isfinite(v)}
            if not math.isfinite(p):
                biased, verdict = False, "not tested (no permutation test in every seed: rerun with --n-perm)"
                untested += 1
            else:
                # a permutation test needs no minimum group size (unlike a bootstrap interval): small groups count
                biased = p < ALPHA and len(signs) == 1 and 0 not in signs
                verdict = f"{'yes' if biased else 'no'} (largest seed p = {_p(p)})"
            hits += biased
            rows.append({"model": r["model"], "dataset": r["dataset"], "usage": r["usage"],
                         "attribute": r["attribute"], names["diff"].name: _fmt(r["mean"], r["ci_low"], r["ci_high"]),
                         "n_seeds": r["n_seeds"], "bias": verdict,
                         **({"small groups": r["small_groups"]} if r["small_groups"] else {})})
        if not rows:
            return
        import pandas as pd

        pairs = diff[["model", "dataset"]].drop_duplicates()
        if untested == len(rows):  # nothing could be counted: say so rather than "0 of 0"
            self.answers.append(f"Bias ({kind}): not assessed: none of the {untested} FM × dataset configuration(s) "
                                "carries a permutation test in every seed (rerun them with --n-perm > 0).")
        else:
            not_tested = f"; {untested} configuration(s) carry no permutation test" if untested else ""
            self.answers.append(
                f"Bias exists in {hits} of {len(rows) - untested} tested FM × dataset configurations ({kind}; "
                f"{len(pairs)} FM × dataset pairs, each usage and two-group attribute counted once): the "
                f"{names['diff'].name} is larger than chance in every seed (permutation test, p < {ALPHA}) and "
                f"points the same way{not_tested}.")
        sec.tables.append(_table(f"signed group difference ({names['diff'].name}: second group − first, mean and "
                                 "95% CI over seeds) per configuration; bias = larger than chance in every seed "
                                 f"(permutation test, largest seed p < {ALPHA}) with one sign", pd.DataFrame(rows)))

    # -- Fig 4
    def tradeoff(self) -> _Section:
        sec = _Section("tradeoff", "Fairness-utility trade-off (FairMedFM Fig 4)")
        if not len(self.erm):
            sec.note = "no ERM run without a sampling sweep: nothing to show"
            return sec
        from fairmedbench.report.study_figures import tradeoff_panels

        no_es: list[str] = []
        for kind in self.kinds(self.erm):
            names = _names(kind)
            if "es" not in names:
                no_es.append(kind)
                continue
            sub = self.erm[self.erm["task_kind"] == kind]
            u = _pick(sub, names["util"].name, "overall")
            e = _pick(sub, names["es"].name, "between")
            both = u.join(e, how="inner", lsuffix="_u", rsuffix="_e").reset_index()
            if both.empty:
                continue
            rows = [{"x": r["mean_u"], "x_lo": r["ci_low_u"], "x_hi": r["ci_high_u"], "y": r["mean_e"],
                     "y_lo": r["ci_low_e"], "y_hi": r["ci_high_e"], "usage": r["usage"],
                     "FM category": r["model_kind_u"] or "unknown", "prompt": r["prompt"]}
                    for _, r in both.iterrows()]
            prompted = any(isinstance(r["prompt"], str) for r in rows)  # a prompted usage's runs name their prompt
            facets = ["usage", "FM category"] + (["prompt"] if prompted else [])
            paths = tradeoff_panels(rows, facets, x_label=names["util"].header, y_label=names["es"].header,
                                    stem=self.fig_dir / f"fig4-tradeoff-{kind}",
                                    title=f"{names['es'].header} against {names['util'].header} ({kind})")
            sec.figures.append(self._save(paths, f"{names['es'].header} against {names['util'].header}"))
        if no_es:
            sec.text.append(f"Not drawn for {', '.join(no_es)}: the {' and '.join(no_es)} task has no equity-scaled "
                            "score.")
        if not sec.figures:
            sec.note = "no run has both a utility and an equity-scaled score" + (
                f" (the {' and '.join(no_es)} task has no equity-scaled score)" if no_es else "")
        return sec

    # -- Fig 5
    def consistency(self) -> _Section:
        sec = _Section("consistency", "Are disparities consistent across FMs? (FairMedFM Fig 5)")
        from scipy.stats import binomtest

        from fairmedbench.report.study_figures import group_scatter

        tests = []
        for kind in self.kinds(self.erm):
            util = _names(kind)["util"]
            sub = self.erm[(self.erm["task_kind"] == kind) & (self.erm["metric"] == util.name)
                           & (self.erm["scope"] == "group")]
            for (ds, attr, usage), g in sub.groupby(["dataset", "attribute", "usage"], sort=True, dropna=False):
                groups = sorted(g["group"].unique())
                if len(groups) != 2 or g["model"].nunique() < 2:
                    continue
                a, b = groups
                rows = []
                for model, gm in g.groupby("model", sort=True):
                    ra, rb = gm[gm["group"] == a], gm[gm["group"] == b]
                    if ra.empty or rb.empty:
                        continue
                    ra, rb = ra.iloc[0], rb.iloc[0]
                    rows.append({"label": model, "a": ra["mean"], "a_lo": ra["ci_low"], "a_hi": ra["ci_high"],
                                 "b": rb["mean"], "b_lo": rb["ci_low"], "b_hi": rb["ci_high"]})
                decided = [r for r in rows if math.isfinite(r["a"]) and math.isfinite(r["b"]) and r["a"] != r["b"]]
                k = sum(r["b"] > r["a"] for r in decided)
                n = len(decided)
                if n == 0:
                    continue
                p = float(binomtest(k, n, 0.5).pvalue)
                favoured = b if k > n - k else a if k < n - k else "neither"
                title = (f"{ds}, {attr} ({usage}): {favoured} favoured by {max(k, n - k)} of {n} FMs, "
                         f"sign test p = {p:.3g}")
                paths = group_scatter(rows, (a, b), metric_label=util.header, title=title,
                                      stem=self.fig_dir / f"fig5-groups-{ds}-{attr}-{usage}")
                sec.figures.append(self._save(paths, title))
                tests.append({"dataset": ds, "attribute": attr, "usage": usage, "favoured": favoured,
                              "FMs favouring it": max(k, n - k), "FMs": n, "sign test p": p})
        if not tests:
            sec.note = ("no dataset has two or more FMs evaluated on a two-group attribute (ERM, no sampling "
                        "sweep): the sign test needs at least two FMs")
            return sec
        import pandas as pd

        sec.text.append("Sign test: under 'no consistent favoured group' each FM favours either group with "
                        "probability 1/2; p is the two-sided binomial probability of a split at least this "
                        "uneven (scipy.stats.binomtest).")
        sec.tables.append(_table("which group each dataset's FMs favour", pd.DataFrame(tests)))
        consistent = [t for t in tests if t["sign test p"] < 0.05]
        self.answers.append(f"The favoured group is consistent across FMs (sign test p < 0.05) on {len(consistent)} "
                            f"of {len(tests)} dataset × attribute × usage combinations.")
        return sec

    # -- Table 2
    def mitigations(self) -> _Section:
        sec = _Section("mitigations", "Mitigations against ERM (FairMedFM Table 2)")
        base = self.base
        others = sorted(m for m in base["mitigation"].unique() if m != BASELINE_MITIGATION)
        if not others:
            sec.note = "the study has no mitigation besides ERM"
            return sec
        import pandas as pd

        verdicts: dict[tuple[str, str], list[str]] = {}
        rows = []
        for kind in self.kinds(base):
            names = _names(kind)
            sub = base[base["task_kind"] == kind]
            for key in ("util", "gap", "es"):
                if key not in names:
                    continue
                spec = names[key]
                scope = "overall" if key == "util" else "between"
                m = sub[(sub["metric"] == spec.name) & (sub["scope"] == scope)]
                erm = m[m["mitigation"] == BASELINE_MITIGATION]
                for _, r in m.iterrows():
                    row = {"dataset": r["dataset"], "usage": r["usage"], "model": r["model"],
                           "attribute": r["attribute"], "mitigation": r["mitigation"], "metric": spec.header,
                           "mean [95% CI]": _fmt(r["mean"], r["ci_low"], r["ci_high"]), "vs ERM (paired)": "",
                           "verdict": ""}
                    ref = _erm_match(erm, r) if r["mitigation"] != BASELINE_MITIGATION else None
                    if ref is not None:
                        d = _paired(r, ref, spec)
                        if d is not None:
                            row["vs ERM (paired)"] = _fmt(d.mean, d.ci_low, d.ci_high)
                            verdict = study_mitigation(d.mean, d.ci_low, d.ci_high, d.n, spec.higher_is_better)
                            row["verdict"] = verdict
                            verdicts.setdefault((r["mitigation"], key), []).append(verdict)
                    rows.append(row)
        table = pd.DataFrame(rows).sort_values(  # ERM first among the mitigations
            ["dataset", "usage", "model", "attribute", "metric", "mitigation"],
            key=lambda s: s.map(lambda v: "" if v == BASELINE_MITIGATION else str(v)))
        sec.tables.append(_table("utility, gap and equity-scaled score per mitigation (mean over seeds, 95% CI); "
                                 "vs ERM: the mean of per-seed differences (method − ERM, same seeds) with its "
                                 "t interval", table))
        for mit in others:
            parts = []
            for key in ("gap", "util", "es"):
                v = verdicts.get((mit, key), [])
                if v:
                    label = {"gap": "gap", "util": "utility", "es": "equity-scaled score"}[key]
                    undefined = sum(x.startswith("undefined") for x in v)
                    if undefined == len(v):
                        parts.append(f"{label} undefined in all {len(v)} (one seed: no spread to test)"
                                     if all(x == "undefined: one seed" for x in v) else
                                     f"{label} undefined in all {len(v)}")
                        continue
                    parts.append(f"{label} better in {v.count('better')}, worse in {v.count('worse')}, no clear "
                                 f"difference in {v.count('n.s.')} of {len(v)}"
                                 + (f" ({undefined} undefined: one seed or undefined values)" if undefined else ""))
            if parts:
                self.answers.append(f"{mit} against ERM (paired over seeds, interval excludes 0): " + "; ".join(parts)
                                    + ".")
        return sec

    # -- Friedman / Nemenyi
    def ranks(self) -> _Section:
        sec = _Section("ranks", "Ranks across datasets (Friedman test, Nemenyi post-hoc)")
        done = []
        for kind in self.kinds(self.erm):
            names = _names(kind)
            sub = self.erm[self.erm["task_kind"] == kind]
            for key in ("gap", "es", "util"):
                if key not in names:
                    continue
                res = self._friedman(sub, names[key], "model", ["dataset", "usage", "prompt", "attribute"], sec,
                                     f"FMs by {names[key].header} ({kind})", f"cd-models-{key}-{kind}")
                if res and key == "gap":
                    ranks = res.avg_ranks
                    lo, hi = min(ranks.values()), max(ranks.values())
                    best = ", ".join(m for m, r in ranks.items() if r == lo)
                    worst = ", ".join(m for m, r in ranks.items() if r == hi)
                    self.answers.append(
                        f"FMs by {names['gap'].header} ({kind}, {res.n_datasets} dataset blocks): all tie at average "
                        f"rank {lo:.2f}." if lo == hi else
                        f"Fairest FM by {names['gap'].header} ({kind}): {best} (average rank {lo:.2f} over "
                        f"{res.n_datasets} dataset blocks); least fair: {worst} (average rank {hi:.2f}); Friedman "
                        f"p = {_p(res.p_value)}.")
                done.append(res)
            base = self.base[self.base["task_kind"] == kind]
            if base["mitigation"].nunique() > 1:
                for key in ("gap", "util"):
                    done.append(self._friedman(base, names[key], "mitigation",
                                               ["model", "dataset", "usage", "prompt", "attribute"], sec,
                                               f"mitigations by {names[key].header} ({kind})",
                                               f"cd-mitigations-{key}-{kind}"))
        if not any(done):
            sec.note = ("ranks need at least two FMs (or mitigations) with a result on each of at least two "
                        "datasets")
        return sec

    def _friedman(self, sub: pd.DataFrame, spec: MetricSpec, method: str, block: list[str], sec: _Section,
                  caption: str, stem: str) -> FriedmanResult | None:
        import pandas as pd
        import scikit_posthocs as sp

        from fairmedbench.metrics.stats import friedman_nemenyi
        from fairmedbench.report.study_figures import cd_diagram
        from fairmedbench.report.verdicts import study_friedman

        scope = "overall" if spec.headline else "between"
        m = sub[(sub["metric"] == spec.name) & (sub["scope"] == scope)]
        if m.empty or spec.higher_is_better is None:
            return None
        mat = m.pivot_table(index=block, columns=method, values="mean", aggfunc="mean", dropna=False)
        mat = mat.dropna(axis=1, how="any") if mat.shape[0] else mat
        if mat.shape[0] < 2 or mat.shape[1] < 2:
            return None
        res = friedman_nemenyi(mat.to_numpy(), list(mat.columns), higher_is_better=spec.higher_is_better)
        undefined = study_friedman(res.chi2, res.p_value, res.n_datasets, res.k_methods)
        if undefined:  # too few methods, or every value ties: no test, no Nemenyi p-values, no CD plot
            sec.text.append(f"{caption}: {res.n_datasets} blocks, {res.k_methods} {method}s; Friedman test "
                            f"{undefined}.")
            sec.tables.append(_table(f"{caption}: average ranks", pd.DataFrame(
                {method: list(res.avg_ranks), "average rank (1 = best)": list(res.avg_ranks.values())}
            ).sort_values("average rank (1 = best)")))
            return res
        pvals = sp.posthoc_nemenyi_friedman(mat.to_numpy())
        pvals.index = pvals.columns = list(mat.columns)
        table = pd.DataFrame({method: list(res.avg_ranks), "average rank (1 = best)": list(res.avg_ranks.values())}
                             ).sort_values("average rank (1 = best)")
        text = (f"{caption}: {res.n_datasets} blocks, {res.k_methods} {method}s; Friedman χ² = "
                f"{_num(res.chi2)}, p = {_p(res.p_value)}; Nemenyi CD = {res.cd:.3f} (α = {res.alpha})")
        if res.note:
            text += f"; {res.note}"
        sec.text.append(text)
        sec.tables.append(_table(f"{caption}: average ranks", table))
        sec.tables.append(_table(f"{caption}: Nemenyi p-values (scikit-posthocs posthoc_nemenyi_friedman)",
                                 pvals.reset_index(names=method)))
        sec.figures.append(self._save(cd_diagram(res.avg_ranks, pvals, stem=self.fig_dir / stem,
                                                 title=f"critical difference: {caption}"), caption))
        return res

    # -- sweeps
    def fairness_laws(self) -> _Section:
        sec = _Section("fairness-laws", "Fairness laws: utility against a group's training share (Meissen et al.)")
        sweep = self.first[self.first["train_group_share"].notna()]
        if not len(sweep):
            sec.note = "the study has no train_group_share sweep"
            return sec
        from fairmedbench.analysis.fairness_laws import fairness_laws
        from fairmedbench.report.study_figures import sweep_panels

        keys = ["model", "dataset", "usage", "mitigation", "prompt", "attributes", "hparams", "share_group",
                "train_size", "task", "attribute"]
        sweep = sweep[sweep["attribute"] == sweep["attributes"].str.split(",").str[0]]
        for i, (key, g) in enumerate(sweep.groupby(keys, sort=True, dropna=False)):
            cfg = dict(zip(keys, key))
            rows = _seed_rows(g[(g["scope"] == "group") & g["metric"].isin(LAW_METRICS)], "train_group_share")
            if rows.empty or rows["x"].nunique() < 2:
                continue
            share_group = cfg["share_group"] if isinstance(cfg["share_group"], str) else "the swept group"
            res = fairness_laws(rows, share_group, metrics=[m for m in LAW_METRICS if m in set(rows["metric"])])
            label = (f"{cfg['model']} · {cfg['dataset']} · {cfg['usage']} · {cfg['mitigation']} · {cfg['attribute']}"
                     f" (train size {cfg['train_size']})")
            metrics = sorted(set(rows["metric"]), key=LAW_METRICS.index)
            paths = sweep_panels(res.points, res.fits, metrics, {m: metric_spec(m).header for m in metrics},
                                 x_label=f"share of {share_group} in the training set",
                                 stem=self.fig_dir / f"fairness-laws-{i}", title=label)
            sec.figures.append(self._save(paths, f"fairness laws: {label}"))
            frames = res.frames()
            sec.tables.append(_table(f"{label}: line per group (x = share of {share_group}); slope with a t "
                                     "interval, Pearson r with its Fisher-z interval, interpolation MAE of the line "
                                     "through the extreme shares", frames["fits"]))
            sec.tables.append(_table(f"{label}: per share and group, across seeds", frames["points"]))
            if len(frames["balanced"]):
                sec.tables.append(_table(f"{label}: Welch's t-test between groups at the balanced share",
                                         frames["balanced"]))
            sec.text.extend(res.notes)
            swept = [f for f in res.fits if f.group == share_group and f.metric == "auc"]
            if swept and math.isfinite(swept[0].slope):
                f = swept[0]
                self.answers.append(
                    f"Fairness law ({label}): {share_group} AUC changes by {f.slope:+.3f} per unit share "
                    f"[{f.slope_ci_low:+.3f}, {f.slope_ci_high:+.3f}], Pearson r = {_num(f.r)}, "
                    f"interpolation MAE = {f.interp_mae:.4f}.")
        if not sec.figures:
            sec.note = "the train_group_share sweep has fewer than two shares with a finished run"
        return sec

    def imbalance(self) -> _Section:
        sec = _Section("imbalance", "Class imbalance: metrics by prevalence (Mosquera et al.)")
        sweep = self.first[self.first["prevalence"].notna()]
        if not len(sweep):
            sec.note = "the study has no prevalence sweep"
            return sec
        from fairmedbench.analysis.imbalance import imbalance
        from fairmedbench.report.study_figures import sweep_panels

        keys = ["model", "dataset", "usage", "mitigation", "prompt", "attributes", "hparams", "prevalence_on",
                "train_group_share", "task", "attribute"]
        for i, (key, g) in enumerate(sweep.groupby(keys, sort=True, dropna=False)):
            cfg = dict(zip(keys, key))
            m = g[g["metric"].isin(IMBALANCE_METRICS) & g["scope"].isin(["group", "overall"])]
            rows = _seed_rows(m.assign(group=m["group"].fillna("all")), "prevalence")
            if rows.empty or rows["x"].nunique() < 2:
                continue
            res = imbalance(rows, str(cfg["prevalence_on"] or "train"))
            label = (f"{cfg['model']} · {cfg['dataset']} · {cfg['usage']} · {cfg['mitigation']} · {cfg['attribute']}"
                     f" (prevalence set on {cfg['prevalence_on']})")
            metrics = [x for x in IMBALANCE_METRICS if x in set(rows["metric"])]
            paths = sweep_panels(res.points, res.fits, metrics, {x: metric_spec(x).header for x in metrics},
                                 x_label=f"prevalence ({cfg['prevalence_on']})", stem=self.fig_dir / f"imbalance-{i}",
                                 title=label)
            sec.figures.append(self._save(paths, f"imbalance: {label}"))
            frames = res.frames()
            sec.tables.append(_table(f"{label}: line per group and metric against prevalence", frames["fits"]))
            sec.tables.append(_table(f"{label}: per prevalence and group, across seeds", frames["points"]))
            whole = [f for f in res.fits if f.group == "all" and math.isfinite(f.slope_ci_low)]
            if whole:
                flat = [metric_spec(f.metric).header for f in whole if f.slope_ci_includes_0]
                moving = [f"{metric_spec(f.metric).header} ({f.slope:+.3f} per unit prevalence)" for f in whole
                          if not f.slope_ci_includes_0]
                self.answers.append(f"Imbalance ({label}), whole population: flat across prevalences (slope "
                                    f"interval includes 0): {', '.join(flat) or 'none'}; moving: "
                                    f"{', '.join(moving) or 'none'}.")
        if not sec.figures:
            sec.note = "the prevalence sweep has fewer than two prevalences with a finished run"
        return sec


    # -- repeated splits
    def splits(self) -> _Section:
        sec = _Section("splits", "Repeated splits: the interval across split seeds beside each split's bootstrap")
        swept = self.first[self.first["n_splits"].notna() & self.first["eval_dataset"].isna()]
        if not len(swept):
            sec.note = "no configuration was run on two or more split seeds (split_seeds)"
            return sec
        import pandas as pd

        sec.text.append(
            "Each configuration ran once per split seed: the test split is fixed and train/val are re-drawn "
            "(patient level). Per split seed: its value (mean over training seeds) and the 95% bootstrap interval of "
            "its first training seed, which resamples the fixed test set (whole patients where ids are known): the "
            "test set's sampling error. Across split seeds: mean ± std and the Student-t 95% interval over the split "
            "seeds' values, which resamples nothing and carries the train/val draw (not the test set's sampling "
            "error, the same in every split).")
        for kind in self.kinds(swept):
            names = _names(kind)
            wanted = [(names["util"], "overall"), (names["gap"], "between")]
            wanted += [(names["diff"], "between")] if "diff" in names else []
            sub = swept[swept["task_kind"] == kind]
            seeds = sorted({int(x) for x in sub["split_seed"]})
            keys = [c for c in SPLIT_KEY if c not in ("metric", "scope", "group")]
            out = []
            for spec, scope in wanted:
                m = sub[(sub["metric"] == spec.name) & (sub["scope"] == scope)]
                for _, g in m.groupby(keys, dropna=False, sort=True):
                    first = g.iloc[0]
                    boot = {int(r["split_seed"]): (r["mean"], r["seed_ci_low"][0], r["seed_ci_high"][0])
                            for _, r in g.iterrows()}
                    across = (f"{_num(first['across_splits_mean'])} ± {_num(first['across_splits_std'])} "
                              f"{_ci(first['across_splits_ci_low'], first['across_splits_ci_high'])}")
                    out.append({"model": first["model"], "dataset": first["dataset"], "usage": first["usage"],
                                "mitigation": first["mitigation"], "attribute": first["attribute"],
                                "metric": spec.header,
                                **{f"split {sd}: mean [1st seed's bootstrap 95% CI]": "" if sd not in boot else
                                   f"{_num(boot[sd][0])} {_ci(*boot[sd][1:])}" for sd in seeds},
                                "across splits: mean ± std [t 95% CI]": across, "split seeds": int(first["n_splits"])})
                    if spec.name == names["gap"].name:
                        widths = [hi - lo for _, lo, hi in boot.values() if _finite_pair(lo, hi)]
                        self.answers.append(
                            f"Repeated splits ({first['model']} · {first['dataset']} · {first['usage']} · "
                            f"{first['mitigation']} · {first['attribute']}): {spec.header} "
                            f"{_num(first['across_splits_mean'])} ± {_num(first['across_splits_std'])} (mean ± std "
                            f"over {int(first['n_splits'])} split seeds, train/val re-drawn, test fixed; t 95% CI "
                            f"{_ci(first['across_splits_ci_low'], first['across_splits_ci_high'])}); one split's "
                            "test-set bootstrap interval is "
                            f"{_num(float(np.mean(widths)) if widths else math.nan)} wide on average.")
            sec.tables.append(_table(f"across split seeds ({kind}): each split's value with its test-set bootstrap "
                                     "interval, and the interval across split seeds", pd.DataFrame(out)))
        return sec

    def external(self) -> _Section:
        sec = _Section("external", "Fairness under dataset shift: external evaluation")
        shift = self.first[self.first["scope"] == "shift"]
        if not len(shift):
            sec.note = "the study evaluates on no external dataset (eval_datasets)"
            return sec
        import pandas as pd

        sec.text.append("Each run's trained model applied to the external datasets' test splits; shift = external − "
                        "internal of the headline per group, of the gap and of the signed difference. Per seed, the "
                        "interval of a shift comes from independent bootstraps of the two test sets "
                        "(the seed columns); "
                        "mean and t 95% CI across training seeds beside it.")
        out = []
        for _, r in shift.iterrows():
            per_seed = "; ".join(
                f"{s}: {_num(v)} [{_num(lo)}, {_num(hi)}]" if lo is not None and hi is not None else f"{s}: {_num(v)}"
                for s, v, lo, hi in zip(r["run_seeds"], r["seed_values"], r["seed_ci_low"], r["seed_ci_high"]))
            boot = [lo is not None and hi is not None and (lo > 0 or hi < 0)
                    for lo, hi in zip(r["seed_ci_low"], r["seed_ci_high"])]
            out.append({"model": r["model"], "dataset": r["dataset"], "external": r["eval_dataset"],
                        "usage": r["usage"], "mitigation": r["mitigation"],
                        "split seed": r["split_seed"], "attribute": r["attribute"], "shift of": r["metric"],
                        "group": r["group"] or "", "mean [t 95% CI across seeds]": _fmt(r["mean"], r["ci_low"],
                                                                                      r["ci_high"]),
                        "per seed: shift [bootstrap 95% CI]": per_seed,
                        "seeds whose CI excludes 0": f"{sum(boot)}/{len(boot)}"})
        sec.tables.append(_table("shift (external − internal) per run, external dataset and attribute",
                                 pd.DataFrame(out)))
        diffs = shift[shift["metric"].str.endswith("_diff_shift")]
        for _, r in diffs.iterrows():
            lo, hi = r["seed_ci_low"][0], r["seed_ci_high"][0]
            moved = lo is not None and hi is not None and (lo > 0 or hi < 0)
            split = "" if _missing(r["split_seed"]) else f", split seed {int(r['split_seed'])}"
            self.answers.append(
                f"Shift {r['model']} · {r['dataset']} → {r['eval_dataset']} ({r['attribute']}{split}): the signed "
                f"difference "
                f"moves by {_num(r['seed_values'][0])} (seed {r['run_seeds'][0]}, independent-bootstrap CI "
                f"[{_num(lo)}, {_num(hi)}]): {'a shift' if moved else 'no evidence of a shift'}.")
        return sec


def _num(v: float) -> str:
    return f"{v:.3f}" if v is not None and math.isfinite(v) else "undefined"


def _finite_pair(lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)


def _ci(lo: float | None, hi: float | None) -> str:
    """'[0.812, 0.904]', or '[no interval]' when either end is undefined."""
    return f"[{lo:.3f}, {hi:.3f}]" if _finite_pair(lo, hi) else "[no interval]"


def _p(v: float) -> str:
    return f"{v:.3g}" if v is not None and math.isfinite(v) else "undefined"


def _erm_match(erm: pd.DataFrame, row: pd.Series) -> pd.Series | None:
    """The ERM row of the same configuration: equal in every CONFIG field, hparams included when an ERM run has
    the same ones, else the only ERM run that differs from it in hparams alone (a mitigation's own
    hyperparameters); None when there is none or it is ambiguous."""
    keys = [c for c in CONFIG if c != "hparams"]
    same = np.ones(len(erm), dtype=bool)
    for c in keys:
        col = erm[c]
        same &= (col.isna().to_numpy() & _missing(row[c])) | (col == row[c]).to_numpy()
    cands = erm[same]
    exact = cands[cands["hparams"] == row["hparams"]]
    if len(exact) == 1:
        return exact.iloc[0]
    return cands.iloc[0] if len(cands) == 1 else None


def _missing(v: object) -> bool:
    """Whether a cell value is missing (None or NaN)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _paired(row: pd.Series, ref: pd.Series, spec: MetricSpec) -> SeedSummary | None:
    """Mean and t interval of per-seed differences row - ref over their common seeds (None with < 1)."""
    a = dict(zip(row["run_seeds"], row["seed_values"]))
    b = dict(zip(ref["run_seeds"], ref["seed_values"]))
    d = [a[s] - b[s] for s in a if s in b and math.isfinite(a[s]) and math.isfinite(b[s])]
    return seed_summary(d, bounds=spec.diff_bounds) if d else None


def _seed_rows(frame: pd.DataFrame, x: str) -> pd.DataFrame:
    """Long rows (x, seed, group, metric, value) from the tidy table's per-seed values."""
    import pandas as pd

    rows = [{"x": r[x], "seed": s, "group": r["group"], "metric": r["metric"], "value": v}
            for _, r in frame.iterrows() for s, v in zip(r["run_seeds"], r["seed_values"])]
    return pd.DataFrame(rows, columns=["x", "seed", "group", "metric", "value"])


def _status(plan: dict[str, Any]) -> dict[str, Any]:
    counts = {s: sum(c["status"] == s for c in plan["cells"]) for s in STATUSES}
    problems = [{"status": c["status"], **{k: c["cell"][k] for k in ("model", "dataset", "usage", "mitigation")},
                 "reason": c.get("reason") or c.get("error") or ""}
                for c in plan["cells"] if c["status"] in ("failed", "skipped")]
    return {"counts": counts, "problems": problems}


# ----------------------------------------------------------------------------------------------- entry point

def write_study_report(plan_path: Path, out_root: Path, dest: Path) -> StudyReport:
    """Aggregate the plan's finished runs into `dest`: study.parquet and study.csv (the tidy table), figures/
    (PNG and SVG) and study.html (one self-contained file, answers first)."""
    import pandas as pd

    from fairmedbench.report.html import TEMPLATES

    plan = read_plan(Path(plan_path))
    status = _status(plan)
    if status["counts"]["done"] == 0:
        raise InputError(f"study {plan['study']!r}: no finished run in {plan_path} "
                         f"({', '.join(f'{v} {k}' for k, v in status['counts'].items())}); run `benchmark sweep` "
                         "first")
    dest = Path(dest)
    table = tidy_table(plan, Path(out_root))
    parquet = store.write_parquet(dest / "study.parquet", table)
    flat = table.copy()
    for col in ("run_seeds", "seed_values", "seed_ci_low", "seed_ci_high", "seed_p_values"):
        flat[col] = [json.dumps(store.jsonable(v)) for v in flat[col]]
    csv = store.write_table(dest / "study.csv", flat)
    b = _Builder(table, dest / "figures")
    builders: list[Callable[[], _Section]] = [b.gaps, b.tradeoff, b.consistency, b.mitigations, b.ranks,
                                              b.fairness_laws, b.imbalance, b.splits, b.external]
    sections = [f() for f in builders]
    notes = [f"{s.title}: {s.note}" for s in sections if s.note]
    if not b.answers:
        b.answers.append("No question of this page could be answered from the finished runs; see the notes.")
    overview = pd.DataFrame([{"status": k, "cells": v} for k, v in status["counts"].items()])
    html = TEMPLATES.get_template("report/study.html.j2").render(
        title=f"study {plan['study']}", study=plan["study"], answers=b.answers, sections=sections,
        overview=_table("cells of the plan", overview),
        problems=_table("failed and skipped cells", pd.DataFrame(status["problems"])) if status["problems"] else None,
        n_runs=int(table["run_id"].nunique()), n_rows=len(table),
        provenance={"study": plan["study"], "source": plan.get("source"), "study_sha256": plan.get("study_sha256"),
                    "plan": str(plan_path), "results_root": str(out_root), "runs": sorted(table["run_id"].unique()),
                    "fairmedbench_version": __import__("fairmedbench").__version__},
        provenance_heading="provenance")
    page = store.write_text(dest / "study.html", html)
    return StudyReport(plan["study"], table, parquet, csv, page, b.figures, b.answers, notes)
