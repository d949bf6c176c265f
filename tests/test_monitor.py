"""`benchmark monitor`: the clustered AUC variance and the CUSUM by hand, the threshold's false-alarm rate by
simulation, the whole monitor on simulated 12-window streams (no change / a drop of the audit's MDE in one group
from window 6), the command's files, page and refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape
from scipy.stats import norm

from fairmedbench.benchmark.monitor import Baseline, Window, baseline_from, monitor_windows
from fairmedbench.cli import main
from fairmedbench.metrics import evaluate_classification
from fairmedbench.metrics.groups import Attribute
from fairmedbench.metrics.sequential import auc_look, clustered_auc_variance, cusum, cusum_threshold

# --------------------------------------------------------------------------------------------- statistics by hand


def test_clustered_auc_variance_by_hand() -> None:
    y = np.array([1, 1, 0, 0])
    s = np.array([0.9, 0.4, 0.5, 0.1])
    # AUC 0.75; placements V10 = (1, 0.5), V01 = (0.5, 1); one row per cluster: I/(I-1) = 4/3,
    # S10 = S01 = 4/3 * (0.25² + 0.25²) / 2 = 1/12, var = S10/2 + S01/2 = 1/12
    assert clustered_auc_variance(y, s) == pytest.approx(1 / 12)
    # patients a = rows 0, 3 and b = rows 1, 2: per patient d10 = (+0.25, -0.25), d01 = (+0.25, -0.25), I/(I-1) = 2:
    # S10 = S01 = 2 * 0.125 / 2 = 0.125, S11 = 2 * 0.125 = 0.25, var = 0.125/2 + 0.125/2 + 2 * 0.25 / 4 = 0.25
    assert clustered_auc_variance(y, s, np.array(["a", "b", "b", "a"])) == pytest.approx(0.25)
    assert math.isnan(clustered_auc_variance(np.array([1, 1]), np.array([0.2, 0.3])))


def test_clustered_auc_variance_matches_simulation_where_rows_repeat_patients() -> None:
    """Patients with 3 rows sharing a random effect: the clustered variance matches the spread of the AUC over
    repeated samples; the row-level one (every row its own cluster) is too small."""
    rng = np.random.default_rng(0)

    def sample() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pid = np.repeat(np.arange(150), 3)
        y = np.repeat(rng.random(150) < 0.4, 3).astype(int)
        s = 1.2 * y + np.repeat(rng.standard_normal(150), 3) + 0.6 * rng.standard_normal(450)
        return y, s, pid

    from fairmedbench.metrics.auc import auc

    draws = [sample() for _ in range(400)]
    spread = np.var([auc(y, s) for y, s, _ in draws], ddof=1)
    clustered = np.mean([clustered_auc_variance(y, s, p) for y, s, p in draws])
    rows = np.mean([clustered_auc_variance(y, s) for y, s, _ in draws])
    assert 0.8 < clustered / spread < 1.25
    assert rows / spread < 0.7


def test_auc_look_by_hand() -> None:
    # audited 0.8 (var 0.0004), window 0.7 (var 0.0012): z = 0.1 / 0.04 = 2.5, the audit's share 0.25,
    # k = half the MDE 0.05 in that SD = 0.025 / 0.04 = 0.625
    look = auc_look(0.8, 0.0004, 0.7, 0.0012, 0.05)
    assert look is not None
    assert (look.z, look.ratio, look.k) == pytest.approx((2.5, 0.25, 0.625))
    assert auc_look(0.8, 0.0004, 0.7, math.nan, 0.05) is None
    assert auc_look(0.8, 0.0004, 0.7, 0.0012, None).k == 0.5  # type: ignore[union-attr]


def test_cusum_by_hand() -> None:
    # S = 0.5, 2.0 (not above h = 2), 2.0 (no look), 0 (max(0, 2 - 5 - 0.5)), 2.5 > 2: alarm
    stats, alarms = cusum([1.0, 2.0, math.nan, -5.0, 3.0], 0.5, 2.0)
    assert stats == pytest.approx([0.5, 2.0, 2.0, 0.0, 2.5])
    assert alarms == [False, False, False, False, True]
    # a restart after the alarm: 2.5 > 2 at look 1, then 0 + 1 - 0.5
    assert cusum([3.0, 1.0], [0.5, 0.5], [2.0, 2.0])[0] == pytest.approx([2.5, 0.5])


@pytest.mark.parametrize("ratio,k", [(0.0, 0.5), (0.3, 0.9), (0.5, 1.3)])
def test_cusum_threshold_holds_its_false_alarm_rate_on_fresh_paths(ratio: float, k: float) -> None:
    """h calibrated on one set of null paths: on 40,000 fresh ones (another seed) the CUSUM exceeds it within
    12 looks in 5% ± 0.6% of paths; the audit's shared error raises h."""
    h = cusum_threshold([ratio], [k], 12, 0.05)
    rng = np.random.default_rng(123)
    z = math.sqrt(1 - ratio) * rng.standard_normal((40_000, 12)) + math.sqrt(ratio) * rng.standard_normal((40_000, 1))
    s, peak = np.zeros(40_000), np.zeros(40_000)
    for w in range(12):
        s = np.maximum(0.0, s + z[:, w] - k)
        peak = np.maximum(peak, s)
    assert abs((peak > h).mean() - 0.05) < 0.006
    if ratio > 0:
        assert h > cusum_threshold([0.0], [k], 12, 0.05)


# ------------------------------------------------------------------------------------- simulated streams (acceptance)

AUC = 0.80


def _table(rng: np.random.Generator, n: int, aucs: list[float], prevalence: float = 0.3
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Binormal scores per group (negatives N(0,1), positives N(mu,1), AUC = Phi(mu/sqrt 2)), as probabilities."""
    ys, ss, cs = [], [], []
    for k, a in enumerate(aucs):
        mu = math.sqrt(2) * norm.ppf(a)
        y = (rng.random(n) < prevalence).astype(np.int8)
        ys.append(y)
        ss.append(norm.cdf(rng.standard_normal(n) + mu * y - mu / 2))
        cs.append(np.full(n, k))
    return np.concatenate(ys), np.concatenate(ss), np.concatenate(cs)


def _audit(seed: int, n: int, n_boot: int = 0, n_perm: int = 0) -> tuple[dict[str, Any], Baseline]:
    y, s, c = _table(np.random.default_rng(seed), n, [AUC, AUC])
    sex = Attribute("sex", c, ("F", "M"))
    res = evaluate_classification(y, s, {"sex": sex}, task_names=["y"], threshold="fixed:0.3", n_boot=n_boot,
                                  n_perm=n_perm, seed=seed).to_dict()
    return res, baseline_from(res, "y", "p", y, s, {"sex": sex}, None, {})


def _simulate(n_streams: int, seed0: int, n: int = 1000, n_window: int = 2000) -> dict[str, Any]:
    """n_streams 12-window streams with no change and as many with group F's AUC lowered by the audit's MDE from
    window 6; the audit holds `n` patients per group, each window `n_window` (one row each). Each stream draws its own
    audit (so the audited AUC carries its error); the MDE is that of an audit of this design (its ΔAUC permutation
    test)."""
    mde = _audit(10_000 + seed0, n, n_boot=300, n_perm=300)[0]["reports"][0]["tests"]["auc_gap"]["mde"]
    out: dict[str, Any] = {"mde": mde, "null": 0, "null_drift": 0, "detected": 0, "delays": []}
    for i in range(n_streams):
        for drop in (False, True):
            seed = seed0 + 2 * i + drop
            _, base = _audit(seed, n)
            base.mde = {"sex": mde}
            rng = np.random.default_rng(seed + 500_000)
            wins = []
            for w in range(1, 13):
                y, s, c = _table(rng, n_window, [AUC - (mde if drop and w >= 6 else 0.0), AUC])
                wins.append(Window(str(w), y.astype(float), s, {"sex": c}))
            alerts = monitor_windows(base, wins, n_boot=0)["alerts"]
            if not drop:
                out["null"] += bool(alerts)
                out["null_drift"] += any(a["metric"] == "score_ks" for a in alerts)
                continue
            hits = [int(a["window"]) for a in alerts if a["metric"] == "auc" and a["group"] == "F"
                    and int(a["window"]) >= 6]
            if hits:
                out["detected"] += 1
                out["delays"].append(min(hits) - 6)
    return out


def test_monitor_on_simulated_streams_cheap() -> None:
    """The cheap sibling of the 200-stream check: 6 streams each way (other seeds), wider bounds."""
    r = _simulate(6, 7_000)
    assert 0.04 < r["mde"] < 0.08
    assert r["null"] <= 1
    assert r["detected"] >= 4 and np.median(r["delays"]) <= 3


@pytest.mark.slow
def test_monitor_on_200_simulated_streams() -> None:
    """Acceptance: no change: an alert (AUC or drift) in <= 5% of 200 streams; a drop of the audit's MDE in one group
    from window 6: detected (an AUC alert on that group from window 6) in >= 80%, median delay <= 2 windows."""
    r = _simulate(200, 0)
    print(f"MDE {r['mde']:.4f}; no change: {r['null']}/200 streams alerted ({r['null_drift']} by drift); drop: "
          f"{r['detected']}/200 detected, delay after window 6 median {np.median(r['delays']):g}, 90th percentile "
          f"{np.percentile(r['delays'], 90):g}")
    assert r["null"] <= 10
    assert r["detected"] >= 160
    assert np.median(r["delays"]) <= 2


# ------------------------------------------------------------------------------------------------------ the command


def _frame(rng: np.random.Generator, n: int, aucs: list[float], window: object | None = None) -> pd.DataFrame:
    y, s, c = _table(rng, n, aucs)
    df = pd.DataFrame({"y": y, "p": s, "sex": np.array(["F", "M"])[c],
                       "patient_id": [f"{window}-{i}" for i in range(len(y))]})
    if window is not None:
        df["month"] = window
    return df


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An evaluate result (400 patients per group, AUC 0.80) with its predictions beside it."""
    folder = tmp_path_factory.mktemp("audit")
    _frame(np.random.default_rng(1), 400, [AUC, AUC], "audit").to_csv(folder / "audit.csv", index=False)
    rc = main(["evaluate", "--predictions", str(folder / "audit.csv"), "--label", "y", "--score", "p", "--attribute",
               "sex", "--n-boot", "100", "--n-perm", "200", "--out", str(folder / "result.json")])
    assert rc == 0
    return folder / "result.json"


def _stream(tmp_path: Path, drop_from: int | None, n_windows: int = 6) -> Path:
    rng = np.random.default_rng(7)
    frames = [_frame(rng, 400, [0.62 if drop_from and w >= drop_from else AUC, AUC], f"2025-{w:02d}")
              for w in range(1, n_windows + 1)]
    path = tmp_path / "stream.csv"
    pd.concat(frames[::-1]).to_csv(path, index=False)  # out of order on purpose: windows are ordered by date
    return path


def _monitor(audit: Path, stream: Path, out: Path, *extra: str) -> int:
    return main(["monitor", "--baseline", str(audit), "--stream", str(stream), "--window-column", "month",
                 "--n-boot", "50", "--out", str(out), *extra])


def test_monitor_finds_a_drop_and_writes_alerts_and_page(audit: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    assert _monitor(audit, _stream(tmp_path, drop_from=4), tmp_path / "out", "--report") == 0
    said = capsys.readouterr().out
    alerts = json.loads((tmp_path / "out" / "alerts.json").read_text())
    auc = [a for a in alerts["alerts"] if a["metric"] == "auc"]
    assert auc and {a["group"] for a in auc} == {"F"} and auc[0]["window"] in ("2025-04", "2025-05")
    first = auc[0]
    assert set(first) == {"window", "attribute", "group", "metric", "value", "baseline", "statistic", "threshold",
                          "reason"}
    assert first["statistic"] > first["threshold"] and first["baseline"] - first["value"] > 0.1
    doc = json.loads((tmp_path / "out" / "monitor.json").read_text())
    assert doc["windows"] == [f"2025-{w:02d}" for w in range(1, 7)]
    assert doc["headline"][0].startswith(f"sex=F's AUC fell by {first['baseline'] - first['value']:.2f} in window "
                                         f"{first['window']}")
    assert said.startswith(doc["headline"][0])
    row = next(r for r in doc["rows"] if r["window"] == first["window"] and r["group"] == "F")
    assert row["auc"]["ci_low"] < row["auc"]["value"] < row["auc"]["ci_high"] and row["tpr"]["value"] is not None
    page = (tmp_path / "out" / "monitor.html").read_text()
    assert str(escape(doc["headline"][0])) in page and page.count("<img") == 2  # one series per group


def test_monitor_without_change_says_so(audit: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert _monitor(audit, _stream(tmp_path, drop_from=None), tmp_path / "out") == 0
    doc = json.loads((tmp_path / "out" / "monitor.json").read_text())
    capsys.readouterr()
    assert not doc["alerts"]
    below = [r for r in doc["rows"] if r["auc"]["value"] < doc["baseline"]["auc"][f"sex={r['group']}"]["ci_low"]]
    assert doc["headline"][0] == ("No group's AUC has fallen below its audited interval in 6 labelled windows."
                                  if not below else doc["headline"][0])
    assert doc["headline"][0].startswith("No ")


def test_monitor_gives_per_window_reasons(audit: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A window whose labels lag gets score drift only; a window with one class in a group gets no look."""
    rng = np.random.default_rng(3)
    late = _frame(rng, 200, [AUC, AUC], "2025-02").assign(y="")
    one = _frame(rng, 200, [AUC, AUC], "2025-01")
    one.loc[one.sex == "F", "y"] = 0
    pd.concat([one, late]).to_csv(tmp_path / "s.csv", index=False)
    assert _monitor(audit, tmp_path / "s.csv", tmp_path / "out") == 0
    capsys.readouterr()
    rows = {(r["window"], r["group"]): r for r in json.loads((tmp_path / "out" / "monitor.json").read_text())["rows"]}
    assert rows[("2025-01", "F")]["reason"].startswith("one class (0 positives, 200 negatives)")
    assert rows[("2025-01", "F")]["cusum"] is None and rows[("2025-01", "M")]["cusum"] is not None
    assert rows[("2025-02", "M")]["reason"].startswith("labels not yet known")
    assert rows[("2025-02", "M")]["drift"]["n"] == 200


def _refused(capsys: pytest.CaptureFixture, code: int) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err
    return err


def test_monitor_refuses_bad_inputs_in_one_line(audit: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    stream = _stream(tmp_path, None, 2)
    capsys.readouterr()
    err = _refused(capsys, main(["monitor", "--baseline", str(audit), "--stream", str(stream), "--window-column",
                                 "week", "--out", str(tmp_path / "o")]))
    assert "no column(s) ['week']" in err
    df = pd.read_csv(stream)
    df.loc[df.index[:3], "sex"] = "X"
    df.to_csv(tmp_path / "new.csv", index=False)
    err = _refused(capsys, _monitor(audit, tmp_path / "new.csv", tmp_path / "o"))
    assert "group(s) ['X'] of the stream are not among the audit's ['F', 'M']" in err
    (tmp_path / "r.json").write_text(json.dumps({"kind": "compare"}))
    err = _refused(capsys, _monitor(tmp_path / "r.json", stream, tmp_path / "o"))
    assert "is a 'compare' document" in err
    err = _refused(capsys, _monitor(audit, stream, tmp_path / "o", "--alpha", "1.5"))
    assert "--alpha 1.5" in err
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "result.json").write_text(audit.read_text())
    err = _refused(capsys, _monitor(moved / "result.json", stream, tmp_path / "o"))
    assert "per-sample predictions" in err
    assert not (tmp_path / "o").exists()


def test_monitor_page_in_chromium(audit: Path, tmp_path: Path, chromium: Any, capsys: pytest.CaptureFixture) -> None:
    """At 1400 and 390 px: the opening sentence above the first figure, no broken image, no sideways scroll."""
    assert _monitor(audit, _stream(tmp_path, drop_from=4), tmp_path / "out", "--report") == 0
    capsys.readouterr()
    for width in (1400, 390):
        chromium.set_window_size(width, 1000)
        chromium.get((tmp_path / "out" / "monitor.html").resolve().as_uri())
        facts = chromium.execute_script("""
            const top = e => e.getBoundingClientRect().top + window.scrollY;
            const imgs = [...document.querySelectorAll('img')];
            return {answer: top(document.querySelector('.answer')), img: Math.min(...imgs.map(top)),
                    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length,
                    wide: document.documentElement.scrollWidth - window.innerWidth};""")
        assert facts["answer"] < facts["img"] and facts["broken"] == 0 and facts["wide"] <= 1, (width, facts)
        assert chromium.save_screenshot(str(tmp_path / f"monitor-{width}.png"))


@pytest.mark.slow
def test_monitor_on_real_nih_follow_ups(real_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The CheXNet reproduction's NIH predictions (Effusion): the audit on the first visits (follow-up 0), the
    later visits in 8 windows of follow-up number; the page and the alert file are written."""
    root = real_data / "nih-cxr14"
    meta = pd.read_csv(root / "Data_Entry_2017_v2020.csv.gz",
                       usecols=["Image Index", "Finding Labels", "Follow-up #", "Patient ID", "Patient Age",
                                "Patient Gender"])
    df = pd.read_csv(root / "preds.csv", usecols=["Image Index", "prob_Effusion"]).merge(
        meta, on="Image Index", validate="one_to_one")
    df["Effusion"] = df["Finding Labels"].str.split("|").apply(lambda items: int("Effusion" in items))
    df[df["Follow-up #"] == 0].to_csv(tmp_path / "audit.csv", index=False)
    df[df["Follow-up #"] >= 1].to_csv(tmp_path / "later.csv", index=False)
    assert main(["evaluate", "--predictions", str(tmp_path / "audit.csv"), "--label", "Effusion", "--score",
                 "prob_Effusion", "--attribute", "Patient Gender,Patient Age", "--bins", "Patient Age=0,40,60,200",
                 "--n-boot", "100", "--n-perm", "200", "--out", str(tmp_path / "audit.json")]) == 0
    assert main(["monitor", "--baseline", str(tmp_path / "audit.json"), "--stream", str(tmp_path / "later.csv"),
                 "--window-column", "Follow-up #", "--window-bins", "1,2,3,4,6,9,14,25,200", "--n-boot", "100",
                 "--out", str(tmp_path / "m"), "--report"]) == 0
    capsys.readouterr()
    doc = json.loads((tmp_path / "m" / "monitor.json").read_text())
    assert len(doc["windows"]) == 8 and doc["windows"][0] == "[1, 2)"
    assert sum(r["n"] for r in doc["rows"] if r["attribute"] == "Patient Gender") == int((df["Follow-up #"] >= 1).sum())
    assert json.loads((tmp_path / "m" / "alerts.json").read_text())["alerts"] == doc["alerts"]
    assert (tmp_path / "m" / "monitor.html").stat().st_size > 50_000
