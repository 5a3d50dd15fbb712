"""Slope study of Algorithm 2 (DP gradient EM) against n, epsilon and d (spec 002 §3.5, check 8).

The design of ``gem_fig6`` (GMM; the three-panel grid of spec 002 §4.3) with Algorithm 2 only
(and its non-private level): the same setting keys and data groups, so with the same seed its
numbers are those of ``gem_fig6``'s Algorithm 2 rows. The figure fits log-log slopes of the
sign-aligned final error (weighted least squares on the means, delta-method standard errors)
against the predictions of spec 002 §3.5: n-slope -1/2 (up to log factors from delta = 1/n),
epsilon-slope -1/2 in eps~ (near-linear in eps for eps <= 1), d-slope +1 for the GMM with a
dimension-free tau -- in the noise-dominated regime.
"""

from __future__ import annotations

import dataclasses

from dpjax.experiments._common import COLORS, final_rows
from dpjax.experiments._gem_common import STUDY, GemConfig, design_settings, fit_loglog
from dpjax.plotting import Claim, Curve, Panel, curve_stats, plot_panels
from dpjax.study import Experiment

PREDICTED = {"epsilon": -0.5, "d": 1.0, "n": -0.5}


def slopes(rows, c, metric: str = "error_sym") -> dict[str, tuple[float, float]]:
    """Fitted slopes of Algorithm 2's final error against epsilon, d and n."""
    wheres = {"epsilon": {"n": c["n_base"], "d": c["d_base"]},
              "d": {"n": c["n_base"], "epsilon": c["eps_base"]},
              "n": {"d": c["d_base"], "epsilon": c["eps_base"]}}
    out = {}
    for axis, where in wheres.items():
        xs, m, se = curve_stats(rows, {"method": "dp-gem", **where}, axis, metric)
        keep = [i for i, x in enumerate(xs) if x != float("inf")]
        out[axis] = fit_loglog(xs[keep], m[keep], se[keep]) if len(keep) > 1 else (
            float("nan"), float("nan"))
    return out


def plot(iter_rows, summary, c, path):
    rows = final_rows(iter_rows)
    metric = "error" if c["model"] == "rmc" else "error_sym"
    fitted = slopes(rows, c, metric)
    panels = []
    wheres = {"epsilon": {"n": c["n_base"], "d": c["d_base"]},
              "d": {"n": c["n_base"], "epsilon": c["eps_base"]},
              "n": {"d": c["d_base"], "epsilon": c["eps_base"]}}
    for i, (axis, where) in enumerate(wheres.items()):
        b, se = fitted[axis]
        label = f"Alg 2: slope {b:+.2f} ± {se:.2f} (theory {PREDICTED[axis]:+.2f})"
        claim = Claim(f"rate {axis}^{PREDICTED[axis]:+g}", "spec 002 §3.5", origin="theory",
                      slope=PREDICTED[axis], through={"method": "dp-gem", **where},
                      color=COLORS[i], curve_y=metric)
        panels.append(Panel(f"vs {axis}", [Curve(label, {"method": "dp-gem", **where},
                                                 COLORS[i], "-", "o", y=metric)],
                            x=axis, xlabel=axis, logx=True, claims=[claim]))
    plot_panels(rows, panels, path, ylabel="mean final error (sign-aligned)", suptitle=(
        f"Spec 002 §3.5 slopes, Alg 2 on the {c['model']} (T={c['T']}, delta=1/n)"))


DEFAULTS = GemConfig(model="gmm", methods=("dp-gem",))
EXPERIMENTS = [
    Experiment(
        name="gem_slopes",
        title="DP gradient EM paper: Algorithm 2's error slopes against n, eps and d",
        defaults=DEFAULTS, settings=design_settings,
        quick=dataclasses.replace(DEFAULTS, eps_grid=(0.5, 1.0), d_grid=(5,), n_grid=(10000,),
                                  n_base=10000, d_base=5),
        plot=plot, **STUDY,
        description="Fitted log-log slopes with standard errors (spec 002 check 8); the "
        "Algorithm 2 rows of gem_fig6.",
    )
]
