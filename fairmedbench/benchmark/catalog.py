"""What `benchmark list` and `benchmark describe` show: one row per registered thing, or one card as a mapping.
Each lister imports only its own registry, so listing stays instant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Row = dict[str, Any]


def profile_names() -> list[str]:
    """The registered metric profiles."""
    from fairmedbench.metrics.profiles import PROFILES

    return PROFILES.names()


def _profiles() -> list[Row]:
    from fairmedbench.metrics.profiles import PROFILES

    return [{"name": p.name, "about": p.about} for p in PROFILES.values()]


def _policies() -> list[Row]:
    from fairmedbench.metrics.thresholds import POLICIES

    return [{"name": p} for p in POLICIES]


def _datasets() -> list[Row]:
    from fairmedbench.benchmark.datasets import list_datasets

    return list_datasets()


def _models() -> list[Row]:
    from fairmedbench.benchmark.models import list_models

    return list_models()


def _usages() -> list[Row]:
    from fairmedbench.adapters import USAGES

    return [USAGES.get(n).describe() for n in USAGES.names()]


def _suites() -> list[Row]:
    from fairmedbench.leaderboards.suites import SUITES, Suite

    def test_sets(suite: Suite) -> list[str]:
        seen = {e.describe()["test_set"]["name"]: e for e in suite.entries}
        return [f"{name} ({'fingerprint pending' if e.pending else 'fingerprint ' + str(e.test_fingerprint)[:12]}, "
                f"{'partial coverage, ranked separately' if e.partial_coverage else 'complete coverage'})"
                for name, e in seen.items()]

    return [{"name": n, "version": SUITES.get(n).version, "entries": len(SUITES.get(n).entries),
             "test sets": test_sets(SUITES.get(n)), "about": SUITES.get(n).description} for n in SUITES.names()]


def _mitigations() -> list[Row]:
    from fairmedbench.mitigation import MITIGATIONS, make_mitigation

    rows = []
    for name in MITIGATIONS.names():
        d = make_mitigation(name).describe()
        rows.append({"name": name, "hparams": ", ".join(f"{k}={v}" for k, v in d["hparams"].items()),
                     "tasks": ", ".join(d["tasks"]), "needs class labels": d["needs_class_labels"] or "no",
                     "attribute at inference": d["needs_attribute_at_inference"]})
    return rows


def _studies() -> list[Row]:
    from fairmedbench.benchmark.studies import load_study, shipped_studies

    return [{"name": s.name, "models": len(s.models), "datasets": len(s.datasets), "usages": list(s.usages),
             "mitigations": list(s.mitigations), "seeds": len(s.seeds), "about": s.description}
            for s in map(load_study, shipped_studies())]


LISTERS: dict[str, Callable[[], list[Row]]] = {
    "profiles": _profiles, "thresholds": _policies, "datasets": _datasets, "models": _models, "usages": _usages,
    "mitigations": _mitigations, "suites": _suites, "studies": _studies}


def _describe_dataset(name: str, data_root: str | None, seed: int, skip_bad: bool) -> Row:
    from fairmedbench.benchmark.datasets import describe_dataset

    return describe_dataset(name, data_root, seed=seed, skip_bad=skip_bad)


def _describe_model(name: str, data_root: str | None, seed: int, skip_bad: bool) -> Row:
    from fairmedbench.benchmark.models import describe_model

    return describe_model(name)


def _describe_suite(name: str, data_root: str | None, seed: int, skip_bad: bool) -> Row:
    from fairmedbench.leaderboards.suites import get_suite

    suite = get_suite(name)
    return {"name": suite.name, "version": suite.version, "description": suite.description,
            "entries": [e.describe() for e in suite.entries]}


#: what -> its card as a mapping; each takes (name, data_root, split seed, skip_bad) and uses what it needs
DESCRIBERS: dict[str, Callable[[str, str | None, int, bool], Row]] = {
    "dataset": _describe_dataset, "model": _describe_model, "suite": _describe_suite}
