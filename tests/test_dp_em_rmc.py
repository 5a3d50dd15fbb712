"""DP-EM for regression with missing covariates (spec 000 Algs 6 and 8): the corrected
sensitivity (6T^2 + ||beta^t||_inf)/n0 on adversarial neighbours and the printed 6T^2/n0
failing (A4), state-dependent noise scales with power, the epsilon = inf limit against an
independent numpy EM, the population fixed point, ledgers (corrected: DP; printed: not DP, with
an ex-post check) and input validation."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax.algorithms import dp_em
from dpjax.models import RegressionMissingCovariates, RMCData, sparse_unit_beta
from tests.helpers import assert_scale_with_power, compile_count, probe_ledger, same_key

SIGMA = 1.0
MODEL = RegressionMissingCovariates(SIGMA, 0.2)
LITERAL = RegressionMissingCovariates(SIGMA, 0.2, "paper")


def _problem(n=1200, d=30, s=3, seed=0, model=MODEL):
    beta = sparse_unit_beta(d, s)
    data = model.simulate(jax.random.key(seed), n, jnp.asarray(beta))
    rng = np.random.default_rng(seed)
    u = rng.normal(size=s)
    beta0 = beta.copy()
    beta0[:s] += u / np.linalg.norm(u) / 10  # data-independent
    return beta, data, beta0


def _replace(data, i, x, z, y):
    xs, zs, ys = (np.asarray(a).copy() for a in data)
    xs[i], zs[i], ys[i] = x * z, z, y
    return RMCData(jnp.asarray(xs), jnp.asarray(zs), jnp.asarray(ys))


# ---------------------------------------------------------------------------------------------
# Sensitivity on adversarial neighbours (spec 000 §9 item 1, §7 A4)
# ---------------------------------------------------------------------------------------------


def _flipped_mask_pair(d, j, T):
    """Record a: x_j missing, everything else 0 (so m = 0 and the term is -beta_j);
    record b: fully observed, x_j = +big, <x, beta> = +big, y = -big (term -2T^2)."""
    xa, za = np.zeros(d, np.float32), np.ones(d, np.float32)
    za[j] = 0.0
    xb, zb = np.zeros(d, np.float32), np.ones(d, np.float32)
    xb[j], xb[0] = 1e4, 1e5  # <x, beta> = 0.5e5 - 1.6e4 > 0 for beta_t below
    return (xa, za, 0.0), (xb, zb, -1e4)


@pytest.mark.parametrize("T", [0.5, 1.5])
def test_corrected_sensitivity_holds_and_printed_bound_fails_on_a_flipped_mask(T):
    n0, d, j = 30, 6, 1
    _, data, _ = _problem(n=n0, d=d, s=3, seed=1)
    beta_t = np.array([0.5, -1.6, 0.3, 0.0, 0.0, 0.0], np.float32)  # a public iterate
    bt = jnp.asarray(beta_t)
    a, b = _flipped_mask_pair(d, j, T)
    da, db = _replace(data, 4, *a), _replace(data, 4, *b)
    sa, sb = MODEL.truncated_gradient(bt, da, T), MODEL.truncated_gradient(bt, db, T)
    gap = float(jnp.max(jnp.abs(sa.value - sb.value)))
    corrected = (6 * T**2 + 1.6) / n0
    assert float(sa.sensitivity) == pytest.approx(corrected, rel=1e-6)
    # The construction attains 2T^2 + |beta_j| exactly ...
    assert gap == pytest.approx((2 * T**2 + 1.6) / n0, rel=1e-4)
    assert gap <= corrected * (1 + 1e-6)
    # ... which beats the printed 6T^2/n0 iff |beta_j| > 4T^2 (1.6 > 1 at T = 0.5; not at 1.5).
    printed = float(LITERAL.truncated_gradient(bt, da, T).sensitivity)
    assert printed == pytest.approx(6 * T**2 / n0, rel=1e-6)
    assert (gap > printed * 1.05) == (T == 0.5)
    assert RegressionMissingCovariates.literal_ratio(beta_t, T) == pytest.approx(
        max(5 * T**2, 2 * T**2 + 1.6) / (6 * T**2))


def test_random_adversarial_records_never_exceed_the_sharp_bound():
    """Heavy-tailed records with random masks: the range of every coordinate of the per-record
    term stays within max(5T^2, 2T^2 + ||beta||_inf) <= 6T^2 + ||beta||_inf, and comes close."""
    T, d = 0.6, 4
    beta_t = np.array([1.5, -0.4, 0.2, 0.0], np.float32)
    rng = np.random.default_rng(0)
    N = 60000
    scale = 10 ** rng.uniform(-3, 4, size=(N, 1))
    x = (rng.standard_cauchy((N, d)) * scale).astype(np.float32)
    z = (rng.random((N, d)) < 0.5).astype(np.float32)
    y = (rng.standard_cauchy(N) * 10 ** rng.uniform(-3, 4, size=N)).astype(np.float32)
    one = jax.vmap(lambda xi, zi, yi: MODEL.truncated_gradient(
        jnp.asarray(beta_t), RMCData(xi[None] * zi[None], zi[None], yi[None]), T).value)
    terms = np.asarray(one(jnp.asarray(x), jnp.asarray(z), jnp.asarray(y))) + beta_t
    width = (terms.max(0) - terms.min(0)).max()
    sharp = max(5 * T**2, 2 * T**2 + 1.5)
    assert width <= sharp * (1 + 1e-5)
    assert width >= 0.95 * sharp
    assert width > 6 * T**2  # the printed bound is exceeded (1.5 > 4 T^2 = 1.44)


# ---------------------------------------------------------------------------------------------
# State-dependent noise scales with power
# ---------------------------------------------------------------------------------------------


def _one_step_draws(estimator, hp, beta_t, batch, n_draws, key):
    state = estimator.init(beta_t)
    keys = jax.random.split(key, n_draws)
    return jax.vmap(lambda k: estimator.step(k, state, batch, hp))(keys)


def test_hd_step_noise_scale_with_power(key):
    n0, d, s, T, eta, eps, delta = 60, 20, 4, 1.2, 0.5, 0.7, 1e-3
    beta, data, _ = _problem(n=n0, d=d, s=3)
    bt = jnp.asarray(beta * 1.3)  # ||beta^t||_inf = 1.3/sqrt(3) enters lambda_t
    est = dp_em.hd_dp_em(MODEL, s, 1, "paper")
    hp = dp_em.DPEMHyperparams(*map(jnp.float32, (eps, delta, eta, T)))
    v = np.asarray(MODEL.truncated_gradient(bt, data, T).value * eta + bt)
    new, info = _one_step_draws(est, hp, bt, data, 3000, key)
    lam = eta * (6 * T**2 + 1.3 / math.sqrt(3)) / n0  # spec 000 §7 A4
    b = lam * 2 * math.sqrt(3 * s * math.log(1 / delta)) / eps
    np.testing.assert_allclose(np.asarray(info.noise_scale), b, rtol=1e-5)
    sup = np.asarray(info.support)
    resid = np.take_along_axis(np.asarray(new.beta), sup, 1) - v[sup]
    assert_scale_with_power(resid, "laplace", b)


def test_ld_step_noise_scale_with_power(key):
    n0, d, T, eta, eps, delta = 60, 5, 1.2, 0.5, 0.8, 1e-3
    beta, data, _ = _problem(n=n0, d=d, s=d)
    bt = jnp.asarray(beta)
    est = dp_em.ld_dp_em(MODEL, 1, "paper")
    hp = dp_em.DPEMHyperparams(*map(jnp.float32, (eps, delta, eta, T)))
    v = np.asarray(MODEL.truncated_gradient(bt, data, T).value * eta + bt)
    new, info = _one_step_draws(est, hp, bt, data, 3000, key)
    # Alg 8 with A4: Delta_2 = sqrt(d) eta (6T^2 + ||beta^t||_inf) / n0, classic Gaussian
    delta2 = math.sqrt(d) * eta * (6 * T**2 + 1 / math.sqrt(d)) / n0
    sigma = delta2 * math.sqrt(2 * math.log(1.25 / delta)) / eps
    np.testing.assert_allclose(np.asarray(info.noise_scale), sigma, rtol=1e-5)
    assert_scale_with_power(np.asarray(new.beta) - v, "norm", sigma)


# ---------------------------------------------------------------------------------------------
# The epsilon = inf limit against an independent numpy implementation
# ---------------------------------------------------------------------------------------------


def _numpy_rmc_em(x, z, y, beta0, eta, N0, sigma, T=np.inf, s=None):
    """Sample-split (sparse) gradient EM for regression with missing covariates, written from
    the paper's m, K and truncation (spec 000 §2.5), one record at a time."""
    n0 = x.shape[0] // N0
    beta = beta0.astype(np.float64)
    path = []
    clip = lambda v: np.clip(v, -T, T)  # noqa: E731
    for t in range(N0):
        grad = np.zeros_like(beta)
        for i in range(t * n0, (t + 1) * n0):
            zi = z[i].astype(np.float64)
            xo = zi * x[i]
            r = 1.0 - zi
            c = (y[i] - beta @ xo) / (sigma**2 + np.sum((r * beta) ** 2))
            m = xo + c * r * beta
            nn = r * m
            grad += (clip(y[i]) * clip(m) - r * beta - clip(m) * clip(m @ beta)
                     + clip(nn) * clip(nn @ beta))
        beta = beta + eta * grad / n0
        if s is not None:
            keep = np.argsort(-np.abs(beta), kind="stable")[:s]
            out = np.zeros_like(beta)
            out[keep] = beta[keep]
            beta = out
        path.append(beta)
    return np.array(path)


@pytest.mark.parametrize("truncation", [np.inf, 1.0])
def test_hd_epsilon_inf_equals_numpy_sparse_em(key, truncation):
    beta, data, beta0 = _problem(n=600, d=12, s=3)
    res = dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=4, beta0=beta0, epsilon=np.inf,
                             truncation=truncation, num_iterations=4)
    x, z, y = (np.asarray(a, np.float64) for a in data)
    ref = _numpy_rmc_em(x, z, y, beta0, 0.5, 4, SIGMA, truncation, s=4)
    np.testing.assert_allclose(res.trace, ref, rtol=3e-5, atol=3e-6)
    assert not res.ledger.is_private


def test_ld_epsilon_inf_equals_numpy_em(key):
    beta, data, beta0 = _problem(n=600, d=4, s=4)
    res = dp_em.fit_ld_dp_em(key, data, MODEL, beta0=beta0, epsilon=np.inf, truncation=1.5,
                             num_iterations=4)
    x, z, y = (np.asarray(a, np.float64) for a in data)
    ref = _numpy_rmc_em(x, z, y, beta0, 0.5, 4, SIGMA, 1.5)
    np.testing.assert_allclose(res.trace, ref, rtol=3e-5, atol=3e-6)


# ---------------------------------------------------------------------------------------------
# Population correctness (spec 000 §9 item 6)
# ---------------------------------------------------------------------------------------------


def test_population_fixed_point_with_the_papers_K(key):
    """E[grad Q(beta*; beta*)] = 0 with the paper's K (spec 000 §2.5), checked by Monte Carlo
    against per-record standard errors; at 0.8 beta* the mean gradient is clearly non-zero and
    points back towards beta*."""
    model = RegressionMissingCovariates(0.5, 0.3)
    d = 4
    beta = np.array([0.6, -0.5, 0.4, 0.3], np.float32)
    data = model.simulate(key, 200_000, jnp.asarray(beta))

    def per_record(b):
        g = jax.vmap(lambda x, z, y: model.gradient(jnp.asarray(b), RMCData(x[None], z[None],
                                                                          y[None])))(*data)
        g = np.asarray(g, np.float64)
        return g.mean(0), g.std(0, ddof=1) / math.sqrt(g.shape[0])

    mean, se = per_record(beta)
    assert (np.abs(mean) < 4 * se).all(), (mean, se)
    mean_off, se_off = per_record(0.8 * beta)
    assert (np.abs(mean_off) > 8 * se_off).all()
    assert float(mean_off @ (beta - 0.8 * beta)) > 0  # an ascent direction towards beta*
    assert d == beta.size


# ---------------------------------------------------------------------------------------------
# Determinism, compilation, ledgers, validation
# ---------------------------------------------------------------------------------------------


def test_determinism_no_recompile_and_ex_post_ledger(key):
    beta, data, beta0 = _problem(n=900, d=20, s=3, seed=5)
    r1 = dp_em.fit_hd_dp_em(same_key(key), data, LITERAL, s_hat=3, beta0=beta0, epsilon=0.5)
    before = compile_count(base._fit_run)
    r2 = dp_em.fit_hd_dp_em(same_key(key), data, LITERAL, s_hat=3, beta0=beta0, epsilon=0.5)
    np.testing.assert_array_equal(r1.trace, r2.trace)
    r3 = dp_em.fit_hd_dp_em(jax.random.fold_in(key, 1), data, LITERAL, s_hat=3, beta0=beta0,
                            epsilon=0.7, truncation=1.0, eta=0.3)
    assert not np.array_equal(r1.trace, r3.trace)
    assert compile_count(base._fit_run) == before
    # The printed calibration: not DP a priori; the ex-post note reads the public iterates.
    led = r1.ledger
    assert not led.is_private and "not DP" in led.variant
    assert led.requested.epsilon == pytest.approx(0.5)
    (note,) = [n for n in led.notes if n.startswith("ex post")]
    assert "held at every iteration" in note  # ||beta^t||_inf ~ 0.6 << 4T^2 here


def test_ledgers_of_corrected_and_literal_sensitivity():
    n, N0 = 2000, 8
    hp = dp_em.default_hparams(n, 0.5)
    led = probe_ledger(dp_em.hd_dp_em(MODEL, 3, N0), MODEL, n, 5, hp)
    assert led.is_private and led.variant == "corrected"
    assert 0 < led.guarantee.epsilon <= 0.5  # read off the peeling rounds' composition
    (rel,) = led.releases
    assert "||beta^t||_inf" in rel.statistic and rel.sensitivity_ratio == 1.0
    lam = 0.5 * 6 * math.log(n) / (n // N0)  # at the iterate 0
    assert rel.sensitivity == pytest.approx(lam, rel=1e-5)
    lit = probe_ledger(dp_em.ld_dp_em(LITERAL, N0), LITERAL, n, 5, hp)
    assert not lit.is_private and math.isinf(lit.releases[0].sensitivity_ratio)
    assert lit.approx_dp.epsilon == math.inf
    # A small-T run whose iterate exceeds 4T^2 is flagged ex post.
    (note,) = LITERAL.ex_post_notes(np.array([[2.0, 0.0]]), 0.5, 0.5, 1e-4)
    assert "EXCEEDED" in note and "(0.833333," in note  # ratio (2*0.25 + 2)/(6*0.25) = 5/3


@pytest.mark.parametrize(
    "data,exc,match",
    [
        ((np.ones((10, 3)), np.ones(10)), TypeError, "RMCData"),
        ((np.ones((10, 3)), np.ones((10, 2)), np.ones(10)), ValueError, "shape of data.x"),
        ((np.ones((10, 3)), np.full((10, 3), 0.5), np.ones(10)), ValueError, "only 0"),
        ((np.ones((10, 3)), np.ones((10, 3)), np.ones(9)), ValueError, "one entry per row"),
        ((np.full((10, 3), np.nan), np.ones((10, 3)), np.ones(10)), ValueError, "finite"),
    ],
)
def test_invalid_data_raises(key, data, exc, match):
    with pytest.raises(exc, match=match):
        dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=1, beta0=np.zeros(3), epsilon=0.5)


def test_boolean_mask_is_accepted_and_missing_entries_are_ignored(key):
    x = np.ones((40, 3))
    z = np.ones((40, 3), bool)
    z[:, 2] = False
    x2 = x.copy()
    x2[:, 2] = 123.0  # unobserved values must not matter
    a = dp_em.fit_ld_dp_em(same_key(key), (x, z, np.ones(40)), MODEL, beta0=np.zeros(3),
                           epsilon=0.5, num_iterations=2)
    b = dp_em.fit_ld_dp_em(same_key(key), (x2, z, np.ones(40)), MODEL, beta0=np.zeros(3),
                           epsilon=0.5, num_iterations=2)
    np.testing.assert_array_equal(a.trace, b.trace)


def test_invalid_model_parameters():
    with pytest.raises(ValueError, match="missing_prob must lie in"):
        RegressionMissingCovariates(1.0, 1.0)
    with pytest.raises(ValueError, match="sigma must lie in"):
        RegressionMissingCovariates(0.0)
    with pytest.raises(ValueError, match="sensitivity must be"):
        RegressionMissingCovariates(1.0, 0.1, "tight")
