"""`--hparam-search N`: the defaults plus seeded draws from each method's declared space, chosen on validation only
(a test flips every test label and gets the same candidate scores and the same choice)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fairmedbench.benchmark.run as run_mod
from fairmedbench.benchmark.search import candidates, check_searchable, search, search_space, validation_score
from fairmedbench.engine.hparams import TRAINING_SPACE, LogUniform
from fairmedbench.errors import InputError
from fairmedbench.spec import RunOptions, RunSpec

SPEC = RunSpec(model="moco-cxr", dataset="synth-underrep", attributes=("sex",), usage="lp",
               mitigation="groupdro", seeds=(0, 1), weights="random", n_boot=0, n_perm=0,
               dataset_options={"n": 60}, hparams={"epochs": 5})


def _opts(tmp: Path, cache: Path | None = None) -> RunOptions:
    """Results under `tmp`; features cached in `cache` (default `tmp`/c)."""
    return RunOptions(out_root=str(tmp / "r"), cache_dir=str(cache or tmp / "c"), device="cpu")


def test_candidates_are_the_defaults_then_seeded_draws_in_the_declared_space() -> None:
    c = candidates("groupdro", 4, {"epochs": 5})
    assert c[0] == {} and len(c) == 4  # the paper defaults first
    assert c == candidates("groupdro", 4, {"epochs": 5})  # seeded: the same draws every call
    space = search_space("groupdro")
    assert space is not None and set(space) == {"lr", "weight_decay", "eta"}
    for draw in c[1:]:
        for k, v in draw.items():
            r = space[k]
            assert isinstance(r, LogUniform) and r.low <= v <= r.high
    assert all("lr" not in d for d in candidates("groupdro", 3, {"lr": 0.01}))  # a given key stays fixed
    assert search_space("erm") == TRAINING_SPACE  # ERM gets the same training budget
    assert {d["by"] for d in candidates("resampling", 12, {})[1:]} <= {"group", "group_class"}


def test_log_uniform_draws_cover_the_range_on_a_log_scale() -> None:
    r, rng = LogUniform(1e-3, 1.0), np.random.default_rng(0)
    logs = np.log10([r.draw(rng) for _ in range(4000)])
    assert logs.min() >= -3 and logs.max() <= 0
    assert abs(np.mean(logs < -1.5) - 0.5) < 0.03  # half the draws below the log midpoint 10^-1.5


def test_every_registered_method_declares_its_own_space() -> None:
    """Each plugin's class body declares a search space that draws (the defaults aside) only its known keys."""
    from fairmedbench.mitigation import MITIGATIONS, make_mitigation

    for name in MITIGATIONS.names():
        space = search_space(name)
        assert space is not None, name
        for draw in candidates(name, 4, {})[1:]:
            make_mitigation(name, **{k: v for k, v in draw.items() if k not in TRAINING_SPACE})  # valid values
    assert set(search_space("swad") or {}) == {"lr", "weight_decay", "n_converge", "n_tolerance", "tolerance_ratio"}
    assert set(search_space("dfr") or {}) == {"lr", "weight_decay", "C"}
    assert set(search_space("odr") or {}) == {"lr", "weight_decay", "lambda_e", "lambda_od"}
    assert search_space("asam") != search_space("sam")  # a subclass declares its own


def test_a_method_without_a_declared_space_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from fairmedbench.mitigation import MITIGATIONS
    from fairmedbench.mitigation.base import Mitigation

    class NoSpace(Mitigation):  # a plugin whose class body declares none (the base's is not read)
        pass

    monkeypatch.setattr(MITIGATIONS, "get", lambda name: NoSpace)
    with pytest.raises(InputError, match="mitigation 'nospace' declares no search space"):
        check_searchable("nospace")


def test_search_refuses_bad_n_before_any_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="at least 1"):
        search(SPEC, _opts(tmp_path), 0)
    assert not (tmp_path / "r").exists()


def _flip_test_labels(monkeypatch: pytest.MonkeyPatch, truth: Any) -> None:
    """Every run resolved from now on sees 1 - y on its test split (train and val untouched)."""
    real = run_mod.resolve_run

    def flipped(spec: RunSpec, **kw: Any) -> Any:
        r = real(spec, **kw)
        col = r.checked.dataset_card.label_column
        samples = r.dataset.samples.copy()
        rows = samples.index[r.split.test]
        samples.loc[rows, col] = 1 - truth.loc[samples.loc[rows, "sample_id"]].to_numpy()
        r.dataset.samples = samples
        return r

    monkeypatch.setattr(run_mod, "resolve_run", flipped)


# groupdro in the default suite; the methods whose training ends, averages or refits by their own rule (swad, dfr,
# odr) and the rest of the searchable methods in the slow suite
SEARCHED = [pytest.param(m, marks=() if m == "groupdro" else pytest.mark.slow)
            for m in ("groupdro", "swad", "dfr", "odr", "jtt", "cvar_dro", "laftr", "fis")]


@pytest.mark.parametrize("method", SEARCHED)
def test_the_search_never_reads_a_test_label(method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fairmedbench.registry.datasets import load_dataset

    spec = dataclasses.replace(SPEC, mitigation=method)
    plain = search(spec, _opts(tmp_path / "plain"), 3)
    ds = load_dataset("synth-underrep", n=60)
    truth = ds.samples.set_index("sample_id")[ds.card.label_column].copy()
    _flip_test_labels(monkeypatch, truth)
    features = tmp_path / "plain" / "c"  # the same images: the flip changes labels, not pixels
    flipped = search(spec, _opts(tmp_path / "flipped", features), 3)
    assert [c["hparams"] for c in flipped.record["candidates"]] == [c["hparams"] for c in plain.record["candidates"]]
    scores = [c["val_score"] for c in plain.record["candidates"]]
    assert [c["val_score"] for c in flipped.record["candidates"]] == scores  # identical, not approximately
    assert flipped.record["chosen"] == plain.record["chosen"] and flipped.spec == plain.spec
    assert plain.record["criterion"] == "worst_group_auc" and plain.record["split"] == "val"
    best = plain.record["chosen"]
    assert scores[best] == max(s for s in scores if s is not None)
    # the flip did reach the test set: every test AUC became 1 - AUC
    a = run_mod.run(plain.spec, _opts(tmp_path / "plain")).seeds[0].value("auc", "sex")
    b = run_mod.run(flipped.spec, _opts(tmp_path / "flipped", features)).seeds[0].value("auc", "sex")
    assert math.isclose(a + b, 1.0, abs_tol=1e-9)
    # the chosen run's validation score is the one recorded
    again = validation_score(run_mod.run(plain.spec, _opts(tmp_path / "plain")), "sex", "worst_group_auc")
    assert again == scores[best]
