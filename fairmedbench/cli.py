"""The `benchmark` command: parses arguments and calls fairmedbench.benchmark; no logic here."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any, Callable, Sequence

from fairmedbench import __version__
from fairmedbench.errors import FMBError, InputError

#: Subcommand used when the first argument is an option (`benchmark --model X --dataset Y` -> `run`),
#: once that subcommand is registered.
DEFAULT_COMMAND = "run"


def _csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _extend(ns_list: list[list[str]] | None) -> list[str]:
    return [x for part in ns_list or [] for x in part]


def _add_evaluate(sub: Any) -> None:
    p = sub.add_parser(
        "evaluate", help="every fairness metric, with CIs, on a prediction file",
        description="Compute utility and fairness metrics with bootstrap CIs from per-sample predictions "
                    "(classification) or mask files (segmentation, --masks). Rows with split=val choose "
                    "the threshold; rows with split=test are evaluated.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--predictions", nargs="+", metavar="FILE",
                     help="CSV/TSV/Parquet with one row per sample (no extension: sniffed); several files or a "
                          "quoted glob ('runs/*/preds.csv') are evaluated in one process into one tidy table with "
                          "a `source` column")
    src.add_argument("--demo", action="store_true", help="the built-in demo predictions (injected sex disparity)")
    p.add_argument("--label", action="append", type=_csv_list, metavar="COLS",
                   help="label column(s), 0/1; several = multi-label, reported per column; one with several "
                        "--score columns = multi-class (class index or name)")
    p.add_argument("--score", action="append", type=_csv_list, metavar="COLS",
                   help="score column(s) or a pattern ('score:*'): one per label column (same order), or one per "
                        "class (or one list column) for a multi-class label")
    p.add_argument("--attribute", action="append", type=_csv_list, metavar="COLS",
                   help="sensitive attribute column(s), e.g. sex,age")
    p.add_argument("--bins", action="append", default=[], metavar="NAME=E0,E1,..",
                   help="bin a numeric attribute into [E0,E1),[E1,E2),..., e.g. age=0,40,60,200")
    p.add_argument("--bins-closed", default="left", choices=["left", "right"],
                   help="which side of each bin is closed: left [a,b) (default) or right (a,b] as pandas.cut")
    p.add_argument("--intersect", action="store_true", help="also report the attributes crossed (F|>=60)")
    p.add_argument("--threshold", metavar="POLICY",
                   help="fixed:T | val_best_f1 | val_youden | val_fpr:F | val_tpr:X "
                        "(default: val_youden with validation rows, else fixed:0.5)")
    p.add_argument("--profile", default="default", choices=_profile_names(),
                   help="metric conventions; 'fairmedfm' reproduces that package's numbers (labelled)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (0 = no CIs)")
    p.add_argument("--n-perm", type=int, default=1000,
                   help="permutations testing each gap and two-group difference (0 = no tests)")
    p.add_argument("--patient-column", metavar="COL",
                   help="resample and permute whole patients by this column (default: 'patient_id' or 'Patient ID' "
                        "when present; 'none' resamples rows)")
    p.add_argument("--i-know", action="store_true",
                   help="evaluate with --n-boot above its documented bound (the estimated time is printed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--logits", action="store_true", help="scores are logits: map them through the sigmoid")
    p.add_argument("--min-group-size", type=int, default=30, help="flag groups smaller than this")
    p.add_argument("--split-column", default="split", metavar="COL")
    p.add_argument("--id-column", metavar="COL", help="sample id column, kept in the per-sample Parquet")
    seg = p.add_argument_group("segmentation (--masks)")
    seg.add_argument("--masks", action="store_true", help="rows list prediction and ground-truth mask files")
    seg.add_argument("--pred-mask", default="pred_mask", metavar="COL")
    seg.add_argument("--gt-mask", default="gt_mask", metavar="COL")
    seg.add_argument("--volume", metavar="COL", help="volume id: slices of a volume are pooled (3D DSC)")
    seg.add_argument("--mask-threshold", type=float, default=0.5)
    seg.add_argument("--hd95", action="store_true", help="also compute HD95 (slower)")
    p.add_argument("--out", metavar="FILE.json", help="result JSON (default results/evaluate/<name>-<id>/)")
    p.add_argument("--test-resample", metavar="SPEC",
                   help="also evaluate a resampled test set (seeded by --seed; ids stored in the JSON): "
                        "balanced:ATTR (equal group sizes, each group's prevalence kept) | prevalence:ATTR (equal "
                        "positives and negatives per group) | matched:ATTR:AGE_BINS (balanced, with the pooled "
                        "age-bin distribution per label, bins [e_i,e_i+1) from --age-column, e.g. "
                        "matched:sex:0,40,60,80)")
    p.add_argument("--age-column", default="age", metavar="COL",
                   help="numeric age column used by --test-resample matched:... (default: age)")
    p.add_argument("--out-table", metavar="FILE", help="tidy table, .csv or .parquet")
    p.add_argument("--report", metavar="FILE.html",
                   help="also write a self-contained audit page: disparities with CIs first, then ROC/PR, "
                        "calibration, rates at the global FPR-0.2 threshold, KS tests, resampled test set")
    p.add_argument("--evidence", metavar="DIR",
                   help="write an evidence pack: audit page, result JSON, tidy table, per-sample predictions, "
                        "command, environment, summary.md and MANIFEST.sha256 (sha256sum -c); DIR must be new or "
                        "empty")
    p.add_argument("--force", action="store_true", help="with --evidence: replace a non-empty DIR")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of tables")
    p.set_defaults(handler=_cmd_evaluate)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.evaluate import EvaluateOptions, expand_sources, run_evaluate
    from fairmedbench.metrics.groups import parse_bins

    sources = expand_sources(args.predictions) if args.predictions else []
    opts = EvaluateOptions(
        predictions=sources[0] if len(sources) == 1 else None, demo=args.demo, labels=_extend(args.label), scores=_extend(args.score),
        attributes=_extend(args.attribute), bins={k: list(v) for k, v in (parse_bins(b) for b in args.bins)},
        bins_closed=args.bins_closed, intersect=args.intersect,
        threshold=args.threshold, profile=args.profile, n_boot=args.n_boot, n_perm=args.n_perm,
        patient_column=args.patient_column, seed=args.seed, logits=args.logits,
        min_group_size=args.min_group_size, split_column=args.split_column, id_column=args.id_column,
        masks=args.masks, pred_mask=args.pred_mask, gt_mask=args.gt_mask, volume=args.volume,
        mask_threshold=args.mask_threshold, hd95=args.hd95, out=args.out, out_table=args.out_table,
        test_resample=args.test_resample, age_column=args.age_column, report=args.report, command=list(sys.argv),
        i_know=args.i_know, evidence=args.evidence, force=args.force)
    if args.evidence:
        opts.command = list(getattr(args, "command_line", sys.argv))
    if opts.n_boot < 0 or opts.n_perm < 0:
        raise InputError(f"--n-boot and --n-perm must be >= 0, got {opts.n_boot} and {opts.n_perm}")
    if len(sources) > 1:
        if args.evidence:
            raise InputError("--evidence packs one prediction file; give one file (or one pack per file)")
        return _evaluate_batch(sources, opts, args.json)
    with _progress(quiet=args.json) as step:
        outcome = run_evaluate(opts, progress=step)
    if args.json:
        print(json.dumps(outcome.document, indent=2))
        return 0
    from rich.console import Console

    from fairmedbench.report.terminal import render

    console = Console()
    render(outcome.result, console)
    if outcome.resampled is not None:
        from fairmedbench.report.terminal import render_resampled

        render_resampled(outcome.result, outcome.resampled, outcome.document["test_resample"], console)
    for note in outcome.notes:
        console.print(f"[cyan]note[/] {note}")
    for task, thr in outcome.result.meta.get("thresholds", {}).items():
        # one threshold per task, or one per attribute when the profile picks it on each evaluated set
        per = {"": thr} if "policy" in thr else {f" ({task} / {a})": t for a, t in thr.items()}
        for where, t in per.items():
            console.print(f"operating threshold{where}: {t['policy']} -> {t['value']} (positive iff score "
                          f"{t['comparator']} t; source: {t['source']})")
        break
    for what, path in outcome.paths.items():
        console.print(f"{what}: {path}")
    return 0


def _add_inspect(sub: Any) -> None:
    p = sub.add_parser(
        "inspect", help="what frozen features encode: SPLIT probe, multitask head, PCA/t-SNE, KS tests",
        description="Encoding inspection (Glocker et al.) of an embeddings file or of a model's cached features on "
                    "a dataset: SPLIT probe AUC per attribute (against random-weight and ImageNet baselines for a "
                    "model), a multitask head, PCA and t-SNE plots coloured by group, and two-sample KS tests on "
                    "each mode for the label and each pair of groups, corrected over the whole family.")
    src = p.add_argument_group("input: --embeddings FILE, or --model M --dataset D")
    src.add_argument("--embeddings", metavar="FILE", help="CSV/Parquet (or .npy with --metadata), one row per sample")
    src.add_argument("--metadata", metavar="FILE", help="label and attribute columns, row by row with --embeddings")
    src.add_argument("--features", type=_csv_list, default=[], metavar="COLS", help="embedding columns by name")
    src.add_argument("--feature-prefix", metavar="PREFIX", help="embedding columns: those starting with PREFIX")
    src.add_argument("--list-column", metavar="COL", help="embedding as one list per row in COL")
    src.add_argument("--projected", action="store_true",
                     help="the features are already-projected modes: analysed as given, no PCA (automatic for "
                          "'PCA Mode N' columns, named or not)")
    src.add_argument("--refit-pca", action="store_true", help="fit PCA even on columns named 'PCA Mode N'")
    src.add_argument("--model", help="a model card; its linear-probe features come from the feature cache")
    src.add_argument("--dataset", help="a dataset card (with --model)")
    src.add_argument("--weights", help="PATH, 'random', or default: the card's source")
    src.add_argument("--dataset-option", action="append", default=[], metavar="KEY=VALUE", help="e.g. n=100")
    src.add_argument("--data-root")
    src.add_argument("--split-seed", type=int, default=0)
    src.add_argument("--baselines", type=lambda v: [] if v.strip() == "none" else _csv_list(v),
                     default=["random", "imagenet"], metavar="LIST",
                     help="with --model: random (same architecture, --weights random) and/or imagenet, or none")
    src.add_argument("--imagenet-model", default="imagenet-resnet50", help="the ImageNet baseline's model card")
    p.add_argument("--label", metavar="COL", help="disease label column (default: label or disease)")
    p.add_argument("--label-pair", action="append", default=[], metavar="A:B",
                   help="test only these label classes against each other, e.g. 'Pleural Effusion:No Finding' "
                        "(default: every pair)")
    p.add_argument("--attribute", action="append", type=_csv_list, metavar="COLS",
                   help="attribute column(s) (default: sex, gender, race where present; the card's with --model)")
    p.add_argument("--patient-column", metavar="COL", help="keep a patient's rows on one side of the probe split "
                                                           "(default: patient_id when present)")
    p.add_argument("--correction", default="by", help="by (Benjamini-Yekutieli) | bh | holm | bonferroni | none")
    p.add_argument("--correct-per", default="family", choices=["family", "attribute"],
                   help="correct over every test (family) or within each label/attribute")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--holdout", type=float, default=0.3, help="held-out share for the probes (embeddings file)")
    p.add_argument("--modes", type=int, default=4, help="PCA modes to test and plot")
    p.add_argument("--no-tsne", action="store_true", help="skip t-SNE (when the file has none of its own)")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--figure-format", default="png", choices=["png", "svg"])
    for flag, default in (("--device", "auto"), ("--precision", "fp32"), ("--cache-dir", ".fmb-cache")):
        p.add_argument(flag, default=default)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--out", metavar="DIR", help="output folder (default results/inspect/<name>-<id>/)")
    p.add_argument("--out-table", metavar="FILE", help="also write the tidy table here (.csv or .parquet)")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of tables")
    p.set_defaults(handler=_cmd_inspect)


def _cmd_inspect(args: argparse.Namespace) -> int:
    from fairmedbench.analysis.encoding import class_pairs
    from fairmedbench.benchmark.inspect import InspectOptions, run_inspect

    opts = InspectOptions(
        embeddings=args.embeddings, metadata=args.metadata, features=args.features,
        feature_prefix=args.feature_prefix, list_column=args.list_column, projected=args.projected,
        refit_pca=args.refit_pca,
        model=args.model, dataset=args.dataset, weights=args.weights,
        dataset_options=parse_hparams(args.dataset_option), data_root=args.data_root, split_seed=args.split_seed,
        baselines=args.baselines, imagenet_model=args.imagenet_model, label=args.label,
        label_pairs=[p for spec in args.label_pair for p in class_pairs(spec)], attributes=_extend(args.attribute),
        patient_column=args.patient_column, correction=args.correction, correct_per=args.correct_per,
        alpha=args.alpha, holdout=args.holdout, seed=args.seed, n_boot=args.n_boot, n_modes=args.modes,
        tsne=not args.no_tsne, figure_format=args.figure_format, device=args.device, precision=args.precision,
        batch_size=args.batch_size, cache_dir=args.cache_dir, out=args.out, out_table=args.out_table)
    with _stage_progress(quiet=args.json) as step:
        outcome = run_inspect(opts, progress=step)
    if args.json:
        print(json.dumps(outcome.document, indent=2))
        return 0
    from rich.console import Console

    from fairmedbench.report.terminal import render_inspect

    render_inspect(outcome.document, Console())
    for what, path in outcome.paths.items():
        print(f"{what}: {path}")
    return 0


def _evaluate_batch(sources: list[str], opts: Any, as_json: bool) -> int:
    from fairmedbench.benchmark.evaluate import run_evaluate_batch

    with _progress(quiet=as_json) as step:
        batch = run_evaluate_batch(sources, opts, progress=step)
    if as_json:
        print(json.dumps([o.document for o in batch.outcomes], indent=2))
        return 0
    from rich.console import Console

    from fairmedbench.report.terminal import render_batch

    render_batch(batch, Console())
    return 0


class _progress:
    """A rich progress bar on stderr fed by the engine's (done, total, label) callback."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet or not sys.stderr.isatty()
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> Callable[[int, int, str], None]:
        if not self.quiet:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
        return self.step

    def step(self, done: int, total: int, label: str) -> None:
        if self.bar is None:
            return
        if self.task is None:
            self.task = self.bar.add_task("metrics + bootstrap", total=total)
        self.bar.update(self.task, completed=done, description=label)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0,1,2' or '0-4' (inclusive) or a mix: '0-2,7'."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            seeds.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise InputError(f"--seeds {text!r}: expected numbers like 0,1,2 or a range like 0-4") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds {text!r}: give distinct seeds")
    return tuple(seeds)


def parse_hparams(items: list[str]) -> dict[str, Any]:
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


#: `benchmark run` options that only choose what is printed or written beside the result (never a number).
OUTPUT_ONLY = frozenset({"json", "report", "evidence"})


def _compute_parent() -> argparse.ArgumentParser:
    """Options that say where things live and how to compute; none changes a number (RunOptions)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("where and how (never changes a number)")
    g.add_argument("--data-root", help="the dataset's folder (default: $FMB_DATA_<NAME>, $FMB_DATA_ROOT/<name>); "
                                       "the data read is fingerprinted into the run's identity")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    g.add_argument("--batch-size", type=int, default=None,
                   help="encoder batch size (default: 4 on a CPU, 16 on a GPU; printed)")
    g.add_argument("--num-workers", type=int, default=None, help="data loader workers (default: 0 on CPU)")
    g.add_argument("--channels-last", action="store_true", help="channels-last memory format for the encoder")
    g.add_argument("--cache-dir", default=".fmb-cache", help="feature cache folder")
    g.add_argument("--out", default="results", help="results folder")
    g.add_argument("--force", action="store_true", help="recompute even if this run's result exists")
    g.add_argument("--i-know", action="store_true",
                   help="run with --seeds or --n-boot above their documented bounds (the estimated time is printed)")
    g.add_argument("--no-verify-weights", dest="verify_weights", action="store_false",
                   help="accept --weights whose sha256 differs from the card's (your own fine-tuned checkpoint); "
                        "the sha256 read is recorded and is part of the run's identity")
    return p


def _numbers_parent() -> argparse.ArgumentParser:
    """Options every training command shares that change numbers (RunSpec fields)."""
    from fairmedbench.engine.device import PRECISIONS

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--weights", help="PATH, 'random' (smoke tests) or default: the card's source")
    p.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE",
                   help="training, usage or mitigation hyperparameter, e.g. lr=0.01, eta=0.1, box_jitter=0.1; "
                        "tasks=all adds the card's extra label columns (e.g. the 14 NIH findings)")
    p.add_argument("--dataset-option", action="append", default=[], metavar="KEY=VALUE",
                   help="reader option, e.g. n=200 for a smaller synthetic set (part of the run's identity)")
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="encoder precision: auto = bf16 on CUDA or a CPU that runs bf16 natively (measured once "
                        "per machine), else fp32; the choice is printed and recorded")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (0 = no CIs)")
    p.add_argument("--n-perm", type=int, default=1000,
                   help="permutations testing each gap and two-group difference (0 = no tests)")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip samples with unmapped attribute values or missing/undecodable files (counted)")
    return p


def _add_run_options(p: Any) -> None:
    from fairmedbench.adapters.prompts import PROMPT_MODES

    p.add_argument("--model", required=True, help="a model card name (benchmark list models)")
    p.add_argument("--dataset", required=True, help="a dataset card name (benchmark list datasets)")
    p.add_argument("--attribute", action="append", type=_csv_list, metavar="NAMES",
                   help="sensitive attribute(s) of the dataset card (default: all but binned copies); the "
                        "first is the one mitigations train with")
    p.add_argument("--usage", help="lp | sam-prompt | sam-decoder | ... (default: chosen from the model and "
                                   "dataset; benchmark list usages)")
    p.add_argument("--mitigation", default="erm", help="erm | resampling | groupdro | ... (list mitigations)")
    p.add_argument("--seeds", default="0", help="training seeds: 0,1,2 or 0-4")
    p.add_argument("--split-seed", type=int, help="seed of the drawn split (default 0; not with --split-file)")
    p.add_argument("--split-seeds", metavar="SEEDS",
                   help="repeated splits, e.g. 0,1,2: the test split of --split-seed is kept and train/val are "
                        "re-drawn per split seed (one run each), summarised across splits beside the bootstrap CIs")
    p.add_argument("--split-file", help="an exported split (benchmark splits export) to run on")
    p.add_argument("--eval-dataset", action="append", metavar="NAME[:KEY=VALUE...]",
                   help="external evaluation: apply the trained head/decoder to these datasets' test splits too "
                        "(comma-separated or repeated; reader options after ':', e.g. nih-cxr14:view=AP; root=DIR "
                        "for its data) and report their metrics and the shift from the internal test set")
    p.add_argument("--profile", default="default", choices=_profile_names())
    p.add_argument("--threshold", metavar="POLICY",
                   help="fixed:T | val_best_f1 | val_youden | val_fpr:F | val_tpr:X (default: val_youden; a "
                        "profile that chooses its own threshold, such as fairmedfm, refuses one)")
    p.add_argument("--prompt", choices=list(PROMPT_MODES),
                   help="segmentation prompt derived from the ground truth (default bbox; only with a usage that "
                        "prompts)")
    g = p.add_argument_group("sampling after feature extraction (seeded per run seed; part of the run's identity)")
    g.add_argument("--train-group-share", type=float, metavar="S",
                   help="share S in [0, 1] of --share-group in a training set of fixed size (fairness laws)")
    g.add_argument("--share-group", metavar="GROUP",
                   help="a group of the first attribute (default: its smallest group in the training split)")
    g.add_argument("--train-size", type=int, metavar="N",
                   help="training set size for --train-group-share (default: the largest at which every share fits)")
    g.add_argument("--prevalence", type=float, metavar="P",
                   help="impose class prevalence P in every group of one split (imbalance study)")
    g.add_argument("--prevalence-on", choices=["train", "test"], help="the split --prevalence samples (default test)")
    g.add_argument("--test-resample", metavar="SPEC",
                   help="also report a resampled test set: balanced:ATTR (equal group sizes, own prevalence), "
                        "prevalence:ATTR (equal positives and negatives per group) or matched:ATTR:AGE_BINS "
                        "(balanced and age-matched, e.g. matched:sex:0,40,60,80); seeded by the run seed")
    p.add_argument("--json", action="store_true", help="print the summary JSON instead of tables")
    p.add_argument("--report", action="store_true", help="also write a self-contained report.html in the run folder")
    p.add_argument("--evidence", metavar="DIR",
                   help="write an evidence pack of the run (report page, result JSONs, tidy table, predictions, "
                        "command, environment, summary.md, MANIFEST.sha256); DIR must be new or empty (--force "
                        "replaces it)")


def run_options(args: argparse.Namespace, progress: Callable[[str, int, int], None] | None = None) -> Any:
    """RunOptions from the compute options (the parent parser's)."""
    from fairmedbench.benchmark.run import RunOptions

    return RunOptions(data_root=args.data_root, out_root=args.out, cache_dir=args.cache_dir, device=args.device,
                      batch_size=args.batch_size, num_workers=args.num_workers, channels_last=args.channels_last,
                      force=args.force, verify_weights=args.verify_weights, i_know=args.i_know, progress=progress)


def run_spec(args: argparse.Namespace) -> Any:
    """The RunSpec of `benchmark run` arguments (checked later, in one place, before any work)."""
    from fairmedbench.spec import RunSpec

    if args.split_file and args.split_seed is not None:  # both were accepted and the seed silently ignored
        raise InputError("--split-seed draws a split and --split-file imports one: give one of them")
    if args.prevalence_on is not None and args.prevalence is None:
        raise InputError(f"--prevalence-on {args.prevalence_on} says which split --prevalence samples: give "
                         "--prevalence P too, or drop it")
    return RunSpec(model=args.model, dataset=args.dataset, attributes=tuple(_extend(args.attribute)),
                   usage=args.usage or "", mitigation=args.mitigation, seeds=parse_seeds(args.seeds),
                   split_seed=args.split_seed or 0, split_file=args.split_file, weights=args.weights,
                   profile=args.profile, threshold=args.threshold, n_boot=args.n_boot, n_perm=args.n_perm,
                   precision=args.precision, prompt=args.prompt,
                   skip_bad=args.skip_bad, hparams=parse_hparams(args.hparam),
                   dataset_options=parse_hparams(args.dataset_option), train_group_share=args.train_group_share,
                   share_group=args.share_group, train_size=args.train_size, prevalence=args.prevalence,
                   prevalence_on=args.prevalence_on or "test", test_resample=args.test_resample,
                   eval_datasets=tuple(_eval_list(args.eval_dataset)), split_seeds=_split_seeds(args.split_seeds))


def _eval_list(values: list[str] | None) -> list[str]:
    from fairmedbench.analysis.shift import split_eval_list

    return [t for v in values or [] for t in split_eval_list(v)]


def _split_seeds(text: str | None) -> tuple[int, ...]:
    try:
        return parse_seeds(text) if text else ()
    except InputError:
        raise InputError(f"--split-seeds {text!r}: expected distinct numbers like 0,1,2 or a range like 0-4") from None


def _add_run(sub: Any) -> None:
    p = sub.add_parser(
        "run", help="benchmark a model on a dataset (default command: benchmark --model X --dataset Y)",
        parents=[_numbers_parent(), _compute_parent()],
        description="Split the dataset, load the model, apply the usage (lp, sam-prompt, ...), train with the "
                    "mitigation, select checkpoint and threshold on validation, and report utility and fairness "
                    "metrics with CIs on test.")
    _add_run_options(p)
    p.set_defaults(handler=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.run import run

    spec = run_spec(args)
    if args.evidence:  # before any work: a non-empty folder is refused
        from fairmedbench.benchmark.evidence import check

        check(args.evidence, args.force)
    with _stage_progress(quiet=args.json) as step:
        outcome = run(spec, run_options(args, step))
    if args.evidence:
        from fairmedbench.benchmark.evidence import describe, prepare, run_pack

        run_pack(prepare(args.evidence, args.force), outcome, getattr(args, "command_line", sys.argv))
        print(describe(args.evidence), file=sys.stderr)
    report = None
    if args.report:
        from fairmedbench.report.html import write_run_report

        report = write_run_report(outcome.out_dir, outcome.seed_docs)
    if args.json:
        print(json.dumps(outcome.summary, indent=2))
        return 0
    from rich.console import Console

    from fairmedbench.report.terminal import render_run

    console = Console()
    render_run(outcome, console)
    resampled = [r for r in outcome.seeds if "test_resample" in r.doc]
    if resampled:
        from fairmedbench.engine.results import RunResult
        from fairmedbench.report.terminal import render_resampled

        first = resampled[0]
        console.print(f"resampled test set ({first.doc['test_resample']['params']['spec']}), seed "
                      f"{first.spec['seed']}; every seed's draw and result are in its seed JSON")
        render_resampled(first.fairness(), RunResult({**first.doc, "result": first.doc["test_resample"]["result"]},
                                                     outcome.out_dir).fairness(), first.doc["test_resample"], console)
    if report:
        console.print(f"report: {report}")
    return 0


def _stage_progress(quiet: bool) -> Any:
    """Progress of named stages on stderr: a bar on a terminal, plain periodic lines otherwise (logs, CI)."""
    from fairmedbench.engine.progress import StageProgress

    return StageProgress(quiet=quiet)


def _add_compare(sub: Any) -> None:
    from fairmedbench.adapters import USAGES

    learning = [n for n in USAGES.names() if USAGES.get(n).learns]
    p = sub.add_parser(
        "compare", help="mitigation methods on one harness (same splits, features, seeds)",
        parents=[_numbers_parent(), _compute_parent()],
        description="Run each mitigation with the same splits, cached features and seeds; report mean and "
                    "95% CI across seeds, paired differences and Welch's t-test against ERM, and with several "
                    "datasets Friedman ranks with the Nemenyi critical difference.")
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True, type=_csv_list, help="one or more datasets, comma-separated")
    p.add_argument("--attribute", required=True, help="the sensitive attribute methods train and report with")
    p.add_argument("--usage", default="lp", choices=learning, help="a usage that learns from the train split")
    p.add_argument("--mitigations", default="erm,resampling,groupdro", type=_csv_list)
    p.add_argument("--seeds", default="0-4")
    p.add_argument("--split-file", help="an exported split (benchmark splits export) to run every method on")
    p.add_argument("--select", help="checkpoint selection on validation (default: the task's first rule: val_loss "
                                    "for classification, val_dsc for segmentation)")
    p.add_argument("--report", action="store_true", help="also write a utility-fairness Pareto page")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_compare, n_boot=500)


def _cmd_compare(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.compare import compare, save_compare

    with _stage_progress(quiet=args.json) as step:
        outcome = compare(args.model, args.dataset, args.attribute, args.usage, args.mitigations,
                          parse_seeds(args.seeds), run_options(args, step), select=args.select, weights=args.weights,
                          n_boot=args.n_boot, dataset_options=parse_hparams(args.dataset_option),
                          hparams=parse_hparams(args.hparam), precision=args.precision, skip_bad=args.skip_bad,
                          split_file=args.split_file)
    doc, path, report = save_compare(outcome, args.model, args.dataset, args.out, report=args.report)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    from rich.console import Console

    from fairmedbench.report.terminal import render_compare

    console = Console()
    render_compare(doc, console)
    console.print(f"saved: {path}" + (f"\nreport: {report}" if report else ""))
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
    p.add_argument("--model", default="litemedsam")
    p.add_argument("--weights")
    p.add_argument("--datasets", default="synth-contrast,synth-control", type=_csv_list)
    p.add_argument("--usages", default="lp,sam-prompt", type=_csv_list)
    p.add_argument("--n", type=int, default=100, help="samples per synthetic dataset")
    p.add_argument("--test-share", type=float, default=0.4,
                   help="share of each synthetic dataset in its test split (train gets the rest minus 0.1 val)")
    p.add_argument("--seeds", default="0")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--precision", default="auto", choices=PRECISIONS)
    p.set_defaults(handler=_cmd_controls)


def _cmd_controls(args: argparse.Namespace) -> int:
    from rich.console import Console

    from fairmedbench.benchmark.controls import controls_options, run_controls
    from fairmedbench.report.terminal import render_controls

    with _stage_progress(quiet=False) as step:
        outcome = run_controls(args.model, tuple(args.datasets), tuple(args.usages), run_options(args, step),
                               weights=args.weights, dataset_options=controls_options(args.n, args.test_share),
                               seeds=parse_seeds(args.seeds), n_boot=args.n_boot, precision=args.precision)
    render_controls(outcome, Console())
    return 0 if outcome.passed else 1


def _add_suite(sub: Any) -> None:
    p = sub.add_parser("run-suite", help="run a board suite for a model and write a submission bundle",
                       parents=[_compute_parent()],
                       description="Run every entry of a leaderboard suite (each dataset, usage and seed) for "
                                   "one model and write a bundle to submit with `benchmark submit`.")
    p.add_argument("suite", help="a board suite (benchmark list suites)")
    p.add_argument("--model", required=True)
    p.add_argument("--weights")
    p.add_argument("--revision", help="the model revision shown on the board (default: weights sha256 prefix)")
    p.add_argument("--bundle", required=True, help="folder to write the bundle into")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--entry", action="append", default=[], metavar="KEY",
                   help="run only this entry (repeatable; default: all; keys: benchmark describe suite NAME)")
    p.set_defaults(handler=_cmd_suite)


def _cmd_suite(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fairmedbench.benchmark.suite import run_suite

    with _stage_progress(quiet=False) as step:
        path = run_suite(args.suite, args.model, Path(args.bundle), run_options(args, step), weights=args.weights,
                         n_boot=args.n_boot, revision=args.revision, entries=args.entry)
    print(f"bundle written: {path}; submit it with: benchmark submit {path} --board {args.suite}")
    return 0


def _add_submit(sub: Any) -> None:
    p = sub.add_parser("submit", help="validate a bundle by recomputation and add it to a board",
                       description="Check a submission bundle (files, schema, fingerprints, complete test ids, "
                                   "every metric recomputed from its predictions) and store it if it passes.")
    p.add_argument("bundle")
    p.add_argument("--board", required=True)
    p.add_argument("--root", default="leaderboards", help="folder holding the boards")
    p.set_defaults(handler=_cmd_submit)


def _cmd_submit(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.leaderboard import submit_bundle

    outcome = submit_bundle(args.bundle, args.board, args.root)
    for line in outcome.lines():
        print(line, file=sys.stdout if outcome.accepted else sys.stderr)
    return 0 if outcome.accepted else 1


def _add_verify(sub: Any) -> None:
    from fairmedbench.benchmark.verify import DEFAULT_SAMPLE

    p = sub.add_parser("verify", help="re-run a submitted model on a sample of test items; mark its rows verified",
                       parents=[_compute_parent()],
                       description="Re-run the model of a bundle or stored submission from its declared weights, "
                                   "in fp32, on a seeded random sample of each entry's test items (a learned head "
                                   "is re-trained with the declared seed) and compare every per-sample score with "
                                   "the submitted one; the outcome is recorded beside a stored submission's "
                                   "submission.json, and its rows show as verified only when every entry passed.")
    p.add_argument("bundle", help="a stored submission (leaderboards/<board>/submissions/<model>/<revision>) or a "
                                  "bundle folder (checked, not recorded)")
    p.add_argument("--board", help="the board suite (default: the bundle's suite.json)")
    p.add_argument("--sample", type=int, default=DEFAULT_SAMPLE,
                   help=f"test items re-run per entry and seed (default {DEFAULT_SAMPLE})")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample")
    p.add_argument("--tolerance", type=float,
                   help="absolute tolerance on per-sample scores (default: by the precision the run recorded, "
                        "leaderboards.tiers.TOLERANCE; the board's tier legend states it)")
    p.add_argument("--weights", help="the weights file when the card's default source is not available here")
    p.set_defaults(handler=_cmd_verify)


def _cmd_verify(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.verify import verify_bundle

    with _stage_progress(quiet=False) as step:
        outcome = verify_bundle(args.bundle, args.board, sample=args.sample, seed=args.seed,
                                tolerance=args.tolerance, weights=args.weights,
                                opts=run_options(args, step))
    for line in outcome.lines():
        print(line, file=sys.stdout if outcome.passed else sys.stderr)
    return 0 if outcome.passed else 1


def _add_leaderboard(sub: Any) -> None:
    p = sub.add_parser("leaderboard", help="build a board's page from its accepted submissions")
    lsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = lsub.add_parser("build", help="write index.html, leaderboard.md and board.json")
    b.add_argument("--board", required=True)
    b.add_argument("--root", default="leaderboards")
    b.set_defaults(handler=_cmd_board)


def _cmd_board(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.leaderboard import build_board

    for what, path in build_board(args.board, args.root).items():
        print(f"{what}: {path}")
    return 0


def _add_list(sub: Any) -> None:
    p = sub.add_parser("list", help="list registered things (instant)",
                       description="List metric profiles, threshold policies, datasets, models or mitigations.")
    p.add_argument("what", choices=sorted(LISTERS), help="what to list")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_list)


def _profile_names() -> list[str]:
    from fairmedbench.metrics.profiles import PROFILES

    return PROFILES.names()


def _list_profiles() -> list[dict[str, Any]]:
    from fairmedbench.metrics.profiles import PROFILES

    return [{"name": p.name, "about": p.about} for p in PROFILES.values()]


def _list_policies() -> list[dict[str, Any]]:
    from fairmedbench.metrics.thresholds import POLICIES

    return [{"name": p} for p in POLICIES]


def _list_datasets() -> list[dict[str, Any]]:
    from fairmedbench.benchmark.datasets import list_datasets

    return list_datasets()


def _list_models() -> list[dict[str, Any]]:
    from fairmedbench.benchmark.models import list_models

    return list_models()


def _list_usages() -> list[dict[str, Any]]:
    from fairmedbench.adapters import USAGES

    return [USAGES.get(n).describe() for n in USAGES.names()]


def _list_suites() -> list[dict[str, Any]]:
    from fairmedbench.leaderboards.suites import SUITES

    def test_sets(suite: Any) -> list[str]:
        seen = {e.describe()["test_set"]["name"]: e for e in suite.entries}
        return [f"{name} ({'fingerprint pending' if e.pending else 'fingerprint ' + str(e.test_fingerprint)[:12]}, "
                f"{'partial coverage, ranked separately' if e.partial_coverage else 'complete coverage'})"
                for name, e in seen.items()]

    return [{"name": n, "version": SUITES.get(n).version, "entries": len(SUITES.get(n).entries),
             "test sets": test_sets(SUITES.get(n)), "about": SUITES.get(n).description} for n in SUITES.names()]


def _list_mitigations() -> list[dict[str, Any]]:
    from fairmedbench.mitigation import MITIGATIONS, make_mitigation

    rows = []
    for name in MITIGATIONS.names():
        d = make_mitigation(name).describe()
        rows.append({"name": name, "hparams": ", ".join(f"{k}={v}" for k, v in d["hparams"].items()),
                     "tasks": ", ".join(d["tasks"]), "needs class labels": d["needs_class_labels"] or "no",
                     "attribute at inference": d["needs_attribute_at_inference"]})
    return rows


def _list_studies() -> list[dict[str, Any]]:
    from fairmedbench.benchmark.studies import load_study, shipped_studies

    return [{"name": s.name, "models": len(s.models), "datasets": len(s.datasets), "usages": list(s.usages),
             "mitigations": list(s.mitigations), "seeds": len(s.seeds), "about": s.description}
            for s in map(load_study, shipped_studies())]


LISTERS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "profiles": _list_profiles, "thresholds": _list_policies, "datasets": _list_datasets, "models": _list_models,
    "usages": _list_usages, "mitigations": _list_mitigations, "suites": _list_suites, "studies": _list_studies}


def _add_describe(sub: Any) -> None:
    p = sub.add_parser("describe", help="a dataset's or model's card (+ group counts when data is present), or a "
                                        "board suite (entries, pinned test sets, coverage rules)",
                       description="Print a card as JSON: for a dataset, with sample and group counts and the "
                                   "split fingerprint when the data is found, else where to get it.")
    p.add_argument("what", choices=sorted(DESCRIBERS))
    p.add_argument("name")
    p.add_argument("--data-root", help="the dataset's folder (default: $FMB_DATA_<NAME> or $FMB_DATA_ROOT/<name>)")
    p.add_argument("--seed", type=int, default=0, help="split seed for the per-split counts")
    p.add_argument("--skip-bad", action="store_true", help="skip (and count) rows that fail to map or decode")
    p.set_defaults(handler=_cmd_describe)


def _describe_dataset(args: argparse.Namespace) -> dict[str, Any]:
    from fairmedbench.benchmark.datasets import describe_dataset

    return describe_dataset(args.name, args.data_root, seed=args.seed, skip_bad=args.skip_bad)


def _describe_model(args: argparse.Namespace) -> dict[str, Any]:
    from fairmedbench.benchmark.models import describe_model

    return describe_model(args.name)


def _describe_suite(args: argparse.Namespace) -> dict[str, Any]:
    from fairmedbench.leaderboards.suites import get_suite

    suite = get_suite(args.name)
    return {"name": suite.name, "version": suite.version, "description": suite.description,
            "entries": [e.describe() for e in suite.entries]}


DESCRIBERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {"dataset": _describe_dataset,
                                                                         "model": _describe_model,
                                                                         "suite": _describe_suite}


def _cmd_describe(args: argparse.Namespace) -> int:
    print(json.dumps(DESCRIBERS[args.what](args), indent=2))
    return 0


def _add_splits(sub: Any) -> None:
    p = sub.add_parser("splits", help="export or import a dataset split so two labs run on the same one",
                       description="Export a seeded split (sample ids per split + fingerprint) or check an "
                                   "imported split file.")
    ssub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    e = ssub.add_parser("export", help="write a dataset's split to a JSON file")
    e.add_argument("name")
    e.add_argument("--out", required=True, metavar="FILE.json")
    e.add_argument("--data-root")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--policy", choices=["official", "patient"], help="default: the card's split policy")
    e.set_defaults(handler=_cmd_splits_export)
    i = ssub.add_parser("import", help="check a split file (and, with --check-data, that the data matches)")
    i.add_argument("file")
    i.add_argument("--data-root")
    i.add_argument("--check-data", action="store_true", help="load the dataset and check every id is present")
    i.set_defaults(handler=_cmd_splits_import)


def _cmd_splits_export(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.datasets import export_split

    print(json.dumps(export_split(args.name, args.data_root, args.seed, args.out, policy=args.policy), indent=2))
    return 0


def _cmd_splits_import(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark.datasets import import_split

    print(json.dumps(import_split(args.file, data_root=args.data_root, check_data=args.check_data), indent=2))
    return 0


def _add_sweep(sub: Any) -> None:
    p = sub.add_parser(
        "sweep", help="run a study (a YAML grid of models x datasets x usages x ...) locally or on Ray",
        parents=[_compute_parent()],
        description="Expand a study into runs, skip incompatible cells with their reason, reuse finished runs "
                    "from the store, extract each (model, dataset)'s features once, and run the rest; rerun the "
                    "same command to resume. Shipped studies: fairmedfm, smoke, fairness-laws, imbalance.")
    p.add_argument("study", help="a shipped study's name or a study YAML file")
    p.add_argument("--launcher", default="local", choices=["local", "ray"],
                   help="local: in this process (or a process pool with --max-parallel); ray: Ray tasks")
    p.add_argument("--address", help="an existing Ray cluster (HOST:PORT or ray://HOST:PORT); default: a local one")
    p.add_argument("--max-parallel", type=int, help="tasks at once (local pool size; Ray: CPUs of a local cluster)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (runs, encodes, skipped cells with reasons, a measured cost estimate)")
    p.add_argument("--status", action="store_true", help="show done / running / failed / skipped cells")
    p.set_defaults(handler=_cmd_sweep)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fairmedbench.benchmark import sweep
    from fairmedbench.benchmark.studies import load_study

    study = load_study(args.study)
    opts = run_options(args)
    if args.status:
        print(sweep.render_status(sweep.read_status(args.out, study.name)))
        return 0
    if args.dry_run:
        print(sweep.render_plan(sweep.make_plan(study, opts), opts))
        return 0
    with _stage_progress(quiet=False) as step:
        result = sweep.sweep(study, opts, launcher=args.launcher, address=args.address,
                             max_parallel=args.max_parallel, progress=step)
    print(sweep.render_result(result))
    return 1 if result.failed or any(c.status == "failed" for c in result.plan.cells) else 0


def _add_study(sub: Any) -> None:
    p = sub.add_parser("study", help="a swept study's report (tidy Parquet, FairMedFM-style figures, one HTML page)")
    ssub = p.add_subparsers(dest="study_command", required=True)
    r = ssub.add_parser("report", help="aggregate a study's finished runs into a Parquet table, figures and a page",
                        description="Read <out>/studies/<name>/plan.json (written by benchmark sweep) and every "
                                    "finished run it names; write study.parquet/.csv, PNG and SVG figures "
                                    "(ΔAUC/ΔDSC per FM x dataset, ES trade-offs, per-group utility, mitigations vs "
                                    "ERM, Friedman-Nemenyi ranks, fairness laws, imbalance) and study.html.")
    r.add_argument("study", help="a shipped study's name or a study YAML file (as given to benchmark sweep)")
    r.add_argument("--out", default="results", help="the results folder the sweep wrote into")
    r.add_argument("--dest", help="report folder (default: <out>/studies/<name>/report)")
    r.set_defaults(handler=_cmd_study_report)


def _cmd_study_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fairmedbench.benchmark.sweep import study_dir
    from fairmedbench.errors import MissingResourceError
    from fairmedbench.report.study import write_study_report
    from fairmedbench.benchmark.studies import load_study

    study = load_study(args.study)
    folder = study_dir(args.out, study.name)
    plan = folder / "plan.json"
    if not plan.is_file():
        raise MissingResourceError(f"no plan for study {study.name!r} under {args.out}: run benchmark sweep "
                                   f"{args.study} --out {args.out} first")
    rep = write_study_report(plan, Path(args.out), Path(args.dest) if args.dest else folder / "report")
    for line in rep.answers:
        print(f"- {line}")
    for note in rep.notes:
        print(f"note: {note}")
    print(f"table: {rep.parquet} ({len(rep.table)} rows; also {rep.csv.name})\nfigures: {len(rep.figures)} files "
          f"in {rep.figures[0].parent if rep.figures else '-'}\npage: {rep.html}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    rows = LISTERS[args.what]()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)
    table = Table(title=args.what, title_justify="left")
    keys = list(rows[0]) if rows else ["name"]
    for k in keys:
        table.add_column(k)
    for r in rows:
        table.add_row(*[", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v) for v in r.values()])
    console.print(table)
    return 0


def _add_uncertainty(sub: Any) -> None:
    """MC dropout and uncertainty disparity (Lu et al. 2021): `run --mc-samples T` (the usage hparam mc_samples)
    and `evaluate --uncertainty COL|MEASURE` (rejection curves per group and δ of a prediction file)."""
    from fairmedbench.analysis.uncertainty import MEASURES, PAIR_AGGREGATIONS, PERFORMANCE

    class _McSamples(argparse.Action):
        def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
            setattr(namespace, self.dest, values)
            namespace.hparam = [*(getattr(namespace, "hparam", None) or []), f"mc_samples={values}"]

    sub.choices["run"].add_argument(
        "--mc-samples", type=int, action=_McSamples, metavar="T",
        help="MC dropout: T >= 2 stochastic passes of the head at inference (= --hparam mc_samples=T; lp or lora "
             "with --hparam dropout=RATE); scores become the passes' mean, the predictions file gets mc:<t>:<task> "
             "and unc:<measure> columns and each result an `uncertainty` block (rejection curves per group, δ)")
    p = sub.choices["evaluate"]
    g = p.add_argument_group("uncertainty disparity (Lu et al. 2021)")
    g.add_argument("--uncertainty", metavar="COL|MEASURE",
                   help=f"rejection curves per group and δ instead of the metrics: a column with one uncertainty "
                        f"per row, or a measure ({', '.join(MEASURES)}) computed from mc:<t>:<name> MC columns")
    g.add_argument("--retention-step", type=float, default=0.05, help="retention 100%%..50%% in these steps")
    g.add_argument("--uncertainty-pm", choices=PERFORMANCE, default=None,
                   help="performance on the kept cases (default: kappa for multi-class, auc for binary)")
    g.add_argument("--pair-aggregation", choices=PAIR_AGGREGATIONS, default="sum",
                   help="δ over group pairs: sum (Lu et al. Eq. 5) or mean")
    p.set_defaults(handler=_cmd_evaluate_uncertainty)


def uncertainty_patient_column(asked: str | None) -> str | None:
    """--patient-column for the uncertainty analysis: each MC pass is averaged per patient of this column."""
    if asked is not None and asked.strip().lower() == "none":
        return None
    return asked or "patient_id"


def _cmd_evaluate_uncertainty(args: argparse.Namespace) -> int:
    if args.uncertainty is None:
        return _cmd_evaluate(args)
    from fairmedbench.benchmark.uncertainty import delta_rows, evaluate_uncertainty

    if args.demo or len(args.predictions) != 1:
        raise InputError("--uncertainty analyses one prediction file: give --predictions FILE")
    labels = _extend(args.label)
    if len(labels) > 1:
        raise InputError(f"--uncertainty analyses one task: give one --label, not {labels}")
    doc = evaluate_uncertainty(args.predictions[0], args.uncertainty, label=labels[0] if labels else None,
                               scores=_extend(args.score) or None, attributes=_extend(args.attribute) or None,
                               split_column=args.split_column,
                               patient_column=uncertainty_patient_column(args.patient_column),
                               pm=args.uncertainty_pm, retention_step=args.retention_step,
                               pair_aggregation=args.pair_aggregation)
    if args.out:
        from fairmedbench.engine import store

        store.write_json(args.out, doc)
    if args.out_table:
        import pandas as pd

        from fairmedbench.engine import store

        store.write_table(args.out_table, pd.DataFrame(delta_rows(doc)))
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for attr, per in doc["curves"].items():
        for measure, c in per.items():
            r = c["retention"]
            delta = "undefined" if c["delta"] is None else f"{c['delta']:.4f}"
            console.print(f"[bold]{attr} / {measure}: δ = {delta}[/] ({c['pair_aggregation']} over pairs, mean over "
                          f"{len(r)} retention levels; {c['pm']} of the retained cases per group)")
            t = Table()
            t.add_column("retained", justify="right")  # one row per level: a few groups fit any terminal width
            for grp in c["groups"]:
                t.add_column(grp, justify="right")
            for i, x in enumerate(r):
                t.add_row(f"{x:.0%}", *("—" if v["pm"][i] is None else f"{v['pm'][i]:.3f}" for v in c["groups"].values()))
            console.print(t)
            for note in c["notes"]:
                console.print(f"[cyan]note[/] {note}")
    console.print(f"[cyan]note[/] {doc['level']}")
    return 0


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

    site = build_site(args.config, args.out)
    print(f"site: {site / 'index.html'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="benchmark", description="fairmedbench: how fairly do medical-imaging foundation models perform "
                                      "across patient groups?")
    parser.add_argument("--version", action="version", version=f"fairmedbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_run, _add_controls, _add_compare, _add_evaluate, _add_inspect, _add_suite, _add_submit,
                _add_verify, _add_leaderboard, _add_list, _add_describe, _add_splits, _add_docs, _add_sweep,
                _add_study):
        add(sub)
    _add_uncertainty(sub)
    return parser


def route_default(argv: Sequence[str], commands: Sequence[str], default: str) -> list[str]:
    """Insert the default subcommand when the first argument is an option other than help/version."""
    argv = list(argv)
    if default in commands and argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        return [default, *argv]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `benchmark` console script; user errors exit 2 with a one-line message."""
    parser = build_parser()
    commands = list(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
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
