"""The study report's figures, drawn with matplotlib and saved as PNG and SVG.

Why matplotlib (not plotly/altair): the figures are static PNG/SVG files that a paper or a slide can use as
they are, and the HTML page embeds the PNGs as data URIs so it stays one self-contained file with no JavaScript
and nothing fetched; matplotlib is already the package's plotting library (report/figures.py) and needs no
browser or headless renderer to export. Each function takes plain rows (dicts) and a path stem and returns the
files written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from fairmedbench.report.figures import COLORS, FORMATS, _pyplot

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from fairmedbench.analysis.fairness_laws import LineFit, PointSummary


def save_all(fig: Figure, plt: ModuleType, stem: Path) -> list[Path]:
    """Save one figure in every format of FORMATS (PNG and SVG) as `stem`.<ext>; close it."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for ext in FORMATS:
        p = stem.with_name(f"{stem.name}.{ext}")
        fig.savefig(p, dpi=110, bbox_inches="tight", metadata={"Date": None} if ext == "svg" else None)
        out.append(p)
    plt.close(fig)
    return out


def _err(mean: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Asymmetric error bars; an undefined interval draws none."""
    return np.vstack([np.nan_to_num(mean - lo), np.nan_to_num(hi - mean)])


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def gap_panels(rows: Sequence[dict[str, Any]], *, metric_label: str, stem: Path, title: str) -> list[Path]:
    """FairMedFM Figs 2/3: one panel per dataset, each entry (FM, usage) a point with its 95% CI across seeds.
    rows: dataset, label, mean, ci_low, ci_high."""
    plt = _pyplot()
    datasets = sorted({r["dataset"] for r in rows})
    labels = sorted({r["label"] for r in rows})
    fig, axes = plt.subplots(1, len(datasets), figsize=(max(3.6, 3.0 * len(datasets)), 0.35 * len(labels) + 1.6),
                             squeeze=False, sharey=True)
    pos = {lab: i for i, lab in enumerate(reversed(labels))}
    for ax, ds in zip(axes[0], datasets):
        sub = [r for r in rows if r["dataset"] == ds]
        m = np.array([r["mean"] for r in sub], dtype=float)
        lo = np.array([r["ci_low"] for r in sub], dtype=float)
        hi = np.array([r["ci_high"] for r in sub], dtype=float)
        y = [pos[r["label"]] for r in sub]
        ax.errorbar(m, y, xerr=_err(m, lo, hi), fmt="o", color=COLORS[0], capsize=3)
        ax.axvline(0, color="#999", lw=0.8)
        ax.set_title(ds, fontsize=9)
        ax.set_xlabel(metric_label)
    axes[0][0].set_yticks(list(pos.values()))
    axes[0][0].set_yticklabels(list(pos.keys()), fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_all(fig, plt, stem)


def tradeoff_panels(rows: Sequence[dict[str, Any]], facets: Sequence[str], *, x_label: str, y_label: str,
                    stem: Path, title: str) -> list[Path]:
    """FairMedFM Fig 4: utility (x) against the equity-scaled score (y), one panel per facet (usage, FM category,
    prompt), points coloured by the facet's level, 95% CI whiskers both ways.
    rows: x, x_lo, x_hi, y, y_lo, y_hi and one key per facet."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(facets), figsize=(4.2 * len(facets), 3.8), squeeze=False)
    for ax, facet in zip(axes[0], facets):
        levels = sorted({str(r[facet]) for r in rows})
        for i, lev in enumerate(levels):
            sub = [r for r in rows if str(r[facet]) == lev]
            x, y = (np.array([r[k] for r in sub], dtype=float) for k in ("x", "y"))
            ax.errorbar(x, y, xerr=_err(x, *(np.array([r[k] for r in sub], dtype=float) for k in ("x_lo", "x_hi"))),
                        yerr=_err(y, *(np.array([r[k] for r in sub], dtype=float) for k in ("y_lo", "y_hi"))),
                        fmt="o", color=_color(i), ms=5, capsize=2, elinewidth=0.8, label=lev, alpha=0.85)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(f"by {facet.replace('_', ' ')}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_all(fig, plt, stem)


def group_scatter(rows: Sequence[dict[str, Any]], groups: tuple[str, str], *, metric_label: str, stem: Path,
                  title: str) -> list[Path]:
    """FairMedFM Fig 5: each FM's metric in group a (x) against group b (y) with 95% CIs, and the
    equal-utility diagonal. rows: label, a, a_lo, a_hi, b, b_lo, b_hi."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    vals = []
    for i, r in enumerate(rows):
        a, b = np.array([r["a"]]), np.array([r["b"]])
        ax.errorbar(a, b, xerr=_err(a, np.array([r["a_lo"]]), np.array([r["a_hi"]])),
                    yerr=_err(b, np.array([r["b_lo"]]), np.array([r["b_hi"]])), fmt="o", color=_color(i),
                    capsize=2, label=r["label"])
        vals += [r["a"], r["b"], r["a_lo"], r["b_lo"], r["a_hi"], r["b_hi"]]
    finite = [v for v in vals if v is not None and math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    pad = 0.05 * max(hi - lo, 0.05)
    lim = (lo - pad, hi + pad)
    ax.plot(lim, lim, "--", color="#999", lw=1, label="equal utility")
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_aspect("equal")
    ax.set_xlabel(f"{metric_label} ({groups[0]})")
    ax.set_ylabel(f"{metric_label} ({groups[1]})")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return save_all(fig, plt, stem)


def cd_diagram(avg_ranks: dict[str, float], pvalues: pd.DataFrame, *, stem: Path, title: str) -> list[Path]:
    """Critical-difference diagram of average ranks (scikit-posthocs' critical_difference_diagram), methods
    joined by a bar where the Nemenyi test does not separate them."""
    import pandas as pd
    import scikit_posthocs as sp

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 0.35 * len(avg_ranks) + 1.4))
    sp.critical_difference_diagram(pd.Series(avg_ranks), pvalues, ax=ax, label_fmt_left="{label} ({rank:.2f})  ",
                                   label_fmt_right="  ({rank:.2f}) {label}")
    ax.set_title(title, fontsize=10)
    return save_all(fig, plt, stem)


def sweep_panels(points: Sequence[PointSummary], fits: Sequence[LineFit], metrics: Sequence[str],
                 labels: dict[str, str], *, x_label: str, stem: Path, title: str) -> list[Path]:
    """Fairness-law / imbalance plot: one panel per metric, each group's mean (95% CI whiskers) against the swept
    value with its fitted OLS line. points / fits: PointSummary / LineFit of fairmedbench.analysis."""
    plt = _pyplot()
    ncol = min(len(metrics), 4 if len(metrics) != 4 else 2)
    nrow = math.ceil(len(metrics) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.4 * ncol, 3.6 * nrow), squeeze=False)
    groups = sorted({p.group for p in points})
    for ax, metric in zip(axes.flat, metrics):
        for i, g in enumerate(groups):
            pts = [p for p in points if p.group == g and p.metric == metric and p.n_seeds > 0]
            if not pts:
                continue
            x = np.array([p.x for p in pts])
            y = np.array([p.mean for p in pts])
            ax.errorbar(x, y, yerr=_err(y, np.array([p.ci_low for p in pts]), np.array([p.ci_high for p in pts])),
                        fmt="o", color=_color(i), capsize=3)
            fit = next((f for f in fits if f.group == g and f.metric == metric), None)
            if fit is not None and math.isfinite(fit.slope):
                gx = np.array([x.min(), x.max()])
                r = f", r {fit.r:.2f}" if math.isfinite(fit.r) else ""
                ax.plot(gx, fit.intercept + fit.slope * gx, "-", color=_color(i), lw=1.2,
                        label=f"{g}: slope {fit.slope:+.3f}{r}")
            else:
                ax.plot([], [], "o", color=_color(i), label=g)
        ax.set_xlabel(x_label)
        ax.set_ylabel(labels.get(metric, metric))
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_all(fig, plt, stem)
