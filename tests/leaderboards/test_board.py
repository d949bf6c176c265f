"""Board building end to end: two models' synthetic-suite bundles submitted, page built and driven in Chromium."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from bundle_factory import model_card, pending_synthetic_suite, write_bundle

from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.errors import InputError
from fairmedbench.leaderboards import render
from fairmedbench.leaderboards.board import RANKING_RULE, model_summary, rank_rows

XSS = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("board")
    suite = pending_synthetic_suite()
    for name, quality, revision in (("alpha-fm", 2.0, "r1"), ("beta-fm", 0.7, XSS)):
        bundle = write_bundle(tmp / f"bundle-{quality}", suite, {**model_card(name, quality), "revision": revision},
                              description=XSS)
        out = submit_bundle(bundle, suite.name, tmp / "leaderboards")
        assert out.accepted, out.reasons
    return build_board(suite.name, tmp / "leaderboards")


def test_board_files_and_ranking(built: dict[str, Path]) -> None:
    board = json.loads(built["json"].read_text())
    rows = board["rows"]
    # 2 models x 2 datasets x 2 attributes
    assert len(rows) == 8
    assert {(r["model"], r["revision"]) for r in rows} == {("alpha-fm", "r1"), ("beta-fm", XSS)}
    for key in {(r["dataset"], r["usage"], r["attribute"]) for r in rows}:
        group = [r for r in rows if (r["dataset"], r["usage"], r["attribute"]) == key]
        # nothing is verified, so nothing is ranked: both are self-reported; alpha-fm's near-perfect rows have
        # the higher ES but are listed after beta-fm's
        assert [(r["model"], r["rank"]) for r in group] == [("beta-fm", None), ("alpha-fm", None)]
        assert group[0]["unranked"] == "self-reported: not re-run"
        assert group[1]["unranked"].startswith("self-reported: not re-run, near-perfect predictions")
        assert group[1]["metrics"]["es"] > group[0]["metrics"]["es"]
        assert all(r["seeds"] == [0, 1, 2] for r in group)
    assert [(m["model"], m["mean_rank"]) for m in board["models"]] == [("alpha-fm", None), ("beta-fm", None)]
    md = built["markdown"].read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md and XSS not in md
    html = built["html"].read_text()
    assert html.count("<script>") == 1 and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    mask = os.umask(0)
    os.umask(mask)
    assert {built[k].stat().st_mode & 0o777 for k in ("html", "markdown", "json")} == {0o666 & ~mask}


def test_build_without_submissions_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no accepted submissions.*benchmark submit BUNDLE --board synthetic"):
        build_board("synthetic", tmp_path)


def _row(model: str, es: float | None, utility: float | None) -> dict[str, Any]:
    return {"model": model, "revision": "r1", "dataset": "d", "usage": "u", "attribute": "sex",
            "task": "classification",
            "flags": [], "tier": "self-reported", "verification": None, "seeds": [0], "profile": "default",
            "metrics": {"utility": utility, "worst_group": None, "gap": None if es is None else 0.1, "es": es,
                        "eqodds": None, "ece_gap": None},
            "provenance": {"folder": "submissions/x/r1", "runs": []}}


def _verified(model: str, es: float | None, utility: float | None) -> dict[str, Any]:
    return {**_row(model, es, utility), "tier": "verified"}


def test_ranking_rule_puts_undefined_last() -> None:
    rows = rank_rows([_verified("nan-es", None, 0.99), _verified("b", 0.7, 0.8), _verified("a", 0.7, 0.8),
                      _verified("c", 0.7, 0.9), _verified("low", 0.2, 0.95)])
    assert [(r["model"], r["rank"]) for r in rows] == [("c", 1), ("a", 2), ("b", 3), ("low", 4), ("nan-es", 5)]
    assert "undefined value" in RANKING_RULE and "ranks last" in RANKING_RULE


def _flag(key: str, label: str) -> dict[str, str]:
    return {"key": key, "label": label, "detail": "d"}


def _rows_with_tiers_and_flags() -> list[dict[str, Any]]:
    """A forged row (best ES, near-perfect, verification failed), a verified original and its later verified copy
    (flagged duplicate), a verified row with an implausible-groups flag, and self-reported rows (one implausible)."""
    return [{**_row("forged", 0.99, 0.999), "tier": "self-reported",
             "flags": [_flag("near-perfect", "near-perfect predictions"),
                       _flag("verification-failed", "verification failed")]},
            {**_row("copy", 0.9, 0.9), "tier": "verified", "flags": [_flag("duplicate", "duplicate predictions")]},
            {**_row("verified-low", 0.3, 0.6), "tier": "verified"},  # the original the copy duplicates: clean
            {**_row("verified-odd", 0.6, 0.6), "tier": "verified",
             "flags": [_flag("implausible-groups", "implausible group scores")]},
            {**_row("self-high", 0.8, 0.85), "flags": [_flag("no-weights-hash", "no weights hash")]},
            {**_row("self-odd", 0.7, 0.7), "flags": [_flag("implausible-groups", "implausible group scores")]},
            _row("self-mid", 0.5, 0.7)]


def test_untrusted_rows_are_unranked_and_verified_rows_rank_first() -> None:
    rows = rank_rows(_rows_with_tiers_and_flags())
    assert [(r["model"], r["rank"], r["unranked"]) for r in rows] == [
        ("verified-odd", 1, None), ("verified-low", 2, None), ("copy", None, "duplicate predictions"),
        ("self-high", None, "self-reported: not re-run"), ("self-mid", None, "self-reported: not re-run"),
        ("forged", None, "self-reported: not re-run, near-perfect predictions, verification failed"),
        ("self-odd", None, "self-reported: not re-run, implausible group scores")]
    assert [(m["model"], m["mean_rank"]) for m in model_summary(rows)][:2] == [("verified-odd", 1.0),
                                                                            ("verified-low", 2.0)]
    assert "Only verified rows are ranked" in RANKING_RULE and "not ranked (rank '—'" in RANKING_RULE
    assert "only the later of two near-identical submissions" in RANKING_RULE
    board = {"suite": {"name": "t", "version": "1", "description": "d"}, "ranking_rule": RANKING_RULE,
             "columns": [{"key": "es", "header": "ES", "better": "high", "definition": "e"}],
             "models": model_summary(rows), "rows": rows}
    md = render.markdown(board).splitlines()
    forged = next(line for line in md if "| forged |" in line and line.startswith("| d |"))
    assert forged.startswith("| d | u | sex | — | forged |")
    assert "unranked: self-reported: not re-run, near-perfect predictions, verification failed; near-perfect " \
           "predictions (d)" in forged
    assert "| forged | r1 | n/a | 1 |" in "\n".join(md)  # the model summary: no mean rank
    assert md[2].startswith("2 verified row(s) are ranked in 1 (dataset, usage, attribute) group(s)")


def test_markdown_cells_cannot_break_the_table() -> None:
    cell = render.md_cell("a|b <img src=x onerror=alert(1)> [x](javascript:1) `c`\nnext")
    assert "|" not in cell.replace("\\|", "") and "<" not in cell and "\n" not in cell
    assert "\\[x\\]" in cell and "\\`c\\`" in cell


# --- the page in a real browser -------------------------------------------------------------------------------

@pytest.fixture
def browser(chromium: Any) -> Any:
    chromium.set_window_size(800, 600)  # headless Chromium's default size
    return chromium


def _column(driver: Any, key: str, table: str = "board") -> int:
    return driver.execute_script(f"return document.querySelector('#{table} th[data-key={key}]').cellIndex")


def _values(driver: Any, col: int, table: str = "board") -> list[float]:
    cells = driver.find_elements("css selector", f"#{table} tbody tr:not([hidden]) td:nth-child({col + 1})")
    return [math.nan if c.get_attribute("data-v") == "" else float(c.get_attribute("data-v")) for c in cells]


def _no_alert(driver: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        _ = driver.switch_to.alert  # raises NoAlertPresentException when no alert


def test_page_in_chromium(built: dict[str, Path], browser: Any) -> None:
    browser.get(built["html"].resolve().as_uri())
    _no_alert(browser)
    rows = browser.find_elements("css selector", "#self-reported tbody tr")
    assert len(rows) == 8
    revisions = {r.find_elements("css selector", "td")[2].text.split("\n")[0] for r in rows}
    assert revisions == {"r1", XSS}, "the hostile revision must show as text"
    # the revision label is bound to the weights: its sha256 prefix is shown under it
    assert {r.find_element("css selector", "td .weights").text[:2] for r in rows} == {"@ "}
    assert browser.find_elements("css selector", "#board") == [], "nothing verified: no ranked table"
    assert "No row is ranked" in browser.find_element("css selector", ".answer").text
    assert len(browser.find_elements("css selector", "script")) == 1
    assert browser.execute_script(
        "return document.querySelectorAll('#self-reported script, #self-reported img').length") == 0

    col = _column(browser, "utility", "self-reported")
    header = browser.find_elements("css selector", "#self-reported thead th")[col]
    header.click()
    first = _values(browser, col, "self-reported")
    assert first == sorted(first, reverse=True) and len(set(first)) > 1
    assert header.get_attribute("aria-sort") == "descending"
    header.click()
    second = _values(browser, col, "self-reported")
    assert second == sorted(second) and second != first
    model_col = 1
    browser.find_elements("css selector", "#self-reported thead th")[model_col].click()
    models = [c.text for c in browser.find_elements("css selector", "#self-reported tbody td:nth-child(2)")]
    assert models == sorted(models, key=lambda m: m.lower()) or models == sorted(models)

    # filters: dataset, then attribute; the scatter follows the table
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("css selector", "select[data-filter=dataset]")).select_by_value("synth-contrast")
    assert browser.find_element("id", "count").text == "4"
    Select(browser.find_element("css selector", "select[data-filter=attribute]")).select_by_value("age")
    assert browser.find_element("id", "count").text == "2"
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('#scatter circle'))"
        ".filter(c => c.style.display !== 'none').length")
    assert shown == 2
    titles = browser.execute_script(
        "return Array.from(document.querySelectorAll('#scatter title')).map(t => t.textContent)")
    assert any(XSS in t for t in titles)
    assert "ranks last" in browser.find_element("css selector", ".rule").text
    _no_alert(browser)


def test_undefined_values_stay_last_in_the_browser(tmp_path: Path, browser: Any) -> None:
    rows = rank_rows([_verified("m1", 0.5, 0.8), _verified("m2", None, None), _verified("m3", 0.9, 0.7)])
    board = {"suite": {"name": "t", "version": "1", "description": "d"}, "generated_at": "now",
             "ranking_rule": RANKING_RULE, "models": [],
             "columns": [{"key": "utility", "header": "Utility", "better": "high", "definition": "u"},
                         {"key": "es", "header": "ES", "better": "high", "definition": "e"}],
             "rows": rows}
    page = tmp_path / "index.html"
    page.write_text(render.html_page(board))
    browser.get(page.as_uri())
    col = _column(browser, "es")
    header = browser.find_elements("css selector", "#board thead th")[col]
    for _ in range(2):
        header.click()
        values = _values(browser, col)
        assert math.isnan(values[-1]) and not any(math.isnan(v) for v in values[:-1])
    assert browser.find_elements("css selector", "#board tbody tr")[-1].find_elements("css selector", "td")[1].text \
        == "m2"


def test_unranked_rows_in_the_browser(tmp_path: Path, browser: Any) -> None:
    """The page shows unranked rows last with rank '—' and the reason first in their flag cell; the legend
    states the rule. A screenshot of the table is saved (and to $FMB_SCREENSHOT_DIR when set)."""
    rows = rank_rows(_rows_with_tiers_and_flags())
    board = {"suite": {"name": "t", "version": "1", "description": "d"}, "generated_at": "now",
             "ranking_rule": RANKING_RULE, "models": model_summary(rows),
             "columns": [{"key": "utility", "header": "Utility", "better": "high", "definition": "u"},
                         {"key": "es", "header": "ES", "better": "high", "definition": "e"}], "rows": rows}
    page = tmp_path / "index.html"
    page.write_text(render.html_page(board))
    browser.set_window_size(1500, 900)
    browser.get(page.as_uri())
    _no_alert(browser)
    shot = tmp_path / "board-unranked.png"  # the page as it opens: the rule's order
    assert browser.find_element("id", "board").screenshot(str(shot)) and shot.stat().st_size > 5_000
    if os.environ.get("FMB_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["FMB_SCREENSHOT_DIR"]) / shot.name)
    def cells(table: str) -> list[list[str]]:
        return [[c.text for c in r.find_elements("css selector", "td")[:2]]
                for r in browser.find_elements("css selector", f"#{table} tbody tr")]

    assert cells("board") == [["1", "verified-odd"], ["2", "verified-low"], ["—", "copy"]]
    assert cells("self-reported") == [["—", "self-high"], ["—", "self-mid"], ["—", "forged"], ["—", "self-odd"]]
    reason = browser.find_elements("css selector", "#self-reported tbody tr")[2].find_element(
        "css selector", ".flags-cell .flag")
    assert reason.text == "unranked: self-reported: not re-run, near-perfect predictions, verification failed"
    assert browser.find_element("css selector", ".answer").text.startswith("2 verified row(s) are ranked")
    legend = browser.find_element("xpath", "//h2[text()='Flags']/following-sibling::p[1]").text
    assert legend == ("A flag states one fact about a row, checked by one rule. Only verified rows are ranked; a "
                      "verified row flagged near-perfect predictions, duplicate predictions or verification failed "
                      "is shown unranked (rank '—', after the ranked rows). A duplicate is flagged on the later "
                      "submission only (by accept time), so a copy cannot taint the original. Self-reported rows "
                      "are never ranked.")
    browser.find_elements("css selector", "#board thead th")[_column(browser, "es")].click()
    browser.find_elements("css selector", "#board thead th")[0].click()  # back to rank order: unranked stay last
    assert [c.text for c in browser.find_elements("css selector", "#board tbody td:nth-child(1)")] == [
        "1", "2", "—"]


def test_every_submitted_text_is_escaped_on_the_page() -> None:
    # model, revision, dataset, usage, attribute (group), flags and provenance all hostile; only our script runs
    row = {**_row(XSS, 0.5, 0.8), "revision": XSS, "dataset": XSS, "usage": XSS, "attribute": XSS,
           "flags": [{"key": XSS, "label": XSS, "detail": XSS}], "tier": XSS,
           "provenance": {"folder": XSS, "license": XSS, "pretraining_data": [XSS], "runs": [{"run_id": XSS}]}}
    rows = rank_rows([row])
    board = {"suite": {"name": XSS, "version": "1", "description": XSS}, "generated_at": "now",
             "ranking_rule": RANKING_RULE, "columns": [{"key": "es", "header": XSS, "better": "high",
                                                        "definition": XSS}],
             "models": [{"model": XSS, "revision": XSS, "mean_rank": 1.0, "rows": 1, "utility": 0.8, "es": 0.5,
                         "gap": 0.1, "flags": [XSS], "tiers": [XSS]}], "rows": rows}
    page = render.html_page(board)
    assert page.count("<script") == 1 and XSS not in page and "<img" not in page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    # title x2, description, filters x3 (value and text), row cells x5, flag, provenance x4 (license, pretraining,
    # run id, link), scatter title, column header x2 (title attribute, text), definition, models x3, board provenance
    assert page.count(escaped) >= 2 + 1 + 6 + 5 + 1 + 4 + 1 + 2 + 1 + 3 + 1
    assert f'data-dataset="{escaped}"' in page and f'href="{escaped}/submission.json"' in page
