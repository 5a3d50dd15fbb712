"""Pieces shared by the local-DP sparse regression experiments (spec 001, ``ldp_*``): the
recorded metrics, log-log slope fits with confidence intervals, and a log-log figure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["STUDY", "fit_slope", "iht_plan", "loglog_figure", "record_iht", "record_nldp",
           "select"]

# the study of the streamed NLDP experiments: repetitions (default, --quick), and how often the
# noisy covariance was indefinite, summarised beside the error
STUDY = dict(reps=10, quick_reps=3, summary_extra=("indefinite",))


def record_nldp(state, truth):
    """Final metrics of Algorithm 1: the l2 error and whether the noisy covariance was
    indefinite (then the estimate is 0 and the error is ``||theta*||``)."""
    return {"error": jnp.linalg.norm(state.beta - truth),
            "indefinite": (state.min_eig <= 0).astype(jnp.float32)}


def record_iht(state, truth):
    """The l2 error of an LDP-IHT iterate."""
    return {"error": jnp.linalg.norm(state.beta - truth)}


def iht_plan(n: int, rounds: int, chunk: int) -> tuple[int, int, int]:
    """How LDP-IHT streams ``n`` users in ``rounds`` groups of at most ``chunk`` users per
    step: ``(C, m, n_eff)``, ``C`` chunks of ``m`` users per round (``ldp_iht(...,
    chunks_per_round=C)``, ``DataPlan(rounds * C, m)``), ``n_eff = rounds C m <= n``."""
    per_round = n // rounds
    chunks = max(1, math.ceil(per_round / chunk))
    m = per_round // chunks
    return chunks, m, rounds * chunks * m


def select(rows: Sequence[Mapping[str, Any]], **where: Any) -> list[Mapping[str, Any]]:
    """The rows whose columns equal ``where`` (floats compared with a relative 1e-6)."""
    def ok(r):
        for k, v in where.items():
            rv = r.get(k)
            if isinstance(v, float) and isinstance(rv, (int, float)):
                if not (rv == v or (math.isfinite(v) and abs(rv - v) <= 1e-6 * abs(v))):
                    return False
            elif rv != v:
                return False
        return True
    return [r for r in rows if ok(r)]


def fit_slope(xs: Sequence[float], means: Sequence[float], ses: Sequence[float]
              ) -> tuple[float, float, float]:
    """Weighted least-squares slope of ``log mean`` on ``log x`` with weights from the delta
    method (``se(log mean) = se / mean``); returns ``(slope, lo, hi)``, a 95% interval from the
    fit's standard error (``nan`` bounds with fewer than three points)."""
    x = np.log(np.asarray(xs, float))
    y = np.log(np.asarray(means, float))
    s = np.maximum(np.asarray(ses, float) / np.asarray(means, float), 1e-12)
    w = 1 / s**2
    xm = np.sum(w * x) / np.sum(w)
    ym = np.sum(w * y) / np.sum(w)
    sxx = np.sum(w * (x - xm) ** 2)
    slope = float(np.sum(w * (x - xm) * (y - ym)) / sxx)
    if len(x) < 3:
        return slope, math.nan, math.nan
    resid = y - ym - slope * (x - xm)
    # scale the weights by the residual variance if the points scatter more than their se
    scale = max(1.0, float(np.sum(w * resid**2) / (len(x) - 2)))
    se = math.sqrt(scale / sxx)
    return slope, slope - 1.96 * se, slope + 1.96 * se


def loglog_figure(curves: Sequence[tuple], path: Any, title: str, xlabel: str,
                  ylabel: str = "||theta_hat - theta*||_2",
                  refs: Sequence[tuple[str, Sequence[float], Sequence[float]]] = (),
                  hline: float | None = None) -> None:
    """One log-log axes: ``curves`` of ``(label, x, mean, se, linestyle[, role])`` with 95%
    bands in the style of their role (:mod:`dpjax.plotting`; default role ``"dp"``),
    reference curves ``(label, x, y)`` dotted, and a horizontal line (the trivial error)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpjax import plotting

    fig, ax = plt.subplots(figsize=(7.5, 5.5), layout="constrained")
    several = sum(len(cv) > 5 and cv[5] == "nonprivate" for cv in curves) > 1
    for cv in curves:
        label, x, m, se, ls = cv[:5]
        if len(x) == 0:
            continue
        plotting.draw_curve(ax, x, m, se, label, role=cv[5] if len(cv) > 5 else "dp",
                            linestyle=ls, marker="o", several_nonprivate=several, logy=True)
    for label, x, y in refs:
        ax.plot(x, y, ":", color="gray", label=label)
    if hline is not None:
        ax.axhline(hline, color="gray", linewidth=0.8, linestyle="-",
                   label="||theta*|| (estimate 0)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{plotting.BAND_TEXT}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, framealpha=0.7)
    plotting.save_figure(fig, path)
