"""Figure 6 of Liang et al. (App. F.1, spec 004 §4.4): Algorithm 1 vs Algorithm 3 against T.

Settings (paper): n = 1000, p = q = r = 5, rho2 in {0.1, 1, 10}; (a) Algorithm 1 (DP-2S-GD)
with rho1 = 1; (b) Algorithm 3 ("privacy for beta only": the first stage is non-private,
unclipped GD); 100 runs; tau = 5 and the paper's step sizes from the true Theta (psi = 0).

Algorithm 3 is **not DP as the paper claims** (spec 004 §6 A2): its beta releases use a
non-private Theta^(t) that moves with every record, so the true sensitivity of its clipped
second-stage mean is 2 gamma2 (n times the declared 2 gamma2/n): its ledger gives the beta
releases what that true sensitivity earns (vacuous) and, its first stage being a non-private
release, says "NOT DP as claimed" with epsilon = inf (the results-file ``epsilon`` column).
It is run here only to reproduce the paper's comparison.

Unstated, chosen here: T in {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 3000} (spec 004 §6 B2);
gamma = (sqrt(q) + sqrt(tau + log(nT)))^2 (c0 = 1); the paper's calibration. Reference: the
iteration with rho = gamma = inf (non-private 2S-GD).
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
    "rho2_grid": (0.1, 1.0, 10.0),
    "rho1": 1.0,
    "tau": 5.0,
    "clip_const": 1.0,
    "calibration": "paper",
    "param_seed": 0,
}
QUICK = {"T_grid": (20, 200)}


def _check(c):
    check_delta(c)
    if any(r <= 0 for r in (*c["rho2_grid"], c["rho1"])):
        raise ConfigError("--set rho2_grid/rho1: every rho must be > 0")
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
    out = []
    for T in c["T_grid"]:
        g = dp_iv.clipping_threshold(n, d, T, c["tau"], c["clip_const"])
        alg1 = dp_iv.dp_2s_gd(T, c["calibration"])
        levels = tuple(level(alg1, n, rho1=c["rho1"], rho2=r2, gamma1=g, gamma2=g, **common)
                       for r2 in c["rho2_grid"])
        levels += (level(alg1, n, rho1=INF, rho2=INF, **common),)
        out.append(horizon_setting(f"alg1,T={T}", alg1.name, alg1, model, truth, n, T, levels))
        alg3 = dp_iv.dp_2s_gd_beta_only(T, c["calibration"])
        levels = tuple(level(alg3, n, rho1=INF, rho2=r2, gamma1=INF, gamma2=g, **common)
                       for r2 in c["rho2_grid"])
        out.append(horizon_setting(f"alg3,T={T}", alg3.name, alg3, model, truth, n, T, levels))
    return out


def plot(iter_rows, summary, c, path):
    cal = c["calibration"]
    ref = Curve("rho = gamma = inf (2S-GD)", {"method": f"dp-2s-gd/{cal}", "rho2": INF},
                "black", "--", "s")
    pa = [Curve(f"rho2={r:g}", {"method": f"dp-2s-gd/{cal}", "rho1": c["rho1"], "rho2": r},
                COLORS[i], "-", "o") for i, r in enumerate(c["rho2_grid"])]
    pb = [Curve(f"rho2={r:g} (claimed)", {"method": f"dp-2s-gd-beta/{cal}", "rho2": r},
                COLORS[i], "-", "o") for i, r in enumerate(c["rho2_grid"])]
    panels = [
        Panel(f"(a) Algorithm 1, rho1 = {c['rho1']:g}", [*pa, ref], x="T", xlabel="T",
              logx=True),
        Panel("(b) Algorithm 3 (NOT DP as claimed)", [*pb, ref], x="T", xlabel="T", logx=True),
    ]
    plot_panels(final_rows(iter_rows), panels, path, ylabel="mean ||beta^(T) - beta||_2",
                suptitle=(f"Algorithm 1 vs Algorithm 3 (spec 004 Fig. 6), n = {c['n']}, "
                          f"p = q = r = {c['dim']}, {cal} calibration; error bars: 1 s.e."))


EXPERIMENTS = [
    Experiment(
        name="iv_fig6",
        title="DP-IV paper, Figure 6: Algorithm 1 vs Algorithm 3 (not DP as claimed) against T",
        defaults=DEFAULTS,
        settings=settings,
        quick=QUICK,
        reps=100,
        quick_reps=5,
        plot=plot,
        check=_check,
        summary_extra=("error_2sls", "clip1", "clip2"),
        description="n = 1000, p = q = r = 5, rho2 in {0.1, 1, 10}; Algorithm 1 with rho1 = 1 "
        "and the paper's Algorithm 3. See experiments/reports/iv_fig6.md.",
    )
]
