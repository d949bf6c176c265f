"""`benchmark evaluate` ergonomics: batch mode (files and globs, one tidy table with `source`), files without
an extension, right-closed bins, and the pandas-free column reader/writer it starts fast with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.cli import main
from fairmedbench.engine.columns import read_columns, write_parquet_columns
from fairmedbench.metrics.groups import Bins, make_attribute, parse_bins

REPO = Path(__file__).resolve().parents[1]


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _preds(n: int, seed: int, sep: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    sex = rng.choice(["F", "M"], n)
    s = 1 / (1 + np.exp(-(sep * (2 * y - 1) + rng.normal(0, 1, n))))
    return pd.DataFrame({"y": y, "p": s, "sex": sex, "age": rng.integers(20, 90, n)})


def test_batch_glob_and_files_give_one_table_with_source(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for i, sep in enumerate((0.5, 1.0, 2.0)):
        (tmp_path / f"run{i}").mkdir()
        _preds(120, i, sep).to_csv(tmp_path / f"run{i}" / "preds.csv", index=False)
    extra = tmp_path / "extra"  # no extension: sniffed
    _preds(120, 7, 1.0).to_csv(extra, index=False)
    rc, out, err = _run(capsys, "evaluate", "--predictions", str(tmp_path / "run*" / "preds.csv"), str(extra),
                        "--label", "y", "--score", "p", "--attribute", "sex", "--n-boot", "50",
                        "--out", str(tmp_path / "o"), "--out-table", str(tmp_path / "all.csv"))
    assert rc == 0, err
    table = pd.read_csv(tmp_path / "all.csv")
    sources = [str(tmp_path / f"run{i}" / "preds.csv") for i in range(3)] + [str(extra)]
    assert list(dict.fromkeys(table["source"])) == sources
    for i, src in enumerate(sources):  # each file's numbers equal a single call on that file
        single = tmp_path / f"single{i}.csv"
        assert main(["evaluate", "--predictions", src, "--label", "y", "--score", "p", "--attribute", "sex",
                     "--n-boot", "50", "--out", str(tmp_path / f"s{i}.json"), "--out-table", str(single)]) == 0
        capsys.readouterr()
        mine = table[table.source == src].drop(columns="source").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, pd.read_csv(single))
    # the same stem 'preds' thrice: result folders are numbered so none overwrites another
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if p.is_dir()) == [
        "0000-preds", "0001-preds", "0002-preds", "0003-extra"]
    assert "4 prediction files" in out


def test_batch_refuses_a_missing_file_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _preds(50, 0, 1.0).to_csv(tmp_path / "a.csv", index=False)
    rc, _, err = _run(capsys, "evaluate", "--predictions", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"),
                      "--label", "y", "--score", "p", "--attribute", "sex", "--out", str(tmp_path / "o"))
    assert rc == 2 and "b.csv not found" in err and not (tmp_path / "o").exists()
    rc, _, err = _run(capsys, "evaluate", "--predictions", str(tmp_path / "nothing*.csv"), "--label", "y",
                      "--score", "p", "--attribute", "sex")
    assert rc == 2 and "no file matches this pattern" in err


@pytest.mark.parametrize("fmt", ["tsv", "parquet", "semicolon"])
def test_files_without_extension_are_sniffed(tmp_path: Path, capsys: pytest.CaptureFixture, fmt: str) -> None:
    df = _preds(80, 1, 1.0)
    path = tmp_path / "preds"
    if fmt == "parquet":
        df.to_parquet(path)
    else:
        df.to_csv(path, sep="\t" if fmt == "tsv" else ";", index=False)
    rc, _, err = _run(capsys, "evaluate", "--predictions", str(path), "--label", "y", "--score", "p",
                      "--attribute", "sex", "--n-boot", "0", "--out", str(tmp_path / "r.json"), "--json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    auc = next(r for r in doc["result"]["reports"])["metrics"]["auc"]["__overall__"]["value"]
    from sklearn.metrics import roc_auc_score

    assert auc == pytest.approx(roc_auc_score(df["y"], df["p"]))


def test_right_closed_bins_put_edge_values_in_the_lower_bin(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ages = np.array([20, 40, 41, 60, 61, 80])
    left = make_attribute("age", ages, [0, 40, 60, 200])
    right = make_attribute("age", ages, Bins([0, 40, 60, 200], "right"))
    assert left.groups == ("<40", "40-60", ">=60") and left.codes.tolist() == [0, 1, 1, 2, 2, 2]
    assert right.groups == ("<=40", "(40,60]", ">60") and right.codes.tolist() == [0, 0, 1, 1, 2, 2]
    # pandas.cut is right-closed by default: the same assignment
    assert pd.cut(ages, [0, 40, 60, 200], labels=False).tolist() == right.codes.tolist()
    assert parse_bins("age=0,40", "right")[1].closed == "right"
    with pytest.raises(Exception, match=r"outside the bins \(0, 40\]"):
        make_attribute("age", np.array([0, 10]), Bins([0, 40], "right"))
    df = pd.DataFrame({"y": [0, 1] * 40, "p": np.linspace(0.05, 0.95, 80), "age": [40, 60, 30, 70] * 20})
    df.to_csv(tmp_path / "p.csv", index=False)
    rc, _, err = _run(capsys, "evaluate", "--predictions", str(tmp_path / "p.csv"), "--label", "y", "--score", "p",
                      "--attribute", "age", "--bins", "age=0,40,60,200", "--bins-closed", "right", "--n-boot", "0",
                      "--out", str(tmp_path / "r.json"), "--json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    rep = doc["result"]["reports"][0]
    assert rep["groups"] == ["<=40", "(40,60]", ">60"]
    assert [rep["counts"][g]["n"] for g in rep["groups"]] == [40, 20, 20]
    assert doc["spec"]["bins_closed"] == "right"


def test_columns_read_like_pandas_and_round_trip(tmp_path: Path) -> None:
    text = "\ufeffid,y,p,sex,age,flag,note\n1,0,0.25,F,30,True,a\n2,1,,NA,,False,None\n3,1,0.75,M,41,True,\n"
    (tmp_path / "t.csv").write_text(text, encoding="utf-8")
    cols = read_columns(tmp_path / "t.csv", ",")
    ref = pd.read_csv(tmp_path / "t.csv")
    assert list(cols) == list(ref.columns)
    for c in ("id", "y", "p", "age"):
        np.testing.assert_array_equal(cols[c], ref[c].to_numpy())
        assert cols[c].dtype == ref[c].dtype
    assert cols["sex"].tolist() == ["F", None, "M"] and cols["note"].tolist() == ["a", None, None]
    assert cols["flag"].tolist() == [True, False, True]
    write_parquet_columns(tmp_path / "t.parquet", {**cols, "obj": np.array([1, None, 2.5], dtype=object)})
    back = pd.read_parquet(tmp_path / "t.parquet")
    np.testing.assert_array_equal(back["p"].to_numpy(), ref["p"].to_numpy())
    assert back["sex"].tolist()[0] == "F" and pd.isna(back["sex"][1])
    assert back["obj"].tolist()[0] == 1.0 and np.isnan(back["obj"][1])
    assert back["flag"].tolist() == [True, False, True]


def test_evaluate_does_not_import_pandas(tmp_path: Path) -> None:
    _preds(100, 0, 1.0).assign(split="test").to_csv(tmp_path / "p.csv", index=False)
    code = ("import sys; from fairmedbench.cli import main; "
            f"rc = main(['evaluate', '--predictions', {str(tmp_path / 'p.csv')!r}, '--label', 'y', '--score', 'p', "
            f"'--attribute', 'sex', '--n-boot', '0', '--out', {str(tmp_path / 'r.json')!r}]); "
            "print(rc, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "0 False", out.stderr
