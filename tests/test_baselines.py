"""The standard baselines (dpjax.algorithms.baselines): AdaSSP, objective perturbation and the
bounded mean -- sensitivities on adversarial neighbours, noise scales with power, the
epsilon = inf limits against scikit-learn and numpy, the minimiser of objective perturbation,
determinism, no recompile, ledgers, registry entries, bad inputs and the family page's
example."""

from __future__ import annotations

import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

from dpjax import Accountant, base, registry
from dpjax.accounting import PrivacyBudgetError
from dpjax.algorithms import baselines as B
from tests.helpers import FAIL_P, PASS_P, assert_scale_with_power, compile_count, same_key

ROOT = Path(__file__).resolve().parents[1]


def _linear(n=500, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    y = np.clip(x @ np.full(d, 1 / np.sqrt(d)) + rng.normal(size=n), -3, 3).astype(np.float32)
    return x, y


def _logistic(n=500, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    p = 1 / (1 + np.exp(-2 * x @ np.full(d, 1 / np.sqrt(d))))
    return x, (rng.uniform(size=n) < p).astype(np.float32)


def _gaussian_sigma(sens, eps, delta):
    """sigma of the analytic Gaussian mechanism, solved here with scipy (independent of the
    library): the largest mu with Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) <= delta."""
    def gap(mu):
        return (stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps)
                * stats.norm.cdf(-mu / 2 - eps / mu) - delta)
    return sens / optimize.brentq(gap, 1e-6, 100.0, xtol=1e-14)


# --------------------------------------------------------------------------------------------
# Sensitivity on adversarial neighbours
# --------------------------------------------------------------------------------------------

EXTREME_ROWS = [np.array([1e30, 0, 0]), np.array([0, -1e30, 0]), np.array([np.inf, 1, -1]),
                np.array([np.nan, 5, 5]), np.array([3.0, 4.0, 0.0]), np.zeros(3)]


def test_adassp_statistics_move_by_at_most_their_sensitivities():
    x, y = _linear(50, 3)
    hp = B.AdaSSPHyperparams(*map(jnp.float32, (1.0, 1e-3, 1.5, 2.0, 0.05)))
    base_stats = B._adassp_stats(jnp.asarray(x), jnp.asarray(y), hp)
    worst = np.zeros(3)
    for i, row in enumerate(EXTREME_ROWS):
        for y_new in (1e30, -np.inf, 0.0, 2.0):
            x2, y2 = x.copy(), y.copy()
            x2[7], y2[7] = row, y_new
            # and the other side of the pair: a different extreme record in the same row
            x3, y3 = x.copy(), y.copy()
            x3[7], y3[7] = EXTREME_ROWS[(i + 1) % len(EXTREME_ROWS)], -np.sign(y_new) * 3.0
            for xa, ya, xb, yb in ((x, y, x2, y2), (x2, y2, x3, y3)):
                sa = B._adassp_stats(jnp.asarray(xa), jnp.asarray(ya), hp)
                sb = B._adassp_stats(jnp.asarray(xb), jnp.asarray(yb), hp)
                for j, (a, b) in enumerate(zip(sa, sb)):
                    moved = float(np.linalg.norm(np.atleast_1d(np.asarray(a.value, np.float64)
                                                               - np.asarray(b.value))))
                    assert moved <= float(a.sensitivity) * (1 + 1e-5), (j, moved)
                    worst[j] = max(worst[j], moved / float(a.sensitivity))
    declared = [float(s.sensitivity) for s in base_stats]
    assert declared == pytest.approx([1.5**2, math.sqrt(2) * 1.5**2, 2 * 1.5 * 2.0])
    # the bounds are attained: orthogonal records for X^T X, opposite ones for X^T y
    assert worst[1] > 0.99
    x2, x3 = x.copy(), x.copy()
    x2[7], x3[7] = [1e30, 0, 0], [-1e30, 0, 0]
    y2 = y.copy()
    y2[7] = 1e30
    a = B._adassp_stats(jnp.asarray(x2), jnp.asarray(y2), hp)[2].value
    b = B._adassp_stats(jnp.asarray(x3), jnp.asarray(y2), hp)[2].value
    assert float(np.linalg.norm(np.asarray(a) - np.asarray(b))) == pytest.approx(declared[2])


@pytest.mark.parametrize("d", [1, 3])
def test_ssp_laplace_statistics_move_by_at_most_their_l1_sensitivities(d):
    """The l1 sensitivities of the Laplace SSP: (d + 1) X^2 for the upper triangle of X^T X
    (X^2 at d = 1, attained) and 2 sqrt(d) X Y for X^T y (attained), on adversarial
    neighbours."""
    x, y = _linear(50, d)
    xb, yb = 1.5, 2.0
    hp = B.SSPLaplaceHyperparams(*map(jnp.float32, (1.0, xb, yb)))
    declared = [float(s.sensitivity) for s in B._ssp_laplace_stats(jnp.asarray(x),
                                                                     jnp.asarray(y), hp)]
    assert declared == pytest.approx([xb**2 * (1 if d == 1 else d + 1),
                                      2 * math.sqrt(d) * xb * yb])
    rows = [np.resize(r, d) for r in EXTREME_ROWS] + [np.full(d, 1e30), np.full(d, -1e30),
                                                      np.array([(-1) ** i * 1e30
                                                                for i in range(d)])]
    worst = np.zeros(2)
    for i, row in enumerate(rows):
        for y_new in (1e30, -np.inf, 0.0, 2.0):
            x2, y2 = x.copy(), y.copy()
            x2[7], y2[7] = row, y_new
            x3, y3 = x.copy(), y.copy()
            x3[7], y3[7] = rows[(i + 1) % len(rows)], -np.sign(y_new) * 3.0
            x4, y4 = x2.copy(), y2.copy()
            y4[7] = -y_new
            for xa, ya, xb_, yb_ in ((x, y, x2, y2), (x2, y2, x3, y3), (x2, y2, x4, y4)):
                sa = B._ssp_laplace_stats(jnp.asarray(xa), jnp.asarray(ya), hp)
                sb = B._ssp_laplace_stats(jnp.asarray(xb_), jnp.asarray(yb_), hp)
                for j, (a, b) in enumerate(zip(sa, sb)):
                    moved = float(np.sum(np.abs(np.asarray(a.value, np.float64)
                                                - np.asarray(b.value))))
                    assert moved <= declared[j] * (1 + 1e-5), (j, moved)
                    worst[j] = max(worst[j], moved / declared[j])
    assert worst[1] > 0.99  # x = x' with equal entries, y = -y' = Y
    if d == 1:
        assert worst[0] > 0.99  # x^2 = X^2 against 0


def test_objective_perturbation_gradient_difference_is_at_most_2_x_bound():
    """The noise is calibrated from the l2 sensitivity 2 X of the summed gradient: at any beta
    the two neighbours' gradients (what b must absorb) differ by at most 2 X, and one
    record's Hessian is at most c X^2 (the Jacobian term)."""
    xb = 1.5
    rng = np.random.default_rng(1)
    for row_a in EXTREME_ROWS:
        for row_b in EXTREME_ROWS:
            for beta in rng.normal(scale=3.0, size=(5, 3)):
                grads, hess = [], []
                for row, lab in ((row_a, 1.0), (row_b, 0.0)):
                    xc = np.asarray(B.clip_l2(jnp.asarray(row[None, :], jnp.float32), xb))[0]
                    s = 1.0 if lab > 0.5 else -1.0
                    p = 1 / (1 + np.exp(s * xc @ beta))
                    grads.append(-s * p * xc)
                    hess.append(p * (1 - p) * np.outer(xc, xc))
                assert np.linalg.norm(grads[0] - grads[1]) <= 2 * xb * (1 + 1e-6)
                assert np.linalg.eigvalsh(hess[0])[-1] <= B.LOGISTIC_SMOOTHNESS * xb**2 + 1e-9
    ev = B._op_noise(jax.random.key(0), 3, jnp.float32(0.5), 0.0, jnp.float32(xb), "pure",
                     jnp.float32)[1]
    assert float(ev.sensitivity) == pytest.approx(2 * xb)


@pytest.mark.parametrize("mechanism", B.MEAN_MECHANISMS)
def test_bounded_mean_moves_by_at_most_its_sensitivity(mechanism):
    lo, hi = np.array([-1.0, 0.0, 2.0]), np.array([1.0, 5.0, 2.5])
    rng = np.random.default_rng(2)
    x = rng.uniform(lo, hi, (40, 3)).astype(np.float32)
    norm = "l1" if mechanism == "laplace" else "l2"
    hp = B.GaussianBoundedMeanHyperparams(*map(jnp.float32, (1.0, 1e-3)), jnp.asarray(lo,
                                          jnp.float32), jnp.asarray(hi, jnp.float32))
    stat = B._box_mean(jnp.asarray(x), hp, norm)
    want = (np.sum(hi - lo) if norm == "l1" else np.linalg.norm(hi - lo)) / 40
    assert float(stat.sensitivity) == pytest.approx(want, rel=1e-6)
    worst = 0.0
    for row in EXTREME_ROWS + [lo - 7, hi + 7]:
        x2 = x.copy()
        x2[3] = row
        x3 = x.copy()
        x3[3] = -np.asarray(row)
        for a, b in ((x, x2), (x2, x3)):
            d = np.asarray(B._box_mean(jnp.asarray(a), hp, norm).value, np.float64) - \
                np.asarray(B._box_mean(jnp.asarray(b), hp, norm).value)
            moved = np.sum(np.abs(d)) if norm == "l1" else np.linalg.norm(d)
            assert moved <= want * (1 + 1e-5)
            worst = max(worst, moved / want)
    assert worst > 0.99  # the opposite corners of the box attain it


# --------------------------------------------------------------------------------------------
# Noise scales, with power
# --------------------------------------------------------------------------------------------


def _many(step, data, hp, reps=3000):
    keys = jax.random.split(jax.random.key(11), reps)
    state = B.BaselineState(jnp.zeros(jax.tree_util.tree_leaves(data)[0].shape[1]))
    return jax.jit(jax.vmap(lambda k: step(k, state, data, hp)))(keys)


def test_adassp_noise_scales_with_power():
    x, y = _linear(200, 3)
    eps, delta, xb, yb = 1.0, 1e-3, 1.5, 2.0
    hp = B.AdaSSPHyperparams(*map(jnp.float32, (eps, delta, xb, yb, 0.05)))
    data = (jnp.asarray(x), jnp.asarray(y))
    _, info = _many(B._adassp_step, data, hp)
    truth = B._adassp_stats(*data, hp)
    # three equal shares of mu^2: release i has mu_i = mu / sqrt(3)
    mu = 1.0 / _gaussian_sigma(1.0, eps, delta)
    for i, sens in enumerate((xb**2, math.sqrt(2) * xb**2, 2 * xb * yb)):
        sigma = sens * math.sqrt(3) / mu
        noise = np.asarray(info.released[i], np.float64) - np.asarray(truth[i].value)
        assert_scale_with_power(noise, "norm", sigma)
        # (the kernel's float32 analytic calibration is conservative: at most ~1e-4 more noise)
        got = float(np.asarray(info.events[i].scale)[0])
        assert sigma <= got * (1 + 1e-6) and got == pytest.approx(sigma, rel=3e-4)


@pytest.mark.parametrize("d", [1, 3])
def test_ssp_laplace_noise_scales_with_power(d):
    """Each release: Laplace(S_i / eps_i) with eps_1 = share(d) eps, eps_2 = eps - eps_1."""
    x, y = _linear(200, d)
    eps, xb, yb = 0.8, 1.5, 2.0
    hp = B.SSPLaplaceHyperparams(*map(jnp.float32, (eps, xb, yb)))
    data = (jnp.asarray(x), jnp.asarray(y))
    _, info = _many(B._ssp_laplace_step, data, hp)
    truth = B._ssp_laplace_stats(*data, hp)
    share = B.ssp_laplace_share(d)
    s1 = xb**2 * (1 if d == 1 else d + 1)
    for i, scale in enumerate((s1 / (share * eps), 2 * math.sqrt(d) * xb * yb
                               / ((1 - share) * eps))):
        noise = np.asarray(info.released[i], np.float64) - np.asarray(truth[i].value)
        assert_scale_with_power(noise, "laplace", scale)


def test_ssp_laplace_share_minimises_its_proxy():
    """The split rule: eps_1 = share eps minimises b_2^2 + r^2 b_1^2 (r = Y / X), checked
    against a grid."""
    for d in (1, 2, 5, 20):
        s1 = 1.0 if d == 1 else d + 1.0  # in units of X^2; S_2 = 2 sqrt(d) X Y, r = Y / X
        grid = np.linspace(0.001, 0.999, 99_901)
        proxy = (2 * math.sqrt(d)) ** 2 / (1 - grid) ** 2 + s1**2 / grid**2
        assert B.ssp_laplace_share(d) == pytest.approx(grid[np.argmin(proxy)], abs=2e-5)


def test_objective_perturbation_gaussian_noise_scale_with_power():
    """b, recovered from the released minimiser (b = -grad of the unperturbed objective), is
    N(0, sigma^2) with sigma = 2 X / mu, mu t + mu^2/2 = eps - log(1 + c X^2 / Gamma)."""
    x, y = _logistic(300, 3)
    eps, delta, xb, lam = 1.0, 1e-4, 1.5, 1 / 300
    hp = B.GaussianObjectivePerturbationHyperparams(*map(jnp.float32, (eps, delta, xb, lam)))
    data = (jnp.asarray(x), jnp.asarray(y))
    state, info = _many(B._make_op_step("gaussian", 20), data, hp, reps=2000)
    gamma = max(300 * lam, 0.25 * xb**2 / math.expm1(eps / 2))
    t = math.sqrt(2 * math.log(1 / delta))
    eps_noise = eps - math.log1p(0.25 * xb**2 / gamma)
    mu = -t + math.sqrt(t * t + 2 * eps_noise)
    b = _recovered_noise(x, y, xb, gamma, np.asarray(state.beta, np.float64))
    assert_scale_with_power(b, "norm", 2 * xb / mu)


def _recovered_noise(x, y, xb, gamma, betas):
    """b = -(sum_i grad l_i(beta) + Gamma beta) at each released beta (exact minimisers)."""
    xc = np.asarray(B.clip_l2(jnp.asarray(x), xb), np.float64)
    s = np.where(y > 0.5, 1.0, -1.0)
    p = 1 / (1 + np.exp(s[None, :] * (betas @ xc.T)))  # (reps, n)
    grad = -(p * s[None, :]) @ xc + gamma * betas
    return -grad


def test_objective_perturbation_pure_noise_norm_and_direction_with_power():
    """Chaudhuri et al.'s noise: ||b|| ~ Gamma(d, 2 X / eps') and a uniform direction."""
    x, y = _logistic(300, 3)
    eps, xb, lam = 1.0, 1.5, 1 / 300
    hp = B.ObjectivePerturbationHyperparams(*map(jnp.float32, (eps, xb, lam)))
    state, _ = _many(B._make_op_step("pure", 20), (jnp.asarray(x), jnp.asarray(y)), hp,
                     reps=3000)
    cx2 = 0.25 * xb**2
    eps_p = eps - 2 * math.log1p(cx2 / (300 * lam))
    gamma = 300 * lam if eps_p > 0 else cx2 / math.expm1(eps / 4)
    eps_p = eps_p if eps_p > 0 else eps / 2
    b = _recovered_noise(x, y, xb, gamma, np.asarray(state.beta, np.float64))
    norms = np.linalg.norm(b, axis=1)
    scale = 2 * xb / eps_p
    assert stats.kstest(norms, "gamma", args=(3, 0, scale)).pvalue > PASS_P
    for f in (2 / 3, 3 / 2):
        assert stats.kstest(norms, "gamma", args=(3, 0, scale * f)).pvalue < FAIL_P
    # a uniform direction in R^3: each coordinate of b / ||b|| is uniform on [-1, 1]
    assert stats.kstest((b / norms[:, None])[:, 0], "uniform", args=(-1, 2)).pvalue > PASS_P


def _tight_terms(n, d, eps, xb, lam):
    """The "tight" rule, written out here: u = eps / (1 + k), k = (4 d (d + 1) / (c X r)^2)^(1/3),
    Gamma = max(n Lambda, c X^2 / u), eps_noise = eps - log(1 + c X^2 / Gamma)."""
    cx2 = 0.25 * xb**2
    k = (4 * d * (d + 1) / (0.25 * xb * 3.0) ** 2) ** (1 / 3)
    gamma = max(n * lam, cx2 / (eps / (1 + k)))
    return gamma, eps - math.log1p(cx2 / gamma)


def test_objective_perturbation_tight_noise_norm_and_direction_with_power():
    """The "tight" variant's noise: ||b|| ~ Gamma(d, 2 X / eps_noise) with eps_noise = eps -
    log(1 + c X^2 / Gamma) (one log-determinant term), and a uniform direction."""
    x, y = _logistic(300, 3)
    eps, xb, lam = 1.0, 1.5, 1 / 300
    hp = B.ObjectivePerturbationHyperparams(*map(jnp.float32, (eps, xb, lam)))
    state, _ = _many(B._make_op_step("tight", 20), (jnp.asarray(x), jnp.asarray(y)), hp,
                     reps=3000)
    gamma, eps_noise = _tight_terms(300, 3, eps, xb, lam)
    assert eps_noise > 0.7  # most of epsilon goes to the noise (Chaudhuri et al.'s rule: 0.5)
    b = _recovered_noise(x, y, xb, gamma, np.asarray(state.beta, np.float64))
    norms = np.linalg.norm(b, axis=1)
    scale = 2 * xb / eps_noise
    assert stats.kstest(norms, "gamma", args=(3, 0, scale)).pvalue > PASS_P
    for f in (2 / 3, 3 / 2):
        assert stats.kstest(norms, "gamma", args=(3, 0, scale * f)).pvalue < FAIL_P
    assert stats.kstest((b / norms[:, None])[:, 1], "uniform", args=(-1, 2)).pvalue > PASS_P


@pytest.mark.parametrize("n, d, lam", [(300, 3, 1 / 300), (10**5, 5, 1e-5), (10**5, 20, 1e-5),
                                       (1000, 5, 0.5)])
def test_objective_perturbation_tight_ledger_has_one_log_term(n, d, lam):
    """The ledger of "tight": epsilon = log(1 + c X^2 / Gamma) + 2 X / scale, the request, with
    the ridge of the stated rule (the user's ridge n Lambda where it is larger); its noise is
    smaller than Chaudhuri et al.'s rule at the same epsilon."""
    x, y = _logistic(n, d, seed=1)
    xb = math.sqrt(d)
    tight = B.fit_objective_perturbation(0, (x, y), epsilon=1.0, x_bound=xb, lam=lam)
    pure = B.fit_objective_perturbation(0, (x, y), epsilon=1.0, x_bound=xb, lam=lam,
                                        variant="pure")
    assert tight.ledger.estimator == "objective-perturbation/tight"
    gamma, eps_noise = _tight_terms(n, d, 1.0, xb, lam)
    (rel,) = tight.ledger.releases
    assert rel.scale == pytest.approx(2 * xb / eps_noise, rel=1e-5)
    assert tight.ledger.approx_dp.epsilon == pytest.approx(
        math.log1p(0.25 * xb**2 / gamma) + 2 * xb / rel.scale, rel=1e-6)
    assert tight.ledger.approx_dp.epsilon == pytest.approx(1.0, rel=1e-5)
    assert tight.ledger.approx_dp.delta == 0
    assert f"Gamma = {gamma:g}" in tight.ledger.notes[0]
    assert rel.scale < pure.ledger.releases[0].scale


@pytest.mark.parametrize("mechanism", B.MEAN_MECHANISMS)
def test_bounded_mean_noise_scale_with_power(mechanism):
    rng = np.random.default_rng(3)
    lo, hi = np.array([-1.0, 0.0]), np.array([1.0, 3.0])
    x = jnp.asarray(rng.uniform(lo, hi, (100, 2)), jnp.float32)
    eps, delta = 0.7, 1e-4
    lo32, hi32 = jnp.asarray(lo, jnp.float32), jnp.asarray(hi, jnp.float32)
    if mechanism == "laplace":
        hp = B.BoundedMeanHyperparams(jnp.float32(eps), lo32, hi32)
        scale = np.sum(hi - lo) / 100 / eps
    else:
        hp = B.GaussianBoundedMeanHyperparams(jnp.float32(eps), jnp.float32(delta), lo32, hi32)
        scale = _gaussian_sigma(np.linalg.norm(hi - lo) / 100, eps, delta)
    state, _ = _many(B._make_mean_step(mechanism), x, hp)
    noise = np.asarray(state.beta, np.float64) - np.asarray(x, np.float64).mean(0)
    assert_scale_with_power(noise, "laplace" if mechanism == "laplace" else "norm", scale)


# --------------------------------------------------------------------------------------------
# epsilon = inf: the non-private fits (scikit-learn, numpy)
# --------------------------------------------------------------------------------------------


def test_adassp_at_infinite_epsilon_is_least_squares():
    from sklearn.linear_model import LinearRegression

    x, y = _linear(400, 5)
    res = B.fit_adassp(0, (x, y), epsilon=math.inf, x_bound=math.sqrt(5), y_bound=3.0)
    ref = LinearRegression(fit_intercept=False).fit(x.astype(np.float64), y).coef_
    np.testing.assert_allclose(res.estimate, ref, rtol=1e-4, atol=1e-5)
    assert not res.ledger.is_private


def test_ssp_laplace_at_infinite_epsilon_is_least_squares():
    from sklearn.linear_model import LinearRegression

    for d in (1, 5):
        x, y = _linear(400, d)
        res = B.fit_ssp_laplace(0, (x, y), epsilon=math.inf, x_bound=math.sqrt(d), y_bound=3.0)
        ref = LinearRegression(fit_intercept=False).fit(x.astype(np.float64), y).coef_
        np.testing.assert_allclose(res.estimate, ref, rtol=1e-4, atol=1e-5)
        assert not res.ledger.is_private


@pytest.mark.parametrize("lam", [None, 0.01])
@pytest.mark.parametrize("variant", [None, "pure"])
def test_objective_perturbation_at_infinite_epsilon_is_logistic_regression(lam, variant):
    from sklearn.linear_model import LogisticRegression

    n = 400
    x, y = _logistic(n, 5)
    res = B.fit_objective_perturbation(0, (x, y), epsilon=math.inf, x_bound=math.sqrt(5),
                                       lam=lam, variant=variant)
    assert not res.ledger.is_private
    c = 1.0 if lam is None else 1.0 / (n * lam)  # sum loss + ||b||^2 / (2 C)
    ref = LogisticRegression(C=c, fit_intercept=False, tol=1e-12, max_iter=10_000).fit(
        x.astype(np.float64), y).coef_[0]
    np.testing.assert_allclose(res.estimate, ref, rtol=2e-4, atol=1e-5)
    # the Gaussian variant at inf: the same fit
    res2 = B.fit_objective_perturbation(0, (x, y), epsilon=math.inf, delta=1e-5,
                                        x_bound=math.sqrt(5), lam=lam)
    np.testing.assert_allclose(res2.estimate, ref, rtol=2e-4, atol=1e-5)


@pytest.mark.parametrize("mechanism", B.MEAN_MECHANISMS)
def test_bounded_mean_at_infinite_epsilon_is_the_clipped_mean(mechanism):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    res = B.fit_bounded_mean(0, x, epsilon=math.inf, bounds=(-10.0, 10.0), mechanism=mechanism)
    np.testing.assert_allclose(res.estimate, x.mean(0), rtol=1e-5, atol=1e-6)
    res = B.fit_bounded_mean(0, x, epsilon=math.inf, bounds=([-0.5, -1, -2], [0.5, 1, 2]),
                             mechanism=mechanism)
    want = np.clip(x, [-0.5, -1, -2], [0.5, 1, 2]).mean(0)
    np.testing.assert_allclose(res.estimate, want, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# The minimiser of objective perturbation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, d", [(300, 3), (2000, 5), (10_000, 20)])
def test_newton_reaches_the_minimiser(n, d):
    """The damped Newton scan reaches the minimiser of the perturbed objective to float32
    precision (the guarantee assumes the exact minimiser): its gradient is ~0 and it agrees
    with a float64 minimisation by scipy, at the sizes the tests and docs use, for noise from
    small to large epsilon."""
    x, y = _logistic(n, d, seed=n)
    xb = math.sqrt(d)
    xc = np.asarray(B.clip_l2(jnp.asarray(x), xb), np.float64)
    s = np.where(y > 0.5, 1.0, -1.0)
    rng = np.random.default_rng(d)
    for gamma, b_scale in ((1.0, 0.0), (1.0, 5.0), (30.0, 200.0)):
        b = rng.normal(scale=b_scale, size=d) if b_scale else np.zeros(d)
        beta, gnorm = B._newton(jnp.asarray(xc, jnp.float32), jnp.asarray(s, jnp.float32),
                                jnp.float32(gamma), jnp.asarray(b, jnp.float32),
                                B.NEWTON_STEPS)

        def f(v, gamma=gamma, b=b):
            m = s * (xc @ v)
            return np.sum(np.logaddexp(0, -m)) + 0.5 * gamma * v @ v + b @ v

        def g(v, gamma=gamma, b=b):
            p = 1 / (1 + np.exp(s * (xc @ v)))
            return -(xc.T @ (s * p)) + gamma * v + b

        ref = optimize.minimize(f, np.zeros(d), jac=g, method="BFGS",
                                options={"gtol": 1e-10, "maxiter": 10_000}).x
        np.testing.assert_allclose(np.asarray(beta), ref, rtol=1e-4,
                                   atol=1e-5 * (1 + np.abs(ref).max()))
        # float32 round-off of a sum of n gradients of norm <= X
        assert float(gnorm) <= 1e-5 * n * xb, float(gnorm)


# --------------------------------------------------------------------------------------------
# Determinism, no recompile, ledgers
# --------------------------------------------------------------------------------------------


def _fits():
    xl, yl = _linear(300, 3)
    xg, yg = _logistic(300, 3)
    return {
        "adassp": lambda key, eps: B.fit_adassp(key, (xl, yl), epsilon=eps, x_bound=2.0,
                                                y_bound=3.0),
        "ssp-laplace": lambda key, eps: B.fit_ssp_laplace(key, (xl, yl), epsilon=eps,
                                                          x_bound=2.0, y_bound=3.0),
        "op-tight": lambda key, eps: B.fit_objective_perturbation(key, (xg, yg), epsilon=eps,
                                                                  x_bound=2.0),
        "op-pure": lambda key, eps: B.fit_objective_perturbation(key, (xg, yg), epsilon=eps,
                                                                 x_bound=2.0, variant="pure"),
        "op-gauss": lambda key, eps: B.fit_objective_perturbation(
            key, (xg, yg), epsilon=eps, delta=1e-5, x_bound=2.0),
        "mean-laplace": lambda key, eps: B.fit_bounded_mean(key, xl, epsilon=eps,
                                                            bounds=(-1, 1)),
        "mean-gauss": lambda key, eps: B.fit_bounded_mean(key, xl, epsilon=eps, bounds=(-1, 1),
                                                          mechanism="gaussian"),
    }


@pytest.mark.parametrize("name", list(_fits()))
def test_determinism_under_a_fixed_key_and_no_recompile(name, key):
    fit = _fits()[name]
    a = fit(same_key(key), 1.0).estimate
    before = compile_count(base._fit_run)
    b = fit(same_key(key), 1.0).estimate
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, fit(jax.random.fold_in(key, 1), 1.0).estimate)
    for eps in (0.3, 4.0, math.inf):
        fit(jax.random.fold_in(key, 2), eps)
    assert compile_count(base._fit_run) == before  # new privacy levels: no new program


@pytest.mark.parametrize("name", list(_fits()))
def test_ledgers_deliver_the_request(name):
    for eps in (0.2, 1.0, 8.0):
        led = _fits()[name](0, eps).ledger
        got, req = led.approx_dp, led.requested
        assert got.delta <= req.delta * (1 + 1e-9)
        assert 0.99 * req.epsilon <= got.epsilon <= req.epsilon * (1 + 1e-5), str(led)
        assert led.relation == "replace-one"
    if name.startswith("op"):
        assert "exact minimiser" in led.assumption
        assert led.to_dict()["assumes"] == led.assumption


def test_adassp_ledger_composes_three_gaussians_by_pld():
    led = _fits()["adassp"](0, 1.0).ledger
    assert led.composition == "pld" and len(led.releases) == 3
    mu = math.sqrt(sum((r.noise[0][0] / r.noise[0][1]) ** 2 for r in led.releases))
    want = 1.0 / _gaussian_sigma(1.0, 1.0, led.requested.delta)
    assert mu <= want * (1 + 1e-6) and mu == pytest.approx(want, rel=3e-4)


def test_accountant_refuses_the_fit_that_would_exceed_it():
    acct = Accountant(epsilon=1.5, delta=1e-4)
    xl, _ = _linear(300, 3)
    B.fit_bounded_mean(0, xl, epsilon=1.0, bounds=(-1, 1), accountant=acct)
    with pytest.raises(PrivacyBudgetError):
        B.fit_bounded_mean(1, xl, epsilon=1.0, bounds=(-1, 1), accountant=acct)
    xg, yg = _logistic(300, 3)
    B.fit_objective_perturbation(2, (xg, yg), epsilon=0.4, x_bound=2.0, accountant=acct)
    with pytest.raises(PrivacyBudgetError):
        B.fit_objective_perturbation(3, (xg, yg), epsilon=0.4, x_bound=2.0, accountant=acct)


def test_secure_paths():
    xl, yl = _linear(200, 3)
    res = B.fit_bounded_mean(0, xl, epsilon=1.0, bounds=(-1, 1), secure=True)
    assert "exact discrete noise" in res.ledger.assumption
    assert res.ledger.approx_dp.epsilon <= 1.0 * (1 + 1e-5)
    res = B.fit_adassp(0, (xl, yl), epsilon=1.0, x_bound=2.0, y_bound=3.0, secure=True)
    assert "exact discrete noise" in res.ledger.assumption
    assert res.ledger.approx_dp.epsilon <= 1.0 * (1 + 1e-5)
    res = B.fit_ssp_laplace(0, (xl, yl), epsilon=1.0, x_bound=2.0, y_bound=3.0, secure=True)
    assert "exact discrete noise" in res.ledger.assumption
    assert res.ledger.approx_dp.epsilon == pytest.approx(1.0, rel=1e-5)
    assert res.ledger.approx_dp.delta == 0
    xg, yg = _logistic(200, 3)
    with pytest.raises(ValueError, match="secure=True is not available"):
        B.fit_objective_perturbation(0, (xg, yg), epsilon=1.0, x_bound=2.0, secure=True)


# --------------------------------------------------------------------------------------------
# Registry, bad inputs, docs
# --------------------------------------------------------------------------------------------


def test_registry_entries():
    names = {e.name for e in registry.entries("baselines")}
    assert names == {"baselines/adassp", "baselines/ssp-laplace",
                     "baselines/objective-perturbation/tight",
                     "baselines/objective-perturbation/pure",
                     "baselines/objective-perturbation/gaussian", "baselines/bounded-mean/laplace",
                     "baselines/bounded-mean/gaussian"}
    assert "dpjax.algorithms.baselines" in registry._FAMILIES


def test_bad_inputs_are_refused_in_one_line():
    x, y = _linear(50, 3)
    xg, yg = _logistic(50, 3)
    cases = [
        (lambda: B.fit_adassp(0, (x, y), epsilon=1.0, x_bound=None, y_bound=1.0), "x_bound"),
        (lambda: B.fit_adassp(0, (x, y), epsilon=1.0, x_bound=1.0, y_bound=-1.0), "y_bound"),
        (lambda: B.fit_adassp(0, (x, y), epsilon=1.0, x_bound=1.0, y_bound=1.0, zeta=1.5),
         "zeta"),
        (lambda: B.fit_ssp_laplace(0, (x, y), epsilon=1.0, x_bound=1.0, y_bound=None),
         "y_bound"),
        (lambda: B.fit_ssp_laplace(0, (x, y), epsilon=0.0, x_bound=1.0, y_bound=1.0),
         "epsilon"),
        (lambda: B.fit_objective_perturbation(0, (xg, y), epsilon=1.0, x_bound=1.0), "data.y"),
        (lambda: B.fit_objective_perturbation(0, (xg, yg), epsilon=1.0, x_bound=1.0, lam=-1),
         "lam"),
        (lambda: B.fit_objective_perturbation(0, (xg, yg), epsilon=1.0, delta=1.0,
                                              x_bound=1.0), "delta"),
        (lambda: B.fit_objective_perturbation(0, (xg, yg), epsilon=1.0, delta=1e-5,
                                              x_bound=1.0, variant="tight"), "variant"),
        (lambda: B.fit_objective_perturbation(0, (xg, yg), epsilon=1.0, x_bound=1.0,
                                              variant="gaussian"), "variant"),
        (lambda: B.fit_objective_perturbation(0, (xg, yg), epsilon=1.0, x_bound=1.0,
                                              variant="laplace"), "variant"),
        (lambda: B.fit_bounded_mean(0, x, epsilon=1.0, bounds=(1.0, -1.0)), "lo < hi"),
        (lambda: B.fit_bounded_mean(0, x, epsilon=1.0, bounds=([0, 0], [1, 1])), "bounds"),
        (lambda: B.fit_bounded_mean(0, x, epsilon=1.0, delta=1e-5, bounds=(0, 1)), "delta"),
        (lambda: B.fit_bounded_mean(0, x, epsilon=1.0, bounds=(0, 1), mechanism="exp"),
         "mechanism"),
        (lambda: B.fit_bounded_mean(0, x, epsilon=-1.0, bounds=(0, 1)), "epsilon"),
    ]
    for call, word in cases:
        with pytest.raises((ValueError, TypeError)) as info:
            call()
        msg = str(info.value)
        assert word in msg and "\n" not in msg, msg


def test_on_invalid_clip_takes_any_record():
    x, y = _logistic(100, 3)
    x[0, 0], y[1] = np.nan, 7.0
    res = B.fit_objective_perturbation(0, (x, y), epsilon=1.0, x_bound=2.0, on_invalid="clip")
    assert np.isfinite(res.estimate).all()
    with pytest.raises(ValueError):
        B.fit_objective_perturbation(0, (x, y), epsilon=1.0, x_bound=2.0)


def test_the_family_page_example_runs():
    page = (ROOT / "docs" / "families" / "baselines.md").read_text()
    (code,) = re.findall(r"^<!-- run: baselines -->\n```python\n(.*?)^```$", page,
                         re.MULTILINE | re.DOTALL)
    namespace: dict = {"__name__": "__doc__"}
    exec(compile(code, "docs/families/baselines.md", "exec"), namespace)
    for name in ("lin", "logit", "mean"):
        res = namespace[name]
        assert np.isfinite(res.estimate).all() and res.ledger.is_private


# --------------------------------------------------------------------------------------------
# In a study, beside the papers' methods
# --------------------------------------------------------------------------------------------


def _simulate_linear(key, m, truth):
    kx, ky = jax.random.split(key)
    x = jax.random.uniform(kx, (m, truth.shape[0]), jnp.float32, -1.0, 1.0)
    return x, jnp.clip(x @ truth + jax.random.normal(ky, (m,)), -3.0, 3.0)


def _init_zeros(key, truth):
    del key
    return jnp.zeros_like(truth)


def _record_error(state, truth):
    return {"error": jnp.linalg.norm(state.beta - truth)}


def test_adassp_runs_in_a_study():
    """A study's sweep runs a baseline like any estimator: one program for its levels, the
    error at epsilon = inf (least squares) below that at epsilon = 0.5."""
    from dpjax import sweep

    n, d = 2000, 3
    levels = tuple({"epsilon": e, "delta": 1 / (2 * n), "x_bound": math.sqrt(d),
                    "y_bound": 3.0, "zeta": 0.05} for e in (0.5, math.inf))
    setting = sweep.Setting(
        key="adassp-toy", columns={"method": "adassp", "n": n, "d": d}, estimator=B.adassp(),
        simulate=_simulate_linear, init=_init_zeros, record=_record_error,
        truth=jnp.full(d, 1 / math.sqrt(d), jnp.float32), plan=sweep.DataPlan(1, n),
        hparams_type=B.AdaSSPHyperparams, levels=levels, n=n)
    out = sweep.run_setting(setting, reps=6, seed=0, num_devices=1)
    err = np.asarray(out["error"])[:, :, -1]  # (reps, levels) final errors
    assert np.isfinite(err).all()
    assert err[:, 1].mean() < err[:, 0].mean()


def test_objective_perturbation_ledger_follows_the_branch_the_kernel_took():
    """Chaudhuri et al.'s rule switches at eps' = eps - 2 log(1 + c X^2 / (n Lambda)) = 0; the
    kernel decides in float32, the ledger in float64. At ridges a few ulps around the switch
    the ledger must state the guarantee of the branch actually taken (it read 0.5 for a
    request of 1 when it decided on its own)."""
    n, xb = 300, 1.5
    cx2 = 0.25 * xb * xb
    x, y = _logistic(n, 3)
    data = (jnp.asarray(x), jnp.asarray(y))
    switch = cx2 / math.expm1(0.5) / n  # eps' = 0 at eps = 1
    branches = set()
    for k in range(-3, 4):
        hp = B.ObjectivePerturbationHyperparams(*map(jnp.float32, (1.0, xb,
                                                                   switch * (1 + k * 1e-7))))
        led = base.fit(B.objective_perturbation("pure", 5), 0, data, jnp.zeros(3), hp).ledger
        assert 0.99 <= led.approx_dp.epsilon <= 1 + 1e-5, str(led)
        branches.add(led.releases[0].scale > 100)  # no extra ridge: eps' ~ 0, huge noise
    assert branches == {True, False}  # both branches were taken
