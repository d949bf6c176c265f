"""The benchmark's positive and negative controls: a dataset with an injected bias and its unbiased twin.

For each dataset and usage (linear probe, box-prompted segmentation) the run's signed two-group
difference (e.g. auc_diff = male - female) is compared with what the dataset card declares: an
injected disparity must be found (its permutation test rejects exchangeable groups, p < 0.05, and the
difference points the declared way) and the control must show none (p >= 0.05). The verdict reads the
test (one verdict per question: fairmedbench/report/verdicts.py); the difference's 95% CI is shown beside it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fairmedbench.benchmark.run import RunOutcome, run
from fairmedbench.errors import InputError
from fairmedbench.metrics.bootstrap import N_BOOT
from fairmedbench.spec import RunOptions, RunSpec, option


@dataclass
class Check:
    """One declared expectation against the measured signed difference."""

    dataset: str
    usage: str
    attribute: str
    metric: str
    expected: str
    diff: tuple[float | None, ...]  # (value, CI low, CI high) of order[1] - order[0]
    order: tuple[str, ...]
    passed: bool
    p_value: float | None = None
    mde: float | None = None  # the smallest |difference| its test detects with 80% power (metrics/result.py)


@dataclass
class ControlsOutcome:
    """All runs, all checks, and the wall time."""

    runs: list[RunOutcome] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """True when every control behaved as its card declares."""
        return bool(self.checks) and all(c.passed for c in self.checks)


@dataclass(frozen=True)
class ControlsOptions:
    """`benchmark controls`'s options."""

    model: str = field(default="litemedsam", metadata=option())
    weights: str | None = field(default=None, metadata=option())
    datasets: tuple[str, ...] = field(default=("synth-contrast", "synth-control"), metadata=option(csv=True))
    usages: tuple[str, ...] = field(default=("lp", "sam-prompt"), metadata=option(csv=True))
    n: int = field(default=100, metadata=option("samples per synthetic dataset"))
    test_share: float = field(default=0.4, metadata=option(
        "share of each synthetic dataset in its test split (train gets the rest minus 0.1 val)"))
    seeds: str | None = field(default=None, metadata=option())
    n_boot: int = field(default=N_BOOT, metadata=option())
    precision: str = field(default=RunSpec.precision, metadata=option())


def controls_with(o: ControlsOptions, opts: RunOptions) -> ControlsOutcome:
    """run_controls() with `benchmark controls`'s options."""
    from fairmedbench.benchmark.arguments import parse_seeds

    return run_controls(o.model, tuple(o.datasets), tuple(o.usages), opts, weights=o.weights,
                        dataset_options=controls_options(o.n, o.test_share), seeds=parse_seeds(o.seeds),
                        n_boot=o.n_boot, precision=o.precision)


def controls_options(n: int, test_share: float) -> dict[str, Any]:
    """Synthetic reader options for the controls: size and the official split's fractions."""
    if not 0.1 <= test_share <= 0.8:
        raise InputError(f"--test-share must be in [0.1, 0.8], got {test_share}")
    return {"n": n, "config": {"split_fractions": [round(0.9 - test_share, 6), 0.1, test_share]}}


#: a difference whose two-sided permutation p is below this is "larger than chance"
ALPHA = 0.05


def _verdict(expectation: Mapping[str, str], diff: tuple[float | None, ...], order: tuple[str, ...],
             p: float | None) -> tuple[str, bool]:
    value = diff[0]
    if value is None or p is None or math.isnan(p):
        return "undefined", False
    if expectation["direction"] == "none":
        return "no disparity", p >= ALPHA
    group = expectation["group"]
    # diff = order[1] - order[0]: the named group is lower when the difference points away from it
    lower_is_first = group == order[0]
    return f"{group} lower", p < ALPHA and ((value > 0.0) if lower_is_first else (value < 0.0))


def run_controls(model: str, datasets: tuple[str, ...], usages: tuple[str, ...], opts: RunOptions, *,
                 weights: str | None = None, dataset_options: dict[str, Any] | None = None,
                 seeds: tuple[int, ...] = RunSpec.seeds,
                 n_boot: int = N_BOOT, precision: str = RunSpec.precision) -> ControlsOutcome:
    """Run `model` with each usage on each control dataset and check every declared expectation."""
    from fairmedbench.adapters import USAGES
    from fairmedbench.registry.datasets import get_card
    from fairmedbench.tasks.base import get_task

    t0 = time.perf_counter()
    dataset_options = dataset_options or {}
    out = ControlsOutcome()
    for dataset in datasets:
        card = get_card(dataset)
        for usage in usages:
            metric = get_task(USAGES.get(usage).task_for(card.tasks)).headline
            wanted = [e for e in card.expected_disparities if e["metric"] == metric]
            attrs = tuple(dict.fromkeys(e["attribute"] for e in wanted)) or ("sex",)
            spec = RunSpec(model=model, dataset=dataset, attributes=attrs, usage=usage, seeds=seeds,
                           weights=weights, n_boot=n_boot, dataset_options=dict(dataset_options),
                           precision=precision)
            outcome = run(spec, replace(opts))
            out.runs.append(outcome)
            first = outcome.seeds[0]
            for e in wanted:
                diff = tuple(None if math.isnan(v) else v for v in first.cell(f"{metric}_diff", e["attribute"]))
                rep = first.fairness().report(None, e["attribute"])
                order = tuple(rep.groups)
                test = rep.tests.get(f"{metric}_diff", {})
                p, mde = test.get("p_value"), test.get("mde")
                expected, ok = _verdict(e, diff, order, p)
                out.checks.append(Check(dataset, usage, e["attribute"], metric, expected, diff, order, ok, p,
                                        None if mde is None or math.isnan(mde) else float(mde)))
    out.seconds = time.perf_counter() - t0
    return out
