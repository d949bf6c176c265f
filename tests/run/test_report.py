"""The run report: a self-contained page with the figures and the provenance, nothing fetched."""

from __future__ import annotations

import configparser
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd

import fairmedbench
from fairmedbench.report.html import TEMPLATES, roc_points, write_compare_report, write_run_report


def test_roc_points_hand_computed() -> None:
    # scores 0.9(1) 0.8(0) 0.7(1) 0.1(0): thresholds 0.9, 0.8, 0.7, 0.1
    fpr, tpr = roc_points(np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.7, 0.1]))
    assert fpr.tolist() == [0, 0, 0.5, 0.5, 1] and tpr.tolist() == [0, 0.5, 0.5, 1, 1]


def test_report_is_self_contained_and_escapes(tmp_path) -> None:
    rng = np.random.default_rng(0)
    n = 40
    frame = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "split": "test", "seed": 0,
                          "label:y": rng.integers(0, 2, n), "score:y": rng.random(n),
                          "attr:sex": rng.choice(["F", "<b>M</b>"], n)})
    frame.to_parquet(tmp_path / "seed0.predictions.parquet")
    cell = {"value": 0.7, "ci_low": 0.6, "ci_high": 0.8}
    metrics = {m: {"__overall__": cell, "F": cell, "<b>M</b>": cell} for m in ("auc", "tpr", "fpr", "ece")}
    metrics["auc_gap"] = {"__gap__": {"value": 0.1, "ci_low": 0.0, "ci_high": 0.2}}
    doc = {"kind": "run-classification", "predictions": {"file": "seed0.predictions.parquet"},
           "spec": {"model": "m<script>", "dataset": "d", "usage": "lp", "mitigation": "erm", "seed": 0},
           "result": {"reports": [{"task": "y", "attribute": "sex", "groups": ["F", "<b>M</b>"],
                                   "counts": {"__overall__": {"n": n}}, "metrics": metrics}]}}
    page = write_run_report(tmp_path, [doc]).read_text()
    assert "<svg" in page and "ROC by sex" in page and "reliability by sex" in page and "provenance" in page
    assert "m&lt;script&gt;" in page and "<b>M</b>" not in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page


XSS = "<script>alert(1)</script>"


class _Text(HTMLParser):
    """The page as a browser shows it: text content (entities decoded) and the tags it would build."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parsed(page: str) -> _Text:
    parser = _Text()
    parser.feed(page)
    return parser


def test_run_report_escapes_hostile_model_dataset_and_group_names(tmp_path) -> None:
    rng = np.random.default_rng(1)
    n = 30
    groups = [XSS, "F"]
    pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "split": "test", "seed": 0,
                  "label:y": np.tile([0, 1], n // 2), "score:y": rng.random(n),
                  "attr:sex": np.repeat(groups, n // 2)}).to_parquet(tmp_path / "p.parquet")
    cell = {"value": 0.75, "ci_low": 0.5, "ci_high": 0.9}
    metrics = {m: {"__overall__": cell, **{g: cell for g in groups}} for m in ("auc", "tpr", "fpr", "ece")}
    metrics["auc_gap"] = {"__gap__": {"value": 0.2, "ci_low": 0.0, "ci_high": 0.4}}
    doc = {"kind": "run-classification", "predictions": {"file": "p.parquet"},
           "spec": {"model": XSS, "dataset": XSS, "usage": XSS, "mitigation": "erm", "seed": 0},
           "result": {"reports": [{"task": "y", "attribute": "sex", "groups": groups,
                                   "counts": {"__overall__": {"n": n}, XSS: {"n": n // 2}}, "metrics": metrics}]}}
    page = write_run_report(tmp_path, [doc]).read_text()
    parsed = _parsed(page)
    assert "script" not in parsed.tags and XSS not in page
    text = "".join(parsed.text)
    # shown as text: title and heading (model, dataset), usage line, legends and bar labels, table, provenance
    assert text.count(f"{XSS} on {XSS}") == 2 and f"usage {XSS}" in text
    assert text.count(XSS) >= 2 + 2 * 2 + 1 + 1 + 1 + 1  # 2 titles, ROC + reliability legends, bars, table, prov
    assert f"{XSS}: 0.750" in text  # the bar's tooltip


def test_compare_page_escapes_hostile_names_and_shows_each_method(tmp_path) -> None:
    doc = {"task": "classification", "attribute": XSS, "datasets": [XSS, "d2"],
           "table": [{"dataset": XSS, "method": XSS, "auc": {"mean": 0.8}, "auc_gap": {"mean": 0.125}},
                     {"dataset": XSS, "method": "erm", "auc": {"mean": 0.9}, "auc_gap": {"mean": 0.25}},
                     {"dataset": "d2", "method": "erm", "auc": {"mean": 0.7}, "auc_gap": {"mean": 0.05}}]}
    page = write_compare_report(tmp_path / "c.html", doc).read_text()
    parsed = _parsed(page)
    assert "script" not in parsed.tags and XSS not in page
    text = "".join(parsed.text)
    assert f"mitigations by {XSS}" in text and f"{XSS}: ΔAUC" not in text
    assert f"{XSS}: AUC 0.800, ΔAUC 0.125" in text and "erm: AUC 0.900, ΔAUC 0.250" in text
    assert "erm: AUC 0.700, ΔAUC 0.050" in text and parsed.tags.count("svg") == 2
    block = re.search(r'<h2>data</h2>\s*<pre class="provenance">(.*?)</pre>', page, re.S)
    assert block and json.loads(html.unescape(block.group(1))) == doc  # the data block is the whole document


def test_every_template_is_autoescaped_and_installed() -> None:
    names = TEMPLATES.list_templates()
    assert {"report/base.html.j2", "report/run.html.j2", "report/compare.html.j2",
            "leaderboards/board.html.j2"} <= set(names)
    assert all(TEMPLATES.autoescape(n) for n in names)
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).parents[2] / "setup.cfg")
    globs = [g.strip() for g in cfg["options.package_data"]["fairmedbench"].split(",")]
    package = Path(fairmedbench.__file__).parent
    shipped = {p for g in globs for p in package.glob(g)}
    assert set(package.rglob("*.j2")) <= shipped, "a template is missing from setup.cfg [options.package_data]"
