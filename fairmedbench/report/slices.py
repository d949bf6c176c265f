"""The slice-discovery section of `benchmark inspect --discover` (discover.html): an opening sentence, one row per
candidate slice (held-out size, AUCs, gap, permutation p raw and adjusted), then per slice what describes it (the
recorded groups over- or under-represented in it, and the closest text prompts when given)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairmedbench.report.html import Cell, Table


def _num(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _p(v: float | None) -> str:
    return "—" if v is None else f"{v:.3g}"


def discovery_answer(d: dict[str, Any]) -> list[str]:
    """The sentences the section opens with: how many slices were tested and which held up on the held-out half."""
    s = d["settings"]
    sig = [(i, sl) for i, sl in enumerate(d["slices"], 1) if sl["significant"]]
    tested = sum(sl["p_value"] is not None for sl in d["slices"])
    others = " of other patients" if s.get("split") == "by patient" else " (split by row: no patient column)"
    if not d["slices"]:
        return [f"No mixture component with >= {s['min_size']} rows did worse than the rest on the {s['n_discovery']} "
                "discovery rows: nothing to test, no hidden subgroup found."]
    head = (f"{tested} of {len(d['slices'])} candidate slice(s) where the model did worse on the {s['n_discovery']} "
            f"discovery rows were tested on {s['n_holdout']} held-out rows{others} "
            f"({s['correction'].upper()}-adjusted, alpha {s['alpha']}).")
    if not sig:
        return [head, "No slice's held-out AUC gap is significant: no hidden subgroup found at this sample size."]
    return [head] + [f"Slice {i}: {sl['n']} held-out rows ({100 * sl['share']:.0f}%), AUC {_num(sl['auc_slice'])} "
                     f"against {_num(sl['auc_rest'])} for the rest (gap {_num(sl['gap'])}, adjusted p "
                     f"{_p(sl['p_adjusted'])})" + _described(sl, float(s["alpha"])) + "." for i, sl in sig]


def _described(sl: dict[str, Any], alpha: float) -> str:
    over = [e for e in sl["enrichment"] if e["p_adjusted"] is not None and e["p_adjusted"] < alpha
            and e["share_slice"] > e["share_rest"]]
    parts = [f"{e['attribute']} = {e['group']} {100 * e['share_slice']:.0f}% vs {100 * e['share_rest']:.0f}%"
             for e in over]
    if sl["prompts"]:
        parts.append(f"closest prompt '{sl['prompts'][0]['text']}'")
    return "; " + ", ".join(parts) if parts else "; no recorded group is over-represented in it"


def slice_table(d: dict[str, Any]) -> Table:
    """One row per candidate slice."""
    rows = []
    for i, sl in enumerate(d["slices"], 1):
        rows.append([Cell(f"slice {i}"), Cell(str(sl["n"]), "num"), Cell(f"{100 * sl['share']:.1f}%", "num"),
                     Cell(str(sl["n_pos"]), "num"), Cell(_num(sl["auc_slice"]), "num"),
                     Cell(_num(sl["auc_rest"]), "num"), Cell(_num(sl["gap"]), "num"),
                     Cell(_num(sl["discovery_gap"]), "num"), Cell(_p(sl["p_value"]), "num"),
                     Cell(_p(sl["p_adjusted"]), "num"),
                     Cell("yes" if sl["significant"] else "no", "yes" if sl["significant"] else "no",
                          sl["why_untested"] or "")])
    return Table(["slice", "n (held-out)", "share", "n+", "AUC slice", "AUC rest", "gap (rest - slice)",
                  "gap on discovery half", "p", "p adjusted", "significant"], rows,
                 "candidate slices on the held-out half (gap: AUC of the rest minus AUC of the slice; one-sided "
                 "permutation p of slice membership within label strata, a patient's rows moving together)")


def enrichment_table(i: int, sl: dict[str, Any], alpha: float) -> Table:
    """Each recorded group's share of slice `i` against the rest (Fisher's exact test, adjusted)."""
    rows = [[Cell(e["attribute"]), Cell(e["group"]), Cell(str(e["n_in_slice"]), "num"),
             Cell(f"{100 * e['share_slice']:.1f}%", "num"), Cell(f"{100 * e['share_rest']:.1f}%", "num"),
             Cell(f"{100 * e['share_all']:.1f}%", "num"), Cell(_p(e["p_value"]), "num"),
             Cell(_p(e["p_adjusted"]), "num"), Cell(_direction(e, alpha))]
            for e in sl["enrichment"]]
    return Table(["attribute", "group", "n in slice", "share in slice", "share in rest", "share overall", "p",
                  "p adjusted", "in the slice"], rows, f"slice {i}: recorded groups (held-out half)")


def _direction(e: dict[str, Any], alpha: float) -> str:
    if e["p_adjusted"] is None or e["p_adjusted"] >= alpha:
        return "as in the rest"
    return "over-represented" if e["share_slice"] > e["share_rest"] else "under-represented"


def prompt_table(i: int, sl: dict[str, Any]) -> Table:
    """The text prompts closest to slice `i`'s direction."""
    return Table(["prompt", "cosine"], [[Cell(p["text"]), Cell(f"{p['similarity']:.3f}", "num")]
                                        for p in sl["prompts"]], f"slice {i}: closest text prompts")


def discovery_section(d: dict[str, Any]) -> dict[str, Any]:
    """What the template shows: answer sentences, the slice table, per-slice description tables, notes."""
    alpha = float(d["settings"]["alpha"])
    described = []
    for i, sl in enumerate(d["slices"], 1):
        tables = [enrichment_table(i, sl, alpha)] if sl["enrichment"] else []
        if sl["prompts"]:
            tables.append(prompt_table(i, sl))
        described.append(tables)
    return {"answer": discovery_answer(d), "table": slice_table(d), "described": described, "notes": d["notes"]}


def write_discovery_page(path: Path, doc: dict[str, Any]) -> Path:
    """discover.html for an inspect document with a `discovery` section."""
    from fairmedbench.engine import store
    from fairmedbench.report.html import TEMPLATES

    d = doc["discovery"]
    source = (doc.get("inputs", {}).get("embeddings") or {}).get("path") or doc["spec"].get("model") or "features"
    text = TEMPLATES.get_template("report/discover.html.j2").render(
        title=f"hidden subgroups: {source}", source=source, d=d, section=discovery_section(d),
        provenance={"inputs": doc.get("inputs"), "options": doc.get("spec"), "run_id": doc.get("run_id"),
                    "settings": d["settings"]}, provenance_heading="provenance: inputs, options")
    return store.write_text(path, text)
