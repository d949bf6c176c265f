"""Native 3D promptable segmenters: one prompt per volume, a mask of the whole volume.

The base class and the geometry they share: volumes arrive as the dataset layer gives them, uint8 (D, H, W);
prompts as `adapters.prompts.make_prompt_3d` makes them, points (x, y, z) and boxes (x0, y0, z0, x1, y1, z1).
Imported only when a 3D model is loaded (torch at module level).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from fairmedbench.errors import InputError
from fairmedbench.registry.models.runtime import Box, FoundationModel, VolumePrompt

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


class VolumetricSegmenter(FoundationModel):
    """A model that segments a whole volume from one 3D prompt (`segment_volume`); it has no 2D path."""

    volumetric = True

    @property
    def prompt_kinds(self) -> tuple[str, ...]:
        """"points" and/or "box": what its prompt encoder takes (from the card's prompt modes; none listed: both)."""
        modes = set(self.card.prompt_modes or ("bbox", "rand"))
        return tuple(k for k, has in (("points", bool(modes - {"bbox"})), ("box", "bbox" in modes)) if has)

    def segment(self, image: np.ndarray, box: Box | None = None, points: ArrayLike | None = None,
                point_labels: ArrayLike | None = None, multimask: bool | None = None) -> np.ndarray:
        """Not offered: this model segments volumes; see `segment_volume`."""
        raise InputError(f"model {self.card.name!r} segments 3D volumes, not 2D images: use a 3D dataset "
                         "(benchmark list datasets) or a 2D model")

    def segment_volume(self, volume: np.ndarray, prompt: VolumePrompt, spacing: Sequence[float] | None = None,
                       text: str | None = None) -> np.ndarray:
        """uint8 (D, H, W) volume, a 3D prompt, its voxel spacing (D, H, W) in mm and the target's name (for models
        with text prompts) -> boolean (D, H, W) mask."""
        raise NotImplementedError

    def check_prompt(self, volume: np.ndarray, prompt: VolumePrompt) -> None:
        """InputError for a 2D input or a prompt kind this model's prompt encoder does not take."""
        if np.ndim(volume) != 3:
            raise InputError(f"model {self.card.name!r} segments volumes (D, H, W); got shape {np.shape(volume)}")
        kind = "box" if prompt.box is not None else "points"
        if kind not in self.prompt_kinds:
            raise InputError(f"model {self.card.name!r} takes {' and '.join(self.prompt_kinds)} prompts, not a "
                             f"{kind} (its official prompt encoder has no {kind} embedding); use --prompt "
                             f"{'rand or rands' if 'points' in self.prompt_kinds else 'bbox'}")


def resample_xyz(x: torch.Tensor, spacing_dhw: Sequence[float] | None, target: float | None
                 ) -> tuple[torch.Tensor, np.ndarray]:
    """Trilinear resampling of an (X, Y, Z) volume to `target` mm voxels; returns it and the per-axis scale."""
    if spacing_dhw is None or not target:
        return x, np.ones(3)
    sp = np.asarray(spacing_dhw, dtype=np.float64)[::-1]
    new = tuple(max(1, int(round(n * s / target))) for n, s in zip(x.shape, sp))
    out = F.interpolate(x[None, None], size=new, mode="trilinear", align_corners=False)[0, 0]
    return out, np.asarray(new, dtype=np.float64) / np.asarray(x.shape, dtype=np.float64)


def crop_box(center: np.ndarray, size: Sequence[int], shape: Sequence[int]
             ) -> tuple[tuple[slice, ...], tuple[slice, ...], np.ndarray]:
    """A `size` window centred on `center` (voxels), zero-padded where it leaves the volume (as torchio's
    CropOrPad): (slices into the volume, matching slices into the window, the window's origin)."""
    lo = np.round(center).astype(int) - np.asarray(size) // 2
    src, dst = [], []
    for a in range(3):
        s0, s1 = max(lo[a], 0), min(lo[a] + size[a], shape[a])
        if s1 <= s0:
            raise InputError(f"the prompt lies outside the volume of shape {tuple(shape)}")
        src.append(slice(s0, s1))
        dst.append(slice(s0 - lo[a], s1 - lo[a]))
    return tuple(src), tuple(dst), lo


def z_normalise_foreground(x: torch.Tensor) -> torch.Tensor:
    """(x - mean) / std over the voxels > 0, as torchio's ZNormalization(masking_method=lambda x: x > 0)."""
    fg = x[x > 0]
    if fg.numel() < 2 or float(fg.std()) == 0.0:
        return x - (fg.mean() if fg.numel() else 0.0)
    return (x - fg.mean()) / fg.std()
