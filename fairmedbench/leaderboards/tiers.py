"""Tiers of a board row: `self-reported` (recomputed from the submitted predictions) or `verified` (the model was
re-run from its declared weights on a seeded sample of test items and gave the same per-sample scores, within the
board's tolerance).

`benchmark verify` (fairmedbench.benchmark.verify) writes verification.json beside a stored submission's
submission.json, bound to the submission's sealed content hash and MACed under the board's key (`seal`): a record
edited by hand (a `passed` flipped), written with another key, or made for other files is ignored, and the page
says why.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.leaderboards import seal
from fairmedbench.leaderboards.seal import VERIFICATION_FILE, BoardKey

VERIFICATION_FORMAT = "fairmedbench-verification/2"

TIERS = (
    {"key": "self-reported", "rule": "every number was recomputed from the submitted per-sample predictions; where "
     "those predictions came from is the submitter's word."},
    {"key": "verified", "rule": "`benchmark verify` re-ran the model from its declared weights (the registered "
     "card's published weights with their sha256, a given file, or a seeded random init) in the precision the "
     "submitted run recorded (fp32, or bf16) on a seeded random "
     "sample of the board's test items (a learned head re-trained with the declared seed on the declared split), "
     "and every per-sample score of the sample and of the validation rows matched within the board's absolute "
     "tolerance (declared by its suite per precision of the submitted run, stated under this table; a verifier may "
     "only tighten it), shown beside each verified badge. The record counts only when its HMAC checks under the "
     "board's key and it names the submission's sealed files; a row whose weights are not provided is never "
     "verified."},
)


def write_verification(sub_dir: Path | str, record: dict[str, Any], key: BoardKey) -> Path:
    """Store a verification record beside the sealed submission it verified, bound to its content hash and MACed
    under the board's key (atomic write); a submission whose seal does not check is refused."""
    content, why = seal.check(sub_dir, key)
    if content is None:
        raise InputError(f"{sub_dir}: {why}; it cannot be verified")
    doc = {"format": VERIFICATION_FORMAT, "submission_content_sha256": content, **record}
    doc["hmac"] = seal.mac(key, VERIFICATION_FORMAT, seal.canonical(doc))
    return store.write_json(Path(sub_dir) / VERIFICATION_FILE, doc)


def read_verification(sub_dir: Path | str, key: BoardKey, content: str) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) when the submission's verification record checks under the board's key and names its sealed
    `content` hash; (None, why it is ignored) otherwise; (None, None) when there is none."""
    path = Path(sub_dir) / VERIFICATION_FILE
    if not path.is_file():
        return None, None
    try:
        doc = store.read_json(path)
        given = str(doc.pop("hmac"))
        text = seal.canonical(doc)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, f"{VERIFICATION_FILE} ignored: not a verification record"
    if doc.get("format") != VERIFICATION_FORMAT:
        return None, f"{VERIFICATION_FILE} ignored: format {doc.get('format')!r} is not {VERIFICATION_FORMAT!r}"
    if not hmac.compare_digest(given, seal.mac(key, VERIFICATION_FORMAT, text)):
        return None, (f"{VERIFICATION_FILE} ignored: its HMAC does not check under this board's key (edited after "
                      "`benchmark verify` wrote it, or written with another key)")
    if doc.get("submission_content_sha256") != content:
        return None, f"{VERIFICATION_FILE} ignored: it was made for other submission files"
    return doc, None


def entry_record(record: dict[str, Any] | None, entry_key: str) -> dict[str, Any] | None:
    """One entry's part of a verification record, with the record's shared settings (None when not verified)."""
    if record is None or entry_key not in record.get("entries", {}):
        return None
    shared = {k: record.get(k) for k in ("date", "engine", "weights", "tolerance", "sample", "seed", "precision",
                                         "device")}
    return {**shared, **record["entries"][entry_key]}


def tier_of(entry_verification: dict[str, Any] | None, board_tolerance: float, never: str | None = None
            ) -> tuple[str, str | None]:
    """(tier, why not verified): 'verified' only when the entry's re-run passed with a largest difference within
    its recorded tolerance, that tolerance is no looser than the board's, and nothing makes the row unverifiable
    (`never`: why it can never be verified)."""
    v = entry_verification
    if v is None:
        return "self-reported", never
    if never is not None:
        return "self-reported", f"{never}; its verification record is not counted"
    if v.get("passed") is not True:
        return "self-reported", None  # the verification-failed flag says why
    tol, diff = v.get("tolerance"), v.get("max_abs_diff")
    if not isinstance(tol, (int, float)) or tol > board_tolerance:
        return "self-reported", (f"verified with tolerance {tol}, looser than the board's {board_tolerance:g}: not "
                                 "counted")
    if not isinstance(diff, (int, float)) or diff > tol:
        return "self-reported", f"the record's max |diff| {diff} is not within its tolerance {tol:g}: not counted"
    return "verified", None
