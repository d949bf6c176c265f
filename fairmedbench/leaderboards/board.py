"""Board building: rows from the stored submissions' summaries, ranked by a documented rule, rendered."""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any

from fairmedbench.engine.store import write_text
from fairmedbench.leaderboards import render
from fairmedbench.leaderboards.flags import Facts, SeedPredictions, legend, read_predictions, row_flags
from fairmedbench.leaderboards.submit import SUBMISSION_FILE, SUBMISSION_FORMAT
from fairmedbench.leaderboards.suites import Suite
from fairmedbench.leaderboards.tiers import TIERS, entry_record, read_verification, tier_of
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
    "column header re-sorts the table by that column; undefined values stay at the bottom. The model summary "
    "orders models by their mean rank over the rows they answered (lower is better)."
)


def submission_dirs(board_dir: Path) -> list[Path]:
    """Folders of accepted submissions (submissions/<model>/<revision>/), sorted; staging folders excluded."""
    base = Path(board_dir) / "submissions"
    if not base.is_dir():
        return []
    return sorted(p.parent for p in base.glob(f"*/*/{SUBMISSION_FILE}") if not p.parent.name.startswith("."))


def _predictions(sub: Path, rows: list[dict[str, Any]]) -> tuple[dict[str, list[SeedPredictions]], dict[str, set]]:
    """Per entry of a stored submission: its seeds' test predictions and the weight identities of its runs."""
    preds: dict[str, list[SeedPredictions]] = {}
    weights: dict[str, set] = {}
    for r in rows:
        if r["entry"] in preds:
            continue
        preds[r["entry"]], weights[r["entry"]] = [], set()
        for run in r.get("runs", []):
            doc = json.loads((sub / run["file"]).read_text())
            block = doc["predictions"]
            data = (sub / Path(run["file"]).parent / block["file"]).read_bytes()
            preds[r["entry"]].append(read_predictions(data, block, int(run["seed"])))
            weights[r["entry"]].add(str(doc["spec"].get("weights")))
    return preds, weights


def load_rows(board_dir: Path, suite: Suite) -> list[dict[str, Any]]:
    """One row per (submission, entry, attribute) from the submissions' summaries, with its flags (`flags.FLAGS`,
    computed here against every other accepted submission) and its tier (`tiers`)."""
    board_dir = Path(board_dir)
    subs = []
    for sub in submission_dirs(board_dir):
        summary = json.loads((sub / SUBMISSION_FILE).read_text())
        if summary.get("format") != SUBMISSION_FORMAT or summary.get("suite") != {"name": suite.name,
                                                                                 "version": suite.version}:
            continue
        subs.append((sub, summary, *_predictions(sub, summary["rows"]), read_verification(sub)))
    rows = []
    for sub, summary, preds, weights, record in subs:
        model = summary["model"]
        rel = sub.relative_to(board_dir).as_posix()
        for r in summary["rows"]:
            entry = suite.entry(r["entry"])
            others = [(f"{s[1]['model']['name']} {s[1]['model']['revision']}", s[2][r["entry"]])
                      for s in subs if s[0] != sub and r["entry"] in s[2]]
            check = entry_record(record, r["entry"])
            facts = Facts(model, summary.get("card"), entry, r["attribute"].split("|")[0], preds[r["entry"]],
                          frozenset(weights[r["entry"]]), others, check)
            rows.append({**r, "model": model["name"], "revision": model["revision"], "flags": row_flags(facts),
                         "tier": tier_of(check), "verification": check,
                         "provenance": {"weights_sha256": model.get("weights_sha256"), "license": model.get("license"),
                                        "family": model.get("family"), "kind": model.get("kind"),
                                        "pretraining_data": model.get("pretraining_data", []),
                                        "description": (summary.get("card") or {}).get("description"),
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


def rank_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows ordered by (dataset, usage, attribute) then the ranking rule, each given its `rank` in its group."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["usage"], r["attribute"]), []).append(r)
    out = []
    for key in sorted(groups):
        for i, r in enumerate(sorted(groups[key], key=rank_key), start=1):
            out.append({**r, "rank": i})
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
                    "flags": sorted({f["label"] for r in rs for f in r["flags"]}),
                    "tiers": sorted({r["tier"] for r in rs})})
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
             "flag_legend": legend(), "tiers": list(TIERS), "models": summary, "rows": rows}
    return {
        "html": write_text(board_dir / "index.html", render.html_page(board)),
        "markdown": write_text(board_dir / "leaderboard.md", render.markdown(board)),
        "json": write_text(board_dir / "board.json", json.dumps(board, indent=1, allow_nan=False) + "\n"),
    }
