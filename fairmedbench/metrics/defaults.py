"""Every scoring default, stated once: the metric engine's parameters, `ScoreSettings` and the CLI's options read
these (tests/test_scoring_defaults.py checks that they agree). Pure Python."""

from __future__ import annotations

#: bootstrap resamples per confidence interval, the default of every run, evaluation and study
N_BOOT = 2000
#: permutations of the group label per gap / two-group difference test
N_PERM = 1000
#: the confidence level of every interval
CI_LEVEL = 0.95
#: the smallest group that gets an interval (smaller groups: point estimates, their gaps keep theirs)
MIN_GROUP_SIZE = 30
#: equal-width bins of the expected calibration error
ECE_BINS = 15
#: the threshold policy of a thresholded task with validation rows, and without them (metrics.thresholds)
THRESHOLD_WITH_VAL = "val_youden"
THRESHOLD_WITHOUT_VAL = "fixed:0.5"


def threshold_policy(has_val: bool) -> str:
    """The default threshold policy: chosen on the validation rows where there are any, else fixed at 0.5."""
    return THRESHOLD_WITH_VAL if has_val else THRESHOLD_WITHOUT_VAL
