"""High-dimensional DP-EM for the Gaussian mixture (spec 000 Alg 3): sensitivity, noise scale,
the epsilon=inf limit against an independent numpy EM, fixed points, sparsity, determinism,
compilation, ledger, and input validation."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax._validate import DPJaxWarning
from dpjax.accounting import peeling_epsilon
from dpjax.algorithms import dp_em
from dpjax.models.gmm import GaussianMixture, GMMData, sparse_unit_beta
from tests.helpers import assert_scale_with_power, compile_count, same_key

SIGMA = 0.5
MODEL = GaussianMixture(SIGMA)


def _problem(n=1200, d=40, s=4, seed=0):
    beta = sparse_unit_beta(d, s)
    data = MODEL.simulate(jax.random.key(seed), n, jnp.asarray(beta))
    rng = np.random.default_rng(seed)
    u = rng.normal(size=s)
    beta0 = beta.copy()
    beta0[:s] += u / np.linalg.norm(u) / 8  # data-independent, ||beta0 - beta*|| = 1/8
    return beta, data, beta0


# ---------------------------------------------------------------------------------------------
# Sensitivity on adversarial neighbours
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["exact", "paper"])
def test_truncated_gradient_sensitivity_on_an_adversarial_neighbour(weights):
    model = GaussianMixture(SIGMA, weights)
    n0, d, T = 60, 12, 1.7
    beta, data, _ = _problem(n=n0, d=d, s=3, seed=1)
    beta_t = jnp.asarray(beta) * 0.8 + 0.05  # any public iterate
    big = 1e6
    # Record a: weight ~ +1 and coordinate j clipped to +T; record b: weight ~ +1 but coordinate
    # j clipped to -T. Their terms differ by 2T in coordinate j: the bound is attained.
    j = d - 1
    a = np.asarray(beta_t) * big
    a[j] = big
    b = a.copy()
    b[j] = -big
    ya, yb = np.asarray(data.y).copy(), np.asarray(data.y).copy()
    ya[5], yb[5] = a, b
    sa = model.truncated_gradient(beta_t, GMMData(jnp.asarray(ya)), T)
    sb = model.truncated_gradient(beta_t, GMMData(jnp.asarray(yb)), T)
    gap = float(jnp.max(jnp.abs(sa.value - sb.value)))
    assert sa.norm == "linf" and sa.relation == "replace-one"
    assert float(sa.sensitivity) == pytest.approx(2 * T / n0)
    assert gap <= float(sa.sensitivity) * (1 + 1e-5)
    assert gap == pytest.approx(2 * T / n0, rel=1e-4)
    # Random replacements never exceed it either.
    rng = np.random.default_rng(2)
    s0 = model.truncated_gradient(beta_t, data, T)
    for _ in range(20):
        yc = np.asarray(data.y).copy()
        yc[rng.integers(n0)] = rng.standard_cauchy(d) * 1e3
        sc = model.truncated_gradient(beta_t, GMMData(jnp.asarray(yc)), T)
        assert float(jnp.max(jnp.abs(s0.value - sc.value))) <= 2 * T / n0 * (1 + 1e-5)


def test_step_statistic_sensitivity_scales_with_eta():
    n0, d, T, eta = 50, 8, 2.0, 0.5
    beta, data, _ = _problem(n=n0, d=d, s=2)
    stat = MODEL.truncated_gradient(jnp.asarray(beta), data, T).scale(eta).shift(beta)
    assert float(stat.sensitivity) == pytest.approx(2 * eta * T / n0)


# ---------------------------------------------------------------------------------------------
# Noise scale inside the estimator, with power
# ---------------------------------------------------------------------------------------------


def _one_step_draws(estimator, hp, beta_t, batch, n_draws, key):
    state = estimator.init(beta_t)
    keys = jax.random.split(key, n_draws)
    return jax.vmap(lambda k: estimator.step(k, state, batch, hp))(keys)


def test_hd_step_noise_scale_with_power(key):
    n0, d, s, T, eta, eps, delta = 80, 30, 5, 2.0, 0.5, 0.7, 1e-3
    beta, data, _ = _problem(n=n0, d=d, s=3)
    beta_t = jnp.asarray(beta)
    est = dp_em.hd_dp_em(MODEL, s, 1, "paper")
    hp = dp_em.DPEMHyperparams(*map(jnp.float32, (eps, delta, eta, T)))
    v = np.asarray(MODEL.truncated_gradient(beta_t, data, T).value * eta + beta_t)
    new, info = _one_step_draws(est, hp, beta_t, data, 4000, key)
    b = 4 * eta * T * math.sqrt(3 * s * math.log(1 / delta)) / (n0 * eps)  # spec 000 §2.3
    np.testing.assert_allclose(np.asarray(info.noise_scale), b, rtol=1e-5)
    sup = np.asarray(info.support)
    resid = np.take_along_axis(np.asarray(new.beta), sup, 1) - v[sup]
    assert_scale_with_power(resid, "laplace", b)


def test_ld_step_noise_scale_with_power(key):
    n0, d, T, eta, eps, delta = 80, 6, 2.0, 0.5, 0.9, 1e-3
    beta, data, _ = _problem(n=n0, d=d, s=d)
    beta_t = jnp.asarray(beta)
    est = dp_em.ld_dp_em(MODEL, 1, "paper")
    hp = dp_em.DPEMHyperparams(*map(jnp.float32, (eps, delta, eta, T)))
    v = np.asarray(MODEL.truncated_gradient(beta_t, data, T).value * eta + beta_t)
    new, info = _one_step_draws(est, hp, beta_t, data, 4000, key)
    # spec 000 Alg 4: variance 2 eta^2 d (2T)^2 log(1.25/delta) / (n0^2 eps^2)
    sigma = math.sqrt(2 * eta**2 * d * (2 * T) ** 2 * math.log(1.25 / delta) / (n0**2 * eps**2))
    np.testing.assert_allclose(np.asarray(info.noise_scale), sigma, rtol=1e-5)
    assert_scale_with_power(np.asarray(new.beta) - v, "norm", sigma)


# ---------------------------------------------------------------------------------------------
# The epsilon = inf limit against an independent numpy implementation
# ---------------------------------------------------------------------------------------------


def _numpy_sparse_gradient_em(y, beta0, s, eta, N0, sigma, T=np.inf):
    """Plain sample-split sparse gradient EM (Wang et al. 2015), written from the paper."""
    n0 = y.shape[0] // N0
    beta = beta0.astype(np.float64)
    path = []
    for t in range(N0):
        yb = y[t * n0:(t + 1) * n0].astype(np.float64)
        w = 1.0 / (1.0 + np.exp(-2.0 * yb @ beta / sigma**2))  # exact posterior P(z=1|y)
        grad = ((2 * w - 1)[:, None] * np.clip(yb, -T, T)).mean(axis=0) - beta
        half = beta + eta * grad
        keep = np.argsort(-np.abs(half), kind="stable")[:s]
        beta = np.zeros_like(half)
        beta[keep] = half[keep]
        path.append(beta)
    return np.array(path)


@pytest.mark.parametrize("truncation", [np.inf, 1.5])
def test_epsilon_inf_equals_numpy_sparse_gradient_em(key, truncation):
    beta, data, beta0 = _problem(n=2000, d=40, s=4)
    res = dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=6, beta0=beta0, epsilon=np.inf,
                             truncation=truncation, num_iterations=5)
    ref = _numpy_sparse_gradient_em(np.asarray(data.y), beta0, 6, 0.5, 5, SIGMA, truncation)
    np.testing.assert_allclose(res.trace, ref, rtol=2e-5, atol=2e-6)
    assert np.isfinite(res.trace).all()
    assert not res.ledger.is_private


def test_epsilon_inf_equals_the_non_private_twin(key):
    beta, data, beta0 = _problem(n=1500, d=30, s=3)
    hp = dp_em.default_hparams(1500, np.inf, truncation=np.inf)
    hp = jax.tree_util.tree_map(jnp.asarray, hp)
    dp = base.run(dp_em.hd_dp_em(MODEL, 5, 4), key, data, dp_em.DPEMState(jnp.asarray(beta0)), hp)
    twin = dp_em.truncated_em(MODEL, 5, 4)
    tw = base.run(twin, jax.random.key(0), data, twin.init(beta0), hp)
    np.testing.assert_allclose(np.asarray(dp[1].beta), np.asarray(tw[1].beta), rtol=1e-6,
                               atol=1e-7)


def test_low_dim_epsilon_inf_equals_gradient_em_on_batches(key):
    beta, data, beta0 = _problem(n=1500, d=5, s=5)
    res = dp_em.fit_ld_dp_em(key, data, MODEL, beta0=beta0, epsilon=np.inf, truncation=np.inf,
                             num_iterations=4)
    y = np.asarray(data.y, np.float64)
    b = beta0.astype(np.float64)
    for t in range(4):
        yb = y[t * 375:(t + 1) * 375]
        b = b + 0.5 * (np.tanh(yb @ b / SIGMA**2) @ yb / 375 - b)
    np.testing.assert_allclose(res.estimate, b, rtol=2e-5, atol=2e-6)


# ---------------------------------------------------------------------------------------------
# Population correctness (spec 000 §9 item 6)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights,expected_fixed_norm", [("exact", 1.0), ("paper", 0.953)])
def test_population_fixed_point(weights, expected_fixed_norm):
    """E[(2w-1) y] along beta* by Gauss-Hermite quadrature; orthogonal parts vanish by symmetry.

    With exact posteriors beta* is a fixed point of the population map (E[(2w-1)y] = beta*);
    with the paper's literal weight the fixed point shrinks to norm ~0.953 (spec 000 §7 A1).
    """
    model = GaussianMixture(SIGMA, weights)
    nodes, wts = np.polynomial.hermite_e.hermegauss(80)
    wts = wts / wts.sum()

    def pop_map(r):  # one population EM step at beta = r * e1 for beta* = e1
        # y along e1 is z + sigma xi (z = +-1 equally likely)
        ys = np.concatenate([1 + SIGMA * nodes, -1 + SIGMA * nodes])
        w = np.concatenate([wts, wts]) / 2
        y = jnp.asarray(np.stack([ys, np.zeros_like(ys)], 1), jnp.float32)
        sign = np.asarray(model.posterior_sign(jnp.array([r, 0.0], jnp.float32), GMMData(y)))
        return float(np.sum(w * sign * ys))

    assert pop_map(1.0) == pytest.approx(1.0 if weights == "exact" else pop_map(1.0), abs=1e-5)
    # Find the fixed point r = M(r) by iteration.
    r = 1.0
    for _ in range(200):
        r = pop_map(r)
    assert r == pytest.approx(expected_fixed_norm, abs=2e-3)


def test_non_private_run_converges_geometrically(key):
    beta, data, beta0 = _problem(n=40_000, d=20, s=3)
    res = dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=3, beta0=beta0, epsilon=np.inf,
                             eta=1.0, num_iterations=8)
    err = np.linalg.norm(res.trace - beta, axis=1)
    assert err[-1] < 0.03
    assert err[1] < 0.5 * np.linalg.norm(beta0 - beta)  # contraction within a few iterations


# ---------------------------------------------------------------------------------------------
# Sparsity, batches, determinism, compilation, ledger
# ---------------------------------------------------------------------------------------------


def test_iterates_have_exactly_s_hat_nonzeros(key):
    beta, data, beta0 = _problem(n=1000, d=40, s=4)
    res = dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=7, beta0=beta0, epsilon=0.5)
    assert ((res.trace != 0).sum(axis=1) == 7).all()


def test_batches_are_disjoint_and_cover_floor_n_over_N0_records():
    n, N0 = 103, 7
    idx = jnp.arange(n)
    batches = np.asarray(base.split_batches(idx, N0))
    n0 = n // N0
    assert batches.shape == (N0, n0)
    assert len(set(batches.ravel().tolist())) == n0 * N0  # every record used at most once


def test_each_iteration_sees_only_its_own_batch(key):
    # Changing a record of batch 2 leaves iterates 0 and 1 unchanged (same noise keys).
    beta, data, beta0 = _problem(n=600, d=20, s=3)
    y = np.asarray(data.y).copy()
    y[2 * 100 + 3] = 50.0
    a = dp_em.fit_hd_dp_em(same_key(key), data, MODEL, s_hat=3, beta0=beta0, epsilon=0.5,
                           num_iterations=6)
    b = dp_em.fit_hd_dp_em(same_key(key), y, MODEL, s_hat=3, beta0=beta0, epsilon=0.5,
                           num_iterations=6)
    np.testing.assert_array_equal(a.trace[:2], b.trace[:2])
    assert not np.array_equal(a.trace[2], b.trace[2])


def test_determinism_under_a_fixed_key(key):
    beta, data, beta0 = _problem()
    r1 = dp_em.fit_hd_dp_em(same_key(key), data, MODEL, s_hat=4, beta0=beta0, epsilon=0.5)
    r2 = dp_em.fit_hd_dp_em(same_key(key), data, MODEL, s_hat=4, beta0=beta0, epsilon=0.5)
    r3 = dp_em.fit_hd_dp_em(jax.random.fold_in(key, 1), data, MODEL, s_hat=4, beta0=beta0,
                            epsilon=0.5)
    np.testing.assert_array_equal(r1.trace, r2.trace)
    assert not np.array_equal(r1.trace, r3.trace)


def test_no_recompile_when_epsilon_delta_eta_or_truncation_change(key):
    beta, data, beta0 = _problem(n=900, d=24, s=3, seed=5)
    dp_em.fit_hd_dp_em(jax.random.fold_in(key, 0), data, MODEL, s_hat=3, beta0=beta0,
                       epsilon=0.5)
    before = compile_count(base._fit_run)
    for i, (eps, eta, T) in enumerate([(0.3, 0.5, 1.0), (0.8, 0.4, 2.0), (np.inf, 0.5, 2.5)]):
        dp_em.fit_hd_dp_em(jax.random.fold_in(key, i + 1), data, MODEL, s_hat=3, beta0=beta0,
                           epsilon=eps, eta=eta, truncation=T, delta=1e-4)
    assert compile_count(base._fit_run) == before


def test_ledger_reports_the_delivered_guarantee(key):
    beta, data, beta0 = _problem(n=1200, d=40, s=4)
    res = dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=4, beta0=beta0, epsilon=0.5,
                             calibration="tight")
    led = res.ledger
    n0 = 1200 // math.ceil(math.log(1200))
    assert led.is_private and led.composition == "parallel"
    (rel0,) = led.releases  # the peeling rounds' composition, at most the request
    assert led.guarantee.epsilon == pytest.approx(
        peeling_epsilon(rel0.sensitivity / rel0.scale, 4, 1 / 2400), rel=1e-5)
    assert led.guarantee.epsilon <= 0.5
    # the default: the same release composed by PLD (within a batch), the request spent
    pld = dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=4, beta0=beta0, epsilon=0.5).ledger
    assert pld.composition == "parallel" and 0.5 * 0.99 <= pld.approx_dp.epsilon <= 0.5
    assert pld.releases[0].scale < rel0.scale
    assert led.guarantee.delta == pytest.approx(1 / 2400)  # (eps, delta), not (N0 eps, N0 delta)
    (rel,) = led.releases
    assert rel.count == math.ceil(math.log(1200)) and rel.mechanism == "noisy-ht"
    lam = 2 * 0.5 * math.sqrt(math.log(1200)) / n0
    assert rel.sensitivity == pytest.approx(lam, rel=1e-5)  # from the events of the run
    assert "2*T/n0" in rel.statistic
    assert led.relation == "replace-one"
    paper = dp_em.fit_hd_dp_em(jax.random.fold_in(key, 1), data, GaussianMixture(SIGMA, "paper"),
                               s_hat=4, beta0=beta0, epsilon=0.5)
    assert "paper-literal" in paper.ledger.variant and paper.ledger.is_private


# ---------------------------------------------------------------------------------------------
# Input validation at the public boundary
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(epsilon=0.0), ValueError, "epsilon must be > 0"),
        (dict(epsilon=-1.0), ValueError, "epsilon must be > 0"),
        (dict(epsilon=float("nan")), ValueError, "epsilon must be > 0"),
        (dict(epsilon="big"), TypeError, "epsilon must be a real number"),
        (dict(delta=0.0), ValueError, r"delta must lie in the open interval \(0, 1\)"),
        (dict(delta=1.0), ValueError, r"delta must lie in the open interval \(0, 1\)"),
        (dict(s_hat=0), ValueError, r"s_hat must be an integer in \[1, 40\]"),
        (dict(s_hat=41), ValueError, r"s_hat must be an integer in \[1, 40\]"),
        (dict(s_hat=2.5), TypeError, "s_hat must be an integer"),
        (dict(num_iterations=0), ValueError, r"num_iterations \(N0\) must be an integer in"),
        (dict(num_iterations=1201), ValueError, r"num_iterations \(N0\) must be an integer in"),
        (dict(eta=0.0), ValueError, "eta must lie in"),
        (dict(truncation=-1.0), ValueError, "truncation must lie in"),
        (dict(truncation=np.inf), ValueError, "truncation = inf"),
        (dict(beta0=np.ones(39)), ValueError, r"beta0 must have shape \(40,\)"),
        (dict(beta0=np.ones(40)), ValueError, "at most s_hat = 4 non-zeros"),
        (dict(beta0=np.full(40, np.nan)), ValueError, "beta0 must be finite"),
    ],
)
def test_invalid_inputs_raise_naming_the_parameter(key, kwargs, exc, match):
    beta, data, beta0 = _problem()
    args = dict(s_hat=4, beta0=beta0, epsilon=0.5) | kwargs
    with pytest.raises(exc, match=match):
        dp_em.fit_hd_dp_em(key, data, MODEL, **args)


@pytest.mark.parametrize(
    "data,exc,match",
    [
        (np.ones(40), ValueError, "data.y must have 2 dimension"),
        (np.full((100, 40), np.inf), ValueError, "data.y must be finite"),
        (np.array([["a"] * 40] * 10), TypeError, "data.y must be a real array"),
        (np.ones((10, 40), dtype=complex), TypeError, "data.y must be a real array"),
        (np.ones((10, 40), dtype=bool), TypeError, "boolean"),
    ],
)
def test_invalid_data_raises(key, data, exc, match):
    _, _, beta0 = _problem()
    with pytest.raises(exc, match=match):
        dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=4, beta0=beta0, epsilon=0.5)


def test_invalid_key_and_model_parameters():
    _, data, beta0 = _problem()
    with pytest.raises(TypeError, match="key must be"):
        dp_em.fit_hd_dp_em("seed", data, MODEL, s_hat=4, beta0=beta0, epsilon=0.5)
    with pytest.raises(ValueError, match="sigma must lie in"):
        GaussianMixture(sigma=0.0)
    with pytest.raises(ValueError, match="weights must be"):
        GaussianMixture(weights="approx")


def test_warnings_for_weak_parameters(key):
    _, data, beta0 = _problem(d=40)
    with pytest.warns(DPJaxWarning, match="delta"):
        dp_em.fit_hd_dp_em(key, data, MODEL, s_hat=4, beta0=beta0, epsilon=0.5, delta=0.01)
    beta, data5, b05 = _problem(d=5, s=5)
    # epsilon > 1: no warning -- the default Gaussian calibration is the analytic one there
    # and the ledger (the exact curve of the noise drawn) delivers the request
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = dp_em.fit_ld_dp_em(jax.random.fold_in(key, 1), data5, MODEL, beta0=b05,
                                 epsilon=2.0)
        dp_em.fit_ld_dp_em(jax.random.fold_in(key, 2), data5, MODEL, beta0=b05, epsilon=0.9)
    assert res.ledger.approx_dp.epsilon <= 2.0 * (1 + 1e-6)
