"""RunSpec (what a user asks for) and RunConfig (every input that can change a number, resolved before any
work); the run id is the hash of the RunConfig. RunOptions: where and how to compute, never in the identity."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from fairmedbench.metrics.bootstrap import N_BOOT, N_PERM


@dataclass(frozen=True)
class RunSpec:
    """One requested run: model x dataset x usage x mitigation over seeds. Empty or 'auto' fields are resolved
    (usage from the model and dataset, attributes from the card, precision from the machine)."""

    model: str
    dataset: str
    attributes: tuple[str, ...] = ()
    usage: str = ""
    mitigation: str = "erm"
    seeds: tuple[int, ...] = (0,)
    split_seed: int = 0
    split_file: str | None = None
    weights: str | None = None
    profile: str = "default"
    threshold: str | None = None  # None: the profile's rule, else val_youden
    n_boot: int = N_BOOT
    n_perm: int = N_PERM  # permutations per gap / two-group difference test (0 = no tests)
    precision: str = "auto"
    prompt: str | None = None  # None: bbox for a usage that prompts; a usage that takes no prompt refuses one
    skip_bad: bool = False
    hparams: dict[str, Any] = field(default_factory=dict)
    dataset_options: dict[str, Any] = field(default_factory=dict)
    # sampling after feature extraction (analysis.sampling): a group's share of a fixed-size training set, and
    # a class prevalence imposed in every group of the train or test split
    train_group_share: float | None = None
    share_group: str | None = None  # default: the smallest group of the first attribute in the training split
    train_size: int | None = None  # default: the largest size at which every share from 0 to 1 fits
    prevalence: float | None = None
    prevalence_on: str = "test"
    test_resample: str | None = None  # balanced:ATTR | prevalence:ATTR | matched:ATTR:AGE_BINS, reported beside the test set
    # external evaluation: other datasets' test splits the trained head/decoder is applied to, each
    # "NAME" or "NAME:KEY=VALUE:..." (reader options; `root=DIR` says where its data lives)
    eval_datasets: tuple[str, ...] = ()
    # repeated splits: the test split of `split_seed` is kept, train/val are re-drawn once per split seed
    split_seeds: tuple[int, ...] = ()


def _canonical(value: Any) -> Any:
    """Tuples and dicts as sorted, JSON-ready structures (the run id must not depend on key order)."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


#: RunConfig fields added after run ids were published: absent from the identity while empty
OMITTED_WHEN_EMPTY = ("eval_datasets", "split_seeds")


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

    def identity(self) -> dict[str, Any]:
        """The canonical JSON-ready identity (sorted keys, lists for tuples). The external-evaluation and
        repeated-split fields are left out while empty, so a run that uses neither keeps the id it had."""
        out = asdict(self)
        for name in OMITTED_WHEN_EMPTY:
            if not out[name]:
                del out[name]
        return _canonical(out)

    @property
    def run_id(self) -> str:
        """16 hex digits of sha256 over the canonical JSON identity."""
        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def hparams(self) -> dict[str, Any]:
        """All hyperparameters in one mapping (train, usage, mitigation)."""
        return {**self.train_hparams, **self.usage_hparams, **self.mitigation_hparams}


@dataclass
class RunOptions:
    """Where data, caches and results live and how to compute: none of it changes a number, so none of it is
    in the run's identity (data_root changes the data read, which is: through the data fingerprint)."""

    data_root: str | None = None
    out_root: str = "results"
    cache_dir: str | None = ".fmb-cache"
    device: str = "auto"
    batch_size: int | None = None  # None: engine.device.encoder_batch_size chooses for the device
    num_workers: int | None = None
    channels_last: bool = False
    force: bool = False
    verify_weights: bool = True
    i_know: bool = False  # run even with --seeds / --n-boot above their documented bounds (engine.hparams)
    progress: Callable[[str, int, int], None] | None = None
    log: Callable[[str], None] | None = None

    def say(self, message: str) -> None:
        """Tell the user (stderr by default)."""
        (self.log or (lambda m: print(m, file=sys.stderr)))(message)
