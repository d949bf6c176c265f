"""Typed hyperparameters, validated in one place: a value given on the command line (a string or JSON) is
converted to the type of its owner's default, and an unknown key names the close known ones.

Owners are a task's training config, a usage and a mitigation; each declares its keys by their defaults.
A default of None accepts any JSON value (e.g. a list of prompt templates)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

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
#: count: "n_perm": ("--n-perm", N)): `cost_values` reads it from a RunConfig or EvaluateOptions by name.
COST_BOUNDS: dict[str, tuple[str, int]] = {
    "seeds": ("--seeds", 20),  # number of seeds: each trains and evaluates once more
    "n_boot": ("--n-boot", 10_000),  # bootstrap resamples per metric
    "n_perm": ("--n-perm", 10_000),  # permutations per gap / difference test
}


def cost_values(options: object) -> dict[str, int]:
    """The COST_BOUNDS options `options` (a RunConfig, EvaluateOptions, ...) has, as numbers (seeds: how many)."""
    values = {k: getattr(options, k) for k in COST_BOUNDS if getattr(options, k, None) is not None}
    return {k: len(v) if isinstance(v, (list, tuple)) else int(v) for k, v in values.items()}


def over_cost_bounds(values: Mapping[str, int]) -> dict[str, int]:
    """The values above their COST_BOUNDS bound (option key -> value; keys without a bound are ignored)."""
    return {k: int(v) for k, v in values.items() if k in COST_BOUNDS and v > COST_BOUNDS[k][1]}


def check_cost_bounds(values: Mapping[str, int], i_know: bool, estimate: str, say: Callable[[str], None]) -> None:
    """When a value is above its bound: print `estimate` (the estimated time, in words), then go on with
    `i_know`, else refuse (InputError) before any work."""
    over = over_cost_bounds(values)
    if not over:
        return
    what = ", ".join(f"{COST_BOUNDS[k][0]} {v} (bound {COST_BOUNDS[k][1]:,})" for k, v in over.items())
    if not i_know:
        raise InputError(f"{what} is above the documented bound: estimated time {estimate}; add --i-know to "
                         "run it anyway, or ask for less")
    say(f"{what} is above the documented bound (--i-know given): estimated time {estimate}")
