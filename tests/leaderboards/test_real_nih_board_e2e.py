"""The NIH real board end to end on the 621 real images: run-suite, submit, build, the page in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.benchmark.suite import run_suite
from fairmedbench.leaderboards.suites import NIH_TEST, get_suite

ENTRY = "nih-cxr14__lp__sex+age"
N_PRESENT_TEST = 115  # of the 621 real images, those of the board's pinned test patients


@pytest.mark.slow  # encodes 621 real images with a random-weight ResNet-18 (about 5 minutes on 2 shared cores)
def test_nih_real_board_run_submit_build_and_browse(real_data: Path, tmp_path: Path, chromium: Any) -> None:
    nih = real_data / "nih-cxr14"
    if not (nih / "images").is_dir():
        pytest.skip(f"real NIH images not found at {nih / 'images'}")
    opts = RunOptions(data_root=str(nih), out_root=str(tmp_path / "results"), cache_dir=str(tmp_path / "cache"),
                      device="cpu")
    bundle = run_suite("nih-cxr14", "moco-cxr", tmp_path / "bundle", opts, weights="random", n_boot=50,
                       revision="random-r1", entries=[ENTRY])
    doc = json.loads((bundle / "results" / ENTRY / "seed0.json").read_text())
    assert doc["inputs"]["dataset"]["n_test"] == N_PRESENT_TEST

    boards = tmp_path / "leaderboards"
    outcome = submit_bundle(bundle, "nih-cxr14", boards)
    assert outcome.accepted, outcome.reasons
    summary = json.loads((outcome.path / "submission.json").read_text())
    assert {r["attribute"] for r in summary["rows"]} == {"sex", "age"}
    assert all(r["coverage"] == {"test_set": NIH_TEST.name, "evaluated": N_PRESENT_TEST, "pinned": 22013,
                                 "complete": False} for r in summary["rows"])
    html = Path(build_board("nih-cxr14", boards)["html"])

    driver = chromium
    driver.set_window_size(1600, 1400)
    driver.get(html.resolve().as_uri())
    text = driver.find_element("tag name", "body").text
    assert NIH_TEST.name in text and NIH_TEST.fingerprint in text
    assert get_suite("nih-cxr14").entries[0].test_set.coverage_rule() in text
    rows = driver.find_elements("css selector", "#self-reported tbody tr")  # not verified: listed unranked
    assert len(rows) == 2
    for r in rows:
        cells = [c.text for c in r.find_elements("css selector", "td")]
        assert cells[2].split("\n")[0] == "random-r1" and "random:seed=" in cells[2]  # bound to its weights
        assert [cells[1], *cells[3:7]] == ["moco-cxr", "nih-cxr14", "lp", cells[5], "115 / 22,013 (0.5%) partial"]
        assert cells[5] in ("sex", "age") and cells[0] == "—"
    shots = Path(os.environ.get("FMB_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(shots / "nih-real-board.png"))
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
