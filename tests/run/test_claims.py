"""The claims study: claim files, the one rule that answers a claim (holds / not supported at this size with the
paired minimum detectable effect / contradicted), and the shipped stand-ins giving their known answers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from fairmedbench.benchmark.claims import (
    Claim,
    ClaimsOptions,
    cite,
    judge,
    load_claim,
    paired_mde,
    run_claims,
    select_claims,
    shipped_claims,
)
from fairmedbench.errors import InputError
from fairmedbench.spec import RunOptions


def _claim(**kw: object) -> Claim:
    base = dict(id="c", paper="Doe, Roe. A title. Venue 2021", table="Table 1", statement="M helps",
                dataset="nih-cxr14", model="c2l", usage="lp", attribute="sex", baseline="erm", method="groupdro",
                metric="worst_group_auc", direction="increase", size=0.01, stand_in={"dataset": "synth-underrep",
                                                                                     "expected": "holds"})
    return Claim(**{**base, **kw})  # type: ignore[arg-type]


def test_shipped_claims_load_and_name_a_paper_a_table_and_a_known_answer() -> None:
    claims = [load_claim(p) for p in shipped_claims()]
    assert {c.id for c in claims} >= {"idrissi2022-resampling", "sagawa2020-groupdro", "wang2020-domainind"}
    answers = {c.stand_in["expected"] for c in claims}
    assert {"holds", "not-supported"} <= answers  # one built to hold, one built not to
    assert cite(claims[0].paper).endswith(("2020", "2022"))


def test_list_studies_shows_the_claims_study() -> None:
    from fairmedbench.benchmark.catalog import LISTERS

    row = next(r for r in LISTERS["studies"]() if r["name"] == "claims")
    assert "sagawa2020-groupdro" in row["about"] and "groupdro" in row["mitigations"]


@pytest.mark.parametrize("edit, needle", [
    ({"direction": "up"}, "direction 'up'"),
    ({"paper": None, "extra": 1}, "unknown extra"),
    ({"stand_in": {"dataset": "synth-control"}}, "stand_in needs dataset, expected"),
    ({"method": "magic"}, "magic"),
])
def test_a_bad_claim_file_is_refused_in_one_line(tmp_path: Path, edit: dict, needle: str) -> None:
    doc = yaml.safe_load(shipped_claims()[0].read_text())
    doc.update(edit)
    if edit.get("paper", 1) is None:
        doc.pop("paper")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match=needle):
        load_claim(path)
    with pytest.raises(InputError, match="neither a shipped claim"):
        select_claims(("no-such-claim",))


def test_paired_mde_is_the_t_tests_80_percent_power_point() -> None:
    d = np.array([0.1, -0.05, 0.02, 0.07])
    want = (stats.t.ppf(0.975, 3) + stats.t.ppf(0.8, 3)) * d.std(ddof=1) / 2
    assert paired_mde(d) == pytest.approx(want)
    assert math.isnan(paired_mde(np.array([0.1])))
    # simulated: a true mean difference equal to the MDE (for the true spread) is detected in about 80% of studies
    rng, n, sigma = np.random.default_rng(0), 5, 0.03
    effect = (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sigma / math.sqrt(n)
    draws = rng.normal(effect, sigma, size=(4000, n))
    power = np.mean(stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05)
    assert 0.75 < power < 0.84  # exact noncentral-t power 0.79 at n = 5


def test_judge_holds_contradicted_and_not_supported_by_hand() -> None:
    up = np.array([0.10, 0.12, 0.11])
    a = judge(_claim(), up, "split", None, "here")
    assert a.key == "holds" and a.sentence.startswith("Doe et al. 2021: M helps — holds on here")
    assert a.evidence["mean_diff"] == pytest.approx(0.11)
    assert a.evidence["paired_p"] == pytest.approx(stats.ttest_1samp(up, 0).pvalue)
    assert judge(_claim(direction="decrease"), up, "split", None, "here").key == "contradicted"
    # the gap claim reads a decrease: a lower gap holds
    assert judge(_claim(metric="auc_gap", direction="decrease"), -up, "split", None, "here").key == "holds"
    noisy = np.array([0.10, -0.10, 0.02])
    b = judge(_claim(), noisy, "split", None, "here")
    mde = (stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2)) * noisy.std(ddof=1) / math.sqrt(3)
    assert b.key == "not-supported" and f"≥ {mde:.3f}" in b.sentence and "not supported at this size" in b.sentence
    # beyond chance over splits but not beyond the test set's sampling error: not supported (the one rule)
    boot = {"value": 0.11, "ci_low": -0.02, "ci_high": 0.2}
    assert judge(_claim(), up, "split", boot, "here").key == "not-supported"
    assert judge(_claim(), np.array([0.1, 0.1]), "split", None, "here").key == "undefined"


def _opts(tmp: Path) -> RunOptions:
    return RunOptions(out_root=str(tmp / "r"), cache_dir=str(tmp / "c"), device="cpu")


def test_a_small_stand_in_built_not_to_hold_gives_its_answer(tmp_path: Path) -> None:
    """The cheap sibling of the shipped stand-ins: no group difference by construction, so not supported."""
    doc = yaml.safe_load((shipped_claims()[0].parent / "wang2020-domainind.yaml").read_text())
    doc["stand_in"].update(dataset_options={"n": 80}, seeds=[0, 1], split_seeds=[0, 1, 2], hparams={"epochs": 5},
                           model="moco-cxr", n_boot=50)
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(doc))
    out, json_path, page = run_claims(ClaimsOptions(claim=(str(path),), stand_in=True, report=True), _opts(tmp_path),
                                      str(tmp_path / "r"))
    [row] = out["claims"]
    assert row["answer"]["key"] == "not-supported" and row["gave_known_answer"]
    assert row["answer"]["evidence"]["unit"] == "split" and row["answer"]["evidence"]["n_units"] == 3
    assert json_path.is_file() and page is not None
    html = page.read_text()
    assert html.index(out["sentences"][0].split(" — ")[0]) < html.index("<table")  # the sentence comes first


@pytest.mark.slow
def test_every_shipped_stand_in_gives_its_known_answer(tmp_path: Path) -> None:
    out, _, _ = run_claims(ClaimsOptions(stand_in=True), _opts(tmp_path), str(tmp_path / "r"))
    assert [(r["id"], r["answer"]["key"]) for r in out["claims"]] == [
        (r["id"], r["known_answer"]) for r in out["claims"]]
