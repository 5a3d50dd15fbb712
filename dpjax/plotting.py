"""Figures from results rows (matplotlib, imported lazily; part of the [experiments] extra)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Curve", "Mark", "Panel", "curve_stats", "plot_panels"]


@dataclasses.dataclass(frozen=True)
class Curve:
    """Rows matching ``where`` (column -> value), drawn as mean +- standard error by ``x``.

    ``x`` and ``y`` override the panel's x column and the figure's y column for this curve.
    """

    label: str
    where: Mapping[str, Any]
    color: str | None = None
    linestyle: str = "-"
    marker: str | None = None
    x: str | None = None
    y: str | None = None


@dataclasses.dataclass(frozen=True)
class Mark:
    """A reference line across a panel: vertical at x = ``value`` (``axis="x"``) or horizontal
    at y = ``value`` (``axis="y"``)."""

    value: float
    label: str | None = None
    axis: str = "x"
    color: str = "gray"
    linestyle: str = "--"


@dataclasses.dataclass(frozen=True)
class Panel:
    """One axes. ``logy`` and ``ylabel`` override the figure's for this panel."""

    title: str
    curves: Sequence[Curve]
    x: str = "iteration"
    xlabel: str = "iteration t"
    logx: bool = False
    logy: bool | None = None
    ylabel: str | None = None
    marks: Sequence[Mark] = ()


def _match(row: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    for k, v in where.items():
        rv = row.get(k)
        if isinstance(v, float) and isinstance(rv, (int, float)):
            if not (rv == v or (math.isinf(v) and math.isinf(rv)) or math.isclose(rv, v)):
                return False
        elif rv != v:
            return False
    return True


def curve_stats(rows: Sequence[Mapping[str, Any]], where: Mapping[str, Any], x: str,
                y: str = "error") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x values, mean, standard error)`` of ``y`` over the rows matching ``where``."""
    groups: dict[float, list[float]] = {}
    for r in rows:
        if _match(r, where):
            groups.setdefault(float(r[x]), []).append(float(r[y]))
    xs = np.array(sorted(groups))
    means = np.array([np.mean(groups[v]) for v in xs])
    ses = np.array([np.std(groups[v], ddof=1) / math.sqrt(len(groups[v]))
                    if len(groups[v]) > 1 else 0.0 for v in xs])
    return xs, means, ses


def plot_panels(
    rows: Sequence[Mapping[str, Any]],
    panels: Sequence[Panel],
    path: str | Path,
    *,
    suptitle: str = "",
    ylabel: str = "mean ||beta_t - beta*||_2",
    y: str = "error",
    logy: bool = True,
    ncols: int | None = None,
) -> None:
    """One panel per :class:`Panel`, error bars = one standard error; saved to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = ncols or min(len(panels), 4)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.6 * nrows), squeeze=False)
    for i, (ax, panel) in enumerate(zip(axes.ravel(), panels)):
        for c in panel.curves:
            xs, m, se = curve_stats(rows, c.where, c.x or panel.x, c.y or y)
            if xs.size == 0:
                continue
            ax.errorbar(xs, m, yerr=se, label=c.label, color=c.color, linestyle=c.linestyle,
                        marker=c.marker, markersize=3, capsize=2, linewidth=1.3)
        for mk in panel.marks:
            line = ax.axvline if mk.axis == "x" else ax.axhline
            line(mk.value, color=mk.color, linestyle=mk.linestyle, linewidth=0.8, label=mk.label)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(panel.xlabel)
        if panel.ylabel is not None or i == 0:
            ax.set_ylabel(panel.ylabel if panel.ylabel is not None else ylabel)
        if logy if panel.logy is None else panel.logy:
            ax.set_yscale("log")
        if panel.logx:
            ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
        many = len(panel.curves) > 6
        ax.legend(fontsize=6 if many else 7, ncol=2 if many else 1, framealpha=0.6)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
