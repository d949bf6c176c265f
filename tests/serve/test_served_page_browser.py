"""The served board page in a real browser (headless Chromium's --dump-dom, scripts run): an empty board opens
saying nothing is ranked yet; after a submission its row is listed self-reported; after a worker verified it, the
row is ranked. Skips with the reason where Chromium is absent."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import requests
from bundle_factory import passed_record, record_verification
from serve_support import auth, serving, tar_of

from fairmedbench.leaderboards.suites import Suite
from fairmedbench.serve.service import Service
from fairmedbench.serve.worker import run_one


def _dom(url: str, profile: Path) -> str:
    """The page's DOM after its scripts ran, as headless Chromium dumps it."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("headless Chromium not found: apt-get install -y chromium")
    done = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={profile}", "--dump-dom", url], capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-500:]
    return done.stdout


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _opening(dom: str) -> str:
    """The board page's opening sentence (its first answer paragraph)."""
    found = re.search(r'<p class="answer">(.*?)</p>', dom, re.S)
    assert found is not None
    return _text(found.group(1))


def _rows(dom: str, table: str) -> list[str]:
    """The text of each body row of the table with this id ([] when the page has no such table)."""
    found = re.search(rf'<table id="{table}".*?<tbody>(.*?)</tbody>', dom, re.S)
    return [] if found is None else [_text(r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), re.S)]


def test_the_served_board_in_a_browser_empty_then_self_reported_then_ranked(
        tmp_path: Path, bundles: dict[str, Path], suite: Suite) -> None:
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("headless Chromium not found: apt-get install -y chromium")
    service = Service(tmp_path / "boards")
    profile = tmp_path / "chromium"
    with serving(service) as url:
        assert 'href="/boards/test-pinned"' in requests.get(url + "/", timeout=60).text
        board = url + "/boards/test-pinned"
        empty = _dom(board, profile)
        assert _opening(empty) == "Nothing is ranked yet: no submission on this board."
        assert _rows(empty, "board") == [] and _rows(empty, "self-reported") == []

        r = requests.post(url + "/api/submissions", data=tar_of(bundles["a"]), headers=auth(service.add_token("a")),
                          timeout=120)
        assert r.status_code == 201
        listed = _dom(board, profile)
        assert _opening(listed).startswith("No row is ranked: none of the ")
        assert _rows(listed, "board") == []
        rows = _rows(listed, "self-reported")
        assert rows and all(" m-a r1 " in f" {row} " and "self-reported" in row for row in rows)

        def verify_ok(cmd: Sequence[str], timeout: float) -> tuple[int, str]:
            record_verification(Path(cmd[4]), passed_record(suite))
            return 0, "verified: every entry passed\n"

        assert run_one(service, "w1", 60, 600, verify_ok) is not None
        ranked = _dom(board, profile)
        assert re.match(r"\d+ verified row\(s\) are ranked in \d+ \(dataset, usage, attribute\) group\(s\); first by "
                        r"ES: .*m-a r1", _opening(ranked))
        rows = _rows(ranked, "board")
        assert rows and all(row.startswith("1 m-a r1 ") and "verified" in row for row in rows)
        assert _rows(ranked, "self-reported") == []
