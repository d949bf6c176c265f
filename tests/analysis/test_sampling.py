"""Study sampling: a group's share of a fixed-size training set and an imposed prevalence per group, drawn
exactly, seeded per run seed, refused with a reason when the data cannot hold it; and end to end in a run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fairmedbench.analysis.sampling import Sampling, check_request, describe, draw, resolve
from fairmedbench.errors import InputError
from fairmedbench.tasks.base import get_task


def _table(n_a: int = 40, n_b: int = 20) -> tuple[np.ndarray, np.ndarray]:
    groups = np.array(["a"] * n_a + ["b"] * n_b + [None] * 5, dtype=object)
    labels = np.array([i % 2 for i in range(n_a)] + [int(i % 4 == 0) for i in range(n_b)] + [0] * 5)
    return groups, labels


def test_share_defaults_to_the_smallest_group_and_the_largest_size_every_share_fits() -> None:
    groups, _ = _table()
    s = resolve(0.25, None, None, None, "test", groups, np.arange(len(groups)))
    assert (s.share_group, s.train_size) == ("b", 20)  # min(20 b, 40 a)
    assert s.identity() == {"train_group_share": 0.25, "share_group": "b", "train_size": 20}


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 1.0])
def test_share_draw_is_exact(share: float) -> None:
    groups, labels = _table()
    pos = {"train": np.arange(len(groups)), "val": np.arange(3), "test": np.arange(4)}
    s = resolve(share, None, None, None, "test", groups, pos["train"])
    keep = draw(s, pos, groups, labels, split_seed=0, seed=1)
    chosen = groups[pos["train"][keep["train"]]]
    assert len(chosen) == 20 and int(np.sum(chosen == "b")) == round(share * 20)
    assert None not in set(chosen)  # samples without a group are not drawn
    assert len(keep["val"]) == 3 and len(keep["test"]) == 4  # other splits untouched
    again = draw(s, pos, groups, labels, split_seed=0, seed=1)["train"]
    other_seed = draw(s, pos, groups, labels, split_seed=0, seed=2)["train"]
    assert np.array_equal(keep["train"], again)
    assert share in (0.0, 1.0) or not np.array_equal(keep["train"], other_seed)


def test_prevalence_is_imposed_in_every_group() -> None:
    groups, labels = _table()
    pos = {"train": np.arange(0), "val": np.arange(0), "test": np.arange(len(groups) - 5)}
    s = resolve(None, None, None, 0.2, "test", groups, pos["train"])
    keep = draw(s, pos, groups, labels, split_seed=0, seed=0)
    info = describe(keep, pos, groups, labels)["test"]["by_group"]
    # a: 20 pos / 20 neg -> n = floor(min(20/0.2, 20/0.8)) = 25, 5 positives; b: 5 pos / 15 neg -> n = 18, 4 pos
    assert info["a"] == {"n": 25, "n_pos": 5, "prevalence": 0.2}
    assert info["b"]["n"] == 18 and info["b"]["n_pos"] == 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(share=1.5), r"in \[0, 1\]"),
    (dict(share=0.5, attributes=()), "needs an attribute"),
    (dict(share_group="a"), "go with --train-group-share"),
    (dict(prevalence=1.0), "strictly between 0 and 1"),
    (dict(prevalence=0.3, prevalence_on="val"), "must be one of"),
    (dict(share=0.5, prevalence=0.3, prevalence_on="train"), "both resample the training set"),
    (dict(share=0.5, task="segmentation"), "classification"),
])
def test_bad_requests(kwargs: dict, message: str) -> None:
    args = dict(share=None, share_group=None, train_size=None, prevalence=None, prevalence_on="test",
                attributes=("sex",), task="classification")
    args.update(kwargs)
    with pytest.raises(InputError, match=message):
        check_request(args["share"], args["share_group"], args["train_size"], args["prevalence"],
                      args["prevalence_on"], args["attributes"], get_task(args["task"]))


def test_infeasible_sizes_say_what_fits() -> None:
    groups, _ = _table()
    with pytest.raises(InputError, match="Use --train-size 20 or less"):
        resolve(1.0, None, 30, None, "test", groups, np.arange(len(groups)))
    with pytest.raises(InputError, match="not a group"):
        resolve(0.5, "c", None, None, "test", groups, np.arange(len(groups)))
    with pytest.raises(InputError, match="too few"):
        draw(Sampling(prevalence=0.5, prevalence_on="test"), {"test": np.arange(3)},
             np.array(["a", "a", "a"], dtype=object), np.array([0, 0, 0]), 0, 0)


@pytest.fixture(scope="module")
def feature_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One feature cache for this file's runs: they all encode the same 60 synth-contrast images with the same
    random-weight ResNet-18 (moco-cxr; what is drawn does not depend on the encoder)."""
    return tmp_path_factory.mktemp("sampling-cache")


def test_a_run_trains_on_the_drawn_share(tmp_path: Path, feature_cache: Path) -> None:
    """End to end: the run's training set has the requested size and share; the result records the draw."""
    from fairmedbench.benchmark.run import RunOptions, run
    from fairmedbench.spec import RunSpec

    spec = RunSpec(model="moco-cxr", dataset="synth-contrast", weights="random", usage="lp",
                   attributes=("sex",), n_boot=0, hparams={"epochs": 2}, dataset_options={"n": 60},
                   train_group_share=0.25, train_size=8, seeds=(0, 1))
    out = run(spec, RunOptions(out_root=str(tmp_path / "r"), cache_dir=str(feature_cache), device="cpu"))
    assert out.config.sampling == {"train_group_share": 0.25, "share_group": out.config.sampling["share_group"],
                                   "train_size": 8}
    for doc in out.seed_docs:
        train = doc["sampling"]["splits"]["train"]
        assert train["n"] == 8
        assert train["by_group"][out.config.sampling["share_group"]]["n"] == 2
    other = run(spec.__class__(**{**spec.__dict__, "train_group_share": 0.75}),
                RunOptions(out_root=str(tmp_path / "r"), cache_dir=str(feature_cache), device="cpu"))
    assert other.config.run_id != out.config.run_id


def test_a_run_reports_a_resampled_test_set_beside_the_original(tmp_path: Path, feature_cache: Path) -> None:
    """--test-resample balanced:sex: equal group sizes in the second test set, its ids stored, its own result."""
    from fairmedbench.benchmark.run import RunOptions, run
    from fairmedbench.spec import RunSpec

    spec = RunSpec(model="moco-cxr", dataset="synth-contrast", weights="random", usage="lp",
                   attributes=("sex", "age"), n_boot=0, hparams={"epochs": 2}, dataset_options={"n": 60},
                   test_resample="balanced: sex")
    out = run(spec, RunOptions(out_root=str(tmp_path / "r"), cache_dir=str(feature_cache), device="cpu"))
    assert out.config.sampling == {"test_resample": "balanced:sex"}  # one spelling, one run id
    block = out.seed_docs[0]["test_resample"]
    sizes = {g: c["n"] for g, c in block["counts"].items()}
    assert len(set(sizes.values())) == 1 and sum(sizes.values()) == len(block["ids"])
    sex = [r for r in block["result"]["reports"] if r["attribute"] == "sex"][0]
    assert sex["counts"]["female"]["n"] == sex["counts"]["male"]["n"] == next(iter(sizes.values()))


@pytest.mark.parametrize("argv, message", [
    (["--test-resample", "balanced"], "expected"),
    (["--test-resample", "balanced:race"], "not one of this run's"),
    (["--usage", "sam-prompt", "--model", "litemedsam", "--test-resample", "balanced:sex"], "segmentation"),
])
def test_bad_test_resample_fails_before_any_work(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    from fairmedbench.cli import main

    base = ["run", "--model", "imagenet-resnet50", "--weights", "random", "--dataset", "synth-contrast",
            "--usage", "lp", "--out", str(tmp_path)]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_imported_splits_draw_too() -> None:
    """A run on an imported split (--split-file, board runs) has split_seed -1: no sampling keeps all, a share draws."""
    groups, labels = _table()
    pos = {"train": np.arange(len(groups)), "val": np.arange(3), "test": np.arange(4)}
    keep = draw(Sampling(), pos, groups, labels, split_seed=-1, seed=0)
    assert {k: len(v) for k, v in keep.items()} == {"train": len(groups), "val": 3, "test": 4}
    s = resolve(0.5, None, None, None, "test", groups, pos["train"])
    chosen = groups[draw(s, pos, groups, labels, split_seed=-1, seed=0)["train"]]
    assert len(chosen) == 20 and int(np.sum(chosen == "b")) == 10
