"""Board suites: a named, versioned list of entries (dataset, attributes, usage, task, metric profile, seeds).

An entry pins the test set a submission must answer: the dataset's split fingerprint, the test-id
fingerprint (sha256 of the sorted test sample ids joined by newlines) and the number of test samples.
A fingerprint may be `None` ("pending": not yet pinned); submissions are then checked for internal
consistency only (their predictions must match the fingerprints they report) and the board says so.
Entries on real data carry a `TestSet` (testsets.py): the rule that picks the test samples from any copy
of the data (the provider's official split, or a documented patient-hash rule), its pins, and whether a
submitter holding part of the images may answer part of it (coverage, ranked separately). Each entry names
its headline metric from the MetricSpec registry (default: the task's headline metric). An entry may declare
external datasets (`External`): the trained model is also evaluated on their test splits (`--eval-dataset`), and
the board shows each one's results and the shift from the internal test set (leaderboards/external.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairmedbench.analysis.shift import EvalRequest, parse_eval_dataset
from fairmedbench.engine.splits import test_fingerprint  # noqa: F401  (part of this module's API)
from fairmedbench.errors import InputError
from fairmedbench.leaderboards.testsets import TestSet
from fairmedbench.metrics.specs import headline_metric, metric_spec
from fairmedbench.registry.base import Registry
from fairmedbench.tasks.base import TASKS


@dataclass(frozen=True)
class External:
    """An external dataset of an entry: its `--eval-dataset` text (NAME or NAME:KEY=VALUE..., no `root=`: where the
    data lives is the runner's business) and the pins of its test split (None: pending, checked for consistency)."""

    dataset: str
    test_fingerprint: str | None = None
    n_test: int | None = None

    def __post_init__(self) -> None:
        try:
            request = parse_eval_dataset(self.dataset)
        except InputError as err:
            raise ValueError(str(err)) from None
        if request.root is not None:
            raise ValueError(f"external {self.dataset!r}: a suite names what is evaluated, not where its data lives "
                             "(drop root=; run-suite reads --data-root)")
        if request.overlap != "refuse":
            raise ValueError(f"external {self.dataset!r}: a board recomputes its shifts from independent draws of the "
                             "two test sets, so its external sites must share no item with the entry's test set "
                             "(drop overlap=; pin a disjoint site)")

    @property
    def label(self) -> str:
        """How results name it (the run's `eval_datasets[k].label`), e.g. 'synth-flip:n=200'."""
        return parse_eval_dataset(self.dataset).label

    @property
    def name(self) -> str:
        """Its dataset card's name."""
        return parse_eval_dataset(self.dataset).name

    def describe(self) -> dict[str, Any]:
        """JSON-ready: label, card name, and the pins of its test split."""
        return {"label": self.label, "dataset": self.name, "test_fingerprint": self.test_fingerprint,
                "n_test": self.n_test}


@dataclass(frozen=True)
class Entry:
    """One board column group: a (dataset, attributes, usage) run with its pinned test set."""

    dataset: str
    attributes: tuple[str, ...]
    usage: str
    task: str = "classification"
    profile: str = "default"
    seeds: tuple[int, ...] = (0,)
    split_fingerprint: str | None = None
    test_fingerprint: str | None = None
    n_test: int | None = None
    options: tuple[tuple[str, Any], ...] = ()
    test_set: TestSet | None = None
    headline: str = ""
    externals: tuple[External, ...] = ()

    @property
    def dataset_options(self) -> dict[str, Any]:
        """Reader options of the entry's dataset (e.g. the size of a synthetic set)."""
        return dict(self.options)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"entry {self.key}: task must be one of {TASKS.names()}, got {self.task!r}")
        if not self.attributes or not self.seeds:
            raise ValueError(f"entry {self.key}: needs at least one attribute and one seed")
        if self.test_set is not None:
            if (self.test_fingerprint, self.n_test) not in ((None, None), (self.test_set.fingerprint, self.test_set.n)):
                raise ValueError(f"entry {self.key}: its test pins differ from its test_set's; give them there")
            object.__setattr__(self, "test_fingerprint", self.test_set.fingerprint)
            object.__setattr__(self, "n_test", self.test_set.n)
        spec = metric_spec(self.headline or headline_metric(self.task))
        if spec.task != self.task:
            raise ValueError(f"entry {self.key}: headline metric {spec.name!r} is a {spec.task} metric, "
                             f"not {self.task}")
        object.__setattr__(self, "headline", spec.name)
        labels = [x.label for x in self.externals]
        if len(set(labels)) != len(labels):
            raise ValueError(f"entry {self.key}: an external dataset is listed twice ({', '.join(labels)})")

    @property
    def classes(self) -> tuple[str, ...]:
        """The dataset card's class names, in index order (a multi-class entry's score columns, one per class)."""
        from fairmedbench.registry.datasets import get_card

        return tuple(str(c) for c in get_card(self.dataset).classes)

    @property
    def key(self) -> str:
        """Folder name of this entry inside a bundle: dataset__usage__attr1+attr2 (a crossed attribute sex*age as
        sex-x-age: bundle file names keep to [A-Za-z0-9._+-])."""
        return f"{self.dataset}__{self.usage}__{'+'.join(a.replace('*', '-x-') for a in self.attributes)}"

    @property
    def kind(self) -> str:
        """The result document kind a submission must carry for this entry."""
        return f"run-{self.task}"

    @property
    def pending(self) -> bool:
        """True while any of the test-set pins is not set yet (a real test set pins no split: train/val
        depend on the copy at hand)."""
        if self.test_set is not None:
            return self.test_set.pending
        return None in (self.split_fingerprint, self.test_fingerprint, self.n_test)

    @property
    def partial_coverage(self) -> bool:
        """True when a submission may answer part of the pinned test set (evaluated on what it holds)."""
        return self.test_set is not None and self.test_set.partial_coverage

    def describe(self) -> dict[str, Any]:
        """JSON-ready description: what runs, what it reports (attributes, headline metric), the test set."""
        spec = metric_spec(self.headline)
        test = self.test_set.describe() if self.test_set is not None else {
            "name": f"{self.dataset} test split", "rule": "the dataset's default split (seed 0)",
            "source": "the split fingerprint pins train, val and test", "ids_file": None,
            "fingerprint": self.test_fingerprint, "n": self.n_test,
            "pending": self.pending, "partial_coverage": False,
            "coverage_rule": ("fingerprint pending: the result's own test set, checked for consistency only"
                              if self.pending else f"exactly the {self.n_test} pinned test ids (complete coverage)")}
        return {"key": self.key, "dataset": self.dataset, "usage": self.usage, "task": self.task,
                "attributes": list(self.attributes), "seeds": list(self.seeds), "profile": self.profile,
                "headline_metric": {"name": spec.name, "label": spec.header, "definition": spec.definition},
                "split_fingerprint": self.split_fingerprint, "options": self.dataset_options, "test_set": test,
                "externals": [x.describe() for x in self.externals]}


# The verification tolerance a suite declares by default: the largest absolute difference `benchmark verify` may find
# between a submitted per-sample score (a probability, or a DSC/IoU) and its re-run, which runs in the precision the
# submitted run recorded. fp32: what remains is summation order across machines and BLAS builds (~1e-6 on scores),
# amplified by a learned head re-trained for up to 200 epochs; 1e-4 leaves that margin and nothing a model change
# could hide in. bf16 keeps 8 significant bits, and bf16 kernels differ between CPUs (native avx512_bf16, AMX, or
# emulated) and GPUs in how they accumulate, so a re-run elsewhere rounds differently. Measured here (2-core AMD EPYC,
# avx512_bf16): a bf16 run-suite bundle of random-weight ResNet-50 (synthetic suite) re-ran in bf16 with max |diff| 0;
# re-run in fp32 it differed by up to 0.284, all of it one test image through one near-dead feature (training std
# 1.6e-5: standardisation turned its bf16 rounding of 0.002 into 118 standard units); the median difference was
# 0.009. Real weights in fp32 against bf16: 0.0395 on moco-cxr linear-probe probabilities on NIH images (README),
# 0.0087 on LiteMedSAM DSC/IoU. 0.05 leaves room for another machine's bf16 kernels (not measured here). A forged
# score vector differs from the real model's by 0.3 and more (tests/leaderboards/test_verify.py).
DEFAULT_TOLERANCES = (("fp32", 1e-4), ("bf16", 0.05))


@dataclass(frozen=True)
class Suite:
    """A named, versioned list of entries; a board answers exactly one suite. `tolerances` is the board's
    verification tolerance per precision of the submitted run ((precision, absolute tolerance) pairs): a verifier
    may tighten it, never loosen it."""

    name: str
    version: str
    description: str
    entries: tuple[Entry, ...]
    tolerances: tuple[tuple[str, float], ...] = DEFAULT_TOLERANCES
    # equivalence margins every entry's run applies to its two-group differences (`benchmark run --margin`):
    # (metric, margin) pairs, metric '*' for every difference; () for none
    margins: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        keys = [e.key for e in self.entries]
        if len(set(keys)) != len(keys):
            raise ValueError(f"suite {self.name!r} lists an entry twice")
        if not self.tolerances or not all(0 <= t < 1 for _, t in self.tolerances):
            raise ValueError(f"suite {self.name!r}: each verification tolerance is an absolute difference in [0, 1)")
        if not all(isinstance(m, str) and m and 0 < v < 1 for m, v in self.margins):
            raise ValueError(f"suite {self.name!r}: each margin is (metric or '*', a number in (0, 1))")

    @property
    def margin(self) -> str | None:
        """The margins as `--margin` takes them ('0.05', 'auc=0.02,ece=0.01'); None when the suite declares none."""
        return ",".join(f"{v:g}" if m == "*" else f"{m}={v:g}" for m, v in self.margins) or None

    def tolerance(self, precision: str) -> float:
        """The board's verification tolerance for a run in `precision` (an unknown precision: the widest declared)."""
        return dict(self.tolerances).get(precision, max(t for _, t in self.tolerances))

    def entry(self, key: str) -> Entry:
        """The entry with folder name `key`."""
        for e in self.entries:
            if e.key == key:
                return e
        raise InputError(f"suite {self.name!r} has no entry {key!r}; its entries: "
                         f"{', '.join(e.key for e in self.entries)}")

    def keys(self) -> list[str]:
        """Entry folder names in suite order."""
        return [e.key for e in self.entries]


SUITES: Registry[Suite] = Registry("board suite")


def register_suite(suite: Suite) -> Suite:
    """Add a suite to the registry under its name."""
    return SUITES.add(suite.name, suite)


def get_suite(name: str) -> Suite:
    """The suite (and board) named `name`."""
    return SUITES.get(name)


SEX_AGE = ("sex", "age")

# The synthetic test sets are pinned: 200 generated images per dataset, the generator's official split.
SYNTH_PINS = {
    "synth-control": ("ccd5440d268d103e577c60b8b7994f160c6741fd56fe31f6a18bfaf6904404a2",
                      "2b91a41b9362339633b593cabd00b7d90bda832057521553d481736f0ff417b5", 60),
    "synth-contrast": ("f88c93af6be077196f88551b8e60b46860ec385f27404d9c892028c53a131077",
                       "3567a47ce3c10ac38c631b7a5d785623df5165305d6e764db5b8e7b1ddd09d0b", 60),
    "synth-ordinal": ("6a77245740ec201988c4a29f71b952c86a008b7874f5690abe282445dbd13e73",
                      "1f530d6f5a8c07f8d73b163555c8c7375137430d427f8070a07cb2d11356bd56", 60),
}
SYNTH_OPTIONS = (("n", 200),)


def _synth(dataset: str, usage: str, task: str, seeds: tuple[int, ...]) -> Entry:
    split_fp, test_fp, n_test = SYNTH_PINS[dataset]
    return Entry(dataset, SEX_AGE, usage, task=task, seeds=seeds, split_fingerprint=split_fp,
                 test_fingerprint=test_fp, n_test=n_test, options=SYNTH_OPTIONS)


register_suite(Suite(
    "synthetic", "1.0",
    "Built-in synthetic lesions (200 images each), runnable offline: a negative control (no bias) and a "
    "positive control (lower lesion contrast for females); linear probe on frozen features, classification.",
    tuple(_synth(d, "lp", "classification", (0, 1, 2)) for d in ("synth-control", "synth-contrast")),
))
register_suite(Suite(
    "synthetic-seg", "1.0",
    "Built-in synthetic lesions (200 images each), runnable offline: box-prompted segmentation on the "
    "negative and positive controls.",
    tuple(_synth(d, "sam-prompt", "segmentation", (0,)) for d in ("synth-control", "synth-contrast")),
))
register_suite(Suite(
    "synthetic-multiclass", "1.0",
    "Built-in synthetic ordinal grades 0..3 (200 images), runnable offline: a multi-class positive control (the "
    "female group's grade signal is 0.35x the male group's); linear probe with a softmax head, ranked by macro "
    "one-vs-rest AUC.",
    (_synth("synth-ordinal", "lp", "multiclass", (0, 1, 2)),),
))
# Fairness under shift: trained on synth-contrast (female lesions at 0.35x contrast), tested on its own test split and
# on the test splits of synth-flip (the bias reversed: male lesions at 0.35x) and synth-control (no bias). A small, easy
# version of the lesions (64 px, brighter lesions) that a random-weight ResNet-18 separates; 300 images each, so each
# test split holds 90 (45 per sex, above the minimum group size of an interval). Pins: (split, test fingerprint, n).
# The external sites share no image with the internal test set (an overlapping site is refused by --eval-dataset):
# synth-flip has its own generation seed, and synth-control is drawn from data_seed 3 (at its default seed 0 it
# shares synth-contrast's male and lesion-free images). Version 1.1: both external test sets changed for that.
SHIFT_OPTIONS = (("n", 300), ("config", {"size": 64, "lesion_amplitude": 0.4}))
SHIFT_SITE_OPTIONS = {"synth-flip": (), "synth-control": (("data_seed", 3),)}
SHIFT_PINS = {
    "synth-contrast": ("74ce71f6359853f45130338a3b62510b84c22b552df3a3b73d75613aa14a5693",
                       "275f9152ad5eca798cfcd25d1ee2e3e5f672c4db34827b332f788d1d9132ae3e", 90),
    "synth-flip": (None, "ac5da2d4778f3ed41876b30fa8728199f2c9998f004f11172caa6aa4910e07fe", 90),
    "synth-control": (None, "c5482bab95b5f1705eb877a6c25ee8842dbb531473fc515efe9e6d476100a4c2", 90),
}


def _shift_external(dataset: str) -> External:
    _, test_fp, n_test = SHIFT_PINS[dataset]
    options = dict(SHIFT_OPTIONS + SHIFT_SITE_OPTIONS[dataset])
    return External(EvalRequest(dataset, dataset, options).label, test_fp, n_test)


register_suite(Suite(
    "synthetic-shift", "1.1",
    "Fairness under dataset shift, runnable offline: a linear probe trained on synth-contrast (lower lesion contrast "
    "for females) is tested on its own test split and, unchanged, on a site where the bias is reversed (synth-flip) "
    "and one without it (synth-control); the board shows each site's utility, gap and the shift per group.",
    (Entry("synth-contrast", SEX_AGE, "lp", seeds=(0, 1, 2), split_fingerprint=SHIFT_PINS["synth-contrast"][0],
           test_fingerprint=SHIFT_PINS["synth-contrast"][1], n_test=SHIFT_PINS["synth-contrast"][2],
           options=SHIFT_OPTIONS, externals=(_shift_external("synth-flip"), _shift_external("synth-control"))),),
))
# Real test sets. NIH ChestX-ray14's official test_list.txt is not part of its metadata and is not available
# offline, so the board's test set is a documented patient-level rule over the official metadata
# (Data_Entry_2017(_v2020).csv, 112,120 images of 30,805 patients): its 22,013 image ids (6,209 patients) ship as
# package data, derived by `testsets.TestSet.is_test` on that file (tests/leaderboards/test_real_boards.py
# re-derives them from the real metadata and checks the fingerprint).
NIH_TEST = TestSet(
    "NIH ChestX-ray14 test v1 (patient-hash 20%, 22,013 images of 6,209 patients)",
    "patient-hash:fairmedbench/nih-cxr14/test/v1:0.2",
    "every image of the patients whose sha256('fairmedbench/nih-cxr14/test/v1:<Patient ID>') falls in the lowest "
    "20% of the hash range, over the official metadata Data_Entry_2017(_v2020).csv (112,120 images); the "
    "official test_list.txt is not available offline, and the rule keeps the official split's patient-level "
    "separation",
    "7124224c8b5ac53e5a3032420bf33feb03ca6503a77e4dff9dc8053e2805c025", 22013, "nih-cxr14-test-v1.txt.gz")
# The published patient-level split of HAM10000 (biomedia-mira/subgroup-separability, MIT; patient = lesion_id),
# read from splits/{train,val,test}.csv in the dataset folder; its 1,002 test image ids are pinned by fingerprint.
HAM_TEST = TestSet(
    "HAM10000 test (subgroup-separability patient-level split, 1,002 images)", "provider:test",
    "splits/test.csv of the patient-level split published by biomedia-mira/subgroup-separability (MIT), with "
    "the official HAM10000 metadata columns; put the three split files in <ham10000>/splits/",
    "d2b3714ab12579ec85d5baee0f02ab7ee1d656c012cd47f3fd6cd0589dbc8e33", 1002)
HAM_OPTIONS = (("split_dir", "splits"),)
# No copy of these datasets here: their rules are tested on fixtures in the providers' layouts; the pins are
# set (and the suite version bumped) by whoever first runs the board on the full release.
CHEXPERT_TEST = TestSet(
    "CheXpert official validation set (valid.csv, frontal views)", "provider:val",
    "the official valid.csv (200 patients, labelled by three radiologists), the only labelled held-out set of "
    "the public release: the board tests on it and carves its own validation set from train.csv")
MIMIC_TEST = TestSet(
    "MIMIC-CXR-JPG official test split", "provider:test",
    "rows with split = test in mimic-cxr-2.0.0-split.csv.gz (the provider's patient-level split)")
FAIRVLMED_TEST = TestSet(
    "FairVLMed10k official test set (Test/, 2,000 patients)", "provider:test",
    "the provider's Test/ folder (7,000 / 1,000 / 2,000 official split by folder)")
HARVARD_GF_TEST = TestSet(
    "Harvard-GF official test set (Test/)", "provider:test",
    "the provider's Test/ folder (folder names assumed from the sibling FairVision releases: see the card)")
PAPILA_TEST = TestSet(
    "PAPILA test v1 (patient-hash 20%, both eyes of a patient together)",
    "patient-hash:fairmedbench/papila/test/v1:0.2",
    "PAPILA publishes no split: every eye of the patients whose sha256('fairmedbench/papila/test/v1:<ID>') falls "
    "in the lowest 20% of the hash range (ID as the reader writes it, e.g. '002')")
SEX_AGE_RACE = ("sex", "age", "race")

register_suite(Suite(
    "nih-cxr14", "2.0",
    "NIH ChestX-ray14, any-finding classification (linear probe on frozen features; CLIP zero-shot), by sex and "
    "age, on a pinned patient-level test set of the official metadata; a partial copy is evaluated on the pinned "
    "test images it holds and ranked separately.",
    (Entry("nih-cxr14", SEX_AGE, "lp", seeds=(0, 1, 2), test_set=NIH_TEST),
     Entry("nih-cxr14", SEX_AGE, "clip-zs", test_set=NIH_TEST)),
))
# ham10000-7class reads the same metadata and split files as ham10000 (its own card only relabels dx as the class), so
# its test set is the same 1,002 published test images, pinned by the same fingerprint
register_suite(Suite(
    "ham10000", "2.1",
    "HAM10000 dermoscopy, published patient-level split: melanoma-or-akiec classification (linear probe), "
    "lesion segmentation (box-prompted SAM) and the 7 diagnosis classes (linear probe, softmax head), by sex and "
    "age.",
    (Entry("ham10000", SEX_AGE, "lp", seeds=(0, 1, 2), test_set=HAM_TEST, options=HAM_OPTIONS),
     Entry("ham10000", SEX_AGE, "sam-prompt", task="segmentation", test_set=HAM_TEST, options=HAM_OPTIONS),
     Entry("ham10000-7class", SEX_AGE, "lp", task="multiclass", seeds=(0, 1, 2), test_set=HAM_TEST,
           options=HAM_OPTIONS)),
))
register_suite(Suite(
    "chexpert", "2.0",
    "CheXpert with CHEXPERT DEMO race: any-finding classification by sex, age and race, tested on the official "
    "validation set.",
    (Entry("chexpert", SEX_AGE_RACE, "lp", seeds=(0, 1, 2), test_set=CHEXPERT_TEST),
     Entry("chexpert", SEX_AGE_RACE, "clip-zs", test_set=CHEXPERT_TEST)),
))
register_suite(Suite(
    "mimic-cxr", "1.0",
    "MIMIC-CXR-JPG with MIMIC-IV demographics, official split: any-finding classification by sex, age and race.",
    (Entry("mimic-cxr", SEX_AGE_RACE, "lp", seeds=(0, 1, 2), test_set=MIMIC_TEST),
     Entry("mimic-cxr", SEX_AGE_RACE, "clip-zs", test_set=MIMIC_TEST)),
))
register_suite(Suite(
    "fairvlmed10k", "1.0",
    "FairVLMed10k SLO fundus, official split: glaucoma classification by sex, race, ethnicity and language.",
    (Entry("fairvlmed10k", ("sex", "race", "ethnicity", "language"), "lp", seeds=(0, 1, 2), test_set=FAIRVLMED_TEST),
     Entry("fairvlmed10k", ("sex", "race", "ethnicity", "language"), "clip-zs", test_set=FAIRVLMED_TEST)),
))
register_suite(Suite(
    "harvard-gf", "1.0",
    "Harvard-GF RNFLT maps, official split: glaucoma classification (linear probe) by sex, race and ethnicity.",
    (Entry("harvard-gf", ("sex", "race", "ethnicity"), "lp", seeds=(0, 1, 2), test_set=HARVARD_GF_TEST),),
))
register_suite(Suite(
    "papila", "1.0",
    "PAPILA fundus: glaucoma classification (linear probe) by sex and age on a pinned patient-level rule.",
    (Entry("papila", SEX_AGE, "lp", seeds=(0, 1, 2), test_set=PAPILA_TEST),),
))
