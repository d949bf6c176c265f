"""The `benchmark` command: parsers built from the spec types (each option's help, flag and default are field
metadata of RunSpec, RunOptions, EvaluateOptions, InspectOptions), then a call into fairmedbench.benchmark and a
renderer of report/terminal.py. No logic here."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fairmedbench import __version__
from fairmedbench.benchmark import arguments, evidence, sweep, uncertainty
from fairmedbench.benchmark.arguments import parse_hparams, route_default
from fairmedbench.benchmark.catalog import LISTERS, DescribeOptions, ListOptions, profile_names
from fairmedbench.benchmark.compare import N_BOOT_COMPARE, CompareOptions, compare_with, save_compare
from fairmedbench.benchmark.controls import ControlsOptions, controls_with
from fairmedbench.benchmark.datasets import SplitExportOptions, SplitImportOptions, export_split, import_split
from fairmedbench.benchmark.evaluate import EvaluateOptions, expand_sources, run_evaluate, run_evaluate_batch
from fairmedbench.benchmark.inspect import InspectOptions, run_inspect
from fairmedbench.benchmark.run import run
from fairmedbench.benchmark.studies import load_study
from fairmedbench.benchmark.suite import SuiteOptions
from fairmedbench.benchmark.verify import VerifyOptions, verify_bundle
from fairmedbench.engine.progress import StageProgress
from fairmedbench.errors import FMBError
from fairmedbench.report import terminal
from fairmedbench.spec import RunOptions, RunSpec

#: Subcommand used when the first argument is an option (`benchmark --model X --dataset Y` -> `run`),
#: once that subcommand is registered.
DEFAULT_COMMAND = "run"
#: `benchmark run` options that only choose what is printed or written beside the result (never a number).
OUTPUT_ONLY = frozenset({"json", "report", "evidence"})
T = TypeVar("T")


def _d(cls: type, name: str) -> Any:
    """The default of field `name` of the spec type `cls` (None when it has none): written once, in its type."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    return None if f.default_factory is dataclasses.MISSING else f.default_factory()


def _options(p: Any, cls: type, *names: str, **override: dict[str, Any]) -> None:
    """Options for the fields `names` (default: every field with metadata, in order) of the options type `cls`: flag,
    help and argparse settings from the field's metadata (spec.option), the default from the field; `override`:
    settings known here only (registry choices). A csv field's tuple default is given as the comma-separated text."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in names or [n for n, f in fields.items() if f.metadata]:
        kw = {**fields[name].metadata, **override.get(name, {})}
        flag = kw.pop("flag", "--" + name.replace("_", "-"))
        kw.setdefault("default", _d(cls, name))
        if kw.pop("csv", False):
            kw["type"] = _csv_list
            if isinstance(kw["default"], tuple):
                kw["default"] = ",".join(kw["default"])
        if isinstance(kw["default"], bool):
            kw.setdefault("action", "store_false" if kw["default"] else "store_true")
        elif isinstance(kw["default"], (int, float)):
            kw.setdefault("type", type(kw["default"]))
        p.add_argument(flag, **kw)


def _fill(cls: Callable[..., T], args: argparse.Namespace, **extra: Any) -> T:
    """The spec type `cls` from the parsed options named like its fields, plus `extra`."""
    names = {f.name for f in dataclasses.fields(cls)} - set(extra)  # type: ignore[arg-type]
    return cls(**{k: v for k, v in vars(args).items() if k in names}, **extra)


def _csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _extend(ns_list: list[list[str]] | None) -> list[str]:
    return [x for part in ns_list or [] for x in part]


def _json(doc: Any) -> int:
    print(json.dumps(doc, indent=2))
    return 0


def _console() -> Any:
    from rich.console import Console

    return Console()


def _show(render: Callable[[T, Any], None], what: T) -> int:
    """Render `what` on the terminal (report/terminal.py); exit code 0."""
    render(what, _console())
    return 0


def _lines(lines: Sequence[str], ok: bool = True) -> int:
    """Lines on stdout when all went well (exit 0), else on stderr (exit 1)."""
    for line in lines:
        print(line, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def _add_evaluate(sub: Any) -> None:
    E = EvaluateOptions
    p = sub.add_parser(
        "evaluate", help="every fairness metric, with CIs, on a prediction file",
        description="Compute utility and fairness metrics with bootstrap CIs from per-sample predictions "
                    "(classification) or mask files (segmentation, --masks). Rows with split=val choose "
                    "the threshold; rows with split=test are evaluated.")
    _options(p.add_mutually_exclusive_group(required=True), E, "predictions", "demo")
    _options(p, E, "labels", "scores", "attributes", "bins", "bins_closed", "intersect", "threshold", "profile",
             "n_boot", "n_perm", "patient_column", "i_know", "seed", "logits", "min_group_size", "split_column",
             "id_column", profile={"choices": profile_names()})
    _options(p.add_argument_group("segmentation (--masks)"), E, "masks", "pred_mask", "gt_mask", "volume",
             "mask_threshold", "hd95")
    _options(p, E, "out", "test_resample", "age_column", "out_table", "report", "evidence", "force")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of tables")
    _options(p.add_argument_group("uncertainty disparity (Lu et al. 2021)"), uncertainty.UncertaintyOptions)
    p.set_defaults(handler=_cmd_evaluate)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    if args.uncertainty is not None:  # rejection curves per group and δ (Lu et al. 2021) instead of the metrics
        doc = uncertainty.run_uncertainty(
            args.predictions, args.uncertainty, labels=_extend(args.label), patient_column=args.patient_column,
            out=args.out, out_table=args.out_table, scores=_extend(args.score) or None,
            attributes=_extend(args.attribute) or None, split_column=args.split_column, pm=args.uncertainty_pm,
            retention_step=args.retention_step, pair_aggregation=args.pair_aggregation)
        return _json(doc) if args.json else _show(terminal.render_uncertainty, doc)
    sources = expand_sources(args.predictions) if args.predictions else []
    opts = _fill(EvaluateOptions, args, predictions=sources[0] if len(sources) == 1 else None,
                 labels=_extend(args.label), scores=_extend(args.score), attributes=_extend(args.attribute),
                 bins=arguments.parse_bins(args.bins),
                 command=list(getattr(args, "command_line", sys.argv) if args.evidence else sys.argv))
    arguments.check_evaluate(opts, len(sources))
    quiet = args.json or not sys.stderr.isatty()  # the metric engine's bar: on a terminal only
    if len(sources) > 1:
        with StageProgress(quiet=quiet) as progress:
            batch = run_evaluate_batch(sources, opts, progress=progress.labelled("metrics + bootstrap"))
        return _json([o.document for o in batch.outcomes]) if args.json else _show(terminal.render_batch, batch)
    with StageProgress(quiet=quiet) as progress:
        outcome = run_evaluate(opts, progress=progress.labelled("metrics + bootstrap"))
    return _json(outcome.document) if args.json else _show(terminal.render_evaluate, outcome)


def _add_inspect(sub: Any) -> None:
    p = sub.add_parser(
        "inspect", help="what frozen features encode: SPLIT probe, multitask head, PCA/t-SNE, KS tests",
        description="Encoding inspection (Glocker et al.) of an embeddings file or of a model's cached features on "
                    "a dataset: SPLIT probe AUC per attribute (against random-weight and ImageNet baselines for a "
                    "model), a multitask head, PCA and t-SNE plots coloured by group, and two-sample KS tests on "
                    "each mode for the label and each pair of groups, corrected over the whole family.")
    _options(p.add_argument_group("input: --embeddings FILE, or --model M --dataset D"), InspectOptions,
             "embeddings", "metadata", "features", "feature_prefix", "list_column", "projected", "refit_pca", "model",
             "dataset", "weights", "dataset_options", "data_root", "split_seed", "baselines", "imagenet_model",
             baselines={"type": lambda v: [] if v.strip() == "none" else _csv_list(v)})
    _options(p, InspectOptions, "label", "label_pairs", "attributes", "patient_column", "correction", "correct_per",
             "alpha", "holdout", "n_modes", "tsne", "n_boot", "seed", "figure_format", "device", "precision",
             "cache_dir", "batch_size", "out", "out_table")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of tables")
    p.set_defaults(handler=_cmd_inspect)


def _cmd_inspect(args: argparse.Namespace) -> int:
    opts = _fill(InspectOptions, args, dataset_options=parse_hparams(args.dataset_option),
                 label_pairs=arguments.parse_label_pairs(args.label_pair), attributes=_extend(args.attribute))
    with StageProgress(quiet=args.json) as progress:
        outcome = run_inspect(opts, progress=progress)
    if args.json:
        return _json(outcome.document)
    terminal.render_inspect(outcome.document, _console())
    return _lines([f"{what}: {path}" for what, path in outcome.paths.items()])


def _compute_parent() -> argparse.ArgumentParser:
    """Options that say where things live and how to compute; none changes a number (RunOptions)."""
    p = argparse.ArgumentParser(add_help=False)
    _options(p.add_argument_group("where and how (never changes a number)"), RunOptions, "data_root", "device",
             "batch_size", "num_workers", "channels_last", "cache_dir", "out_root", "force", "i_know", "verify_weights")
    return p


def _numbers_parent() -> argparse.ArgumentParser:
    """Options every training command shares that change numbers (RunSpec fields)."""
    from fairmedbench.engine.device import PRECISIONS

    p = argparse.ArgumentParser(add_help=False)
    _options(p, RunSpec, "weights", "hparams", "dataset_options", "precision", "n_boot", "n_perm", "skip_bad",
             precision={"choices": PRECISIONS})
    return p


class _McSamples(argparse.Action):
    """--mc-samples T is --hparam mc_samples=T (MC dropout, Lu et al. 2021)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.hparam = [*(getattr(namespace, "hparam", None) or []), f"mc_samples={values}"]


def _add_run(sub: Any) -> None:
    from fairmedbench.adapters.prompts import PROMPT_MODES

    p = sub.add_parser(
        "run", help="benchmark a model on a dataset (default command: benchmark --model X --dataset Y)",
        parents=[_numbers_parent(), _compute_parent()],
        description="Split the dataset, load the model, apply the usage (lp, sam-prompt, ...), train with the "
                    "mitigation, select checkpoint and threshold on validation, and report utility and fairness "
                    "metrics with CIs on test.")
    _options(p, RunSpec, "model", "dataset", "attributes", "usage", "mitigation", "seeds", "split_seed", "split_seeds",
             "split_file", "eval_datasets", "profile", "threshold", "prompt", profile={"choices": profile_names()},
             prompt={"choices": list(PROMPT_MODES)})
    _options(p.add_argument_group("sampling after feature extraction (seeded per run seed; part of the run's "
                                  "identity)"), RunSpec, "train_group_share", "share_group", "train_size", "prevalence",
             "prevalence_on", "test_resample")
    p.add_argument("--json", action="store_true", help="print the summary JSON instead of tables")
    p.add_argument("--report", action="store_true", help="also write a self-contained report.html in the run folder")
    p.add_argument("--evidence", metavar="DIR",
                   help="write an evidence pack of the run (report page, result JSONs, tidy table, predictions, "
                        "command, environment, summary.md, MANIFEST.sha256); DIR must be new or empty (--force "
                        "replaces it)")
    p.add_argument("--mc-samples", type=int, action=_McSamples, metavar="T",
                   help="MC dropout: T >= 2 stochastic passes of the head at inference (= --hparam mc_samples=T; lp or "
                        "lora with --hparam dropout=RATE); scores become the passes' mean, the predictions file gets "
                        "mc:<t>:<task> and unc:<measure> columns and each result an `uncertainty` block (rejection "
                        "curves per group, δ)")
    p.set_defaults(handler=_cmd_run)


def run_options(args: argparse.Namespace, progress: Callable[[str, int, int], None] | None = None) -> RunOptions:
    """RunOptions from the compute options (the parent parser's)."""
    return _fill(RunOptions, args, out_root=args.out, progress=progress)


def run_spec(args: argparse.Namespace) -> RunSpec:
    """The RunSpec of `benchmark run` arguments (checked later, in one place, before any work)."""
    fields = {f.name for f in dataclasses.fields(RunSpec)} - {"seeds", "split_seeds"}
    return arguments.run_spec(**{k: v for k, v in vars(args).items() if k in fields},
                              attributes=tuple(_extend(args.attribute)), seeds=args.seeds, split_seeds=args.split_seeds,
                              hparams=args.hparam, dataset_options=args.dataset_option, eval_datasets=args.eval_dataset)


def _cmd_run(args: argparse.Namespace) -> int:
    spec = run_spec(args)
    if args.evidence:  # before any work: a non-empty folder is refused
        evidence.check(args.evidence, args.force)
    with StageProgress(quiet=args.json) as progress:
        outcome = run(spec, run_options(args, progress))
    if args.evidence:
        evidence.run_pack(evidence.prepare(args.evidence, args.force), outcome, getattr(args, "command_line", sys.argv))
        print(evidence.describe(args.evidence), file=sys.stderr)
    report = None
    if args.report:
        from fairmedbench.report.html import write_run_report

        report = write_run_report(outcome.out_dir, outcome.seed_docs)
    if args.json:
        return _json(outcome.summary)
    terminal.render_run_outcome(outcome, report, _console())
    return 0


def _add_compare(sub: Any) -> None:
    from fairmedbench.adapters import USAGES

    p = sub.add_parser(
        "compare", help="mitigation methods on one harness (same splits, features, seeds)",
        parents=[_numbers_parent(), _compute_parent()],
        description="Run each mitigation with the same splits, cached features and seeds; report mean and "
                    "95% CI across seeds, paired differences and Welch's t-test against ERM, and with several "
                    "datasets Friedman ranks with the Nemenyi critical difference.")
    _options(p, CompareOptions, usage={"choices": [n for n in USAGES.names() if USAGES.get(n).learns]})
    p.set_defaults(handler=_cmd_compare, n_boot=N_BOOT_COMPARE)


def _cmd_compare(args: argparse.Namespace) -> int:
    o = _fill(CompareOptions, args, hparams=parse_hparams(args.hparam),
              dataset_options=parse_hparams(args.dataset_option))
    with StageProgress(quiet=o.json) as progress:
        outcome = compare_with(o, run_options(args, progress))
    doc, path, report = save_compare(outcome, o.model, o.dataset, args.out, report=o.report)
    if o.json:
        return _json(doc)
    terminal.render_compare_saved(doc, path, report, _console())
    return 0


def _add_controls(sub: Any) -> None:
    from fairmedbench.engine.device import PRECISIONS

    p = sub.add_parser(
        "controls", help="the main job: find an injected bias and find none in its unbiased twin",
        parents=[_compute_parent()],
        description="Run a model (default LiteMedSAM, real weights) with a linear probe and box-prompted "
                    "segmentation on the built-in biased synthetic dataset and on its control twin, and check "
                    "that the injected disparity is found (the signed difference's permutation test gives p < 0.05, in "
                    "the declared direction) while the control shows none (p >= 0.05). Exits 1 when a control does not "
                    "behave as declared.")
    _options(p, ControlsOptions, precision={"choices": PRECISIONS})
    p.set_defaults(handler=_cmd_controls)


def _cmd_controls(args: argparse.Namespace) -> int:
    with StageProgress(quiet=False) as progress:
        outcome = controls_with(_fill(ControlsOptions, args), run_options(args, progress))
    terminal.render_controls(outcome, _console())
    return 0 if outcome.passed else 1


def _add_suite(sub: Any) -> None:
    p = sub.add_parser("run-suite", help="run a board suite for a model and write a submission bundle",
                       parents=[_compute_parent()],
                       description="Run every entry of a leaderboard suite (each dataset, usage and seed) for "
                                   "one model and write a bundle to submit with `benchmark submit`.")
    _options(p, SuiteOptions)
    p.set_defaults(handler=_cmd_suite)


def _cmd_suite(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.suite import suite_with  # reads the boards' test sets: not needed to parse

    with StageProgress(quiet=False) as progress:
        path = suite_with(o := _fill(SuiteOptions, args), run_options(args, progress))
    print(f"bundle written: {path}; submit it with: benchmark submit {path} --board {o.suite}")
    return 0


def _add_boards(sub: Any) -> None:
    p = sub.add_parser("submit", help="validate a bundle by recomputation and add it to a board",
                       description="Check a submission bundle (files, schema, fingerprints, complete test ids, "
                                   "every metric recomputed from its predictions) and store it if it passes.")
    p.add_argument("bundle")
    p.add_argument("--board", required=True)
    p.add_argument("--root", default="leaderboards", help="folder holding the boards")
    p.set_defaults(handler=_cmd_submit)
    p = sub.add_parser("verify", help="re-run a submitted model on a sample of test items; mark its rows verified",
                       parents=[_compute_parent()],
                       description="Re-run the model of a bundle or stored submission from its declared weights, "
                                   "in fp32, on a seeded random sample of each entry's test items (a learned head "
                                   "is re-trained with the declared seed) and compare every per-sample score with "
                                   "the submitted one; the outcome is recorded beside a stored submission's "
                                   "submission.json, and its rows show as verified only when every entry passed.")
    _options(p, VerifyOptions)
    p.set_defaults(handler=_cmd_verify)
    p = sub.add_parser("leaderboard", help="build a board's page from its accepted submissions")
    b = p.add_subparsers(dest="action", metavar="ACTION", required=True).add_parser(
        "build", help="write index.html, leaderboard.md and board.json")
    b.add_argument("--board", required=True)
    b.add_argument("--root", default="leaderboards")
    b.set_defaults(handler=_cmd_board)


def _cmd_submit(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.leaderboard import submit_bundle  # jsonschema and the boards: not needed to parse

    outcome = submit_bundle(args.bundle, args.board, args.root)
    return _lines(outcome.lines(), outcome.accepted)


def _cmd_verify(args: argparse.Namespace) -> int:
    with StageProgress(quiet=False) as progress:
        outcome = verify_bundle(**dataclasses.asdict(_fill(VerifyOptions, args)), opts=run_options(args, progress))
    return _lines(outcome.lines(), outcome.passed)


def _cmd_board(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.leaderboard import build_board

    return _lines([f"{what}: {path}" for what, path in build_board(args.board, args.root).items()])


def _add_catalog(sub: Any) -> None:
    p = sub.add_parser("list", help="list registered things (instant)",
                       description="List metric profiles, threshold policies, datasets, models or mitigations.")
    _options(p, ListOptions)
    p.set_defaults(handler=_cmd_list)
    p = sub.add_parser("describe", help="a dataset's or model's card (+ group counts when data is present), or a "
                                        "board suite (entries, pinned test sets, coverage rules)",
                       description="Print a card as JSON: for a dataset, with sample and group counts and the "
                                   "split fingerprint when the data is found, else where to get it.")
    _options(p, DescribeOptions)
    p.set_defaults(handler=lambda a: _json(_fill(DescribeOptions, a).card()))


def _cmd_list(args: argparse.Namespace) -> int:
    rows = LISTERS[args.what]()
    if args.json:
        return _json(rows)
    terminal.render_rows(args.what, rows, _console())
    return 0


def _add_splits(sub: Any) -> None:
    p = sub.add_parser("splits", help="export or import a dataset split so two labs run on the same one",
                       description="Export a seeded split (sample ids per split + fingerprint) or check an "
                                   "imported split file.")
    ssub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    _options(ssub.add_parser("export", help="write a dataset's split to a JSON file"), SplitExportOptions)
    _options(ssub.add_parser("import", help="check a split file (and, with --check-data, that the data matches)"),
             SplitImportOptions)
    p.set_defaults(handler=_cmd_splits)


def _cmd_splits(args: argparse.Namespace) -> int:
    if args.action == "export":
        e = _fill(SplitExportOptions, args)
        return _json(export_split(e.name, e.data_root, e.seed, e.out, policy=e.policy))
    i = _fill(SplitImportOptions, args)
    return _json(import_split(i.file, data_root=i.data_root, check_data=i.check_data))


def _add_studies(sub: Any) -> None:
    p = sub.add_parser(
        "sweep", help="run a study (a YAML grid of models x datasets x usages x ...) locally or on Ray",
        parents=[_compute_parent()],
        description="Expand a study into runs, skip incompatible cells with their reason, reuse finished runs "
                    "from the store, extract each (model, dataset)'s features once, and run the rest; rerun the "
                    "same command to resume. Shipped studies: fairmedfm, smoke, fairness-laws, imbalance.")
    _options(p, sweep.SweepOptions)
    p.set_defaults(handler=_cmd_sweep)
    p = sub.add_parser("study", help="a swept study's report (tidy Parquet, FairMedFM-style figures, one HTML page)")
    r = p.add_subparsers(dest="study_command", required=True).add_parser(
        "report", help="aggregate a study's finished runs into a Parquet table, figures and a page",
        description="Read <out>/studies/<name>/plan.json (written by benchmark sweep) and every finished run it "
                    "names; write study.parquet/.csv, PNG and SVG figures (ΔAUC/ΔDSC per FM x dataset, ES "
                    "trade-offs, per-group utility, mitigations vs ERM, Friedman-Nemenyi ranks, fairness laws, "
                    "imbalance) and study.html.")
    _options(r, sweep.StudyReportOptions)
    r.set_defaults(handler=lambda a: _lines([terminal.study_report_text(sweep.study_report(a.study, a.out, a.dest))]))


def _cmd_sweep(args: argparse.Namespace) -> int:
    o, opts = _fill(sweep.SweepOptions, args), run_options(args)
    study = load_study(o.study)
    if o.status:
        return _lines([sweep.render_status(sweep.read_status(opts.out_root, study.name))])
    if o.dry_run:
        return _lines([sweep.render_plan(sweep.make_plan(study, opts), opts)])
    with StageProgress(quiet=False) as progress:
        result = sweep.sweep(study, opts, launcher=o.launcher, address=o.address, max_parallel=o.max_parallel,
                             progress=progress)
    print(sweep.render_result(result))
    return 0 if result.passed else 1


def _add_docs(sub: Any) -> None:
    p = sub.add_parser("docs", help="build the documentation site (mkdocs build --strict)",
                       description="Build the documentation site from a source checkout: the hand-written pages "
                                   "in docs/ plus the metric sheet and the catalogues generated from the "
                                   "registries (plugins included), with mkdocs build --strict.")
    p.add_argument("--out", default="site", help="the site's folder (default: site)")
    p.add_argument("--config", default="mkdocs.yml", help="the mkdocs config (default: ./mkdocs.yml)")
    p.set_defaults(handler=_cmd_docs)


def _cmd_docs(args: argparse.Namespace) -> int:
    from fairmedbench.report.docs import build_site

    return _lines([f"site: {build_site(args.config, args.out) / 'index.html'}"])


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="benchmark", description="fairmedbench: how fairly do medical-imaging foundation models perform "
                                      "across patient groups?")
    parser.add_argument("--version", action="version", version=f"fairmedbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_run, _add_controls, _add_compare, _add_evaluate, _add_inspect, _add_suite, _add_boards,
                _add_catalog, _add_splits, _add_docs, _add_studies):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `benchmark` console script; user errors exit 2 with a one-line message."""
    parser = build_parser()
    commands = list(parser._subparsers._group_actions[0].choices or ())  # type: ignore[union-attr]
    routed = route_default(sys.argv[1:] if argv is None else argv, commands, DEFAULT_COMMAND)
    args = parser.parse_args(routed)
    args.command_line = ["benchmark", *routed]  # what evidence packs record as the command
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return args.handler(args)
    except FMBError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a full or read-only disk, a folder without permission: one line, no traceback
        import errno

        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        print(f"benchmark: error: {exc.filename or 'a file'}: {exc.strerror}; free space or choose a folder you can "
              "write to (--out, --cache-dir)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("benchmark: interrupted; no partial result was written", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a command that stopped reading (e.g. head)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # `python -m fairmedbench.cli` runs the command too (it did nothing, exit 0)
    raise SystemExit(main())
