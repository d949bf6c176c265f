"""The metric engine: pure numpy/scipy, usable on any prediction file on a CPU-only machine.

Definitions: fairmedbench/metrics/specs.py (the docs site's metric sheet); importing this package never imports torch.
"""

from fairmedbench.metrics.classification import evaluate_classification
from fairmedbench.metrics.groups import Attribute, intersect, make_attribute, parse_bins
from fairmedbench.metrics.profiles import PROFILES, Profile
from fairmedbench.metrics.result import GAP, OVERALL, AttributeReport, FairnessResult
from fairmedbench.metrics.thresholds import Threshold, choose_threshold

__all__ = [
    "GAP", "OVERALL", "PROFILES", "Attribute", "AttributeReport", "FairnessResult", "Profile", "Threshold",
    "choose_threshold", "evaluate_classification", "intersect", "make_attribute", "parse_bins",
]
