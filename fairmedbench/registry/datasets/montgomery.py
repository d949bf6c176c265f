"""Montgomery County chest X-ray set: CXR_png/MCUCXR_####_<0|1>.png, ManualMask/leftMask and
rightMask lung masks, ClinicalReadings/*.txt with the patient's sex and age."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.registry.datasets.card import DatasetCard, age_attributes, register, sex_attribute

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.dataset import ReadResult

ACCESS = "https://openi.nlm.nih.gov/imgs/collections/NLM-MontgomeryCXRSet.zip (NLM, public)"


def _reading(path: Path) -> dict:
    from fairmedbench.registry.datasets.io import note_read

    if path.is_file():
        note_read(path)
    text = path.read_text(errors="replace") if path.is_file() else ""
    sex = re.search(r"Patient'?s Sex:\s*([A-Za-z]+)", text)
    age = re.search(r"Patient'?s Age:\s*0*(\d+)", text)
    return {"sex": sex.group(1).strip().upper()[:1] if sex else None, "age": float(age.group(1)) if age else None}


def _mask(row, target):
    import numpy as np

    from fairmedbench.errors import MissingResourceError
    from fairmedbench.registry.datasets.io import decode_label_map

    parts = {"left": row["mask_left"], "right": row["mask_right"]}
    wanted = ("left", "right") if target in (None, "lungs") else (target,)
    absent = [w for w in wanted if not isinstance(parts[w], str)]
    if absent:
        raise MissingResourceError(f"sample {row['sample_id']}: no ManualMask/{absent[0]}Mask/{row['sample_id']}.png")
    masks = [decode_label_map(parts[w]) > 0 for w in wanted]
    return np.logical_or.reduce(masks)


def read_montgomery(root: Path, keep_missing_images: bool = False) -> ReadResult:
    """Read the Montgomery set: TB label from the file name, sex/age from the clinical readings."""
    import numpy as np
    import pandas as pd

    from fairmedbench.errors import MissingResourceError
    from fairmedbench.registry.datasets.dataset import ReadResult

    base = root / "MontgomerySet" if (root / "MontgomerySet").is_dir() else root
    images = sorted((base / "CXR_png").glob("MCUCXR_*.png"))
    if not images:
        raise MissingResourceError(f"no CXR_png/MCUCXR_*.png under {base}. Get the set: {ACCESS}")
    rows = []
    for p in images:
        m = re.match(r"MCUCXR_(\d+)_([01])$", p.stem)
        if not m:
            continue
        left, right = base / "ManualMask" / "leftMask" / p.name, base / "ManualMask" / "rightMask" / p.name
        rows.append({"sample_id": p.stem, "patient_id": m.group(1), "label": int(m.group(2)), "image": str(p),
                     "mask_left": str(left) if left.is_file() else None,
                     "mask_right": str(right) if right.is_file() else None,
                     **_reading(base / "ClinicalReadings" / f"{p.stem}.txt")})
    df = pd.DataFrame(rows)
    df["label"] = df["label"].astype(np.int64)
    df["mask"] = np.where(df["mask_left"].notna() & df["mask_right"].notna(), df["mask_left"], None)
    notes = ([] if df["mask"].notna().all()
             else [f"{int(df['mask'].isna().sum())} images lack a left or right lung mask"])
    return ReadResult(df, notes, {"images": len(df)}, mask_fn=_mask, source=str(base))


register(DatasetCard(
    name="montgomery",
    title="Montgomery County chest X-rays (lung masks, tuberculosis)",
    tasks=("classification", "segmentation"),
    modality="chest X-ray",
    dim=2,
    label_definition="tuberculosis: the last digit of the file name (MCUCXR_####_1 = TB, _0 = normal); "
                     "masks: lungs = left | right (also 'left', 'right')",
    attributes=(sex_attribute("sex", "M", "F", unknown=("O",)), *age_attributes("age", 60)),
    reader=read_montgomery,
    classes=("normal", "tuberculosis"),
    mask_classes=("lungs", "left", "right"),
    split_policy="patient",
    prompt_templates=("a chest X-ray {}.",),
    class_prompts={"normal": ("of normal lungs",), "tuberculosis": ("with tuberculosis",)},
    size="138 frontal chest X-rays (80 normal, 58 tuberculosis)",
    license="public (NLM); cite Jaeger et al. 2014",
    citation="Jaeger et al., Quant Imaging Med Surg 4(6), 2014",
    access=ACCESS,
    layout="MontgomerySet/CXR_png/MCUCXR_0001_0.png, ManualMask/leftMask/, ManualMask/rightMask/ (same names), "
           "ClinicalReadings/MCUCXR_0001_0.txt ('Patient's Sex: M', 'Patient's Age: 040Y', findings)",
    notes=("'left'/'right' follow the provider's folder names",),
))
