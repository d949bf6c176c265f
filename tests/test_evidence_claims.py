"""Issue 34.3: evidence packs for every kind of claim. `compare --evidence DIR`, `study report --evidence DIR` and one
pack per verified board row (`leaderboard build` -> <board>/evidence/<row>/) verify with the real `sha256sum -c`
(run in the pack folder) and with `benchmark evidence verify`, and both fail after one file is edited; the summary
maps the facts to Art. 13 (model card), Art. 14 (what to watch) and Art. 72 (the monitoring plan, whose command
lines run) beside Art. 10/15 and FDA, each figure read from the results and in the verdict words. Tiny runs:
random-weight ResNet-18 (moco-cxr) on 40 synthetic images; the board uses the leaderboard tests' bundle factory."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.evidence import MANIFEST, SIGNATURE
from fairmedbench.cli import main

sys.path.insert(0, str(Path(__file__).parent / "leaderboards"))
from bundle_factory import model_card, passed_record, pinned, record_verification, write_bundle  # noqa: E402

SHA256SUM = shutil.which("sha256sum")
needs_sha256sum = pytest.mark.skipif(SHA256SUM is None, reason="sha256sum (coreutils) not installed")
TINY = ["--weights", "random", "--dataset-option", "n=40", "--hparam", "epochs=3", "--device", "cpu", "--precision",
        "fp32", "--n-boot", "50", "--n-perm", "50"]
ARTICLES = ("## EU AI Act Art. 13: for deployers (model card)", "## EU AI Act Art. 14: what a human overseer should "
            "watch", "## EU AI Act Art. 72: post-market monitoring plan", "Art. 10(2)(f)-(g)", "Art. 15", "FDA",
            "not legal advice", "- Intended use (as examined):", "- Known limit:", "- Rule: Each group's look")


def sha256sum_c(pack: Path) -> int:
    """The exit status of coreutils' `sha256sum -c MANIFEST.sha256` run inside the pack folder."""
    return subprocess.run([str(SHA256SUM), "-c", "--quiet", MANIFEST], cwd=pack, capture_output=True).returncode


def verifies_and_fails_after_an_edit(pack: Path, tmp: Path, capsys: pytest.CaptureFixture[str],
                                     edit: str = "summary.md") -> None:
    """Both checks pass on the pack; on a copy with one file edited by one byte, both fail."""
    listed = {line.split("  ", 1)[1] for line in (pack / MANIFEST).read_text().splitlines()}
    on_disk = {p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file()} - {MANIFEST, SIGNATURE}
    assert listed == on_disk, "the manifest lists every file but itself and its signature, by relative path"
    assert sha256sum_c(pack) == 0
    capsys.readouterr()
    assert main(["evidence", "verify", str(pack)]) == 0
    assert f"verified: {len(listed)} files match {MANIFEST}" in capsys.readouterr().out
    copy = Path(shutil.copytree(pack, tmp / f"edited-{pack.name}"))
    with (copy / edit).open("ab") as fh:
        fh.write(b" ")
    assert sha256sum_c(copy) != 0
    assert main(["evidence", "verify", str(copy)]) == 1
    assert edit in capsys.readouterr().err
    shutil.rmtree(copy)


def summary_checks(pack: Path) -> str:
    """The summary's sections are there, in the page too; returns summary.md's text."""
    text = (pack / "summary.md").read_text()
    for needle in ARTICLES:
        assert needle in text, needle
    page = (pack / "summary.html").read_text()
    assert "<h2>EU AI Act Art. 72: post-market monitoring plan (executed by <code>benchmark monitor</code>)</h2>" \
        in page and "<table>" in page and "<script" not in page
    return text


def monitor_commands(plan: str) -> list[list[str]]:
    """The command lines of the code blocks in `plan` (the Art. 72 section, or a part of it)."""
    return [shlex.split(line) for block in re.findall(r"```\n(.*?)```", plan, flags=re.S)
            for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, tiny_feature_cache: Path) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("claims")
    return root, ["--out", str(root / "results"), "--cache-dir", str(tiny_feature_cache)]


# ---------------------------------------------------------------------------------------------------- compare

COMPARE = ["compare", "--model", "moco-cxr", "--dataset", "synth-contrast", "--attribute", "sex", "--mitigations",
           "erm,resampling", "--seeds", "0,1", *TINY]


@pytest.fixture(scope="module")
def compare_pack(shared: tuple[Path, list[str]]) -> Path:
    """A tiny comparison (ERM and resampling, seeds 0 and 1) with its evidence pack."""
    root, where = shared
    pack = root / "compare-pack"
    assert main([*COMPARE, *where, "--evidence", str(pack)]) == 0
    return pack


@needs_sha256sum
def test_compare_pack(shared: tuple[Path, list[str]], compare_pack: Path, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    pack = compare_pack
    names = {p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file()}
    runs = {f"runs/synth-contrast/{m}/seed{s}.{ext}" for m in ("erm", "resampling") for s in (0, 1)
            for ext in ("json", "predictions.parquet")}
    assert names == {"compare.json", "compare.html", "summary.md", "summary.html", "command.txt", "environment.json",
                     MANIFEST, *runs}
    doc = json.loads((pack / "compare.json").read_text())
    text = summary_checks(pack)
    # every verdict sentence of the comparison, as stored (report/verdicts.py), escaped as markdown
    from fairmedbench.benchmark.deployer import md

    for row in doc["versus_erm"]:
        assert f"- {md(row['verdict']['sentence'])}\n" in text
    # each method's table row read from compare.json, and its first seed's per-group AUC from its result
    erm = next(r for r in doc["table"] if r["method"] == "erm")
    c = erm["auc"]
    assert f"AUC {c['mean']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]" in text
    seed0 = json.loads((pack / "runs/synth-contrast/erm/seed0.json").read_text())
    rep = seed0["result"]["reports"][0]
    female = rep["metrics"]["auc"]["female"]["value"]
    assert f"female {female:.3f} (n {rep['counts']['female']['n']})" in text
    assert "### synth-contrast / erm (seed 0)" in text and "### synth-contrast / resampling (seed 0)" in text
    verifies_and_fails_after_an_edit(pack, tmp_path, capsys, "runs/synth-contrast/erm/seed0.predictions.parquet")
    # a folder holding a user's file is refused in one line before any run, with or without --force
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    for force in ([], ["--force"]):
        capsys.readouterr()
        assert main([*COMPARE, *shared[1], "--evidence", str(tmp_path / "mine"), *force]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not an evidence pack" in err[0]
    assert (tmp_path / "mine" / "notes.txt").read_text() == "x"
    # the comparison's own results inside the pack folder are refused before any run
    capsys.readouterr()
    assert main([*COMPARE, "--out", str(tmp_path / "p" / "results"), "--evidence", str(tmp_path / "p")]) == 2
    assert "--out" in capsys.readouterr().err and not (tmp_path / "p").exists()


def test_compare_pack_monitoring_plan_runs(compare_pack: Path, tmp_path: Path) -> None:
    """ERM's Art. 72 commands run as written (in a copy of the pack): the evaluate audit of seed 0's predictions
    gives the run's threshold and group AUCs back, and the monitor reads it."""
    copy = Path(shutil.copytree(compare_pack, tmp_path / "plan"))
    text = (copy / "summary.md").read_text()
    erm_plan = text[text.index("### synth-contrast / erm (seed 0)", text.index("## EU AI Act Art. 72")):]
    audit, watch = monitor_commands(erm_plan)[:2]
    later = pd.read_parquet(copy / "runs/synth-contrast/erm/seed0.predictions.parquet").query("split == 'test'")
    later.assign(WINDOW=np.arange(len(later)) % 2).to_parquet(copy / "LATER.parquet")
    monkey = pytest.MonkeyPatch()
    monkey.chdir(copy)
    try:
        assert main([*audit[1:], "--n-boot", "0"]) == 0 and main([*watch[1:], "--n-boot", "0"]) == 0
    finally:
        monkey.undo()
    seed0 = json.loads((copy / "runs/synth-contrast/erm/seed0.json").read_text())["result"]
    again = json.loads((copy / "runs/synth-contrast/erm/audit.json").read_text())["result"]
    assert again["meta"]["thresholds"]["label:label"]["value"] == seed0["meta"]["thresholds"]["label"]["value"]
    assert (again["reports"][0]["metrics"]["auc"]["female"]["value"]
            == seed0["reports"][0]["metrics"]["auc"]["female"]["value"])
    assert (copy / "runs/synth-contrast/erm/monitor/alerts.json").is_file()


# ------------------------------------------------------------------------------------------------------ study

STUDY = """models: [moco-cxr]
datasets: [synth-contrast]
attributes: [sex]
usages: [lp]
mitigations: [erm]
seeds: [0]
hparams: {epochs: 3}
weights: random
n_boot: 50
dataset_options:
  n: 40
"""


@needs_sha256sum
def test_study_pack_signed(shared: tuple[Path, list[str]], tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    root, where = shared
    study = root / "claims.yaml"
    study.write_text(STUDY)
    assert main(["sweep", str(study), *where, "--device", "cpu"]) == 0
    secret = tmp_path / "secret"
    secret.write_bytes(b"k" * 32)
    secret.chmod(0o600)
    pack = root / "study-pack"
    assert main(["study", "report", str(study), "--out", where[1], "--evidence", str(pack), "--sign-key",
                 f"hmac:{secret}"]) == 0
    plan = json.loads((root / "results" / "studies" / "claims" / "plan.json").read_text())
    run_id = next(c["run_id"] for c in plan["cells"] if c["status"] == "done")
    names = {p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file()}
    assert {"study.html", "study.parquet", "study.csv", "plan.json", "summary.md", "summary.html", "command.txt",
            "environment.json", MANIFEST, SIGNATURE, f"runs/{run_id}/seed0.json",
            f"runs/{run_id}/seed0.predictions.parquet"} <= names
    assert any(n.startswith("figures/") for n in names)
    text = summary_checks(pack)
    assert f"### run {run_id}: moco-cxr / synth-contrast / lp / erm (seed 0)" in text
    assert "Cells of the plan: 1 done; 1 finished run(s) aggregated" in text
    verifies_and_fails_after_an_edit(pack, tmp_path, capsys, "study.csv")
    capsys.readouterr()
    assert main(["evidence", "verify", str(pack), "--key", f"hmac:{secret}"]) == 0
    # the report's own folder inside the pack folder is refused before any work, in one line
    capsys.readouterr()
    inside = tmp_path / "p2"
    assert main(["study", "report", str(study), "--out", where[1], "--dest", str(inside / "page"), "--evidence",
                 str(inside)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--dest {inside / 'page'} is inside it" in err[0] and not inside.exists(), err
    # a second report into the same folder needs --force, and replaces only the pack's files
    (pack / "mine.txt").write_text("kept")
    assert main(["study", "report", str(study), "--out", where[1], "--evidence", str(pack)]) == 2
    assert main(["study", "report", str(study), "--out", where[1], "--evidence", str(pack), "--force"]) == 0
    assert (pack / "mine.txt").read_text() == "kept" and not (pack / SIGNATURE).exists()
    assert sha256sum_c(pack) == 0


# ------------------------------------------------------------------------------------------------- board rows

BOARD = "test-evidence-rows"


def _suite() -> Any:
    from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, register_suite

    if BOARD not in SUITES:
        register_suite(Suite(BOARD, "1.0", "one pinned classification entry, one seed",
                             (pinned(Entry("synth-control", ("sex",), "linear_probe", seeds=(0,))),)))
    return SUITES.get(BOARD)


@needs_sha256sum
def test_board_row_packs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fairmedbench.benchmark.leaderboard import build_board, submit_bundle

    suite = _suite()
    root = tmp_path / "lb"
    subs = {}
    for name in ("alpha-fm", "beta-fm"):
        out = submit_bundle(write_bundle(tmp_path / name, suite, model_card(name, 0.8)), BOARD, root)
        assert out.accepted and out.path is not None, out.reasons
        subs[name] = out.path
    record_verification(subs["alpha-fm"], passed_record(suite))  # alpha is verified; beta is self-reported
    built = build_board(BOARD, root)
    board = json.loads(built["json"].read_text())
    rows = {r["model"]: r for r in board["rows"]}
    assert rows["alpha-fm"]["tier"] == "verified" and rows["beta-fm"]["tier"] == "self-reported"
    evidence = root / BOARD / "evidence"
    assert [p.name for p in evidence.iterdir()] == ["alpha-fm-r1-synth-control__linear_probe__sex-sex"]
    pack = evidence / "alpha-fm-r1-synth-control__linear_probe__sex-sex"
    assert built["evidence:" + pack.name] == pack
    names = {p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file()}
    assert names == {"row.json", "verification.json", "results/seed0.json", "results/seed0.predictions.parquet",
                     "summary.md", "summary.html", "command.txt", "environment.json", MANIFEST}
    assert json.loads((pack / "row.json").read_text()) == rows["alpha-fm"]
    text = summary_checks(pack)
    utility = rows["alpha-fm"]["metrics"]["utility"]
    assert f"Utility {utility:.4f}" in text and "- Tier: verified" in text
    seed0 = json.loads((pack / "results/seed0.json").read_text())
    from fairmedbench.benchmark.deployer import md
    from fairmedbench.report.verdicts import result_answer

    assert f"- {md(result_answer(seed0['result']['reports']).headline)}\n" in text
    verifies_and_fails_after_an_edit(pack, tmp_path, capsys, "row.json")
    # rebuilt: the pack is replaced, a user's file beside it kept; once the row is no longer verified, its pack goes
    (pack / "mine.txt").write_text("kept")
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 32)
    secret.chmod(0o600)
    build_board(BOARD, root, sign_key=f"hmac:{secret}")  # signed: verify --key checks MANIFEST.sig
    assert (pack / "mine.txt").read_text() == "kept" and sha256sum_c(pack) == 0 and (pack / SIGNATURE).is_file()
    capsys.readouterr()
    assert main(["evidence", "verify", str(pack), "--key", f"hmac:{secret}"]) == 0
    (subs["alpha-fm"] / "verification.json").unlink()
    build_board(BOARD, root)
    assert [p.relative_to(pack).as_posix() for p in pack.rglob("*")] == ["mine.txt"]
    # what is left in the board's evidence folder is not a pack: the next build is refused in one line before any
    # work (the user's file is never replaced or deleted), and so is a file straight in the evidence folder
    for stray, why in ((pack / "mine.txt", "not an evidence pack"), (evidence / "stray.txt", "holds packs only")):
        stray.write_text("x")
        capsys.readouterr()
        assert main(["leaderboard", "build", "--board", BOARD, "--root", str(root)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and why in err[0], err
        assert stray.read_text() == "x"
        stray.unlink()
    assert main(["leaderboard", "build", "--board", BOARD, "--root", str(root)]) == 0


# ------------------------------------------------------------------------------------- run and evaluate packs

def test_evaluate_pack_monitoring_plan_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Art. 72 command line of an evaluate pack runs as written, in the pack, on a later stream."""
    from fairmedbench.benchmark.deployer import md
    from fairmedbench.metrics.specs import metric_spec

    pack = tmp_path / "pack"
    assert main(["evaluate", "--demo", "--n-boot", "20", "--evidence", str(pack)]) == 0
    text = (pack / "summary.md").read_text()
    for needle in ARTICLES[:3]:
        assert needle in text
    doc = json.loads((pack / "result.json").read_text())
    sex = next(r for r in doc["result"]["reports"] if r["attribute"] == "sex")
    f = sex["metrics"]["auc"]["F"]
    assert (f"- Watch F (label by sex): the worst AUC of its groups, {f['value']:.3f} [{f['ci_low']:.3f}, "
            f"{f['ci_high']:.3f}], where ΔAUC is larger than chance." in text)
    fpr = sex["metrics"]["fpr_at_tpr95"]  # higher is worse: the group with the larger FPR@95TPR is named
    worst = max(("F", "M"), key=lambda g: fpr[g]["value"])
    head = md(metric_spec("fpr_at_tpr95").header)
    assert f"- Watch {worst} (label by sex): the worst {head} of its groups, {fpr[worst]['value']:.3f}" in text
    mde = sex["tests"]["auc_gap"]["mde"]
    assert f"- k from the audit's ΔAUC MDE: sex {mde:.3f}" in text
    assert "(Bonferroni over 5 groups: 0.035 in all)" in text  # rule_text for F, M and the three age groups
    [command] = monitor_commands(text[text.index("## EU AI Act Art. 72"):])
    assert command[:2] == ["benchmark", "monitor"]
    later = pd.read_parquet(pack / doc["files"]["predictions"])
    later.assign(WINDOW=np.arange(len(later)) % 3).to_parquet(pack / "LATER.parquet")
    monkey = pytest.MonkeyPatch()
    monkey.chdir(pack)
    try:
        assert main([*command[1:], "--n-boot", "0"]) == 0
    finally:
        monkey.undo()
    alerts = json.loads((pack / "monitor" / "alerts.json").read_text())
    assert alerts["windows"] == ["0", "1", "2"] and alerts["alerts"] == []


def test_summary_page_has_no_sideways_scroll(tmp_path: Path, chromium: Any) -> None:
    """summary.html at 1400 and 390 px: no page-level overflow (a wide table scrolls in its box, a long command in
    its code block, a long heading or path wraps), and names from the data stay text."""
    from fairmedbench.benchmark.claim_packs import write_page
    from fairmedbench.benchmark.deployer import md

    cols = [f"Sensitivity (TPR) [95% CI] {k}" for k in range(8)]
    text = "\n".join([
        "# Evidence pack: a title", "", "## Findings (the verdict rules are in fairmedbench/report/verdicts.py/"
        "and/a/very/long/path/without/spaces/anywhere/in/it)", "",
        f"- a group named {md('<script>alert(1)</script>')}", "",
        f"| {' | '.join(cols)} |", "|" + "---|" * len(cols), f"| {' | '.join('0.123 [0.100, 0.200]' for _ in cols)} |",
        "", "```", "benchmark monitor --baseline runs/" + "x" * 300 + "/audit.json --report", "```", ""])
    page = write_page(tmp_path / "summary.html", "a title", text)
    html = page.read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    for width in (1400, 390):
        chromium.set_window_size(width, 1200)
        chromium.get(page.resolve().as_uri())
        wide, client = chromium.execute_script("const de = document.documentElement; "
                                               "return [de.scrollWidth, de.clientWidth];")
        assert wide <= client, (width, wide, client)
        assert chromium.execute_script("return document.querySelector('table').closest('.scroll') !== null;")


def test_a_result_travels_with_every_predictions_file_it_cites(tmp_path: Path) -> None:
    """A run result copied into a claim pack brings its test predictions and each other site's (run
    --eval-dataset), so the pack can recompute every number its JSON holds."""
    from fairmedbench.benchmark.claim_packs import _copy_result

    run = tmp_path / "run"
    run.mkdir()
    doc = {"predictions": {"file": "seed0.predictions.parquet"},
           "external": [{"label": "site-a", "predictions": "seed0.external0.predictions.parquet"}]}
    (run / "seed0.json").write_text(json.dumps(doc))
    for name in ("seed0.predictions.parquet", "seed0.external0.predictions.parquet", "seed1.predictions.parquet"):
        (run / name).write_bytes(name.encode())
    _copy_result(run / "seed0.json", doc, tmp_path / "pack" / "runs" / "x")
    copied = sorted(p.name for p in (tmp_path / "pack" / "runs" / "x").iterdir())
    assert copied == ["seed0.external0.predictions.parquet", "seed0.json", "seed0.predictions.parquet"]
