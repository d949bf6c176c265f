"""mkdocs hook: adds the pages generated from the registries and pulls the README's set-up commands.

The checkout that holds this mkdocs.yml is put first on sys.path, so the site describes this checkout's
registries (not another installed copy of fairmedbench).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fairmedbench.report.docs import generate_pages, insert_readme_blocks  # noqa: E402

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every generated page (metric sheet, catalogues) as an in-memory file."""
    from mkdocs.structure.files import File

    for path, body in generate_pages(ROOT).items():
        files.append(File.generated(config, path, content=body))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace `<!-- readme: MARK -->` by the README's fenced block under `<!-- MARK -->`."""
    return insert_readme_blocks(markdown, (ROOT / "README.md").read_text(encoding="utf-8"))
