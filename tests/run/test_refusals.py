"""Issue 19, point 5: every invalid combination is refused from the cards and registries alone (exit 2, one line,
no run folder, no weights located or loaded); --seeds / --n-boot above their bounds need --i-know and say the
estimated time; a read-only or full output or cache folder is one line, with no stray run folder."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from fairmedbench.benchmark.resolve import check_spec
from fairmedbench.cli import main
from fairmedbench.engine import hparams, store
from fairmedbench.errors import InputError
from fairmedbench.spec import RunSpec

SYN = ["--weights", "random", "--dataset-option", "n=24", "--precision", "fp32"]


@pytest.fixture()
def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Locating or loading weights fails the test: a refusal must come before either."""
    import fairmedbench.registry.models as models
    import fairmedbench.registry.models.weights as weights

    def boom(*a, **k):
        raise AssertionError("weights were located or loaded before the refusal")

    monkeypatch.setattr(weights, "resolve_weights", boom)
    monkeypatch.setattr(models, "load_model", boom)


def _refused(argv: list[str], out: Path, capsys: pytest.CaptureFixture) -> str:
    assert main(["run", *argv, "--out", str(out / "o"), "--cache-dir", str(out / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("benchmark: error:"), err
    assert not (out / "o").exists() and not (out / "c").exists()  # no run folder, no cache folder
    return err[0]


@pytest.mark.parametrize("argv,message", [
    (["--model", "sam-med3d", "--dataset", "synth-contrast"], "segments 3D volumes; dataset 'synth-contrast' is 2D"),
    (["--model", "sam-med3d", "--dataset", "synth3d-contrast", "--usage", "sam-decoder"],
     "model 'sam-med3d' can segment; 'sam-decoder' needs segment, tune_decoder"),
    (["--model", "fastsam3d", "--dataset", "synth3d-contrast", "--usage", "samed"],
     "Possible usages for this model and dataset: sam-prompt"),
    # MedSAM2's SAM 2 modules have no decoder to fine-tune: this was an AttributeError traceback after loading
    (["--model", "medsam2", "--dataset", "synth-contrast", "--usage", "sam-decoder"], "needs segment, tune_decoder"),
    (["--model", "medsam2", "--dataset", "synth-contrast", "--usage", "samed"], "needs segment, tune_decoder"),
    (["--model", "sam-med3d", "--dataset", "synth3d-contrast", "--usage", "sam-prompt"],
     "takes center, rand, rands prompts, not bbox (the default)"),
    (["--model", "fastsam3d", "--dataset", "synth3d-contrast", "--prompt", "bbox"], "has no box embedding"),
    (["--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "lp", "--prompt", "bbox"],
     "--prompt bbox: usage 'lp' takes no prompt"),
    (["--model", "clip-vit-b32", "--dataset", "synth-contrast", "--usage", "clip-zs", "--prompt", "center"],
     "takes no prompt"),
    (["--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "sam-decoder", "--prompt", "center"],
     "prompts with bbox, not 'center'"),
    (["--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "sam-prompt", "--threshold", "val_best_f1"],
     "a segmentation run chooses no decision threshold"),
    (["--model", "dinov2", "--dataset", "synth-ordinal", "--threshold", "val_best_f1"],
     "a multiclass run chooses no decision threshold"),
    (["--model", "dinov2", "--dataset", "synth-contrast", "--profile", "fairseg"],
     "'fairseg' applies to segmentation runs; this run is classification"),
    (["--model", "dinov2", "--dataset", "synth-ordinal", "--profile", "fairmedfm"], "this run is multiclass"),
    (["--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "sam-prompt", "--hparam", "epochs=5"],
     "hparam epochs set how a head or decoder trains; usage 'sam-prompt' learns nothing"),
    (["--model", "clip-vit-b32", "--dataset", "synth-contrast", "--usage", "clip-zs", "--hparam", "lr=0.1"],
     "usage 'clip-zs' learns nothing"),
    (["--model", "dinov2", "--dataset", "synth-contrast", "--hparam", "tasks=all"],
     "'synth-contrast' has none"),
    (["--model", "dinov2", "--dataset", "synth-contrast", "--prevalence-on", "train"], "give --prevalence P too"),
    (["--model", "dinov2", "--dataset", "synth-contrast", "--mitigation", "group_thresholds", "--threshold",
      "fixed:0.5"], "--threshold fixed:0.5 would be ignored"),
    (["--model", "dinov2", "--dataset", "synth-contrast", "--mitigation", "group_thresholds", "--profile",
      "fairmedfm"], "profile 'fairmedfm' would undo it"),
    (["--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "sam-prompt", "--prompt", "center",
      "--hparam", "box_jitter=0.1"], "--prompt center gives points"),
    (["--model", "dinov2", "--dataset", "synth-contrast", "--split-file", "s.json", "--split-seed", "3"],
     "give one of them"),
])
def test_invalid_combinations_are_refused_before_any_work(argv: list[str], message: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture, no_weights: None) -> None:
    assert message in _refused([*argv, *SYN], tmp_path, capsys)


@pytest.mark.parametrize("kw,prompt", [
    ({"model": "sam-med3d", "dataset": "synth3d-contrast", "usage": "sam-prompt", "prompt": "rand"}, "rand"),
    ({"model": "segvol", "dataset": "synth3d-contrast", "usage": "sam-prompt"}, "bbox"),  # SegVol takes a box
    ({"model": "litemedsam", "dataset": "synth-contrast", "usage": "sam-prompt"}, "bbox"),
    ({"model": "litemedsam", "dataset": "synth3d-contrast", "usage": "sam-decoder"}, "bbox"),  # 2D model, slices
    ({"model": "litemedsam", "dataset": "synth-contrast", "usage": "lp"}, None),
    # a training hparam at its default changes nothing (verify rebuilds specs with every default filled in)
    ({"model": "litemedsam", "dataset": "synth-contrast", "usage": "sam-prompt", "hparams": {"epochs": 10}}, "bbox"),
    ({"model": "clip-vit-b32", "dataset": "synth-contrast", "usage": "clip-zs", "hparams": {"tasks": "main"}}, None),
])
def test_valid_combinations_still_pass(kw: dict, prompt: str | None) -> None:
    assert check_spec(RunSpec(**kw)).prompt == prompt


def test_cost_bounds_are_one_table_that_a_new_option_joins_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    assert hparams.over_cost_bounds({"seeds": 20, "n_boot": 10_000, "other": 10 ** 9}) == {}
    with pytest.raises(InputError, match=r"--n-boot 10001 \(bound 10,000\).*estimated time about 3 s.*--i-know"):
        hparams.check_cost_bounds({"n_boot": 10_001}, False, lambda: "about 3 s", said.append)
    hparams.check_cost_bounds({"seeds": 21}, True, lambda: "about 3 s", said.append)
    assert said == ["--seeds 21 (bound 20) is above the documented bound (--i-know given): estimated time about 3 s"]
    monkeypatch.setitem(hparams.COST_BOUNDS, "n_perm", ("--n-perm", 100_000))  # how the permutation count joins
    from types import SimpleNamespace

    options = SimpleNamespace(seeds=(0, 1), n_boot=2000, n_perm=100_001)  # read by name, as from a RunConfig
    assert hparams.cost_values(options) == {"seeds": 2, "n_boot": 2000, "n_perm": 100_001}
    assert hparams.over_cost_bounds(hparams.cost_values(options)) == {
        "n_perm": "--n-perm 100001 (bound 100,000)",
        "seeds x n_perm": "--seeds x --n-perm = 200,002 permutation sets (bound 200,000)"}
    # the estimate is computed only when something is above a bound
    hparams.check_cost_bounds({"seeds": 3}, False, lambda: pytest.fail("estimated within the bounds"), said.append)


def test_products_of_cost_options_are_bounded_too() -> None:
    """Each value within its own bound, their product above its own: 20 seeds x 6 split seeds = 120 trainings
    (bound 100); 20 x 5 x 2,001 = 200,100 resamples (bound 200,000); a study's (None,) split axis is left out."""
    from types import SimpleNamespace

    assert hparams.over_cost_bounds({"seeds": 20, "split_seeds": 5, "n_boot": 2000, "n_perm": 0}) == {}
    over = hparams.over_cost_bounds({"seeds": 20, "split_seeds": 6, "n_boot": 10})
    assert over == {"seeds x split_seeds": "--seeds x --split-seeds = 120 trainings (bound 100)"}
    over = hparams.over_cost_bounds({"seeds": 20, "split_seeds": 5, "n_boot": 2001})
    assert list(over) == ["seeds x split_seeds x n_boot"] and "200,100 bootstrap resamples" in over[
        "seeds x split_seeds x n_boot"]
    study = SimpleNamespace(seeds=(0, 1, 2), split_seeds=(None,), n_boot=500, n_perm=200)
    assert hparams.cost_values(study) == {"seeds": 3, "n_boot": 500, "n_perm": 200}


def test_too_many_seeds_or_resamples_need_i_know_and_print_the_estimate(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    base = ["--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "lp", *SYN]
    line = _refused([*base, "--seeds", "0-24"], tmp_path, capsys)
    assert "--seeds 25 (bound 20)" in line and "estimated time unknown for the training" in line
    assert "bootstrap and permutation tests (2000 resamples and 1000 permutations x " in line and "--i-know" in line
    # with a finished run of the same model, dataset and usage, the seeds are timed from it
    done = tmp_path / "o" / "runs" / "litemedsam" / "synth-contrast" / "lp" / "0123456789abcdef"
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"seconds": 12.0, "seeds": [0, 1]}))
    assert main(["run", *base, "--n-boot", "20000", "--out", str(tmp_path / "o"), "--cache-dir",
                 str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--n-boot 20000 (bound 10,000)" in err[0]
    assert "1 fit(s) x 6 s per seed, the median of 1 finished run(s) of litemedsam/synth-contrast/lp" in err[0]
    assert sorted(p.name for p in done.parent.iterdir()) == ["0123456789abcdef"] and not (tmp_path / "c").exists()


def test_split_seeds_are_bounded_with_the_bootstrap_in_the_estimate(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """--split-seeds 0-100000 is refused before any split is drawn (one line: what is above its bound, the
    estimate with its bootstrap part, --i-know); the estimate is the hand-computed one at a pinned rate."""
    from fairmedbench.benchmark import costs
    from fairmedbench.benchmark import run as run_mod

    monkeypatch.setattr(costs, "resample_rate", lambda: {"boot_s_per_row": 1e-6, "perm_s_per_row": 2e-6,
                                                         "how": "a pinned rate"})
    monkeypatch.setattr(run_mod, "_run_one", lambda *a, **k: pytest.fail("a split ran before the refusal"))
    base = ["--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "lp", *SYN, "--attribute", "sex"]
    line = _refused([*base, "--seeds", "0-2", "--split-seeds", "0-100000", "--n-boot", "100", "--n-perm", "50"],
                    tmp_path, capsys)
    assert "--split-seeds 100001 (bound 20)" in line and "--i-know" in line
    assert "--seeds x --split-seeds = 300,003 trainings (bound 100)" in line
    # 300,003 fits x 1 pair x 7 test rows (n=24, test fraction 0.3) x (100 x 1e-6 + 50 x 2e-6) s = 420 s = 7 min
    assert "about 7 min of bootstrap and permutation tests (100 resamples and 50 permutations x 7 test rows x 1 " \
           "task-attribute pair(s) x 300003 fit(s), at a pinned rate)" in line


def test_seed_lists_beyond_any_use_are_refused_before_they_are_built(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    line = _refused(["--model", "litemedsam", "--dataset", "synth-contrast", *SYN, "--seeds", "0-1000000000000"],
                    tmp_path, capsys)
    assert "--seeds '0-1000000000000': 1,000,000,000,001 seeds, more than 1,000,000: ask for fewer" in line


def _deny_writes_under(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """As root a 0o555 folder is writable anyway: simulate it by refusing file creation under `folder`."""
    real = store.tempfile.mkstemp

    def mkstemp(*a, dir=None, **k):
        if dir is not None and Path(dir).resolve().is_relative_to(folder.resolve()):
            raise PermissionError(errno.EACCES, "Permission denied", str(dir))
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(store.tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("which", ["--out", "--cache-dir"])
def test_a_read_only_output_or_cache_folder_is_one_line(which: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:
        _deny_writes_under(monkeypatch, ro)
    target = {"--out": ["--out", str(ro / "o"), "--cache-dir", str(tmp_path / "c")],
              "--cache-dir": ["--out", str(tmp_path / "o"), "--cache-dir", str(ro / "c")]}[which]
    try:
        rc = main(["run", "--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "lp", *SYN, *target])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err
        assert err[0].startswith(f"benchmark: error: {which} ") and f"cannot write in {ro}" in err[0]
        assert not (tmp_path / "o").exists() and list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


def test_a_full_disk_mid_run_is_one_line_and_leaves_no_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import fairmedbench.benchmark.run as run_mod

    def full(resolved, opts, out_dir):  # the config is written, then the disk fills up
        raise OSError(errno.ENOSPC, "No space left on device", str(out_dir / "seed0.parquet"))

    monkeypatch.setattr(run_mod, "_compute", full)
    rc = main(["run", "--model", "litemedsam", "--dataset", "synth-contrast", "--usage", "lp", *SYN,
               "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "seed0.parquet: No space left on device; free space" in err[0]
    assert not (tmp_path / "o" / "runs").exists()


def test_evaluate_n_boot_above_its_bound_needs_i_know(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "--demo", "--n-boot", "10001"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--n-boot 10001 (bound 10,000)" in err[0] and "estimated time about" in err[0]
    assert list(tmp_path.iterdir()) == []
    # with --i-know the estimate is printed first and the evaluation goes on (bound lowered to keep this cheap)
    monkeypatch.setitem(hparams.COST_BOUNDS, "n_boot", ("--n-boot", 5))
    rng = np.random.default_rng(0)
    pd.DataFrame({"y": np.arange(80) % 2, "p": rng.uniform(size=80), "sex": np.where(np.arange(80) < 40, "F", "M")}
                 ).to_parquet(tmp_path / "p.parquet")
    argv = ["evaluate", "--predictions", "p.parquet", "--label", "y", "--score", "p", "--attribute", "sex",
            "--n-boot", "20", "--out", "r.json"]
    assert main(argv) == 2
    capsys.readouterr()
    assert main([*argv, "--i-know"]) == 0
    assert "--n-boot 20 (bound 5) is above the documented bound (--i-know given): estimated time about" in \
        capsys.readouterr().err
    assert store.read_json(tmp_path / "r.json")["spec"]["n_boot"] == 20 and "i_know" not in \
        store.read_json(tmp_path / "r.json")["spec"]
