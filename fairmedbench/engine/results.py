"""A stored run result read back as a typed object (torch-free): the document's provenance, its metrics as a
`FairnessResult`, and its per-sample predictions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.metrics.result import GAP, OVERALL, AttributeReport, FairnessResult

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RunResult:
    """One seed's result document (as written by a run) and the folder it lives in."""

    doc: dict[str, Any]
    folder: Path

    @property
    def seed(self) -> int:
        """The training seed."""
        return int(self.doc["spec"]["seed"])

    @property
    def kind(self) -> str:
        """run-classification, run-segmentation, ..."""
        return str(self.doc["kind"])

    @property
    def spec(self) -> dict[str, Any]:
        """The run's config identity plus the seed."""
        spec: dict[str, Any] = self.doc["spec"]
        return spec

    @property
    def inputs(self) -> dict[str, Any]:
        """Dataset and model provenance (fingerprints, weights, seen in pretraining)."""
        inputs: dict[str, Any] = self.doc["inputs"]
        return inputs

    def fairness(self) -> FairnessResult:
        """The metrics as the engine's FairnessResult (values and CIs per group; NaN where undefined)."""
        reports = [AttributeReport.from_dict(r) for r in self.doc["result"]["reports"]]
        return FairnessResult(reports, self.doc["result"]["meta"])

    def cell(self, metric: str, attribute: str, task: str | None = None) -> tuple[float, float, float]:
        """(value, ci_low, ci_high) of a whole-population or between-group metric (the first task by default)."""
        reports = [r for r in self.fairness().reports if r.attribute == attribute and task in (None, r.task)]
        if not reports:
            raise KeyError(f"no report for attribute {attribute!r}" + (f" and task {task!r}" if task else ""))
        per = reports[0].values.get(metric, {})
        return per.get(OVERALL) or per.get(GAP) or (math.nan, math.nan, math.nan)

    def value(self, metric: str, attribute: str, task: str | None = None) -> float:
        """The point value of `cell` (NaN when undefined)."""
        return self.cell(metric, attribute, task)[0]

    def predictions(self) -> pd.DataFrame:
        """The per-sample predictions (pandas DataFrame)."""
        import pandas as pd

        return pd.read_parquet(self.folder / self.doc["predictions"]["file"])
