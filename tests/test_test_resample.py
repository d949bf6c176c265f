"""--test-resample: the spec parser, the resampled sets and `benchmark evaluate` on original and resampled tests."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.analysis.resample import (
    ResampleSpec,
    apply_test_resample,
    balance_groups,
    parse_test_resample,
    resample_test_set,
)
from fairmedbench.cli import main
from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.metrics import evaluate_classification


def test_parse_specs() -> None:
    assert parse_test_resample("balanced:sex") == ResampleSpec("balanced", "sex")
    assert parse_test_resample(" prevalence:Patient Gender ") == ResampleSpec("prevalence", "Patient Gender")
    spec = parse_test_resample("matched:race:0,40,60,80")
    assert spec == ResampleSpec("matched", "race", (0.0, 40.0, 60.0, 80.0)) and str(spec) == "matched:race:0,40,60,80"


@pytest.mark.parametrize("text, says", [
    ("balanced", "expected balanced:ATTR"), ("balanced:", "expected balanced:ATTR"), ("shuffle:sex", "expected"),
    ("matched:sex", "needs the age bins"), ("matched:sex:0,x,60", "must be numbers"),
    ("matched:sex:60,40", "strictly increasing"), ("matched:sex:40", "at least two"), ("", "expected")])
def test_bad_specs_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        parse_test_resample(text)


def _prevalence_only(n: int = 8000, seed: int = 0, prior_shift: float = 0.0) -> pd.DataFrame:
    """Groups A (prevalence 0.1) and B (0.5) with the same label-conditional score distributions: they differ
    only in prevalence (`prior_shift` adds a logit shift to B's scores, a disparity no resampling removes)."""
    rng = np.random.default_rng(seed)
    g = np.repeat(["A", "B"], n // 2)
    y = (rng.random(n) < np.where(g == "A", 0.1, 0.5)).astype(int)
    logit = rng.normal(0, 1, n) + 1.5 * y - 0.5 + prior_shift * (g == "B")
    return pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "label": y, "score": 1 / (1 + np.exp(-logit)),
                         "grp": g, "age": rng.uniform(20, 90, n)})


def _evaluate(df: pd.DataFrame) -> object:
    return evaluate_classification(df["label"], df["score"], {"grp": df["grp"]}, n_boot=300, seed=0).report()


def _fpr_bound(rep: object) -> float:
    """4 standard errors of the difference of two groups' FPRs at 0.2 (binomial), from their negatives."""
    return 4 * math.sqrt(sum(0.2 * 0.8 / rep.counts[g]["n_neg"] for g in ("A", "B")))


def test_balanced_keeps_prevalence_and_rates_at_global_fpr20_agree_within_sampling_error() -> None:
    df = _prevalence_only()
    spec = parse_test_resample("balanced:grp")
    res = apply_test_resample(df, spec, "label", seed=3)
    assert res.counts["A"]["n"] == res.counts["B"]["n"] == (df["grp"] == "A").sum()  # the smaller group, whole
    for g, want in (("A", 0.1), ("B", 0.5)):  # each group keeps its own prevalence
        c = res.counts[g]
        assert c["n_pos"] == round(c["n"] * df.loc[df.grp == g, "label"].mean())
        assert abs(c["n_pos"] / c["n"] - want) < 0.03
    after = _evaluate(df.iloc[res.positions])
    # The acceptance check: FPR at the global FPR-0.2 threshold agrees across groups after resampling, within
    # 4 binomial standard errors of the difference (~0.06 here). It agreed before too: FPR is conditional on
    # the label, so groups that differ only in prevalence have the same FPR at any one threshold.
    before = _evaluate(df)
    for rep in (before, after):
        assert rep.value("fpr_at_fpr20_gap", "__gap__") < _fpr_bound(rep)
        assert abs(rep.value("fpr_at_fpr20") - 0.2) < 1e-3
    assert res.params["spec"] == "balanced:grp" and len(res.ids) == len(res.positions)


def test_prevalence_resampling_removes_a_prevalence_driven_gap() -> None:
    df = _prevalence_only()
    before = _evaluate(df)
    # AP depends on prevalence: 0.1 vs 0.5 gives a large AP difference whose CI excludes 0 ...
    lo, hi = before.values["ap_diff"]["__gap__"][1:]
    assert before.value("ap_diff", "__gap__") > 0.3 and lo > 0
    res = apply_test_resample(df, parse_test_resample("prevalence:grp"), "label", seed=3)
    assert {c["n_pos"] for c in res.counts.values()} == {c["n_neg"] for c in res.counts.values()} == \
        {int(((df.grp == "A") & (df.label == 1)).sum())}
    after = _evaluate(df.iloc[res.positions])
    # ... and once both groups have prevalence 0.5 the difference is compatible with none (CI holds 0).
    lo, hi = after.values["ap_diff"]["__gap__"][1:]
    assert lo < 0 < hi and abs(after.value("ap_diff", "__gap__")) < 0.05
    assert after.value("fpr_at_fpr20_gap", "__gap__") < _fpr_bound(after)


def test_resampling_does_not_hide_a_score_disparity() -> None:
    df = _prevalence_only(prior_shift=1.0)  # B's negatives score higher: a real FPR disparity
    for spec in ("balanced:grp", "prevalence:grp"):
        res = apply_test_resample(df, parse_test_resample(spec), "label", seed=1)
        rep = _evaluate(df.iloc[res.positions])
        assert rep.value("fpr_at_fpr20_gap", "__gap__") > 2 * _fpr_bound(rep), spec


def test_matched_uses_the_age_column_and_bins() -> None:
    df = _prevalence_only(4000)
    res = apply_test_resample(df, parse_test_resample("matched:grp:20,40,60,90"), "label", seed=0)
    assert res.params["age_col"] == "age" and res.params["age_bins"] == [20.0, 40.0, 60.0, 90.0]
    chosen = df.iloc[res.positions]
    assert len(set(res.positions.tolist())) == len(res.positions)  # drawn without replacement
    n = res.params["n_per_group"]
    assert res.counts["A"]["n"] == res.counts["B"]["n"] == n and n < (df.grp == "A").sum()  # what the bins can fill
    with pytest.raises(InputError, match="needs"):  # the largest size: one more does not fit the age bins
        balance_groups(df, "grp", seed=0, n_per_group=n + 1, age_col="age", age_bins=(20, 40, 60, 90))
    bins = pd.cut(chosen["age"], [20, 40, 60, 90], right=False)
    per = chosen.assign(b=bins).groupby(["label", "grp"])["b"].value_counts(normalize=True).unstack()
    for y in (0, 1):  # every group has the pooled age-bin distribution within each label
        assert (per.loc[y].max() - per.loc[y].min()).max() < 0.02
    with pytest.raises(InputError, match="age column 'years'"):
        apply_test_resample(df, parse_test_resample("matched:grp:20,40,60,90"), "label", age_col="years")


def test_evaluate_reports_original_and_resampled(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    df = _prevalence_only(2000).rename(columns={"sample_id": "id"})
    path = tmp_path / "p.csv"
    df.to_csv(path, index=False)
    out, table = tmp_path / "r.json", tmp_path / "t.csv"
    argv = ["evaluate", "--predictions", str(path), "--label", "label", "--score", "score", "--attribute", "grp",
            "--id-column", "id", "--n-boot", "50", "--seed", "7", "--out", str(out), "--out-table", str(table)]
    assert main(argv + ["--test-resample", "prevalence:grp"]) == 0
    printed = capsys.readouterr().out
    assert "original | resampled test set (prevalence:grp, seed 7" in printed
    doc = store.read_json(out)
    tr = doc["test_resample"]
    n_cell = int(((df.grp == "A") & (df.label == 1)).sum())
    assert len(tr["ids"]) == 4 * n_cell and set(tr["ids"]) <= set(df["id"]) and tr["seed"] == 7
    assert tr["params"]["spec"] == "prevalence:grp" and tr["params"]["label_col"] == "label"
    assert tr["params"]["group_col"] == "grp"
    rep = tr["result"]["reports"][0]
    assert rep["counts"]["A"] == {"n": 2 * n_cell, "n_pos": n_cell, "n_neg": n_cell}
    # the resampled metrics are the engine's on exactly the stored ids
    chosen = df.set_index("id").loc[tr["ids"]]
    direct = evaluate_classification(chosen["label"], chosen["score"], {"grp": chosen["grp"]}, n_boot=0).report()
    assert rep["metrics"]["auc"]["A"]["value"] == pytest.approx(direct.value("auc", "A"), abs=1e-12)
    tidy = pd.read_csv(table)
    assert set(tidy["test_set"]) == {"original", "resampled prevalence:grp"}
    assert doc["spec"]["test_resample"] == "prevalence:grp"
    # same seed -> same ids; another seed -> other ids
    assert main(argv + ["--test-resample", "prevalence:grp", "--out", str(tmp_path / "again.json")]) == 0
    assert store.read_json(tmp_path / "again.json")["test_resample"]["ids"] == tr["ids"]
    capsys.readouterr()


@pytest.mark.parametrize("extra, says", [
    (["--test-resample", "balanced"], "expected balanced:ATTR"),
    (["--test-resample", "balanced:race"], "'race' is not among the attributes"),
    (["--test-resample", "matched:grp:0,40,60,90", "--age-column", "years"], "column(s) ['years'] not in"),
])
def test_evaluate_bad_resample_input(tmp_path: Path, capsys: pytest.CaptureFixture, extra: list[str],
                                     says: str) -> None:
    path = tmp_path / "p.csv"
    _prevalence_only(200).to_csv(path, index=False)
    rc = main(["evaluate", "--predictions", str(path), "--label", "label", "--score", "score", "--attribute", "grp",
               "--n-boot", "0", "--out", str(tmp_path / "r.json"), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and not (tmp_path / "r.json").exists()


def test_resample_test_set_on_arrays_records_the_columns() -> None:
    df = _prevalence_only(1000)
    spec = parse_test_resample("matched:grp:20,50,90")
    res = resample_test_set(spec, df["grp"], df["label"], df["sample_id"], seed=2, ages=df["age"],
                            columns={"group_col": "attr:grp", "age_col": "Patient Age"})
    same = apply_test_resample(df, spec, "label", seed=2, group_col="grp")
    assert res.positions.tolist() == same.positions.tolist() and res.ids == same.ids
    assert res.params["group_col"] == "attr:grp" and res.params["age_col"] == "Patient Age"
    with pytest.raises(InputError, match="needs each test sample's age"):
        resample_test_set(spec, df["grp"], df["label"], df["sample_id"], seed=2)


def test_batch_table_has_both_test_sets(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    paths = []
    for seed in (0, 1):
        paths.append(tmp_path / f"p{seed}.csv")
        _prevalence_only(400, seed).to_csv(paths[-1], index=False)
    rc = main(["evaluate", "--predictions", *map(str, paths), "--label", "label", "--score", "score", "--attribute",
               "grp", "--n-boot", "0", "--test-resample", "balanced:grp", "--out", str(tmp_path / "b"),
               "--out-table", str(tmp_path / "t.csv")])
    capsys.readouterr()
    tidy = pd.read_csv(tmp_path / "t.csv")
    assert rc == 0 and set(tidy["test_set"]) == {"original", "resampled balanced:grp"}
    assert set(tidy["source"]) == set(map(str, paths))


def test_matched_age_column_is_the_cards_binned_age_attribute() -> None:
    from types import SimpleNamespace

    from fairmedbench.analysis.resample import matched_age_column
    from fairmedbench.registry.datasets import get_card

    card = get_card("synth-contrast")  # attributes sex, age (binned, raw column 'age'), age_bins
    assert matched_age_column(parse_test_resample("matched:sex:0,40,60,80"), card) == "age"
    assert matched_age_column(parse_test_resample("balanced:sex"), card) is None
    no_age = SimpleNamespace(name="no-age", attributes=[SimpleNamespace(name="sex", column="sex", bins=None)])
    with pytest.raises(InputError, match="matched:sex:0,40,60,80: matched needs each sample's age; dataset 'no-age'"):
        matched_age_column(parse_test_resample("matched:sex:0,40,60,80"), no_age)
