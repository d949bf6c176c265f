"""Hidden-subgroup discovery (analysis.slices, `benchmark inspect --discover`): the held-out gap and its
permutation test by hand, enrichment shares, no double dipping (held-out errors never choose a slice, no patient on
both halves), the acceptance simulation (hidden artefact subgroup found in >= 8 of 10 seeds, its clean twin
reported in <= 1), text prompts, the command end to end and its bad inputs (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.analysis.encoding import make_target
from fairmedbench.analysis.slices import (
    _auc_gap,
    _enrichment,
    _permutation_p,
    discover_slices,
    hidden_subgroup_table,
)
from fairmedbench.cli import main


def _frame(n: int = 800, seed: int = 3) -> pd.DataFrame:
    d = hidden_subgroup_table(n=n, seed=seed)
    df = pd.DataFrame(d["emb"], columns=[f"emb_{j}" for j in range(d["emb"].shape[1])])
    for k in ("label", "score", "sex", "site", "patient_id", "hidden"):
        df[k] = d[k]
    return df


def test_auc_gap_by_hand() -> None:
    # slice = rows 0-3: pos scores 0.2, 0.6; neg 0.4, 0.8 -> AUC 1/4; rest = rows 4-7: perfectly ranked -> AUC 1
    y = np.array([1, 1, 0, 0, 1, 1, 0, 0])
    s = np.array([0.2, 0.6, 0.4, 0.8, 0.9, 0.8, 0.1, 0.2])
    member = np.array([True] * 4 + [False] * 4)
    assert _auc_gap(y, s, member)[0] == pytest.approx(1.0 - 0.25)


def test_enrichment_shares_by_hand() -> None:
    # held-out rows 0-9; slice = rows 0-3 (3 of them F), rest = rows 4-9 (1 of 6 F)
    sex = make_target("sex", np.array(["F", "F", "F", "M", "F", "M", "M", "M", "M", "M", "F", "M"]))
    held = np.array([True] * 10 + [False] * 2)
    member = np.array([True] * 4 + [False] * 8)
    out = {e.group: e for e in _enrichment(member, [sex], held)}
    f = out["F"]
    assert (f.n_in_slice, f.share_slice, f.share_rest, f.share_all) == (3, 0.75, pytest.approx(1 / 6), 0.4)
    from scipy.stats import fisher_exact
    assert f.p_value == pytest.approx(fisher_exact([[3, 1], [1, 5]]).pvalue)


def test_permutation_moves_a_patients_rows_together() -> None:
    # every patient twice, identical rows: the p equals that of one row per patient under the same draws
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 60)
    s = rng.normal(size=60) + y
    member = rng.random(60) < 0.3
    single = _permutation_p(y, s, member, None, 300, np.random.default_rng(9))
    twice = _permutation_p(np.repeat(y, 2), np.repeat(s, 2), np.repeat(member, 2), np.repeat(np.arange(60), 2), 300,
                           np.random.default_rng(9))
    rowwise = _permutation_p(np.repeat(y, 2), np.repeat(s, 2), np.repeat(member, 2), None, 300,
                             np.random.default_rng(9))
    assert twice == single and rowwise != single


def test_held_out_errors_never_choose_a_slice_and_patients_stay_on_one_half() -> None:
    d = hidden_subgroup_table(n=800, seed=1)
    patients = np.array([f"p{i // 2}" for i in range(800)])  # two rows per patient
    a = discover_slices(d["emb"], d["label"], d["score"], patients=patients, n_perm=50, seed=1)
    scrambled = d["score"].copy()
    rng = np.random.default_rng(0)
    scrambled[a.holdout] = rng.permutation(scrambled[a.holdout])
    b = discover_slices(d["emb"], d["label"], scrambled, patients=patients, n_perm=50, seed=1)
    np.testing.assert_array_equal(a.holdout, b.holdout)
    np.testing.assert_array_equal(a.component, b.component)  # held-out scores changed, no assignment moved
    assert not set(patients[a.holdout]) & set(patients[~a.holdout])
    assert a.holdout.sum() == 400


def _acceptance(seeds: range) -> tuple[int, int, list[tuple[float, float]]]:
    found, twin_reported, overlap = 0, 0, []
    for seed in seeds:
        d = hidden_subgroup_table(seed=seed)
        r = discover_slices(d["emb"], d["label"], d["score"], patients=d["patient_id"], seed=seed, n_perm=500,
                            attributes=[make_target("sex", d["sex"]), make_target("site", d["site"])])
        sig = [s for s in r.slices if s.significant]
        if sig:
            m, truth = r.members(sig[0]), r.holdout & d["hidden"]
            prec, rec = (m & truth).sum() / m.sum(), (m & truth).sum() / truth.sum()
            overlap.append((prec, rec))
            found += bool(prec >= 0.8 and rec >= 0.8)
        twin = hidden_subgroup_table(seed=seed, hidden=False)
        t = discover_slices(twin["emb"], twin["label"], twin["score"], patients=twin["patient_id"], seed=seed,
                            n_perm=500)
        twin_reported += any(s.significant for s in t.slices)
    return found, twin_reported, overlap


def test_hidden_artefact_subgroup_found_and_clean_twin_quiet() -> None:
    """Issue 34 acceptance: over 10 data seeds (2,000 rows, 32-dim embeddings, 15% with the artefact), the top
    significant held-out slice overlaps the artefact with precision and recall >= 0.8 in >= 8; the twin without the
    artefact has a slice with adjusted p < 0.05 in <= 1."""
    found, twin_reported, overlap = _acceptance(range(10))
    assert found >= 8, overlap
    assert twin_reported <= 1


def test_probe_stands_in_without_scores_and_prompts_name_the_slice() -> None:
    d = hidden_subgroup_table(seed=2)
    rng = np.random.default_rng(5)
    art_dir = d["emb"][d["hidden"]].mean(axis=0) - d["emb"].mean(axis=0)
    text = np.vstack([rng.normal(size=(3, 32)), art_dir])
    prompts = ["a", "b", "c", "a radiograph with a burned-in artefact"]
    r = discover_slices(d["emb"], d["label"], d["score"], patients=d["patient_id"], seed=2, n_perm=200,
                        text=text, prompts=prompts)
    top = r.slices[0]
    assert top.significant and top.prompts[0].text == prompts[3] and top.prompts[0].similarity > 0.8
    p = discover_slices(d["emb"], d["label"], None, seed=2, n_perm=50)
    assert any("logistic probe" in n for n in p.notes) and "split by row" in p.notes[0]


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_command_writes_discovery_section_page_and_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "emb.csv"
    _frame().drop(columns=["hidden"]).to_csv(path, index=False)
    out = tmp_path / "out"
    rc, text, _ = _run(capsys, "inspect", "--embeddings", str(path), "--attribute", "sex,site", "--discover",
                       "--score", "score", "--no-tsne", "--n-boot", "50", "--n-perm", "200", "--out", str(out))
    assert rc == 0
    doc = json.loads((out / "inspect.json").read_text())
    d = doc["discovery"]
    assert d["positive"] == "1" and d["settings"]["n_holdout"] == 400 and d["slices"][0]["significant"]
    assert "hidden subgroups: candidate slices" in text and "slice 1" in text
    page = (out / "discover.html").read_text()
    assert "what describes slice 1" in page and "Slice 1:" in page
    table = pd.read_csv(out / "table.csv")
    gaps = table[table.analysis == "slice_auc_gap"]
    assert len(gaps) == len(d["slices"]) and gaps.value.iloc[0] == pytest.approx(d["slices"][0]["gap"])
    assert set(table[table.analysis == "slice_enrichment"].variable) == {"sex", "site"}


@pytest.mark.parametrize(("extra", "needle"), [
    (["--score", "score"], "go with --discover"),
    (["--discover", "--score", "nope"], "--score 'nope' not in"),
    (["--discover", "--discover-positive", "7"], "is not a class of 'label'"),
    (["--discover", "--label", "site"], "needs a binary label"),
    (["--discover", "--slices", "1"], "--slices must be >= 2"),
    (["--discover", "--score", "gap"], "have no finite score (first at row 5)"),
])
def test_bad_discovery_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, extra: list[str],
                                     needle: str) -> None:
    path = tmp_path / "emb.csv"
    df = _frame().drop(columns=["hidden"])
    df["gap"] = df["score"].where(df.index != 5)
    df.to_csv(path, index=False)
    rc, _, err = _run(capsys, "inspect", "--embeddings", str(path), "--attribute", "sex", "--no-tsne",
                      "--out", str(tmp_path / "o"), *extra)
    assert rc == 2 and needle in err and "Traceback" not in err


def test_answer_sentences() -> None:
    from fairmedbench.report.slices import discovery_answer

    settings = {"n_discovery": 100, "n_holdout": 100, "correction": "by", "alpha": 0.05, "min_size": 20,
                "split": "by row"}
    assert discovery_answer({"settings": settings, "slices": []}) == [
        "No mixture component with >= 20 rows did worse than the rest on the 100 discovery rows: nothing to test, "
        "no hidden subgroup found."]
    sl = {"n": 30, "share": 0.3, "auc_slice": 0.6, "auc_rest": 0.9, "gap": 0.3, "p_value": 0.001,
          "p_adjusted": 0.002, "significant": True, "prompts": [],
          "enrichment": [{"attribute": "sex", "group": "F", "share_slice": 0.8, "share_rest": 0.4,
                          "p_adjusted": 0.01}]}
    head, line = discovery_answer({"settings": settings, "slices": [sl]})
    assert "held-out rows (split by row: no patient column)" in head and head.startswith("1 of 1 candidate")
    assert line == ("Slice 1: 30 held-out rows (30%), AUC 0.600 against 0.900 for the rest (gap 0.300, adjusted p "
                    "0.002); sex = F 80% vs 40%.")
