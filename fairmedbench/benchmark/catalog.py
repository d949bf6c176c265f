"""What `benchmark list` and `benchmark describe` show: one row per registered thing, or one card as a mapping.
Each lister imports only its own registry, so listing stays instant."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fairmedbench.spec import RunSpec, option

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
    from fairmedbench.benchmark.claims import load_claim, shipped_claims
    from fairmedbench.benchmark.studies import load_study, shipped_studies

    rows: list[Row] = [{"name": s.name, "models": len(s.models), "datasets": len(s.datasets), "usages": list(s.usages),
                        "mitigations": list(s.mitigations), "seeds": len(s.seeds), "about": s.description}
                       for s in map(load_study, shipped_studies())]
    claims = [load_claim(p) for p in shipped_claims()]
    if claims:  # the claims study: one YAML per published claim (benchmark claims)
        rows.append({"name": "claims", "models": len({c.model for c in claims}),
                     "datasets": len({c.dataset for c in claims}), "usages": sorted({c.usage for c in claims}),
                     "mitigations": sorted({m for c in claims for m in (c.baseline, c.method)}),
                     "seeds": 5, "about": f"{len(claims)} published fairness claims, one YAML each "
                                          f"({', '.join(c.id for c in claims)}): benchmark claims [--stand-in]"})
    return rows


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
            "verification_tolerance": dict(suite.tolerances), "entries": [e.describe() for e in suite.entries]}


#: what -> its card as a mapping; each takes (name, data_root, split seed, skip_bad) and uses what it needs
DESCRIBERS: dict[str, Callable[[str, str | None, int, bool], Row]] = {
    "dataset": _describe_dataset, "model": _describe_model, "suite": _describe_suite}


@dataclass(frozen=True)
class ListOptions:
    """`benchmark list`'s options."""

    what: str = field(metadata=option("what to list", flag="what", choices=sorted(LISTERS)))
    json: bool = field(default=False, metadata=option())


@dataclass(frozen=True)
class DescribeOptions:
    """`benchmark describe`'s options, in the order DESCRIBERS take them."""

    what: str = field(metadata=option(flag="what", choices=sorted(DESCRIBERS)))
    name: str = field(metadata=option(flag="name"))
    data_root: str | None = field(default=None, metadata=option(
        "the dataset's folder (default: $FMB_DATA_<NAME> or $FMB_DATA_ROOT/<name>)"))
    seed: int = field(default=RunSpec.split_seed, metadata=option("split seed for the per-split counts"))
    skip_bad: bool = field(default=False, metadata=option("skip (and count) rows that fail to map or decode"))

    def card(self) -> Row:
        """The card DESCRIBERS give for these options."""
        return DESCRIBERS[self.what](self.name, self.data_root, self.seed, self.skip_bad)
