"""Issue 28, point 6: `evaluate` reports its progress in resamples and permutations (a 10^6-row file printed
nothing for 500 s), on stderr also when it is not a terminal, and reporting it changes no number."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairmedbench.benchmark import evaluate
from fairmedbench.cli import main
from fairmedbench.engine import store
from fairmedbench.metrics import bootstrap as bs
from fairmedbench.metrics.classification import evaluate_classification


def _data(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    y = np.arange(n) % 2
    return {"y": y, "p": np.clip(0.3 * y + 0.7 * rng.uniform(size=n), 0, 1),
            "sex": np.where(np.arange(n) % 4 < 2, "F", "M"), "patient_id": [f"p{i // 2}" for i in range(n)]}


def test_progress_counts_every_chunk_of_resamples_and_permutations(monkeypatch: pytest.MonkeyPatch) -> None:
    """200 rows, 100 patients in 2 groups; chunks of 800 cells: the bootstrap draws 800 // 200 = 4 resamples a
    chunk (4, 8, 10 of 10) and the permutations 800 // (200 x 2 groups) = 2 a chunk (12, 14, 15 of 10 + 5)."""
    monkeypatch.setattr(bs, "CHUNK_CELLS", 800)
    d = _data(200)
    steps: list[tuple[int, int, str]] = []
    kw = dict(y_true=d["y"], y_score=d["p"], attributes={"sex": d["sex"]}, patient_ids=np.array(d["patient_id"]),
              n_boot=10, n_perm=5, min_group_size=1)
    with_progress = evaluate_classification(**kw, on_step=lambda *a: steps.append(a))
    assert steps == [(k, 15, f"task / sex: {phase}") for k, phase in ((4, "bootstrap"), (8, "bootstrap"),
                     (10, "bootstrap"), (12, "permutations"), (14, "permutations"), (15, "permutations"))]
    # the same numbers with and without a progress callback
    assert with_progress.to_dict() == evaluate_classification(**kw).to_dict()
    steps.clear()
    evaluate_classification(**{**kw, "n_boot": 0, "n_perm": 0}, on_step=lambda *a: steps.append(a))
    assert steps == [(1, 1, "task / sex")]  # no resamples: one step per task-attribute pair


def test_a_long_evaluate_prints_progress_lines_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    """stderr is not a terminal here: once the scoring has run QUIET_FOR_S seconds (0 here, so that a small file
    stands for a large one) plain lines report the resamples done, at every tenth of them."""
    monkeypatch.setattr(evaluate, "QUIET_FOR_S", 0.0)
    monkeypatch.setattr(bs, "CHUNK_CELLS", 2000 * 10)  # 10 resamples a chunk on 2000 rows
    pd.DataFrame(_data(2000)).to_csv(tmp_path / "p.csv", index=False)
    assert main(["evaluate", "--predictions", str(tmp_path / "p.csv"), "--label", "y", "--score", "p",
                 "--attribute", "sex", "--n-boot", "100", "--n-perm", "50", "--out", str(tmp_path / "r.json")]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("metrics + bootstrap: ")]
    done = [int(m.group(1)) for m in (re.match(r"metrics \+ bootstrap: (\d+)/150\b", x) for x in lines) if m]
    assert len(done) == len(lines) >= 5 and done == sorted(done) and done[-1] == 150, lines
    assert "done in" in lines[-1]
    # each line names the label, the attribute and the phase it is in (an audit of many labels shows where it is)
    assert lines[0].endswith(": y / sex: bootstrap") and lines[-1].endswith(": y / sex: permutations"), lines
    doc = store.read_json(tmp_path / "r.json")
    assert doc["spec"]["n_boot"] == 100 and doc["result"]["reports"][0]["resampling"]["unit"] == "patient"
