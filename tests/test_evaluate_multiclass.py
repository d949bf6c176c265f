"""`benchmark evaluate` on multi-class predictions: score columns, a pattern or a list column; sniffing; errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from fairmedbench.cli import main
from fairmedbench.engine import store
from fairmedbench.metrics.result import GAP


def _frame(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    sex = np.where(rng.random(n) < 0.5, "F", "M")
    logit = rng.normal(size=(n, 3))
    logit[np.arange(n), y] += np.where(sex == "F", 0.5, 2.0)
    p = np.exp(logit)
    p /= p.sum(axis=1, keepdims=True)
    return pd.DataFrame({"id": [f"s{i}" for i in range(n)], "split": np.where(np.arange(n) % 4 == 0, "val", "test"),
                         "y": y, "sex": sex, "score:low": p[:, 0], "score:mid": p[:, 1], "score:high": p[:, 2]})


SCORES = ["score:low", "score:mid", "score:high"]


def _evaluate(capsys, tmp: Path, *argv: str) -> tuple[int, dict, str]:
    out = tmp / "r" / "result.json"
    rc = main(["evaluate", *argv, "--out", str(out)])
    text = capsys.readouterr()
    return rc, (store.read_json(out) if rc == 0 else {}), text.out + text.err


def _metric(doc: dict, metric: str, group: str) -> float:
    return doc["result"]["reports"][0]["metrics"][metric][group]["value"]


def test_several_score_columns_are_one_multiclass_prediction(tmp_path: Path, capsys) -> None:
    df = _frame()
    df.to_csv(tmp_path / "p.csv", index=False)
    rc, doc, text = _evaluate(capsys, tmp_path, "--predictions", str(tmp_path / "p.csv"), "--label", "y",
                              "--score", ",".join(SCORES), "--attribute", "sex", "--n-boot", "100")
    assert rc == 0 and doc["kind"] == "evaluate-multiclass"
    assert doc["result"]["meta"]["classes"] == ["low", "mid", "high"]
    test = df[df["split"] == "test"]
    for g in ("F", "M"):
        t = test[test["sex"] == g]
        p = t[SCORES].to_numpy()
        assert _metric(doc, "macro_auc", g) == pytest.approx(roc_auc_score(t["y"], p, multi_class="ovr"))
        assert _metric(doc, "kappa_quadratic", g) == pytest.approx(
            cohen_kappa_score(t["y"], p.argmax(axis=1), weights="quadratic"))
    assert _metric(doc, "macro_auc", "F") < _metric(doc, "macro_auc", "M")
    assert "macro AUC" in text and "validation row(s) not used" in " ".join(doc["notes"])
    assert doc["result"]["reports"][0]["counts"]["__overall__"]["n"] == len(test)


def test_pattern_list_column_and_class_name_labels_agree(tmp_path: Path, capsys) -> None:
    df = _frame()
    df.to_csv(tmp_path / "p.csv", index=False)
    _, a, _ = _evaluate(capsys, tmp_path / "a", "--predictions", str(tmp_path / "p.csv"), "--label", "y", "--score",
                        "score:*", "--attribute", "sex", "--n-boot", "50")
    listed = pd.DataFrame({"y": df["y"].map({0: "low", 1: "mid", 2: "high"}), "split": df["split"],
                           "sex": df["sex"], "probs": list(df[SCORES].to_numpy())})
    listed.to_parquet(tmp_path / "l.parquet")
    # class names cannot come from a list column: text labels must then be indices
    rc, _, text = _evaluate(capsys, tmp_path / "b", "--predictions", str(tmp_path / "l.parquet"), "--label", "y",
                            "--score", "probs", "--attribute", "sex")
    assert rc == 2 and "class indices 0..2 or the class names ['0', '1', '2']" in text
    listed["y"] = df["y"]
    listed.to_parquet(tmp_path / "l.parquet")
    rc, b, _ = _evaluate(capsys, tmp_path / "b", "--predictions", str(tmp_path / "l.parquet"), "--label", "y",
                         "--score", "probs", "--attribute", "sex", "--n-boot", "50")
    assert rc == 0 and b["result"]["meta"]["classes"] == ["0", "1", "2"]
    # text labels naming the score columns' classes are mapped to their positions
    named = df.assign(y=df["y"].map({0: "low", 1: "mid", 2: "high"}))
    named.to_csv(tmp_path / "n.csv", index=False)
    _, c, _ = _evaluate(capsys, tmp_path / "c", "--predictions", str(tmp_path / "n.csv"), "--label", "y", "--score",
                        "score:*", "--attribute", "sex", "--n-boot", "50")
    ma, mb, mc = (d["result"]["reports"][0]["metrics"] for d in (a, b, c))
    assert ma["macro_auc"] == mc["macro_auc"]  # same classes, same bootstrap
    assert ma["macro_auc"]["F"]["value"] == pytest.approx(mb["macro_auc"]["F"]["value"])
    assert ma["kappa_linear_gap"][GAP]["value"] == pytest.approx(mb["kappa_linear_gap"][GAP]["value"])


def test_multilabel_and_binary_stay_as_they_were(tmp_path: Path, capsys) -> None:
    df = _frame()
    df["y2"] = (df["y"] == 2).astype(int)
    df["y0"] = (df["y"] == 0).astype(int)
    df.to_csv(tmp_path / "p.csv", index=False)
    rc, doc, _ = _evaluate(capsys, tmp_path, "--predictions", str(tmp_path / "p.csv"), "--label", "y0,y2",
                           "--score", "score:low,score:high", "--attribute", "sex", "--n-boot", "0")
    assert rc == 0 and doc["kind"] == "evaluate-classification" and len(doc["result"]["reports"]) == 2


def test_bad_multiclass_input_is_one_clear_error(tmp_path: Path, capsys) -> None:
    df = _frame()
    df.to_csv(tmp_path / "p.csv", index=False)
    base = ["--predictions", str(tmp_path / "p.csv"), "--attribute", "sex", "--n-boot", "0"]
    rc, _, text = _evaluate(capsys, tmp_path, *base, "--label", "y", "--score", "prob:*")
    assert rc == 2 and "matches no column" in text
    rc, _, text = _evaluate(capsys, tmp_path, *base, "--label", "y", "--score", "score:low,score:mid")
    assert rc == 2 and "sum to 1" in text
    rc, _, text = _evaluate(capsys, tmp_path, *base, "--label", "y", "--score", "score:*", "--threshold",
                            "fixed:0.5")
    assert rc == 2 and "argmax" in text
    df.assign(y=df["y"] + 1).to_csv(tmp_path / "q.csv", index=False)
    rc, _, text = _evaluate(capsys, tmp_path, "--predictions", str(tmp_path / "q.csv"), "--attribute", "sex",
                            "--label", "y", "--score", "score:*")
    assert rc == 2 and "class indices 0..2" in text
    pd.DataFrame({"y": [0, 1], "sex": ["F", "M"], "probs": ["[0.5, 0.5]", "[1.0]"]}).to_csv(tmp_path / "r.csv",
                                                                                             index=False)
    rc, _, text = _evaluate(capsys, tmp_path, "--predictions", str(tmp_path / "r.csv"), "--attribute", "sex",
                            "--label", "y", "--score", "probs")
    assert rc == 2 and "same number of class probabilities" in text


def test_batch_of_multiclass_files_prints_the_macro_auc(tmp_path: Path, capsys) -> None:
    """The batch table reads each file's task headline and its gap (macro AUC here), not the binary AUC."""
    for seed in (0, 1):
        _frame(seed=seed).to_csv(tmp_path / f"p{seed}.csv", index=False)
    rc = main(["evaluate", "--predictions", str(tmp_path / "p0.csv"), str(tmp_path / "p1.csv"), "--label", "y",
               "--score", "score:*", "--attribute", "sex", "--n-boot", "0", "--n-perm", "0",
               "--out", str(tmp_path / "batch")])
    out = capsys.readouterr().out
    assert rc == 0
    rows = [line for line in out.splitlines() if "/p0.c" in line or "/p1.c" in line]  # long paths are cut: p0.c…
    assert len(rows) == 2 and all("macro_auc 0." in r and "macro_auc_gap 0." in r for r in rows), out
    assert "auc —" not in out
