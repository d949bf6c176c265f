"""Issue 23.1: only verified rows are ranked. A forged but plausible bundle (scores = 0.25·y + 0.75·U, numbers
recomputed with the package's own recomputation) is accepted as self-reported and not ranked; once the genuine
submission is verified only its rows are ranked; a copy under another name flags the copy, not the original."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from bundle_factory import (
    forge_plausible,
    model_card,
    passed_record,
    pinned_suite,
    record_verification,
    rewrite_predictions,
    write_bundle,
)

from fairmedbench.benchmark.leaderboard import build_board, submit_bundle


@pytest.fixture(scope="module")
def submitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("rerun")
    suite, root = pinned_suite(), tmp / "lb"
    genuine = write_bundle(tmp / "genuine", suite, model_card("alpha-fm", 0.6))
    forged = write_bundle(tmp / "forged", suite, model_card("plausible-fm", 0.6))
    forge_plausible(forged)
    copy = write_bundle(tmp / "copy", suite, model_card("aa-copy-fm", 0.6))

    def copied(frame: pd.DataFrame, block: dict[str, Any], doc_path: Path) -> pd.DataFrame:
        return pd.read_parquet(genuine / doc_path.relative_to(copy).parent / block["file"])

    rewrite_predictions(copy, copied)  # named to sort before the original: the accept time decides, not the name
    outs = {b.name: submit_bundle(b, suite.name, root) for b in (genuine, forged, copy)}
    return {"suite": suite, "root": root, "outs": outs}


def _rows(submitted: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(build_board(submitted["suite"].name, submitted["root"])["json"].read_text())["rows"]


def test_forged_plausible_bundle_is_accepted_self_reported_and_not_ranked(submitted: dict[str, Any]) -> None:
    outs = submitted["outs"]
    assert all(o.accepted for o in outs.values()), {k: o.reasons for k, o in outs.items()}
    rows = _rows(submitted)
    forged = [r for r in rows if r["model"] == "plausible-fm"]
    cls = [r for r in forged if r["task"] == "classification"]
    assert cls and not any(f["key"] in ("near-perfect", "implausible-groups") for r in cls for f in r["flags"]), \
        "the forgery looks plausible: no flag catches it"
    assert all(r["tier"] == "self-reported" and r["rank"] is None for r in forged)
    assert all(r["unranked"].startswith("self-reported: not re-run") for r in forged)
    assert [r for r in rows if r["rank"] is not None] == [], "nothing verified, nothing ranked"
    # the revision label is bound to the declared weights
    assert {r["revision_label"] for r in forged} == {f"r1 @ {r['weights'][:12]}" for r in forged}


def test_after_a_verify_only_the_genuine_rows_are_ranked(submitted: dict[str, Any]) -> None:
    genuine = submitted["outs"]["genuine"].path
    record_verification(genuine, passed_record(submitted["suite"]))
    try:
        rows = _rows(submitted)
    finally:
        (genuine / "verification.json").unlink()
    ranked = [r for r in rows if r["rank"] is not None]
    assert ranked and {r["model"] for r in ranked} == {"alpha-fm"}
    assert all(r["rank"] == 1 for r in ranked)
    assert len(ranked) == len([r for r in rows if r["model"] == "alpha-fm"])


def test_a_copy_under_another_name_flags_the_copy_not_the_original(submitted: dict[str, Any]) -> None:
    rows = _rows(submitted)
    dup = {r["model"]: any(f["key"] == "duplicate" for f in r["flags"]) for r in rows}
    assert dup == {"alpha-fm": False, "plausible-fm": False, "aa-copy-fm": True}
    detail = next(f["detail"] for r in rows if r["model"] == "aa-copy-fm" for f in r["flags"]
                  if f["key"] == "duplicate")
    assert "alpha-fm r1, accepted earlier" in detail


def test_weights_not_provided_can_never_be_verified(tmp_path: Path) -> None:
    from fairmedbench.benchmark.verify import _declared_weights
    from fairmedbench.errors import InputError
    from fairmedbench.leaderboards.submit import revision_label, weights_binding, weights_identity

    suite = pinned_suite()
    bundle = write_bundle(tmp_path / "b", suite, {**model_card("nohash-fm", 0.6), "weights_sha256": None})
    for doc_path in (bundle / "results").rglob("seed*.json"):  # runs on some file nobody declared
        doc = json.loads(doc_path.read_text())
        doc["spec"]["weights"] = "f" * 64
        doc_path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="weights not provided.*can never be verified"):
        _declared_weights(bundle, json.loads((bundle / "model.json").read_text()))
    assert weights_identity(None, "f" * 64) is None and weights_identity(None, "random:seed=3") == "random:seed=3"
    assert revision_label({"revision": "r1"}, None) == "r1 (weights not provided)"
    # a declared hash binds the run: a run on other weights under that revision is refused at submit
    assert weights_binding("a" * 64, "b" * 64) and weights_binding("a" * 64, "a" * 64) == []
