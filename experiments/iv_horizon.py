"""Figures 4 and 6 of Liang et al. (DP-2S-GD, spec 004 §4.3, §4.4): the error against the
number of iterations T. One design, two registered experiments.

Common settings (paper): n = 1000, p = q = 5 (r = 5 assumed, spec 004 §6 B9); 100 runs; tau = 5,
eta = 1/(1+delta)^2 and alpha = 2/(2 gamma_up + gamma_low) from the true Theta (psi = 0).
Unstated, chosen here (spec 004 §4.3, §6 B2): T in {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000,
3000}; gamma1 = gamma2 = (sqrt(q) + sqrt(tau + log(nT)))^2 (c0 = 1), so gamma grows slowly with
T; the paper's noise calibration (lambda = (2 gamma/n) sqrt(T/rho), delivering rho/2). Each T is
a separate run of T iterations (the noise scale depends on T); only beta^(T) is recorded.
Reference: the same iteration with rho = gamma = inf (exactly non-private 2S-GD).

``iv_fig4`` (Figure 4): Algorithm 1 with (a) rho2 "large" and rho1 varied, (b) rho1 "large" and
rho2 varied; varied rho in {0.1, 1, 10}, "large" = 100.

``iv_fig6`` (Figure 6, App. F.1): (a) Algorithm 1 with rho1 = 1 and rho2 in {0.1, 1, 10};
(b) Algorithm 3 ("privacy for beta only": the first stage is non-private, unclipped GD).
Algorithm 3 is **not DP as the paper claims** (spec 004 §6 A2): its beta releases use a
non-private Theta^(t) that moves with every record, so the true sensitivity of its clipped
second-stage mean is 2 gamma2 (n times the declared 2 gamma2/n): its ledger gives the beta
releases what that true sensitivity earns (vacuous) and, its first stage being a non-private
release, says "NOT DP as claimed" with epsilon = inf (the results-file ``epsilon`` column). It is
run here only to reproduce the paper's comparison.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

from dpjax.algorithms import dp_iv
from dpjax.config import param
from dpjax.experiments._common import COLORS, INF, final_rows
from dpjax.experiments._iv_common import (
    LEVEL_COLUMNS,
    STUDY,
    IVConfig,
    horizon_setting,
    level,
    parameters,
)
from dpjax.models.iv import LinearIV
from dpjax.plotting import Curve, Panel, plot_panels
from dpjax.study import Experiment

T_GRID = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 3000)


@dataclasses.dataclass(frozen=True)
class HorizonConfig(IVConfig):
    """What Figures 4 and 6 share; each figure's subclass says what it runs and draws."""

    n: int = param(1000, ge=10, doc="sample size")
    dim: int = param(5, ge=1, doc="p = q = r")
    T_grid: tuple[int, ...] = param(T_GRID, ge=1, doc="the horizons T (one run each)")
    tau: float = param(5.0, ge=0, doc="tail parameter of the step sizes and the clipping rule")
    clip_const: float = param(1.0, gt=0,
                              doc="c0 of gamma = c0 (sqrt q + sqrt(tau + log nT))^2")
    calibration: str = param("paper", choices=dp_iv.CALIBRATIONS, doc="noise calibration")
    param_seed: int = param(0, ge=0, doc="seed of the true parameters")
    theta_file: str = param("", doc="a .npy file with the first-stage Theta (q x p) to use "
                            "instead of the one drawn from param_seed (empty: draw it)")

    title = ""

    @abc.abstractmethod
    def runs(self, T: int) -> list[tuple[str, Any, list[tuple[float, float]]]]:
        """Per horizon ``T``: ``(key, estimator, [(rho1, rho2), ...])``, one setting each."""

    @abc.abstractmethod
    def panels(self) -> list[tuple[str, list[Curve]]]:
        """The panels: ``(title, curves)``."""

    def _ref(self) -> Curve:
        return Curve("rho1 = rho2 = inf (2S-GD)",
                     {"method": f"dp-2s-gd/{self.calibration}", "rho1": INF, "rho2": INF},
                     marker="s", role="nonprivate")


@dataclasses.dataclass(frozen=True)
class Fig4Config(HorizonConfig):
    rho_grid: tuple[float, ...] = param((0.1, 1.0, 10.0), gt=0,
                                        doc="the varied rho (rho1 in panel (a), rho2 in (b))")
    rho_large: float = param(100.0, gt=0, doc="the \"large\" rho of the other stage")

    title = "DP-2S-GD vs T (spec 004 Fig. 4)"

    def runs(self, T):
        big, grid = self.rho_large, self.rho_grid
        pairs = [(r, big) for r in grid] + [(big, r) for r in grid] + [(INF, INF)]
        return [(f"dp,T={T}", dp_iv.dp_2s_gd(T, self.calibration), pairs)]

    def panels(self):
        method, big = f"dp-2s-gd/{self.calibration}", self.rho_large

        def curves(pairs):
            return [Curve(f"rho1={r1:g}, rho2={r2:g}", {"method": method, "rho1": r1,
                                                         "rho2": r2}, COLORS[i % 10], "-", "o")
                    for i, (r1, r2) in enumerate(pairs)] + [self._ref()]

        return [(f"(a) rho2 = {big:g}, rho1 varied", curves([(r, big) for r in self.rho_grid])),
                (f"(b) rho1 = {big:g}, rho2 varied", curves([(big, r) for r in self.rho_grid]))]


@dataclasses.dataclass(frozen=True)
class Fig6Config(HorizonConfig):
    rho2_grid: tuple[float, ...] = param((0.1, 1.0, 10.0), gt=0, doc="the varied rho2")
    rho1: float = param(1.0, gt=0, doc="rho1 of Algorithm 1 (panel (a))")

    title = "Algorithm 1 vs Algorithm 3 (spec 004 Fig. 6)"

    def runs(self, T):
        alg1 = dp_iv.dp_2s_gd(T, self.calibration)
        alg3 = dp_iv.dp_2s_gd_beta_only(T, self.calibration)  # first stage non-private
        return [(f"alg1,T={T}", alg1, [(self.rho1, r) for r in self.rho2_grid] + [(INF, INF)]),
                (f"alg3,T={T}", alg3, [(INF, r) for r in self.rho2_grid])]

    def panels(self):
        cal = self.calibration
        pa = [Curve(f"rho2={r:g}", {"method": f"dp-2s-gd/{cal}", "rho1": self.rho1, "rho2": r},
                    COLORS[i % 10], "-", "o") for i, r in enumerate(self.rho2_grid)]
        pb = [Curve(f"rho2={r:g} (claimed)", {"method": f"dp-2s-gd-beta/{cal}", "rho2": r},
                    COLORS[i % 10], "-", "o", role="not-dp")
              for i, r in enumerate(self.rho2_grid)]
        return [(f"(a) Algorithm 1, rho1 = {self.rho1:g}", [*pa, self._ref()]),
                ("(b) Algorithm 3 (NOT DP as claimed)", [*pb, self._ref()])]


def settings(c: HorizonConfig):
    """Per T and run: the levels of its (rho1, rho2) pairs; a stage with a finite rho clips at
    gamma = c0 (sqrt q + sqrt(tau + log nT))^2, a non-private stage does not clip."""
    n, d = c.n, c.dim
    model = LinearIV(d, d, d)
    prm, truth = parameters(model, c["param_seed"], c["theta_file"])
    steps = dp_iv.paper_step_sizes(prm.theta, n, c.tau)
    common = dict(eta=steps.eta, alpha=steps.alpha, delta=c.delta)
    out = []
    for T in c.T_grid:
        g = dp_iv.clipping_threshold(n, d, T, c.tau, c.clip_const)
        for key, est, pairs in c.runs(T):
            levels = tuple(level(est, n, rho1=r1, rho2=r2, gamma1=g if r1 < INF else INF,
                                 gamma2=g if r2 < INF else INF, **common) for r1, r2 in pairs)
            out.append(horizon_setting(key, est.name, est, model, truth, n, T, levels))
    return out


def plot(iter_rows, summary, c: HorizonConfig, path):
    panels = [Panel(title, curves, x="T", xlabel="T", logx=True)
              for title, curves in c.panels()]
    plot_panels(final_rows(iter_rows), panels, path, ylabel="mean ||beta^(T) - beta||_2",
                suptitle=(f"{c.title}\nn = {c.n}, p = q = r = {c.dim}, {c.calibration} "
                          f"calibration, c0 = {c.clip_const:g}"))


FIG4 = Fig4Config()
FIG6 = Fig6Config()
COMMON = dict(settings=settings, plot=plot, level_columns=LEVEL_COLUMNS, **STUDY)

EXPERIMENTS = [
    Experiment(
        name="iv_fig4",
        title="DP-IV paper, Figure 4: DP-2S-GD error vs the number of iterations T",
        defaults=FIG4,
        quick=dataclasses.replace(FIG4, T_grid=(10, 100)),
        description="n = 1000, p = q = r = 5; (a) rho2 = 100 and rho1 in {0.1, 1, 10}; (b) the "
        "reverse; T from 1 to 3000. See experiments/reports/iv_fig4.md.",
        **COMMON,
    ),
    Experiment(
        name="iv_fig6",
        title="DP-IV paper, Figure 6: Algorithm 1 vs Algorithm 3 (not DP as claimed) against T",
        defaults=FIG6,
        quick=dataclasses.replace(FIG6, T_grid=(20, 200)),
        description="n = 1000, p = q = r = 5, rho2 in {0.1, 1, 10}; Algorithm 1 with rho1 = 1 "
        "and the paper's Algorithm 3. See experiments/reports/iv_fig6.md.",
        **COMMON,
    ),
]
