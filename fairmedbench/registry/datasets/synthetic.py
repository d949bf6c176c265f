"""Built-in synthetic datasets with known, injected biases: the embedded default and the positive and
negative controls of the benchmark. Grayscale 256x256 images (or small volumes) with an elliptic
lesion (label = lesion present, mask = lesion), attributes sex and age.

The sample table (groups, labels, splits; exact counts) is drawn in one vectorised step from the seed;
each image is rendered on demand from its own seed (seed, index), so any sample is reproducible alone.
Importing this module is light (numpy is imported inside the functions)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from fairmedbench.registry.datasets.card import AttributeSpec, DatasetCard, age_attributes, register

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import pandas as pd

    from fairmedbench.registry.datasets.dataset import ReadResult

GROUPS = ("female", "male")
RAW_SEX = {"female": "F", "male": "M"}


def _per_group(value: float) -> dict[str, float]:
    return {g: value for g in GROUPS}


@dataclass(frozen=True)
class SynthConfig:
    """Generator settings. Per-group mappings are keyed by 'female'/'male'.

    Bias mechanisms: acquisition shift (`brightness`, `noise`, `texture`), lesion `contrast` (negative:
    lesions darker than their surroundings), `prevalence` shift, `label_noise` (fraction of observed
    labels flipped), `marker` (a corner marker present in half of each group's samples once any group
    has a non-zero value, whose presence tracks the label with this strength: 0 = independent, 1 =
    exactly the positives), and under-representation (`female_share_train` below `female_share`).
    `older_contrast` (per group): the lesion contrast from age `older_age` on, in place of `contrast` (an
    interaction of sex and age; None: `contrast` at every age).

    `grades` = 0: the label is lesion presence (binary). `grades` = K >= 2: an ordinal, density-like label
    0..K-1 drawn in equal numbers per split and group; the lesion's intensity is grade/(K-1) of its full
    amplitude (grade 0: none visible), so a lower `contrast` weakens the grade signal of that group."""

    n: int = 1000
    seed: int = 0
    size: int = 256
    depth: int = 0
    split_fractions: tuple[float, float, float] = (0.6, 0.1, 0.3)
    female_share: float = 0.5
    female_share_train: float | None = None
    prevalence: Mapping[str, float] = field(default_factory=lambda: _per_group(0.5))
    contrast: Mapping[str, float] = field(default_factory=lambda: _per_group(1.0))
    brightness: Mapping[str, float] = field(default_factory=lambda: _per_group(0.0))
    noise: Mapping[str, float] = field(default_factory=lambda: _per_group(0.04))
    texture: Mapping[str, float] = field(default_factory=lambda: _per_group(1.0))
    label_noise: Mapping[str, float] = field(default_factory=lambda: _per_group(0.0))
    marker: Mapping[str, float] = field(default_factory=lambda: _per_group(0.0))
    age_range: tuple[int, int] = (20, 89)
    lesion_amplitude: float = 0.14
    grades: int = 0
    older_contrast: Mapping[str, float] | None = None
    older_age: int = 60

    def validate(self) -> SynthConfig:
        """Check ranges; InputError naming the field."""
        from fairmedbench.errors import InputError

        if self.n < 10:
            raise InputError(f"synthetic n={self.n}: need at least 10 samples")
        if self.size < 16 or (self.depth and self.depth < 4):
            raise InputError(f"synthetic size={self.size}, depth={self.depth} too small")
        for name in ("prevalence", "label_noise", "marker"):
            m = getattr(self, name)
            if set(m) != set(GROUPS) or any(not 0 <= v <= 1 for v in m.values()):
                raise InputError(f"synthetic {name}={dict(m)}: need values in [0, 1] for {GROUPS}")
        for name in ("contrast", "older_contrast"):
            m = getattr(self, name)
            if m is not None and (set(m) != set(GROUPS) or any(not -2 <= v <= 2 for v in m.values())):
                raise InputError(f"synthetic {name}={dict(m)}: need values in [-2, 2] for {GROUPS} "
                                 "(negative = lesions darker than their surroundings)")
        if self.grades == 1 or self.grades < 0 or self.grades > 10:
            raise InputError(f"synthetic grades={self.grades}: 0 (binary lesion label) or 2..10 ordinal grades")
        if self.grades and any(self.label_noise.values()):
            raise InputError("synthetic label_noise applies to the binary lesion label; set it to 0 with grades")
        for share in (self.female_share, self.female_share_train):
            if share is not None and not 0 <= share <= 1:
                raise InputError(f"synthetic female share {share} outside [0, 1]")
        return self

    def lesion_contrast(self, group: str, age: int) -> float:
        """The lesion contrast of a sample of `group` aged `age`: `older_contrast` from `older_age` on, when set."""
        if self.older_contrast is not None and age >= self.older_age:
            return float(self.older_contrast[group])
        return float(self.contrast[group])

    def content(self) -> str:
        """The settings as the dataset's content identity (JSON); `older_contrast` and `older_age` only when an
        age interaction is set, so the cards that have none keep their fingerprints."""
        fields = asdict(self)
        if self.older_contrast is None:
            del fields["older_contrast"], fields["older_age"]
        return json.dumps(fields, sort_keys=True)

    def share(self, split: str) -> float:
        """Share of the female group in `split`."""
        if split == "train" and self.female_share_train is not None:
            return self.female_share_train
        return self.female_share


def _round_counts(n: int, fractions) -> list[int]:
    from fairmedbench.engine.splits import _largest_remainder

    return _largest_remainder(n, fractions)


def make_table(cfg: SynthConfig, name: str) -> pd.DataFrame:
    """The sample table: exact split sizes, group counts per split, positives per group, flipped labels."""
    import numpy as np
    import pandas as pd

    cfg.validate()
    rng = np.random.default_rng([cfg.seed, 0x5EED])
    rows: list[tuple] = []
    for split, n_split in zip(("train", "val", "test"), _round_counts(cfg.n, cfg.split_fractions)):
        share = cfg.share(split)
        n_f = int(round(n_split * share))
        for group, n_g in (("female", n_f), ("male", n_split - n_f)):
            lesion = np.zeros(n_g, dtype=np.int64)
            if cfg.grades:  # ordinal grade, equal numbers of each (largest remainder)
                lesion = np.repeat(np.arange(cfg.grades), _round_counts(n_g, [1.0 / cfg.grades] * cfg.grades))
            else:
                lesion[:int(round(n_g * cfg.prevalence[group]))] = 1
            flips = np.zeros(n_g, dtype=bool)
            n_flip = int(round(n_g * cfg.label_noise[group]))
            flips[rng.permutation(n_g)[:n_flip]] = True
            m = cfg.marker[group]
            p_marker = np.where(lesion == 1, 0.5 + m / 2, 0.5 - m / 2) if any(cfg.marker.values()) else np.zeros(n_g)
            marker = rng.random(n_g) < p_marker
            for k in range(n_g):
                rows.append((split, group, int(lesion[k]), bool(flips[k]), bool(marker[k])))
    perm = rng.permutation(len(rows))
    table = pd.DataFrame([rows[j] for j in perm], columns=["split", "group", "lesion", "flipped", "marker"])
    n = len(table)
    table.insert(0, "index", np.arange(n))
    table.insert(0, "sample_id", [f"{name}-{i:05d}" for i in range(n)])
    table.insert(1, "patient_id", [f"{name}-P{i:05d}" for i in range(n)])
    table["label"] = np.where(table["flipped"], 1 - table["lesion"], table["lesion"]).astype(np.int64)
    table["sex"] = table["group"].map(RAW_SEX)
    lo, hi = cfg.age_range
    table["age"] = rng.integers(lo, hi + 1, size=n)
    if cfg.depth:
        table["spacing"] = [(1.0, 1.0, 1.0)] * n
    return table.drop(columns=["group"])


@lru_cache(maxsize=8)
def _interp_index(out: int, inp: int):
    """Linear interpolation from `inp` to `out` points: (lower index, weight of the upper one)."""
    import numpy as np

    pos = np.linspace(0, inp - 1, out)
    lo = np.floor(pos).astype(np.intp).clip(0, inp - 2)
    return lo, (pos - lo).astype(np.float32)


def _upsample(small, shape: tuple[int, ...]):
    """Separable linear upsampling of a coarse field to `shape` (gathers, no BLAS)."""
    out = small
    for axis, n in enumerate(shape):
        lo, w = _interp_index(n, small.shape[axis])
        bshape = [1] * len(shape)
        bshape[axis] = n
        w = w.reshape(bshape)
        out = out.take(lo, axis=axis) * (1 - w) + out.take(lo + 1, axis=axis) * w
    return out


@lru_cache(maxsize=4)
def _grid(shape: tuple[int, ...]):
    import numpy as np

    axes = [np.arange(s, dtype=np.float32) for s in shape]
    return np.meshgrid(*axes, indexing="ij")


@lru_cache(maxsize=4)
def _vignette(shape: tuple[int, ...]):
    import numpy as np

    grids = _grid(shape)
    r2 = sum(((g - (s - 1) / 2) / (s / 2)) ** 2 for g, s in zip(grids, shape))
    return (0.12 * (1 - np.clip(r2, 0, 2) / 2)).astype(np.float32)


def _smooth_field(rng, shape: tuple[int, ...], coarse: int):
    """Low-frequency random field of `shape` (2D or 3D), unit-ish amplitude."""
    import numpy as np

    return _upsample(rng.standard_normal((coarse,) * len(shape), dtype=np.float32), shape)


def render(cfg: SynthConfig, index: int, group: str, lesion: int, marker: bool, age: int = 0
           ) -> tuple[np.ndarray, np.ndarray]:
    """Render one sample from its own seed: (uint8 image or volume, bool lesion mask); `age` matters only to a
    config with an age interaction (`older_contrast`)."""
    import numpy as np

    rng = np.random.default_rng([cfg.seed, 1, int(index)])
    shape = (cfg.depth, cfg.size, cfg.size) if cfg.depth else (cfg.size, cfg.size)
    tex = cfg.texture[group]
    img = 0.42 + cfg.brightness[group] + _vignette(shape)
    img = img + (0.07 * tex) * _smooth_field(rng, shape, 6) + (0.035 * tex) * _smooth_field(rng, shape, 24)
    # lesion geometry is drawn for every sample so that the random stream does not depend on the label
    center = [rng.uniform(0.3 * s, 0.7 * s) for s in shape]
    radii = [rng.uniform(0.04 * s, 0.11 * s) for s in shape]
    angle = rng.uniform(0, np.pi)
    # the lesion profile is non-zero where d < 1.25, i.e. within 1.12 radii: compute it in that box only
    reach = [1.15 * radii[0] + 1] * (len(shape) == 3) + [1.15 * max(radii[-1], radii[-2]) + 1] * 2
    box = tuple(slice(max(0, int(c - r)), min(n, int(c + r) + 2)) for c, r, n in zip(center, reach, shape))
    grids = [g[box] for g in _grid(shape)]
    y, x = grids[-2] - center[-2], grids[-1] - center[-1]
    c, s = np.cos(angle), np.sin(angle)
    d = ((c * x + s * y) / radii[-1]) ** 2 + ((-s * x + c * y) / radii[-2]) ** 2
    if cfg.depth:
        d = d + ((grids[0] - center[0]) / radii[0]) ** 2
    mask = np.zeros(shape, dtype=bool)
    if lesion:
        level = lesion / (cfg.grades - 1) if cfg.grades else 1.0
        mask[box] = d <= 1.0
        amplitude = cfg.lesion_amplitude * cfg.lesion_contrast(group, age) * level
        img[box] += amplitude * np.clip((1.25 - d) / 0.5, 0.0, 1.0)
    noise = rng.standard_normal(shape, dtype=np.float32)
    img = img + cfg.noise[group] * noise
    if marker:
        m = max(4, cfg.size // 24)
        img[..., m : 2 * m, m : 2 * m] = 0.95
    out = np.clip(img * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return out, mask


class SyntheticReader:
    """Reader of one synthetic preset: `n` and `data_seed` override the preset; other fields via `config`."""

    def __init__(self, name: str, config: SynthConfig) -> None:
        self.name = name
        self.config = config
        self.__qualname__ = f"SyntheticReader[{name}]"

    def __call__(self, root: Path | None = None, n: int | None = None, data_seed: int | None = None,
                 config: Mapping[str, Any] | None = None) -> ReadResult:
        """Generate the sample table (images render lazily); `data_seed` is the generation seed
        (distinct from any split seed)."""
        from fairmedbench.errors import InputError
        from fairmedbench.registry.datasets.dataset import ReadResult

        changes = dict(config or {})
        if n is not None:
            changes["n"] = int(n)
        if data_seed is not None:
            changes["seed"] = int(data_seed)
        try:
            cfg = replace(self.config, **changes)
        except TypeError as exc:
            raise InputError(f"synthetic config: {exc}; fields: "
                             f"{', '.join(SynthConfig.__dataclass_fields__)}") from None
        table = make_table(cfg, self.name)
        group_of = {v: k for k, v in RAW_SEX.items()}

        @lru_cache(maxsize=4)
        def sample(index: int, group: str, lesion: int, marker: bool, age: int):
            return render(cfg, index, group, lesion, marker, age)

        def key(row):
            return int(row["index"]), group_of[row["sex"]], int(row["lesion"]), bool(row["marker"]), int(row["age"])

        return ReadResult(
            samples=table,
            notes=[f"synthetic, generated from seed {cfg.seed} (n={cfg.n}); nothing is read from disk"],
            counts={"seed": cfg.seed},
            image_fn=lambda row: sample(*key(row))[0],
            mask_fn=lambda row, target: sample(*key(row))[1],
            source=f"synthetic:{self.name}",
            content=cfg.content(),
        )


def _attributes() -> tuple[AttributeSpec, ...]:
    sex = AttributeSpec("sex", "sex", ("female", "male"), mapping={"F": "female", "M": "male"})
    return (sex, *age_attributes("age", 60))


PROMPTS = ("a synthetic scan {}.",)
CLASS_PROMPTS = {"negative": ("without a lesion",), "positive": ("with a bright lesion",)}


def _card(name: str, title: str, cfg: SynthConfig, expected: tuple[dict, ...], notes: tuple[str, ...]) -> DatasetCard:
    dim = 3 if cfg.depth else 2
    grades = tuple(f"grade{k}" for k in range(cfg.grades))
    shape = f"{cfg.depth}x{cfg.size}x{cfg.size} volumes" if cfg.depth else f"{cfg.size}x{cfg.size} images"
    return register(DatasetCard(
        name=name,
        title=title,
        tasks=("multiclass",) if grades else ("classification", "segmentation"),
        modality=f"synthetic grayscale ({dim}D)",
        dim=dim,
        label_definition=(f"ordinal grade 0..{cfg.grades - 1}: the lesion's intensity is grade/{cfg.grades - 1} of "
                          "its full amplitude (density-like; grade 0 shows none)" if grades else
                          "1 if the sample contains a lesion (after any injected label noise); mask = the lesion"),
        classes=grades or ("negative", "positive"),
        attributes=_attributes(),
        reader=SyntheticReader(name, cfg),
        mask_classes=() if grades else ("lesion",),
        split_policy="official",
        prompt_templates=() if grades else PROMPTS,
        class_prompts={} if grades else CLASS_PROMPTS,
        license="Apache-2.0 (generated)",
        citation="fairmedbench built-in synthetic data",
        access="built-in: generated from a seed, no download",
        layout=f"generated: {cfg.n} {shape}, split {cfg.split_fractions} (official split column)",
        notes=notes + (f"config: {_describe(cfg)}",),
        expected_disparities=expected,
        synthetic=True,
    ))


def _describe(cfg: SynthConfig) -> str:
    base = SynthConfig()
    diffs = [f"{k}={getattr(cfg, k)}" for k in ("n", "size", "depth", "split_fractions", "female_share")]
    diffs += [f"{k}={dict(getattr(cfg, k))}" if isinstance(getattr(cfg, k), Mapping) else f"{k}={getattr(cfg, k)}"
              for k in SynthConfig.__dataclass_fields__
              if k not in ("n", "size", "depth", "split_fractions", "female_share", "seed")
              and getattr(cfg, k) != getattr(base, k)]
    return ", ".join(diffs)


CONTROL = SynthConfig()
CONTRAST = replace(CONTROL, contrast={"female": 0.35, "male": 1.0})
# the minority's lesions are dark (hypo-intense) where the majority's are bright: a different image -> label
# signal that a model trained on 90% males learns little of, so reweighting the minority has something to fix
UNDERREP = replace(CONTROL, n=400, female_share_train=0.1, contrast={"female": -0.8, "male": 1.0},
                   noise={"female": 0.05, "male": 0.04}, brightness={"female": 0.1, "male": 0.0},
                   texture={"female": 1.2, "male": 1.0})
# fairness laws (Meissen et al.): the minority's lesions are invisible and its label shows only as a corner marker
# (present in 85% of its positives, 15% of its negatives) that carries no label information in the majority, so
# only minority training samples teach it and the minority's AUC grows with its training share; half of the
# training split is female so every share of a fixed-size training set can be drawn. Small images (64 px) and a
# brighter lesion keep the sweep cheap with random-weight encoders.
LAWS = replace(CONTROL, n=600, size=64, lesion_amplitude=0.3, contrast={"female": 0.0, "male": 1.0},
               marker={"female": 0.7, "male": 0.0})
LAWS_CONTROL = replace(CONTROL, n=600, size=64, lesion_amplitude=0.3)
# external-evaluation partner of synth-contrast: a "site" where the bias flips (male lesions at 0.35x contrast), drawn
# from its own seed so that no image is pixel-identical to one of synth-contrast's or synth-control's (seed 0: the
# twins share their male and lesion-free images, an external site must share none)
FLIP_SEED = 2
FLIP = replace(CONTROL, seed=FLIP_SEED, contrast={"female": 1.0, "male": 0.35})
CONTROL_3D = replace(CONTROL, n=200, size=64, depth=32)
CONTRAST_3D = replace(CONTROL_3D, contrast={"female": 0.35, "male": 1.0})

NO_GAP = ({"attribute": "sex", "metric": "auc", "direction": "none",
           "note": "negative control: the CI of auc_diff (male - female) must include 0"},
          {"attribute": "sex", "metric": "dsc", "direction": "none",
           "note": "negative control: the CI of dsc_diff (male - female) must include 0"})
FEMALE_LOWER = ({"attribute": "sex", "group": "female", "metric": "auc", "direction": "lower"},
                {"attribute": "sex", "group": "female", "metric": "dsc", "direction": "lower"})

_card("synth-control", "Synthetic lesions, no bias (negative control)", CONTROL, NO_GAP,
      ("attributes present, identical generation for every group: any reported gap is noise",))
_card("synth-contrast", "Synthetic lesions, lower lesion contrast for females (positive control)", CONTRAST,
      FEMALE_LOWER, ("lesion contrast in the female group is 0.35x the male group's",))
_card("synth-flip", "Synthetic lesions, lower lesion contrast for males (synth-contrast's bias flipped)", FLIP,
      ({"attribute": "sex", "group": "male", "metric": "auc", "direction": "lower"},
       {"attribute": "sex", "group": "male", "metric": "dsc", "direction": "lower"}),
      ("lesion contrast in the male group is 0.35x the female group's: synth-contrast's bias reversed",
       "external-evaluation site: a model trained on synth-contrast and evaluated here (--eval-dataset synth-flip) "
       "must show a shift of the sex difference whose interval excludes 0; on synth-control the bias vanishes",
       f"generated from its own seed ({FLIP_SEED}; synth-contrast and synth-control: 0), so no image is shared with "
       "theirs; synth-control as an external site needs another data_seed (synth-control:data_seed=3)"))
_card("synth-underrep", "Synthetic lesions, females under-represented in train and harder", UNDERREP,
      FEMALE_LOWER + ({"attribute": "sex", "metric": "auc_gap",
                       "direction": "smaller with groupdro or resampling than erm"},),
      ("females are 10% of train and 50% of val/test; their images are acquired differently (brighter, more "
       "texture and noise) and their lesions are dark (hypo-intense, 0.8x the amplitude) where males' are bright",
       "the under-representation lives in the official split: use split policy 'official'",
       "n=400 by default (24 females in train); with more minority samples the gain from reweighting shrinks "
       "(LiteMedSAM lp, n=1000, 60 females in train: GroupDRO +0.011, resampling +0.008 worst-group AUC)"))
_card("synth-laws", "Synthetic lesions, a minority label signal only minority samples teach (fairness laws)", LAWS,
      (), ("female lesions are invisible; a female's label shows only as a corner marker (in 85% of female positives, "
           "15% of female negatives); in males the marker is independent of the label, so the marker is learnt only "
           "from female training samples",
           "for the train_group_share sweep (Meissen et al.): the female AUC is expected to rise with the female "
           "share of a fixed-size training set; pair it with synth-laws-control",))
_card("synth-laws-control", "Synthetic lesions, identical groups (control of the fairness-laws sweep)", LAWS_CONTROL,
      NO_GAP, ("the same generation for both groups (64 px, lesion amplitude 0.3, as synth-laws): the female AUC must "
               "not move with the female share of the training set",))
# ordinal (density-like grades 0..3): the female group's grade signal is 0.35x the male group's. A stronger full
# amplitude than the binary lesion's, since the grades split it into three steps.
ORDINAL = replace(CONTROL, grades=4, lesion_amplitude=0.3, contrast={"female": 0.35, "male": 1.0})
_card("synth-ordinal", "Synthetic ordinal grades 0..3, weaker grade signal for females (multi-class control)",
      ORDINAL, ({"attribute": "sex", "group": "female", "metric": "macro_auc", "direction": "lower"},
                {"attribute": "sex", "group": "female", "metric": "kappa_quadratic", "direction": "lower"}),
      ("grades in equal numbers per split and group; the female group's lesion intensity per grade is 0.35x the "
       "male group's", "multi-class task (softmax head); no mask task: grade 0 has no lesion to segment"))
_card("synth3d-control", "Synthetic 3D lesions, no bias (negative control)", CONTROL_3D, NO_GAP,
      ("small volumes for the 3D paths; spacing 1 mm isotropic",))
_card("synth3d-contrast", "Synthetic 3D lesions, lower lesion contrast for females", CONTRAST_3D, FEMALE_LOWER,
      ("lesion contrast in the female group is 0.35x the male group's",))
# interaction-only bias: only women aged 60 or more have lesions at reduced contrast (0.25x), so the disparity lives
# in one cell of sex x age and each single attribute's gap is diluted (sex: the young women are unaffected, age: the
# older men are). 2000 samples (600 in test, about 130 in the older-female cell) so a crossed audit can see it; the
# twin draws the same table (same seed: same sexes, ages, labels) with no interaction.
CROSSED_CONTROL = replace(CONTROL, n=2000, older_contrast={"female": 1.0, "male": 1.0})
CROSSED = replace(CROSSED_CONTROL, older_contrast={"female": 0.25, "male": 1.0})
_card("synth-crossed", "Synthetic lesions, lower lesion contrast for women aged 60+ only (crossed positive control)",
      CROSSED, ({"attribute": "sex*age", "group": "female|>=60", "metric": "auc_gap", "direction": "larger",
                 "note": "the older-female cell's AUC is the lowest; the crossed gap exceeds the sex gap and the age "
                         "gap, each diluted by the cells the bias spares"},),
      ("lesion contrast is 0.25x for women aged 60 or more and 1x for everyone else: audit with --attribute sex*age",
       "pair it with synth-crossed-control (the same samples, no interaction)"))
_card("synth-crossed-control", "Synthetic lesions, the crossed control's twin with no bias (negative control)",
      CROSSED_CONTROL, ({"attribute": "sex*age", "metric": "auc_gap", "direction": "none",
                         "note": "negative control: the crossed gap is noise"},),
      ("synth-crossed's samples (same seed, sexes, ages and labels) with lesion contrast 1x in every cell",))
