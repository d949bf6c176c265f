"""Submission checks: a good bundle is stored; each hostile bundle is rejected with its reason, writing nothing."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from bundle_factory import bundle_card, model_card, pinned_suite, write_bundle

from fairmedbench.benchmark.leaderboard import submit_bundle
from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.leaderboards.submit import Limits, read_submission, slug

BOARD = "test-pinned"
CLS = "results/synth-control__linear_probe__sex+age"
SEG = "results/synth-contrast__sam_prompt__sex"


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bundle(tmp_path_factory.mktemp("good") / "bundle", pinned_suite(), model_card("good-model"))


@pytest.fixture
def bundle(good: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(good, tmp_path / "bundle"))


def edit_json(path: Path, change: Callable[[dict], None], fix_run_id: bool = False) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    if fix_run_id:
        doc["run_id"] = store.run_id({"kind": doc["kind"], "spec": doc["spec"], "inputs": doc["inputs"]})
    path.write_text(json.dumps(doc))


def edit_parquet(path: Path, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    change(pd.read_parquet(path)).to_parquet(path, index=False)


def rejected(bundle: Path, root: Path, expect: str, limits: Limits | None = None) -> list[str]:
    out = submit_bundle(bundle, BOARD, root, limits)
    assert not out.accepted
    assert out.path is None
    assert any(expect in r for r in out.reasons), out.reasons
    assert all(line.startswith("rejected: ") and "\n" not in line for line in out.lines())
    assert not (root / BOARD).exists(), "a rejected bundle must leave nothing behind"
    return out.reasons


def test_good_bundle_is_stored_with_summary(bundle: Path, tmp_path: Path) -> None:
    out = submit_bundle(bundle, BOARD, tmp_path / "lb")
    assert out.accepted, out.reasons
    assert out.path == tmp_path / "lb" / BOARD / "submissions" / "good-model" / "r1"
    stored = sorted(p.relative_to(out.path).as_posix() for p in out.path.rglob("*") if p.is_file())
    sent = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file())
    assert stored == sorted(sent + ["seal.json", "submission.json"])
    # the first accepted submission creates the board's key, mode 0600, and says so once
    key_file = tmp_path / "lb" / BOARD / ".board-key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and len(key_file.read_text().strip()) == 64
    assert out.lines()[0].startswith(f"created the board key {key_file} (mode 0600)")
    assert key_file.read_text().strip() not in (out.path / "seal.json").read_text() + "".join(out.lines())
    summary = read_submission(out.path)
    assert summary["model"]["name"] == "good-model"
    # classification rows per attribute plus the segmentation row, each averaged over its seeds
    assert [(r["entry"], r["attribute"], r["seeds"]) for r in summary["rows"]] == [
        ("synth-control__linear_probe__sex+age", "sex", [0, 1]),
        ("synth-control__linear_probe__sex+age", "age", [0, 1]),
        ("synth-contrast__sam_prompt__sex", "sex", [0])]
    assert 0.5 < summary["rows"][0]["metrics"]["utility"] <= 1.0
    assert not [p for p in (tmp_path / "lb" / BOARD).iterdir()
                if p.name.startswith(".") and p != key_file]  # no staging folder left
    mask = os.umask(0)
    os.umask(mask)
    assert out.path.stat().st_mode & 0o777 == 0o777 & ~mask  # not mkdtemp's 0700
    assert {p.stat().st_mode & 0o777 for p in out.path.rglob("*") if p.is_file()} == {0o666 & ~mask}


def test_same_revision_twice_is_refused_and_first_kept(bundle: Path, tmp_path: Path) -> None:
    root = tmp_path / "lb"
    first = submit_bundle(bundle, BOARD, root)
    before = read_submission(first.path)
    again = submit_bundle(bundle, BOARD, root)
    assert not again.accepted and "already on this board" in again.reasons[0]
    assert read_submission(first.path) == before
    assert sorted(p.name for p in (root / BOARD).iterdir()) == [".board-key", "submissions"]


def test_tampered_metric(bundle: Path, tmp_path: Path) -> None:
    def bump(doc: dict) -> None:
        doc["result"]["reports"][0]["metrics"]["auc"]["__overall__"]["value"] += 0.01
    edit_json(bundle / CLS / "seed1.json", bump)
    reasons = rejected(bundle, tmp_path / "lb", "reported number differs from recomputation")
    assert any("metrics/auc/__overall__/value" in r for r in reasons)


def test_a_classes_key_on_a_binary_entry_is_refused(bundle: Path, tmp_path: Path) -> None:
    """The board reads a file by its entry's task; a 'classes' key the submitter adds to a binary result is refused
    rather than sending the file down the multi-class path."""
    def add_classes(doc: dict) -> None:
        doc["predictions"]["classes"] = ["0", "1"]
    edit_json(bundle / CLS / "seed0.json", add_classes)
    rejected(bundle, tmp_path / "lb", "predictions has unexpected key(s) ['classes'] for a classification entry")


def test_tampered_ci_and_threshold(bundle: Path, tmp_path: Path) -> None:
    def bump(doc: dict) -> None:
        doc["result"]["reports"][1]["metrics"]["auc_gap"]["__gap__"]["ci_high"] -= 1e-6
        doc["result"]["meta"]["thresholds"]["lesion"]["value"] += 1e-3
    edit_json(bundle / CLS / "seed0.json", bump)
    reasons = rejected(bundle, tmp_path / "lb", "auc_gap/__gap__/ci_high")
    assert any("meta/thresholds/lesion/value" in r for r in reasons)


def test_tampered_segmentation_metric(bundle: Path, tmp_path: Path) -> None:
    def bump(doc: dict) -> None:
        doc["result"]["reports"][0]["metrics"]["dsc_gap"]["__gap__"]["value"] /= 2
    edit_json(bundle / SEG / "seed0.json", bump)
    rejected(bundle, tmp_path / "lb", "dsc_gap/__gap__/value")


def test_wrong_split_fingerprint(bundle: Path, tmp_path: Path) -> None:
    def change(doc: dict) -> None:
        doc["inputs"]["dataset"]["split_fingerprint"] = "0" * 64
    edit_json(bundle / CLS / "seed0.json", change, fix_run_id=True)
    rejected(bundle, tmp_path / "lb", "wrong split fingerprint")


def test_missing_test_ids(bundle: Path, tmp_path: Path) -> None:
    edit_parquet(bundle / CLS / "seed0.predictions.parquet", lambda f: f.drop(index=f.index[f.split == "test"][:3]))
    rejected(bundle, tmp_path / "lb", "test ids incomplete: 57 test rows, the board's test set has 60 (3 missing)")


def test_extra_and_swapped_test_ids(bundle: Path, tmp_path: Path) -> None:
    def extra(f: pd.DataFrame) -> pd.DataFrame:
        row = f[f.split == "test"].iloc[[0]].assign(sample_id="intruder")
        return pd.concat([f, row], ignore_index=True)
    edit_parquet(bundle / CLS / "seed0.predictions.parquet", extra)
    rejected(bundle, tmp_path / "lb", "extra test ids: 61 test rows")

    def swap(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f.index[f.split == "test"][0], "sample_id"] = "stranger"
        return f
    edit_parquet(bundle / CLS / "seed1.predictions.parquet", swap)
    rejected(bundle, tmp_path / "lb", "test ids differ from the board's test set")


def test_pickle_file(bundle: Path, tmp_path: Path) -> None:
    (bundle / CLS / "model.pkl").write_bytes(pickle.dumps({"w": [1, 2]}))
    rejected(bundle, tmp_path / "lb", "model.pkl: only .json and .parquet files are accepted")


def test_parquet_that_is_a_pickle(bundle: Path, tmp_path: Path) -> None:
    frame = pd.read_parquet(bundle / CLS / "seed0.predictions.parquet")
    (bundle / CLS / "seed0.predictions.parquet").write_bytes(pickle.dumps(frame, protocol=4))
    rejected(bundle, tmp_path / "lb", "seed0.predictions.parquet: is a Python pickle (protocol 4)")


def test_json_that_is_a_pickle_or_a_zip(bundle: Path, tmp_path: Path) -> None:
    (bundle / "model.json").write_bytes(pickle.dumps({"name": "x"}))
    (bundle / CLS / "seed1.json").write_bytes(b"PK\x03\x04" + b"\0" * 40)
    reasons = rejected(bundle, tmp_path / "lb", "model.json: is a Python pickle")
    assert any("seed1.json: is a zip archive" in r for r in reasons)


def test_symlink(bundle: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    target = bundle / CLS / "seed1.json"
    target.unlink()
    os.symlink(outside, target)
    rejected(bundle, tmp_path / "lb", "seed1.json: is a symlink")


def test_symlinked_folder_and_bundle(bundle: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path, bundle / "results" / "elsewhere")
    rejected(bundle, tmp_path / "lb", "results/elsewhere: is a symlink")
    link = tmp_path / "link"
    os.symlink(bundle, link)
    rejected(link, tmp_path / "lb", "the bundle is a symlink")


def test_path_leaving_the_bundle(bundle: Path, tmp_path: Path) -> None:
    def escape(doc: dict) -> None:
        doc["predictions"]["file"] = "../../../outside.parquet"
    edit_json(bundle / CLS / "seed0.json", escape)

    def absolute(doc: dict) -> None:
        doc["predictions"]["file"] = "/etc/passwd"
    edit_json(bundle / CLS / "seed1.json", absolute)
    reasons = rejected(bundle, tmp_path / "lb", "leaves the bundle ('..')")
    assert any("is an absolute path" in r for r in reasons)


def test_oversized_file(bundle: Path, tmp_path: Path) -> None:
    rejected(bundle, tmp_path / "lb", "over the 2000-byte limit", Limits(parquet_bytes=2000))
    rejected(bundle, tmp_path / "lb", "over the 100000-byte total limit", Limits(total_bytes=100_000))


def test_nan_scores(bundle: Path, tmp_path: Path) -> None:
    def nan(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[f.index[f.split == "test"][5], "score:lesion"] = float("nan")
        return f
    edit_parquet(bundle / CLS / "seed0.predictions.parquet", nan)
    rejected(bundle, tmp_path / "lb", "column 'score:lesion' has 1 missing or NaN value(s)")


def test_nan_and_infinite_values_kept_as_floats(bundle: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = bundle / SEG / "seed0.predictions.parquet"
    table = pq.read_table(path)
    dsc = table.column("dsc").to_numpy().copy()
    dsc[0] = float("nan")
    pq.write_table(table.set_column(table.schema.get_field_index("dsc"), "dsc", pa.array(dsc, from_pandas=False)),
                   path)
    rejected(bundle, tmp_path / "lb", "column 'dsc' has 1 NaN value(s)")
    edit_parquet(path, lambda f: f.assign(dsc=f.dsc.fillna(float("inf"))))
    rejected(bundle, tmp_path / "lb", "column 'dsc' has 1 infinite value(s)")


def test_nan_in_reported_json(bundle: Path, tmp_path: Path) -> None:
    path = bundle / CLS / "seed0.json"
    path.write_text(path.read_text().replace('"ci_level": 0.95', '"ci_level": NaN', 1))
    rejected(bundle, tmp_path / "lb", "NaN is not JSON")


def test_schema_violation(bundle: Path, tmp_path: Path) -> None:
    def drop(doc: dict) -> None:
        del doc["result"]["meta"]
        doc["run_id"] = "not-a-hash"
    edit_json(bundle / CLS / "seed0.json", drop)
    reasons = rejected(bundle, tmp_path / "lb", "schema violation at result: 'meta' is a required property")
    assert any("schema violation at run_id" in r for r in reasons)


def test_model_card_schema_and_suite_mismatch(bundle: Path, tmp_path: Path) -> None:
    edit_json(bundle / "model.json", lambda d: d.update(weights_sha256="abc", pretraining_data="all of it"))
    reasons = rejected(bundle, tmp_path / "lb", "model.json: schema violation at pretraining_data")
    assert any("weights_sha256" in r for r in reasons)
    edit_json(bundle / "model.json", lambda d: d.update(weights_sha256=None, pretraining_data=[]))
    edit_json(bundle / "suite.json", lambda d: d.update(version="0.9"))
    rejected(bundle, tmp_path / "lb", "this board is 'test-pinned' version '1.0'")


def test_stray_files_and_unknown_entries(bundle: Path, tmp_path: Path) -> None:
    (bundle / "notes.txt").write_text("hi")
    shutil.copytree(bundle / CLS, bundle / "results" / "nih-cxr14__linear_probe__sex")
    reasons = rejected(bundle, tmp_path / "lb", "notes.txt: only .json and .parquet files are accepted")
    (bundle / "notes.txt").unlink()
    reasons = rejected(bundle, tmp_path / "lb", "results/nih-cxr14__linear_probe__sex: not an entry of suite")
    assert reasons


def test_missing_seed_and_model_mismatch(bundle: Path, tmp_path: Path) -> None:
    (bundle / CLS / "seed1.json").unlink()
    (bundle / CLS / "seed1.predictions.parquet").unlink()
    edit_json(bundle / SEG / "seed0.json", lambda d: d["inputs"]["model"].update(name="someone-else"), fix_run_id=True)
    reasons = rejected(bundle, tmp_path / "lb", "seed 1 is missing")
    assert any("inputs.model.name is 'someone-else'" in r for r in reasons)


def test_pretraining_overlap_is_flagged(tmp_path: Path) -> None:
    """The flag reads the dataset-card names of training_datasets (free-text pretraining_data is not parsed)."""
    card = model_card("seen-it", pretraining=("a synthetic contrast set",), training_datasets=("synth-contrast",))
    out = submit_bundle(write_bundle(tmp_path / "b", pinned_suite(), card), BOARD, tmp_path / "lb")
    assert out.accepted, out.reasons
    assert out.flags == ["synth-contrast__sam_prompt__sex / sex: data seen in pretraining: synth-contrast is in the "
                         "model's pretraining data: not zero-shot"]
    rows = read_submission(out.path)["rows"]
    assert [r["flags"] for r in rows] == [[], [], [{"key": "seen-in-pretraining", "label": "data seen in pretraining",
                                                    "detail": "synth-contrast is in the model's pretraining data: "
                                                              "not zero-shot"}]]


def test_unknown_board_and_missing_bundle(bundle: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown board suite 'test-pined'.*Did you mean test-pinned"):
        submit_bundle(bundle, "test-pined", tmp_path)
    with pytest.raises(FileNotFoundError, match="run-suite"):
        submit_bundle(tmp_path / "nope", BOARD, tmp_path)


def test_slug_keeps_folder_names_safe() -> None:
    assert slug("biomedclip") == "biomedclip"
    odd = slug("../<script>alert(1)</script>")
    assert "/" not in odd and not odd.startswith(".") and odd.startswith("script-alert-1-script-")
    assert slug("a b") != slug("a_b")


def test_no_torch_no_unpickling_in_leaderboards(good: Path, tmp_path: Path) -> None:
    code = ("import sys, pickle\n"
            "def refuse(*a, **k): raise AssertionError('unpickling attempted')\n"
            "pickle.load = pickle.loads = pickle.Unpickler = refuse\n"
            "from fairmedbench.benchmark.leaderboard import submit_bundle, build_board\n"
            "from bundle_factory import pinned_suite\n"
            "pinned_suite()\n"
            f"out = submit_bundle({str(good)!r}, 'test-pinned', {str(tmp_path)!r})\n"
            "assert out.accepted, out.reasons\n"
            f"build_board('test-pinned', {str(tmp_path)!r})\n"
            "assert 'torch' not in sys.modules, 'leaderboards imported torch'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), str(Path(__file__).parent)])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.parametrize("profile", ["default", "fairmedfm"])
def test_multitask_intersectional_profiles_recompute(tmp_path: Path, profile: str) -> None:
    from bundle_factory import make_result

    from fairmedbench.leaderboards.bundle import write_header, write_result
    from fairmedbench.leaderboards.submit import validate_bundle
    from fairmedbench.leaderboards.suites import Entry, Suite

    entries = (Entry("synth-control", ("sex", "age"), "linear_probe", profile=profile),
               Entry("synth-contrast", ("sex", "age"), "sam_prompt", task="segmentation", profile=profile))
    suite = Suite(f"multi-{profile}", "1.0", "in-test suite", entries)
    card = model_card("multi")
    write_header(tmp_path, card, suite, bundle_card(card))
    for entry in entries:
        tasks = ("lesion", "effusion") if entry.task == "classification" else ("segmentation",)
        doc, frame = make_result(entry, card, 0, tasks=tasks, intersect=True)
        write_result(tmp_path, entry, 0, doc, frame)
    reasons, summary, _ = validate_bundle(tmp_path, suite)
    assert reasons == []
    assert [(r["entry"].split("__")[1], r["attribute"]) for r in summary["rows"]] == [
        ("linear_probe", "sex"), ("linear_probe", "age"), ("linear_probe", "sex|age"),
        ("sam_prompt", "sex"), ("sam_prompt", "age"), ("sam_prompt", "sex|age")]
    path = tmp_path / "results" / entries[0].key / "seed0.json"
    edit_json(path, lambda d: d["result"]["reports"][-1]["metrics"]["tpr"]["__overall__"].update(value=0.123))
    reasons, _, _ = validate_bundle(tmp_path, suite)
    assert len(reasons) == 1 and "result/reports[5]/metrics/tpr/__overall__/value" in reasons[0]
