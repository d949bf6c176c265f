"""What the CLI calls for datasets: list, describe, and split export/import.

Importing this module is instant (cards only); data and pandas load inside the functions."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.registry.datasets import DATASETS, get_card
from fairmedbench.spec import RunSpec, option

if TYPE_CHECKING:
    from fairmedbench.engine.splits import Split
    from fairmedbench.registry.datasets.dataset import Dataset


def list_datasets() -> list[dict]:
    """One summary per registered dataset: name, task, modality, dim, attributes, license, access."""
    return [DATASETS.get(name).summary() for name in DATASETS.names()]


def describe_dataset(name: str, data_root: str | os.PathLike | None = None, seed: int = 0, **options: Any) -> dict:
    """The card, plus (when the data is present) sample and group counts overall and per split of
    the card's default policy; when absent, a note saying where to put it and where to get it."""
    card = get_card(name)
    out = card.to_dict()
    try:
        from fairmedbench.registry.datasets import load_dataset

        ds = load_dataset(name, data_root, **options)
    except MissingResourceError as exc:
        out["data"] = {
            "present": False,
            "note": str(exc),
            "where": f"--data-root DIR, or {card.env_var}=DIR, or FMB_DATA_ROOT=DIR containing {name}/",
            "access": card.access,
        }
        return out
    data: dict[str, Any] = {
        "present": True,
        "root": str(ds.root) if ds.root else None,
        "n_samples": len(ds),
        "n_patients": int(ds.samples["patient_id"].nunique()),
        "fingerprint": ds.fingerprint,
        "group_counts": ds.group_counts(),
        "report": ds.report,
    }
    if card.label_column and card.label_column in ds.samples:
        counts = ds.samples[card.label_column].value_counts().sort_index()
        data["label_counts"] = {str(k): int(v) for k, v in counts.items()}
    try:
        split = ds.split(seed=seed)
    except InputError as exc:  # a dataset too small or without its official lists still describes
        data["split"] = {"error": str(exc)}
    else:
        data["split"] = {
            "policy": split.policy,
            "seed": split.seed,
            "fingerprint": split.fingerprint,
            "sizes": split.sizes(),
            "group_counts": {n: ds.group_counts(getattr(split, n)) for n in ("train", "val", "test")},
        }
    out["data"] = data
    return out


@dataclass(frozen=True, kw_only=True)
class SplitExportOptions:
    """`benchmark splits export`'s options."""

    name: str = field(metadata=option(flag="name"))
    out: str = field(metadata=option(required=True, metavar="FILE.json"))
    data_root: str | None = field(default=None, metadata=option())
    seed: int = field(default=RunSpec.split_seed, metadata=option())
    policy: str | None = field(default=None, metadata=option(
        "default: the card's split policy", choices=["official", "patient"]))


@dataclass(frozen=True)
class SplitImportOptions:
    """`benchmark splits import`'s options."""

    file: str = field(metadata=option(flag="file"))
    data_root: str | None = field(default=None, metadata=option())
    check_data: bool = field(default=False, metadata=option("load the dataset and check every id is present"))


def export_split(
    name: str,
    data_root: str | os.PathLike | None,
    seed: int,
    out_path: str | os.PathLike,
    policy: str | None = None,
    fractions: tuple[float, float, float] | None = None,
    attribute: str | None = None,
    **options: Any,
) -> dict:
    """Make the split of dataset `name` (policy/seed) and write it as JSON; returns a summary
    (path, fingerprint, dataset fingerprint, sizes)."""
    from fairmedbench.engine.splits import save_split
    from fairmedbench.registry.datasets import load_dataset

    ds = load_dataset(name, data_root, **options)
    split = ds.split(policy=policy, seed=seed, fractions=fractions, attribute=attribute)
    path = save_split(split, out_path)
    return {
        "path": str(path),
        "dataset": name,
        "dataset_fingerprint": ds.fingerprint,
        "policy": split.policy,
        "seed": split.seed,
        "fingerprint": split.fingerprint,
        "sizes": split.sizes(),
    }


def import_split(
    path: str | os.PathLike, data_root: str | os.PathLike | None = None, check_data: bool = False, **options: Any
) -> dict:
    """Read a split file (fingerprint checked against its ids); with check_data, also load its
    dataset and check that every id is present and whether the dataset fingerprint matches."""
    from fairmedbench.engine.splits import load_split

    split = load_split(Path(path))
    out = {k: v for k, v in split.to_dict().items() if k != "ids"}
    out["path"] = str(path)
    if check_data:
        if not split.dataset:
            raise MissingResourceError(f"{path}: the split names no dataset, so it cannot be checked against data")
        from fairmedbench.registry.datasets import load_dataset

        ds = load_dataset(split.dataset, data_root, **options)
        ds.apply_split(split)
        out["dataset_fingerprint_matches"] = ds.fingerprint == split.dataset_fingerprint
        out["dataset_fingerprint_here"] = ds.fingerprint
    return out


def load_with_split(
    name: str,
    data_root: str | os.PathLike | None = None,
    seed: int = 0,
    policy: str | None = None,
    split_file: str | os.PathLike | None = None,
    **options: Any,
) -> tuple[Dataset, Split]:
    """(Dataset, bound Split) for a run: the imported split file when given, else the seeded policy."""
    from fairmedbench.engine.splits import load_split
    from fairmedbench.registry.datasets import load_dataset

    ds = load_dataset(name, data_root, **options)
    if split_file is not None:
        return ds, ds.apply_split(load_split(split_file))
    return ds, ds.split(policy=policy, seed=seed)
