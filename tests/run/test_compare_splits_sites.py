"""`benchmark compare --split-seeds` (the split is the unit of the paired test) and `--eval-dataset` (each site
compared as <dataset>@<site>), on cheap random-weight features."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fairmedbench.benchmark.compare import compare
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.engine.results import RunResult
from fairmedbench.errors import InputError

ARGS = ("moco-cxr", ["synth-underrep"], "sex", "lp", ["groupdro"], (0, 1))
KW = {"weights": "random", "n_boot": 20, "dataset_options": {"n": 60}, "hparams": {"epochs": 5}}


def _opts(tmp: Path, cache: Path | None = None) -> RunOptions:
    """Results under `tmp`; features cached in `cache` (default `tmp`/c)."""
    return RunOptions(out_root=str(tmp / "r"), cache_dir=str(cache or tmp / "c"), device="cpu")


@pytest.fixture(scope="module")
def features(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One feature cache for this file's comparisons: they encode the same synth-underrep images."""
    return tmp_path_factory.mktemp("features")


def test_split_seeds_pair_per_split_and_pool_the_test_bootstrap(tmp_path: Path, features: Path, monkeypatch) -> None:
    out = compare(*ARGS, _opts(tmp_path, features), split_seeds=(0, 1, 2), **KW)
    assert out.split_seeds == [0, 1, 2] and out.datasets == ["synth-underrep"]
    per_split = {}
    for m in ("erm", "groupdro"):
        leaves = out.runs[("synth-underrep", m)].split_runs
        assert [leaf.config.split_seeds for leaf in leaves] == [(0,), (1,), (2,)]
        per_split[m] = [[r.value("worst_group_auc", "sex") for r in leaf.seeds] for leaf in leaves]
    # the unit is the split: each split's mean over its two training seeds, differenced against ERM's
    diffs = [np.mean(a) - np.mean(b) for a, b in zip(per_split["groupdro"], per_split["erm"])]
    row = next(r for r in out.versus_erm if r["metric"] == "worst_group_auc")
    assert row["unit"] == "split" and row["n_units"] == 3
    assert row["mean_diff"] == pytest.approx(np.mean(diffs))
    if np.ptp(diffs) > 0:
        assert row["paired_p"] == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue)
    assert row["verdict"]["evidence"] == "paired t-test over 3 splits and the paired test-set bootstrap"
    # the test-set bootstrap pools all 3 x 2 runs on the one test set: its point is the mean over the six
    boot = out.test_bootstrap["synth-underrep"]
    assert boot["n_runs"] == 6
    flat = {m: [v for s in per_split[m] for v in s] for m in per_split}
    assert boot["methods"]["erm"]["worst_group_auc"]["value"] == pytest.approx(np.mean(flat["erm"]))
    vs = boot["methods"]["groupdro"]["worst_group_auc_vs_erm"]
    assert vs["value"] == pytest.approx(np.mean(flat["groupdro"]) - np.mean(flat["erm"]))
    gaps = {m: [r.value("auc_gap", "sex") for leaf in out.runs[("synth-underrep", m)].split_runs for r in leaf.seeds]
            for m in per_split}
    gap_vs = boot["methods"]["groupdro"]["auc_gap_vs_erm"]
    assert gap_vs["value"] == pytest.approx(np.mean(gaps["groupdro"]) - np.mean(gaps["erm"]))
    assert gap_vs["ci_low"] <= gap_vs["value"] <= gap_vs["ci_high"]
    json.dumps(out.to_dict(), allow_nan=False)
    from fairmedbench.report import figures
    from fairmedbench.report.html import write_compare_report

    titles: list[str] = []
    scatter = figures.utility_gap_scatter
    monkeypatch.setattr(figures, "utility_gap_scatter", lambda *a, **k: titles.append(k["title"]) or scatter(*a, **k))
    html = write_compare_report(tmp_path / "page.html", out.to_dict()).read_text()
    assert "against ERM, per method" in html and "t 95% CI over splits" in html
    assert titles and all(t.endswith("(mean, 95% CI over splits)") for t in titles)  # the chart's unit too
    assert "across splits 0, 1, 2" in html


@pytest.mark.parametrize("kw, needle", [
    ({"split_seeds": (0,)}, "at least two"),
    ({"split_seeds": (0, 1), "split_file": "x.json"}, "give one of them"),
])
def test_split_seeds_bad_input_refused_before_any_run(tmp_path: Path, kw: dict, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        compare(*ARGS, _opts(tmp_path), **{**KW, **kw})
    assert not (tmp_path / "r").exists()


def test_eval_dataset_compares_each_site_as_dataset_at_site(tmp_path: Path, features: Path) -> None:
    site = "synth-underrep:n=60:data_seed=7"
    out = compare(*ARGS, _opts(tmp_path, features), eval_datasets=(site,), **KW)
    name = "synth-underrep@synth-underrep:data_seed=7:n=60"
    assert out.datasets == ["synth-underrep", name] and out.sites == {name: "synth-underrep"}
    for m in ("erm", "groupdro"):
        docs = out.runs[("synth-underrep", m)].seed_docs
        # the site's values are the external test set's, from the same trained heads
        want = [RunResult({**d, "result": d["external"][0]["result"]}, Path()).value("worst_group_auc", "sex")
                for d in docs]
        got = out.values[(name, m, "worst_group_auc")]
        assert got == pytest.approx(want)
        assert got != pytest.approx(out.values[("synth-underrep", m, "worst_group_auc")])
    rows = [r for r in out.versus_erm if r["dataset"] == name]
    assert {r["metric"] for r in rows} >= {"worst_group_auc", "auc_gap"}
    assert name in out.test_bootstrap and out.test_bootstrap[name]["n_runs"] == 2
    from fairmedbench.report.verdicts import compare_headline

    assert any(line.startswith(f"{name}: ") for line in compare_headline(out.to_dict()))
