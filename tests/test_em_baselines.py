"""Non-private baselines (spec 000 §6): gradient EM (Balakrishnan et al. 2017) and truncated
top-s EM (Wang et al. 2015), each with and without sample splitting, for the three models,
against plain numpy EM written here from the papers; and the epsilon = inf, T = inf limits of
the private algorithms equal the sample-split baselines."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax.algorithms import dp_em
from dpjax.models import (
    GaussianMixture,
    MixtureOfRegressions,
    RegressionMissingCovariates,
    sparse_unit_beta,
)

SIGMA = 0.5


def _np_grad_gmm(data, beta):
    (y,) = data
    w = 1.0 / (1.0 + np.exp(-2.0 * y @ beta / SIGMA**2))  # P(z = 1 | y)
    return ((2 * w - 1)[:, None] * y).mean(0) - beta


def _np_grad_mor(data, beta):
    x, y = data
    u = x @ beta
    w = 1.0 / (1.0 + np.exp(-2.0 * y * u / SIGMA**2))  # P(z = 1 | x, y)
    return (((2 * w - 1) * y)[:, None] * x).mean(0) - (u[:, None] * x).mean(0)


def _np_grad_rmc(data, beta):
    x, z, y = data
    r = 1.0 - z
    xo = z * x
    c = (y - xo @ beta) / (SIGMA**2 + (r * beta**2).sum(1))
    m = xo + c[:, None] * r * beta
    nn = r * m
    kb = r * beta + m * (m @ beta)[:, None] - nn * (nn @ beta)[:, None]
    return (y[:, None] * m - kb).mean(0)


CASES = {
    "gmm": (GaussianMixture(SIGMA), _np_grad_gmm),
    "mor": (MixtureOfRegressions(SIGMA), _np_grad_mor),
    "rmc": (RegressionMissingCovariates(SIGMA, 0.2), _np_grad_rmc),
}


def _numpy_em(grad, data, beta0, eta, N0, s, split):
    n = data[0].shape[0]
    n0 = n // N0
    beta = beta0.astype(np.float64)
    path = []
    for t in range(N0):
        batch = tuple(a[t * n0:(t + 1) * n0] for a in data) if split else data
        beta = beta + eta * grad(batch, beta)
        if s is not None:
            keep = np.argsort(-np.abs(beta), kind="stable")[:s]
            out = np.zeros_like(beta)
            out[keep] = beta[keep]
            beta = out
        path.append(beta)
    return np.array(path)


def _problem(model, n=800, d=10, s=3):
    beta = sparse_unit_beta(d, s)
    data = model.simulate(jax.random.key(7), n, jnp.asarray(beta))
    beta0 = beta.copy()
    beta0[:s] *= 0.9
    return beta, data, beta0


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("split", [False, True])
def test_truncated_em_matches_numpy(name, split):
    model, grad = CASES[name]
    beta, data, beta0 = _problem(model)
    res = dp_em.fit_truncated_em(data, model, s_hat=4, beta0=beta0, num_iterations=5,
                                 sample_splitting=split)
    np_data = tuple(np.asarray(a, np.float64) for a in data)
    ref = _numpy_em(grad, np_data, beta0, 0.5, 5, 4, split)
    np.testing.assert_allclose(res.trace, ref, rtol=5e-5, atol=5e-6)
    assert ((res.trace != 0).sum(1) == 4).all()
    assert not res.ledger.is_private and res.ledger.variant == "non-private"


@pytest.mark.parametrize("name", ["gmm", "mor"])
@pytest.mark.parametrize("split", [False, True])
def test_gradient_em_matches_numpy(name, split):
    model, grad = CASES[name]
    beta, data, beta0 = _problem(model, d=4, s=4)
    res = dp_em.fit_gradient_em(data, model, beta0=beta0, num_iterations=4, eta=0.7,
                                sample_splitting=split)
    np_data = tuple(np.asarray(a, np.float64) for a in data)
    ref = _numpy_em(grad, np_data, beta0, 0.7, 4, None, split)
    np.testing.assert_allclose(res.trace, ref, rtol=5e-5, atol=5e-6)
    (rel,) = res.ledger.releases
    assert rel.mechanism == "none"
    assert ("disjoint" in rel.data) == split


@pytest.mark.parametrize("name", sorted(CASES))
def test_private_algorithms_at_eps_inf_and_no_truncation_equal_the_split_baselines(name, key):
    model, _ = CASES[name]
    beta, data, beta0 = _problem(model)
    hp = jax.tree_util.tree_map(jnp.asarray, dp_em.default_hparams(800, np.inf,
                                                                  truncation=np.inf))
    state = dp_em.DPEMState(jnp.asarray(beta0))
    hd = base.run(dp_em.hd_dp_em(model, 4, 5), key, data, state, hp)[1].beta
    tw = dp_em.fit_truncated_em(data, model, s_hat=4, beta0=beta0, num_iterations=5,
                                sample_splitting=True).trace
    np.testing.assert_allclose(np.asarray(hd), tw, rtol=1e-6, atol=1e-7)


def test_baseline_input_validation():
    model, _ = CASES["gmm"]
    _, data, beta0 = _problem(model)
    with pytest.raises(ValueError, match=r"s_hat must be an integer in \[1, 10\]"):
        dp_em.fit_truncated_em(data, model, s_hat=11, beta0=beta0, num_iterations=3)
    with pytest.raises(ValueError, match="num_iterations"):
        dp_em.fit_gradient_em(data, model, beta0=beta0, num_iterations=0)
    with pytest.raises(ValueError, match="eta must lie in"):
        dp_em.fit_gradient_em(data, model, beta0=beta0, num_iterations=3, eta=-1.0)
    # Without sample splitting the number of iterations is not limited by n.
    dp_em.fit_gradient_em(data, model, beta0=beta0, num_iterations=900)
