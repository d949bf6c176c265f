"""Values as the `benchmark` command line gives them (seed lists, KEY=VALUE pairs, options left out) turned into
the spec types, with the refusals of contradictory options."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fairmedbench.errors import InputError
from fairmedbench.spec import RunSpec, option

if TYPE_CHECKING:
    from fairmedbench.benchmark.evaluate import EvaluateOptions


#: the most seeds a list may name at all (each is a training); the cost bounds (engine.hparams) come far earlier
MAX_SEEDS = 1_000_000


def parse_seeds(text: str | None, flag: str = "--seeds") -> tuple[int, ...]:
    """'0,1,2' or '0-4' (inclusive) or a mix: '0-2,7'; None: RunSpec's default seeds. More than MAX_SEEDS is
    refused before the list is built."""
    if text is None:
        return RunSpec.seeds
    seeds: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            more = range(int(lo), int(hi) + 1) if sep else [int(lo)]
        except ValueError:
            raise InputError(f"{flag} {text!r}: expected numbers like 0,1,2 or a range like 0-4") from None
        if len(seeds) + len(more) > MAX_SEEDS:
            raise InputError(f"{flag} {text!r}: {len(seeds) + len(more):,} seeds, more than {MAX_SEEDS:,}: ask for "
                             "fewer")
        seeds.extend(more)
    if not seeds or len(set(seeds)) != len(seeds):
        raise InputError(f"{flag} {text!r}: give distinct seeds")
    return tuple(seeds)


def parse_hparams(items: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE pairs; values parsed as JSON when they can be (numbers, true/false), else strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"{item!r}: expected KEY=VALUE, e.g. lr=0.01 or n=200")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def run_spec(*, seeds: str | None, split_seeds: str | None, hparams: Sequence[str], dataset_options: Sequence[str],
             eval_datasets: Sequence[str] | None, **fields: Any) -> RunSpec:
    """A RunSpec from command-line values: seed lists and KEY=VALUE lists parsed, a field given as None left to
    RunSpec's default; contradictory options refused (the spec itself is checked later, before any work)."""
    from fairmedbench.analysis.shift import split_eval_list

    if fields.get("split_file") and fields.get("split_seed") is not None:  # the seed would be silently ignored
        raise InputError("--split-seed draws a split and --split-file imports one: give one of them")
    if fields.get("prevalence_on") is not None and fields.get("prevalence") is None:
        raise InputError(f"--prevalence-on {fields['prevalence_on']} says which split --prevalence samples: give "
                         "--prevalence P too, or drop it")
    if fields.get("attributes") is not None:  # one flat list of names (--attribute a,b --attribute c)
        fields["attributes"] = tuple(fields["attributes"])
    parsed: dict[str, Any] = dict(seeds=parse_seeds(seeds), hparams=parse_hparams(hparams),
                                  dataset_options=parse_hparams(dataset_options),
                                  eval_datasets=tuple(t for v in eval_datasets or [] for t in split_eval_list(v)))
    if split_seeds:
        parsed["split_seeds"] = parse_seeds(split_seeds, "--split-seeds")
    return RunSpec(**{k: v for k, v in fields.items() if v is not None}, **parsed)


class McSamples(argparse.Action):
    """--mc-samples T is --hparam mc_samples=T (MC dropout, Lu et al. 2021)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.hparams = [*(getattr(namespace, "hparams", None) or []), f"mc_samples={values}"]


@dataclass(frozen=True)
class HparamShortcuts:
    """`benchmark run` options that stand for an --hparam (written into the hparams while parsing)."""

    mc_samples: int | None = field(default=None, metadata=option(
        "MC dropout: T >= 2 stochastic passes of the head at inference (= --hparam mc_samples=T; lp or lora with "
        "--hparam dropout=RATE); scores become the passes' mean, the predictions file gets mc:<t>:<task> and "
        "unc:<measure> columns and each result an `uncertainty` block (rejection curves per group, δ)",
        type=int, action=McSamples, metavar="T"))


def parse_bins(items: Sequence[str]) -> dict[str, list[float]]:
    """`--bins NAME=E0,E1,..` values: attribute name -> bin edges."""
    from fairmedbench.metrics.groups import parse_bins as one

    return {k: list(v) for k, v in map(one, items)}


def parse_label_pairs(items: Sequence[str]) -> list[tuple[str, str]]:
    """`--label-pair A:B` values: the label classes tested against each other."""
    from fairmedbench.analysis.encoding import class_pairs

    return [p for spec in items for p in class_pairs(spec)]


def check_evaluate(opts: EvaluateOptions, n_sources: int) -> None:
    """Refuse `benchmark evaluate` settings that contradict each other, before any file is read."""
    if opts.n_boot < 0 or opts.n_perm < 0:
        raise InputError(f"--n-boot and --n-perm must be >= 0, got {opts.n_boot} and {opts.n_perm}")
    if n_sources > 1 and opts.evidence:
        raise InputError("--evidence packs one prediction file; give one file (or one pack per file)")
