"""`benchmark compare`: mitigation methods on one harness — same splits, cached features and seeds.

Per dataset and method: mean and normal 95% CI across seeds of utility, worst-group utility, gaps, ECE
gap and ES scores; paired per-seed differences against ERM with their t interval, the paired t-test's p (the
verdict, report/verdicts.py) and Welch's t-test (kept in the JSON for reference); with more
than one dataset, Friedman ranks with the Nemenyi critical difference.

Seeds share one test set, so an interval across seeds ignores the test set's sampling error. A paired
test-set bootstrap (the same resamples for every seed and method) adds intervals that include it for the
seed-mean signed difference and worst-group AUC, and for each method's worst-group AUC minus ERM's.

Classification (usage lp or lora) compares AUC-based metrics; segmentation (usage sam-decoder or samed) compares the
DSC-based metrics of the segmentation engine; multi-class (lp or lora on a card with classes) the macro-AUC
metrics of the multi-class engine, whose paired test-set bootstrap resamples group macro AUCs (stratified by
group x class). The bootstrap resamples AUCs only; a segmentation comparison says so in its notes.

Repeated splits (`--split-seeds`): every method runs on each split seed (the test split kept, train/val re-drawn);
the paired test against ERM takes the split as its unit (each split's seed-mean difference, t interval and paired
t-test over splits), and the paired test-set bootstrap pools every split x seed run on the one test set.
Other sites (`--eval-dataset`): each external test set is compared as a dataset of its own, `<dataset>@<site>`,
from the same trained heads (paired over seeds or splits, with its own paired test-set bootstrap).
A crossed attribute (`sex*age`): every method trains and reports with its cells as groups; each table row also
holds each cell's headline value over seeds with its counts and the reason a cell has no value or interval
(`crossed_cells`), and the gap against ERM is the gap over the cells.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.benchmark.run import RunOutcome, run
from fairmedbench.engine import store
from fairmedbench.engine.results import RunResult
from fairmedbench.errors import InputError
from fairmedbench.metrics.bootstrap import N_BOOT
from fairmedbench.metrics.groups import CROSS
from fairmedbench.metrics.result import parse_margins
from fairmedbench.spec import BASELINE_MITIGATION as BASELINE
from fairmedbench.spec import RunOptions, RunSpec, option

if TYPE_CHECKING:

    from fairmedbench.tasks.base import PredictionTable, Task

BOOTSTRAP_NOTE = ("no paired test-set bootstrap: the {task} task declares no resampled headline "
                  "(Task.headline_draws); the intervals of {headline} are across seeds on one test set and leave out "
                  "its sampling error")


@dataclass
class CompareOutcome:
    """Runs per (dataset, method), per-seed values, summaries, tests against ERM and ranks."""

    attribute: str
    methods: list[str]
    datasets: list[str]  # compared: each trained dataset, then each of its sites as <dataset>@<site>
    task: str = "classification"
    metrics: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    runs: dict[tuple[str, str], RunOutcome] = field(default_factory=dict)
    values: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)
    table: list[dict[str, Any]] = field(default_factory=list)
    versus_erm: list[dict[str, Any]] = field(default_factory=list)
    test_bootstrap: dict[str, Any] = field(default_factory=dict)
    ranks: dict[str, Any] | None = None
    seconds: float = 0.0
    split_seeds: list[int] = field(default_factory=list)  # repeated splits: the unit of the paired test
    sites: dict[str, str] = field(default_factory=dict)  # <dataset>@<site> -> the dataset trained on
    hparam_search: dict[str, Any] = field(default_factory=dict)  # (dataset|method) -> the search record
    margins: dict[str, float] = field(default_factory=dict)  # equivalence margins (metrics.result.parse_margins)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (values per seed included)."""
        return store.jsonable({"attribute": self.attribute, "methods": self.methods, "datasets": self.datasets,
                "task": self.task, "metrics": list(self.metrics), "notes": self.notes, "table": self.table,
                "split_seeds": self.split_seeds, "sites": self.sites, "hparam_search": self.hparam_search,
                **({"margins": self.margins} if self.margins else {}),
                "versus_erm": self.versus_erm,
                "test_bootstrap": self.test_bootstrap, "ranks": self.ranks, "seconds": self.seconds,
                "per_seed": {"|".join(k): v for k, v in self.values.items()},
                "runs": {"|".join(k): str(r.out_dir) for k, r in self.runs.items()}})


#: `benchmark compare`'s bootstrap resamples per run (every method x dataset x seed is a run of its own)
N_BOOT_COMPARE = 500


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    """`benchmark compare`'s options; the fields without an option come from the RunSpec options it shares."""

    model: str = field(metadata=option(required=True))
    dataset: list[str] = field(metadata=option("one or more datasets, comma-separated", required=True, csv=True))
    attribute: str = field(metadata=option("the sensitive attribute methods train and report with", required=True))
    usage: str = field(default="lp", metadata=option("a usage that learns from the train split"))
    mitigations: tuple[str, ...] = field(default=(BASELINE, "resampling", "groupdro"), metadata=option(csv=True))
    seeds: str = field(default="0-4", metadata=option())
    split_file: str | None = field(default=None, metadata=option(
        "an exported split (benchmark splits export) to run every method on"))
    split_seeds: str | None = field(default=None, metadata=option(
        "repeated splits, e.g. 0-2: every method runs on each split seed (the test split kept, train/val re-drawn); "
        "the paired test against ERM takes the split as its unit", metavar="SEEDS"))
    eval_datasets: tuple[str, ...] = field(default=(), metadata=option(
        "other sites: apply every method's trained heads to these datasets' test splits (as benchmark run "
        "--eval-dataset) and compare each as <dataset>@<site>", flag="--eval-dataset", action="append", default=None,
        metavar="NAME[:KEY=VALUE...]"))
    hparam_search: int = field(default=0, metadata=option(
        "search N hyperparameter candidates per method (its paper defaults plus N-1 seeded draws from its declared "
        "space) and keep the best on the validation split (worst-group utility); test data is never read", type=int,
        metavar="N"))
    select: str | None = field(default=None, metadata=option(
        "checkpoint selection on validation (default: the task's first rule: val_loss for classification, val_dsc "
        "for segmentation)"))
    margin: str | None = field(default=None, metadata=option(
        "equivalence margin: VALUE, or metric=VALUE pairs by the compared metric (auc=0.02,auc_gap=0.03): a method "
        "within chance whose 90%% paired t interval against ERM (and the test-set bootstrap interval where it ran) "
        "lies inside ±VALUE is equivalent to ERM; every run also applies it to its two-group differences",
        metavar="M"))
    report: bool = field(default=False, metadata=option("also write a utility-fairness Pareto page"))
    evidence: str | None = field(default=None, metadata=option(
        "write an evidence pack of the comparison (its JSON and page, every run's results and predictions, command, "
        "environment, summary.md/.html with the Art. 10/13/14/15/72 and FDA mapping, MANIFEST.sha256); DIR must be "
        "new, empty, or an earlier pack (replaced with --force)", metavar="DIR"))
    sign_key: str | None = field(default=None, metadata=option(
        "with --evidence: sign MANIFEST.sha256 into MANIFEST.sig with hmac:FILE or ed25519:FILE; default: "
        "$FMB_SIGN_KEY", metavar="KEY"))
    json: bool = field(default=False, metadata=option())
    weights: str | None = None
    n_boot: int = N_BOOT_COMPARE
    precision: str = RunSpec.precision
    skip_bad: bool = False
    dataset_options: dict[str, Any] = field(default_factory=dict)
    hparams: dict[str, Any] = field(default_factory=dict)


def compare_with(o: CompareOptions, opts: RunOptions) -> CompareOutcome:
    """compare() with `benchmark compare`'s options."""
    from fairmedbench.analysis.shift import split_eval_list
    from fairmedbench.benchmark.arguments import parse_seeds

    split_seeds = parse_seeds(o.split_seeds, "--split-seeds") if o.split_seeds else ()
    sites = tuple(t for v in o.eval_datasets or () for t in split_eval_list(v))
    return compare(o.model, o.dataset, o.attribute, o.usage, list(o.mitigations), parse_seeds(o.seeds), opts,
                   select=o.select, weights=o.weights, n_boot=o.n_boot, precision=o.precision, skip_bad=o.skip_bad,
                   dataset_options=o.dataset_options, hparams=o.hparams, split_file=o.split_file,
                   split_seeds=split_seeds, eval_datasets=sites, hparam_search=o.hparam_search, margin=o.margin)


def _check_seeds(seeds: tuple[int, ...], split_seeds: tuple[int, ...], split_file: str | None) -> None:
    """Enough seeds (and split seeds) for the across-seed and across-split intervals; one way to split."""
    if len(seeds) < 2:
        raise InputError("compare needs at least two seeds for across-seed intervals, e.g. --seeds 0-4")
    if len(split_seeds) == 1:
        raise InputError("--split-seeds takes the split as the unit of the paired test: give at least two, e.g. 0-2")
    if split_seeds and split_file:
        raise InputError("--split-seeds re-draws train/val and --split-file imports one split: give one of them")


def _checked_specs(datasets: list[str], methods: list[str], select: str | None, hparams: dict[str, Any] | None,
                   dataset_options: dict[str, Any] | None, hparam_search: int, spec_fields: dict[str, Any]
                   ) -> tuple[dict[tuple[str, str], RunSpec], Task]:
    """Every (dataset, method) run's spec (`spec_fields` and the method) with its checkpoint rule, each checked
    before the first run starts, and the one task they share."""
    from fairmedbench.benchmark.resolve import check_spec
    from fairmedbench.tasks.base import get_task

    specs = {}
    task_of: dict[str, str] = {}
    for ds in datasets:
        for m in methods:
            spec = RunSpec(dataset=ds, mitigation=m, hparams=dict(hparams or {}),
                           dataset_options=dict(dataset_options or {}), **spec_fields)
            checked = check_spec(spec)
            if not checked.usage.learns:
                raise InputError(f"compare trains: usage {spec_fields['usage']!r} learns nothing from the train split")
            rule = select or checked.task.select_rules[0]
            specs[(ds, m)] = dataclasses.replace(spec, hparams={**spec.hparams, "select": rule})
            check_spec(specs[(ds, m)])
            task_of[ds] = checked.task.name
    if len(set(task_of.values())) > 1:
        raise InputError("compare ranks methods on one task across datasets, but these datasets are of different "
                         f"tasks: {', '.join(f'{d} ({t})' for d, t in task_of.items())}; compare each task's datasets "
                         "in a call of its own")
    if hparam_search:
        from fairmedbench.benchmark.search import check_searchable

        for m in methods:
            check_searchable(m)  # a method without a declared space is refused before any run
    return specs, get_task(task_of[datasets[0]])


def _compare_dataset(out: CompareOutcome, ds: str, specs: dict[tuple[str, str], RunSpec], opts: RunOptions,
                     task: Task, n_boot: int, hparam_search: int, with_sites: bool) -> None:
    """Run every method on `ds` (each method's hyperparameters searched first with `hparam_search`), then summarise
    the dataset and, `with_sites`, each of its external test sets as `<ds>@<site>`."""
    for m in out.methods:
        if hparam_search:
            from fairmedbench.benchmark.search import search

            found = search(specs[(ds, m)], opts, hparam_search, out.attribute)
            out.hparam_search[f"{ds}|{m}"] = found.record
            specs[(ds, m)] = found.spec
        out.runs[(ds, m)] = run(specs[(ds, m)], replace(opts))
    names = [ds, *(f"{ds}@{label}" for label in (_site_labels(out.runs[(ds, BASELINE)]) if with_sites else []))]
    out.sites.update({name: ds for name in names[1:]})
    for k, name in enumerate(names):
        cells = {m: [[r if k == 0 else _site_view(r, k - 1) for r in split] for split in _splits(out.runs[(ds, m)])]
                 for m in out.methods}
        _summarise(out, name, cells, task, out.attribute, n_boot)
    out.datasets[out.datasets.index(ds) + 1:out.datasets.index(ds) + 1] = names[1:]


def _conclude(out: CompareOutcome, task: Task, split_seeds: tuple[int, ...], datasets: list[str]) -> None:
    """The comparison's notes, the ranks across datasets (more than one) and one verdict per (method, metric)."""
    from fairmedbench.report.verdicts import compare_verdicts

    if not task.headline_draws:
        out.notes.append(BOOTSTRAP_NOTE.format(task=task.name, headline=task.headline))
    if split_seeds:
        out.notes.append(f"repeated splits {', '.join(map(str, split_seeds))}: differences from ERM are paired per "
                         "split (each split's mean over its training seeds; t interval and t-test over splits); the "
                         "test-set bootstrap pools every split x seed run on the one test set")
    if len(datasets) > 1:
        out.ranks = _ranks(out, task.rank_metric, list(datasets))
    # one verdict per (method, metric), from the one rule (report/verdicts.py), stored with its evidence
    for row, judged in compare_verdicts({"table": out.table, "versus_erm": out.versus_erm,
                                         "test_bootstrap": out.test_bootstrap}):
        row["verdict"] = judged.to_dict()


def compare(model: str, datasets: list[str], attribute: str, usage: str, methods: list[str], seeds: tuple[int, ...],
            opts: RunOptions, *, select: str | None = None, weights: str | None = None, n_boot: int = N_BOOT,
            dataset_options: dict[str, Any] | None = None, hparams: dict[str, Any] | None = None,
            precision: str = RunSpec.precision, skip_bad: bool = False, split_file: str | None = None,
            split_seeds: tuple[int, ...] = (), eval_datasets: tuple[str, ...] = (),
            hparam_search: int = 0, sampling: dict[str, Any] | None = None,
            margin: str | None = None) -> CompareOutcome:
    """Run every method on every dataset with the same seeds (and split seeds); summarise and test against ERM,
    on each dataset and each of its `eval_datasets` sites.

    `select` is the checkpoint rule (default: the task's first rule, val_loss or val_dsc). Every run is checked
    before the first one starts, so a mistyped name or hyperparameter fails at once. `hparam_search` N > 0 picks
    each method's hyperparameters on validation first (benchmark/search.py). `sampling`: RunSpec's sampling fields
    (train_group_share, share_group, train_size, ...) for every run, e.g. a minority share kept on re-drawn splits.
    `margin` (parse_margins): the equivalence margin of each difference from ERM (by metric name, else the single
    value) and of every run's two-group differences.
    """
    _check_seeds(seeds, split_seeds, split_file)
    methods = [BASELINE, *[m for m in methods if m != BASELINE]]
    spec_fields: dict[str, Any] = dict(
        model=model, attributes=(attribute,), usage=usage, seeds=seeds, weights=weights, n_boot=n_boot,
        precision=precision, skip_bad=skip_bad, split_file=split_file, split_seeds=tuple(split_seeds),
        eval_datasets=tuple(eval_datasets), margin=margin, **(sampling or {}))
    specs, task = _checked_specs(datasets, methods, select, hparams, dataset_options, hparam_search, spec_fields)
    t0 = time.perf_counter()
    out = CompareOutcome(attribute, methods, list(datasets), task.name, task.summary_metrics,
                         split_seeds=list(split_seeds), margins=parse_margins(margin))
    for ds in datasets:
        _compare_dataset(out, ds, specs, opts, task, n_boot, hparam_search, bool(eval_datasets))
    _conclude(out, task, split_seeds, datasets)
    out.seconds = time.perf_counter() - t0
    return out


def _splits(r: RunOutcome) -> list[list[RunResult]]:
    """A run's results per split (repeated splits: one list per split seed; else one list)."""
    return [leaf.seeds for leaf in r.split_runs] if r.split_runs else [r.seeds]


def _site_labels(r: RunOutcome) -> list[str]:
    """The label of each external test set of a run (its --eval-dataset entries, in order)."""
    return [str(e["label"]) for e in _splits(r)[0][0].doc.get("external", [])]


def _site_view(res: RunResult, k: int) -> RunResult:
    """One seed's k-th external test set read as a result of its own: its metrics and its predictions file."""
    ext = res.doc["external"][k]
    doc = {**res.doc, "result": ext["result"], "predictions": {**res.doc["predictions"], "file": ext["predictions"]}}
    return RunResult(doc, res.folder)


def _summarise(out: CompareOutcome, name: str, cells: dict[str, list[list[RunResult]]], task: Task,
               attribute: str, n_boot: int) -> None:
    """Per method: values per seed, the summary over units (seeds, or splits' seed means), the paired tests against
    ERM over those units, and the paired test-set bootstrap of every run (pooled over splits)."""
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.metrics.stats import seed_summary, welch_test

    n_splits = len(cells[BASELINE])
    unit = "split" if n_splits > 1 else "seed"
    units: dict[tuple[str, str], np.ndarray] = {}
    for m, splits in cells.items():
        for metric in task.summary_metrics:
            per = [[r.value(metric, attribute) for r in split] for split in splits]
            out.values[(name, m, metric)] = [v for split in per for v in split]
            units[(m, metric)] = np.array([np.mean(p) for p in per]) if n_splits > 1 else np.array(per[0])
        s = {metric: seed_summary(units[(m, metric)], bounds=metric_spec(metric).bounds)
             if np.isfinite(units[(m, metric)]).all() else None for metric in task.summary_metrics}
        out.table.append({"dataset": name, "method": m, "n_seeds": len(splits[0]), "n_splits": n_splits,
                          "unit": unit, "n_units": len(units[(m, task.summary_metrics[0])]), **{
                              k: None if v is None else {"mean": v.mean, "ci_low": v.ci_low, "ci_high": v.ci_high}
                              for k, v in s.items()},
                          **({"cells": crossed_cells(splits, attribute, task.headline)} if CROSS in attribute
                             else {})})
    for m in out.methods[1:]:
        for metric in task.versus_erm:
            a, b = units[(m, metric)], units[(BASELINE, metric)]
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                continue
            paired = seed_summary(a - b, bounds=metric_spec(metric).diff_bounds)
            w = welch_test(a, b)
            margin = out.margins.get(metric, out.margins.get("*"))
            out.versus_erm.append({"dataset": name, "method": m, "metric": metric, "unit": unit, "n_units": len(a),
                                   "mean_diff": paired.mean, "ci_low": paired.ci_low, "ci_high": paired.ci_high,
                                   "paired_p": _paired_p(a - b), "welch_t": w.t,
                                   "welch_p": w.p_value, "welch_note": w.note, **paired_power(a - b),
                                   **({"margin": margin} if margin is not None else {})})
    if task.headline_draws:  # the task's headline on shared test-set resamples
        flat = {m: [r for split in splits for r in split] for m, splits in cells.items()}
        out.test_bootstrap[name] = _test_bootstrap(out, flat, name, attribute, n_boot)


def crossed_cells(splits: list[list[RunResult]], attribute: str, metric: str) -> dict[str, dict[str, Any]]:
    """Each cell of a crossed attribute (sex*age) for one method: its test counts, the mean [t 95% CI] of `metric`
    over the units (seeds, or each split's seed mean), and why a cell has no value or no interval in a run (no
    positive or no negative patient; below the minimum group size: a point estimate only)."""
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.metrics.stats import seed_summary

    reports = [[next(r for r in res.fairness().reports if r.attribute == attribute) for res in split]
               for split in splits]
    first = reports[0][0]
    out: dict[str, dict[str, Any]] = {}
    for g in first.groups:
        values = [[rep.value(metric, g) for rep in split] for split in reports]
        per = np.array([np.mean(v) for v in values] if len(values) > 1 else values[0])
        c = first.counts.get(g, {})
        why = first.skipped.get(g) or ("below the minimum group size: a point estimate in each run, no interval"
                                       if g in first.small_groups else None)
        cell: dict[str, Any] = {"n": c.get("n"), "n_pos": c.get("n_pos"), "n_neg": c.get("n_neg"), "reason": why,
                                "mean": None, "ci_low": None, "ci_high": None}
        if np.isfinite(per).all():
            ss = seed_summary(per, bounds=metric_spec(metric).bounds)
            cell.update(mean=ss.mean, ci_low=ss.ci_low, ci_high=ss.ci_high)
        out[g] = cell
    return out


def paired_power(diffs: np.ndarray) -> dict[str, Any]:
    """What the paired t-test over units can say beside its p: `tost_interval`, the 90% t interval of the mean
    difference (two one-sided tests at 5% call it equivalent within ±m when it lies inside (-m, m)), and `mde`, the
    smallest true mean difference it detects with 80% power at two-sided 5%, (t_{0.975,n-1} + t_{0.8,n-1}) · sd/√n
    (the normal approximation of the noncentral t); {} when the differences have no spread."""
    from scipy.stats import t

    from fairmedbench.metrics.result import MDE_ALPHA, MDE_POWER

    n = len(diffs)
    if n < 2 or not np.isfinite(diffs).all() or np.ptp(diffs) == 0:
        return {}
    se = float(np.std(diffs, ddof=1)) / np.sqrt(n)
    mean, half = float(np.mean(diffs)), float(t.ppf(1 - MDE_ALPHA, n - 1)) * se
    mde = (float(t.ppf(1 - MDE_ALPHA / 2, n - 1)) + float(t.ppf(MDE_POWER, n - 1))) * se
    return {"tost_interval": [mean - half, mean + half], "mde": mde}


def _paired_p(diffs: np.ndarray) -> float | None:
    """Two-sided p of the paired t-test over seeds (scipy ttest_1samp of method − ERM against 0): the test of the
    paired t interval shown beside it, so the two never disagree; None when every difference is equal."""
    from scipy.stats import ttest_1samp

    if len(diffs) < 2 or np.ptp(diffs) == 0:
        return None
    return float(ttest_1samp(diffs, 0.0).pvalue)


def save_compare(outcome: CompareOutcome, model: str, datasets: list[str], out_root: str,
                 report: bool = False) -> tuple[dict[str, Any], Path, Path | None]:
    """Write the comparison JSON (and with `report` its HTML page) under <out_root>/compare/."""
    doc = outcome.to_dict()
    path = Path(out_root) / "compare" / f"{model}-{'+'.join(datasets)}-{store.run_id(doc['per_seed'])}.json"
    store.write_json(path, doc)
    page = None
    if report:
        from fairmedbench.report.html import write_compare_report

        page = write_compare_report(path.with_suffix(".html"), doc)
    return doc, path, page


def _test_tables(task: Task, results: list[RunResult]) -> list[PredictionTable]:
    """Each seed's predictions as the task reads them (Task.table: its left-out rows out), test rows sorted by
    sample id."""
    tables = []
    for res in results:
        block = res.doc["predictions"]
        df = res.predictions().sort_values("sample_id", kind="stable")
        tables.append(task.table({c: df[c].to_numpy() for c in df.columns}, block["tasks"], block["attributes"],
                                 block.get("classes", ()), where=f"{block['file']}: "))
    return tables


def _interval(samples: np.ndarray, point: float) -> dict[str, Any]:
    from fairmedbench.metrics.bootstrap import percentile_ci

    lo, hi = percentile_ci(samples[:, None])
    return {"value": point, "ci_low": float(lo[0]), "ci_high": float(hi[0]),
            "excludes_0": bool(lo[0] > 0 or hi[0] < 0)}


def _test_bootstrap(out: CompareOutcome, runs: dict[str, list[RunResult]], ds: str, attribute: str,
                    n_boot: int) -> dict[str, Any]:
    """Paired test-set bootstrap of the run-mean signed difference, gap and worst-group value of the task's headline
    (as the task resamples it: Task.resampled_headline; binary AUC of the first task, multi-class macro AUC, mean
    DSC) per method (`runs`: its seeds, or every split x seed),
    and of each method's worst-group value and gap minus ERM's (rows without a group value are left out). Keys:
    <worst-group metric>, <headline>_diff, <worst-group metric>_vs_erm, <headline>_gap_vs_erm."""
    from fairmedbench.tasks.base import PATIENT_COLUMN, get_task

    if n_boot < 1:
        return {}
    task = get_task(out.task)
    worst, diff = task.rank_metric, f"{task.headline}_diff"
    frames = {m: _test_tables(task, runs[m]) for m in out.methods}
    ref = frames[BASELINE][0]
    ids, (y, _) = ref.test["sample_id"], task.headline_inputs(ref)
    for m, fs in frames.items():
        for f in fs:
            other = task.headline_inputs(f)[0]
            if not np.array_equal(f.test["sample_id"], ids) or (y is not None and other is not None
                                                                and not np.array_equal(other, y)):
                raise InputError(f"compare: method {m!r} was tested on other samples than ERM; rerun with --force")
    g = np.asarray(ref.test[f"attr:{attribute}"], dtype=object)
    keep = np.array([v is not None and v == v for v in g], dtype=bool)  # rows with a group (None, NaN: none)
    # the patient of each row (written by every runner): the paired bootstrap draws whole patients
    patient = np.asarray(ref.test.get(PATIENT_COLUMN, ids), dtype=object)[keep]
    scores = np.stack([task.headline_inputs(f)[1][keep] for m in out.methods for f in frames[m]])  # (S, n[, K])
    res = task.resampled_headline(None if y is None else y[keep], scores, g[keep].astype(str), n_boot, 0,
                                  f"{ds}|{attribute}", patient)
    n_seeds = len(frames[BASELINE])
    shape = (len(out.methods), n_seeds, len(res.groups))
    point = res.point.reshape(shape)
    boot = res.resampled.reshape((-1, *shape))
    with warnings.catch_warnings():  # a resample where every group's AUC is undefined stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        worst_p, worst_b = np.nanmin(point, axis=-1).mean(axis=-1), np.nanmin(boot, axis=-1).mean(axis=-1)
        gap_p = (np.nanmax(point, axis=-1) - np.nanmin(point, axis=-1)).mean(axis=-1)
        gap_b = (np.nanmax(boot, axis=-1) - np.nanmin(boot, axis=-1)).mean(axis=-1)
    gap = f"{task.headline}_gap"
    doc: dict[str, Any] = {"groups": res.groups, "n_boot": n_boot, "task": "first", "metric": task.headline,
                           "unit": "patient", "n_clusters": len(set(patient)),
                           "n_runs": n_seeds, "keys": [worst, diff, f"{worst}_vs_erm", f"{gap}_vs_erm"],
                           "methods": {}}
    for i, m in enumerate(out.methods):
        entry = {worst: _interval(worst_b[:, i], float(worst_p[i]))}
        if len(res.groups) == 2:
            diff_p = float((point[i, :, 1] - point[i, :, 0]).mean())
            entry[diff] = _interval((boot[:, i, :, 1] - boot[:, i, :, 0]).mean(axis=-1), diff_p)
        if m != BASELINE:
            entry[f"{worst}_vs_erm"] = _interval(worst_b[:, i] - worst_b[:, 0], float(worst_p[i] - worst_p[0]))
            entry[f"{gap}_vs_erm"] = _interval(gap_b[:, i] - gap_b[:, 0], float(gap_p[i] - gap_p[0]))
        doc["methods"][m] = entry
    return doc


def _ranks(out: CompareOutcome, metric: str, datasets: list[str]) -> dict[str, Any]:
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.metrics.stats import friedman_nemenyi

    scores = np.array([[np.nanmean(out.values[(d, m, metric)]) for m in out.methods] for d in datasets])
    higher = metric_spec(metric).higher_is_better
    assert higher is not None, f"the rank metric {metric} has a direction"
    res = friedman_nemenyi(scores, out.methods, higher_is_better=higher)
    return store.jsonable({"metric": metric, **dataclasses.asdict(res)})
