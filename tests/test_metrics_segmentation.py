"""Per-sample segmentation metrics: hand-computed cases, conventions, and cross-checks (MONAI, fairmedfm)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

from fairmedbench.errors import InputError
from fairmedbench.metrics.segmentation import (
    binarize,
    dice,
    dice_batch,
    dice_from_counts,
    dice_per_volume,
    dice_per_volume_from_counts,
    hd95,
    hd95_batch,
    iou,
    iou_from_counts,
    overlap_counts,
)


def _random_masks(seed: int, n: int = 8, shape: tuple[int, ...] = (9, 11)) -> tuple[np.ndarray, np.ndarray]:
    """Random boolean stacks with designed empties: 0 both empty, 1 empty G, 2 empty P."""
    rng = np.random.default_rng(seed)
    p = rng.random((n, *shape)) < rng.uniform(0.05, 0.6, size=(n,) + (1,) * len(shape))
    g = rng.random((n, *shape)) < rng.uniform(0.05, 0.6, size=(n,) + (1,) * len(shape))
    p[0], g[0], g[1], p[2] = False, False, False, False
    return p, g


# ---------------------------------------------------------------- binarize

def test_binarize_accepts_the_declared_encodings():
    ref = np.array([[0, 1], [1, 0]], dtype=bool)
    assert np.array_equal(binarize(ref), ref)
    assert np.array_equal(binarize(ref.astype(np.int64)), ref)
    assert np.array_equal(binarize(ref.astype(np.uint8) * 255), ref)
    assert np.array_equal(binarize(ref.astype(np.float32) * 255), ref)  # integral floats 0/255
    assert np.array_equal(binarize(np.array([[0.1, 0.9], [0.7, 0.49]])), ref)


def test_binarize_probability_exactly_at_threshold_is_positive():
    probs = np.array([0.4999999, 0.5, 0.5000001, 1.0, 0.0])
    assert binarize(probs).tolist() == [False, True, True, True, False]
    assert binarize(probs, threshold=0.7).tolist() == [False, False, False, True, False]


def test_binarize_label_map_needs_label():
    label_map = np.array([[0, 1, 2], [2, 2, 0]], dtype=np.uint8)
    with pytest.raises(InputError, match="label="):
        binarize(label_map)
    assert binarize(label_map, label=2).tolist() == [[False, False, True], [True, True, False]]
    with pytest.raises(InputError, match="fractional"):
        binarize(np.array([0.2, 1.0]), label=1)


@pytest.mark.parametrize("bad, message", [
    (np.array([0.0, 1.5, 0.2]), "outside"),
    (np.array([0.0, np.nan]), "NaN"),
    (np.array([0, -1, 1]), "label="),
    (np.array(["a", "b"]), "dtype"),
])
def test_binarize_rejects_undeclared_values(bad, message):
    with pytest.raises(InputError, match=message):
        binarize(bad)


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.5])
def test_binarize_threshold_must_be_in_unit_interval(threshold):
    with pytest.raises(InputError, match="threshold"):
        binarize(np.array([0.2, 0.8]), threshold=threshold)


# ---------------------------------------------------------------- dice / iou, hand-computed

def test_dice_iou_rectangles():
    # 4x4: P = rows 0-1 x cols 0-1 (4 px), G = rows 0-1 x cols 0-2 (6 px), |P∩G| = 4
    # DSC = 2*4/(4+6) = 0.8 ; IoU = 4/(4+6-4) = 2/3
    p = np.zeros((4, 4), bool)
    g = np.zeros((4, 4), bool)
    p[:2, :2] = True
    g[:2, :3] = True
    assert dice(p, g) == pytest.approx(0.8, abs=1e-12)
    assert iou(p, g) == pytest.approx(2 / 3, abs=1e-12)
    assert dice(g, p) == dice(p, g)


def test_dice_iou_scattered_pixels():
    # P = {(0,0),(0,1),(2,2)} 3 px ; G = {(0,0),(1,1),(2,2)} 3 px ; |P∩G| = 2 ((0,0),(2,2))
    # DSC = 4/6 = 2/3 ; IoU = 2/(3+3-2) = 0.5
    p = np.array([[1, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=np.uint8)
    g = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], dtype=np.uint8)
    assert dice(p, g) == pytest.approx(2 / 3, abs=1e-12)
    assert iou(p, g) == pytest.approx(0.5, abs=1e-12)


def test_dice_3d_volume():
    # 2x2x2: P = all 8 voxels, G = one 2x2 slab (4 voxels), |P∩G| = 4 ; DSC = 8/12 ; IoU = 4/8
    p = np.ones((2, 2, 2), bool)
    g = np.zeros((2, 2, 2), bool)
    g[0] = True
    assert dice(p, g) == pytest.approx(2 / 3, abs=1e-12)
    assert iou(p, g) == pytest.approx(0.5, abs=1e-12)


def test_probabilistic_prediction_thresholded_at_half():
    # P = probs >= 0.5 -> {(0,0) 0.5, (0,1) 0.9} 2 px ; G = {(0,0)} 1 px ; |P∩G| = 1 ; DSC = 2/3
    probs = np.array([[0.5, 0.9], [0.49, 0.0]])
    g = np.array([[1, 0], [0, 0]])
    assert dice(probs, g) == pytest.approx(2 / 3, abs=1e-12)
    assert dice(probs, g, threshold=0.95) == 0.0


def test_empty_conventions():
    empty = np.zeros((3, 3), bool)
    some = empty.copy()
    some[1, 1] = True
    assert dice(empty, empty) == 1.0 and iou(empty, empty) == 1.0
    assert dice(empty, empty, empty_score=0.0) == 0.0
    assert math.isnan(dice(empty, empty, empty_score=float("nan")))
    assert dice(some, empty) == 0.0 and iou(some, empty) == 0.0  # empty G, non-empty P
    assert dice(empty, some) == 0.0  # empty P, non-empty G
    with pytest.raises(InputError, match="empty_score"):
        dice(empty, empty, empty_score=2.0)


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(InputError, match=r"\(4, 5\).*\(5, 4\)"):
        dice(np.zeros((4, 5)), np.zeros((5, 4)))
    with pytest.raises(InputError, match=r"sample 1: .*\(2, 2\).*\(2, 3\)"):
        dice_batch([np.zeros((2, 2)), np.zeros((2, 2))], [np.zeros((2, 2)), np.zeros((2, 3))])


def test_counts_helpers_reject_inconsistent_counts():
    with pytest.raises(InputError, match="intersection"):
        dice_from_counts([5], [3], [4])
    assert iou_from_counts([0, 2], [0, 2], [0, 4], empty_score=0.0).tolist() == [0.0, 0.5]


# ---------------------------------------------------------------- batches

def test_dice_batch_stack_equals_per_sample_and_counts_empty_gt():
    p, g = _random_masks(0)
    out = dice_batch(p, g)
    assert out.dsc.tolist() == [dice(a, b) for a, b in zip(p, g)]
    assert out.iou.tolist() == [iou(a, b) for a, b in zip(p, g)]
    assert out.dsc[0] == 1.0 and out.dsc[1] == 0.0 and out.dsc[2] == 0.0
    assert out.empty_gt[:2].tolist() == [True, True] and out.n_empty_gt == int((g.sum(axis=(1, 2)) == 0).sum())


def test_dice_batch_list_of_different_sizes():
    # sample 0: 2x2 identical single pixel -> 1.0 ; sample 1: 3x5, P 2 px, G 2 px, overlap 1 -> 0.5
    p0 = np.array([[1, 0], [0, 0]])
    p1 = np.zeros((3, 5), int)
    g1 = np.zeros((3, 5), int)
    p1[0, :2] = 1
    g1[0, 1:3] = 1
    out = dice_batch([p0, p1], [p0, g1])
    assert out.dsc.tolist() == [1.0, 0.5]
    assert out.n_empty_gt == 0
    with pytest.raises(InputError, match="2 predicted masks but 1"):
        dice_batch([p0, p1], [p0])


def test_overlap_counts_stack():
    p, g = _random_masks(3, n=4)
    c = overlap_counts(p, g)
    assert c.intersection.tolist() == [int((a & b).sum()) for a, b in zip(p, g)]
    assert c.gt_size.tolist() == [int(b.sum()) for b in g]


# ---------------------------------------------------------------- 3D per-volume pooling

def test_per_volume_pools_counts_not_slice_dice():
    # volume "a", 3 slices (5x5):
    #   s0: P = G = one pixel             -> slice DSC 1.0   (inter 1, |P| 1, |G| 1)
    #   s1: G = 3x3 block (9 px), P = 1 px inside -> slice DSC 2/10 = 0.2 (inter 1, |P| 1, |G| 9)
    #   s2: both empty                    -> slice DSC 1.0 (empty_score)
    #   naive slice mean = (1 + 0.2 + 1)/3 = 0.7333 ; pooled = 2*2/(2 + 10) = 1/3
    # volume "b", 1 slice: P 2 px, G 2 px, overlap 1 -> 2/4 = 0.5
    p = np.zeros((4, 5, 5), bool)
    g = np.zeros((4, 5, 5), bool)
    p[1, 0, 0] = g[1, 0, 0] = True
    g[2, 1:4, 1:4] = True
    p[2, 2, 2] = True
    p[0, 0, :2] = True
    g[0, 0, 1:3] = True
    ids = ["b", "a", "a", "a"]
    out = dice_per_volume(p, g, ids)
    assert out.volume_ids.tolist() == ["a", "b"]
    assert out.dsc == pytest.approx([1 / 3, 0.5], abs=1e-12)
    assert out.n_slices.tolist() == [3, 1] and out.n_empty_gt == 0
    naive_a = dice_batch(p[1:], g[1:]).dsc.mean()
    assert naive_a == pytest.approx(2.2 / 3, abs=1e-12)
    assert abs(naive_a - out.dsc[0]) > 0.3
    # the whole volume as one 3D array gives the same pooled DSC
    assert dice(p[1:], g[1:]) == pytest.approx(out.dsc[0], abs=1e-12)


def test_per_volume_from_counts_and_empty_volume():
    out = dice_per_volume_from_counts([1, 1, 0, 0], [1, 1, 0, 3], [1, 9, 0, 0], [7, 7, 2, 2])
    # volume 2: G empty in every slice, P 3 px -> 0.0 ; volume 7: 4/12
    assert out.volume_ids.tolist() == [2, 7]
    assert out.dsc.tolist() == pytest.approx([0.0, 1 / 3])
    assert out.empty_gt.tolist() == [True, False] and out.n_empty_gt == 1
    with pytest.raises(InputError, match="one volume id per slice"):
        dice_per_volume_from_counts([1], [1], [1], [1, 2])
    with pytest.raises(InputError, match="mixes kinds"):
        dice_per_volume_from_counts([1, 1], [1, 1], [1, 1], np.array([1, "a"], dtype=object))


# ---------------------------------------------------------------- HD95

def test_hd95_single_pixels_hand_computed():
    # P = {(0,0)}, G = {(3,4)}: every surface distance is the 3-4-5 triangle's hypotenuse -> 5
    p = np.zeros((10, 10), bool)
    g = np.zeros((10, 10), bool)
    p[0, 0] = True
    g[3, 4] = True
    assert hd95(p, g) == pytest.approx(5.0)
    # spacing (2 mm rows, 1 mm cols): sqrt((3*2)^2 + 4^2) = sqrt(52)
    assert hd95(p, g, spacing=(2.0, 1.0)) == pytest.approx(math.sqrt(52))
    assert hd95(p, p) == 0.0
    with pytest.raises(InputError, match="spacing"):
        hd95(p, g, spacing=(1.0, 1.0, 1.0))


def test_hd95_empty_is_nan_with_reason():
    full = np.zeros((6, 6), bool)
    full[2:4, 2:4] = True
    empty = np.zeros((6, 6), bool)
    assert math.isnan(hd95(full, empty))
    out = hd95_batch([full, empty, full, empty], [full, full, empty, empty])
    assert out.values[0] == 0.0 and np.isnan(out.values[1:]).all()
    assert out.skipped == {1: "prediction is empty", 2: "ground truth is empty",
                           3: "both prediction and ground truth are empty"}


def _blobs(seed: int, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    from scipy import ndimage
    rng = np.random.default_rng(seed)
    return (ndimage.gaussian_filter(rng.random(shape), 2) > 0.52,
            ndimage.gaussian_filter(rng.random(shape), 2) > 0.5)


@pytest.mark.parametrize("shape, spacing", [((40, 50), None), ((40, 50), (0.7, 1.6)),
                                            ((20, 24, 18), None), ((20, 24, 18), (1.5, 0.8, 2.5))])
def test_hd95_matches_monai(shape, spacing):
    # Same convention as MONAI: surface = mask XOR eroded mask (face connectivity, border counts as
    # background), symmetric HD95 = max of the two directed 95th percentiles (linear interpolation).
    # MONAI computes in float32, hence the 1e-5 relative tolerance.
    torch = pytest.importorskip("torch")
    monai_metrics = pytest.importorskip("monai.metrics")
    p, g = _blobs(sum(shape), shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # MONAI's own deprecation notice
        ref = monai_metrics.compute_hausdorff_distance(torch.from_numpy(p[None, None]),
                                                       torch.from_numpy(g[None, None]),
                                                       include_background=True, percentile=95, spacing=spacing)
    assert hd95(p, g, spacing=spacing) == pytest.approx(float(ref), rel=1e-5)
    batch = hd95_batch([p, p], [g, g], spacings=[spacing, spacing])
    assert batch.values.tolist() == [hd95(p, g, spacing=spacing)] * 2


def test_monai_empty_hd95_convention():
    # MONAI with percentile=95 gives NaN (quantile of inf distances) whether one or both masks are empty,
    # and inf for one empty mask without a percentile; we give NaN in every empty case, with a reason.
    torch = pytest.importorskip("torch")
    monai_metrics = pytest.importorskip("monai.metrics")
    g = np.zeros((1, 1, 6, 6), bool)
    g[..., 2:4, 2:4] = True
    z = np.zeros_like(g)

    def monai_hd(a, b, percentile):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(monai_metrics.compute_hausdorff_distance(torch.from_numpy(a), torch.from_numpy(b),
                                                                  include_background=True, percentile=percentile))

    assert all(math.isnan(monai_hd(a, b, 95)) for a, b in [(z, g), (g, z), (z, z)])
    assert math.isinf(monai_hd(z, g, None))
    assert all(math.isnan(hd95(a[0, 0], b[0, 0])) for a, b in [(z, g), (g, z), (z, z)])


# ---------------------------------------------------------------- cross-checks

@pytest.mark.parametrize("seed, shape", [(0, (9, 11)), (1, (5, 6, 7))])
def test_dice_matches_monai_dicemetric(seed, shape):
    # MONAI DiceMetric(include_background=True, ignore_empty=False): both empty -> 1.0, empty G with
    # non-empty P -> 0.0 (our defaults). Two-channel float64 one-hot keeps MONAI in float64.
    torch = pytest.importorskip("torch")
    monai_metrics = pytest.importorskip("monai.metrics")
    p, g = _random_masks(seed, shape=shape)

    def onehot(m):
        return torch.from_numpy(np.stack([~m, m], axis=1).astype(np.float64))

    metric = monai_metrics.DiceMetric(include_background=True, ignore_empty=False, reduction="none")
    ref = metric(onehot(p), onehot(g))[:, 1].numpy()
    assert ref[0] == 1.0 and ref[1] == 0.0  # MONAI's both-empty and empty-G conventions
    np.testing.assert_allclose(dice_batch(p, g).dsc, ref, rtol=0, atol=1e-9)


def test_dice_matches_fairmedfm():
    # fairmedfm has no public per-sample dice; evaluate_segmentation with one group per sample exposes
    # its per-sample Dice (pred: probs >= 0.5, truth: > 0; empty_score=1.0 like ours).
    fairmedfm = pytest.importorskip("fairmedfm")
    p, g = _random_masks(5, n=6)
    probs = np.where(p, 0.75, 0.25)
    names = [f"s{i}" for i in range(len(p))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = fairmedfm.evaluate_segmentation({"sample": names}, pred_masks=list(probs),
                                                 true_masks=list(g.astype(np.uint8)))
    ref = report.by_group.loc["sample"].loc[names, "mean_dice"].to_numpy()
    np.testing.assert_allclose(dice_batch(probs, g.astype(np.uint8)).dsc, ref, rtol=0, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(arrays(bool, (2, 4, 5)))
def test_dice_iou_identity(stack):
    # DSC = 2J / (1 + J) (both-empty: 1 = 2/2 too); both lie in [0, 1]
    p, g = stack
    d, j = dice(p, g), iou(p, g)
    assert 0.0 <= d <= 1.0 and 0.0 <= j <= 1.0
    assert d == pytest.approx(2 * j / (1 + j), abs=1e-12)
