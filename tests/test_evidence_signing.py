"""Evidence packs that prove what they say (issue 28.5): a signed manifest (HMAC-SHA256 or Ed25519) that
`benchmark evidence verify` checks, failing after an edit, a regenerated manifest or a removed signature; and a
summary.md that states the operating threshold, sensitivity and specificity per group with intervals, with every
name from the data escaped."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import markdown
import numpy as np
import pytest

from fairmedbench.benchmark import signing
from fairmedbench.benchmark.evidence import MANIFEST, SIGNATURE, md, write_manifest, write_summary
from fairmedbench.benchmark.signing import ENV_KEY, HASHES_ONLY, read_key, verify_pack
from fairmedbench.cli import main
from fairmedbench.metrics import evaluate_classification


@pytest.fixture()
def keys(tmp_path: Path) -> dict[str, str]:
    """An HMAC secret, a second one, and an Ed25519 private key with its public key (PEM files)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

    folder = tmp_path / "keys"
    folder.mkdir()
    (folder / "a.key").write_text("0123456789abcdef0123456789abcdef\n")
    (folder / "b.key").write_text("fedcba9876543210fedcba9876543210\n")
    private = Ed25519PrivateKey.generate()
    (folder / "ed.pem").write_bytes(private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    (folder / "ed.pub.pem").write_bytes(private.public_key().public_bytes(Encoding.PEM,
                                                                         PublicFormat.SubjectPublicKeyInfo))
    other = Ed25519PrivateKey.generate()
    (folder / "other.pem").write_bytes(other.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    return {"hmac": f"hmac:{folder / 'a.key'}", "hmac2": f"hmac:{folder / 'b.key'}",
            "ed": f"ed25519:{folder / 'ed.pem'}", "ed_pub": f"ed25519:{folder / 'ed.pub.pem'}",
            "ed_other": f"ed25519:{folder / 'other.pem'}"}


def _pack(folder: Path, key: str | None) -> Path:
    """A small pack: two files and a subfolder, its manifest signed with `key`."""
    (folder / "sub").mkdir(parents=True)
    (folder / "result.json").write_text('{"auc": 0.8}\n')
    (folder / "sub" / "table.csv").write_text("a,b\n1,2\n")
    write_manifest(folder, None if key is None else read_key(key))
    return folder


def _regenerate_unsigned(folder: Path) -> None:
    """What a forger does after an edit: recompute every sha256 into a fresh manifest (sha256sum's format)."""
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(folder).as_posix()}"
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in (MANIFEST, SIGNATURE)]
    (folder / MANIFEST).write_text("\n".join(lines) + "\n")


def test_hmac_pack_verifies_then_fails_after_an_edit_a_regenerated_manifest_and_without_its_signature(
        tmp_path: Path, keys: dict[str, str]) -> None:
    pack = _pack(tmp_path / "pack", keys["hmac"])
    record = json.loads((pack / SIGNATURE).read_text())
    assert record["algorithm"] == "hmac-sha256" and record["signed_file"] == MANIFEST
    assert record["manifest_sha256"] == hashlib.sha256((pack / MANIFEST).read_bytes()).hexdigest()
    ok = verify_pack(pack, keys["hmac"])
    assert ok.passed and ok.lines()[0] == "verified: 2 files match MANIFEST.sha256"
    assert "signed (hmac-sha256)" in ok.lines()[1]

    edited = Path(shutil.copytree(pack, tmp_path / "edited"))
    (edited / "sub" / "table.csv").write_text("a,b\n1,3\n")
    check = verify_pack(edited, keys["hmac"])
    assert not check.passed
    assert check.problems == ["changed: sub/table.csv does not match its sha256 in MANIFEST.sha256"]

    # the forgery the old pack could not detect: edit, then regenerate the manifest (sha256sum -c passes)
    _regenerate_unsigned(edited)
    for key in (keys["hmac"], None):  # found with the key, and without it (the signed manifest's sha256)
        check = verify_pack(edited, key)
        assert not check.passed and len(check.problems) == 1
        assert check.problems[0].startswith("MANIFEST.sha256 was changed after it was signed")
    # ... and also when the forger updates the recorded sha256: only the key's signature tells
    forged = json.loads((edited / SIGNATURE).read_text())
    forged["manifest_sha256"] = hashlib.sha256((edited / MANIFEST).read_bytes()).hexdigest()
    (edited / SIGNATURE).write_text(json.dumps(forged))
    check = verify_pack(edited, keys["hmac"])
    assert check.problems == ["MANIFEST.sig: the signature does not match MANIFEST.sha256 (the manifest or the "
                              "signature was changed after signing)"]
    # ... or re-signs with a key of their own
    write_manifest(edited, read_key(keys["hmac2"]))
    check = verify_pack(edited, keys["hmac"])
    assert not check.passed and "signed with another key" in check.problems[0]

    # the signature removed: reported as unsigned when a key is given; without one, what an unsigned pack proves
    stripped = Path(shutil.copytree(pack, tmp_path / "stripped"))
    (stripped / SIGNATURE).unlink()
    check = verify_pack(stripped, keys["hmac"])
    assert not check.passed and check.problems[0].startswith("unsigned: no MANIFEST.sig")
    plain = verify_pack(stripped)
    assert plain.passed and plain.lines()[1] == f"unsigned: {HASHES_ONLY}; sign packs with --sign-key"
    assert "integrity against accidents" in HASHES_ONLY and "anyone who edits a file can regenerate" in HASHES_ONLY


def test_missing_and_outside_files_are_each_a_problem_and_an_added_file_is_named_not_vouched(tmp_path: Path
                                                                                             ) -> None:
    pack = _pack(tmp_path / "pack", None)
    (pack / "notes.txt").write_text("added later")
    (pack / "result.json").unlink()
    with (pack / MANIFEST).open("a") as fh:
        fh.write(f"{'0' * 64}  ../outside.txt\nnot a line\n")
    check = verify_pack(pack)
    assert check.problems == [
        "MANIFEST.sha256 line 3: '../outside.txt' is not a file of this pack",
        "MANIFEST.sha256 line 4: not '<sha256>  <path>': 'not a line'",
        "missing: result.json is listed in MANIFEST.sha256 but not in the folder"]
    assert check.unlisted == ["notes.txt"]
    assert check.lines()[-1] == "not verified: 3 problem(s)"
    assert "nothing here vouches for them" in check.lines()[-2] and "notes.txt" in check.lines()[-2]


def test_a_users_file_beside_a_pack_is_named_but_the_pack_verifies(tmp_path: Path) -> None:
    # --force keeps a user's files in the pack folder (benchmark/evidence.py), so they must not fail the check
    pack = _pack(tmp_path / "pack", None)
    (pack / "notes.txt").write_text("mine")
    check = verify_pack(pack)
    assert check.passed and check.unlisted == ["notes.txt"]
    assert check.lines()[0].startswith("verified:") and "notes.txt" in check.lines()[-1]


def test_ed25519_pack_verifies_with_the_public_key_and_names_its_key_without_one(tmp_path: Path,
                                                                               keys: dict[str, str]) -> None:
    pack = _pack(tmp_path / "pack", keys["ed"])
    record = json.loads((pack / SIGNATURE).read_text())
    assert record["algorithm"] == "ed25519" and record["public_key"]
    pub = read_key(keys["ed_pub"], "--key")
    assert pub.private is None and record["key_id"] == pub.key_id
    assert verify_pack(pack, keys["ed_pub"]).passed
    assert verify_pack(pack, keys["ed"]).passed  # the private key verifies too
    other = verify_pack(pack, keys["ed_other"])
    assert not other.passed and "signed with another key" in other.problems[0]
    wrong_kind = verify_pack(pack, keys["hmac"])
    assert wrong_kind.problems == ["MANIFEST.sig: signed with ed25519, but the key given is hmac-sha256"]
    # without --key: the signature is checked against the public key it carries, which proves only that
    # someone holding that key signed; the line names the key and asks for the expected one
    alone = verify_pack(pack)
    assert alone.passed and pub.key_id in alone.lines()[1] and "--key ed25519:PUBLIC.pem" in alone.lines()[1]
    (pack / "result.json").write_text('{"auc": 0.9}\n')
    _regenerate_unsigned(pack)
    assert not verify_pack(pack, keys["ed_pub"]).passed


@pytest.mark.parametrize("text", ["not json", '{"algorithm": "hmac-sha256"}', '["a list"]'])
def test_an_unreadable_signature_is_a_problem(tmp_path: Path, keys: dict[str, str], text: str) -> None:
    pack = _pack(tmp_path / "pack", keys["hmac"])
    (pack / SIGNATURE).write_text(text)
    for key in (keys["hmac"], None):
        assert verify_pack(pack, key).problems == [
            "MANIFEST.sig: unreadable (not the fairmedbench-evidence-signature/1 record a signing writes)"]


def test_an_unsigned_manifest_replaces_a_stale_signature(tmp_path: Path, keys: dict[str, str]) -> None:
    pack = _pack(tmp_path / "pack", keys["hmac"])
    write_manifest(pack, None)
    assert not (pack / SIGNATURE).exists()
    assert verify_pack(pack).passed


@pytest.mark.parametrize(("spec", "says"), [
    ("sign.key", "name a key as hmac:FILE"),
    ("rsa:{d}/a.key", "name a key as hmac:FILE"),
    ("hmac:{d}/missing.key", "does not exist"),
    ("hmac:{d}/short.key", "has 5 bytes; give at least 16"),
    ("hmac:{d}/ed.pem", "is a PEM key; name it as ed25519:"),
    ("ed25519:{d}/a.key", "is not an unencrypted PEM key"),
    ("ed25519:{d}/ed.pub.pem", "a public key cannot sign"),
])
def test_a_bad_sign_key_is_one_line_before_any_work(tmp_path: Path, keys: dict[str, str], spec: str, says: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "keys"
    (d / "short.key").write_text("short\n")
    pack = tmp_path / "pack"
    assert main(["evaluate", "--demo", "--n-boot", "0", "--evidence", str(pack), "--sign-key",
                 spec.format(d=d)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and not pack.exists()


def test_sign_key_needs_evidence(capsys: pytest.CaptureFixture[str], keys: dict[str, str]) -> None:
    assert main(["evaluate", "--demo", "--n-boot", "0", "--sign-key", keys["hmac"]]) == 2
    assert "give --evidence DIR too" in capsys.readouterr().err


def test_signed_evaluate_pack_verifies_on_the_command_line(tmp_path: Path, keys: dict[str, str],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "pack"
    monkeypatch.setenv(ENV_KEY, keys["ed"])  # the environment's key, used when --sign-key is not given
    assert main(["evaluate", "--demo", "--n-boot", "0", "--n-perm", "0", "--evidence", str(pack)]) == 0
    assert json.loads((pack / SIGNATURE).read_text())["algorithm"] == "ed25519"
    assert keys["ed"] not in (pack / "command.txt").read_text()  # the key file is not on the command line
    summary = (pack / "summary.md").read_text()
    assert "`MANIFEST.sig` holds an Ed25519 signature" in summary and f"| `{SIGNATURE}` |" in summary
    value = json.loads((pack / "result.json").read_text())["result"]["meta"]["thresholds"]["label"]["value"]
    assert (f"- label: a case is called positive when its score >= {value}; policy `val_youden`: the score "
            "with the highest Youden J (TPR - FPR) on the validation rows (the default: the metric profile's own "
            "rule where it has one, else `val_youden` with validation rows and `fixed:0.5` without).") in summary
    capsys.readouterr()
    assert main(["evidence", "verify", str(pack), "--key", keys["ed_pub"]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "verified: 7 files match MANIFEST.sha256" and out[1].startswith("signed (ed25519)")
    (pack / "table.csv").write_text("edited\n")
    assert main(["evidence", "verify", str(pack), "--key", keys["ed_pub"]]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["changed: table.csv does not match its sha256 in MANIFEST.sha256", "not verified: 1 problem(s)"]
    assert main(["evidence", "verify", str(tmp_path / "nowhere")]) == 2
    assert "not a folder" in capsys.readouterr().err


def _hostile_doc(n_boot: int) -> dict:
    """A hand-made result: groups named '<script>' and '|**x**|', a fixed 0.5 threshold (score >= 0.5).
    '<script>': positives 0.9, 0.8, 0.3, 0.2 (TPR 2/4), negatives 0.1, 0.2, 0.6, 0.4 (TNR 3/4);
    '|**x**|': positives 0.4, 0.3, 0.2 (TPR 0), negatives 0.1, 0.1, 0.3, 0.2, 0.45 (TNR 5/5);
    overall TPR 2/7 = 0.286, TNR 8/9 = 0.889."""
    y = np.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0])
    s = np.array([0.9, 0.8, 0.3, 0.2, 0.1, 0.2, 0.6, 0.4, 0.4, 0.3, 0.2, 0.1, 0.1, 0.3, 0.2, 0.45])
    g = np.array(["<script>"] * 8 + ["|**x**|"] * 8)
    result = evaluate_classification(y, s, {"[a](http://e)": g}, task_names=["lab*el"], threshold="fixed:0.5",
                                     n_boot=n_boot, n_perm=0, min_group_size=1)
    return {"fairmedbench_version": "t", "created_at": "c", "run_id": "r",
            "spec": {"command": "evaluate", "threshold": "fixed:0.5"},
            "result": {**result.to_dict(), "meta": {**result.meta, "n_samples": 16, "tasks": ["lab*el"],
                                                    "attributes": ["[a](http://e)"]}}}


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_summary_states_threshold_and_sensitivity_specificity_per_group(tmp_path: Path) -> None:
    doc = _hostile_doc(n_boot=0)
    text = write_summary(tmp_path, doc, [("x.json", "a file", "—")], "t", "src").read_text()
    op = text.split("## Operating threshold\n\n")[1].split("\n\n")[0].splitlines()
    assert op[0] == (r"- lab\*el: a case is called positive when its score >= 0.5; policy `fixed:0.5`: fixed at 0.5 "
                     "(the policy asked for with --threshold).")
    assert op[1] == (r"- lab\*el by \[a\](http://e): at this threshold the sensitivity (TPR) is 0 in group(s) "
                     r"\|\*\*x\*\*\|.")
    table = [r for r in text.split("## Performance per group")[1].split("\n\n")[1].splitlines()]
    assert _cells(table[0]) == ["Task", "Attribute", "Group", "n", "Positives", "AUC [95% CI]",
                                "Sensitivity (TPR) [95% CI]", "Specificity (TNR) [95% CI]"]
    rows = {r[2]: r for r in map(_cells, table[2:])}
    assert set(rows) == {"all", "&lt;script&gt;", r"\|\*\*x\*\*\|"}
    assert rows["all"][3:] == ["16", "7", rows["all"][5], "0.286", "0.889"]
    assert rows["&lt;script&gt;"][3:5] == ["8", "4"] and rows["&lt;script&gt;"][6:] == ["0.500", "0.750"]
    assert rows[r"\|\*\*x\*\*\|"][3:5] == ["8", "3"] and rows[r"\|\*\*x\*\*\|"][6:] == ["0.000", "1.000"]
    # rendered, no name becomes HTML, emphasis, a link or an extra table cell
    html = markdown.markdown(text, extensions=["tables"])
    assert "<script>" not in html and "<strong>" not in html and "<em>" not in html and 'href="http://e"' not in html
    assert "&lt;script&gt;" in html and "|**x**|" in html


def test_one_threshold_line_for_tasks_that_share_it_and_every_group_named_where_sensitivity_is_0(
        tmp_path: Path) -> None:
    # task A: positives 0.9, 0.2 / 0.8, 0.1 per group; task B: every positive below 0.5 (TPR 0 in both groups)
    y = np.array([[1, 1], [1, 1], [0, 0], [0, 0], [1, 1], [1, 1], [0, 0], [0, 0]])
    s = np.array([[0.9, 0.4], [0.2, 0.3], [0.1, 0.1], [0.6, 0.2], [0.8, 0.4], [0.1, 0.3], [0.3, 0.1], [0.2, 0.2]])
    g = np.array(["F"] * 4 + ["M"] * 4)
    result = evaluate_classification(y, s, {"sex": g}, task_names=["A", "B"], n_boot=0, n_perm=0, min_group_size=1)
    doc = {"spec": {"command": "evaluate", "threshold": None}, "result": result.to_dict()}
    text = write_summary(tmp_path, doc, [], "t", "src").read_text()
    op = text.split("## Operating threshold\n\n")[1].split("\n\n")[0].splitlines()
    assert op == ["- A, B: a case is called positive when its score >= 0.5; policy `fixed:0.5`: fixed at 0.5 (the "
                  "default: the metric profile's own rule where it has one, else `val_youden` with validation rows "
                  "and `fixed:0.5` without).",
                  "- B by sex: at this threshold the sensitivity (TPR) is 0 in every group (F, M)."]


def test_summary_intervals_are_the_results(tmp_path: Path) -> None:
    doc = _hostile_doc(n_boot=50)
    text = write_summary(tmp_path, doc, [], "t", "src").read_text()
    rep = doc["result"]["reports"][0]
    row = next(_cells(r) for r in text.splitlines() if r.startswith("| lab") and "| all |" in r)
    for cell, metric in zip(row[6:], ("tpr", "tnr")):
        c = rep["metrics"][metric]["__overall__"]
        assert cell == f"{c['value']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]"


def test_summary_maps_facts_to_the_provisions_that_ask_for_them(tmp_path: Path) -> None:
    text = write_summary(tmp_path, _hostile_doc(n_boot=0), [], "t", "src").read_text()
    provisions = text.split("## Which provision asks for which fact")[1]
    assert "Art. 10(5) is not an examination: it is the legal basis" in provisions
    for needle in ("Art. 10(2)(f)-(g)", "Art. 13(3)(b)(v)", "Art. 15(1) and (3)",
                   '"Evaluation of\n  Sex-Specific Data in Medical Device Clinical Studies" (final, August 2014)',
                   "Age-, Race-, and Ethnicity-Specific Data in Medical Device Clinical Studies\" (final, September "
                   "2017)", "Recommendations\" (draft, January 2025)"):
        assert needle in provisions, needle
    assert "It is not signed: the check finds accidental changes" in text
    assert "anyone who edits a file on purpose can regenerate MANIFEST.sha256." in text


@pytest.mark.parametrize(("name", "escaped"), [
    ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
    ("|**x**|", r"\|\*\*x\*\*\|"),
    ("a_b `c` [d](e) ~~f~~ #g !h & i\nj", r"a\_b \`c\` \[d\](e) \~\~f\~\~ \#g \!h &amp; i j"),
])
def test_md_escapes_every_markup_character(name: str, escaped: str) -> None:
    assert md(name) == escaped


def test_signing_key_from_the_environment_only_with_evidence(monkeypatch: pytest.MonkeyPatch,
                                                             keys: dict[str, str]) -> None:
    monkeypatch.setenv(ENV_KEY, keys["hmac"])
    assert signing.pack_key(None, None) is None
    key = signing.pack_key("pack", None)
    assert key is not None and key.algorithm == "hmac-sha256"
    assert signing.pack_key("pack", keys["ed"]).algorithm == "ed25519"  # the option wins over the environment
