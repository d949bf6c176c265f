"""anomaly: kNN and Mahalanobis scorers fitted on normal training rows only, the strictly monotone score map, errors,
and a run end to end through the classification runner."""

from __future__ import annotations

import numpy as np
import pytest
from fmb_usage_helpers import tiny_opts, tiny_spec
from scipy.stats import rankdata

from fairmedbench.adapters import USAGES
from fairmedbench.adapters.anomaly import make_anomaly_head
from fairmedbench.benchmark.resolve import check_spec
from fairmedbench.errors import InputError


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x_tr = rng.normal(size=(60, 4))
    y_tr = (np.arange(60) >= 45).astype(int)[:, None]  # 45 normal, 15 positive rows
    x_tr[y_tr[:, 0] == 1] += 3.0
    x_va, y_va = rng.normal(size=(20, 4)), np.zeros((20, 1), dtype=int)
    x_te = np.vstack([rng.normal(size=(30, 4)), rng.normal(size=(10, 4)) + 2.0])
    y_te = np.r_[np.zeros(30), np.ones(10)]
    return x_tr, y_tr, x_va, y_va, x_te, y_te


def _scores(head, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return torch.sigmoid(head(torch.as_tensor(x, dtype=torch.float32))).numpy()[:, 0]


def _auc(y: np.ndarray, s: np.ndarray) -> float:
    n1 = int(y.sum())
    return float((rankdata(s)[y == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * (len(y) - n1)))


def test_knn_is_the_mean_distance_to_the_k_nearest_normal_training_rows() -> None:
    x_tr, y_tr, x_va, y_va, x_te, y_te = _data()
    head = make_anomaly_head("knn", 3)
    head.fit_normal(x_tr, y_tr, x_va, y_va)
    normal = x_tr[:45]
    mean, std = normal.mean(axis=0), normal.std(axis=0)
    z = lambda a: (a - mean) / std  # noqa: E731
    x32 = x_te.astype(np.float32).astype(np.float64)  # the runner hands float32 features
    dist = np.sqrt(((z(x32)[:, None, :] - z(normal)[None]) ** 2).sum(axis=2))
    want = np.sort(dist, axis=1)[:, :3].mean(axis=1)
    np.testing.assert_allclose(head.distance(x32), want, rtol=1e-10)
    s = _scores(head, x_te)
    assert ((s >= 0) & (s <= 1)).all()
    assert _auc(y_te, s) == _auc(y_te, want)  # a strictly increasing map: AUROC of the raw distance
    # the map uses validation normals only: their log-distance has mean 0 and std 1 after it
    logit = np.log(head.distance(x_va)) - float(head.mu)
    assert abs(logit.mean()) < 1e-9 and abs((logit / float(head.sigma)).std() - 1) < 1e-9


def test_positive_training_rows_are_never_used() -> None:
    x_tr, y_tr, x_va, y_va, x_te, _ = _data()
    a, b = make_anomaly_head("mahalanobis", 5), make_anomaly_head("mahalanobis", 5)
    a.fit_normal(x_tr, y_tr, x_va, y_va)
    moved = x_tr.copy()
    moved[45:] = 100.0  # only positive rows change
    b.fit_normal(moved, y_tr, x_va, y_va)
    np.testing.assert_array_equal(_scores(a, x_te), _scores(b, x_te))


def test_mahalanobis_is_ledoit_wolf_on_standardised_normal_rows() -> None:
    from sklearn.covariance import LedoitWolf

    x_tr, y_tr, x_va, y_va, x_te, _ = _data(1)
    head = make_anomaly_head("mahalanobis", 5)
    head.fit_normal(x_tr, y_tr, x_va, y_va)
    normal = x_tr[:45]
    z = lambda a: (a - normal.mean(axis=0)) / normal.std(axis=0)  # noqa: E731
    want = np.sqrt(LedoitWolf().fit(z(normal)).mahalanobis(z(x_te)))
    np.testing.assert_allclose(head.distance(x_te), want, rtol=1e-10)


def test_too_few_normal_rows_and_bad_hparams_are_errors() -> None:
    x_tr, y_tr, x_va, y_va, _, _ = _data()
    with pytest.raises(InputError, match="normal .label 0. training samples: 45 found, 51 needed"):
        make_anomaly_head("knn", 50).fit_normal(x_tr, y_tr, x_va, y_va)
    usage = USAGES.get("anomaly")
    with pytest.raises(InputError, match="choose one of knn, mahalanobis"):
        usage.check_hparams({"scorer": "iforest"})
    with pytest.raises(InputError, match="k applies to scorer=knn only"):
        usage.check_hparams({"scorer": "mahalanobis", "k": 3})
    with pytest.raises(InputError, match="k=0 must be >= 1"):
        usage.check_hparams({"k": 0})


def test_a_mitigation_and_seeds_that_cannot_differ_are_refused_before_any_work() -> None:
    from fairmedbench.benchmark.resolve import resolve_run

    with pytest.raises(InputError, match="learns nothing"):
        check_spec(tiny_spec("c2l", "anomaly", mitigation="groupdro"))
    with pytest.raises(InputError, match="takes no gradient step, so .* every seed trains the same head"):
        resolve_run(tiny_spec("c2l", "anomaly", seeds=(0, 1)), device="cpu")
    sampled = tiny_spec("c2l", "anomaly", seeds=(0, 1), attributes=("sex",), train_group_share=0.5)
    assert resolve_run(sampled, device="cpu").config.seeds == (0, 1)  # the seed draws the training sample


@pytest.mark.parametrize("scorer", ["knn", "mahalanobis"])
def test_runs_end_to_end_through_the_classification_runner(scorer: str, run_dirs) -> None:
    from fairmedbench.benchmark.run import run

    out = run(tiny_spec("c2l", "anomaly", hparams={"scorer": scorer, "k": 3} if scorer == "knn"
                        else {"scorer": scorer}), tiny_opts(run_dirs))
    doc = out.seed_docs[0]
    assert doc["usage"]["scorer"] == scorer and doc["training"]["best_epoch"] == -1
    auc = doc["result"]["reports"][0]["metrics"]["auc"]
    assert 0.0 <= auc["__overall__"]["value"] <= 1.0 and {"female", "male"} <= set(auc)
