"""Exact peeling for ``secure=True``: the statistic on a public grid, each coordinate selected by
exactly sampled permute-and-flip, the values released with exact discrete Laplace noise, and a
ledger that accounts it by the same composition as the floating-point NoisyHT."""

import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import dpjax
from dpjax import discrete_noise as dn
from dpjax import mechanisms as M
from dpjax import registry
from dpjax.accounting import peeling_epsilon
from dpjax.algorithms import dp_em, dp_glm
from dpjax.mechanisms import peeling
from dpjax.models.glm import GLM, GLMData, sparse_sphere_beta
from dpjax.models.gmm import GaussianMixture


def _pf_probabilities(scores, b, excluded=None):
    """Permute-and-flip's exact output law: coins Bernoulli(exp(-(q* - q_j)/b)) and the first
    success of a uniform order, i.e. a uniform one of the successes (enumerated)."""
    q = np.asarray(scores, float)
    cand = np.ones(q.size, bool) if excluded is None else ~np.asarray(excluded)
    p = np.where(cand, np.exp(-(q[cand].max() - q) / b), 0.0)
    out = np.zeros(q.size)
    for coins in itertools.product([0, 1], repeat=q.size):
        c = np.asarray(coins, bool)
        if not c.any():
            continue
        out += np.prod(np.where(c, p, 1 - p)) * c / c.sum()
    return out


def _chi2_pvalue(counts, probs):
    keep = probs > 0
    assert counts[~keep].sum() == 0
    return stats.chisquare(counts[keep], probs[keep] * counts.sum()).pvalue


# ---- the exact selection ---------------------------------------------------------------------


@pytest.mark.parametrize("factor, ok", [(1.0, True), (2 / 3, False), (1.5, False)])
def test_permute_and_flip_draws_its_exact_probabilities(factor, ok):
    """Chi-square against the exact law at b, with power: the law of b * 2/3 or b * 3/2 (a planted
    epsilon of 3/2 or 2/3 of the true one) is rejected on the same draws."""
    scores, b, n = np.array([0, 2, 3, 5, 4]), 2.0, 30000
    excluded = np.array([False, False, False, False, True])  # an earlier round's pick
    out = dn.permute_and_flip(jax.random.key(0), np.tile(scores, (n, 1)), b, excluded)
    counts = np.bincount(out, minlength=scores.size)
    pvalue = _chi2_pvalue(counts, _pf_probabilities(scores, b * factor, excluded))
    assert (pvalue > 1e-3) if ok else (pvalue < 1e-8), pvalue


def test_the_exact_coin_is_bernoulli_exp_minus_gamma():
    """The exact Bernoulli(exp(-gamma)) for rational gamma below and above 1 (the integer part
    as Bernoulli(exp(-1)) factors): exact binomial tests."""
    words = dn._Words(jax.random.key(1))
    n = 40000
    for num, den in [(0, 7), (1, 3), (7, 3), (5, 1), (11, 4)]:
        hits = int(dn._bernoulli_exp_minus(words, np.full(n, num), den).sum())
        p = math.exp(-num / den)
        if num == 0:
            assert hits == n
            continue
        assert stats.binomtest(hits, n, p).pvalue > 1e-3, (num, den)
        for wrong in (math.exp(-num / den / 1.5), math.exp(-num / den * 1.5)):
            assert stats.binomtest(hits, n, wrong).pvalue < 1e-8, (num, den)


def test_peeling_selection_picks_distinct_coordinates_and_the_top_when_noise_is_tiny(key):
    scores = np.array([3, 900, 10, 700, 800, 0])
    k1, k2 = jax.random.split(key)
    sel = dn.peeling_selection(k1, scores, 3, Fraction(1, 4))  # gaps of >= 100 b: top-3
    np.testing.assert_array_equal(sel, [1, 4, 3])
    sel = dn.peeling_selection(k2, scores, 6, 1e6)  # all of them, each once
    assert sorted(sel.tolist()) == list(range(6))
    with pytest.raises(ValueError, match="s must be an integer in"):
        dn.peeling_selection(key, scores, 7, 1.0)
    with pytest.raises(TypeError, match="scores must be integers"):
        dn.permute_and_flip(key, scores.astype(float), 1.0)


# ---- the mechanism ---------------------------------------------------------------------------


def _stat(value, sensitivity):
    return M.BoundedStatistic(jnp.asarray(value, jnp.float32), sensitivity, "linf")


@pytest.mark.parametrize("factor, ok", [(1.0, True), (2 / 3, False), (1.5, False)])
def test_released_values_carry_discrete_laplace_noise_at_the_calibrated_scale(factor, ok):
    """Every coordinate selected from a zero statistic is grid * Z with Z ~ DLap(b^Z), b^Z the
    smallest float32 >= Delta^Z * peeling_multiplier: the mean |Z| matches DLap(b^Z)'s and not
    that of 2/3 or 3/2 of the scale."""
    d, grid, eps, delta = 1000, 2.0**-3, 400.0, 1e-5
    zs, scales = [], set()
    with M.secure_noise(grid):
        for k in jax.random.split(jax.random.key(2), 2):
            peeled = M.noisy_hard_threshold(k, _stat(np.zeros(d), 1.0), d, eps, delta)
            units = np.asarray(peeled.value, np.float64) / grid
            np.testing.assert_array_equal(units, np.round(units))
            zs.append(units)
            scales.add(float(peeled.event.scale))
    (b,) = scales
    assert peeled.event.kind == "discrete-noisy-ht" and float(peeled.event.sensitivity) == 8
    mult = float(M.peeling_multiplier(d, np.float64(eps), np.float64(delta)))
    assert b == float(dn.peeling_scale_used(8, mult)) and Fraction(b) >= 8 * Fraction(mult)
    assert b < 8 * mult * (1 + 2**-22)
    a = math.exp(-1 / (factor * b))
    mean_abs = 2 * a / (1 - a * a)  # E|Z| of the discrete Laplace
    z = np.concatenate(zs)
    assert bool(abs(np.abs(z).mean() / mean_abs - 1) < 0.06) is ok, (np.abs(z).mean(), mean_abs)


def test_the_rounded_sensitivity_is_never_below_the_true_change():
    """Replace one record by an adversarial one at the clipping bound -- in a clipped mean (the
    record moves from -C to +C: the change is exactly the sensitivity) and in Algorithm 5's
    clipped gradient (a design row from one box corner to the opposite one, the response at
    ``-R``: each coordinate moves by ``(psi'(t) + psi'(-t) + 2 R) sigma_x / n = 3 / n``, 3/4 of
    the bound ``2 (R + 1) sigma_x / n``) -- with public
    offsets that put coordinates near the grid's half-points: the rounded statistic never moves
    by more than the integer sensitivity, and the bound is attained."""
    model = GLM("logistic")
    n, d, C = 50, 6, 0.7
    rng = np.random.default_rng(0)
    worst = {"mean": 0.0, "glm": 0.0}
    for trial in range(40):
        x = rng.uniform(-1.5, 1.5, (n, d)).astype(np.float32)
        y = rng.integers(0, 2, n).astype(np.float32)
        x2, y2 = x.copy(), y.copy()
        corner = np.where(rng.uniform(size=d) < 0.5, -5.0, 5.0)  # clipped to the box
        x[0], x2[0], y[0], y2[0] = corner, -corner, -1.0, -1.0
        beta = jnp.asarray(rng.normal(size=d), jnp.float32)
        pairs = {
            "mean": [M.bounded_mean(M.clip_linf(jnp.asarray(z), C), 2 * C, "linf")
                     for z in (x, x2)],
            "glm": [model.clipped_gradient(beta, GLMData(jnp.asarray(a), jnp.asarray(b)), 1.0,
                                           "linf") for a, b in ((x, y), (x2, y2))],
        }
        for name, (st, st2) in pairs.items():
            sens = float(st.sensitivity)
            grid = peeling._peeling_grid(sens, 1.0) * 2.0 ** (8 * (trial % 2) - trial % 3)
            bound = dn.integer_sensitivity_linf(sens, grid)
            assert bound * grid >= sens
            for shift in rng.uniform(-3, 3, 5):
                k, k2 = (np.asarray(dn.to_grid(np.asarray(t.value, np.float64) + shift, grid),
                                    np.int64) for t in (st, st2))
                move = int(np.abs(k - k2).max())
                assert move <= bound, (name, trial, move, bound)
                worst[name] = max(worst[name], move / bound)
    assert worst["mean"] == 1.0  # attained
    assert worst["glm"] > 0.7
    # crafted: just below a half-point, moved by exactly Delta: ceil(Delta / grid) steps
    grid, sens = 2.0**-4, 0.3
    bound = dn.integer_sensitivity_linf(sens, grid)
    assert bound == math.ceil(Fraction(0.3) / Fraction(grid)) == 5
    x = np.array([0.5 * grid - 2.0**-30])
    k, k2 = dn.to_grid(x, grid), dn.to_grid(x + sens, grid)
    assert int(k2[0] - k[0]) == bound
    assert dn.integer_sensitivity_linf(0.25, 2.0**-2) == 1  # exact ratios stay exact


def test_a_fixed_key_gives_the_same_release():
    v = np.random.default_rng(1).normal(size=40)
    with M.secure_noise():
        a = M.noisy_hard_threshold(jax.random.key(7), _stat(v, 0.05), 5, 2.0, 1e-5)
        b = M.noisy_hard_threshold(jax.random.key(7), _stat(v, 0.05), 5, 2.0, 1e-5)
        c = M.noisy_hard_threshold(jax.random.key(8), _stat(v, 0.05), 5, 2.0, 1e-5)
    np.testing.assert_array_equal(np.asarray(a.value), np.asarray(b.value))
    np.testing.assert_array_equal(np.asarray(a.support), np.asarray(b.support))
    assert not np.array_equal(np.asarray(a.value), np.asarray(c.value))
    assert np.count_nonzero(np.asarray(a.value)) == 5
    assert len(set(np.asarray(a.support).tolist())) == 5


def test_a_grid_the_exact_sampler_cannot_serve_is_refused(key):
    v = np.zeros(10)
    with M.secure_noise(2.0**-40):  # Delta^Z = 2^40: beyond the exact integer range
        with pytest.raises(ValueError, match="grid is too fine"):
            M.noisy_hard_threshold(key, _stat(v, 1.0), 2, 1.0, 1e-5)
    with M.secure_noise(2.0**-20):  # Delta^Z = 2^20 times a multiplier > 1: above 2^20
        with pytest.raises(ValueError, match="above the discrete Laplace's 2\\^20"):
            M.noisy_hard_threshold(key, _stat(v, 1.0), 2, 1.0, 1e-5)


def test_at_epsilon_inf_secure_peeling_is_exact_top_s(key):
    v = np.random.default_rng(2).normal(size=30).astype(np.float32)
    with M.secure_noise():
        peeled = M.noisy_hard_threshold(key, _stat(v, 0.1), 4, jnp.inf, 1e-5)
    top = M.hard_threshold(jnp.asarray(v), 4)
    np.testing.assert_array_equal(np.asarray(peeled.value), np.asarray(top.value))
    np.testing.assert_array_equal(np.asarray(peeled.support), np.asarray(top.support))
    assert float(peeled.event.scale) == 0.0


def test_the_ledger_reads_the_exact_release_as_its_composition():
    """One exact release's epsilon is peeling_epsilon of its integer sensitivity over its
    scale, at most the request, and the same as the floating-point release's (the ratio is
    never larger)."""
    v = np.random.default_rng(3).normal(size=50)
    eps, delta, s, sens = 1.0, 1e-5, 5, 0.02
    with M.secure_noise():
        peeled = M.noisy_hard_threshold(jax.random.key(3), _stat(v, sens), s, eps, delta)
    ev = peeled.event
    ratio = float(ev.true_sensitivity) / float(ev.scale)
    assert Fraction(float(ev.true_sensitivity)) / Fraction(float(ev.scale)) <= \
        1 / Fraction(float(M.peeling_multiplier(s, np.float64(eps), np.float64(delta))))
    led = dpjax.accounting.Ledger.build("x", [dpjax.accounting.Release.from_event(ev, "v")],
                                        "basic")
    assert led.approx_dp.epsilon == pytest.approx(peeling_epsilon(ratio, s, float(ev.delta)))
    assert led.approx_dp.epsilon <= eps * (1 + 1e-5)
    float_ev = M.noisy_hard_threshold(jax.random.key(4), _stat(v, sens), s, eps, delta).event
    float_led = dpjax.accounting.Ledger.build(
        "x", [dpjax.accounting.Release.from_event(float_ev, "v")], "basic")
    assert led.approx_dp.epsilon <= float_led.approx_dp.epsilon * (1 + 1e-5)


# ---- the fits (regression: both raised on secure=True before) --------------------------------


def _check_secure_ledger(res, epsilon, delta):
    led = res.ledger
    assert {r.mechanism for r in led.releases} == {"discrete-noisy-ht"}
    assert any("floating-point-safe path" in note for note in led.notes)
    assert led.approx_dp.epsilon <= epsilon * (1 + 1e-5)
    assert led.approx_dp.delta <= delta * (1 + 1e-5)
    assert np.isfinite(np.asarray(res.estimate)).all()


def test_fit_hd_dp_em_secure_works_and_delivers_the_request():
    gmm = GaussianMixture(0.5)
    data = gmm.simulate(jax.random.key(4), 400, jnp.full(4, 0.6))
    beta0 = np.array([0.5, 0.5, 0.0, 0.0])
    res = dp_em.fit_hd_dp_em(2, data, gmm, s_hat=2, beta0=beta0, epsilon=0.5, secure=True)
    _check_secure_ledger(res, 0.5, 1 / 800)
    assert np.count_nonzero(np.asarray(res.estimate)) == 2
    again = dp_em.fit_hd_dp_em(2, data, gmm, s_hat=2, beta0=beta0, epsilon=0.5, secure=True)
    np.testing.assert_array_equal(np.asarray(res.estimate), np.asarray(again.estimate))
    # epsilon = inf: the non-private truncated EM with exact top-s (no rounding, no noise)
    exact = dp_em.fit_hd_dp_em(2, data, gmm, s_hat=2, beta0=beta0, epsilon=np.inf,
                               secure=True)
    fast = dp_em.fit_hd_dp_em(2, data, gmm, s_hat=2, beta0=beta0, epsilon=np.inf)
    np.testing.assert_allclose(np.asarray(exact.estimate), np.asarray(fast.estimate),
                               rtol=1e-6, atol=1e-7)


def test_fit_sparse_dp_glm_secure_works_and_delivers_the_request():
    model = GLM("logistic")
    beta = sparse_sphere_beta(jax.random.key(5), 8, 2)
    data = model.simulate(jax.random.key(6), 400, jnp.asarray(beta))
    res = dp_glm.fit_sparse_dp_glm(3, data, model, epsilon=1.0, s=2, num_iterations=4,
                                   secure=True)
    _check_secure_ledger(res, 1.0, 1 / 800)
    assert res.ledger.composition == "pld" and res.ledger.releases[0].count == 4
    assert np.count_nonzero(np.asarray(res.estimate)) == 2
    exact = dp_glm.fit_sparse_dp_glm(3, data, model, epsilon=np.inf, s=2, num_iterations=4,
                                     secure=True)
    fast = dp_glm.fit_sparse_dp_glm(3, data, model, epsilon=np.inf, s=2, num_iterations=4)
    np.testing.assert_allclose(np.asarray(exact.estimate), np.asarray(fast.estimate),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["hd-dp-em/gmm", "alg5-noisy-iht/logistic"])
def test_the_registry_examples_fit_securely(name):
    entry = next(e for e in registry.entries() if e.name == name)
    ex = entry.example()
    res = dpjax.fit(entry.build(), 0, ex.data, ex.params0, ex.hparams(1.0), secure=True)
    _, requested = entry.requested(1.0)
    _check_secure_ledger(res, requested, float(ex.hparams(1.0).delta))
