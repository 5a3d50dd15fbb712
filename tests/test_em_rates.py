"""Rates of the low-dimensional DP-EM algorithms in n (spec 000 §9 item 8), on a small grid of
sample sizes run through the sweep engine (common random numbers across levels).

* Non-private regime (epsilon = inf, T = inf): ``||beta_hat - beta*|| ~ n^{-1/2}``.
* Privacy cost: ``||beta_hat(eps, T) - beta_hat(inf, T)|| ~ n^{-1}`` (the Gaussian noise of
  Algs 4, 7, 8 has standard deviation proportional to ``1/n0``). Measured against the zero-noise
  run on the same data, so the statistical error does not blur the privacy term; N0, T and delta
  are held fixed across n so no log factor enters.

The slopes are weighted least-squares fits of log mean error on log n, with delta-method
standard errors from the repetitions; each must match its target within 3 s.e. plus 0.03.
"""

import dataclasses
import math

import numpy as np
import pytest

from dpjax import sweep
from dpjax.algorithms import dp_em
from dpjax.experiments._em_common import InitNearTruth
from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates


@dataclasses.dataclass(frozen=True)
class _RecordBeta:
    def __call__(self, state, truth):
        return {"beta": state.beta}


def _slope(ns, samples):
    """WLS slope of log(mean) on log(n) and its standard error (delta method)."""
    x = np.log(np.asarray(ns, float))
    y = np.array([math.log(s.mean()) for s in samples])
    var = np.array([(s.std(ddof=1) / math.sqrt(s.size) / s.mean()) ** 2 for s in samples])
    X = np.stack([np.ones_like(x), x], 1)
    cov = np.linalg.inv(X.T @ (X / var[:, None]))
    coef = cov @ X.T @ (y / var)
    return float(coef[1]), float(math.sqrt(cov[1, 1]))


def _rates(model, d, ns, eps, T, N0, reps, eta=1.0, delta=1e-5, init=0.1):
    truth = np.full(d, 1 / math.sqrt(d), np.float32)
    stat, cost = [], []
    for n in ns:
        levels = tuple({"epsilon": e, "delta": delta, "eta": eta, "truncation": t}
                       for e, t in ((math.inf, math.inf), (math.inf, T), (eps, T)))
        setting = sweep.Setting(
            key=f"rates-{model.name}-{n}", columns={}, estimator=dp_em.ld_dp_em(model, N0),
            simulate=model.simulate, init=InitNearTruth(init), record=_RecordBeta(),
            truth=truth, plan=sweep.DataPlan(N0, n // N0),
            hparams_type=dp_em.DPEMHyperparams, levels=levels, n=n,
        )
        beta = sweep.run_setting(setting, reps=reps, seed=0, num_devices=1)["beta"][:, :, -1]
        stat.append(np.linalg.norm(beta[:, 0] - truth, axis=-1))
        cost.append(np.linalg.norm(beta[:, 2] - beta[:, 1], axis=-1))
    return _slope(ns, stat), _slope(ns, cost)


def _check(slope_se, target):
    slope, se = slope_se
    assert abs(slope - target) < 3 * se + 0.03, (slope, se, target)
    assert se < 0.05  # enough repetitions to have power against a wrong rate


def test_low_dim_gmm_rates_in_n():
    stat, cost = _rates(GaussianMixture(0.5), 5, [1000, 4000, 16000], eps=1.0, T=3.0, N0=5,
                        reps=40)
    _check(stat, -0.5)
    _check(cost, -1.0)


@pytest.mark.slow
@pytest.mark.parametrize("model", [MixtureOfRegressions(0.5),
                                   RegressionMissingCovariates(1.0, 0.1)],
                         ids=["mor", "rmc"])
def test_low_dim_mor_and_rmc_rates_in_n(model):
    init = 0.03 if model.name == "mor" else 0.1  # R/2 = ||beta*||/64 for MoR (spec 000 A5)
    stat, cost = _rates(model, 5, [2000, 8000, 32000], eps=4.0, T=1.5, N0=6, reps=40,
                        init=init)
    _check(stat, -0.5)
    _check(cost, -1.0)
