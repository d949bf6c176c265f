"""Real `run-suite` output, two models, submitted and built into a board; the synthetic pins are current."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairmedbench.benchmark.datasets import load_with_split
from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.benchmark.run import RunOptions
from fairmedbench.benchmark.suite import run_suite
from fairmedbench.leaderboards import suites
from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, get_suite, register_suite


@pytest.mark.parametrize("board", ["synthetic", "synthetic-seg", "synthetic-multiclass"])
def test_synthetic_suite_pins_match_the_generator(board: str) -> None:
    for e in get_suite(board).entries:
        _, split = load_with_split(e.dataset, None, seed=0, **e.dataset_options)
        assert (split.fingerprint, suites.test_fingerprint(split.ids["test"]), len(split.ids["test"])) == (
            e.split_fingerprint, e.test_fingerprint, e.n_test), f"regenerate the pins of {board} and bump its version"


def _mini_suite() -> Suite:
    if "mini-e2e" not in SUITES:
        entries = []
        for d in ("synth-control", "synth-contrast"):
            _, split = load_with_split(d, None, seed=0, n=30)
            entries.append(Entry(d, ("sex",), "lp", seeds=(0,), split_fingerprint=split.fingerprint,
                                 test_fingerprint=suites.test_fingerprint(split.ids["test"]),
                                 n_test=len(split.ids["test"]), options=(("n", 30),)))
        register_suite(Suite("mini-e2e", "1.0", "test suite: two tiny synthetic entries", tuple(entries)))
    return get_suite("mini-e2e")


@pytest.mark.slow  # 34 s; test_tampered_run_suite_bundle_is_rejected runs run-suite and submit, test_board.py the build
def test_two_models_run_the_suite_submit_and_build(tmp_path: Path) -> None:
    _mini_suite()
    opts = RunOptions(out_root=str(tmp_path / "results"), cache_dir=str(tmp_path / "cache"), device="cpu")
    boards = tmp_path / "leaderboards"
    for model, revision in (("imagenet-resnet50", None), ("imagenet-vit-b16", "<script>alert(1)</script>")):
        bundle = run_suite("mini-e2e", model, tmp_path / f"bundle-{model}", opts, weights="random", n_boot=20,
                           revision=revision)
        outcome = submit_bundle(bundle, "mini-e2e", boards)
        assert outcome.accepted, outcome.lines()
    paths = build_board("mini-e2e", boards)
    page = Path(paths["html"]).read_text()
    assert "imagenet-resnet50" in page and "imagenet-vit-b16" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "imagenet-resnet50" in Path(paths["markdown"]).read_text()


def test_tampered_run_suite_bundle_is_rejected(tmp_path: Path) -> None:
    import json

    _mini_suite()
    opts = RunOptions(out_root=str(tmp_path / "results"), cache_dir=str(tmp_path / "cache"), device="cpu")
    bundle = run_suite("mini-e2e", "moco-cxr", tmp_path / "bundle", opts, weights="random", n_boot=20)
    doc_path = next((bundle / "results").rglob("seed0.json"))
    doc = json.loads(doc_path.read_text())
    cell = doc["result"]["reports"][0]["metrics"]["auc"]["__overall__"]
    cell["value"] += 0.05 if cell["value"] < 0.5 else -0.05  # a real edit even where the AUC is 1
    doc_path.write_text(json.dumps(doc))
    outcome = submit_bundle(bundle, "mini-e2e", tmp_path / "boards")
    assert not outcome.accepted and any("auc" in r for r in outcome.reasons)
    assert not (tmp_path / "boards" / "mini-e2e" / "submissions").exists() or not any(
        (tmp_path / "boards" / "mini-e2e" / "submissions").rglob("*.json"))
