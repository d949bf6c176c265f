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
        # alpha-fm's near-perfect rows have the higher ES but are shown unranked, after beta-fm's
        assert [(r["model"], r["rank"], r["unranked"]) for r in group] == [
            ("beta-fm", 1, None), ("alpha-fm", None, "near-perfect predictions")]
        assert group[1]["metrics"]["es"] > group[0]["metrics"]["es"]
        assert all(r["seeds"] == [0, 1, 2] for r in group)
    assert [(m["model"], m["mean_rank"]) for m in board["models"]] == [("beta-fm", 1.0), ("alpha-fm", None)]
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


def test_ranking_rule_puts_undefined_last() -> None:
    rows = rank_rows([_row("nan-es", None, 0.99), _row("b", 0.7, 0.8), _row("a", 0.7, 0.8), _row("c", 0.7, 0.9),
                      _row("low", 0.2, 0.95)])
    assert [(r["model"], r["rank"]) for r in rows] == [("c", 1), ("a", 2), ("b", 3), ("low", 4), ("nan-es", 5)]
    assert "undefined value" in RANKING_RULE and "ranks last" in RANKING_RULE


def _flag(key: str, label: str) -> dict[str, str]:
    return {"key": key, "label": label, "detail": "d"}


def _rows_with_tiers_and_flags() -> list[dict[str, Any]]:
    """A forged row (best ES, near-perfect, verification failed), a self-reported copy of a verified row with a
    low ES, two self-reported rows (one with a flag that does not unrank: still ranked)."""
    return [{**_row("forged", 0.99, 0.999), "tier": "self-reported",
             "flags": [_flag("near-perfect", "near-perfect predictions"),
                       _flag("verification-failed", "verification failed")]},
            {**_row("copy", 0.9, 0.9), "flags": [_flag("duplicate", "duplicate predictions")]},
            {**_row("verified-low", 0.3, 0.6), "tier": "verified",  # copied by "copy": stays ranked
             "flags": [_flag("duplicate", "duplicate predictions")]},
            {**_row("self-high", 0.8, 0.85), "flags": [_flag("no-weights-hash", "no weights hash")]},
            _row("self-mid", 0.5, 0.7)]


def test_untrusted_rows_are_unranked_and_verified_rows_rank_first() -> None:
    rows = rank_rows(_rows_with_tiers_and_flags())
    assert [(r["model"], r["rank"], r["unranked"]) for r in rows] == [
        ("verified-low", 1, None), ("self-high", 2, None), ("self-mid", 3, None),
        ("forged", None, "near-perfect predictions, verification failed"), ("copy", None, "duplicate predictions")]
    assert [(m["model"], m["mean_rank"]) for m in model_summary(rows)] == [
        ("verified-low", 1.0), ("self-high", 2.0), ("self-mid", 3.0), ("copy", None), ("forged", None)]
    assert "verified rows above self-reported rows" in RANKING_RULE and "not ranked (rank '—'" in RANKING_RULE
    assert "unless the row is verified" in RANKING_RULE
    board = {"suite": {"name": "t", "version": "1", "description": "d"}, "ranking_rule": RANKING_RULE,
             "columns": [{"key": "es", "header": "ES", "better": "high", "definition": "e"}],
             "models": model_summary(rows), "rows": rows}
    md = render.markdown(board).splitlines()
    forged = next(line for line in md if "| forged |" in line and line.startswith("| d |"))
    assert forged.startswith("| d | u | sex | — | forged |")
    assert "unranked: near-perfect predictions, verification failed; near-perfect predictions (d)" in forged
    assert "| forged | r1 | n/a | 1 |" in "\n".join(md)  # the model summary: no mean rank


def test_markdown_cells_cannot_break_the_table() -> None:
    cell = render.md_cell("a|b <img src=x onerror=alert(1)> [x](javascript:1) `c`\nnext")
    assert "|" not in cell.replace("\\|", "") and "<" not in cell and "\n" not in cell
    assert "\\[x\\]" in cell and "\\`c\\`" in cell


# --- the page in a real browser -------------------------------------------------------------------------------

@pytest.fixture
def browser(chromium: Any) -> Any:
    chromium.set_window_size(800, 600)  # headless Chromium's default size
    return chromium


def _column(driver: Any, key: str) -> int:
    return driver.execute_script(f"return document.querySelector('#board th[data-key={key}]').cellIndex")


def _values(driver: Any, col: int) -> list[float]:
    cells = driver.find_elements("css selector", f"#board tbody tr:not([hidden]) td:nth-child({col + 1})")
    return [math.nan if c.get_attribute("data-v") == "" else float(c.get_attribute("data-v")) for c in cells]


def _no_alert(driver: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert


def test_page_in_chromium(built: dict[str, Path], browser: Any) -> None:
    browser.get(built["html"].resolve().as_uri())
    _no_alert(browser)
    rows = browser.find_elements("css selector", "#board tbody tr")
    assert len(rows) == 8
    revisions = {r.find_elements("css selector", "td")[2].text for r in rows}
    assert revisions == {"r1", XSS}, "the hostile revision must show as text"
    assert len(browser.find_elements("css selector", "script")) == 1
    assert browser.execute_script("return document.querySelectorAll('#board script, #board img').length") == 0

    col = _column(browser, "utility")
    header = browser.find_elements("css selector", "#board thead th")[col]
    header.click()
    first = _values(browser, col)
    assert first == sorted(first, reverse=True) and len(set(first)) > 1
    assert header.get_attribute("aria-sort") == "descending"
    header.click()
    second = _values(browser, col)
    assert second == sorted(second) and second != first
    model_col = 1
    browser.find_elements("css selector", "#board thead th")[model_col].click()
    models = [c.text for c in browser.find_elements("css selector", "#board tbody td:nth-child(2)")]
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
    rows = rank_rows([_row("m1", 0.5, 0.8), _row("m2", None, None), _row("m3", 0.9, 0.7)])
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
    cells = [[c.text for c in r.find_elements("css selector", "td")[:2]]
             for r in browser.find_elements("css selector", "#board tbody tr")]
    assert cells == [["1", "verified-low"], ["2", "self-high"], ["3", "self-mid"], ["—", "forged"], ["—", "copy"]]
    reason = browser.find_elements("css selector", "#board tbody tr")[3].find_element("css selector",
                                                                                     ".flags-cell .flag")
    assert reason.text == "unranked: near-perfect predictions, verification failed"
    legend = browser.find_element("xpath", "//h2[text()='Flags']/following-sibling::p[1]").text
    assert legend == ("A flag states one fact about a row, checked by one rule. A flagged row is still ranked, "
                      "except one flagged near-perfect predictions, duplicate predictions or verification failed: "
                      "that row is shown unranked (rank '—', after the ranked rows); a verified row stays ranked "
                      "despite a duplicate flag (a copy cannot unrank the original). Verified rows rank above "
                      "self-reported rows.")
    browser.find_elements("css selector", "#board thead th")[_column(browser, "es")].click()
    browser.find_elements("css selector", "#board thead th")[0].click()  # back to rank order: unranked stay last
    assert [c.text for c in browser.find_elements("css selector", "#board tbody td:nth-child(1)")] == [
        "1", "2", "3", "—", "—"]


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
