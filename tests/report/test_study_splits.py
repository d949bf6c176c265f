"""A study that sweeps `split_seeds`, swept and reported through the CLI: the study table carries, per configuration,
the interval across split seeds (a t interval over the split seeds' values) beside each split's test-set
bootstrap interval, and the page shows both and answers how much the numbers move with the split."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fairmedbench.cli import main
from fairmedbench.metrics.stats import seed_summary
from fairmedbench.report.study import ACROSS_SPLITS, with_across_splits

STUDY = """\
name: splits-mini
models: [moco-cxr]
datasets: [synth-contrast]
attributes: [sex]
usages: [lp]
seeds: [0, 1]
hparams: {epochs: 3}
weights: random
n_boot: 50
n_perm: 0
dataset_options:
  n: 80
  config: {size: 32}
split_seeds: [0, 1, 2]
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("splits-study")
    study = tmp / "splits.yaml"
    study.write_text(STUDY)
    out = tmp / "out"
    assert main(["sweep", str(study), "--out", str(out), "--device", "cpu", "--cache-dir", str(tmp / "cache")]) == 0
    assert main(["study", "report", str(study), "--out", str(out)]) == 0
    folder = out / "studies" / "splits-mini" / "report"
    return {"table": pd.read_parquet(folder / "study.parquet"), "html": folder / "study.html"}


def test_across_split_columns_summarise_each_configuration(report: dict[str, Any]) -> None:
    table = report["table"]
    assert sorted(table["split_seed"].dropna().unique()) == [0, 1, 2] and table["run_id"].nunique() == 3
    gap = table[(table["metric"] == "auc_gap") & (table["scope"] == "between")].sort_values("split_seed")
    assert len(gap) == 3 and (gap["n_splits"] == 3).all()
    s = seed_summary(gap["mean"].to_numpy(), bounds=(0.0, 1.0))
    for col, want in zip(ACROSS_SPLITS[:4], (s.mean, s.std, s.ci_low, s.ci_high)):
        assert gap[col].to_numpy() == pytest.approx(np.full(3, want)), col
    # every split keeps its own test-set bootstrap interval (per training seed) beside the across-split one
    assert all(len(v) == 2 and lo <= hi for v, lo, hi in zip(gap["seed_values"], gap["seed_ci_low"].str[0],
                                                             gap["seed_ci_high"].str[0]))


def test_rows_without_a_split_sweep_get_no_across_split_interval(report: dict[str, Any]) -> None:
    table = report["table"].copy()
    table["split_seed"] = np.where(table["split_seed"] == 0, table["split_seed"], None)  # one split seed left
    one = with_across_splits(table.drop(columns=list(ACROSS_SPLITS)))
    assert one[list(ACROSS_SPLITS)].isna().all().all()


def test_page_shows_both_intervals_and_answers(report: dict[str, Any]) -> None:
    html = report["html"].read_text()
    assert 'id="splits"' in html and "across splits: mean ± std [t 95% CI]" in html
    assert "split 2: mean [1st seed&#39;s bootstrap 95% CI]" in html
    answer = next(line for line in html.splitlines() if "Repeated splits (moco-cxr" in line)
    assert "over 3 split seeds, train/val re-drawn, test fixed; t 95% CI [" in answer
    assert "test-set bootstrap interval is" in answer and not math.isnan(float(answer.split(" wide")[0].split()[-1]))


def test_figures_and_answers_count_a_configuration_once(report: dict[str, Any]) -> None:
    """Figs 2/3, Table 2 and the bias answer take one row per configuration: the three split seeds' runs are folded
    into their across-split value and interval, with every (split, training seed) kept for pairing."""
    from fairmedbench.report.study import one_per_configuration

    table = report["table"]
    folded = one_per_configuration(table)
    gap = folded[(folded["metric"] == "auc_gap") & (folded["scope"] == "between")]
    assert len(gap) == 1
    row = gap.iloc[0]
    assert row["mean"] == pytest.approx(row["across_splits_mean"]) and row["ci_low"] == row["across_splits_ci_low"]
    assert sorted(row["run_seeds"]) == ["0/0", "0/1", "1/0", "1/1", "2/0", "2/1"] and len(row["seed_values"]) == 6
    assert row["n_seeds"] == 6 and len(row["run_id"].split(",")) == 3
    html = report["html"].read_text()
    assert "none of the 1 FM × dataset configuration(s)" in html  # not 3: the split seeds are one configuration
