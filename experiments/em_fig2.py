"""Figure 2 of Zhang & Zhang, low-dimensional DP-EM for the Gaussian mixture (Algorithm 4;
spec 000 §4.3, Sec. 6.2).

Data: ``y_i = z_i beta* + e_i`` with every coordinate of ``beta*`` equal to ``1/sqrt(d)`` (unit
norm), ``P(z_i = +-1) = 1/2``, ``e_i ~ N(0, sigma^2 I_d)``, ``sigma = 0.5``; 50 repetitions;
error ``||beta_hat - beta*||_2`` of the final iterate. Stated: (a) fix d, epsilon, delta and vary
n from 5,000 to 25,000; (b) fix n, epsilon, delta and vary d from 5 to 25.

Unstated, chosen here: the fixed values ``d = 10`` (panel a) and ``n = 10,000`` (panel b), the
grids ``n in {5k, 10k, 15k, 20k, 25k}`` and ``d in {5, 10, 15, 20, 25}``, ``epsilon in {0.5,
1.0}`` (the classic Gaussian calibration is proven only for epsilon <= 1), ``delta = 1/(2n)``,
``eta = 0.5`` (as in the paper's other experiments), ``T = sqrt(log n)``, ``N0 = ceil(log n)``
disjoint batches, ``beta0 = beta* + (||beta*||/8) u`` with ``u`` a uniformly random unit
direction (``R/2`` with ``R = ||beta*||/4``, Lemma 4.1), drawn independently of the data.

Algorithm 4 adds ``N(0, sigma_t^2 I_d)`` with ``sigma_t = sqrt(d) 2 eta T sqrt(2 log(1.25/delta))
/ (n0 epsilon)`` to every iterate. Comparators: the same algorithm at epsilon = inf (same
splitting and truncation, zero noise) and standard gradient EM (Balakrishnan et al. 2017: all n
records in every one of the ``N0`` iterations, no truncation, no noise). The DP gradient EM of
Wang et al. (2020) (arXiv 2010.13520, spec 002), the paper's other comparator, is its
Algorithm 2 (``dpjax.algorithms.dp_gem``; ``gem_curve``): all n records in each of ``T = N0``
iterations (the same count as Algorithm 4), coordinate-wise psi-robust gradients with the
sigma-consistent ``s``, zCDP over the ``d T`` releases converted to (epsilon, delta) exactly,
``eta = 1`` (its theory), ``tau = ||beta*||_inf^2 + sigma^2``, ``zeta = 0.05``, the same
``delta = 1/(2n)`` and the same kind of start.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpjax.algorithms import dp_em, dp_gem
from dpjax.config import Config, param
from dpjax.experiments._common import COLORS, INF, final_rows
from dpjax.experiments._em_common import BetaError, InitNearTruth, level
from dpjax.models import GaussianMixture
from dpjax.plotting import Curve, Panel, plot_panels
from dpjax.study import Experiment
from dpjax.sweep import DataPlan, Setting


@dataclasses.dataclass(frozen=True)
class Fig2Config(Config):
    sigma: float = param(0.5, gt=0, doc="noise standard deviation")
    eta: float = param(0.5, gt=0, doc="step size")
    n_grid: tuple[int, ...] = param((5000, 10000, 15000, 20000, 25000), ge=20,
                                    doc="panel (a): the sample sizes (at d_base)")
    d_base: int = param(10, ge=1, doc="the dimension of panel (a)")
    d_grid: tuple[int, ...] = param((5, 10, 15, 20, 25), ge=1,
                                    doc="panel (b): the dimensions (at n_base)")
    n_base: int = param(10000, ge=20, doc="the sample size of panel (b)")
    eps_grid: tuple[float, ...] = param((0.5, 1.0), gt=0, doc="the epsilons of every panel")
    truncation_const: float = param(1.0, gt=0,
                                    doc="truncation level T = truncation_const sqrt(log n)")
    init_radius: float = param(0.125, ge=0,
                               doc="start at distance init_radius ||beta*|| from beta*")
    gem_curve: bool = param(True, doc="add Wang et al. (2020)'s DP gradient EM (spec 002 "
                                      "Alg 2, T = N0, eta = 1)")


DEFAULTS = Fig2Config()
QUICK = dataclasses.replace(DEFAULTS, n_grid=(5000, 25000), d_grid=(5, 25), d_base=5,
                            n_base=5000, eps_grid=(0.5,))


def dense_unit_beta(d: int) -> np.ndarray:
    """``beta*`` of spec 000 §4.3: every coordinate ``1/sqrt(d)``."""
    return np.full(d, 1.0 / math.sqrt(d), np.float32)


def _pairs(c):
    return sorted({(n, c["d_base"]) for n in c["n_grid"]}
                  | {(c["n_base"], d) for d in c["d_grid"]})


def settings(c):
    model = GaussianMixture(c["sigma"])
    init, record = InitNearTruth(c["init_radius"]), BetaError()
    out = []
    for n, d in _pairs(c):
        N0 = dp_em.default_num_iterations(n)
        T = c["truncation_const"] * dp_em.default_truncation(n)
        common = dict(simulate=model.simulate, init=init, record=record,
                      truth=dense_unit_beta(d), plan=DataPlan(N0, n // N0),
                      hparams_type=dp_em.DPEMHyperparams, n=n)
        out.append(Setting(
            key=f"ld-dp-em,n={n},d={d}",
            columns={"method": "ld-dp-em", "n": n, "d": d, "s": d, "N0": N0},
            estimator=dp_em.ld_dp_em(model, N0, "paper"),  # the classic calibration
            levels=tuple(level(e, n, c["eta"], T) for e in (*sorted(c["eps_grid"]), INF)),
            **common,
        ))
        out.append(Setting(
            key=f"gradient-em,n={n},d={d}",
            columns={"method": "gradient-em", "n": n, "d": d, "s": d, "N0": N0},
            estimator=dp_em.gradient_em(model, N0, sample_splitting=False),
            levels=(level(INF, n, c["eta"], INF),),
            **common,
        ))
        if c["gem_curve"]:
            tau = float(np.max(dense_unit_beta(d)) ** 2) + c["sigma"] ** 2
            gem = {**common, "plan": DataPlan(1, n), "hparams_type": dp_gem.DPGEMHyperparams}
            out.append(Setting(
                key=f"dp-gem,n={n},d={d}",
                columns={"method": "dp-gem", "n": n, "d": d, "s": d, "N0": N0},
                estimator=dp_gem.dp_gem(model, N0, calibration="paper"),
                levels=tuple({**level(e, n, 1.0, 0.0), "tau": tau, "zeta": 0.05, "s": 0.0}
                             for e in sorted(c["eps_grid"])),
                **gem,
            ))
    if not c["gem_curve"]:
        return out
    # every row carries every level column: 0 where a method does not read it (tau, zeta, s
    # for Algorithm 4 and gradient EM; truncation for the DP gradient EM). The extra keys do
    # not enter the level ids, so Algorithm 4's draws are unchanged.
    return [dataclasses.replace(st, levels=tuple({"tau": 0.0, "zeta": 0.0, "s": 0.0, **lv}
                                                 for lv in st.levels)) for st in out]


def _curves(c, fixed):
    curves = [Curve(f"Alg 4, eps={e:g}", {"method": "ld-dp-em", "epsilon": e, **fixed},
                    COLORS[i % 6], "-", "o") for i, e in enumerate(sorted(c["eps_grid"]))]
    curves.append(Curve("Alg 4 at eps=inf (split, truncated, no noise)",
                        {"method": "ld-dp-em", "epsilon": INF, **fixed}, marker="s"))
    curves.append(Curve("gradient EM (Balakrishnan; full data)",
                        {"method": "gradient-em", **fixed}, marker="^", role="reference"))
    if c["gem_curve"]:
        curves += [Curve(f"Wang et al. 2020 (DP gradient EM), eps={e:g}",
                         {"method": "dp-gem", "epsilon": e, **fixed}, COLORS[(i + 3) % 6], "-",
                         "v") for i, e in enumerate(sorted(c["eps_grid"]))]
    return curves


def plot(iter_rows, summary, c, path):
    rows = final_rows(iter_rows)
    eps_txt = ", ".join(f"{e:g}" for e in sorted(c["eps_grid"]))
    panels = [
        Panel(f"(a) d={c['d_base']}: varying n", _curves(c, {"d": c["d_base"]}), x="n",
              xlabel="n"),
        Panel(f"(b) n={c['n_base']}: varying d", _curves(c, {"n": c["n_base"]}), x="d",
              xlabel="d"),
    ]
    plot_panels(rows, panels, path, ylabel="mean ||beta_hat - beta*||_2", suptitle=(
        f"LD DP-EM, Gaussian mixture (spec 000 Fig. 2, Alg 4), sigma={c['sigma']:g}, "
        f"eps in {{{eps_txt}}}, delta=1/(2n)"))


EXPERIMENTS = [
    Experiment(
        name="em_fig2",
        title="DP-EM paper, Figure 2: low-dimensional Gaussian mixture (Alg 4), error vs n and d",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        quick_reps=3,
        description="Algorithm 4 (classic Gaussian mechanism, Delta_2 = sqrt(d) 2 eta T / n0) "
        "against its zero-noise twin and full-data gradient EM; d = 10 (a), n = 10,000 (b).",
    )
]
