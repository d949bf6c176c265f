"""Fitzpatrick17k: fitzpatrick17k.csv (md5hash, fitzpatrick_scale 1-6 or -1, labels) and images named
<md5hash>.jpg (downloaded by the user from the listed URLs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import AttributeSpec, DatasetCard, register

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://github.com/mattgroh/fitzpatrick17k (CSV with image URLs; images under their sources' terms)"
SKIN = {str(k): str(k) for k in range(1, 7)}


def read_fitzpatrick17k(root: Path, keep_missing_images: bool = False) -> ReadResult:
    """Read fitzpatrick17k.csv; label = malignant (three_partition_label)."""
    import numpy as np

    from fairmedbench.errors import InputError
    from fairmedbench.registry.datasets.common import keep_rows_with_files
    from fairmedbench.registry.datasets.dataset import ReadResult
    from fairmedbench.registry.datasets.io import first_existing, index_files, read_table, require_columns

    path = first_existing(root, ("fitzpatrick17k.csv",), "fitzpatrick17k.csv", ACCESS)
    df = read_table(path, "Fitzpatrick17k metadata", ACCESS)
    if "fitzpatrick_scale" not in df.columns and "fitzpatrick" in df.columns:
        df["fitzpatrick_scale"] = df["fitzpatrick"]
    require_columns(df, ("md5hash", "fitzpatrick_scale", "label", "three_partition_label"), path)
    bad = sorted(set(df["three_partition_label"].astype(str)) - {"benign", "malignant", "non-neoplastic"})
    if bad:
        raise InputError(f"{path}: column 'three_partition_label' has value(s) {bad}")
    df["label"] = (df["three_partition_label"] == "malignant").astype(np.int64)
    df["sample_id"] = df["md5hash"].astype(str)
    df["patient_id"] = df["sample_id"]
    index = index_files([root / "images", root / "data", root], (".jpg", ".jpeg", ".png"))
    stems = {Path(k).stem: str(v) for k, v in index.items()}
    df["image"] = df["sample_id"].map(stems)
    n_meta = len(df)
    df, counts, notes = keep_rows_with_files(df, "image", "image", keep_missing_images, ACCESS, root)
    counts["rows_in_metadata"] = n_meta
    notes.append("no patient ids in the release: each image is its own 'patient' (near-duplicate images exist)")
    return ReadResult(df.reset_index(drop=True), notes, counts, source=str(path))


register(DatasetCard(
    name="fitzpatrick17k",
    title="Fitzpatrick17k (clinical dermatology photos with Fitzpatrick skin type)",
    tasks=("classification",),
    modality="clinical dermatology photograph",
    dim=2,
    label_definition="1 if three_partition_label == 'malignant', else 0 (benign, non-neoplastic)",
    attributes=(
        AttributeSpec("skin_type", "fitzpatrick_scale", tuple(SKIN.values()), mapping=SKIN, unknown_values=("-1",),
                      description="Fitzpatrick skin type 1-6; -1 = not labelled"),
        AttributeSpec("skin_type_binary", "fitzpatrick_scale", ("1-3", "4-6"),
                      mapping={**{str(k): "1-3" for k in (1, 2, 3)}, **{str(k): "4-6" for k in (4, 5, 6)}},
                      unknown_values=("-1",), description="lighter (1-3) vs darker (4-6) skin types"),
    ),
    reader=read_fitzpatrick17k,
    classes=("non-malignant", "malignant"),
    split_policy="patient",
    prompt_templates=("a clinical photo of a {} skin condition.",),
    class_prompts={"non-malignant": ("benign",), "malignant": ("malignant",)},
    size="16,577 clinical images",
    license="CC BY-NC-SA 3.0 (annotations); images under their sources' terms",
    citation="Groh et al., CVPR Workshops 2021",
    access=ACCESS,
    layout="fitzpatrick17k.csv (md5hash, fitzpatrick_scale, fitzpatrick_centaur, label, nine_partition_label, "
           "three_partition_label, qc, url, url_alphanum; older versions: 'fitzpatrick'); images/<md5hash>.jpg",
    layout_status="columns confirmed; the image folder is the user's download (images/, data/ or the root)",
))
