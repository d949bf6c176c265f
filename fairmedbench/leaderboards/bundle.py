"""Writing a submission bundle in the layout `submit` checks (used by `run-suite`; see the package docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.engine import store
from fairmedbench.leaderboards.suites import Entry, Suite
from fairmedbench.tasks.common import external_file

if TYPE_CHECKING:
    import pandas as pd

MODEL_FIELDS = ("name", "revision", "weights_sha256", "license", "family", "kind", "pretraining_data",
                "training_datasets")


def write_header(bundle: Path | str, model: dict[str, Any], suite: Suite, card: dict[str, Any] | None = None) -> None:
    """model.json (the model card's fields), suite.json (which board suite the bundle answers) and, for a model
    that is not registered, card.json (its new card, `submit.CARD_SCHEMA`)."""
    missing = [k for k in MODEL_FIELDS if k not in model]
    if missing:
        raise ValueError(f"model card lacks {missing}")
    store.write_json(Path(bundle) / "model.json", {k: model[k] for k in MODEL_FIELDS})
    store.write_json(Path(bundle) / "suite.json", {"name": suite.name, "version": suite.version})
    if card is not None:
        store.write_json(Path(bundle) / "card.json", card)


def result_paths(bundle: Path | str, entry: Entry, seed: int) -> tuple[Path, Path]:
    """(result JSON, predictions Parquet) of one entry and seed inside a bundle."""
    folder = Path(bundle) / "results" / entry.key
    return folder / f"seed{seed}.json", folder / f"seed{seed}.predictions.parquet"


def write_result(bundle: Path | str, entry: Entry, seed: int, doc: dict[str, Any], frame: pd.DataFrame,
                 externals: Sequence[pd.DataFrame] = ()) -> Path:
    """Write one result document, its predictions (pandas DataFrame) and the predictions of each of its external
    datasets (`externals`, in the document's `external` order) into the bundle; returns the JSON path."""
    doc_path, pred_path = result_paths(bundle, entry, seed)
    if doc.get("predictions", {}).get("file") != pred_path.name:
        raise ValueError(f"predictions.file must be {pred_path.name!r} (the Parquet beside the result)")
    named = [e.get("predictions") for e in doc.get("external", [])]
    if named != [external_file(seed, k) for k in range(len(externals))]:
        raise ValueError(f"the document's external predictions {named} do not match the {len(externals)} frame(s) "
                         "given")
    store.write_parquet(pred_path, frame)
    for name, ext_frame in zip(named, externals):
        store.write_parquet(pred_path.parent / name, ext_frame)
    return store.write_json(doc_path, doc)
