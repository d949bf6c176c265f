"""A loaded foundation model: its card, resolved weights and the operations it supports."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import tempfile
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from fairmedbench.errors import InputError
from fairmedbench.registry.models.card import ModelCard
from fairmedbench.registry.models.encoder_path import (
    ImageTower,
    frozen_forward,
    path_of,
    register_frozen,
    resolve_encoder_path,
)
from fairmedbench.registry.models.preprocess import preprocess_image, resized_shape
from fairmedbench.registry.models.weights import ResolvedWeights

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from fairmedbench.registry.models.sam import SamParts


#: a box prompt (x0, y0, x1, y1) in an image's pixels
Box = Sequence[float] | np.ndarray


class VolumePrompt(Protocol):
    """One 3D prompt (adapters.prompts.Prompt): points (k, 3) with labels, or a box, in voxel coordinates."""

    @property
    def points(self) -> np.ndarray | None: ...

    @property
    def labels(self) -> np.ndarray | None: ...

    @property
    def box(self) -> np.ndarray | None: ...


class FoundationModel:
    """Wraps a torch module; subclasses implement the capabilities their card declares."""

    volumetric = False  # True for models that segment a whole volume from one 3D prompt (`segment_volume`)

    def __init__(self, card: ModelCard, weights: ResolvedWeights, module: torch.nn.Module) -> None:
        self.card = card
        self.weights = weights
        self.module = module.eval()
        self.device = torch.device("cpu")
        if self._embeds():
            register_frozen(self.image_tower())

    def to(self, device: str | torch.device) -> FoundationModel:
        """Move the model to `device`."""
        self.device = torch.device(device)
        self.module.to(self.device)
        return self

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        """uint8 image -> float32 (C, H, W) in this model's own preprocessing."""
        return preprocess_image(image, self.card.preprocessing)

    def cache_identity(self) -> dict[str, str]:
        """The model-side parts of a feature-cache key."""
        return {
            "model": self.card.name,
            "weights": self.weights.identity,
            "preprocessing": self.card.preprocessing.describe(),
            "pooling": type(self).__name__,
        }

    def encoder_path(self, device: str, precision: str) -> str:
        """How frozen inference of the image encoder runs on `device` at `precision` (see
        registry.models.encoder_path): 'torch' unless another path was measured faster on this machine."""
        if not self._embeds():
            return "torch"
        return resolve_encoder_path(self.image_tower(), self.card.preprocessing.size, device, precision)

    def _embeds(self) -> bool:
        return type(self).embed is not FoundationModel.embed

    def embed(self, module: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) preprocessed pixels -> (B, embedding_dim), computed by `module` (this model's module or a
        copy of it, e.g. LoRA's); a model that embeds images defines it."""
        raise self._unsupported("encode_image")

    def image_tower(self) -> ImageTower:
        """`embed` on this model's current module as one module (built again when the module was replaced)."""
        tower = self.__dict__.get("_tower")
        if not isinstance(tower, ImageTower) or tower.module is not self.module:
            tower = self._tower = ImageTower(self.module, self.embed, f"{type(self).__name__}:{self.card.name}")
        return tower

    def _unsupported(self, capability: str) -> InputError:
        return InputError(
            f"model {self.card.name!r} cannot {capability}; it offers: {', '.join(self.card.capabilities)}"
        )

    @torch.inference_mode()
    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) preprocessed pixels -> (B, embedding_dim) embeddings: `embed` on the frozen-inference path
        resolved for this machine (registry.models.encoder_path; with gradients, the torch module)."""
        if not self._embeds():
            raise self._unsupported("encode_image")
        return frozen_forward(self.image_tower(), pixels)

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """Texts -> (B, embedding_dim) embeddings in the joint image-text space."""
        raise self._unsupported("encode_text")

    def segment(self, image: np.ndarray, box: Box | None = None, points: ArrayLike | None = None,
                point_labels: ArrayLike | None = None, multimask: bool | None = None) -> np.ndarray:
        """uint8 image and a box (x0, y0, x1, y1) and/or points in its pixels -> boolean mask of its (H, W)."""
        raise self._unsupported("segment")

    def segment_volume(self, volume: np.ndarray, prompt: VolumePrompt, spacing: Sequence[float] | None = None,
                       text: str | None = None) -> np.ndarray:
        """uint8 (D, H, W) volume and one 3D prompt -> boolean (D, H, W) mask (volumetric models only)."""
        raise self._unsupported("segment volumes")


class MapMemo:
    """Encoder maps of the images this process encoded, keyed by (model, weights|precision, pixels), kept in files
    of a private temporary folder rather than in memory (a LiteMedSAM map is 4 MiB: holding every map of a job
    would be gigabytes of resident memory), least recently used out past `budget` bytes; the folder is removed at
    exit. `encoded` counts encoder runs per pixel key (the profile's "encodes per content")."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.dir: str | None = None
        self.index: OrderedDict[tuple[str, str, str], tuple[str, tuple[int, ...], int]] = OrderedDict()
        self.bytes = 0
        self.encoded: Counter[str] = Counter()

    def _folder(self) -> str:
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="fmb-maps-")
            atexit.register(shutil.rmtree, self.dir, True)
        return self.dir

    def get(self, key: tuple[str, str, str]) -> torch.Tensor | None:
        """The remembered fp32 map of `key`, or None."""
        hit = self.index.get(key)
        if hit is None:
            return None
        self.index.move_to_end(key)
        return torch.from_numpy(np.fromfile(hit[0], dtype=np.float32).reshape(hit[1]))

    def put(self, key: tuple[str, str, str], emb: torch.Tensor) -> None:
        """Remember one image's map (as fp32)."""
        if key in self.index:
            self.index.move_to_end(key)
            return
        arr = emb.detach().to("cpu", torch.float32).contiguous().numpy()
        path = os.path.join(self._folder(), f"{len(self.encoded)}-{key[2]}.f32")
        arr.tofile(path)
        self.index[key] = (path, tuple(arr.shape), arr.nbytes)
        self.bytes += arr.nbytes
        while self.bytes > self.budget and len(self.index) > 1:
            _, (old, _, n) = self.index.popitem(last=False)
            self.bytes -= n
            with contextlib.suppress(OSError):
                os.remove(old)

    def clear(self) -> None:
        """Forget every map (and the encode counts)."""
        for path, _, _ in self.index.values():
            with contextlib.suppress(OSError):
                os.remove(path)
        self.index.clear()
        self.bytes = 0
        self.encoded.clear()


MAP_MEMO = MapMemo(budget=4 << 30)  # 1000 LiteMedSAM maps of temporary disk


def _pixel_key(pixels: torch.Tensor) -> str:
    return hashlib.sha1(pixels.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()).hexdigest()


class PromptableSegmenter(FoundationModel):
    """SAM-style model: image encoder -> (B, C, h, w) map; prompt encoder + mask decoder for boxes and points.

    The encoder map of every image encoded is remembered (`MAP_MEMO`, keyed by model, weights, precision, encoder
    path and pixels), so an image is encoded once per process however many runs (frozen features, prompted
    segmentation, twin datasets sharing pixel-identical images) read it. A copy whose `image_map` is replaced on the
    instance (LoRA's trainable encoder) bypasses the memo.
    """

    module: SamParts

    def __init__(self, card: ModelCard, weights: ResolvedWeights, module: torch.nn.Module) -> None:
        super().__init__(card, weights, module)
        if type(self).image_map is PromptableSegmenter.image_map:  # a subclass with its own image path runs torch
            register_frozen(self.module.image_encoder)

    def _memo_key(self, pixels: torch.Tensor) -> tuple[str, str, str]:
        dev = pixels.device.type
        mode = str(torch.get_autocast_dtype(dev)) if torch.is_autocast_enabled(dev) else "fp32"
        path = path_of(self.module.image_encoder, pixels)  # paths agree to rounding only: never serve one as another
        return (self.card.name, f"{self.weights.identity}|{mode}|{path}", _pixel_key(pixels))

    def encoder_path(self, device: str, precision: str) -> str:
        """The image encoder's frozen-inference path on `device` at `precision` (resolved once, printed)."""
        return resolve_encoder_path(self.module.image_encoder, self.card.preprocessing.size, device, precision)

    def image_map(self, pixels: torch.Tensor) -> torch.Tensor:
        """The encoder's dense feature map, on the machine's frozen-inference path (also remembered per image)."""
        maps = frozen_forward(self.module.image_encoder, pixels)
        if pixels.device.type == "meta":  # FLOP counting on the meta device (benchmark.costs): nothing to remember
            return maps
        for i in range(pixels.shape[0]):
            key = self._memo_key(pixels[i])
            MAP_MEMO.encoded[key[2]] += 1
            MAP_MEMO.put(key, maps[i])
        return maps

    def maps(self, pixels: torch.Tensor) -> torch.Tensor:
        """fp32 encoder maps of a batch: remembered ones read back, only the others encoded (in one batch)."""
        if "image_map" in vars(self) or pixels.device.type == "meta":  # a trainable copy; or FLOP counting
            return self.image_map(pixels).float()
        keys = [self._memo_key(pixels[i]) for i in range(pixels.shape[0])]
        found = {i: m for i, m in enumerate(MAP_MEMO.get(k) for k in keys) if m is not None}
        todo = [i for i in range(len(keys)) if i not in found]
        if todo:
            fresh = self.image_map(pixels[todo]).float()
            found.update({i: fresh[j] for j, i in enumerate(todo)})
        return torch.stack([found[i].to(self.device) for i in range(len(keys))])

    def _map_of(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.maps(pixels)

    @torch.inference_mode()
    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        """Global average of the image encoder's feature map (frozen-feature embedding)."""
        return self.maps(pixels).mean(dim=(2, 3))

    def prompt_tensors(self, h: int, w: int, box: Box | None = None, points: ArrayLike | None = None,
                       point_labels: ArrayLike | None = None
                       ) -> tuple[torch.Tensor | None, tuple[torch.Tensor, torch.Tensor] | None]:
        """A box (x0, y0, x1, y1) and/or points (k, 2) as (x, y) in an h x w image's pixels -> the prompt encoder's
        boxes (1, 1, 4) and (coords, labels) in the model's input pixels; InputError outside the image."""
        if box is None and points is None:
            raise InputError("segment needs a box or points")
        nh, nw = resized_shape(h, w, self.card.preprocessing)
        sx, sy = nw / w, nh / h
        boxes = coords = None
        if box is not None:
            x0, y0, x1, y1 = (float(v) for v in box)
            if not (0 <= x0 <= x1 <= w and 0 <= y0 <= y1 <= h):
                raise InputError(f"box {tuple(box)} is not inside the {w}x{h} image as (x0, y0, x1, y1)")
            boxes = (torch.tensor([x0 * sx, y0 * sy, x1 * sx, y1 * sy]))[None, None].to(self.device)
        if points is not None:
            pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
            if ((pts < 0) | (pts[:, :1] > w) | (pts[:, 1:] > h)).any():
                raise InputError(f"points {pts.tolist()} are not inside the {w}x{h} image as (x, y)")
            labels = np.ones(len(pts)) if point_labels is None else np.asarray(point_labels).ravel()
            xy = torch.tensor(pts * np.array([sx, sy]), dtype=torch.float32)[None].to(self.device)
            coords = (xy, torch.tensor(labels, dtype=torch.int64)[None].to(self.device))
        return boxes, coords

    def box_tensor(self, h: int, w: int, box: Box) -> torch.Tensor:
        """A box (x0, y0, x1, y1) in an h x w image's pixels -> the prompt encoder's boxes (1, 1, 4)."""
        boxes, _ = self.prompt_tensors(h, w, box)
        assert boxes is not None  # prompt_tensors returns the boxes of the box it is given
        return boxes

    def decode(self, emb: torch.Tensor, boxes: torch.Tensor | None,
               coords: tuple[torch.Tensor, torch.Tensor] | None = None, multimask: bool = False,
               decoder: torch.nn.Module | None = None) -> torch.Tensor:
        """Low-resolution logits (B, 1, L, L) of each sample's mask from encoder maps (B, C, h, w) and B prompts
        (boxes (B, 1, 4) and/or points); with `multimask`, the mask of highest predicted IoU.

        `decoder` replaces the model's mask decoder (e.g. a fine-tuned copy); gradients reach only the
        decoder: the prompt encoder is frozen.
        """
        # TinySAM's decoder never outputs SAM's single-mask token (its forward keeps masks 1-3 and its
        # predictor takes the highest predicted IoU): that token is untrained there, so it is never used.
        multimask = multimask or bool(self.card.loader_options.get("multimask_only", False))
        with torch.no_grad():
            sparse, dense = self.module.prompt_encoder(points=coords, boxes=boxes, masks=None)
            pe = self.module.prompt_encoder.get_dense_pe()
        decoder = self.module.mask_decoder if decoder is None else decoder
        out = []
        for b in range(emb.shape[0]):  # SAM's decoder pairs one image with all its prompts: one call per sample
            low_res, iou = decoder(image_embeddings=emb[b:b + 1], image_pe=pe, sparse_prompt_embeddings=sparse[b:b + 1],
                                   dense_prompt_embeddings=dense[b:b + 1], multimask_output=multimask)
            best = int(iou[0].argmax()) if multimask else 0
            out.append(low_res[:, best:best + 1])
        return torch.cat(out)

    def to_image(self, low_res: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """Low-resolution logits (B, 1, L, L) -> logits (B, h, w) at the image's size (SAM's post-processing:
        up to the input size, crop the padding, resize)."""
        spec = self.card.preprocessing
        nh, nw = resized_shape(h, w, spec)
        s = spec.size
        up = F.interpolate(low_res.float(), size=(s, s), mode="bilinear", align_corners=False)
        up = up[..., :nh, :nw]
        return F.interpolate(up, size=(h, w), mode="bilinear", align_corners=False)[:, 0]

    def low_res_target(self, mask: np.ndarray, size: int) -> torch.Tensor:
        """A 2D ground-truth mask as the decoder sees it: resized and padded like the image, then to size x size
        (the decoder's low-resolution grid); bool (size, size), pixels covered at least half."""
        spec = self.card.preprocessing
        m = torch.from_numpy(np.asarray(mask, dtype=np.float32))[None, None]
        nh, nw = resized_shape(m.shape[2], m.shape[3], spec)
        m = F.interpolate(m, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True)
        m = F.pad(m, (0, spec.size - nw, 0, spec.size - nh))
        if size != spec.size:
            m = F.interpolate(m, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        return m[0, 0] >= 0.5

    @torch.inference_mode()
    def segment(self, image: np.ndarray, box: Box | None = None, points: ArrayLike | None = None,
                point_labels: ArrayLike | None = None, multimask: bool | None = None) -> np.ndarray:
        """Mask for a box (x0, y0, x1, y1) and/or points (k, 2) as (x, y) with labels (1 = foreground), in the
        image's pixels, mapped back to the image size (SAM's post-processing).

        `multimask` (default: True for points alone, False with a box, as SAM recommends for ambiguous and
        unambiguous prompts) predicts three masks and keeps the one with the highest predicted IoU.
        """
        image = np.asarray(image)
        h, w = image.shape[:2]
        boxes, coords = self.prompt_tensors(h, w, box, points, point_labels)
        if multimask is None:
            multimask = box is None
        pixels = torch.from_numpy(self.preprocess(image))[None].to(self.device)
        low_res = self.decode(self._map_of(pixels), boxes, coords, multimask)
        return (self.to_image(low_res, h, w)[0] > 0).cpu().numpy()


class seeded:
    """Context manager: deterministic random initialisation that restores the global RNG after."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        self.state = torch.random.get_rng_state()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc: object) -> None:
        torch.random.set_rng_state(self.state)
