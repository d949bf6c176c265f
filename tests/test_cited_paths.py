"""Docstrings and comments cite files that exist in the repository: every repository path a source, test or
benchmark file names (fairmedbench/..., docs/..., benchmarks/..., tests/...) exists, and none cites the design
notes kept outside the repository (METRICS.md)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CITED = re.compile(r"(?<![\w/.{<-])((?:fairmedbench|docs|benchmarks|tests)/[\w/.-]*\w\.(?:py|md|yaml|yml))\b")
#: paths built at run time or written by a command, named in the text but not kept in the repository
GENERATED = {"docs/reference/metrics.md", "docs/reference/profiles.md"}


def _sources() -> list[Path]:
    return [p for d in ("fairmedbench", "tests", "benchmarks") for p in sorted((REPO / d).rglob("*.py"))]


def test_the_pattern_finds_repository_paths_only() -> None:
    text = "see fairmedbench/metrics/specs.py (and docs/index.md), not out/tests/x.py or /tmp/fairmedbench/a.py"
    assert CITED.findall(text) == ["fairmedbench/metrics/specs.py", "docs/index.md"]


def test_every_cited_repository_path_exists() -> None:
    missing = [f"{p.relative_to(REPO)}: {m}" for p in _sources() for m in CITED.findall(p.read_text())
               if m not in GENERATED and not (REPO / m).exists()]
    assert missing == []
    assert [str(p.relative_to(REPO)) for p in _sources() if "METRICS.md" in p.read_text()] == \
        ["tests/test_cited_paths.py"]
