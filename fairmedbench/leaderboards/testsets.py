"""Pinned test sets of the real boards: which samples of a dataset a board tests on, how a copy of the data is
split for a board run, and which test ids a submission may answer (coverage).

A test set is chosen by a rule applied to the reader's sample table, so it is the same on every copy:

- ``provider:<split>``: the data provider's official split (e.g. MIMIC-CXR's split csv ``test``, the
  FairVLMed10k ``Test/`` folder, CheXpert's ``valid.csv``, read as ``val`` by the reader);
- ``patient-hash:<salt>:<share>``: a patient is a test patient when the first 16 hex digits of
  sha256(``<salt>:<patient_id>``), read as an integer, are below ``share`` * 2**64; used where the provider
  ships no test list offline (NIH ChestX-ray14's ``test_list.txt`` is not in its metadata) or none at all.

The board pins the sha256 fingerprint (``test_fingerprint``: sorted ids joined by newlines) and the count of
the full test set. Where the full id list is shipped as package data (``ids_file``, gzip, one id a line,
derived by the rule from the provider's public metadata, never copied data), a submitter holding part of the
images is evaluated on the pinned ids they have: coverage = evaluated / pinned, ranked separately.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

from fairmedbench.engine.splits import test_fingerprint
from fairmedbench.errors import InputError, MissingResourceError

if TYPE_CHECKING:
    import os

    import numpy as np
    import pandas as pd

    from fairmedbench.engine.splits import Split
    from fairmedbench.registry.datasets.dataset import Dataset

IDS_PACKAGE = "fairmedbench.leaderboards"
IDS_FOLDER = "testset_ids"


def patient_hash_share(salt: str, patient_id: str) -> float:
    """The patient's position in [0, 1): sha256('<salt>:<patient_id>'), first 16 hex digits / 2**64."""
    digest = hashlib.sha256(f"{salt}:{patient_id}".encode()).hexdigest()
    return int(digest[:16], 16) / 2.0 ** 64


@dataclass(frozen=True)
class TestSet:
    """A board's test set: its name on the page, the rule that picks it, where it comes from, and its pins."""

    __test__ = False  # not a pytest test class

    name: str
    rule: str
    source: str
    fingerprint: str | None = None
    n: int | None = None
    ids_file: str | None = None  # in leaderboards/testset_ids/ (an absolute path for local boards and tests)

    def __post_init__(self) -> None:
        kind, _, rest = self.rule.partition(":")
        if kind == "provider" and rest in ("train", "val", "test"):
            return
        if kind == "patient-hash":
            salt, _, share = rest.rpartition(":")
            try:
                ok = bool(salt) and 0.0 < float(share) < 1.0
            except ValueError:
                ok = False
            if ok:
                return
        raise ValueError(f"test set {self.name!r}: rule {self.rule!r} is not provider:<train|val|test> or "
                         "patient-hash:<salt>:<share in (0, 1)>")

    @property
    def pending(self) -> bool:
        """True while the fingerprint or the count is not pinned yet."""
        return self.fingerprint is None or self.n is None

    @property
    def partial_coverage(self) -> bool:
        """True when a submission may answer part of the test set (the full id list ships with the package)."""
        return self.ids_file is not None

    def coverage_rule(self) -> str:
        """One line: what a submission must answer."""
        if self.partial_coverage:
            return (f"any non-empty subset of the {self.n:,} pinned test ids (evaluated on the images the submitter "
                    "holds); coverage = evaluated / pinned is shown, rows with partial coverage are ranked "
                    "separately from complete ones")
        if self.pending:
            return "fingerprint pending: the result's own test set, checked for consistency only"
        return f"exactly the {self.n:,} pinned test ids (complete coverage)"

    def pinned_ids(self) -> frozenset[str]:
        """The packaged full list of test ids, checked against the pinned count and fingerprint."""
        if self.ids_file is None:
            raise InputError(f"test set {self.name!r} ships no id list; submissions must answer it completely")
        return _load_ids(self.ids_file, self.fingerprint, self.n)

    def is_test(self, samples: pd.DataFrame) -> np.ndarray:
        """Boolean mask over a dataset reader's sample table: True for the test samples."""
        import numpy as np

        kind, _, rest = self.rule.partition(":")
        if kind == "provider":
            if "split" not in samples:
                raise MissingResourceError(
                    f"the board tests on {self.name}, the provider's official '{rest}' split, but this copy of the "
                    "data has no official split files; put them in the dataset folder (see `benchmark describe "
                    "dataset NAME`, field layout)")
            return (samples["split"].astype(str) == rest).to_numpy()
        salt, _, share = rest.rpartition(":")
        cut = float(share)
        return np.asarray([patient_hash_share(salt, str(p)) < cut for p in samples["patient_id"]], dtype=bool)

    def split(self, ds: Dataset, seed: int = 0, val_fraction: float = 0.1) -> Split:
        """The board run's split of this copy: test = the rule's samples; train/val = the provider's when it has
        them (provider test rows outside the board's test set train), else carved at patient level (seeded)."""
        import numpy as np

        from fairmedbench.engine.splits import check_nonempty, official_split

        samples = ds.samples
        test = self.is_test(samples)
        if "split" in samples:
            labels = samples["split"].astype(str).str.lower().replace({"test": "train"}).to_numpy(dtype=object)
        else:
            labels = np.full(len(samples), "train", dtype=object)
        labels[test] = "test"
        split = official_split(samples["sample_id"].to_numpy(), samples["patient_id"].to_numpy(), labels,
                               ds.strata(), val_fraction, seed, ds.card.name, ds.fingerprint)
        split = replace(split, policy=f"board:{self.rule}")
        check_nonempty(split, ds.card.name)
        problems = self.check_test_ids(split.ids["test"], where=f"this copy of {ds.card.name}")
        if problems:
            raise InputError("; ".join(problems))
        return split

    def check_test_ids(self, ids: Iterable[str], where: str) -> list[str]:
        """Problems (one line each, prefixed by `where`) with a set of test ids against the pins; none when they
        answer the test set (a subset of the packaged ids, or exactly the pinned ids, or anything while pending)."""
        ids = [str(i) for i in ids]
        lines = []
        if len(set(ids)) != len(ids):
            lines.append(f"{where}: {len(ids) - len(set(ids))} test id(s) repeat")
        if self.partial_coverage:
            outside = sorted(set(ids) - self.pinned_ids())
            if outside:
                lines.append(f"{where}: {len(outside)} test id(s) are not in the board's pinned test set "
                             f"{self.name} (first: {outside[:3]})")
            if not ids:
                lines.append(f"{where}: no test ids: the copy holds none of the board's pinned test set")
        elif not self.pending:
            fp = test_fingerprint(ids)
            if len(ids) != self.n or fp != self.fingerprint:
                lines.append(f"{where}: test set of {len(ids)} ids (fingerprint {fp[:12]}...) differs from the "
                             f"board's {self.name}: {self.n} ids, fingerprint {str(self.fingerprint)[:12]}...; "
                             "this board needs the complete official test split")
        return lines

    def describe(self) -> dict[str, object]:
        """JSON-ready description (for `benchmark describe suite` and the board page)."""
        return {"name": self.name, "rule": self.rule, "source": self.source, "fingerprint": self.fingerprint,
                "n": self.n, "ids_file": self.ids_file, "pending": self.pending,
                "partial_coverage": self.partial_coverage, "coverage_rule": self.coverage_rule()}


@lru_cache(maxsize=8)
def _load_ids(ids_file: str, fingerprint: str | None, n: int | None) -> frozenset[str]:
    from pathlib import Path

    local = Path(ids_file)
    data = local.read_bytes() if local.is_absolute() else \
        resources.files(IDS_PACKAGE).joinpath(IDS_FOLDER).joinpath(ids_file).read_bytes()
    ids = gzip.decompress(data).decode("utf-8").split()
    if len(ids) != n or test_fingerprint(ids) != fingerprint:
        raise ValueError(f"packaged test id list {ids_file} does not match its pins ({len(ids)} ids, fingerprint "
                         f"{test_fingerprint(ids)[:12]}...; pinned {n}, {str(fingerprint)[:12]}...): reinstall")
    return frozenset(ids)


def write_ids(path: str | os.PathLike[str], ids: Iterable[str]) -> str:
    """Write a sorted id list as the gzip package data `pinned_ids` reads (mtime 0: byte-identical rebuilds);
    returns its fingerprint."""
    from pathlib import Path

    ids = sorted(str(i) for i in ids)
    Path(path).write_bytes(gzip.compress("\n".join(ids).encode("utf-8") + b"\n", 9, mtime=0))
    return test_fingerprint(ids)
