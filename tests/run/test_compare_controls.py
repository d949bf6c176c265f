"""`benchmark compare` and `benchmark controls` on cheap random-weight features."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairmedbench.benchmark.compare import compare
from fairmedbench.benchmark.controls import _verdict, run_controls
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.cli import main
from fairmedbench.errors import InputError


def _opts(tmp: Path) -> RunOptions:
    return RunOptions(out_root=str(tmp / "r"), cache_dir=str(tmp / "c"), device="cpu")


def test_compare_same_seeds_paired_against_erm(tmp_path: Path) -> None:
    # random:1 weights: seed 0's ResNet-18 gives groupdro two near-equal per-seed differences (a degenerate t-test)
    out = compare("moco-cxr", ["synth-underrep"], "sex", "lp", ["groupdro", "resampling"], (0, 1),
                  _opts(tmp_path), weights="random:1", n_boot=20, dataset_options={"n": 40}, hparams={"epochs": 10})
    assert out.methods == ["erm", "groupdro", "resampling"]
    splits = {r.seed_docs[0]["inputs"]["dataset"]["split_fingerprint"] for r in out.runs.values()}
    assert len(splits) == 1  # one harness: the same split for every method
    feats = [r.seed_docs[0]["usage"]["features"]["train"]["key"] for r in out.runs.values()]
    assert len(set(feats)) == 1  # and the same cached features
    assert [r.seed_docs[0]["spec"]["seed"] for r in out.runs.values()] == [0, 0, 0]
    rows = [v for v in out.versus_erm if v["metric"] == "worst_group_auc"]
    assert {r["method"] for r in rows} == {"groupdro", "resampling"}
    erm = out.values[("synth-underrep", "erm", "worst_group_auc")]
    dro = out.values[("synth-underrep", "groupdro", "worst_group_auc")]
    diff = next(r for r in rows if r["method"] == "groupdro")["mean_diff"]
    assert diff == pytest.approx(sum(d - e for d, e in zip(dro, erm)) / 2)
    # the verdict's p is scipy's paired t-test over seeds (the test of the shown t interval), one verdict per row
    from scipy import stats

    row = next(r for r in rows if r["method"] == "groupdro")
    d = [a - b for a, b in zip(dro, erm)]
    if max(d) > min(d):
        assert row["paired_p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)
    else:
        assert row["paired_p"] is None
    assert "significant" not in row
    assert row["verdict"]["evidence"] == "paired t-test over 2 seeds and the paired test-set bootstrap"
    assert row["verdict"]["key"] in ("better", "worse", "no-difference")
    # the paired test-set bootstrap starts from the same per-seed values the engine reported
    boot = out.test_bootstrap["synth-underrep"]
    assert boot["groups"] == ["female", "male"]
    for m in out.methods:
        entry = boot["methods"][m]
        vals = out.values[("synth-underrep", m, "auc_diff")]
        assert entry["auc_diff"]["value"] == pytest.approx(sum(vals) / 2)
        runs = out.values[("synth-underrep", m, "worst_group_auc")]
        assert entry["worst_group_auc"]["value"] == pytest.approx(sum(runs) / 2)
        lo, hi = entry["auc_diff"]["ci_low"], entry["auc_diff"]["ci_high"]
        assert lo <= entry["auc_diff"]["value"] <= hi and entry["auc_diff"]["excludes_0"] == (lo > 0 or hi < 0)
    assert "worst_group_auc_vs_erm" not in boot["methods"]["erm"]
    vs = boot["methods"]["groupdro"]["worst_group_auc_vs_erm"]
    assert vs["value"] == pytest.approx(diff)
    json.dumps(out.to_dict(), allow_nan=False)


@pytest.mark.parametrize("kw, needle", [
    ({"methods": ["erm", "magic"]}, "unknown mitigation"),
    ({"seeds": (0,)}, "at least two seeds"),
    ({"usage": "sam-prompt"}, "usage 'sam-prompt' cannot run here"),
])
def test_compare_bad_input(tmp_path: Path, kw: dict, needle: str) -> None:
    args = {"methods": ["erm"], "seeds": (0, 1), "usage": "lp", **kw}
    with pytest.raises(InputError, match=needle):
        compare("moco-cxr", ["synth-control"], "sex", args["usage"], args["methods"], args["seeds"],
                _opts(tmp_path), weights="random")


def test_compare_refuses_datasets_of_different_tasks_before_any_run(tmp_path: Path) -> None:
    """A binary and a multi-class dataset in one call: one clear error naming each dataset's task, no run folder."""
    with pytest.raises(InputError, match=r"different tasks: synth-contrast \(classification\), synth-ordinal "
                                         r"\(multiclass\)"):
        compare("moco-cxr", ["synth-contrast", "synth-ordinal"], "sex", "lp", ["groupdro"], (0, 1),
                _opts(tmp_path), weights="random")
    assert not (tmp_path / "r").exists() and not (tmp_path / "c").exists()


def test_compare_refuses_a_missing_attribute_and_an_empty_validation_split(tmp_path: Path) -> None:
    from fairmedbench.registry.datasets import load_dataset

    args = ("moco-cxr", ["synth-control"])
    with pytest.raises(InputError, match="has no attribute 'ethnicity'"):
        compare(*args, "ethnicity", "lp", ["groupdro"], (0, 1), _opts(tmp_path), weights="random",
                dataset_options={"n": 40})
    split = load_dataset("synth-control", n=40).split().to_dict()
    split["ids"]["train"] += split["ids"]["val"]
    split["ids"]["val"] = []
    split.pop("fingerprint")
    path = tmp_path / "noval.json"
    path.write_text(json.dumps(split))
    with pytest.raises(InputError, match="empty val"):
        compare(*args, "sex", "lp", ["groupdro"], (0, 1), _opts(tmp_path), weights="random", dataset_options={"n": 40},
                split_file=str(path),
                select="worst_group_auc")


def test_compare_cli_table_and_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = main(["compare", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-control",
               "--dataset-option", "n=40", "--attribute", "sex", "--mitigations", "erm,resampling", "--seeds", "0,1",
               "--n-boot", "10", "--hparam", "epochs=5", "--out", str(tmp_path / "r"), "--cache-dir",
               str(tmp_path / "c"), "--device", "cpu", "--report", "--select", "worst_group_auc"])
    text = capsys.readouterr().out
    assert rc == 0 and "against ERM" in text and "[t 95% CI]" in text
    assert list((tmp_path / "r" / "compare").glob("*.html"))


def test_control_verdicts() -> None:
    # the verdict reads the permutation test (p < 0.05) and the sign; the CI is shown, not judged
    order = ("female", "male")  # differences are male - female
    lower_f = {"direction": "lower", "group": "female"}
    assert _verdict(lower_f, (0.3, 0.1, 0.5), order, 0.001)[1]
    assert not _verdict(lower_f, (0.3, 0.1, 0.5), order, 0.2)[1]  # a CI excluding 0 is not the test
    assert not _verdict({"direction": "lower", "group": "male"}, (0.3, 0.1, 0.5), order, 0.001)[1]
    assert _verdict({"direction": "lower", "group": "male"}, (-0.3, -0.5, -0.1), order, 0.001)[1]
    assert _verdict({"direction": "none"}, (0.01, -0.1, 0.1), order, 0.6)[1]
    assert not _verdict({"direction": "none"}, (0.2, 0.1, 0.3), order, 0.01)[1]
    assert not _verdict({"direction": "none"}, (None, None, None), order, None)[1]
    assert _verdict({"direction": "none"}, (0.01, -0.1, 0.1), order, float("nan"))[0] == "undefined"


def test_controls_run_every_dataset_and_usage(tmp_path: Path) -> None:
    out = run_controls("moco-cxr", ("synth-contrast", "synth-control"), ("lp",), _opts(tmp_path),
                       weights="random", dataset_options={"n": 40}, n_boot=20)
    assert [(c.dataset, c.usage, c.metric) for c in out.checks] == [("synth-contrast", "lp", "auc"),
                                                                    ("synth-control", "lp", "auc")]
    assert all(c.order == ("female", "male") for c in out.checks)
    # each check carries what its test could have found (the control's "no disparity" is bounded by it)
    assert all(c.mde is not None and c.mde > 0 for c in out.checks)
    from rich.console import Console

    from fairmedbench.report.terminal import render_controls

    console = Console(record=True, width=200)
    render_controls(out, console)
    text = console.export_text()
    assert "detectable" in text and f"≥ {out.checks[1].mde:.3f}" in text
