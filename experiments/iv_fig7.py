"""Figure 7 of Liang et al. (App. G.1, spec 004 §4.5): step-size sensitivity of Algorithm 1.

Settings (paper): n = 2000, p = q = r = 5, T = 20, rho1 = rho2 = 5; 100 runs. (a) eta varied
over (0, eta_max] with alpha = alpha_max; (b) alpha varied over (0, alpha_max] with
eta = 0.9 eta_max; eta_max = 2/(1+delta)^2 and alpha_max = 4/(2 gamma_up + gamma_low) (eq. 3)
from the true Theta (psi = 0, tau = 5); the "approximately optimal" eta* and alpha* (eq. 8)
marked.

Unstated, chosen here: a 10-point grid {0.1, ..., 1.0} x the maximum plus eta* (resp. alpha*)
(spec 004 §6 B2); gamma = (sqrt(q) + sqrt(tau + log(nT)))^2 (c0 = 1); the paper's calibration.
Panels (a), (b): error against the iteration, one curve per step size (the paper's axes are not
stated; spec 004 §4.5); panel (c): the final error against the step size as a fraction of its
maximum. Reference: the same steps with rho = gamma = inf (non-private 2S-GD) at the paper's
default steps.
"""

from __future__ import annotations

import math

from dpjax.algorithms import dp_iv
from dpjax.models.iv import LinearIV
from dpjax.plotting import Curve, Panel, curve_stats
from dpjax.study import ConfigError, Experiment
from dpjax.sweep import DataPlan, Setting
from experiments._iv_common import (
    COLORS,
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
    "fractions": (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "fixed_eta_fraction": 0.9,
    "tau": 5.0,
    "clip_const": 1.0,
    "calibration": "paper",
    "param_seed": 0,
}
QUICK = {"fractions": (0.2, 0.6, 1.0)}


def _check(c):
    check_delta(c)
    if c["rho1"] <= 0 or c["rho2"] <= 0:
        raise ConfigError("--set rho1/rho2: rho must be > 0")
    if not all(0 < f <= 1 for f in (*c["fractions"], c["fixed_eta_fraction"])):
        raise ConfigError("--set fractions/fixed_eta_fraction: fractions must lie in (0, 1]")
    if c["T"] < 1 or c["n"] < 10 or c["dim"] < 1 or c["clip_const"] <= 0:
        raise ConfigError("--set T/n/dim/clip_const: T >= 1, n >= 10, dim >= 1, c0 > 0")
    if c["calibration"] not in dp_iv.CALIBRATIONS:
        raise ConfigError(f"--set calibration: one of {dp_iv.CALIBRATIONS}")


def _pairs(c, s):
    """(eta_frac, alpha_frac) pairs of both panels, deduplicated (panel a: alpha = alpha_max;
    panel b: eta = fixed fraction of eta_max)."""
    ea = [*c["fractions"], s.eta_opt / s.eta_max]
    ab = [*c["fractions"], s.alpha_opt / s.alpha_max]
    pairs = [(e, 1.0) for e in ea] + [(c["fixed_eta_fraction"], a) for a in ab]
    return list(dict.fromkeys(pairs))


def settings(c):
    n, d, T = c["n"], c["dim"], c["T"]
    model = LinearIV(d, d, d)
    prm, truth = parameters(model, c["param_seed"])
    s = dp_iv.paper_step_sizes(prm.theta, n, c["tau"])
    g = dp_iv.clipping_threshold(n, d, T, c["tau"], c["clip_const"])
    est = dp_iv.dp_2s_gd(T, c["calibration"])
    levels = tuple(
        level(est, n, rho1=c["rho1"], rho2=c["rho2"], eta=ef * s.eta_max,
              alpha=af * s.alpha_max, gamma1=g, gamma2=g, delta=c["delta"], eta_frac=ef,
              alpha_frac=af)
        for ef, af in _pairs(c, s)
    )
    levels += (level(est, n, rho1=INF, rho2=INF, eta=s.eta, alpha=s.alpha, delta=c["delta"],
                     eta_frac=s.eta / s.eta_max, alpha_frac=s.alpha / s.alpha_max),)
    return [Setting(
        key=f"dp,n={n},d={d}", columns={"method": est.name, "n": n, "d": d, "s": d, "p": d,
                                        "q": d, "r": d, "T": T},
        estimator=tracked(est), simulate=model.simulate, init=ZeroInit(d, d),
        record=IVRecord(d), truth=truth, plan=DataPlan(1, n),
        hparams_type=dp_iv.DPIVHyperparams, levels=levels, n=n,
    )]


def plot(iter_rows, summary, c, path):
    model = LinearIV(c["dim"], c["dim"], c["dim"])
    prm, _ = parameters(model, c["param_seed"])
    s = dp_iv.paper_step_sizes(prm.theta, c["n"], c["tau"])
    ef_opt, af_opt = s.eta_opt / s.eta_max, s.alpha_opt / s.alpha_max
    fe = c["fixed_eta_fraction"]
    dp = {"rho1": c["rho1"], "rho2": c["rho2"]}

    def lab(f, opt, sym):
        return f"{sym}*={f:.2f} {sym}_max" if math.isclose(f, opt) else f"{sym}={f:g} {sym}_max"

    fa = [*c["fractions"], ef_opt]
    fb = [*c["fractions"], af_opt]
    pa = [Curve(lab(f, ef_opt, "eta"), dp | {"eta_frac": f, "alpha_frac": 1.0},
                COLORS[i % 10], "--" if f == ef_opt else "-") for i, f in enumerate(fa)]
    pb = [Curve(lab(f, af_opt, "alpha"), dp | {"eta_frac": fe, "alpha_frac": f},
                COLORS[i % 10], "--" if f == af_opt else "-") for i, f in enumerate(fb)]
    ref = Curve("rho = gamma = inf, paper steps", {"rho1": INF}, "black", ":")
    panels = [
        Panel(f"(a) eta varied, alpha = alpha_max = {s.alpha_max:.4f}", [*pa, ref]),
        Panel(f"(b) alpha varied, eta = {fe:g} eta_max = {fe * s.eta_max:.3f}", [*pb, ref]),
    ]
    T = c["T"]
    final = [r for r in iter_rows if r["iteration"] == T]
    pc = [Curve("eta varied (alpha = alpha_max)", dp | {"alpha_frac": 1.0}, "tab:blue", "-",
                "o"),
          Curve(f"alpha varied (eta = {fe:g} eta_max)", dp | {"eta_frac": fe}, "tab:red", "-",
                "o")]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, panel in zip(axes[:2], panels):
        for cv in panel.curves:
            xs, m, se = curve_stats(iter_rows, cv.where, "iteration")
            ax.errorbar(xs, m, yerr=se, label=cv.label, color=cv.color, linestyle=cv.linestyle,
                        capsize=2, linewidth=1.2)
        ax.set_yscale("log")
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel("iteration t")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    axes[0].set_ylabel("mean ||beta^(t) - beta||_2")
    ax = axes[2]
    for cv, xk in zip(pc, ("eta_frac", "alpha_frac")):
        xs, m, se = curve_stats(final, cv.where, xk)
        ax.errorbar(xs, m, yerr=se, label=cv.label, color=cv.color, marker="o", markersize=3,
                    capsize=2)
    ax.axvline(ef_opt, color="tab:blue", linestyle="--", linewidth=0.8, label="eta*/eta_max")
    ax.axvline(af_opt, color="tab:red", linestyle="--", linewidth=0.8, label="alpha*/alpha_max")
    ax.set_yscale("log")
    ax.set_xlabel("step size / its maximum (eq. 3)")
    ax.set_title(f"(c) final error at T = {T}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"Step-size sensitivity (spec 004 Fig. 7): n = {c['n']}, p = q = r = "
                 f"{c['dim']}, T = {T}, rho1 = {c['rho1']:g}, rho2 = {c['rho2']:g} "
                 f"({c['calibration']} calibration); error bars: 1 s.e.", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


EXPERIMENTS = [
    Experiment(
        name="iv_fig7",
        title="DP-IV paper, Figure 7: step-size sensitivity of DP-2S-GD",
        defaults=DEFAULTS,
        settings=settings,
        quick=QUICK,
        reps=100,
        quick_reps=5,
        plot=plot,
        check=_check,
        summary_extra=("error_2sls", "clip1", "clip2"),
        description="n = 2000, p = q = r = 5, T = 20, rho1 = rho2 = 5; eta and alpha over "
        "(0, max]. See experiments/reports/iv_fig7.md.",
    )
]
