"""The `benchmark` command: parsers built from the options types (each option's flag, help and default are field
metadata, spec.option, of RunSpec, RunOptions and each command's options class, parsed under the field's name),
then one call into fairmedbench.benchmark and a renderer of report/terminal.py. No logic here.

Only the command given has its parser built, and only its modules are imported (each adder and handler imports its
own); every other command is listed by name and the one-line help of COMMANDS, so `benchmark --help` and a
mistyped command's error imports no command at all."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from fairmedbench import __version__
from fairmedbench.errors import FMBError, os_error_line

if TYPE_CHECKING:
    from rich.console import Console

    from fairmedbench.spec import RunOptions, RunSpec

#: Subcommand used when the first argument is an option (`benchmark --model X --dataset Y` -> `run`),
#: once that subcommand is registered.
DEFAULT_COMMAND = "run"
#: every command, in the order `benchmark --help` lists them, with its one-line help there
COMMANDS: dict[str, str] = {
    "run": "benchmark a model on a dataset (default command: benchmark --model X --dataset Y)",
    "controls": "the main job: find an injected bias and find none in its unbiased twin",
    "compare": "mitigation methods on one harness (same splits, features, seeds)",
    "claims": "do published fairness claims hold? one sentence per claim",
    "evaluate": "every fairness metric, with CIs, on a prediction file",
    "plan": "patients per group an audit needs to detect (or rule out) a difference",
    "inspect": "what frozen features encode: SPLIT probe, multitask head, PCA/t-SNE, KS tests",
    "monitor": "post-market monitoring per group: later windows against the audit",
    "run-suite": "run a board suite for a model and write a submission bundle",
    "submit": "validate a bundle by recomputation and add it to a board",
    "verify": "re-run a submitted model on a sample of test items; mark its rows verified",
    "leaderboard": "build a board's page from its accepted submissions",
    "evidence": "check an evidence pack (--evidence of evaluate, run, compare and study report; a board row's pack)",
    "list": "list registered things (instant)",
    "describe": "a dataset's or model's card (+ group counts when data is present), or a board suite (entries, "
                "pinned test sets, coverage rules)",
    "splits": "export or import a dataset split so two labs run on the same one",
    "docs": "build the documentation site (mkdocs build --strict)",
    "sweep": "run a study (a YAML grid of models x datasets x usages x ...) locally or on Ray",
    "study": "a swept study's report (tidy Parquet, FairMedFM-style figures, one HTML page)",
    "serve": "serve the boards: pages, a JSON API, authenticated submissions, a queue",
}
T = TypeVar("T")
Subparsers = argparse._SubParsersAction  # what add_subparsers returns
Handler = Callable[[argparse.Namespace], int]


def route_default(argv: Sequence[str], commands: Sequence[str], default: str) -> list[str]:
    """Insert the default subcommand when the first argument is an option other than help/version."""
    argv = list(argv)
    if default in commands and argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        return [default, *argv]
    return argv


def _d(cls: type, name: str) -> object:
    """The default of field `name` of the spec type `cls` (None when it has none): written once, in its type."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    return None if f.default_factory is dataclasses.MISSING else f.default_factory()


def _options(p: argparse._ActionsContainer, cls: type, *names: str, **override: dict[str, Any]) -> None:
    """Options for the fields `names` (default: every field with metadata, in order) of the options type `cls`: flag,
    help and argparse settings from the field's metadata (spec.option), the default from the field; `override`:
    settings known here only (registry choices). A csv field's tuple default is given as the comma-separated text."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in names or [n for n, f in fields.items() if f.metadata]:
        kw = {**fields[name].metadata, **override.get(name, {})}
        flag = kw.pop("flag", "--" + name.replace("_", "-"))
        kw.setdefault("default", _d(cls, name))
        if flag.startswith("-") and "dest" not in kw:  # parsed under the field's name; shown under the flag's
            kw["dest"] = name
            if flag[2:].replace("-", "_") != name and "choices" not in kw and not isinstance(kw["default"], bool):
                kw.setdefault("metavar", flag[2:].replace("-", "_").upper())
        if kw.pop("csv", False):
            kw["type"] = _csv_list
            if kw.get("action") == "append":  # --attribute a,b --attribute c: one flat list
                kw["action"] = "extend"
            if isinstance(kw["default"], tuple):
                kw["default"] = ",".join(kw["default"])
        if isinstance(kw["default"], bool):
            kw.setdefault("action", "store_false" if kw["default"] else "store_true")
        elif isinstance(kw["default"], (int, float)):
            kw.setdefault("type", type(kw["default"]))
        p.add_argument(flag, **kw)


def _fill(cls: Callable[..., T], args: argparse.Namespace, **extra: Any) -> T:
    """The spec type `cls` from the parsed options named like its fields, plus `extra`; an option left out (None)
    leaves the field's default."""
    names = {f.name for f in dataclasses.fields(cls)} - set(extra)  # type: ignore[arg-type]
    return cls(**{k: v for k, v in vars(args).items() if k in names and v is not None}, **extra)


def _csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _json(doc: object) -> int:
    print(json.dumps(doc, indent=2))
    return 0


def _console() -> Console:
    from rich.console import Console

    return Console()


def _show(render: Callable[[T, Console], None], what: T) -> int:
    """Render `what` on the terminal (report/terminal.py); exit code 0."""
    render(what, _console())
    return 0


def _lines(lines: Sequence[str], ok: bool = True) -> int:
    """Lines on stdout when all went well (exit 0), else on stderr (exit 1)."""
    for line in lines:
        print(line, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def _command(sub: Subparsers, name: str, handler: Handler, help: str | None = None, description: str | None = None,
             parents: Sequence[argparse.ArgumentParser] = (), options: type | None = None,
             **override: dict[str, Any]) -> argparse.ArgumentParser:
    """Subcommand `name` calling `handler`, with every option of the options type `options` (see `_options`); its
    help: `help`, else the command's line in COMMANDS."""
    p = sub.add_parser(name, help=COMMANDS[name] if help is None else help, description=description,
                       parents=list(parents))
    if options is not None:
        _options(p, options, **override)
    p.set_defaults(handler=handler)
    return p


def _add_evaluate(sub: Subparsers) -> None:
    from fairmedbench.benchmark import uncertainty
    from fairmedbench.benchmark.catalog import profile_names
    from fairmedbench.benchmark.evaluate import EvaluateOptions as E

    p = _command(sub, "evaluate", _cmd_evaluate, description=(
        "Compute utility and fairness metrics with bootstrap CIs from per-sample predictions (classification) or mask "
        "files (segmentation, --masks). Rows with split=val choose the threshold; rows with split=test are "
        "evaluated."))
    _options(p.add_mutually_exclusive_group(required=True), E, "predictions", "demo")
    _options(p, E, "labels", "scores", "attributes", "bins", "bins_closed", "intersect", "threshold", "profile",
             "n_boot", "n_perm", "margin", "patient_column", "i_know", "seed", "logits", "min_group_size",
             "split_column", "id_column", profile={"choices": profile_names()})
    _options(p.add_argument_group("segmentation (--masks)"), E, "masks", "pred_mask", "gt_mask", "volume",
             "mask_threshold", "hd95")
    _options(p, E, "out", "test_resample", "age_column", "out_table", "report", "evidence", "force", "sign_key",
             "json")
    _options(p.add_argument_group("uncertainty disparity (Lu et al. 2021)"), uncertainty.UncertaintyOptions)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark import arguments, uncertainty
    from fairmedbench.benchmark.evaluate import BatchOutcome, EvaluateOptions, evaluate_with
    from fairmedbench.report import terminal

    opts = _fill(EvaluateOptions, args, predictions=None, bins=arguments.parse_bins(args.bins),
                 command=args.command_line)
    if args.uncertainty is not None:  # rejection curves per group and δ (Lu et al. 2021) instead of the metrics
        doc = uncertainty.run_uncertainty(args.predictions, opts, _fill(uncertainty.UncertaintyOptions, args))
        return _json(doc) if opts.json else _show(terminal.render_uncertainty, doc)
    out = evaluate_with(args.predictions or [], opts)
    if opts.json:
        return _json(out.document)
    if isinstance(out, BatchOutcome):
        return _show(terminal.render_batch, out)
    return _show(terminal.render_evaluate, out)


def _add_plan(sub: Subparsers) -> None:
    from fairmedbench.benchmark.plan import PlanOptions

    _command(sub, "plan", _cmd_plan, description=(
        "The number of patients per group an audit needs to detect a given difference in AUC, TPR, FPR or DSC "
        "between two groups with evaluate's permutation test (or, with --margin, to show equivalence by its TOST), "
        "from the expected prevalence per group and images per patient (design effect); prints the formula and its "
        "assumptions, and with --check verifies the power by simulating audits."), options=PlanOptions)


def _cmd_plan(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.plan import PlanOptions, plan_with
    from fairmedbench.engine.progress import StageProgress

    o = _fill(PlanOptions, args)
    with StageProgress(quiet=o.json) as progress:
        plan = plan_with(o, progress)
    if o.json:
        _json(plan.document())
        return 0 if plan.passed else 1
    return _lines(plan.lines(), plan.passed)


def _add_inspect(sub: Subparsers) -> None:
    from fairmedbench.benchmark.inspect import InspectOptions

    p = _command(sub, "inspect", _cmd_inspect, description=(
        "Encoding inspection (Glocker et al.) of an embeddings file or of a model's cached features on a dataset: "
        "SPLIT probe AUC per attribute (against random-weight and ImageNet baselines for a model), a multitask head, "
        "PCA and t-SNE plots coloured by group, and two-sample KS tests on each mode for the label and each pair of "
        "groups, corrected over the whole family."))
    _options(p.add_argument_group("input: --embeddings FILE, or --model M --dataset D"), InspectOptions,
             "embeddings", "metadata", "features", "feature_prefix", "list_column", "projected", "refit_pca", "model",
             "dataset", "weights", "dataset_options", "data_root", "split_seed", "baselines", "imagenet_model",
             baselines={"type": lambda v: [] if v.strip() == "none" else _csv_list(v)})
    _options(p, InspectOptions, "label", "label_pairs", "attributes", "patient_column", "correction", "correct_per",
             "alpha", "holdout", "n_modes", "tsne", "n_boot", "seed", "figure_format", "device", "precision",
             "cache_dir", "batch_size", "out", "out_table", "json")
    _options(p.add_argument_group("hidden-subgroup discovery (--discover)"), InspectOptions, "discover", "score",
             "discover_positive", "slices", "n_perm", "text_embeddings")


def _cmd_inspect(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark import arguments
    from fairmedbench.benchmark.inspect import InspectOptions, run_inspect
    from fairmedbench.engine.progress import StageProgress
    from fairmedbench.report import terminal

    opts = _fill(InspectOptions, args, dataset_options=arguments.parse_hparams(args.dataset_options),
                 label_pairs=arguments.parse_label_pairs(args.label_pairs))
    with StageProgress(quiet=opts.json) as progress:
        outcome = run_inspect(opts, progress=progress)
    if opts.json:
        return _json(outcome.document)
    terminal.render_inspect(outcome.document, _console())
    return _lines([f"{what}: {path}" for what, path in outcome.paths.items()])


def _add_monitor(sub: Subparsers) -> None:
    from fairmedbench.benchmark.monitor import MonitorOptions

    _command(sub, "monitor", _cmd_monitor, description=(
        "Compare later prediction files, window by window, with an evaluate result (the audit): per group the AUC, "
        "TPR and FPR at the audit's threshold with patient-level bootstrap intervals, score drift against the "
        "audit's scores (KS), and alerts from a one-sided CUSUM on each group's standardised AUC drop whose threshold "
        "is calibrated by simulation to --alpha false alarms over --horizon windows. Writes monitor.json, "
        "alerts.json and, with --report, monitor.html."), options=MonitorOptions)


def _cmd_monitor(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.monitor import MonitorOptions, run_monitor

    outcome = run_monitor(_fill(MonitorOptions, args), args.command_line)
    if args.json:
        return _json(outcome.document)
    alerts = outcome.document["alerts"]
    return _lines([*outcome.document["headline"], *[f"alert: {a['window']}: {a['reason']}" for a in alerts
                                                    if a["metric"] == "auc"],
                   *[f"{what}: {path}" for what, path in outcome.paths.items()]])


def _compute_parent() -> argparse.ArgumentParser:
    """Options that say where things live and how to compute; none changes a number (RunOptions)."""
    from fairmedbench.spec import RunOptions

    p = argparse.ArgumentParser(add_help=False)
    _options(p.add_argument_group("where and how (never changes a number)"), RunOptions, "data_root", "device",
             "batch_size", "num_workers", "channels_last", "cache_dir", "out_root", "force", "i_know", "verify_weights")
    return p


def _numbers_parent() -> argparse.ArgumentParser:
    """Options every training command shares that change numbers (RunSpec fields)."""
    from fairmedbench.engine.device import PRECISIONS
    from fairmedbench.spec import RunSpec

    p = argparse.ArgumentParser(add_help=False)
    _options(p, RunSpec, "weights", "hparams", "dataset_options", "precision", "n_boot", "n_perm", "skip_bad",
             precision={"choices": PRECISIONS})
    return p


def _add_run(sub: Subparsers) -> None:
    from fairmedbench.adapters.prompts import PROMPT_MODES
    from fairmedbench.benchmark.arguments import HparamShortcuts
    from fairmedbench.benchmark.catalog import profile_names
    from fairmedbench.benchmark.run import RunOutputs
    from fairmedbench.benchmark.search import SearchOptions
    from fairmedbench.spec import RunSpec

    p = _command(sub, "run", _cmd_run, description=(
        "Split the dataset, load the model, apply the usage (lp, sam-prompt, ...), train with the mitigation, select "
        "checkpoint and threshold on validation, and report utility and fairness metrics with CIs on test."),
        parents=[_numbers_parent(), _compute_parent()])
    _options(p, RunSpec, "model", "dataset", "attributes", "usage", "mitigation", "seeds", "split_seed", "split_seeds",
             "split_file", "eval_datasets", "profile", "threshold", "prompt", "margin",
             profile={"choices": profile_names()}, prompt={"choices": list(PROMPT_MODES)})
    _options(p.add_argument_group("sampling after feature extraction (seeded per run seed; part of the run's "
                                  "identity)"), RunSpec, "train_group_share", "share_group", "train_size", "prevalence",
             "prevalence_on", "test_resample")
    _options(p, RunOutputs)
    _options(p, SearchOptions)
    _options(p, HparamShortcuts)


def run_options(args: argparse.Namespace, progress: Callable[[str, int, int], None] | None = None) -> RunOptions:
    """RunOptions from the compute options (the parent parser's)."""
    from fairmedbench.spec import RunOptions

    return _fill(RunOptions, args, progress=progress)


def run_spec(args: argparse.Namespace) -> RunSpec:
    """The RunSpec of `benchmark run` arguments (checked later, in one place, before any work)."""
    from fairmedbench.benchmark import arguments
    from fairmedbench.spec import RunSpec

    fields = {f.name for f in dataclasses.fields(RunSpec)}
    return arguments.run_spec(**{k: v for k, v in vars(args).items() if k in fields})


def _cmd_run(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.run import RunOutputs, run_with_outputs
    from fairmedbench.benchmark.search import SearchOptions, run_searched
    from fairmedbench.engine import store
    from fairmedbench.engine.progress import StageProgress
    from fairmedbench.report import terminal

    spec, outputs = run_spec(args), _fill(RunOutputs, args)
    with StageProgress(quiet=outputs.json) as progress:
        spec, searched = run_searched(spec, run_options(args, progress), _fill(SearchOptions, args).hparam_search)
        outcome, report = run_with_outputs(spec, run_options(args, progress), outputs, args.command_line)
    if searched is not None:  # the search's record beside the chosen run's summary
        outcome.summary["hparam_search"] = searched
        store.write_json((outcome.summary_dir or outcome.out_dir) / "summary.json", outcome.summary)
    if outputs.json:
        return _json(outcome.summary)
    terminal.render_run_outcome(outcome, report, _console())
    return 0


def _add_controls(sub: Subparsers) -> None:
    from fairmedbench.benchmark.controls import ControlsOptions
    from fairmedbench.engine.device import PRECISIONS

    _command(sub, "controls", _cmd_controls, description=(
        "Run a model (default LiteMedSAM, real weights) with a linear probe and box-prompted segmentation on the "
        "built-in biased synthetic dataset and on its control twin, and check that the injected disparity is found "
        "(the signed difference's permutation test gives p < 0.05, in the declared direction) while the control "
        "shows none (p >= 0.05). Exits 1 when a control does not behave as declared."),
        parents=[_compute_parent()], options=ControlsOptions, precision={"choices": PRECISIONS})


def _cmd_controls(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.controls import ControlsOptions, controls_with
    from fairmedbench.engine.progress import StageProgress
    from fairmedbench.report import terminal

    with StageProgress(quiet=False) as progress:
        outcome = controls_with(_fill(ControlsOptions, args), run_options(args, progress))
    terminal.render_controls(outcome, _console())
    return 0 if outcome.passed else 1


def _add_compare(sub: Subparsers) -> None:
    from fairmedbench.adapters import USAGES
    from fairmedbench.benchmark.compare import N_BOOT_COMPARE, CompareOptions

    p = _command(sub, "compare", _cmd_compare, description=(
        "Run each mitigation with the same splits, cached features and seeds; report mean and 95% CI across seeds, "
        "paired differences and Welch's t-test against ERM, and with several datasets Friedman ranks with the "
        "Nemenyi critical difference."), parents=[_numbers_parent(), _compute_parent()], options=CompareOptions,
        usage={"choices": [n for n in USAGES.names() if USAGES.get(n).learns]})
    p.set_defaults(n_boot=N_BOOT_COMPARE)


def _cmd_compare(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark import claim_packs
    from fairmedbench.benchmark.arguments import parse_hparams
    from fairmedbench.benchmark.compare import CompareOptions, compare_with, save_compare
    from fairmedbench.benchmark.signing import pack_key
    from fairmedbench.engine.progress import StageProgress
    from fairmedbench.report import terminal

    o = _fill(CompareOptions, args, hparams=parse_hparams(args.hparams),
              dataset_options=parse_hparams(args.dataset_options))
    sign = pack_key(o.evidence, o.sign_key)  # the key read and the pack folder checked before any run
    if o.evidence:
        claim_packs.check_pack(o.evidence, args.force, [("--out", args.out_root)])
    with StageProgress(quiet=o.json) as progress:
        outcome = compare_with(o, run_options(args, progress))
    doc, path, report = save_compare(outcome, o.model, o.dataset, args.out_root, report=o.report)
    if o.evidence:
        claim_packs.compare_with_evidence(o.evidence, args.force, outcome, doc, args.command_line, sign)
    if o.json:
        return _json(doc)
    terminal.render_compare_saved(doc, path, report, _console())
    return 0


def _add_claims(sub: Subparsers) -> None:
    from fairmedbench.benchmark.claims import ClaimsOptions

    _command(sub, "claims", _cmd_claims, description=(
        "For each claim YAML (paper, table, statement, dataset, model, methods, metric, claimed direction and size): "
        "compare the method with its baseline on one harness (same splits, features, seeds; repeated splits) and say "
        "whether the claim holds, is not supported at this size (with the paired minimum detectable effect) or is "
        "contradicted. --stand-in runs each claim's synthetic stand-in with a known answer."),
        parents=[_compute_parent()], options=ClaimsOptions)


def _cmd_claims(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.claims import ClaimsOptions, run_claims
    from fairmedbench.engine.progress import StageProgress
    from fairmedbench.report import terminal

    o = _fill(ClaimsOptions, args)
    with StageProgress(quiet=o.json) as progress:
        doc, path, page = run_claims(o, run_options(args, progress), args.out_root)
    if o.json:
        return _json(doc)
    terminal.render_claims(doc, path, page, _console())
    return 0


def _add_run_suite(sub: Subparsers) -> None:
    from fairmedbench.benchmark.suite import SuiteOptions

    _command(sub, "run-suite", _cmd_suite, description=(
        "Run every entry of a leaderboard suite (each dataset, usage and seed) for one model and write a bundle to "
        "submit with `benchmark submit`."), parents=[_compute_parent()], options=SuiteOptions)


def _cmd_suite(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.suite import SuiteOptions, suite_with
    from fairmedbench.engine.progress import StageProgress

    with StageProgress(quiet=False) as progress:
        path = suite_with(o := _fill(SuiteOptions, args), run_options(args, progress))
    print(f"bundle written: {path}; submit it with: benchmark submit {path} --board {o.suite}")
    return 0


def _add_submit(sub: Subparsers) -> None:
    from fairmedbench.benchmark.leaderboard import SubmitOptions
    from fairmedbench.serve.commands import add_remote_submit

    add_remote_submit(_command(sub, "submit", _cmd_submit, description=(
        "Check a submission bundle (files, schema, fingerprints, complete test ids, every metric recomputed from its "
        "predictions) and store it if it passes; with --to, upload it to a board server that does the same."),
        options=SubmitOptions, bundle={"nargs": "?"}, board={"required": False}))


def _cmd_submit(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.leaderboard import SubmitOptions, submit_bundle
    from fairmedbench.serve.commands import route_submit

    remote = route_submit(args)
    if remote is not None:
        return remote
    outcome = submit_bundle(**dataclasses.asdict(_fill(SubmitOptions, args)))
    return _lines(outcome.lines(), outcome.accepted)


def _add_verify(sub: Subparsers) -> None:
    from fairmedbench.benchmark.verify import VerifyOptions

    _command(sub, "verify", _cmd_verify, description=(
        "Re-run the model of a bundle or stored submission from its declared weights, in the precision each run "
        "recorded (fp32 or bf16), on a seeded random sample of each entry's test items (a learned head is re-trained "
        "with the declared seed) and compare every per-sample score with the submitted one; the outcome is recorded "
        "beside a stored submission's submission.json, and its rows show as verified only when every entry passed."),
        parents=[_compute_parent()], options=VerifyOptions)


def _cmd_verify(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.verify import VerifyOptions, verify_bundle
    from fairmedbench.engine.progress import StageProgress

    with StageProgress(quiet=False) as progress:
        outcome = verify_bundle(**dataclasses.asdict(_fill(VerifyOptions, args)), opts=run_options(args, progress))
    return _lines(outcome.lines(), outcome.passed)


def _add_leaderboard(sub: Subparsers) -> None:
    from fairmedbench.benchmark.leaderboard import BoardOptions

    board = sub.add_parser("leaderboard", help=COMMANDS["leaderboard"])
    _command(board.add_subparsers(dest="action", metavar="ACTION", required=True), "build", _cmd_board,
             "write index.html, leaderboard.md and board.json, and one evidence pack per verified row under "
             "evidence/<row>/", options=BoardOptions)


def _cmd_board(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.leaderboard import BoardOptions, build_board

    built = build_board(**dataclasses.asdict(_fill(BoardOptions, args)),
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
    return _lines([f"{what}: {path}" for what, path in built.items()])


def _add_evidence(sub: Subparsers) -> None:
    from fairmedbench.benchmark.signing import EvidenceVerifyOptions

    pack = sub.add_parser("evidence", help=COMMANDS["evidence"])
    _command(pack.add_subparsers(dest="action", metavar="ACTION", required=True), "verify", _cmd_evidence_verify,
             "check every file against MANIFEST.sha256, and MANIFEST.sig with --key",
             "Check every file of an evidence pack against MANIFEST.sha256 (changed, missing or added files) and its "
             "signature MANIFEST.sig with --key: one line per problem and exit 1, or what the pack proves and exit "
             "0. An unsigned manifest proves integrity against accidents, not against whoever can regenerate it.",
             options=EvidenceVerifyOptions)


def _cmd_evidence_verify(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.signing import EvidenceVerifyOptions, verify_pack

    check = verify_pack(**dataclasses.asdict(_fill(EvidenceVerifyOptions, args)))
    return _lines(check.lines(), check.passed)


def _add_list(sub: Subparsers) -> None:
    from fairmedbench.benchmark.catalog import ListOptions

    _command(sub, "list", _cmd_list, description="List metric profiles, threshold policies, datasets, models or "
             "mitigations.", options=ListOptions)


def _cmd_list(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.catalog import LISTERS
    from fairmedbench.report import terminal

    rows = LISTERS[args.what]()
    if args.json:
        return _json(rows)
    terminal.render_rows(args.what, rows, _console())
    return 0


def _add_describe(sub: Subparsers) -> None:
    from fairmedbench.benchmark.catalog import DescribeOptions

    _command(sub, "describe", lambda a: _json(_fill(DescribeOptions, a).card()), description=(
        "Print a card as JSON: for a dataset, with sample and group counts and the split fingerprint when the data "
        "is found, else where to get it."), options=DescribeOptions)


def _add_splits(sub: Subparsers) -> None:
    from fairmedbench.benchmark.datasets import SplitExportOptions, SplitImportOptions

    splits = _command(sub, "splits", _cmd_splits, description="Export a seeded split (sample ids per split + "
                      "fingerprint) or check an imported split file.")
    actions = splits.add_subparsers(dest="action", metavar="ACTION", required=True)
    _options(actions.add_parser("export", help="write a dataset's split to a JSON file"), SplitExportOptions)
    _options(actions.add_parser("import", help="check a split file (and, with --check-data, that the data matches)"),
             SplitImportOptions)


def _cmd_splits(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.datasets import SplitExportOptions, SplitImportOptions, export_split, import_split

    if args.action == "export":
        e = _fill(SplitExportOptions, args)
        return _json(export_split(e.name, e.data_root, e.seed, e.out, policy=e.policy))
    i = _fill(SplitImportOptions, args)
    return _json(import_split(i.file, data_root=i.data_root, check_data=i.check_data))


def _add_docs(sub: Subparsers) -> None:
    from fairmedbench.report.docs import DocsOptions

    _command(sub, "docs", _cmd_docs, description=(
        "Build the documentation site from a source checkout: the hand-written pages in docs/ plus the metric sheet "
        "and the catalogues generated from the registries (plugins included), with mkdocs build --strict."),
        options=DocsOptions)


def _cmd_docs(args: argparse.Namespace) -> int:
    from fairmedbench.report.docs import DocsOptions, build_site

    o = _fill(DocsOptions, args)
    return _lines([f"site: {build_site(o.config, o.out) / 'index.html'}"])


def _add_sweep(sub: Subparsers) -> None:
    from fairmedbench.benchmark.sweep import SweepOptions

    _command(sub, "sweep", _cmd_sweep, description=(
        "Expand a study into runs, skip incompatible cells with their reason, reuse finished runs from the store, "
        "extract each (model, dataset)'s features once, and run the rest; rerun the same command to resume. Shipped "
        "studies: fairmedfm, smoke, fairness-laws, imbalance."), parents=[_compute_parent()], options=SweepOptions)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark import sweep
    from fairmedbench.benchmark.studies import load_study
    from fairmedbench.engine.progress import StageProgress

    o, opts = _fill(sweep.SweepOptions, args), run_options(args)
    study = load_study(o.study)
    if o.status:
        return _lines([sweep.render_status(sweep.read_status(opts.out_root, study.name))])
    if o.dry_run:  # planning and costing a big grid takes a while: progress on stderr
        with StageProgress(quiet=False) as progress:
            text = sweep.render_plan(sweep.make_plan(study, opts, progress=progress), opts, progress)
        return _lines([text])
    with StageProgress(quiet=False) as progress:
        result = sweep.sweep(study, opts, launcher=o.launcher, address=o.address, max_parallel=o.max_parallel,
                             progress=progress)
    print(sweep.render_result(result))
    return 0 if result.passed else 1


def _add_study(sub: Subparsers) -> None:
    from fairmedbench.benchmark.sweep import StudyReportOptions

    study = sub.add_parser("study", help=COMMANDS["study"])
    _command(study.add_subparsers(dest="study_command", required=True), "report", _cmd_study_report,
             "aggregate a study's finished runs into a Parquet table, figures and a page",
             "Read <out>/studies/<name>/plan.json (written by benchmark sweep) and every finished run it names; write "
             "study.parquet/.csv, PNG and SVG figures (ΔAUC/ΔDSC per FM x dataset, ES trade-offs, per-group utility, "
             "mitigations vs ERM, Friedman-Nemenyi ranks, fairness laws, imbalance) and study.html.",
             options=StudyReportOptions)


def _cmd_study_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fairmedbench.benchmark import claim_packs, sweep
    from fairmedbench.benchmark.signing import pack_key
    from fairmedbench.benchmark.studies import load_study
    from fairmedbench.report import terminal

    o = _fill(sweep.StudyReportOptions, args)
    sign = pack_key(o.evidence, o.sign_key)  # the key read and the pack folder checked before the report
    if o.evidence:
        dest = o.dest or sweep.study_dir(o.out, load_study(o.study).name) / "report"
        claim_packs.check_pack(o.evidence, o.force, [("--out", o.out), ("--dest", dest)])
    report = sweep.study_report(o.study, o.out, o.dest)
    if o.evidence:
        claim_packs.study_with_evidence(o.evidence, o.force, report, sweep.study_dir(o.out, report.study) /
                                        "plan.json", Path(o.out), args.command_line, sign)
    return _lines([terminal.study_report_text(report)])


def _add_serve(sub: Subparsers) -> None:
    from fairmedbench.serve.commands import add_serve

    add_serve(sub)


#: each command's adder: its parser (with any nested actions) and its handler, importing what they use
_ADDERS: dict[str, Callable[[Subparsers], None]] = {
    "run": _add_run, "controls": _add_controls, "compare": _add_compare, "claims": _add_claims,
    "evaluate": _add_evaluate, "plan": _add_plan, "inspect": _add_inspect, "monitor": _add_monitor,
    "run-suite": _add_run_suite, "submit": _add_submit, "verify": _add_verify, "leaderboard": _add_leaderboard,
    "evidence": _add_evidence, "list": _add_list, "describe": _add_describe, "splits": _add_splits,
    "docs": _add_docs, "sweep": _add_sweep, "study": _add_study, "serve": _add_serve}


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with the options of `commands` (default: every command) built; any other command is
    listed by its name and help alone (COMMANDS), which is all `benchmark --help` shows of it."""
    parser = argparse.ArgumentParser(
        prog="benchmark", description="fairmedbench: how fairly do medical-imaging foundation models perform "
                                      "across patient groups?")
    parser.add_argument("--version", action="version", version=f"fairmedbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    built = set(COMMANDS if commands is None else commands)
    for name, help in COMMANDS.items():
        if name in built:
            _ADDERS[name](sub)
        else:
            sub.add_parser(name, help=help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `benchmark` console script; user errors exit 2 with a one-line message."""
    routed = route_default(sys.argv[1:] if argv is None else argv, list(COMMANDS), DEFAULT_COMMAND)
    parser = build_parser(routed[:1])  # only the command given (an option or a typo builds none)
    args = parser.parse_args(routed)
    args.command_line = ["benchmark", *routed]  # what evidence packs record as the command
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        code: int = args.handler(args)
        sys.stdout.flush()  # a closed pipe is found here, not at exit
        return code
    except FMBError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # output piped into a command that stopped reading (e.g. head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a full or read-only disk, a folder without permission: one line, no traceback
        if (line := os_error_line(exc)) is None:
            raise
        print(f"benchmark: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("benchmark: interrupted; nothing half-written was kept (the same command resumes from what finished)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":  # `python -m fairmedbench.cli` runs the command too (it did nothing, exit 0)
    raise SystemExit(main())
