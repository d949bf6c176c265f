"""`--hparam-search N`: a small hyperparameter search per method, chosen on validation only.

The candidates are the method's paper defaults (what the run would use) plus N-1 draws from the search space the
method declares in its own class body (`SEARCH_SPACE`; a method that declares none is refused), seeded by the
method's name so every call draws the same candidates. Keys given with --hparam stay fixed. Each candidate is an
ordinary run (reused when finished); its score is the validation split's criterion read from the `val` rows of its
predictions, worst-group AUC by default (the mean over training seeds and split seeds), and the highest wins (ties:
the earlier candidate, so the defaults win a tie). No test row is read: the search's choice is the same whatever
the test labels are (tests/run/test_hparam_search.py flips them).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairmedbench.benchmark.run import RunOutcome, run
from fairmedbench.engine.hparams import SearchRange, draw_candidate
from fairmedbench.errors import InputError
from fairmedbench.spec import RunOptions, RunSpec, option

#: the validation criteria a search can select on (higher is better), and the default
CRITERIA = ("worst_group_auc", "auc")
DEFAULT_CRITERION = "worst_group_auc"
#: tasks whose runs write validation predictions with a binary score to read the criterion from
SEARCH_TASKS = ("classification",)


@dataclass(frozen=True)
class SearchResult:
    """The chosen spec and what the search did (the record kept in the result JSON)."""

    spec: RunSpec
    record: dict[str, Any]


def search_space(method: str) -> Mapping[str, SearchRange] | None:
    """The search space `method` declares in its own class body, or None when it declares none."""
    from fairmedbench.mitigation import MITIGATIONS

    cls = MITIGATIONS.get(method)
    space = cls.__dict__.get("SEARCH_SPACE")
    return space if space else None


def check_searchable(method: str) -> None:
    """Refuse (one line) a method without a declared search space."""
    if search_space(method) is None:
        raise InputError(f"--hparam-search: mitigation {method!r} declares no search space (SEARCH_SPACE in its "
                         "plugin); drop --hparam-search or leave the method out")


def candidates(method: str, n: int, fixed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The defaults ({}) plus n-1 draws from the method's space, keys in `fixed` left out; seeded by the name."""
    check_searchable(method)
    space = search_space(method) or {}
    free = {k: r for k, r in space.items() if k not in fixed}
    rng = np.random.default_rng([zlib.crc32(method.encode()), n])
    return [{}, *(draw_candidate(free, rng) for _ in range(n - 1))]


def validation_score(outcome: RunOutcome, attribute: str, criterion: str) -> float:
    """The criterion on the validation rows of every run of `outcome` (split seeds x seeds), averaged; NaN when
    a group has a single class in some run. Only rows with split == 'val' are read."""
    from fairmedbench.metrics.auc import auc

    runs = [r for leaf in (outcome.split_runs or [outcome]) for r in leaf.seeds]
    values = []
    for res in runs:
        df = res.predictions()
        val = df[df["split"] == "val"]
        cols = res.doc["predictions"]["columns"]
        y, s = val[cols["labels"][0]].to_numpy(), val[cols["scores"][0]].to_numpy()
        if criterion == "auc":
            values.append(auc(y, s))
            continue
        g = val[f"attr:{attribute}"].to_numpy(dtype=object)
        per = [auc(y[g == v], s[g == v]) for v in sorted({x for x in g if x is not None})]
        values.append(min(per) if per and np.isfinite(per).all() else float("nan"))
    return float(np.mean(values))


def search(spec: RunSpec, opts: RunOptions, n: int, attribute: str | None = None,
           criterion: str = DEFAULT_CRITERION) -> SearchResult:
    """Run every candidate of `spec.mitigation`, keep the best on validation; the chosen spec and the record.
    `attribute`: whose groups the criterion reads (default: the run's first, the one mitigations train with)."""
    from fairmedbench.benchmark.resolve import check_spec
    from fairmedbench.engine.hparams import COST_BOUNDS

    if n < 1:
        raise InputError(f"--hparam-search {n}: give the number of candidates, at least 1 (the defaults)")
    if n > COST_BOUNDS["seeds"][1]:
        raise InputError(f"--hparam-search {n}: at most {COST_BOUNDS['seeds'][1]} candidates (each is a full run)")
    if criterion not in CRITERIA:
        raise InputError(f"--hparam-search criterion {criterion!r}: choose one of {', '.join(CRITERIA)}")
    checked = check_spec(spec)
    task, attribute = checked.task.name, attribute or checked.attributes[0]
    if task not in SEARCH_TASKS:
        raise InputError(f"--hparam-search selects on validation predictions of {', '.join(SEARCH_TASKS)} runs; "
                         f"a {task} run is not supported")
    cands = candidates(spec.mitigation, n, spec.hparams)
    specs = [dataclasses.replace(spec, hparams={**spec.hparams, **c}) for c in cands]
    for s in specs:  # every candidate checked before the first runs
        check_spec(s)
    scores = []
    for s in specs:
        scores.append(validation_score(run(s, dataclasses.replace(opts)), attribute, criterion))
    finite = [i for i, v in enumerate(scores) if np.isfinite(v)]
    if not finite:
        raise InputError(f"--hparam-search: {criterion} is undefined on validation for every candidate of "
                         f"{spec.mitigation!r} (a group with one class); use a larger validation split")
    best = max(finite, key=lambda i: (scores[i], -i))
    record = {"method": spec.mitigation, "n": n, "criterion": criterion, "attribute": attribute, "split": "val",
              "space": {k: dataclasses.asdict(r) if dataclasses.is_dataclass(r) else list(r)
                        for k, r in (search_space(spec.mitigation) or {}).items()},
              "fixed": sorted(k for k in spec.hparams if k != "select"),
              "candidates": [{"hparams": c, "val_score": None if not np.isfinite(v) else v}
                             for c, v in zip(cands, scores)],
              "chosen": best, "chosen_hparams": cands[best]}
    return SearchResult(specs[best], record)


@dataclass(frozen=True)
class SearchOptions:
    """`benchmark run`'s search option."""

    hparam_search: int = dataclasses.field(default=0, metadata=option(
        "search N hyperparameter candidates (the method's paper defaults plus N-1 seeded draws from its declared "
        "space), keep the best on the validation split's worst-group AUC (recorded in summary.json); test data is "
        "never read", type=int, metavar="N"))


def run_searched(spec: RunSpec, opts: RunOptions, n: int) -> tuple[RunSpec, dict[str, Any] | None]:
    """With n > 0: the spec the search chose and its record; else `spec` unchanged and None."""
    if not n:
        return spec, None
    found = search(spec, opts, n)
    return found.spec, found.record
