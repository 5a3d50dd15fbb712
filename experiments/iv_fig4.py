"""Figure 4 of Liang et al. (DP-2S-GD, spec 004 §4.3): error of Algorithm 1 against T.

Settings (paper): n = 1000, p = q = 5 (r = 5 assumed, spec 004 §6 B9); (a) rho2 "large", rho1
varied; (b) rho1 "large", rho2 varied; 100 runs; tau = 5, eta = 1/(1+delta)^2 and
alpha = 2/(2 gamma_up + gamma_low) from the true Theta (psi = 0).

Unstated, chosen here (spec 004 §4.3, §6 B2): varied rho in {0.1, 1, 10}, "large" = 100;
T in {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 3000}; gamma1 = gamma2 =
(sqrt(q) + sqrt(tau + log(nT)))^2 (c0 = 1), so gamma grows slowly with T; the paper's noise
calibration (lambda = (2 gamma/n) sqrt(T/rho), delivering rho/2). Each T is a separate run of
T iterations (the noise scale depends on T); only beta^(T) is recorded. Reference: the same
iteration with rho = gamma = inf (exactly non-private 2S-GD).
"""

from __future__ import annotations

from dpjax.algorithms import dp_iv
from dpjax.models.iv import LinearIV
from dpjax.plotting import Curve, Panel, plot_panels
from dpjax.study import ConfigError, Experiment
from experiments._iv_common import (
    COLORS,
    INF,
    check_delta,
    final_rows,
    horizon_setting,
    level,
    parameters,
)

DEFAULTS = {
    "delta": 1e-5,  # target delta of the ledger's (epsilon, delta) conversion
    "n": 1000,
    "dim": 5,
    "T_grid": (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 3000),
    "rho_grid": (0.1, 1.0, 10.0),
    "rho_large": 100.0,
    "tau": 5.0,
    "clip_const": 1.0,
    "calibration": "paper",
    "param_seed": 0,
}
QUICK = {"T_grid": (10, 100)}


def _check(c):
    check_delta(c)
    if any(r <= 0 for r in (*c["rho_grid"], c["rho_large"])):
        raise ConfigError("--set rho_grid/rho_large: every rho must be > 0")
    if min(c["T_grid"]) < 1 or c["n"] < 10 or c["dim"] < 1 or c["clip_const"] <= 0:
        raise ConfigError("--set T_grid/n/dim/clip_const: T >= 1, n >= 10, dim >= 1, c0 > 0")
    if c["calibration"] not in dp_iv.CALIBRATIONS:
        raise ConfigError(f"--set calibration: one of {dp_iv.CALIBRATIONS}")


def settings(c):
    n, d = c["n"], c["dim"]
    model = LinearIV(d, d, d)
    prm, truth = parameters(model, c["param_seed"])
    steps = dp_iv.paper_step_sizes(prm.theta, n, c["tau"])
    common = dict(eta=steps.eta, alpha=steps.alpha, delta=c["delta"])
    big = c["rho_large"]
    out = []
    for T in c["T_grid"]:
        est = dp_iv.dp_2s_gd(T, c["calibration"])
        g = dp_iv.clipping_threshold(n, d, T, c["tau"], c["clip_const"])
        pairs = [(r1, big) for r1 in c["rho_grid"]] + [(big, r2) for r2 in c["rho_grid"]]
        levels = tuple(level(est, n, rho1=r1, rho2=r2, gamma1=g, gamma2=g, **common)
                       for r1, r2 in pairs)
        levels += (level(est, n, rho1=INF, rho2=INF, **common),)
        out.append(horizon_setting(f"dp,T={T}", est.name, est, model, truth, n, T, levels))
    return out


def plot(iter_rows, summary, c, path):
    method = f"dp-2s-gd/{c['calibration']}"
    big = c["rho_large"]
    ref = Curve("rho1 = rho2 = inf (2S-GD)", {"method": method, "rho1": INF, "rho2": INF},
                "black", "--", "s")
    pa = [Curve(f"rho1={r:g}, rho2={big:g}", {"method": method, "rho1": r, "rho2": big},
                COLORS[i], "-", "o") for i, r in enumerate(c["rho_grid"])]
    pb = [Curve(f"rho1={big:g}, rho2={r:g}", {"method": method, "rho1": big, "rho2": r},
                COLORS[i], "-", "o") for i, r in enumerate(c["rho_grid"])]
    panels = [
        Panel(f"(a) rho2 = {big:g}, rho1 varied", [*pa, ref], x="T", xlabel="T", logx=True),
        Panel(f"(b) rho1 = {big:g}, rho2 varied", [*pb, ref], x="T", xlabel="T", logx=True),
    ]
    plot_panels(final_rows(iter_rows), panels, path, ylabel="mean ||beta^(T) - beta||_2",
                suptitle=(f"DP-2S-GD vs T (spec 004 Fig. 4), n = {c['n']}, p = q = r = "
                          f"{c['dim']}, {c['calibration']} calibration, c0 = "
                          f"{c['clip_const']:g}; error bars: 1 s.e."))


EXPERIMENTS = [
    Experiment(
        name="iv_fig4",
        title="DP-IV paper, Figure 4: DP-2S-GD error vs the number of iterations T",
        defaults=DEFAULTS,
        settings=settings,
        quick=QUICK,
        reps=100,
        quick_reps=5,
        plot=plot,
        check=_check,
        summary_extra=("error_2sls", "clip1", "clip2"),
        description="n = 1000, p = q = r = 5; (a) rho2 = 100 and rho1 in {0.1, 1, 10}; (b) the "
        "reverse; T from 1 to 3000. See experiments/reports/iv_fig4.md.",
    )
]
