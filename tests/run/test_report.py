"""The run and compare pages: self-contained (figures inlined as data: URIs, nothing fetched), escaped, built
from the shared components; the Pareto front and the paired tables of the compare page."""

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
from fairmedbench.report.html import TEMPLATES, pareto_front, write_compare_report, write_run_report


def test_pareto_front_hand_computed() -> None:
    # (utility, gap): b dominates d (better both); a and b trade off; c ties a's utility with a larger gap
    front = pareto_front([0.8, 0.9, 0.8, 0.85], [0.1, 0.2, 0.15, 0.25])
    assert front == [True, True, False, False]
    assert pareto_front([0.8, 0.8], [0.1, 0.1]) == [True, True]  # equal points dominate neither
    assert pareto_front([0.2, 0.3], [0.1, 0.1], higher_utility=False) == [True, False]


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
    doc["test_resample"] = {"method": "balanced_groups", "seed": 0, "ids": ["s1", "s2"], "fingerprint": "ab" * 32,
                            "counts": {"F": {"n": 1, "n_pos": 1, "n_neg": 0}},
                            "params": {"spec": "balanced:sex", "label_col": "y"}, "result": doc["result"]}
    page = write_run_report(tmp_path, [doc]).read_text()
    assert "Resampled test set: balanced:sex" in page and "(on label column y)" in page
    assert page.count('<img src="data:image/png;base64,') == 5  # ROC, PR, reliability, AUC by group, per seed
    for caption in ("ROC curves by sex", "precision-recall by sex", "calibration (reliability) by sex",
                    "AUC per group of sex with 95% bootstrap CIs", "utility against gap, one point per seed"):
        assert f"<figcaption>{caption}" in page
    assert '<details class="provenance"><summary>provenance</summary>' in page
    assert page.index('class="headline"') < page.index("<img")  # the answer before the evidence
    assert "m&lt;script&gt;" in page and "<b>M</b>" not in page
    assert "http://" not in page and "https://" not in page

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
    # shown as text: title and heading (model, dataset), usage line, headline groups and worst group, group
    # table row, provenance (model, dataset, usage); figure legends are pixels inside the PNGs
    assert text.count(f"{XSS} on {XSS}") == 2 and f"usage {XSS}" in text
    assert f"{XSS} (15)" in text  # the headline's groups column
    assert text.count(XSS) >= 2 + 1 + 1 + 1 + 3


def _cells(page: str, caption: str) -> list[list[str]]:
    """The body rows of the table with this caption, as text."""
    table = re.search(r"<caption>" + re.escape(caption) + r".*?</caption>(.*?)</table>", page, re.S)
    assert table, caption
    return [[html.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1).split("<tbody>")[1], re.S)]


def test_compare_page_escapes_hostile_names_and_shows_each_method(tmp_path) -> None:
    ci = lambda m, lo, hi: {"mean": m, "ci_low": lo, "ci_high": hi}  # noqa: E731
    doc = {"task": "classification", "attribute": XSS, "datasets": [XSS, "d2"], "metrics": ["auc", "auc_gap"],
           "table": [{"dataset": XSS, "method": "erm", "n_seeds": 3, "auc": ci(0.9, 0.85, 0.95),
                      "auc_gap": ci(0.25, 0.2, 0.3)},
                     {"dataset": XSS, "method": XSS, "n_seeds": 3, "auc": ci(0.8, 0.75, 0.85),
                      "auc_gap": ci(0.125, 0.1, 0.15)},
                     {"dataset": XSS, "method": "worse", "n_seeds": 3, "auc": ci(0.7, 0.6, 0.8),
                      "auc_gap": ci(0.3, 0.2, 0.4)},
                     {"dataset": "d2", "method": "erm", "n_seeds": 3, "auc": ci(0.7, 0.6, 0.8),
                      "auc_gap": ci(0.05, 0.0, 0.1)}],
           "versus_erm": [{"dataset": XSS, "method": XSS, "metric": "auc_gap", "mean_diff": -0.125, "ci_low": -0.2,
                           "ci_high": -0.05, "welch_t": -3.2, "welch_p": 0.03, "welch_note": None,
                           "significant": True}],
           "notes": [XSS]}
    page = write_compare_report(tmp_path / "c.html", doc).read_text()
    parsed = _parsed(page)
    assert "script" not in parsed.tags and XSS not in page
    text = "".join(parsed.text)
    assert f"mitigations by {XSS}" in text and XSS in text
    assert _cells(page, "mean over seeds") == [["erm", "3", "0.900 [0.850, 0.950]", "0.250 [0.200, 0.300]"],
                                               [XSS, "3", "0.800 [0.750, 0.850]", "0.125 [0.100, 0.150]"],
                                               ["worse", "3", "0.700 [0.600, 0.800]", "0.300 [0.200, 0.400]"]]
    front = _cells(page, "non-dominated methods")
    assert [(r[0], r[3]) for r in front] == [("erm", "non-dominated"), (XSS, "non-dominated"), ("worse", "dominated")]
    # one verdict per question: the paired rule (this older document has no paired p: read from its t interval);
    # Welch's p is not shown beside it as a second verdict
    assert _cells(page, "per-seed differences from ERM") == [[XSS, "ΔAUC", "-0.125 [-0.200, -0.050]", "—",
                                                              "better than ERM"]]
    answer = re.search(r'<div class="answer">(.*?)</div>', page, re.S)
    assert answer and html.unescape(re.sub("<[^>]+>", "", answer.group(1))).startswith(
        f"{XSS}: {XSS} improved ΔAUC against ERM beyond chance: -0.125 [-0.200, -0.050]")
    assert "Welch" not in re.sub(r'<details class="provenance">.*', "", page, flags=re.S)
    assert page.count('<img src="data:image/png;base64,') == 2  # one utility-gap figure per dataset
    block = re.search(r'<details class="provenance"><summary>data</summary>\s*<pre>(.*?)</pre>', page, re.S)
    assert block and json.loads(html.unescape(block.group(1))) == doc  # the data block is the whole document


def test_every_template_is_autoescaped_and_installed() -> None:
    names = TEMPLATES.list_templates()
    assert {"report/base.html.j2", "report/components.html.j2", "report/run.html.j2", "report/compare.html.j2",
            "report/audit.html.j2", "leaderboards/board.html.j2"} <= set(names)
    assert all(TEMPLATES.autoescape(n) for n in names)
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).parents[2] / "setup.cfg")
    globs = [g.strip() for g in cfg["options.package_data"]["fairmedbench"].split(",")]
    package = Path(fairmedbench.__file__).parent
    shipped = {p for g in globs for p in package.glob(g)}
    assert set(package.rglob("*.j2")) <= shipped, "a template is missing from setup.cfg [options.package_data]"


def test_segmentation_run_page_uses_the_segmentation_metrics(tmp_path) -> None:
    n = 6
    pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "split": "test", "seed": 0,
                  "attr:sex": ["F", "M"] * 3}).to_parquet(tmp_path / "p.parquet")
    cell = lambda v: {"value": v, "ci_low": v - 0.1, "ci_high": v + 0.1}  # noqa: E731
    metrics = {"dsc": {"__overall__": cell(0.8), "F": cell(0.7), "M": cell(0.9)},
               "dsc_gap": {"__gap__": cell(0.2)}, "dsc_diff": {"__gap__": cell(0.2)}}
    doc = {"kind": "run-segmentation", "predictions": {"file": "p.parquet"},
           "spec": {"model": "m", "dataset": "d", "usage": "sam-decoder", "mitigation": "erm", "seed": 0},
           "result": {"meta": {"min_group_size": 30}, "reports": [{
               "task": "mask", "attribute": "sex", "groups": ["F", "M"], "small_groups": ["F", "M"],
               "counts": {"__overall__": {"n": n, "n_empty_gt": 1}, "F": {"n": 3, "n_empty_gt": 0},
                          "M": {"n": 3, "n_empty_gt": 1}}, "metrics": metrics}]}}
    page = write_run_report(tmp_path, [doc]).read_text()
    text = html.unescape(re.sub("<[^>]+>", " ", page))
    assert "signed DSC difference" in text and "M − F: +0.200 [+0.100, +0.300]" in text
    # no permutation test in this result: the page says so instead of reading the CI as a verdict
    assert "CI excludes 0" not in text and "not tested" in text and "empty GT" in text
    assert "mask / sex = F: small group (3 samples < 30): point estimates only, no CI" in text
    assert page.count("<img") == 2  # no scores: no curves; DSC by group and the per-seed point
