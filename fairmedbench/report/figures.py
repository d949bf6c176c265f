"""Static figures (PNG or SVG) drawn with matplotlib: the de-facto standard for static scientific plots,
no JavaScript, no network; imported only when a figure is drawn (the Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

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
