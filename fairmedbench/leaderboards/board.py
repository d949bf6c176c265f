"""Board building: rows from the stored submissions' summaries, ranked by a documented rule, rendered."""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any

from fairmedbench.engine.store import write_text
from fairmedbench.leaderboards import render
from fairmedbench.leaderboards.submit import SUBMISSION_FILE, SUBMISSION_FORMAT
from fairmedbench.leaderboards.suites import Suite
from fairmedbench.metrics.specs import board_higher_is_better

# (key, header, what it is); which direction is better comes from the MetricSpec registry
COLUMNS = (
    ("utility", "Utility", "overall AUC (classification) or mean DSC (segmentation)"),
    ("worst_group", "Worst group", "lowest group AUC / DSC among groups where it is defined"),
    ("gap", "Gap", "largest minus smallest group AUC / DSC (ΔAUC, ΔDSC)"),
    ("es", "ES", "equity-scaled utility: overall / (1 + Σ|group - overall|) (ES-AUC, ES-DSC)"),
    ("eqodds", "EqOdds", "equalized-odds difference max(ΔTPR, ΔFPR) at the validation threshold"),
    ("ece_gap", "ECE gap", "largest minus smallest group expected calibration error"),
)
RANKING_RULE = (
    "Rows are ranked within each (dataset, usage, attribute) by ES (equity-scaled utility), higher first; "
    "ties are broken by utility, higher first, then by model name and revision. An undefined value (shown as "
    "'n/a': fewer than two groups with a defined metric, or undefined in any task or seed, since every value "
    "is the mean over the suite's tasks and seeds) ranks last, whatever the sort direction. Clicking a "
    "column header re-sorts the table by that column; undefined values stay at the bottom. Rows evaluated on "
    "part of a board's pinned test set (coverage below 100%: a submitter holding part of the images) are ranked "
    "separately from complete rows, in their own rank group marked 'partial', since their numbers come from "
    "another sample of test patients. The model summary orders models by their mean rank over the rows they "
    "answered (lower is better)."
)


def submission_dirs(board_dir: Path) -> list[Path]:
    """Folders of accepted submissions (submissions/<model>/<revision>/), sorted; staging folders excluded."""
    base = Path(board_dir) / "submissions"
    if not base.is_dir():
        return []
    return sorted(p.parent for p in base.glob(f"*/*/{SUBMISSION_FILE}") if not p.parent.name.startswith("."))


def load_rows(board_dir: Path, suite: Suite) -> list[dict[str, Any]]:
    """One row per (submission, entry, attribute) from the submissions' summaries (one small file each)."""
    rows = []
    for sub in submission_dirs(board_dir):
        summary = json.loads((sub / SUBMISSION_FILE).read_text())
        if summary.get("format") != SUBMISSION_FORMAT or summary.get("suite") != {"name": suite.name,
                                                                                 "version": suite.version}:
            continue
        model = summary["model"]
        rel = sub.relative_to(board_dir).as_posix()
        for r in summary["rows"]:
            rows.append({**r, "model": model["name"], "revision": model["revision"],
                         "provenance": {"weights_sha256": model.get("weights_sha256"), "license": model.get("license"),
                                        "family": model.get("family"), "kind": model.get("kind"),
                                        "pretraining_data": model.get("pretraining_data", []),
                                        "accepted_at": summary.get("accepted_at"), "folder": rel,
                                        "runs": r.get("runs", [])}})
    return rows


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def rank_key(row: dict[str, Any]) -> tuple:
    """Sort key of the ranking rule: ES high first, then utility high first, NaN last, then names."""
    es, ut = _num(row["metrics"].get("es")), _num(row["metrics"].get("utility"))
    return (math.isnan(es), -es if not math.isnan(es) else 0.0, math.isnan(ut), -ut if not math.isnan(ut) else 0.0,
            row["model"], row["revision"])


def coverage_group(row: dict[str, Any]) -> str:
    """'complete' or 'partial': rows answering part of the pinned test set are ranked in their own group."""
    cov = row.get("coverage")
    return "partial" if cov is not None and not cov.get("complete", True) else "complete"


def rank_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows ordered by (dataset, usage, attribute, coverage group: complete first) then the ranking rule, each given
    its `rank` in its group."""
    groups: dict[tuple[str, str, str, bool], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["usage"], r["attribute"], coverage_group(r) == "partial"), []).append(r)
    out = []
    for key in sorted(groups):
        for i, r in enumerate(sorted(groups[key], key=rank_key), start=1):
            out.append({**r, "rank": i, "rank_group": coverage_group(r)})
    return out


def model_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, revision): mean rank over its rows, rows answered, mean utility / ES (None if any undefined)."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["model"], r["revision"]), []).append(r)
    out = []
    for (model, rev), rs in by.items():
        def mean(col: str) -> float | None:
            vals = [_num(r["metrics"].get(col)) for r in rs]
            return None if any(math.isnan(v) for v in vals) else sum(vals) / len(vals)
        out.append({"model": model, "revision": rev, "mean_rank": sum(r["rank"] for r in rs) / len(rs),
                    "rows": len(rs), "utility": mean("utility"), "es": mean("es"), "gap": mean("gap"),
                    "flags": sorted({f for r in rs for f in r["flags"]})})
    return sorted(out, key=lambda s: (s["mean_rank"], s["model"], s["revision"]))


def build(board_dir: Path | str, suite: Suite) -> dict[str, Path]:
    """Write index.html, leaderboard.md and board.json for the board's accepted submissions."""
    board_dir = Path(board_dir)
    rows = rank_rows(load_rows(board_dir, suite))
    summary = model_summary(rows)
    generated = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    board = {"suite": {"name": suite.name, "version": suite.version, "description": suite.description},
             "generated_at": generated, "ranking_rule": RANKING_RULE,
             "columns": [{"key": k, "header": h, "better": "high" if board_higher_is_better(k) else "low",
                          "definition": d} for k, h, d in COLUMNS],
             "entries": [e.describe() for e in suite.entries], "models": summary, "rows": rows}
    return {
        "html": write_text(board_dir / "index.html", render.html_page(board)),
        "markdown": write_text(board_dir / "leaderboard.md", render.markdown(board)),
        "json": write_text(board_dir / "board.json", json.dumps(board, indent=1, allow_nan=False) + "\n"),
    }
