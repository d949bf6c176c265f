"""Typed hyperparameters, validated in one place: a value given on the command line (a string or JSON) is
converted to the type of its owner's default, and an unknown key names the close known ones.

Owners are a task's training config, a usage and a mitigation; each declares its keys by their defaults.
A default of None accepts any JSON value (e.g. a list of prompt templates). A mitigation may declare a search
space (`SEARCH_SPACE`: key -> `LogUniform` or a tuple of choices) that `--hparam-search` draws from."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairmedbench.errors import InputError


def coerce(owner: str, key: str, value: Any, default: Any) -> Any:
    """`value` converted to the type of `default` (bool, int, float, str; None: unchanged)."""
    try:
        if default is None:
            return value
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("true", "1", "yes")
            if not isinstance(value, (bool, int)) or value not in (0, 1):
                raise ValueError(value)
            return bool(value)
        if isinstance(default, int):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if isinstance(default, float):
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if isinstance(value, (dict, list)):
            raise ValueError(value)
        return str(value)
    except (TypeError, ValueError):
        raise InputError(f"{owner}: hyperparameter {key}={value!r} is not a valid {type(default).__name__} "
                         f"(default {default!r})") from None


def merge(owner: str, defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overridden by `given` (typed); an unknown key is an InputError naming close keys."""
    out = dict(defaults)
    for key, value in given.items():
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise InputError(f"{owner} has no hyperparameter {key!r}.{hint} "
                             f"Known: {', '.join(sorted(defaults)) or 'none'}")
        out[key] = coerce(owner, key, value, defaults[key])
    return out


def split_by_owner(given: Mapping[str, Any], owners: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Route each given key to the owner that declares it (owners in priority order), typed and merged with
    that owner's defaults; a key no owner declares is an InputError listing every known key."""
    routed: dict[str, dict[str, Any]] = {name: {} for name in owners}
    for key, value in given.items():
        owner = next((name for name, defaults in owners.items() if key in defaults), None)
        if owner is None:
            known = sorted({k for d in owners.values() for k in d})
            close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise InputError(f"unknown hyperparameter {key!r} for {' + '.join(owners)}.{hint} "
                             f"Known: {', '.join(known) or 'none'}")
        routed[owner][key] = value
    return {name: merge(name, owners[name], routed[name]) for name in owners}


#: Options whose cost grows in proportion to their value, with the documented bound above which a command
#: needs --i-know; the estimated time is printed first. An option joins with one entry (e.g. the permutation
#: count: "n_perm": ("--n-perm", N)): `cost_values` reads it from a RunConfig, EvaluateOptions or Study by name.
COST_BOUNDS: dict[str, tuple[str, int]] = {
    "seeds": ("--seeds", 20),  # number of seeds: each trains and evaluates once more
    "split_seeds": ("--split-seeds", 20),  # repeated splits: each trains every seed once more
    "n_boot": ("--n-boot", 10_000),  # bootstrap resamples per metric
    "n_perm": ("--n-perm", 10_000),  # permutations per gap / difference test
}

#: Products of COST_BOUNDS values bounded as a whole (a factor a command does not have counts 1): the factors,
#: what their product counts, and its bound (20 seeds x 10,000 resamples: the largest single-split run).
PRODUCT_BOUNDS: tuple[tuple[tuple[str, ...], str, int], ...] = (
    (("seeds", "split_seeds"), "trainings", 100),
    (("seeds", "split_seeds", "n_boot"), "bootstrap resamples", 200_000),
    (("seeds", "split_seeds", "n_perm"), "permutation sets", 200_000),
)


def cost_values(options: object) -> dict[str, int]:
    """The COST_BOUNDS options `options` (a RunConfig, EvaluateOptions, Study, ...) has, as numbers (seed lists:
    how many; a study's split seeds (None,), no repeated splits: left out)."""
    values = {k: getattr(options, k) for k in COST_BOUNDS if getattr(options, k, None) is not None}
    values = {k: v for k, v in values.items() if not (isinstance(v, (list, tuple)) and None in v)}
    return {k: len(v) if isinstance(v, (list, tuple)) else int(v) for k, v in values.items()}


def over_cost_bounds(values: Mapping[str, int]) -> dict[str, str]:
    """What is above its bound: an option key, or the factors of a product joined by " x ", -> the words
    for it ("--n-boot 20000 (bound 10,000)"). Keys without a bound are ignored."""
    over = {k: f"{COST_BOUNDS[k][0]} {int(v)} (bound {COST_BOUNDS[k][1]:,})"
            for k, v in values.items() if k in COST_BOUNDS and v > COST_BOUNDS[k][1]}
    for factors, what, bound in PRODUCT_BOUNDS:
        given = [k for k in factors if k in values and values[k] > 1]
        product = math.prod(int(values[k]) for k in given)
        if len(given) >= 2 and product > bound:
            over[" x ".join(given)] = (f"{' x '.join(COST_BOUNDS[k][0] for k in given)} = {product:,} {what} "
                                       f"(bound {bound:,})")
    return over


def check_cost_bounds(values: Mapping[str, int], i_know: bool, estimate: Callable[[], str],
                      say: Callable[[str], None]) -> None:
    """The one cost bound of every command: when a COST_BOUNDS value or a PRODUCT_BOUNDS product is above its
    bound, compute `estimate()` (the estimated time, in words), then go on with `i_know` (saying so), else
    refuse (InputError) before any work."""
    over = over_cost_bounds(values)
    if not over:
        return
    what = ", ".join(over.values())
    if not i_know:
        raise InputError(f"{what} is above the documented bound: estimated time {estimate()}; add --i-know to "
                         "run it anyway, or ask for less")
    say(f"{what} is above the documented bound (--i-know given): estimated time {estimate()}")


@dataclass(frozen=True)
class LogUniform:
    """A search range drawn log-uniformly between `low` and `high` (a learning rate, a penalty weight)."""

    low: float
    high: float

    def draw(self, rng: np.random.Generator) -> float:
        """One value, rounded to 3 significant digits (so it reads as it is used)."""
        return float(f"{math.exp(rng.uniform(math.log(self.low), math.log(self.high))):.3g}")


#: A declared search range: log-uniform, or a tuple of choices drawn uniformly.
SearchRange = LogUniform | tuple[Any, ...]

#: The head-training range every method's search shares (Idrissi et al. 2022 tune learning rate and weight decay
#: for every method alike, ERM included).
TRAINING_SPACE: dict[str, SearchRange] = {"lr": LogUniform(3e-4, 3e-2), "weight_decay": LogUniform(1e-6, 1e-2)}


def draw_candidate(space: Mapping[str, SearchRange], rng: np.random.Generator) -> dict[str, Any]:
    """One draw of every key of `space`, in its declared order."""
    return {k: r.draw(rng) if isinstance(r, LogUniform) else r[int(rng.integers(len(r)))] for k, r in space.items()}
