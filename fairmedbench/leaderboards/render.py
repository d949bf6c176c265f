"""Rendering a board: one self-contained HTML page (inline CSS, JS and SVG, no network) and a Markdown table.

The page is the jinja2 template leaderboards/templates/board.html.j2 (extending report/base.html.j2), so every
text value that came from a submission is autoescaped; Markdown cells go through `md_cell`. The page's
Content-Security-Policy allows only its own inline script (by hash) and no network at all.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from html import escape
from typing import Any

from fairmedbench import __version__
from fairmedbench.leaderboards.flags import UNRANKED_FLAGS, legend
from fairmedbench.leaderboards.tiers import TIERS
from fairmedbench.report.html import TEMPLATES, Cell, Figure, Shape, Table, interval_text, verdict_cell
from fairmedbench.report.verdicts import board_headline, board_shift_headline, shift_quantity, site_shift

SCRIPT = """
(function () {
  var tables = Array.prototype.slice.call(document.querySelectorAll('table.board-rows'));
  tables.forEach(function (table) { sortable(table); });
  function sortable(table) {
  var tbody = table.tBodies[0];
  var heads = table.tHead.rows[0].cells;
  var current = {col: -1, dir: 0};
  function value(row, col, type) {
    var cell = row.cells[col];
    if (type === 'num') {
      var v = cell.getAttribute('data-v');
      return v === '' ? NaN : parseFloat(v);
    }
    return cell.textContent;
  }
  function sortBy(col, type, dir) {
    var rows = Array.prototype.slice.call(tbody.rows);
    rows.forEach(function (r, i) { r._i = i; });
    rows.sort(function (a, b) {
      var x = value(a, col, type), y = value(b, col, type);
      if (type === 'num') {
        var nx = isNaN(x), ny = isNaN(y);
        if (nx || ny) { return nx === ny ? a._i - b._i : (nx ? 1 : -1); }
        return x === y ? a._i - b._i : (x < y ? -dir : dir);
      }
      var c = x.localeCompare(y);
      return c === 0 ? a._i - b._i : c * dir;
    });
    rows.forEach(function (r) { tbody.appendChild(r); });
    for (var k = 0; k < heads.length; k++) { heads[k].removeAttribute('aria-sort'); }
    heads[col].setAttribute('aria-sort', dir > 0 ? 'ascending' : 'descending');
    current = {col: col, dir: dir};
  }
  Array.prototype.forEach.call(heads, function (th) {
    var type = th.getAttribute('data-type');
    if (!type) { return; }
    th.addEventListener('click', function () {
      var col = th.cellIndex;
      var first = th.getAttribute('data-better') === 'high' ? -1 : 1;
      sortBy(col, type, current.col === col ? -current.dir : first);
    });
  });
  }
  var selects = document.querySelectorAll('select[data-filter]');
  function allRows() {
    var out = [];
    tables.forEach(function (t) { Array.prototype.forEach.call(t.tBodies[0].rows, function (r) { out.push(r); }); });
    return out;
  }
  function applyFilters() {
    var want = {};
    Array.prototype.forEach.call(selects, function (s) { want[s.getAttribute('data-filter')] = s.value; });
    var shown = {};
    allRows().forEach(function (r) {
      var ok = true;
      for (var k in want) { if (want[k] !== '' && r.getAttribute('data-' + k) !== want[k]) { ok = false; } }
      r.hidden = !ok;
      shown[r.getAttribute('data-row')] = ok;
    });
    Array.prototype.forEach.call(document.querySelectorAll('#scatter [data-row]'), function (p) {
      p.style.display = shown[p.getAttribute('data-row')] ? '' : 'none';
    });
    document.getElementById('count').textContent = String(
      allRows().filter(function (r) { return !r.hidden; }).length);
  }
  Array.prototype.forEach.call(selects, function (s) { s.addEventListener('change', applyFilters); });
  applyFilters();
})();
"""


def fmt(v: Any, digits: int = 3) -> str:
    """A number with `digits` decimals, or 'n/a' for an undefined value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{float(v):.{digits}f}"


def coverage_text(cov: dict[str, Any] | None) -> str:
    """'evaluated / pinned (share)' of a row's test set, with 'partial' when it answers part of it."""
    if not cov:
        return "n/a"
    share = cov["evaluated"] / cov["pinned"] if cov["pinned"] else math.nan
    text = f"{cov['evaluated']:,} / {cov['pinned']:,} ({100 * share:.1f}%)"
    return text if cov.get("complete", True) else f"{text} partial"


def tier_text(row: dict[str, Any]) -> str:
    """A row's tier as text, a verified one with the tolerance its scores were matched within:
    'verified (tolerance 0.0001)' or 'self-reported'."""
    tier = str(row.get("tier", "self-reported"))
    return f"{tier} (tolerance {row['tolerance']:g})" if tier == "verified" and row.get("tolerance") is not None \
        else tier


def tolerance_text(suite: dict[str, Any]) -> str:
    """The board's verification tolerance per precision: '0.0001 for fp32 runs, 0.05 for bf16 runs'."""
    return ", ".join(f"{t:g} for {p} runs" for p, t in (suite.get("verification_tolerance") or {}).items())


def _label_tail(row: dict[str, Any]) -> str:
    """What the revision label is bound to, shown under it: '@ 3f2a9c01d4e5', '@ random:seed=0' or
    '(weights not provided)'; '' for a row built before weights were recorded."""
    label = row.get("revision_label") or ""
    return label[len(str(row["revision"])):].strip() if label.startswith(str(row["revision"])) else label


def _csp() -> str:
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode()
    return (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def _provenance_items(row: dict[str, Any]) -> list[tuple[str, Any]]:
    p = row["provenance"]
    runs = p.get("runs", [])
    return [
        ("description", p.get("description") or "registered card (benchmark describe model NAME)"),
        ("weights sha256", p.get("weights_sha256") or "not given"),
        ("license", p.get("license")), ("family", p.get("family")), ("kind", p.get("kind")),
        ("pretraining data", ", ".join(p.get("pretraining_data") or []) or "none listed"),
        ("accepted", p.get("accepted_at")), ("profile", row.get("profile")),
        ("seeds", ", ".join(str(s) for s in row.get("seeds", []))),
        ("fairmedbench", ", ".join(sorted({str(r.get("fairmedbench_version")) for r in runs}))),
        ("git commit", ", ".join(sorted({str(r.get("git_commit")) for r in runs}))),
        ("run ids", ", ".join(str(r.get("run_id")) for r in runs)),
        ("split fingerprint", ", ".join(sorted({str(r.get("split_fingerprint")) for r in runs}))),
        ("test samples", ", ".join(sorted({str(r.get("n_test")) for r in runs}))),
    ]


def utility_label(columns: list[dict[str, Any]]) -> str:
    """What the utility column holds on this board, e.g. 'AUC / DSC' or 'macro AUC' ('' when not known)."""
    col = next((c for c in columns if c["key"] == "utility"), {})
    return " / ".join(dict.fromkeys(m["label"] for m in col.get("metrics", [])))


def scatter(rows: list[dict[str, Any]], width: int = 620, height: int = 380, utility: str = "AUC / DSC") -> Figure:
    """Inline SVG: utility (x, `utility` names its metrics) against gap (y, lower is fairer), one point per row
    with both defined."""
    pts = [(i, r) for i, r in enumerate(rows) if r["metrics"].get("utility") is not None
           and r["metrics"].get("gap") is not None]
    left, right, top, bottom = 56, 16, 14, 42
    xs = [r["metrics"]["utility"] for _, r in pts] or [0.0, 1.0]
    ys = [r["metrics"]["gap"] for _, r in pts] or [0.0, 0.1]
    x0, x1 = min(xs), max(xs)
    if x1 - x0 < 1e-6:
        x0, x1 = x0 - 0.05, x1 + 0.05
    pad = 0.05 * (x1 - x0)
    x0, x1 = max(x0 - pad, 0.0), min(x1 + pad, 1.0) if x1 <= 1.0 else x1 + pad
    y0, y1 = 0.0, max(max(ys) * 1.1, 1e-3)
    sx = lambda v: left + (v - x0) / (x1 - x0) * (width - left - right)  # noqa: E731
    sy = lambda v: height - bottom - (v - y0) / (y1 - y0) * (height - top - bottom)  # noqa: E731
    base, mid_y = str(height - bottom), f"{(top + height - bottom) / 2:.0f}"

    def text(x: str, y: str, s: str, anchor: str = "middle", **attrs: str) -> Shape:
        return Shape("text", {"x": x, "y": y, "text-anchor": anchor, **attrs}, s)

    shapes = [Shape("line", {"x1": str(left), "y1": base, "x2": str(width - right), "y2": base, "stroke": "#444"}),
              Shape("line", {"x1": str(left), "y1": str(top), "x2": str(left), "y2": base, "stroke": "#444"})]
    for k in range(5):
        xv, yv = x0 + (x1 - x0) * k / 4, y0 + (y1 - y0) * k / 4
        shapes += [text(f"{sx(xv):.1f}", str(height - bottom + 14), f"{xv:.3f}"),
                   text(str(left - 4), f"{sy(yv) + 4:.1f}", f"{yv:.3f}", "end")]
    shapes += [text(f"{(left + width - right) / 2:.0f}", str(height - 6), f"utility ({utility}), higher is better"),
               text("12", mid_y, "gap, lower is fairer", transform=f"rotate(-90 12 {mid_y})")]
    for i, r in pts:
        m = r["metrics"]
        label = (f"{r['model']} {r['revision']}: {r['dataset']} / {r['usage']} / {r['attribute']}: "
                 f"utility {fmt(m['utility'])}, gap {fmt(m['gap'])}")
        shapes.append(Shape("circle", {"class": "pt", "data-row": str(i), "cx": f"{sx(m['utility']):.1f}",
                                       "cy": f"{sy(m['gap']):.1f}", "r": "4.5"}, title=label))
    return Figure({"id": "scatter", "width": str(width), "height": str(height), "viewBox": f"0 0 {width} {height}",
                   "role": "img",
                   "aria-label": "utility against gap"}, shapes)


def external_sections(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Per entry and external dataset: a heading and, per attribute, a table of the entry's rows in board order: the
    utility and the gap on the internal and the external test set (means over seeds, as the board columns), then
    the shift of the seed mean per group, of the gap and of the two groups' difference, with its verdict
    (`report.verdicts.site_shift`)."""
    columns = [c for c in board["columns"] if c["key"] in ("utility", "gap")]
    out = []
    for e in board.get("entries", []):
        for x in e.get("externals", []):
            found = [(r, ext) for r in board["rows"] if r["entry"] == e["key"]
                     for ext in r.get("external") or [] if ext["label"] == x["label"]]
            if not found:
                continue
            tables = []
            for attribute in dict.fromkeys(r["attribute"] for r, _ in found):
                items = [(r, ext) for r, ext in found if r["attribute"] == attribute]
                tables.append(_shift_table(attribute, items, columns, e["task"]))
            out.append({"entry": e["key"], "dataset": e["dataset"], "usage": e["usage"], "label": x["label"],
                        "n_test": found[0][1]["n_test"], "method": found[0][1]["shift_method"], "tables": tables})
    return out


def _shift_table(attribute: str, items: list[tuple[dict[str, Any], dict[str, Any]]], columns: list[dict[str, Any]],
                 task: str) -> Table:
    shift = next((ext["shift"] for _, ext in items if ext.get("shift")), None)
    head = ["Rank", "Model", "Revision", "Tier"]
    labels = {c["key"]: next((m["label"] for m in c["metrics"] if m["task"] == task), c["header"]) for c in columns}
    head += [f"{labels[c['key']]} {side}" for c in columns for side in ("internal", "external")]
    what = ""
    if shift:
        from fairmedbench.metrics.specs import metric_spec

        label = metric_spec(shift["metric"]).header
        what = shift_quantity(shift)[0]
        head += [f"shift of {label}: {g}" for g in shift["groups"]] + ["shift of the gap"]
        head += ([f"shift of the {what}"] if "diff" in shift else []) + [f"{what}: beyond sampling error?"]
    body = []
    for r, ext in items:
        row = [Cell("—" if r.get("rank") is None else str(r["rank"]), "num", r.get("unranked") or ""),
               Cell(str(r["model"])), Cell(str(r["revision"])), Cell(tier_text(r))]
        row += [Cell(fmt(m.get(c["key"])), "num") for c in columns for m in (r["metrics"], ext["metrics"])]
        sh = ext.get("shift")
        if shift and sh:
            cells = [sh["per_group"].get(g) for g in shift["groups"]] + [sh["gap"]]
            cells += [sh["diff"]] if "diff" in shift else []
            row += [Cell(interval_text(None if c is None else {"value": c["shift"], "ci_low": c["ci_low"],
                                                                "ci_high": c["ci_high"]}, signed=True), "num",
                         "" if c is None else c.get("no_ci", "")) for c in cells]
            row.append(verdict_cell(site_shift(shift_quantity(sh)[1], f"the shift of the {what}")))
        body.append(row)
    caption = (f"by {attribute}: board columns on each test set (means over seeds); shift = external − internal "
               "of the seed mean [95% interval, resampling both test sets]" if shift else
               f"by {attribute}: board columns on each test set (means over seeds; no shift for a crossed attribute)")
    return Table(head, body, caption, css="wide")


def html_page(board: dict[str, Any]) -> str:
    """The board's static page (leaderboards/templates/board.html.j2): filters, sortable table with provenance
    and flags, scatter, models, ranking rule; every value escaped by the template."""
    suite, rows = board["suite"], board["rows"]
    provenance = {"suite": suite, "generated_at": board["generated_at"], "built_with": f"fairmedbench {__version__}",
                  "submissions": sorted({r["provenance"]["folder"] for r in rows})}
    shown = [{**r, "index": i, "provenance_items": _provenance_items(r),
              "revision_label_tail": _label_tail(r)} for i, r in enumerate(rows)]
    return TEMPLATES.get_template("leaderboards/board.html.j2").render(
        title=f"fairmedbench leaderboard: {suite['name']} v{suite['version']}", suite=suite,
        generated_at=board["generated_at"], ranking_rule=board["ranking_rule"], columns=board["columns"],
        rows=shown, ranked_rows=[r for r in shown if r.get("tier") == "verified"],
        self_rows=[r for r in shown if r.get("tier") != "verified"], headline=board_headline(rows),
        shift_headline=board_shift_headline(rows), externals=external_sections(board),
        models=board["models"],
        options={k: sorted({r[k] for r in rows}) for k in ("dataset", "attribute", "usage")},
        scatter=scatter(rows, utility=utility_label(board["columns"]) or "AUC / DSC"), fmt=fmt,
        has_es=any(c["key"] == "es" for c in board["columns"]),
        csp=_csp(), script=SCRIPT, entries=board.get("entries", []),
        coverage=coverage_text,
        flag_legend=board.get("flag_legend") or legend(), tiers=board.get("tiers") or list(TIERS),
        unranked_flags=UNRANKED_FLAGS, refused=board.get("refused", []), tolerance=tolerance_text(suite),
        external_test=external_test_text, provenance=provenance, provenance_heading="board provenance")


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_cell(text: object) -> str:
    """Text safe inside a Markdown table cell: HTML-escaped, Markdown punctuation and pipes backslashed."""
    s = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", escape(s, quote=False))


def markdown(board: dict[str, Any]) -> str:
    """README tables: models by mean rank, then every row by (dataset, usage, attribute) and rank."""
    suite, columns = board["suite"], board["columns"]
    es = any(c["key"] == "es" for c in columns)  # a multi-class-only board has no ES column
    shift = board_shift_headline(board["rows"])
    out = [f"### Leaderboard: {md_cell(suite['name'])} v{md_cell(suite['version'])}", "",
           *([md_cell(shift), ""] if shift else []),
           md_cell(board_headline(board["rows"])), "", f"Ranking rule: {board['ranking_rule']}", "",
           "| Model | Revision | Mean rank | Rows | Mean utility |" + (" Mean ES |" if es else "")
           + " Mean gap | Tiers | Flags |", "|---|---|---:|---:|---:|" + ("---:|" if es else "") + "---:|---|---|"]
    for m in board["models"]:
        out.append(f"| {md_cell(m['model'])} | {md_cell(m['revision'])} | {fmt(m['mean_rank'], 2)} | {m['rows']} | "
                   f"{fmt(m['utility'])} | " + (f"{fmt(m['es'])} | " if es else "") + f"{fmt(m['gap'])} | "
                   f"{md_cell(', '.join(m.get('tiers', [])))} | {md_cell('; '.join(m['flags']))} |")
    head = (["Dataset", "Usage", "Attribute", "Rank", "Model", "Revision"] + [c["header"] for c in columns]
            + ["Tier", "Flags", "Coverage"])
    out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * 6 + "---:|" * len(columns) + "---|---|---|"]
    for r in board["rows"]:
        cells = [md_cell(r[k]) for k in ("dataset", "usage", "attribute")]
        cells += ["—" if r["rank"] is None else str(r["rank"])]
        cells += [md_cell(r["model"]), md_cell(r["revision"])]
        cells += [fmt(r["metrics"].get(c["key"])) for c in columns] + [md_cell(tier_text(r))]
        cells += [md_cell("; ".join(([f"unranked: {r['unranked']}"] if r.get("unranked") else [])
                                    + [f"{f['label']} ({f['detail']})" for f in r["flags"]]))]
        cells += [md_cell(coverage_text(r.get("coverage")))]
        out.append("| " + " | ".join(cells) + " |")
    if board.get("refused"):
        out += ["", "Refused submissions (no number shown, never ranked):", "", "| Model | Revision | Why refused |",
                "|---|---|---|"]
        out += [f"| {md_cell(x['model'])} | {md_cell(x['revision'])} | {md_cell('; '.join(x['reasons']))} |"
                for x in board["refused"]]
    out += ["", "Tiers: " + " ".join(f"**{t['key']}**: {md_cell(t['rule'])}" for t in board.get("tiers") or TIERS),
            "", f"Verification tolerance of this board: {md_cell(tolerance_text(suite))}; a verifier may only tighten "
            "it.",
            "", "| Flag | Rule |", "|---|---|"]
    out += [f"| {md_cell(f['label'])} | {md_cell(f['rule'])} |" for f in board.get("flag_legend") or legend()]
    out += test_sets_markdown(board.get("entries", []))
    sections = external_sections(board)
    if sections:
        out += ["", "#### External evaluation (not ranked)", "", md_cell(sections[0]["method"])]
    for sec in sections:
        out += ["", f"**{md_cell(sec['dataset'])} ({md_cell(sec['usage'])}) → {md_cell(sec['label'])}** "
                    f"({sec['n_test']} test samples)"]
        for tbl in sec["tables"]:
            out += ["", md_cell(tbl.caption), "", "| " + " | ".join(md_cell(h) for h in tbl.header) + " |",
                    "|" + "---|" * len(tbl.header)]
            out += ["| " + " | ".join(md_cell(c.text) for c in row) + " |" for row in tbl.rows]
    return "\n".join(out) + "\n"


def external_test_text(x: dict[str, Any]) -> str:
    """An external test set as the Test sets table shows it: 'synth-flip:n=200: 60 pinned ids (3567a47ce3c1...)'."""
    if x["test_fingerprint"] is None:
        return f"{x['label']}: pending (checked for consistency only)"
    return f"{x['label']}: {x['n_test']:,} pinned ids ({x['test_fingerprint'][:12]}...)"


def test_sets_markdown(entries: list[dict[str, Any]]) -> list[str]:
    """Lines of the 'Test sets' table: per entry, its test set, pins, coverage rule, attributes, headline."""
    if not entries:
        return []
    out = ["", "| Entry | Test set | Pinned ids | Test fingerprint | Coverage rule | Attributes | Headline | External "
                "test sets |", "|---|---|---:|---|---|---|---|---|"]
    for e in entries:
        t = e["test_set"]
        n = "pending" if t["n"] is None else f"{t['n']:,}"
        out.append(f"| {md_cell(e['key'])} | {md_cell(t['name'])} | {n} | "
                   f"{md_cell(t['fingerprint'] or 'pending')} | {md_cell(t['coverage_rule'])} | "
                   f"{md_cell(', '.join(e['attributes']))} | {md_cell(e['headline_metric']['label'])} | "
                   f"{md_cell('; '.join(external_test_text(x) for x in e.get('externals', [])) or 'none')} |")
    return out
