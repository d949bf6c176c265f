"""`benchmark run-suite SUITE --model X`: run every entry of a board suite and write a submission bundle."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fairmedbench.benchmark.run import run
from fairmedbench.engine import store
from fairmedbench.errors import InputError
from fairmedbench.leaderboards.bundle import write_header, write_result
from fairmedbench.leaderboards.suites import Entry, Suite, get_suite
from fairmedbench.metrics.bootstrap import N_BOOT
from fairmedbench.spec import RunOptions, RunSpec, option

_SHA = re.compile(r"^[0-9a-f]{64}$")


def model_header(model_name: str, weights_identity: str, revision: str | None = None) -> dict[str, Any]:
    """model.json of a bundle from the model card and the weights actually used."""
    from fairmedbench.registry.models import get_card

    card = get_card(model_name)
    sha = weights_identity if _SHA.match(weights_identity or "") else None
    return {"name": card.name, "revision": revision or (sha[:12] if sha else weights_identity or "default"),
            "weights_sha256": sha, "license": card.license, "family": card.family, "kind": card.kind,
            "pretraining_data": list(card.pretraining_data), "training_datasets": list(card.training_datasets)}


def board_split_file(entry: Entry, opts: RunOptions, suite: Suite) -> str | None:
    """For an entry on a real test set: write the board's split of the copy at hand (test = the pinned rule's
    samples present; train/val = the rest) under the results folder and return its path; else None."""
    if entry.test_set is None:
        return None
    from fairmedbench.engine.splits import save_split
    from fairmedbench.registry.datasets import load_dataset

    ds = load_dataset(entry.dataset, opts.data_root, **entry.dataset_options)
    split = entry.test_set.split(ds)
    path = Path(opts.out_root) / "board-splits" / f"{suite.name}-{suite.version}" / f"{entry.key}.split.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(save_split(split, path))


@dataclass(frozen=True, kw_only=True)
class SuiteOptions:
    """`benchmark run-suite`'s options."""

    suite: str = field(metadata=option("a board suite (benchmark list suites)", flag="suite"))
    model: str = field(metadata=option(required=True))
    weights: str | None = field(default=None, metadata=option())
    revision: str | None = field(default=None, metadata=option(
        "the model revision shown on the board (default: weights sha256 prefix)"))
    bundle: str = field(metadata=option("folder to write the bundle into", required=True))
    n_boot: int = field(default=N_BOOT, metadata=option())
    entry: list[str] = field(default_factory=list, metadata=option(
        "run only this entry (repeatable; default: all; keys: benchmark describe suite NAME)", action="append",
        metavar="KEY"))


def suite_with(o: SuiteOptions, opts: RunOptions) -> Path:
    """run_suite() with `benchmark run-suite`'s options."""
    return run_suite(o.suite, o.model, Path(o.bundle), opts, weights=o.weights, n_boot=o.n_boot, revision=o.revision,
                     entries=o.entry)


def run_suite(suite_name: str, model: str, bundle: Path, opts: RunOptions, weights: str | None = None,
              n_boot: int = N_BOOT, revision: str | None = None, entries: Sequence[str] = ()) -> Path:
    """Run each entry (or only those named in `entries`) for each of its seeds (reusing finished runs), evaluating
    the entry's external datasets (--eval-dataset) with the suite's equivalence margins, and write the bundle;
    returns its path. Entries on a real test set run on the board's split (`board_split_file`)."""
    import pandas as pd

    suite = get_suite(suite_name)
    for key in entries:
        suite.entry(key)  # unknown keys fail here, listing the suite's entries
    chosen = [e for e in suite.entries if not entries or e.key in entries]
    _check_capabilities(model, chosen)
    header: dict[str, Any] | None = None
    for entry in chosen:
        spec = RunSpec(model=model, dataset=entry.dataset, attributes=entry.attributes, usage=entry.usage,
                       seeds=entry.seeds, weights=weights, profile=entry.profile, n_boot=n_boot,
                       dataset_options=entry.dataset_options, split_file=board_split_file(entry, opts, suite),
                       eval_datasets=tuple(x.dataset for x in entry.externals), margin=suite.margin)
        outcome = run(spec, replace(opts))
        if outcome.reused and any(_predates_empty_rows(d) for d in outcome.seed_docs):
            opts.say(f"{entry.key}: the stored run predates one predictions row per test sample; recomputing it")
            outcome = run(spec, replace(opts, force=True))
        for seed, doc in zip(entry.seeds, outcome.seed_docs):
            if header is None:
                header = model_header(model, doc["inputs"]["model"]["weights"], revision)
                write_header(bundle, header, suite)
            doc = _for_bundle(doc, header)
            frame = pd.read_parquet(outcome.out_dir / f"seed{seed}.predictions.parquet")
            externals = [pd.read_parquet(outcome.out_dir / e["predictions"]) for e in doc.get("external", [])]
            write_result(bundle, entry, seed, doc, frame, externals)
    return bundle


def _check_capabilities(model: str, entries: Sequence[Entry]) -> None:
    """Fail before any work when the model cannot serve an entry's usage (a bundle may answer some entries)."""
    from fairmedbench.adapters import USAGES
    from fairmedbench.registry.models import get_card

    caps = set(get_card(model).capabilities)
    bad = [f"{e.key} (usage {e.usage} needs {', '.join(sorted(set(USAGES.get(e.usage).requires) - caps))})"
           for e in entries if not set(USAGES.get(e.usage).requires) <= caps]
    if bad:
        ok = [e.key for e in entries if set(USAGES.get(e.usage).requires) <= caps]
        hint = f"; run the others with {' '.join('--entry ' + k for k in ok)}" if ok else ""
        raise InputError(f"model {model!r} cannot run {'; '.join(bad)}{hint}")


def _predates_empty_rows(doc: dict[str, Any]) -> bool:
    """A segmentation result written before empty-mask samples got a (null-score) row: no usage.n_skipped."""
    return doc["kind"] == "run-segmentation" and "n_skipped" not in doc.get("usage", {})


def _for_bundle(doc: dict[str, Any], header: dict[str, Any]) -> dict[str, Any]:
    """The run's document with the model identity a board checks (name and weights sha256)."""
    inputs = {**doc["inputs"], "model": {**doc["inputs"]["model"], "name": header["name"],
                                         "weights_sha256": header["weights_sha256"]}}
    out = {**doc, "inputs": inputs}
    out["run_id"] = store.run_id({"kind": doc["kind"], "spec": doc["spec"], "inputs": inputs})
    return out
