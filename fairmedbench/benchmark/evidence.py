"""Evidence packs (`benchmark evaluate ... --evidence DIR`, `benchmark run ... --evidence DIR`): one folder an
auditor can file, tamper-evident.

    DIR/
      audit.html (evaluate) | report.html (run)   the page, answers first
      result.json | results/seed<k>.json           the result document(s), metrics with intervals and tests
      table.csv                                     the tidy table (one row per task, attribute, group, metric)
      predictions.parquet | results/...parquet      the per-sample predictions the numbers come from
      command.txt                                   the exact command line, shell-quoted
      environment.json                              package versions, platform, fairmedbench version, git commit
      summary.md                                    the facts in words, each mapped to the provision that asks for it
      MANIFEST.sha256                               sha256 of every other file, relative paths (`sha256sum -c`)
      MANIFEST.sig                                  with --sign-key: the manifest's signature (benchmark/signing.py)

summary.md states facts about the data (what was measured, on what, with which uncertainty): the operating
threshold and its policy, sensitivity and specificity per group with intervals, the disparity verdicts; it maps
them to EU AI Act Art. 10(2)(f)-(g) (examination of possible biases; Art. 10(5) named as the legal basis for
processing the group labels, not as an examination), Art. 13(3)(b)(v) (performance by group, for deployers),
Art. 15 (accuracy levels declared) and the FDA's subgroup guidance documents by name, says what the manifest
proves (signed or not), and that it is not legal advice. Names from the data are escaped (`md`).
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

from fairmedbench.benchmark.deployer import Audit, articles, level_of, md, result_audit
from fairmedbench.benchmark.signing import MANIFEST, SIGNATURE, Key, sign_manifest
from fairmedbench.engine import store
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.benchmark.evaluate import EvaluateOutcome
    from fairmedbench.benchmark.run import RunOutcome

VERSIONS = ("numpy", "scipy", "pandas", "scikit-learn", "pyarrow", "matplotlib", "jinja2", "torch")


#: top-level names a pack may write; an unlisted one in an earlier pack's folder is refused
PACK_NAMES = ("audit.html", "report.html", "result.json", "result.predictions.parquet", "predictions.parquet",
              "table.csv", "command.txt", "environment.json", "summary.md",
              # compare, study and board-row packs (claim_packs.py)
              "summary.html", "compare.json", "compare.html", "study.html", "study.parquet", "study.csv", "plan.json",
              "row.json", "verification.json")
_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")


def _is_staging(path: Path) -> bool:
    """A staging folder this module makes inside a pack folder (store.staging_dir names)."""
    return path.name.startswith(f"{store.STAGING_PREFIX}evidence") and path.is_dir() and not path.is_symlink()


def _unlisted_companion(rel: str) -> bool:
    """A file beside the manifest that it cannot list (the manifest itself, its signature MANIFEST.sig)."""
    return rel in (MANIFEST, SIGNATURE)


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


def write_manifest(folder: Path, key: Key | None = None) -> Path:
    """MANIFEST.sha256: '<sha256>  <relative path>' for every file but itself and MANIFEST.sig, sorted (sha256sum -c
    format); with `key`, MANIFEST.sig signs it (benchmark/signing.py), else a MANIFEST.sig of a previous pack is
    removed (it would sign another manifest)."""
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel not in (MANIFEST, SIGNATURE):
            lines.append(f"{store.sha256_file(path)}  {rel}")
    manifest = store.write_text(folder / MANIFEST, "\n".join(lines) + "\n")
    if key is not None:
        sign_manifest(folder, key)
    else:
        (folder / SIGNATURE).unlink(missing_ok=True)
    return manifest


def _code(name: str) -> str:
    """A file name as inline code when that is safe in a table cell, else escaped text."""
    return f"`{name}`" if re.fullmatch(r"[\w.<>/-]+", name) else md(name)


def _fmt(c: dict[str, Any] | None) -> str:
    if not c or c.get("value") is None:
        return "undefined"
    ci = f" [{c['ci_low']:.3f}, {c['ci_high']:.3f}]" if c.get("ci_low") is not None else ""
    return f"{c['value']:.3f}{ci}"


#: how each threshold policy (metrics/thresholds.py) chooses the operating threshold
POLICY_TEXT = {
    "fixed": "fixed at {arg}",
    "val_youden": "the score with the highest Youden J (TPR - FPR) on the validation rows",
    "val_best_f1": "the score with the highest F1 on the validation rows",
    "val_fpr": "the smallest score with FPR <= {arg} on the validation rows",
    "val_tpr": "the largest score with TPR >= {arg} on the validation rows",
    "eval_best_f1_fairmedfm": "the score with the highest F1 on the evaluated rows themselves (fairmedfm "
                              "compatibility profile: the test labels choose it)",
}
SENS_SPEC = {"tpr": "sensitivity (TPR)", "tnr": "specificity (TNR)"}


def _threshold_value(value: object) -> str:
    """The threshold as stored, unrounded (a rounded one would misstate which scores are called positive)."""
    return "undefined" if value is None else str(value)


def _policy_origin(spec: dict[str, Any]) -> str:
    """Where the policy came from: an evaluate spec keeps --threshold as given (None: the default); a run's spec
    holds the policy its config resolved."""
    if spec.get("command") != "evaluate":
        return "as the run resolved it: --threshold, else the metric profile's own rule, else `val_youden`"
    if spec.get("threshold"):
        return "the policy asked for with --threshold"
    return ("the default: the metric profile's own rule where it has one, else `val_youden` with validation rows "
            "and `fixed:0.5` without")


def _operating(reports: Sequence[dict[str, Any]], whose: str) -> list[str]:
    """The operating threshold of each task (of each task and attribute where they differ), its policy and where
    the policy came from (`whose`), then every group where sensitivity or specificity is 0 at it."""
    by_task: dict[str, dict[tuple[Any, ...], list[str]]] = {}
    for rep in reports:
        thr = rep.get("thresholds", {}).get("operating")
        if thr:
            key = (_threshold_value(thr.get("value")), thr.get("comparator", ">="), thr.get("policy"),
                   thr.get("source"))
            by_task.setdefault(rep["task"], {}).setdefault(key, []).append(rep["attribute"])
    shared: dict[tuple[Any, ...], list[str]] = {}  # one line per threshold, naming every task (and attribute) at it
    for task, choices in by_task.items():
        for key, attributes in choices.items():
            shared.setdefault(key, []).append(
                md(task) if len(choices) == 1 else f"{md(task)} by {', '.join(md(a) for a in attributes)}")
    out = []
    for (value, comparator, policy, source), where in shared.items():
        name, _, arg = str(policy).partition(":")
        how = POLICY_TEXT.get(name, str(policy)).format(arg=arg)
        why = f" ({md(source)})" if value == "undefined" else ""
        names = ("; " if any(" by " in w for w in where) else ", ").join(where)
        out.append(f"- {names}: a case is called positive when its score {comparator} {value}{why}; policy "
                   f"`{policy}`: {how} ({whose}).")
    for rep in reports:
        for metric, what in SENS_SPEC.items():
            per = rep["metrics"].get(metric, {})
            zero = [g for g in rep["groups"] if (per.get(g) or {}).get("value") == 0]
            if zero:
                names = ", ".join(md(g) for g in zero)
                groups = f"every group ({names})" if len(zero) == len(rep["groups"]) else f"group(s) {names}"
                out.append(f"- {md(rep['task'])} by {md(rep['attribute'])}: at this threshold the {what} is 0 in "
                           f"{groups}.")
    return out


def _per_group(reports: Sequence[dict[str, Any]], task: str, level: int) -> list[str]:
    """One markdown table row per (task, attribute, group), overall first: n, positives (where counted), the
    headline metric, sensitivity and specificity at the operating threshold, each with its `level`% interval."""
    from fairmedbench.metrics.specs import headline_metric, metric_spec

    metrics = [headline_metric(task), *[m for m in SENS_SPEC if any(m in rep["metrics"] for rep in reports)]]
    heads = [metric_spec(metrics[0]).header, *[SENS_SPEC[m][0].upper() + SENS_SPEC[m][1:] for m in metrics[1:]]]
    positives = any("n_pos" in c for rep in reports for c in rep.get("counts", {}).values())
    cols = ["Task", "Attribute", "Group", "n", *(["Positives"] if positives else []),
            *[f"{h} [{level}% CI]" for h in heads]]
    rows = [f"| {' | '.join(cols)} |", "|" + "---|" * len(cols)]
    for rep in reports:
        counts = rep.get("counts", {})
        for g in ["__overall__", *rep["groups"]]:
            c = counts.get(g, {})
            cells = [md(rep["task"]), md(rep["attribute"]), "all" if g == "__overall__" else md(g), str(c.get("n", "")),
                     *([str(c.get("n_pos", ""))] if positives else []),
                     *[_fmt(rep["metrics"].get(m, {}).get(g)) for m in metrics]]
            rows.append(f"| {' | '.join(cells)} |")
    return rows


def _facts(reports: Sequence[dict[str, Any]], task: str) -> list[str]:
    """The result's answer (report/verdicts.py: the terminal's and the pages' words, names escaped): the opening
    sentence, one sentence per (task, attribute) when there are several, why intervals and tests disagree, and the
    notes on skipped or small groups."""
    from fairmedbench.report.html import result_notes
    from fairmedbench.report.verdicts import result_answer

    answer = result_answer(reports)
    out = [f"- {md(line)}" for line in [answer.headline, *(answer.sentences if len(answer.pairs) > 1 else [])]]
    out += [f"- why intervals and test disagree: {md(line)}" for line in answer.why]
    out += [f"- note: {md(n)}" for rep in reports for n in result_notes(rep)]
    return out


def crossed_cells(reports: Sequence[dict[str, Any]]) -> list[str]:
    """One line per (task, crossed attribute) (sex*age): the attributes it crosses, every cell's test count with its
    positives and negatives, the cells below the minimum size (point estimates, no interval) and those with no
    positive or no negative (the engine's skip reason)."""
    from fairmedbench.metrics.groups import CROSS

    out = []
    for rep in reports:
        if CROSS not in rep["attribute"]:
            continue
        counts = rep.get("counts", {})
        cells = "; ".join(f"{md(g)} n={c.get('n', 0)}" + (f" ({c['n_pos']} positive, {c['n_neg']} negative)"
                                                            if "n_pos" in c and "n_neg" in c else "")
                          for g in rep["groups"] for c in [counts.get(g, {})])
        parts = ", ".join(md(p) for p in rep["attribute"].split(CROSS))
        n_cells = len(rep["groups"])
        line = f"- {md(rep['task'])} by {md(rep['attribute'])} crosses {parts} into {n_cells} cells: {cells}."
        if rep.get("small_groups"):
            small = ", ".join(md(g) for g in rep["small_groups"])
            line += f" Below the minimum size, a point estimate and no interval: {small}."
        line += "".join(f" {md(g)}: {md(why)}." for g, why in rep.get("skipped", {}).items())
        out.append(line)
    return out


SUMMARY = """# Evidence pack: {title}

Written by fairmedbench {version} on {created}. Every number below is in the files listed. This summary states
facts about the data and the model's outputs; it is not legal advice, and whether they satisfy a requirement is
for the responsible organisation and its assessors to judge.

What the manifest proves: `benchmark evidence verify DIR` (or `sha256sum -c {manifest}` inside this folder) checks
every file against the sha256 that `{manifest}` lists. {signed}

## What was examined

- Source: {source}
- Test rows evaluated: {n}; sensitive attributes: {attributes}; tasks: {tasks}
- Uncertainty: {n_boot} bootstrap resamples, {level}% percentile intervals{resampling}
- Result id: {run_id}

## Operating threshold

{operating}

## Performance per group (intervals: {level}% bootstrap)

{per_group}

## Findings (generated from the result; the verdict rules are in fairmedbench/report/verdicts.py)

{facts}

## Files and the fact each holds

| File | What it holds | Provision that asks for it |
|---|---|---|
{rows}

## Which provision asks for which fact

The texts are the authorities; this section only says which facts above bear on which provision.

- EU AI Act (Regulation (EU) 2024/1689) Art. 10(2)(f)-(g): data governance of training, validation and testing
  data sets, including (f) examination in view of possible biases and (g) appropriate measures to detect,
  prevent and mitigate them. Facts here: the per-group table, the gaps between groups with their permutation
  tests (Findings), the notes on small or skipped groups.
- EU AI Act Art. 10(5) is not an examination: it is the legal basis on which a provider may exceptionally
  process special categories of personal data (e.g. health data, racial or ethnic origin) to the extent
  strictly necessary for the bias detection and correction of Art. 10(2)(f)-(g), subject to appropriate
  safeguards and conditions (among them: no other data, including synthetic or anonymised data, would do;
  pseudonymisation; access controls; no transmission to other parties; deletion once the bias is corrected
  or the retention period ends; records of why the processing was necessary). This pack does not show those
  conditions are met; note that its per-sample file holds each sample's group labels, so sharing the pack
  shares them.
- EU AI Act Art. 13(3)(b)(v): the instructions for use give deployers, when appropriate, the system's
  performance regarding specific persons or groups of persons on which it is intended to be used. Facts here:
  the per-group table (AUC, sensitivity and specificity with intervals) at the operating threshold above.
- EU AI Act Art. 15(1) and (3): an appropriate level of accuracy, performing consistently, and the levels of
  accuracy and the relevant accuracy metrics declared in the instructions for use. Facts here: the overall
  and per-group metrics with intervals, and the threshold they hold at.
- US FDA guidance (non-binding recommendations on subgroup data in device submissions): "Evaluation of
  Sex-Specific Data in Medical Device Clinical Studies" (final, August 2014); "Evaluation and Reporting of
  Age-, Race-, and Ethnicity-Specific Data in Medical Device Clinical Studies" (final, September 2017);
  "Artificial Intelligence-Enabled Device Software Functions: Lifecycle Management and Marketing Submission
  Recommendations" (draft, January 2025), whose performance validation recommendations include subgroup
  analyses. Facts here: the per-group table and the Findings, for the attributes examined.
"""


def _signed_text(key: Key | None) -> str:
    """What the manifest proves, as summary.md states it."""
    if key is None:
        return (f"It is not signed: the check finds accidental changes (a bad copy, a truncated transfer, an edit "
                f"by mistake), but a passing check does not show who wrote the pack: anyone who edits a file on "
                f"purpose can regenerate {MANIFEST}.")
    how = ("an HMAC-SHA256 of it with a secret key: only a holder of the secret can produce it, and only a holder "
           "can check it" if key.algorithm == "hmac-sha256" else
           "an Ed25519 signature of it: only the private key's holder can produce it, and anyone can check it "
           "with the public key")
    return (f"`{SIGNATURE}` holds {how} (key id {key.key_id}); `benchmark evidence verify DIR --key ...` fails once "
            f"any file is edited, added or removed, or the manifest is regenerated, unless it is signed again with "
            f"the same key.")


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
            out.append(f"- {md(task)} by {md(attribute)}, across {n} seeds (mean ± std [t 95% CI]): "
                       f"{'; '.join(parts)}.")
    return out


def write_summary(folder: Path, doc: dict[str, Any], files: list[tuple[str, str, str]], title: str,
                  source: str, more: Sequence[str] = (), key: Key | None = None,
                  audits: Sequence[Audit] = ()) -> Path:
    """summary.md: what the manifest proves, what was examined, the operating threshold, sensitivity and
    specificity per group, the findings as sentences (`more`, markdown lines, after the result's own), each file
    and the provision each fact bears on, then the Art. 13/14/72 sections of `audits` (deployer.py); every name
    from the data escaped."""
    result = doc["result"]
    meta = result.get("meta", {})
    task = meta["kind"]  # the metric engine's kind: the task whose metrics the result holds (schema-required)
    unit = (result.get("resampling") or meta.get("resampling") or {}).get("unit")
    rows = "\n".join(f"| {_code(name)} | {what} | {req} |" for name, what, req in files)
    operating = _operating(result["reports"], _policy_origin(doc.get("spec") or {}))
    level = round(100 * float(meta.get("ci_level", 0.95)))
    text = SUMMARY.format(
        title=md(title), version=doc.get("fairmedbench_version"), created=doc.get("created_at"), manifest=MANIFEST,
        signed=_signed_text(key), source=md(source), n=meta.get("n_samples", "see the result"),
        attributes=", ".join(md(a) for a in meta.get("attributes", [])),
        tasks=", ".join(md(t) for t in meta.get("tasks", [])), n_boot=meta.get("n_boot", "?"),
        level=level, resampling=f", resampling unit: {md(unit)}" if unit else "", run_id=doc.get("run_id"),
        operating="\n".join(operating) or "- none: no task of this result is thresholded",
        per_group="\n".join(_per_group(result["reports"], task, level)),
        facts="\n".join([*_facts(result["reports"], task), *crossed_cells(result["reports"]), *more]), rows=rows)
    return store.write_text(folder / "summary.md", text + (f"\n{articles(audits)}" if audits else ""))


BIAS = "EU AI Act Art. 10(2)(f)-(g): examination in view of possible biases"
GROUPS = ("EU AI Act Art. 13(3)(b)(v): performance regarding groups, for deployers; Art. 15(3): accuracy levels "
          "declared; FDA subgroup guidance")
TRACE = "traceability of the examination (reproducible from these inputs)"


def _manifest_rows(key: Key | None) -> list[tuple[str, str, str]]:
    rows = [(MANIFEST, "sha256 of every file (integrity; see above for what it proves)", TRACE)]
    if key is not None:
        rows.append((SIGNATURE, f"the manifest's {key.algorithm} signature and the key's id", TRACE))
    return rows


def evaluate_pack(folder: Path, outcome: EvaluateOutcome, command: Sequence[str], key: Key | None = None) -> Path:
    """Complete an evaluate pack whose result, table, predictions and audit page `run_evaluate` wrote (or that
    are copied in here): command, environment, summary, manifest (signed with `key`)."""
    doc, paths = outcome.document, outcome.paths
    names = {"result": "result.json", "predictions": "predictions.parquet", "table": "table.csv",
             "report": "audit.html"}
    placed = {}
    for what, name in names.items():
        if what not in paths:
            continue
        src = Path(paths[what]).resolve()
        if src.parent == folder.resolve():  # written into the pack already (keeps the name the result cites)
            placed[what] = src.name
        else:  # sent elsewhere by --out, --out-table or --report: copied in
            _copy(src, folder / name)
            placed[what] = name
    _command(folder, command)
    store.write_json(folder / "environment.json", _environment(doc))
    first: object = next(iter(doc.get("inputs", {}).values()), {})
    source = first.get("path", "demo predictions") if isinstance(first, dict) else "predictions"
    files = [(placed["report"], "the audit page: disparities first, per-group tables, curves, KS tests", BIAS)
             if "report" in placed else ("(no audit page)", "the audit page covers binary classification only", "—"),
             (placed["result"], "metrics per group with intervals, gaps, tests, thresholds, inputs with hashes",
              f"{GROUPS}; {BIAS}"),
             (placed["table"], "the same numbers as a tidy table (one row per task, attribute, group, metric)",
              GROUPS),
             (placed["predictions"], "the per-sample labels, scores and groups every number is computed from",
              TRACE),
             ("command.txt", "the exact command line", TRACE),
             ("environment.json", "package versions, platform, fairmedbench version and git commit", TRACE),
             *_manifest_rows(key)]
    write_summary(folder, doc, files, f"evaluate {Path(source).name}", source, key=key,
                  audits=[_evaluate_audit(doc, placed, source)])
    return write_manifest(folder, key)


def _evaluate_audit(doc: dict[str, Any], placed: dict[str, str], source: str) -> Audit:
    """The deployer sections' view of an evaluate result: the pack's result.json is the monitor's baseline (the
    predictions it cites copied to that name first when the pack holds them under another)."""
    meta = doc["result"]["meta"]
    spec = doc.get("spec") or {}
    cited = (doc.get("files") or {}).get("predictions")
    steps = (("cp", placed["predictions"], str(cited)),) if cited and placed.get("predictions") not in (None, cited) \
        else ()
    use = (f"the scores in {md(source)} for task(s) {', '.join(md(t) for t in meta.get('tasks', []))}, on the "
           f"population of its {meta.get('n_samples', '?')} test rows; the pack does not name the model that produced "
           "them: the instructions for use must.")
    return Audit("", doc["result"]["reports"], meta["kind"], use, placed.get("result", "result.json"),
                 tuple(" ".join(step) for step in steps), {str(t): str(t) for t in spec.get("labels") or []},
                 {str(a): str(a) for a in spec.get("attributes") or meta.get("attributes", [])},
                 meta.get("n_samples"), level=level_of(meta))


def run_pack(folder: Path, outcome: RunOutcome, command: Sequence[str], key: Key | None = None) -> Path:
    """An evidence pack of a finished run: its report page, every seed's result JSON and predictions, the tidy
    table over seeds, command, environment, summary and manifest (signed with `key`); returns the report page it
    wrote in the run's folder (and copied into the pack)."""
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
              f"{GROUPS}; {BIAS}"),
             ("table.csv", "every seed's numbers as a tidy table (column `seed`)", GROUPS),
             ("results/seed<k>.predictions.parquet", "per-sample labels, scores and groups of each seed", TRACE),
             ("command.txt", "the exact command line", TRACE),
             ("environment.json", "package versions, platform, fairmedbench version and git commit", TRACE),
             *_manifest_rows(key)]
    write_summary(folder, {**doc, "run_id": outcome.config.run_id}, files,  # the run's id: its folder's name
                  f"run {spec.get('model')} on {spec.get('dataset')}", source,
                  _across_seeds(outcome.summary) if len(outcome.seed_docs) > 1 else (), key=key,
                  audits=[result_audit(doc, "", run_use(spec), "results")])
    write_manifest(folder, key)
    return page


def run_use(spec: dict[str, Any]) -> str:
    """A run's intended use as examined (Art. 13), from its spec."""
    return (f"model {md(spec.get('model'))} (weights {md(spec.get('weights'))}), usage {md(spec.get('usage'))}, "
            f"mitigation {md(spec.get('mitigation'))}, trained and tested on dataset {md(spec.get('dataset'))} "
            f"(split seed {spec.get('split_seed')}, seed {spec.get('seed')}); the numbers hold on its test split.")


def describe(folder: Path) -> str:
    """The line the CLI prints: the pack's files (its manifest's lines, the manifest and its signature; anything else
    there is not the pack's), whether it is signed, and the command that checks it."""
    folder = Path(folder)
    signed = (folder / SIGNATURE).is_file()
    lines = (folder / MANIFEST).read_text(encoding="utf-8").splitlines()
    n = 1 + signed + sum(1 for line in lines if _LINE.match(line))
    return (f"evidence pack: {folder} ({n} files, {'signed' if signed else 'unsigned'}; check with: benchmark "
            f"evidence verify {folder})")


__all__ = ["MANIFEST", "SIGNATURE", "check", "describe", "evaluate_pack", "md", "run_pack", "staged",
           "write_manifest"]
