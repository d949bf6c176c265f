"""RunSpec (what a user asks for) and RunConfig (every input that can change a number, resolved before any
work); the run id is the hash of the RunConfig. RunOptions: where and how to compute, never in the identity."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fairmedbench.errors import InputError
from fairmedbench.metrics.defaults import CI_LEVEL, ECE_BINS, MIN_GROUP_SIZE, N_BOOT, N_PERM, THRESHOLD_WITH_VAL

#: the mitigation every other is compared against: plain ERM (mitigation.base.Mitigation)
BASELINE_MITIGATION = "erm"


def option(help: str | None = None, **argparse: Any) -> dict[str, Any]:
    """A field's `benchmark` option, as field metadata (cli.py builds its parsers from the spec types): its help and
    the argparse settings that the field's name and default do not give (flag, metavar, type, a default of None
    meaning 'not given', ...); csv=True: comma-separated names."""
    return {"help": help, **argparse}


@dataclass(frozen=True)
class RunSpec:
    """One requested run: model x dataset x usage x mitigation over seeds. Empty or 'auto' fields are resolved
    (usage from the model and dataset, attributes from the card, precision from the machine)."""

    model: str = field(metadata=option("a model card name (benchmark list models)", required=True))
    dataset: str = field(metadata=option("a dataset card name (benchmark list datasets)", required=True))
    attributes: tuple[str, ...] = field(default=(), metadata=option(
        "sensitive attribute(s) of the dataset card (default: all but binned copies); sex*age crosses two into one "
        "attribute whose groups are the cells (female|>=60); the first is the one mitigations train with",
        flag="--attribute", action="append", csv=True, default=None, metavar="NAMES"))
    usage: str = field(default="", metadata=option(
        "lp | sam-prompt | sam-decoder | ... (default: chosen from the model and dataset; benchmark list usages)",
        default=None))
    mitigation: str = field(default=BASELINE_MITIGATION, metadata=option(
        "erm | resampling | groupdro | ... (list mitigations)"))
    seeds: tuple[int, ...] = field(default=(0,), metadata=option("training seeds: 0,1,2 or 0-4", default=None))
    split_seed: int = field(default=0, metadata=option(
        "seed of the drawn split (default 0; not with --split-file)", type=int, default=None))
    split_file: str | None = field(default=None, metadata=option(
        "an exported split (benchmark splits export) to run on"))
    weights: str | None = field(default=None, metadata=option(
        "PATH, 'random' (smoke tests) or default: the card's source"))
    profile: str = "default"
    threshold: str | None = field(default=None, metadata=option(  # None: the profile's rule, else val_youden
        f"fixed:T | val_best_f1 | val_youden | val_fpr:F | val_tpr:X (default: {THRESHOLD_WITH_VAL}; a profile that "
        "chooses its own threshold, such as fairmedfm, refuses one)", metavar="POLICY"))
    n_boot: int = field(default=N_BOOT, metadata=option("bootstrap resamples (0 = no CIs)"))
    n_perm: int = field(default=N_PERM, metadata=option(
        "permutations testing each gap and two-group difference (0 = no tests)"))
    margin: str | None = field(default=None, metadata=option(
        "equivalence margin of the two-group differences: VALUE, or metric=VALUE pairs (auc=0.02,ece=0.01); a "
        "difference within chance whose 90%% bootstrap interval lies inside ±VALUE reads 'equivalent within ±VALUE' "
        "(two one-sided tests); part of the run's identity", metavar="M"))
    precision: str = field(default="auto", metadata=option(
        "encoder precision: auto = bf16 on CUDA or a CPU that runs bf16 natively (measured once per machine), else "
        "fp32; the choice is printed and recorded"))
    prompt: str | None = field(default=None, metadata=option(  # a usage that takes no prompt refuses one
        "segmentation prompt derived from the ground truth (default bbox; only with a usage that prompts)"))
    skip_bad: bool = field(default=False, metadata=option(
        "skip samples with unmapped attribute values or missing/undecodable files (counted)"))
    hparams: dict[str, Any] = field(default_factory=dict, metadata=option(
        "training, usage or mitigation hyperparameter, e.g. lr=0.01, eta=0.1, box_jitter=0.1; tasks=all adds the "
        "card's extra label columns (e.g. the 14 NIH findings)", flag="--hparam", action="append", default=[],
        metavar="KEY=VALUE"))
    dataset_options: dict[str, Any] = field(default_factory=dict, metadata=option(
        "reader option, e.g. n=200 for a smaller synthetic set (part of the run's identity)",
        flag="--dataset-option", action="append", default=[], metavar="KEY=VALUE"))
    # sampling after feature extraction (analysis.sampling): a group's share of a fixed-size training set, and
    # a class prevalence imposed in every group of the train or test split
    train_group_share: float | None = field(default=None, metadata=option(
        "share S in [0, 1] of --share-group in a training set of fixed size (fairness laws)", type=float,
        metavar="S"))
    share_group: str | None = field(default=None, metadata=option(
        "a group of the first attribute (default: its smallest group in the training split)", metavar="GROUP"))
    train_size: int | None = field(default=None, metadata=option(
        "training set size for --train-group-share (default: the largest at which every share fits)", type=int,
        metavar="N"))
    prevalence: float | None = field(default=None, metadata=option(
        "impose class prevalence P in every group of one split (imbalance study)", type=float, metavar="P"))
    prevalence_on: str = field(default="test", metadata=option(
        "the split --prevalence samples (default test)", choices=["train", "test"], default=None))
    test_resample: str | None = field(default=None, metadata=option(  # reported beside the test set
        "also report a resampled test set: balanced:ATTR (equal group sizes, own prevalence), prevalence:ATTR "
        "(equal positives and negatives per group) or matched:ATTR:AGE_BINS (balanced and age-matched, e.g. "
        "matched:sex:0,40,60,80); seeded by the run seed", metavar="SPEC"))
    # external evaluation: other datasets' test splits the trained head/decoder is applied to, each
    # "NAME" or "NAME:KEY=VALUE:..." (reader options; `root=DIR` says where its data lives)
    eval_datasets: tuple[str, ...] = field(default=(), metadata=option(
        "external evaluation: apply the trained head/decoder to these datasets' test splits too (comma-separated "
        "or repeated; reader options after ':', e.g. nih-cxr14:view=AP; root=DIR for its data) and report their "
        "metrics and the shift from the internal test set; one sharing items with the internal test set is refused "
        "unless it says overlap=paired", flag="--eval-dataset", action="append", default=None,
        metavar="NAME[:KEY=VALUE...]"))
    # repeated splits: the test split of `split_seed` is kept, train/val are re-drawn once per split seed
    split_seeds: tuple[int, ...] = field(default=(), metadata=option(
        "repeated splits, e.g. 0,1,2: the test split of --split-seed is kept and train/val are re-drawn per split "
        "seed (one run each), summarised across splits beside the bootstrap CIs", metavar="SEEDS", default=None))


def _canonical(value: Any) -> Any:
    """Tuples and dicts as sorted, JSON-ready structures (the run id must not depend on key order)."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


#: RunConfig fields added after run ids were published: absent from the identity while empty
OMITTED_WHEN_EMPTY = ("eval_datasets", "split_seeds", "margins")


@dataclass(frozen=True)
class RunConfig:
    """A resolved run. Every field can change a number; nothing else (paths, device, batch size, workers,
    cache location) is here. Built only by `fairmedbench.benchmark.resolve.resolve_run`."""

    engine: str  # fairmedbench version: the metric engine and runners that compute the numbers
    model: str
    weights: str  # 'random:seed=N' or the sha256 of the weights read
    dataset: str
    dataset_version: str
    data_fingerprint: str  # sample table (ids, patients, labels, groups), generator settings, files read
    dataset_options: dict[str, Any]
    skip_bad: bool
    attributes: tuple[str, ...]
    task: str
    usage: str
    usage_hparams: dict[str, Any]  # the usage's own hyperparameters, defaults filled in
    prompt: str | None  # segmentation prompt mode; None for classification
    train_hparams: dict[str, Any]  # the task's training config, defaults filled in
    mitigation: str
    mitigation_hparams: dict[str, Any]
    split_policy: str
    split_seed: int
    split_fingerprint: str  # the split actually used (seeded, official or imported)
    sampling: dict[str, Any]  # analysis.sampling.Sampling.identity(): {} when no split is sampled
    threshold: str  # resolved: the user's policy, the profile's own, or val_youden
    profile: str
    precision: str  # resolved: fp32 or bf16
    n_boot: int
    n_perm: int
    seeds: tuple[int, ...]
    # each external test set: name, reader options, data/split/test fingerprints, attribute alignment
    eval_datasets: tuple[dict[str, Any], ...] = ()
    # () : the split of split_seed as it is; (s,): its test kept, train/val re-drawn with seed s; several: one
    # run per split seed, summarised across splits (benchmark.run.run_split_seeds)
    split_seeds: tuple[int, ...] = ()
    # equivalence margins of the two-group differences (metrics.result.parse_margins): they change the verdict
    margins: dict[str, float] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """The canonical JSON-ready identity (sorted keys, lists for tuples). The external-evaluation and
        repeated-split fields are left out while empty, so a run that uses neither keeps the id it had."""
        out = asdict(self)
        for name in OMITTED_WHEN_EMPTY:
            if not out[name]:
                del out[name]
        canonical: dict[str, Any] = _canonical(out)  # a dict in, a dict out
        return canonical

    @property
    def run_id(self) -> str:
        """16 hex digits of sha256 over the canonical JSON identity."""
        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def hparams(self) -> dict[str, Any]:
        """All hyperparameters in one mapping (train, usage, mitigation)."""
        return {**self.train_hparams, **self.usage_hparams, **self.mitigation_hparams}


#: how a ScoreSettings resamples: whole patients (a table's patient_id column; rows when it has none), or rows
RESAMPLING_UNITS = ("patient", "row")


@dataclass(frozen=True)
class ScoreSettings:
    """Everything besides the predictions that changes a task's scores (Task.score): the metric profile and the
    threshold policy, the resampling unit, resamples, permutations and their seed, the interval rules, how
    attributes become groups, and the classification engine's operating points and ECE bins."""

    profile: str = "default"
    threshold: str | None = None  # a policy (metrics.thresholds); None: the profile's, else val_youden with
    # validation rows and fixed:0.5 without; a task that is not thresholded takes none
    resampling_unit: str = "patient"
    n_boot: int = N_BOOT
    n_perm: int = N_PERM  # permutations per gap / two-group difference test (0 = no tests)
    seed: int = 0
    ci_level: float = CI_LEVEL
    min_group_size: int = MIN_GROUP_SIZE  # the smallest group that gets an interval
    bins: Mapping[str, Sequence[float]] = field(default_factory=dict)  # attribute -> bin edges (metrics.groups.Bins)
    intersect: bool = False  # add the crossing of the attributes
    groups: Mapping[str, Sequence[str]] = field(default_factory=dict)  # attribute -> its groups, in this order
    logits: bool = False  # the scores are logits (the engine applies the sigmoid or softmax)
    margins: Mapping[str, float] = field(default_factory=dict)  # equivalence margins (metrics.result.apply_margins)
    fpr_at_tpr: float = 0.95
    rates_at_fpr: float = 0.2
    ece_bins: int = ECE_BINS
    data_checks: str = "refuse"  # a table the patient/sample-id rules refuse (analysis.data_checks.MODES): refuse
    # it, score it and say so ('override', --i-know), or only record the counts ('record': the caller enforced them)

    def __post_init__(self) -> None:
        if self.resampling_unit not in RESAMPLING_UNITS:
            raise InputError(f"resampling unit {self.resampling_unit!r}: choose one of {', '.join(RESAMPLING_UNITS)}")
        if self.data_checks not in ("refuse", "override", "record"):
            raise InputError(f"data_checks {self.data_checks!r}: choose refuse, override or record")


@dataclass
class RunOptions:
    """Where data, caches and results live and how to compute: none of it changes a number, so none of it is
    in the run's identity (data_root changes the data read, which is: through the data fingerprint)."""

    data_root: str | None = field(default=None, metadata=option(
        "the dataset's folder (default: $FMB_DATA_<NAME>, $FMB_DATA_ROOT/<name>); the data read is fingerprinted "
        "into the run's identity"))
    out_root: str = field(default="results", metadata=option("results folder", flag="--out"))
    cache_dir: str | None = field(default=".fmb-cache", metadata=option("feature cache folder"))
    device: str = field(default="auto", metadata=option("auto | cpu | cuda | cuda:N"))
    batch_size: int | None = field(default=None, metadata=option(  # None: engine.device.encoder_batch_size chooses
        "encoder batch size (default: 2 on a CPU, 16 on a GPU; printed); 2.5D slices on a CPU go in batches of "
        "at least 128 GFLOP, up to 32 slices, where that is larger", type=int))
    num_workers: int | None = field(default=None, metadata=option("data loader workers (default: 0 on CPU)",
                                                                  type=int))
    channels_last: bool = field(default=False, metadata=option("channels-last memory format for the encoder"))
    force: bool = field(default=False, metadata=option("recompute even if this run's result exists"))
    verify_weights: bool = field(default=True, metadata=option(
        "accept --weights whose sha256 differs from the card's (your own fine-tuned checkpoint); the sha256 read is "
        "recorded and is part of the run's identity", flag="--no-verify-weights", dest="verify_weights"))
    i_know: bool = field(default=False, metadata=option(  # engine.hparams.COST_BOUNDS
        "run or sweep above the documented cost bounds (--seeds or --split-seeds 20, --n-boot or --n-perm 10,000; "
        "seeds x split seeds 100, x --n-boot or --n-perm 200,000; a study's fields alike): the estimated time, "
        "bootstrap included, is printed"))
    progress: Callable[[str, int, int], None] | None = None
    log: Callable[[str], None] | None = None

    def say(self, message: str) -> None:
        """Tell the user (stderr by default)."""
        (self.log or (lambda m: print(m, file=sys.stderr)))(message)
