"""Evidence packs (issue 23.4): `evaluate --evidence DIR` and `run --evidence DIR` write one folder whose
MANIFEST.sha256 `sha256sum -c` verifies, and which fails once any file in it is edited; a non-empty folder is
refused before any work unless it holds an earlier pack and --force is given (then only that pack's files go)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fairmedbench.benchmark.evidence import MANIFEST
from fairmedbench.cli import main

SHA256SUM = shutil.which("sha256sum")


def _check(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([SHA256SUM, "-c", "--quiet", MANIFEST], cwd=folder, capture_output=True, text=True)


def _tamper_each(pack: Path, tmp: Path) -> None:
    """The manifest verifies the pack; editing any one file (a copy of the pack per file) makes it fail."""
    assert _check(pack).returncode == 0, _check(pack).stdout
    files = [p.relative_to(pack) for p in pack.rglob("*") if p.is_file() and p.name != MANIFEST]
    listed = {line.split("  ", 1)[1] for line in (pack / MANIFEST).read_text().splitlines()}
    assert listed == {f.as_posix() for f in files}, "relative paths, every file but the manifest"
    for rel in files:
        copy = Path(shutil.copytree(pack, tmp / f"copy-{rel.as_posix().replace('/', '_')}"))
        with (copy / rel).open("ab") as fh:
            fh.write(b" ")
        assert _check(copy).returncode != 0, rel
        shutil.rmtree(copy)


@pytest.mark.skipif(SHA256SUM is None, reason="sha256sum (coreutils) not installed")
def test_evaluate_evidence_pack_verifies_and_detects_any_edit(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "pack"
    assert main(["evaluate", "--demo", "--n-boot", "50", "--evidence", str(pack)]) == 0
    names = {p.name for p in pack.iterdir()}
    assert {"audit.html", "result.json", "table.csv", "result.predictions.parquet", "command.txt",
            "environment.json", "summary.md", MANIFEST} == names
    doc = json.loads((pack / "result.json").read_text())
    assert doc["files"]["predictions"] in names  # the result cites the predictions file beside it
    summary = (pack / "summary.md").read_text()
    for needle in ("Art. 10(2)(f)-(g)", "10(5)", "Art. 13(3)(b)(v)", "Art. 15", "FDA", "not legal advice",
                   "`audit.html`", "## Operating threshold", "| label | sex | all | 4257 |"):
        assert needle in summary, needle
    assert "--evidence" in (pack / "command.txt").read_text()
    env = json.loads((pack / "environment.json").read_text())
    assert env["packages"]["numpy"] and env["fairmedbench_version"]
    _tamper_each(pack, tmp_path)
    capsys.readouterr()
    # a non-empty folder is refused before any work, with one line; --force replaces it
    assert main(["evaluate", "--demo", "--n-boot", "50", "--evidence", str(pack)]) == 2
    err = capsys.readouterr().err
    assert "exists and is not empty" in err and "--force" in err and len(err.strip().splitlines()) == 1
    (pack / "stray.txt").write_text("x")  # a file the pack did not write: kept by --force, which replaces the pack's
    assert main(["evaluate", "--demo", "--n-boot", "50", "--evidence", str(pack), "--force"]) == 0
    assert (pack / "stray.txt").read_text() == "x" and _check(pack).returncode == 0


def test_a_file_is_not_a_pack_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["evaluate", "--demo", "--n-boot", "0", "--evidence", str(tmp_path / "f")]) == 2
    assert "is a file" in capsys.readouterr().err


@pytest.mark.skipif(SHA256SUM is None, reason="sha256sum (coreutils) not installed")
def test_run_evidence_pack(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    argv = ["run", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-contrast",
            "--dataset-option", "n=30", "--n-boot", "20", "--hparam", "epochs=3", "--device", "cpu", "--seeds", "0,1",
            "--out", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"), "--evidence", str(pack)]
    assert main(argv) == 0
    names = {p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file()}
    assert {"report.html", "results/seed0.json", "results/seed1.json", "table.csv", "command.txt",
            "environment.json", "summary.md", MANIFEST} <= names
    assert {"results/seed0.predictions.parquet", "results/seed1.predictions.parquet"} <= names
    assert "seed" in (pack / "table.csv").read_text().splitlines()[0]
    # two seeds: the summary says whose per-group findings it shows, then every seed's summary, under the run's id
    summary = (pack / "summary.md").read_text()
    assert "the per-group findings below are seed 0's (the first), followed by the summary across seeds" in summary
    across = [line for line in summary.splitlines() if "across 2 seeds (mean ± std [t 95% CI])" in line]
    assert len(across) == 2 and all("ΔAUC" in line for line in across)  # label by sex, label by age
    folder = next((tmp_path / "r" / "runs").rglob("summary.json")).parent
    assert f"- Result id: {folder.name}" in summary
    # issue 34.3: the deployer sections (deployer.py) of seed 0; the monitor's baseline is an evaluate audit of it
    for needle in ("## EU AI Act Art. 13: for deployers (model card)", "- Intended use (as examined): model "
                   "moco-cxr (weights random:seed=0), usage lp, mitigation erm",
                   "## EU AI Act Art. 14: what a human overseer should watch",
                   "## EU AI Act Art. 72: post-market monitoring plan", "benchmark evaluate --predictions "
                   "results/seed0.predictions.parquet --label label:label --score score:label --attribute "
                   "attr:sex,attr:age --threshold val_youden --out results/audit.json",
                   "benchmark monitor --baseline results/audit.json --stream LATER.parquet"):
        assert needle in summary, needle
    assert _check(pack).returncode == 0
    with (pack / "results" / "seed1.json").open("ab") as fh:
        fh.write(b"\n")
    assert _check(pack).returncode != 0
