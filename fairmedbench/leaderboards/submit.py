"""Submission checks: a bundle is read as bytes, checked, recomputed from its predictions, then stored atomically.

Nothing here unpickles or imports torch: JSON through `json`, Parquet through pyarrow (columns of
primitive types only). Every file is read once, through a descriptor opened without following links,
and the stored copy is written from those same bytes.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

import numpy as np

from fairmedbench import __version__
from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.leaderboards import seal
from fairmedbench.leaderboards.flags import Facts, from_columns
from fairmedbench.leaderboards.flags import row_flags as row_flags_of
from fairmedbench.leaderboards.recompute import (
    MAX_LINES_PER_FILE,
    Limits,
    _close,
    _Columns,
    _headline,
    _mean,
    _read_predictions,
    _schema_lines,
    _Stop,
    recompute,
    result_schema,
)
from fairmedbench.leaderboards.seal import BoardKey
from fairmedbench.leaderboards.suites import Entry, Suite, test_fingerprint
from fairmedbench.tasks.base import get_task, unscored_columns

NAME_RE = re.compile(r"^[A-Za-z0-9._+\-]+$")
SEED_JSON_RE = re.compile(r"^seed(\d{1,6})\.json$")
SUBMISSION_FILE = "submission.json"
SUBMISSION_FORMAT = "fairmedbench-submission/1"

# Names shown on a board and used as folder names: lower-case letters, digits, '.', '_', '-' (free text goes only
# in a bundle card's description, escaped on the page)
SAFE_NAME = r"^[a-z0-9][a-z0-9._-]{0,63}$"
SAFE_NAME_RE = re.compile(SAFE_NAME)
CARD_FILE = "card.json"
MODEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "revision", "weights_sha256", "license", "family", "kind", "pretraining_data"],
    "properties": {
        "name": {"type": "string", "pattern": SAFE_NAME},
        "revision": {"type": "string", "minLength": 1, "maxLength": 100},
        "weights_sha256": {"anyOf": [{"type": "string", "pattern": "^[0-9a-f]{64}$"}, {"type": "null"}]},
        "license": {"type": "string", "maxLength": 200},
        "family": {"type": "string", "maxLength": 200},
        "kind": {"enum": ["vision", "vision-language", "segmentation"]},
        "pretraining_data": {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 200},
        "training_datasets": {"type": "array", "items": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$"},
                              "maxItems": 200},
    },
}
# A new model card submitted in the bundle (card.json) for a name that is not registered: metadata only
# (the board cannot load it, so its rows stay self-reported); free text only in `description`.
CARD_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["name", "description", "family", "kind", "license", "weights", "pretraining_data",
                 "training_datasets"],
    "properties": {
        "name": {"type": "string", "pattern": SAFE_NAME},
        "description": {"type": "string", "maxLength": 2000},
        "family": {"type": "string", "pattern": SAFE_NAME},
        "kind": {"enum": ["vision", "vision-language", "segmentation"]},
        "license": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9.+_ -]{0,63}$"},
        "weights": {"type": "object", "additionalProperties": False,
                    "properties": {"url": {"type": ["string", "null"], "pattern": r"^https://[^\s<>\"']{1,500}$"},
                                   "hub_id": {"type": ["string", "null"],
                                              "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9._-]{1,96}$"}}},
        "pretraining_data": {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 200},
        "training_datasets": {"type": "array", "items": {"type": "string", "pattern": SAFE_NAME}, "maxItems": 200},
    },
}
SUITE_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["name", "version"],
    "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
}


@dataclass
class Outcome:
    """What a submission came to: accepted or not, one line per reason, flags, and where it was stored."""

    accepted: bool
    reasons: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    path: Path | None = None
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line per reason (rejected) or the notes (a board key created), a summary line and one per flag
        (accepted)."""
        if not self.accepted:
            return [f"rejected: {r}" for r in self.reasons]
        return self.notes + [f"accepted: stored under {self.path} and sealed"] + [f"flag: {f}" for f in self.flags]


def slug(text: str) -> str:
    """A safe folder name: the text itself when it is plain, else a cleaned prefix plus a short hash."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", text):
        return text
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:40] or "x"
    return f"{clean}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:10]}"


def _strict_json(data: bytes, where: str) -> Any:
    def bad_constant(name: str) -> NoReturn:
        raise ValueError(f"{name} is not JSON (undefined values must be null)")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=bad_constant)
    except (UnicodeDecodeError, ValueError) as err:
        raise _Stop([f"{where}: not valid JSON ({err})"]) from None


def _content_problem(rel: str, data: bytes) -> str | None:
    """Pickles, zip archives (torch.save) and files whose bytes do not match their extension."""
    if len(data) >= 2 and data[0] == 0x80 and 1 <= data[1] <= 5:
        return f"{rel}: is a Python pickle (protocol {data[1]}); pickles are never accepted, use JSON or Parquet"
    if data[:4] == b"PK\x03\x04":
        return f"{rel}: is a zip archive (a torch.save checkpoint holds pickles); only JSON and Parquet are accepted"
    if rel.endswith(".parquet") and not (len(data) >= 12 and data[:4] == b"PAR1" and data[-4:] == b"PAR1"):
        return f"{rel}: is not a Parquet file (no PAR1 magic at both ends)"
    return None


def _read_file(name: str, dir_fd: int, cap: int) -> bytes | None:
    """Up to cap + 1 bytes of a regular file opened relative to its folder without following links."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(cap + 1)
    finally:
        os.close(fd)


def read_bundle(bundle: Path, limits: Limits) -> dict[str, bytes]:
    """Every file of the bundle as bytes, keyed by its relative posix path; raises _Stop with all problems.

    The walk holds folder descriptors and opens every entry relative to its folder with O_NOFOLLOW, so a
    link swapped in during the walk cannot lead outside the bundle.
    """
    bundle = Path(bundle)
    if bundle.is_symlink():
        raise _Stop([f"{bundle}: the bundle is a symlink; give the real folder"])
    if not bundle.is_dir():
        raise _Stop([f"{bundle}: not a folder (a bundle is a folder with model.json, suite.json and results/)"])
    problems: list[str] = []
    files: dict[str, bytes] = {}
    total = 0
    dir_flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)

    def walk(dir_fd: int, parts: tuple[str, ...]) -> None:
        nonlocal total
        with os.scandir(dir_fd) as it:
            names = sorted(e.name for e in it)
        for name in names:
            rel = "/".join(parts + (name,))
            if not NAME_RE.match(name):
                problems.append(f"{rel!r}: file name has characters outside [A-Za-z0-9._+-]")
                continue
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                problems.append(f"{rel}: is a symlink; symlinks are never accepted (copy the file in)")
            elif stat.S_ISDIR(st.st_mode):
                if len(parts) >= 2:
                    problems.append(f"{rel}: folder nested too deep (layout is results/<entry>/<files>)")
                    continue
                sub = os.open(name, dir_flags, dir_fd=dir_fd)
                try:
                    walk(sub, parts + (name,))
                finally:
                    os.close(sub)
            elif not stat.S_ISREG(st.st_mode):
                problems.append(f"{rel}: not a regular file")
            elif not (name.endswith(".json") or name.endswith(".parquet")):
                problems.append(f"{rel}: only .json and .parquet files are accepted")
            elif len(files) >= limits.files:
                problems.append(f"{rel}: more than {limits.files} files in the bundle")
            else:
                cap = limits.json_bytes if name.endswith(".json") else limits.parquet_bytes
                data = None if st.st_size > cap else _read_file(name, dir_fd, cap)
                if data is None and st.st_size <= cap:
                    problems.append(f"{rel}: not a regular file")
                elif data is None or len(data) > cap:
                    problems.append(f"{rel}: {st.st_size} bytes is over the {cap}-byte limit for this file type")
                else:
                    total += len(data)
                    content = _content_problem(rel, data)
                    if content:
                        problems.append(content)
                    files[rel] = data

    root = os.open(bundle, dir_flags)
    try:
        walk(root, ())
    except OSError as err:
        problems.append(f"{bundle}: could not be read ({err.strerror}: {err.filename})")
    finally:
        os.close(root)
    if total > limits.total_bytes:
        problems.append(f"bundle holds {total} bytes, over the {limits.total_bytes}-byte total limit")
    if problems:
        raise _Stop(problems)
    return files


def weights_identity(sha: str | None, run_weights: Any) -> str | None:
    """What names a row's weights: the declared sha256, a seeded random init ('random:seed=N', rebuilt bit for bit
    by the package), or None: weights not provided, so the row can never be verified."""
    if sha is not None:
        return sha
    w = str(run_weights or "")
    return w if w.startswith("random:seed=") else None


def weights_binding(sha: str | None, run_weights: Any) -> list[str]:
    """The run's weights identity (spec.weights) must be the sha256 model.json declares: the revision label is
    bound to those bytes (a run on other weights under the same label is refused)."""
    if sha is not None and run_weights != sha:
        return [f"spec.weights is {str(run_weights)[:70]!r} but model.json declares weights sha256 {sha[:12]}...: a "
                "revision names one set of weights; declare the sha256 of the weights the run read"]
    return []


def revision_label(model: dict[str, Any], weights: str | None) -> str:
    """The revision as a board shows it, bound to its weights: 'r1 @ 3f2a9c01d4e5', 'r1 @ random:seed=0' or
    'r1 (weights not provided)'."""
    if weights is None:
        return f"{model['revision']} (weights not provided)"
    return f"{model['revision']} @ {weights[:12] if len(weights) == 64 else weights}"


def _check_document(rel: str, doc: Any, entry: Entry, seed: int, model: dict[str, Any]) -> list[str]:
    """Schema and consistency of one result document with its entry, seed and model card."""
    lines = _schema_lines(rel, doc, result_schema())
    if lines:
        return lines
    lines = [f"{rel}: {p}" for p in store.validate_document(doc)]
    if doc["kind"] != entry.kind:
        lines.append(f"{rel}: kind {doc['kind']!r}, expected {entry.kind!r} for entry {entry.key}")
    if doc["run_id"] != store.run_id({"kind": doc["kind"], "spec": doc["spec"], "inputs": doc["inputs"]}):
        lines.append(f"{rel}: run_id does not match the hash of kind, spec and inputs")
    spec = doc["spec"]
    expect = {"model": model["name"], "dataset": entry.dataset, "attributes": list(entry.attributes),
              "usage": entry.usage, "profile": entry.profile, "seed": seed}
    for k, v in expect.items():
        if spec.get(k) != v:
            lines.append(f"{rel}: spec.{k} is {spec.get(k)!r}, expected {v!r}")
    ds = doc["inputs"].get("dataset")
    mod = doc["inputs"].get("model")
    if not isinstance(ds, dict) or not isinstance(mod, dict):
        return lines + [f"{rel}: inputs must hold objects 'dataset' and 'model'"]
    for k in ("name", "fingerprint", "split_fingerprint", "test_fingerprint", "n_test"):
        if k not in ds:
            lines.append(f"{rel}: inputs.dataset lacks {k!r}")
    if ds.get("name") != entry.dataset:
        lines.append(f"{rel}: inputs.dataset.name is {ds.get('name')!r}, expected {entry.dataset!r}")
    for k in ("name", "weights_sha256"):
        if mod.get(k) != model.get(k):
            lines.append(f"{rel}: inputs.model.{k} is {mod.get(k)!r} but model.json says {model.get(k)!r}")
    lines += [f"{rel}: {p}" for p in weights_binding(model.get("weights_sha256"), spec.get("weights"))]
    if entry.split_fingerprint is not None and ds.get("split_fingerprint") != entry.split_fingerprint:
        lines.append(f"{rel}: wrong split fingerprint {ds.get('split_fingerprint')!r}; the board's test split "
                     f"for {entry.dataset} is {entry.split_fingerprint!r}")
    if doc["result"]["meta"].get("profile") != entry.profile:
        lines.append(f"{rel}: metric profile {doc['result']['meta'].get('profile')!r}, expected {entry.profile!r}")
    block = doc.get("predictions")
    expected_file = f"seed{seed}.predictions.parquet"
    if not isinstance(block, dict):
        return lines + [f"{rel}: no 'predictions' block; the numbers cannot be recomputed"]
    f = block.get("file")
    if not isinstance(f, str):
        lines.append(f"{rel}: predictions.file must be a file name")
    elif f.startswith("/") or re.match(r"^[A-Za-z]:", f) or f.startswith("\\"):
        lines.append(f"{rel}: predictions.file {f!r} is an absolute path; it must name a file in the bundle")
    elif ".." in PurePosixPath(f.replace("\\", "/")).parts:
        lines.append(f"{rel}: predictions.file {f!r} leaves the bundle ('..'); it must name a file beside the result")
    elif f != expected_file:
        lines.append(f"{rel}: predictions.file is {f!r}, expected {expected_file!r}")
    tasks = block.get("tasks")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        return lines + [f"{rel}: predictions.tasks must be a non-empty list of names"]
    want = get_task(entry.task).predictions_block(expected_file, tasks, list(entry.attributes), entry.classes)
    if "classes" in want and block.get("classes") != want["classes"]:  # the score columns follow from the classes
        return lines + [f"{rel}: predictions.classes is {block.get('classes')!r}; {entry.dataset} has the classes "
                        f"{want['classes']} (in this order: a label is an index into them)"]
    for k in ("format", "attributes", "columns"):
        if block.get(k) != want[k]:
            lines.append(f"{rel}: predictions.{k} is {block.get(k)!r}, expected {want[k]!r}")
    unexpected = sorted(set(block) - set(want))
    if unexpected:  # e.g. 'classes' on a binary entry: nothing a reader might branch on goes unchecked
        lines.append(f"{rel}: predictions has unexpected key(s) {unexpected} for a {entry.task} entry")
    return lines


def _check_test_ids(rel: str, cols: _Columns, entry: Entry, ds: dict[str, Any]) -> tuple[list[str], str]:
    ids = cols.test["sample_id"]
    fp = test_fingerprint(ids)
    n = len(ids)
    # any subset of the pinned ids (partial coverage implies a test set); the result must describe the ids it holds
    if entry.test_set is not None and entry.partial_coverage:
        lines = entry.test_set.check_test_ids(ids, rel)
        leaked = sorted(set(cols.val.get("sample_id", ())) & entry.test_set.pinned_ids())
        if leaked:  # a copy split by another rule: the threshold (and likely the training) saw test patients
            lines.append(f"{rel}: {len(leaked)} validation id(s) belong to the board's test set (first: "
                         f"{leaked[:3]}); run with `benchmark run-suite`, which uses the board's split")
        if ds.get("test_fingerprint") != fp or ds.get("n_test") != n:
            lines.append(f"{rel}: inputs.dataset test_fingerprint/n_test do not describe the {n} test rows")
        return lines, fp
    lines = []
    n_want = entry.n_test if entry.n_test is not None else ds.get("n_test")
    fp_want = entry.test_fingerprint if entry.test_fingerprint is not None else ds.get("test_fingerprint")
    whose = "the board's" if entry.test_fingerprint is not None else "the result's own"
    if isinstance(n_want, int) and n < n_want:
        lines.append(f"{rel}: test ids incomplete: {n} test rows, {whose} test set has {n_want} ({n_want - n} missing)")
    elif isinstance(n_want, int) and n > n_want:
        lines.append(f"{rel}: extra test ids: {n} test rows, {whose} test set has {n_want}")
    elif fp != fp_want:
        lines.append(f"{rel}: test ids differ from {whose} test set (test fingerprint {fp[:12]}..., "
                     f"expected {str(fp_want)[:12]}...)")
    if entry.test_fingerprint is not None and ds.get("test_fingerprint") != entry.test_fingerprint:
        lines.append(f"{rel}: inputs.dataset.test_fingerprint does not match the board's test set")
    if entry.n_test is not None and ds.get("n_test") != entry.n_test:
        lines.append(f"{rel}: inputs.dataset.n_test is {ds.get('n_test')!r}, the board's test set has {entry.n_test}")
    return lines, fp


def _coverage(entry: Entry, n: int) -> dict[str, Any]:
    """How much of the board's test set a row answers: evaluated / pinned ids (pinned = n when not pinned)."""
    pinned = entry.n_test if entry.n_test is not None else n
    return {"test_set": entry.test_set.name if entry.test_set is not None else f"{entry.dataset} test split",
            "evaluated": n, "pinned": pinned, "complete": n == pinned}


def _check_skipped(rel: str, doc: dict[str, Any], cols: _Columns) -> list[str]:
    """A run's usage block (when it has one) names exactly the test rows its task's 'unscored' column marks (a
    segmentation sample with an empty ground truth) as skipped."""
    given = doc.get("usage")
    usage = given if isinstance(given, dict) else {}
    marks = [c for c in unscored_columns() if c in cols.test]
    if not marks or "skipped" not in usage:
        return []
    skipped, n = usage["skipped"], usage.get("n_skipped")
    unscored = np.logical_or.reduce([cols.test[c] == 1.0 for c in marks])
    empty = sorted(str(i) for i in cols.test["sample_id"][unscored])
    if not isinstance(skipped, dict) or sorted(skipped) != empty or (n is not None and n != len(empty)):
        named = sorted(skipped) if isinstance(skipped, dict) else []
        odd = sorted(set(named) ^ set(empty))
        return [f"{rel}: usage.skipped names {len(named)} sample(s) (n_skipped {n!r}), the predictions have "
                f"{len(empty)} row(s) with {' or '.join(marks)}" + (f"; e.g. {odd[0]!r} is in one only" if odd else "")]
    return []


def validate_bundle(bundle: Path | str, suite: Suite, limits: Limits | None = None
                    ) -> tuple[list[str], dict[str, Any] | None, dict[str, bytes]]:
    """(reasons, submission summary, files): reasons is empty when the bundle is acceptable."""
    limits = limits or Limits()
    try:
        files = read_bundle(Path(bundle), limits)
        return _validate(files, suite, limits)
    except _Stop as stop:
        return list(stop.args[0]), None, {}


def check_model_name(name: Any) -> str | None:
    """Why `name` cannot be a model name on a board (None when it can): the safe pattern, said plainly."""
    if isinstance(name, str) and SAFE_NAME_RE.match(name):
        return None
    return (f"model.json: model name {name!r} is refused: a model name is 1-64 characters of a-z, 0-9, '.', '_' "
            "and '-', starting with a letter or digit (no '/', spaces, capitals or markup); put free text in "
            f"the description of the bundle's {CARD_FILE}")


def _card_lines(model: dict[str, Any], files: dict[str, bytes]) -> tuple[list[str], dict[str, Any] | None]:
    """A registered model must match its registry card; any other name needs a schema-valid card.json."""
    from fairmedbench.registry.models import MODELS, get_card

    name = model["name"]
    if name in MODELS:
        if CARD_FILE in files:
            return [f"{CARD_FILE}: {name!r} is a registered model card; a bundle may not redefine it (drop "
                    f"{CARD_FILE}, or submit under a new name)"], None
        card = get_card(name)
        want = {"license": card.license, "family": card.family, "kind": card.kind,
                "pretraining_data": list(card.pretraining_data), "training_datasets": list(card.training_datasets)}
        return [f"model.json: {k} is {model.get(k)!r} but the registered card {name!r} says {v!r}"
                for k, v in want.items() if model.get(k, [] if k == "training_datasets" else None) != v], None
    if CARD_FILE not in files:
        return [f"model.json: {name!r} is not a registered model (benchmark list models); use a registered name, "
                f"or add {CARD_FILE} to the bundle: a new card with name, description, family, kind, license, "
                "weights {url, hub_id}, pretraining_data and training_datasets (leaderboards.submit.CARD_SCHEMA)"
                ], None
    card = _strict_json(files[CARD_FILE], CARD_FILE)
    lines = _schema_lines(CARD_FILE, card, CARD_SCHEMA)
    if lines:
        return lines, None
    lines = [f"model.json: {k} is {model.get(k)!r} but {CARD_FILE} says {card[k]!r}"
             for k in ("name", "family", "kind", "license", "pretraining_data", "training_datasets")
             if model.get(k, [] if k == "training_datasets" else None) != card[k]]
    return lines, card


def _heads(files: dict[str, bytes], suite: Suite) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """model.json (with card.json for a model that is not registered) and suite.json, checked against this
    board's suite: the model and its new card (None for a registered one)."""
    lines: list[str] = []
    heads = {}
    for name, schema in (("model.json", MODEL_SCHEMA), ("suite.json", SUITE_SCHEMA)):
        if name not in files:
            lines.append(f"{name}: missing")
            continue
        heads[name] = _strict_json(files[name], name)
        bad_name = check_model_name(heads[name]["name"]) if name == "model.json" and isinstance(
            heads[name], dict) and "name" in heads[name] else None
        lines += [bad_name] if bad_name else _schema_lines(name, heads[name], schema)
    if lines:
        raise _Stop(lines)
    model, suite_doc = heads["model.json"], heads["suite.json"]
    lines, card = _card_lines(model, files)
    if lines:
        raise _Stop(lines)
    if (suite_doc["name"], suite_doc["version"]) != (suite.name, suite.version):
        raise _Stop([f"suite.json: answers suite {suite_doc['name']!r} version {suite_doc['version']!r}, but this "
                     f"board is {suite.name!r} version {suite.version!r}"])
    return model, card


def _layout(files: dict[str, bytes], suite: Suite) -> dict[str, dict[int, str]]:
    """Entry key -> seed -> its result document's path; _Stop for any other file or entry."""
    from fairmedbench.leaderboards import external  # the shift analysis: loaded when a bundle is checked

    layout: dict[str, dict[int, str]] = {}
    lines = []
    for rel in files:
        parts = rel.split("/")
        if len(parts) == 1 and rel in ("model.json", "suite.json", CARD_FILE):
            continue
        if len(parts) == 3 and parts[0] == "results":
            m = SEED_JSON_RE.match(parts[2])
            if m:
                layout.setdefault(parts[1], {})[int(m.group(1))] = rel
                continue
            if re.match(r"^seed\d{1,6}\.predictions\.parquet$", parts[2]) or external.FILE_RE.match(parts[2]):
                continue
        lines.append(f"{rel}: unexpected file (layout: model.json, suite.json, optional {CARD_FILE}, "
                     "results/<entry>/seed<k>.json and seed<k>.predictions.parquet, with "
                     "seed<k>.external<j>.predictions.parquet for an entry's external datasets)")
    for key in sorted(layout):
        if key not in suite.keys():
            lines.append(f"results/{key}: not an entry of suite {suite.name!r} (entries: {', '.join(suite.keys())})")
    if not set(layout) & set(suite.keys()):
        lines.append(f"the bundle answers no entry of suite {suite.name!r} (expected results/<entry>/seed<k>.json "
                     f"for entries {', '.join(suite.keys())})")
    if lines:
        raise _Stop(lines)
    return layout


def _check_seed(rel: str, k: int, files: dict[str, bytes], entry: Entry, model: dict[str, Any], limits: Limits,
                split_seen: dict[str, str | None]) -> tuple[dict[str, Any], _Columns, str]:
    """One seed's document and predictions, checked and recomputed: the document, its predictions read by the
    task, and the fingerprint of its test ids; _Stop listing what is wrong or what differs."""
    doc = _strict_json(files[rel], rel)
    problems = _check_document(rel, doc, entry, k, model)
    if problems:
        raise _Stop(problems)
    prel = f"results/{entry.key}/seed{k}.predictions.parquet"
    if prel not in files:
        raise _Stop([f"{prel}: missing (the predictions of {rel})"])
    cols = _read_predictions(prel, files[prel], entry, doc["predictions"], k)
    ds = doc["inputs"]["dataset"]
    problems, fp = _check_test_ids(prel, cols, entry, ds)
    problems += _check_skipped(rel, doc, cols)
    if split_seen.setdefault(entry.dataset, ds.get("split_fingerprint")) != ds.get("split_fingerprint"):
        problems.append(f"{rel}: split fingerprint differs from another result on {entry.dataset} in this bundle")
    if problems:
        raise _Stop(problems)
    diffs: list[str] = []
    again = recompute(rel, doc, entry, cols, limits)
    _close(doc["result"]["reports"], again["reports"], "result/reports", diffs)
    for key, value in again["meta"].items():
        _close(doc["result"]["meta"].get(key), value, f"result/meta/{key}", diffs)
    if diffs:
        more = len(diffs) - MAX_LINES_PER_FILE
        raise _Stop([f"{rel}: reported number differs from recomputation: {d}" for d in diffs[:MAX_LINES_PER_FILE]]
                    + ([f"{rel}: ... and {more} more differences"] if more > 0 else []))
    return doc, cols, fp


@dataclass
class _EntryRows:
    """What an entry's seeds give a submission: its board rows, their flags, the weights its runs name, and the
    problems found (no rows then)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    weights: set[str] = field(default_factory=set)
    lines: list[str] = field(default_factory=list)


def _entry_rows(entry: Entry, seeds: dict[int, str], files: dict[str, bytes], heads: tuple[dict[str, Any], Any],
                limits: Limits, split_seen: dict[str, str | None]) -> _EntryRows:
    """An entry's seeds checked and recomputed, and its rows (one per attribute): the seed mean of each board
    metric, the flags, the runs, the coverage and the external datasets' fields."""
    from fairmedbench.leaderboards import external

    model, card = heads
    out = _EntryRows()
    out.lines += [f"results/{entry.key}: seed {k} is missing (the suite asks for seeds {list(entry.seeds)})"
                  for k in entry.seeds if k not in seeds]
    out.lines += [f"{seeds[k]}: seed {k} is not one of the suite's seeds {list(entry.seeds)}"
                  for k in sorted(set(seeds) - set(entry.seeds))]
    per_seed, test_fps, run_meta, preds, ext_seeds = [], set(), [], [], []
    for k in (k for k in entry.seeds if k in seeds):
        rel = seeds[k]
        try:
            doc, cols, fp = _check_seed(rel, k, files, entry, model, limits, split_seen)
            ext_seeds.append(external.check_seed(rel, doc, entry, k, files, cols, limits))
        except _Stop as stop:
            out.lines += list(stop.args[0])
            continue
        test_fps.add(fp)
        per_seed.append(_headline(doc, entry.task))
        preds.append(from_columns(cols.test, doc["predictions"], k))
        out.weights.add(str(doc["spec"].get("weights")))
        run_meta.append({"seed": k, "run_id": doc["run_id"], "file": rel, "created_at": doc["created_at"],
                         "fairmedbench_version": doc["fairmedbench_version"], "git_commit": doc.get("git_commit"),
                         "n_test": len(cols.test["sample_id"]),
                         "split_fingerprint": doc["inputs"]["dataset"].get("split_fingerprint")})
    if len(test_fps) > 1:
        out.lines.append(f"results/{entry.key}: the seeds were evaluated on different test sets")
    if out.lines or not per_seed:
        return out
    for attr in per_seed[0]:
        metrics = {c: _mean([math.nan if v is None else v for v in (s[attr][c] for s in per_seed)])
                   for c in per_seed[0][attr]}
        # the flags this bundle raises on its own; `board.build` recomputes them with the other submissions
        row_flags = row_flags_of(Facts(model, card, entry, attr.split("|")[0], preds, frozenset(out.weights)))
        out.flags += [f"{entry.key} / {attr}: {f['label']}: {f['detail']}" for f in row_flags]
        out.rows.append({"entry": entry.key, "dataset": entry.dataset, "usage": entry.usage, "task": entry.task,
                         "attribute": attr, "profile": entry.profile, "seeds": [m["seed"] for m in run_meta],
                         "metrics": metrics, "flags": row_flags, "runs": run_meta,
                         "coverage": _coverage(entry, run_meta[0]["n_test"]),
                         **external.row_fields(entry, attr, ext_seeds)})
    return out


def _validate(files: dict[str, bytes], suite: Suite, limits: Limits
              ) -> tuple[list[str], dict[str, Any] | None, dict[str, bytes]]:
    model, card = _heads(files, suite)
    layout = _layout(files, suite)
    lines: list[str] = []
    rows: list[dict[str, Any]] = []
    flags: list[str] = []
    split_seen: dict[str, str | None] = {}
    all_weights: set[str] = set()
    for entry in suite.entries:
        if entry.key in layout:
            found = _entry_rows(entry, layout[entry.key], files, (model, card), limits, split_seen)
            lines += found.lines
            rows += [] if lines else found.rows
            flags += [] if lines else found.flags
            all_weights |= found.weights
    if lines:
        raise _Stop(lines)
    identity = weights_identity(model.get("weights_sha256"),
                                next(iter(all_weights)) if len(all_weights) == 1 else None)
    summary = {"format": SUBMISSION_FORMAT, "suite": {"name": suite.name, "version": suite.version},
               "model": model, "card": card, "flags": flags, "weights": identity,
               "revision_label": revision_label(model, identity),
               "files": {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())},
               "rows": rows}
    return [], summary, files


def store_submission(board_dir: Path, summary: dict[str, Any], files: dict[str, bytes], key: BoardKey) -> Path:
    """Write the validated bytes and the summary into a staging folder under the board, seal it under the board's
    key (`seal.write_seal`), then rename it into place."""
    model = summary["model"]
    final = board_dir / "submissions" / slug(model["name"]) / slug(model["revision"])
    if final.exists():
        raise InputError(f"model {model['name']!r} revision {model['revision']!r} is already on this board "
                         f"({final}); submit it under a new revision")
    board_dir.mkdir(parents=True, exist_ok=True)
    staging = store.staging_dir(board_dir, "submission")
    try:
        for rel, data in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        summary = dict(summary, accepted_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds"),
                       accepted_by=f"fairmedbench {__version__}")
        (staging / SUBMISSION_FILE).write_text(json.dumps(summary, indent=1, allow_nan=False) + "\n")
        seal.write_seal(staging, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if final.parent.exists() and not any(final.parent.iterdir()):
            final.parent.rmdir()
        raise
    return final


def submit(bundle: Path | str, suite: Suite, board_dir: Path | str, limits: Limits | None = None) -> Outcome:
    """Validate `bundle` against `suite` and, when it passes, store it under `board_dir`/submissions/, sealed under
    the board's key (`seal.board_key`: created on the first accepted submission when there is none)."""
    seal.board_key(board_dir)  # a bad key (too short, readable by others) is named before any work
    reasons, summary, files = validate_bundle(bundle, suite, limits)
    if reasons or summary is None:
        return Outcome(False, reasons)
    key = seal.board_key(board_dir, create=True)
    assert key is not None, "created when absent"
    try:
        path = store_submission(Path(board_dir), summary, files, key)
    except InputError as err:
        return Outcome(False, [str(err)])
    created = key.created_line()
    return Outcome(True, [], list(summary["flags"]), path, [created] if created else [])


def revalidate_stored(folder: Path | str, suite: Suite, limits: Limits | None = None
                      ) -> tuple[list[str], dict[str, Any] | None]:
    """`submit`'s checks and recomputation run again on a stored submission's files (its summary, seal and
    verification record left out): (reasons, the summary they give; None when refused)."""
    limits = limits or Limits()
    try:
        files = read_bundle(Path(folder), limits)
        for name in (SUBMISSION_FILE, *seal.UNSEALED):
            files.pop(name, None)
        reasons, summary, _ = _validate(files, suite, limits)
        return reasons, summary
    except _Stop as stop:
        return list(stop.args[0]), None


def differences(reported: Any, recomputed: Any, path: str) -> list[str]:
    """One line per value that differs between a reported and a recomputed structure (numbers within TOLERANCE)."""
    out: list[str] = []
    _close(reported, recomputed, path, out)
    return out


def read_submission(path: Path) -> dict[str, Any]:
    """A stored submission's summary (written by `store_submission`)."""
    return json.loads((Path(path) / SUBMISSION_FILE).read_text())


__all__ = ["Limits", "Outcome", "differences", "read_submission", "recompute", "revalidate_stored", "slug",
           "store_submission", "submit", "validate_bundle"]
