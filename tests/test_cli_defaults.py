"""The command line restates no default: an option named like a field of its spec type (RunSpec, RunOptions,
EvaluateOptions, InspectOptions) defaults to that field's default, or to None ('not given': the type's default
applies)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from fairmedbench.benchmark.evaluate import EvaluateOptions
from fairmedbench.benchmark.inspect import InspectOptions
from fairmedbench.benchmark.monitor import MonitorOptions
from fairmedbench.cli import build_parser
from fairmedbench.metrics.bootstrap import N_BOOT
from fairmedbench.spec import RunOptions, RunSpec


def _parser(command: str) -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]


def _scalar_defaults(cls: type) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING and not isinstance(f.default, (tuple, list, dict))}


@pytest.mark.parametrize("command, types", [("run", (RunSpec, RunOptions)), ("evaluate", (EvaluateOptions,)),
                                             ("inspect", (InspectOptions,)), ("monitor", (MonitorOptions,))])
def test_options_default_to_their_spec_type(command: str, types: tuple[type, ...]) -> None:
    defaults = {k: v for cls in types for k, v in _scalar_defaults(cls).items()}
    defaults["out"] = RunOptions.out_root if command == "run" else None
    checked = 0
    for action in _parser(command)._actions:
        if action.dest in defaults and action.default is not None:
            assert action.default == defaults[action.dest], action.option_strings
            checked += 1
    assert checked >= 8


def test_n_boot_is_written_once() -> None:
    for command in ("run", "evaluate", "inspect", "monitor", "controls", "run-suite"):
        (n_boot,) = [a.default for a in _parser(command)._actions if a.dest == "n_boot"]
        assert n_boot == N_BOOT == RunSpec.n_boot
