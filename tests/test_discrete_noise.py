"""Exact discrete Laplace / discrete Gaussian samplers and the secure grid mechanisms.

Distribution tests draw 1e5 samples (vmapped over fixed keys) and run a chi-square test against
the pmf computed here independently (normalising exp(-|x|/t) or exp(-x^2/(2 sigma^2)) over a
wide integer range): they must pass at the right parameter (p > 1e-3) and fail (p < 1e-6) at 2/3
and 3/2 of the scale. Negative controls show that the other checks can fail too.
"""

import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax import discrete_noise as dn
from tests.helpers import FAIL_P, PASS_P, compile_count, counting_jit, same_key

N_KEYS, PER_KEY = 100, 1000  # 1e5 draws per parameter
WIDE = np.arange(-5000, 5001)  # support for the reference pmfs (tails far below 1e-30)

# The suite compiles at --xla_backend_optimization_level=0 (conftest) to save compile time on
# small shapes; the 1e5-lane sampling loops here are run-time bound, so they are compiled with
# the default optimisation (same program and results, ~8x faster).
_OPTIMISED = {"xla_backend_optimization_level": 2}


@functools.cache
def _vmapped(kind: str):
    sampler = dn.discrete_laplace if kind == "laplace" else dn.discrete_gaussian
    return jax.jit(
        lambda keys, param: jax.vmap(lambda k: sampler(k, (PER_KEY,), param))(keys),
        compiler_options=_OPTIMISED,
    )


@functools.cache
def _draws(kind: str, param: float) -> np.ndarray:
    seed = 20261122 + round(10 * param) + 1000 * (kind == "gaussian")  # fixed keys
    keys = jax.random.split(jax.random.key(seed), N_KEYS)
    return np.asarray(_vmapped(kind)(keys, jnp.float32(param))).ravel()


def _pmf(kind: str, scale: float) -> np.ndarray:
    """Reference pmf on WIDE: ``scale`` is t (Laplace) or sigma^2 (Gaussian)."""
    x = WIDE.astype(np.float64)
    logw = -np.abs(x) / scale if kind == "laplace" else -(x**2) / (2.0 * scale)
    w = np.exp(logw - logw.max())
    return w / w.sum()


def _chi2_pvalue(samples: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square goodness of fit: one bin per integer with expected count >= 5, tails pooled."""
    n = samples.size
    expected = n * pmf
    inner = np.flatnonzero(expected >= 5)
    lo, hi = WIDE[inner[0]], WIDE[inner[-1]]
    obs = np.bincount(np.clip(samples, lo, hi) - lo, minlength=hi - lo + 1)
    exp = expected[inner[0] : inner[-1] + 1].copy()
    exp[0] += expected[: inner[0]].sum()
    exp[-1] += expected[inner[-1] + 1 :].sum()
    if obs.size == 1:  # a point mass: nothing to test
        return 1.0
    return float(stats.chisquare(obs, exp * n / exp.sum()).pvalue)


def _moments(pmf: np.ndarray) -> tuple[float, float, float]:
    x = WIDE.astype(np.float64)
    mean = float((x * pmf).sum())
    var = float(((x - mean) ** 2 * pmf).sum())
    m4 = float(((x - mean) ** 4 * pmf).sum())
    return mean, var, m4


def _moments_ok(samples: np.ndarray, pmf: np.ndarray) -> bool:
    """Sample mean and variance within 5 standard errors of the pmf's."""
    mean, var, m4 = _moments(pmf)
    n = samples.size
    x = samples.astype(np.float64)
    ok_mean = abs(x.mean() - mean) <= 5 * math.sqrt(var / n)
    ok_var = abs(x.var() - var) <= 5 * math.sqrt((m4 - var**2) / n)
    return bool(ok_mean and ok_var)


# ---------------------------------------------------------------------------------------------
# Distributions (with power)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [0.5, 2.0, 7.0])
def test_discrete_laplace_matches_exact_pmf_with_power(t):
    x = _draws("laplace", t)
    assert x.dtype == np.int32
    p_right = _chi2_pvalue(x, _pmf("laplace", t))
    assert p_right > PASS_P, f"DLap({t}) rejected, p = {p_right:g}"
    for factor in (2 / 3, 3 / 2):
        p_wrong = _chi2_pvalue(x, _pmf("laplace", t * factor))
        assert p_wrong < FAIL_P, f"DLap({t * factor:g}) not rejected, p = {p_wrong:g}"
    # mean ~ 0 and the exact variance 2 e^{-1/t} / (1 - e^{-1/t})^2, and not the wrong scales'
    q = math.exp(-1 / t)
    assert _moments(_pmf("laplace", t))[1] == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-9)
    assert _moments_ok(x, _pmf("laplace", t))
    assert not any(_moments_ok(x, _pmf("laplace", t * f)) for f in (2 / 3, 3 / 2))


@pytest.mark.parametrize("sigma2", [0.7, 4.0, 30.0])
def test_discrete_gaussian_matches_exact_pmf_with_power(sigma2):
    used = float(dn.gaussian_sigma2_used(sigma2))
    # the variance parameter sampled: float32(sigma2) rounded up to 20 significant bits
    assert sigma2 <= used <= sigma2 * (1 + 2**-19)
    if sigma2 in (4.0, 30.0):
        assert used == sigma2
    x = _draws("gaussian", sigma2)
    assert x.dtype == np.int32
    p_right = _chi2_pvalue(x, _pmf("gaussian", used))
    assert p_right > PASS_P, f"N_Z(0, {used}) rejected, p = {p_right:g}"
    for factor in (2 / 3, 3 / 2):  # of sigma^2 (a smaller change than of sigma)
        p_wrong = _chi2_pvalue(x, _pmf("gaussian", used * factor))
        assert p_wrong < FAIL_P, f"N_Z(0, {used * factor:g}) not rejected, p = {p_wrong:g}"
    assert _moments_ok(x, _pmf("gaussian", used))
    assert not any(_moments_ok(x, _pmf("gaussian", used * f)) for f in (2 / 3, 3 / 2))


@pytest.mark.parametrize("kind, param", [("laplace", 2.0), ("gaussian", 4.0)])
def test_draws_are_symmetric_integers(kind, param):
    x = _draws(kind, param)
    assert x.dtype == np.int32 and (x != dn.SENTINEL).all()

    def symmetric_p(s):
        # homogeneity of the counts at +v and -v, v = 1..8 (a 2 x 8 contingency table)
        table = [[np.sum(s == v) for v in range(1, 9)], [np.sum(s == -v) for v in range(1, 9)]]
        return stats.chi2_contingency(table).pvalue

    assert stats.binomtest(int((x > 0).sum()), int((x != 0).sum())).pvalue > PASS_P
    assert symmetric_p(x) > PASS_P
    # negative control: the same test rejects the asymmetric law of X + [X > 0]
    assert symmetric_p(x + (x > 0)) < FAIL_P


def test_truncation_to_32_bits_is_exact_conditioning(key):
    # The samplers cap the block count so that |X| <= X_T; exceeding it restarts the draw. With
    # an artificially small cap the output must be the law conditioned on |X| <= X_T exactly.
    n = 20_000
    k1, k2 = jax.random.split(key)
    p, q = dn._laplace_pq(jnp.float32(3.0))  # t = 3: blocks of L = 3
    prop = dn._proposal(p, q, jnp.int32(5))  # a_max = 1: |X| <= 2 L - 1 = 5
    x = np.asarray(jax.jit(lambda k: dn._run(k, (n,), prop, None))(k1))
    trunc = _pmf("laplace", 3.0) * (np.abs(WIDE) <= 5)
    assert np.abs(x).max() == 5
    assert _chi2_pvalue(x, trunc / trunc.sum()) > PASS_P
    assert _chi2_pvalue(x, _pmf("laplace", 3.0)) < FAIL_P  # the cap is visible at this size
    prop, acc = dn._gaussian_params(jnp.float32(4.0))  # proposal DLap(2): blocks of L = 2
    prop = prop._replace(a_max=jnp.int32(2))  # |Y| <= 3 L - 1 = 5
    x = np.asarray(jax.jit(lambda k: dn._run(k, (n,), prop, acc))(k2))
    trunc = _pmf("gaussian", 4.0) * (np.abs(WIDE) <= 5)
    assert np.abs(x).max() == 5
    assert _chi2_pvalue(x, trunc / trunc.sum()) > PASS_P
    assert _chi2_pvalue(x, _pmf("gaussian", 4.0)) < FAIL_P


def test_integer_parameters_are_exact_and_fit_in_32_bits():
    # sigma^2 and t over the whole supported range (log-uniform, the ends, just below powers of 2)
    rng = np.random.default_rng(1)
    s2 = np.concatenate([
        2.0 ** rng.uniform(-10, 40, 300),
        [dn.SIGMA2_MIN, dn.SIGMA2_MAX, 0.7, 4.0, 30.0],
        np.nextafter(np.float32(2.0) ** np.arange(-9, 41), np.float32(0)),
    ]).astype(np.float32)
    used = np.asarray(jax.vmap(dn.gaussian_sigma2_used)(s2), np.float64)
    prop, acc = jax.tree.map(np.asarray, jax.jit(jax.vmap(dn._gaussian_params))(s2))
    for i in range(s2.size):
        sigma2 = Fraction(float(used[i]))
        assert Fraction(float(s2[i])) <= sigma2 <= Fraction(float(s2[i])) * (1 + Fraction(1, 2**19))
        p, q, block = int(prop.p[i]), int(prop.q[i]), int(prop.block[i])
        t_prop = Fraction(p, q)
        assert 0.5 * float(sigma2) < float(t_prop) ** 2 <= 2 * float(sigma2)  # T within sqrt 2
        shift, mu, h = int(acc.shift[i]), int(acc.mu[i]), int(acc.h[i])
        kappa = Fraction(int(acc.kappa_num[i]), int(acc.kappa_den[i]))
        assert Fraction(1, 4) < kappa <= 1 and int(acc.kappa_den[i]) <= 2**21 and h <= 21
        assert Fraction(mu, 2**shift) == sigma2 / t_prop  # mu = sigma^2 / T exactly
        x_t = (int(prop.a_max[i]) + 1) * block - 1  # the largest |Y| the cap allows
        assert x_t * 2**shift <= 2**31 - 1 and mu < 2**31
        assert x_t >= 1000 * math.sqrt(float(sigma2))
        for y in {0, 1, mu >> shift, (mu >> shift) + 1, x_t}:
            dist = abs(y * 2**shift - mu)  # P, in 31 bits
            n_rep = max(1, -(-dist // 2**h))
            assert dist < 2**31 and n_rep * 2**h < 2**32
            # gamma = kappa x^2 with x = P / 2^h is the CKS acceptance exponent, exactly
            assert kappa * Fraction(dist, 2**h) ** 2 == (y - sigma2 / t_prop) ** 2 / (2 * sigma2)
    t = np.concatenate([2.0 ** rng.uniform(-7, 20, 300), [dn.T_MIN, dn.T_MAX, 0.5, 7.0]])
    t = t.astype(np.float32)
    p, q = (np.asarray(v, np.int64) for v in jax.vmap(dn._laplace_pq)(t))
    prop = jax.tree.map(np.asarray, jax.vmap(dn._proposal, (0, 0, None))(p, q, 2**30 - 1))
    for i in range(t.size):
        assert Fraction(int(p[i]), int(q[i])) == Fraction(float(t[i]))  # t used exactly
        block = int(prop.block[i])
        assert block * q[i] <= max(p[i], q[i]) <= 2**30 and (block - 1) * q[i] < p[i]
        assert (int(prop.a_max[i]) + 1) * block - 1 >= 2**30 - 2**20


def test_extreme_parameters():
    keys = jax.random.split(jax.random.key(5), 4 * N_KEYS).reshape(4, N_KEYS)
    lap, gau = _vmapped("laplace"), _vmapped("gaussian")
    n = N_KEYS * PER_KEY
    # the smallest scales: P(X != 0) = 2 e^{-128} / (1 + e^{-128}) and ~ 2 e^{-512}
    assert (np.asarray(lap(keys[0], jnp.float32(dn.T_MIN))) == 0).all()
    assert (np.asarray(gau(keys[1], jnp.float32(dn.SIGMA2_MIN))) == 0).all()
    # the largest: variance 2 e^{-1/t} / (1 - e^{-1/t})^2 ~ 2 t^2 (kurtosis ~ 6), and ~ sigma^2
    x = np.asarray(lap(keys[2], jnp.float32(dn.T_MAX)), np.float64).ravel()
    var = 2 * math.exp(-1 / dn.T_MAX) / (-math.expm1(-1 / dn.T_MAX)) ** 2
    assert x.var() == pytest.approx(var, rel=5 * math.sqrt(5 / n))
    assert abs(x.mean()) < 5 * math.sqrt(var / n)
    assert x.var() != pytest.approx(var * (2 / 3) ** 2, rel=5 * math.sqrt(5 / n))
    x = np.asarray(gau(keys[3], jnp.float32(dn.SIGMA2_MAX)), np.float64).ravel()
    assert x.var() == pytest.approx(dn.SIGMA2_MAX, rel=5 * math.sqrt(2 / n))
    assert abs(x.mean()) < 5 * math.sqrt(dn.SIGMA2_MAX / n)
    assert x.var() != pytest.approx(dn.SIGMA2_MAX * 2 / 3, rel=5 * math.sqrt(2 / n))
    assert (np.abs(x) < 2**30).all()


# ---------------------------------------------------------------------------------------------
# Keys, vmap, jit
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sampler, param", [(dn.discrete_laplace, 3.0), (dn.discrete_gaussian, 9.0)]
)
def test_fixed_key_is_deterministic_and_keys_differ(key, sampler, param):
    a = sampler(same_key(key), (1000,), param)
    b = sampler(same_key(key), (1000,), param)
    c = sampler(jax.random.fold_in(key, 1), (1000,), param)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert (np.asarray(a) != np.asarray(c)).mean() > 0.5


def test_vmap_over_keys_equals_separate_calls(key):
    keys = jax.random.split(key, 3)
    copies = same_key(keys)  # the same keys, to call once more under the key-reuse checker
    batched = jax.vmap(lambda k: dn.discrete_gaussian(k, (1000,), 9.0))(keys)
    for i in range(3):
        single = dn.discrete_gaussian(copies[i], (1000,), 9.0)
        np.testing.assert_array_equal(np.asarray(batched[i]), np.asarray(single))
    assert len({tuple(np.asarray(r[:20])) for r in batched}) == 3


def test_budget_changes_do_not_recompile_and_invalid_traced_budgets_fail_closed(key):
    value = jnp.linspace(-1.0, 1.0, 8)
    lap = counting_jit(lambda k, eps: dn.secure_laplace_mechanism(k, value, 0.5, eps, 2.0**-4))
    gau = counting_jit(lambda k, rho: dn.secure_gaussian_mechanism(k, value, 0.5, rho, 2.0**-4))
    keys = jax.random.split(key, 11)
    for i, budget in enumerate([0.5, 2.0, jnp.inf]):
        out, info = lap(keys[i], jnp.float32(budget))
        assert np.isfinite(np.asarray(out)).all() and info.kind == "discrete_laplace"
        out, info = gau(keys[3 + i], jnp.float32(budget))
        assert np.isfinite(np.asarray(out)).all() and info.kind == "discrete_gaussian"
    # a traced budget cannot raise: the release is NaN (and so is the reported noise)
    for i, budget in enumerate([-1.0, 0.0, np.nan, 1e-9]):
        out, info = (lap if i % 2 else gau)(keys[6 + i], jnp.float32(budget))
        assert np.isnan(np.asarray(out)).all() and np.isnan(np.asarray(info.noise))
    assert compile_count(lap) == 1
    assert compile_count(gau) == 1
    # a traced out-of-range sampler parameter gives the SENTINEL draw, never a valid sample
    draws = _vmapped("laplace")(jax.random.split(keys[10], N_KEYS), jnp.float32(2.0**21))
    assert (np.asarray(draws) == dn.SENTINEL).all()


# ---------------------------------------------------------------------------------------------
# Grid rounding and the integer sensitivity
# ---------------------------------------------------------------------------------------------


def _k(x, grid):
    return np.asarray(dn.to_grid(jnp.asarray(x, jnp.float32), grid), np.int64)


def test_to_grid_rounds_half_up_exactly():
    g = 2.0**-2
    x = np.array([-0.375, -0.125, 0.0, 0.125, 0.124999, 0.375, 1e9, -1e9, np.nan], np.float32)
    np.testing.assert_array_equal(
        _k(x, g), [-1, 0, 0, 1, 0, 2, 2**30, -(2**30), 0]
    )  # -1.5 -> -1, -0.5 -> 0, 0.5 -> 1: half-up
    # host float64 input is rounded in float64, not after a float32 conversion
    half_64 = 0.125 - 2.0**-40  # rounds to 0; float32(half_64) == 0.125 would round to 1
    assert int(np.asarray(dn.to_grid(np.float64(half_64), g))) == 0
    assert int(np.asarray(dn.to_grid(np.float32(half_64), g))) == 1


@pytest.mark.parametrize("s_over_grid", [2.0, 1.5, 0.25])
def test_rounded_scalar_query_sensitivity_on_adversarial_neighbours(s_over_grid):
    g = 2.0**-3
    sens = s_over_grid * g
    bound = dn.integer_sensitivity_l1(sens, g, 1)
    assert bound == math.ceil(s_over_grid)
    assert dn.integer_sensitivity_l2_sq(sens, g, 1) == bound**2
    eta = 2.0**-12
    # a sits at, just below and just above grid half-points and grid points; b = a - sens
    base = (np.arange(-20, 20) * g)[:, None] + np.array([0.5 * g, 0.0])[None, :]
    a = (base.ravel()[:, None] + np.array([-eta, 0.0, eta])[None, :]).ravel()
    for b in (a - sens, a + sens, a - sens + eta, a - sens / 2):
        diff = np.abs(_k(a, g) - _k(b, g))
        assert diff.max() <= bound
    worst = np.abs(_k(a, g) - _k(a - sens, g)).max()
    assert worst == bound  # attained: a smaller declared sensitivity would be violated
    if s_over_grid == math.floor(s_over_grid):
        # at a half-point, |a - b| = 2 grid moves the rounded query by exactly 2, never 3
        assert (_k(a, g) - _k(a - sens, g) <= bound).all()


def test_rounded_vector_query_l1_and_l2_bounds_on_adversarial_neighbours():
    g, d = 2.0**-3, 4
    eta = 2.0**-12
    rng = np.random.default_rng(0)
    half = (np.arange(d) * 3 + 0.5) * g  # grid half-points (round up)

    # l1: one coordinate moves S1 - (d-1) eta, the others eta, all across half-points
    s1 = 2.0
    bound1 = dn.integer_sensitivity_l1(s1 * g, g, d)
    assert bound1 == math.ceil(s1) + d - 1 == 5
    a = half.copy()
    b = half - np.array([s1 * g - (d - 1) * eta] + [eta] * (d - 1))
    assert np.abs(a - b).sum() <= s1 * g
    assert np.abs(_k(a, g) - _k(b, g)).sum() == bound1  # tight

    # l2: S2 = 2, d = 4: the bound floor((S2 + sqrt d)^2) = 16; the pattern (2, 2, 2, 1) gives 13,
    # above the naive S2^2 = 4 that ignores rounding
    s2 = 2.0
    bound2 = dn.integer_sensitivity_l2_sq(s2 * g, g, d)
    assert bound2 == 16
    step = np.array([1.0 + eta, 1.0 + eta, 1.0 + eta, eta]) * g
    a, b = half, half - step
    assert np.sqrt(((a - b) ** 2).sum()) <= s2 * g
    moved = ((_k(a, g) - _k(b, g)) ** 2).sum()
    assert moved == 13 and moved > s2**2

    # random adversarial pairs at and around half-points: neither bound is ever exceeded
    n = 20_000
    a = half + rng.choice([-eta, 0.0, eta], (n, d)) + rng.integers(-5, 5, (n, d)) * g
    direction = rng.normal(size=(n, d))
    b1 = a - s1 * g * direction / np.abs(direction).sum(axis=1, keepdims=True)
    b2 = a - s2 * g * direction / np.sqrt((direction**2).sum(axis=1, keepdims=True))
    ka = _k(a, g)
    assert np.abs(ka - _k(b1, g)).sum(axis=1).max() <= bound1
    assert ((ka - _k(b2, g)) ** 2).sum(axis=1).max() <= bound2


def test_integer_sensitivity_closed_forms():
    assert dn.integer_sensitivity_l1(0.3, 2.0**-4, 1) == math.ceil(0.3 * 16)
    assert dn.integer_sensitivity_l1(1.0, 0.25, 10) == 4 + 9
    assert dn.integer_sensitivity_l2_sq(0.3, 2.0**-4, 1) == math.ceil(0.3 * 16) ** 2
    for s, d in [(0.5, 2), (1.3, 7), (3.0, 9), (0.01, 100)]:
        g = 2.0**-5
        exact = (Fraction(s) / Fraction(g) + Fraction(math.sqrt(d))) ** 2  # sqrt(9) exact
        got = dn.integer_sensitivity_l2_sq(s, g, d)
        assert got <= exact < got + 1 + 1e-9


# ---------------------------------------------------------------------------------------------
# Calibration and mechanisms
# ---------------------------------------------------------------------------------------------


def test_calibration_matches_closed_forms_and_rounds_up():
    for delta, eps in [(3, 0.5), (7, 0.1), (1, 1e-3), (100, 3.0)]:
        t = float(dn.discrete_laplace_calibration(delta, eps))
        assert Fraction(t) >= Fraction(delta) / Fraction(eps)  # t >= Delta / epsilon exactly
        assert t == pytest.approx(delta / eps, rel=2**-21)
        info = dn.SecureNoise("discrete_laplace", delta, jnp.float32(t), 1.0)
        assert info.guarantee() <= eps
    for delta_sq, rho in [(4, 0.5), (13, 0.01), (1, 2.0)]:
        s2 = float(dn.discrete_gaussian_calibration(delta_sq, rho))
        assert Fraction(s2) >= Fraction(delta_sq) / (2 * Fraction(rho))
        assert s2 == pytest.approx(delta_sq / (2 * rho), rel=2**-18)
        assert s2 == float(dn.gaussian_sigma2_used(s2))  # exactly what the sampler uses
        info = dn.SecureNoise("discrete_gaussian", delta_sq, jnp.float32(s2), 1.0)
        assert info.guarantee() <= rho
    assert float(dn.discrete_laplace_calibration(3, jnp.inf)) == 0.0
    assert float(dn.discrete_gaussian_calibration(3, jnp.inf)) == 0.0
    # tiny noise parameters are raised to the samplers' minimum (more noise, still private)
    assert float(dn.discrete_laplace_calibration(1, 1e6)) == dn.T_MIN
    assert float(dn.discrete_gaussian_calibration(1, 1e6)) == dn.SIGMA2_MIN


def test_budget_inf_releases_exactly_the_rounded_value(key):
    g = 2.0**-6
    edge = jnp.array([0.1234, -3.21, 17.0, 0.5 * g, -0.5 * g, 1.5 * g], jnp.float32)
    value = jnp.concatenate([edge, jax.random.normal(jax.random.key(7), (994,))])
    expected = _k(value, g).astype(np.float32) * np.float32(g)
    k1, k2 = jax.random.split(key)
    out, info = dn.secure_laplace_mechanism(k1, value, 1.0, jnp.inf, g)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert float(info.noise) == 0.0 and info.guarantee() == math.inf
    out, info = dn.secure_gaussian_mechanism(k2, value, 1.0, float("inf"), g)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert float(info.noise) == 0.0


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_mechanism_noise_is_the_calibrated_integer_noise(key, kind):
    g, sens, n = 2.0**-3, 0.25, 20_000
    value = jnp.array([0.3], jnp.float32)  # one coordinate: Delta^Z = ceil(0.25 / g) = 2
    if kind == "laplace":
        mech = lambda k: dn.secure_laplace_mechanism(k, value, sens, 0.8, g)
    else:
        mech = lambda k: dn.secure_gaussian_mechanism(k, value, sens, 0.3, g)
    out, info = jax.jit(jax.vmap(mech), compiler_options=_OPTIMISED)(jax.random.split(key, n))
    z = (np.asarray(out)[:, 0] / g - _k(value, g)[0]).astype(np.float64)
    assert (z == np.round(z)).all()  # the release lies on the grid, offset by integer noise
    noise = float(np.asarray(info.noise)[0])
    if kind == "laplace":
        assert info.sensitivity == 2 and noise == pytest.approx(2 / 0.8, rel=2**-21)
    else:
        assert info.sensitivity == 4 and noise == pytest.approx(4 / (2 * 0.3), rel=2**-18)
    z = z.astype(np.int64)
    assert _chi2_pvalue(z, _pmf(kind, noise)) > PASS_P
    for factor in (2 / 3, 3 / 2):
        assert _chi2_pvalue(z, _pmf(kind, noise * factor)) < FAIL_P


def test_host_validation_names_the_parameter(key):
    value = jnp.zeros(3)
    cases = [
        (lambda: dn.secure_laplace_mechanism(key, value, 1.0, 0.0, 1.0), "epsilon"),
        (lambda: dn.secure_laplace_mechanism(key, value, 1.0, -1.0, 1.0), "epsilon"),
        (lambda: dn.secure_laplace_mechanism(key, value, 1.0, float("nan"), 1.0), "epsilon"),
        (lambda: dn.secure_laplace_mechanism(key, value, 1.0, 1e-9, 1.0), "epsilon"),
        (lambda: dn.secure_gaussian_mechanism(key, value, 1.0, 0.0, 1.0), "rho"),
        (lambda: dn.secure_gaussian_mechanism(key, value, 1.0, 1e-15, 1.0), "rho"),
        (lambda: dn.secure_laplace_mechanism(key, value, 1.0, 1.0, 0.3), "grid"),
        (lambda: dn.secure_laplace_mechanism(key, value, 1.0, 1.0, 0.0), "grid"),
        (lambda: dn.secure_gaussian_mechanism(key, value, 0.0, 1.0, 1.0), "sensitivity_l2"),
        (lambda: dn.secure_laplace_mechanism(key, value, -1.0, 1.0, 1.0), "sensitivity_l1"),
        (lambda: dn.secure_laplace_mechanism(key, value, 1e6, 1.0, 2.0**-10), "grid"),
        (lambda: dn.discrete_laplace(key, (3,), 2.0**21), "t"),
        (lambda: dn.discrete_laplace(key, (3,), 0.0), "t"),
        (lambda: dn.discrete_gaussian(key, (3,), 2.0**-11), "sigma2"),
        (lambda: dn.discrete_gaussian(key, (3,), 2.0**41), "sigma2"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()
    with pytest.raises(TypeError, match="sensitivity_l1"):
        jax.jit(lambda s: dn.secure_laplace_mechanism(key, value, s, 1.0, 1.0))(1.0)


def test_secure_releases_enter_the_ledger_as_privacy_events(key):
    """The release's SecureNoise maps to a privacy event whose ledger guarantee is the exact one
    (eps = Delta_1 / t; rho = Delta_2^2 / (2 sigma^2)), composable with every other release."""
    from dpjax.accounting import Ledger, Release
    from dpjax.mechanisms import secure_event

    k1, k2 = jax.random.split(key)
    _, lap = dn.secure_laplace_mechanism(k1, jnp.zeros(3), 1.0, 0.5, 2.0**-4)
    _, gau = dn.secure_gaussian_mechanism(k2, jnp.zeros(3), 1.0, 0.2, 2.0**-4)
    r_lap = Release.from_event(secure_event(lap), "mean")
    r_gau = Release.from_event(secure_event(gau), "mean")
    assert r_lap.delivered().epsilon == pytest.approx(lap.guarantee(), rel=1e-6)
    assert r_lap.delivered().epsilon <= 0.5 * (1 + 1e-6)
    assert r_gau.delivered().rho == pytest.approx(gau.guarantee(), rel=1e-6)
    led = Ledger.build("toy", [r_lap, r_gau], "zcdp", delta=1e-6)
    assert led.guarantee.rho == pytest.approx(0.5 * lap.guarantee() ** 2 + gau.guarantee(),
                                              rel=1e-6)


# ---- the noise factor of a secure fit ----------------------------------------------------------


@pytest.mark.parametrize("kind, budget, power", [("discrete_laplace", 0.8, 1),
                                                 ("discrete_gaussian", 0.3, 2)])
def test_noise_factor_widens_the_parameter_never_below_the_exact_product(key, kind, budget,
                                                                         power):
    g, sens, size = 2.0**-5, 0.7, 3
    base = dn.secure_noise_parameters(kind, size, sens, budget, g)
    for factor in (0.62, 1.0, 1.0813, 1.5, 3.7):  # below 1 too: the plan solves both ways
        sn = dn.secure_noise_parameters(kind, size, sens, budget, g, noise_factor=factor)
        exact = Fraction(float(base.noise)) * Fraction(factor) ** power
        assert Fraction(float(sn.noise)) >= exact  # never less noise than kappa times
        assert float(sn.noise) == pytest.approx(float(exact), rel=2**-18)
        assert sn.sensitivity == base.sensitivity
        # the guarantee read off the parameter used: the budget shrinks by kappa (squared)
        assert sn.guarantee() <= budget / factor**power * (1 + 1e-6)
    # the mechanism uses exactly the planned parameter
    mech = dn.secure_laplace_mechanism if kind == "discrete_laplace" else \
        dn.secure_gaussian_mechanism
    _, info = mech(key, jnp.zeros(size), sens, budget, g, noise_factor=1.0813)
    planned = dn.secure_noise_parameters(kind, size, sens, budget, g, noise_factor=1.0813)
    assert float(info.noise) == float(planned.noise)


def test_noise_factor_is_checked():
    for bad in (0.0, float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="noise_factor"):
            dn.secure_noise_parameters("discrete_gaussian", 3, 1.0, 0.5, 1.0, noise_factor=bad)
    with pytest.raises(ValueError, match="2\\^40; use a coarser grid"):  # beyond the range
        dn.secure_noise_parameters("discrete_gaussian", 1, 1.0, 1e-3, 2.0**-10,
                                   noise_factor=2.0**12)
    with pytest.raises(ValueError, match="kind"):
        dn.secure_noise_parameters("gaussian", 3, 1.0, 0.5, 1.0)


# ---------------------------------------------------------------------------------------------
# The batched host sampler (discrete_gaussian_batch): same law, exact comparisons
# ---------------------------------------------------------------------------------------------


@functools.cache
def _batch_draws(sigma2: float, size: int = N_KEYS * PER_KEY) -> np.ndarray:
    return dn.discrete_gaussian_batch(jax.random.key(20261128 + round(10 * sigma2)), (size,),
                                      sigma2)


@pytest.mark.parametrize("sigma2", [0.7, 4.0, 30.0, 700.0])
def test_batched_discrete_gaussian_matches_exact_pmf_with_power(sigma2):
    used = float(dn.gaussian_sigma2_used(sigma2))
    x = _batch_draws(sigma2)
    assert x.dtype == np.int64 and x.shape == (N_KEYS * PER_KEY,)
    p_right = _chi2_pvalue(x, _pmf("gaussian", used))
    assert p_right > PASS_P, f"N_Z(0, {used}) rejected, p = {p_right:g}"
    for factor in (2 / 3, 3 / 2):
        p_wrong = _chi2_pvalue(x, _pmf("gaussian", used * factor))
        assert p_wrong < FAIL_P, f"N_Z(0, {used * factor:g}) not rejected, p = {p_wrong:g}"
    assert _moments_ok(x, _pmf("gaussian", used))
    assert not any(_moments_ok(x, _pmf("gaussian", used * f)) for f in (2 / 3, 3 / 2))


@pytest.mark.parametrize("sigma2", [0.7, 30.0])
def test_batched_sampler_exact_path_alone_matches_the_pmf(monkeypatch, sigma2):
    """With the float64 shortcut turned off every comparison runs in exact rational
    arithmetic (the path the shortcut defers to near a boundary): the same law, with power."""
    monkeypatch.setattr(dn, "_FLOAT_EXP_OK", [False])
    used = float(dn.gaussian_sigma2_used(sigma2))
    x = dn.discrete_gaussian_batch(jax.random.key(7), (6000,), sigma2)
    assert _chi2_pvalue(x, _pmf("gaussian", used)) > PASS_P
    for factor in (1 / 3, 3):
        assert _chi2_pvalue(x, _pmf("gaussian", used * factor)) < FAIL_P
    # the two paths agree draw for draw when the float path is certain: same words, same U
    monkeypatch.setattr(dn, "_FLOAT_EXP_OK", [True])
    assert np.array_equal(dn.discrete_gaussian_batch(jax.random.key(7), (6000,), sigma2), x)


def test_geometric_proposal_and_exact_bernoulli():
    """``_geometric``: P(G = g) ∝ exp(-g/t), against 2/3 and 3/2 of t; the exact comparison
    ``U < exp(-gamma)`` holds with probability exp(-gamma) (binomial, 5 s.e.)."""
    gen = dn._host_generator(jax.random.key(3))
    t = 7
    g = dn._geometric(gen, dn._u53(dn._words64(gen, 100_000)), t, 10**6)
    wide = np.arange(0, 2000)
    for scale, good in ((t, True), (t * 2 / 3, False), (t * 1.5, False)):
        pmf = np.exp(-wide / scale)
        pmf /= pmf.sum()
        expected = g.size * pmf
        keep = expected >= 5
        obs = np.bincount(np.minimum(g, wide[keep][-1]), minlength=keep.sum())[:keep.sum()]
        exp_ = expected[keep].copy()
        exp_[-1] += expected[~keep].sum()
        p = stats.chisquare(obs, exp_ * g.size / exp_.sum()).pvalue
        assert (p > PASS_P) if good else (p < FAIL_P), (scale, p)
    for gamma in (Fraction(0), Fraction(1, 3), Fraction(5, 2)):
        hits = sum(dn._LazyUniform(gen, int(u)).less_exp(gamma)
                   for u in dn._u53(dn._words64(gen, 4000)))
        p = math.exp(-gamma)
        assert abs(hits - 4000 * p) <= 5 * math.sqrt(4000 * p * (1 - p)) + 1e-9


def test_exp_bounds_bracket_and_decide_near_the_boundary():
    for gamma in (Fraction(0), Fraction(1, 7), Fraction(1), Fraction(123, 4), Fraction(700)):
        lo, hi = dn._exp_neg_bounds(gamma, 80)
        assert 0 < lo <= hi and hi - lo <= hi * Fraction(1, 2**78)
        assert float(lo) <= math.exp(-gamma) * (1 + 1e-15) and math.exp(-gamma) <= float(hi) * (
            1 + 1e-15)
    # u just below / above the 53-bit image of exp(-1): only the exact path can tell
    lo, hi = dn._exp_neg_bounds(Fraction(1), 200)
    edge = math.floor(lo * 2**53)
    gen = dn._host_generator(jax.random.key(0))
    assert dn._LazyUniform(gen, edge - 1).less_exp(Fraction(1))
    assert not dn._LazyUniform(gen, edge + 1).less_exp(Fraction(1))
    u = np.array([edge - 1, edge, edge + 1], np.float64)
    lo_t, hi_t = dn._bounds_table(np.ones(3))
    assert ((u + 1 <= lo_t) | (u >= hi_t)).sum() == 0  # the float path defers all three


def test_batched_sampler_is_keyed_and_checked(key):
    a = dn.discrete_gaussian_batch(same_key(key), (3, 4), 9.0)
    assert a.shape == (3, 4)
    assert np.array_equal(a, dn.discrete_gaussian_batch(same_key(key), (3, 4), 9.0))
    assert not np.array_equal(a, dn.discrete_gaussian_batch(jax.random.fold_in(key, 1), (3, 4),
                                                            9.0))
    with pytest.raises(ValueError, match="sigma2 must lie in"):
        dn.discrete_gaussian_batch(key, (3,), 2.0**41)


def test_secure_gaussian_rows_release_each_row_on_the_grid(key):
    """Each row is grid * (to_grid(row) + Z) with the row's own noise: the integer residuals
    are integers whose spread is the discrete Gaussian's, rows independent."""
    rows = np.linspace(-3, 3, 40 * 5000, dtype=np.float32).reshape(5000, 40)
    noise = dn.secure_noise_parameters("discrete_gaussian", 40, 1.0, 0.5, 2.0**-4)
    out = np.asarray(dn.secure_gaussian_rows(same_key(key), rows, noise))
    z = out / noise.grid - np.asarray(dn.to_grid(rows, noise.grid))
    assert np.array_equal(z, np.round(z))
    used = float(noise.noise)
    assert _moments_ok(z.ravel().astype(np.int64), _pmf("gaussian", used))
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < 5 / math.sqrt(5000)
    inf = dn.secure_noise_parameters("discrete_gaussian", 40, 1.0, math.inf, 2.0**-4)
    assert np.array_equal(np.asarray(dn.secure_gaussian_rows(same_key(key), rows, inf)),
                          np.asarray(dn.to_grid(rows, 2.0**-4)) * 2.0**-4)
