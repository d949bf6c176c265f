"""`samed`: SAMed-style fine-tuning of a SAM-family model: peft LoRA on the image encoder's attention plus the
mask decoder, trained end to end on images with box prompts; prompt encoder and the encoder's own weights frozen.

SAMed (Zhang & Liu 2023, hitachinsk/SAMed `sam_lora_image_encoder.py`, `train.py`) adds rank-4 LoRA, without
scaling (alpha = r), to the q and v outputs of the fused `qkv` projection of every image-encoder block, and trains
it with everything outside the image encoder. Here, as the issue asks, the prompt encoder stays frozen (SAMed
trains it because it is prompt-free; we prompt with boxes). peft adapts a whole Linear layer, so the LoRA here
covers the fused qkv output (q, k and v) of every attention block: SAM ViT `blocks.*.attn.qkv`, TinyViT
(LiteMedSAM, MobileSAM) `layers.{1,2,3}.blocks.*.attn.qkv` (its first stage is convolutional: no attention, no
LoRA). TinyViT interleaves q, k, v per head in that output, so a q/v-only slice would be layout-specific.

The encoder is no longer frozen, so no encoder map is kept: the run's 2D images are kept in memory by their
bytes, preprocessed per batch, and encoded with gradients through a fresh LoRA copy per seed. The LoRA encoder
runs under the run's precision (bf16 autocast when asked); the decoder trains in fp32. The loaded model is never
changed; the encoder copy's base weights, BatchNorm statistics and dropout stay as loaded (eval mode), only the
LoRA dropout follows training mode.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.adapters.base import RunContext, Usage, promptable, register_usage
from fairmedbench.adapters.lora import lora_settings, lora_targets, lora_train_mode
from fairmedbench.adapters.prompts import Prompt
from fairmedbench.adapters.sam_decoder import image_key
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    import torch

    from fairmedbench.registry.models.runtime import FoundationModel, PromptableSegmenter
    from fairmedbench.tasks.segmentation import Trained

SAMED_LORA = MappingProxyType({"lora_r": 4, "lora_alpha": 4, "lora_dropout": 0.0})  # SAMed: rank 4, no scaling


class SamedProblem:
    """A SAM-family model's kept training images, fresh LoRA encoder copies and mask-decoder copies to train."""

    trained = "LoRA on the image encoder's attention qkv projections, and the mask decoder"
    frozen = "image encoder weights (BatchNorm statistics included) and prompt encoder"

    def __init__(self, model: PromptableSegmenter, ctx: RunContext) -> None:
        from fairmedbench.engine.device import prepare_module

        prepare_module(model.module, ctx.device, ctx.channels_last)
        self.model, self.ctx = model, ctx
        self.settings = lora_settings(ctx.hparams, SAMED_LORA)
        self.targets = lora_targets(model.module.image_encoder, self.settings["targets"])
        self.images: dict[str, np.ndarray] = {}
        # SAM's decoder upsamples the encoder map 4x: its low-resolution logits are size x size
        self.size = 4 * int(model.module.prompt_encoder.image_embedding_size[0])

    def encode(self, images: Iterable[np.ndarray]) -> list[str]:
        """Keys of these 2D images, kept in memory (the encoder trains, so no map is computed ahead)."""
        keys: list[str] = []
        for image in images:
            key = image_key(image)
            keys.append(key)
            self.images.setdefault(key, np.ascontiguousarray(image))
        return keys

    def new_encoder(self) -> torch.nn.Module:
        """A fresh LoRA copy of the loaded image encoder on the run's device: only `lora_` weights train."""
        from peft import LoraConfig
        from peft.tuners.lora import LoraModel
        from torch import nn

        s = self.settings
        copy_ = copy.deepcopy(self.model.module.image_encoder).cpu()
        config = LoraConfig(r=s["r"], lora_alpha=s["alpha"], lora_dropout=s["dropout"], target_modules=self.targets)
        lora = LoraModel(copy_, config, "default").model  # injects in place; freezes all but lora_ weights

        class LoRAEncoder(nn.Module):
            """The LoRA-wrapped encoder; its base stays in eval mode, only LoRA dropout follows `mode`."""

            def __init__(self) -> None:
                super().__init__()
                self.encoder = lora

            def train(self, mode: bool = True) -> LoRAEncoder:
                super().train(mode)
                lora_train_mode(self.encoder, mode)
                return self

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.encoder(x)

        return LoRAEncoder().to(self.ctx.device).eval()

    def new_decoder(self) -> torch.nn.Module:
        """A trainable copy of the loaded model's mask decoder, on the run's device."""
        decoder = copy.deepcopy(self.model.module.mask_decoder).to(self.ctx.device)
        decoder.requires_grad_(True)
        return decoder.train()

    def target(self, mask: np.ndarray) -> torch.Tensor:
        """A 2D mask on the decoder's low-resolution grid, bool (size, size)."""
        return self.model.low_res_target(mask, self.size)

    def _maps(self, encoder: Any, images: Sequence[np.ndarray]) -> torch.Tensor:
        import torch

        x = torch.from_numpy(np.stack([self.model.preprocess(im) for im in images])).to(self.ctx.device)
        if self.ctx.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        device_type = str(self.ctx.device).split(":")[0]
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=self.ctx.precision == "bf16"):
            return encoder(x).float()

    def logits(self, trained: Trained, keys: Sequence[str], boxes: Sequence[np.ndarray],
               shapes: Sequence[tuple[int, int]]) -> torch.Tensor:
        """Low-resolution logits (b, size, size): kept images through `trained.encoder` (with gradients when
        enabled), then `trained.decoder` with boxes in the images' pixels."""
        import torch

        emb = self._maps(trained.encoder, [self.images[k] for k in keys])
        boxes_t = torch.cat([self.model.box_tensor(h, w, box) for box, (h, w) in zip(boxes, shapes)])
        return self.model.decode(emb, boxes_t, decoder=trained.decoder)[:, 0]

    def predictor(self, trained: Trained) -> Callable[[np.ndarray, Prompt], np.ndarray]:
        """A function (image, box prompt) -> boolean mask of the image's size, from the trained encoder + decoder."""
        import torch

        def predict(image: np.ndarray, prompt: Prompt) -> np.ndarray:
            if prompt.box is None:
                raise InputError(f"the trained model predicts from a box prompt, got a {prompt.mode!r} prompt")
            image = np.asarray(image)
            h, w = image.shape[:2]
            with torch.inference_mode():
                emb = self._maps(trained.encoder, [image])
                boxes = self.model.box_tensor(h, w, prompt.box)
                low_res = self.model.decode(emb, boxes, decoder=trained.decoder)
                return (self.model.to_image(low_res, h, w)[0] > 0).cpu().numpy()

        return predict

    def notes(self) -> dict[str, Any]:
        """The LoRA settings, its targets and size, and how many images are kept."""
        mods = dict(self.model.module.image_encoder.named_modules())
        r = self.settings["r"]
        n_lora = sum(r * (mods[t].in_features + mods[t].out_features) for t in self.targets)
        return {"lora": {"r": r, "alpha": self.settings["alpha"], "dropout": self.settings["dropout"],
                         "n_target_modules": len(self.targets),
                         "target_leaves": sorted({t.split(".")[-1] for t in self.targets}),
                         "lora_parameters": int(n_lora),
                         "mask_decoder_parameters": int(sum(p.numel() for p in
                                                            self.model.module.mask_decoder.parameters()))},
                "images_kept": {"n": len(self.images), "kept": "in memory, for this run only"},
                "encoder_precision": self.ctx.precision, "decoder_precision": "fp32", "low_res_size": self.size}


@register_usage
class Samed(Usage):
    """SAMed: LoRA on the SAM image encoder's attention + the mask decoder, fine-tuned with box prompts."""

    name = "samed"
    task = "segmentation"
    requires = ("segment", "tune_decoder")
    about = ("SAMed: peft LoRA (r=4) on the image encoder's attention qkv + mask decoder trained (Dice + BCE), "
             "prompt encoder frozen; mitigations apply")
    hparams = MappingProxyType({"box_jitter": 0.0, **SAMED_LORA, "lora_targets": None})
    prompt_modes = ("bbox",)
    learns = True

    def trainable(self, model: FoundationModel, ctx: RunContext) -> SamedProblem:
        """The end-to-end LoRA + decoder training problem of this model."""
        return SamedProblem(promptable(model, self.name), ctx)
