"""2.5D classification: slice policies, per-volume aggregation (max / mean / attention) and runs that report one
prediction per volume on synth3d-contrast and on ADNI and COVID-CT-MD fixtures in their official layouts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fairmedbench.adapters import volumes
from fairmedbench.adapters.base import RunContext
from fairmedbench.adapters.linear_probe import make_linear_head
from fairmedbench.adapters.volumes import make_volume_head, select_slices, slice_batch, to_volumes
from fairmedbench.benchmark.run import RunOptions, run
from fairmedbench.errors import InputError
from fairmedbench.spec import RunSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))
from fmb_ds_fixtures import volume, write_csv, write_nifti  # noqa: E402


def _slices_and_volumes(seed: int = 0) -> tuple[np.ndarray, list[int], np.ndarray]:
    rng = np.random.default_rng(seed)
    counts = [3, 1, 4, 2]  # unequal depths: the volume array is NaN-padded to 4 slices
    flat = rng.normal(size=(sum(counts), 5)).astype(np.float32)
    return flat, counts, to_volumes(flat, counts)


def _slice_logits(head, flat: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return head.slice_head(torch.as_tensor(flat)).numpy()


def test_to_volumes_pads_with_nan() -> None:
    flat, counts, vols = _slices_and_volumes()
    assert vols.shape == (4, 4, 5)
    assert np.isnan(vols[1, 1:]).all() and not np.isnan(vols[2]).any()
    np.testing.assert_array_equal(vols[3, :2], flat[8:10])


def test_max_aggregation_is_the_per_slice_maximum_probability() -> None:
    flat, counts, vols = _slices_and_volumes()
    torch.manual_seed(0)
    head = make_volume_head(make_linear_head(flat, 1), "max", flat)
    with torch.no_grad():
        volume_prob = torch.sigmoid(head(torch.as_tensor(vols)))[:, 0].numpy()
    slice_prob = 1 / (1 + np.exp(-_slice_logits(head, flat)[:, 0]))
    starts = np.cumsum([0, *counts[:-1]])
    expected = [slice_prob[s:s + c].max() for s, c in zip(starts, counts)]
    np.testing.assert_allclose(volume_prob, expected, rtol=1e-6)
    # the representation is the chosen slice's, so `.linear(representation)` gives the same logits
    with torch.no_grad():
        rep = head.representation(torch.as_tensor(vols))
        np.testing.assert_allclose(head.linear(rep).numpy(), head(torch.as_tensor(vols)).numpy(), rtol=1e-6)


def test_mean_aggregation_is_the_mean_slice_logit_and_ignores_padding() -> None:
    flat, counts, vols = _slices_and_volumes()
    torch.manual_seed(0)
    head = make_volume_head(make_linear_head(flat, 2), "mean", flat)
    with torch.no_grad():
        got = head(torch.as_tensor(vols)).numpy()
    logits = _slice_logits(head, flat)
    starts = np.cumsum([0, *counts[:-1]])
    np.testing.assert_allclose(got, [logits[s:s + c].mean(0) for s, c in zip(starts, counts)], rtol=1e-5)


def test_attention_pooling_weights_only_real_slices() -> None:
    flat, counts, vols = _slices_and_volumes()
    torch.manual_seed(0)
    head = make_volume_head(make_linear_head(flat, 1), "attention", flat)
    one = torch.as_tensor(vols[1:2, :1])  # volume 1 has a single slice: attention must return exactly it
    with torch.no_grad():
        padded = head(torch.as_tensor(vols[1:2]))
        np.testing.assert_allclose(padded.numpy(), head(one).numpy(), rtol=1e-6)
        np.testing.assert_allclose(padded.numpy()[0], _slice_logits(head, flat[3:4])[0], rtol=1e-5)
    assert any(p.requires_grad for n, p in head.named_parameters() if n.startswith("attn_"))


def test_slice_policies() -> None:
    vol = np.zeros((10, 4, 4), np.uint8)
    vol[3:7, 1, 1] = 200
    assert select_slices(vol, "all").tolist() == list(range(10))
    assert select_slices(vol, "n:3").tolist() == [1, 5, 8]
    assert select_slices(vol, "n:20").tolist() == list(range(10))  # never more slices than the volume has
    assert select_slices(vol, "foreground").tolist() == [3, 4, 5, 6]
    assert select_slices(np.zeros((5, 2, 2), np.uint8), "foreground").tolist() == list(range(5))
    for bad in ("some", "n:0", "n:x"):
        with pytest.raises(InputError, match="slices="):
            select_slices(vol, bad)


def _run(tmp: Path, dataset: str, root: Path | None = None, **hp):
    spec = RunSpec(model="c2l", weights="random", dataset=dataset, usage="lp", seeds=(0,), n_boot=20,
                   dataset_options={"n": 30} if root is None else {},
                   hparams={"epochs": 5, "slices": "n:3", **hp})
    opts = RunOptions(out_root=str(tmp / "out"), cache_dir=str(tmp / "cache"), device="cpu",
                      data_root=None if root is None else str(root))
    return run(spec, opts)


def _per_volume(out, n_volumes: int) -> pd.DataFrame:
    doc = out.seed_docs[0]
    pred = pd.read_parquet(out.out_dir / doc["predictions"]["file"])
    assert pred["sample_id"].is_unique and not pred["sample_id"].str.contains("#z").any()
    assert (pred["split"] == "test").sum() == doc["inputs"]["dataset"]["n_test"]
    vols = doc["usage"]["volumes"]
    assert vols["unit"] == "volume" and vols["slices"] == "n:3" and vols["slice_agg"] == "max"
    assert sum(v["total"] for v in vols["slices_per_volume"].values()) == 3 * n_volumes
    assert vols["encoder_batch"] == 32  # c2l: 128 GFLOP // 3.63 per slice = 35, capped at MAX_SLICE_BATCH
    return pred


def test_lp_on_synth3d_reports_one_row_per_volume(tmp_path: Path) -> None:
    out = _run(tmp_path, "synth3d-contrast")
    pred = _per_volume(out, 30)
    assert len(pred) < 30 and set(pred["split"]) == {"val", "test"}
    train_key = out.seed_docs[0]["usage"]["features"]["train"]["key"]
    again = _run(tmp_path, "synth3d-contrast", slice_agg="mean")  # same slices: the feature cache is reused
    assert again.seed_docs[0]["usage"]["features"]["train"]["from_cache"]
    assert again.seed_docs[0]["usage"]["features"]["train"]["key"] == train_key


def test_slice_hparams_on_2d_data_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="3D datasets"):
        _run(tmp_path, "synth-contrast")
    with pytest.raises(InputError, match="slice_agg="):
        _run(tmp_path, "synth3d-contrast", slice_agg="median")


def _adni(root: Path, n: int = 16) -> Path:
    header = ["Image Data ID", "Subject", "Group", "Sex", "Age", "Visit", "Modality", "Description", "Type",
              "Acq Date", "Format", "Downloaded"]
    rows = []
    for k in range(n):
        iid, subj = f"I{1000 + k}", f"002_S_{k:04d}"
        rows.append([iid, subj, ["CN", "AD"][k % 2], "M" if (k // 2) % 2 else "F", 55 + k, "sc", "MRI", "MPRAGE",
                     "Original", "1/01/2010", "NiFTI", "1/01/2020"])
        write_nifti(root / "ADNI" / subj / "MPRAGE" / "2010-01-01" / iid / f"ADNI_{subj}_MR_MPRAGE_br_raw_{iid}.nii",
                    volume(seed=k).astype(np.float32))
    write_csv(root / "ADNI1_Screening_1_04_2020.csv", header, rows)
    return root


def _covid(root: Path, n: int = 18) -> Path:
    rows = []
    kinds = (("COVID-19", "COVID-19 Cases"), ("CAP", "Cap Cases"), ("Normal", "Normal Cases"))
    for k in range(n):
        diag, folder = kinds[k % 3]
        rows.append([f"P{k:03d}", diag, "M" if (k // 3) % 2 else "F", f"0{40 + k}Y"])
        write_nifti(root / folder / f"P{k:03d}.nii.gz", volume(seed=k))
    write_csv(root / "Clinical-data.csv", ["Folder", "Diagnosis", "Patient Gender", "Patient Age"], rows)
    return root


@pytest.mark.parametrize("name,make,n", [("adni", _adni, 16), ("covid-ct-md", _covid, 18)])
def test_official_layout_fixtures_run_end_to_end(tmp_path: Path, name: str, make, n: int) -> None:
    out = _run(tmp_path, name, root=make(tmp_path / name, n))
    pred = _per_volume(out, n)
    assert len(pred) == out.seed_docs[0]["inputs"]["dataset"]["n_test"] + (pred["split"] == "val").sum()
    assert pred["score:label"].between(0, 1).all()


@pytest.mark.parametrize(("gflops", "device", "run_batch", "expected"), [
    (3.6, "cpu", 2, 32),  # 128 // 3.6 = 35 slices, capped at 32
    (40.0, "cpu", 2, 3),  # 128 // 40 = 3
    (200.0, "cpu", 2, 2),  # one slice would exceed the budget: the run's batch
    (3.6, "cpu", 48, 48),  # never below the run's batch
    (None, "cpu", 2, 2),  # FLOPs unknown
    (3.6, "cuda:0", 16, 16),  # not on a CPU
])
def test_slice_batch_holds_enough_flops_per_encoder_call(monkeypatch: pytest.MonkeyPatch, gflops: float | None,
                                                         device: str, run_batch: int, expected: int) -> None:
    import fairmedbench.engine.flops as flops

    monkeypatch.setattr(flops, "model_flops", lambda name: {"gflops": gflops, "how": "counted"})
    model = type("M", (), {"card": type("C", (), {"name": "c2l"})()})()
    assert volumes.SLICE_BATCH_GFLOP == 128.0 and volumes.MAX_SLICE_BATCH == 32
    assert slice_batch(model, RunContext(device=device, batch_size=run_batch)) == expected
