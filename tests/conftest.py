"""Shared test set-up: offline hub, and the real-data folder that tests skip without."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the torch encoder path (the reference) everywhere but in the tests of the paths themselves, which set their own:
# an ONNX export per random-weight model would cost each test tens of CPU-seconds
os.environ.setdefault("FMB_ENCODER_PATH", "torch")

REPO = Path(__file__).resolve().parents[1]


def real_data_root() -> Path:
    """Where the shared real data lives: $FMB_REAL_DATA, default ../shared/real."""
    return Path(os.environ.get("FMB_REAL_DATA", REPO.parent / "shared" / "real"))


@pytest.fixture(scope="session")
def real_data() -> Path:
    """The real-data root; skips the test with a reason when it is absent."""
    root = real_data_root()
    if not root.is_dir():
        pytest.skip(f"real data not found at {root} (set FMB_REAL_DATA to the shared/real folder)")
    return root


@pytest.fixture(scope="session")
def tiny_feature_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One feature cache for the session's tiny random-weight runs: the cache is keyed by content, so files that
    encode the same images with the same weights (moco-cxr on 40 synth-contrast images) encode them once."""
    return tmp_path_factory.mktemp("tiny-feature-cache")


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One headless Chromium (Debian's chromium + chromium-driver, driven by Selenium) shared by the page tests;
    each sets its window size. Skips with the install line when either is absent."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not binary or not chromedriver:
        pytest.skip("headless Chromium not found: apt-get install -y chromium chromium-driver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions",
                "--no-first-run"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(chromedriver), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
