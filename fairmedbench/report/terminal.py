"""Terminal tables of a fairness result (rich): per-group metrics and between-group gaps with CIs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.metrics.result import GAP, OVERALL, AttributeReport, FairnessResult
from fairmedbench.metrics.specs import headline_metric, summary_metrics, table_metrics

if TYPE_CHECKING:
    from rich.console import Console

    from fairmedbench.benchmark.controls import ControlsOutcome
    from fairmedbench.benchmark.evaluate import BatchOutcome, EvaluateOutcome
    from fairmedbench.benchmark.run import RunOutcome
    from fairmedbench.report.study import StudyReport


def _columns(task: str, between_groups: bool) -> list[tuple[str, str]]:
    """(metric, header) of the table columns the MetricSpec registry marks for this task."""
    return [(s.name, s.header) for s in table_metrics(task, between_groups)]


def fmt(v: float, lo: float = math.nan, hi: float = math.nan) -> str:
    """'0.812 [0.80, 0.83]', or '—' for an undefined value."""
    if v is None or not math.isfinite(v):
        return "—"
    if lo is None or not math.isfinite(lo):
        return f"{v:.3f}"
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def _cell(r: AttributeReport, metric: str, group: str, ci: bool = True) -> str:
    v = r.values.get(metric, {}).get(group, (math.nan, math.nan, math.nan))
    return fmt(*v) if ci else fmt(v[0])


def render(result: FairnessResult, console: Console) -> None:
    """Print per-group tables (one per attribute) and a gap table; notes on skipped and small groups."""
    from rich.table import Table

    if not console.is_terminal:
        console.width = max(console.width, 150)

    task = result.meta.get("kind", "classification")
    # the second count column: empty ground truths where the counts carry them (segmentation), else positives
    empty_gt = bool(result.reports) and "n_empty_gt" in result.reports[0].counts.get(OVERALL, {})
    # multi-class counts carry n per class instead: no second column
    second_key = "n_empty_gt" if empty_gt else "n_pos"
    has_second = bool(result.reports) and second_key in result.reports[0].counts.get(OVERALL, {})
    group_cols, gap_cols = _columns(task, False), _columns(task, True)
    for attribute in result.meta["attributes"]:
        reports = [r for r in result.reports if r.attribute == attribute]
        cols = [(m, h) for m, h in group_cols if any(m in r.values for r in reports)]
        first = cols[0][1] if cols else ""
        table = Table(title=f"{attribute}: per group ({first} with 95% CI)", title_justify="left")
        second_head = ["empty GT" if empty_gt else "n+"] if has_second else []
        for h in ["task", "group", "n", *second_head] + [h for _, h in cols]:
            table.add_column(h, justify="left" if h in ("task", "group") else "right")
        for r in reports:
            for g in [OVERALL, *r.groups]:
                c = r.counts.get(g, {})
                second = [str(c.get(second_key, 0))] if has_second else []
                label = "all" if g == OVERALL else g + (" (small)" if g in r.small_groups else "")
                table.add_row(r.task, label, str(c.get("n", 0)), *second,
                              *[_cell(r, m, g, ci=i == 0) for i, (m, _) in enumerate(cols)],
                              end_section=g == r.groups[-1])
        console.print(table)
    gaps = Table(title="between groups (95% CI)", title_justify="left")
    cols = [(m, h) for m, h in gap_cols if any(m in r.values for r in result.reports)]
    for h in ["task", "attribute"] + [h for _, h in cols] + ["worst group"]:
        gaps.add_column(h, justify="left" if h in ("task", "attribute", "worst group") else "right")
    for r in result.reports:
        worst = r.worst_group.get(headline_metric(task), "—")
        gaps.add_row(r.task, r.attribute, *[_cell(r, m, GAP) for m, _ in cols], worst)
    console.print(gaps)
    render_tests(result, console)
    render_answer(result, console)
    for r in result.reports:
        for warning in r.warnings:
            console.print(f"[yellow]warning[/] {r.task} / {warning}")
        for g, why in r.skipped.items():
            console.print(f"[yellow]skipped[/] {r.task} / {r.attribute} = {g}: {why}")
        for m, why in r.gap_notes.items():
            console.print(f"[yellow]no gap[/] {r.task} / {r.attribute} {m}: {why}")
        if r.n_missing:
            console.print(f"[yellow]missing[/] {r.attribute}: {r.n_missing} sample(s) without a value, left out")
    small = sorted({g for r in result.reports for g in r.small_groups})
    if small:
        console.print(f"[yellow]small groups[/] (< {result.meta['min_group_size']} samples; their own metrics are "
                      f"point estimates, no CI; gaps between groups keep theirs): {', '.join(small)}")
    shown = {m for m, _ in group_cols + gap_cols}
    degenerate = sum(1 for r in result.reports for m, per in r.ci_notes.items() for g in per
                     if m in shown and g not in r.small_groups)
    if degenerate:
        console.print(f"[yellow]no CI[/] for {degenerate} value(s) whose bootstrap distribution is degenerate "
                      "(every resample equal; see ci_notes in the result)")


def render_answer(result: FairnessResult, console: Console) -> None:
    """The result's answer in the page's and summary.md's words (report/verdicts.py `result_answer`): the headline,
    one sentence per (task, attribute) when there are several, and why intervals and tests disagree."""
    from rich.markup import escape

    from fairmedbench.report.verdicts import result_answer

    answer = result_answer([r.to_dict() for r in result.reports])
    # soft_wrap: each sentence one line, word for word the page's and summary.md's (the terminal wraps it)
    console.print(f"[bold]answer[/] {escape(answer.headline)}", soft_wrap=True)
    for line in answer.sentences if len(answer.pairs) > 1 else []:
        console.print(f"  {escape(line)}", soft_wrap=True)
    for line in answer.why:
        console.print(f"[cyan]why[/] {escape(line)}", soft_wrap=True)


def fmt_p(p: float | None) -> str:
    """'0.003', '<0.001' style p-value, '—' when untested or undefined."""
    if p is None or not math.isfinite(p):
        return "—"
    return f"{p:.3f}" if p >= 0.0005 else f"{p:.0e}"


def render_tests(result: FairnessResult, console: Console) -> None:
    """The permutation test of each reported gap / difference (raw p, and adjusted over the family) and the
    resampling unit of every interval, per (task, attribute)."""
    from rich.table import Table

    from fairmedbench.metrics.result import in_family
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.report.verdicts import ALPHA, resampling_sentence

    cols = [m for m in dict.fromkeys(m for r in result.reports for m in r.tests) if in_family(m)]
    if not cols:
        return
    tests = result.meta.get("tests") or {}
    correction = tests.get('correction', '').split(' (')[0]
    table = Table(title=f"permutation test: raw p (adjusted: {correction}); * = p_adj < {ALPHA}, larger than chance "
                        "(the answer's rule)", title_justify="left")
    for h in ["task", "attribute", *[metric_spec(m).header for m in cols]]:
        table.add_column(h, justify="left" if h in ("task", "attribute") else "right")
    for r in result.reports:
        cells = []
        for m in cols:
            t = r.tests.get(m)
            adj = None if t is None else t.get("p_adjusted")
            star = " *" if adj is not None and math.isfinite(adj) and adj < ALPHA else ""
            cells.append("—" if t is None else f"{fmt_p(t.get('p_value'))} ({fmt_p(adj)}){star}")
        table.add_row(r.task, r.attribute, *cells)
    console.print(table)
    for attribute in dict.fromkeys(r.attribute for r in result.reports):
        r = next(r for r in result.reports if r.attribute == attribute)
        console.print(f"{attribute}: {resampling_sentence(r.to_dict())}")


def render_resampled(original: FairnessResult, resampled: FairnessResult, sample: dict, console: Console) -> None:
    """Original and resampled test sets side by side, per group: n and each RESAMPLE_METRICS value."""
    from rich.table import Table

    from fairmedbench.analysis.resample import RESAMPLE_METRICS
    from fairmedbench.metrics.specs import metric_spec

    for r in original.reports:
        rr = resampled.report(r.task, r.attribute)
        table = Table(title=f"{r.task} / {r.attribute}: original | resampled test set ({sample['params']['spec']}, "
                            f"seed {sample['seed']}; CIs in the JSON and tidy table)", title_justify="left")
        table.add_column("group")
        table.add_column("n", justify="right")
        for m in RESAMPLE_METRICS:
            table.add_column(metric_spec(m).header, justify="right")
        for g in [OVERALL, *r.groups, GAP]:
            label = {OVERALL: "all", GAP: "gap"}.get(g, g)
            metrics = [m if g != GAP else f"{m}_gap" for m in RESAMPLE_METRICS]
            n = [str(x.counts.get(OVERALL if g == GAP else g, {}).get("n", 0)) for x in (r, rr)]
            pairs = [f"{_cell(r, m, g, ci=False)} | {_cell(rr, m, g, ci=False)}" for m in metrics]
            table.add_row(label, " | ".join(n), *pairs, end_section=g == r.groups[-1])
        console.print(table)
    console.print(f"resampled test set: {len(sample['ids'])} samples, sha256 {sample['fingerprint'][:12]}…, "
                  "ids in the result JSON (test_resample.ids)")


def render_run(outcome: Any, console: Console) -> None:
    """A run's tables: the first seed's per-group and gap tables, then the across-seed summary."""
    from rich.table import Table

    if not console.is_terminal:
        console.width = max(console.width, 150)
    spec = outcome.config
    console.print(f"[bold]{spec.model}[/] on [bold]{spec.dataset}[/] · usage {spec.usage} · mitigation "
                  f"{spec.mitigation} · seeds {','.join(map(str, spec.seeds))} · precision {spec.precision} · "
                  f"run {spec.run_id}" + (" · [cyan]reused existing result[/]" if outcome.reused else ""))
    first = outcome.seeds[0]
    console.print(f"seed {first.seed}:")
    render(first.fairness(), console)
    seeds_summary = outcome.split_runs[0].summary if getattr(outcome, "split_runs", None) else outcome.summary
    if len(outcome.seed_docs) > 1:
        table = Table(title="across seeds: mean ± std \\[t 95% CI]", title_justify="left")
        table.add_column("task / attribute")
        names = sorted({m for row in seeds_summary["across_seeds"].values() for m in row})
        for m in names:
            table.add_column(m, justify="right")
        for key, row in seeds_summary["across_seeds"].items():
            cells = []
            for m in names:
                c = row.get(m)
                cells.append("—" if not c else f"{c['mean']:.3f} ± {c['std']:.3f} [{c['ci_low']:.3f}, "
                             f"{c['ci_high']:.3f}]")
            table.add_row(key, *cells)
        console.print(table)
    if first.doc.get("external"):
        render_external(first.doc, outcome.out_dir, console)
        if len(outcome.seed_docs) > 1 and seeds_summary.get("external"):
            render_external_seeds(seeds_summary["external"], console)
    if "across_splits" in outcome.summary:
        console.print(f"(the tables above are split seed {outcome.summary['split_seeds'][0]}'s)")
        render_split_seeds(outcome.summary, console)
    if first.inputs["model"].get("seen_in_pretraining"):
        console.print("[yellow]flag[/] the model's pretraining data includes this dataset: not zero-shot")
    console.print(f"results: {outcome.out_dir}")
    if getattr(outcome, "summary_dir", None) is not None:
        console.print(f"across split seeds: {outcome.summary_dir / 'summary.json'}")


def render_controls(outcome: ControlsOutcome, console: Console) -> None:
    """Per run a one-line headline, then the table of control checks and an overall verdict."""
    from rich.table import Table

    if not console.is_terminal:
        console.width = max(console.width, 150)
    from fairmedbench.tasks.base import get_task

    for r in outcome.runs:
        m = get_task(r.config.task).headline
        for rep in r.seeds[0].fairness().reports:
            per = "  ".join(f"{g} {fmt(*rep.values[m][g])}" for g in rep.groups)
            console.print(f"{r.config.dataset:<16} {r.config.usage:<11} {rep.attribute}: {m.upper()} {per}"
                          + ("  (reused)" if r.reused else ""))
    table = Table(title="controls: signed difference (second group − first) with 95% CI; the verdict reads its "
                        "permutation test (p < 0.05: larger than chance)", title_justify="left")
    for h in ("dataset", "usage", "attribute", "difference", "value [95% CI]", "p", "detectable", "declared",
              "verdict"):
        table.add_column(h)
    for c in outcome.checks:
        table.add_row(c.dataset, c.usage, c.attribute, f"{c.metric}: {c.order[1]} − {c.order[0]}", fmt(*_triple(
            {"value": c.diff[0], "ci_low": c.diff[1], "ci_high": c.diff[2]})), fmt_p(c.p_value),
            "—" if c.mde is None else f"≥ {c.mde:.3f}", c.expected,
            "[green]as declared[/]" if c.passed else "[red]NOT as declared[/]")
    console.print(table)
    verdict = ("[green]all controls behave as declared[/]: the injected disparity is found and the control "
               "shows none" if outcome.passed else "[red]some controls do not behave as declared[/]")
    console.print(f"{verdict} ({outcome.seconds:.0f} s)")
    if any(c.expected == "no disparity" and c.passed and c.mde is not None for c in outcome.checks):
        console.print("'detectable': the smallest difference each test finds with 80% power; a control within "
                      "chance is evidence against a disparity of that size, not proof that none exists")


def _triple(cell: dict[str, Any]) -> tuple[float, float, float]:
    value, low, high = (math.nan if cell.get(k) is None else cell[k] for k in ("value", "ci_low", "ci_high"))
    return value, low, high


def render_compare(doc: dict, console: Console) -> None:
    """Methods x metrics (mean [95% CI] across seeds), then differences against ERM, then ranks."""
    from rich.table import Table

    if not console.is_terminal:
        console.width = max(console.width, 170)
    metrics = doc.get("metrics") or summary_metrics(doc.get("task", "classification"))
    over = "splits (each split's seed mean)" if doc.get("split_seeds") else "seeds"
    table = Table(title=f"by {doc['attribute']}: mean \\[t 95% CI] over {over}", title_justify="left")
    for h in ("dataset", "method", *metrics):
        table.add_column(h, justify="left" if h in ("dataset", "method") else "right")
    for row in doc["table"]:
        cells = []
        for m in metrics:
            c = row.get(m)
            cells.append("—" if not c else fmt(c["mean"], c["ci_low"], c["ci_high"]))
        table.add_row(row["dataset"], row["method"], *cells)
    console.print(table)
    render_compare_cells(doc, over, console)
    from fairmedbench.report.verdicts import compare_headline, compare_verdicts, fmt_p

    unit = "split" if doc.get("split_seeds") else "seed"
    vs = Table(title=f"against ERM: paired difference over {unit}s \\[t 95% CI]; verdict: paired t-test over {unit}s, "
                     "and the paired test-set bootstrap where it ran (report/verdicts.py)", title_justify="left")
    for h in ("dataset", "method", "metric", "difference", "paired p", "verdict"):
        vs.add_column(h)
    for r, v in compare_verdicts(doc):
        p = "—" if r.get("paired_p") is None else fmt_p(r["paired_p"])
        colour = {"better": "green", "worse": "red", "changed": "yellow"}.get(v.key)
        vs.add_row(r["dataset"], r["method"], r["metric"], fmt(r["mean_diff"], r["ci_low"], r["ci_high"]), p,
                   f"[{colour}]{v.short}[/]" if colour else v.short)
    console.print(vs)
    boots = doc.get("test_bootstrap") or {}
    if any(boots.values()):
        from fairmedbench.metrics.specs import metric_spec

        first = next(b for b in boots.values() if b)
        util = metric_spec(first.get("metric", "auc")).header  # AUC, or macro AUC (multi-class)
        tb = Table(title="with the test set's sampling error: seed means, paired test-set bootstrap of whole "
                         f"{first.get('unit', 'row')}s [95% CI]", title_justify="left")
        for h in ("dataset", "method", f"signed {util} difference", f"worst-group {util}",
                  f"worst-group {util} - ERM", f"{util} gap - ERM"):
            tb.add_column(h)
        for ds, b in boots.items():
            if not b:
                continue
            worst, diff, vs_erm = b["keys"][:3]
            gap_vs = b["keys"][3] if len(b["keys"]) > 3 else None  # comparisons saved before the gap was added
            for m, e in b["methods"].items():
                d, w, v, gv = e.get(diff), e[worst], e.get(vs_erm), e.get(gap_vs) if gap_vs else None
                tb.add_row(ds, m, "—" if not d else fmt(d["value"], d["ci_low"], d["ci_high"]),
                           fmt(w["value"], w["ci_low"], w["ci_high"]),
                           "—" if not v else fmt(v["value"], v["ci_low"], v["ci_high"]),
                           "—" if not gv else fmt(gv["value"], gv["ci_low"], gv["ci_high"]))
        groups = first["groups"]
        console.print(tb)
        if len(groups) == 2:
            console.print(f"signed difference = {groups[1]} - {groups[0]}")
    for note in doc.get("notes") or ():
        console.print(f"[cyan]note[/] {note}")
    for line in compare_headline(doc):
        console.print(f"[bold]answer[/] {line}")
    if doc.get("ranks"):
        rk = doc["ranks"]
        order = sorted(rk["avg_ranks"].items(), key=lambda kv: kv[1])
        from fairmedbench.report.verdicts import study_friedman

        why = study_friedman(rk.get("chi2"), rk.get("p_value"), int(rk.get("n_datasets") or 0), len(order))
        console.print(f"Friedman on {rk['metric']}: " + (why if why else f"chi2 {rk['chi2']:.3g}, p "
                      f"{fmt_p(rk['p_value'])}; Nemenyi CD {rk['cd']:.2f}") + "; average ranks "
                      + ", ".join(f"{m} {r:.2f}" for m, r in order))


def _num(v: float | None) -> float:
    return math.nan if v is None else float(v)


def render_inspect(doc: dict, console: Console) -> None:
    """`benchmark inspect`: SPLIT and multitask AUCs with CIs, then the KS tests with raw and adjusted p."""
    from rich.table import Table

    if not console.is_terminal:
        console.width = max(console.width, 150)
    for key, title in (("split_probe", "SPLIT: attribute predicted from frozen features (held-out AUC, 95% CI)"),
                       ("multitask", "multitask head: held-out AUC per task (95% CI)")):
        table = Table(title=title, title_justify="left")
        for h in ("target", "features", "group (one-vs-rest)", "n", "n+", "AUC"):
            table.add_column(h, justify="right" if h in ("n", "n+", "AUC") else "left")
        for r in doc[key]:
            table.add_row(r["target"], r["features"], r["group"], str(r["n"]), str(r["n_pos"]),
                          fmt(_num(r["value"]), _num(r["ci_low"]), _num(r["ci_high"])))
        console.print(table)
    ks = doc["ks"]
    modes = doc["modes"]
    ev = modes["explained_variance_ratio"]
    if ev:
        console.print("explained variance: " + ", ".join(f"{n} {v:.3f}" for n, v in zip(modes["names"], ev)))
    table = Table(title=f"KS tests per mode ({ks['n_tests']} tests, {ks['correction']} corrected per {ks['per']}, "
                        f"alpha {ks['alpha']})", title_justify="left")
    for h in ("mode", "variable", "groups", "n", "KS D", "p", "p adjusted", "reject"):
        table.add_column(h, justify="left" if h in ("mode", "variable", "groups") else "right")
    for r in ks["tests"]:
        table.add_row(r["mode"], r["variable"], f"{r['group_a']} vs {r['group_b']}", f"{r['n_a']}/{r['n_b']}",
                      f"{r['statistic']:.3f}", f"{r['p_value']:.2e}", f"{r['p_adjusted']:.2e}",
                      "yes" if r["reject"] else "no")
    console.print(table)
    for var, groups in ks["skipped"].items():
        for g, why in groups.items():
            console.print(f"[yellow]skipped[/] {var} = {g}: {why}")
    if "discovery" in doc:
        render_discovery(doc["discovery"], console)
    for note in doc["notes"]:
        console.print(f"[cyan]note[/] {note}")


def render_discovery(d: dict, console: Console) -> None:
    """`inspect --discover`: the opening sentences, then one line per candidate slice (held-out half)."""
    from rich.table import Table

    from fairmedbench.report.slices import discovery_answer

    table = Table(title="hidden subgroups: candidate slices on the held-out half", title_justify="left")
    for h in ("slice", "n", "share", "AUC slice", "AUC rest", "gap", "p", "p adjusted", "over-represented"):
        table.add_column(h, justify="left" if h in ("slice", "over-represented") else "right")
    alpha = float(d["settings"]["alpha"])
    for i, sl in enumerate(d["slices"], 1):
        over = ", ".join(f"{e['attribute']}={e['group']}" for e in sl["enrichment"]
                         if e["p_adjusted"] is not None and e["p_adjusted"] < alpha
                         and e["share_slice"] > e["share_rest"])
        table.add_row(f"slice {i}", str(sl["n"]), f"{100 * sl['share']:.1f}%", f"{_num(sl['auc_slice']):.3f}",
                      f"{_num(sl['auc_rest']):.3f}", f"{_num(sl['gap']):+.3f}", fmt_p(sl["p_value"]),
                      fmt_p(sl["p_adjusted"]), over or "—")
    if d["slices"]:
        console.print(table)
    for line in discovery_answer(d):
        console.print(line)
    for note in d["notes"]:
        console.print(f"[cyan]note[/] {note}")


def render_batch(batch: BatchOutcome, console: Console) -> None:
    """`benchmark evaluate` on several files: one line per file, task and attribute (headline and its gap)."""
    from rich.table import Table

    if not console.is_terminal:
        console.width = max(console.width, 150)
    table = Table(title=f"{len(batch.outcomes)} prediction files (95% CI)", title_justify="left")
    for h in ("source", "task", "attribute", "n", "headline", "gap", "worst group"):
        table.add_column(h, justify="right" if h == "n" else "left")
    from fairmedbench.tasks.base import get_task

    for o in batch.outcomes:
        task = get_task(o.result.meta.get("kind", "classification"))  # the engine's kind names the task
        head, gap = task.headline, task.headline_gap
        for r in o.result.reports:
            table.add_row(o.document["inputs"]["predictions"]["path"], r.task, r.attribute,
                          str(r.counts.get(OVERALL, {}).get("n", 0)), f"{head} {_cell(r, head, OVERALL)}",
                          f"{gap} {_cell(r, gap, GAP)}", str(r.worst_group.get(head, "—")))
    console.print(table)
    console.print(f"table: {batch.table}\nresults: {batch.out_dir}/<file>/result.json")


def _shift_cell(e: dict) -> str:
    shift = "—" if e.get("shift") is None else f"{e['shift']:+.3f}"
    if e.get("ci_low") is None:
        return shift
    mark = " *" if e.get("excludes_0") else ""
    return f"{shift} [{e['ci_low']:+.3f}, {e['ci_high']:+.3f}]{mark}"


def render_external(doc: dict, out_dir: Path, console: Console) -> None:
    """Each external dataset of a seed document: its metric tables (the metric engine's, as for the internal test
    set) and the shift table per attribute (external - internal per group, of the gap and of the difference)."""
    from rich.table import Table

    from fairmedbench.analysis.shift import SHIFT_METHOD_PAIRED
    from fairmedbench.engine.results import RunResult

    for ext in doc.get("external", []):
        what = "every sample" if ext.get("split") == "all" else "test split"
        console.print(f"[bold]external[/] {ext['label']} ({what}, {ext['n_test']} samples), seed "
                      f"{doc['spec']['seed']}:")
        render(RunResult({**doc, "result": ext["result"]}, out_dir).fairness(), console)
        how = resampling_words(ext)
        if ext["shift_method"] == SHIFT_METHOD_PAIRED:
            console.print(f"[yellow]paired[/] {ext['label']} shares items with the run's test set (overlap=paired): "
                          "its shift intervals come from one paired bootstrap, the shared items drawn jointly")
        for sh in ext["shift"]:
            m = sh["metric"].upper()
            table = Table(title=f"shift {ext['label']} − internal: {m} by {sh['attribute']}, seed "
                                f"{doc['spec']['seed']} (* = CI excludes 0; {how})", title_justify="left")
            for col in ("", f"internal {m}", f"external {m}", "shift [95% CI]"):
                table.add_column(col, justify="right" if col else "left")
            rows = [*sh["per_group"].items(), ("gap (max − min)", sh["gap"])]
            if "diff" in sh:
                rows.append((f"difference {sh['diff']['of']}", sh["diff"]))
            for label, e in rows:
                table.add_row(label, fmt(e["internal"] if e["internal"] is not None else math.nan),
                              fmt(e["external"] if e["external"] is not None else math.nan), _shift_cell(e))
            console.print(table)
            if sh["only_internal"] or sh["only_external"]:
                console.print(f"[yellow]groups[/] only internal: {', '.join(sh['only_internal']) or 'none'}; only "
                              f"external: {', '.join(sh['only_external']) or 'none'} (no shift for them)")


def resampling_words(ext: dict) -> str:
    """How an external block's shift intervals were drawn, in a few words."""
    from fairmedbench.analysis.shift import SHIFT_METHOD_PAIRED

    return ("a paired bootstrap of the two test sets (shared items drawn jointly)"
            if ext.get("shift_method") == SHIFT_METHOD_PAIRED else "independent bootstraps of the two test sets")


def render_external_seeds(summary: list[dict], console: Console) -> None:
    """The shift over every training seed (summary.json's `external`): each seed's shift with its bootstrap interval,
    and the mean ± std with the t 95% CI across seeds."""
    from rich.table import Table

    for ext in summary:
        for attr in ext["attributes"]:
            rows = attr["shift"]
            seeds = [r["seed"] for r in next(iter(rows.values()))["per_seed"]]
            m = attr["metric"].upper()
            table = Table(title=f"shift {ext['label']} − internal: {m} by {attr['attribute']}, all {len(seeds)} seeds: "
                                "mean ± std \\[t 95% CI across seeds]", title_justify="left")
            table.add_column("")
            for sd in seeds:
                table.add_column(f"seed {sd}", justify="right")
            table.add_column("mean ± std \\[t 95% CI]", justify="right")
            for key, row in rows.items():
                label = key[6:] if key.startswith("group:") else {"gap": "gap (max − min)"}.get(
                    key, f"difference {attr.get('diff_of', '')}")
                table.add_row(label, *[_shift_cell({**c, "excludes_0": _excludes_0(c)}) for c in row["per_seed"]],
                              seeds_cell(row))
            console.print(table)
        console.print(ext["note"])


def _excludes_0(c: dict) -> bool:
    lo, hi = c.get("ci_low"), c.get("ci_high")
    return lo is not None and hi is not None and (lo > 0 or hi < 0)


def seeds_cell(row: dict) -> str:
    """'+0.120 ± 0.030 [+0.045, +0.195]' of a row of summary.json's external shift (mean alone for one seed)."""
    if row.get("mean") is None:
        return "—"
    if row.get("std") is None:
        return f"{row['mean']:+.3f}"
    return f"{row['mean']:+.3f} ± {row['std']:.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"


def render_split_seeds(summary: dict, console: Console) -> None:
    """Repeated splits: per (task / attribute, metric), each split seed's value with its test-set bootstrap CI, and
    the mean ± std with the t 95% CI across split seeds (the train/val sampling on the fixed test set)."""
    from rich.table import Table

    seeds = summary["split_seeds"]
    table = Table(title=f"across split seeds {','.join(map(str, seeds))} (test set fixed, train/val re-drawn): "
                        "each split's value \\[bootstrap 95% CI of its first training seed] | mean ± std \\[t 95% CI]",
                  title_justify="left")
    table.add_column("task / attribute")
    table.add_column("metric")
    for s in seeds:
        table.add_column(f"split {s}", justify="right")
    table.add_column("across splits", justify="right")
    for key, row in summary["across_splits"].items():
        for m, c in row.items():
            cells = []
            for r in c["per_split"]:
                b = r["bootstrap"]
                v = math.nan if r["value"] is None else r["value"]
                cells.append(fmt(v) + (f" [{b['ci_low']:.3f}, {b['ci_high']:.3f}]" if b["ci_low"] is not None else ""))
            across = "—" if "mean" not in c else (f"{c['mean']:.3f} ± {c['std']:.3f} [{c['ci_low']:.3f}, "
                                                 f"{c['ci_high']:.3f}]")
            table.add_row(key, m, *cells, across)
    console.print(table)


def render_run_outcome(outcome: RunOutcome, report: Path | None, console: Console) -> None:
    """`benchmark run`: the run's tables (`render_run`), the first seed's resampled test set (`--test-resample`)
    beside its original one, and the report page written (`--report`)."""
    from fairmedbench.engine.results import RunResult

    render_run(outcome, console)
    resampled = [r for r in outcome.seeds if "test_resample" in r.doc]
    if resampled:
        first = resampled[0]
        console.print(f"resampled test set ({first.doc['test_resample']['params']['spec']}), seed "
                      f"{first.spec['seed']}; every seed's draw and result are in its seed JSON")
        render_resampled(first.fairness(), RunResult({**first.doc, "result": first.doc["test_resample"]["result"]},
                                                     outcome.out_dir).fairness(), first.doc["test_resample"], console)
    if report:
        console.print(f"report: {report}")


def render_compare_cells(doc: dict, over: str, console: Console) -> None:
    """A crossed attribute's cells per method (compare's `cells`): the headline metric's mean [t 95% CI] over
    `over`, each cell headed by its test count, then why a cell has no value or interval."""
    from rich.table import Table

    from fairmedbench.metrics.specs import metric_spec

    rows = [r for r in doc["table"] if r.get("cells")]
    if not rows:
        return
    head = metric_spec(headline_metric(doc.get("task", "classification"))).header
    names = list(rows[0]["cells"])
    table = Table(title=f"by {doc['attribute']}: {head} per crossed cell, mean \\[t 95% CI] over {over}",
                  title_justify="left")
    for h in ("dataset", "method", *[f"{g} (n={rows[0]['cells'][g].get('n')})" for g in names]):
        table.add_column(h, justify="left" if h in ("dataset", "method") else "right")
    for row in rows:
        table.add_row(row["dataset"], row["method"], *[
            "—" if (c := row["cells"].get(g) or {}).get("mean") is None else fmt(c["mean"], c["ci_low"], c["ci_high"])
            for g in names])
    console.print(table)
    from fairmedbench.report.verdicts import crossed_cell_notes

    for line in crossed_cell_notes(rows):
        console.print(f"[cyan]note[/] {line}")


def render_compare_saved(doc: dict, path: Path, report: Path | None, console: Console) -> None:
    """`benchmark compare`: its tables (`render_compare`) and where the comparison and its page were saved."""
    render_compare(doc, console)
    console.print(f"saved: {path}" + (f"\nreport: {report}" if report else ""))


def render_evaluate(outcome: EvaluateOutcome, console: Console) -> None:
    """`benchmark evaluate` on one file: the tables, the resampled test set, notes, the operating threshold and
    where files went."""
    render(outcome.result, console)
    if outcome.resampled is not None:
        render_resampled(outcome.result, outcome.resampled, outcome.document["test_resample"], console)
    for note in outcome.notes:
        console.print(f"[cyan]note[/] {note}")
    for task, thr in outcome.result.meta.get("thresholds", {}).items():
        # one threshold per task, or one per attribute when the profile picks it on each evaluated set
        per = {"": thr} if "policy" in thr else {f" ({task} / {a})": t for a, t in thr.items()}
        for where, t in per.items():
            console.print(f"operating threshold{where}: {t['policy']} -> {t['value']} (positive iff score "
                          f"{t['comparator']} t; source: {t['source']})")
        break
    for what, path in outcome.paths.items():
        console.print(f"{what}: {path}")


def render_rows(title: str, rows: list[dict[str, Any]], console: Console) -> None:
    """Rows of `benchmark list` as one table (lists joined by commas)."""
    from rich.table import Table

    if not console.is_terminal:
        console.width = max(console.width, 160)
    table = Table(title=title, title_justify="left")
    keys = list(rows[0]) if rows else ["name"]
    for k in keys:
        table.add_column(k)
    for r in rows:
        table.add_row(*[", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v) for v in r.values()])
    console.print(table)


def render_uncertainty(doc: dict, console: Console) -> None:
    """Rejection curves per group and δ of `benchmark evaluate --uncertainty`: one table per attribute and measure."""
    from rich.table import Table

    for attr, per in doc["curves"].items():
        for measure, c in per.items():
            r = c["retention"]
            delta = "undefined" if c["delta"] is None else f"{c['delta']:.4f}"
            console.print(f"[bold]{attr} / {measure}: δ = {delta}[/] ({c['pair_aggregation']} over pairs, mean over "
                          f"{len(r)} retention levels; {c['pm']} of the retained cases per group)")
            t = Table()
            t.add_column("retained", justify="right")  # one row per level: a few groups fit any terminal width
            for grp in c["groups"]:
                t.add_column(grp, justify="right")
            for i, x in enumerate(r):
                t.add_row(f"{x:.0%}", *("—" if v["pm"][i] is None else f"{v['pm'][i]:.3f}"
                                        for v in c["groups"].values()))
            console.print(t)
            for note in c["notes"]:
                console.print(f"[cyan]note[/] {note}")
    console.print(f"[cyan]note[/] {doc['level']}")


def study_report_text(rep: StudyReport) -> str:
    """What `benchmark study report` prints: the answers, notes, and where the table, figures and page went."""
    lines = [f"- {line}" for line in rep.answers] + [f"note: {note}" for note in rep.notes]
    lines.append(f"table: {rep.parquet} ({len(rep.table)} rows; also {rep.csv.name})\nfigures: {len(rep.figures)} "
                 f"files in {rep.figures[0].parent if rep.figures else '-'}\npage: {rep.html}")
    return "\n".join(lines)


def render_claims(doc: dict, path: Path, page: Path | None, console: Console) -> None:
    """One sentence per claim (its answer coloured), whether each stand-in gave its known answer, where it is saved."""
    from rich.markup import escape

    colour = {"holds": "green", "contradicted": "red", "not-supported": "yellow"}
    for c in doc["claims"]:
        a = c["answer"]
        known = ""
        if doc.get("stand_in"):
            known = f" [known answer {c['known_answer']}: {'given' if c['gave_known_answer'] else 'NOT given'}]"
        console.print(f"[bold {colour.get(a['key'], 'white')}]{a['key']}[/] {escape(a['sentence'] + known)}",
                      highlight=False)
    console.print(f"saved: {path}" + (f"\nreport: {page}" if page else ""), highlight=False)
