"""`benchmark evaluate` end to end: demo, files, multi-label, masks, bad input with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.cli import main, route_default
from fairmedbench.engine import store


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _preds(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    sex = rng.choice(["F", "M"], n)
    score = 1 / (1 + np.exp(-(np.where(sex == "F", 0.5, 1.5) * (2 * y - 1) + rng.normal(0, 1, n))))
    return pd.DataFrame({"id": [f"s{i}" for i in range(n)], "split": np.where(np.arange(n) % 3 == 0, "val", "test"),
                         "y": y, "p": score, "sex": sex, "age": rng.integers(18, 90, n)})


def test_demo_writes_valid_result(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    out = tmp_path / "r" / "result.json"
    rc, text, _ = _run(capsys, "evaluate", "--demo", "--n-boot", "100", "--out", str(out),
                       "--out-table", str(tmp_path / "t.csv"))
    assert rc == 0
    assert "ΔAUC" in text and "worst group" in text
    doc = store.read_json(out)
    jsonschema.validate(doc, json.loads(store.SCHEMA_PATH.read_text()))
    assert store.validate_document(doc) == []
    sex = next(r for r in doc["result"]["reports"] if r["attribute"] == "sex")
    gap = sex["metrics"]["auc_gap"]["__gap__"]
    # The demo injects a separation of 1.0 (M) vs 0.5 (F): AUC about 0.92 vs 0.76.
    assert 0.08 < gap["value"] < 0.22 and gap["ci_low"] > 0.05
    assert sex["worst_group"]["auc"] == "F"
    assert doc["result"]["meta"]["thresholds"]["label"]["source"] == "validation"
    preds = pd.read_parquet(out.with_name("result.predictions.parquet"))
    assert set(preds["split"]) == {"test"} and {"label", "score", "sex", "age"} <= set(preds.columns)
    tidy = pd.read_csv(tmp_path / "t.csv")
    assert list(tidy.columns) == ["task", "attribute", "group", "metric", "value", "ci_low", "ci_high", "n", "unit",
                                  "p_value", "p_adjusted", "bias_corrected", "mde"]
    # the injected sex gap is larger than chance; the age negative control is not
    assert sex["metrics"]["auc_gap"]["__gap__"]["p_value"] < 0.01
    assert sex["resampling"]["unit"] == "row" and sum(sex["resampling"]["n_clusters"][g] for g in "FM") == \
        sex["counts"]["__overall__"]["n"]
    assert {"__overall__", "__gap__", "F", "M", "<40", "40-60", ">=60"} <= set(tidy["group"])


def test_demo_fairmedfm_profile_prints_its_thresholds(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # issue 11: this exited 1 with KeyError 'policy' (the profile has one threshold per attribute)
    rc, text, _ = _run(capsys, "evaluate", "--demo", "--profile", "fairmedfm", "--n-boot", "20",
                       "--out", str(tmp_path / "r.json"))
    assert rc == 0
    assert "operating threshold (label / sex): eval_best_f1_fairmedfm" in text
    assert "positive iff score > t" in text
    doc = store.read_json(tmp_path / "r.json")
    assert set(doc["result"]["meta"]["thresholds"]["label"]) == {"sex", "age"}


def test_threshold_with_fairmedfm_profile_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, _, err = _run(capsys, "evaluate", "--demo", "--profile", "fairmedfm", "--threshold", "fixed:0.5",
                      "--out", str(tmp_path / "r.json"))
    assert rc == 2 and "chooses its own threshold" in err
    assert not (tmp_path / "r.json").exists()


def test_file_multilabel_json_and_no_validation(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    df = _preds().drop(columns="split")
    df["y2"] = (df["p"] > 0.6).astype(int)
    df["p2"] = np.clip(df["p"] * 0.9 + 0.05, 0, 1)
    path = tmp_path / "p.parquet"
    df.to_parquet(path)
    rc, text, _ = _run(capsys, "evaluate", "--predictions", str(path), "--label", "y,y2", "--score", "p,p2",
                       "--attribute", "sex", "--n-boot", "0", "--json", "--out", str(tmp_path / "o.json"))
    assert rc == 0
    doc = json.loads(text)
    assert [r["task"] for r in doc["result"]["reports"]] == ["y", "y2"]
    assert doc["inputs"]["predictions"]["sha256"] == store.sha256_file(path)
    assert any("fixed:0.5" in n for n in doc["notes"])
    assert doc["result"]["meta"]["thresholds"]["y"]["policy"] == "fixed:0.5"


def test_intersect_bins_logits(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    df = _preds()
    df["logit"] = np.log(df["p"] / (1 - df["p"]))
    path = tmp_path / "p.csv"
    df.to_csv(path, index=False)
    rc, _, _ = _run(capsys, "evaluate", "--predictions", str(path), "--label", "y", "--score", "logit", "--logits",
                    "--attribute", "sex", "--attribute", "age", "--bins", "age=0,60,200", "--intersect",
                    "--n-boot", "20", "--out", str(tmp_path / "o.json"), "--threshold", "val_fpr:0.2")
    assert rc == 0
    doc = store.read_json(tmp_path / "o.json")
    crossed = next(r for r in doc["result"]["reports"] if r["attribute"] == "sex|age")
    assert set(crossed["groups"]) == {"F|<60", "F|>=60", "M|<60", "M|>=60"}
    assert doc["result"]["meta"]["thresholds"]["y"]["policy"] == "val_fpr:0.2"


@pytest.mark.parametrize(
    "mutate, args, needle",
    [
        (lambda d: d.assign(p=d["p"].where(d.index != 3, np.nan)), [], "NaN"),
        (lambda d: d.assign(p=d["p"].where(d.index != 3, np.inf)), [], "infinite"),
        (lambda d: d.assign(p=d["p"] * 3), [], "--logits"),
        (lambda d: d.assign(y=d["y"] * 2), [], "labels must be 0 or 1"),
        (lambda d: d, ["--attribute", "race"], "race"),
        (lambda d: d.assign(age=np.arange(len(d))), ["--attribute", "age"], "--bins age="),
        (lambda d: d, ["--label", "y,y"], "one score column per label"),
        (lambda d: d.assign(split="train"), [], "no 'test' rows"),
        (lambda d: d, ["--threshold", "val_magic"], "unknown threshold policy"),
        (lambda d: d, ["--bins", "age=5,1"], "increasing edges"),
    ],
)
def test_bad_input_exits_2_with_message(tmp_path: Path, capsys: pytest.CaptureFixture, mutate, args, needle) -> None:
    path = tmp_path / "p.csv"
    mutate(_preds()).to_csv(path, index=False)
    base = ["evaluate", "--predictions", str(path), "--label", "y", "--score", "p", "--attribute", "sex",
            "--n-boot", "0", "--out", str(tmp_path / "o.json")]
    rc, _, err = _run(capsys, *(base + args))
    assert rc == 2
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()


def test_unreadable_empty_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    header = tmp_path / "header.csv"
    header.write_text("y,p,sex\n")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not a parquet file")
    for path, needle in [(empty, "is empty"), (header, "has no rows"), (broken, "cannot read"),
                         (tmp_path / "absent.csv", "not found")]:
        rc, _, err = _run(capsys, "evaluate", "--predictions", str(path), "--label", "y", "--score", "p",
                          "--attribute", "sex")
        assert rc == 2 and needle in err and str(path.name) in err, err


def test_masks_mode_and_volume_pooling(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = []
    for i in range(8):
        gt = np.zeros((16, 16), dtype=np.uint8)
        gt[4:12, 4:12] = 1
        pred = gt.copy()
        if i % 2:  # group B: predictions shifted by 3 px -> lower DSC
            pred = np.roll(pred, 3, axis=1)
        np.save(tmp_path / f"gt{i}.npy", gt)
        np.save(tmp_path / f"pred{i}.npy", pred)
        rows.append({"pred_mask": f"pred{i}.npy", "gt_mask": f"gt{i}.npy", "grp": "B" if i % 2 else "A",
                     "vol": f"v{i % 4}", "split": "test"})
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    rc, text, _ = _run(capsys, "evaluate", "--predictions", str(tmp_path / "m.csv"), "--masks", "--attribute",
                       "grp", "--n-boot", "50", "--out", str(tmp_path / "o.json"), "--hd95")
    assert rc == 0 and "ΔDSC" in text
    doc = store.read_json(tmp_path / "o.json")
    m = doc["result"]["reports"][0]["metrics"]
    assert m["dsc"]["A"]["value"] == 1.0
    # Shift of 3 px on an 8x8 square: overlap 8x5 = 40, DSC = 80/128 = 0.625.
    assert m["dsc"]["B"]["value"] == pytest.approx(0.625)
    assert m["dsc_gap"]["__gap__"]["value"] == pytest.approx(0.375)
    assert m["hd95"]["B"]["value"] == pytest.approx(3.0)
    rc, _, _ = _run(capsys, "evaluate", "--predictions", str(tmp_path / "m.csv"), "--masks", "--attribute", "grp",
                    "--volume", "vol", "--n-boot", "0", "--out", str(tmp_path / "v.json"))
    assert rc == 0
    vdoc = store.read_json(tmp_path / "v.json")
    assert vdoc["result"]["reports"][0]["counts"]["__overall__"]["n"] == 4


def test_mask_shape_mismatch_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    np.save(tmp_path / "a.npy", np.zeros((8, 8), dtype=np.uint8))
    np.save(tmp_path / "b.npy", np.zeros((9, 8), dtype=np.uint8))
    pd.DataFrame([{"pred_mask": "a.npy", "gt_mask": "b.npy", "g": "x"}]).to_csv(tmp_path / "m.csv", index=False)
    rc, _, err = _run(capsys, "evaluate", "--predictions", str(tmp_path / "m.csv"), "--masks", "--attribute", "g")
    assert rc == 2 and "a.npy" in err and "b.npy" in err


def test_masks_refuse_a_threshold_policy_before_reading_a_mask(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A segmentation is decided by the predicted mask: --threshold is refused (not ignored) before any mask is
    read (the mask files here do not exist)."""
    pd.DataFrame([{"pred_mask": "absent.npy", "gt_mask": "absent.npy", "g": "x"}]).to_csv(tmp_path / "m.csv",
                                                                                        index=False)
    rc, _, err = _run(capsys, "evaluate", "--predictions", str(tmp_path / "m.csv"), "--masks", "--attribute", "g",
                      "--threshold", "fixed:0.3")
    assert rc == 2 and "segmentation task decides by the predicted mask" in err and "absent.npy" not in err


def test_list_and_default_routing(capsys: pytest.CaptureFixture) -> None:
    rc, out, _ = _run(capsys, "list", "profiles", "--json")
    assert rc == 0 and {r["name"] for r in json.loads(out)} == {"default", "fairmedfm", "fairseg"}
    assert route_default(["--model", "x"], ["run", "evaluate"], "run") == ["run", "--model", "x"]
    assert route_default(["--help"], ["run"], "run") == ["--help"]
    assert route_default(["evaluate", "--demo"], ["run", "evaluate"], "run") == ["evaluate", "--demo"]
    assert route_default(["--model", "x"], ["evaluate"], "run") == ["--model", "x"]


def test_every_subcommand_has_help() -> None:
    for cmd in (["--help"], ["evaluate", "--help"], ["list", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(cmd)
        assert exc.value.code == 0


def test_metrics_and_store_never_import_torch() -> None:
    code = ("import sys, fairmedbench.metrics, fairmedbench.metrics.stats, fairmedbench.metrics.multiclass, "
            "fairmedbench.metrics.segmentation, fairmedbench.engine.store, fairmedbench.benchmark.evaluate, "
            "fairmedbench.cli; bad = [m for m in ('torch', 'torchvision', 'open_clip', 'transformers') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 0, res.stdout + res.stderr


def test_atomic_write_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    with pytest.raises(ValueError):
        store.write_json(target, {"bad": float("nan")})
    assert list(tmp_path.iterdir()) == []
    store.write_json(target, {"ok": 1})
    assert store.read_json(target) == {"ok": 1}


def test_patient_column_found_by_name_named_or_none(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # 'Patient ID' (NIH's column) is found by name and said; --patient-column none resamples rows; a column that
    # does not exist is a one-line error (exit 2)
    df = _preds(240)
    df["Patient ID"] = np.arange(240) // 4  # 60 patients of 4 images
    src = tmp_path / "p.csv"
    df.to_csv(src, index=False)
    common = ["evaluate", "--predictions", str(src), "--label", "y", "--score", "p", "--attribute", "sex",
              "--n-boot", "50", "--n-perm", "50"]
    rc, out, _ = _run(capsys, *common, "--out", str(tmp_path / "a.json"))
    assert rc == 0 and "resampling unit: patient (column 'Patient ID', found by name" in out
    rep = store.read_json(tmp_path / "a.json")["result"]["reports"][0]
    assert rep["resampling"]["unit"] == "patient"
    groups = df[df.split == "test"].groupby("sex")["Patient ID"].nunique()
    assert rep["resampling"]["n_clusters"] == {"__overall__": int(groups.sum()), **{g: int(v) for g, v in
                                                                                    groups.items()}}
    assert "sex: intervals resample whole patients (F " in out
    rc, out, _ = _run(capsys, *common, "--patient-column", "none", "--out", str(tmp_path / "b.json"))
    assert rc == 0 and "resampling unit: row (--patient-column none)" in out
    assert store.read_json(tmp_path / "b.json")["result"]["reports"][0]["resampling"]["unit"] == "row"
    rc, _, err = _run(capsys, *common, "--patient-column", "pid", "--out", str(tmp_path / "c.json"))
    assert rc == 2 and "--patient-column 'pid' is not a column" in err and "Traceback" not in err


def test_n_perm_above_its_bound_needs_i_know(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    rc, _, err = _run(capsys, "evaluate", "--demo", "--n-boot", "10", "--n-perm", "20000", "--out",
                      str(tmp_path / "r.json"))
    assert rc == 2 and "--n-perm 20000 (bound 10,000)" in err and "--i-know" in err
    assert not (tmp_path / "r.json").exists()
