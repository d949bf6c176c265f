"""Board suites: a named, versioned list of entries (dataset, attributes, usage, task, metric profile, seeds).

An entry pins the test set a submission must answer: the dataset's split fingerprint, the test-id
fingerprint (sha256 of the sorted test sample ids joined by newlines) and the number of test samples.
A fingerprint may be `None` ("pending": not yet pinned); submissions are then checked for internal
consistency only (their predictions must match the fingerprints they report) and the board says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairmedbench.engine.splits import test_fingerprint  # noqa: F401  (part of this module's API)
from fairmedbench.errors import InputError
from fairmedbench.registry.base import Registry
from fairmedbench.tasks.base import TASKS


@dataclass(frozen=True)
class Entry:
    """One board column group: a (dataset, attributes, usage) run with its pinned test set."""

    dataset: str
    attributes: tuple[str, ...]
    usage: str
    task: str = "classification"
    profile: str = "default"
    seeds: tuple[int, ...] = (0,)
    split_fingerprint: str | None = None
    test_fingerprint: str | None = None
    n_test: int | None = None
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def dataset_options(self) -> dict[str, Any]:
        """Reader options of the entry's dataset (e.g. the size of a synthetic set)."""
        return dict(self.options)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"entry {self.key}: task must be one of {TASKS.names()}, got {self.task!r}")
        if not self.attributes or not self.seeds:
            raise ValueError(f"entry {self.key}: needs at least one attribute and one seed")

    @property
    def key(self) -> str:
        """Folder name of this entry inside a bundle: dataset__usage__attr1+attr2."""
        return f"{self.dataset}__{self.usage}__{'+'.join(self.attributes)}"

    @property
    def kind(self) -> str:
        """The result document kind a submission must carry for this entry."""
        return f"run-{self.task}"

    @property
    def pending(self) -> bool:
        """True while any of the test-set pins is not set yet."""
        return None in (self.split_fingerprint, self.test_fingerprint, self.n_test)


@dataclass(frozen=True)
class Suite:
    """A named, versioned list of entries; a board answers exactly one suite."""

    name: str
    version: str
    description: str
    entries: tuple[Entry, ...]

    def __post_init__(self) -> None:
        keys = [e.key for e in self.entries]
        if len(set(keys)) != len(keys):
            raise ValueError(f"suite {self.name!r} lists an entry twice")

    def entry(self, key: str) -> Entry:
        """The entry with folder name `key`."""
        for e in self.entries:
            if e.key == key:
                return e
        raise InputError(f"suite {self.name!r} has no entry {key!r}; its entries: "
                         f"{', '.join(e.key for e in self.entries)}")

    def keys(self) -> list[str]:
        """Entry folder names in suite order."""
        return [e.key for e in self.entries]


SUITES: Registry[Suite] = Registry("board suite")


def register_suite(suite: Suite) -> Suite:
    """Add a suite to the registry under its name."""
    return SUITES.add(suite.name, suite)


def get_suite(name: str) -> Suite:
    """The suite (and board) named `name`."""
    return SUITES.get(name)


SEX_AGE = ("sex", "age")

# The synthetic test sets are pinned: 200 generated images per dataset, the generator's official split.
SYNTH_PINS = {
    "synth-control": ("ccd5440d268d103e577c60b8b7994f160c6741fd56fe31f6a18bfaf6904404a2",
                      "2b91a41b9362339633b593cabd00b7d90bda832057521553d481736f0ff417b5", 60),
    "synth-contrast": ("f88c93af6be077196f88551b8e60b46860ec385f27404d9c892028c53a131077",
                       "3567a47ce3c10ac38c631b7a5d785623df5165305d6e764db5b8e7b1ddd09d0b", 60),
}
SYNTH_OPTIONS = (("n", 200),)


def _synth(dataset: str, usage: str, task: str, seeds: tuple[int, ...]) -> Entry:
    split_fp, test_fp, n_test = SYNTH_PINS[dataset]
    return Entry(dataset, SEX_AGE, usage, task=task, seeds=seeds, split_fingerprint=split_fp,
                 test_fingerprint=test_fp, n_test=n_test, options=SYNTH_OPTIONS)


register_suite(Suite(
    "synthetic", "1.0",
    "Built-in synthetic lesions (200 images each), runnable offline: a negative control (no bias) and a "
    "positive control (lower lesion contrast for females); linear probe on frozen features, classification.",
    tuple(_synth(d, "lp", "classification", (0, 1, 2)) for d in ("synth-control", "synth-contrast")),
))
register_suite(Suite(
    "synthetic-seg", "1.0",
    "Built-in synthetic lesions (200 images each), runnable offline: box-prompted segmentation on the "
    "negative and positive controls.",
    tuple(_synth(d, "sam-prompt", "segmentation", (0,)) for d in ("synth-control", "synth-contrast")),
))
register_suite(Suite(
    "nih-cxr14", "1.0",
    "NIH ChestX-ray14, official test split, 14 findings: linear probe and CLIP zero-shot, by sex and age.",
    (Entry("nih-cxr14", SEX_AGE, "lp", seeds=(0, 1, 2)),
     Entry("nih-cxr14", SEX_AGE, "clip-zs")),
))
register_suite(Suite(
    "ham10000", "1.0",
    "HAM10000 dermoscopy, patient-level split: melanoma-or-akiec classification (linear probe) and lesion "
    "segmentation (box-prompted SAM), by sex and age.",
    (Entry("ham10000", SEX_AGE, "lp", seeds=(0, 1, 2)),
     Entry("ham10000", SEX_AGE, "sam-prompt", task="segmentation")),
))
register_suite(Suite(
    "chexpert", "1.0",
    "CheXpert with CHEXPERT DEMO race, patient-level split: any-finding classification by sex, age and race.",
    (Entry("chexpert", ("sex", "age", "race"), "lp", seeds=(0, 1, 2)),
     Entry("chexpert", ("sex", "age", "race"), "clip-zs")),
))
