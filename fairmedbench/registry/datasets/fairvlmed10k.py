"""Harvard-FairVLMed10k (FairCLIP): one .npz per patient with the SLO fundus image, glaucoma label,
clinical note and demographic codes inside; Training/ Validation/ Test(ing)/ folders."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import AttributeSpec, DatasetCard, age_attributes, register

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://github.com/Harvard-Ophthalmology-AI-Lab/FairCLIP (Google Drive; CC BY-NC-ND 4.0, request access)"


def harvard_attributes(sex_column: str = "gender") -> tuple[AttributeSpec, ...]:
    """The Harvard Ophthalmology AI Lab demographic codes, as documented in their READMEs."""
    return (
        AttributeSpec("sex", sex_column, ("female", "male"), mapping={"0": "female", "1": "male"},
                      unknown_values=("-1",), description="0 = female, 1 = male"),
        AttributeSpec("race", "race", ("asian", "black", "white"), mapping={"0": "asian", "1": "black", "2": "white"},
                      unknown_values=("-1",), description="0 = Asian, 1 = Black, 2 = White"),
        AttributeSpec("ethnicity", "ethnicity", ("non-hispanic", "hispanic"),
                      mapping={"0": "non-hispanic", "1": "hispanic"},
                      unknown_values=("-1",), description="-1 = unknown"),
        AttributeSpec("language", "language", ("english", "spanish", "other"),
                      mapping={"0": "english", "1": "spanish", "2": "other"}, unknown_values=("-1",)),
        AttributeSpec("maritalstatus", "maritalstatus",
                      ("married or partnered", "single", "divorced", "widowed", "legally separated"),
                      mapping={"0": "married or partnered", "1": "single", "2": "divorced", "3": "widowed",
                               "4": "legally separated"}, unknown_values=("-1",)),
        *age_attributes("age_years", 60),
    )


FIELDS = {"glaucoma": ("glaucoma",), "age": ("age",), "gender": ("gender", "male"), "race": ("race",),
          "ethnicity": ("ethnicity",), "language": ("language",), "maritalstatus": ("maritalstatus",),
          "pid": ("pid",)}


def read_harvard_npz(root: Path, card_name: str, access: str, fields: dict, label_field: str | None,
                     image_keys: tuple[str, ...], mask_keys: tuple[str, ...] = (),
                     skip_bad: bool = False) -> ReadResult:
    """Shared reader of the Harvard .npz releases (attributes inside each file)."""
    import numpy as np

    from fairmedbench.errors import MissingResourceError
    from fairmedbench.registry.datasets.common import age_in_years, npz_files, read_npz_table
    from fairmedbench.registry.datasets.dataset import ReadResult

    files = npz_files(root)
    if not files:
        raise MissingResourceError(f"no .npz files under {root} (Training/, Validation/, Test/ or data/). "
                                   f"Get {card_name}: {access}")
    required = [c for c in fields if c not in ("pid", "ethnicity", "language", "maritalstatus")]
    df, counts = read_npz_table(files, fields, required, image_keys, mask_keys, skip_bad)
    df["sample_id"] = df["file"].str.replace(".npz", "", regex=False)
    df["patient_id"] = df["pid"].astype(str) if df["pid"].notna().all() else df["sample_id"]
    df["age_years"], notes = age_in_years(df["age"])
    if label_field is not None:
        df["label"] = df[label_field].astype(float).astype(np.int64)
    if df["split"].isna().all():
        df = df.drop(columns=["split"])
        notes.append("no Training/Validation/Test folders: no official split; use policy 'patient'")
    if df["pid"].isna().all():
        notes.append("no patient id inside the files: one file per patient, as the provider states")
    return ReadResult(df, notes, {"npz_files": len(files), **counts}, source=str(root))


def read_fairvlmed10k(root: Path, skip_bad: bool = False) -> ReadResult:
    """Read FairVLMed10k .npz files (slo_fundus; glaucoma 0/1; demographic codes)."""
    return read_harvard_npz(root, "FairVLMed10k", ACCESS, FIELDS, "glaucoma", ("slo_fundus", "fundus_slo"),
                            skip_bad=skip_bad)


register(DatasetCard(
    name="fairvlmed10k",
    title="Harvard-FairVLMed10k (SLO fundus, glaucoma, clinical notes)",
    tasks=("classification",),
    modality="SLO fundus",
    dim=2,
    label_definition="glaucoma field of each .npz: 1 = glaucoma, 0 = non-glaucoma",
    attributes=harvard_attributes("gender"),
    reader=read_fairvlmed10k,
    classes=("non-glaucoma", "glaucoma"),
    split_policy="official",
    prompt_templates=("a fundus image of {}.",),
    class_prompts={"non-glaucoma": ("no glaucoma",), "glaucoma": ("glaucoma",)},
    size="10,000 SLO fundus images with clinical notes",
    license="CC BY-NC-ND 4.0 (non-commercial research)",
    citation="Luo et al., FairCLIP, CVPR 2024",
    access=ACCESS,
    layout="Training/, Validation/, Test(ing)/ with data_xxxxx.npz (keys slo_fundus, glaucoma, age, gender, race, "
           "ethnicity, language, maritalstatus, md, tds, note); data_summary.csv beside them",
    layout_status="confirmed from the provider README (keys); the image key is 'slo_fundus' in the README and "
                  "'fundus_slo' in the provider's loader: both accepted",
    notes=("7,000 / 1,000 / 2,000 official split by folder",
           "-1 codes (unknown ethnicity/language/marital status) are 'not recorded', never a group"),
))
