"""The audit page of `benchmark evaluate --report`: its components (KS family, notes, headline verdicts), the
page end to end, and the page in headless Chromium (answer above the fold, no raw JSON there), on a fixture
and on a real model's predictions."""

from __future__ import annotations

import html
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.stats import false_discovery_control, ks_2samp

from fairmedbench.cli import main
from fairmedbench.engine import store
from fairmedbench.metrics import evaluate_classification
from fairmedbench.metrics.groups import make_attribute
from fairmedbench.report.audit import AuditData, score_ks
from fairmedbench.report.html import headline_table, result_notes, signed_difference_table


def _fixture(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Sex with a real AUC disparity (M's scores separate the classes better), a 12-row site 'tiny' (small
    group) and a site 'clean' without positives (one class); val rows choose the threshold."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M"], n)
    y = rng.integers(0, 2, n)
    site = rng.choice(["north", "south"], n).astype(object)
    site[:12] = "tiny"
    site[12:40] = "clean"
    y[12:40] = 0
    logit = np.where(sex == "M", 2.0, 0.4) * (2 * y - 1) + rng.normal(0, 1, n)
    return pd.DataFrame({"id": [f"s{i}" for i in range(n)], "split": np.where(np.arange(n) % 4 == 3, "val", "test"),
                         "y": y, "p": 1 / (1 + np.exp(-logit)), "sex": sex, "site": site,
                         "age": rng.uniform(20, 90, n)})


def test_score_ks_matches_scipy_with_by_over_the_family() -> None:
    df = _fixture()
    data = AuditData(["y"], df[["y"]].to_numpy(), df[["p"]].to_numpy(),
                     {a: make_attribute(a, df[a]) for a in ("sex", "site")})
    tests, skipped = score_ks(data)
    raw = []
    for attr in ("sex", "site"):
        for cls in (0, 1):
            part = df[df.y == cls]
            groups = sorted(part[attr].unique())
            for i, a in enumerate(groups):
                for b in groups[i + 1:]:
                    raw.append(((attr, cls, a, b), ks_2samp(part.p[part[attr] == a], part.p[part[attr] == b])))
    ours = {(t.variable, ("negatives", "positives").index(t.within), t.group_a, t.group_b): t for t in tests}
    assert all(t.feature == "y" for t in tests)
    assert set(ours) == {k for k, _ in raw}  # 'clean' has no positives: only its negatives are compared
    want = false_discovery_control([r.pvalue for _, r in raw], method="by")
    for (key, r), q in zip(raw, want):
        assert ours[key].statistic == pytest.approx(r.statistic) and ours[key].p_value == pytest.approx(r.pvalue)
        assert ours[key].p_adjusted == pytest.approx(q)
    assert ours[("sex", 0, "F", "M")].p_adjusted < 1e-6  # M's negatives score lower: a real difference
    assert skipped == []


def test_headline_verdicts_and_notes_say_why() -> None:
    df = _fixture()
    test = df[df.split == "test"]
    res = evaluate_classification(test.y, test.p, {"sex": test.sex, "site": test.site}, task_names=["y"],
                                  n_boot=200, seed=0)
    sex, site = (r.to_dict() for r in res.reports)
    table = headline_table([sex, site], "classification")
    row = dict(zip(table.header, table.rows[0]))
    col = "disparity (permutation tests, p_adj)"
    # the verdict reads the permutation tests of every tested gap, never a CI (a gap's CI never contains 0)
    assert row["attribute"].text == "sex" and row[col].text.startswith("larger than chance: ")
    assert "ΔAUC" in row[col].text and "ECE gap within chance" in row[col].title
    # only a non-AUC gap in the family below 0.05: the cell names it, and ΔAUC is not called a disparity
    adjusted = {m: {"__gap__": {**c["__gap__"], "p_adjusted": 0.5}} for m, c in sex["metrics"].items()
                if (c.get("__gap__") or {}).get("p_adjusted") is not None}
    adjusted["ece_gap"]["__gap__"]["p_adjusted"] = 0.002
    tested = {**sex, "metrics": {**sex["metrics"], **adjusted}}
    row = dict(zip(table.header, headline_table([tested], "classification").rows[0]))
    assert row[col].text == "larger than chance: ECE gap (p_adj = 0.002)" and row[col].css == "yes"
    assert "ΔAUC" in row[col].title and "within chance" in row[col].title
    d = sex["metrics"]["auc_diff"]["__gap__"]
    assert row["signed AUC difference"].text == f"M − F: {d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
    assert signed_difference_table(site) is None
    diffs = {r[0].text: r[2].text for r in signed_difference_table(sex).rows}
    assert set(diffs) == {"auc_diff", "ap_diff", "tpr_diff", "fpr_diff", "ece_diff", "balanced_brier_diff"}
    assert not any("CI excludes 0" in v for v in diffs.values())
    notes = result_notes(site, 30)
    assert any(n.startswith("y / site = clean: one class (no positives)") for n in notes)
    n_tiny = site["counts"]["tiny"]["n"]
    assert f"y / site = tiny: small group ({n_tiny} samples < 30): point estimates only, no CI" in notes
    # a clean attribute's only note is what its intervals resampled (this file has no patient ids: rows)
    assert result_notes(sex, 30) == ["y / sex: intervals resample rows (F 210, M 240 rows): no patient ids, so rows of "
                                     "one patient count as independent"]


def _evaluate_report(tmp_path: Path, csv: Path, *extra: str) -> tuple[str, dict[str, Any]]:
    page = tmp_path / "audit.html"
    rc = main(["evaluate", "--predictions", str(csv), "--out", str(tmp_path / "r.json"), "--report", str(page),
               "--json", *extra])
    assert rc == 0
    return page.read_text(), store.read_json(tmp_path / "r.json")


def test_audit_page_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    csv = tmp_path / "p.csv"
    _fixture().to_csv(csv, index=False)
    page, doc = _evaluate_report(tmp_path, csv, "--label", "y", "--score", "p", "--attribute", "sex,site",
                                 "--id-column", "id", "--n-boot", "100", "--test-resample", "balanced:sex")
    capsys.readouterr()
    first_img = page.index("<img")
    # the answer first: headline table and caveats before any figure
    assert page.index('<table class="headline">') < page.index("small groups, undefined metrics") < first_img
    assert "<pre" not in page[:first_img] and page.count("<pre>") == 1
    assert re.search(r'<details class="provenance"><summary>provenance: inputs, command, versions</summary>\s*<pre>',
                     page)
    for caption in ("ROC curves by sex", "precision-recall by site", "calibration (reliability) by sex",
                    "score distributions by site within each label"):
        assert caption in page
    assert "rates at one global threshold, smallest threshold with overall FPR &lt;= 0.2" in page
    assert "BY-corrected over all" in page
    assert "Resampled test set: balanced:sex" in page and doc["test_resample"]["fingerprint"][:16] in page
    sha = doc["inputs"]["predictions"]["sha256"]
    assert sha == store.sha256_file(csv) and sha in page
    assert "http://" not in page and "https://" not in page and "<script" not in page
    text = html.unescape(re.sub("<[^>]+>", " ", page))
    assert "y / site = clean: one class (no positives)" in text and "small group (" in text


def test_report_refuses_masks_and_batches(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    csv = tmp_path / "p.csv"
    _fixture(80).to_csv(csv, index=False)
    rc = main(["evaluate", "--predictions", str(csv), str(csv.with_name("q.csv")), "--label", "y", "--score", "p",
               "--attribute", "sex", "--report", str(tmp_path / "a.html")])
    assert rc != 0
    rc = main(["evaluate", "--predictions", str(csv), "--masks", "--attribute", "sex", "--report",
               str(tmp_path / "a.html")])
    err = capsys.readouterr().err
    assert rc == 2 and "classification predictions, not on --masks" in err and not (tmp_path / "a.html").exists()


# --- in a real browser -------------------------------------------------------------------------------------

@pytest.fixture
def browser(chromium: Any) -> Any:
    chromium.set_window_size(1280, 900)
    return chromium


def _check_in_browser(driver: Any, page: Path, shot: Path) -> dict[str, Any]:
    """Open the page; the headline table is shown above the first figure and no <pre> is visible above the
    fold; a screenshot of the first screen is saved to `shot` (and to $FMB_SCREENSHOT_DIR when set)."""
    driver.get(page.resolve().as_uri())
    facts = driver.execute_script("""
        const top = e => e.getBoundingClientRect().top + window.scrollY;
        const head = document.querySelector('table.headline');
        const imgs = [...document.querySelectorAll('img')];
        const pres = [...document.querySelectorAll('pre')].map(p => ({shown: p.getClientRects().length > 0,
                                                                      top: top(p)}));
        return {head: head ? top(head) : null, rows: head ? head.tBodies[0].rows.length : 0,
                img: imgs.length ? Math.min(...imgs.map(top)) : null, fold: window.innerHeight, pres: pres,
                broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length,
                open: [...document.querySelectorAll('details')].filter(d => d.open).length};""")
    assert facts["head"] is not None and facts["head"] < facts["fold"] and facts["rows"] >= 1
    assert facts["img"] is None or facts["head"] < facts["img"]
    assert all(not p["shown"] or p["top"] > facts["fold"] for p in facts["pres"]), facts["pres"]
    assert facts["broken"] == 0 and facts["open"] == 0
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("FMB_SCREENSHOT_DIR"):
        Path(os.environ["FMB_SCREENSHOT_DIR"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["FMB_SCREENSHOT_DIR"]) / shot.name)
    return facts


def test_audit_page_in_chromium(tmp_path: Path, browser: Any, capsys: pytest.CaptureFixture) -> None:
    csv = tmp_path / "p.csv"
    _fixture().to_csv(csv, index=False)
    _evaluate_report(tmp_path, csv, "--label", "y", "--score", "p", "--attribute", "sex,site", "--n-boot", "100",
                     "--test-resample", "prevalence:sex")
    capsys.readouterr()
    facts = _check_in_browser(browser, tmp_path / "audit.html", tmp_path / "audit-fixture.png")
    assert facts["rows"] == 2 and len(facts["pres"]) == 1


@pytest.mark.slow
def test_audit_page_on_real_predictions_in_chromium(real_data: Path, tmp_path: Path, browser: Any,
                                                    capsys: pytest.CaptureFixture) -> None:
    """The CheXNet reproduction's 22,433 NIH ChestX-ray14 test predictions (Effusion, Cardiomegaly) by sex and
    age, with a resampled test set matched on age."""
    root = real_data / "nih-cxr14"
    meta = pd.read_csv(root / "Data_Entry_2017_v2020.csv.gz",
                       usecols=["Image Index", "Finding Labels", "Patient Age", "Patient Gender"])
    df = pd.read_csv(root / "preds.csv").merge(meta, on="Image Index", how="left", validate="one_to_one")
    for f in ("Effusion", "Cardiomegaly"):
        df[f] = df["Finding Labels"].str.split("|").apply(lambda items, f=f: int(f in items))
    csv = tmp_path / "nih.csv"
    df.to_csv(csv, index=False)
    page, doc = _evaluate_report(
        tmp_path, csv, "--label", "Effusion,Cardiomegaly", "--score", "prob_Effusion,prob_Cardiomegaly",
        "--attribute", "Patient Gender,Patient Age", "--bins", "Patient Age=0,40,60,200", "--id-column",
        "Image Index", "--n-boot", "200", "--test-resample", "matched:Patient Gender:0,40,60,80",
        "--age-column", "Patient Age")
    capsys.readouterr()
    assert doc["test_resample"]["params"]["age_col"] == "Patient Age" and len(doc["test_resample"]["ids"]) > 10_000
    facts = _check_in_browser(browser, tmp_path / "audit.html", tmp_path / "audit-nih.png")
    assert facts["rows"] == 4  # 2 findings x 2 attributes
