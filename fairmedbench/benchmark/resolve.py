"""From a RunSpec to a RunConfig: every name and hyperparameter checked, then every input that can change a
number resolved (data fingerprint, weights sha256, usage, defaults, split, precision), before any weights load
or features are extracted. The run id is the hash of the RunConfig."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench import __version__
from fairmedbench.engine.hparams import split_by_owner
from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.metrics.defaults import THRESHOLD_WITH_VAL
from fairmedbench.spec import BASELINE_MITIGATION, RunConfig, RunSpec

if TYPE_CHECKING:
    from fairmedbench.adapters.base import Usage
    from fairmedbench.analysis.sampling import Sampling
    from fairmedbench.analysis.shift import EvalRequest
    from fairmedbench.engine.splits import Split
    from fairmedbench.metrics.profiles import Profile
    from fairmedbench.mitigation.base import Mitigation
    from fairmedbench.registry.datasets.card import DatasetCard
    from fairmedbench.registry.datasets.dataset import Dataset
    from fairmedbench.registry.models.card import ModelCard
    from fairmedbench.registry.models.weights import ResolvedWeights
    from fairmedbench.tasks.base import Task
    from fairmedbench.tasks.common import ExternalSet

@dataclass(frozen=True)
class Checked:
    """A RunSpec whose names and hyperparameters are valid (no data read, no weights loaded)."""

    spec: RunSpec
    model_card: ModelCard
    dataset_card: DatasetCard
    usage: Usage
    task: Task
    attributes: tuple[str, ...]
    prompt: str | None
    threshold: str
    train_hparams: dict[str, Any]
    usage_hparams: dict[str, Any]
    mitigation_hparams: dict[str, Any]
    eval_requests: tuple[EvalRequest, ...] = ()
    alignments: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Resolved:
    """A checked run with its data, split and weights located, and its RunConfig."""

    checked: Checked
    config: RunConfig
    dataset: Dataset
    split: Split
    weights: ResolvedWeights
    device: str
    externals: tuple[ExternalSet, ...] = ()


def choose_usage(spec: RunSpec, model_card: ModelCard, dataset_card: DatasetCard) -> str:
    """The usage to run: the one asked for if the model and dataset allow it, else a sensible default."""
    from fairmedbench.adapters import USAGES, compatible_usages

    possible = compatible_usages(model_card.capabilities, dataset_card.tasks)
    if spec.usage:
        usage = USAGES.get(spec.usage)
        if spec.usage not in possible:
            why = (f"dataset {dataset_card.name!r} offers {', '.join(dataset_card.tasks)}, not "
                   f"{' or '.join(usage.tasks)}" if not set(usage.tasks) & set(dataset_card.tasks) else
                   f"model {model_card.name!r} can {', '.join(model_card.capabilities)}; {spec.usage!r} needs "
                   f"{', '.join(usage.requires)}")
            raise InputError(f"usage {spec.usage!r} cannot run here: {why}. Possible usages for this model "
                             f"and dataset: {', '.join(possible) or 'none'}")
        return spec.usage
    for task in dataset_card.tasks:  # the usages' own default_rank decides: no task is named here
        ranked = [u for u in map(USAGES.get, possible) if task in u.tasks and u.default_rank is not None]
        if ranked:
            return min(ranked, key=lambda u: u.default_rank or 0).name
    raise InputError(f"model {model_card.name!r} ({', '.join(model_card.capabilities)}) has no usage for dataset "
                     f"{dataset_card.name!r} ({', '.join(dataset_card.tasks)})")


def _check_routed(spec: RunSpec, dcard: DatasetCard, usage: Usage, task: Task, train_defaults: dict[str, Any],
                  train_h: dict[str, Any], usage_h: dict[str, Any]) -> None:
    """The training and usage hyperparameters once routed to their owners: none that changes no number, a valid
    slice policy, tasks=all only where the card has extra labels, a selection rule of the task."""
    from fairmedbench.adapters.volumes import volume_settings

    if not usage.learns:  # `tasks` (the task's own hparam) chooses label columns, which every usage reads
        unused = sorted(k for k in spec.hparams if k in train_defaults and k not in dict(task.extra_hparams)
                        and train_h[k] != train_defaults[k])
        if unused:
            raise InputError(f"hparam {', '.join(unused)} set how a head or decoder trains; usage {usage.name!r} "
                             "learns nothing from the train split, so it would change the run id and no number: "
                             "drop it")
    if "slices" in usage_h:
        volume_settings(usage_h)  # validates the slice policy and the aggregation
    if train_h.get("tasks") == "all":
        if not dcard.extra_label_columns:
            raise InputError(f"hparam tasks=all adds the dataset card's extra label columns; {dcard.name!r} has none "
                             "(its run would be the tasks=main run under another id): drop it")
        if usage_h.get("slice_agg") == "max":
            raise InputError("slice_agg=max (the default on volumes) picks one slice by the first label's probability; "
                             "with tasks=all give --hparam slice_agg=mean or slice_agg=attention")
    if train_h["select"] not in task.select_rules:
        raise InputError(f"select={train_h['select']!r} does not apply to {task.name}: choose one of "
                         f"{', '.join(task.select_rules)}")


def _check_plugin(spec: RunSpec, usage: Usage, task: Task, profile: Profile, mit_h: dict[str, Any]) -> Mitigation:
    """The mitigation built from its hyperparameters (validating them) and checked against the task, the usage
    and the threshold settings."""
    from fairmedbench.mitigation import make_mitigation

    plugin = make_mitigation(spec.mitigation, **mit_h)  # validates the values (ranges, choices)
    plugin.check_task(task)
    if plugin.needs_trainable_representation and usage.caches_features:
        raise InputError(f"mitigation {plugin.name!r} does not apply to usage {usage.name!r}: "
                         f"{plugin.needs_trainable_representation}")
    if plugin.threshold_policy and (spec.threshold is not None or profile.threshold_policy):
        raise InputError(f"mitigation {plugin.name!r} sets the operating point itself (per-group thresholds chosen by "
                         f"its policy={plugin.hparams.get('policy')!r}), so "
                         f"{'--threshold ' + spec.threshold if spec.threshold else f'profile {profile.name!r}'} would "
                         f"{'be ignored' if spec.threshold else 'undo it'}: use --hparam policy=POLICY and the default "
                         "profile")
    return plugin


def check_spec(spec: RunSpec) -> Checked:
    """Every name, option and hyperparameter of `spec` validated; cheap (cards and registries only)."""
    from fairmedbench.adapters import USAGES
    from fairmedbench.adapters.volumes import VOLUME_HPARAMS
    from fairmedbench.analysis.sampling import check_request
    from fairmedbench.metrics.profiles import check_threshold, get_profile
    from fairmedbench.metrics.result import parse_margins
    from fairmedbench.metrics.thresholds import parse_policy
    from fairmedbench.mitigation import MITIGATIONS
    from fairmedbench.registry.datasets import get_card as dataset_card
    from fairmedbench.registry.models import get_card as model_card
    from fairmedbench.tasks.base import get_task

    mcard, dcard = model_card(spec.model), dataset_card(spec.dataset)
    if not mcard.available:
        raise MissingResourceError(f"model {mcard.name!r} cannot be built in this version: {mcard.notes}")
    usage = USAGES.get(choose_usage(spec, mcard, dcard))
    task = get_task(usage.task_for(dcard.tasks))
    _check_dimensions(mcard, dcard, usage, task)
    attributes = tuple(spec.attributes) or tuple(a.name for a in dcard.attributes if not a.name.endswith("_bins"))
    for a in attributes:
        dcard.attribute_parts(a)  # a crossed attribute (sex*age) is checked part by part
    if len(set(attributes)) != len(attributes):
        raise InputError(f"--attribute lists {', '.join(attributes)}: give each attribute once")
    MITIGATIONS.get(spec.mitigation)
    if spec.mitigation != BASELINE_MITIGATION and not usage.learns:
        learning = [n for n in USAGES.names() if task.name in USAGES.get(n).tasks and USAGES.get(n).learns]
        raise InputError(f"mitigation {spec.mitigation!r} needs a usage that learns from the train split: "
                         f"{usage.name!r} learns nothing; use --usage {' or '.join(learning)}, or --mitigation erm")
    profile = get_profile(spec.profile)
    if profile.tasks and task.name not in profile.tasks:
        raise InputError(f"metric profile {profile.name!r} applies to {' and '.join(profile.tasks)} runs; this run is "
                         f"{task.name} (its numbers would be the default profile's): use --profile default")
    check_threshold(profile, spec.threshold)
    if spec.threshold is not None and not task.thresholded:
        raise InputError(f"--threshold {spec.threshold}: a {task.name} run chooses no decision threshold (the argmax "
                         "over classes, or mask logits > 0, decides); drop --threshold")
    threshold = profile.threshold_policy or spec.threshold or THRESHOLD_WITH_VAL
    parse_policy(threshold)
    parse_margins(spec.margin)  # a bad --margin fails here, before any work
    if spec.n_boot < 0:
        raise InputError(f"--n-boot must be >= 0, got {spec.n_boot}")
    if spec.n_perm < 0:
        raise InputError(f"--n-perm must be >= 0 (0 = no permutation tests), got {spec.n_perm}")
    if not spec.seeds or len(set(spec.seeds)) != len(spec.seeds):
        raise InputError(f"--seeds {spec.seeds}: give distinct seeds")
    prompt = _check_prompt(spec.prompt, mcard, usage)
    train_defaults = {**task.config_defaults(), **usage.train_defaults}
    mit_defaults = dict(getattr(MITIGATIONS.get(spec.mitigation), "DEFAULTS", {}))
    usage_defaults = dict(usage.hparams)
    if usage.volumes and dcard.dim == 3:  # 2.5D: slice policy and aggregation are part of the run
        usage_defaults.update(VOLUME_HPARAMS)
    elif set(VOLUME_HPARAMS) & set(spec.hparams):
        raise InputError(f"hparam {', '.join(sorted(set(VOLUME_HPARAMS) & set(spec.hparams)))} applies to 3D datasets "
                         f"(a classification usage on volumes); {dcard.name!r} is {dcard.dim}D and usage "
                         f"{usage.name!r} {'runs on volumes' if usage.volumes else 'does not run slice by slice'}")
    usage.check_hparams(spec.hparams)
    routed = split_by_owner(spec.hparams, {f"{task.name} training": train_defaults,
                                           f"usage {usage.name!r}": usage_defaults,
                                           f"mitigation {spec.mitigation!r}": mit_defaults})
    train_h, usage_h, mit_h = routed.values()
    _check_routed(spec, dcard, usage, task, train_defaults, train_h, usage_h)
    plugin = _check_plugin(spec, usage, task, profile, mit_h)
    if prompt is not None and prompt != "bbox" and usage_h.get("box_jitter"):
        raise InputError(f"hparam box_jitter moves the edges of box prompts; --prompt {prompt} gives points, so it "
                         "would change the run id and no number: drop it, or use --prompt bbox")
    _check_config(task, train_h)
    check_request(spec.train_group_share, spec.share_group, spec.train_size, spec.prevalence, spec.prevalence_on,
                  attributes, task)
    if spec.test_resample is not None:
        test_resample_age_column(spec.test_resample, dcard, attributes, task)
    requests, alignments = check_eval_datasets(spec, dcard, task, attributes, train_h.get("tasks", "main"))
    check_split_seeds(spec)
    return Checked(spec, mcard, dcard, usage, task, attributes, prompt, threshold, train_h, usage_h,
                   dict(plugin.hparams), requests, alignments)


def check_eval_datasets(spec: RunSpec, dcard: DatasetCard, task: Task, attributes: tuple[str, ...],
                        label_columns: str) -> tuple[tuple[EvalRequest, ...], tuple[dict[str, Any], ...]]:
    """Each --eval-dataset parsed and aligned with the run's dataset through the cards (same task, classes,
    attribute groups), or InputError saying what cannot be aligned; cheap (cards only)."""
    from fairmedbench.analysis.shift import EvalRequest, check_alignment, parse_eval_dataset
    from fairmedbench.registry.datasets import get_card as dataset_card

    requests = tuple(parse_eval_dataset(t) for t in spec.eval_datasets)
    labels = [r.label for r in requests]
    if len(set(labels)) != len(labels):
        raise InputError(f"--eval-dataset lists {', '.join(labels)}: give each external dataset once")
    mine = EvalRequest(dcard.name, dcard.name, dict(spec.dataset_options)).label
    if mine in labels:
        raise InputError(f"--eval-dataset {mine} is the run's own dataset; its test split is already "
                         "evaluated: give another dataset or other reader options (e.g. nih-cxr14:view=AP)")
    if requests and spec.prevalence is not None and spec.prevalence_on == "test":
        raise InputError("--eval-dataset with --prevalence-on test: the internal test set would be resampled and the "
                         "external ones not, so their shift would mix the two; use --prevalence-on train")
    aligned = tuple(check_alignment(dcard, dataset_card(r.name), task.name, attributes, label_columns, r.text,
                                    task.sample_labels)
                    for r in requests)
    return requests, aligned


def check_split_seeds(spec: RunSpec) -> None:
    """--split-seeds: distinct integers >= 0, not with an imported split file (whose train/val are fixed)."""
    seeds = spec.split_seeds
    if not seeds:
        return
    if len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise InputError(f"--split-seeds {','.join(map(str, seeds))}: give distinct integers >= 0")
    if spec.split_file:
        raise InputError("--split-seeds re-draws train/val; --split-file fixes them: give one of the two")


def _check_dimensions(mcard: ModelCard, dcard: DatasetCard, usage: Usage, task: Task) -> None:
    """A native 3D model runs only on 3D data (its usages are limited by its capabilities: it only segments); a
    2D model's classification usage runs on volumes only if it encodes them slice by slice (2.5D)."""
    if mcard.preprocessing.depth:
        if dcard.dim != 3:
            raise InputError(f"model {mcard.name!r} segments 3D volumes; dataset {dcard.name!r} is {dcard.dim}D. Use "
                             "a 3D dataset (e.g. synth3d-contrast) or a 2D model (e.g. litemedsam)")
    elif dcard.dim == 3 and task.sample_labels and not usage.volumes:
        raise InputError(f"usage {usage.name!r} does not run on 3D volumes; dataset {dcard.name!r} is 3D: use a "
                         "classification usage that encodes slices (benchmark list usages)")


def _check_prompt(given: str | None, mcard: ModelCard, usage: Usage) -> str | None:
    """The run's prompt mode: the one given (default bbox) when the usage and the model take it; None for a usage
    that takes no prompt, which refuses one (it would be ignored)."""
    from fairmedbench.adapters import USAGES

    if not usage.prompt_modes:
        if given is not None:
            prompting = [n for n in USAGES.names() if USAGES.get(n).prompt_modes]
            raise InputError(f"--prompt {given}: usage {usage.name!r} takes no prompt; prompts go with --usage "
                             f"{' or '.join(prompting)}: drop --prompt")
        return None
    prompt = given or ("bbox" if "bbox" in usage.prompt_modes else usage.prompt_modes[0])
    if prompt not in usage.prompt_modes:
        raise InputError(f"usage {usage.name!r} prompts with {', '.join(usage.prompt_modes)}, not {prompt!r}; give "
                         f"--prompt {usage.prompt_modes[0]}")
    if mcard.prompt_modes and prompt not in mcard.prompt_modes:
        raise InputError(f"model {mcard.name!r} takes {', '.join(mcard.prompt_modes)} prompts, not {prompt}"
                         f"{' (the default)' if given is None else ''}: its prompt encoder has no "
                         f"{'box' if prompt == 'bbox' else 'point'} embedding; give --prompt {mcard.prompt_modes[-1]}")
    return prompt


def _check_config(task: Task, values: dict[str, Any]) -> None:
    """Ranges of the training config: sizes >= 1 (epochs >= 0), rates >= 0 (lr > 0), task hparams' choices."""
    for name in ("epochs", "patience", "batch_size"):
        v = values.get(name)
        if v is not None and v < (0 if name == "epochs" else 1):
            raise InputError(f"{task.name} training: {name}={v!r} must be an integer >= {0 if name == 'epochs' else 1}")
    for name in ("lr", "weight_decay"):
        v = values.get(name)
        if v is not None and not (v >= 0 and (name != "lr" or v > 0) and v != float("inf")):
            raise InputError(f"{task.name} training: {name}={v!r} must be a number {'> 0' if name == 'lr' else '>= 0'}")
    if "tasks" in values and values["tasks"] not in ("main", "all"):
        raise InputError(f"hparam tasks={values['tasks']!r}: 'main' (the card's label) or 'all' (its extra labels)")


def files_fingerprint(ds: Dataset) -> str:
    """sha256 over the bytes of every file the samples read (metadata, images, masks: path relative to the data root
    and BLAKE2b of the content, cached by engine.content), or '' when the samples are generated (synthetic: the
    generator settings are in the dataset fingerprint)."""
    from fairmedbench.engine.content import file_digests

    files = ds.data_files()
    if not files:
        return ""
    digests = file_digests(p for _, p in files if os.path.isfile(p))  # an absent file fails at its decode
    h = hashlib.sha256()
    root = str(ds.root) if ds.root else ""
    for kind, path in files:
        rel = os.path.relpath(path, root) if root and path.startswith(root) else path
        h.update(f"{kind}|{rel}|{digests.get(path, 'absent')}\n".encode())
    return h.hexdigest()


def test_resample_age_column(text: str, dcard: DatasetCard, attributes: tuple[str, ...], task: Task) -> str | None:
    """Check a --test-resample spec against the run (its attribute is one of the run's, the task has labels);
    for `matched`, the raw numeric age column: the card's binned attribute named age."""
    from fairmedbench.analysis.resample import matched_age_column, parse_test_resample

    rs = parse_test_resample(text)
    if not task.samples_splits:
        raise InputError(f"--test-resample resamples a test set with binary labels; this run's task is {task.name}")
    if rs.attribute not in attributes:
        raise InputError(f"--test-resample {text}: attribute {rs.attribute!r} is not one of this run's "
                         f"({', '.join(attributes)}); add --attribute {rs.attribute}")
    return matched_age_column(rs, dcard)


def resolve_sampling(spec: RunSpec, checked: Checked, ds: Dataset, split: Split) -> Sampling:
    """The run's sampling with its defaults (share group, training size) read from the training split."""
    from fairmedbench.analysis.sampling import resolve

    groups = (ds.samples[f"attr:{checked.attributes[0]}"].to_numpy() if checked.attributes
              else np.full(len(ds.samples), None, dtype=object))
    resample = None
    if spec.test_resample is not None:
        from fairmedbench.analysis.resample import parse_test_resample

        resample = str(parse_test_resample(spec.test_resample))  # canonical: one spelling, one run id
    return resolve(spec.train_group_share, spec.share_group, spec.train_size, spec.prevalence, spec.prevalence_on,
                   groups, split.train, resample)


def _check_training_groups(checked: Checked, ds: Dataset, split: Split) -> None:
    """A mitigation that trains with the group of every training sample refuses, before any encode, a training
    split where some sample has no value of the run's first attribute (its group code would be -1)."""
    from fairmedbench.mitigation import make_mitigation

    plugin = make_mitigation(checked.spec.mitigation, **checked.mitigation_hparams)
    if not plugin.needs_attribute_at_training or not checked.attributes:
        return
    attr = checked.attributes[0]
    values = ds.samples[f"attr:{attr}"].to_numpy()[split.train]
    missing = int(sum(not isinstance(v, str) for v in values))
    if missing:
        raise InputError(f"mitigation {plugin.name!r} trains with each training sample's {attr} group, but {missing} "
                         f"of {len(values)} training samples have no {attr} value; choose an attribute every sample "
                         "has (--attribute), or --mitigation erm")


def _check_seeds_matter(checked: Checked, n_train: int, sampled: bool, seeds: tuple[int, ...]) -> None:
    """Refuse several seeds that cannot change a number, before any work: a usage with no random initialisation
    (clip-adapt: the text prototypes; anomaly: a closed-form scorer) on an unsampled training split, with a
    mitigation that draws nothing of its own (no resampling, no extra module), when it takes no gradient step or
    its training split fits in one minibatch (the same full-batch steps whatever the seed)."""
    from fairmedbench.mitigation import MITIGATIONS
    from fairmedbench.mitigation.base import Mitigation

    usage = checked.usage
    if len(seeds) < 2 or usage.seeded_init or sampled:
        return
    cls = MITIGATIONS.get(checked.spec.mitigation)
    if cls.epoch_indices is not Mitigation.epoch_indices or cls.extra_parameters is not Mitigation.extra_parameters:
        return
    batch = int(checked.train_hparams.get("batch_size", 0))
    if usage.learns and n_train > batch:
        return
    why, fix = ((f"its {n_train} training samples fit in one minibatch of {batch}",
                 f", or --hparam batch_size=N below {n_train} (the seed then orders the minibatches)")
                if usage.learns else ("it takes no gradient step", ""))
    raise InputError(
        f"usage {usage.name!r} has no random initialisation and {why}, so with mitigation "
        f"{checked.spec.mitigation!r} every seed trains the same head: seeds {', '.join(map(str, seeds))} would give "
        f"identical numbers and zero-width intervals. Give one seed{fix}, or sample the training set "
        "(--train-group-share or --prevalence: the seed draws the sample)")


def resolve_run(spec: RunSpec, *, data_root: str | None = None, device: str = "auto",
                verify_weights: bool = True) -> Resolved:
    """Check `spec`, read the dataset's table and split, locate the weights and resolve the precision: the
    RunConfig whose hash is the run id. Loads no model and extracts nothing."""
    from fairmedbench.benchmark.datasets import load_with_split
    from fairmedbench.engine.device import resolve_precision, select_device
    from fairmedbench.engine.store import sha256_file
    from fairmedbench.metrics.result import parse_margins
    from fairmedbench.registry.models.weights import resolve_weights

    checked = check_spec(spec)
    if spec.split_file and not Path(spec.split_file).is_file():
        raise MissingResourceError(f"split file {spec.split_file} not found; write one with benchmark splits export")
    weights = resolve_weights(checked.model_card, spec.weights, verify=verify_weights)
    ds, split = load_with_split(spec.dataset, data_root, seed=spec.split_seed, split_file=spec.split_file,
                                skip_bad=spec.skip_bad, **spec.dataset_options)
    ds.add_crossed(checked.attributes)
    files = files_fingerprint(ds)
    data_fp = hashlib.sha256(f"{ds.fingerprint}|{files}".encode()).hexdigest()
    split_fp = split.fingerprint + (f"|file:{sha256_file(spec.split_file)}" if spec.split_file else "")
    if len(spec.split_seeds) == 1:  # the test split of split_seed, train/val re-drawn with this split seed
        from fairmedbench.engine.splits import redraw_train_val

        split = redraw_train_val(split, ds.samples["sample_id"].to_numpy(), ds.samples["patient_id"].to_numpy(),
                                 ds.strata(None), spec.split_seeds[0])
        split_fp = split.fingerprint
    _check_training_groups(checked, ds, split)
    sampling = resolve_sampling(spec, checked, ds, split)
    _check_seeds_matter(checked, len(split.train), sampling.active, spec.seeds)
    externals, eval_meta = _load_externals(spec, checked, data_root, ds, split)
    device = select_device(device)  # after every refusal: the precision probe prints its choice
    precision = resolve_precision(spec.precision, device)
    config = RunConfig(
        engine=__version__, model=checked.model_card.name, weights=weights.identity, dataset=checked.dataset_card.name,
        dataset_version=checked.dataset_card.version, data_fingerprint=data_fp,
        dataset_options=dict(spec.dataset_options), skip_bad=spec.skip_bad, attributes=checked.attributes,
        task=checked.task.name, usage=checked.usage.name, usage_hparams=checked.usage_hparams, prompt=checked.prompt,
        train_hparams=checked.train_hparams, mitigation=spec.mitigation,
        mitigation_hparams=checked.mitigation_hparams, split_policy=split.policy,
        split_seed=spec.split_seed if not spec.split_file else -1, split_fingerprint=split_fp,
        sampling=sampling.identity(),
        threshold=checked.threshold, profile=spec.profile, precision=precision, n_boot=spec.n_boot,
        n_perm=spec.n_perm, seeds=tuple(spec.seeds), eval_datasets=eval_meta, split_seeds=tuple(spec.split_seeds),
        margins=parse_margins(spec.margin) or dict(checked.dataset_card.margins))
    return Resolved(checked, config, ds, split, weights, device, externals)


def whole_as_test(ds: Dataset) -> Split:
    """Every sample of `ds` as the test split (an external dataset evaluated whole: `split=all`)."""
    from fairmedbench.engine.splits import Split

    ids = tuple(ds.samples["sample_id"].astype(str))
    empty = np.zeros(0, dtype=np.int64)
    return Split({"train": (), "val": (), "test": ids}, "all-as-test", None, ds.card.name, ds.fingerprint,
                 {"train": empty, "val": empty, "test": np.arange(len(ids), dtype=np.int64)})


def _load_externals(spec: RunSpec, checked: Checked, data_root: str | None, internal: Dataset, internal_split: Split
                    ) -> tuple[tuple[ExternalSet, ...], tuple[dict[str, Any], ...]]:
    """Each external dataset's table and split (its own card's default policy, the run's split seed), checked for
    items shared with the run's dataset (`analysis.shift.find_overlap`: refused, or paired with overlap=paired), and
    its identity: name, options, the fingerprints of the data read and of its test split, the alignment (and the
    shared items' count when paired). The run's --data-root serves an external dataset of the same card unless its
    `root=` says otherwise."""
    from fairmedbench.analysis.shift import check_overlap, find_overlap
    from fairmedbench.benchmark.datasets import load_with_split
    from fairmedbench.engine.splits import test_fingerprint
    from fairmedbench.tasks.common import ExternalSet

    trained = np.concatenate([internal_split.train, internal_split.val]).astype(np.int64)

    externals, meta = [], []
    for req, alignment in zip(checked.eval_requests, checked.alignments):
        root = req.root or (data_root if req.name == checked.dataset_card.name else None)
        if req.split == "all":  # every sample is evaluated (none of an external dataset is trained on)
            from fairmedbench.registry.datasets import load_dataset

            ds = load_dataset(req.name, root, skip_bad=spec.skip_bad, **req.options)
            split = whole_as_test(ds)
        else:
            ds, split = load_with_split(req.name, root, seed=spec.split_seed, skip_bad=spec.skip_bad, **req.options)
        if not len(split.test):
            raise InputError(f"--eval-dataset {req.text}: its test split is empty")
        ds.add_crossed(checked.attributes)
        data_fp = hashlib.sha256(f"{ds.fingerprint}|{files_fingerprint(ds)}".encode()).hexdigest()
        overlap = find_overlap(internal, internal_split.test, trained, ds, split.test)
        check_overlap(req, overlap)
        paired = req.overlap == "paired"
        externals.append(ExternalSet(req.label, ds, split, overlap.pairs if paired else None))
        meta.append({"dataset": req.name, "options": dict(req.options), "label": req.label, "split": req.split,
                     "data_fingerprint": data_fp, "split_policy": split.policy, "split_fingerprint": split.fingerprint,
                     "test_fingerprint": test_fingerprint(split.ids["test"]), "alignment": alignment,
                     **({"overlap": {"resampling": "paired", "n_shared": overlap.n_test}} if paired else {})})
    return tuple(externals), tuple(meta)
