"""Dataset registry: cards for every supported dataset (read from the providers' official releases)
and the built-in synthetic controls. Importing this package is instant; data loads via `load_dataset`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairmedbench.registry.datasets import (  # noqa: F401  (each module registers its card)
    adni,
    brset,
    candi,
    chexpert,
    covid_ct_md,
    fairvlmed10k,
    fitzpatrick17k,
    ham10000,
    harvard_fairseg,
    harvard_gf,
    ircadb,
    kits23,
    mimic_cxr,
    montgomery,
    nih_cxr14,
    papila,
    spider,
    synthetic,
    tusc,
)
from fairmedbench.registry.datasets.card import DATASETS, AttributeSpec, DatasetCard, register

if TYPE_CHECKING:
    import os

    from fairmedbench.registry.datasets.dataset import Dataset

__all__ = ["DATASETS", "AttributeSpec", "DatasetCard", "register", "get_card", "load_dataset"]


def get_card(name: str) -> DatasetCard:
    """The card registered as `name` (InputError with close names otherwise)."""
    return DATASETS.get(name)


def load_dataset(name: str, data_root: str | os.PathLike | None = None, **options: Any) -> Dataset:
    """Load dataset `name` (see fairmedbench.registry.datasets.dataset.load_dataset for options)."""
    from fairmedbench.registry.datasets.dataset import load_dataset as _load

    return _load(name, data_root, **options)
