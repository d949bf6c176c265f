"""Static figures (PNG or SVG) drawn with matplotlib: the de-facto standard for static scientific plots,
no JavaScript, no network; imported only when a figure is drawn (the Agg backend, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
FORMATS = ("png", "svg")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _density(values: np.ndarray, grid: np.ndarray) -> np.ndarray | None:
    """Gaussian KDE of one group's values on `grid` (each group normalised on its own); None when the
    group has fewer than 2 distinct values."""
    from scipy.stats import gaussian_kde

    if np.unique(values).size < 2:
        return None
    return gaussian_kde(values)(grid)


def joint_scatter(x: np.ndarray, y: np.ndarray, labels: np.ndarray, classes: Sequence[str], *, xlabel: str,
                  ylabel: str, title: str, path: Path, seed: int = 0) -> Path:
    """Scatter of (x, y) coloured by class with each class's marginal density on the top and right axes
    (as in Glocker et al.'s joint plots). `labels` holds class indices (-1 = missing, not drawn)."""
    plt = _pyplot()
    fig = plt.figure(figsize=(6.4, 6.4))
    grid = fig.add_gridspec(2, 2, width_ratios=(4, 1), height_ratios=(1, 4), wspace=0.05, hspace=0.05)
    ax = fig.add_subplot(grid[1, 0])
    top = fig.add_subplot(grid[0, 0], sharex=ax)
    right = fig.add_subplot(grid[1, 1], sharey=ax)
    order = np.random.default_rng(seed).permutation(len(x))  # shuffled so no group is drawn over the others
    shown = order[labels[order] >= 0]
    colors = np.array(COLORS * (len(classes) // len(COLORS) + 1))[: len(classes)]
    ax.scatter(x[shown], y[shown], c=colors[labels[shown]], s=8, alpha=0.6, linewidths=0, rasterized=True)
    gx = np.linspace(x.min(), x.max(), 200)
    gy = np.linspace(y.min(), y.max(), 200)
    for k, name in enumerate(classes):
        m = labels == k
        n = int(m.sum())
        ax.scatter([], [], c=colors[k], s=20, label=f"{name} (n={n})")
        for vals, g, axis, horizontal in ((x[m], gx, top, True), (y[m], gy, right, False)):
            d = _density(vals, g)
            if d is None:
                continue
            if horizontal:
                axis.fill_between(g, d, alpha=0.15, color=colors[k])
                axis.plot(g, d, color=colors[k], lw=1)
            else:
                axis.fill_betweenx(g, d, alpha=0.15, color=colors[k])
                axis.plot(d, g, color=colors[k], lw=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(loc="best", fontsize=8, frameon=True)
    for a in (top, right):
        a.tick_params(labelleft=False, labelbottom=False, left=False, bottom=False)
        for side in ("top", "right", "left", "bottom"):
            a.spines[side].set_visible(False)
    top.set_title(title, fontsize=11)
    return _save(fig, plt, path)


def explained_variance(ratios: Sequence[float], *, title: str, path: Path) -> Path:
    """Bar chart of each mode's explained-variance ratio with the cumulative share."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    k = np.arange(1, len(ratios) + 1)
    ax.bar(k, ratios, color=COLORS[0])
    ax.plot(k, np.cumsum(ratios), "o-", color=COLORS[1], label="cumulative")
    ax.set_xticks(k)
    ax.set_xlabel("PCA mode")
    ax.set_ylabel("explained variance ratio")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, plt, path)


def auc_intervals(names: Sequence[str], values: Sequence[float], lows: Sequence[float], highs: Sequence[float], *,
                  title: str, path: Path) -> Path:
    """Horizontal points with CI bars (e.g. SPLIT AUC per attribute and feature set), chance at 0.5."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 0.45 * len(names) + 1.2))
    pos = np.arange(len(names))[::-1]
    v, lo, hi = (np.asarray(a, dtype=float) for a in (values, lows, highs))
    err = np.vstack([np.where(np.isnan(lo), 0, v - lo), np.where(np.isnan(hi), 0, hi - v)])
    ax.errorbar(v, pos, xerr=err, fmt="o", color=COLORS[0], capsize=3)
    ax.axvline(0.5, color="#999", ls="--", lw=1)
    ax.set_yticks(pos)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("held-out AUC (95% CI)")
    ax.set_title(title, fontsize=10)
    return _save(fig, plt, path)


def _save(fig, plt, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# --- figures for the HTML pages (run, compare, audit): returned as data: URIs, so a page stays one file ---------

def data_uri(fig, plt) -> str:
    """The figure as a base64 PNG data: URI (the pages' Content-Security-Policy allows img-src data: only)."""
    import base64
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _by_group(labels: np.ndarray, names: Sequence[str]):
    """(index, name, mask) per group, in the given order."""
    for i, g in enumerate(names):
        yield i, g, labels == g


def _two_class(y: np.ndarray) -> bool:
    return len(y) > 0 and y.min() != y.max()


def roc_by_group(y: np.ndarray, s: np.ndarray, labels: np.ndarray, names: Sequence[str], title: str,
                 point: tuple[float, Sequence[float], Sequence[float]] | None = None) -> str:
    """ROC curve per group (sklearn roc_curve); groups with one class are listed as such, not drawn. `point`
    = (threshold, FPR per group, TPR per group) marks each group's operating point at one global threshold."""
    from sklearn.metrics import roc_curve

    from fairmedbench.metrics.auc import auc

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    ax.plot([0, 1], [0, 1], color="#bbb", ls="--", lw=1)
    for i, g, m in _by_group(labels, names):
        c = COLORS[i % len(COLORS)]
        if not _two_class(y[m]):
            ax.plot([], [], color=c, label=f"{g} (one class: no curve)")
            continue
        fpr, tpr, _ = roc_curve(y[m], s[m])
        ax.plot(fpr, tpr, color=c, lw=1.5, label=f"{g} (AUC {auc(y[m], s[m]):.3f}, n={int(m.sum())})")
        if point is not None and np.isfinite(point[1][i]) and np.isfinite(point[2][i]):
            ax.plot(point[1][i], point[2][i], "o", color=c, ms=5)
    ax.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="false positive rate", ylabel="true positive rate")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return data_uri(fig, plt)


def pr_by_group(y: np.ndarray, s: np.ndarray, labels: np.ndarray, names: Sequence[str], title: str) -> str:
    """Precision-recall curve per group (sklearn precision_recall_curve, AP in the legend) with each group's
    prevalence as its chance level."""
    from sklearn.metrics import average_precision_score, precision_recall_curve

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    for i, g, m in _by_group(labels, names):
        c = COLORS[i % len(COLORS)]
        if not _two_class(y[m]):
            ax.plot([], [], color=c, label=f"{g} (one class: no curve)")
            continue
        prec, rec, _ = precision_recall_curve(y[m], s[m])
        ax.step(rec, prec, where="post", color=c, lw=1.5,
                label=f"{g} (AP {average_precision_score(y[m], s[m]):.3f}, prev {y[m].mean():.2f})")
        ax.axhline(y[m].mean(), color=c, ls=":", lw=1)
    ax.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="recall", ylabel="precision")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    return data_uri(fig, plt)


def reliability_by_group(y: np.ndarray, s: np.ndarray, labels: np.ndarray, names: Sequence[str], title: str,
                         n_bins: int = 10) -> str:
    """Observed positive fraction against mean predicted probability per group (sklearn calibration_curve,
    equal-width bins; empty bins are left out)."""
    from sklearn.calibration import calibration_curve

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    ax.plot([0, 1], [0, 1], color="#bbb", ls="--", lw=1)
    for i, g, m in _by_group(labels, names):
        if not m.any():
            continue
        frac, mean = calibration_curve(y[m], s[m], n_bins=n_bins, strategy="uniform")
        ax.plot(mean, frac, "o-", color=COLORS[i % len(COLORS)], ms=3, lw=1.2, label=f"{g} (n={int(m.sum())})")
    ax.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="mean predicted probability", ylabel="observed positive fraction")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    return data_uri(fig, plt)


def score_ecdf_by_group(y: np.ndarray, s: np.ndarray, labels: np.ndarray, names: Sequence[str], title: str) -> str:
    """Empirical CDF of the scores per group, negatives (left) and positives (right): what the KS tests compare."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.2), sharey=True)
    for ax, cls, what in ((axes[0], 0, "negatives"), (axes[1], 1, "positives")):
        for i, g, m in _by_group(labels, names):
            v = np.sort(s[m & (y == cls)])
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", color=COLORS[i % len(COLORS)], lw=1.2,
                        label=f"{g} (n={len(v)})")
        ax.set(xlim=(0, 1), xlabel=f"score ({what})")
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("fraction ≤ score")
    fig.suptitle(title, fontsize=10)
    return data_uri(fig, plt)


def intervals_by_group(names: Sequence[str], values: Sequence[float | None], lows: Sequence[float | None],
                       highs: Sequence[float | None], title: str, ylabel: str) -> str:
    """One point per group with its 95% CI whisker (groups without a value are named, not drawn)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(3.2, 0.7 * len(names) + 1.6), 3.2))
    for i, (_, v, lo, hi) in enumerate(zip(names, values, lows, highs)):
        c = COLORS[i % len(COLORS)]
        if v is None:
            ax.text(i, 0.5, "undefined", ha="center", fontsize=7, color=c, rotation=90)
            continue
        err = None if lo is None or hi is None else [[v - lo], [hi - v]]
        ax.errorbar([i], [v], yerr=err, fmt="o", color=c, capsize=4)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8, rotation=30 if max(map(len, names), default=0) > 6 else 0)
    ax.set(xlim=(-0.6, len(names) - 0.4), ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", color="#eee")
    return data_uri(fig, plt)


def utility_gap_scatter(labels: Sequence[str], utility: Sequence[float], gap: Sequence[float], *, title: str,
                        xlabel: str, ylabel: str, xerr: Sequence[tuple[float, float]] | None = None,
                        yerr: Sequence[tuple[float, float]] | None = None, front: Sequence[bool] | None = None) -> str:
    """Utility (x) against a fairness gap (y), one labelled point each, optional 95% CI bars on both axes; the
    points marked in `front` (non-dominated) are filled and joined, the others hollow (no `front`: all filled,
    none joined)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 4.0))
    join = front is not None
    front = list(front) if front is not None else [True] * len(labels)
    for i, (lab, u, g) in enumerate(zip(labels, utility, gap)):
        c = COLORS[i % len(COLORS)]
        xe = None if xerr is None else [[u - xerr[i][0]], [xerr[i][1] - u]]
        ye = None if yerr is None else [[g - yerr[i][0]], [yerr[i][1] - g]]
        ax.errorbar([u], [g], xerr=xe, yerr=ye, fmt="o", color=c, mfc=c if front[i] else "white", capsize=3, ms=7,
                    label=lab + ("" if front[i] else " (dominated)"))
    on = sorted((u, g) for u, g, f in zip(utility, gap, front) if f)
    if join and len(on) > 1:
        ax.plot(*zip(*on), color="#555", ls="--", lw=1, zorder=0)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    _readable_ticks(ax)
    ax.set_title(title, fontsize=10)
    ax.grid(color="#eee")
    ax.legend(fontsize=7, loc="best")
    return data_uri(fig, plt)


def _readable_ticks(ax: Axes) -> None:
    """At most four ticks per axis, each with just enough decimals to tell them apart (points a few 1e-5 apart
    otherwise get seven-digit labels that run into each other), x labels tilted."""
    from matplotlib.ticker import FormatStrFormatter, MaxNLocator

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))
        lo, hi = axis.get_view_interval()
        step = (hi - lo) / 4 if hi > lo else 1.0
        digits = min(max(int(np.ceil(-np.log10(step))) + 1, 2), 6) if step > 0 else 3
        axis.set_major_formatter(FormatStrFormatter(f"%.{digits}f"))
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.tick_params(axis="y", labelsize=8)
