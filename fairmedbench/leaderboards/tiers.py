"""Tiers of a board row: `self-reported` (recomputed from the submitted predictions) or `verified` (the model was
re-run from its declared weights on a seeded sample of test items and gave the same per-sample scores).

`benchmark verify` (fairmedbench.benchmark.verify) writes verification.json beside a stored submission's
submission.json; it binds to that summary's sha256, so a changed submission loses its verified tier.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from fairmedbench.engine import store
from fairmedbench.leaderboards.submit import SUBMISSION_FILE

# default absolute tolerance on per-sample scores by the precision the submitted run recorded (the re-run is fp32);
# the reasons are in fairmedbench.benchmark.verify's docstring
TOLERANCE = {"fp32": 1e-4, "bf16": 0.05}
VERIFICATION_FILE = "verification.json"
VERIFICATION_FORMAT = "fairmedbench-verification/1"

TIERS = (
    {"key": "self-reported", "rule": "every number was recomputed from the submitted per-sample predictions; where "
     "those predictions came from is the submitter's word."},
    {"key": "verified", "rule": "`benchmark verify` re-ran the model from its declared weights (the registered "
     "card's published weights with their sha256, a given file, or a seeded random init) in fp32 on a seeded random "
     "sample of the board's test items (a learned head re-trained with the declared seed on the declared split), "
     "and every per-sample score of the sample and of the validation rows matched within an absolute tolerance "
     f"({TOLERANCE['fp32']:g} for a run in fp32, {TOLERANCE['bf16']:g} for one in bf16, unless the verifier stated "
     "another; each row's is in its tier's tooltip and in board.json)."},
)


def submission_sha256(sub_dir: Path | str) -> str:
    """sha256 of a stored submission's summary file (what a verification record binds to)."""
    return hashlib.sha256((Path(sub_dir) / SUBMISSION_FILE).read_bytes()).hexdigest()


def write_verification(sub_dir: Path | str, record: dict[str, Any]) -> Path:
    """Store a verification record beside the submission it verified (atomic write)."""
    doc = {"format": VERIFICATION_FORMAT, "submission_sha256": submission_sha256(sub_dir), **record}
    return store.write_json(Path(sub_dir) / VERIFICATION_FILE, doc)


def read_verification(sub_dir: Path | str) -> dict[str, Any] | None:
    """The submission's verification record, or None when absent or made for other submission bytes."""
    path = Path(sub_dir) / VERIFICATION_FILE
    if not path.is_file():
        return None
    doc = store.read_json(path)
    if doc.get("format") != VERIFICATION_FORMAT or doc.get("submission_sha256") != submission_sha256(sub_dir):
        return None
    return doc


def entry_record(record: dict[str, Any] | None, entry_key: str) -> dict[str, Any] | None:
    """One entry's part of a verification record, with the record's shared settings (None when not verified)."""
    if record is None or entry_key not in record.get("entries", {}):
        return None
    shared = {k: record.get(k) for k in ("date", "engine", "weights", "tolerance", "sample", "seed", "precision",
                                         "device")}
    return {**shared, **record["entries"][entry_key]}


def tier_of(entry_verification: dict[str, Any] | None) -> str:
    """'verified' only when the entry's re-run passed; else 'self-reported'."""
    return "verified" if entry_verification is not None and entry_verification.get("passed") is True \
        else "self-reported"
