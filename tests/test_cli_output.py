"""The command line's plumbing: options parse under their field's name into the spec types (a repeated
comma-separated option is one flat list), and output piped into a command that stops reading is not an error."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from fairmedbench.benchmark.evaluate import EvaluateOptions
from fairmedbench.cli import _fill, build_parser, run_spec


def _parser(command: str) -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]


def test_repeated_csv_options_are_one_flat_list() -> None:
    args = _parser("run").parse_args(["--model", "m", "--dataset", "d", "--attribute", "sex,age", "--attribute",
                                      "race", "--hparam", "lr=0.1", "--mc-samples", "3"])
    spec = run_spec(args)
    assert spec.attributes == ("sex", "age", "race")
    assert spec.hparams == {"lr": 0.1, "mc_samples": 3}  # --mc-samples T is --hparam mc_samples=T
    assert run_spec(_parser("run").parse_args(["--model", "m", "--dataset", "d"])).attributes == ()


def test_evaluate_options_fill_their_type_and_left_out_options_keep_its_defaults() -> None:
    args = _parser("evaluate").parse_args(["--demo", "--label", "a", "--label", "b,c", "--json"])
    opts = _fill(EvaluateOptions, args)
    assert opts.labels == ["a", "b", "c"] and opts.scores == [] and opts.attributes == [] and opts.json
    assert opts.n_boot == EvaluateOptions.n_boot and opts.profile == EvaluateOptions.profile


def test_output_into_a_closed_pipe_is_not_an_error() -> None:
    """`benchmark describe model litemedsam | head -1` once head stopped reading (here: a pipe whose reading end is
    closed before the command starts, so every write fails): exit 0 and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "fairmedbench", "describe", "model", "litemedsam"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 0
