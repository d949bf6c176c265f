"""`benchmark inspect` and analysis.encoding: KS family with BY/BH/Bonferroni, SPLIT probe AUCs, multitask
head, probe split, the command end to end and its bad inputs (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from fairmedbench.analysis.encoding import (
    held_out_aucs,
    holdout_split,
    ks_family,
    logistic_probe,
    make_target,
    multitask_head,
)
from fairmedbench.cli import main


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _frame(n: int = 240, seed: int = 0, d: int = 8) -> pd.DataFrame:
    """Embeddings where sex shifts feature 0 and the label shifts feature 1; race leaves no trace."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M"], n)
    race = rng.choice(["A", "B", "W"], n)
    label = rng.integers(0, 2, n)
    x = rng.normal(size=(n, d))
    x[:, 0] += 2.0 * (sex == "M")
    x[:, 1] += 1.5 * label
    df = pd.DataFrame(x, columns=[f"emb_{j}" for j in range(d)])
    df["label"], df["sex"], df["race"] = label, sex, race
    df["patient_id"] = [f"p{i // 2}" for i in range(n)]  # two rows per patient
    return df


def test_ks_family_matches_scipy_and_corrects_over_the_family() -> None:
    rng = np.random.default_rng(1)
    modes = rng.normal(size=(90, 2))
    modes[:30, 0] += 1.0
    sex = make_target("sex", np.array(["F", "M"] * 45))
    grp = make_target("site", np.repeat(["a", "b", "c"], 30))
    fam = ks_family(modes, ["m1", "m2"], [sex, grp])
    assert [(r.feature, r.variable, r.group_a, r.group_b) for r in fam.rows][:4] == [
        ("m1", "sex", "F", "M"), ("m1", "site", "a", "b"), ("m1", "site", "a", "c"), ("m1", "site", "b", "c")]
    assert len(fam.rows) == 8
    raw = []
    for r in fam.rows:
        j = 0 if r.feature == "m1" else 1
        if r.variable == "sex":
            a, b = modes[0::2, j], modes[1::2, j]
        else:
            codes = {"a": slice(0, 30), "b": slice(30, 60), "c": slice(60, 90)}
            a, b = modes[codes[r.group_a], j], modes[codes[r.group_b], j]
        ref = stats.ks_2samp(a, b)
        assert r.statistic == pytest.approx(ref.statistic) and r.p_value == pytest.approx(ref.pvalue)
        raw.append(ref.pvalue)
    by = stats.false_discovery_control(raw, method="by")
    assert [r.p_adjusted for r in fam.rows] == pytest.approx(by)
    assert [r.reject for r in fam.rows] == list(by <= 0.05)
    bh = ks_family(modes, ["m1", "m2"], [sex, grp], correction="bh")
    assert [r.p_adjusted for r in bh.rows] == pytest.approx(stats.false_discovery_control(raw, method="bh"))
    bonf = ks_family(modes, ["m1", "m2"], [sex, grp], correction="bonferroni")
    assert [r.p_adjusted for r in bonf.rows] == pytest.approx(np.minimum(np.array(raw) * 8, 1))
    per = ks_family(modes, ["m1", "m2"], [sex, grp], per="attribute")
    idx_sex = [i for i, r in enumerate(per.rows) if r.variable == "sex"]
    idx_site = [i for i, r in enumerate(per.rows) if r.variable == "site"]
    assert [per.rows[i].p_adjusted for i in idx_sex] == pytest.approx(
        stats.false_discovery_control([raw[i] for i in idx_sex], method="by"))
    assert [per.rows[i].p_adjusted for i in idx_site] == pytest.approx(
        stats.false_discovery_control([raw[i] for i in idx_site], method="by"))
    only = ks_family(modes, ["m1", "m2"], [grp], pairs={"site": [("c", "a")]})
    assert [(r.group_a, r.group_b) for r in only.rows] == [("a", "c"), ("a", "c")]


def test_held_out_aucs_match_sklearn_one_vs_rest_and_macro() -> None:
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 3, 150)
    prob = rng.dirichlet([1, 1, 1], 150)
    prob[np.arange(150), codes] += 0.3
    prob /= prob.sum(axis=1, keepdims=True)
    recs = held_out_aucs("race", codes, {"emb": prob}, ("A", "B", "W"), n_boot=200)
    by_group = {r.group: r for r in recs}
    for k, g in enumerate(("A", "B", "W")):
        assert by_group[g].value == pytest.approx(roc_auc_score(codes == k, prob[:, k]))
        assert by_group[g].ci_low <= by_group[g].value <= by_group[g].ci_high
    assert by_group["__macro__"].value == pytest.approx(roc_auc_score(codes, prob, multi_class="ovr"))
    binary = held_out_aucs("sex", codes[codes < 2], {"emb": prob[codes < 2][:, :2]}, ("F", "M"), n_boot=0)
    assert [r.group for r in binary] == ["M"]
    assert binary[0].value == pytest.approx(roc_auc_score(codes[codes < 2] == 1, prob[codes < 2][:, 1]))


def test_split_probe_finds_an_encoded_attribute_and_not_an_absent_one() -> None:
    df = _frame(400)
    x = df[[f"emb_{j}" for j in range(8)]].to_numpy()
    sex, race = make_target("sex", df["sex"]), make_target("race", df["race"])
    held = holdout_split(len(df), df["label"].to_numpy(), 0.3, 0, df["patient_id"].to_numpy())
    noise = np.random.default_rng(9).normal(size=x.shape)
    probs = {"model": logistic_probe(x, sex.codes, ~held, held),
             "random": logistic_probe(noise, sex.codes, ~held, held)}
    recs = {r.features: r for r in held_out_aucs("sex", sex.codes[held], probs, sex.classes, reference="random",
                                                n_boot=500)}
    assert recs["model"].value > 0.85
    assert recs["random"].ci_low < 0.5 < recs["random"].ci_high
    assert recs["model - random"].ci_low > 0.2  # the paired difference excludes 0
    rp = held_out_aucs("race", race.codes[held], {"model": logistic_probe(x, race.codes, ~held, held)}, race.classes,
                       n_boot=500)
    macro = next(r for r in rp if r.group == "__macro__")
    assert macro.ci_low < 0.5 < macro.ci_high


def test_holdout_keeps_patients_on_one_side() -> None:
    df = _frame(200)
    held = holdout_split(200, df["label"].to_numpy(), 0.3, 0, df["patient_id"].to_numpy())
    by_patient = pd.Series(held).groupby(df["patient_id"]).nunique()
    assert (by_patient == 1).all()
    assert 0.2 < held.mean() < 0.4


def test_multitask_head_reports_each_task() -> None:
    df = _frame(400)
    x = df[[f"emb_{j}" for j in range(8)]].to_numpy()
    targets = [make_target("label", df["label"], what="label"), make_target("sex", df["sex"]),
               make_target("race", df["race"])]
    held = holdout_split(400, df["label"].to_numpy(), 0.3, 0)
    recs = multitask_head(x, targets, ~held, held, n_boot=200)
    got = {(r.target, r.group): r.value for r in recs}
    assert set(got) == {("label", "1"), ("sex", "M"), ("race", "A"), ("race", "B"), ("race", "W"),
                        ("race", "__macro__")}
    assert got[("label", "1")] > 0.75 and got[("sex", "M")] > 0.8 and got[("race", "__macro__")] < 0.65


def test_inspect_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "emb.csv"
    _frame(160).to_csv(src, index=False)
    rc, out, err = _run(capsys, "inspect", "--embeddings", str(src), "--attribute", "sex,race", "--n-boot", "100",
                        "--out", str(tmp_path / "o"), "--out-table", str(tmp_path / "t.csv"), "--modes", "2")
    assert rc == 0, err
    doc = json.loads((tmp_path / "o" / "inspect.json").read_text())
    assert doc["kind"] == "inspect" and doc["ks"]["correction"] == "by" and doc["ks"]["per"] == "family"
    assert doc["ks"]["n_tests"] == 2 * (1 + 1 + 3)  # 2 modes x (label pair + sex pair + 3 race pairs)
    assert len(doc["modes"]["explained_variance_ratio"]) == 2
    table = pd.read_csv(tmp_path / "t.csv")
    ks = table[table.analysis == "ks"]
    assert len(ks) == 10 and ks["p_adjusted"].ge(ks["p_value"]).all()
    assert set(table.analysis) == {"split_auc", "multitask_auc", "pca_explained_variance", "ks"}
    figs = {Path(f).name for f in doc["figures"]}
    assert {"pca-1+2-sex.png", "pca-1+2-race.png", "pca-1+2-label.png", "tsne-sex.png", "split-auc.png",
            "pca-explained-variance.png"} <= figs
    assert all((tmp_path / "o" / f).stat().st_size > 1000 for f in doc["figures"])
    assert "SPLIT" in out and "KS tests per mode" in out


def test_inspect_reads_a_list_column_without_extension(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    df = _frame(120)
    cols = [f"emb_{j}" for j in range(8)]
    lst = pd.DataFrame({"embedding": [list(r) for r in df[cols].to_numpy()], "label": df["label"], "sex": df["sex"]})
    src = tmp_path / "embeddings"
    lst.to_parquet(src)
    rc, _, err = _run(capsys, "inspect", "--embeddings", str(src), "--n-boot", "0", "--no-tsne",
                      "--out", str(tmp_path / "o"), "--json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "o" / "inspect.json").read_text())
    assert doc["attributes"] == {"sex": ["F", "M"]}
    sex = next(r for r in doc["split_probe"] if r["target"] == "sex")
    assert sex["value"] > 0.8 and sex["ci_low"] is None  # no bootstrap asked


@pytest.mark.parametrize("case, message", [
    ("nan", "NaN or infinite (first at row 3, column 'emb_2')"),
    ("one_class", "label column 'label' has 1 distinct value"),
    ("one_group", "attribute column 'sex' has 1 distinct value"),
    ("rows", "row counts differ"),
    ("ragged", "rows of different lengths"),
    ("pair", "--label-pair names unknown class(es) ['7']"),
])
def test_inspect_bad_inputs_fail_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, case: str,
                                            message: str) -> None:
    df = _frame(60)
    extra: list[str] = []
    if case == "nan":
        df.loc[3, "emb_2"] = np.nan
    elif case == "one_class":
        df["label"] = 1
    elif case == "one_group":
        df["sex"] = "F"
    elif case == "rows":
        meta = tmp_path / "meta.csv"
        df[["label", "sex"]].iloc[:50].to_csv(meta, index=False)
        extra = ["--metadata", str(meta)]
    elif case == "pair":
        extra = ["--label-pair", "0:7"]
    elif case == "ragged":
        df = pd.DataFrame({"embedding": [[1.0, 2.0]] * 30 + [[1.0]] * 30, "label": df["label"], "sex": df["sex"]})
    src = tmp_path / ("e.parquet" if case == "ragged" else "e.csv")
    df.to_parquet(src) if case == "ragged" else df.to_csv(src, index=False)
    rc, out, err = _run(capsys, "inspect", "--embeddings", str(src), "--attribute", "sex", "--n-boot", "0",
                        "--no-tsne", "--out", str(tmp_path / "o"), *extra)
    assert rc == 2
    assert message in err and err.startswith("benchmark: error:") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()  # failed before any work was written


def test_inspect_model_features_with_baselines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--model/--dataset: linear-probe features through the feature cache, the random-weight baseline paired
    with the model, and an ImageNet baseline that says it was not computed when its weights are absent."""
    cache = tmp_path / "cache"
    rc, out, err = _run(capsys, "inspect", "--model", "moco-cxr", "--weights", "random", "--dataset",
                        "synth-contrast", "--dataset-option", "n=40", "--attribute", "sex", "--device", "cpu",
                        "--cache-dir", str(cache), "--n-boot", "50", "--no-tsne",
                        "--imagenet-model", "imagenet-vit-b16",
                        "--out", str(tmp_path / "o"), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    feats = doc["inputs"]["features"]
    assert set(feats) == {"train", "val", "test"} and not feats["test"]["from_cache"]
    assert any(cache.joinpath("moco-cxr").iterdir())  # the cache `benchmark run` reads
    assert doc["inputs"]["baselines"]["random"]["weights"] == "random:seed=0"
    imagenet = doc["inputs"]["baselines"]["imagenet"]
    assert imagenet["computed"] is False and "imagenet-vit-b16" in imagenet["reason"]
    assert any("ImageNet baseline NOT computed" in n for n in doc["notes"])
    rows = {(r["features"], r["group"]): r for r in doc["split_probe"]}
    assert set(rows) == {("model", "male"), ("random", "male"), ("model - random", "male")}
    # model and baseline are the same random network here: identical AUCs, a zero paired difference
    assert rows[("model", "male")]["value"] == rows[("random", "male")]["value"]
    assert rows[("model - random", "male")]["value"] == 0.0
    assert doc["split"] == {"n_fit": 28, "n_holdout": 12}


def test_inspect_unknown_baseline_is_refused_before_any_encode(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                               tiny_feature_cache: Path) -> None:
    """A typo in --baselines fails in one line before features are extracted; `none` runs without baselines
    (on the session's feature cache: what it reports does not depend on where the features come from)."""
    cache = tmp_path / "cache"
    common = ["inspect", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-contrast",
              "--dataset-option", "n=40", "--attribute", "sex", "--device", "cpu", "--n-boot", "0", "--no-tsne"]
    rc, out, err = _run(capsys, *common, "--cache-dir", str(cache), "--baselines", "random,imagnet",
                        "--out", str(tmp_path / "bad"))
    assert rc == 2 and err == ("benchmark: error: --baselines imagnet: choose from random, imagenet "
                               "(comma-separated), or none\n")
    assert not cache.exists() and not (tmp_path / "bad").exists()
    rc, out, err = _run(capsys, *common, "--cache-dir", str(tiny_feature_cache), "--baselines", "none",
                        "--out", str(tmp_path / "o"), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["inputs"]["baselines"] == {} and {r["features"] for r in doc["split_probe"]} == {"model"}
