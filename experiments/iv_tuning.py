"""Figures 7 and 8 of Liang et al. (App. G.1, G.2; spec 004 §4.5, §4.6): how Algorithm 1
depends on its tuning -- the step sizes (``iv_fig7``) and the clipping threshold (``iv_fig8``).
One design, two registered experiments.

Common settings (paper): n = 2000, p = q = r = 5, T = 20, rho1 = rho2 = 5; 100 runs; tau = 5 and
the step-size bounds from the true Theta (psi = 0); the paper's calibration. One setting: every
tuning value is a level of the same compiled run. Reference: rho = gamma = inf (non-private
2S-GD) at the paper's default steps.

``iv_fig7`` (Figure 7): (a) eta varied over (0, eta_max] with alpha = alpha_max; (b) alpha varied
over (0, alpha_max] with eta = 0.9 eta_max; eta_max = 2/(1+delta)^2 and alpha_max =
4/(2 gamma_up + gamma_low) (eq. 3); the "approximately optimal" eta* and alpha* (eq. 8) marked.
Unstated, chosen here: a 10-point grid {0.1, ..., 1.0} x the maximum plus eta* (resp. alpha*)
(spec 004 §6 B2); gamma = (sqrt(q) + sqrt(tau + log(nT)))^2 (c0 = 1). Panels (a), (b): error
against the iteration, one curve per step size (the paper's axes are not stated; spec 004 §4.5);
panel (c): the final error against the step size as a fraction of its maximum.

``iv_fig8`` (Figure 8): gamma1 = gamma2 = gamma over [1, 1000], the paper's steps. Unstated,
chosen here: gamma on 13 log-spaced points over [1, 1000] plus the paper's rule
(sqrt(q) + sqrt(tau + log(nT)))^2 (c0 = 1, ~38.3) and c0 = 4 (spec 004 §6 B1/B2); the noise is
proportional to gamma. The fraction of clipped per-sample gradients of the last step is recorded
(``clip1``, ``clip2``) and drawn in panel (b).
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any

import numpy as np

from dpjax.algorithms import dp_iv
from dpjax.config import param
from dpjax.experiments._common import COLORS, INF
from dpjax.experiments._iv_common import (
    LEVEL_COLUMNS,
    STUDY,
    IVConfig,
    IVRecord,
    ZeroInit,
    level,
    parameters,
    tracked,
)
from dpjax.models.iv import LinearIV
from dpjax.plotting import Curve, Mark, Panel, curve_stats, plot_panels
from dpjax.study import Experiment
from dpjax.sweep import DataPlan, Setting

# the curve at eq. (8)'s eta* or alpha* (dash-dot-dot: dashed is the non-private curve)
OPT_STYLE = (0, (4, 1.5, 1, 1.5, 1, 1.5))


@dataclasses.dataclass(frozen=True)
class TuningConfig(IVConfig):
    """What Figures 7 and 8 share; each figure's subclass says which levels it runs and what it
    draws."""

    n: int = param(2000, ge=10, doc="sample size")
    dim: int = param(5, ge=1, doc="p = q = r")
    T: int = param(20, ge=1, doc="iterations")
    rho1: float = param(5.0, gt=0, doc="first-stage rho")
    rho2: float = param(5.0, gt=0, doc="second-stage rho")
    tau: float = param(5.0, ge=0, doc="tail parameter of the step sizes and the clipping rule")
    calibration: str = param("paper", choices=dp_iv.CALIBRATIONS, doc="noise calibration")
    param_seed: int = param(0, ge=0, doc="seed of the true parameters")
    theta_file: str = param("", doc="a .npy file with the first-stage Theta (q x p) to use "
                            "instead of the one drawn from param_seed (empty: draw it)")

    def steps(self) -> dp_iv.StepSizes:
        """The paper's step sizes (and their bounds) from the true Theta."""
        prm, _ = parameters(LinearIV(self.dim, self.dim, self.dim), self.param_seed,
                            self.theta_file)
        return dp_iv.paper_step_sizes(prm.theta, self.n, self.tau)

    @abc.abstractmethod
    def levels(self, est, s) -> tuple[dict[str, float], ...]:
        """The levels of the figure's setting (each figure's configuration defines them)."""

    @abc.abstractmethod
    def panels(self, rows: list[dict[str, Any]]) -> tuple[list[Panel], str]:
        """The panels and the figure's title, from the final-iterate rows."""


@dataclasses.dataclass(frozen=True)
class Fig7Config(TuningConfig):
    fractions: tuple[float, ...] = param(
        (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), gt=0, le=1,
        doc="the step sizes as fractions of their maxima (both panels)")
    fixed_eta_fraction: float = param(0.9, gt=0, le=1,
                                      doc="eta / eta_max of panel (b), where alpha varies")
    clip_const: float = param(1.0, gt=0,
                              doc="c0 of gamma = c0 (sqrt q + sqrt(tau + log nT))^2")

    def _pairs(self, s):
        """(eta_frac, alpha_frac) pairs of both panels, deduplicated (panel a: alpha =
        alpha_max; panel b: eta = fixed fraction of eta_max)."""
        ea = [*self.fractions, s.eta_opt / s.eta_max]
        ab = [*self.fractions, s.alpha_opt / s.alpha_max]
        pairs = [(e, 1.0) for e in ea] + [(self.fixed_eta_fraction, a) for a in ab]
        return list(dict.fromkeys(pairs))

    def levels(self, est, s):
        g = dp_iv.clipping_threshold(self.n, self.dim, self.T, self.tau, self.clip_const)
        out = tuple(
            level(est, self.n, rho1=self.rho1, rho2=self.rho2, eta=ef * s.eta_max,
                  alpha=af * s.alpha_max, gamma1=g, gamma2=g, delta=self.delta, eta_frac=ef,
                  alpha_frac=af)
            for ef, af in self._pairs(s)
        )
        return out + (level(est, self.n, rho1=INF, rho2=INF, eta=s.eta, alpha=s.alpha,
                            delta=self.delta, eta_frac=s.eta / s.eta_max,
                            alpha_frac=s.alpha / s.alpha_max),)

    def panels(self, rows):
        s = self.steps()
        ef_opt, af_opt = s.eta_opt / s.eta_max, s.alpha_opt / s.alpha_max
        fe = self.fixed_eta_fraction
        dp = {"rho1": self.rho1, "rho2": self.rho2}
        it = {"kind": None}  # every iteration, not the derived final rows of panel (c)

        def lab(f, opt, sym):
            return (f"{sym}*={f:.2f} {sym}_max" if math.isclose(f, opt)
                    else f"{sym}={f:g} {sym}_max")

        pa = [Curve(lab(f, ef_opt, "eta"), dp | it | {"eta_frac": f, "alpha_frac": 1.0},
                    COLORS[i % 10], OPT_STYLE if f == ef_opt else "-")
              for i, f in enumerate([*self.fractions, ef_opt])]
        pb = [Curve(lab(f, af_opt, "alpha"), dp | it | {"eta_frac": fe, "alpha_frac": f},
                    COLORS[i % 10], OPT_STYLE if f == af_opt else "-")
              for i, f in enumerate([*self.fractions, af_opt])]
        ref = Curve("rho = gamma = inf, paper steps", it | {"rho1": INF}, role="nonprivate")
        fin = {"kind": "final"}
        pc = [Curve("eta varied (alpha = alpha_max)", dp | fin | {"alpha_frac": 1.0},
                    "tab:blue", "-", "o", x="eta_frac"),
              Curve(f"alpha varied (eta = {fe:g} eta_max)", dp | fin | {"eta_frac": fe},
                    "tab:red", "-", "o", x="alpha_frac")]
        panels = [
            Panel(f"(a) eta varied, alpha = alpha_max = {s.alpha_max:.4f}", [*pa, ref],
                  ylabel="mean ||beta^(t) - beta||_2"),
            Panel(f"(b) alpha varied, eta = {fe:g} eta_max = {fe * s.eta_max:.3f}", [*pb, ref]),
            Panel(f"(c) final error at T = {self.T}", pc, x="eta_frac",
                  xlabel="step size / its maximum (eq. 3)",
                  marks=[Mark(ef_opt, "eta*/eta_max", color="tab:blue"),
                         Mark(af_opt, "alpha*/alpha_max", color="tab:red")]),
        ]
        return panels, (f"Step-size sensitivity (spec 004 Fig. 7): n = {self.n}, p = q = r = "
                         f"{self.dim}, T = {self.T}, rho1 = {self.rho1:g}, rho2 = "
                         f"{self.rho2:g} ({self.calibration} calibration)")


@dataclasses.dataclass(frozen=True)
class Fig8Config(TuningConfig):
    gamma_min: float = param(1.0, gt=0, doc="the smallest gamma of the log-spaced grid")
    gamma_max: float = param(1000.0, gt="gamma_min", doc="the largest gamma")
    num_gammas: int = param(13, ge=2, doc="points of the log-spaced gamma grid")
    rule_consts: tuple[float, ...] = param(
        (1.0, 4.0), gt=0, doc="c0 of the rule gamma = c0 (sqrt q + sqrt(tau + log nT))^2, added")

    def gammas(self) -> tuple[list[float], list[float]]:
        """The log-spaced grid and the rule's thresholds."""
        grid = np.geomspace(self.gamma_min, self.gamma_max, self.num_gammas).tolist()
        rule = [dp_iv.clipping_threshold(self.n, self.dim, self.T, self.tau, c0)
                for c0 in self.rule_consts]
        return grid, rule

    def levels(self, est, s):
        grid, rule = self.gammas()
        common = dict(eta=s.eta, alpha=s.alpha, delta=self.delta)
        out = tuple(level(est, self.n, rho1=self.rho1, rho2=self.rho2, gamma1=g, gamma2=g,
                          rule=float(g in rule), **common) for g in sorted({*grid, *rule}))
        return out + (level(est, self.n, rho1=INF, rho2=INF, rule=0.0, **common),)

    def panels(self, rows):
        dp = {"rho1": self.rho1, "rho2": self.rho2, "kind": "final"}
        _, rule = self.gammas()
        _, m0, _ = curve_stats(rows, {"rho1": INF, "kind": "final"}, "gamma1")
        at_rule = [Mark(g, f"rule, c0={c0:g}") for c0, g in zip(self.rule_consts, rule)]
        pa = Panel("(a) error vs clipping threshold",
                   [Curve(f"DP-2S-GD, rho1 = {self.rho1:g}, rho2 = {self.rho2:g}", dp,
                          "tab:blue", "-", "o")],
                   x="gamma1", xlabel="gamma1 = gamma2 = gamma", logx=True,
                   ylabel=f"mean ||beta^(T) - beta||_2, T = {self.T}",
                   marks=[Mark(float(m0[0]), "rho = gamma = inf (2S-GD)", axis="y",
                               role="nonprivate"), *at_rule])
        pb = Panel("(b) clipping frequency at the last step",
                   [Curve("first stage", dp, "tab:green", "-", "o", y="clip1"),
                    Curve("second stage", dp, "tab:red", "-", "o", y="clip2")],
                   x="gamma1", xlabel="gamma", logx=True, logy=False,
                   ylabel="fraction of gradients clipped at step T",
                   marks=[dataclasses.replace(mk, label=None) for mk in at_rule])
        return [pa, pb], (f"Clipping threshold (spec 004 Fig. 8): n = {self.n}, p = q = r = "
                          f"{self.dim}, T = {self.T}, {self.calibration} calibration")


def settings(c: TuningConfig):
    n, d, T = c.n, c.dim, c.T
    model = LinearIV(d, d, d)
    _, truth = parameters(model, c["param_seed"], c["theta_file"])
    est = dp_iv.dp_2s_gd(T, c.calibration)
    return [Setting(
        key=f"dp,n={n},d={d}", columns={"method": est.name, "n": n, "d": d, "s": d, "p": d,
                                        "q": d, "r": d, "T": T},
        estimator=tracked(est), simulate=model.simulate, init=ZeroInit(d, d),
        record=IVRecord(d), truth=truth, plan=DataPlan(1, n),
        hparams_type=dp_iv.DPIVHyperparams, levels=c.levels(est, c.steps()), n=n,
    )]


def plot(iter_rows, summary, c: TuningConfig, path):
    final = [r | {"kind": "final"} for r in iter_rows if r["iteration"] == c.T]
    panels, title = c.panels(final)
    plot_panels(iter_rows + final, panels, path, ylabel="mean ||beta^(t) - beta||_2",
                suptitle=title, ncols=len(panels))


FIG7 = Fig7Config()
FIG8 = Fig8Config()
COMMON = dict(settings=settings, plot=plot, **STUDY)

EXPERIMENTS = [
    Experiment(
        name="iv_fig7",
        title="DP-IV paper, Figure 7: step-size sensitivity of DP-2S-GD",
        defaults=FIG7,
        quick=dataclasses.replace(FIG7, fractions=(0.2, 0.6, 1.0)),
        description="n = 2000, p = q = r = 5, T = 20, rho1 = rho2 = 5; eta and alpha over "
        "(0, max]. See experiments/reports/iv_fig7.md.",
        level_columns=(*LEVEL_COLUMNS, "eta_frac", "alpha_frac"), **COMMON,
    ),
    Experiment(
        name="iv_fig8",
        title="DP-IV paper, Figure 8: DP-2S-GD error vs the clipping threshold gamma",
        defaults=FIG8,
        quick=dataclasses.replace(FIG8, num_gammas=4, rule_consts=(1.0,)),
        description="n = 2000, p = q = r = 5, T = 20, rho1 = rho2 = 5, gamma in [1, 1000]. "
        "See experiments/reports/iv_fig8.md.",
        level_columns=(*LEVEL_COLUMNS, "rule"), **COMMON,
    ),
]
