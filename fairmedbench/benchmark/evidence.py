"""Evidence packs (`benchmark evaluate ... --evidence DIR`, `benchmark run ... --evidence DIR`): one folder an
auditor can file, tamper-evident.

    DIR/
      audit.html (evaluate) | report.html (run)   the page, answers first
      result.json | results/seed<k>.json           the result document(s), metrics with intervals and tests
      table.csv                                     the tidy table (one row per task, attribute, group, metric)
      predictions.parquet | results/...parquet      the per-sample predictions the numbers come from
      command.txt                                   the exact command line, shell-quoted
      environment.json                              package versions, platform, fairmedbench version, git commit
      summary.md                                    each file mapped to the requirement it documents
      MANIFEST.sha256                               sha256 of every other file, relative paths (`sha256sum -c`)

summary.md states facts about the data (what was measured, on what, with which uncertainty); it maps sections to
EU AI Act Art. 10(2)(f)-(g) and 10(5) (examination of possible biases), Art. 15 (accuracy levels across groups)
and the FDA's subgroup performance reporting, and says that it is not legal advice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from fairmedbench.engine import store
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.benchmark.evaluate import EvaluateOutcome
    from fairmedbench.benchmark.run import RunOutcome

MANIFEST = "MANIFEST.sha256"
VERSIONS = ("numpy", "scipy", "pandas", "scikit-learn", "pyarrow", "matplotlib", "jinja2", "torch")


#: top-level names a pack may write (evaluate and run packs); an unlisted one in an earlier pack's folder is refused
PACK_NAMES = ("audit.html", "report.html", "result.json", "result.predictions.parquet", "predictions.parquet",
              "table.csv", "command.txt", "environment.json", "summary.md")
_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")


def _is_staging(path: Path) -> bool:
    """A staging folder this module makes inside a pack folder (store.staging_dir names)."""
    return path.name.startswith(f"{store.STAGING_PREFIX}evidence") and path.is_dir() and not path.is_symlink()


def _unlisted_companion(rel: str) -> bool:
    """A file beside the manifest that it cannot list (the manifest itself, a signature `MANIFEST.sha256.*`)."""
    return "/" not in rel and rel.startswith(MANIFEST)


def check(folder: str | Path, force: bool) -> Path:
    """Before any work: the pack folder must be new, empty, or hold an earlier pack this product wrote (then only
    with `force`); a broken link, a file, an unwritable place or anything else is refused in one line. Creates
    nothing."""
    folder = Path(folder)
    _previous_pack(folder, force)
    return folder


def _previous_pack(folder: Path, force: bool) -> list[str]:
    """The relative paths of the earlier pack's files in `folder` (its manifest and the files it lists that are
    there, unchanged); [] for a new or empty folder. InputError when the folder holds anything else."""
    where = f"--evidence {folder}"
    if folder.is_symlink() and not folder.exists():
        raise InputError(f"{where}: is a symbolic link to {os.readlink(folder)}, which does not exist; give a new "
                         "folder for the evidence pack, or create the link's target")
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{where}: is a file; give a folder for the evidence pack")
    if not folder.exists():
        store.check_writable(folder, "--evidence")
        return []
    entries = sorted(p.name for p in folder.iterdir() if not _is_staging(p))
    if not entries:
        store.check_writable(folder, "--evidence")
        return []
    keep = "nothing in it is replaced or deleted, with or without --force"
    if not (folder / MANIFEST).is_file() or (folder / MANIFEST).is_symlink():
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise InputError(f"{where}: the folder holds files that are not an evidence pack ({shown}; no {MANIFEST} "
                         f"written by fairmedbench); give a new or empty folder: {keep}")
    listed = _listed(folder, where, keep)
    unlisted = [n for n in PACK_NAMES if n not in listed and ((folder / n).exists() or (folder / n).is_symlink())]
    if unlisted:
        raise InputError(f"{where}: {unlisted[0]} there is not a file of the earlier pack (its {MANIFEST} does not "
                         "list it) and the new pack would replace it; move it out of the folder, or give a new folder")
    if not force:
        raise InputError(f"{where}: the folder exists and is not empty: it holds an evidence pack ({len(listed)} "
                         "files); add --force to replace the files its MANIFEST.sha256 lists (anything else in the "
                         "folder is kept), or give a new folder")
    store.check_writable(folder, "--evidence")
    present = [rel for rel in listed if (folder / rel).exists()]
    return [*present, *sorted(p.name for p in folder.iterdir() if _unlisted_companion(p.name) and p.is_file())]


def _listed(folder: Path, where: str, keep: str) -> list[str]:
    """The files an earlier pack's manifest lists, each checked: a relative path inside the folder with no link on
    the way, and unchanged since it was written (or gone). A manifest fairmedbench did not write is refused."""
    listed: dict[str, str] = {}
    for line in (folder / MANIFEST).read_text(encoding="utf-8", errors="replace").splitlines():
        m = _LINE.match(line)
        if m is None and line.strip() and not line.startswith("#"):
            raise InputError(f"{where}: its {MANIFEST} is not one fairmedbench wrote (a line reads {line[:60]!r}); "
                             f"give a new or empty folder: {keep}")
        if m is not None:
            listed[m.group(2)] = m.group(1)
    root = folder.resolve()
    for rel, digest in listed.items():
        path = folder / rel
        inside = not PurePosixPath(rel).is_absolute() and ".." not in PurePosixPath(rel).parts
        links = [p for p in (path, *path.parents) if p != folder and folder in p.parents and p.is_symlink()]
        if not inside or links or (path.exists() and root not in path.resolve().parents):
            raise InputError(f"{where}: its {MANIFEST} lists {rel!r}, which is not a file inside the pack; give a new "
                             f"or empty folder: {keep}")
        if path.exists() and (not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest):
            raise InputError(f"{where}: {rel} was changed since the pack was written (its sha256 differs from "
                             f"{MANIFEST}); move it out of the folder, or give a new folder: an edited file is not "
                             "replaced")
    env = folder / "environment.json"
    try:
        ours = "environment.json" in listed and "fairmedbench_version" in json.loads(env.read_text())
    except (OSError, ValueError, TypeError):
        ours = False
    if not ours:
        raise InputError(f"{where}: its {MANIFEST} is not one fairmedbench wrote (it lists no environment.json "
                         f"naming fairmedbench's version); give a new or empty folder: {keep}")
    return list(listed)


@contextlib.contextmanager
def staged(folder: str | Path, force: bool) -> Iterator[Path]:
    """Once the results are computed: `folder` checked again, and a staging folder inside it to write the new pack
    into; on leaving without an error the staged files replace the earlier pack's (`_swap`). The staging folder
    goes either way, and so does `folder` when this made it and it is left empty."""
    folder = Path(folder)
    previous = _previous_pack(folder, force)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    store.remove_stale_staging(folder)  # what a killed earlier pack write left (a dead process's staging folders)
    stage = store.staging_dir(folder, "evidence")
    try:
        yield stage
        _swap(stage, folder, previous)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if created and not any(folder.iterdir()):
            folder.rmdir()


def _swap(stage: Path, folder: Path, previous: Sequence[str]) -> None:
    """Move the staged pack's files into `folder` in place of the earlier pack's (`previous`), the manifest out
    first and in last; an error at any step undoes every move, so the folder holds the earlier pack (or none),
    never part of each."""
    new = sorted((p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file()),
                 key=lambda rel: (_unlisted_companion(rel), rel))
    clash = [rel for rel in new if rel not in previous and ((folder / rel).exists() or (folder / rel).is_symlink())]
    if clash:
        raise InputError(f"--evidence {folder}: {clash[0]} there is not a file of an earlier pack and the new pack "
                         "would replace it; move it out of the folder, or give a new folder")
    backup = store.staging_dir(folder, "evidence-old")
    out: list[str] = []
    into: list[str] = []
    made: list[Path] = []
    try:
        for rel in sorted(previous, key=lambda r: (not _unlisted_companion(r), r)):  # the manifest first
            (backup / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(folder / rel, backup / rel)
            out.append(rel)
        for rel in new:
            for parent in reversed((folder / rel).relative_to(folder).parents[:-1]):
                if not (folder / parent).is_dir():
                    (folder / parent).mkdir()
                    made.append(folder / parent)
            os.replace(stage / rel, folder / rel)
            into.append(rel)
    except BaseException:
        for rel in reversed(into):
            os.replace(folder / rel, stage / rel)
        for rel in reversed(out):
            os.replace(backup / rel, folder / rel)
        for path in reversed(made):
            path.rmdir()
        shutil.rmtree(backup)
        raise
    shutil.rmtree(backup)
    for rel in previous:  # the earlier pack's subfolders its files left empty (never one holding anything else)
        for parent in (folder / rel).relative_to(folder).parents[:-1]:
            with contextlib.suppress(OSError):
                (folder / parent).rmdir()


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for pkg in VERSIONS:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _environment(doc: dict[str, Any]) -> dict[str, Any]:
    return {"fairmedbench_version": doc.get("fairmedbench_version"), "git_commit": doc.get("git_commit"),
            "python": platform.python_version(), "platform": platform.platform(), "packages": _versions(),
            "recorded_in_result": doc.get("environment")}


def _copy(src: str | Path, dest: Path) -> None:
    """Copy a file into the pack (atomically, store._atomic); nothing when it was written there already."""
    if Path(src).resolve() != dest.resolve():
        data = Path(src).read_bytes()
        store._atomic(dest, lambda tmp: Path(tmp).write_bytes(data))


def _command(folder: Path, command: Sequence[str]) -> Path:
    """command.txt: the command line, shell-quoted, and the folder it ran in (relative paths resolve there)."""
    return store.write_text(folder / "command.txt", f"{shlex.join(command)}\n# working directory: {Path.cwd()}\n")


def write_manifest(folder: Path) -> Path:
    """MANIFEST.sha256: '<sha256>  <relative path>' for every file but itself, sorted (sha256sum -c format)."""
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{digest}  {path.relative_to(folder).as_posix()}")
    return store.write_text(folder / MANIFEST, "\n".join(lines) + "\n")


def _fmt(c: dict[str, Any] | None) -> str:
    if not c or c.get("value") is None:
        return "undefined"
    ci = f" [{c['ci_low']:.3f}, {c['ci_high']:.3f}]" if c.get("ci_low") is not None else ""
    return f"{c['value']:.3f}{ci}"


def _facts(reports: Sequence[dict[str, Any]], task: str) -> list[str]:
    """Per (task, attribute): groups with n, the headline metric per group with its interval, the disparity
    verdict (report/verdicts.py), and the notes on skipped or small groups."""
    from fairmedbench.metrics.specs import headline_metric, metric_spec
    from fairmedbench.report.html import result_notes
    from fairmedbench.report.verdicts import result_answer

    util = headline_metric(task)
    out = []
    for rep in reports:
        counts = rep.get("counts", {})
        per = "; ".join(f"{g} (n = {counts.get(g, {}).get('n', '?')}): {_fmt(rep['metrics'].get(util, {}).get(g))}"
                        for g in rep["groups"])
        out.append(f"- {rep['task']} by {rep['attribute']}: {metric_spec(util).header} overall "
                   f"{_fmt(rep['metrics'].get(util, {}).get('__overall__'))}; per group {per}.")
    answer = result_answer(reports)  # the terminal's and the page's words
    out += [f"- {line}" for line in [answer.headline, *(answer.sentences if len(answer.pairs) > 1 else [])]]
    out += [f"- why intervals and test disagree: {line}" for line in answer.why]
    out += [f"- note: {n}" for rep in reports for n in result_notes(rep)]
    return out


SUMMARY = """# Evidence pack: {title}

Written by fairmedbench {version} on {created}. Every number below is in the files listed; `sha256sum -c {manifest}`
inside this folder checks that no file was changed since it was written. This summary states facts about the
data and the model's outputs; it is not legal advice, and whether they satisfy a requirement is for the
responsible organisation and its assessors to judge.

## What was examined

- Source: {source}
- Test rows evaluated: {n}; sensitive attributes: {attributes}; tasks: {tasks}
- Uncertainty: {n_boot} bootstrap resamples, {level}% percentile intervals{resampling}
- Result id: {run_id}

## Findings (generated from the result; the verdict rules are in fairmedbench/report/verdicts.py)

{facts}

## Files and the requirement each documents

| File | What it holds | Requirement it documents |
|---|---|---|
{rows}

Requirements named (the texts are the authorities; this table only says which file holds the facts they ask
about):
- EU AI Act (Regulation (EU) 2024/1689) Art. 10(2)(f)-(g): examination of the data in view of possible biases,
  and measures to detect them; Art. 10(5): processing of special categories of personal data for bias
  detection (here: the sensitive attributes listed above, only as group labels).
- EU AI Act Art. 15: levels of accuracy declared and consistent, here measured per group.
- US FDA: reporting of performance by subgroup (e.g. sex, age, race) in device submissions.
"""


def _across_seeds(summary: dict[str, Any]) -> list[str]:
    """A run summary's across-seed table as sentences: per (task, attribute), each summary metric's mean ± std and
    Student-t 95% interval over the seeds."""
    from fairmedbench.metrics.specs import metric_spec

    out = []
    for key, metrics in summary.get("across_seeds", {}).items():
        task, _, attribute = key.partition("/")
        parts = [f"{metric_spec(m).header} {v['mean']:.3f} ± {v['std']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]"
                 for m, v in metrics.items() if v.get("std") is not None]
        if parts:
            n = max(v["n_seeds"] for v in metrics.values())
            out.append(f"- {task} by {attribute}, across {n} seeds (mean ± std [t 95% CI]): {'; '.join(parts)}.")
    return out


def write_summary(folder: Path, doc: dict[str, Any], files: list[tuple[str, str, str]], title: str,
                  source: str, more: Sequence[str] = ()) -> Path:
    """summary.md: what was examined, the findings as sentences (`more` after the result's own), and each file
    mapped to what it documents."""
    result = doc["result"]
    meta = result.get("meta", {})
    task = meta["kind"]  # the metric engine's kind: the task whose metrics the result holds (schema-required)
    unit = (result.get("resampling") or meta.get("resampling") or {}).get("unit")
    rows = "\n".join(f"| `{name}` | {what} | {req} |" for name, what, req in files)
    text = SUMMARY.format(
        title=title, version=doc.get("fairmedbench_version"), created=doc.get("created_at"), manifest=MANIFEST,
        source=source, n=meta.get("n_samples", "see the result"), attributes=", ".join(meta.get("attributes", [])),
        tasks=", ".join(meta.get("tasks", [])), n_boot=meta.get("n_boot", "?"),
        level=round(100 * float(meta.get("ci_level", 0.95))),
        resampling=f", resampling unit: {unit}" if unit else "", run_id=doc.get("run_id"),
        facts="\n".join([*_facts(result["reports"], task), *more]), rows=rows)
    return store.write_text(folder / "summary.md", text)


BIAS = "EU AI Act Art. 10(2)(f)-(g), 10(5): examination of possible biases"
ACCURACY = "EU AI Act Art. 15: accuracy levels across groups; FDA: subgroup performance"
TRACE = "traceability of the examination (reproducible from these inputs)"


def evaluate_pack(folder: Path, outcome: EvaluateOutcome, command: Sequence[str]) -> Path:
    """Complete an evaluate pack whose result, table, predictions and audit page `run_evaluate` wrote (or that
    are copied in here): command, environment, summary, manifest."""
    doc, paths = outcome.document, outcome.paths
    names = {"result": "result.json", "predictions": "predictions.parquet", "table": "table.csv",
             "report": "audit.html"}
    placed = {}
    for key, name in names.items():
        if key not in paths:
            continue
        src = Path(paths[key]).resolve()
        if src.parent == folder.resolve():  # written into the pack already (keeps the name the result cites)
            placed[key] = src.name
        else:  # sent elsewhere by --out, --out-table or --report: copied in
            _copy(src, folder / name)
            placed[key] = name
    _command(folder, command)
    store.write_json(folder / "environment.json", _environment(doc))
    first: object = next(iter(doc.get("inputs", {}).values()), {})
    source = first.get("path", "demo predictions") if isinstance(first, dict) else "predictions"
    files = [(placed["report"], "the audit page: disparities first, per-group tables, curves, KS tests", BIAS)
             if "report" in placed else ("(no audit page)", "the audit page covers binary classification only", "—"),
             (placed["result"], "metrics per group with intervals, gaps, tests, thresholds, inputs with hashes",
              f"{ACCURACY}; {BIAS}"),
             (placed["table"], "the same numbers as a tidy table (one row per task, attribute, group, metric)",
              ACCURACY),
             (placed["predictions"], "the per-sample labels, scores and groups every number is computed from",
              TRACE),
             ("command.txt", "the exact command line", TRACE),
             ("environment.json", "package versions, platform, fairmedbench version and git commit", TRACE),
             (MANIFEST, "sha256 of every file (tamper evidence)", TRACE)]
    write_summary(folder, doc, files, f"evaluate {Path(source).name}", source)
    return write_manifest(folder)


def run_pack(folder: Path, outcome: RunOutcome, command: Sequence[str]) -> Path:
    """An evidence pack of a finished run: its report page, every seed's result JSON and predictions, the tidy
    table over seeds, command, environment, summary and manifest; returns the report page it wrote in the run's
    folder (and copied into the pack)."""
    import pandas as pd

    from fairmedbench.report.html import write_run_report

    page = write_run_report(outcome.out_dir, outcome.seed_docs)
    _copy(page, folder / "report.html")
    frames = []
    for res in outcome.seeds:
        seed = res.doc["spec"]["seed"]
        _copy(Path(outcome.out_dir) / f"seed{seed}.json", folder / "results" / f"seed{seed}.json")
        pred = res.doc["predictions"]["file"]
        _copy(Path(outcome.out_dir) / pred, folder / "results" / pred)
        frames.append(res.fairness().to_frame().assign(seed=seed))
    store.write_table(folder / "table.csv", pd.concat(frames, ignore_index=True))
    doc = outcome.seed_docs[0]
    _command(folder, command)
    store.write_json(folder / "environment.json", _environment(doc))
    spec = doc["spec"]
    seeds = ", ".join(str(d["spec"]["seed"]) for d in outcome.seed_docs)
    source = (f"model {spec.get('model')} on dataset {spec.get('dataset')} (usage {spec.get('usage')}, "
              f"mitigation {spec.get('mitigation')}); seeds {seeds}")
    if len(outcome.seed_docs) > 1:  # the per-group findings are one seed's: say which, then the seeds' summary
        source += (f"; the per-group findings below are seed {spec.get('seed')}'s (the first), followed by the "
                   "summary across seeds")
    files = [("report.html", "the run page: disparities first, per-group tables and figures (first seed)", BIAS),
             ("results/seed<k>.json", "each seed's metrics per group with intervals, gaps, tests, run identity",
              f"{ACCURACY}; {BIAS}"),
             ("table.csv", "every seed's numbers as a tidy table (column `seed`)", ACCURACY),
             ("results/seed<k>.predictions.parquet", "per-sample labels, scores and groups of each seed", TRACE),
             ("command.txt", "the exact command line", TRACE),
             ("environment.json", "package versions, platform, fairmedbench version and git commit", TRACE),
             (MANIFEST, "sha256 of every file (tamper evidence)", TRACE)]
    write_summary(folder, {**doc, "run_id": outcome.config.run_id}, files,  # the run's id: its folder's name
                  f"run {spec.get('model')} on {spec.get('dataset')}", source,
                  _across_seeds(outcome.summary) if len(outcome.seed_docs) > 1 else ())
    write_manifest(folder)
    return page


def describe(folder: Path) -> str:
    """The line the CLI prints: the pack's files are its manifest's lines and the manifest (anything else there is
    not the pack's)."""
    n = 1 + sum(1 for line in (Path(folder) / MANIFEST).read_text(encoding="utf-8").splitlines() if _LINE.match(line))
    return f"evidence pack: {folder} ({n} files; check with: cd {folder} && sha256sum -c {MANIFEST})"


__all__ = ["MANIFEST", "check", "describe", "evaluate_pack", "run_pack", "staged", "write_manifest"]
