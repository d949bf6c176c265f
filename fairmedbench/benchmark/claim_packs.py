"""Evidence packs for the claims beyond one result: `compare --evidence DIR`, `study report --evidence DIR` and one
pack per verified board row (`leaderboard build` writes <board>/evidence/<row>/). Same manifest rules, staging
and signing as the run and evaluate packs (benchmark/evidence.py); summary.md (and summary.html, the same text
rendered) states what was examined, each audited model's per-group performance, the findings in the verdict words
of report/verdicts.py, each file, the Art. 10/15 and FDA mapping, and the Art. 13/14/72 sections (deployer.py).

    compare:   compare.json, compare.html, runs/<dataset>/<method>/[split<k>/]seed<s>.json + predictions
    study:     study.html, study.parquet, study.csv, figures/..., plan.json, runs/<run id>/seed<s>.json + predictions
    board row: row.json (the row as board.json shows it), verification.json, results/seed<s>.json + predictions
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.benchmark import evidence
from fairmedbench.benchmark.deployer import Audit, articles, md, result_audit
from fairmedbench.benchmark.signing import Key
from fairmedbench.engine import store
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.benchmark.compare import CompareOutcome
    from fairmedbench.report.study import StudyReport

#: the folder under a board's output that holds one pack per verified row
BOARD_EVIDENCE = "evidence"

CLAIM_SUMMARY = """# Evidence pack: {title}

Written by fairmedbench {version} on {created}. Every number below is in the files listed. This summary states
facts about the data and the models' outputs; it is not legal advice, and whether they satisfy a requirement is
for the responsible organisation and its assessors to judge.

What the manifest proves: `benchmark evidence verify DIR` (or `sha256sum -c {manifest}` inside this folder) checks
every file against the sha256 that `{manifest}` lists. {signed}

## What was examined

{examined}

## Performance per group (each audited model's first seed; bootstrap intervals)

{per_group}

## Findings (generated from the results; the verdict rules are in fairmedbench/report/verdicts.py)

{facts}

## Files and the fact each holds

| File | What it holds | Provision that asks for it |
|---|---|---|
{rows}

{provisions}
{articles}"""


@dataclass(frozen=True)
class Claim:
    """What a claim pack's summary says: its title, what was examined, the findings (markdown lines), the files
    with the fact each holds and the provision it bears on, and the audited models (deployer.Audit)."""

    title: str
    examined: list[str]
    facts: list[str]
    files: list[tuple[str, str, str]]
    audits: list[Audit]


def _provisions() -> str:
    """The run and evaluate packs' 'which provision asks for which fact' section, as written there."""
    return evidence.SUMMARY[evidence.SUMMARY.index("## Which provision asks for which fact"):].rstrip("\n") + "\n"


def _per_group(audits: Sequence[Audit]) -> list[str]:
    """The run and evaluate packs' per-group table and operating threshold lines, one block per audited model."""
    out = []
    for a in audits:
        out += [f"### {md(a.name)}", "", *evidence._operating(a.reports, "as the run resolved it"), "",
                *evidence._per_group(a.reports, a.kind, a.level), ""]
    return out


def write_claim(folder: Path, claim: Claim, key: Key | None) -> Path:
    """summary.md and summary.html of a claim pack, then its manifest (signed with `key`)."""
    import fairmedbench

    rows = "\n".join(f"| {evidence._code(name)} | {what} | {req} |" for name, what, req in
                     [*claim.files, ("summary.md, summary.html", "this summary (the page renders the same text)",
                                     evidence.TRACE),
                      ("command.txt", "the exact command line", evidence.TRACE),
                      ("environment.json", "package versions, platform, fairmedbench version and git commit",
                       evidence.TRACE), *evidence._manifest_rows(key)])
    text = CLAIM_SUMMARY.format(
        title=md(claim.title), version=fairmedbench.__version__,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), manifest=evidence.MANIFEST,
        signed=evidence._signed_text(key), examined="\n".join(claim.examined),
        per_group="\n".join(_per_group(claim.audits)) or "- no audited result",
        facts="\n".join(claim.facts) or "- none", rows=rows, provisions=_provisions(),
        articles=articles(claim.audits))
    store.write_text(folder / "summary.md", text)
    write_page(folder / "summary.html", claim.title, text)
    return evidence.write_manifest(folder, key)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Evidence pack: {title}</title>
<style>
body {{ font: 15px/1.5 system-ui, sans-serif; max-width: 70rem; margin: 0 auto; padding: 1rem; color: #1b1b1b; }}
.scroll {{ overflow-x: auto; max-width: 100%; margin: .5rem 0; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: .25rem .5rem; text-align: left; vertical-align: top; }}
th {{ background: #f2f2f2; }}
pre {{ background: #f6f6f6; padding: .5rem; overflow-x: auto; white-space: pre; }}
code {{ font-size: 90%; overflow-wrap: anywhere; }}
h2 {{ border-bottom: 1px solid #ddd; margin-top: 2rem; }}
h1, h2, h3, p, li {{ overflow-wrap: anywhere; }}
</style></head><body>
{body}
</body></html>
"""


def write_page(path: Path, title: str, text: str) -> Path:
    """summary.md's text as a page (CommonMark with tables, each in a box that scrolls sideways on a phone; raw
    HTML off, so escaped names stay text)."""
    from html import escape

    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    body = body.replace("<table>", '<div class="scroll"><table>').replace("</table>", "</table></div>")
    return store.write_text(path, PAGE.format(title=escape(title), body=body))


def _finish(folder: Path, command: Sequence[str], doc: dict[str, Any], claim: Claim, key: Key | None) -> None:
    """command.txt, environment.json (of `doc`, a result the pack holds), the summary and the manifest."""
    evidence._command(folder, command)
    store.write_json(folder / "environment.json", evidence._environment(doc))
    write_claim(folder, claim, key)


def _copy_result(doc_path: Path, doc: dict[str, Any], dest: Path) -> None:
    """A run seed's result JSON and the predictions files it cites (its test set's and each other site's), into
    `dest` (its folder in the pack)."""
    evidence._copy(doc_path, dest / doc_path.name)
    cited = [(doc.get("predictions") or {}).get("file"), *(e.get("predictions") for e in doc.get("external", []))]
    for pred in cited:
        if pred:
            evidence._copy(doc_path.parent / str(pred), dest / str(pred))


def check_pack(pack: str, force: bool, outputs: Sequence[tuple[str, str | Path]]) -> Path:
    """Before any work: the pack folder (evidence.check), and none of the command's own output folders (flag,
    path) inside it (they would be files of no pack there)."""
    folder = evidence.check(pack, force).resolve()
    for flag, path in outputs:
        where = Path(path).resolve()
        if where == folder or folder in where.parents:
            raise InputError(f"--evidence {pack}: {flag} {path} is inside it; give the evidence pack a folder of its "
                             "own")
    return folder


def _summary_cell(cell: dict[str, Any] | None) -> str:
    if not cell or cell.get("mean") is None:
        return "undefined"
    return f"{cell['mean']:.3f} [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]"


# ----------------------------------------------------------------------------------------------------- compare

def compare_pack(folder: Path, outcome: CompareOutcome, doc: dict[str, Any], command: Sequence[str],
                 key: Key | None = None) -> Path:
    """A compare pack: the comparison JSON and page, every run's seed results and predictions, and the summary
    (each method's table row, the verdicts against ERM, each trained dataset x method's first seed audited)."""
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.report.html import write_compare_report
    from fairmedbench.report.verdicts import compare_headline

    store.write_json(folder / "compare.json", doc)
    write_compare_report(folder / "compare.html", doc)
    audits, first_doc = [], None
    for (ds, method), run in outcome.runs.items():
        leaves = run.split_runs or [run]
        for leaf in leaves:
            for res in leaf.seeds:
                sub = f"runs/{ds}/{method}" + (f"/split{res.spec.get('split_seed')}" if run.split_runs else "")
                _copy_result(res.folder / f"seed{res.seed}.json", res.doc, folder / sub)
        first = leaves[0].seeds[0]
        first_doc = first_doc or first.doc
        sub = f"runs/{ds}/{method}" + (f"/split{first.spec.get('split_seed')}" if run.split_runs else "")
        audits.append(result_audit(first.doc, f"{ds} / {method} (seed {first.seed})",
                                   evidence.run_use(first.spec), sub))
    spec = first_doc["spec"] if first_doc else {}
    examined = [f"- Model {md(spec.get('model'))} (weights {md(spec.get('weights'))}), usage {md(spec.get('usage'))}"
                f", attribute {md(doc['attribute'])}",
                f"- Methods: {', '.join(md(m) for m in doc['methods'])}; datasets: "
                f"{', '.join(md(d) for d in doc['datasets'])}",
                f"- Seeds {', '.join(str(s) for s in spec.get('seeds', []))}"
                + (f"; split seeds {', '.join(map(str, doc['split_seeds']))}" if doc.get("split_seeds") else "")
                + f"; {spec.get('n_boot')} bootstrap resamples per run",
                "- Across seeds (mean [95% interval] over "
                + ("splits" if doc.get("split_seeds") else "seeds") + "):"]
    for row in doc["table"]:
        cells = "; ".join(f"{metric_spec(m).header} {_summary_cell(row.get(m))}" for m in doc["metrics"])
        examined.append(f"  - {md(row['dataset'])} / {md(row['method'])} ({row['n_units']} {row['unit']}s): {cells}")
    facts = [*(f"- {md(line)}" for line in compare_headline(doc)),
             *(f"- {md(r['verdict']['sentence'])}" for r in doc.get("versus_erm", []) if r.get("verdict")),
             *(f"- note: {md(n)}" for n in doc.get("notes", []))]
    files = [("compare.json", "every method's values per seed, summaries with intervals, paired tests against ERM, "
              "the paired test-set bootstrap and the verdicts", f"{evidence.GROUPS}; {evidence.BIAS}"),
             ("compare.html", "the comparison page: verdicts first, utility against gap, differences from ERM",
              evidence.BIAS),
             ("runs/<dataset>/<method>/seed<s>.json", "each run's metrics per group with intervals and tests",
              f"{evidence.GROUPS}; {evidence.BIAS}"),
             ("runs/<dataset>/<method>/seed<s>.predictions.parquet", "per-sample labels, scores and groups of each run",
              evidence.TRACE)]
    title = f"compare {spec.get('model')} on {'+'.join(doc['datasets'])}"
    _finish(folder, command, first_doc or {}, Claim(title, examined, facts, files, audits), key)
    return folder


def compare_with_evidence(pack: str, force: bool, outcome: CompareOutcome, doc: dict[str, Any],
                          command: Sequence[str], key: Key | None) -> None:
    """Write the compare pack into `pack` (checked before any work by `evidence.check`), staged and swapped in."""
    with evidence.staged(pack, force) as stage:
        compare_pack(stage, outcome, doc, command, key)
    print(evidence.describe(Path(pack)), file=sys.stderr)


# ------------------------------------------------------------------------------------------------------ study

def study_pack(folder: Path, report: StudyReport, plan_path: Path, out_root: Path, command: Sequence[str],
               key: Key | None = None) -> Path:
    """A study pack: the study page, tidy table, figures and plan, every finished run's seed results and
    predictions, and the summary (the page's answers, each run's first seed audited)."""
    dest = report.html.parent
    for path in [report.html, report.parquet, report.csv, *report.figures]:
        evidence._copy(path, folder / Path(path).relative_to(dest))
    evidence._copy(plan_path, folder / "plan.json")
    plan = json.loads(Path(plan_path).read_text())
    audits, first_doc = [], None
    done = [c for c in plan["cells"] if c.get("status") == "done"]
    for c in done:
        run_dir = Path(out_root) / c["run_dir"]
        files = store.read_json(run_dir / "summary.json")["files"]
        for name in files:
            _copy_result(run_dir / name, store.read_json(run_dir / name), folder / "runs" / str(c["run_id"]))
        doc = store.read_json(run_dir / files[0])
        first_doc = first_doc or doc
        spec = doc["spec"]
        audits.append(result_audit(doc, f"run {c['run_id']}: {spec.get('model')} / {spec.get('dataset')} / "
                                   f"{spec.get('usage')} / {spec.get('mitigation')} (seed {spec.get('seed')})",
                                   evidence.run_use(spec), f"runs/{c['run_id']}"))
    counts: dict[str, int] = {}
    for c in plan["cells"]:
        counts[c.get("status", "?")] = counts.get(c.get("status", "?"), 0) + 1
    examined = [f"- Study {md(plan['study'])} (source {md(plan.get('source'))}, sha256 {plan.get('study_sha256')})",
                f"- Cells of the plan: {', '.join(f'{v} {md(k)}' for k, v in counts.items())}; "
                f"{len(done)} finished run(s) aggregated",
                f"- Tidy table: {len(report.table)} rows (study.parquet, study.csv)"]
    facts = [*(f"- {md(a)}" for a in report.answers), *(f"- note: {md(n)}" for n in report.notes)]
    files = [("study.html", "the study page: answers first, figures, tables", evidence.BIAS),
             ("study.parquet, study.csv", "the tidy table: every run's metric per task, attribute and group, "
              "summarised across seeds", f"{evidence.GROUPS}; {evidence.BIAS}"),
             ("figures/...", "the page's figures (PNG and SVG)", evidence.BIAS),
             ("plan.json", "the study's cells with their status and run folders", evidence.TRACE),
             ("runs/<run id>/seed<s>.json", "each run's metrics per group with intervals and tests",
              f"{evidence.GROUPS}; {evidence.BIAS}"),
             ("runs/<run id>/seed<s>.predictions.parquet", "per-sample labels, scores and groups of each run",
              evidence.TRACE)]
    _finish(folder, command, first_doc or {}, Claim(f"study {plan['study']}", examined, facts, files, audits), key)
    return folder


def study_with_evidence(pack: str, force: bool, report: StudyReport, plan_path: Path, out_root: Path,
                        command: Sequence[str], key: Key | None) -> None:
    """Write the study pack into `pack` (checked before any work by `evidence.check`), staged and swapped in."""
    with evidence.staged(pack, force) as stage:
        study_pack(stage, report, plan_path, out_root, command, key)
    print(evidence.describe(Path(pack)), file=sys.stderr)


# ------------------------------------------------------------------------------------------------- board rows

def row_name(row: dict[str, Any]) -> str:
    """The folder name of a board row's pack: model, revision, entry and attribute, other characters as '_'."""
    raw = f"{row['model']}-{row['revision']}-{row['entry']}-{row['attribute']}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._") or "row"


def check_board_evidence(board_dir: Path) -> Path:
    """Before a board build: <board>/evidence must be absent or a folder whose every entry is an earlier row pack
    (evidence.check with force: an earlier pack is replaced, anything else refused in one line)."""
    root = Path(board_dir) / BOARD_EVIDENCE
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise InputError(f"{root}: is not a folder; the board writes one evidence pack per verified row there: move "
                         "it away")
    if root.is_dir():
        for child in sorted(root.iterdir()):
            if not child.is_dir() or child.is_symlink():
                raise InputError(f"{child}: the board's evidence folder holds packs only; move this file out")
            evidence.check(child, force=True)
    return root


def _retire(folder: Path) -> None:
    """Remove an earlier row pack (only the files its manifest lists, the manifest and its signature) whose row is
    no longer verified; the folder goes when that leaves it empty."""
    for rel in evidence._previous_pack(folder, force=True):
        (folder / rel).unlink()
        for parent in (folder / rel).relative_to(folder).parents[:-1]:
            if not any((folder / parent).iterdir()):
                (folder / parent).rmdir()
    if not any(folder.iterdir()):
        folder.rmdir()


def row_pack(folder: Path, board_dir: Path, board: dict[str, Any], row: dict[str, Any],
             key: Key | None = None) -> Path:
    """One verified row's pack: the row, its verification record, its seeds' results and predictions, the summary
    (the row's numbers, rank and verification; its first seed audited)."""
    from fairmedbench.leaderboards.seal import VERIFICATION_FILE

    sub = Path(board_dir) / row["provenance"]["folder"]
    store.write_json(folder / "row.json", row)
    evidence._copy(sub / VERIFICATION_FILE, folder / "verification.json")
    docs = []
    for run in row["provenance"].get("runs", []):
        path = sub / run["file"]
        doc = store.read_json(path)
        _copy_result(path, doc, folder / "results")
        docs.append(doc)
    if not docs:
        raise InputError(f"board row {row_name(row)}: its submission lists no run results; rebuild after `benchmark "
                         "submit`")
    check = row.get("verification") or {}
    headers = {c["key"]: c["header"] for c in board.get("columns", [])}
    suite = board["suite"]
    examined = [f"- Board {md(suite['name'])} version {md(suite['version'])}: entry {md(row['entry'])} (dataset "
                f"{md(row['dataset'])}, usage {md(row['usage'])}, attribute {md(row['attribute'])})",
                f"- Model {md(row['model'])} revision {md(row['revision'])} (weights {md(row.get('weights'))})",
                f"- Tier: {md(row['tier'])}, re-run by `benchmark verify` on {check.get('n_compared')} items, largest "
                f"score difference {check.get('max_abs_diff')} within tolerance {row.get('tolerance')}",
                f"- Rank {row.get('rank') if row.get('rank') is not None else '—'} in its "
                f"{md(row.get('rank_group'))} group" + (f" (not ranked: {md(row['unranked'])})"
                                                        if row.get("unranked") else ""),
                f"- Seeds {', '.join(str(d['spec'].get('seed')) for d in docs)}; the board's numbers are means over "
                "the seeds and tasks"]
    facts = ["- The board's numbers: " + "; ".join(f"{headers.get(k, k)} {'n/a' if v is None else f'{v:.4f}'}"
                                                    for k, v in row["metrics"].items()),
             *(f"- flag: {md(f['label'])}" for f in row.get("flags", [])),
             f"- {md(_answer(docs[0]))}"]
    files = [("row.json", "the row as board.json shows it: numbers, rank, flags, tier, provenance", evidence.GROUPS),
             ("verification.json", "the re-run's record (MACed under the board's key)", evidence.TRACE),
             ("results/seed<s>.json", "each seed's metrics per group with intervals and tests",
              f"{evidence.GROUPS}; {evidence.BIAS}"),
             ("results/seed<s>.predictions.parquet", "per-sample labels, scores and groups of each seed",
              evidence.TRACE)]
    use = (f"model {md(row['model'])} revision {md(row['revision'])}, usage {md(row['usage'])}, on board "
           f"{md(suite['name'])}'s pinned test set of dataset {md(row['dataset'])}; the numbers hold there.")
    audit = result_audit(docs[0], f"{row['model']} {row['revision']}, {row['entry']} (seed "
                         f"{docs[0]['spec'].get('seed')})", use, "results")
    _finish(folder, ["benchmark", "leaderboard", "build", "--board", str(suite["name"])], docs[0],
            Claim(f"board {suite['name']} row {row_name(row)}", examined, facts, files, [audit]), key)
    return folder


def _answer(doc: dict[str, Any]) -> str:
    """The opening sentence of a result's answer (report/verdicts.py)."""
    from fairmedbench.report.verdicts import result_answer

    return result_answer(doc["result"]["reports"]).headline


def board_packs(board_dir: Path, board: dict[str, Any], key: Key | None = None) -> list[Path]:
    """One pack per verified row of `board` (board.json's content) under <board>/evidence/<row>/, each earlier
    pack replaced; earlier packs of rows no longer verified are removed (their listed files only)."""
    root = check_board_evidence(board_dir)
    verified = {row_name(r): r for r in board["rows"] if r.get("tier") == "verified"}
    if root.is_dir():
        for child in sorted(root.iterdir()):
            if child.name not in verified:
                _retire(child)
    out = []
    for name, row in verified.items():
        with evidence.staged(root / name, force=True) as stage:
            row_pack(stage, Path(board_dir), board, row, key)
        out.append(root / name)
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()
    return out


__all__ = ["BOARD_EVIDENCE", "board_packs", "check_board_evidence", "check_pack", "compare_pack",
           "compare_with_evidence", "row_name", "study_pack", "study_with_evidence", "write_page"]
