"""Board flags: each one fact about a row, checked by one function, explained by one legend line.

A row is one (submission, entry, attribute). Its facts are the submission's model.json (and card.json for a
model that is not registered), the entry, the per-seed test predictions stored with the submission, the other
accepted submissions' predictions on the same entry, and the submission's verification record. `row_flags`
runs every check of `FLAGS`; the page prints `FLAGS` as its legend, so a rule is stated once.
Torch-free: numpy, scikit-learn and pyarrow only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fairmedbench.errors import InputError
from fairmedbench.leaderboards.suites import Entry
from fairmedbench.metrics.auc import auc
from fairmedbench.tasks.base import unscored_mask

# near-perfect predictions (classification): overall AUC at or above this on any task and seed ...
NEAR_PERFECT_AUC = 0.99
# ... or more than this share of test samples with |score - label| below NEAR_PERFECT_GAP
NEAR_PERFECT_SHARE = 0.95
NEAR_PERFECT_GAP = 0.05
# near-perfect segmentation: more than NEAR_PERFECT_SHARE of test samples with DSC at or above this
NEAR_PERFECT_DSC = 0.99
# duplicate predictions: Pearson r above this between two submissions' scores on the same test ids and seed
DUPLICATE_R = 0.999
# implausible groups: a group needs this many positives and negatives for its score overlap to be judged
MIN_PER_CLASS = 5


@dataclass(frozen=True)
class SeedPredictions:
    """One seed's test predictions: ids, labels (n, K) or None for segmentation, scores (n, K) (per-sample DSC
    as one column for segmentation), and group names per attribute (None = missing). `one_hot`: a multi-class
    prediction, whose labels are the true class one-hot over the K class-probability columns (rows sum to 1)."""

    seed: int
    ids: np.ndarray
    labels: np.ndarray | None
    scores: np.ndarray
    attributes: dict[str, np.ndarray]
    one_hot: bool = False


@dataclass(frozen=True)
class Facts:
    """Everything a flag may look at for one row."""

    model: dict[str, Any]
    card: dict[str, Any] | None  # card.json of a model that is not registered; None for a registered one
    entry: Entry
    attribute: str
    seeds: list[SeedPredictions]
    weights: frozenset[str] = frozenset()  # weight identities of the runs (sha256 or 'random:seed=N')
    # (model revision, preds) of the submissions accepted before this one (by accept time)
    others: list[tuple[str, list[SeedPredictions]]] = field(default_factory=list)
    verification: dict[str, Any] | None = None  # this entry's verification record, if any


def scored_rows(test: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Test columns without the rows a task's 'unscored' column marks (tasks.base.unscored_mask: e.g. a
    segmentation sample with an empty ground truth, covered but never scored; every metric and flag is computed on
    scored samples only); unchanged when the columns have no such marker."""
    keep = ~unscored_mask(test, len(next(iter(test.values()), ())))
    if keep.all():
        return test
    return {k: np.asarray(v)[keep] for k, v in test.items()}


def class_indices(values: Sequence[object], classes: Sequence[str]) -> np.ndarray:
    """A multi-class label per value as its class index: an index 0..C-1 (an integer, or a float with no fraction)
    or a class name, exactly; -1 for anything else (another number or text, a boolean, a null)."""
    pos = {str(c): i for i, c in enumerate(classes)}
    out = np.full(len(values), -1, dtype=np.int64)
    for k, v in enumerate(values):
        if isinstance(v, str):
            out[k] = pos.get(v, -1)
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
                and float(v).is_integer() and 0 <= v < len(classes):
            out[k] = int(v)
    return out


def from_columns(test: dict[str, np.ndarray], block: dict[str, Any], seed: int) -> SeedPredictions:
    """Test-row columns (as `submit` reads them, or a stored Parquet's) -> SeedPredictions of the scored rows."""
    cols = block["columns"]
    test = scored_rows(test)
    if block.get("classes"):  # multi-class: one label column (class index or name), one probability per class
        classes = block["classes"]
        index = class_indices(list(test[cols["labels"][0]]), classes)
        if (index < 0).any():  # np.eye(C)[-1] would read as the last class
            raise InputError(f"{int((index < 0).sum())} label(s) are not a class of {list(classes)}")
        labels = np.eye(len(classes))[index]
        scores = np.column_stack([np.asarray(test[c], dtype=np.float64) for c in cols["scores"]])
        attrs = {a: np.asarray(test[f"attr:{a}"], dtype=object) for a in block["attributes"]}
        return SeedPredictions(seed, np.asarray(test[cols["id"]]).astype(str), labels, scores, attrs, one_hot=True)
    if cols.get("labels"):
        labels = np.column_stack([np.asarray(test[c], dtype=np.float64) for c in cols["labels"]])
        scores = np.column_stack([np.asarray(test[c], dtype=np.float64) for c in cols["scores"]])
    else:
        labels, scores = None, np.asarray(test["dsc"], dtype=np.float64)[:, None]
    attrs = {a: np.asarray(test[f"attr:{a}"], dtype=object) for a in block["attributes"]}
    return SeedPredictions(seed, np.asarray(test[cols["id"]]).astype(str), labels, scores, attrs)


def read_predictions(data: bytes, block: dict[str, Any], seed: int) -> SeedPredictions:
    """A stored (already validated) predictions Parquet -> the test rows as SeedPredictions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(data))
    test = np.asarray(table.column(block["columns"]["split"]).to_pylist()) == "test"
    cols = {}
    for name in table.column_names:
        values = table.column(name).to_pylist()
        cols[name] = np.asarray([None if v is None else str(v) for v in values], dtype=object)[test] \
            if name.startswith("attr:") else np.asarray(values)[test]
    return from_columns(cols, block, seed)


# --- one function per flag -------------------------------------------------------------------------------------

def no_weights_hash(f: Facts) -> str | None:
    """Weights not provided: model.json gives no weights sha256 and the runs are not one seeded random init (which
    the package rebuilds from its seed, so it names its weights as exactly as a sha256 does)."""
    if f.model.get("weights_sha256") is None:
        if len(f.weights) == 1 and next(iter(f.weights)).startswith("random:seed="):
            return None
        return "weights not provided: model.json gives no weights sha256, so this row can never be verified"
    return None


def weights_not_public(f: Facts) -> str | None:
    """The weights cannot be had by others: no public source, or not the card's published file."""
    if f.weights and all(w.startswith("random:") for w in f.weights):
        return None  # a seeded random init is rebuilt by the package itself
    if f.card is not None:
        w = f.card.get("weights") or {}
        return None if (w.get("url") or w.get("hub_id")) else "the bundle's card names no public url or hub id"
    from fairmedbench.registry.models import MODELS, get_card

    if f.model["name"] not in MODELS:  # accepted before bundle cards were required
        return "no card names a source for the weights"
    src = get_card(f.model["name"]).weights
    if not (src.hub_id or src.url or src.package):
        return "the registered card names no public source for its weights"
    sha = f.model.get("weights_sha256")
    if src.sha256 and sha != src.sha256:
        return f"weights sha256 {str(sha)[:12]}... is not the card's published {src.sha256[:12]}..."
    return None


def seen_in_pretraining(f: Facts) -> str | None:
    """The dataset is in the model's pretraining data (registry.models.seen_in_pretraining)."""
    from fairmedbench.registry.models import seen_in_pretraining as seen

    if seen(f.model["name"], f.entry.dataset, f.model.get("training_datasets")):
        return f"{f.entry.dataset} is in the model's pretraining data: not zero-shot"
    return None


def near_perfect(f: Facts) -> str | None:
    """Overall AUC >= 0.99, or > 95% of samples within 0.05 of their label (segmentation: DSC >= 0.99; multi-class:
    macro AUC >= 0.99, or > 95% of samples with every class probability within 0.05 of the one-hot label)."""
    for p in f.seeds:
        if p.labels is None:
            share = float(np.mean(p.scores[:, 0] >= NEAR_PERFECT_DSC))
            if share > NEAR_PERFECT_SHARE:
                return f"seed {p.seed}: {share:.0%} of test samples have DSC >= {NEAR_PERFECT_DSC}"
            continue
        if p.one_hot:
            share = float(np.mean((np.abs(p.scores - p.labels) < NEAR_PERFECT_GAP).all(axis=1)))
            if share > NEAR_PERFECT_SHARE:
                return (f"seed {p.seed}: {share:.0%} of test samples have every class probability within "
                        f"{NEAR_PERFECT_GAP} of their one-hot label")
            aucs = [auc(p.labels[:, j], p.scores[:, j]) for j in range(p.labels.shape[1])
                    if 0 < p.labels[:, j].sum() < len(p.labels)]
            if aucs and float(np.mean(aucs)) >= NEAR_PERFECT_AUC:
                return f"seed {p.seed}: overall macro AUC {float(np.mean(aucs)):.4f} >= {NEAR_PERFECT_AUC}"
            continue
        share = float(np.mean(np.abs(p.scores - p.labels) < NEAR_PERFECT_GAP))
        if share > NEAR_PERFECT_SHARE:
            return f"seed {p.seed}: {share:.0%} of test scores lie within {NEAR_PERFECT_GAP} of their label"
        for j in range(p.labels.shape[1]):
            y = p.labels[:, j]
            if 0 < y.sum() < len(y):
                value = auc(y, p.scores[:, j])
                if value >= NEAR_PERFECT_AUC:
                    return f"seed {p.seed}: overall AUC {value:.4f} >= {NEAR_PERFECT_AUC}"
    return None


def duplicate_predictions(f: Facts) -> str | None:
    """Scores (near) identical to an earlier accepted submission's (`Facts.others` holds only those accepted
    before this one): Pearson r > 0.999 on the same ids and seed. The earlier one keeps a clean row."""
    for who, preds in f.others:
        theirs = {p.seed: p for p in preds}
        for p in f.seeds:
            q = theirs.get(p.seed)
            if q is None or len(q.ids) != len(p.ids) or set(q.ids) != set(p.ids):
                continue
            order = np.argsort(q.ids)[np.argsort(np.argsort(p.ids))]  # q's rows in p's id order
            a, b = p.scores.ravel(), q.scores[order].ravel()
            if a.shape != b.shape:
                continue
            if np.array_equal(a, b):
                return f"seed {p.seed}: identical scores to {who}, accepted earlier"
            if a.std() > 0 and b.std() > 0:
                r = float(np.corrcoef(a, b)[0, 1])
                if r > DUPLICATE_R:
                    return f"seed {p.seed}: scores duplicate {who}, accepted earlier (Pearson r = {r:.5f})"
    return None


def implausible_groups(f: Facts) -> str | None:
    """Classification: within a group with >= 5 positives and >= 5 negatives, positive and negative scores do
    not overlap at all (every positive scores above every negative), on some task and seed. Multi-class: within
    a group, every class with >= 5 samples in and >= 5 out of it (at least two such classes) separates one-vs-rest
    with zero overlap: one easy class may separate, the group's whole label vector may not."""
    for p in f.seeds:
        if p.labels is None:
            continue
        groups = p.attributes.get(f.attribute)
        if groups is None:
            continue
        for g in sorted({v for v in groups if v is not None}):
            m = groups == g
            if p.one_hot:
                judged = [s[y == 1].min() > s[y == 0].max() for y, s in zip(p.labels[m].T, p.scores[m].T)
                          if y.sum() >= MIN_PER_CLASS and len(y) - y.sum() >= MIN_PER_CLASS]
                if len(judged) >= 2 and all(judged):
                    return (f"seed {p.seed}, group {g}: each of {len(judged)} classes scores all its samples above "
                            "the group's others (no overlap)")
                continue
            for j in range(p.labels.shape[1]):
                y, s = p.labels[m, j], p.scores[m, j]
                n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
                if n_pos >= MIN_PER_CLASS and n_neg >= MIN_PER_CLASS and s[y == 1].min() > s[y == 0].max():
                    return (f"seed {p.seed}, group {g}: the {n_pos} positives all score above the {n_neg} "
                            "negatives (no overlap)")
    return None


def pending_fingerprints(f: Facts) -> str | None:
    """The board's test set is not pinned yet: ids were checked for consistency only."""
    return "test set not pinned: checked for consistency only" if f.entry.pending else None


def verification_failed(f: Facts) -> str | None:
    """`benchmark verify` re-ran the model and the scores did not match."""
    v = f.verification
    if v is None or v.get("passed"):
        return None
    return (f"re-run differs: max |diff| {v.get('max_abs_diff')} > tolerance {v.get('tolerance')}"
            if v.get("max_abs_diff") is not None else f"re-run failed: {'; '.join(v.get('reasons', []))[:200]}")


@dataclass(frozen=True)
class Flag:
    """A flag: its key, the short label a row shows, the rule (the page's legend), and its one check."""

    key: str
    label: str
    rule: str
    check: Callable[[Facts], str | None]


FLAGS: tuple[Flag, ...] = (
    Flag("no-weights-hash", "no weights hash", "model.json gives no sha256 of the weights and the runs are not a "
         "seeded random init (named by its seed, which the package rebuilds), so the weights that made the "
         "predictions cannot be identified: 'weights not provided', and the row can never be verified.",
         no_weights_hash),
    Flag("weights-not-public", "weights not public", "the weights cannot be obtained by others: the card names "
         "no public hub id, URL or package, or the weights' sha256 is not the registered card's published one.",
         weights_not_public),
    Flag("seen-in-pretraining", "data seen in pretraining", "the dataset is in the model's pretraining data "
         "(the registered card's training_datasets, or the bundle card's): the result is not zero-shot.",
         seen_in_pretraining),
    Flag("near-perfect", "near-perfect predictions", f"on some seed: overall AUC >= {NEAR_PERFECT_AUC} on a task, "
         f"or more than {NEAR_PERFECT_SHARE:.0%} of test scores within {NEAR_PERFECT_GAP} of their 0/1 label "
         f"(segmentation: more than {NEAR_PERFECT_SHARE:.0%} of test samples with DSC >= {NEAR_PERFECT_DSC}; "
         f"multi-class: macro AUC >= {NEAR_PERFECT_AUC}, or more than {NEAR_PERFECT_SHARE:.0%} of test samples with "
         f"every class probability within {NEAR_PERFECT_GAP} of the one-hot label); no foundation model is known "
         "to do this on a real medical test set.", near_perfect),
    Flag("duplicate", "duplicate predictions", f"the per-sample scores of some seed have Pearson r > {DUPLICATE_R} "
         "(or are identical) with those of a submission accepted earlier, on the same test ids and seed; only the "
         "later submission is flagged (the earlier one keeps a clean row).",
         duplicate_predictions),
    Flag("implausible-groups", "implausible group scores", "classification: within some group of the row's "
         f"attribute with at least {MIN_PER_CLASS} positives and {MIN_PER_CLASS} negatives, every positive scores "
         "above every negative (zero overlap) on some task and seed (multi-class: every class with at least "
         f"{MIN_PER_CLASS} samples in and out of it, two or more such classes, separates one-vs-rest with zero "
         "overlap): the scores reproduce that group's labels exactly, which real models on real test sets do not "
         "do; a label leak or made-up scores.",
         implausible_groups),
    Flag("pending", "test set not pinned", "the board has not pinned this entry's test-set fingerprints yet; the "
         "test ids were checked for consistency with the submission's own fingerprints only.", pending_fingerprints),
    Flag("verification-failed", "verification failed", "`benchmark verify` re-ran the model from its declared "
         "weights on a seeded sample of test items and the per-sample scores did not match within the tolerance.",
         verification_failed),
)


# flags whose row a board shows but does not rank (board.rank_rows), even when verified: its numbers cannot be
# trusted (the re-run did not reproduce them, or the predictions are near-perfect or copied from an earlier
# submission)
UNRANKED_FLAGS = ("verification-failed", "near-perfect", "duplicate")
# flags that keep a row out of the ranking until a re-run verifies it (only verified rows are ranked at all; these
# are named as the reason beside "not re-run")
UNTIL_VERIFIED_FLAGS = ("implausible-groups",)
# flags that make a row unverifiable: it is never shown verified, whatever verification record sits beside it
NEVER_VERIFIED_FLAGS = ("no-weights-hash",)


def row_flags(facts: Facts) -> list[dict[str, str]]:
    """Every flag raised for the row: [{key, label, detail}] in legend order."""
    out = []
    for flag in FLAGS:
        detail = flag.check(facts)
        if detail:
            out.append({"key": flag.key, "label": flag.label, "detail": detail})
    return out


def legend() -> list[dict[str, str]]:
    """The page's flag legend, one line per flag."""
    return [{"key": f.key, "label": f.label, "rule": f.rule} for f in FLAGS]
