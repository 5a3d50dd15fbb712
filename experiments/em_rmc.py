"""Regression with missing covariates: a study of our design (the paper reports no experiment
for Algorithms 6 and 8; spec 000 §4.4).

Model (spec 000 §1.4): ``y_i = <x_i, beta*> + e_i``, ``x_i ~ N(0, I_d)``, ``e_i ~ N(0, sigma^2)``,
each covariate missing independently with probability ``p`` (MCAR); the record is
``(z_i * x_i, z_i, y_i)``. Settings chosen here:

* ``sigma = 1`` and ``||beta*|| = 1`` (SNR 1: Lemma A.2 needs an upper bound on the SNR; with
  sigma = 0.5 its condition on p would allow only p < 0.025);
* high-dimensional (Algorithm 6, NoisyHT): ``d = 1000``, ``beta*`` with its first ``s* = 5``
  coordinates ``1/sqrt(5)``, ``s_hat = s*``; panel (a) ``n in {10^4, 3 10^4, 10^5}`` at
  ``p = 0.1``; panel (b) ``p in {0, 0.1, 0.2}`` at ``n = 10^5``;
* low-dimensional (Algorithm 8, classic Gaussian): ``d = 10``, every coordinate of ``beta*``
  ``1/sqrt(10)``; panel (c) ``n in {5k, 20k, 50k, 100k, 200k}`` at ``p = 0.1``; panel (d)
  ``p in {0, 0.1, 0.2, 0.3}`` at ``n = 100k``;
* ``epsilon in {0.5, 1}`` and the zero-noise twin (epsilon = inf: same splitting and truncation);
  in low dimension also full-data gradient EM (Balakrishnan et al. 2017, no truncation);
* ``delta = 1/(2n)``, ``eta = 0.5``, ``T = sqrt(log n)``, ``N0 = ceil(log n)`` disjoint
  batches, ``beta0 = beta* + (||beta*||/8) u`` with ``u`` a random unit direction on the
  support (data-independent), 50 repetitions.

Calibration: the corrected sensitivity ``eta (6 T^2 + ||beta^t||_inf) / n0`` (spec 000 §7 A4),
recomputed at every iteration from the public iterate; Laplace scale ``lambda_t 2 sqrt(3 s_hat
log(1/delta)) / epsilon`` (Alg 6) or Gaussian ``sigma_t = sqrt(d) lambda_t sqrt(2
log(1.25/delta)) / epsilon`` (Alg 8).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpjax.algorithms import dp_em
from dpjax.config import Config, param
from dpjax.experiments._common import COLORS, INF, final_rows
from dpjax.experiments._em_common import BetaError, InitNearTruth, level
from dpjax.models import RegressionMissingCovariates, sparse_unit_beta
from dpjax.plotting import Curve, Panel, plot_panels
from dpjax.study import Experiment
from dpjax.sweep import DataPlan, Setting


@dataclasses.dataclass(frozen=True)
class RMCConfig(Config):
    sigma: float = param(1.0, gt=0, doc="noise standard deviation")
    eta: float = param(0.5, gt=0, doc="step size")
    eps_grid: tuple[float, ...] = param((0.5, 1.0), gt=0, doc="the epsilons of every panel")
    truncation_const: float = param(1.0, gt=0,
                                    doc="truncation level T = truncation_const sqrt(log n)")
    init_radius: float = param(0.125, ge=0,
                               doc="start at distance init_radius ||beta*|| from beta*")
    p_base: float = param(0.1, ge=0, lt=1,
                          doc="the missing probability of panels (a) and (c)")
    hd_d: int = param(1000, ge=1, doc="high dimension (Alg 6): the dimension")
    hd_s: int = param(5, ge=1, le="hd_d", doc="high dimension: the sparsity s*")
    hd_n_grid: tuple[int, ...] = param((10000, 30000, 100000), ge=20,
                                       doc="panel (a): the sample sizes")
    hd_p_grid: tuple[float, ...] = param((0.0, 0.1, 0.2), ge=0, lt=1,
                                         doc="panel (b): the missing probabilities")
    hd_n_base: int = param(100000, ge=20, doc="the sample size of panel (b)")
    ld_d: int = param(10, ge=1, doc="low dimension (Alg 8): the dimension")
    ld_n_grid: tuple[int, ...] = param((5000, 20000, 50000, 100000, 200000), ge=20,
                                       doc="panel (c): the sample sizes")
    ld_p_grid: tuple[float, ...] = param((0.0, 0.1, 0.2, 0.3), ge=0, lt=1,
                                         doc="panel (d): the missing probabilities")
    ld_n_base: int = param(100000, ge=20, doc="the sample size of panel (d)")


DEFAULTS = RMCConfig()
QUICK = dataclasses.replace(DEFAULTS, hd_d=100, hd_n_grid=(10000, 30000), hd_p_grid=(0.1,),
                            hd_n_base=30000, ld_n_grid=(50000,), ld_p_grid=(0.1,),
                            ld_n_base=50000)


def _setting(c, method, n, d, s, p, truth):
    model = RegressionMissingCovariates(c["sigma"], p)
    N0 = dp_em.default_num_iterations(n)
    T = c["truncation_const"] * dp_em.default_truncation(n)
    if method == "hd-dp-em":
        est = dp_em.hd_dp_em(model, s, N0, "paper")
    elif method == "ld-dp-em":
        est = dp_em.ld_dp_em(model, N0, "paper")
    else:
        est = dp_em.gradient_em(model, N0, sample_splitting=False)
    if method == "gradient-em":
        levels = (level(INF, n, c["eta"], INF),)
    else:
        levels = tuple(level(e, n, c["eta"], T) for e in (*sorted(c["eps_grid"]), INF))
    return Setting(
        key=f"{method},n={n},d={d},p={p:g}",
        columns={"method": method, "n": n, "d": d, "s": s, "p": p, "N0": N0},
        estimator=est, simulate=model.simulate, init=InitNearTruth(c["init_radius"]),
        record=BetaError(), truth=truth, plan=DataPlan(N0, n // N0),
        hparams_type=dp_em.DPEMHyperparams, levels=levels, n=n,
    )


def settings(c):
    out = []
    hd = sorted({(n, c["p_base"]) for n in c["hd_n_grid"]}
                | {(c["hd_n_base"], p) for p in c["hd_p_grid"]})
    for n, p in hd:
        out.append(_setting(c, "hd-dp-em", n, c["hd_d"], c["hd_s"], p,
                            sparse_unit_beta(c["hd_d"], c["hd_s"])))
    ld = sorted({(n, c["p_base"]) for n in c["ld_n_grid"]}
                | {(c["ld_n_base"], p) for p in c["ld_p_grid"]})
    truth = np.full(c["ld_d"], 1.0 / math.sqrt(c["ld_d"]), np.float32)
    for n, p in ld:
        for method in ("ld-dp-em", "gradient-em"):
            out.append(_setting(c, method, n, c["ld_d"], c["ld_d"], p, truth))
    return out


def _curves(c, method, fixed, baseline):
    curves = [Curve(f"eps={e:g}", {"method": method, "epsilon": e, **fixed}, COLORS[i % 6],
                    "-", "o") for i, e in enumerate(sorted(c["eps_grid"]))]
    curves.append(Curve("eps=inf (split, truncated, no noise)",
                        {"method": method, "epsilon": INF, **fixed}, marker="s"))
    if baseline:
        curves.append(Curve("gradient EM (full data)", {"method": "gradient-em", **fixed},
                            marker="^", role="reference"))
    return curves


def plot(iter_rows, summary, c, path):
    rows = final_rows(iter_rows)
    pb = c["p_base"]
    panels = [
        Panel(f"(a) HD Alg 6, d={c['hd_d']}, s*={c['hd_s']}, p={pb:g}: varying n",
              _curves(c, "hd-dp-em", {"p": pb}, False), x="n", xlabel="n", logx=True),
        Panel(f"(b) HD Alg 6, n={c['hd_n_base']}: varying p",
              _curves(c, "hd-dp-em", {"n": c["hd_n_base"]}, False), x="p",
              xlabel="missing probability p"),
        Panel(f"(c) LD Alg 8, d={c['ld_d']}, p={pb:g}: varying n",
              _curves(c, "ld-dp-em", {"p": pb}, True), x="n", xlabel="n", logx=True),
        Panel(f"(d) LD Alg 8, n={c['ld_n_base']}: varying p",
              _curves(c, "ld-dp-em", {"n": c["ld_n_base"]}, True), x="p",
              xlabel="missing probability p"),
    ]
    # gradient EM rows carry method "gradient-em"; panels (c), (d) pick them by n/p only.
    plot_panels(rows, panels, path, ylabel="mean ||beta_hat - beta*||_2", ncols=2, suptitle=(
        f"DP-EM, regression with missing covariates (Algs 6, 8), sigma={c['sigma']:g}\n"
        "sensitivity (6T^2+||beta^t||_inf)/n0 (A4)"))


EXPERIMENTS = [
    Experiment(
        name="em_rmc",
        title="DP-EM, regression with missing covariates (Algs 6, 8): a study of our design",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        quick_reps=3,
        description="High-dimensional (d = 1000, s* = 5) and low-dimensional (d = 10) panels "
        "against n and the missing probability p; the paper reports no such experiment.",
    )
]
