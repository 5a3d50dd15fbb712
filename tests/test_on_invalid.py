"""The policy for non-finite and out-of-range records on real-data fits (issue 17, item 2).

``on_invalid="raise"`` (default) refuses a data set with a NaN or infinite entry -- right for a
simulation, where it is a bug. On sensitive data that error would itself be a release (whether
the data hold a bad record; the count of bad entries releases more), so ``on_invalid="clip"``
checks shapes only: non-finite entries are mapped to bounded values and everything is clipped
to the declared bounds inside the estimator's statistic (the adversarial battery of
``tests/test_adversarial.py`` proves the bound for every float record, NaN and +-inf included).
Every private fit: no error, a finite estimate and the same ledger whatever the data hold.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.algorithms import dp_em, dp_glm, dp_iv
from dpjax.models import (
    GLM,
    GaussianMixture,
    MixtureOfRegressions,
    RegressionMissingCovariates,
    sparse_unit_beta,
)
from dpjax.models.iv import LinearIV

BAD_VALUES = [np.nan, np.inf, -np.inf, 1e30, -3.4e38]


def _em_fits():
    beta = sparse_unit_beta(6, 2)
    cases = []
    for model in (GaussianMixture(0.5), MixtureOfRegressions(0.5),
                  RegressionMissingCovariates(1.0, 0.2)):
        data = model.simulate(jax.random.key(0), 300, jnp.asarray(beta))

        def fit(key, d, on_invalid, model=model):
            return dp_em.fit_hd_dp_em(key, d, model, s_hat=2, beta0=beta * 0.9, epsilon=0.5,
                                      truncation=2.0, num_iterations=3, on_invalid=on_invalid)
        cases.append((model.name, data, fit))
    return cases


def _glm_fit():
    model = GLM("logistic")
    data = model.simulate(jax.random.key(1), 300, jnp.asarray(sparse_unit_beta(5, 2)))

    def fit(key, d, on_invalid):
        return dp_glm.fit_dp_glm(key, d, model, epsilon=0.5, num_iterations=3,
                                 on_invalid=on_invalid)
    return "glm", data, fit


def _iv_fit():
    model = LinearIV(2, 3, 2)
    data = model.simulate(jax.random.key(2), 300, model.pack(model.draw_parameters(
        jax.random.key(3))))

    def fit(key, d, on_invalid):
        return dp_iv.fit_dp_2s_gd(key, d, rho1=0.5, rho2=0.5, eta=0.05, alpha=0.05,
                                  num_iterations=3, gamma1=2.0, gamma2=2.0,
                                  on_invalid=on_invalid)
    return "iv", data, fit


CASES = _em_fits() + [_glm_fit(), _iv_fit()]


def _poison(data, value):
    """Record 0's first entry of every float leaf set to ``value`` (the mask of RMC left)."""
    out = []
    for name, leaf in zip(data._fields, data):
        arr = np.asarray(leaf).copy()
        if name != "z":
            arr.reshape(arr.shape[0], -1)[0, 0] = value
        out.append(arr)
    return type(data)(*out)


@pytest.mark.parametrize("name,data,fit", CASES, ids=[c[0] for c in CASES])
def test_raise_refuses_and_clip_releases_for_every_bad_value(name, data, fit):
    for value in BAD_VALUES:
        bad = _poison(data, value)
        if not np.isfinite(value):
            with pytest.raises(ValueError, match="finite"):
                fit(jax.random.key(5), bad, "raise")
        res = fit(jax.random.key(5), bad, "clip")  # never raises
        assert np.isfinite(res.estimate).all()
        assert res.ledger.is_private
    honest = fit(jax.random.key(5), data, "clip").ledger.approx_dp
    poisoned = fit(jax.random.key(5), _poison(data, np.nan), "clip").ledger.approx_dp
    assert poisoned.epsilon == pytest.approx(honest.epsilon, rel=1e-6)
    assert poisoned.delta == honest.delta


def test_the_policy_is_validated():
    name, data, fit = _glm_fit()
    with pytest.raises(ValueError, match="on_invalid must be one of"):
        fit(jax.random.key(0), data, "ignore")
