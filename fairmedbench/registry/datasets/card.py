"""Dataset cards: what a dataset is, how its official release is read, and how raw attribute values
map to groups. Importing this module is instant (no pandas, no torch, no nibabel)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.registry.base import Registry

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult


def raw_key(value: object) -> str | None:
    """Normalise a raw attribute value to the string used as mapping key (None for missing).

    Integral floats lose their '.0' (1.0 -> '1'), strings are stripped; NaN/None/'' are missing."""
    if value is None:
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return str(int(value))
        return repr(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return raw_key(value.item())
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = str(value).strip()
    return text or None


@dataclass(frozen=True)
class AttributeSpec:
    """A sensitive attribute: raw column -> group, by an explicit value mapping or numeric bins.

    `mapping` maps normalised raw values (see `raw_key`) to group names. `bins` are numeric edges:
    group k holds edges[k] <= value < edges[k+1]. `unknown_values` are raw values the provider uses
    for "not recorded" (e.g. HAM10000 sex 'unknown'); missing cells count as unknown too. Any other
    value absent from the mapping is an error (or, with skip_bad, a skipped row)."""

    name: str
    column: str
    groups: tuple[str, ...]
    mapping: Mapping[str, str] | None = None
    bins: tuple[float, ...] | None = None
    unknown_values: tuple[str, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if (self.mapping is None) == (self.bins is None):
            raise ValueError(f"attribute {self.name!r}: give exactly one of mapping or bins")
        if self.mapping is not None and set(self.mapping.values()) - set(self.groups):
            raise ValueError(f"attribute {self.name!r}: mapping targets outside groups {self.groups}")
        if self.bins is not None and len(self.bins) != len(self.groups) + 1:
            raise ValueError(f"attribute {self.name!r}: {len(self.groups)} groups need {len(self.groups) + 1} edges")

    @property
    def group_column(self) -> str:
        """Name of the mapped group column in a sample table: attr:<name>."""
        return f"attr:{self.name}"

    @property
    def kind(self) -> str:
        """'binary' or 'multi-group' (and 'bins' when defined by numeric edges)."""
        base = "binary" if len(self.groups) == 2 else "multi-group"
        return f"{base} (bins)" if self.bins is not None else base

    def map_value(self, value: object) -> tuple[str, str | None]:
        """Classify one raw value: ('group', name) | ('unknown', None) | ('unmapped', None)."""
        key = raw_key(value)
        if key is None or key in self.unknown_values:
            return "unknown", None
        if self.mapping is not None:
            group = self.mapping.get(key)
            return ("group", group) if group is not None else ("unmapped", None)
        try:
            x = float(key)
        except ValueError:
            return "unmapped", None
        if math.isnan(x):
            return "unknown", None
        edges = self.bins or ()  # never empty here: __post_init__ requires a mapping or bins
        for k, g in enumerate(self.groups):
            if edges[k] <= x < edges[k + 1]:
                return "group", g
        return "unmapped", None

    def to_dict(self) -> dict:
        """JSON-ready description of the mapping."""
        out: dict[str, Any] = {
            "name": self.name,
            "column": self.column,
            "group_column": self.group_column,
            "kind": self.kind,
            "groups": list(self.groups),
        }
        if self.mapping is not None:
            out["mapping"] = dict(self.mapping)
        elif self.bins is not None:
            bins = self.bins

            def edge(v: float) -> float | None:
                return None if math.isinf(v) else v

            out["bins"] = [
                {"group": g, "min": edge(bins[k]), "max_exclusive": edge(bins[k + 1])}
                for k, g in enumerate(self.groups)
            ]
        if self.unknown_values:
            out["unknown_values"] = list(self.unknown_values)
        if self.description:
            out["description"] = self.description
        return out


def sex_attribute(column: str, male: str = "M", female: str = "F", unknown: tuple[str, ...] = ()) -> AttributeSpec:
    """Binary sex attribute from the provider's own codes."""
    return AttributeSpec(
        "sex", column, ("female", "male"), mapping={male: "male", female: "female"}, unknown_values=unknown
    )


def age_attributes(column: str, threshold: float = 60.0) -> tuple[AttributeSpec, AttributeSpec]:
    """Age as binary (< threshold / >= threshold) and in 20-year bins (0-19, ..., 80+)."""
    t = int(threshold) if float(threshold).is_integer() else threshold
    binary = AttributeSpec(
        "age", column, (f"<{t}", f">={t}"), bins=(-math.inf, float(threshold), math.inf),
        description=f"age in years, split at {t}",
    )
    bins = AttributeSpec(
        "age_bins", column, ("0-19", "20-39", "40-59", "60-79", "80+"),
        bins=(0.0, 20.0, 40.0, 60.0, 80.0, math.inf), description="age in years, 20-year bins",
    )
    return binary, bins


@dataclass(frozen=True)
class DatasetCard:
    """Metadata of one dataset and the function that reads its official release."""

    name: str
    title: str
    tasks: tuple[str, ...]
    modality: str
    dim: int
    label_definition: str
    attributes: tuple[AttributeSpec, ...]
    reader: Callable[..., ReadResult]
    classes: tuple[str, ...] = ("negative", "positive")
    label_column: str | None = "label"
    extra_label_columns: tuple[str, ...] = ()
    mask_classes: tuple[str, ...] = ()
    split_policy: str = "patient"
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    stratify_attribute: str | None = None
    prompt_templates: tuple[str, ...] = ()
    class_prompts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    size: str = ""  # the release's size as its provider publishes it (the copy at hand: `benchmark describe`)
    license: str = ""
    citation: str = ""
    access: str = ""
    layout: str = ""
    layout_status: str = "confirmed"
    notes: tuple[str, ...] = ()
    expected_disparities: tuple[Mapping[str, str], ...] = ()
    # equivalence margins a run on this dataset applies when it is given no --margin (metric or '*' -> margin, as
    # metrics.result.parse_margins gives them): the difference this dataset's users accept as none
    margins: Mapping[str, float] = field(default_factory=dict)
    synthetic: bool = False
    version: str = "1"
    data_name: str = ""  # the dataset whose files this card reads (its env var and folder), default its own name

    def __post_init__(self) -> None:
        if not self.tasks:  # each a registered task (tasks.base.TASKS), looked up when a run resolves
            raise ValueError(f"dataset {self.name!r}: a card names at least one task")
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValueError(f"dataset {self.name!r}: attribute names repeat: {names}")
        if not all(isinstance(v, (int, float)) and 0 < v < 1 for v in self.margins.values()):
            raise ValueError(f"dataset {self.name!r}: each margin is a number in (0, 1), got {dict(self.margins)}")

    @property
    def env_var(self) -> str:
        """Environment variable naming this dataset's root: FMB_DATA_<NAME> (of `data_name` when set)."""
        return "FMB_DATA_" + "".join(c if c.isalnum() else "_" for c in self.folder.upper())

    @property
    def folder(self) -> str:
        """The folder name under FMB_DATA_ROOT: `data_name` when this card reads another card's files."""
        return self.data_name or self.name

    def attribute(self, name: str) -> AttributeSpec:
        """The attribute spec called `name` (InputError listing the known ones)."""
        for a in self.attributes:
            if a.name == name:
                return a
        from fairmedbench.errors import InputError

        known = ", ".join(a.name for a in self.attributes)
        raise InputError(f"dataset {self.name!r} has no attribute {name!r}; known: {known}")

    def attribute_parts(self, name: str) -> tuple[AttributeSpec, ...]:
        """The card's attributes a run's attribute reads: itself, or each part of a crossed one ('sex*age', whose
        groups are the cells of its parts' groups); InputError in one line naming the card's attributes."""
        from fairmedbench.errors import InputError
        from fairmedbench.metrics.groups import crossed_parts

        parts = crossed_parts(name)
        if not parts:
            return (self.attribute(name),)
        known = {a.name: a for a in self.attributes}
        unknown = [p for p in parts if p not in known]
        if unknown:
            raise InputError(f"attribute {name!r}: dataset {self.name!r} has no attribute "
                             f"{', '.join(map(repr, unknown))}; known: {', '.join(known)} (cross them as sex*age)")
        return tuple(known[p] for p in parts)

    def root_candidates(self, data_root: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
        """Where the data is looked for, in order: argument, FMB_DATA_<NAME>, FMB_DATA_ROOT/<name>."""
        out: list[tuple[str, Path]] = []
        if data_root is not None:
            out.append(("data_root argument", Path(data_root)))
        if os.environ.get(self.env_var):
            out.append((self.env_var, Path(os.environ[self.env_var])))
        if os.environ.get("FMB_DATA_ROOT"):
            out.append(("FMB_DATA_ROOT", Path(os.environ["FMB_DATA_ROOT"]) / self.folder))
        return out

    def summary(self) -> dict:
        """One line of `benchmark list datasets`."""
        return {
            "name": self.name,
            "task": ",".join(self.tasks),
            "modality": self.modality,
            "dim": f"{self.dim}D",
            "attributes": ",".join(a.name for a in self.attributes),
            "license": self.license,
            "access": "built-in" if self.synthetic else self.access,
        }

    def to_dict(self) -> dict:
        """The whole card, JSON-ready (the reader as its dotted name)."""
        return {
            "name": self.name,
            "title": self.title,
            "version": self.version,
            "tasks": list(self.tasks),
            "modality": self.modality,
            "dim": self.dim,
            "label": {
                "column": self.label_column,
                "definition": self.label_definition,
                "classes": list(self.classes),
                "extra_columns": list(self.extra_label_columns),
            },
            "mask_classes": list(self.mask_classes),
            "attributes": [a.to_dict() for a in self.attributes],
            "split": {
                "policy": self.split_policy,
                "fractions": list(self.split_fractions),
                "stratify": "label x "
                            f"{self.stratify_attribute or (self.attributes[0].name if self.attributes else '-')}",
            },
            "prompts": {"templates": list(self.prompt_templates),
                        "classes": {k: list(v) for k, v in self.class_prompts.items()}},
            "size": self.size,
            "license": self.license,
            "citation": self.citation,
            "access": self.access,
            "layout": self.layout,
            "layout_status": self.layout_status,
            "notes": list(self.notes),
            "expected_disparities": [dict(d) for d in self.expected_disparities],
            "margins": dict(self.margins),
            "synthetic": self.synthetic,
            "data_env_var": self.env_var,
            "reader": f"{self.reader.__module__}.{self.reader.__qualname__}",
        }


DATASETS: Registry[DatasetCard] = Registry("dataset", plugins=True)


def register(card: DatasetCard) -> DatasetCard:
    """Add a card to the dataset registry under its name."""
    return DATASETS.add(card.name, card)
