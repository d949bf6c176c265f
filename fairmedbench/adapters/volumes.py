"""2.5D classification: any classification usage on volumes (D, H, W), slice by slice, one prediction per volume.

Slices are chosen by a policy (hparam `slices`), each is encoded as a 2D image by the usage itself (so the
feature cache holds one row per slice), and a head scores each slice and aggregates per volume
(hparam `slice_agg`). The runner trains, selects and evaluates on volumes: one label, one score, one
predictions row per volume, never per slice.

As FairMedFM (trainers/cls.py, `is_3d`): the head is trained on volumes, and with `max` a volume's logits are
those of its slice of highest positive probability, in training as at inference.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.adapters.base import Prepared, RunContext, Usage
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.engine.features import ImageSplit
    from fairmedbench.registry.models.runtime import FoundationModel

SLICE_AGGREGATIONS = ("max", "mean", "attention")
DEFAULT_SLICES = "all"  # FairMedFM feeds every slice of an ADNI / COVID-CT-MD volume
DEFAULT_AGG = "max"
# hyperparameters of a usage that accepts volumes (Usage.volumes), declared by the resolver on 3D datasets only
VOLUME_HPARAMS = MappingProxyType({"slices": DEFAULT_SLICES, "slice_agg": DEFAULT_AGG})
#: on a CPU, slices go to the encoder in batches of at least this many GFLOP (whole volumes' slices where the
#: encoder is small; the runner's default batch of 2 where it is not). The small batch suits a large encoder's
#: memory, not a ResNet's 224 px slice (3.6 GFLOP): with torch's 2 threads on 2 shared cores a batch of 2 spent most
#: of its CPU time in the threads' waits (c2l bf16, load 15: 314 CPU-ms per slice at 2, 82 at 32; one thread: 41, 33)
SLICE_BATCH_GFLOP = 128.0
#: the largest such batch (a 32-slice volume; a ResNet-18 batch of 32 needs about 0.4 GB)
MAX_SLICE_BATCH = 32


def parse_policy(policy: object) -> tuple[str, int]:
    """`all`, `n:K` (K evenly spaced slices) or `foreground` -> (kind, K); InputError otherwise."""
    text = str(policy).strip()
    if text in ("all", "foreground"):
        return text, 0
    m = re.fullmatch(r"n:(\d+)", text)
    if m and int(m.group(1)) >= 1:
        return "n", int(m.group(1))
    raise InputError(f"hparam slices={policy!r}: use 'all', 'n:K' (K >= 1 evenly spaced slices) or 'foreground' "
                     "(slices not blank at the volume's minimum intensity)")


def select_slices(volume: np.ndarray, policy: str) -> np.ndarray:
    """Indices along the first axis of the slices `policy` keeps (never empty).

    `foreground` keeps the slices holding any voxel brighter than the volume's minimum (it drops blank
    padding slices). It reads the image only: a ground-truth mask is not used, since on a lesion dataset
    its presence is the label itself and reading it would leak the test label into the input.
    """
    kind, k = parse_policy(policy)
    depth = volume.shape[0]
    if kind == "all":
        return np.arange(depth)
    if kind == "n":
        return np.unique(np.minimum(((np.arange(k) + 0.5) * depth / k).astype(int), depth - 1))
    keep = np.flatnonzero(volume.reshape(depth, -1).max(axis=1) > volume.min())
    return keep if len(keep) else np.arange(depth)


class SliceView:
    """The slices of a split of volumes as a 2D split: ids `<volume id>#z<index>`, a policy-keyed fingerprint."""

    def __init__(self, view: Any, policy: str) -> None:
        self.view, self.policy = view, policy
        self.fingerprint = f"{view.fingerprint}:slices={policy}"
        self.index: list[tuple[int, int]] = []  # (volume position in the view, slice index)
        self.counts: list[int] = []
        for k in range(len(view)):
            volume = view.load_image(k)
            if volume.ndim != 3:
                raise InputError(f"sample {view.sample_ids[k]} has shape {volume.shape}: 2.5D classification "
                                 "expects volumes (D, H, W)")
            zs = select_slices(volume, policy)
            self.index += [(k, int(z)) for z in zs]
            self.counts.append(len(zs))
        self.sample_ids = [f"{view.sample_ids[k]}#z{z}" for k, z in self.index]
        self._cached: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.index)

    def load_image(self, i: int) -> np.ndarray:
        k, z = self.index[i]
        if self._cached is None or self._cached[0] != k:  # slices are read in order: decode each volume once
            self._cached = (k, self.view.load_image(k))
        return self._cached[1][z]


def to_volumes(x: np.ndarray, counts: list[int]) -> np.ndarray:
    """Per-slice rows (sum(counts), ...) -> (n_volumes, max(counts), ...), NaN-padded past each volume's slices."""
    out = np.full((len(counts), max(counts), *x.shape[1:]), np.nan, dtype=np.float32)
    start = 0
    for v, c in enumerate(counts):
        out[v, :c] = x[start:start + c]
        start += c
    return out


def make_volume_head(slice_head: Any, agg: str, example: np.ndarray):  # -> torch.nn.Module
    """Wrap a slice head (with `.representation` and `.linear`) to score NaN-padded volumes (b, S, ...).

    The volume representation is what `.linear` turns into the volume's logits, so mitigations that read or
    copy the representation and the output layer work unchanged:
    max: the representation of the slice of highest first logit (= highest positive probability);
    mean: the mean slice representation (for linear and prototype heads, the mean of the slice logits);
    attention: attention-MIL pooling (Ilse et al. 2018), weights softmax(w^T tanh(V h)) learned with the head.
    """
    import torch
    from torch import nn

    class VolumeHead(nn.Module):
        """Slice head per valid slice, aggregated per volume; returns logits (b, K)."""

        def __init__(self) -> None:
            super().__init__()
            self.slice_head = slice_head
            self.linear = slice_head.linear
            if agg == "attention":
                with torch.no_grad():
                    dim = slice_head.representation(torch.as_tensor(example[:1], dtype=torch.float32)).shape[1]
                self.attn_v = nn.Linear(dim, 64)
                self.attn_w = nn.Linear(64, 1)

        def slices(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """Slice representations (b, S, d) (zeros on padding) and the valid-slice mask (b, S)."""
            b, s = x.shape[:2]
            flat = x.reshape(b * s, *x.shape[2:])
            valid = ~torch.isnan(flat.reshape(b * s, -1)).any(dim=1)
            rep = self.slice_head.representation(flat[valid])
            full = rep.new_zeros((b * s, rep.shape[1]))
            full[valid] = rep
            return full.reshape(b, s, -1), valid.reshape(b, s)

        def representation(self, x: torch.Tensor) -> torch.Tensor:
            rep, valid = self.slices(x)
            if agg == "max":
                b, s, d = rep.shape  # output layers take (n, d) rows (the prototype head's einsum does)
                score = self.linear(rep.reshape(b * s, d))[:, 0].reshape(b, s).masked_fill(~valid, float("-inf"))
                return rep[torch.arange(len(rep)), score.argmax(dim=1)]
            if agg == "mean":
                w = valid.to(rep.dtype)
                return (rep * w[..., None]).sum(dim=1) / w.sum(dim=1, keepdim=True)
            a = self.attn_w(torch.tanh(self.attn_v(rep)))[..., 0].masked_fill(~valid, float("-inf"))
            return (torch.softmax(a, dim=1)[..., None] * rep).sum(dim=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(self.representation(x))

    return VolumeHead()


def volume_settings(hparams: dict[str, Any] | None) -> tuple[str, str]:
    """(slice policy, aggregation) from the run's hparams, validated."""
    hp = hparams or {}
    policy = str(hp.get("slices", DEFAULT_SLICES))
    parse_policy(policy)
    agg = str(hp.get("slice_agg", DEFAULT_AGG))
    if agg not in SLICE_AGGREGATIONS:
        raise InputError(f"hparam slice_agg={agg!r}: choose one of {', '.join(SLICE_AGGREGATIONS)}")
    return policy, agg


def slice_batch(model: FoundationModel, ctx: RunContext) -> int:
    """The encoder batch of the slices: on a CPU, enough slices for SLICE_BATCH_GFLOP of the model's FLOPs per call
    (at most MAX_SLICE_BATCH, never below the run's batch); elsewhere, or FLOPs unknown, the run's."""
    if not ctx.device.startswith("cpu"):
        return ctx.batch_size
    from fairmedbench.engine.flops import model_flops

    gflops = model_flops(model.card.name).get("gflops")
    if not gflops:
        return ctx.batch_size
    batch = max(ctx.batch_size, min(MAX_SLICE_BATCH, int(SLICE_BATCH_GFLOP // gflops)))
    if batch != ctx.batch_size:
        print(f"slice batch -> {batch} ({gflops:.1f} GFLOP per slice: at least {SLICE_BATCH_GFLOP:.0f} GFLOP per "
              f"encoder call on a CPU, up to {MAX_SLICE_BATCH} slices)", file=sys.stderr)
    return batch


def prepare_classification(usage: Usage, model: FoundationModel, views: Mapping[str, ImageSplit],
                           ctx: RunContext) -> Prepared:
    """`usage.prepare` on 2D data; on a 3D dataset the same usage on slices, with a per-volume head."""
    card = ctx.dataset_card
    if card is None or card.dim != 3:
        given = [h for h in VOLUME_HPARAMS if h in (ctx.hparams or {})]
        if given:
            raise InputError(f"hparam {', '.join(given)} applies to 3D datasets; "
                             f"{card.name if card else 'this dataset'!r} is 2D")
        return usage.prepare(model, views, ctx)
    policy, agg = volume_settings(ctx.hparams)
    slice_views = {name: SliceView(view, policy) for name, view in views.items()}
    batch = slice_batch(model, ctx)
    inner = usage.prepare(model, slice_views, replace(ctx, batch_size=batch))
    counts = {name: sv.counts for name, sv in slice_views.items()}
    inputs = {name: to_volumes(np.asarray(x), counts[name]) for name, x in inner.inputs.items()}
    flat_train = np.asarray(inner.inputs["train"])

    def make_head(x_train: np.ndarray, k: int):  # -> torch.nn.Module
        if agg == "max" and k > 1:
            raise InputError(f"slice_agg=max picks one slice by the first label's probability; with {k} labels "
                             "use slice_agg=mean or slice_agg=attention")
        return make_volume_head(inner.make_head(flat_train, k), agg, flat_train)

    notes = {**inner.notes, "volumes": {
        "slices": policy, "slice_agg": agg, "unit": "volume", "encoder_batch": batch,
        "slices_per_volume": {name: {"min": int(min(c)), "max": int(max(c)), "total": int(sum(c))}
                              for name, c in counts.items()}}}
    return Prepared(inputs, make_head, notes)
