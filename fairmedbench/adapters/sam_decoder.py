"""`sam-decoder`: a SAM-style model's mask decoder fine-tuned with box prompts; image and prompt encoders frozen.

The encoder map of every prompted 2D image (an image with a non-empty mask, or such a slice of a volume) is
computed once per run, in batches under the run's precision, and kept in memory for that run only, keyed by
the image's bytes: a map is large (LiteMedSAM: 64 x 64 x 256 floats, 4 MB in fp32, 2 MB in bf16), so maps do
not go to the feature cache. The decoder trains and predicts in fp32 on a copy, so the loaded model is never
changed; predictions are post-processed exactly as `segment` does (mask = logit > 0 at the image's size).
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.adapters.base import RunContext, Usage, promptable, register_usage
from fairmedbench.adapters.prompts import Prompt
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    import torch

    from fairmedbench.registry.models.runtime import FoundationModel, PromptableSegmenter
    from fairmedbench.tasks.segmentation import Trained


def image_key(image: np.ndarray) -> str:
    """Identity of a 2D image by its shape, dtype and bytes."""
    a = np.ascontiguousarray(image)
    return hashlib.sha1(f"{a.shape}|{a.dtype}|".encode() + a.tobytes()).hexdigest()


class SamDecoderProblem:
    """A promptable model's frozen encoders, the encoder maps of this run's images, and decoder copies to train."""

    trained = "mask decoder"
    frozen = "image encoder and prompt encoder"

    def __init__(self, model: PromptableSegmenter, ctx: RunContext) -> None:
        from fairmedbench.engine.device import prepare_module

        prepare_module(model.module, ctx.device, ctx.channels_last)
        self.model, self.ctx = model, ctx
        self.maps: dict[str, torch.Tensor] = {}
        self.encode_seconds = 0.0
        # SAM's decoder upsamples the encoder map 4x: its low-resolution logits are size x size
        self.size = 4 * int(model.module.prompt_encoder.image_embedding_size[0])

    def encode(self, images: Iterable[np.ndarray]) -> list[str]:
        """Keys of these 2D images' encoder maps; maps not kept yet are computed in batches of ctx.batch_size."""
        keys: list[str] = []
        todo: dict[str, np.ndarray] = {}
        for image in images:
            key = image_key(image)
            keys.append(key)
            if key not in self.maps and key not in todo:
                todo[key] = self.model.preprocess(image)
                if len(todo) == self.ctx.batch_size:
                    self._encode(todo)
                    todo = {}
        if todo:
            self._encode(todo)
        return keys

    def _encode(self, pixels: dict[str, np.ndarray]) -> None:
        import torch

        from fairmedbench.engine.device import autocast

        t0 = time.perf_counter()
        x = torch.from_numpy(np.stack(list(pixels.values()))).to(self.ctx.device)
        if self.ctx.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with autocast(self.ctx.device, self.ctx.precision):
            maps = self.model.module.image_encoder(x)
        for key, m in zip(pixels, maps):
            self.maps[key] = m.to("cpu", copy=True)  # a copy made outside inference mode can feed autograd
        self.encode_seconds += time.perf_counter() - t0

    def new_encoder(self) -> None:
        """No trainable encoder: the maps kept by `encode` are the encoder's output."""
        return None

    def new_decoder(self) -> torch.nn.Module:
        """A trainable copy of the loaded model's mask decoder, on the run's device."""
        decoder = copy.deepcopy(self.model.module.mask_decoder).to(self.ctx.device)
        decoder.requires_grad_(True)
        return decoder.train()

    def target(self, mask: np.ndarray) -> torch.Tensor:
        """A 2D mask on the decoder's low-resolution grid, bool (size, size)."""
        return self.model.low_res_target(mask, self.size)

    def logits(self, trained: Trained, keys: Sequence[str], boxes: Sequence[np.ndarray],
               shapes: Sequence[tuple[int, int]]) -> torch.Tensor:
        """Low-resolution logits (b, size, size) of `trained.decoder` for kept maps and boxes in their images'
        pixels."""
        import torch

        emb = torch.stack([self.maps[k] for k in keys]).to(self.ctx.device, torch.float32)
        boxes_t = torch.cat([self.model.box_tensor(h, w, box) for box, (h, w) in zip(boxes, shapes)])
        return self.model.decode(emb, boxes_t, decoder=trained.decoder)[:, 0]

    def predictor(self, trained: Trained) -> Callable[[np.ndarray, Prompt], np.ndarray]:
        """A function (image, box prompt) -> boolean mask of the image's size, from `trained.decoder`."""
        import torch

        def predict(image: np.ndarray, prompt: Prompt) -> np.ndarray:
            if prompt.box is None:
                raise InputError(f"the trained mask decoder predicts from a box prompt, got a {prompt.mode!r} prompt")
            image = np.asarray(image)
            h, w = image.shape[:2]
            [key] = self.encode([image])
            with torch.inference_mode():
                low_res = self.logits(trained, [key], [prompt.box], [(h, w)])
                return (self.model.to_image(low_res[:, None], h, w)[0] > 0).cpu().numpy()

        return predict

    def notes(self) -> dict[str, Any]:
        """What was kept: how many maps, their size and dtype, the encoding time."""
        first = next(iter(self.maps.values()), None)
        return {"encoder_maps": {"n": len(self.maps), "kept": "in memory, for this run only",
                                 "shape": None if first is None else list(first.shape),
                                 "dtype": None if first is None else str(first.dtype).replace("torch.", ""),
                                 "bytes": int(sum(m.numel() * m.element_size() for m in self.maps.values())),
                                 "seconds": round(self.encode_seconds, 3)},
                "decoder_precision": "fp32", "low_res_size": self.size}


@register_usage
class SamDecoder(Usage):
    """Fine-tune the mask decoder on the train split with box prompts from the ground truth."""

    name = "sam-decoder"
    task = "segmentation"
    requires = ("segment", "tune_decoder")
    about = "mask decoder fine-tuned with box prompts (Dice + BCE), encoders frozen; mitigations apply"
    hparams = MappingProxyType({"box_jitter": 0.0})
    prompt_modes = ("bbox",)
    learns = True

    def trainable(self, model: FoundationModel, ctx: RunContext) -> SamDecoderProblem:
        """The decoder-training problem of this model."""
        return SamDecoderProblem(promptable(model, self.name), ctx)
