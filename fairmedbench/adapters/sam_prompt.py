"""`sam-prompt`: a promptable segmentation model prompted from ground truth (center, rand, rands, bbox)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from fairmedbench.adapters.base import USAGES, RunContext, Usage
from fairmedbench.adapters.prompts import PROMPT_MODES, Prompt


class SamPrompt(Usage):
    """Box or point prompts; multimask output with the mask of highest predicted IoU."""

    name = "sam-prompt"
    task = "segmentation"
    requires = ("segment",)
    about = "prompted segmentation (prompts from ground-truth masks: center, rand, rands, bbox)"
    hparams = MappingProxyType({"box_jitter": 0.0})
    prompt_modes = PROMPT_MODES

    def predictor(self, model: Any, ctx: RunContext) -> Callable[[np.ndarray, Prompt], np.ndarray]:
        """A function (image, prompt) -> boolean mask of the image's size."""

        from fairmedbench.engine.device import autocast, prepare_module

        prepare_module(model.module, ctx.device, ctx.channels_last)

        def predict(image: np.ndarray, prompt: Prompt) -> np.ndarray:
            with autocast(ctx.device, ctx.precision):  # the encoder runs as in feature extraction
                return model.segment(image, box=prompt.box, points=prompt.points, point_labels=prompt.labels)

        return predict


USAGES.add("sam-prompt", SamPrompt())
