"""CSV injection (OWASP): every CSV/TSV the package writes quotes text cells a spreadsheet would run as a formula
(= + - @, tab, carriage return) with a leading ', in one helper (engine.store.csv_safe); numbers stay numbers."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.cli import main
from fairmedbench.engine import store

EVIL = ['=HYPERLINK("http://x.example","y")', "+cmd|' /C calc'!A0", "@SUM(1+1)", "-2+3", "\t=1+1", "\r=1"]


def _cells(path: Path, sep: str = ",") -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter=sep))


def test_csv_safe_quotes_formula_text_and_leaves_numbers() -> None:
    frame = pd.DataFrame({"group": [*EVIL, "-0.12", "1e-3", "F", None], "value": np.linspace(-0.5, 0.5, 10),
                          "=col": range(10)})
    safe = store.csv_safe(frame)
    assert safe["group"].tolist()[:6] == ["'" + v for v in EVIL]
    assert safe["group"].tolist()[6:9] == ["-0.12", "1e-3", "F"] and pd.isna(safe["group"].iloc[9])
    assert safe["value"].tolist() == frame["value"].tolist()  # a negative number is a number, not a formula
    assert list(safe.columns) == ["group", "value", "'=col"]
    assert frame["group"].iloc[0] == EVIL[0]  # the caller's frame is not changed


@pytest.mark.parametrize("name,sep", [("t.csv", ","), ("t.tsv", "\t")])
def test_write_table_neutralises_csv_and_tsv_and_keeps_parquet(tmp_path: Path, name: str, sep: str) -> None:
    frame = pd.DataFrame({"group": EVIL[:3], "value": [-0.12, 0.5, -3.0]})
    rows = _cells(store.write_table(tmp_path / name, frame), sep)
    assert [r["group"] for r in rows] == ["'" + v for v in EVIL[:3]]
    assert [float(r["value"]) for r in rows] == [-0.12, 0.5, -3.0]
    assert pd.read_parquet(store.write_table(tmp_path / "t.parquet", frame))["group"].tolist() == EVIL[:3]
    assert store.csv_note(tmp_path / name, frame).startswith(f"{tmp_path / name}: 3 text cell(s)")
    assert store.csv_note(tmp_path / "t.parquet", frame) is None
    assert store.csv_note(tmp_path / name, frame.assign(group=["a", "b", "c"])) is None


def _preds(path: Path, n: int = 240) -> Path:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n)
    g = np.where(np.arange(n) % 2 == 0, EVIL[0], "+cmd")
    score = 1 / (1 + np.exp(-(np.where(g == "+cmd", 2.0, 0.3) * (2 * y - 1) + rng.normal(0, 1, n))))
    pd.DataFrame({"y": y, "p": score, "site": g}).to_parquet(path)
    return path


def test_evaluate_out_table_and_batch_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = _preds(tmp_path / "a.parquet")
    table = tmp_path / "tidy.csv"
    assert main(["evaluate", "--predictions", str(src), "--label", "y", "--score", "p", "--attribute", "site",
                 "--n-boot", "0", "--out", str(tmp_path / "r.json"), "--out-table", str(table)]) == 0
    assert "text cell(s) start with = + - @" in capsys.readouterr().out
    rows = _cells(table)
    assert {r["group"] for r in rows if r["attribute"] == "site"} >= {"'" + EVIL[0], "'+cmd"}
    assert not any(re.match(r"[=+@\t\r]", v) for r in rows for v in r.values())
    diff = [float(r["value"]) for r in rows if r["metric"] == "auc_diff"]
    assert diff and diff[0] < 0  # the weaker group minus the stronger: a negative number, written as one
    _preds(tmp_path / "b.parquet")
    batch = tmp_path / "batch.tsv"
    assert main(["evaluate", "--predictions", str(src), str(tmp_path / "b.parquet"), "--label", "y", "--score", "p",
                 "--attribute", "site", "--n-boot", "0", "--out", str(tmp_path / "o"), "--out-table", str(batch)]) == 0
    rows = _cells(batch, "\t")
    assert {r["group"] for r in rows if r["attribute"] == "site"} >= {"'" + EVIL[0], "'+cmd"}
    assert any(float(r["value"]) < 0 for r in rows if r["metric"] == "auc_diff")


def test_evaluate_uncertainty_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    n = 200
    src = tmp_path / "u.parquet"
    pd.DataFrame({"label:y": rng.integers(0, 2, n), "score:y": rng.uniform(size=n), "u": rng.uniform(size=n),
                  "attr:site": np.where(np.arange(n) % 2 == 0, "@evil", "-1+1")}).to_parquet(src)
    table = tmp_path / "curves.csv"
    assert main(["evaluate", "--predictions", str(src), "--uncertainty", "u", "--retention-step", "0.25",
                 "--out-table", str(table), "--json"]) == 0
    groups = {r["group"] for r in _cells(table)}
    assert {"'@evil", "'-1+1"} <= groups


def test_every_csv_writer_goes_through_the_store() -> None:
    """No module writes a CSV/TSV itself: `to_csv(` and `csv.writer` appear only in engine/store.py (the dataset
    fingerprint hashes a table's text in memory, which writes no file)."""
    root = Path(__file__).resolve().parents[1] / "fairmedbench"
    found = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py") if p.name != "store.py"
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\.to_csv\(|csv\.writer|csv\.DictWriter", line) and "to_csv(index=False, header=False)"
             not in line]
    assert found == []


def test_inspect_tables(tmp_path: Path) -> None:
    from tests.test_inspect import _frame

    df = _frame(160)
    df["sex"] = df["sex"].map({"F": EVIL[0], "M": "+cmd"})
    src = tmp_path / "emb.parquet"
    df.to_parquet(src)
    assert main(["inspect", "--embeddings", str(src), "--attribute", "sex", "--n-boot", "20", "--modes", "2",
                 "--out", str(tmp_path / "o"), "--out-table", str(tmp_path / "t.tsv")]) == 0
    for path, sep in ((tmp_path / "o" / "table.csv", ","), (tmp_path / "t.tsv", "\t")):
        rows = _cells(path, sep)
        ks = [r for r in rows if r["analysis"] == "ks" and r["variable"] == "sex"]
        assert ks and {(r["group"], r["group_b"]) for r in ks} == {("'+cmd", "'" + EVIL[0])}
        assert not any(re.match(r"[=+@\t\r]", v) for r in rows for v in r.values())
