"""The empirical privacy audit: Clopper-Pearson bounds against scipy, soundness and power on
mechanisms with a known epsilon, and the GLM score attack catching a planted under-noising of
Algorithm 1 while staying below the claimed epsilon of the honest estimator."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax import accounting, audit, base
from dpjax.algorithms import dp_glm
from dpjax.models.glm import GLM, GLMData

MODEL = GLM()


def test_clopper_pearson_matches_scipy_exact_intervals():
    for k, n in [(0, 50), (3, 50), (25, 50), (50, 50), (997, 1000)]:
        lo, hi = audit.clopper_pearson(k, n, 0.025)
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert lo == pytest.approx(ci.low, abs=1e-12)
        assert hi == pytest.approx(ci.high, abs=1e-12)
    with pytest.raises(ValueError):
        audit.clopper_pearson(5, 3, 0.05)


def test_bound_is_sound_and_has_power_on_randomized_response():
    """Randomized response with epsilon = 1.5: the bound is below 1.5 and close to it."""
    eps = 1.5
    p = math.exp(eps) / (1 + math.exp(eps))
    rng = np.random.default_rng(0)
    res = audit.epsilon_lower_bound(rng.random(40000) < p, rng.random(40000) < 1 - p, delta=0.0)
    assert res.epsilon_lower <= eps
    assert res.epsilon_lower > 0.85 * eps
    assert res.confidence == 0.95 and res.num_eval == 20000


def test_bound_on_a_gaussian_mechanism_respects_the_exact_curve():
    """N(mu, 1) vs N(0, 1): over repeated audits the bound exceeds the exact epsilon(delta)
    at most at the stated rate (here: never in 20 runs, each failing w.p. <= 5%)."""
    mu, delta = 2.0, 1e-3
    eps_true = accounting.gaussian_epsilon(mu, delta)
    rng = np.random.default_rng(1)
    bounds = [
        audit.epsilon_lower_bound(rng.normal(mu, 1, 4000), rng.normal(0, 1, 4000), delta=delta,
                                  seed=i).epsilon_lower
        for i in range(20)
    ]
    assert max(bounds) <= eps_true
    assert np.mean(bounds) > 0.4 * eps_true  # the simple threshold test has real power


def test_replace_record_builds_the_replace_one_neighbour():
    data = GLMData(jnp.arange(12.0).reshape(6, 2), jnp.arange(6.0))
    nb = audit.replace_record(data, 2, GLMData(jnp.array([-1.0, -2.0]), jnp.array(9.0)))
    np.testing.assert_array_equal(np.asarray(nb.x)[2], [-1.0, -2.0])
    assert float(nb.y[2]) == 9.0
    diff = np.asarray(nb.x) != np.asarray(data.x)
    assert diff.sum() == 2 and diff[2].all()


def _adversarial_pair(n=20, d=2):
    """A data set whose record 0 sits on the boundary of the l2 design ball with y = -R, and
    its neighbour with the mirrored record: the gradient gap is 3/4 of the bound at beta = 0."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    y = (rng.uniform(size=n) < 0.5).astype(np.float32)
    r = math.sqrt(d)
    x[0], y[0] = [r, 0.0], -1.0
    data_in = GLMData(jnp.asarray(x), jnp.asarray(y))
    data_out = audit.replace_record(data_in, 0, GLMData(jnp.asarray([-r, 0.0]), jnp.asarray(-1.0)))
    stat = audit.glm_score_statistic(MODEL, jnp.zeros(d), x[0], y[0])
    return data_in, data_out, stat


def _audit(T, calibration, b_constant, eps, key, n=20, d=2, delta=1e-3):
    data_in, data_out, stat = _adversarial_pair(n, d)
    est = dp_glm.noisy_gd(MODEL, T, calibration, b_constant)
    hp = dp_glm.default_hparams(n, eps, T, delta=delta, calibration=calibration)
    mech = audit.estimator_mechanism(est, hp, jnp.zeros(d))
    res = audit.audit(mech, key, data_in, data_out, stat, num_trials=2000, delta=delta)
    # the ledger of the audited mechanism, composed from its steps' privacy events
    events = base.probe_events(est, data_in, jnp.zeros(d), hp)
    return res, est.ledger(n, hp, events)


def test_audit_flags_a_planted_under_noising_of_alg1(key):
    # b_constant = 0.02 declares 1% of the true sensitivity: 100x too little noise.
    res, ledger = _audit(3, "paper", 0.02, 1.0, key)
    assert res.violates(1.0)
    assert res.epsilon_lower > 3.0
    # and the ledger tells the truth: each of the T steps read off the exact Gaussian curve at
    # 100x the declared mu (the classic formula with c = 2 at (eps/T, delta/T)), composed
    from dpjax.accounting import gaussian_epsilon

    mu = (1.0 / 3) / math.sqrt(2 * math.log(2 * 3 / 1e-3))
    assert ledger.approx_dp.epsilon == pytest.approx(3 * gaussian_epsilon(100 * mu, 1e-3 / 3),
                                                     rel=1e-5)
    assert ledger.approx_dp.epsilon > 100.0


def test_audit_of_the_honest_alg1_stays_below_the_claimed_epsilon(key):
    res, ledger = _audit(3, "paper", 4.0, 1.0, jax.random.fold_in(key, 1))
    assert not res.violates(1.0)
    assert not res.violates(ledger.approx_dp.epsilon)  # (0.5, delta) delivered with B = 4


def test_audit_of_the_exact_calibration_is_nontrivial_but_sound(key):
    """At a large claimed epsilon the same attack certifies a positive epsilon (the audit has
    power), never more than the claim."""
    res, ledger = _audit(1, "gaussian", 2.0, 4.0, jax.random.fold_in(key, 2))
    assert ledger.approx_dp.epsilon == pytest.approx(4.0, rel=1e-6)
    assert 0.5 < res.epsilon_lower <= 4.0


def test_the_same_audit_applies_to_alg5_and_flags_its_under_noising(key):
    """Generic interface: Algorithm 5 (peeling) audited with the sparse score attack."""
    n, d, s, T = 20, 4, 2, 2
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    y = (rng.uniform(size=n) < 0.5).astype(np.float32)
    x[0], y[0] = [1.0, 0.0, 0.0, 0.0], -1.0
    data_in = GLMData(jnp.asarray(x), jnp.asarray(y))
    data_out = audit.replace_record(data_in, 0, GLMData(jnp.asarray([-1.0, 0, 0, 0]),
                                                        jnp.asarray(-1.0)))
    stat = audit.glm_score_statistic(MODEL, jnp.zeros(d), x[0], y[0], support=[0, 1])
    out = {}
    for b in (4.0, 0.02):
        est = dp_glm.noisy_iht(MODEL, s, T, b)
        hp = dp_glm.default_hparams(n, 1.0, T, delta=1e-3)
        mech = audit.estimator_mechanism(est, hp, jnp.zeros(d))
        out[b] = audit.audit(mech, jax.random.fold_in(key, int(b * 100)), data_in, data_out,
                             stat, num_trials=2000, delta=1e-3)
    assert not out[4.0].violates(1.0)
    assert out[0.02].violates(1.0)
