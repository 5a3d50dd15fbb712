"""Figures from results rows (matplotlib, imported lazily; part of the [experiments] extra).

Every figure of the project is drawn from the pieces here, so that all figures read the same
way and the plotting facts live in one place:

* a measured curve is its mean over repetitions with a shaded band of
  ``mean +- BAND_Z * standard error`` (a 95% normal interval; the figure's caption line says so);
* a curve declares its **role** (:data:`ROLES`): the non-private reference is dashed (black
  when it is the panel's only one) and its legend entry says "non-private"; other non-private
  comparators are dotted; paper-literal variants that are not private are dash-dotted and
  labelled "NOT DP";
* a number the paper states is a :class:`Claim`, drawn beside the measured curve as open stars
  (points) or a dotted line (a rate ``y ~ x^slope`` through the measured curve);
* a panel against epsilon has a logarithmic x axis by default.

The rows to plot are either an experiment's iteration rows (one per setting, level,
repetition and iteration: a curve against the iteration), their last iterations
(:func:`final_rows`: a curve against n, d, epsilon or T), or ``summary.csv`` rows
(:func:`dpjax.results.summarise`: one row per point, whose ``se`` column gives the band).

Artists carry a ``gid`` (:data:`GID_BAND`, :data:`GID_CLAIM`, ``"role:<role>"`` on a curve's
line) so tests can find what was drawn.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BAND_Z",
    "METRICS",
    "ROLES",
    "Claim",
    "Curve",
    "Mark",
    "Panel",
    "caption",
    "curve_stats",
    "draw_band",
    "draw_claim",
    "draw_curve",
    "draw_panels",
    "final_rows",
    "plot_panels",
    "role_style",
    "save_figure",
]

# ----- the plotting facts (style, colours, band width): change them here only ---------------

BAND_Z = 1.96  # band half-width in standard errors: a 95% normal interval for the mean
BAND_ALPHA = 0.2
DPI = 120  # every figure.png
BAND_TEXT = f"shaded bands: mean \u00b1 {BAND_Z:g} s.e. over repetitions (95% interval)"
NONPRIVATE_COLOR = "black"
NONPRIVATE_LABEL = "non-private"
NOT_DP_LABEL = "NOT DP"
REFERENCE_COLOR = "tab:gray"
CLAIM_COLOR = "black"
CLAIM_MARKER = "*"
LINEWIDTH = 1.4
MARKERS_PER_CURVE = 10
# role -> (linestyle, default colour, line width); ``None`` keeps the curve's own
ROLES: dict[str, tuple[str | None, str | None, float]] = {
    "dp": (None, None, LINEWIDTH),  # a private estimator: solid unless the curve says otherwise
    "nonprivate": ("--", NONPRIVATE_COLOR, 1.8),  # the non-private counterpart (eps = inf)
    "reference": (":", REFERENCE_COLOR, 1.6),  # another non-private comparator (2SLS, ...)
    "not-dp": ("-.", REFERENCE_COLOR, 1.4),  # a paper-literal variant that is not private
}
GID_BAND = "band"
GID_CLAIM = "claim"
# the metric columns a study's ``record`` functions write into iterations.csv (every other
# column of a row identifies its setting, level and repetition): :func:`final_rows` groups by
# the others
METRICS = ("error", "error_2sls", "error_of_2sls", "estimate", "clip1", "clip2", "log_sq_error",
           "support_recall", "error_sym", "indefinite")


def role_gid(role: str) -> str:
    """The ``gid`` of a curve's line: ``"role:<role>"``."""
    return f"role:{role}"


@dataclasses.dataclass(frozen=True)
class Curve:
    """Rows matching ``where`` (column -> value), drawn as their mean by ``x`` with a band of
    ``+- BAND_Z`` standard errors.

    ``x`` and ``y`` override the panel's x column and the figure's y column for this curve.
    ``role`` (one of :data:`ROLES`) says what the curve is; left ``None``, a curve that selects
    ``epsilon = inf`` is ``"nonprivate"`` and any other ``"dp"``. A non-private curve is dashed,
    black unless ``color`` is given (several settings, each with its own non-private twin in its
    colour), and its legend entry says "non-private"; a ``"not-dp"`` curve's says "NOT DP".
    """

    label: str
    where: Mapping[str, Any]
    color: str | None = None
    linestyle: str = "-"
    marker: str | None = None
    x: str | None = None
    y: str | None = None
    role: str | None = None
    band: bool = True

    def __post_init__(self) -> None:
        if self.role is not None and self.role not in ROLES:
            raise ValueError(f"Curve {self.label!r}: role must be one of {sorted(ROLES)}; "
                             f"got {self.role!r}")

    @property
    def resolved_role(self) -> str:
        """The declared role, or the one implied by ``where`` (``epsilon = inf``)."""
        if self.role is not None:
            return self.role
        e = self.where.get("epsilon")
        if isinstance(e, (int, float)) and math.isinf(e) and e > 0:
            return "nonprivate"
        return "dp"


@dataclasses.dataclass(frozen=True)
class Mark:
    """A reference line across a panel: vertical at x = ``value`` (``axis="x"``) or horizontal
    at y = ``value`` (``axis="y"``). With ``role="nonprivate"`` it is a non-private level (a
    horizontal line where the non-private estimator has one value for the whole x axis),
    drawn in the non-private style."""

    value: float
    label: str | None = None
    axis: str = "x"
    color: str = "gray"
    linestyle: str = "--"
    role: str | None = None

    def __post_init__(self) -> None:
        if self.role is not None and self.role not in ROLES:
            raise ValueError(f"Mark {self.label!r}: role must be one of {sorted(ROLES)}; "
                             f"got {self.role!r}")
        if self.axis not in ("x", "y"):
            raise ValueError(f"Mark {self.label!r}: axis must be 'x' or 'y'; got {self.axis!r}")


@dataclasses.dataclass(frozen=True)
class Claim:
    """A number the paper states, drawn beside the measured curves in the claim style.

    Either **points** ``(x, y)`` (values read off the paper's table or text; open stars joined
    by a thin dotted line), or a **rate**: ``slope`` with ``through`` (the ``where`` of a
    measured curve), drawn as the line ``y = y0 (x / x0)^slope`` through that curve's point at
    its first x (``at="first"``) or last (``at="last"``) over the curve's x range (straight on
    log-log axes). ``source`` names where the number is printed (e.g. ``"Table 3"``); the
    legend entry is ``"paper, {source}: {label}"``. ``origin="theory"`` marks a rate that is
    derived (e.g. in the spec) rather than printed by the paper: the legend then reads
    ``"theory, {source}: {label}"`` and the caption does not call it the paper's number.
    """

    label: str
    source: str
    x: Sequence[float] = ()
    y: Sequence[float] = ()
    slope: float | None = None
    through: Mapping[str, Any] | None = None
    at: str = "first"
    color: str | None = None
    curve_x: str | None = None
    curve_y: str | None = None
    origin: str = "paper"

    def __post_init__(self) -> None:
        if self.origin not in ("paper", "theory"):
            raise ValueError(f"Claim {self.label!r}: origin must be 'paper' or 'theory'; "
                             f"got {self.origin!r}")
        points = len(self.x) > 0 or len(self.y) > 0
        rate = self.slope is not None
        if points == rate:
            raise ValueError(f"Claim {self.label!r}: give either points (x, y) or a rate "
                             "(slope with through)")
        if points and len(self.x) != len(self.y):
            raise ValueError(f"Claim {self.label!r}: x and y differ in length "
                             f"({len(self.x)} and {len(self.y)})")
        if rate and self.through is None:
            raise ValueError(f"Claim {self.label!r}: a rate needs through= (a curve's where)")
        if self.at not in ("first", "last"):
            raise ValueError(f"Claim {self.label!r}: at must be 'first' or 'last'")

    @property
    def legend(self) -> str:
        return f"{self.origin}, {self.source}: {self.label}"


@dataclasses.dataclass(frozen=True)
class Panel:
    """One axes. ``logy`` and ``ylabel`` override the figure's for this panel; ``logx`` left
    ``None`` is logarithmic when the panel's x is ``epsilon``."""

    title: str
    curves: Sequence[Curve]
    x: str = "iteration"
    xlabel: str = "iteration t"
    logx: bool | None = None
    logy: bool | None = None
    ylabel: str | None = None
    marks: Sequence[Mark] = ()
    claims: Sequence[Claim] = ()

    @property
    def resolved_logx(self) -> bool:
        return self.x == "epsilon" if self.logx is None else bool(self.logx)


def final_rows(iter_rows: Sequence[Mapping[str, Any]],
               metrics: Sequence[str] = METRICS) -> list[dict[str, Any]]:
    """The last recorded iteration of every (setting, level, repetition) of iteration rows
    (``iterations.csv``, the first argument of an experiment's ``plot``): the rows a figure
    against ``n``, ``d``, ``epsilon`` or ``T`` plots, one per repetition, so that its bands are
    ``+- BAND_Z`` standard errors over the repetitions.

    Rows are grouped by every column except ``iteration`` and the recorded ``metrics``; a
    ``record`` function that returns a metric not in :data:`METRICS` must name it here (else
    each of its values would count as a group of its own).
    """
    skip = {"iteration", *metrics}
    last: dict[tuple, dict[str, Any]] = {}
    for r in iter_rows:
        key = tuple(sorted((k, v) for k, v in r.items() if k not in skip))
        if key not in last or r["iteration"] > last[key]["iteration"]:
            last[key] = dict(r)
    return list(last.values())


def _match(row: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    for k, v in where.items():
        rv = row.get(k)
        if isinstance(v, float) and isinstance(rv, (int, float)):
            if not (rv == v or (math.isinf(v) and math.isinf(rv)) or math.isclose(rv, v)):
                return False
        elif rv != v:
            return False
    return True


def _summary_columns(row: Mapping[str, Any], y: str) -> tuple[str, str] | None:
    """The ``(mean, se)`` columns of ``y`` when ``row`` is a summary row
    (:func:`dpjax.results.summarise`: ``mean``, ``se``, ``count``, and ``{name}_mean``,
    ``{name}_se`` for its extra metrics) that does not hold ``y`` itself; else ``None``."""
    if "count" not in row or (y in row and y != "mean"):
        return None
    if y in ("error", "mean") and "mean" in row and "se" in row:
        return "mean", "se"
    if f"{y}_mean" in row and f"{y}_se" in row:
        return f"{y}_mean", f"{y}_se"
    return None


def curve_stats(rows: Sequence[Mapping[str, Any]], where: Mapping[str, Any], x: str,
                y: str = "error") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x values, mean, standard error)`` of ``y`` over the rows matching ``where``.

    Rows with one value per repetition (iteration rows, :func:`final_rows`) are averaged by
    ``x``. Summary rows (``summary.csv``, :func:`dpjax.results.summarise`) are means already:
    ``y = "error"`` (or ``"mean"``) reads their ``mean`` and ``se`` columns, another metric
    ``name`` its ``{name}_mean`` and ``{name}_se``, so their band is the standard error over
    the repetitions too; ``where`` must then select one summary row per ``x``.
    """
    groups: dict[float, list[float]] = {}
    summary: dict[float, tuple[float, float]] = {}
    for r in rows:
        if not _match(r, where):
            continue
        xv = float(r[x])
        cols = _summary_columns(r, y)
        if cols is None:
            groups.setdefault(xv, []).append(float(r[y]))
            continue
        if xv in summary:
            raise ValueError(f"curve_stats: several summary rows match {dict(where)} at "
                             f"{x} = {xv:g}; a summary row is a mean over repetitions already, "
                             "so where= must select one row per x")
        summary[xv] = (float(r[cols[0]]), float(r[cols[1]]))
    if groups and summary:
        raise ValueError("curve_stats: the rows mix summary rows and per-repetition rows")
    if summary:
        xs = np.array(sorted(summary))
        means = np.array([summary[v][0] for v in xs])
        ses = np.array([summary[v][1] if math.isfinite(summary[v][1]) else 0.0 for v in xs])
        return xs, means, ses
    xs = np.array(sorted(groups))
    means = np.array([np.mean(groups[v]) for v in xs])
    ses = np.array([np.std(groups[v], ddof=1) / math.sqrt(len(groups[v]))
                    if len(groups[v]) > 1 else 0.0 for v in xs])
    return xs, means, ses


def role_style(role: str, color: str | None = None, linestyle: str = "-",
               several: bool = False) -> dict[str, Any]:
    """Line keyword arguments of a curve of ``role``. A non-private curve is black unless
    ``several`` non-private curves share the panel and it has its own ``color``."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {sorted(ROLES)}; got {role!r}")
    ls, default_color, lw = ROLES[role]
    if role == "nonprivate":
        col = color if (several and color is not None) else default_color
    else:
        col = color if color is not None else default_color
    return {"color": col, "linestyle": ls or linestyle, "linewidth": lw, "gid": role_gid(role)}


def _role_label(label: str, role: str) -> str:
    if role == "nonprivate" and NONPRIVATE_LABEL not in label.lower():
        return f"{label} ({NONPRIVATE_LABEL})"
    if role == "not-dp" and NOT_DP_LABEL.lower() not in label.lower():
        return f"{label} ({NOT_DP_LABEL})"
    return label


def draw_band(ax: Any, xs: Any, mean: Any, se: Any, color: Any, *, logy: bool = False) -> Any:
    """Shade ``mean +- BAND_Z se`` (``fill_between``, gid :data:`GID_BAND`). On a log y axis
    a lower end at or below zero is drawn at 1% of the mean (the interval reaches zero)."""
    xs, mean, se = (np.asarray(a, float) for a in (xs, mean, se))
    se = np.where(np.isfinite(se), se, 0.0)
    lo, hi = mean - BAND_Z * se, mean + BAND_Z * se
    if logy:
        lo = np.where(lo > 0, lo, np.abs(mean) * 0.01)
    if xs.size == 1:  # a band needs two x values: a 95% error bar instead
        ax.errorbar(xs, mean, yerr=[mean - lo, hi - mean], color=color, linestyle="none",
                    capsize=3, linewidth=1.0, gid=GID_BAND)
        return None
    return ax.fill_between(xs, lo, hi, color=color, alpha=BAND_ALPHA, linewidth=0,
                           gid=GID_BAND)


def draw_curve(ax: Any, xs: Any, mean: Any, se: Any | None, label: str, *,
               role: str = "dp", color: str | None = None, linestyle: str = "-",
               marker: str | None = None, several_nonprivate: bool = False,
               logy: bool = False) -> Any:
    """One measured curve in the style of its role, with its band when ``se`` is given."""
    style = role_style(role, color, linestyle, several_nonprivate)
    every = max(1, len(xs) // MARKERS_PER_CURVE)  # markers on a long trace: a few, not all
    (line,) = ax.plot(xs, mean, label=_role_label(label, role), marker=marker, markersize=3.5,
                      markevery=every, **style)
    if se is not None:
        draw_band(ax, xs, mean, se, line.get_color(), logy=logy)
    return line


def draw_claim(ax: Any, claim: Claim, rows: Sequence[Mapping[str, Any]] = (),
               panel_x: str = "iteration", y: str = "error") -> Any:
    """Draw ``claim`` on ``ax`` (a rate is anchored on the measured ``rows``); returns the line,
    or ``None`` when a rate's curve has no rows."""
    color = claim.color or CLAIM_COLOR
    if claim.slope is None:
        xs, ys = np.asarray(claim.x, float), np.asarray(claim.y, float)
        style = {"linestyle": ":", "linewidth": 0.9, "marker": CLAIM_MARKER, "markersize": 10,
                 "markerfacecolor": "none", "markeredgewidth": 1.2}
    else:
        cx, cm, _ = curve_stats(rows, claim.through, claim.curve_x or panel_x, claim.curve_y or y)
        keep = np.isfinite(cx) & np.isfinite(cm) & (cm > 0) & (cx > 0)
        cx, cm = cx[keep], cm[keep]
        if cx.size == 0:
            return None
        i = 0 if claim.at == "first" else -1
        xs = np.geomspace(cx[0], cx[-1], 20) if cx.size > 1 else cx
        ys = cm[i] * (xs / cx[i]) ** claim.slope
        style = {"linestyle": ":", "linewidth": 2.0}
    (line,) = ax.plot(xs, ys, color=color, label=claim.legend, gid=GID_CLAIM, zorder=5,
                      **style)
    return line


_FIGURE_NOTES: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "dpjax_figure_notes", default=())


@contextlib.contextmanager
def figure_notes(lines: Sequence[str]):
    """Within the block, every figure drawn by :func:`draw_panels` carries ``lines`` below its
    caption (``dpjax run`` passes what the ledgers deliver where it is not the request:
    :func:`dpjax.results.delivered_notes`)."""
    token = _FIGURE_NOTES.set(tuple(lines))
    try:
        yield
    finally:
        _FIGURE_NOTES.reset(token)


def caption(panels: Sequence[Panel]) -> str:
    """The caption line: how to read bands, the non-private curve and the paper's claims."""
    parts = [BAND_TEXT]
    roles = {c.resolved_role for p in panels for c in p.curves}
    roles |= {m.role for p in panels for m in p.marks}
    if "nonprivate" in roles:
        parts.append("dashed: non-private")
    if "reference" in roles:
        parts.append("dotted: non-private comparators")
    if "not-dp" in roles:
        parts.append("dash-dot: NOT DP")
    origins = {c.origin for p in panels for c in p.claims}
    if "paper" in origins:
        parts.append("stars / thick dotted: the paper's numbers")
    if "theory" in origins:
        parts.append("thick dotted: theoretical rates (not printed by the paper)")
    return "; ".join(parts)


def _legend_layout(panel: Panel) -> tuple[int, int]:
    """``(columns, rows)`` of a panel's legend: two columns when it is long and its entries
    are short enough for two to fit under the axes."""
    labels = ([_role_label(c.label, c.resolved_role) for c in panel.curves]
              + [c.legend for c in panel.claims] + [m.label for m in panel.marks if m.label])
    cols = 2 if len(labels) > 4 and max(map(len, labels)) <= 32 else 1
    return cols, math.ceil(len(labels) / cols)


def draw_panels(
    rows: Sequence[Mapping[str, Any]],
    panels: Sequence[Panel],
    *,
    suptitle: str = "",
    ylabel: str = "mean ||beta_t - beta*||_2",
    y: str = "error",
    logy: bool = True,
    ncols: int | None = None,
) -> Any:
    """The figure of :func:`plot_panels` (a matplotlib ``Figure``), not saved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = ncols or min(len(panels), 4)
    nrows = math.ceil(len(panels) / ncols)
    # room for the legends below the axes: about 0.17 inch a legend row
    extra = [max((_legend_layout(p)[1] for p in panels[r * ncols:(r + 1) * ncols]), default=0)
             for r in range(nrows)]
    size = (max(4.6 * ncols, 6.0), sum(3.6 + 0.17 * e for e in extra) + 0.5)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained", figsize=size)
    for i, (ax, panel) in enumerate(zip(axes.ravel(), panels)):
        panel_logy = logy if panel.logy is None else panel.logy
        logx = panel.resolved_logx
        several = sum(c.resolved_role == "nonprivate" for c in panel.curves) > 1
        drawn = 0
        xs_drawn: set[float] = set()
        for c in panel.curves:
            xs, m, se = curve_stats(rows, c.where, c.x or panel.x, c.y or y)
            keep = np.isfinite(xs) & np.isfinite(m)
            if logx:
                keep &= xs > 0
            xs, m, se = xs[keep], m[keep], se[keep]
            if xs.size == 0:
                continue
            xs_drawn |= set(xs.tolist())
            draw_curve(ax, xs, m, se if c.band else None, c.label, role=c.resolved_role,
                       color=c.color, linestyle=c.linestyle, marker=c.marker,
                       several_nonprivate=several, logy=panel_logy)
            drawn += 1
        for mk in panel.marks:
            line = ax.axvline if mk.axis == "x" else ax.axhline
            if mk.role is None:
                line(mk.value, color=mk.color, linestyle=mk.linestyle, linewidth=0.8,
                     label=mk.label)
            else:
                line(mk.value, label=None if mk.label is None else _role_label(mk.label, mk.role),
                     **role_style(mk.role, None, mk.linestyle))
        for cl in panel.claims:
            draw_claim(ax, cl, rows, panel.x, y)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(panel.xlabel)
        if panel.ylabel is not None or i % ncols == 0:
            ax.set_ylabel(panel.ylabel if panel.ylabel is not None else ylabel)
        if panel_logy:
            ax.set_yscale("log")
        if logx:
            ax.set_xscale("log")
            if 1 < len(xs_drawn) <= 8:  # few values (an epsilon grid): label exactly those
                from matplotlib.ticker import NullFormatter

                ax.set_xticks(sorted(xs_drawn), [f"{v:g}" for v in sorted(xs_drawn)])
                ax.xaxis.set_minor_formatter(NullFormatter())
        else:  # at most 6 ticks: wide labels (n = 12500, 15000, ...) must not run together
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
        ax.grid(True, which="both", alpha=0.3)
        if drawn == 0:
            ax.text(0.5, 0.5, "no rows for this panel", transform=ax.transAxes, ha="center",
                    va="center", color="gray")
        entries = len(ax.get_legend_handles_labels()[1])
        if entries:  # below the axes: a legend never hides a curve
            ax.legend(fontsize=7, ncol=_legend_layout(panel)[0], loc="upper center",
                      bbox_to_anchor=(0.5, -0.17), frameon=False)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    # wrap the title and caption to the figure's width (about 12 characters an inch at 9 pt)
    width = max(40, int(fig.get_figwidth() * 12))
    text = "\n".join(textwrap.fill(line, width) for line in
                     [*(suptitle.split("\n") if suptitle else []), caption(panels),
                      *_ledger_lines()])
    fig.suptitle(text, fontsize=9)
    return fig


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
    """One panel per :class:`Panel`: curves with 95% bands in the style of their role, marks
    and the paper's claims; saved to ``path``."""
    save_figure(draw_panels(rows, panels, suptitle=suptitle, ylabel=ylabel, y=y, logy=logy,
                            ncols=ncols), path)


def _ledger_lines() -> list[str]:
    return [f"by the privacy ledger, {note}" for note in _FIGURE_NOTES.get()]


def save_figure(fig: Any, path: str | Path) -> None:
    """Write ``fig`` to ``path`` at the figures' resolution and close it.

    Inside :func:`figure_notes` (``dpjax run`` where a level's ledger delivers another budget
    than the one requested), a figure whose title does not already say so (one an experiment
    draws itself rather than by :func:`draw_panels`) gets the notes as a footer below it."""
    import matplotlib.pyplot as plt

    lines = _ledger_lines()
    title = fig.get_suptitle() if hasattr(fig, "get_suptitle") else ""
    if lines and not all(line in " ".join(title.split()) for line in lines):
        width = max(40, int(fig.get_figwidth() * 13))
        fig.text(0.5, -0.01, "\n".join(textwrap.fill(line, width) for line in lines),
                 ha="center", va="top", fontsize=8)
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
    else:
        fig.savefig(path, dpi=DPI)
    plt.close(fig)
