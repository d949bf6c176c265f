"""Issue 28.2: nothing the product did not write is ever deleted, with or without --force. A user's file and a
user's subfolder (with a file) are put in every folder that `run`, `evaluate`, `compare`, `sweep` + `study report`,
`run-suite`, `leaderboard build` and `docs` write into; each command runs with and without --force (where it has
one) and every user file must still be there, byte for byte. A folder given as --evidence that holds a user's
files is refused (exit 2, one line) with and without --force. Tiny runs: random-weight ResNet-18 (moco-cxr) on 40
synthetic images, --n-boot 20 --n-perm 20 (what is kept does not depend on how many resamples: evaluate's 6,000-row
demo costs 0.64 CPU-s at 200 and 0.25 at 50); the results and feature cache are shared by the tests of this file."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from fairmedbench.benchmark.evidence import MANIFEST
from fairmedbench.cli import main

NUMBERS = ["--n-boot", "20", "--n-perm", "20"]
TINY = ["--weights", "random", "--dataset-option", "n=40", "--hparam", "epochs=3", "--device", "cpu", "--precision",
        "fp32", *NUMBERS]
RUN = ["run", "--model", "moco-cxr", "--dataset", "synth-contrast", "--attribute", "sex", *TINY]


def plant(folder: Path) -> dict[Path, bytes]:
    """A user's file and a user's subfolder holding a file, in `folder`; their bytes by path."""
    files = {folder / "my-notes.txt": f"notes kept in {folder.name}\n".encode(),
             folder / "my-data" / "thesis.tex": b"\\section{Results}\n"}
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def intact(planted: dict[Path, bytes]) -> None:
    for path, data in planted.items():
        assert path.is_file() and path.read_bytes() == data, f"{path} was deleted or changed"


def manifest_verifies(pack: Path) -> None:
    """Every file MANIFEST.sha256 lists has the listed sha256 (`sha256sum -c`, in Python)."""
    for line in (pack / MANIFEST).read_text().splitlines():
        digest, rel = line.split("  ", 1)
        assert hashlib.sha256((pack / rel).read_bytes()).hexdigest() == digest, rel


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> None:
    """`argv` exits 2 with one line on stderr that holds each of `needles`."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("benchmark: error: "), err
    assert all(n in err[0] for n in needles), err[0]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, tiny_feature_cache: Path) -> tuple[Path, list[str]]:
    """A folder for this file's tests and the --out/--cache-dir options they share (the session's feature cache)."""
    root = tmp_path_factory.mktemp("user-files")
    return root, ["--out", str(root / "results"), "--cache-dir", str(tiny_feature_cache)]


def test_run_keeps_user_files_in_its_folders_and_evidence_pack(shared: tuple[Path, list[str]],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root, where = shared
    planted = plant(root / "results")
    proj = root / "proj"  # a project folder given as --evidence: refused before any work, with or without --force
    planted |= plant(proj)
    for force in ([], ["--force"]):
        refused(capsys, [*RUN, *where, "--evidence", str(proj), *force], f"--evidence {proj}", "not an evidence pack",
                "nothing in it is replaced or deleted")
    assert not (root / "results" / "runs").exists()  # refused before the run started
    pack = root / "run-pack"
    assert main([*RUN, *where, "--report", "--evidence", str(pack)]) == 0
    run_dir = next((root / "results" / "runs").rglob("summary.json")).parent
    for folder in (root / "results" / "runs", run_dir.parent, run_dir, pack, pack / "results"):
        planted |= plant(folder)
    assert main([*RUN, *where, "--report"]) == 0  # reused
    # an earlier pack: replaced only with --force (which also recomputes the run in its folder)
    refused(capsys, [*RUN, *where, "--evidence", str(pack)], "holds an evidence pack", "--force")
    assert main([*RUN, *where, "--report", "--force", "--evidence", str(pack)]) == 0
    intact(planted)
    manifest_verifies(pack)
    assert "my-notes.txt" not in (pack / MANIFEST).read_text()


def test_evaluate_keeps_user_files_in_out_folders_and_evidence_pack(shared: tuple[Path, list[str]],
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = shared
    work = root / "evaluate"
    work.mkdir()
    monkeypatch.chdir(work)  # the default results/evaluate/<name>-<id>/ is under the working folder
    evaluate = ["evaluate", "--demo", *NUMBERS]
    planted = plant(work)
    assert main(evaluate) == 0
    default = next((work / "results" / "evaluate").glob("demo-*"))
    planted |= plant(default) | plant(default.parent)
    out = work / "mine"
    planted |= plant(out)
    elsewhere = ["--out", str(out / "r.json"), "--out-table", str(out / "t.csv"), "--report", str(out / "a.html")]
    pack = work / "pack"
    for force in ([], ["--force"]):
        assert main([*evaluate, *force]) == 0
        assert main([*evaluate, *elsewhere, *force]) == 0
        # the working folder (it holds the user's files) as the pack: refused, with or without --force
        refused(capsys, [*evaluate, "--evidence", ".", *force], "--evidence .", "not an evidence pack")
    assert main([*evaluate, "--evidence", str(pack)]) == 0
    planted |= plant(pack)
    refused(capsys, [*evaluate, "--evidence", str(pack)], "holds an evidence pack", "--force")
    assert main([*evaluate, "--evidence", str(pack), "--force"]) == 0
    assert main([*evaluate, *elsewhere, "--evidence", str(pack), "--force"]) == 0  # outputs copied in
    intact(planted)
    manifest_verifies(pack)


def test_compare_keeps_user_files(shared: tuple[Path, list[str]]) -> None:
    root, where = shared
    compare = ["compare", "--model", "moco-cxr", "--dataset", "synth-contrast", "--attribute", "sex", "--mitigations",
               "erm,resampling", "--seeds", "0,1", *TINY, *where, "--report"]
    planted = plant(root / "results")
    assert main(compare) == 0
    planted |= plant(root / "results" / "compare")
    for force in ([], ["--force"]):
        assert main([*compare, *force]) == 0
    intact(planted)


STUDY = """models: [moco-cxr]
datasets: [synth-contrast]
attributes: [sex]
usages: [lp]
mitigations: [erm]
seeds: [0]
hparams: {epochs: 3}
weights: random
n_boot: 20
dataset_options:
  n: 40
"""


def test_sweep_and_study_report_keep_user_files(shared: tuple[Path, list[str]]) -> None:
    root, where = shared
    study = root / "userfiles.yaml"
    study.write_text(STUDY)
    sweep = ["sweep", str(study), *where, "--device", "cpu"]
    assert main(sweep) == 0
    folder = root / "results" / "studies" / "userfiles"
    planted = plant(folder)
    dest = root / "study-page"
    planted |= plant(dest)
    for force in ([], ["--force"]):
        assert main([*sweep, *force]) == 0
        assert main(["study", "report", str(study), "--out", where[1]]) == 0
        planted |= plant(folder / "report") | plant(folder / "report" / "figures")
        assert main(["study", "report", str(study), "--out", where[1], "--dest", str(dest)]) == 0
    assert (dest / "study.html").is_file()
    intact(planted)


def test_run_suite_and_leaderboard_build_keep_user_files(shared: tuple[Path, list[str]]) -> None:
    from fairmedbench.benchmark.datasets import load_with_split
    from fairmedbench.leaderboards import suites

    root, where = shared
    if "user-files" not in suites.SUITES:
        _, split = load_with_split("synth-contrast", None, seed=0, n=40)
        suites.register_suite(suites.Suite("user-files", "1.0", "test suite: one tiny synthetic entry", (
            suites.Entry("synth-contrast", ("sex",), "lp", seeds=(0,), split_fingerprint=split.fingerprint,
                         test_fingerprint=suites.test_fingerprint(split.ids["test"]), n_test=len(split.ids["test"]),
                         options=(("n", 40),)),)))
    suite = ["run-suite", "user-files", "--model", "moco-cxr", "--weights", "random", "--n-boot", "200", *where,
             "--device", "cpu"]
    bundle = root / "bundle"
    planted = plant(bundle)
    assert main([*suite, "--bundle", str(bundle)]) == 0
    planted |= plant(bundle / "results")
    for force in ([], ["--force"]):
        assert main([*suite, "--bundle", str(bundle), *force]) == 0
    clean = root / "clean-bundle"  # a bundle holding a user's file is not submittable: a fresh one is submitted
    assert main([*suite, "--bundle", str(clean)]) == 0
    boards = root / "boards"
    planted |= plant(boards) | plant(boards / "user-files")
    assert main(["submit", str(clean), "--board", "user-files", "--root", str(boards)]) == 0
    planted |= plant(boards / "user-files" / "submissions")
    for _ in range(2):
        assert main(["leaderboard", "build", "--board", "user-files", "--root", str(boards)]) == 0
    assert (boards / "user-files" / "index.html").is_file()
    intact(planted)


def _fake_mkdocs(pages: list[str]) -> object:
    """A stand-in for `python -m mkdocs build ... -d DIR`: like mkdocs, it empties DIR, then writes `pages`."""
    import shutil
    import subprocess

    def run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        site = Path(cmd[cmd.index("-d") + 1])
        if site.is_dir():
            for child in site.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        for rel in pages:
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(f"<html>{rel}</html>")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def test_docs_out_keeps_user_files_and_replaces_only_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`benchmark docs --out DIR` builds elsewhere and copies its files over: mkdocs' own clean of DIR never runs on
    the user's folder; a page an earlier build wrote and this one does not is deleted unless it was edited."""
    import importlib.util

    from fairmedbench.report import docs

    real_find = importlib.util.find_spec
    monkeypatch.setattr(docs.importlib.util, "find_spec",
                        lambda name, *a: object() if name in ("mkdocs", "material") else real_find(name, *a))
    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")
    site = tmp_path / "site"
    planted = plant(site)
    argv = ["docs", "--config", str(tmp_path / "mkdocs.yml"), "--out", str(site)]
    monkeypatch.setattr(docs.subprocess, "run", _fake_mkdocs(["index.html", "a/index.html", "b/index.html",
                                                              "c/index.html"]))
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"site: {site / 'index.html'}"
    (site / "b" / "index.html").write_text("edited by hand")
    planted |= plant(site / "a")
    monkeypatch.setattr(docs.subprocess, "run", _fake_mkdocs(["index.html", "d/index.html"]))
    assert main(argv) == 0
    intact(planted)
    assert (site / "d" / "index.html").read_text() == "<html>d/index.html</html>"
    assert not (site / "c").exists()  # the earlier build's page, unchanged: gone with its emptied folder
    assert (site / "a").is_dir() and not (site / "a" / "index.html").exists()  # its page gone, the user's files kept
    assert (site / "b" / "index.html").read_text() == "edited by hand"  # edited: not the build's any more


@pytest.mark.slow
def test_real_docs_build_keeps_user_files(tmp_path: Path) -> None:
    """The real `mkdocs build --strict` (about a minute) into a folder holding a user's files."""
    import subprocess

    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")
    repo = Path(__file__).resolve().parents[2]
    site = tmp_path / "site"
    planted = plant(site)
    proc = subprocess.run([sys.executable, "-m", "fairmedbench", "docs", "--out", str(site)], cwd=repo,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (site / "index.html").is_file()
    intact(planted)
