"""The shift of an external evaluation over every training seed (analysis.shift.external_summary), as the terminal
and the run page show it: each seed's shift with its interval, then mean ± std and the t interval across seeds."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from rich.console import Console

from fairmedbench.analysis.shift import SHIFT_METHOD, SHIFT_METHOD_PAIRED, external_summary


def _entry(shift: float) -> dict[str, Any]:
    return {"internal": 0.8, "external": 0.8 + shift, "shift": shift, "ci_low": shift - 0.05,
            "ci_high": shift + 0.05, "excludes_0": abs(shift) > 0.05}


def _docs(diffs: list[float], method: str = SHIFT_METHOD) -> list[dict[str, Any]]:
    out = []
    for seed, d in enumerate(diffs):
        block = {"attribute": "sex", "metric": "auc", "per_group": {"female": _entry(0.0), "male": _entry(d)},
                 "gap": _entry(abs(d)), "diff": {"of": "male - female", **_entry(d)}}
        out.append({"spec": {"seed": seed}, "external": [{"label": "site-b", "dataset": "site-b", "options": {},
                                                          "shift_method": method, "shift": [block]}]})
    return out


def test_shift_over_seeds_in_the_summary() -> None:
    """Shifts 0.1, 0.2, 0.3: mean 0.2, std 0.1, t interval 0.2 ± 4.303 * 0.1 / sqrt(3) = [-0.048, 0.448]."""
    [ext] = external_summary(_docs([0.1, 0.2, 0.3]))
    row = ext["attributes"][0]["shift"]["diff"]
    assert [r["shift"] for r in row["per_seed"]] == [0.1, 0.2, 0.3]
    assert row["mean"] == pytest.approx(0.2) and row["std"] == pytest.approx(0.1)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.2 - 0.24843, 0.2 + 0.24843), abs=1e-4)
    assert "independent bootstraps" in ext["note"]
    assert "a paired bootstrap" in external_summary(_docs([0.1, 0.2], SHIFT_METHOD_PAIRED))[0]["note"]


def test_shift_over_seeds_on_the_terminal() -> None:
    from fairmedbench.report.terminal import render_external_seeds

    buf = io.StringIO()
    render_external_seeds(external_summary(_docs([0.1, 0.2, 0.3])), Console(file=buf, width=200))
    out = " ".join(re.sub("[│┃]", " ", buf.getvalue()).split())
    assert "all 3 seeds" in out and "seed 0 seed 1 seed 2" in out
    assert ("difference male - female +0.100 [+0.050, +0.150] * +0.200 [+0.150, +0.250] * "
            "+0.300 [+0.250, +0.350] * +0.200 ± 0.100 [-0.048, +0.448]") in out
    assert "female +0.000 [-0.050, +0.050] +0.000 [-0.050, +0.050]" in out  # no * where the CI holds 0


def test_shift_over_seeds_on_the_page() -> None:
    from fairmedbench.report.html import _seeds_shift_table

    [ext] = external_summary(_docs([0.1, 0.2, 0.3]))
    table = _seeds_shift_table("site-b", ext["attributes"][0])
    assert table.header == ["", "seed 0 [95% CI]", "seed 1 [95% CI]", "seed 2 [95% CI]",
                            "mean ± std [t 95% CI across seeds]"]
    diff = [c.text for c in table.rows[-1]]
    assert diff == ["difference male - female", "+0.100 [+0.050, +0.150]", "+0.200 [+0.150, +0.250]",
                    "+0.300 [+0.250, +0.350]", "+0.200 ± 0.100 [-0.048, +0.448]"]
    assert "all 3 seeds" in table.caption


def test_a_paired_shift_verdict_names_its_resampling() -> None:
    from fairmedbench.report.verdicts import site_shift

    assert "paired bootstrap" in site_shift({**_entry(0.2), "paired": True}).evidence
    assert "independent bootstraps" in site_shift(_entry(0.2)).evidence
