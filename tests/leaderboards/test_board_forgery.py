"""Issue 28.3: boards an edit cannot fool. A verification record with `passed` flipped by hand, a stored submission
whose numbers were edited and re-hashed (re-sealed with another key, or even with the board's), a looser
`verify --tolerance` and a never-verifiable row shown verified: each is refused or ignored, with the reason on the
page. One small pinned classification entry (one seed, 60 test rows) keeps every build cheap."""

from __future__ import annotations

import json
import re
import shutil
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from bundle_factory import forge_plausible, model_card, passed_record, pinned, record_verification, write_bundle

from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.benchmark.verify import verify_bundle
from fairmedbench.cli import main
from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.leaderboards import seal
from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, register_suite

BOARD = "test-forgery"
ENTRY = "synth-control__linear_probe__sex"


def _suite() -> Suite:
    if BOARD not in SUITES:
        register_suite(Suite(BOARD, "1.0", "one pinned classification entry, one seed",
                             (pinned(Entry("synth-control", ("sex",), "linear_probe", seeds=(0,))),)))
    return SUITES.get(BOARD)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A genuine bundle, a plausible forgery of another model (scores 0.25·y + 0.75·U, numbers recomputed), and a
    seeded-random-init bundle (no weights sha256, runs on 'random:seed=0')."""
    tmp = tmp_path_factory.mktemp("forgery")
    suite = _suite()
    forged = write_bundle(tmp / "forged", suite, model_card("plausible-fm", 0.6))
    forge_plausible(forged)
    return {"genuine": write_bundle(tmp / "genuine", suite, model_card("alpha-fm", 0.6)), "forged": forged,
            "random": write_bundle(tmp / "random", suite, {**model_card("rand-fm", 0.6), "weights_sha256": None})}


def _submit(bundle: Path, root: Path) -> Path:
    out = submit_bundle(bundle, BOARD, root)
    assert out.accepted, out.reasons
    assert out.path is not None
    return out.path


def _build(root: Path) -> tuple[dict[str, Any], str]:
    built = build_board(BOARD, root)
    return json.loads(built["json"].read_text()), built["html"].read_text()


def _rows_html(html: str) -> list[str]:
    return re.findall(r"<tr data-row=.*?</tr>", html, flags=re.S)


def test_flipped_passed_in_a_forged_submission_is_ignored_and_not_ranked(bundles: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    root = tmp_path / "lb"
    genuine, forged = _submit(bundles["genuine"], root), _submit(bundles["forged"], root)
    failed = passed_record(_suite(), max_abs_diff=0.31)
    failed["passed"] = False
    failed["entries"][ENTRY].update(passed=False, reasons=["seed 0: scores differ by up to 0.31 (tolerance 0.0001)"])
    record_verification(forged, failed)  # what `verify` wrote: failed
    record_verification(genuine, passed_record(_suite()))
    board, _ = _build(root)
    assert {r["model"]: r["tier"] for r in board["rows"]} == {"alpha-fm": "verified", "plausible-fm": "self-reported"}
    # the forger flips `passed` (and the max |diff|) by hand
    path = forged / "verification.json"
    doc = json.loads(path.read_text())
    doc["passed"] = True
    doc["entries"][ENTRY].update(passed=True, reasons=[], max_abs_diff=1e-7)
    path.write_text(json.dumps(doc))
    board, html = _build(root)
    rows = {r["model"]: r for r in board["rows"]}
    assert rows["plausible-fm"]["tier"] == "self-reported" and rows["plausible-fm"]["rank"] is None
    assert rows["alpha-fm"]["rank"] == 1
    why = ("verification.json ignored: its HMAC does not check under this board's key (edited after `benchmark "
           "verify` wrote it, or written with another key)")
    assert rows["plausible-fm"]["unranked"] == f"self-reported: {why}"
    assert why in unescape(html)
    # a record written without the key at all (a bare sha256 binding, as before) is ignored the same way
    del doc["hmac"]
    path.write_text(json.dumps(doc))
    board, _ = _build(root)
    assert {r["model"]: r["rank"] for r in board["rows"]} == {"alpha-fm": 1, "plausible-fm": None}


def _edit_utility(sub: Path, value: float) -> float:
    """Set the stored utility of the submission's first row to `value`; return what was stored."""
    path = sub / "submission.json"
    summary = json.loads(path.read_text())
    before = summary["rows"][0]["metrics"]["utility"]
    summary["rows"][0]["metrics"]["utility"] = value
    path.write_text(json.dumps(summary, indent=1))
    return float(before)


def test_edited_numbers_rehashed_and_resealed_are_refused_with_the_reason(bundles: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    root = tmp_path / "lb"
    sub = _submit(bundles["genuine"], root)
    record_verification(sub, passed_record(_suite()))
    board, _ = _build(root)
    assert [r["rank"] for r in board["rows"]] == [1]
    before = _edit_utility(sub, 0.99)
    # 1. edited only: the files differ from the seal
    board, html = _build(root)
    assert board["rows"] == [] and board["models"] == []
    [refused] = board["refused"]
    assert (refused["model"], refused["revision"]) == ("alpha-fm", "r1")
    assert refused["reasons"] == ["the stored files differ from the seal: submission.json changed, added or removed "
                                  "since acceptance"]
    # 2. re-hashed and re-sealed with another key: the seal's HMAC does not check under the board's
    seal.write_seal(sub, seal.BoardKey(b"k" * 64, "forger"))
    board, html = _build(root)
    assert board["refused"][0]["reasons"] == ["the seal does not check under this board's key: seal.json was re-made "
                                              "after an edit, or with another key"]
    # 3. re-sealed with the board's own key (a leaked key, or its holder): the recomputation still refuses it
    key = seal.board_key(root / BOARD)
    assert key is not None
    seal.write_seal(sub, key)
    record_verification(sub, passed_record(_suite()))  # and the verification record re-made for the new files
    board, html = _build(root)
    assert board["rows"] == []
    assert board["refused"][0]["reasons"] == [f"{ENTRY} / sex: utility reported 0.99, recomputed {before:.4g}"]
    assert 0.5 < before < 0.9
    assert f"utility reported 0.99, recomputed {before:.4g}" in unescape(html) and 'id="refused"' in html
    assert _rows_html(html) == [] and ">0.990<" not in html, "no row and no number of a refused submission shown"


def test_edited_result_document_is_refused_by_recomputation(bundles: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "lb"
    sub = _submit(bundles["genuine"], root)
    path = sub / "results" / ENTRY / "seed0.json"
    doc = json.loads(path.read_text())
    doc["result"]["reports"][0]["metrics"]["auc"]["__overall__"]["value"] = 0.99
    path.write_text(json.dumps(doc))
    key = seal.board_key(root / BOARD)
    assert key is not None
    seal.write_seal(sub, key)
    board, _ = _build(root)
    [reason] = board["refused"][0]["reasons"]
    assert reason.startswith(f"the stored files no longer pass submit's checks: results/{ENTRY}/seed0.json: reported "
                             "number differs from recomputation: result/reports[0]/metrics/auc/__overall__/value: "
                             "reported 0.99, recomputed ")


def test_verify_tolerance_looser_than_the_boards_is_refused(bundles: dict[str, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    sub = _submit(bundles["genuine"], tmp_path / "lb")
    # the factory's runs record no precision: the board's widest tolerance (bf16's 0.05) applies
    with pytest.raises(InputError, match=r"^--tolerance 0.99 is looser than board test-forgery's 0.05 for a run "
                                         r"that records no precision \(synth-control__linear_probe__sex, seed 0\); a "
                                         r"verifier may only tighten"):
        verify_bundle(sub, tolerance=0.99)
    assert main(["verify", str(sub), "--tolerance", "0.99", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "looser than board test-forgery's 0.05" in err[0]
    # the tolerance is what the suite declares: a stricter board refuses what this one allows
    if "test-forgery-strict" not in SUITES:
        register_suite(Suite("test-forgery-strict", "1.0", "stricter", _suite().entries,
                             tolerances=(("fp32", 1e-5), ("bf16", 1e-3))))
    with pytest.raises(InputError, match="--tolerance 0.01 is looser than board test-forgery-strict's 0.001 for"):
        verify_bundle(sub, board="test-forgery-strict", tolerance=0.01)
    with pytest.raises(ValueError, match="each verification tolerance is an absolute difference in"):
        Suite("bad", "1.0", "bad", _suite().entries, tolerances=(("fp32", 1.5),))
    # a record its key holder wrote with a looser tolerance does not make a row verified either
    record_verification(sub, passed_record(_suite(), tolerance=0.99, max_abs_diff=0.75))
    board, _ = _build(tmp_path / "lb")
    [row] = board["rows"]
    assert row["tier"] == "self-reported" and row["rank"] is None
    assert row["unranked"] == "self-reported: verified with tolerance 0.99, looser than the board's 0.05: not counted"


def test_verified_badge_shows_its_tolerance_and_never_beside_never_verifiable(bundles: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    root = tmp_path / "lb"
    # no weights sha256 and runs on an undeclared file: 'weights not provided', can never be verified
    unknown = Path(shutil.copytree(bundles["random"], tmp_path / "unknown"))
    (unknown / "model.json").write_text(json.dumps({**json.loads((unknown / "model.json").read_text()),
                                                    "revision": "r2"}))
    path = unknown / "results" / ENTRY / "seed0.json"
    doc = json.loads(path.read_text())
    doc["spec"]["weights"] = "f" * 64
    doc["run_id"] = store.run_id({"kind": doc["kind"], "spec": doc["spec"], "inputs": doc["inputs"]})
    path.write_text(json.dumps(doc))
    seeded, never = _submit(bundles["random"], root), _submit(unknown, root)
    for sub in (seeded, never):
        record_verification(sub, passed_record(_suite(), tolerance=1e-5))
    board, html = _build(root)
    rows = {r["revision"]: r for r in board["rows"]}
    assert rows["r1"]["tier"] == "verified" and rows["r1"]["tolerance"] == 1e-5 and rows["r1"]["flags"] == []
    # (r2 is r1's predictions under another revision: flagged duplicate as well)
    assert rows["r2"]["tier"] == "self-reported"
    assert [f["key"] for f in rows["r2"]["flags"]] == ["no-weights-hash", "duplicate"]
    assert rows["r2"]["unranked"] == ("self-reported: weights not provided, can never be verified; its verification "
                                      "record is not counted, duplicate predictions")
    for tr in _rows_html(html):
        verified = 'class="tier tier-verified"' in tr
        assert not (verified and ("no-weights-hash" in tr or "can never be verified" in tr))
        # the tolerance stands beside every verified badge, not only in its tooltip
        badge = r'tier-verified"[^>]*>verified</span> <span class="tol">tolerance 1e-05</span>'
        assert verified == bool(re.search(badge, tr))
    assert sum('class="tier tier-verified"' in tr for tr in _rows_html(html)) == 1
    assert "Verification tolerance of this board: 0.0001 for fp32 runs, 0.05 for bf16 runs" in html
    md = (root / BOARD / "leaderboard.md").read_text()
    assert "| verified (tolerance 1e-05) |" in md


def test_board_key_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(seal.KEY_ENV, raising=False)
    assert seal.board_key(tmp_path) is None
    made = seal.board_key(tmp_path, create=True)
    assert made is not None and made.created and (tmp_path / ".board-key").stat().st_mode & 0o777 == 0o600
    again = seal.board_key(tmp_path, create=True)
    assert again is not None and again.secret == made.secret and again.created_line() is None
    (tmp_path / ".board-key").chmod(0o644)
    with pytest.raises(InputError, match="mode 0644, readable by others; run `chmod 600"):
        seal.board_key(tmp_path)
    monkeypatch.setenv(seal.KEY_ENV, "short")
    with pytest.raises(InputError, match="FMB_BOARD_KEY holds 5 characters; a board key needs at least 32"):
        seal.board_key(tmp_path)
    monkeypatch.setenv(seal.KEY_ENV, "e" * 40)
    key = seal.board_key(tmp_path)
    assert key is not None and key.secret == b"e" * 40 and key.source == "FMB_BOARD_KEY"


def test_build_without_the_key_is_refused(bundles: dict[str, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(seal.KEY_ENV, raising=False)
    root = tmp_path / "lb"
    _submit(bundles["genuine"], root)
    (root / BOARD / ".board-key").unlink()
    with pytest.raises(InputError, match="has no key .*the seals of its submissions cannot be checked"):
        build_board(BOARD, root)
