"""Metric profiles: named sets of conventions as registered objects.

A profile is one frozen record of every rule it changes, read by the engine, the CLI and the board; adding a
profile is one `PROFILES.add` here, never a `profile == ...` branch elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairmedbench._registry import Registry
from fairmedbench.errors import InputError


@dataclass(frozen=True)
class Profile:
    """The rules of one metric profile.

    threshold_policy: None = the user's policy (or the default: val_youden with validation rows, else
    fixed:0.5); a policy name = that policy always, applied per attribute to the evaluated samples when
    `threshold_on_evaluated_set`. comparator: '>=' or '>'. ece_bins: None = the caller's number of bins.
    ece_binning: 'equal_width' (on [0, 1]) or 'observed_range' (pandas.cut over the scores seen).
    eod: also report `eod` = 1 - (ΔTPR + ΔTNR)/2. es_std_name: name under which mean / (1 + population std
    of group means) is reported for segmentation (None = not reported). exclude_one_class_groups: groups
    holding one label are left out of every gap, difference, worst group and ES sum (not only of those whose
    metric is undefined there). accepts_threshold: whether a user-given threshold policy is allowed. tasks: the
    run tasks it applies to, empty for every task (a run of another task refuses it: its numbers would be the
    default profile's).
    """

    name: str
    about: str
    threshold_policy: str | None = None
    threshold_on_evaluated_set: bool = False
    comparator: str = ">="
    ece_bins: int | None = None
    ece_binning: str = "equal_width"
    eod: bool = False
    es_std_name: str | None = None
    exclude_one_class_groups: bool = False
    accepts_threshold: bool = True
    tasks: tuple[str, ...] = ()

    def ece_description(self, ece_bins: int) -> dict[str, object]:
        """The ECE setting recorded in a result's meta."""
        bins = self.ece_bins if self.ece_bins is not None else ece_bins
        binning = "observed range (pandas.cut)" if self.ece_binning == "observed_range" else "equal width on [0,1]"
        return {"bins": bins, "binning": binning}


PROFILES: Registry[Profile] = Registry("metric profile")

PROFILES.add_named(Profile(
    "default", "the project's conventions: threshold chosen on validation, '>=', ECE 15 equal-width "
               "bins, one-class groups left out only of the metrics undefined for them"))
PROFILES.add_named(Profile(
    "fairmedfm", "FairMedFM compatibility: best-F1 threshold on the evaluated set, '>', ECE 10 bins over the "
                 "observed score range, eod = 1 - (ΔTPR + ΔTNR)/2, es_dsc = mean/(1 + std of group means), "
                 "groups with one label left out of every gap (as the fairmedfm package does)",
    threshold_policy="eval_best_f1_fairmedfm", threshold_on_evaluated_set=True, comparator=">", ece_bins=10,
    ece_binning="observed_range", eod=True, es_std_name="es_dsc", exclude_one_class_groups=True,
    accepts_threshold=False, tasks=("classification", "segmentation")))
PROFILES.add_named(Profile(
    "fairseg", "FairSeg/FairCLIP: the default ES forms, plus FairSeg's std variant as dsc_es_std",
    es_std_name="dsc_es_std", tasks=("segmentation",)))


def get_profile(profile: str | Profile) -> Profile:
    """The registered profile of that name (a Profile passes through); unknown names are an InputError."""
    return profile if isinstance(profile, Profile) else PROFILES.get(profile)


def check_threshold(profile: str | Profile, threshold: str | None) -> None:
    """A user threshold policy under a profile that fixes its own is an error, not silently ignored."""
    p = get_profile(profile)
    if threshold is not None and not p.accepts_threshold:
        raise InputError(f"the {p.name!r} metric profile chooses its own threshold ({p.threshold_policy}); "
                         f"drop --threshold {threshold}, or use --profile default to choose one")
