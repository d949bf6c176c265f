"""Study files: validation errors name the file and line; expansion skips incompatible cells with reasons;
include/exclude rules; shipped studies; the fairmedfm dry-run without the data; the cost estimate."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fairmedbench.benchmark.studies import StudyError, expand, group_reasons, load_study, runnable, shipped_studies


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


BASE = """
models: [c2l]
datasets: [synth-control]
"""


@pytest.mark.parametrize("text, line, message", [
    ("models: [c2l, resnet-9000]\ndatasets: [synth-control]\n", 1, "unknown model 'resnet-9000'"),
    ("models:\n  - c2l\n  - nope\ndatasets: [synth-control]\n", 3, "unknown model 'nope'"),
    ("models: [c2l]\ndatasets: [synth-control, chexprt]\n", 2, "Did you mean chexpert"),
    ("models: [c2l]\ndatasets: [synth-control]\nusages: [lp, linear]\n", 3, "unknown usage 'linear'"),
    ("models: [c2l]\ndatasets: [synth-control]\nmitigations: [erm, dro]\n", 3, "unknown mitigation 'dro'"),
    ("models: [c2l]\ndatasets: [synth-control]\nmodel_seeds: [1]\n", 3, "unknown key 'model_seeds'"),
    ("models: [c2l]\ndatasets: [synth-control]\n\nseeds: [0, one]\n", 4, "seeds: expected an integer >= 0, got 'one'"),
    ("models: [c2l]\ndatasets: [synth-control]\nn_boot: 1.5\n", 3, "n_boot: expected an integer >= 0, got 1.5"),
    ("models: [c2l]\ndatasets: [synth-control]\nhparams: [1, 2]\n", 3, "hparams: expected a mapping"),
    ("models: [c2l]\ndatasets: [synth-control]\nprevalence: [0.1, 1.0]\n", 3, "expected a number in (0, 1), got 1.0"),
    ("models: [c2l]\ndatasets: [synth-control]\ntrain_size: 50\n", 3, "train_size applies to the train_group_share"),
    ("models: [c2l]\ndatasets: [synth-control]\nshare_group: female\ntrain_group_share: [0, 1.5]\n", 4,
     "a number in [0, 1], got 1.5"),
    ("models: [c2l]\ndatasets: [synth-control]\nprevalence: [0.1]\nprevalence_on: val\n", 4,
     "unknown prevalence_on 'val'"),
    ("models: [c2l]\ndatasets: [synth-control]\nexclude:\n  - {usage: lp, colour: red}\n", 4,
     "unknown rule field 'colour'"),
    ("datasets: [synth-control]\n", 1, "missing key 'models'"),
    ("models: c2l\ndatasets: [synth-control\n", 3, "not valid YAML"),
])
def test_bad_study_files_name_the_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(StudyError) as err:
        load_study(str(path))
    assert f"{path}:{line}:" in str(err.value)
    assert message in str(err.value)


def test_a_valid_file_reads_every_axis(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + """
        usages: [lp, auto]
        mitigations: [erm, groupdro]
        seeds: 0-2
        hparams: [{epochs: 2}, {epochs: 4, lr: 0.01}]
        weights: random
        n_boot: 10
        dataset_options: {n: 40}
        share_group: female
        train_group_share: [0, 0.5, 1]
        train_size: 50
        prevalence: [0.1, 0.5]
        prevalence_on: test
    """.replace("\n        ", "\n"))
    s = load_study(str(path))
    assert (s.name, s.models, s.usages, s.mitigations, s.seeds) == ("s", ("c2l",), ("lp", ""), ("erm", "groupdro"),
                                                                   (0, 1, 2))
    assert s.hparams == ({"epochs": 2}, {"epochs": 4, "lr": 0.01})
    assert (s.train_group_share, s.share_group, s.train_size) == ((0.0, 0.5, 1.0), "female", 50)
    assert (s.prevalence, s.prevalence_on, s.n_boot, s.weights) == ((0.1, 0.5), "test", 10, "random")
    cells = expand(s)
    # 2 usages x 2 mitigations x 2 hparams x 3 shares x 2 prevalences
    assert len(cells) == 48
    assert {c.fields["usage"] for c in cells} == {"lp"}  # auto resolves to lp for c2l on a classification set
    assert {(c.fields["train_group_share"], c.fields["prevalence"]) for c in cells} == {
        (a, b) for a in (0.0, 0.5, 1.0) for b in (0.1, 0.5)}
    assert all(c.fields["share_group"] == "female" and c.fields["prevalence_on"] == "test" for c in cells)


def test_incompatible_cells_are_skipped_with_their_reason(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        models: [c2l, clip-vit-b32, litemedsam, sam-med3d]
        datasets: [synth-control]
        usages: [lp, clip-zs, sam-prompt]
        prompts: [bbox, center]
        mitigations: [erm, groupdro, febs]
        weights: random
    """)
    cells = expand(load_study(str(path)))
    by = {(c.fields["model"], c.fields["usage"], c.fields["mitigation"], c.fields["prompt"]): c for c in cells}
    assert by[("c2l", "lp", "erm", None)].runnable
    assert by[("c2l", "lp", "groupdro", None)].runnable
    assert "needs encode_image, encode_text" in by[("c2l", "clip-zs", "erm", None)].reason
    assert "needs a usage that learns" in by[("clip-vit-b32", "clip-zs", "groupdro", None)].reason
    assert "febs' does not apply to classification" in by[("c2l", "lp", "febs", None)].reason
    assert by[("litemedsam", "sam-prompt", "erm", "center")].runnable  # the prompt axis applies to sam-prompt
    assert "needs a usage that learns" in by[("litemedsam", "sam-prompt", "groupdro", "bbox")].reason
    assert "takes 3D volumes; dataset 'synth-control' is 2D" in by[("sam-med3d", "sam-prompt", "erm", "bbox")].reason
    assert not any(c.fields["prompt"] for c in cells if c.fields["usage"] != "sam-prompt")
    # 4 models x 3 usages x 3 mitigations, sam-prompt cells doubled by the two prompts where the usage is possible
    assert len(cells) == 4 * 3 * 3 + 3 * 2
    assert all(c.reason for c in cells if not c.runnable)


def test_include_and_exclude_rules(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        models: [c2l, clip-vit-b32]
        datasets: [synth-control, synth-contrast]
        usages: [lp, clip-zs, clip-adapt]
        mitigations: [erm, groupdro]
        weights: random
        include:
          - {kind: vision-language}
        exclude:
          - {dataset: synth-contrast, usage: [clip-zs, clip-adapt]}
    """)
    cells = expand(load_study(str(path)))
    run = {(c.fields["model"], c.fields["dataset"], c.fields["usage"], c.fields["mitigation"]) for c in cells
           if c.runnable}
    assert run == {("clip-vit-b32", "synth-control", "lp", "erm"), ("clip-vit-b32", "synth-control", "lp", "groupdro"),
                   ("clip-vit-b32", "synth-control", "clip-zs", "erm"),
                   ("clip-vit-b32", "synth-control", "clip-adapt", "erm"),
                   ("clip-vit-b32", "synth-control", "clip-adapt", "groupdro"),
                   ("clip-vit-b32", "synth-contrast", "lp", "erm"),
                   ("clip-vit-b32", "synth-contrast", "lp", "groupdro")}
    reasons = group_reasons([c for c in cells if not c.runnable])
    assert reasons["matched by no include rule"] == 4  # c2l's lp cells (its clip cells fail the usage check first)
    assert reasons["excluded by the rule {dataset=synth-contrast, usage=clip-zs|clip-adapt} (line 9)"] == 4


def test_a_study_with_no_runnable_cell_is_an_error_listing_the_reasons(tmp_path: Path) -> None:
    path = _write(tmp_path, "models: [c2l]\ndatasets: [synth-control]\nusages: [clip-zs]\nmitigations: [erm, febs]\n")
    with pytest.raises(StudyError, match=r"no runnable cell: usage 'clip-zs' cannot run here.*\(2 cells\)"):
        runnable(load_study(str(path)))


def test_shipped_studies_load_and_the_smoke_grid_is_as_designed() -> None:
    assert set(shipped_studies()) >= {"fairmedfm", "smoke", "fairness-laws", "imbalance"}
    for name in shipped_studies():
        assert load_study(name).name == name
    cells = expand(load_study("smoke"))
    assert sum(c.runnable for c in cells) == 8 and len(cells) == 16
    with pytest.raises(StudyError, match="no study 'smok'"):
        load_study("smok")


def test_sampling_axes_reach_the_run_spec_when_it_has_them() -> None:
    from dataclasses import fields

    from fairmedbench.spec import RunSpec

    cells = expand(load_study("fairness-laws"))
    assert len(cells) == 20  # 1 model x 2 presets x 2 usages (lp, anomaly) x 5 shares
    if "train_group_share" not in {f.name for f in fields(RunSpec)}:
        assert all("RunSpec has no" in c.reason for c in cells)
        pytest.skip("RunSpec has no sampling fields yet (the lead's Sampling change)")
    shares = sorted({(c.spec.dataset, c.spec.train_group_share) for c in cells if c.runnable})
    assert shares == sorted((d, s) for d in ("synth-laws", "synth-laws-control") for s in (0, 0.25, 0.5, 0.75, 1.0))
    # the training size is left to RunSpec's default (the largest at which every share fits)
    assert all(c.spec.share_group == "female" and c.spec.train_size is None for c in cells if c.runnable)
    prev = [c.spec for c in expand(load_study("imbalance")) if c.runnable]
    assert sorted({(s.prevalence, s.prevalence_on) for s in prev}) == [(p, "test") for p in (0.05, 0.1, 0.25, 0.5)]


def test_fairmedfm_grid_has_lora_and_samed_with_their_mitigations() -> None:
    cells = {(c.fields["usage"], c.fields["mitigation"]) for c in expand(load_study("fairmedfm")) if c.runnable}
    assert {("lora", m) for m in ("erm", "resampling", "groupdro", "adversarial", "domainind", "fairness_loss")} \
        <= cells
    assert {("samed", m) for m in ("erm", "resampling", "groupdro", "fairness_loss", "febs", "ind")} <= cells
    assert not {("lora", "febs"), ("lora", "ind"), ("samed", "adversarial"), ("samed", "domainind")} & cells


def test_list_studies_names_every_shipped_study(capsys: pytest.CaptureFixture) -> None:
    import json

    from fairmedbench.cli import main

    assert main(["list", "studies", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == [*shipped_studies(), "claims"]  # the claims study (benchmark claims) last
    laws = next(r for r in rows if r["name"] == "fairness-laws")
    assert laws["usages"] == ["lp", "anomaly"]


@pytest.mark.parametrize("text, line, message", [
    (BASE + "eval_datasets: [synth-flip, synth-fl1p]\n", 3, "unknown dataset 'synth-fl1p'"),
    (BASE + "eval_datasets: [synth-flip, synth-flip]\n", 3, "listed twice"),
    (BASE + "split_seeds: [0, 0]\n", 3, "split_seeds: give distinct seeds"),
    (BASE + "split_seeds: [0, -1]\n", 3, "split_seeds: expected an integer >= 0"),
])
def test_bad_shift_and_split_keys_name_the_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    with pytest.raises(StudyError) as err:
        load_study(str(_write(tmp_path, text)))
    assert f"s.yaml:{line}:" in str(err.value) and message in str(err.value)


def test_eval_datasets_reach_every_cell_and_split_seeds_are_an_axis(tmp_path: Path) -> None:
    study = load_study(str(_write(tmp_path, """
        models: [c2l]
        datasets: [synth-control, synth-ordinal]
        usages: [lp]
        eval_datasets: ['synth-flip:n=40']
        split_seeds: 0-1
        """)))
    cells = expand(study)
    ok = [c for c in cells if c.runnable]
    assert [c.spec.split_seeds for c in ok] == [(0,), (1,)]  # synth-control x split seeds 0 and 1
    assert all(c.spec.eval_datasets == ("synth-flip:n=40",) and c.fields["eval_datasets"] == ["synth-flip:n=40"]
               for c in ok)
    skipped = [c for c in cells if not c.runnable]  # the multi-class dataset cannot be evaluated on synth-flip
    assert len(skipped) == 2 and all("offers classification" in c.reason for c in skipped)
