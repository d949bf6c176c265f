"""`--margin` beyond evaluate: on `run` (into the run identity and every seed's two-group differences), on `compare`
(the paired difference from ERM: equivalent within ±m, or inconclusive with what the paired t-test could detect),
in study files and board suites. Hand-computed values and simulations against a known truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t

from fairmedbench.benchmark.compare import paired_power
from fairmedbench.cli import main
from fairmedbench.metrics.result import equivalent_within
from fairmedbench.report.verdicts import versus_erm

# ------------------------------------------------------------------------------------------- compare: the rule


def test_paired_power_by_hand() -> None:
    # differences 0.01, 0.03, 0.02: mean 0.02, sd 0.01, se 0.01/sqrt(3); t_0.95,2 = 2.919986,
    # t_0.975,2 = 4.302653, t_0.8,2 = 1.060660
    out = paired_power(np.array([0.01, 0.03, 0.02]))
    se = 0.01 / np.sqrt(3)
    assert out["tost_interval"] == pytest.approx([0.02 - 2.919986 * se, 0.02 + 2.919986 * se], abs=1e-6)
    assert out["mde"] == pytest.approx((4.302653 + 1.060660) * se, abs=1e-6)
    assert paired_power(np.array([0.02, 0.02, 0.02])) == {} and paired_power(np.array([0.1])) == {}


def _row(**kw: object) -> dict:
    return {"dataset": "d", "method": "groupdro", "metric": "auc_gap", "mean_diff": 0.01, "ci_low": -0.03,
            "ci_high": 0.05, "paired_p": 0.4, "tost_interval": [-0.02, 0.04], "mde": 0.061, **kw}


def test_versus_erm_says_equivalent_or_what_it_could_have_detected() -> None:
    same = versus_erm(_row(margin=0.05), n_seeds=5)
    assert same.key == "equivalent" and same.short == "equivalent within the margin (p = 0.4)"
    assert "equivalent to ERM on ΔAUC within ±0.05" in same.sentence and "[-0.020, +0.040]" in same.sentence
    # the 90% interval reaches past the margin: inconclusive, with the paired test's detectable difference
    wide = versus_erm(_row(margin=0.03), n_seeds=5)
    assert wide.key == "no-difference"
    assert ("no evidence either way: the paired t-test over seeds could only detect differences ≥ 0.061; not shown "
            "equivalent within ±0.03") in wide.sentence
    # the test-set bootstrap must lie inside the margin too, where compare ran it
    boot = {"value": 0.01, "ci_low": -0.06, "ci_high": 0.07}
    assert versus_erm(_row(margin=0.05), n_seeds=5, boot=boot).key == "no-difference"
    assert versus_erm(_row(margin=0.1), n_seeds=5, boot=boot).key == "equivalent"
    # no margin: inconclusive, with the detectable difference; a change beyond chance stays a change
    assert "could only detect differences ≥ 0.061" in versus_erm(_row(), n_seeds=5).sentence
    assert versus_erm(_row(paired_p=0.01, ci_low=0.005, ci_high=0.02, margin=0.05), n_seeds=5).key == "worse"


def test_paired_mde_and_tost_hold_their_rates_by_simulation() -> None:
    """5 units, sd 0.02: with the true mean difference at the paired MDE (from the true sd) the t-test detects it in
    70-90% of 2,000 replicates, with none in <= 6%; at a true difference equal to the margin 'equivalent' is said in
    <= 5%, and with none and 20 units in >= 80%."""
    rng = np.random.default_rng(0)
    sd, n = 0.02, 5
    true_mde = (t.ppf(0.975, n - 1) + t.ppf(0.8, n - 1)) * sd / np.sqrt(n)

    def verdicts(effect: float, units: int, margin: float | None = None) -> list[str]:
        keys = []
        for _ in range(2000):
            d = rng.normal(effect, sd, units)
            p = float(2 * t.sf(abs(d.mean()) / (d.std(ddof=1) / np.sqrt(units)), units - 1))
            row = {"method": "m", "metric": "auc", "mean_diff": float(d.mean()), "paired_p": p, **paired_power(d),
                   **({"margin": margin} if margin else {})}
            keys.append(versus_erm(row, units).key)
        return keys

    detected = np.mean([k != "no-difference" for k in verdicts(true_mde, n)])
    false_alarm = np.mean([k != "no-difference" for k in verdicts(0.0, n)])
    assert 0.70 <= detected <= 0.90 and false_alarm <= 0.06, (detected, false_alarm)
    at_margin = np.mean([k == "equivalent" for k in verdicts(0.02, n, margin=0.02)])
    none = np.mean([k == "equivalent" for k in verdicts(0.0, 20, margin=0.02)])
    assert at_margin <= 0.05 and none >= 0.80, (at_margin, none)


# ----------------------------------------------------------------------------------------------------------- run

RUN = ["run", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-control", "--dataset-option",
       "n=80", "--attribute", "sex", "--usage", "lp", "--n-boot", "100", "--n-perm", "100", "--device", "cpu"]


def test_run_margin_reaches_every_seed_and_the_answer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pack = tmp_path / "pack"
    assert main([*RUN, "--margin", "auc=0.9", "--out", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"),
                 "--evidence", str(pack), "--report"]) == 0
    out = capsys.readouterr().out
    (run_dir,) = (tmp_path / "r" / "runs").glob("*/*/*/*")
    assert json.loads((run_dir / "config.json").read_text())["margins"] == {"auc": 0.9}
    doc = json.loads((run_dir / "seed0.json").read_text())
    test = next(r for r in doc["result"]["reports"] if r["attribute"] == "sex")["tests"]["auc_diff"]
    lo, hi = test["tost_interval"]
    assert test["margin"] == 0.9 and test["equivalent"] == (-0.9 < lo and hi < 0.9) == equivalent_within(test, 0.9)
    words = ("AUC difference male − female equivalent within ±0.9" if test["equivalent"] and test["p_adjusted"] >= 0.05
             else "not shown equivalent")
    assert words in out and words in (pack / "summary.md").read_text()
    assert words in (run_dir / "report.html").read_text()
    # the margin names the difference's metric: the other differences keep no margin
    assert all("margin" not in v for k, v in next(r for r in doc["result"]["reports"])["tests"].items()
               if k != "auc_diff")


def test_a_bad_margin_exits_2_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([*RUN, "--margin", "auc=-1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--margin auc=-1" in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------------------- compare

def test_compare_margin_reaches_every_run_and_each_difference_from_erm(tmp_path: Path) -> None:
    from rich.console import Console

    from fairmedbench.benchmark.compare import compare
    from fairmedbench.benchmark.run import RunOptions
    from fairmedbench.errors import InputError
    from fairmedbench.report.terminal import render_compare

    opts = RunOptions(out_root=str(tmp_path / "r"), cache_dir=str(tmp_path / "c"), device="cpu")
    args = ("imagenet-resnet50", ["synth-control"], "sex", "lp", ["resampling"], (0, 1, 2), opts)
    kw = {"weights": "random", "n_boot": 20, "dataset_options": {"n": 60}, "hparams": {"epochs": 3}}
    with pytest.raises(InputError, match="--margin 0.05,x"):
        compare(*args, margin="0.05,x", **kw)  # type: ignore[arg-type]
    assert not (tmp_path / "r").exists()
    out = compare(*args, margin="auc_gap=0.3,0.2", **kw)  # type: ignore[arg-type]
    assert all(r.config.margins == {"auc_gap": 0.3, "*": 0.2} for r in out.runs.values())
    assert out.to_dict()["margins"] == {"auc_gap": 0.3, "*": 0.2}
    for row in out.versus_erm:
        a = np.array(out.values[("synth-control", row["method"], row["metric"])])
        b = np.array(out.values[("synth-control", "erm", row["metric"])])
        assert row["margin"] == (0.3 if row["metric"] == "auc_gap" else 0.2)
        power = paired_power(a - b)
        assert row.get("mde") == power.get("mde") and row.get("tost_interval") == power.get("tost_interval")
        verdict = row["verdict"]
        if verdict["key"] == "equivalent":
            lo, hi = row["tost_interval"]
            assert -row["margin"] < lo and hi < row["margin"]
        elif verdict["key"] == "no-difference":
            assert f"not shown equivalent within ±{row['margin']:g}" in verdict["sentence"]
    console = Console(record=True, width=2000)  # no wrapping: each answer on one line
    render_compare(out.to_dict(), console)
    text = console.export_text()
    assert any(row["verdict"]["key"] == "equivalent" for row in out.versus_erm)  # at these margins, on these seeds
    for row in out.versus_erm:  # an equivalence is said in the table and in the answer
        if row["verdict"]["key"] == "equivalent":
            assert row["verdict"]["sentence"].split(" (")[0] in text
    assert "equivalent within the margin" in text


def test_compare_headline_says_what_the_paired_tests_could_detect() -> None:
    from fairmedbench.report.verdicts import compare_headline

    rows = [_row(method=m, metric="auc", mde=d) for m, d in (("a", 0.061), ("b", 0.09))]
    doc = {"datasets": ["d"], "table": [{"dataset": "d", "method": m, "n_seeds": 5} for m in ("erm", "a", "b")],
           "versus_erm": rows}
    (line,) = compare_headline(doc)
    assert line == ("d: no mitigation changed AUC against ERM beyond chance (p ≥ 0.4 for all 2); no evidence either "
                    "way: the paired t-test could only detect differences ≥ 0.061 to 0.090.")


# --------------------------------------------------------------------------------------------------------- cards

def test_a_cards_margins_apply_when_the_run_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from fairmedbench.benchmark.resolve import resolve_run
    from fairmedbench.registry.datasets import DATASETS, get_card
    from fairmedbench.spec import RunSpec

    base = get_card("synth-control")
    card = replace(base, margins={"auc": 0.03})
    monkeypatch.setattr(DATASETS, "get", lambda name: card if name == "synth-control" else base)
    kw = dict(model="imagenet-resnet50", dataset="synth-control", weights="random", dataset_options={"n": 24})
    assert resolve_run(RunSpec(**kw), device="cpu").config.margins == {"auc": 0.03}  # type: ignore[arg-type]
    given = resolve_run(RunSpec(**kw, margin="0.1"), device="cpu").config  # type: ignore[arg-type]
    assert given.margins == {"*": 0.1}  # --margin replaces the card's
    assert card.to_dict()["margins"] == {"auc": 0.03}
    with pytest.raises(ValueError, match="each margin is a number in"):
        replace(base, margins={"auc": 2.0})
