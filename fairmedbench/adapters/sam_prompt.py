"""`sam-prompt`: a promptable segmentation model prompted from ground truth (center, rand, rands, bbox)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from fairmedbench.adapters.base import RunContext, Usage, register_usage
from fairmedbench.adapters.prompts import PROMPT_MODES, Prompt
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.card import DatasetCard
    from fairmedbench.registry.models.runtime import FoundationModel


def check_dimensions(model: FoundationModel, dataset_card: DatasetCard | None) -> None:
    """InputError for a volumetric (3D) model on 2D data. A 2D model on volumes is prompted slice by slice."""
    if getattr(model, "volumetric", False) and dataset_card is not None and getattr(dataset_card, "dim", 2) != 3:
        raise InputError(f"model {model.card.name!r} segments 3D volumes; dataset {dataset_card.name!r} is 2D. "
                         "Use a 3D dataset (e.g. synth3d-contrast) or a 2D model (e.g. litemedsam)")


@register_usage
class SamPrompt(Usage):
    """Box or point prompts; multimask output with the mask of highest predicted IoU. A volumetric model gets one
    3D prompt per volume and segments the whole volume."""

    name = "sam-prompt"
    default_rank = 0
    task = "segmentation"
    requires = ("segment",)
    about = "prompted segmentation (prompts from ground-truth masks: center, rand, rands, bbox)"
    hparams = MappingProxyType({"box_jitter": 0.0})
    prompt_modes = PROMPT_MODES

    def predictor(self, model: FoundationModel, ctx: RunContext) -> Callable[[np.ndarray, Prompt], np.ndarray]:
        """A function (image, prompt) -> boolean mask of the image's size."""

        from fairmedbench.engine.device import autocast, prepare_module

        check_dimensions(model, ctx.dataset_card)
        prepare_module(model.module, ctx.device, ctx.channels_last)
        if getattr(model, "volumetric", False):
            # the target's name, for models that also take a text prompt (SegVol): the mask class the runner scores
            target = next(iter(getattr(ctx.dataset_card, "mask_classes", None) or ()), None)

            def predict_volume(volume: np.ndarray, prompt: Prompt,
                               spacing: Sequence[float] | None = None) -> np.ndarray:
                with autocast(ctx.device, ctx.precision):
                    return model.segment_volume(volume, prompt, spacing, text=target)

            predict_volume.volumetric = True  # type: ignore[attr-defined]  # the runner prompts it once per volume
            return predict_volume

        def predict(image: np.ndarray, prompt: Prompt) -> np.ndarray:
            with autocast(ctx.device, ctx.precision):  # the encoder runs as in feature extraction
                return model.segment(image, box=prompt.box, points=prompt.points, point_labels=prompt.labels)

        return predict
