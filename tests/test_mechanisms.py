"""Mechanisms: calibrated noise scales (with power), peeling, clipping, the epsilon=inf limit."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from dpjax import mechanisms as M
from tests.helpers import assert_scale_with_power, compile_count, counting_jit, same_key

N_DRAWS = 20_000


def _stat(value, sensitivity, norm):
    return M.BoundedStatistic(jnp.asarray(value, jnp.float32), jnp.float32(sensitivity), norm)


# ---------------------------------------------------------------------------------------------
# Calibration formulas
# ---------------------------------------------------------------------------------------------


def test_calibration_formulas_match_closed_forms():
    assert M.laplace_scale(2.0, 0.5) == pytest.approx(4.0)
    assert M.gaussian_sigma_classic(1.0, 0.5, 1e-5) == pytest.approx(
        math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5
    )
    assert M.gaussian_sigma_classic(1.0, 0.5, 1e-5, log_constant=2.0) == pytest.approx(
        math.sqrt(2 * math.log(2 / 1e-5)) / 0.5
    )
    assert M.gaussian_sigma_zcdp(3.0, 0.5) == pytest.approx(3.0)
    assert M.peeling_scale(0.1, 10, 0.5, 1e-4) == pytest.approx(
        0.1 * 2 * math.sqrt(3 * 10 * math.log(1e4)) / 0.5
    )


def test_calibration_is_traceable_and_vmappable():
    eps = jnp.array([0.3, 0.5, jnp.inf])
    b = jax.vmap(lambda e: M.peeling_scale(jnp.float32(0.1), 5, e, jnp.float32(1e-4)))(eps)
    expected = [0.1 * 2 * math.sqrt(15 * math.log(1e4)) / e for e in (0.3, 0.5)] + [0.0]
    np.testing.assert_allclose(np.asarray(b), expected, rtol=1e-5)


def test_epsilon_inf_gives_exactly_zero_noise_even_with_infinite_sensitivity(key):
    inf = jnp.float32(jnp.inf)
    for fn in (
        lambda: M.laplace_scale(inf, inf),
        lambda: M.gaussian_sigma_classic(inf, inf, jnp.float32(1e-5)),
        lambda: M.gaussian_sigma_zcdp(inf, inf),
        lambda: M.peeling_scale(inf, 3, inf, jnp.float32(1e-5)),
    ):
        assert float(fn()) == 0.0
    assert float(M.laplace_scale(float("inf"), float("inf"))) == 0.0  # host path too
    v = jnp.array([3.0, -1.0, 2.0, 0.5])
    k1, k2 = jax.random.split(key)
    out, ev = M.laplace_mechanism(k1, M.BoundedStatistic(v, inf, "l1"), inf)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(v))
    assert float(ev.scale) == 0.0
    out, ev = M.gaussian_mechanism(k2, M.BoundedStatistic(v, inf, "l2"), inf, 1e-5)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(v))
    assert float(ev.scale) == 0.0


# ---------------------------------------------------------------------------------------------
# Noise scale tests with power: pass at the calibrated scale, fail at 2/3 and 3/2 of it
# ---------------------------------------------------------------------------------------------


def test_laplace_mechanism_noise_scale(key):
    sens, eps = 0.7, 0.4
    out, ev = M.laplace_mechanism(key, _stat(np.zeros(N_DRAWS), sens, "l1"), eps)
    assert_scale_with_power(out, "laplace", sens / eps)
    # the event is made from the arrays that drew the noise
    assert ev.kind == "laplace" and float(ev.scale) == pytest.approx(sens / eps, rel=1e-6)
    assert float(ev.sensitivity) == float(ev.true_sensitivity) == pytest.approx(sens)


def test_gaussian_mechanism_noise_scale(key):
    sens, eps, delta = 0.3, 0.8, 1e-5
    out, ev = M.gaussian_mechanism(key, _stat(np.zeros(N_DRAWS), sens, "l2"), eps, delta)
    sigma = sens * math.sqrt(2 * math.log(1.25 / delta)) / eps  # classic at eps <= 1
    assert_scale_with_power(out, "norm", sigma)
    assert ev.kind == "gaussian" and float(ev.scale) == pytest.approx(sigma, rel=1e-6)
    assert float(ev.delta) == pytest.approx(delta)


def test_gaussian_zcdp_mechanism_noise_scale(key):
    sens, rho = 0.5, 0.2
    out, ev = M.gaussian_mechanism_zcdp(key, _stat(np.zeros(N_DRAWS), sens, "l2"), rho)
    assert_scale_with_power(out, "norm", sens / math.sqrt(2 * rho))
    assert ev.kind == "gaussian-zcdp"
    assert float(ev.scale) == pytest.approx(sens / math.sqrt(2 * rho), rel=1e-6)


def test_noisy_hard_threshold_release_noise_scale(key):
    # The released values on the selected set are v_S + Laplace(b), whichever set is selected.
    d, s, sens, eps, delta = 40, 4, 0.05, 0.5, 1e-3
    v = jax.random.normal(jax.random.key(1), (d,))
    stat = M.BoundedStatistic(v, jnp.float32(sens), "linf")
    keys = jax.random.split(key, N_DRAWS // s)
    out = jax.vmap(lambda k: M.noisy_hard_threshold(k, stat, s, eps, delta))(keys)
    resid = np.take_along_axis(np.asarray(out.value), np.asarray(out.support), 1) - np.asarray(
        v
    )[np.asarray(out.support)]
    b = sens * 2 * math.sqrt(3 * s * math.log(1 / delta)) / eps
    assert_scale_with_power(resid, "laplace", b)


def test_noise_is_deterministic_under_a_fixed_key_and_fresh_otherwise(key):
    stat = _stat(np.zeros(8), 1.0, "l2")
    a, _ = M.gaussian_mechanism(same_key(key), stat, 0.5, 1e-5)
    b, _ = M.gaussian_mechanism(same_key(key), stat, 0.5, 1e-5)
    c, _ = M.gaussian_mechanism(jax.random.fold_in(key, 1), stat, 0.5, 1e-5)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))


# ---------------------------------------------------------------------------------------------
# Peeling
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s", [1, 3, 7])
def test_noisy_hard_threshold_has_exactly_s_nonzeros_on_its_support(key, s):
    d = 30
    v = jax.random.normal(jax.random.key(2), (d,))
    stat = M.BoundedStatistic(v, jnp.float32(0.2), "linf")
    out = jax.vmap(lambda k: M.noisy_hard_threshold(k, stat, s, 0.7, 1e-4))(
        jax.random.split(key, 200)
    )
    value, support = np.asarray(out.value), np.asarray(out.support)
    assert ((value != 0).sum(axis=1) == s).all()
    for row, sup in zip(value, support):
        assert len(set(sup.tolist())) == s
        assert set(np.flatnonzero(row).tolist()) == set(sup.tolist())


def test_noisy_hard_threshold_at_epsilon_inf_is_exact_top_s(key):
    d, s = 50, 6
    v = jax.random.normal(jax.random.key(3), (d,))
    out = M.noisy_hard_threshold(key, M.BoundedStatistic(v, jnp.float32(1.0), "linf"), s,
                                 jnp.inf, 1e-5)
    vn = np.asarray(v)
    top = np.argsort(-np.abs(vn))[:s]  # independent reference
    expected = np.zeros(d, np.float32)
    expected[top] = vn[top]
    np.testing.assert_array_equal(np.asarray(out.value), expected)
    np.testing.assert_array_equal(np.asarray(out.support), top)  # selected in order of |v|
    np.testing.assert_array_equal(np.asarray(M.hard_threshold(v, s).value), expected)
    assert np.isfinite(np.asarray(out.value)).all()


def _win_probabilities(locs, b):
    """P(argmax_j |v_j| + Laplace(b) = j) by numerical integration (independent of dpjax)."""
    locs = np.asarray(locs, float)
    probs = []
    for j in range(len(locs)):
        others = np.delete(locs, j)

        def integrand(x, j=j, others=others):
            return stats.laplace.pdf(x, locs[j], b) * np.prod(stats.laplace.cdf(x, others, b))

        probs.append(integrate.quad(integrand, -np.inf, np.inf, limit=200)[0])
    return np.array(probs)


def test_peeling_selection_frequencies_match_independent_computation(key):
    # d = 4, s = 2: the ordered pair (first, second) has probability
    # P(first | all) * P(second | all but first), because each round draws fresh noise.
    v = np.array([1.0, -0.6, 0.3, 0.0], np.float32)
    sens, s, eps, delta = 0.1, 2, 1.0, 0.1
    b = sens * 2 * math.sqrt(3 * s * math.log(1 / delta)) / eps
    expected = {}
    p1 = _win_probabilities(np.abs(v), b)
    for j in range(4):
        rest = [k for k in range(4) if k != j]
        p2 = _win_probabilities(np.abs(v[rest]), b)
        for k, p in zip(rest, p2):
            expected[(j, k)] = p1[j] * p
    n = 40_000
    stat = M.BoundedStatistic(jnp.asarray(v), jnp.float32(sens), "linf")
    sup = np.asarray(jax.vmap(lambda k: M.noisy_hard_threshold(k, stat, s, eps, delta).support)(
        jax.random.split(key, n)))
    pairs = list(itertools.permutations(range(4), 2))
    counts = np.array([np.sum((sup[:, 0] == j) & (sup[:, 1] == k)) for j, k in pairs])
    probs = np.array([expected[p] for p in pairs])
    assert probs.sum() == pytest.approx(1.0, abs=1e-6)
    chi2 = stats.chisquare(counts, probs * n)
    assert chi2.pvalue > 1e-3, chi2
    # Power: the same frequencies are rejected against a 3/2 noise scale.
    p1w = _win_probabilities(np.abs(v), 1.5 * b)
    first = np.array([np.sum(sup[:, 0] == j) for j in range(4)])
    assert stats.chisquare(first, p1w * n).pvalue < 1e-6


def test_no_recompile_when_only_epsilon_changes(key):
    f = counting_jit(M.noisy_hard_threshold, static_argnums=(2,))
    stat = _stat(np.linspace(-1, 1, 20), 0.1, "linf")
    before = compile_count(f)
    for i, eps in enumerate((0.3, 0.5, 0.8, jnp.inf)):
        f(jax.random.fold_in(key, i), stat, 3, jnp.float32(eps), jnp.float32(1e-4))
    assert compile_count(f) - before == 1


# ---------------------------------------------------------------------------------------------
# The statistic that carries its sensitivity
# ---------------------------------------------------------------------------------------------


def test_mechanisms_refuse_a_statistic_in_the_wrong_norm(key):
    with pytest.raises(ValueError, match="needs an l2 sensitivity"):
        M.gaussian_mechanism(key, _stat(np.zeros(3), 1.0, "linf"), 0.5, 1e-5)
    with pytest.raises(ValueError, match="needs an linf sensitivity"):
        M.noisy_hard_threshold(key, _stat(np.zeros(3), 1.0, "l2"), 1, 0.5, 1e-5)
    with pytest.raises(TypeError, match="BoundedStatistic"):
        M.laplace_mechanism(key, jnp.zeros(3), 0.5)
    with pytest.raises(ValueError, match="norm must be"):
        M.BoundedStatistic(jnp.zeros(3), jnp.float32(1.0), "l3")


def test_bounded_statistic_algebra():
    st = _stat(np.ones(4), 0.5, "linf")
    sc = st.scale(-2.0)
    assert float(sc.sensitivity) == 1.0 and float(sc.value[0]) == -2.0
    sh = st.shift(jnp.full(4, 3.0))
    assert float(sh.sensitivity) == 0.5 and float(sh.value[0]) == 4.0
    assert float(st.in_norm("l2").sensitivity) == pytest.approx(0.5 * 2.0)  # sqrt(4)
    assert float(st.in_norm("l1").sensitivity) == pytest.approx(0.5 * 4.0)
    assert float(_stat(np.ones(4), 0.5, "l2").in_norm("linf").sensitivity) == 0.5
    # a BoundedStatistic is a pytree and crosses jit
    out = jax.jit(lambda s: s.scale(3.0))(st)
    assert out.norm == "linf" and float(out.sensitivity) == pytest.approx(1.5)


def test_bounded_mean_sensitivity_is_attained_by_an_adversarial_neighbour():
    rng = np.random.default_rng(0)
    C, n = 1.5, 50
    x = rng.normal(size=(n, 5)) * 3
    terms = M.clip_l2(jnp.asarray(x, jnp.float32), C)
    stat = M.bounded_mean(terms, 2 * C, "l2")
    x2 = x.copy()
    x2[7] = 1e6 * np.ones(5)
    x[7] = -1e6 * np.ones(5)
    a = M.bounded_mean(M.clip_l2(jnp.asarray(x, jnp.float32), C), 2 * C, "l2").value
    b = M.bounded_mean(M.clip_l2(jnp.asarray(x2, jnp.float32), C), 2 * C, "l2").value
    gap = float(jnp.linalg.norm(a - b))
    assert gap <= float(stat.sensitivity) * (1 + 1e-5)
    assert gap == pytest.approx(float(stat.sensitivity), rel=1e-4)  # tight


# ---------------------------------------------------------------------------------------------
# Clipping
# ---------------------------------------------------------------------------------------------


def test_clip_l2_projects_rows_onto_the_ball():
    x = jnp.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = np.asarray(M.clip_l2(x, 1.0))
    np.testing.assert_allclose(out[0], [0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose(out[1], [0.3, 0.4])
    np.testing.assert_array_equal(out[2], [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(M.clip_l2(x, jnp.inf)), np.asarray(x))


def test_clip_frobenius_on_matrices():
    x = jnp.ones((3, 2, 2)) * jnp.array([1.0, 2.0, 0.1])[:, None, None]
    out = M.clip_l2(x, 1.0, axis=(-2, -1))
    norms = np.sqrt((np.asarray(out) ** 2).sum(axis=(1, 2)))
    np.testing.assert_allclose(norms, [1.0, 1.0, 0.2], rtol=1e-6)


def test_clip_linf():
    x = jnp.array([-5.0, -0.5, 0.5, 5.0])
    np.testing.assert_array_equal(np.asarray(M.clip_linf(x, 1.0)), [-1.0, -0.5, 0.5, 1.0])
    np.testing.assert_array_equal(np.asarray(M.clip_linf(x, jnp.inf)), np.asarray(x))


# ---------------------------------------------------------------------------------------------
# Local DP
# ---------------------------------------------------------------------------------------------


def test_local_mechanism_randomises_each_record_independently_at_the_right_scale(key):
    n, d, sens, eps = 4000, 5, 2.0, 0.5
    records = jnp.tile(jnp.arange(d, dtype=jnp.float32), (n, 1))
    stat = M.BoundedStatistic(records, jnp.float32(sens), "l1", "local")
    out, ev = M.local_mechanism(key, stat, M.laplace_mechanism, eps)
    noise = np.asarray(out) - np.asarray(records)
    assert ev.relation == "local" and float(ev.scale) == pytest.approx(sens / eps, rel=1e-6)
    assert_scale_with_power(noise, "laplace", sens / eps)
    # independent across records: no two rows share their noise, and rows are uncorrelated
    assert np.unique(noise[:, 0]).size == n
    assert abs(np.corrcoef(noise[:-1, 0], noise[1:, 0])[0, 1]) < 0.05
    with pytest.raises(ValueError, match="relation='local'"):
        M.local_mechanism(key, _stat(np.zeros((3, 2)), 1.0, "l1"), M.laplace_mechanism, eps)


def test_noisy_hard_threshold_event_and_declared_vs_true_sensitivity(key):
    """The peeling event carries the scale that drew the noise; a declared sensitivity below
    the true one (an under-noised variant) is recorded as such, and the delivered epsilon
    follows the true one."""
    from dpjax.accounting import Release

    v = jnp.arange(6.0)
    stat = M.BoundedStatistic(v, jnp.float32(0.1), "linf").declare(0.05)
    peeled = M.noisy_hard_threshold(key, stat, 2, 0.5, 1e-3)
    ev = peeled.event
    assert ev.kind == "noisy-ht" and ev.s == 2
    assert float(ev.scale) == pytest.approx(0.05 * 2 * math.sqrt(6 * math.log(1e3)) / 0.5,
                                            rel=1e-6)
    assert float(ev.true_sensitivity) == pytest.approx(0.1)
    rel = Release.from_event(ev, "v")
    assert rel.sensitivity_ratio == pytest.approx(2.0)
    from dpjax.accounting import peeling_epsilon

    # the delivered epsilon is read off the true sensitivity (twice the declared one)
    r = 0.1 / float(ev.scale)
    assert rel.delivered().epsilon == pytest.approx(peeling_epsilon(r, 2, 1e-3), rel=1e-6)
    assert rel.delivered().epsilon > 1.5 * peeling_epsilon(r / 2, 2, 1e-3)


def test_changing_a_calibration_constant_moves_the_noise_and_the_ledger_follows_the_noise(
        key, monkeypatch):
    """epsilon_constant is the one place of the classic-Gaussian constant: patched, the noise
    drawn moves, and the ledger -- which reads the exact curve of the noise drawn, never the
    constant -- reports the guarantee of the new noise, whatever the constant says."""
    from dpjax.accounting import Release, gaussian_epsilon

    stat = _stat(np.zeros(4), 1.0, "l2")
    _, ev = M.gaussian_mechanism(same_key(key), stat, 0.5, 1e-5)
    base_scale = float(ev.scale)
    from dpjax.mechanisms import calibration  # where the constant lives

    orig = M.epsilon_constant
    monkeypatch.setattr(calibration, "epsilon_constant",
                        lambda kind, *a, **k: 0.5 * orig(kind, *a, **k))  # an under-noising bug
    _, ev2 = M.gaussian_mechanism(same_key(key), stat, 0.5, 1e-5)
    assert float(ev2.scale) == pytest.approx(0.5 * base_scale, rel=1e-6)  # the noise moved
    got = Release.from_event(ev2, "v").delivered().epsilon
    assert got == pytest.approx(gaussian_epsilon(1.0 / float(ev2.scale), 1e-5), rel=1e-6)
    assert got > 0.5  # the bug shows: the half noise does not deliver the requested 0.5


# every name the single-module dpjax/mechanisms.py had, public or used by the layers above
_NAMES_BEFORE_THE_SPLIT = """
BoundedStatistic GAUSSIAN_CALIBRATIONS KINDS NOISE_FACTOR_KINDS NORMS PEELING_CALIBRATIONS Peeled
PlannedEvent PrivacyEvent RELATIONS RESPONSE_BITS SECURE_KINDS ZCDP_KINDS bounded_mean
bounded_mean_from_sum bounded_sum check_gaussian_mean clip_l2 clip_linf clipped_outer_mean
epsilon_constant gaussian_mechanism gaussian_mechanism_zcdp gaussian_multiplier
gaussian_multiplier_analytic gaussian_multiplier_classic gaussian_multiplier_zcdp gaussian_noise
gaussian_sigma gaussian_sigma_classic gaussian_sigma_zcdp hard_threshold
implemented_flip_probability l2_norm laplace_mechanism laplace_multiplier laplace_noise
laplace_scale local_mechanism no_privacy_event noise_scale noisy_hard_threshold
peeling_multiplier peeling_scale randomized_response_bit response_flip_threshold
response_probability sanitize secure_active secure_event secure_noise with_sensitivity_margin
_event _scaled_l2 _analytic_mu_jnp _secure_plan
""".split()


def test_every_old_import_of_the_mechanisms_still_works():
    """The package split kept ``from dpjax.mechanisms import X`` for every name the module had
    (the same object as in the module that now holds it), and its ``__all__`` is exactly the
    union of its modules' lists."""
    import inspect

    from dpjax.mechanisms import calibration, clipping, local, noise, peeling, secure, statistics

    modules = (statistics, clipping, calibration, secure, noise, peeling, local)
    for name in _NAMES_BEFORE_THE_SPLIT:
        obj = getattr(M, name)  # AttributeError names the missing one
        home = [m for m in modules if name in vars(m)]
        assert home and getattr(home[0], name) is obj, name
    assert sorted(M.__all__) == sorted(n for m in modules for n in m.__all__)
    assert set(M.__all__) >= {n for n in _NAMES_BEFORE_THE_SPLIT if not n.startswith("_")}
    for m in modules:  # each module's list names the functions and classes it defines
        defined = [getattr(m, n) for n in m.__all__]
        assert all(f.__module__ == m.__name__ for f in defined
                   if inspect.isfunction(f) or inspect.isclass(f)), m.__name__


# ---------------------------------------------------------------------------------------------
# Peeling with a runtime sparsity (s traced, static bound s_max: one program for every s)
# ---------------------------------------------------------------------------------------------


def test_a_larger_laplace_draw_extends_a_smaller_one_row_by_row():
    """What a runtime s relies on: under JAX's partitionable threefry (the default) the
    ``(s, d)`` draws of a key are the first ``s`` rows of its ``(s_max, d)`` draws."""
    assert jax.config.jax_threefry_partitionable
    key = jax.random.key(11)
    big = np.asarray(M.laplace_noise(same_key(key), (9, 37), 0.3))
    for s in (1, 4, 9):
        np.testing.assert_array_equal(np.asarray(M.laplace_noise(same_key(key), (s, 37), 0.3)),
                                      big[:s])


@pytest.mark.parametrize("calibration", ["paper", "tight", "per-coordinate"])
@pytest.mark.parametrize("s", [1, 3, 6])
def test_noisy_hard_threshold_with_a_runtime_s_is_the_static_call(calibration, s):
    d, s_max = 40, 6
    v = jax.random.normal(jax.random.key(4), (d,))
    stat = M.BoundedStatistic(v, jnp.float32(0.1), "linf")
    eps, delta = jnp.float32(1.5), jnp.float32(1e-4)
    static = jax.jit(lambda k: M.noisy_hard_threshold(k, stat, s, eps, delta, calibration))
    runtime = jax.jit(lambda k, s_: M.noisy_hard_threshold(k, stat, s_, eps, delta,
                                                           calibration, s_max=s_max))
    for key in jax.random.split(jax.random.key(5), 20):
        want, got = static(same_key(key)), runtime(same_key(key), jnp.int32(s))
        # up to round-off: XLA may fold the static call's scale (s a constant) differently
        np.testing.assert_allclose(np.asarray(got.value), np.asarray(want.value), rtol=1e-6,
                                   atol=1e-6)
        assert (np.asarray(got.value) != 0).sum() == s
        np.testing.assert_array_equal(np.asarray(got.support[:s]), np.asarray(want.support))
        np.testing.assert_array_equal(np.asarray(got.support[s:]), d)  # no coordinate
        for f in ("sensitivity", "scale", "true_sensitivity", "delta"):
            assert float(getattr(got.event, f)) == pytest.approx(
                float(getattr(want.event, f)), rel=1e-6), f
        assert (got.event.kind, want.event.s) == ("noisy-ht", s)
        assert got.event.s == s_max  # traced: the static field holds the bound
    # a concrete runtime s: the event records it
    eager = M.noisy_hard_threshold(jax.random.key(0), stat, jnp.int32(s), eps, delta,
                                   calibration, s_max=s_max)
    assert eager.event.s == s
    assert float(eager.event.scale) == pytest.approx(
        float(static(jax.random.key(0)).event.scale), rel=1e-6)


@pytest.mark.parametrize("calibration", ["paper", "tight"])
def test_peeling_calibrations_take_a_traced_s(calibration):
    eps, delta = jnp.float32(0.8), jnp.float32(1e-5)
    for s in (1, 5, 40):
        mult = jax.jit(lambda s_: M.peeling_multiplier(s_, eps, delta, calibration))
        assert float(mult(jnp.int32(s))) == float(M.peeling_multiplier(s, eps, delta,
                                                                       calibration))
        coord = jax.jit(lambda s_: M.peeling_coordinate_epsilon(jnp.float32(np.nan), s_, eps,
                                                                delta))
        assert float(coord(jnp.int32(s))) == float(M.peeling_coordinate_epsilon(
            jnp.float32(np.nan), s, eps, delta))
        assert float(M.peeling_scale(0.1, jnp.int32(s), eps, delta, calibration)) == float(
            M.peeling_scale(0.1, s, eps, delta, calibration))


def test_hard_threshold_with_a_runtime_s_is_the_static_call_ties_included():
    v = jnp.asarray([1.0, -3.0, 3.0, 2.0, 3.0, 0.0, -1.0, 2.0, 0.5])
    f = jax.jit(lambda s_: M.hard_threshold(v, s_, s_max=6))
    for s in range(1, 7):
        want, got = M.hard_threshold(v, s), f(jnp.int32(s))
        np.testing.assert_array_equal(np.asarray(got.value), np.asarray(want.value))
        np.testing.assert_array_equal(np.asarray(got.support[:s]), np.asarray(want.support))
        np.testing.assert_array_equal(np.asarray(got.support[s:]), v.shape[0])
        assert got.event is None


def test_coordinates_beyond_a_runtime_s_never_reach_the_output():
    """Adversarial: the coordinates ranked s+1 .. s_max are huge and the noise is large (the
    rounds past s would select them): the release has exactly s non-zeros, all on the first s
    entries of its support, for every key; at epsilon = inf it is the top s exactly."""
    d, s, s_max = 30, 2, 8
    v = np.zeros(d, np.float32)
    v[[3, 17]] = 1e6
    v[[0, 5, 9, 21, 28, 29]] = 1e5  # ranked 3..8: inside s_max, beyond s
    stat = M.BoundedStatistic(jnp.asarray(v), jnp.float32(1.0), "linf")
    run = jax.jit(jax.vmap(lambda k, e: M.noisy_hard_threshold(k, stat, jnp.int32(s), e, 1e-3,
                                                               s_max=s_max), (0, None)))
    for eps in (jnp.float32(1e-4), jnp.float32(jnp.inf)):
        out = run(jax.random.split(jax.random.key(9), 300), eps)
        value, support = np.asarray(out.value), np.asarray(out.support)
        assert ((value != 0).sum(axis=1) == s).all()
        np.testing.assert_array_equal(support[:, s:], d)
        for row, sup in zip(value, support):
            assert set(np.flatnonzero(row).tolist()) == set(sup[:s].tolist())
    np.testing.assert_array_equal(np.flatnonzero(value[0]), [3, 17])  # epsilon = inf: top s
    top = M.hard_threshold(jnp.asarray(v), jnp.int32(s), s_max=s_max)
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(top.value)), [3, 17])


def test_a_runtime_s_is_refused_outside_its_bounds():
    stat = M.BoundedStatistic(jnp.ones(10), jnp.float32(1.0), "linf")
    with pytest.raises(ValueError, match=r"s must be an integer in \[1, s_max = 4\]"):
        M.noisy_hard_threshold(jax.random.key(0), stat, jnp.int32(5), 1.0, 1e-5, s_max=4)
    with pytest.raises(ValueError, match=r"s_max must be a static integer in \[1, 10\]"):
        M.hard_threshold(jnp.ones(10), jnp.int32(2), s_max=11)
    with pytest.raises(ValueError, match="integer scalar"):
        M.hard_threshold(jnp.ones(10), jnp.float32(2.0), s_max=4)


def test_exact_peeling_takes_a_concrete_runtime_s_and_refuses_a_traced_one():
    stat = M.BoundedStatistic(jnp.asarray(np.linspace(-1, 1, 12), jnp.float32),
                              jnp.float32(0.01), "linf")
    with M.secure_noise():
        want = M.noisy_hard_threshold(same_key(jax.random.key(3)), stat, 3, 2.0, 1e-5)
        got = M.noisy_hard_threshold(jax.random.key(3), stat, jnp.int32(3), 2.0, 1e-5,
                                     s_max=5)
        np.testing.assert_array_equal(np.asarray(got.value), np.asarray(want.value))
        np.testing.assert_array_equal(np.asarray(got.support), [*np.asarray(want.support),
                                                                12, 12])
        assert got.event.kind == "discrete-noisy-ht" and got.event.s == 3
        with pytest.raises(ValueError, match="concrete s"):
            jax.jit(lambda s_: M.noisy_hard_threshold(jax.random.key(3), stat, s_, 2.0, 1e-5,
                                                      s_max=5).value)(jnp.int32(3))
