"""`lora`: peft LoRA on the image tower plus a linear head, trained end to end on preprocessed pixels.

Each head wraps a private deep copy of the model's module, so the loaded model (and its cached features)
is never changed. LoRA goes into the attention layers of the image tower, found by name per family:
timm ViT / SAM ViT / TinyViT / BLIP `qkv`; transformers CLIP, SigLIP, DINOv2, Swin `q_proj`/`k_proj`/`v_proj`
(+ `o_proj` or `out_proj`); older BERT-style `query`/`key`/`value`; open_clip ViT its MLP `c_fc`/`c_proj`
(see TARGET_RULES); ResNets their block convolutions. The representation is the model's own
`encode_image` (same pooling and projection) run with gradients on the copy.

Dropout: peft's `lora_dropout` sits inside each adapted layer (on the LoRA branch's input) and samples in
training only; the head's `mc_dropout` sits after the encoder, on its representation. MC dropout samples the
latter alone, so within `encoder_memo` (tasks.classification.mc_predict) the eval-mode encoder runs once per
input batch and the T passes re-run only dropout and the linear layer.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import re
import weakref
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.adapters.base import MC_HPARAMS, Prepared, RunContext, Usage, register_usage
from fairmedbench.adapters.linear_probe import head_dropout
from fairmedbench.engine.device import keep_freed_memory, resolve_precision
from fairmedbench.errors import InputError

if TYPE_CHECKING:
    import torch

    from fairmedbench.engine.features import ImageSplit
    from fairmedbench.registry.models.runtime import FoundationModel

LORA_DEFAULTS = {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.1}
# (leaf module names, module type) tried in order; the first rule with a match in the image tower wins.
TARGET_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("qkv",), "Linear"),
    (("q_proj", "k_proj", "v_proj", "o_proj", "out_proj"), "Linear"),
    (("query", "key", "value"), "Linear"),
    # open_clip ViT: its nn.MultiheadAttention uses in_proj/out_proj weights directly, so LoRA on `out_proj`
    # trains nothing, and peft's LoRA on the whole `attn` merges into the base weights on every forward
    # (they drift); the MLP's Linear layers take LoRA cleanly.
    (("c_fc", "c_proj"), "Linear"),
    (("conv1", "conv2", "conv3"), "Conv2d"),
)
BLOCK_CONV = re.compile(r"(^|\.)layer\d+\.\d+\.conv\d$")  # ResNet block convolutions (not the stem)


def image_tower_prefix(module: torch.nn.Module) -> str:
    """Module-name prefix of the image tower: open_clip `visual.`, transformers `vision_model.`,
    SAM `image_encoder.`, else the whole module."""
    for attr in ("visual", "vision_model", "image_encoder"):
        if hasattr(module, attr):
            return attr + "."
    return ""


def lora_targets(module: torch.nn.Module, names: tuple[str, ...] | list[str] | None = None) -> list[str]:
    """Full names of the image-tower modules that get LoRA (by `names` when given, else by TARGET_RULES)."""
    prefix = image_tower_prefix(module)
    tower = [(n, m) for n, m in module.named_modules() if n.startswith(prefix) and n]
    if names:
        found = [n for n, m in tower if n.split(".")[-1] in set(names)]
        if not found:
            raise InputError(f"hparam lora_targets={list(names)}: no module of that name in the image tower "
                             f"({prefix or 'the whole model'})")
        return found
    for leaves, kind in TARGET_RULES:
        found = [n for n, m in tower if n.split(".")[-1] in leaves and type(m).__name__ == kind
                 and (kind != "Conv2d" or BLOCK_CONV.search(n))]
        if found:
            return found
    raise InputError(f"no LoRA target (attention projections or block convolutions) found in the image tower of "
                     f"{type(module).__name__}; name them with hparam lora_targets (comma-separated leaf names)")


def lora_train_mode(encoder: torch.nn.Module, mode: bool) -> None:
    """A LoRA-wrapped encoder's base stays in eval mode (BatchNorm statistics, dropout as when frozen); only the
    LoRA dropout follows `mode`."""
    encoder.eval()
    for name, m in encoder.named_modules():
        if name.endswith("lora_dropout"):
            m.train(mode)


def lora_settings(hparams: dict[str, Any] | None,
                  defaults: Mapping[str, Any] = MappingProxyType(LORA_DEFAULTS)) -> dict[str, Any]:
    """LoRA rank, alpha, dropout (hparams over `defaults`) and target leaf names; InputError out of range."""
    hp = {**defaults, **{k: v for k, v in (hparams or {}).items() if k in LORA_DEFAULTS}}
    r, alpha, dropout = hp["lora_r"], hp["lora_alpha"], hp["lora_dropout"]
    if not (isinstance(r, int) and r >= 1) or not float(alpha) > 0 or not 0 <= float(dropout) < 1:
        raise InputError(f"LoRA hparams lora_r={r!r} (integer >= 1), lora_alpha={alpha!r} (> 0), "
                         f"lora_dropout={dropout!r} (in [0, 1)) are out of range")
    targets = (hparams or {}).get("lora_targets")
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    return {"r": int(r), "alpha": float(alpha), "dropout": float(dropout), "targets": targets or None,
            "head_dropout": float((hparams or {}).get("dropout", 0.0))}


def _memoized(memo: dict[tuple, Any], x: torch.Tensor, run: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """`run(x)` once per distinct input in `memo`: found by place when the same memory is still alive and
    unwritten, else by content."""
    import torch

    base = x if x._base is None else x._base  # (no detach: a detached tensor is no view of its base)
    place = (str(x.device), x.data_ptr(), tuple(x.shape), x.stride(), x.dtype)
    seen = memo.get(place)
    # the same memory, its tensor still alive (so never freed and reused) and unwritten since (torch's
    # version counter): the same pixels, found without reading them (mc_predict's chunks of one array)
    if seen is not None and seen[0]() is base and seen[1] == x._version:
        return seen[2]
    # else by content: wrappers (volumes.make_volume_head) build new tensors of the same pixels every pass
    flat = x.cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    content = (str(x.dtype), tuple(x.shape), hashlib.blake2b(flat.data, digest_size=32).digest())
    if content not in memo:
        memo[content] = run(x)
    memo[place] = (weakref.ref(base), x._version, memo[content])
    return memo[content]


def make_lora_head(model: FoundationModel, ctx: RunContext, settings: dict[str, Any], n_outputs: int,
                   example: np.ndarray):
    """A fresh LoRA copy of `model`'s module plus a linear layer; returns logits (n, n_outputs).

    The encoder runs on `ctx.device`; representations come back to the CPU, where the runner keeps the
    inputs, labels and the linear layer.
    """
    import torch
    from peft import LoraConfig
    from peft.tuners.lora import LoraModel
    from torch import nn

    from fairmedbench.registry.models.runtime import PromptableSegmenter

    device = str(model.device)
    encoder = copy.deepcopy(model.module).cpu()
    targets = lora_targets(encoder, settings["targets"])
    config = LoraConfig(r=settings["r"], lora_alpha=settings["alpha"], lora_dropout=settings["dropout"],
                        target_modules=targets)
    encoder = LoraModel(encoder, config, "default").model  # injects in place; freezes all but lora_ weights
    encoder.to(device)
    clone = copy.copy(model)  # the model's own encode_image on the LoRA copy, with gradients
    clone.module = encoder
    if isinstance(clone, PromptableSegmenter):
        clone.image_map = encoder.image_encoder  # type: ignore[method-assign]  # the memo is keyed by the base weights
    encode = inspect.unwrap(type(model).encode_image)
    chunk = max(1, ctx.batch_size)
    bf16 = resolve_precision(ctx.precision, device) == "bf16"
    if device.split(":")[0] == "cpu":
        keep_freed_memory()

    class LoRAHead(nn.Module):
        """LoRA-wrapped image encoder (+ the model's pooling), then one linear layer."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self._memo: dict[tuple, Any] | None = None  # inside encoder_memo: input place or content -> encoding
            with torch.no_grad():
                dim = self._encode(torch.as_tensor(example[:1], dtype=torch.float32)).shape[1]
            self.linear = nn.Linear(dim, n_outputs)
            self.mc_dropout = head_dropout(settings["head_dropout"])

        @contextlib.contextmanager
        def encoder_memo(self) -> Iterator[None]:
            """Inside: the encoder runs once per distinct input batch, later calls with the same pixels reuse its
            output (weights must not change inside). Not used with gradients or while any encoder module
            trains (LoRA dropout on): then the encoder is not a fixed function of its input."""
            self._memo = {}
            try:
                yield
            finally:
                self._memo = None

        def _encode(self, x: torch.Tensor) -> torch.Tensor:
            memo = self._memo
            if (memo is None or torch.is_grad_enabled() or x.is_inference()  # (no version counter to check)
                    or any(m.training for m in self.encoder.modules())):
                return self._run_encoder(x)
            return _memoized(memo, x, self._run_encoder)

        def _run_encoder(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
                return encode(clone, x.to(device)).float().cpu()

        def train(self, mode: bool = True) -> LoRAHead:
            """The head follows `mode`; the encoder as `lora_train_mode` says."""
            super().train(mode)
            lora_train_mode(self.encoder, mode)
            return self

        def representation(self, x: torch.Tensor) -> torch.Tensor:
            if torch.is_grad_enabled():
                return self.mc_dropout(self._encode(x))
            return self.mc_dropout(torch.cat([self._encode(x[i:i + chunk]) for i in range(0, len(x), chunk)]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(self.representation(x))

    return LoRAHead().eval()


def pixel_arrays(model: FoundationModel, view: ImageSplit) -> np.ndarray:
    """Every image of a split view in the model's preprocessing: (n, C, H, W) float32."""
    if len(view) == 0:
        raise InputError("a split is empty: LoRA needs images in train, val and test")
    return np.stack([model.preprocess(view.load_image(k)) for k in range(len(view))]).astype(np.float32)


@register_usage
class LoRAFineTune(Usage):
    """LoRA on the image tower plus a linear head; the runner trains it and selects on validation."""

    name = "lora"
    default_rank = 3
    task = "classification"
    also_tasks = ("multiclass",)  # the same head with one output per class, trained by the multiclass runner
    requires = ("encode_image",)
    about = "peft LoRA on the image tower's attention + a linear head, trained on pixels"
    hparams = MappingProxyType({**LORA_DEFAULTS, "lora_targets": None, **MC_HPARAMS})
    learns = True
    volumes = True
    # A backbone forward and backward per step: fewer epochs, smaller batches and a LoRA-sized lr than the
    # linear probe's defaults.
    train_defaults = MappingProxyType({"lr": 5e-4, "epochs": 20, "patience": 5, "batch_size": 16})

    def prepare(self, model: FoundationModel, views: Mapping[str, ImageSplit], ctx: RunContext) -> Prepared:
        """Preprocessed pixels per split and a LoRA head factory (a fresh LoRA copy per seed)."""
        settings = lora_settings(ctx.hparams)
        inputs = {name: pixel_arrays(model, view) for name, view in views.items()}
        targets = lora_targets(model.module, settings["targets"])

        def make_head(x_train: np.ndarray, k: int):  # -> torch.nn.Module
            return make_lora_head(model, ctx, settings, k, x_train)

        notes = {"lora": {"r": settings["r"], "alpha": settings["alpha"], "dropout": settings["dropout"],
                          "head_dropout": settings["head_dropout"],
                          "n_target_modules": len(targets),
                          "target_leaves": sorted({t.split(".")[-1] for t in targets}),
                          "image_tower": image_tower_prefix(model.module).rstrip(".") or "whole model"},
                 "pixels": {name: list(x.shape) for name, x in inputs.items()}}
        return Prepared(inputs, make_head, notes)
