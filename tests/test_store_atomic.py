"""The one atomic-write helper: files and staging folders get the mode a plain open()/mkdir() would give."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from fairmedbench.engine import store


@pytest.fixture(params=[0o022, 0o027, 0o002])
def mask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_written_files_respect_the_umask(tmp_path: Path, mask: int) -> None:
    frame = pd.DataFrame({"a": [1, 2]})
    paths = [store.write_json(tmp_path / "r.json", {"x": 1}), store.write_text(tmp_path / "index.html", "<p>"),
             store.write_parquet(tmp_path / "p.parquet", frame), store.write_table(tmp_path / "t.csv", frame)]
    assert store.umask() == mask
    assert {p.name: p.stat().st_mode & 0o777 for p in paths} == {p.name: 0o666 & ~mask for p in paths}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "p.parquet", "r.json", "t.csv"]  # no temp left
    assert pd.read_parquet(paths[2])["a"].tolist() == [1, 2]


def test_staging_folder_respects_the_umask_and_names_its_process(tmp_path: Path, mask: int) -> None:
    d = store.staging_dir(tmp_path / "cache", "abc")
    assert d.stat().st_mode & 0o777 == 0o777 & ~mask
    assert d.name.startswith(".tmp-abc-") and d.name.endswith(f"-{os.getpid()}@{os.uname().nodename}")
    assert store.remove_stale_staging(tmp_path / "cache") == [] and d.is_dir()  # this process is alive


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    def boom(tmp: str) -> None:
        Path(tmp).write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        store._atomic(tmp_path / "x.json", boom)
    assert list(tmp_path.iterdir()) == []


def test_a_run_folder_loses_the_partial_files_of_a_killed_writer(tmp_path) -> None:
    """kill -9 during write_json leaves `.<name>.*.tmp`; the next holder of the run lock removes it, and only it."""
    from fairmedbench.engine.store import remove_partial_files, write_json

    write_json(tmp_path / "seed0.json", {"a": 1})
    (tmp_path / ".seed1.json.x1y2_9ab.tmp").write_text('{"trunc')
    (tmp_path / ".notes.tmp").write_text("a user's file, not a partial write")
    gone = remove_partial_files(tmp_path)
    assert [p.name for p in gone] == [".seed1.json.x1y2_9ab.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.tmp", "seed0.json"]
