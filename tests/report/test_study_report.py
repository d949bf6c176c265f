"""`write_study_report` on a plan of real small runs (random-weight encoders on the synthetic sets): the tidy
table holds exactly the runs' metrics, the figures and the page exist, the page leads with the answers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.cli import main
from fairmedbench.engine.results import RunResult
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.report.study import CELL_FIELDS, read_plan, write_study_report
from fairmedbench.spec import RunSpec

# two ResNet-18 encoders with different random weights: the cheapest pair of distinct FMs
WEIGHTS = {"c2l": "random", "moco-cxr": "random:1"}
MODELS = tuple(WEIGHTS)
DATASET = "synth-underrep"
# one dataset table for every run, so each model encodes once and every mitigation, share and prevalence reuses it
# (sampling is drawn after feature extraction); half the training split is female so every share can be drawn
DS_OPTIONS = {"n": 60, "config": {"female_share_train": 0.5, "size": 64}}
MITIGATIONS = ("erm", "resampling")
SHARES = (0.0, 0.5, 1.0)
PREVALENCES = (0.2, 0.35, 0.5)  # three: a line with an interval needs three points
SEEDS = (0, 1)


def _cell(model: str, mitigation: str, **kw: Any) -> dict[str, Any]:
    cell = {"model": model, "dataset": DATASET, "usage": "lp", "mitigation": mitigation, "prompt": None,
            "attributes": ["sex", "age"], "seeds": list(SEEDS), "hparams": {"epochs": 5}, "train_group_share": None,
            "share_group": None, "train_size": None, "prevalence": None, "prevalence_on": None}
    cell.update(kw)
    assert set(cell) == set(CELL_FIELDS)
    return cell


def write_plan(out: Path, name: str, entries: list[tuple[dict[str, Any], Any]]) -> Path:
    """A plan.json as `benchmark sweep` writes it: (cell, RunOutcome | None for a skipped/failed cell)."""
    cells = []
    for cell, outcome in entries:
        if outcome is None:
            cells.append({"cell": cell, "run_id": None, "run_dir": None, "encode": None, "status": "skipped",
                          "reason": "clip usages need a vision-language model", "error": None})
        else:
            cells.append({"cell": cell, "run_id": outcome.config.run_id,
                          "run_dir": str(outcome.out_dir.relative_to(out)),
                          "encode": f"{cell['model']}|{cell['dataset']}",
                          "status": "done", "reason": None, "error": None})
    path = out / "studies" / name / "plan.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"study": name, "source": "test", "study_sha256": "0" * 64, "cells": cells}))
    return path


def _run(cell: dict[str, Any], opts: RunOptions) -> Any:
    spec = RunSpec(model=cell["model"], weights=WEIGHTS[cell["model"]], dataset=DATASET, usage="lp",
                   mitigation=cell["mitigation"],
                   seeds=SEEDS, attributes=tuple(cell["attributes"]), n_boot=20, dataset_options=DS_OPTIONS,
                   hparams=cell["hparams"], train_group_share=cell["train_group_share"],
                   share_group=cell["share_group"], prevalence=cell["prevalence"],
                   prevalence_on=cell["prevalence_on"] or "test")
    return run(spec, opts)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("study")
    out = tmp / "results"
    opts = RunOptions(out_root=str(out), cache_dir=str(tmp / "cache"), device="cpu", log=lambda m: None)
    base = [_cell(m, mit) for m in MODELS for mit in MITIGATIONS]
    sweeps = ([_cell("c2l", "erm", attributes=["sex"], train_group_share=s, share_group="female") for s in SHARES]
              + [_cell("c2l", "erm", attributes=["sex"], prevalence=p, prevalence_on="test") for p in PREVALENCES])
    entries = [(c, _run(c, opts)) for c in base + sweeps]
    skipped = (_cell("c2l", "erm", usage="clip-zs"), None)
    plan = write_plan(out, "mini", [*entries, skipped])
    report = write_study_report(plan, out, tmp / "report")
    base_plan = write_plan(out, "base", [*entries[:len(base)], skipped])
    base_report = write_study_report(base_plan, out, tmp / "base-report")
    return {"tmp": tmp, "out": out, "plan": plan, "report": report, "base": base_report,
            "runs": [o for _, o in entries]}


def test_table_rows_equal_the_runs_metrics(study: dict[str, Any]) -> None:
    rep = study["report"]
    table = pd.read_parquet(rep.parquet)
    expected = 0
    for outcome in study["runs"]:
        keys = set()
        for res in outcome.seeds:
            keys |= {(r["task"], r["attribute"], r["metric"], r["group"]) for r in res.fairness().records()}
        expected += len(keys)
        assert (table["run_id"] == outcome.config.run_id).sum() == len(keys)
    assert len(table) == expected and table["run_id"].nunique() == len(study["runs"]) == 10
    assert set(table["scope"]) == {"overall", "group", "between"}
    assert len(pd.read_csv(rep.csv)) == expected


def test_table_values_are_the_seed_mean_with_a_t_interval(study: dict[str, Any]) -> None:
    from scipy import stats as sps

    table = study["report"].table
    outcome = study["runs"][0]
    vals = [RunResult(d, outcome.out_dir).value("auc", "sex") for d in outcome.seed_docs]
    row = table[(table["run_id"] == outcome.config.run_id) & (table["metric"] == "auc")
                & (table["scope"] == "overall")].iloc[0]
    assert row["mean"] == pytest.approx(np.mean(vals)) and row["n_seeds"] == 2
    half = sps.t.ppf(0.975, 1) * np.std(vals, ddof=1) / math.sqrt(2)
    assert row["ci_low"] == pytest.approx(max(0.0, np.mean(vals) - half))
    assert row["ci_high"] == pytest.approx(min(1.0, np.mean(vals) + half))
    assert list(row["seed_values"]) == pytest.approx(vals) and list(row["run_seeds"]) == [0, 1]
    female = table[(table["run_id"] == outcome.config.run_id) & (table["metric"] == "auc")
                   & (table["group"] == "female")].iloc[0]
    assert female["scope"] == "group" and female["model_kind"] == "vision" and female["model"] == "c2l"
    assert (female["mitigation"], female["dataset"], female["attributes"]) == ("erm", "synth-underrep", "sex,age")
    # the sweep columns hold the run's resolved sampling (the default training size filled in)
    swept = table[table["train_group_share"] == 0.5].iloc[0]
    assert swept["share_group"] == "female" and swept["train_size"] == 18


def test_figures_and_page_exist(study: dict[str, Any]) -> None:
    rep = study["report"]
    names = {p.name for p in rep.figures}
    for stem in ("fig2-gap-classification", "fig4-tradeoff-classification", "fig5-groups-synth-underrep-sex-lp",
                 "fig5-groups-synth-underrep-age-lp", "fairness-laws-0", "imbalance-0"):
        assert {f"{stem}.png", f"{stem}.svg"} <= names
    # two FMs: the Friedman test is undefined (k < 3), so no Nemenyi post-hoc and no critical-difference plot;
    # the page says why instead of printing "χ² = undefined"
    assert not any(n.startswith("cd-") for n in names)
    assert all(p.is_file() and p.stat().st_size > 1000 for p in rep.figures)
    page = rep.html.read_text()
    assert "χ² = undefined" not in page and "Friedman test undefined: it needs at least three methods" in page
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert page.count("data:image/png;base64,") == len(rep.figures) // 2
    # 9 test samples per group: too few for a bootstrap interval, but the permutation test decides (it needs no
    # minimum size), so every configuration is tested
    assert any(a.startswith("Bias exists in ") and " of 4 tested FM × dataset configurations" in a
               for a in rep.answers)
    assert any(a.startswith("resampling against ERM") for a in rep.answers)
    assert any(a.startswith("Fairness law (c2l · synth-underrep") and "interpolation MAE" in a for a in rep.answers)
    assert any(a.startswith("Imbalance (c2l · synth-underrep") and "flat across prevalences" in a for a in rep.answers)
    assert "balanced_calibration_loss" in page and "calibration_loss" in page  # Mosquera's PAV loss, fitted too
    # every section has data but the repeated-splits and external-evaluation ones (this study sweeps no split seeds
    # and evaluates on no external dataset)
    assert "clip usages need a vision-language model" in page
    assert rep.notes == ["Repeated splits: the interval across split seeds beside each split's bootstrap: no "
                         "configuration was run on two or more split seeds (split_seeds)",
                         "Fairness under dataset shift: external evaluation: the study evaluates on no external "
                         "dataset (eval_datasets)"]
    # sections without data are left out with a note
    notes = study["base"].notes
    assert any("no train_group_share sweep" in n for n in notes) and any("no prevalence sweep" in n for n in notes)
    assert "Left out: the study has no prevalence sweep." in study["base"].html.read_text()


def test_paired_difference_against_erm(study: dict[str, Any]) -> None:
    table = study["report"].table
    pick = lambda mit: table[(table["model"] == "c2l") & (table["mitigation"] == mit)  # noqa: E731
                             & (table["attribute"] == "sex") & (table["metric"] == "auc_gap")
                             & table["train_group_share"].isna() & table["prevalence"].isna()].iloc[0]
    d = np.array(pick("resampling")["seed_values"]) - np.array(pick("erm")["seed_values"])
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.report.study import _paired

    s = _paired(pick("resampling"), pick("erm"), metric_spec("auc_gap"))
    assert s.mean == pytest.approx(d.mean()) and s.n == 2


def test_plan_errors(tmp_path: Path, study: dict[str, Any]) -> None:
    with pytest.raises(MissingResourceError, match="benchmark sweep"):
        read_plan(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"study": "x", "cells": [{"cell": {"model": "m"}, "status": "done"}]}))
    with pytest.raises(InputError, match="cell 0 lacks dataset"):
        read_plan(bad)
    plan = json.loads(study["plan"].read_text())
    for c in plan["cells"]:
        c["status"] = "planned"
    p = tmp_path / "planned.json"
    p.write_text(json.dumps(plan))
    with pytest.raises(InputError, match="no finished run"):
        write_study_report(p, study["out"], tmp_path / "r")
    plan = json.loads(study["plan"].read_text())
    swept = next(c for c in plan["cells"] if c["cell"]["train_group_share"] == 0.5)
    swept["cell"]["train_group_share"] = 0.9
    p.write_text(json.dumps(plan))
    with pytest.raises(InputError, match="train_group_share=0.9 but the run was made with 0.5"):
        write_study_report(p, study["out"], tmp_path / "r")
    plan = json.loads(study["plan"].read_text())
    plan["cells"][0]["run_dir"] = "runs/missing"
    p.write_text(json.dumps(plan))
    with pytest.raises(MissingResourceError, match="summary.json is missing"):
        write_study_report(p, study["out"], tmp_path / "r")


# --- the page in a real browser ------------------------------------------------------------------------------

def test_page_in_chromium_leads_with_the_answers(study: dict[str, Any], chromium: Any) -> None:
    driver = chromium
    driver.set_window_size(800, 600)
    driver.get(study["report"].html.resolve().as_uri())
    first = driver.execute_script(
        "return [...document.body.children].filter(e => e.tagName !== 'H1')[0]")
    assert first.get_attribute("id") == "answers"
    items = first.find_elements("css selector", "li")
    assert items[0].text.startswith("Bias exists in ")
    # every figure decoded (an inline PNG that failed to load has naturalWidth 0)
    widths = driver.execute_script("return [...document.images].map(i => i.naturalWidth)")
    assert widths and all(w > 0 for w in widths)
    assert not driver.find_element("css selector", "details.provenance").get_attribute("open")


# --- acceptance: the fairness-laws sweep on its presets -------------------------------------------------------

def _law_fits(table: pd.DataFrame, dataset: str) -> dict[str, Any]:
    from fairmedbench.analysis.fairness_laws import fairness_laws
    from fairmedbench.report.study import _seed_rows

    g = table[(table["dataset"] == dataset) & (table["scope"] == "group") & (table["metric"] == "auc")]
    res = fairness_laws(_seed_rows(g, "train_group_share"), "female", metrics=("auc",))
    return {f.group: f for f in res.fits}


@pytest.mark.slow
def test_fairness_laws_minority_auc_rises_with_its_share_and_the_control_stays_flat(tmp_path: Path) -> None:
    out = tmp_path / "results"
    opts = RunOptions(out_root=str(out), cache_dir=str(tmp_path / "cache"), device="cpu", log=lambda m: None)
    entries = []
    for ds in ("synth-laws", "synth-laws-control"):
        for share in (0.0, 0.25, 0.5, 0.75, 1.0):
            cell = {**_cell("c2l", "erm", attributes=["sex"], hparams={}, train_group_share=share,
                            share_group="female"), "dataset": ds, "seeds": [0, 1, 2]}
            spec = RunSpec(model="c2l", weights="random", dataset=ds, usage="lp", attributes=("sex",), seeds=(0, 1, 2),
                           n_boot=200, train_group_share=share, share_group="female")
            entries.append((cell, run(spec, opts)))
    rep = write_study_report(write_plan(out, "fairness-laws", entries), out, tmp_path / "report")
    laws = _law_fits(rep.table, "synth-laws")["female"]
    assert laws.slope_ci_low > 0 and laws.r > 0.9 and math.isfinite(laws.interp_mae)
    control = _law_fits(rep.table, "synth-laws-control")["female"]
    assert control.slope_ci_includes_0
    assert any(a.startswith("Fairness law (c2l · synth-laws ·") and "interpolation MAE" in a for a in rep.answers)


def test_a_multiclass_study_reports_without_an_equity_scaled_score(tmp_path: Path) -> None:
    """A multi-class task has no equity-scaled score: the report draws its gap and group figures, ranks and
    mitigation table, and leaves it out of the trade-off (it crashed on the missing 'es' key before)."""
    study_file = tmp_path / "mc.yaml"
    study_file.write_text("description: multi-class report\nmodels: [moco-cxr, imagenet-resnet50]\n"
                          "datasets: [synth-ordinal]\nattributes: [sex]\nusages: [lp]\nmitigations: [erm, groupdro]\n"
                          "seeds: [0, 1]\nhparams: {epochs: 3}\nweights: random\nn_boot: 20\n"
                          "dataset_options:\n  n: 60\n  config: {size: 32}\n")
    out = tmp_path / "out"
    assert main(["sweep", str(study_file), "--out", str(out), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert main(["study", "report", str(study_file), "--out", str(out), "--dest", str(tmp_path / "rep")]) == 0
    figures = {p.name for p in (tmp_path / "rep" / "figures").iterdir()}
    assert {"fig2-gap-multiclass.png", "fig5-groups-synth-ordinal-sex-lp.png"} <= figures
    assert not any(name.startswith("cd-") for name in figures)  # two mitigations: Friedman undefined, no CD plot
    assert not any(name.startswith("fig4-tradeoff") for name in figures)
    page = (tmp_path / "rep" / "study.html").read_text()
    assert "macro AUC" in page and "the multiclass task has no equity-scaled score" in page
