"""The engine's speed work changes no number: a seeded case (whole patients, a crossed attribute, a rare label with
tied scores, bootstrap and permutations) gives the values and tests the engine gave before it (commit c5e6244,
stored in tests/data/engine_golden.json; `python tests/test_engine_golden.py` rewrites that file), to 1e-12."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from fairmedbench.metrics import evaluate_classification

GOLDEN = Path(__file__).resolve().parent / "data" / "engine_golden.json"


def _values() -> dict[str, list[float | None]]:
    """Every value triple and test record of the crossed attribute of the rare label, keyed 'metric / group'."""
    rng = np.random.default_rng(2024)
    n = 900
    pid = rng.integers(0, 400, n)
    sex = np.where(rng.random(400) < 0.5, "F", "M")[pid]
    age = rng.uniform(20, 90, 400)[pid]
    y = (rng.random((n, 2)) < [0.3, 0.08]).astype(int)
    s = np.clip(np.round(0.5 * y + rng.normal(0.3, 0.2, (n, 2)), 2), 0, 1)
    res = evaluate_classification(y, s, {"sex": sex, "age": age}, bins={"age": [0, 50, 70, 200]}, intersect=True,
                                  n_boot=60, n_perm=40, patient_ids=pid, seed=3)
    rep = res.reports[-1]
    assert (rep.task, rep.attribute) == ("task1", "sex|age")
    out: dict[str, list[float | None]] = {}
    for m, per in rep.values.items():
        for g, triple in per.items():
            out[f"{m} / {g}"] = [float(v) if math.isfinite(v) else None for v in triple]
    for t, rec in rep.tests.items():
        out[f"test {t}"] = [float(rec[k]) if rec.get(k) is not None and math.isfinite(rec[k]) else None
                            for k in ("p_value", "p_adjusted", "bias_corrected", "mde")]
    return out


def test_engine_gives_the_numbers_it_gave_before_its_speed_work() -> None:
    expected = json.loads(GOLDEN.read_text())
    got = _values()
    assert sorted(got) == sorted(expected)
    for key, vals in expected.items():
        for a, b in zip(got[key], vals):
            assert (a is None) == (b is None), key
            if a is not None and b is not None:
                assert abs(a - b) <= 1e-12, (key, a, b)


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(_values(), indent=0, sort_keys=True) + "\n")
    sys.exit(0)
