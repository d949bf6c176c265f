"""Studies: a grid of runs written as YAML, validated with errors that name the file and line, expanded into
RunSpecs (incompatible cells skipped with their reason, never failed).

A study file (shipped ones: `fairmedbench/studies/*.yaml`, package data; see `shipped_studies()`):

    name: smoke                      # default: the file's stem
    description: ...
    models: [moco-cxr, c2l]          # model cards (benchmark list models)
    datasets: [synth-control]        # dataset cards (benchmark list datasets)
    attributes: [sex]                # default: every attribute of each dataset's card
    usages: [lp, clip-zs]            # default: [auto] (the usage `benchmark run` would choose)
    prompts: [bbox, center]          # segmentation prompt modes; each usage that prompts gets those it accepts
    mitigations: [erm, groupdro]     # default: [erm]
    seeds: [0, 1, 2]                 # or "0-4"; every run trains once per seed
    hparams: {epochs: 5}             # one mapping for every cell, or a list of mappings (an axis)
    split_seed: 0                    # settings of every run (RunSpec fields; left out: RunSpec's defaults)
    n_boot: 500                      # bootstrap resamples per interval
    n_perm: 200                      # permutations per gap / difference test (0 = none)
    margin: 0.05                     # or {auc: 0.02, ece: 0.01}: equivalence margin of the two-group differences
                                     #   (`benchmark run --margin`; part of each run's identity)
    profile: default
    weights: random                  # null: each card's own weights; 'random' for smoke tests
    precision: fp32
    dataset_options: {n: 40}         # reader options for every dataset (part of the run's identity)
    train_group_share: [0, 0.5, 1]   # sweep: share of `share_group` (first attribute) in a training set of
    share_group: female              #   `train_size` samples (defaults: RunSpec's: the smallest group, the
    train_size: 200                  #   largest size at which every share fits)
    prevalence: [0.05, 0.25]         # sweep: class prevalence, in (0, 1), of the `prevalence_on` split
    prevalence_on: train             #   train | test (default: RunSpec's)
    eval_datasets: [synth-flip, "nih-cxr14:view=AP"]   # external evaluation of every cell's trained model on
                                     #   these datasets' test splits (`benchmark run --eval-dataset`); a cell whose
                                     #   dataset cannot be aligned with them is skipped with the reason
    split_seeds: [0, 1, 2]           # sweep: repeated splits, one run per split seed (the test split of
                                     #   split_seed kept, train/val re-drawn; `benchmark run --split-seeds`)
    include: [{usage: lp}]           # rules (below)
    exclude: [{usage: lora, mitigation: [groupdro, resampling]}]

Cells are the product of models x datasets x usages x prompts x mitigations x hparams x train_group_share x
prevalence x split_seeds. A cell is skipped, with its reason, when the usage is not possible for the model and dataset,
a 3D
model meets 2D data, a mitigation meets a usage that learns nothing or a task it does not serve, or anything
else `benchmark.resolve.check_spec` refuses (its message becomes the reason).

Rules: a rule is a mapping from a field to a value or a list of values; a cell matches a rule when every field
matches (its value is one of those listed). Fields: the cell's (model, dataset, usage, prompt, mitigation,
train_group_share, prevalence) and the cards' `kind` (model kind: vision | vision-language | segmentation),
`task` (the usage's task) and `dim` (the dataset's, 2 or 3). `exclude`: a cell matching any rule is skipped.
`include`: when given, a cell must match at least one rule, else it is skipped.

`benchmark.sweep` runs the cells; each is validated with `benchmark.resolve.check_spec` first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from fairmedbench.errors import InputError
from fairmedbench.spec import RunSpec

if TYPE_CHECKING:
    import yaml

    from fairmedbench.registry.datasets.card import DatasetCard
    from fairmedbench.registry.models.card import ModelCard

#: the shipped study files: package data beside the package's modules, not a package of their own
STUDY_DIR = Path(__file__).resolve().parents[1] / "studies"
RULE_FIELDS = ("model", "dataset", "usage", "prompt", "mitigation", "train_group_share", "prevalence", "kind", "task",
               "dim")
CELL_FIELDS = ("model", "dataset", "usage", "mitigation", "prompt", "attributes", "seeds", "hparams",
               "train_group_share", "share_group", "train_size", "prevalence", "prevalence_on")


class StudyError(InputError):
    """A study file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Rule:
    """One include/exclude rule: field -> allowed values; `line` where it was written."""

    match: dict[str, tuple[Any, ...]]
    line: int

    def matches(self, facts: dict[str, Any]) -> bool:
        """Every field of the rule holds one of its listed values in `facts`."""
        return all(facts.get(k) in v for k, v in self.match.items())

    def describe(self) -> str:
        parts = [f"{k}={'|'.join(str(x) for x in v)}" for k, v in self.match.items()]
        return f"{{{', '.join(parts)}}} (line {self.line})"


@dataclass(frozen=True)
class Study:
    """A validated study file."""

    name: str
    source: str
    sha256: str
    models: tuple[str, ...]
    datasets: tuple[str, ...]
    attributes: tuple[str, ...] = ()
    usages: tuple[str, ...] = (RunSpec.usage,)  # "": chosen from the model and dataset
    prompts: tuple[str, ...] = ("bbox",)
    mitigations: tuple[str, ...] = (RunSpec.mitigation,)
    seeds: tuple[int, ...] = RunSpec.seeds
    hparams: tuple[dict[str, Any], ...] = ({},)
    split_seed: int = RunSpec.split_seed
    n_boot: int = RunSpec.n_boot
    n_perm: int = RunSpec.n_perm
    margin: str | None = RunSpec.margin  # as `--margin` takes it: '0.05' or 'auc=0.02,ece=0.01'
    profile: str = RunSpec.profile
    weights: str | None = RunSpec.weights
    precision: str = RunSpec.precision
    dataset_options: dict[str, Any] = field(default_factory=dict)
    train_group_share: tuple[float | None, ...] = (None,)
    share_group: str | None = None
    train_size: int | None = None
    prevalence: tuple[float | None, ...] = (None,)
    prevalence_on: str | None = None  # None: RunSpec's default
    eval_datasets: tuple[str, ...] = ()
    split_seeds: tuple[int | None, ...] = (None,)  # None: the split of split_seed as it is
    include: tuple[Rule, ...] = ()
    exclude: tuple[Rule, ...] = ()
    description: str = ""


@dataclass
class Cell:
    """One point of the grid: the RunSpec to run, or the reason it is skipped."""

    fields: dict[str, Any]
    spec: Any = None  # RunSpec when runnable
    reason: str | None = None

    @property
    def runnable(self) -> bool:
        return self.reason is None


# ----------------------------------------------------------------------------------------------------------- load

def shipped_studies() -> list[str]:
    """Names of the studies shipped with the package."""
    return sorted(p.stem for p in STUDY_DIR.glob("*.yaml"))


def study_path(name_or_path: str) -> Path:
    """A shipped study's file, or the path given; StudyError when neither exists."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise StudyError(f"study file {p} not found")
        return p
    shipped = STUDY_DIR / f"{name_or_path}.yaml"
    if shipped.is_file():
        return shipped
    raise StudyError(f"no study {name_or_path!r}: give a YAML file or a shipped study ({', '.join(shipped_studies())})")


def load_study(name_or_path: str) -> Study:
    """Read and validate a study (shipped name or path); StudyError naming the file and line on bad input."""
    import yaml

    path = study_path(name_or_path)
    text = path.read_text()
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise StudyError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    return _Parser(path, text).study(root)


class _Parser:
    """Builds a Study from YAML nodes, each error naming `file:line`."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text

    def fail(self, node: yaml.Node | None, message: str) -> StudyError:
        line = node.start_mark.line + 1 if node is not None else 1
        return StudyError(f"{self.path}:{line}: {message}")

    def scalar(self, node: yaml.Node, what: str) -> Any:
        import yaml

        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, f"{what}: expected a single value, got a {_kind(node)}")
        return yaml.safe_load(yaml.serialize(node)) if node.tag != "tag:yaml.org,2002:str" else node.value

    def plain(self, node: yaml.Node) -> Any:
        """Any node as plain Python (mappings, lists, scalars)."""
        import yaml

        return yaml.safe_load(yaml.serialize(node))

    def items(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        """A list node's items (a single scalar counts as a one-item list)."""
        import yaml

        if isinstance(node, yaml.SequenceNode):
            if not node.value:
                raise self.fail(node, f"{what}: the list is empty")
            return list(node.value)
        if isinstance(node, yaml.ScalarNode):
            return [node]
        raise self.fail(node, f"{what}: expected a list, got a mapping")

    def names(self, node: yaml.Node, what: str, known: list[str], extra: tuple[str, ...] = ()) -> tuple[str, ...]:
        out = []
        for item in self.items(node, what):
            value = self.scalar(item, what)
            if not isinstance(value, str):
                raise self.fail(item, f"{what}: expected a name, got {value!r} ({type(value).__name__})")
            if value not in known and value not in extra:
                import difflib

                close = difflib.get_close_matches(value, known, n=3, cutoff=0.5)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise self.fail(item, f"unknown {what[:-1] if what.endswith('s') else what} {value!r}.{hint} "
                                      f"Known: {', '.join(known + list(extra))}")
            if value in out:
                raise self.fail(item, f"{what}: {value!r} is listed twice")
            out.append(value)
        return tuple(out)

    def number(self, node: yaml.Node, what: str, kind: type, check: Callable[[Any], bool], rule: str) -> Any:
        value = self.scalar(node, what)
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if isinstance(value, bool) or not ok or not check(value):
            raise self.fail(node, f"{what}: expected {rule}, got {value!r}")
        return float(value) if kind is float else value

    def floats(self, node: yaml.Node, what: str, check: Callable[[float], bool], rule: str) -> tuple[float, ...]:
        vals = [self.number(n, what, float, check, rule) for n in self.items(node, what)]
        if len(set(vals)) != len(vals):
            raise self.fail(node, f"{what}: values repeat")
        return tuple(vals)

    def margin(self, node: yaml.Node) -> str:
        """`margin:` as `--margin` takes it: one number for every difference, or a mapping of metric to number."""
        import yaml

        from fairmedbench.errors import InputError
        from fairmedbench.metrics.result import parse_margins

        if isinstance(node, yaml.MappingNode):
            text = ",".join(f"{k}={v}" for k, v in self.mapping(node, "margin").items())
        else:
            value = self.scalar(node, "margin")
            text = "" if isinstance(value, bool) else str(value)
        try:
            if not parse_margins(text):
                raise InputError(f"--margin {text}: give a positive number")
        except InputError as exc:
            raise self.fail(node, f"margin: {str(exc).removeprefix('--margin ')}; e.g. margin: 0.05, or margin: "
                                  "{auc: 0.02, ece: 0.01}") from None
        return text

    def mapping(self, node: yaml.Node, what: str) -> dict[str, Any]:
        import yaml

        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what}: expected a mapping (key: value), got a {_kind(node)}")
        value = self.plain(node)
        return dict(value or {})

    def seeds(self, node: yaml.Node, what: str = "seeds") -> tuple[int, ...]:
        import yaml

        from fairmedbench.benchmark.arguments import MAX_SEEDS

        if isinstance(node, yaml.ScalarNode) and isinstance(self.scalar(node, what), str):
            lo, sep, hi = node.value.partition("-")
            if not (sep and lo.strip().isdigit() and hi.strip().isdigit() and int(lo) <= int(hi)):
                raise self.fail(node, f"{what}: expected a list of integers or a range like '0-4', got {node.value!r}")
            if (count := int(hi) - int(lo) + 1) > MAX_SEEDS:
                raise self.fail(node, f"{what}: {count:,} seeds, more than {MAX_SEEDS:,}: ask for fewer")
            return tuple(range(int(lo), int(hi) + 1))
        seeds = tuple(self.number(n, what, int, lambda v: v >= 0, "an integer >= 0")
                      for n in self.items(node, what))
        if len(set(seeds)) != len(seeds):
            raise self.fail(node, f"{what}: give distinct seeds")
        return seeds

    def rules(self, node: yaml.Node, what: str) -> tuple[Rule, ...]:
        import yaml

        out = []
        for item in self.items(node, what):
            if not isinstance(item, yaml.MappingNode) or not item.value:
                raise self.fail(item, f"{what}: each rule is a non-empty mapping such as {{usage: lp, model: c2l}}")
            match = {}
            for key_node, value_node in item.value:
                key = self.scalar(key_node, what)
                if key not in RULE_FIELDS:
                    raise self.fail(key_node, f"{what}: unknown rule field {key!r}; fields: {', '.join(RULE_FIELDS)}")
                values = [self.scalar(v, f"{what}.{key}") for v in self.items(value_node, f"{what}.{key}")]
                match[key] = tuple(values)
            out.append(Rule(match, item.start_mark.line + 1))
        return tuple(out)

    def keys(self, root: yaml.Node | None) -> dict[str, yaml.Node]:
        """The study file's top-level keys (each a Study field, given once; models and datasets required)."""
        import difflib

        import yaml

        if not isinstance(root, yaml.MappingNode):
            raise self.fail(root, "a study file is a mapping of keys (models, datasets, usages, ...)")
        known = {f.name for f in dataclasses.fields(Study)} - {"source", "sha256"}
        nodes: dict[str, yaml.Node] = {}
        for key_node, value_node in root.value:
            key = self.scalar(key_node, "key")
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=2, cutoff=0.6)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise self.fail(key_node, f"unknown key {key!r}.{hint} Known: {', '.join(sorted(known))}")
            if key in nodes:
                raise self.fail(key_node, f"key {key!r} is given twice")
            nodes[key] = value_node
        for required in ("models", "datasets"):
            if required not in nodes:
                raise self.fail(root, f"missing key {required!r}")
        return nodes

    def hparams(self, node: yaml.Node) -> tuple[dict[str, Any], ...]:
        """One mapping or a list of them, each of names to single numbers or strings."""
        import yaml

        sequence = isinstance(node, yaml.SequenceNode)
        out = tuple(self.mapping(n, "hparams") for n in self.items(node, "hparams")) if sequence else \
            (self.mapping(node, "hparams"),)
        for n, h in zip(node.value if sequence else [node], out):
            bad = [k for k, x in h.items() if not isinstance(k, str) or isinstance(x, (dict, list))]
            if bad:
                raise self.fail(n, f"hparams: {bad[0]!r}: keys are names and values single numbers or strings")
        return out

    def sweeps(self, nodes: dict[str, yaml.Node]) -> dict[str, tuple[float, ...]]:
        """The train_group_share and prevalence sweeps (their companion keys only with them)."""
        v = {}
        if "train_group_share" in nodes:
            v["train_group_share"] = self.floats(nodes["train_group_share"], "train_group_share",
                                                 lambda x: 0 <= x <= 1, "a number in [0, 1]")
        elif "share_group" in nodes or "train_size" in nodes:
            key = "share_group" if "share_group" in nodes else "train_size"
            raise self.fail(nodes[key], f"{key} applies to the train_group_share sweep: give train_group_share")
        if "prevalence" in nodes:
            v["prevalence"] = self.floats(nodes["prevalence"], "prevalence", lambda x: 0 < x < 1,
                                          "a number in (0, 1)")
        elif "prevalence_on" in nodes:
            raise self.fail(nodes["prevalence_on"], "prevalence_on applies to the prevalence sweep: give prevalence")
        return v

    def eval_datasets(self, node: yaml.Node) -> tuple[str, ...]:
        """External sites, each NAME or NAME:KEY=VALUE of a known dataset, listed once."""
        from fairmedbench.analysis.shift import parse_eval_dataset
        from fairmedbench.registry.datasets import DATASETS

        items = self.items(node, "eval_datasets")
        texts = [self.scalar(n, "eval_datasets") for n in items]
        for n, t in zip(items, texts):
            if not isinstance(t, str):
                raise self.fail(n, f"eval_datasets: expected NAME or NAME:KEY=VALUE, got {t!r}")
            if parse_eval_dataset(t).name not in DATASETS.names():
                raise self.fail(n, f"eval_datasets: unknown dataset {parse_eval_dataset(t).name!r}")
        if len(set(texts)) != len(texts):
            raise self.fail(node, "eval_datasets: a dataset is listed twice")
        return tuple(texts)

    def study(self, root: yaml.Node | None) -> Study:
        import yaml

        from fairmedbench.adapters import USAGES
        from fairmedbench.adapters.prompts import PROMPT_MODES
        from fairmedbench.engine.device import PRECISIONS
        from fairmedbench.metrics.profiles import PROFILES
        from fairmedbench.mitigation import MITIGATIONS
        from fairmedbench.registry.datasets import DATASETS
        from fairmedbench.registry.models import MODELS

        nodes = self.keys(root)
        v: dict[str, Any] = {}
        v["models"] = self.names(nodes["models"], "models", MODELS.names())
        v["datasets"] = self.names(nodes["datasets"], "datasets", DATASETS.names())
        if "usages" in nodes:
            usages = self.names(nodes["usages"], "usages", USAGES.names(), ("auto",))
            v["usages"] = tuple("" if u == "auto" else u for u in usages)
        if "prompts" in nodes:
            v["prompts"] = self.names(nodes["prompts"], "prompts", list(PROMPT_MODES))
        if "mitigations" in nodes:
            v["mitigations"] = self.names(nodes["mitigations"], "mitigations", MITIGATIONS.names())
        if "attributes" in nodes:  # checked per dataset when the cells are expanded
            attrs = [self.scalar(n, "attributes") for n in self.items(nodes["attributes"], "attributes")]
            if not all(isinstance(a, str) for a in attrs) or len(set(attrs)) != len(attrs):
                raise self.fail(nodes["attributes"], f"attributes: expected distinct names, got {attrs}")
            v["attributes"] = tuple(attrs)
        if "seeds" in nodes:
            v["seeds"] = self.seeds(nodes["seeds"])
        if "hparams" in nodes:
            v["hparams"] = self.hparams(nodes["hparams"])
        for key, kind, check, rule in (("split_seed", int, lambda x: x >= 0, "an integer >= 0"),
                                       ("n_boot", int, lambda x: x >= 0, "an integer >= 0"),
                                       ("n_perm", int, lambda x: x >= 0, "an integer >= 0"),
                                       ("train_size", int, lambda x: x >= 1, "an integer >= 1")):
            if key in nodes:
                v[key] = self.number(nodes[key], key, kind, check, rule)
        for key, choices in (("profile", PROFILES.names()), ("precision", list(PRECISIONS)),
                             ("prevalence_on", ["train", "test"])):
            if key in nodes:
                v[key] = self.names(nodes[key], key, choices)[0] if not isinstance(nodes[key], yaml.SequenceNode) \
                    else _raise(self.fail(nodes[key], f"{key}: expected a single value"))
        for key in ("weights", "share_group", "description", "name"):
            if key in nodes:
                value = self.scalar(nodes[key], key)
                if value is not None and not isinstance(value, str):
                    raise self.fail(nodes[key], f"{key}: expected a string, got {value!r}")
                v[key] = value if key not in ("description", "name") else (value or "")
        if "dataset_options" in nodes:
            v["dataset_options"] = self.mapping(nodes["dataset_options"], "dataset_options")
        v.update(self.sweeps(nodes))
        if "eval_datasets" in nodes:
            v["eval_datasets"] = self.eval_datasets(nodes["eval_datasets"])
        if "split_seeds" in nodes:
            v["split_seeds"] = self.seeds(nodes["split_seeds"], "split_seeds")
        if "margin" in nodes:
            v["margin"] = self.margin(nodes["margin"])
        for key in ("include", "exclude"):
            if key in nodes:
                v[key] = self.rules(nodes[key], key)
        name = v.pop("name", "") or self.path.stem
        return Study(name=name, source=str(self.path), sha256=hashlib.sha256(self.text.encode()).hexdigest(), **v)


def _raise(exc: Exception) -> NoReturn:
    raise exc


def _kind(node: Any) -> str:
    import yaml

    return {yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}.get(type(node), "value")


# ------------------------------------------------------------------------------------------------------- expand

def expand(study: Study) -> list[Cell]:
    """Every cell of the grid, in study order: runnable ones with their RunSpec, the others with a reason."""
    from fairmedbench.adapters import USAGES
    from fairmedbench.benchmark.resolve import check_spec, choose_usage
    from fairmedbench.errors import FMBError
    from fairmedbench.registry.datasets import get_card as dataset_card
    from fairmedbench.registry.models import get_card as model_card

    cells: list[Cell] = []
    for model, dataset in itertools.product(study.models, study.datasets):
        mcard, dcard = model_card(model), dataset_card(dataset)
        for usage_name, mitigation, hp, share, prev, split_seed in itertools.product(
                study.usages, study.mitigations, study.hparams, study.train_group_share, study.prevalence,
                study.split_seeds):
            base = dict(model=model, dataset=dataset, usage=usage_name or "auto", mitigation=mitigation,
                        prompt=None, attributes=list(study.attributes), seeds=list(study.seeds), hparams=dict(hp),
                        train_group_share=share, share_group=study.share_group if share is not None else None,
                        train_size=study.train_size if share is not None else None, prevalence=prev,
                        prevalence_on=(study.prevalence_on or RunSpec.prevalence_on)
                        if prev is not None else None)
            if split_seed is not None:  # fields of the newer axes, only when a study uses them
                base["split_seeds"] = [split_seed]
            if study.eval_datasets:
                base["eval_datasets"] = list(study.eval_datasets)
            spec_kw = dict(model=model, dataset=dataset, attributes=tuple(study.attributes), usage=usage_name,
                           mitigation=mitigation, seeds=tuple(study.seeds), split_seed=study.split_seed,
                           weights=study.weights, profile=study.profile, n_boot=study.n_boot,
                           n_perm=study.n_perm, margin=study.margin, precision=study.precision, hparams=dict(hp),
                           dataset_options=dict(study.dataset_options),
                           eval_datasets=tuple(study.eval_datasets),
                           split_seeds=() if split_seed is None else (split_seed,))
            spec_kw.update(_sampling(base))
            try:
                chosen = choose_usage(RunSpec(model=model, dataset=dataset, usage=usage_name), mcard, dcard)
            except FMBError as exc:
                cells.append(Cell(base, reason=str(exc)))
                continue
            usage = USAGES.get(chosen)
            base["usage"] = chosen
            # a usage gets the study's prompts it accepts (none accepted: the first, skipped with the reason)
            prompts = (tuple(p for p in study.prompts if p in usage.prompt_modes) or study.prompts[:1]
                       if usage.prompt_modes else (None,))
            for prompt in prompts:
                fields = {**base, "prompt": prompt}
                cell = Cell(fields)
                facts = {**fields, "kind": mcard.kind, "task": usage.task, "dim": dcard.dim}
                cell.reason = _rule_reason(study, facts) or _shape_reason(mcard, dcard)
                if cell.reason is None:
                    try:
                        spec = _spec({**spec_kw, "usage": chosen}, prompt)
                        check_spec(spec)
                        cell.spec = spec
                    except FMBError as exc:
                        cell.reason = str(exc)
                cells.append(cell)
    return cells


def _sampling(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell's sampling fields as RunSpec keyword arguments (only those set)."""
    return {k: cell[k] for k in ("train_group_share", "share_group", "train_size", "prevalence", "prevalence_on")
            if cell[k] is not None}


def _spec(kw: dict[str, Any], prompt: str | None) -> RunSpec:
    return RunSpec(**{**kw, **({"prompt": prompt} if prompt else {})})


def _rule_reason(study: Study, facts: dict[str, Any]) -> str | None:
    for rule in study.exclude:
        if rule.matches(facts):
            return f"excluded by the rule {rule.describe()}"
    if study.include and not any(rule.matches(facts) for rule in study.include):
        return "matched by no include rule"
    return None


def _shape_reason(mcard: ModelCard, dcard: DatasetCard) -> str | None:
    if mcard.preprocessing.depth and dcard.dim == 2:
        return f"model {mcard.name!r} takes 3D volumes; dataset {dcard.name!r} is 2D"
    return None


def runnable(study: Study) -> list[Cell]:
    """Every cell of `study` in order; StudyError listing the skip reasons when none can run."""
    cells = expand(study)
    if not any(c.runnable for c in cells):
        reasons = "; ".join(f"{r} ({n} cells)" for r, n in group_reasons(cells).items())
        raise StudyError(f"study {study.name!r} ({study.source}) has no runnable cell: {reasons}")
    return cells


def group_reasons(cells: list[Cell]) -> dict[str, int]:
    """Skip reasons with their cell counts, most frequent first."""
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.reason or ""] = counts.get(c.reason or "", 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
