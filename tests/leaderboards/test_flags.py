"""Board flags (one fact, one function, one legend line each), tiers on the page, and safe model names."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from bundle_factory import (
    bundle_card,
    forge,
    model_card,
    passed_record,
    pinned_suite,
    record_verification,
    rewrite_predictions,
    write_bundle,
)

from fairmedbench.benchmark.leaderboard import build_board, submit_bundle
from fairmedbench.leaderboards import flags as F
from fairmedbench.leaderboards.suites import Entry
from fairmedbench.leaderboards.tiers import TIERS

BOARD = "test-pinned"
XSS = "<script>alert(1)</script>"
LITEMEDSAM_SHA = "79d8c9dca6db4d69d3f905579e5250af05e859fff9c1f543e89a513c3028ce76"
ENTRY = Entry("synth-control", ("sex",), "lp")
SEG = Entry("synth-control", ("sex",), "sam-prompt", task="segmentation")


def preds(scores: list[float], labels: list[int] | None, groups: list[str] | None = None, seed: int = 0,
          ids: list[str] | None = None) -> F.SeedPredictions:
    n = len(scores)
    return F.SeedPredictions(seed, np.array(ids or [f"id{i:02d}" for i in range(n)]),
                             None if labels is None else np.array(labels, dtype=float)[:, None],
                             np.array(scores, dtype=float)[:, None],
                             {"sex": np.array(groups or ["female"] * n, dtype=object)})


def facts(p: list[F.SeedPredictions], entry: Entry = ENTRY, model: dict[str, Any] | None = None,
          card: dict[str, Any] | None = None, weights: frozenset[str] = frozenset(), **kw: Any) -> F.Facts:
    model = model or {"name": "litemedsam", "weights_sha256": LITEMEDSAM_SHA, "training_datasets": ["ham10000"]}
    return F.Facts(model, card, entry, "sex", p, weights, **kw)


def test_near_perfect_rule() -> None:
    # every score within 0.01 of its label: 100% > 95%
    assert F.near_perfect(facts([preds([0.01, 0.99, 0.02, 0.98], [0, 1, 0, 1])])) == \
        "seed 0: 100% of test scores lie within 0.05 of their label"
    # hand-computed AUC: positives 0.5, 0.7, 0.8 against negatives 0.1, 0.2, 0.6 win 2 + 3 + 3 of 9 pairs = 0.889
    assert F.near_perfect(facts([preds([0.1, 0.2, 0.6, 0.5, 0.7, 0.8], [0, 0, 0, 1, 1, 1])])) is None
    # 0.65 instead of 0.5 wins all 9 pairs: AUC 1 >= 0.99, although no score is within 0.05 of its label
    assert F.near_perfect(facts([preds([0.1, 0.2, 0.6, 0.65, 0.7, 0.8], [0, 0, 0, 1, 1, 1])])) == \
        "seed 0: overall AUC 1.0000 >= 0.99"
    # segmentation: 19 of 20 DSC >= 0.99 is 95%, not more than 95%; 20 of 20 is
    assert F.near_perfect(facts([preds([0.995] * 19 + [0.5], None)], SEG)) is None
    assert F.near_perfect(facts([preds([0.995] * 20, None)], SEG)) == "seed 0: 100% of test samples have DSC >= 0.99"


def test_duplicate_rule() -> None:
    rng = np.random.default_rng(0)
    mine = rng.random(30).tolist()
    ids = [f"id{i:02d}" for i in range(30)]
    order = rng.permutation(30)
    shuffled = preds([mine[i] for i in order], [0] * 30, ids=[ids[i] for i in order])
    assert F.duplicate_predictions(facts([preds(mine, [0] * 30)], others=[("other r1", [shuffled])])) == \
        "seed 0: identical scores to other r1, accepted earlier"
    affine = preds([0.5 * s + 0.1 for s in mine], [0] * 30)
    assert F.duplicate_predictions(facts([preds(mine, [0] * 30)], others=[("other r1", [affine])])) == \
        "seed 0: scores duplicate other r1, accepted earlier (Pearson r = 1.00000)"
    independent = preds(rng.random(30).tolist(), [0] * 30)
    other_seed = preds(mine, [0] * 30, seed=1)
    other_ids = preds(mine, [0] * 30, ids=[f"x{i}" for i in range(30)])
    for q in (independent, other_seed, other_ids):
        assert F.duplicate_predictions(facts([preds(mine, [0] * 30)], others=[("other r1", [q])])) is None


def test_implausible_groups_rule() -> None:
    groups = ["female"] * 10 + ["male"] * 10
    labels = [1] * 5 + [0] * 5 + [1] * 5 + [0] * 5
    separated = [0.6, 0.7, 0.8, 0.9, 0.55] + [0.1, 0.2, 0.3, 0.4, 0.5] + [0.3, 0.6, 0.7, 0.8, 0.9] + [0.4] * 5
    assert F.implausible_groups(facts([preds(separated, labels, groups)])) == \
        "seed 0, group female: the 5 positives all score above the 5 negatives (no overlap)"
    overlapping = separated[:5] + [0.1, 0.2, 0.3, 0.4, 0.58] + separated[10:]  # 0.58 > 0.55: overlap in female
    assert F.implausible_groups(facts([preds(overlapping, labels, groups)])) is None  # male: 0.3 < 0.4 overlaps
    four = separated[:4] + [0.2] + separated[5:]  # female has 4 positives: too few to judge
    assert F.implausible_groups(facts([preds(four, [1] * 4 + [0] * 6 + labels[10:], groups)])) is None
    assert F.implausible_groups(facts([preds([0.9] * 20, None, groups)], SEG)) is None  # classification only


def test_weights_and_pretraining_rules() -> None:
    p = [preds([0.5], [1])]
    assert F.no_weights_hash(facts(p)) is None
    # a seeded random init names its weights (the package rebuilds them): verifiable, so no 'can never be verified'
    assert F.no_weights_hash(facts(p, model={"name": "imagenet-resnet50", "weights_sha256": None},
                                   weights=frozenset({"random:seed=0"}))) is None
    assert F.no_weights_hash(facts(p, model={"name": "imagenet-resnet50", "weights_sha256": None},
                                   weights=frozenset({"random:seed=0", "random:seed=1"}))).startswith("weights not")
    assert F.no_weights_hash(facts(p, model={"name": "imagenet-resnet50", "weights_sha256": None},
                                   weights=frozenset({"0" * 64}))).startswith("weights not provided")
    assert F.weights_not_public(facts(p)) is None  # LiteMedSAM's published file
    other = {"name": "litemedsam", "weights_sha256": "0" * 64}
    assert F.weights_not_public(facts(p, model=other)) == \
        f"weights sha256 000000000000... is not the card's published {LITEMEDSAM_SHA[:12]}..."
    assert F.weights_not_public(facts(p, model=other, weights=frozenset({"random:seed=0"}))) is None
    card = {"weights": {"url": None, "hub_id": None}}
    assert F.weights_not_public(facts(p, model={"name": "new-fm"}, card=card)) == \
        "the bundle's card names no public url or hub id"
    assert F.weights_not_public(facts(p, model={"name": "new-fm"}, card={"weights": {"hub_id": "a/b"}})) is None
    assert F.weights_not_public(facts(p, model={"name": "new-fm"})) == "no card names a source for the weights"
    ham = Entry("ham10000", ("sex",), "lp")
    assert F.seen_in_pretraining(facts(p, ham)) == "ham10000 is in the model's pretraining data: not zero-shot"
    assert F.seen_in_pretraining(facts(p)) is None
    new = {"name": "new-fm", "training_datasets": ["synth-control"]}
    assert F.seen_in_pretraining(facts(p, model=new, card={})) is not None


def test_every_flag_has_one_check_and_a_legend_line() -> None:
    keys = [f.key for f in F.FLAGS]
    assert len(keys) == len(set(keys)) and len({f.check for f in F.FLAGS}) == len(keys)
    assert [d["key"] for d in F.legend()] == keys and all(d["rule"] for d in F.legend())


# --- names --------------------------------------------------------------------------------------------------

def _bundle(tmp: Path, name: str, card: bool = True, **card_changes: Any) -> Path:
    model = model_card(name)
    folder = write_bundle(tmp / "bundle", pinned_suite(), model)
    if not card:
        (folder / "card.json").unlink()
    elif card_changes:
        (folder / "card.json").write_text(json.dumps({**bundle_card(model), **card_changes}))
    return folder


@pytest.mark.parametrize("name", [XSS, "org/model", "Big-FM", "../x", ""])
def test_unsafe_model_names_are_refused(tmp_path: Path, name: str) -> None:
    out = submit_bundle(_bundle(tmp_path, name), BOARD, tmp_path / "lb")
    assert not out.accepted and out.reasons == [
        f"model.json: model name {name!r} is refused: a model name is 1-64 characters of a-z, 0-9, '.', '_' and "
        "'-', starting with a letter or digit (no '/', spaces, capitals or markup); put free text in the "
        "description of the bundle's card.json"]
    assert not (tmp_path / "lb").exists()


def test_unregistered_model_needs_a_valid_card(tmp_path: Path) -> None:
    out = submit_bundle(_bundle(tmp_path, "new-fm", card=False), BOARD, tmp_path / "lb")
    assert not out.accepted and "'new-fm' is not a registered model (benchmark list models)" in out.reasons[0]
    assert "add card.json to the bundle" in out.reasons[0]
    shutil.rmtree(tmp_path / "bundle")
    out = submit_bundle(_bundle(tmp_path, "new-fm", homepage="x"), BOARD, tmp_path / "lb")
    assert not out.accepted and "card.json: schema violation at (top)" in out.reasons[0]
    shutil.rmtree(tmp_path / "bundle")
    out = submit_bundle(_bundle(tmp_path, "new-fm", family="Evil Family"), BOARD, tmp_path / "lb")
    assert not out.accepted and out.reasons[0].startswith("card.json: schema violation at family")


def test_registered_model_must_match_its_card(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "litemedsam", card=False)
    out = submit_bundle(folder, BOARD, tmp_path / "lb")
    assert not out.accepted and "model.json: family is 'test' but the registered card 'litemedsam' says 'sam'" \
        in out.reasons
    (folder / "card.json").write_text("{}")
    out = submit_bundle(folder, BOARD, tmp_path / "lb")
    assert out.reasons == ["card.json: 'litemedsam' is a registered model card; a bundle may not redefine it "
                           "(drop card.json, or submit under a new name)"]


# --- the page in Chromium: flags and tiers per row, with legends ---------------------------------------------

@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three submissions: genuine (verified), forged (scores ~ labels), and a copy of the genuine predictions."""
    tmp = tmp_path_factory.mktemp("flags")
    suite, root = pinned_suite(), tmp / "lb"
    genuine = write_bundle(tmp / "genuine", suite, model_card("alpha-fm", 1.0), description=XSS)
    forged = write_bundle(tmp / "forged", suite, model_card("forged-fm", 1.0))
    forge(forged)
    copy = write_bundle(tmp / "copy", suite, model_card("copy-fm", 1.0))

    def copied(frame: pd.DataFrame, block: dict[str, Any], doc_path: Path) -> pd.DataFrame:
        return pd.read_parquet(genuine / doc_path.relative_to(copy).parent / block["file"])

    rewrite_predictions(copy, copied)
    paths = {}
    for b in (genuine, forged, copy):
        out = submit_bundle(b, suite.name, root)
        assert out.accepted, out.reasons
        paths[b.name] = out.path
    record_verification(paths["genuine"], passed_record(suite))
    return build_board(suite.name, root)


def test_board_json_has_flags_and_tiers_per_row(board: dict[str, Path]) -> None:
    data = json.loads(board["json"].read_text())
    by_model: dict[str, set[str]] = {}
    for r in data["rows"]:
        by_model.setdefault(r["model"], set()).update(f["key"] for f in r["flags"])
        assert r["tier"] == ("verified" if r["model"] == "alpha-fm" else "self-reported")
    assert by_model["forged-fm"] >= {"near-perfect", "implausible-groups"}
    # the copy (accepted later) duplicates the genuine predictions: only the copy is flagged
    assert "duplicate" in by_model["copy-fm"] and "duplicate" not in by_model["alpha-fm"]
    assert "near-perfect" not in by_model["alpha-fm"]
    assert [f["key"] for f in data["flag_legend"]] == [f.key for f in F.FLAGS]
    md = board["markdown"].read_text()
    assert "implausible group scores" in md and "| verified |" in md


def test_page_shows_flags_and_tiers_per_row_in_chromium(board: dict[str, Path], tmp_path: Path, chromium: Any) -> None:
    driver = chromium
    driver.set_window_size(1800, 1400)
    driver.get(board["html"].resolve().as_uri())
    heads = [th.text for th in driver.find_elements("css selector", "#board thead th")]
    tier_col, flag_col = heads.index("Tier"), heads.index("Flags")
    # verified rows in the ranked table, the rest in the self-reported one
    assert len(driver.find_elements("css selector", "#board tbody tr")) == 3
    rows = driver.find_elements("css selector", "table.board-rows tbody tr")
    assert len(rows) == 9  # 3 submissions x (2 classification attributes + 1 segmentation)
    seen = {}
    for r in rows:
        cells = r.find_elements("css selector", "td")
        flags = {d.get_attribute("data-flag") for d in cells[flag_col].find_elements("css selector", ".flag")}
        seen.setdefault(cells[1].text, []).append((cells[tier_col].text.split("\n")[0], flags))
        if cells[1].text == "alpha-fm":  # the page states what was re-run and the tolerance
            assert cells[tier_col].text.split("\n")[1] == (
                "re-ran 64 sampled test item(s) per seed (seed 0) and the validation rows in fp32: 10 scores, "
                "max |diff| 1e-07 against tolerance 0.0001")
    assert {t for t, _ in seen["alpha-fm"]} == {"verified tolerance 0.0001"}  # the tolerance beside the badge
    assert {t for m in ("forged-fm", "copy-fm") for t, _ in seen[m]} == {"self-reported"}
    assert any({"near-perfect", "implausible-groups"} <= f for _, f in seen["forged-fm"])
    assert all("duplicate" in f for _, f in seen["copy-fm"])
    legend = driver.find_elements("css selector", "#flag-legend tbody tr")
    assert [tr.get_attribute("data-flag") for tr in legend] == [f.key for f in F.FLAGS]
    assert "Pearson r > 0.999" in driver.find_element("id", "flag-legend").text
    tiers = [tr.find_elements("css selector", "td")[0].text for tr in
             driver.find_elements("css selector", "#tier-legend tbody tr")]
    assert tiers == [t["key"] for t in TIERS]
    assert len(driver.find_elements("css selector", "script")) == 1
    shot = Path(os.environ.get("FMB_SCREENSHOT_DIR", tmp_path)) / "board-flags-tiers.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    driver.find_element("id", "board").screenshot(str(shot))
    assert shot.stat().st_size > 10_000
