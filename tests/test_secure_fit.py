"""The floating-point-safe path for real releases (issue 17, item 6): ``secure=True`` on fits.

Inside :func:`dpjax.mechanisms.secure_noise` the Laplace and Gaussian mechanisms release
``grid * (integer statistic + exact integer noise)``; a fit with ``secure=True`` runs its steps
eagerly under it and composes its ledger from the discrete events.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpjax
from dpjax import mechanisms as M
from dpjax.algorithms import dp_em, dp_glm, dp_iv
from dpjax.models import iv
from dpjax.models.glm import GLM, sparse_sphere_beta
from dpjax.models.gmm import GaussianMixture


def _stat(value, sensitivity, norm="l2"):
    return M.BoundedStatistic(jnp.asarray(value, jnp.float32), sensitivity, norm)


@pytest.fixture(scope="module")
def iv_data():
    model = iv.LinearIV(p=2, q=3, r=2)
    prm = model.draw_parameters(jax.random.key(0))
    return model.simulate(jax.random.key(1), 600, model.pack(prm))


# ---- the mechanisms --------------------------------------------------------------------------


def test_secure_releases_lie_on_the_grid_and_carry_discrete_events(key):
    grid = 2.0**-6
    x = np.random.default_rng(0).normal(size=50).astype(np.float32)
    k1, k2, k3 = jax.random.split(key, 3)
    with M.secure_noise(grid):
        g, ev_g = M.gaussian_mechanism_zcdp(k1, _stat(x, 1.0), 0.5)
        c, ev_c = M.gaussian_mechanism(k2, _stat(x, 1.0), 0.5, 1e-5)
        lap, ev_l = M.laplace_mechanism(k3, _stat(x, 1.0, "l1"), 0.5)
    for out in (g, c, lap):
        units = np.asarray(out, np.float64) / grid
        np.testing.assert_array_equal(units, np.round(units))  # exact multiples of the grid
    assert (ev_g.kind, ev_c.kind, ev_l.kind) == ("discrete-gaussian",) * 2 + ("discrete-laplace",)
    # the budget carries over (in grid units, for the rounded statistic's sensitivity)
    rho = 0.5 * (float(ev_g.true_sensitivity) / float(ev_g.scale)) ** 2
    assert rho == pytest.approx(0.5, rel=1e-5) and rho <= 0.5
    eps = float(ev_l.true_sensitivity) / float(ev_l.scale)
    assert eps == pytest.approx(0.5, rel=1e-5) and eps <= 0.5


@pytest.mark.parametrize("factor, ok", [(1.0, True), (2 / 3, False), (1.5, False)])
def test_secure_gaussian_noise_has_the_calibrated_scale(key, factor, ok):
    """Noise-scale test with power: the spread of a secure zCDP release of a zero vector matches
    sigma = Delta_Z * grid / sqrt(2 rho) and not 2/3 or 3/2 of it."""
    d, rho, grid = 20000, 0.5, 2.0**-4
    with M.secure_noise(grid):
        out, ev = M.gaussian_mechanism_zcdp(key, _stat(np.zeros(d), 1.0), rho)
    sigma = float(ev.scale) * grid  # the event's scale is in grid units
    delta_z = math.sqrt(math.floor((1.0 / grid + math.sqrt(d)) ** 2))
    assert float(ev.sensitivity) == pytest.approx(delta_z, rel=1e-6)
    assert sigma == pytest.approx(delta_z * grid / math.sqrt(2 * rho), rel=1e-5)
    sd = float(np.std(np.asarray(out, np.float64)))
    assert (abs(sd / (factor * sigma) - 1) < 0.03) is ok


def test_secure_noise_refuses_what_it_cannot_make_safe(key):
    stat = _stat(np.zeros(4), 1.0, "linf")
    with M.secure_noise():
        with pytest.raises(ValueError, match="peeling .* has no floating-point-safe path"):
            M.noisy_hard_threshold(key, stat, 1, 0.5, 1e-5)
        with pytest.raises(ValueError, match="no floating-point-safe path"):
            M.gaussian_noise(key, (3,), 1.0)
        with pytest.raises(ValueError, match="needs concrete values"):
            # a traced sensitivity (e.g. from swept hyperparameters) cannot be made exact
            jax.jit(lambda k, sens: M.gaussian_mechanism_zcdp(
                k, _stat(np.zeros(3), sens), 0.5))(key, 1.0)
    with pytest.raises(ValueError, match="power of two"):
        with M.secure_noise(0.3):
            pass
    # outside the block the fast path is back
    assert M.gaussian_mechanism_zcdp(key, _stat(np.zeros(3), 1.0), 0.5)[1].kind == \
        "gaussian-zcdp"


# ---- the fits --------------------------------------------------------------------------------


def test_secure_iv_fit_delivers_the_requested_rho_from_discrete_events(iv_data):
    kw = dict(rho1=0.5, rho2=0.5, eta=0.5, alpha=0.03, num_iterations=4)
    fast = dp_iv.fit_dp_2s_gd(3, iv_data, **kw)
    safe = dp_iv.fit_dp_2s_gd(3, iv_data, secure=True, **kw)
    assert {r.mechanism for r in safe.ledger.releases} == {"discrete-gaussian"}
    assert safe.ledger.composition == "zcdp"
    # same budget (the integer calibration rounds the noise up, never down)
    assert safe.ledger.guarantee.rho <= fast.ledger.guarantee.rho
    assert safe.ledger.guarantee.rho == pytest.approx(fast.ledger.guarantee.rho, rel=1e-4)
    assert np.isfinite(safe.estimate).all()
    # deterministic under a fixed key; a different key draws different noise
    again = dp_iv.fit_dp_2s_gd(3, iv_data, secure=True, **kw)
    np.testing.assert_array_equal(safe.estimate, again.estimate)
    other = dp_iv.fit_dp_2s_gd(4, iv_data, secure=True, **kw)
    assert not np.array_equal(safe.estimate, other.estimate)


def test_secure_fit_at_rho_inf_only_rounds_to_the_grid(iv_data):
    """The epsilon = inf limit: no noise, so the secure path equals the fast one up to the
    rounding of each release to the grid (and says it is not private)."""
    kw = dict(rho1=math.inf, rho2=math.inf, eta=0.5, alpha=0.03, num_iterations=4)
    fast = dp_iv.fit_dp_2s_gd(3, iv_data, **kw)
    safe = dp_iv.fit_dp_2s_gd(3, iv_data, secure=True, **kw)
    np.testing.assert_allclose(safe.estimate, fast.estimate, atol=1e-3)
    assert not np.array_equal(safe.estimate, fast.estimate)  # the grid rounding is there
    assert not safe.ledger.is_private


def test_secure_glm_and_ld_em_fits_are_accounted_in_zcdp():
    model = GLM("logistic")
    beta = sparse_sphere_beta(jax.random.key(2), 4, 4)
    data = model.simulate(jax.random.key(3), 1000, jnp.asarray(beta))
    res = dp_glm.fit_dp_glm(1, data, model, epsilon=0.8, num_iterations=3, secure=True)
    assert res.ledger.composition == "zcdp"
    assert {r.mechanism for r in res.ledger.releases} == {"discrete-gaussian"}
    # the printed B is twice the true sensitivity: the ledger reads the true one off the event
    assert all(r.sensitivity_ratio < 0.55 for r in res.ledger.releases)
    assert res.ledger.approx_dp.epsilon < 0.8

    gmm = GaussianMixture(0.5)
    d3 = gmm.simulate(jax.random.key(4), 2000, jnp.full(3, 0.6))
    em = dp_em.fit_ld_dp_em(2, d3, gmm, beta0=np.full(3, 0.3), epsilon=0.5, secure=True)
    assert em.ledger.composition == "parallel"  # disjoint batches: the largest rho
    # secure=True keeps the paper's calibration by default: compare with the same on the fast
    # path (whose default, the analytic calibration, spends the whole request)
    fast = dp_em.fit_ld_dp_em(2, d3, gmm, beta0=np.full(3, 0.3), epsilon=0.5,
                              calibration="paper")
    assert em.ledger.approx_dp.delta == pytest.approx(fast.ledger.approx_dp.delta)
    # the discrete noise is converted from zCDP (CKS), the fast path read off the exact curve
    # of its Gaussian noise: both deliver the request, the exact curve the tighter reading
    assert fast.ledger.approx_dp.epsilon <= em.ledger.approx_dp.epsilon <= 0.5


def test_secure_fit_of_an_estimator_with_peeling_raises_before_returning():
    gmm = GaussianMixture(0.5)
    d3 = gmm.simulate(jax.random.key(4), 400, jnp.full(4, 0.6))
    with pytest.raises(ValueError, match="peeling"):
        dp_em.fit_hd_dp_em(2, d3, gmm, s_hat=2, beta0=np.zeros(4), epsilon=0.5, secure=True)


def test_dpjax_fit_is_the_public_entry_point():
    assert dpjax.fit is dpjax.base.fit and dpjax.FitResult is dpjax.base.FitResult
