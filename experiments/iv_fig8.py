"""Figure 8 of Liang et al. (App. G.2, spec 004 §4.6): the clipping threshold of Algorithm 1.

Settings (paper): n = 2000, p = q = r = 5, T = 20, rho1 = rho2 = 5, gamma1 = gamma2 = gamma
over [1, 1000]; 100 runs; tau = 5 and the paper's step sizes from the true Theta (psi = 0).

Unstated, chosen here: gamma on 13 log-spaced points over [1, 1000] plus the paper's rule
(sqrt(q) + sqrt(tau + log(nT)))^2 (c0 = 1, ~38.3) and c0 = 4 (spec 004 §6 B1/B2); the paper's
calibration (noise proportional to gamma). Reference: rho = gamma = inf (non-private 2S-GD).
The fraction of clipped per-sample gradients of the last step is recorded (``clip1``,
``clip2``) and drawn in panel (b).
"""

from __future__ import annotations

import numpy as np

from dpjax.algorithms import dp_iv
from dpjax.models.iv import LinearIV
from dpjax.plotting import curve_stats
from dpjax.study import ConfigError, Experiment
from dpjax.sweep import DataPlan, Setting
from experiments._iv_common import (
    INF,
    IVRecord,
    ZeroInit,
    check_delta,
    level,
    parameters,
    tracked,
)

DEFAULTS = {
    "delta": 1e-5,  # target delta of the ledger's (epsilon, delta) conversion
    "n": 2000,
    "dim": 5,
    "T": 20,
    "rho1": 5.0,
    "rho2": 5.0,
    "gamma_min": 1.0,
    "gamma_max": 1000.0,
    "num_gammas": 13,
    "rule_consts": (1.0, 4.0),
    "tau": 5.0,
    "calibration": "paper",
    "param_seed": 0,
}
QUICK = {"num_gammas": 4, "rule_consts": (1.0,)}


def _check(c):
    check_delta(c)
    if c["rho1"] <= 0 or c["rho2"] <= 0:
        raise ConfigError("--set rho1/rho2: rho must be > 0")
    if not 0 < c["gamma_min"] < c["gamma_max"] or c["num_gammas"] < 2:
        raise ConfigError("--set gamma_min/gamma_max/num_gammas: 0 < min < max, >= 2 points")
    if c["T"] < 1 or c["n"] < 10 or c["dim"] < 1 or min(c["rule_consts"]) <= 0:
        raise ConfigError("--set T/n/dim/rule_consts: T >= 1, n >= 10, dim >= 1, c0 > 0")
    if c["calibration"] not in dp_iv.CALIBRATIONS:
        raise ConfigError(f"--set calibration: one of {dp_iv.CALIBRATIONS}")


def gammas(c):
    grid = np.geomspace(c["gamma_min"], c["gamma_max"], c["num_gammas"]).tolist()
    rule = [dp_iv.clipping_threshold(c["n"], c["dim"], c["T"], c["tau"], c0)
            for c0 in c["rule_consts"]]
    return grid, rule


def settings(c):
    n, d, T = c["n"], c["dim"], c["T"]
    model = LinearIV(d, d, d)
    prm, truth = parameters(model, c["param_seed"])
    s = dp_iv.paper_step_sizes(prm.theta, n, c["tau"])
    est = dp_iv.dp_2s_gd(T, c["calibration"])
    grid, rule = gammas(c)
    common = dict(eta=s.eta, alpha=s.alpha, delta=c["delta"])
    levels = tuple(level(est, n, rho1=c["rho1"], rho2=c["rho2"], gamma1=g, gamma2=g,
                         rule=float(g in rule), **common) for g in sorted({*grid, *rule}))
    levels += (level(est, n, rho1=INF, rho2=INF, rule=0.0, **common),)
    return [Setting(
        key=f"dp,n={n},d={d}", columns={"method": est.name, "n": n, "d": d, "s": d, "p": d,
                                        "q": d, "r": d, "T": T},
        estimator=tracked(est), simulate=model.simulate, init=ZeroInit(d, d),
        record=IVRecord(d), truth=truth, plan=DataPlan(1, n),
        hparams_type=dp_iv.DPIVHyperparams, levels=levels, n=n,
    )]


def plot(iter_rows, summary, c, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    T = c["T"]
    final = [r for r in iter_rows if r["iteration"] == T]
    dp = {"rho1": c["rho1"], "rho2": c["rho2"]}
    _, rule = gammas(c)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    xs, m, se = curve_stats(final, dp, "gamma1")
    ax.errorbar(xs, m, yerr=se, color="tab:blue", marker="o", markersize=3, capsize=2,
                label=f"DP-2S-GD, rho1 = {c['rho1']:g}, rho2 = {c['rho2']:g}")
    _, m0, se0 = curve_stats(final, {"rho1": INF}, "gamma1")
    ax.axhline(m0[0], color="black", linestyle=":", label="rho = gamma = inf (2S-GD)")
    for c0, g in zip(c["rule_consts"], rule):
        ax.axvline(g, color="gray", linestyle="--", linewidth=0.8)
        ax.text(g, m.max(), f" c0={c0:g}", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("gamma1 = gamma2 = gamma")
    ax.set_ylabel(f"mean ||beta^(T) - beta||_2, T = {T}")
    ax.set_title("(a) error vs clipping threshold", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax = axes[1]
    for key, lab, col in (("clip1", "first stage", "tab:green"),
                          ("clip2", "second stage", "tab:red")):
        xs, m, se = curve_stats(final, dp, "gamma1", y=key)
        ax.errorbar(xs, m, yerr=se, color=col, marker="o", markersize=3, capsize=2, label=lab)
    for g in rule:
        ax.axvline(g, color="gray", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("gamma")
    ax.set_ylabel("fraction of per-sample gradients clipped (step T)")
    ax.set_title("(b) clipping frequency at the last step", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"Clipping threshold (spec 004 Fig. 8): n = {c['n']}, p = q = r = {c['dim']}, "
                 f"T = {T}, {c['calibration']} calibration; error bars: 1 s.e.", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


EXPERIMENTS = [
    Experiment(
        name="iv_fig8",
        title="DP-IV paper, Figure 8: DP-2S-GD error vs the clipping threshold gamma",
        defaults=DEFAULTS,
        settings=settings,
        quick=QUICK,
        reps=100,
        quick_reps=5,
        plot=plot,
        check=_check,
        summary_extra=("error_2sls", "clip1", "clip2"),
        description="n = 2000, p = q = r = 5, T = 20, rho1 = rho2 = 5, gamma in [1, 1000]. "
        "See experiments/reports/iv_fig8.md.",
    )
]
