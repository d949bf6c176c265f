"""Loaders for transformers models (PubMedCLIP, PLIP, MedCLIP, SigLIP, BLIP, BLIP-2, DINOv2, RAD-DINO).

Random weights are built from config objects (never downloaded); real weights come from the hub cache
(`from_pretrained(local_files_only=...)`) or a state-dict file loaded by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.registry.models.card import ModelCard, smoke_sized
from fairmedbench.registry.models.runtime import FoundationModel, seeded
from fairmedbench.registry.models.weights import (
    ResolvedWeights,
    hub_unreachable,
    load_into,
    read_state_dict,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Tokenize = Callable[[Sequence[str]], dict[str, torch.Tensor]]
#: a transformers model of one family (CLIPModel, SiglipModel, BLIP, ...): the embedding functions call its own
#: submodules, which torch's nn.Module typing cannot name
HFModule = Any


def _pooled(out: Any) -> torch.Tensor:
    """transformers 5 returns model outputs from get_*_features; older versions return tensors."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


class HFModel(FoundationModel):
    """A transformers model with per-family image/text embedding functions and a lazy tokenizer."""

    def __init__(self, card: ModelCard, weights: ResolvedWeights, module: nn.Module,
                 image_fn: Callable[[HFModule, torch.Tensor], torch.Tensor],
                 text_fn: Callable[[HFModule, dict[str, torch.Tensor]], torch.Tensor] | None = None,
                 tokenizer_factory: Callable[[], Tokenize] | None = None) -> None:
        super().__init__(card, weights, module)
        self._image_fn, self._text_fn = image_fn, text_fn
        self._tokenizer_factory = tokenizer_factory
        self._tokenizer: Tokenize | None = None

    def embed(self, module: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, embedding_dim), by the family's image function."""
        return self._image_fn(module, pixels)

    @torch.inference_mode()
    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """Texts -> (B, embedding_dim), tokenised with the model's own vocabulary."""
        if self._text_fn is None or self._tokenizer_factory is None:
            raise self._unsupported("encode_text")
        if self._tokenizer is None:
            self._tokenizer = self._tokenizer_factory()
        batch = {k: v.to(self.device) for k, v in self._tokenizer(texts).items()}
        return self._text_fn(self.module, batch)


def cached_hf_tokenizer(card: ModelCard, repo: str) -> PreTrainedTokenizerBase:
    """A transformers tokenizer from the hub cache; MissingResourceError (fast) when absent offline."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(repo, local_files_only=hub_unreachable())
    except Exception as exc:
        raise MissingResourceError(
            f"the tokenizer vocabulary of {card.name!r} (hf-hub:{repo}) is not available offline "
            f"({type(exc).__name__}); download it while online with `huggingface-cli download {repo}`."
        ) from None


def hf_tokenizer(card: ModelCard, repo: str | None = None) -> Tokenize:
    """The model's own tokenizer, returning input ids and attention mask."""
    repo = repo or card.weights.hub_id
    if repo is None:
        raise InputError(f"model {card.name!r} names no hub repository to read its tokenizer from")
    tok = cached_hf_tokenizer(card, repo)

    def tokenize(texts: Sequence[str]) -> dict[str, torch.Tensor]:
        enc = tok(list(texts), padding="max_length", truncation=True, max_length=card.text_context_length,
                  return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    return tokenize


def clip_bpe_tokenizer(context_length: int = 77) -> Tokenize:
    """OpenAI CLIP's BPE tokenizer as shipped inside open_clip (the vocabulary CLIP-derived models use)."""
    import open_clip

    tok = open_clip.get_tokenizer("ViT-B-32")

    def tokenize(texts: Sequence[str]) -> dict[str, torch.Tensor]:
        ids = tok(list(texts), context_length=context_length)
        return {"input_ids": ids, "attention_mask": (ids != 0).long()}

    return tokenize


def _refuse_partial(card: ModelCard, resolved: ResolvedWeights, info: dict[str, Any]) -> None:
    """from_pretrained initialises missing weights at random and only logs it: refuse instead (InputError)."""
    parts = []
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = sorted(str(k) for k in info.get(kind) or [])
        if keys:
            more = f" ... (+{len(keys) - 8} more)" if len(keys) > 8 else ""
            parts.append(f"{kind.replace('_', ' ')} ({len(keys)}): {', '.join(keys[:8])}{more}")
    if parts:
        raise InputError(f"weights in {resolved.path} do not fit the {card.name} architecture; refused.\n"
                         + "\n".join(parts) + "\nPass the checkpoint published for this model.")


def _build(card: ModelCard, resolved: ResolvedWeights, image_size: int | None,
           model_cls: Any, random_factory: Callable[[], nn.Module]) -> tuple[ModelCard, ResolvedWeights, nn.Module]:
    card = smoke_sized(card, image_size, resolved.is_random)
    if resolved.source == "hub" or (resolved.path is not None and resolved.path.is_dir()):
        try:
            module, info = model_cls.from_pretrained(str(resolved.path), local_files_only=True,
                                                     output_loading_info=True)
        except Exception as exc:
            raise InputError(f"cannot load {card.name!r} from {resolved.path}: {type(exc).__name__}: {exc}") from None
        _refuse_partial(card, resolved, info)
        return card, resolved, module
    with seeded(resolved.seed):
        module = random_factory()
    if not resolved.is_random:
        assert resolved.path is not None
        load_into(module, read_state_dict(resolved.path), what=card.name)
    return card, resolved, module


def load_hf_clip(card: ModelCard, resolved: ResolvedWeights, *,
                 image_size: int | None = None, **_: Any) -> FoundationModel:
    """CLIP ViT-B/32 derivatives in transformers format (PubMedCLIP, PLIP)."""
    from transformers import CLIPConfig, CLIPModel

    def random() -> nn.Module:
        return CLIPModel(CLIPConfig(projection_dim=512))

    card, resolved, module = _build(card, resolved, image_size, CLIPModel, random)
    return HFModel(
        card, resolved, module,
        lambda m, x: _pooled(m.get_image_features(pixel_values=x, interpolate_pos_encoding=True)),
        lambda m, b: _pooled(m.get_text_features(**b)),
        lambda: clip_bpe_tokenizer(card.text_context_length),
    )


_SO400M = {"hidden_size": 1152, "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27}
# Published configs (config.json on the hub) of the SigLIP checkpoints the cards name.
SIGLIP_CONFIGS: dict[str, dict[str, Any]] = {
    "base-224": {},  # google/siglip-base-patch16-224: SiglipConfig's defaults
    # google/siglip2-base-patch16-224 (FixRes SigLIP 2, "backward compatible with SigLIP v1": transformers' siglip2
    # model doc, so SiglipModel): SigLIP base towers with the Gemma tokenizer's 256k vocabulary
    "siglip2-base-224": {"text_config": {"vocab_size": 256000}},
    "so400m-448": {  # google/medsiglip-448
        "text_config": {**_SO400M, "max_position_embeddings": 64, "vocab_size": 32000, "projection_size": 1152},
        "vision_config": {**_SO400M, "image_size": 448, "patch_size": 14},
    },
}


def load_siglip(card: ModelCard, resolved: ResolvedWeights, *,
                image_size: int | None = None, **_: Any) -> FoundationModel:
    """SigLIP base/16-224, SigLIP 2 base/16-224 or So400m/14-448 (MedSigLIP) in transformers; the text tokenizer
    comes from the hub."""
    from transformers import SiglipConfig, SiglipModel

    config = SIGLIP_CONFIGS[card.loader_options.get("config", "base-224")]
    card, resolved, module = _build(card, resolved, image_size, SiglipModel,
                                    lambda: SiglipModel(SiglipConfig(**config)))
    return HFModel(
        card, resolved, module,
        lambda m, x: _pooled(m.get_image_features(pixel_values=x, interpolate_pos_encoding=True)),
        lambda m, b: _pooled(m.get_text_features(input_ids=b["input_ids"])),
        lambda: hf_tokenizer(card),
    )


def load_blip(card: ModelCard, resolved: ResolvedWeights, *,
              image_size: int | None = None, **_: Any) -> FoundationModel:
    """BLIP ITM base (transformers): projected [CLS] tokens of the ViT and text encoder."""
    from transformers import BlipConfig, BlipForImageTextRetrieval

    card, resolved, module = _build(card, resolved, image_size, BlipForImageTextRetrieval,
                                    lambda: BlipForImageTextRetrieval(BlipConfig()))

    def image(m: HFModule, x: torch.Tensor) -> torch.Tensor:
        h = m.vision_model(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state
        return m.vision_proj(h[:, 0])

    def text(m: HFModule, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return m.text_proj(m.text_encoder(**b).last_hidden_state[:, 0])

    return HFModel(card, resolved, module, image, text, lambda: hf_tokenizer(card))


def load_blip2(card: ModelCard, resolved: ResolvedWeights, *,
               image_size: int | None = None, **_: Any) -> FoundationModel:
    """BLIP-2 ITM (ViT-g + Q-Former): mean of the normalised projected query tokens; text [CLS]."""
    from transformers import Blip2Config, Blip2ForImageTextRetrieval

    card, resolved, module = _build(card, resolved, image_size, Blip2ForImageTextRetrieval,
                                    lambda: Blip2ForImageTextRetrieval(Blip2Config()))

    def image(m: HFModule, x: torch.Tensor) -> torch.Tensor:
        feats = m.vision_model(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state
        q = m.qformer(query_embeds=m.query_tokens.expand(x.shape[0], -1, -1), encoder_hidden_states=feats,
                      encoder_attention_mask=torch.ones(feats.shape[:-1], dtype=torch.long, device=x.device))
        return F.normalize(m.vision_projection(q.last_hidden_state), dim=-1).mean(dim=1)

    def text(m: HFModule, b: dict[str, torch.Tensor]) -> torch.Tensor:
        emb = m.embeddings(input_ids=b["input_ids"])
        out = m.qformer(query_embeds=emb, query_length=0, attention_mask=b["attention_mask"])
        return m.text_projection(out.last_hidden_state[:, 0])

    return HFModel(card, resolved, module, image, text, lambda: hf_tokenizer(card))


def load_dinov2(card: ModelCard, resolved: ResolvedWeights, *,
                image_size: int | None = None, **_: Any) -> FoundationModel:
    """DINOv2 ViT-B/14 (DINOv2, RAD-DINO): final [CLS] token; positional grid interpolated to the input."""
    from transformers import Dinov2Config, Dinov2Model

    card, resolved, module = _build(card, resolved, image_size, Dinov2Model,
                                    lambda: Dinov2Model(Dinov2Config(image_size=518)))
    return HFModel(card, resolved, module, lambda m, x: m(pixel_values=x).pooler_output)


class _MedCLIP(nn.Module):
    """MedCLIP's two towers with parameter names as in its checkpoint (vision_model.*, text_model.*)."""

    def __init__(self) -> None:
        from transformers import BertConfig, BertModel, SwinConfig, SwinModel

        super().__init__()
        self.vision_model = nn.Module()
        self.vision_model.model = SwinModel(SwinConfig())  # swin-tiny-patch4-window7-224
        self.vision_model.projection_head = nn.Linear(768, 512, bias=False)
        self.text_model = nn.Module()
        self.text_model.model = BertModel(BertConfig(vocab_size=28996), add_pooling_layer=False)
        self.text_model.projection_head = nn.Linear(768, 512, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(2.6592))


def _medclip_key() -> Callable[[str], str | None]:
    """MedCLIP key -> ours: transformers' own Swin renamings (old `attention.self.query`, `intermediate.dense`
    ... -> current names) on the vision tower; Swin's relative_position_index is now recomputed, not stored."""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
        from transformers.core_model_loading import rename_source_key
    except ImportError:  # transformers 4.x: its Swin still has the checkpoint's names and stored index
        return lambda key: key

    renamings = get_checkpoint_conversion_mapping("swin") or []
    prefix = "vision_model.model."

    def key_map(key: str) -> str | None:
        if not key.startswith(prefix):
            return key
        if key.endswith("relative_position_index"):
            return None
        return prefix + rename_source_key(key[len(prefix):], renamings, [])[0]

    return key_map


def load_medclip(card: ModelCard, resolved: ResolvedWeights, *,
                 image_size: int | None = None, **_: Any) -> FoundationModel:
    """MedCLIP (Swin-T + Bio_ClinicalBERT); checkpoint `pytorch_model.bin` loaded by name."""
    card = smoke_sized(card, image_size, resolved.is_random)
    with seeded(resolved.seed):
        module = _MedCLIP()
    if not resolved.is_random:
        assert resolved.path is not None
        # The release predates transformers 5: old Swin parameter names, persistent index buffers.
        load_into(module, read_state_dict(resolved.path), what=card.name, key_map=_medclip_key(),
                  ignore_unexpected=("text_model.model.pooler.", "text_model.model.embeddings.position_ids",
                                     "text_model.model.embeddings.token_type_ids"))

    def image(m: HFModule, x: torch.Tensor) -> torch.Tensor:
        return m.vision_model.projection_head(m.vision_model.model(pixel_values=x).pooler_output)

    def text(m: HFModule, b: dict[str, torch.Tensor]) -> torch.Tensor:
        hs = m.text_model.model(**b, output_hidden_states=True).hidden_states
        emb = torch.stack([hs[1], hs[2], hs[-1]]).mean(dim=0).mean(dim=1)
        return m.text_model.projection_head(emb)

    return HFModel(card, resolved, module, image, text,
                   lambda: hf_tokenizer(card, "emilyalsentzer/Bio_ClinicalBERT"))
