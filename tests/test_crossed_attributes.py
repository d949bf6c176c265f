"""Crossed attributes (`--attribute sex*age`): one attribute whose groups are the cells of its parts' groups, in
runs (through the dataset card, so in study files and suite entries too) and in `evaluate`; the synthetic card whose
bias lives in one cell. Expectations are counted by hand from the tables the tests build."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark.evaluate import EvaluateOptions, run_evaluate
from fairmedbench.benchmark.resolve import check_spec, resolve_run
from fairmedbench.benchmark.studies import expand, load_study
from fairmedbench.cli import build_parser, main, run_spec
from fairmedbench.errors import InputError
from fairmedbench.leaderboards.suites import Entry
from fairmedbench.metrics.groups import Attribute, cell_names, crossed_parts
from fairmedbench.registry.datasets import get_card, load_dataset
from fairmedbench.registry.datasets.synthetic import CROSSED, CROSSED_CONTROL, SynthConfig, make_table, render
from fairmedbench.spec import RunSpec

# ------------------------------------------------------------------------------------------------- names and cells


def test_crossed_names_split_into_distinct_parts() -> None:
    assert crossed_parts("sex*age") == ("sex", "age")
    assert crossed_parts("sex*age*race") == ("sex", "age", "race")
    assert crossed_parts("sex") == ()
    for bad in ("sex*", "*age", "sex*sex"):
        with pytest.raises(InputError, match="distinct attribute names"):
            crossed_parts(bad)


def test_cell_names_keep_missing_as_none() -> None:
    a = Attribute("sex*age", np.array([1, -1, 0]), ("F|<60", "F|>=60"))
    assert list(cell_names(a)) == ["F|>=60", None, "F|<60"]


def test_an_unknown_part_is_refused_in_one_line_naming_the_cards_attributes() -> None:
    with pytest.raises(InputError) as err:
        check_spec(RunSpec(model="moco-cxr", dataset="synth-crossed", attributes=("sex*race",), weights="random"))
    msg = str(err.value)
    assert "\n" not in msg and "'race'" in msg and "known: sex, age, age_bins" in msg


def test_unknown_part_on_the_command_line_exits_2_before_any_work(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    code = main(["run", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-crossed", "--attribute",
                 "sex*bmi", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "no attribute 'bmi'" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------------------------------------- runs

def test_a_dataset_gets_the_cell_column_of_its_parts_groups_binned_parts_by_their_bins() -> None:
    ds = load_dataset("synth-control", n=60)
    ds.add_crossed(["sex", "sex*age", "age_bins*sex"])
    s = ds.samples
    assert "attr:sex" in s and "attr:sex*age" in s and "attr:age_bins*sex" in s
    raw = make_table(SynthConfig(n=60), "synth-control").set_index("sample_id").loc[s["sample_id"]]
    sex = np.where(raw["sex"].to_numpy() == "F", "female", "male")
    age = np.where(raw["age"].to_numpy() >= 60, ">=60", "<60")
    assert list(s["attr:sex*age"]) == [f"{a}|{b}" for a, b in zip(sex, age)]
    bins = np.array(["0-19", "20-39", "40-59", "60-79", "80+"])[np.digitize(raw["age"].to_numpy(), [20, 40, 60, 80])]
    assert list(s["attr:age_bins*sex"]) == [f"{b}|{a}" for a, b in zip(sex, bins)]


def test_a_missing_part_makes_the_cell_missing() -> None:
    ds = load_dataset("synth-control", n=20)
    ds.samples.loc[3, "attr:age"] = None
    ds.add_crossed(["sex*age"])
    cells = ds.samples["attr:sex*age"]
    assert cells[3] is None and cells.isna().sum() == 1


def test_the_crossed_attribute_is_part_of_the_run_identity_and_of_the_test_table() -> None:
    base = dict(model="moco-cxr", dataset="synth-crossed", weights="random", dataset_options={"n": 60})
    plain = resolve_run(RunSpec(**base, attributes=("sex", "age")), device="cpu")  # type: ignore[arg-type]
    crossed = resolve_run(RunSpec(**base, attributes=("sex", "age", "sex*age")), device="cpu")  # type: ignore[arg-type]
    assert crossed.config.attributes == ("sex", "age", "sex*age")
    assert crossed.config.identity()["attributes"] == ["sex", "age", "sex*age"]
    assert crossed.config.run_id != plain.config.run_id
    assert crossed.config.data_fingerprint == plain.config.data_fingerprint  # the same data read
    assert set(crossed.dataset.samples["attr:sex*age"]) == {"female|<60", "female|>=60", "male|<60", "male|>=60"}


def test_the_command_line_keeps_sex_comma_age_as_two_attributes_and_sex_star_age_as_one() -> None:
    parser = build_parser()

    def attrs(value: str) -> tuple[str, ...]:
        args = parser.parse_args(["run", "--model", "moco-cxr", "--dataset", "synth-crossed", "--attribute", value])
        assert isinstance(args, argparse.Namespace)
        return run_spec(args).attributes

    assert attrs("sex,age") == ("sex", "age")
    assert attrs("sex*age") == ("sex*age",)
    assert attrs("sex,sex*age") == ("sex", "sex*age")


def test_a_study_file_with_a_crossed_attribute_expands_to_runnable_cells(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("models: [moco-cxr]\ndatasets: [synth-crossed]\nattributes: [sex, 'sex*age']\nusages: [lp]\n"
                    "weights: random\n")
    cells = expand(load_study(str(path)))
    assert [c.reason for c in cells] == [None]
    assert cells[0].spec.attributes == ("sex", "sex*age")
    bad = tmp_path / "b.yaml"
    bad.write_text("models: [moco-cxr]\ndatasets: [synth-crossed]\nattributes: ['sex*bmi']\nusages: [lp]\n")
    (cell,) = expand(load_study(str(bad)))
    assert cell.reason is not None and "no attribute 'bmi'" in cell.reason


def test_a_suite_entry_with_a_crossed_attribute_resolves() -> None:
    entry = Entry("synth-crossed", ("sex", "sex*age"), "lp", options=(("n", 60),))
    spec = RunSpec(model="moco-cxr", dataset=entry.dataset, attributes=entry.attributes, usage=entry.usage,
                   seeds=entry.seeds, weights="random", profile=entry.profile, dataset_options=entry.dataset_options)
    resolved = resolve_run(spec, device="cpu")
    assert resolved.config.attributes == ("sex", "sex*age")


# ----------------------------------------------------------------------------------------------------- evaluate

def _table(tmp_path: Path) -> Path:
    """12 rows per cell of (F, M) x (age < 60, age >= 60) except F aged 60+ (5 rows, all positive)."""
    rows = []
    for sex, ages, labels in (("F", [30] * 12, [0, 1] * 6), ("F", [70] * 5, [1] * 5),
                              ("M", [30] * 12, [0, 1] * 6), ("M", [65] * 12, [0, 1] * 6)):
        for k, (age, y) in enumerate(zip(ages, labels)):
            rows.append({"label": y, "score": 0.2 + 0.6 * y - 0.01 * k if sex == "M" else 0.5 + 0.01 * k,
                         "sex": sex, "age": age})
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _evaluate(tmp_path: Path, **kw: object) -> object:
    opts = EvaluateOptions(predictions=str(_table(tmp_path)), labels=["label"], scores=["score"],
                           out=str(tmp_path / "r.json"), n_boot=50, n_perm=50, min_group_size=10, **kw)  # type: ignore
    return run_evaluate(opts)


def test_evaluate_crosses_binned_parts_into_cells_with_counts_values_and_a_place_in_the_family(
        tmp_path: Path) -> None:
    out = _evaluate(tmp_path, attributes=["sex", "sex*age"], bins={"age": [0, 60, 200]})
    result = out.result  # type: ignore[attr-defined]
    crossed = result.report("label", "sex*age")
    assert crossed.groups == ["F|<60", "F|>=60", "M|<60", "M|>=60"]
    assert {g: crossed.counts[g]["n"] for g in crossed.groups} == {"F|<60": 12, "F|>=60": 5, "M|<60": 12,
                                                                  "M|>=60": 12}
    assert crossed.counts["F|>=60"]["n_neg"] == 0
    # the male cells rank every positive above every negative; F|<60 scores rise with the row, labels alternate
    assert crossed.values["auc"]["M|<60"][0] == 1.0
    f_young = [(0.5 + 0.01 * k, y) for k, y in enumerate([0, 1] * 6)]
    pos = [s for s, y in f_young if y]
    neg = [s for s, y in f_young if not y]
    assert math.isclose(crossed.values["auc"]["F|<60"][0], np.mean([p > n for p in pos for n in neg]))
    # no negative in F|>=60: said so, no AUC; below the minimum size: a point estimate and no interval
    assert "F|>=60" in crossed.skipped and "negative" in crossed.skipped["F|>=60"]
    assert not np.isfinite(crossed.values["auc"]["F|>=60"][0])
    assert "F|>=60" in crossed.small_groups
    tpr = crossed.values["tpr"]["F|>=60"]
    assert np.isfinite(tpr[0]) and math.isnan(tpr[1]) and math.isnan(tpr[2])
    # the crossed gaps are tested and adjusted with the sex gaps, in one BY family
    assert "p_adjusted" in crossed.tests["auc_gap"] and "p_adjusted" in result.report("label", "sex").tests["auc_gap"]
    # the age part was only crossed: no age attribute of its own, and its bins went to the crossing only
    assert [r.attribute for r in result.reports] == ["sex", "sex*age"]


def test_evaluate_refuses_an_unknown_part_and_bins_for_no_attribute(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"attribute column\(s\) \['race'\] not in"):
        _evaluate(tmp_path, attributes=["sex*race"])
    with pytest.raises(InputError, match="bins given for \\['age'\\]"):
        _evaluate(tmp_path, attributes=["sex"], bins={"age": [0, 60, 200]})


def test_evaluate_keeps_intersect_beside_a_crossed_attribute(tmp_path: Path) -> None:
    out = _evaluate(tmp_path, attributes=["sex", "age"], bins={"age": [0, 60, 200]}, intersect=True)
    names = [r.attribute for r in out.result.reports]  # type: ignore[attr-defined]
    assert names == ["sex", "age", "sex|age"]


# ------------------------------------------------------------------------------------------------ synthetic card

def test_the_crossed_card_lowers_lesion_contrast_of_older_women_only() -> None:
    assert CROSSED.lesion_contrast("female", 60) == 0.25 and CROSSED.lesion_contrast("female", 59) == 1.0
    assert CROSSED.lesion_contrast("male", 80) == 1.0
    assert all(CROSSED_CONTROL.lesion_contrast(g, a) == 1.0 for g in ("female", "male") for a in (20, 89))
    cfg = replace_size(CROSSED)
    lesion = {age: render(cfg, 7, "female", 1, False, age)[0].astype(float) - render(cfg, 7, "female", 0, False,
                                                                                    age)[0].astype(float)
              for age in (30, 70)}
    assert 0.20 < lesion[70].max() / lesion[30].max() < 0.30  # 0.25x, up to uint8 rounding
    male = [render(cfg, 7, "male", 1, False, age)[0] for age in (30, 70)]
    assert np.array_equal(male[0], male[1])


def replace_size(cfg: SynthConfig) -> SynthConfig:
    from dataclasses import replace

    return replace(cfg, size=32, noise={"female": 0.0, "male": 0.0})


def test_the_twins_share_their_table_and_the_other_cards_keep_their_content_identity() -> None:
    a, b = (make_table(c, "t") for c in (CROSSED, CROSSED_CONTROL))
    assert a.equals(b)
    assert "older" not in SynthConfig().content() and "older_contrast" in CROSSED.content()
    declared = get_card("synth-crossed").expected_disparities[0]
    assert declared["attribute"] == "sex*age" and declared["group"] == "female|>=60"
    assert get_card("synth-crossed-control").expected_disparities[0]["direction"] == "none"


def test_an_external_dataset_is_aligned_on_each_part_of_a_crossed_attribute() -> None:
    checked = check_spec(RunSpec(model="moco-cxr", dataset="synth-contrast", attributes=("sex*age",),
                                 weights="random", usage="lp", eval_datasets=("synth-flip",)))
    assert list(checked.alignments[0]) == ["sex", "age"]
