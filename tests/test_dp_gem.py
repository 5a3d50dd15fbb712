"""DP gradient EM (spec 002 Algorithms 1 and 2): gradients, sensitivity, noise, accounting."""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax._validate import DPJaxWarning
from dpjax.accounting import gaussian_mu_for_epsilon
from dpjax.algorithms import dp_gem as G
from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates
from dpjax.models.mor import MoRData
from dpjax.models.rmc import RMCData
from tests.helpers import assert_scale_with_power

N, D, T = 300, 3, 5
BETA = np.full(D, 1.0 / np.sqrt(D), np.float32)
MODELS = [GaussianMixture(0.5), MixtureOfRegressions(0.5), RegressionMissingCovariates(1.0, 0.2)]
IDS = [m.name for m in MODELS]


def _data(model, seed=0, n=N):
    return model.simulate(jax.random.key(seed), n, jnp.asarray(BETA))


def _eps_tilde_np(eps, delta):
    L = math.log(1.0 / delta)
    return math.sqrt(L + eps) - math.sqrt(L)


def _hp(eps, s=math.nan, tau=2.0, zeta=0.05, delta=1.0 / N, eta=1.0):
    return G.DPGEMHyperparams(*map(jnp.float32, (eps, delta, eta, tau, zeta, s)))


def _chp(eps, clip=1.0, delta=1.0 / N, eta=1.0):
    return G.ClippedGEMHyperparams(*map(jnp.float32, (eps, delta, eta, clip)))


# -------------------------------------------------------------------------------------------
# Per-sample gradients against autodiff of the per-sample Q-function (spec 002 §2.7, check 5)
# -------------------------------------------------------------------------------------------


def _q_gmm(model, beta, beta_p, y):
    w = jax.nn.sigmoid(2.0 * (y @ beta_p) / model.sigma**2)  # exact posterior P(z = 1 | y)
    return -0.5 * (w * jnp.sum((y - beta) ** 2) + (1 - w) * jnp.sum((y + beta) ** 2))


def _q_mor(model, beta, beta_p, rec):
    x, y = rec
    w = jax.nn.sigmoid(2.0 * y * (x @ beta_p) / model.sigma**2)
    return -0.5 * (w * (y - x @ beta) ** 2 + (1 - w) * (y + x @ beta) ** 2)


def _q_rmc(model, beta, beta_p, rec):
    x, z, y = rec
    miss = 1.0 - z
    u = miss * beta_p
    m = z * x + (y - beta_p @ (z * x)) / (model.sigma**2 + u @ u) * u
    mm = miss * m
    K = jnp.diag(miss) + jnp.outer(m, m) - jnp.outer(mm, mm)  # the printed K (eq. 27)
    return y * (beta @ m) - 0.5 * beta @ K @ beta


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_per_sample_gradients_match_autodiff(model):
    data = _data(model, 3, 50)
    beta = jnp.asarray(BETA * 0.7 + np.array([0.1, -0.2, 0.3], np.float32))
    if isinstance(model, GaussianMixture):
        q, recs = _q_gmm, data.y
    elif isinstance(model, MixtureOfRegressions):
        q, recs = _q_mor, (data.x, data.y)
    else:
        q, recs = _q_rmc, (data.x, data.z, data.y)
    auto = jax.vmap(lambda r: jax.grad(q, argnums=1)(model, beta, jax.lax.stop_gradient(beta),
                                                     r))(recs)
    got = model.per_sample_gradients(beta, data)
    assert got.shape == (50, D)
    np.testing.assert_allclose(np.asarray(got), np.asarray(auto), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got).mean(0), np.asarray(model.gradient(beta, data)),
                               rtol=1e-4, atol=1e-6)


# -------------------------------------------------------------------------------------------
# Sensitivity on adversarial neighbours (spec 002 check 3)
# -------------------------------------------------------------------------------------------


def _extreme_neighbours(model, data):
    out = []
    for v in (1e12, -1e12, np.inf, -np.inf, np.nan, 3.0e38):
        for sign_pattern in (np.ones(D), np.array([1.0, -1.0, 1.0])):
            row = (v * sign_pattern).astype(np.float32)
            if isinstance(model, GaussianMixture):
                out.append(type(data)(data.y.at[0].set(row)))
            elif isinstance(model, MixtureOfRegressions):
                out.append(MoRData(data.x.at[0].set(row), data.y.at[0].set(row[0])))
            else:
                for z in (np.zeros(D), np.ones(D), np.array([1.0, 0.0, 5.0])):
                    out.append(RMCData(data.x.at[0].set(row), data.z.at[0].set(z),
                                       data.y.at[0].set(-row[0])))
    return out


def _pre_noise(est, data, beta, hp):
    new, info = jax.jit(est.step)(jax.random.key(0), G.GEMState(beta), data, hp)
    return np.asarray(new.beta - beta, np.float64) / float(hp.eta), info


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_robust_statistic_sensitivity_on_extreme_neighbours(model):
    data = _data(model)
    beta = jnp.asarray(BETA * 0.5)
    # the s the default rule gives at epsilon = 0.5, fed explicitly with no noise (eps = inf)
    s, _ = G.smoothing_parameters("sigma_consistent", N, D, _hp(0.5))
    est = G.dp_gem(model, T, "explicit")
    hp = _hp(math.inf, s=float(s))
    g, info = _pre_noise(est, data, beta, hp)
    declared = 4.0 * math.sqrt(2.0) * float(s) / (3.0 * N)
    for ev in info.events:  # the statistic's own sensitivity is the spec's (4 sqrt2/3) s/n
        assert float(ev.sensitivity) == pytest.approx(declared, rel=1e-6)
        assert float(ev.scale) == 0.0
    worst = 0.0
    for other in _extreme_neighbours(model, data):
        g2, _ = _pre_noise(est, other, beta, hp)
        assert np.isfinite(g2).all()
        worst = max(worst, float(np.max(np.abs(g2 - g))))
    # float32 summation slack only; and the adversary moves a coordinate by at least the tail
    # limit of psi over n (psi never reaches its clamp, so the bound is not attained exactly)
    assert worst <= declared * (1 + 1e-3)
    assert worst >= 0.4 * declared


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_clipped_statistic_sensitivity_on_extreme_neighbours(model):
    data = _data(model)
    beta = jnp.asarray(BETA * 0.5)
    est = G.clipped_gem(model, T)
    hp = _chp(math.inf, clip=0.7)
    g, info = _pre_noise(est, data, beta, hp)
    declared = 2.0 * 0.7 / N
    assert float(info.events[0].sensitivity) == pytest.approx(declared, rel=1e-6)
    for other in _extreme_neighbours(model, data):
        g2, _ = _pre_noise(est, other, beta, hp)
        assert np.isfinite(g2).all()
        assert np.linalg.norm(g2 - g) <= declared * (1 + 1e-3)


# -------------------------------------------------------------------------------------------
# Noise: Gaussian with the spec's sigma, with power (spec 002 check 10)
# -------------------------------------------------------------------------------------------


def _noise_samples(est, est_free, data, beta, hp, hp_free, reps=600):
    g0, _ = _pre_noise(est_free, data, beta, hp_free)
    keys = jax.random.split(jax.random.key(7), reps)
    step = jax.jit(jax.vmap(est.step, in_axes=(0, None, None, None)))
    new, info = step(keys, G.GEMState(beta), data, hp)
    moved = np.asarray(new.beta, np.float64) - np.asarray(beta, np.float64)[None, :]
    return moved / float(hp.eta) - g0[None, :], info


def _total_mu(calibration, eps, delta):
    """sqrt(2 rho) of the whole run: the paper's sqrt(2) eps~, or the analytic Gaussian's mu."""
    if calibration == "paper":
        return math.sqrt(2) * _eps_tilde_np(eps, delta)
    return gaussian_mu_for_epsilon(eps, delta)


@pytest.mark.parametrize("calibration", G.CALIBRATIONS)
def test_dp_gem_noise_scale_with_power(calibration):
    model = GaussianMixture(0.5)
    data, beta = _data(model), jnp.asarray(BETA * 0.5)
    eps, delta, tau, zeta = 0.5, 1.0 / N, 2.0, 0.05
    et = _eps_tilde_np(eps, delta)
    beta_s = math.sqrt(math.log(D / zeta))
    s = math.sqrt(N * tau * et) / (2 * beta_s)  # sigma-consistent rule, computed here
    # spec 002 §2.5 (paper: sigma^2 = 16 s^2 d T / (9 n^2 eps~^2)): sensitivity (4 sqrt2/3) s/n,
    # d T releases sharing the run's rho = mu^2 / 2
    sigma = (4 * math.sqrt(2) / 3) * (s / N) * math.sqrt(D * T) / _total_mu(calibration, eps,
                                                                              delta)
    noise, info = _noise_samples(G.dp_gem(model, T, calibration=calibration),
                                 G.dp_gem(model, T, "explicit"), data, beta,
                                 _hp(eps, tau=tau, zeta=zeta), _hp(math.inf, s=s))
    # the analytic mu is solved by a float32 bisection, conservative by at most ~1e-4
    assert float(info.noise_scale[0]) == pytest.approx(sigma, rel=1e-4 if calibration ==
                                                       "paper" else 3e-4)
    assert float(info.noise_scale[0]) >= sigma * (1 - 1e-6)
    assert float(info.s[0]) == pytest.approx(s, rel=1e-4)
    assert_scale_with_power(noise, "norm", sigma)
    # independent across coordinates
    c = np.corrcoef(noise.T)
    assert np.max(np.abs(c - np.eye(D))) < 0.2


@pytest.mark.parametrize("calibration", G.CALIBRATIONS)
def test_clipped_gem_noise_scale_with_power(calibration):
    model = GaussianMixture(0.5)
    data, beta = _data(model), jnp.asarray(BETA * 0.5)
    eps, C = 0.5, 1.0
    # spec 002 §2.4, recommended calibration (paper: (2C/n) sqrt(T / (2 eps~^2)))
    sigma = (2 * C / N) * math.sqrt(T) / _total_mu(calibration, eps, 1.0 / N)
    est = G.clipped_gem(model, T, calibration)
    noise, info = _noise_samples(est, est, data, beta, _chp(eps, C), _chp(math.inf, C))
    assert float(info.noise_scale[0]) == pytest.approx(sigma, rel=1e-4 if calibration ==
                                                       "paper" else 3e-4)
    assert_scale_with_power(noise, "norm", sigma)


# -------------------------------------------------------------------------------------------
# epsilon = inf: exactly the non-private gradient EM (spec 002 check 7)
# -------------------------------------------------------------------------------------------


def _numpy_gradient_em_gmm(y, beta0, sigma, eta, iters):
    y = np.asarray(y, np.float64)
    beta = np.asarray(beta0, np.float64)
    out = []
    for _ in range(iters):
        w = np.tanh(y @ beta / sigma**2)
        beta = beta + eta * ((w[:, None] * y).mean(axis=0) - beta)
        out.append(beta.copy())
    return np.array(out)


def _numpy_gradient_em_mor(x, y, beta0, sigma, eta, iters):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    beta = np.asarray(beta0, np.float64)
    out = []
    for _ in range(iters):
        w = np.tanh(y * (x @ beta) / sigma**2)
        beta = beta + eta * (((w * y - x @ beta)[:, None] * x).mean(axis=0))
        out.append(beta.copy())
    return np.array(out)


def test_eps_inf_is_non_private_gradient_em():
    gmm, mor = GaussianMixture(0.5), MixtureOfRegressions(0.5)
    beta0 = BETA * 0.3
    dg = _data(gmm, 1)
    ref = _numpy_gradient_em_gmm(dg.y, beta0, 0.5, 0.7, T)
    for k in (1, 2):  # no noise at all: the key does not matter
        r = G.fit_dp_gem(k, dg, gmm, epsilon=math.inf, delta=1 / N, num_iterations=T,
                         beta0=beta0, tau=2.0, eta=0.7)
        np.testing.assert_allclose(r.trace, ref, rtol=1e-5, atol=1e-6)
        assert not r.ledger.is_private
        rc = G.fit_clipped_gem(k, dg, gmm, epsilon=math.inf, delta=1 / N, num_iterations=T,
                               beta0=beta0, eta=0.7, clip=math.inf)
        np.testing.assert_allclose(rc.trace, ref, rtol=1e-5, atol=1e-6)
    dm = _data(mor, 2)
    r = G.fit_dp_gem(0, dm, mor, epsilon=math.inf, delta=1 / N, num_iterations=T, beta0=beta0,
                     tau=2.0, eta=0.7)
    np.testing.assert_allclose(r.trace, _numpy_gradient_em_mor(dm.x, dm.y, beta0, 0.5, 0.7, T),
                               rtol=1e-5, atol=1e-6)


def test_gmm_unit_step_is_the_exact_m_step():
    gmm = GaussianMixture(0.5)
    dg = _data(gmm, 4)
    beta0 = BETA * 0.3
    r = G.fit_dp_gem(0, dg, gmm, epsilon=math.inf, delta=1 / N, num_iterations=1, beta0=beta0,
                     tau=2.0, eta=1.0)
    y = np.asarray(dg.y, np.float64)
    m_step = (np.tanh(y @ beta0 / 0.25)[:, None] * y).mean(0)
    np.testing.assert_allclose(r.estimate, m_step, rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------------------------------
# Determinism, compilation, accounting (spec 002 check 4)
# -------------------------------------------------------------------------------------------


def _fit(key, eps, model=None, **kw):
    model = model or GaussianMixture(0.5)
    return G.fit_dp_gem(key, _data(model), model, epsilon=eps, delta=1 / N, num_iterations=T,
                        beta0=BETA * 0.5, tau=2.0, **kw)


def test_determinism_under_a_fixed_key():
    a, b, c = _fit(11, 0.5), _fit(11, 0.5), _fit(12, 0.5)
    np.testing.assert_array_equal(a.trace, b.trace)
    assert not np.array_equal(a.trace, c.trace)
    model = GaussianMixture(0.5)
    kw = dict(epsilon=0.5, delta=1 / N, num_iterations=T, beta0=BETA * 0.5)
    x = G.fit_clipped_gem(3, _data(model), model, **kw)
    y = G.fit_clipped_gem(3, _data(model), model, **kw)
    np.testing.assert_array_equal(x.trace, y.trace)


def test_no_recompile_for_a_new_epsilon():
    _fit(0, 0.5)
    before = base._fit_run._cache_size()
    for i, eps in enumerate((0.2, 1.0, 3.0, math.inf)):
        _fit(i + 1, eps)
    assert base._fit_run._cache_size() == before


@pytest.mark.parametrize("n, eps, expected", [
    (1000, 0.2, 0.0378), (1000, 0.5, 0.0935), (1000, 1.0, 0.1838),
    (10**4, 0.2, 0.0328), (10**4, 0.5, 0.0813), (10**4, 1.0, 0.1605),
    (10**5, 0.2, 0.0293), (10**5, 0.5, 0.0729), (10**5, 1.0, 0.1443),
])
def test_eps_tilde_reference_values(n, eps, expected):
    et = float(G.eps_tilde(jnp.float32(eps), jnp.float32(1.0 / n)))
    assert et == pytest.approx(expected, abs=6e-5)
    et64 = _eps_tilde_np(eps, 1.0 / n)
    assert et64**2 + 2 * et64 * math.sqrt(math.log(n)) == pytest.approx(eps, abs=1e-12)
    assert et == pytest.approx(et64, rel=1e-6)


@pytest.mark.parametrize("model", MODELS, ids=IDS)
@pytest.mark.parametrize("eps", [0.2, 1.0, 4.0])
def test_ledger_composes_to_the_requested_budget(model, eps):
    # the default ("gaussian"): PLD composition of the d T Gaussian releases, the exact curve
    led = _fit(0, eps, model).ledger
    assert led.composition == "pld" and led.releases[0].count == D * T
    assert eps * 0.999 <= led.approx_dp.epsilon <= eps * (1 + 1e-5)
    assert led.approx_dp.delta == pytest.approx(1 / N)
    rc = G.fit_clipped_gem(0, _data(model), model, epsilon=eps, delta=1 / N, num_iterations=T,
                           beta0=BETA * 0.5).ledger
    assert eps * 0.999 <= rc.approx_dp.epsilon <= eps * (1 + 1e-5)
    # the paper's calibration, by name: rho = eps~^2 composed in zCDP, Bun-Steinke
    r = _fit(0, eps, model, calibration="paper")
    led = r.ledger
    et = _eps_tilde_np(eps, 1 / N)
    (rel,) = led.releases
    assert rel.count == D * T  # d T coordinate releases
    assert sum(rel.epsilons) == pytest.approx(led.guarantee.rho)
    assert led.guarantee.rho == pytest.approx(et**2, rel=1e-5)
    assert led.approx_dp.epsilon == pytest.approx(eps, rel=1e-5)
    assert led.approx_dp.delta == pytest.approx(1 / N)
    rc = G.fit_clipped_gem(0, _data(model), model, epsilon=eps, delta=1 / N, num_iterations=T,
                           beta0=BETA * 0.5, calibration="paper").ledger
    assert rc.releases[0].count == T
    assert rc.approx_dp.epsilon == pytest.approx(eps, rel=1e-5)


def test_s_rules_and_explicit_s():
    hp = _hp(0.5, tau=2.0, zeta=0.05)
    et = _eps_tilde_np(0.5, 1 / N)
    root = math.sqrt(N * 2.0 * et)
    want = {
        "sigma_consistent": root / (2 * math.sqrt(math.log(D / 0.05))),
        "alg2_literal": root / (2 * math.log(N)),
        "alg3_literal": root / (2 * math.log(1 / 0.05)),
        "thm2": root / math.log(D / 0.05),
    }
    for rule, s in want.items():
        got, beta_s = G.smoothing_parameters(rule, N, D, hp)
        assert float(got) == pytest.approx(s, rel=1e-5)
        assert float(beta_s) == pytest.approx(math.sqrt(math.log(D / 0.05)), rel=1e-6)
    r = _fit(0, 0.5, s_rule="explicit", s=0.8)
    assert r.ledger.approx_dp.epsilon == pytest.approx(0.5, rel=5e-4)
    assert r.ledger.releases[0].sensitivity == pytest.approx(4 * math.sqrt(2) * 0.8 / (3 * N),
                                                             rel=1e-6)


def _gmm_fit(**kw):
    model = GaussianMixture(0.5)
    args = dict(epsilon=0.5, delta=1 / N, num_iterations=T, beta0=BETA, tau=1.0)
    args.update(kw)
    return G.fit_dp_gem(0, _data(model), model, **args)


def test_invalid_inputs_are_rejected():
    with pytest.raises(ValueError, match="epsilon"):
        _gmm_fit(epsilon=0.0)
    with pytest.raises(ValueError, match="delta"):
        _gmm_fit(delta=1.0)
    with pytest.raises(ValueError, match="tau"):
        _gmm_fit(tau=-1.0)
    with pytest.raises(ValueError, match="zeta"):
        _gmm_fit(zeta=1.5)
    with pytest.raises(ValueError, match="s_rule"):
        _gmm_fit(s_rule="nope")
    with pytest.raises(ValueError, match="needs s"):
        _gmm_fit(s_rule="explicit")
    with pytest.raises(ValueError, match="only read"):
        _gmm_fit(s=1.0)
    with pytest.raises(ValueError, match="unbounded"):
        _gmm_fit(s_rule="explicit", s=math.inf)
    with pytest.raises(ValueError, match="beta0"):
        _gmm_fit(beta0=np.zeros(D + 1))
    with pytest.raises(ValueError, match="num_iterations"):
        _gmm_fit(num_iterations=0)
    with pytest.raises(TypeError, match="per_sample_gradients"):
        G.fit_dp_gem(0, _data(GaussianMixture(0.5)), object(), epsilon=0.5, delta=1 / N,
                     num_iterations=T, beta0=BETA, tau=1.0)
    with pytest.raises(ValueError, match="clip"):
        G.fit_clipped_gem(0, _data(GaussianMixture(0.5)), GaussianMixture(0.5), epsilon=0.5,
                          delta=1 / N, num_iterations=T, beta0=BETA, clip=math.inf)


# -------------------------------------------------------------------------------------------
# Algorithm 3: DP exact-M-step EM for the Gaussian mixture (spec 002 §2.6)
# -------------------------------------------------------------------------------------------


def _ehp(eps, s=math.nan, tau=2.0, zeta=0.05, delta=1.0 / N):
    return G.DPEMExactHyperparams(*map(jnp.float32, (eps, delta, tau, zeta, s)))


def _exact_step(est, data, beta, hp, key=0):
    new, info = jax.jit(est.step)(jax.random.key(key), G.GEMState(beta), data, hp)
    return np.asarray(new.beta, np.float64), info


def test_exact_em_sensitivity_on_extreme_neighbours():
    model = GaussianMixture(0.5)
    data, beta = _data(model), jnp.asarray(BETA * 0.5)
    s, _ = G.smoothing_parameters("sigma_consistent", N, D, _ehp(0.5))
    est = G.dp_exact_em(model, T, "explicit")
    hp = _ehp(math.inf, s=float(s))
    g, info = _exact_step(est, data, beta, hp)
    declared = 4.0 * math.sqrt(2.0) * float(s) / (3.0 * N)
    for ev in info.events:
        assert float(ev.sensitivity) == pytest.approx(declared, rel=1e-6)
        assert float(ev.scale) == 0.0
    worst = 0.0
    for other in _extreme_neighbours(model, data):
        g2, _ = _exact_step(est, other, beta, hp)
        assert np.isfinite(g2).all()
        worst = max(worst, float(np.max(np.abs(g2 - g))))
    assert 0.4 * declared <= worst <= declared * (1 + 1e-3)


@pytest.mark.parametrize("calibration", G.CALIBRATIONS)
def test_exact_em_noise_scale_with_power(calibration):
    model = GaussianMixture(0.5)
    data, beta = _data(model), jnp.asarray(BETA * 0.5)
    eps, tau, zeta = 0.5, 2.0, 0.05
    et = _eps_tilde_np(eps, 1.0 / N)
    s = math.sqrt(N * tau * et) / (2 * math.sqrt(math.log(D / zeta)))
    sigma = (4 * math.sqrt(2) / 3) * (s / N) * math.sqrt(D * T) / _total_mu(calibration, eps,
                                                                              1.0 / N)
    g0, _ = _exact_step(G.dp_exact_em(model, T, "explicit"), data, beta, _ehp(math.inf, s=s))
    step = jax.jit(jax.vmap(G.dp_exact_em(model, T, calibration=calibration).step,
                            in_axes=(0, None, None, None)))
    new, info = step(jax.random.split(jax.random.key(5), 600), G.GEMState(beta), data,
                     _ehp(eps, tau=tau, zeta=zeta))
    assert float(info.noise_scale[0]) == pytest.approx(sigma, rel=1e-4 if calibration ==
                                                       "paper" else 3e-4)
    assert_scale_with_power(np.asarray(new.beta, np.float64) - g0[None, :], "norm", sigma)


def _numpy_exact_em(y, beta0, sigma, iters):
    y, beta = np.asarray(y, np.float64), np.asarray(beta0, np.float64)
    out = []
    for _ in range(iters):
        beta = (np.tanh(y @ beta / sigma**2)[:, None] * y).mean(axis=0)
        out.append(beta.copy())
    return np.array(out)


def test_exact_em_eps_inf_is_exact_em_and_sklearn_agrees():
    from sklearn.mixture import GaussianMixture as SkGMM

    model = GaussianMixture(0.5)
    data = _data(model, 6, 2000)
    beta0 = BETA * 0.3
    r = G.fit_dp_exact_em(0, data, model, epsilon=math.inf, delta=1 / 2000, num_iterations=30,
                          beta0=beta0, tau=2.0)
    assert not r.ledger.is_private
    np.testing.assert_allclose(r.trace, _numpy_exact_em(data.y, beta0, 0.5, 30), rtol=1e-5,
                               atol=1e-6)
    # the EM fixed point is the maximum-likelihood estimate of the symmetric mixture: scikit-
    # learn's unconstrained two-component fit (means free, spherical covariance) lands close
    sk = SkGMM(2, covariance_type="spherical", random_state=0).fit(np.asarray(data.y))
    mu = sk.means_[np.argmax(sk.means_ @ BETA)]
    assert np.linalg.norm(r.estimate - mu) < 0.03


def test_exact_em_determinism_recompile_ledger_and_model_check():
    model = GaussianMixture(0.5)
    kw = dict(delta=1 / N, num_iterations=T, beta0=BETA * 0.5, tau=2.0, calibration="paper")
    a = G.fit_dp_exact_em(3, _data(model), model, epsilon=0.5, **kw)
    b = G.fit_dp_exact_em(3, _data(model), model, epsilon=0.5, **kw)
    c = G.fit_dp_exact_em(4, _data(model), model, epsilon=0.5, **kw)
    np.testing.assert_array_equal(a.trace, b.trace)
    assert not np.array_equal(a.trace, c.trace)
    before = base._fit_run._cache_size()
    for eps in (0.2, 1.0, math.inf):
        led = G.fit_dp_exact_em(1, _data(model), model, epsilon=eps, **kw).ledger
        if math.isfinite(eps):
            assert led.releases[0].count == D * T
            assert led.guarantee.rho == pytest.approx(_eps_tilde_np(eps, 1 / N) ** 2, rel=1e-5)
            assert led.approx_dp.epsilon == pytest.approx(eps, rel=1e-5)
    assert base._fit_run._cache_size() == before
    with pytest.raises(ValueError, match="Gaussian mixture only"):
        G.dp_exact_em(MixtureOfRegressions(0.5), T)


# -------------------------------------------------------------------------------------------
# Sample-split Algorithm 2 (spec 002 A10; not in the paper)
# -------------------------------------------------------------------------------------------


def test_sample_split_eps_inf_is_gradient_em_on_disjoint_batches():
    model = GaussianMixture(0.5)
    data = _data(model, 8)
    beta0 = BETA * 0.3
    r = G.fit_dp_gem(0, data, model, epsilon=math.inf, delta=1 / N, num_iterations=T,
                     beta0=beta0, tau=2.0, eta=0.7, sample_split=True)
    y, n0 = np.asarray(data.y, np.float64), N // T
    beta, ref = beta0.astype(np.float64), []
    for t in range(T):
        yb = y[t * n0:(t + 1) * n0]
        beta = beta + 0.7 * ((np.tanh(yb @ beta / 0.25)[:, None] * yb).mean(0) - beta)
        ref.append(beta.copy())
    np.testing.assert_allclose(r.trace, np.array(ref), rtol=1e-5, atol=1e-6)


def test_sample_split_noise_scale_sensitivity_and_ledger():
    model = GaussianMixture(0.5)
    data = _data(model, 9)
    n0, eps, tau, zeta = N // T, 0.5, 2.0, 0.05
    et = _eps_tilde_np(eps, 1.0 / N)
    s = math.sqrt(n0 * tau * et) / (2 * math.sqrt(math.log(D / zeta)))  # s' from n0 = n/T
    sigma = math.sqrt(16 * s**2 * D / (9 * n0**2 * et**2))  # A10: each batch composes over d
    batch = jax.tree_util.tree_map(lambda x: x[:n0], data)
    beta = jnp.asarray(BETA * 0.5)
    est = G.dp_gem(model, T, sample_split=True, calibration="paper")
    noise, info = _noise_samples(est, G.dp_gem(model, T, "explicit", True), batch, beta,
                                 _hp(eps, tau=tau, zeta=zeta), _hp(math.inf, s=s))
    assert float(info.s[0]) == pytest.approx(s, rel=1e-4)
    assert float(info.noise_scale[0]) == pytest.approx(sigma, rel=1e-4)
    assert float(info.events[0].sensitivity[0]) == pytest.approx(
        4 * math.sqrt(2) * s / (3 * n0), rel=1e-5)
    assert_scale_with_power(noise, "norm", sigma)
    default = G.fit_dp_gem(0, data, model, epsilon=eps, delta=1 / N, num_iterations=T,
                           beta0=BETA, tau=tau, sample_split=True).ledger
    assert default.composition == "parallel"
    assert eps * 0.999 <= default.approx_dp.epsilon <= eps * (1 + 1e-5)
    led = G.fit_dp_gem(0, data, model, epsilon=eps, delta=1 / N, num_iterations=T,
                       beta0=BETA, tau=tau, sample_split=True, calibration="paper").ledger
    assert led.composition == "parallel" and led.releases[0].count == D * T
    assert led.guarantee.rho == pytest.approx(et**2, rel=1e-5)
    assert led.approx_dp.epsilon == pytest.approx(eps, rel=1e-5)
    with pytest.raises(ValueError, match="one record per iteration"):
        G.fit_dp_gem(0, _data(model, 0, 3), model, epsilon=eps, delta=1 / N, num_iterations=T,
                     beta0=BETA, tau=tau, sample_split=True)


# -------------------------------------------------------------------------------------------
# Missing covariates: the exact conditional K (spec 002 A4)
# -------------------------------------------------------------------------------------------


def _q_rmc_exact(model, beta, beta_p, rec):
    x, z, y = rec
    miss = 1.0 - z
    u = miss * beta_p
    m = z * x + (y - beta_p @ (z * x)) / (model.sigma**2 + u @ u) * u
    K = jnp.diag(miss) + jnp.outer(m, m) - jnp.outer(u, u) / (model.sigma**2 + u @ u)
    return y * (beta @ m) - 0.5 * beta @ K @ beta


def test_rmc_exact_k_gradients_match_autodiff_and_differ_from_printed():
    model = RegressionMissingCovariates(1.0, 0.3, second_moment="exact_conditional")
    assert model.name == "rmc-exact-k"
    data = _data(model, 3, 50)
    beta = jnp.asarray(BETA * 0.7 + np.array([0.1, -0.2, 0.3], np.float32))
    auto = jax.vmap(lambda r: jax.grad(_q_rmc_exact, argnums=1)(
        model, beta, jax.lax.stop_gradient(beta), r))((data.x, data.z, data.y))
    got = model.per_sample_gradients(beta, data)
    np.testing.assert_allclose(np.asarray(got), np.asarray(auto), rtol=1e-4, atol=1e-5)
    printed = RegressionMissingCovariates(1.0, 0.3).per_sample_gradients(beta, data)
    assert np.max(np.abs(np.asarray(printed) - np.asarray(got))) > 1e-2
    with pytest.raises(ValueError, match="second_moment"):
        model.truncated_gradient(beta, data, 2.0)
    with pytest.raises(ValueError, match="second_moment"):
        RegressionMissingCovariates(1.0, 0.3, second_moment="nope")


@pytest.mark.parametrize("second_moment", ["paper", "exact_conditional"])
def test_rmc_self_consistency_both_k(second_moment):
    # spec 002 check 6: E grad q(beta*; beta*) = 0 for both K (Monte Carlo, within 3.5 s.e.)
    model = RegressionMissingCovariates(1.0, 0.3, second_moment=second_moment)
    beta = jnp.asarray(np.array([1.0, -0.8, 0.6], np.float32))
    data = model.simulate(jax.random.key(11), 200_000, beta)
    g = np.asarray(model.per_sample_gradients(beta, data), np.float64)
    z = g.mean(0) / (g.std(0, ddof=1) / math.sqrt(g.shape[0]))
    assert np.max(np.abs(z)) < 3.5
    # and it has power: away from beta* the mean gradient is far from 0
    off = np.asarray(model.per_sample_gradients(beta * 0.5, data))
    assert np.max(np.abs(off.mean(0))) > 20 * np.max(g.std(0) / math.sqrt(g.shape[0]))


@pytest.mark.parametrize("fit", [G.fit_dp_gem, G.fit_ldp_gem], ids=["central", "local"])
def test_a_delta_above_1_over_n_warns_at_the_callers_line(fit):
    """The paper's delta = 1/n passes; above it, the warning names delta and points here."""
    model = GaussianMixture(0.5)
    args = dict(epsilon=0.5, num_iterations=T, beta0=BETA * 0.5, tau=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit(0, _data(model), model, delta=1 / N, **args)
    with pytest.warns(DPJaxWarning, match=r"delta = 0.01 > 1/n") as record:
        fit(0, _data(model), model, delta=0.01, **args)
    assert record[0].filename == __file__
    with warnings.catch_warnings():  # the non-private limit releases nothing
        warnings.simplefilter("error")
        fit(0, _data(model), model, delta=0.01, **{**args, "epsilon": math.inf})
