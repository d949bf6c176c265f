"""Board building: rows from the stored submissions' summaries, ranked by a documented rule, rendered."""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairmedbench.engine.store import write_text
from fairmedbench.errors import InputError
from fairmedbench.leaderboards import render, seal
from fairmedbench.leaderboards.flags import (
    NEVER_VERIFIED_FLAGS,
    UNRANKED_FLAGS,
    UNTIL_VERIFIED_FLAGS,
    Facts,
    SeedPredictions,
    legend,
    read_predictions,
    row_flags,
)
from fairmedbench.leaderboards.recompute import TOLERANCE
from fairmedbench.leaderboards.seal import BoardKey
from fairmedbench.leaderboards.submit import (
    SUBMISSION_FILE,
    SUBMISSION_FORMAT,
    differences,
    revalidate_stored,
    revision_label,
    weights_identity,
)
from fairmedbench.leaderboards.suites import Suite
from fairmedbench.leaderboards.tiers import TIERS, entry_record, read_verification, tier_of
from fairmedbench.metrics.specs import board_higher_is_better, board_metrics

# (key, header, what it is); which metric fills it for each task, and which direction is better, come from the
# MetricSpec registry (`board_columns`)
COLUMNS = (
    ("utility", "Utility", "the task's headline metric on the whole test set"),
    ("worst_group", "Worst group", "the headline metric of the lowest group among groups where it is defined"),
    ("gap", "Gap", "largest minus smallest group value of the headline metric"),
    ("es", "ES", "equity-scaled utility: overall / (1 + Σ|group - overall|)"),
    ("eqodds", "EqOdds", "equalized-odds difference max(ΔTPR, ΔFPR) at the validation threshold"),
    ("ece_gap", "ECE gap", "largest minus smallest group expected calibration error"),
)
RANKING_RULE = (
    "Only verified rows are ranked: a row is ranked once `benchmark verify` re-ran the model from its declared "
    "weights and reproduced its per-sample scores (recomputing the numbers from submitted predictions proves the "
    "arithmetic, not where the predictions came from). Self-reported rows are listed in their own table, unranked, "
    "with their flags; a row whose weights are not provided (no sha256 in model.json) can never be verified. "
    "Before any row is shown, the board checks each submission's seal (an HMAC under the board's key over all its "
    "files) and recomputes every shown number from its stored predictions; a submission whose files differ from "
    "the seal or whose numbers differ from the recomputation is listed as refused, with the reason and no number, "
    "and never ranked. "
    "Verified rows are ranked within each (dataset, usage, attribute) by ES (equity-scaled utility), higher first; "
    "ties are broken by utility, higher first, then by model name and revision. A task with no ES metric "
    "(multi-class) ranks by utility, its headline metric (macro AUC), higher first. A verified row flagged "
    "near-perfect or duplicate predictions (only the later of two near-identical submissions, by accept time, is "
    "flagged) is shown but not ranked (rank '—', the reason in its flags); an 'implausible group scores' flag keeps "
    "a row unranked until it is verified. An undefined value (shown as "
    "'n/a': fewer than two groups with a defined metric, or undefined in any task or seed, since every value "
    "is the mean over the suite's tasks and seeds) ranks last, whatever the sort direction. Clicking a "
    "column header re-sorts the table by that column; undefined values stay at the bottom. Rows evaluated on "
    "part of a board's pinned test set (coverage below 100%: a submitter holding part of the images) are ranked "
    "separately from complete rows, in their own rank group marked 'partial', since their numbers come from "
    "another sample of test patients. The model summary orders models by their mean rank over their ranked rows "
    "(lower is better; none when no row is ranked)."
)
NOT_RERUN = "self-reported: not re-run"
NEVER_VERIFIED = "weights not provided, can never be verified"
MAX_REASONS = 3  # lines of a refused submission's reasons shown on the page


def board_columns(suite: Suite) -> list[dict[str, Any]]:
    """The page's columns for a suite: those that some task of its entries fills (a multi-class-only board has no
    ES, EqOdds or ECE gap), each with the metric that fills it per task (from the MetricSpec registry)."""
    tasks = list(dict.fromkeys(e.task for e in suite.entries))
    out = []
    for key, header, definition in COLUMNS:
        fills = {t: board_metrics(t)[key] for t in tasks if key in board_metrics(t)}
        if fills:
            per_task = "; ".join(f"{t}: {spec.name}" for t, spec in fills.items())
            out.append({"key": key, "header": header, "better": "high" if board_higher_is_better(key) else "low",
                        "definition": f"{definition} ({per_task})",
                        "metrics": [{"task": t, "name": spec.name, "label": spec.header} for t, spec in fills.items()]})
    return out


def submission_dirs(board_dir: Path) -> list[Path]:
    """Folders of accepted submissions (submissions/<model>/<revision>/), sorted; staging folders excluded."""
    base = Path(board_dir) / "submissions"
    if not base.is_dir():
        return []
    return sorted(p.parent for p in base.glob(f"*/*/{SUBMISSION_FILE}") if not p.parent.name.startswith("."))


def _predictions(sub: Path, rows: list[dict[str, Any]]
                 ) -> tuple[dict[str, list[SeedPredictions]], dict[str, set], dict[str, set]]:
    """Per entry of a stored submission: its seeds' test predictions, the weight identities of its runs and the
    precisions its runs recorded."""
    preds: dict[str, list[SeedPredictions]] = {}
    weights: dict[str, set] = {}
    precisions: dict[str, set] = {}
    for r in rows:
        if r["entry"] in preds:
            continue
        preds[r["entry"]], weights[r["entry"]], precisions[r["entry"]] = [], set(), set()
        for run in r.get("runs", []):
            doc = json.loads((sub / run["file"]).read_text())
            block = doc["predictions"]
            data = (sub / Path(run["file"]).parent / block["file"]).read_bytes()
            preds[r["entry"]].append(read_predictions(data, block, int(run["seed"])))
            weights[r["entry"]].add(str(doc["spec"].get("weights")))
            precisions[r["entry"]].add(str(doc["spec"].get("precision")))
    return preds, weights, precisions


def _metric_text(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.4g}"


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= TOLERANCE * max(1.0, abs(float(b)))


def _differences(stored: dict[str, Any], again: dict[str, Any]) -> list[str]:
    """What a stored summary shows that its recomputation does not give: every row's numbers, coverage, external
    results and runs, and the model, card and weights shown beside them."""
    out: list[str] = []
    for k in ("model", "card", "weights", "revision_label"):
        out += differences(stored.get(k), again.get(k), k)
    mine = {(r.get("entry"), r.get("attribute")): r for r in stored.get("rows", [])}
    theirs = {(r["entry"], r["attribute"]): r for r in again["rows"]}
    for key in sorted(set(mine) ^ set(theirs), key=str):
        out.append(f"row {key[0]} / {key[1]}: {'not produced by recomputation' if key in mine else 'missing'}")
    for key in sorted(set(mine) & set(theirs)):
        a, b = mine[key], theirs[key]
        where = f"{key[0]} / {key[1]}"
        for col in sorted(set(a.get("metrics", {})) | set(b["metrics"])):
            x, y = a.get("metrics", {}).get(col), b["metrics"].get(col)
            if not _same(x, y):
                out.append(f"{where}: {col} reported {_metric_text(x)}, recomputed {_metric_text(y)}")
        for k in ("dataset", "usage", "task", "profile", "seeds", "coverage", "external", "runs"):
            out += differences(a.get(k), b.get(k), f"{where}: {k}")
    return out


def check_submission(sub: Path, suite: Suite, key: BoardKey) -> tuple[dict[str, Any] | None, str | None, list[str]]:
    """(summary, content hash, []) when a stored submission's files are the ones the board sealed and every number
    its summary shows is what `submit`'s checks and recomputation give again from its stored files; else
    (None, None, the reasons it is refused)."""
    content, why = seal.check(sub, key)
    if content is None:
        return None, None, [str(why)]
    summary = json.loads((sub / SUBMISSION_FILE).read_text())
    if summary.get("format") != SUBMISSION_FORMAT or summary.get("suite") != {"name": suite.name,
                                                                             "version": suite.version}:
        return None, None, [f"answers suite {summary.get('suite')}, not {suite.name!r} version {suite.version!r}"]
    reasons, again = revalidate_stored(sub, suite)
    if reasons or again is None:
        return None, None, [f"the stored files no longer pass submit's checks: {r}" for r in reasons]
    diffs = _differences(summary, again)
    return (summary, content, []) if not diffs else (None, None, diffs)


Checker = Callable[[Path, Suite, BoardKey], tuple[dict[str, Any] | None, str | None, list[str]]]


def load_rows(board_dir: Path, suite: Suite, key: BoardKey, progress: Callable[[str], None] | None = None,
              checker: Checker = check_submission) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows, refused): one row per (submission, entry, attribute) of every submission whose seal checks and whose
    numbers recompute (`check_submission`), with its flags (`flags.FLAGS`, computed here against every other
    accepted submission) and its tier (`tiers`); and one entry per refused submission with its reasons. `checker` is
    `check_submission` or a memo of it (the board server's, keyed on each folder's files)."""
    board_dir = Path(board_dir)
    subs, refused = [], []
    folders = submission_dirs(board_dir)
    for n, sub in enumerate(folders, start=1):
        rel = sub.relative_to(board_dir).as_posix()
        if progress is not None:
            progress(f"checking submission {n}/{len(folders)}: {rel} (seal, every number recomputed)")
        summary, content, reasons = checker(sub, suite, key)
        if summary is None or content is None:
            refused.append({"folder": rel, "model": sub.parent.name, "revision": sub.name,
                            "reasons": reasons[:MAX_REASONS] + ([f"... and {len(reasons) - MAX_REASONS} more"]
                                                                if len(reasons) > MAX_REASONS else [])})
            continue
        subs.append((sub, summary, *_predictions(sub, summary["rows"]), read_verification(sub, key, content)))
    # accept order: a duplicate is flagged on the later submission only (the earlier keeps a clean row)
    subs.sort(key=lambda s: (str(s[1].get("accepted_at") or ""), s[0].as_posix()))
    rows = []
    for i, (sub, summary, preds, weights, precisions, (record, ignored)) in enumerate(subs):
        model = summary["model"]
        rel = sub.relative_to(board_dir).as_posix()
        identity = summary.get("weights", weights_identity(model.get("weights_sha256"), None))
        for r in summary["rows"]:
            entry = suite.entry(r["entry"])
            others = [(f"{s[1]['model']['name']} {s[1]['model']['revision']}", s[2][r["entry"]])
                      for s in subs[:i] if r["entry"] in s[2]]
            check = entry_record(record, r["entry"])
            facts = Facts(model, summary.get("card"), entry, r["attribute"].split("|")[0], preds[r["entry"]],
                          frozenset(weights[r["entry"]]), others, check)
            flags = row_flags(facts)
            never = NEVER_VERIFIED if identity is None or any(f["key"] in NEVER_VERIFIED_FLAGS for f in flags) \
                else None
            board_tolerance = min(suite.tolerance(p) for p in precisions[r["entry"]])
            tier, note = tier_of(check, board_tolerance, never)
            rows.append({**r, "model": model["name"], "revision": model["revision"],
                         "revision_label": summary.get("revision_label", revision_label(model, identity)),
                         "weights": identity, "flags": flags, "tier": tier, "tier_note": ignored or note,
                         "verification": check, "board_tolerance": board_tolerance,
                         "tolerance": min(check["tolerance"], board_tolerance) if tier == "verified" and check
                         else None,
                         "provenance": {"weights_sha256": model.get("weights_sha256"), "license": model.get("license"),
                                        "family": model.get("family"), "kind": model.get("kind"),
                                        "pretraining_data": model.get("pretraining_data", []),
                                        "description": (summary.get("card") or {}).get("description"),
                                        "accepted_at": summary.get("accepted_at"), "folder": rel,
                                        "runs": r.get("runs", [])}})
    return rows, refused


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def unranked_reason(row: dict[str, Any]) -> str | None:
    """Why a row is shown but not ranked, or None when it is ranked: a self-reported row is never ranked (with
    the UNTIL_VERIFIED_FLAGS it carries named too); any row with an UNRANKED_FLAGS flag is not ranked."""
    verified = row.get("tier") == "verified"
    labels = [f["label"] for f in row["flags"] if f["key"] in UNRANKED_FLAGS
              or (f["key"] in UNTIL_VERIFIED_FLAGS and not verified)]
    if not verified:
        labels.insert(0, f"self-reported: {row['tier_note']}" if row.get("tier_note") else NOT_RERUN
                      if row.get("weights", "") is not None else f"self-reported: {NEVER_VERIFIED}")
    return ", ".join(labels) if labels else None


def rank_key(row: dict[str, Any]) -> tuple:
    """Sort key of the ranking rule: ranked rows first, verified before self-reported, unranked rows without a
    distrust flag before those with one, ES high first, then utility high first, NaN last, then names."""
    es, ut = _num(row["metrics"].get("es")), _num(row["metrics"].get("utility"))
    unranked = unranked_reason(row) is not None
    distrusted = unranked and any(f["key"] in UNRANKED_FLAGS + UNTIL_VERIFIED_FLAGS for f in row["flags"])
    return (unranked, row.get("tier") != "verified", distrusted, math.isnan(es),
            -es if not math.isnan(es) else 0.0, math.isnan(ut), -ut if not math.isnan(ut) else 0.0,
            row["model"], row["revision"])


def coverage_group(row: dict[str, Any]) -> str:
    """'complete' or 'partial': rows answering part of the pinned test set are ranked in their own group."""
    cov = row.get("coverage")
    return "partial" if cov is not None and not cov.get("complete", True) else "complete"


def rank_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows ordered by (dataset, usage, attribute, coverage group: complete first) then the ranking rule, each given
    its `rank` in its group (None for an unranked row, with the reason in `unranked`)."""
    groups: dict[tuple[str, str, str, bool], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["usage"], r["attribute"], coverage_group(r) == "partial"), []).append(r)
    out = []
    for key in sorted(groups):
        for i, r in enumerate(sorted(groups[key], key=rank_key), start=1):
            why = unranked_reason(r)
            out.append({**r, "rank": None if why else i, "rank_group": coverage_group(r), "unranked": why})
    return out


def model_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, revision): mean rank over its ranked rows (None if none), rows answered, mean utility / ES
    (None if any undefined)."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["model"], r["revision"]), []).append(r)
    out = []
    for (model, rev), rs in by.items():
        def mean(col: str) -> float | None:
            vals = [_num(r["metrics"].get(col)) for r in rs]  # noqa: B023 (called within this iteration)
            return None if any(math.isnan(v) for v in vals) else sum(vals) / len(vals)
        ranks = [r["rank"] for r in rs if r["rank"] is not None]
        out.append({"model": model, "revision": rev, "mean_rank": sum(ranks) / len(ranks) if ranks else None,
                    "rows": len(rs), "utility": mean("utility"), "es": mean("es"), "gap": mean("gap"),
                    "flags": sorted({f["label"] for r in rs for f in r["flags"]}),
                    "tiers": sorted({r["tier"] for r in rs})})
    return sorted(out, key=lambda s: (s["mean_rank"] is None, s["mean_rank"] or 0.0, s["model"], s["revision"]))


def document(board_dir: Path | str, suite: Suite, progress: Callable[[str], None] | None = None,
             checker: Checker = check_submission) -> dict[str, Any]:
    """The board's content (what board.json holds and the page shows): each submission's seal checked under the
    board's key and every number recomputed from its stored predictions first (`check_submission`); a submission
    that fails is listed as refused, with no number and the reason. A board without submissions needs no key."""
    board_dir = Path(board_dir)
    key = seal.board_key(board_dir)
    if key is None and submission_dirs(board_dir):
        raise InputError(f"board {suite.name!r} has no key ({seal.KEY_ENV} is unset and {board_dir / seal.KEY_FILE} "
                         f"is absent), so the seals of its submissions cannot be checked; set {seal.KEY_ENV} to the "
                         "key they were sealed with")
    found, refused = load_rows(board_dir, suite, key, progress, checker) if key is not None else ([], [])
    rows = rank_rows(found)
    summary = model_summary(rows)
    generated = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return {"suite": {"name": suite.name, "version": suite.version, "description": suite.description,
                      "verification_tolerance": dict(suite.tolerances)},
            "generated_at": generated, "ranking_rule": RANKING_RULE,
            "columns": board_columns(suite),
            "entries": [e.describe() for e in suite.entries], "flag_legend": legend(), "tiers": list(TIERS),
            "models": summary, "rows": rows, "refused": refused}


def build(board_dir: Path | str, suite: Suite, progress: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Write index.html, leaderboard.md and board.json for the board's submissions (`document`). `progress` gets one
    line per submission."""
    board_dir = Path(board_dir)
    if seal.board_key(board_dir) is None:
        raise InputError(f"board {suite.name!r} has no key ({seal.KEY_ENV} is unset and {board_dir / seal.KEY_FILE} "
                         f"is absent), so the seals of its submissions cannot be checked; set {seal.KEY_ENV} to the "
                         "key they were sealed with")
    board = document(board_dir, suite, progress)
    return {
        "html": write_text(board_dir / "index.html", render.html_page(board)),
        "markdown": write_text(board_dir / "leaderboard.md", render.markdown(board)),
        "json": write_text(board_dir / "board.json", json.dumps(board, indent=1, allow_nan=False) + "\n"),
    }
