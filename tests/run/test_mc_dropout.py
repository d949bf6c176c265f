"""MC dropout in `benchmark run` (--mc-samples) and `benchmark evaluate --uncertainty` on its predictions:
the same δ from both, the file convention, and the refusals before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.analysis.uncertainty import MEASURES, binary_as_classes, uncertainty_measures
from fairmedbench.benchmark.resolve import check_spec
from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.benchmark.uncertainty import evaluate_uncertainty
from fairmedbench.cli import build_parser, main, run_spec
from fairmedbench.errors import InputError
from fairmedbench.spec import RunSpec

T = 6


def _spec(**kw) -> RunSpec:
    base = dict(model="moco-cxr", weights="random", dataset="synth-contrast", usage="lp", seeds=(0,),
                n_boot=0, dataset_options={"n": 120}, hparams={"epochs": 15, "dropout": 0.3, "mc_samples": T})
    base.update(kw)
    return RunSpec(**base)


@pytest.fixture(scope="module")
def mc_run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("mc")
    out = run(_spec(), RunOptions(out_root=str(tmp / "results"), cache_dir=str(tmp / "cache"), device="cpu"))
    return tmp, out


def test_run_keeps_the_passes_and_their_measures(mc_run) -> None:
    _, out = mc_run
    doc = out.seed_docs[0]
    frame = pd.read_parquet(out.out_dir / doc["predictions"]["file"])
    task = doc["predictions"]["tasks"][0]
    passes = frame[[f"mc:{t}:{task}" for t in range(T)]].to_numpy().T  # (T, n)
    assert passes.std(axis=0).max() > 0  # dropout sampled: the passes differ
    # the score is the passes' mean; the unc: columns are the measures of those passes
    np.testing.assert_allclose(frame[f"score:{task}"], passes.mean(axis=0), rtol=1e-12)
    want = uncertainty_measures(binary_as_classes(passes))
    for m in MEASURES:
        np.testing.assert_allclose(frame[f"unc:{m}"], want[m], rtol=1e-12)
    block = doc["uncertainty"][task]
    assert block["mc_samples"] == T and block["n_cases"] == int((frame["split"] == "test").sum())
    assert block["level"] == "image level: every patient has one image"
    curve = block["curves"]["sex"]["entropy"]
    assert curve["retention"][0] == 1.0 and curve["retention"][-1] == 0.5 and len(curve["retention"]) == 11
    assert curve["pm"] == "auc" and set(curve["groups"]) == {"female", "male"}
    assert curve["n_kept"][0] == block["n_cases"]


def test_evaluate_gives_the_runs_delta(mc_run) -> None:
    """The acceptance: δ from `run --mc-samples` equals `evaluate --uncertainty` on the saved predictions,
    from the MC columns (a measure) and from the unc: column the run wrote."""
    _, out = mc_run
    doc = out.seed_docs[0]
    task = doc["predictions"]["tasks"][0]
    path = out.out_dir / doc["predictions"]["file"]
    for m in MEASURES:
        want = doc["uncertainty"][task]["delta"]
        for source in (m, f"unc:{m}"):
            got = evaluate_uncertainty(path, source)["delta"]
            for attr in want:
                assert got[attr][source] == pytest.approx(want[attr][m], abs=1e-12), (m, source, attr)


def test_cli_evaluate_uncertainty_json_and_table(mc_run, capsys: pytest.CaptureFixture) -> None:
    tmp, out = mc_run
    path = out.out_dir / out.seed_docs[0]["predictions"]["file"]
    table = tmp / "curves.csv"
    assert main(["evaluate", "--predictions", str(path), "--uncertainty", "variance", "--json",
                 "--retention-step", "0.25", "--out-table", str(table)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["curves"]["sex"]["variance"]["retention"] == [1.0, 0.75, 0.5]
    rows = pd.read_csv(table)
    assert set(rows["group"]) >= {"female", "male"} and set(rows["retention"]) == {1.0, 0.75, 0.5}


def test_cli_evaluate_uncertainty_terminal_table_has_a_row_per_level(mc_run, capsys: pytest.CaptureFixture) -> None:
    """The terminal shows one row per retention level and a column per group, so it fits 80 columns."""
    tmp, out = mc_run
    path = out.out_dir / out.seed_docs[0]["predictions"]["file"]
    assert main(["evaluate", "--predictions", str(path), "--uncertainty", "variance", "--retention-step", "0.25"]) == 0
    text = capsys.readouterr().out
    assert "sex / variance: δ = " in text
    sex = text[text.index("sex / variance"):]  # the first table after the sex line (other attributes follow)
    lines = sex.splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    assert "retained" in header and "female" in header and "male" in header
    rows = [line for line in lines if line.startswith("│")][:3]
    assert [r.split("│")[1].strip() for r in rows] == ["100%", "75%", "50%"]
    assert all("…" not in line for line in text.splitlines())


@pytest.fixture(scope="module")
def ordinal_run(tmp_path_factory: pytest.TempPathFactory):
    """synth-ordinal (grades 0..3, weaker grade signal for females) through lp with MC dropout."""
    tmp = tmp_path_factory.mktemp("mc-ordinal")
    spec = _spec(model="moco-cxr", dataset="synth-ordinal", attributes=("sex",))
    out = run(spec, RunOptions(out_root=str(tmp / "results"), cache_dir=str(tmp / "cache"), device="cpu"))
    return tmp, out


def test_ordinal_run_and_evaluate_give_one_delta(ordinal_run) -> None:
    """The acceptance on the ordinal preset: per-group rejection curves (linear kappa) and δ from
    `run --mc-samples`, and the same δ from `evaluate --uncertainty` on the saved predictions."""
    _, out = ordinal_run
    doc = out.seed_docs[0]
    assert out.config.task == "multiclass"
    block = doc["uncertainty"]["label"]
    curve = block["curves"]["sex"]["entropy"]
    assert curve["pm"] == "kappa" and set(curve["groups"]) == {"female", "male"} and len(curve["retention"]) == 11
    path = out.out_dir / doc["predictions"]["file"]
    frame = pd.read_parquet(path)
    test = frame[frame["split"] == "test"]
    mc = np.stack([test[[f"mc:{t}:grade{c}" for c in range(4)]].to_numpy() for t in range(T)])  # (T, n, 4)
    np.testing.assert_allclose(mc.sum(axis=2), 1.0, atol=1e-9)
    np.testing.assert_allclose(test[[f"score:grade{c}" for c in range(4)]], mc.mean(axis=0), rtol=1e-12)
    for m in MEASURES:
        want = block["delta"]["sex"][m]
        assert want is not None
        for source in (m, f"unc:{m}"):
            assert evaluate_uncertainty(path, source)["delta"]["sex"][source] == pytest.approx(want, abs=1e-12)


def test_mc_samples_flag_is_the_hparam() -> None:
    run_parser = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    base = ["--model", "imagenet-resnet50", "--dataset", "synth-contrast", "--usage", "lp", "--hparam", "dropout=0.2"]
    a = run_spec(run_parser.parse_args([*base, "--mc-samples", "4", "--hparam", "lr=0.01"]))
    b = run_spec(run_parser.parse_args([*base, "--hparam", "mc_samples=4", "--hparam", "lr=0.01"]))
    assert a.hparams == b.hparams == {"dropout": 0.2, "mc_samples": 4, "lr": 0.01}


@pytest.mark.parametrize("kw, needle", [
    (dict(usage="clip-zs", model="clip-vit-b16", hparams={"mc_samples": 5}), "has no dropout layer to sample"),
    (dict(hparams={"mc_samples": 5}), "has dropout 0"),
    (dict(hparams={"mc_samples": 1, "dropout": 0.2}), "T >= 2"),
    (dict(hparams={"dropout": 1.0}), "must be in \\[0, 1\\)"),
])
def test_mc_refusals_before_any_work(kw: dict, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        check_spec(_spec(**kw))  # cards and registries only: no data, no model


def test_cli_refuses_mc_samples_on_sam_prompt(capsys: pytest.CaptureFixture) -> None:
    code = main(["run", "--model", "litemedsam", "--weights", "random", "--dataset", "synth-contrast",
                 "--usage", "sam-prompt", "--mc-samples", "5"])
    assert code == 2 and "has no dropout layer to sample" in capsys.readouterr().err


def test_evaluate_uncertainty_bad_input(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 40
    frame = pd.DataFrame({"label:y": rng.integers(0, 2, n), "score:y": rng.uniform(size=n),
                          "attr:sex": ["F"] * 20 + ["M"] * 20, "unc": rng.uniform(size=n)})
    frame.loc[3, "unc"] = np.nan
    path = tmp_path / "p.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(InputError, match="1 of 40 analysed rows are NaN"):
        evaluate_uncertainty(path, "unc")
    with pytest.raises(InputError, match="needs MC-dropout columns"):
        evaluate_uncertainty(path, "entropy")
    with pytest.raises(InputError, match="neither a column"):
        evaluate_uncertainty(path, "margin")
    frame.loc[3, "unc"] = 0.5
    frame.loc[0:16, "attr:sex"] = "M"  # F keeps 3 cases: fewer than 10 at every level -> a note, no crash
    frame.to_csv(path, index=False)
    doc = evaluate_uncertainty(path, "unc", pm="accuracy")
    assert any("'F' has fewer than 10 kept cases" in n for n in doc["curves"]["sex"]["unc"]["notes"])
