"""The ledger never claims more than the noise delivers (issue 28).

Regression tests for the three ways the ledger could overstate a guarantee -- a classic Gaussian
read outside its proof, a float privacy coin, degenerate noise -- and for parallel composition
over the disjoint rounds of a secure local fit. Each fails on the code before the fix.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy.stats import binomtest

from dpjax import base, mechanisms, registry
from dpjax.accounting import (
    ApproxDP,
    Ledger,
    PrivacyBudgetError,
    Release,
    check_delivers,
    gaussian_delta,
    gaussian_epsilon,
)
from dpjax.local_randomizers import l2_ball_randomizer
from tests.helpers import same_key

mpmath.mp.dps = 60


# --------------------------------------------------------------------------------------------
# 1. Gaussian releases: the exact curve of the noise drawn, any calibration, any epsilon
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [1e-10, 1e-5, 5e-4, 0.1])
def test_the_analytic_calibration_delivers_its_budget_at_every_epsilon(delta):
    """The in-kernel (float32) and host (float64) analytic calibrations both give a mu whose
    exact delta is at most the requested one, within 2% of the tightest mu (1e-3 at
    epsilon >= 1), from epsilon 1e-3 to 1e8."""
    eps_grid = np.concatenate([np.geomspace(1e-3, 1e8, 45), [1.0, 999.0, 1001.0]])
    kernel = jax.jit(jax.vmap(mechanisms.gaussian_multiplier_analytic, in_axes=(0, None)))(
        jnp.asarray(eps_grid, jnp.float32), jnp.float32(delta))
    for eps, mult in zip(eps_grid, np.asarray(kernel, np.float64)):
        host = float(mechanisms.gaussian_multiplier_analytic(float(eps), delta))
        for mu in (1 / mult, 1 / host):
            assert gaussian_delta(mu, float(eps)) <= delta, (eps, mu)
        tight = 1 / host
        assert 1 / mult >= tight * (0.98 if eps < 1 else 0.999), eps


def test_the_default_gaussian_is_classic_up_to_1_and_analytic_above():
    eps = np.array([0.1, 1.0, 1.5, 8.0, 80.0])
    got = mechanisms.gaussian_multiplier(eps, 1e-5)
    classic = mechanisms.gaussian_multiplier_classic(eps, 1e-5)
    analytic = mechanisms.gaussian_multiplier_analytic(eps, 1e-5)
    np.testing.assert_allclose(got, np.where(eps <= 1, classic, analytic))
    # where the classic formula is refuted by the curve, the default is not the classic one
    assert gaussian_epsilon(1 / classic[-1], 1e-5) > 80
    assert gaussian_epsilon(1 / got[-1], 1e-5) <= 80


def _user_estimator(calibration):
    """A user's own estimator built with the documented recipe: one Gaussian release whose
    ledger is Release.from_event + Ledger.build (no note typed by hand)."""
    from typing import NamedTuple

    class State(NamedTuple):
        beta: jax.Array

    class Info(NamedTuple):
        events: tuple

    class HP(NamedTuple):
        epsilon: jax.Array
        delta: jax.Array

    def step(key, state, data, hp):
        stat = mechanisms.bounded_mean(mechanisms.clip_l2(data, 1.0), 2.0, "l2")
        value, ev = mechanisms.gaussian_mechanism(key, stat, hp.epsilon, hp.delta,
                                                  calibration=calibration)
        return State(value), Info((ev,))

    def ledger(n, hp, events):
        (ev,) = events
        return Ledger.build("user-mean", [Release.from_event(ev, "mean")], "basic",
                            requested=ApproxDP(float(hp.epsilon), float(hp.delta)))

    est = base.Estimator("user-mean/" + calibration, lambda b: State(jnp.asarray(b)), step, 1,
                         "full", ledger)
    return est, HP


@pytest.mark.parametrize("eps", [4.0, 80.0])
def test_a_users_gaussian_release_is_read_off_the_exact_curve(key, eps):
    """The documented recipe at epsilon > 1: the default calibration delivers the request,
    and the ledger's per-release epsilon is the exact curve's for the sigma drawn (the old
    ledger inverted the classic formula and claimed (4, 1e-4) for noise that gives more)."""
    x = jax.random.normal(key, (200, 3))
    est, HP = _user_estimator("classic-or-analytic")
    hp = HP(np.float32(eps), np.float32(1e-4))
    res = base.fit(est, jax.random.key(1), x, np.zeros(3, np.float32), hp)
    (rel,) = res.ledger.releases
    sigma = rel.scale
    assert rel.epsilons[0] == pytest.approx(gaussian_epsilon((2.0 / 200) / sigma, 1e-4),
                                            rel=1e-6)
    assert res.ledger.approx_dp.epsilon <= eps * (1 + 1e-6)
    assert any("exact Gaussian privacy curve" in n for n in res.ledger.notes)


def test_the_classic_formula_outside_its_proof_is_refused(key):
    """The papers' classic formula at epsilon = 20: the exact curve says it delivers more than
    20, so a fit of the corrected variant raises instead of returning a false ledger."""
    x = jax.random.normal(key, (200, 3))
    est, HP = _user_estimator("classic")
    hp = HP(np.float32(20.0), np.float32(1e-4))
    with pytest.raises(PrivacyBudgetError, match="weaker than the requested"):
        base.fit(est, jax.random.key(1), x, np.zeros(3, np.float32), hp)
    # at epsilon = 0.5 the classic formula is proven: the ledger says less than requested
    res = base.fit(est, jax.random.key(1), x, np.zeros(3, np.float32),
                   HP(np.float32(0.5), np.float32(1e-4)))
    assert res.ledger.approx_dp.epsilon < 0.5


def test_nldp_at_epsilon_80_delivers_its_request(key):
    """The finding: NLDP at eps = 80 said (80, 1e-3) while each release's true delta at its
    eps = 40 was 0.84. Now each release is read off the exact curve and the total is at most
    the request."""
    entry = next(e for e in registry.entries() if e.name == "ldp-nldp")
    ex = entry.example()
    hp = ex.hparams(80.0)
    res = base.fit(entry.build(), key, ex.data, ex.params0, hp)
    led = res.ledger
    delta = float(np.asarray(hp.delta))
    assert led.approx_dp.epsilon <= 80 * (1 + 1e-6)
    for rel in led.releases:
        mu = rel.sensitivity * rel.sensitivity_ratio / rel.scale
        assert rel.epsilons[0] == pytest.approx(gaussian_epsilon(mu, delta / 2), rel=1e-6)


# --------------------------------------------------------------------------------------------
# 2. The privacy coin is exact
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [1e-6, 1.0, 10.0, 15.5, 16.64, 17.0, 20.0, 30.0, 50.0, 1e4])
def test_the_implemented_flip_probability_bounds_the_odds(eps):
    """From the construction: the flip probability M / 2^64 is at least 1 / (e^eps + 1) and
    at most 1/2, so the keep/flip odds lie in [1, e^eps] (epsilon-DP); and it is that
    probability to a relative 1e-4 until 2^-64 takes over."""
    q_impl = mechanisms.implemented_flip_probability(eps)
    q = 1 / (1 + mpmath.e ** mpmath.mpf(eps))
    qi = mpmath.mpf(q_impl.numerator) / q_impl.denominator
    assert q <= qi <= mpmath.mpf(1) / 2
    realised = mpmath.log((1 - qi) / qi)
    assert 0 <= realised <= eps
    assert qi <= max(q * (1 + mpmath.mpf("1e-4")), mpmath.mpf(2) ** -64 + q) or qi == 0.5
    assert q_impl > 0  # a float comparison never flips from eps = 16.64 on: no privacy at all


def test_the_coin_draws_its_probability(key):
    """With enough draws, at eps = 1 and eps = 8: the flip frequency matches the implemented
    probability (exact binomial test) and rejects the probability at 2/3 and 3/2 of eps."""
    n = 2_000_000
    for eps in (1.0, 8.0):
        keys = jax.random.split(jax.random.fold_in(key, int(eps)), n)
        flips = int(n - jnp.sum(jax.vmap(mechanisms.randomized_response_bit, (0, None))(
            keys, jnp.float32(eps))))
        p = float(mechanisms.implemented_flip_probability(eps))
        assert binomtest(flips, n, p).pvalue > 1e-3
        for wrong in (eps * 2 / 3, eps * 3 / 2):
            assert binomtest(flips, n, 1 / (1 + math.exp(wrong))).pvalue < 1e-6


def test_the_randomizer_reports_the_wrong_side_when_the_coin_says_so(key, monkeypatch):
    """At eps = 17 the float coin never flipped. With the random bits forced to 0 (below any
    threshold M >= 1) the l2-ball randomizer must report on the wrong hemisphere: its output
    points away from the input."""
    real_bits = jax.random.bits

    def zero_bits(k, shape=(), dtype=jnp.uint32):
        return jnp.zeros(shape, dtype)

    x = jnp.array([0.5, 0.0, 0.0])
    monkeypatch.setattr(jax.random, "bits", zero_bits)
    out = l2_ball_randomizer(same_key(key), x, 1.0, 17.0)
    monkeypatch.setattr(jax.random, "bits", real_bits)
    kept = l2_ball_randomizer(same_key(key), x, 1.0, 17.0)
    # b = +1 or -1 flips the side too; compare with the sign the sign-coin chose: the two
    # draws share every key, so only the side coin differs
    assert float(jnp.dot(out.value, kept.value)) < 0


# --------------------------------------------------------------------------------------------
# 3. No silent degenerate noise
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s, match", [(1e-37, "zero or subnormal"), (8.5e37, "overflow")])
def test_a_degenerate_truncation_scale_is_refused_before_anything_runs(key, s, match):
    from dpjax.algorithms.dp_gem import fit_dp_gem
    from dpjax.models import GaussianMixture

    model = GaussianMixture(0.5)
    beta = jnp.ones(3) / np.sqrt(3)
    data = model.simulate(key, 1000, beta)
    with pytest.raises(ValueError, match=rf"s = .*{match}"):
        fit_dp_gem(jax.random.key(1), data, model, epsilon=1.0, delta=1e-3, num_iterations=2,
                   beta0=beta * 0.8, tau=2.0, s_rule="explicit", s=s)


def test_a_subnormal_noise_scale_counts_as_no_noise_and_the_fit_raises(key):
    """A user's release whose sensitivity is subnormal in float32 draws no noise (XLA flushes
    the scale to zero): the ledger says epsilon = inf, and the fit raises, naming the
    release's noise scale."""
    event = mechanisms.PrivacyEvent("laplace", jnp.float32(1e-40), jnp.float32(1e-40),
                                    jnp.float32(1e-40), jnp.float32(0.0), "l1")
    rel = Release.from_event(event, "v")
    assert math.isinf(rel.delivered().epsilon)
    led = Ledger.build("toy", [rel], "basic", requested=ApproxDP(1.0, 0.0))
    with pytest.raises(PrivacyBudgetError, match="noise scale .* subnormal"):
        check_delivers(led)
    # the same release at a normal scale delivers its epsilon
    ok = mechanisms.PrivacyEvent("laplace", jnp.float32(1.0), jnp.float32(1.0),
                                 jnp.float32(1.0), jnp.float32(0.0), "l1")
    check_delivers(Ledger.build("toy", [Release.from_event(ok, "v")], "basic",
                                requested=ApproxDP(1.0, 0.0)))


def test_a_paper_literal_variant_is_not_refused_its_ledger_says_what_it_delivers():
    event = mechanisms.PrivacyEvent("laplace", jnp.float32(1.0), jnp.float32(0.5),
                                    jnp.float32(1.0), jnp.float32(0.0), "l1")
    led = Ledger.build("toy", [Release.from_event(event, "v")], "basic",
                       variant="paper-literal: under-noised", requested=ApproxDP(1.0, 0.0))
    check_delivers(led)  # documented: the ledger states (2, 0)
    assert led.approx_dp.epsilon == pytest.approx(2.0)


# --------------------------------------------------------------------------------------------
# 4. Parallel composition over the disjoint rounds of a secure local fit
# --------------------------------------------------------------------------------------------


def test_secure_local_gradient_em_composes_its_rounds_in_parallel(key):
    """Each user reports once, in its own round: the secure ledger's rho is one round's, not
    the sum over the T = 4 rounds (which reported 1.62 for a request of 1)."""
    from dpjax.algorithms.dp_gem import LDPGEMHyperparams, ldp_gem
    from dpjax.models import GaussianMixture

    model = GaussianMixture(0.5)
    beta = jnp.ones(2) / np.sqrt(2)
    data = model.simulate(key, 400, beta)
    f = np.float32
    hp = LDPGEMHyperparams(f(1.0), f(1e-3), f(1.0), f(2.0), f(0.05), f(np.nan))
    est = ldp_gem(model, 4)
    res = base.fit(est, jax.random.key(3), data, np.asarray(beta * 0.8), hp, secure=True)
    led = res.ledger
    assert led.composition == "parallel" and led.relation == "local"
    one_round = max(b.rho for r in led.releases for b in r.budgets())
    assert led.guarantee.rho == pytest.approx(one_round)
    assert sum(b.rho for r in led.releases for b in r.budgets()) > 3 * one_round


def test_fraction_helper_is_exact():
    assert mechanisms.implemented_flip_probability(math.inf) == Fraction(0)


def test_a_study_level_that_delivers_less_than_requested_is_refused():
    """A study's ledgers pass the same check as a fit: a level whose drawn noise delivers less
    than requested raises PrivacyBudgetError (a ConfigError: `dpjax run` prints one line)."""
    from types import SimpleNamespace
    from typing import NamedTuple

    from dpjax import study
    from dpjax._validate import ConfigError

    class HP(NamedTuple):
        epsilon: float
        delta: float

    def ledger(n, hp, events):
        (ev,) = events
        return Ledger.build("toy", [Release.from_event(ev, "v")], "basic",
                            requested=ApproxDP(float(hp.epsilon), float(hp.delta)))

    setting = SimpleNamespace(estimator=SimpleNamespace(ledger=ledger), hparams_type=HP, n=10)

    def events(scale):  # axes (reps, levels, steps)
        f = lambda x: jnp.full((2, 1, 1), x, jnp.float32)  # noqa: E731
        return (mechanisms.PrivacyEvent("laplace", f(1.0), f(scale), f(1.0), f(0.0), "l1"),)

    ok = study._ledger(setting, {"epsilon": 1.0, "delta": 0.0}, 0, events(1.0))
    assert ok["approx_dp"]["epsilon"] == pytest.approx(1.0)
    with pytest.raises(PrivacyBudgetError, match="weaker than the requested") as err:
        study._ledger(setting, {"epsilon": 1.0, "delta": 0.0}, 0, events(0.5))
    assert isinstance(err.value, ConfigError)
