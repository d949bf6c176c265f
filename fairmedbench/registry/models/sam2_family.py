"""SAM 2 / SAM 2.1 loaders: the model built from the `sam2` package's own config files (Meta's
sam2/configs/sam2.1/sam2.1_hiera_{t,s,b+,l}.yaml, as its build_sam2 does), segmenting single images as SAM 2's
image predictor does (MedSAM2Segmenter)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairmedbench.registry.models.card import ModelCard, smoke_sized
from fairmedbench.registry.models.medsam2 import MedSAM2Segmenter
from fairmedbench.registry.models.runtime import FoundationModel, seeded
from fairmedbench.registry.models.weights import ResolvedWeights, load_into, read_state_dict


def sam2_config(config: str, image_size: int) -> Any:
    """The `model:` section of the sam2 package's config file `config` (e.g. 'sam2.1/sam2.1_hiera_t.yaml'), at
    `image_size` (1024 for the released weights; smaller only for random-weight smoke tests)."""
    import sam2
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(sam2.__file__).parent / "configs" / config).model
    if image_size != cfg.image_size:  # RoPE grids of the memory attention follow the stride-16 map
        cfg.image_size = image_size
        layer = cfg.memory_attention.layer
        layer.self_attention.feat_sizes = [image_size // 16] * 2
        layer.cross_attention.feat_sizes = [image_size // 16] * 2
    return cfg


def load_sam2(card: ModelCard, resolved: ResolvedWeights, *,
              image_size: int | None = None, **_: Any) -> FoundationModel:
    """SAM 2 / 2.1 (Hiera image encoder, FPN neck, prompt encoder, high-resolution mask decoder); the released
    checkpoint is {'model': SAM2Base state dict}, loaded strictly."""
    from hydra.utils import instantiate

    card = smoke_sized(card, image_size, resolved.is_random)
    with seeded(resolved.seed):
        model = instantiate(sam2_config(card.loader_options["config"], card.preprocessing.size), _recursive_=True)
    if not resolved.is_random:
        assert resolved.path is not None
        load_into(model, read_state_dict(resolved.path), what=card.name)
    return MedSAM2Segmenter(card, resolved, model)
