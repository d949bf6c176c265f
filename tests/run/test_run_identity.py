"""Run identity is generated from the argument parser: every `benchmark run` option either changes the run id
(it can change a number) or is declared as where/how/what-to-print, so an option added later cannot be forgotten.
Data roots with different data give different ids; a stored config is checked on reuse."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from fairmedbench.benchmark.datasets import export_split
from fairmedbench.benchmark.resolve import resolve_run
from fairmedbench.benchmark.run import RunOutputs
from fairmedbench.cli import _compute_parent, build_parser, run_spec
from tests.datasets.fmb_ds_fixtures import make_nih

BASE = ["--model", "litemedsam", "--weights", "random", "--dataset", "synth-contrast", "--dataset-option", "n=24"]
SEG = [*BASE, "--usage", "sam-prompt"]
LP_DROPOUT = [*BASE, "--usage", "lp", "--hparam", "dropout=0.2"]
LP = [*BASE, "--usage", "lp", "--attribute", "sex"]


def _alternatives(tmp_path: Path) -> dict[str, tuple[list[str], list[str]]]:
    """dest -> (base arguments, the same with this option changed)."""
    split = tmp_path / "split.json"
    export_split("synth-contrast", None, 3, split, n=24)
    return {
        "model": (BASE, [*BASE[2:], "--model", "sam-vit-b"]),
        "dataset": (BASE, [*BASE, "--dataset", "synth-control"]),
        "attributes": (BASE, [*BASE, "--attribute", "sex"]),
        "usage": (BASE, [*BASE, "--usage", "lora"]),
        "mitigation": (BASE, [*BASE, "--mitigation", "groupdro"]),
        "seeds": (BASE, [*BASE, "--seeds", "0,1"]),
        "split_seed": (BASE, [*BASE, "--split-seed", "1"]),
        "split_seeds": (BASE, [*BASE, "--split-seeds", "1"]),
        "eval_datasets": (BASE, [*BASE, "--eval-dataset", "synth-control:n=24:data_seed=3"]),
        "split_file": (BASE, [*BASE, "--split-file", str(split)]),
        "weights": (BASE, [*BASE, "--weights", "random:1"]),
        "profile": (BASE, [*BASE, "--profile", "fairmedfm"]),
        "threshold": (BASE, [*BASE, "--threshold", "val_best_f1"]),
        "n_boot": (BASE, [*BASE, "--n-boot", "100"]),
        "n_perm": (BASE, [*BASE, "--n-perm", "100"]),
        "margin": (BASE, [*BASE, "--margin", "0.05"]),
        "hparams": (BASE, [*BASE, "--hparam", "lr=0.01"]),
        "dataset_options": (BASE, [*BASE, "--dataset-option", "n=25"]),
        "precision": ([*BASE, "--precision", "fp32"], [*BASE, "--precision", "bf16"]),
        "skip_bad": (BASE, [*BASE, "--skip-bad"]),
        "prompt": (SEG, [*SEG, "--prompt", "center"]),
        "mc_samples": (LP_DROPOUT, [*LP_DROPOUT, "--mc-samples", "3"]),
        "train_group_share": (LP, [*LP, "--train-group-share", "0.5"]),
        "share_group": ([*LP, "--train-group-share", "0.5"],
                        [*LP, "--train-group-share", "0.5", "--share-group", "male"]),
        "train_size": ([*LP, "--train-group-share", "0.5"], [*LP, "--train-group-share", "0.5", "--train-size", "4"]),
        "prevalence": (LP, [*LP, "--prevalence", "0.3"]),
        "test_resample": (LP, [*LP, "--test-resample", "balanced:sex"]),
        "prevalence_on": ([*LP, "--prevalence", "0.3"], [*LP, "--prevalence", "0.3", "--prevalence-on", "train"]),
    }


def _run_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    return parser._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]


def _run_id(argv: list[str], data_root: str | None = None) -> str:
    args = _run_parser().parse_args(argv)
    return resolve_run(run_spec(args), data_root=data_root or args.data_root, device="cpu").config.run_id


def test_every_run_option_changes_the_run_id_or_is_declared_harmless(tmp_path: Path) -> None:
    where_how = {a.dest for a in _compute_parent()._actions}
    alternatives = _alternatives(tmp_path)
    dests = {a.dest for a in _run_parser()._actions if a.dest != "help"}
    output_only = {f.name for f in dataclasses.fields(RunOutputs)}
    # --hparam-search chooses hparams on validation and runs with them: the chosen values are in the identity (the
    # run it returns is a plain run with those --hparam values; tests/run/test_hparam_search.py checks the choice)
    chooses = {"hparam_search"}
    undeclared = dests - where_how - output_only - chooses - set(alternatives)
    assert not undeclared, (f"options {sorted(undeclared)} are neither in the run's identity test nor declared "
                            "as where/how (cli._compute_parent) or output-only (run.RunOutputs): add them")
    assert not set(alternatives) & where_how, "an option cannot both change numbers and be declared harmless"
    for dest, (base, changed) in alternatives.items():
        assert _run_id(base) != _run_id(changed), f"--{dest.replace('_', '-')} does not change the run id"


def test_where_and_how_options_keep_the_run_id(tmp_path: Path) -> None:
    base = _run_id(BASE)
    for extra in (["--out", str(tmp_path)], ["--cache-dir", str(tmp_path)], ["--batch-size", "3"],
                  ["--num-workers", "1"], ["--channels-last"], ["--force"], ["--device", "cpu"], ["--json"],
                  ["--report"], ["--no-verify-weights"], ["--i-know"]):
        assert _run_id([*BASE, *extra]) == base, extra


def test_hparam_order_and_defaults_do_not_split_one_run(tmp_path: Path) -> None:
    """The same resolved values give the same id: an explicit default equals the default, key order is free."""
    assert _run_id([*BASE, "--hparam", "lr=0.003"]) == _run_id(BASE)
    a = _run_id([*BASE, "--hparam", "lr=0.01", "--hparam", "epochs=5"])
    b = _run_id([*BASE, "--hparam", "epochs=5", "--hparam", "lr=0.01"])
    assert a == b


def test_data_root_with_other_data_is_another_run(tmp_path: Path) -> None:
    """The reproduction of the issue: the same command on two folders with other data must not share a run id;
    the same data written anew in another folder (other paths, mtimes, inodes) is the same run."""
    a, b, c = make_nih(tmp_path / "a"), make_nih(tmp_path / "b", n_patients=16), make_nih(tmp_path / "c")
    nih = ["--model", "litemedsam", "--weights", "random", "--dataset", "nih-cxr14", "--usage", "lp"]
    assert _run_id(nih, str(a)) != _run_id(nih, str(b))
    assert _run_id(nih, str(a)) == _run_id(nih, str(c))
    assert _run_id(nih, str(a)) == _run_id(nih, str(a))


def _rewrite_keeping_size_and_mtime(path: Path) -> None:
    """Flip one byte of `path` in place and put its mtime back: only the content (and the ctime) changes."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    with open(path, "r+b") as fh:
        fh.write(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


@pytest.mark.parametrize("which", ["image", "metadata", "split list"])
def test_changed_bytes_with_same_size_and_mtime_is_another_run(tmp_path: Path, which: str) -> None:
    """The data fingerprint hashes the bytes of every file read (images, metadata, the official split lists), so
    an edit that keeps size and mtime is a new run id, even with the digest cache warm from the first run."""
    root = make_nih(tmp_path / "a")
    nih = ["--model", "litemedsam", "--weights", "random", "--dataset", "nih-cxr14", "--usage", "lp"]
    before = _run_id(nih, str(root))
    target = {"image": sorted((root / "images").glob("*.png"))[3], "metadata": root / "Data_Entry_2017_v2020.csv",
              "split list": root / "test_list.txt"}[which]
    if which != "image":  # a text file: change a character of a comment-free line without changing its length
        text = target.read_text()
        st = target.stat()
        swapped = text.replace("PA", "AP", 1) if which == "metadata" else text.replace("001.png", "001.PNG", 1)
        with open(target, "r+") as fh:
            fh.write(swapped)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        _rewrite_keeping_size_and_mtime(target)
    assert _run_id(nih, str(root)) != before


def test_real_nih_subsets_give_two_ids(real_data: Path, tmp_path: Path) -> None:
    """Two different subsets of the real NIH images (same official metadata) are two runs."""
    src = real_data / "nih-cxr14"
    images = sorted((src / "images").glob("*.png"))
    meta = pd.read_csv(src / "Data_Entry_2017_v2020.csv.gz")
    ids = []
    for k, chosen in enumerate((images[:40], images[20:60])):
        root = tmp_path / f"subset{k}"
        (root / "images").mkdir(parents=True)
        for p in chosen:
            (root / "images" / p.name).symlink_to(p)
        meta[meta["Image Index"].isin({p.name for p in chosen})].to_csv(root / "Data_Entry_2017_v2020.csv",
                                                                        index=False)
        ids.append(_run_id(["--model", "litemedsam", "--weights", "random", "--dataset", "nih-cxr14",
                            "--usage", "lp"], str(root)))
    assert ids[0] != ids[1]


@pytest.mark.parametrize("argv", [
    [*BASE, "--usage", "sam-prompt", "--mitigation", "groupdro"],
    ["--model", "clip-vit-b32", "--weights", "random", "--dataset", "synth-contrast", "--usage", "clip-zs",
     "--mitigation", "groupdro"],
    [*BASE, "--mitigation", "groupdr0"],
    [*BASE, "--hparam", "lrr=1"],
    [*BASE, "--mitigation", "groupdro", "--hparam", "eta=fast"],
    [*BASE, "--hparam", "select=val_dsc"],
    [*BASE, "--attribute", "ethnicity"],
    [*BASE, "--threshold", "val_fpr"],
    [*SEG, "--prompt", "rands", "--usage", "sam-decoder", "--hparam", "epochs=-1"],
])
def test_bad_requests_fail_before_any_work(argv: list[str], tmp_path: Path, capsys) -> None:
    """Exit 2 with one line, from the names alone (no weights loaded, no features)."""
    from fairmedbench.cli import main

    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("benchmark: error:")
    assert not (tmp_path / "runs").exists()


def _run_in_process(argv: list[str], queue) -> None:  # a child process: one `run` call, report reused or not
    from fairmedbench.benchmark.run import run
    from fairmedbench.cli import run_options

    args = _run_parser().parse_args(argv)
    outcome = run(run_spec(args), run_options(args))
    queue.put((outcome.reused, outcome.config.run_id))


# slow (14 s): tests/models/test_features.py::test_two_processes_at_once_leave_one_complete_entry checks the same
# lock-then-reuse on the feature cache
@pytest.mark.slow
def test_two_identical_runs_started_at_once_compute_once(tmp_path: Path) -> None:
    """The second waits on the run folder's lock, then reuses the first's result."""
    import multiprocessing as mp

    argv = ["--model", "imagenet-resnet50", "--weights", "random", "--dataset", "synth-contrast", "--dataset-option",
            "n=30", "--n-boot", "20", "--hparam", "epochs=5", "--device", "cpu", "--out", str(tmp_path / "r"),
            "--cache-dir", str(tmp_path / "c")]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_run_in_process, args=(argv, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    got = sorted(queue.get(timeout=5) for _ in procs)
    assert [g[0] for g in got] == [False, True], "exactly one computation, one reuse"
    assert got[0][1] == got[1][1]
    assert len(list((tmp_path / "c").rglob("features.npy"))) == 3  # train, val, test extracted once each
    # reuse checks the stored config, not only the id: a folder whose config.json differs is recomputed
    [folder] = list((tmp_path / "r" / "runs").rglob("config.json"))
    doc = json.loads(folder.read_text())
    folder.write_text(json.dumps({**doc, "n_boot": 7}))
    queue2 = ctx.Queue()
    p = ctx.Process(target=_run_in_process, args=(argv, queue2))
    p.start()
    p.join(600)
    assert queue2.get(timeout=5) == (False, got[0][1])
    assert json.loads(folder.read_text()) == doc


def test_prompt_modes_are_separate_runs_with_their_own_numbers(tmp_path: Path) -> None:
    """The issue's reproduction: --prompt rands after --prompt center must not reuse center's result."""
    from fairmedbench.benchmark.run import run
    from fairmedbench.cli import run_options

    outs = []
    for prompt in ("center", "rands"):
        args = _run_parser().parse_args([*SEG, "--dataset-option", "n=12", "--prompt", prompt, "--n-boot", "0",
                                         "--out", str(tmp_path), "--device", "cpu"])
        outs.append(run(run_spec(args), run_options(args)))
    assert outs[0].config.run_id != outs[1].config.run_id and not outs[1].reused
    assert outs[0].out_dir != outs[1].out_dir
    d0, d1 = (pd.read_parquet(o.out_dir / "seed0.predictions.parquet").query("~empty_gt")["dsc"].to_numpy()
              for o in outs)  # prompted samples (an empty mask has a row but no score)
    assert len(d0) == len(d1) > 0 and not (d0 == d1).all()


def test_own_checkpoint_with_another_sha256_needs_the_flag_and_is_recorded(tmp_path: Path, capsys) -> None:
    """A fine-tuned LiteMedSAM file is refused by default (sha256 differs from the card's); with
    --no-verify-weights it is accepted and its own sha256 is the run's weights identity."""
    from fairmedbench.cli import main
    from fairmedbench.engine.store import sha256_file

    ckpt = tmp_path / "my_lite_medsam.pth"
    ckpt.write_bytes(b"not the published weights")
    argv = ["--model", "litemedsam", "--weights", str(ckpt), "--dataset", "synth-contrast", "--dataset-option",
            "n=24"]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert "--no-verify-weights" in capsys.readouterr().err
    args = _run_parser().parse_args([*argv, "--no-verify-weights"])
    config = resolve_run(run_spec(args), verify_weights=args.verify_weights, device="cpu").config
    assert config.weights == sha256_file(ckpt)


def test_kill_9_during_feature_extraction_then_rerun_completes_with_no_staging_left(tmp_path: Path) -> None:
    """The issue's acceptance: SIGKILL while features are being written, rerun the same command: it finishes,
    and no `.tmp-*` staging folder is left in the cache or the results."""
    import os
    import signal
    import subprocess
    import sys
    import time

    # random-weight ResNet-18: its 20 batches of 4 still take seconds to stage, the kill comes within 0.05 s
    argv = [sys.executable, "-m", "fairmedbench", "--model", "moco-cxr", "--weights", "random", "--dataset",
            "synth-contrast", "--dataset-option", "n=80", "--n-boot", "0", "--hparam", "epochs=3", "--device", "cpu",
            "--batch-size", "4", "--out", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"), "--json"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list((tmp_path / "c").rglob(".tmp-*")):
        time.sleep(0.05)  # poll until extraction has staged its first batch
    assert list((tmp_path / "c").rglob(".tmp-*")), "extraction never started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list((tmp_path / "c").rglob(".tmp-*")), "the kill left the staging folder (what the rerun must clean)"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["across_seeds"]
    assert not list(tmp_path.rglob(".tmp-*")) and not list(tmp_path.rglob("*.tmp"))
