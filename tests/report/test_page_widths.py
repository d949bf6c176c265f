"""Issue 28 (smaller items): no page scrolls sideways at 1400 or 390 px in headless Chromium (a wide table
scrolls inside its own box), and a figure keeps its natural size on a phone, in a box that scrolls, instead of
shrinking to unreadable text. Audit, run, study and board pages; screenshots are kept beside the pages (and
copied to $FMB_SCREENSHOT_DIR when set)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fairmedbench.cli import main
from fairmedbench.report.study import write_study_report

WIDTHS = (1400, 390)

# page-level overflow; every table inside a box that scrolls (or fitting its parent); every figure's image within
# its figure's box or the figure scrolls; on a phone each figure image at its natural width (1:1 pixels)
MEASURE = """
const de = document.documentElement;
const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
const tables = [...document.querySelectorAll('table')].map(t => {
  const box = t.closest('.scroll');
  return {inScroll: !!box && scrolls(box), right: t.getBoundingClientRect().right,
          parentRight: t.parentElement.getBoundingClientRect().right};
});
const figures = [...document.querySelectorAll('figure')].filter(f => f.querySelector('img')).map(f => {
  const img = f.querySelector('img');
  return {scrolls: scrolls(f), fits: f.scrollWidth <= f.clientWidth + 1, shown: img.getBoundingClientRect().width,
          natural: img.naturalWidth, boxRight: f.getBoundingClientRect().right};
});
return {page: de.scrollWidth, client: de.clientWidth, tables: tables, figures: figures};
"""


def _check(driver: Any, page: Path, shots: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for width in WIDTHS:
        driver.set_window_size(width, 1200)
        driver.get(page.resolve().as_uri())
        facts = driver.execute_script(MEASURE)
        shot = shots / f"{page.stem}-{width}.png"
        assert driver.save_screenshot(str(shot))
        if os.environ.get("FMB_SCREENSHOT_DIR"):
            Path(os.environ["FMB_SCREENSHOT_DIR"]).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(os.environ["FMB_SCREENSHOT_DIR"]) / shot.name)
        assert facts["page"] <= facts["client"], (page.name, width, facts["page"], facts["client"])
        for t in facts["tables"]:
            assert t["inScroll"] or t["right"] <= t["parentRight"] + 1, (page.name, width, t)
        for f in facts["figures"]:
            assert f["boxRight"] <= facts["client"] + 1 and (f["fits"] or f["scrolls"]), (page.name, width, f)
            if width == 390:
                assert f["shown"] >= f["natural"], (page.name, f)  # 1:1 pixels (plus its border)
        out[width] = facts
    return out


def test_audit_page_fits_at_1400_and_390_px(tmp_path: Path, chromium: Any, capsys: pytest.CaptureFixture) -> None:
    rng = np.random.default_rng(0)
    n = 400
    y1, y2 = rng.integers(0, 2, n), rng.integers(0, 2, n)
    sex, site = rng.choice(["F", "M"], n), rng.choice(["north", "south", "east"], n)
    pd.DataFrame({"finding_with_a_long_name_one": y1, "finding_with_a_long_name_two": y2,
                  "p1": np.clip(0.3 * y1 + 0.7 * rng.uniform(size=n), 0, 1),
                  "p2": np.clip(0.3 * y2 + 0.7 * rng.uniform(size=n), 0, 1), "sex": sex, "site": site}
                 ).to_csv(tmp_path / "p.csv", index=False)
    assert main(["evaluate", "--predictions", str(tmp_path / "p.csv"), "--label",
                 "finding_with_a_long_name_one,finding_with_a_long_name_two", "--score", "p1,p2",
                 "--attribute", "sex,site", "--n-boot", "20", "--n-perm", "20", "--out", str(tmp_path / "r.json"),
                 "--report", str(tmp_path / "audit.html")]) == 0
    capsys.readouterr()
    facts = _check(chromium, tmp_path / "audit.html", tmp_path)
    assert facts[390]["figures"] and facts[390]["tables"]
    # on the phone the wide tables scroll inside their box; at 1400 px nothing is clipped by a figure
    assert any(t["right"] > t["parentRight"] + 1 for t in facts[390]["tables"])


def test_run_and_study_pages_fit_at_1400_and_390_px(tmp_path: Path, chromium: Any) -> None:
    from fairmedbench.benchmark.run import RunOptions, run
    from fairmedbench.report.html import write_run_report
    from fairmedbench.spec import RunSpec

    out = tmp_path / "results"
    outcome = run(RunSpec(model="c2l", weights="random", dataset="synth-underrep", usage="lp", seeds=(0,),
                          attributes=("sex", "age"), n_boot=20, n_perm=20, hparams={"epochs": 2},
                          dataset_options={"n": 60, "config": {"size": 64}}),
                  RunOptions(out_root=str(out), cache_dir=str(tmp_path / "cache"), device="cpu", log=lambda m: None))
    run_page = write_run_report(outcome.out_dir, outcome.seed_docs)
    _check(chromium, run_page, tmp_path)
    cell = {"model": "c2l", "dataset": "synth-underrep", "usage": "lp", "mitigation": "erm", "prompt": None,
            "attributes": ["sex", "age"], "seeds": [0], "hparams": {"epochs": 2}, "train_group_share": None,
            "share_group": None, "train_size": None, "prevalence": None, "prevalence_on": None}
    plan = out / "studies" / "widths" / "plan.json"
    plan.parent.mkdir(parents=True)
    plan.write_text(json.dumps({"study": "widths", "source": "test", "study_sha256": "0" * 64, "cells": [
        {"cell": cell, "run_id": outcome.config.run_id, "run_dir": str(outcome.out_dir.relative_to(out)),
         "encode": "c2l|synth-underrep", "status": "done", "reason": None, "error": None},
        {"cell": {**cell, "usage": "clip-zs"}, "run_id": None, "run_dir": None, "encode": None, "status": "skipped",
         "reason": "clip usages need a vision-language model", "error": None}]}))
    report = write_study_report(plan, out, tmp_path / "report")
    facts = _check(chromium, Path(report.html), tmp_path)
    assert facts[390]["figures"], "the study page has figures to check"


def test_board_page_fits_at_1400_and_390_px(tmp_path: Path, chromium: Any) -> None:
    from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
    from tests.leaderboards.bundle_factory import model_card, pending_synthetic_suite, write_bundle

    suite = pending_synthetic_suite()
    for name, quality in (("alpha-fm", 2.0), ("beta-fm", 0.7)):
        bundle = write_bundle(tmp_path / f"bundle-{quality}", suite, {**model_card(name, quality), "revision": "r1"},
                              description="d")
        assert submit_bundle(bundle, suite.name, tmp_path / "leaderboards").accepted
    built = build_board(suite.name, tmp_path / "leaderboards")
    facts = _check(chromium, built["html"], tmp_path)
    assert facts[1400]["tables"]
