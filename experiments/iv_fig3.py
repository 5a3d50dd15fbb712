"""Figure 3 of Liang et al. (DP-2S-GD, spec 004 §4.2): error of Algorithm 1 against n.

Settings (paper): T = 20; total rho = rho1 + rho2 = 10 split three ways, (rho1, rho2) in
{(1, 9), (5, 5), (9, 1)}; (a) p = q = r = 5, (b) p = q = r = 50; 100 runs; data of spec 004
§4.1 with the parameters drawn once per (p, q, r); tau = 5, eta = 1/(1+delta)^2 and
alpha = 2/(2 gamma_up + gamma_low) from the true Theta (an oracle, as in the paper; psi = 0).

Unstated, chosen here (spec 004 §6 B1, B2): n in {250, 500, 1000, 2000, 4000, 8000}; clipping
gamma1 = gamma2 = c0 (sqrt(q) + sqrt(tau + log(nT)))^2 with c0 = 1 (spec 004's default; ~30% of
the second-stage gradients are clipped) and c0 = 4 (spec 004's estimate of "no clipping w.h.p.",
the paper's stated intent, Remark 3.4); the paper's noise calibration (which delivers rho/2).
Added for reference: non-private 2S-GD with the same T and steps, and closed-form 2SLS. The
primary metric is ||beta^(T) - beta|| (spec 004 §6 B4); ||beta^(T) - beta_hat_2SLS|| is recorded
as ``error_2sls``.
"""

from __future__ import annotations

import dataclasses

from dpjax.algorithms import dp_iv
from dpjax.config import ConfigError, param
from dpjax.experiments._common import COLORS, INF
from dpjax.experiments._iv_common import (
    LEVEL_COLUMNS,
    IVConfig,
    IVRecord,
    ZeroInit,
    level,
    parameters,
    tracked,
)
from dpjax.models.iv import LinearIV
from dpjax.plotting import Claim, Curve, Panel, plot_panels
from dpjax.study import Experiment
from dpjax.sweep import DataPlan, Setting


@dataclasses.dataclass(frozen=True)
class Fig3Config(IVConfig):
    dims: tuple[int, ...] = param((5, 50), ge=1, doc="p = q = r, one panel each")
    n_grid: tuple[int, ...] = param((250, 500, 1000, 2000, 4000, 8000), ge=10,
                                    doc="the sample sizes")
    T: int = param(20, ge=1, doc="iterations")
    rho1_grid: tuple[float, ...] = param((1.0, 5.0, 9.0), gt=0,
                                         doc="first-stage rho of each budget split")
    rho2_grid: tuple[float, ...] = param((9.0, 5.0, 1.0), gt=0,
                                         doc="second-stage rho of each split (as many as rho1)")
    tau: float = param(5.0, ge=0, doc="tail parameter of the step sizes and the clipping rule")
    clip_consts: tuple[float, ...] = param((1.0, 4.0), gt=0,
                                           doc="c0 of gamma = c0 (sqrt q + sqrt(tau + log nT))^2")
    calibration: str = param("paper", choices=dp_iv.CALIBRATIONS, doc="noise calibration")
    param_seed: int = param(0, ge=0, doc="seed of the true parameters")
    theta_file: str = param("", doc="a .npy file with the first-stage Theta (q x p) to use "
                            "instead of the one drawn from param_seed (empty: draw it)")
    references: bool = param(True, doc="add non-private 2S-GD and 2SLS")

    def check(self) -> None:
        if len(self.rho1_grid) != len(self.rho2_grid):
            raise ConfigError(f"--set rho2_grid: must have as many values as rho1_grid "
                              f"({len(self.rho1_grid)}: the budget splits are pairs); got "
                              f"{len(self.rho2_grid)}")


# the clipping constants differ by marker (dashed and dotted mark the non-private curves)
C0_MARKERS = ("o", "^", "s")

DEFAULTS = Fig3Config()
QUICK = dataclasses.replace(DEFAULTS, dims=(5,), n_grid=(500, 2000), clip_consts=(1.0,),
                            references=False)


def settings(c):
    out = []
    T = c["T"]
    for d in c["dims"]:
        model = LinearIV(d, d, d)
        prm, truth = parameters(model, c["param_seed"], c["theta_file"])
        for n in c["n_grid"]:
            steps = dp_iv.paper_step_sizes(prm.theta, n, c["tau"])
            cols = {"n": n, "d": d, "s": d, "p": d, "q": d, "r": d, "T": T}
            common = dict(eta=steps.eta, alpha=steps.alpha, delta=c["delta"])
            dp = dp_iv.dp_2s_gd(T, c["calibration"])
            levels = tuple(
                level(dp, n, rho1=r1, rho2=r2, gamma1=g, gamma2=g, c0=c0, **common)
                for c0 in c["clip_consts"]
                for g in [dp_iv.clipping_threshold(n, d, T, c["tau"], c0)]
                for r1, r2 in zip(c["rho1_grid"], c["rho2_grid"])
            )
            base = dict(simulate=model.simulate, init=ZeroInit(d, d), record=IVRecord(d),
                        truth=truth, plan=DataPlan(1, n), hparams_type=dp_iv.DPIVHyperparams,
                        n=n)
            out.append(Setting(key=f"dp,d={d},n={n}", columns={"method": dp.name} | cols,
                               estimator=tracked(dp), levels=levels, **base))
            refs = (("gd", dp_iv.two_stage_gd(T)),)  # 2SLS: its diagnostic, same data
            for tag, ref in refs if c["references"] else ():
                ref_level = level(ref, n, rho1=INF, rho2=INF, c0=INF, **common)
                out.append(Setting(key=f"{tag},d={d},n={n}", columns={"method": ref.name} | cols,
                                   estimator=tracked(ref), levels=(ref_level,), **base))
    return out


def plot(iter_rows, summary, c, path):
    T = c["T"]
    final = [r for r in iter_rows if r["iteration"] == T]
    panels = []
    for d in c["dims"]:
        curves = [
            Curve(f"rho1={r1:g}, rho2={r2:g}, c0={c0:g}",
                  {"method": f"dp-2s-gd/{c['calibration']}", "d": d, "rho1": r1, "rho2": r2,
                   "c0": c0}, COLORS[i], "-", C0_MARKERS[j % 3])
            for j, c0 in enumerate(c["clip_consts"])
            for i, (r1, r2) in enumerate(zip(c["rho1_grid"], c["rho2_grid"]))
        ]
        curves.append(Curve(f"2S-GD (non-private, T={T})", {"method": "2s-gd", "d": d},
                            marker="s", role="nonprivate"))
        curves.append(Curve("2SLS (closed form)", {"method": "2s-gd", "d": d}, marker="s",
                            y="error_of_2sls", role="reference"))
        # The paper's Fig. 3(a) claim (p = q = r = 5): "all points lie in the plateau region,
        # so the error decreases at the rate 1/sqrt(n)"; drawn through the equal split.
        mid = len(c["rho1_grid"]) // 2
        claims = [Claim("rate n^-1/2 (plateau)", "Fig. 3(a)", slope=-0.5, through={
            "method": f"dp-2s-gd/{c['calibration']}", "d": d, "rho1": c["rho1_grid"][mid],
            "rho2": c["rho2_grid"][mid], "c0": c["clip_consts"][0]})] if d == 5 else []
        panels.append(Panel(f"p = q = r = {d}, T = {T}", curves, x="n", xlabel="n", logx=True,
                            claims=claims))
    plot_panels(final, panels, path, ylabel="mean ||beta^(T) - beta||_2", suptitle=(
        "DP-2S-GD vs n (spec 004 Fig. 3); rho1 + rho2 requested,\n"
        f"{c['calibration']} calibration; gamma = c0 (sqrt q + sqrt(tau + log nT))^2"))


EXPERIMENTS = [
    Experiment(
        name="iv_fig3",
        title="DP-IV paper, Figure 3: DP-2S-GD error vs n for three budget splits (T = 20)",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        level_columns=(*LEVEL_COLUMNS, "c0"),
        reps=100, quick_reps=5,
        summary_extra=("error_2sls", "error_of_2sls", "clip1", "clip2"),
        description="p = q = r in {5, 50}, (rho1, rho2) in {(1,9), (5,5), (9,1)}, with "
        "non-private 2S-GD and 2SLS for reference. See experiments/reports/iv_fig3.md.",
    )
]
