"""`benchmark sweep`: the smoke study locally and on a local Ray cluster (same run ids, same result JSON apart
from timings), one encode per (model, dataset), --status, resume after kill -9, an unreachable --address, the
fairmedfm dry-run without the data, and the cost estimate."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from numbers_support import differences

from fairmedbench.benchmark import costs, sweep
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.benchmark.studies import load_study
from fairmedbench.cli import main
from fairmedbench.engine import flops

REPO = Path(__file__).resolve().parents[2]
VOLATILE = {"timings_s", "created_at", "git_commit", "seconds"}  # differ between any two computations
# environment.compute records the threads a run computed with: a Ray worker has one, a local run every core


def _opts(out: Path, cache: Path, **kw: Any) -> RunOptions:
    return RunOptions(out_root=str(out), cache_dir=str(cache), device="cpu", batch_size=8, **kw)


def _stable(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _stable(v) for k, v in doc.items() if k not in VOLATILE and k != "compute"}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def _results(out: Path) -> dict[str, dict[str, Any]]:
    """run id -> {file name: JSON without timings} for every run folder under `out`."""
    found = {}
    for summary in (out / "runs").glob("*/*/*/*/summary.json"):
        found[summary.parent.name] = {p.name: _stable(json.loads(p.read_text())) for p in summary.parent.glob("*.json")}
    return found


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, sweep.SweepResult]:
    """The smoke study run once with the local launcher (its feature cache is shared by the other tests)."""
    root = tmp_path_factory.mktemp("sweep")
    lines: list[str] = []
    result = sweep.sweep(load_study("smoke"), _opts(root / "local", root / "cache"), report=lines.append)
    return root, root / "local", result


def test_local_sweep_runs_every_cell_once_with_one_encode_per_model_and_dataset(local) -> None:
    root, out, result = local
    plan = json.loads((out / "studies/smoke/plan.json").read_text())
    run_cells = [c for c in plan["cells"] if c["status"] != "skipped"]
    pairs = {(c["cell"]["model"], c["cell"]["dataset"]) for c in run_cells}
    assert result.encodes == len(pairs) == 4
    assert (result.ran, result.reused, result.failed) == (8, 0, [])
    assert [c["status"] for c in run_cells] == ["done"] * 8 and len(plan["cells"]) == 16
    assert all(c["reason"] and c["run_id"] is None for c in plan["cells"] if c["status"] == "skipped")
    assert plan["study"] == "smoke" and len(plan["study_sha256"]) == 64
    assert set(plan["cells"][0]["cell"]) == {"model", "dataset", "usage", "mitigation", "prompt", "attributes",
                                             "seeds", "hparams", "train_group_share", "share_group", "train_size",
                                             "prevalence", "prevalence_on"}
    for c in run_cells:
        folder = out / c["run_dir"]
        assert folder.name == c["run_id"] and (folder / "summary.json").is_file()
        journal = json.loads((out / "studies/smoke/state" / f"{c['run_id']}.json").read_text())
        assert (journal["status"], journal["kind"], journal["error"]) == ("done", "run", None)
        seed = json.loads((folder / "seed0.json").read_text())
        # every run read its features from the cache its encode filled: no run extracted anything
        assert all(f["from_cache"] for f in seed["usage"]["features"].values())
    encodes = sorted((out / "studies/smoke/state").glob("encode-*.json"))
    assert len(encodes) == 4 and {c["encode"] for c in run_cells} == {p.stem[len("encode-"):] for p in encodes}


def test_a_rerun_reuses_every_finished_run_and_encodes_nothing(local) -> None:
    root, out, _ = local
    again = sweep.sweep(load_study("smoke"), _opts(out, root / "cache"), report=lambda m: None)
    assert (again.encodes, again.ran, again.failed) == (0, 0, [])
    assert sum(c.status == "done" for c in again.plan.cells) == 8


def test_status_shows_done_and_skipped_with_reasons(local, capsys: pytest.CaptureFixture[str]) -> None:
    root, out, _ = local
    assert main(["sweep", "smoke", "--status", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "8 done, 0 running, 0 stale, 0 failed, 0 planned, 8 skipped" in text
    assert "4 x usage 'clip-zs' cannot run here: model 'imagenet-resnet50' can encode_image" in text
    assert text.count(" / lp / ") == 8


def test_study_report_command_writes_the_table_figures_and_page(local, capsys: pytest.CaptureFixture[str]) -> None:
    """`benchmark study report smoke` on the swept study: one table row set per finished run, figures, a page."""
    import pandas as pd

    root, out, _ = local
    assert main(["study", "report", "smoke", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    report = out / "studies/smoke/report"
    table = pd.read_parquet(report / "study.parquet")
    assert table["run_id"].nunique() == 8 and f"table: {report / 'study.parquet'} ({len(table)} rows" in text
    assert (report / "study.html").is_file() and any(report.glob("figures/*.svg"))
    assert main(["study", "report", "imbalance", "--out", str(out)]) == 2  # never swept here: says to sweep first


def _ray_matches_local(local, study: Any, folder: str, encodes: int, runs: int) -> None:
    """`study` swept on a local 2-CPU Ray cluster: `encodes` encodes and `runs` runs, each with the JSON the local
    smoke sweep wrote for the same run id (its cells are smoke's, so their run ids are too)."""
    root, out, _ = local
    lines: list[str] = []
    ray_result = sweep.sweep(study, _opts(root / folder, root / "cache"), launcher="ray", max_parallel=2,
                             report=lines.append)
    assert (ray_result.encodes, ray_result.ran, ray_result.failed) == (encodes, runs, [])
    local_runs, ray_runs = _results(out), _results(root / folder)
    assert len(ray_runs) == runs and set(ray_runs) <= set(local_runs)
    for run_id, files in ray_runs.items():  # bit-identical on this AMD EPYC; within the kernel tolerance anywhere
        assert differences(local_runs[run_id], files) == [], run_id
    assert any("done: run" in line for line in lines)


def _smoke_on_contrast(folder: Path) -> Path:
    """smoke.yaml with its synth-contrast cells only (both encoders, both mitigations: 2 encodes, 4 runs, half of
    smoke's), written as `folder`/smoke-contrast.yaml: the same run ids as the local smoke sweep's."""
    text = Path(load_study("smoke").source).read_text()
    assert "datasets: [synth-control, synth-contrast]\n" in text
    study = folder / "smoke-contrast.yaml"
    study.write_text(text.replace("datasets: [synth-control, synth-contrast]\n", "datasets: [synth-contrast]\n"))
    return study


def test_ray_launcher_gives_the_local_results(local, tmp_path: Path) -> None:
    """Smoke's synth-contrast cells on Ray match the local sweep's; the whole smoke study on Ray is
    test_ray_launcher_gives_the_local_results_for_all_of_smoke (slow)."""
    _ray_matches_local(local, load_study(str(_smoke_on_contrast(tmp_path))), "ray-contrast", encodes=2, runs=4)


# slow: the same check on all 8 of smoke's runs (4 encodes); test_ray_launcher_gives_the_local_results runs half
@pytest.mark.slow
def test_ray_launcher_gives_the_local_results_for_all_of_smoke(local) -> None:
    _ray_matches_local(local, load_study("smoke"), "ray", encodes=4, runs=8)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_address_is_a_clear_error(tmp_path: Path) -> None:
    port = _free_port()  # closed again: nothing listens there
    proc = subprocess.run([sys.executable, "-m", "fairmedbench", "sweep", "smoke", "--launcher", "ray", "--address",
                           f"127.0.0.1:{port}", "--out", str(tmp_path)], capture_output=True, text=True, timeout=10,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2
    assert f"cannot reach a Ray cluster at 127.0.0.1:{port}" in proc.stderr
    with pytest.raises(Exception, match="--address names a Ray cluster"):
        sweep.sweep(load_study("smoke"), _opts(tmp_path, tmp_path), address="10.0.0.1:6379")


def test_kill_9_of_the_driver_then_rerun_finishes_the_missing_runs_only(local, tmp_path: Path) -> None:
    """On smoke's synth-contrast cells (4 runs; a run takes seconds, the journal is polled every 0.2 s)."""
    root, _, _ = local
    out = tmp_path / "out"
    study_file = _smoke_on_contrast(tmp_path)
    state = out / "studies/smoke-contrast/state"
    cmd = [sys.executable, "-m", "fairmedbench", "sweep", str(study_file), "--out", str(out), "--cache-dir",
           str(root / "cache"), "--device", "cpu", "--batch-size", "8"]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    first = None
    deadline = time.monotonic() + 300
    while first is None and time.monotonic() < deadline and proc.poll() is None:
        for journal in state.glob("[0-9a-f]*.json") if state.is_dir() else []:
            doc = json.loads(journal.read_text())
            if doc["kind"] == "run" and doc["status"] == "done":
                first = doc
                break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first is not None, "the sweep finished no run before the deadline"
    first_dir = next((out / "runs").glob(f"*/*/*/{first['task']}"))
    first_seed = (first_dir / "seed0.json").read_bytes()
    status = sweep.read_status(out, "smoke-contrast")
    assert sum(c["status"] == "done" for c in status["cells"]) < 4  # killed midway
    assert not any(c["status"] == "running" for c in status["cells"])  # a dead driver's entry is stale, not running

    study = load_study(str(study_file))
    result = sweep.sweep(study, _opts(out, root / "cache"), max_parallel=2, report=lambda m: None)
    assert result.failed == [] and result.ran + result.reused == len(result.plan.runs)
    assert first["task"] not in result.plan.runs  # complete in the store: planned as done, not run again
    assert (first_dir / "seed0.json").read_bytes() == first_seed
    folders = list((out / "runs").glob("*/*/*/*"))
    assert len(folders) == 4
    for folder in folders:  # exactly one complete result each, nothing partial left behind
        names = sorted(p.name for p in folder.iterdir())
        assert names == [".lock", "config.json", "seed0.json", "seed0.predictions.parquet", "summary.json"], names
    assert sweep.render_status(sweep.read_status(out, "smoke-contrast")).startswith(
        f"study smoke-contrast ({study.source}): 4 done, 0 running, 0 stale, 0 failed")
    killed, whole = _results(out), _results(local[1])
    assert len(killed) == 4 and killed == {k: whole[k] for k in killed}


def test_fairmedfm_dry_run_lists_every_run_with_skip_reasons_and_a_cost(tmp_path: Path, monkeypatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # fixed rates (the measurements themselves are tested below) so the estimate's arithmetic can be checked
    monkeypatch.setattr(costs, "model_flops", lambda name: {"gflops": 2.0, "how": "counted", "params": 1})
    monkeypatch.setattr(costs, "encoder_rate", lambda d, p: {"gflops_per_s": 4.0, "how": "fixed"})
    monkeypatch.setattr(costs, "head_rate", lambda d: {"s_per_unit": 1e-6, "how": "fixed"})
    for var in [v for v in os.environ if v.startswith("FMB_DATA")]:
        monkeypatch.delenv(var)
    assert main(["sweep", "fairmedfm", "--dry-run", "--out", str(tmp_path), "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    study = load_study("fairmedfm")
    from fairmedbench.benchmark.studies import expand

    cells = expand(study)
    n_run = sum(c.runnable for c in cells)
    assert f"cells: {len(cells)} = {n_run} runnable + {len(cells) - n_run} skipped" in text
    assert f"runs: {n_run} runnable; 0 done in the store, 0 to compute, {n_run} not resolvable here" in text
    listed = [line for line in text.splitlines() if line.startswith("  -  ")]
    assert len(listed) == n_run and all("[cannot resolve: " in line for line in listed)
    assert all("data absent" in line or "not found" in line for line in listed)  # the data's absence, per cell
    assert "takes 3D volumes; dataset 'harvard-fairseg' is 2D" in text
    for usage, mitigation in (("lora", "groupdro"), ("lora", "adversarial"), ("samed", "febs"), ("samed", "ind")):
        assert any(f" / {usage} / {mitigation}" in line for line in listed), (usage, mitigation)
    assert "needs encode_image, encode_text" in text
    assert not (tmp_path / "studies").exists()  # a dry run writes nothing
    assert f"{n_run} runs whose data is absent (size unknown), costed as if each dataset had 1000 images" in text
    assert "500.0 s per 1000 images" in text  # 2 GFLOP / 4 GFLOP/s = 0.5 s per image


def test_cost_estimate_of_the_smoke_plan_by_hand(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(costs, "model_flops", lambda name: {"gflops": 2.0, "how": "counted", "params": 1})
    monkeypatch.setattr(costs, "encoder_rate", lambda d, p: {"gflops_per_s": 4.0, "how": "fixed"})
    monkeypatch.setattr(costs, "head_rate", lambda d: {"s_per_unit": 1e-6, "how": "fixed"})
    monkeypatch.setattr(costs, "resample_rate", lambda: {"boot_s_per_row": 1e-6, "perm_s_per_row": 2e-6,
                                                         "how": "fixed"})
    plan = sweep.make_plan(load_study("smoke"), _opts(tmp_path, tmp_path))
    est = costs.estimate(plan, "cpu", "fp32")
    # 4 encodes of 40 images at 0.5 s; 8 heads: 1 seed x 5 epochs x 20 train x features x 1e-6 s, with 512
    # features (moco-cxr, ResNet-18) for 4 and 2048 (ResNet-50) for the other 4; and the bootstrap and permutation
    # tests of 8 runs: 1 seed x 1 attribute x 12 test rows x (20 resamples x 1e-6 + 1000 permutations x 2e-6) s
    assert est["counted"] == {"measured": 8, "assumed": 0, "unknown": 0}
    resampling = 8 * 1 * 1 * 12 * (20 * 1e-6 + 1000 * 2e-6)
    assert est["resampling"]["measured"] == pytest.approx(resampling) == pytest.approx(0.19392)
    assert est["totals"]["measured"] == pytest.approx(4 * 40 * 0.5 + 4 * 5 * 20 * (512 + 2048) * 1e-6 + resampling)
    assert est["by_usage"] == {"lp": pytest.approx(est["totals"]["measured"])}


def test_resampling_cost_is_rows_times_resamples_at_the_measured_rates() -> None:
    rate = {"boot_s_per_row": 3e-7, "perm_s_per_row": 5e-7}
    # 3 fits x 2 pairs x 1000 rows x (100 x 3e-7 + 50 x 5e-7) s = 6000 x 5.5e-5 s = 0.33 s
    assert costs.resampling_seconds(3, 2, 1000, 100, 50, rate) == pytest.approx(0.33)
    assert costs.resampling_seconds(3, 2, 1000, 0, 0, rate) == 0.0


BIG_STUDY = """models: [moco-cxr]
datasets: [synth-control]
attributes: [sex]
usages: [lp]
seeds: "0-24"
hparams: {epochs: 5}
n_boot: 100000
n_perm: 0
weights: random
precision: fp32
dataset_options:
  n: 40
  config: {size: 64, split_fractions: [0.5, 0.2, 0.3]}
"""


def _fixed_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(costs, "model_flops", lambda name: {"gflops": 2.0, "how": "counted", "params": 1})
    monkeypatch.setattr(costs, "encoder_rate", lambda d, p: {"gflops_per_s": 4.0, "how": "fixed"})
    monkeypatch.setattr(costs, "head_rate", lambda d: {"s_per_unit": 1e-6, "how": "fixed"})
    monkeypatch.setattr(costs, "resample_rate", lambda: {"boot_s_per_row": 1e-6, "perm_s_per_row": 2e-6,
                                                         "how": "fixed rates"})


def test_a_study_above_the_cost_bounds_needs_i_know_and_its_estimate_counts_the_bootstrap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """25 seeds and n_boot 100000 in a study YAML: refused like --seeds/--n-boot on the command line, with the
    estimate: an encode of 40 images x 0.5 s = 20 s, 25 seeds x 5 epochs x 20 train x 512 features x 1e-6 s =
    1.28 s of training, and 25 seeds x 1 pair x 12 test rows x 100000 resamples x 1e-6 s = 30 s of bootstrap."""
    _fixed_rates(monkeypatch)
    study = tmp_path / "big.yaml"
    study.write_text(BIG_STUDY)
    ran: list[dict] = []
    monkeypatch.setattr(sweep, "_run_local", lambda enc, runs, options, *a, **k: ran.append(options) or {})
    out = tmp_path / "o"
    assert main(["sweep", str(study), "--out", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("benchmark: error: --seeds 25 (bound 20), --n-boot 100000 (bound 10,000), --seeds x "
                              "--n-boot = 2,500,000 bootstrap resamples (bound 200,000) is above the documented bound")
    assert "estimated time about 51 s for 1 runs, of which 30 s are bootstrap and permutation tests" in err[-1]
    assert err[-1].endswith("add --i-know to run it anyway, or ask for less")
    assert all(line.startswith(("plan study", "estimate study")) for line in err[:-1])  # progress only
    assert ran == [] and not (out / "studies").exists()
    # the dry run shows the bootstrap's share and the bound; --i-know sweeps, and every task gets it
    assert main(["sweep", str(study), "--out", str(out), "--device", "cpu", "--dry-run"]) == 0
    text, err = capsys.readouterr()
    assert "plan study big: cells resolved: 1/1" in err and "estimate study big: runs costed: 1/1" in err
    assert "of which bootstrap and permutation tests (100000 resamples and 0 permutations x test rows x " \
           "task-attribute pairs x seeds, at fixed rates): 30 s" in text
    assert "above the documented bound: --seeds 25 (bound 20), --n-boot 100000 (bound 10,000)" in text
    main(["sweep", str(study), "--out", str(out), "--device", "cpu", "--i-know"])
    assert "is above the documented bound (--i-know given): estimated time about 51 s" in capsys.readouterr().err
    assert len(ran) == 1 and ran[0]["i_know"] is True


def test_encoder_flops_are_counted_on_the_meta_device(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(flops, "CACHE", tmp_path / "costs.json")
    got = flops.model_flops("c2l")
    # ResNet-18 at 224 px: 1.82 GMACs (torchvision's table) = 3.64 GFLOPs, +/- the pooling and the stem
    assert got["how"] == "counted" and got["gflops"] == pytest.approx(3.64, rel=0.02)
    assert got["params"] == 11_176_512  # ResNet-18 without its fc layer
    assert json.loads((tmp_path / "costs.json").read_text())[next(iter(json.loads(
        (tmp_path / "costs.json").read_text())))]["gflops"] == got["gflops"]


@pytest.mark.parametrize("name", ["litemedsam", "sam-vit-b"])
def test_sam_family_encoder_flops_are_counted_not_guessed(tmp_path: Path, monkeypatch, name: str) -> None:
    """A SAM-family encoder's forward runs on the meta device (its map memo is skipped there), so the cost model
    counts its FLOPs instead of falling back to 2 x params x patches (0.2 s/image for LiteMedSAM, >10x too low)."""
    monkeypatch.setattr(flops, "CACHE", tmp_path / "costs.json")
    got = flops.model_flops(name)
    assert got["how"] == "counted" and got["gflops"] > 50  # LiteMedSAM 74.9, SAM ViT-B 972 GFLOP per image


@pytest.mark.slow
def test_litemedsam_cost_model_matches_a_measured_forward_within_2x(tmp_path: Path, monkeypatch) -> None:
    """The meta-device count against FLOPs counted on a real CPU forward of one image (random weights)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from fairmedbench.registry.models import load_model

    monkeypatch.setattr(flops, "CACHE", tmp_path / "costs.json")
    est = flops.model_flops("litemedsam")["gflops"]
    model = load_model("litemedsam", "random", device="cpu")
    size = model.card.preprocessing.size
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model.encode_image(torch.rand(1, 3, size, size))
    measured = counter.get_total_flops() / 1e9
    assert 0.5 <= est / measured <= 2.0
    assert measured == pytest.approx(75.0, rel=0.05)  # 74.9 GFLOP per 256 x 256 image, counted here


def test_a_failed_run_is_recorded_and_the_study_goes_on(local, tmp_path: Path, monkeypatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import fairmedbench.benchmark.run as run_module

    real = run_module.run

    def flaky(spec, opts):
        if spec.mitigation == "groupdro":
            raise RuntimeError("out of memory (simulated)")
        return real(spec, opts)

    monkeypatch.setattr(run_module, "run", flaky)
    root = local[0]
    rc = main(["sweep", "smoke", "--out", str(tmp_path), "--cache-dir", str(root / "cache"), "--device", "cpu",
               "--batch-size", "8"])
    assert rc == 1
    plan = json.loads((tmp_path / "studies/smoke/plan.json").read_text())
    statuses = {(c["cell"]["model"], c["cell"]["dataset"], c["cell"]["mitigation"]): (c["status"], c["error"])
                for c in plan["cells"] if c["status"] != "skipped"}
    assert {k: v for k, v in statuses.items() if k[2] == "erm"} == {
        (m, d, "erm"): ("done", None)
        for m in ("moco-cxr", "imagenet-resnet50") for d in ("synth-control", "synth-contrast")}
    assert all(v == ("failed", "RuntimeError: out of memory (simulated)") for k, v in statuses.items()
               if k[2] == "groupdro")
    failed = [c for c in plan["cells"] if c["status"] == "failed"]
    journal = json.loads((tmp_path / "studies/smoke/state" / f"{failed[0]['run_id']}.json").read_text())
    assert journal["status"] == "failed" and "raise RuntimeError" in journal["traceback"]
    capsys.readouterr()
    assert main(["sweep", "smoke", "--status", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "4 done, 0 running, 0 stale, 4 failed" in text and "out of memory (simulated)" in text


@pytest.mark.slow
def test_kill_9_of_a_worker_fails_its_task_then_a_rerun_finishes(local, tmp_path: Path) -> None:
    root = local[0]
    out, state = tmp_path / "out", tmp_path / "out/studies/smoke/state"
    cmd = [sys.executable, "-m", "fairmedbench", "sweep", "smoke", "--out", str(out), "--cache-dir",
           str(root / "cache"), "--device", "cpu", "--batch-size", "8", "--max-parallel", "2"]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        for journal in state.glob("[0-9a-f]*.json") if state.is_dir() else []:
            doc = json.loads(journal.read_text())
            if doc["status"] == "running" and doc["pid"] != proc.pid:
                victim = doc
                break
        time.sleep(0.05)
    assert victim is not None, "no run was seen running in a worker"
    os.kill(victim["pid"], signal.SIGKILL)
    assert proc.wait(timeout=300) == 1  # the driver records the dead worker's task as failed and ends
    result = sweep.sweep(load_study("smoke"), _opts(out, root / "cache"), report=lambda m: None)
    assert result.failed == [] and result.ran >= 1
    assert _results(out) == _results(local[1])


def test_ray_resources_follow_the_task_and_the_cluster() -> None:
    from fairmedbench.spec import RunSpec

    lp, seg = RunSpec(model="c2l", dataset="synth-control", usage="lp"), RunSpec(
        model="litemedsam", dataset="synth-control", usage="sam-prompt")
    assert sweep._ray_resources("run", lp, has_gpu=False) == {"num_cpus": 1, "num_gpus": 0}
    assert sweep._ray_resources("encode", lp, has_gpu=True) == {"num_cpus": 1, "num_gpus": 1.0}
    assert sweep._ray_resources("run", lp, has_gpu=True) == {"num_cpus": 1, "num_gpus": 0.25}  # cached features
    assert sweep._ray_resources("run", seg, has_gpu=True) == {"num_cpus": 1, "num_gpus": 1.0}  # pixels through the FM


@pytest.mark.parametrize("address", ["localhost", "10.0.0.1:port", "ray://nohost"])
def test_a_malformed_address_is_refused(address: str) -> None:
    from fairmedbench.errors import InputError

    with pytest.raises(InputError, match="expected HOST:PORT"):
        sweep.check_address(address)


def test_the_group_share_axis_reaches_each_run(local, tmp_path: Path) -> None:
    root = local[0]
    study_file = tmp_path / "shares.yaml"
    study_file.write_text("""
models: [c2l]
datasets: [synth-control]
attributes: [sex]
usages: [lp]
train_group_share: [0, 1]
share_group: female
train_size: 8
hparams: {epochs: 5}
weights: random
n_boot: 20
dataset_options:
  n: 40
  config: {size: 64, split_fractions: [0.5, 0.2, 0.3]}
""")
    result = sweep.sweep(load_study(str(study_file)), _opts(tmp_path / "out", root / "cache"), report=lambda m: None)
    assert (result.encodes, result.ran, result.failed) == (1, 2, [])  # one encode serves both shares
    plan = json.loads((tmp_path / "out/studies/shares/plan.json").read_text())
    for cell in plan["cells"]:
        seed = json.loads((tmp_path / "out" / cell["run_dir"] / "seed0.json").read_text())
        assert seed["spec"]["sampling"]["train_group_share"] == cell["cell"]["train_group_share"]
        assert (seed["spec"]["sampling"]["share_group"], seed["spec"]["sampling"]["train_size"]) == ("female", 8)
        assert all(f["from_cache"] for f in seed["usage"]["features"].values())
    assert len({c["run_id"] for c in plan["cells"]}) == 2
