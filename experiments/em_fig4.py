"""Figure 4 of Zhang & Zhang, high-dimensional DP-EM for the mixture of regressions
(Algorithm 5; spec 000 §4.2, Appendix A.3).

Data: ``y_i = z_i <x_i, beta*> + e_i`` with ``x_i ~ N(0, I_d)``, ``P(z_i = +-1) = 1/2``,
``e_i ~ N(0, sigma^2)``, ``sigma = 0.5``, ``beta*`` with its first ``s*`` coordinates
``1/sqrt(s*)`` (unit norm), ``d = 1000``, ``delta = 1/(2n)``, ``eta = 0.5``, 50 repetitions.
Stated panels: (a) n in {4000, 5000, 6000} at s* = 10, eps = 0.6; (b) s* in {5, 10, 15} at
n = 5000, eps = 0.6; (c) eps in {0.4, 0.6, 0.8} at n = 5000, s* = 10.

Unstated, chosen here (spec 000 §7 A5): ``T = sqrt(log n)``, ``N0 = ceil(log n)`` disjoint
batches, ``s_hat = s*``, ``beta0 = beta* + (||beta*||/64) u`` with ``u`` a random unit direction
on the support (``R/2`` with ``R = ||beta*||/32``, the radius of Lemma A.1); the corrected model
(exact posterior, ``(2w - 1)`` gradient). NoisyHT Laplace scale
``8 eta T^2 sqrt(3 s_hat log(1/delta)) / (n0 eps)`` with ``n0 = floor(n/N0)``. Each private curve
is drawn with its non-private twin (eps = inf: same splitting and truncation, zero noise), and
panel (d), our addition, shows larger n where the private estimator starts to work (A6).
"""

from __future__ import annotations

import dataclasses

from dpjax.experiments._em_common import HDConfig, hd_panels, hd_settings
from dpjax.models import MixtureOfRegressions, sparse_unit_beta
from dpjax.plotting import plot_panels
from dpjax.study import Experiment

DEFAULTS = HDConfig(
    eps_grid=(0.4, 0.6, 0.8),
    n_base=5000,
    eps_base=0.6,
    large_n=(20000, 50000, 100000),
    init_radius=1.0 / 64,
)
# A reduced run (3 compiled shapes): every panel still has two values.
QUICK = dataclasses.replace(DEFAULTS, d=100, n_grid=(4000, 6000), s_grid=(5, 10),
                            eps_grid=(0.4, 0.8), n_base=6000, large_n=())


def settings(c):
    return hd_settings(c, MixtureOfRegressions(c["sigma"]), "hd-dp-em", sparse_unit_beta)


def plot(iter_rows, summary, c, path):
    plot_panels(iter_rows, hd_panels(c), path, suptitle=(
        f"HD DP-EM, mixture of regressions (spec 000 Fig. 4, Alg 5), d={c['d']}, "
        f"sigma={c['sigma']:g}, honest calibration"))


EXPERIMENTS = [
    Experiment(
        name="em_fig4",
        title="DP-EM paper, Figure 4: high-dimensional mixture of regressions (Alg 5), error vs t",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        quick_reps=3,
        description="Panels vary n, s* and epsilon as in the paper, plus a panel at larger n. "
        "Honest calibration (T = sqrt(log n), N0 = ceil(log n), 4T^2/n0 sensitivity).",
    )
]
