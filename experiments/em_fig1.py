"""Figure 1 of Zhang & Zhang, high-dimensional DP-EM for the Gaussian mixture (spec 000 §4.1).

Data: ``y_i = z_i beta* + e_i``, ``beta*`` with its first ``s*`` coordinates ``1/sqrt(s*)``,
``sigma = 0.5`` (SNR 2), ``d = 1000``, ``delta = 1/(2n)``, ``eta = 0.5``, 50 repetitions.
Algorithm 3 with honest calibration: ``T = sqrt(log n)``, ``N0 = ceil(log n)`` disjoint batches,
``s_hat = s*``, Laplace scale ``4 eta T N0 sqrt(3 s_hat log(1/delta)) / (n eps)`` (with
``N0/n -> 1/n0``), and a data-independent start ``||beta0 - beta*|| = ||beta*||/8`` on the
support. Panels: (a) n in {4000, 5000, 6000}; (b) s* in {5, 10, 15}; (c) eps in {0.3, 0.5, 0.8};
each against the non-private limit (eps = inf: same splitting and truncation, zero noise);
and (d), our addition, larger n where the private estimator works (spec 000 §7 A6).
"""

from __future__ import annotations

import dataclasses

from dpjax.experiments._em_common import HDConfig, hd_panels, hd_settings
from dpjax.models import GaussianMixture, sparse_unit_beta
from dpjax.plotting import plot_panels
from dpjax.study import Experiment

DEFAULTS = HDConfig()
QUICK = dataclasses.replace(DEFAULTS, large_n=(20000,))


def settings(c):
    return hd_settings(c, GaussianMixture(c["sigma"]), "hd-dp-em", sparse_unit_beta)


def plot(iter_rows, summary, c, path):
    plot_panels(iter_rows, hd_panels(c), path, suptitle=(
        f"HD DP-EM, Gaussian mixture (spec 000 Fig. 1), d={c['d']}, sigma={c['sigma']:g}, "
        "honest calibration"))


EXPERIMENTS = [
    Experiment(
        name="em_fig1",
        title="DP-EM paper, Figure 1: high-dimensional Gaussian mixture (Alg 3), error vs t",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        quick_reps=5,
        description="Panels vary n, s* and epsilon as in the paper, plus a panel at larger n. "
        "Honest calibration (T = sqrt(log n), N0 = ceil(log n)); see experiments/README.md.",
    )
]

