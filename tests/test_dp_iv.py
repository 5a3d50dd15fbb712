"""DP two-stage gradient descent for IV regression (spec 004): clipping and sensitivity on
adversarial neighbours, noise scale with power for both calibrations, zCDP accounting against
dp_accounting, the rho = inf limit against 2SLS / linearmodels / a numpy 2S-GD, update order,
determinism, compilation, the Algorithm-3 variant, step-size rules, the simulator, and input
validation."""

import math

import dp_accounting as dpa
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import pld, rdp
from linearmodels.iv import IV2SLS

from dpjax import accounting as A
from dpjax import base
from dpjax.algorithms import dp_iv
from dpjax.mechanisms import bounded_mean, clip_l2, clipped_outer_mean
from dpjax.models import iv
from dpjax.models.iv import IVData, LinearIV
from tests.helpers import assert_scale_with_power, compile_count, same_key

MODEL = LinearIV(p=2, q=3, r=2)
# Jitted once: the sensitivity tests evaluate the statistics many times.
G1 = jax.jit(iv.clipped_first_stage_gradient)
G2 = jax.jit(iv.clipped_second_stage_gradient)


def _problem(n=400, seed=0, model=MODEL):
    prm = model.draw_parameters(jax.random.key(1000 + seed))
    data = model.simulate(jax.random.key(seed), n, model.pack(prm))
    return prm, data


def _hp(rho1=1.0, rho2=1.0, eta=0.5, alpha=0.05, gamma1=5.0, gamma2=5.0):
    return jax.tree_util.tree_map(jnp.asarray,
                                  dp_iv.make_hparams(rho1, rho2, eta, alpha, gamma1, gamma2))


def _lam(calibration, gamma, n, T, rho):
    """``lambda`` by the printed formulas (spec 004 §2.3): paper ``(2 gamma/n) sqrt(T/rho)``,
    tight ``(gamma/n) sqrt(2T/rho)``; 0 at ``rho = inf``. Written here, independently of the
    code's route through ``per_step_rho`` and the mechanism."""
    if math.isinf(rho):
        return 0.0
    if calibration == "paper":
        return 2.0 * gamma / n * math.sqrt(T / rho)
    return gamma / n * math.sqrt(2.0 * T / rho)


def _events(est, hp, n, q=3, p=2):
    """The privacy events of a run of ``est`` on ``n`` records (one step probed on a zero batch
    of the right shape, repeated ``T`` times)."""
    zero = IVData(jnp.zeros((n, q)), jnp.zeros((n, p)), jnp.zeros((n,)))
    return base.probe_events(est, zero, (jnp.zeros((q, p)), jnp.zeros(p)), hp)


def _ledger(est, n, hp, q=3, p=2):
    return est.ledger(n, hp, _events(est, hp, n, q, p))


def _replace(data: IVData, i: int, z=None, x=None, y=None) -> IVData:
    zz, xx, yy = (np.asarray(v).copy() for v in data)
    if z is not None:
        zz[i] = z
    if x is not None:
        xx[i] = x
    if y is not None:
        yy[i] = y
    return IVData(jnp.asarray(zz), jnp.asarray(xx), jnp.asarray(yy))


# ---------------------------------------------------------------------------------------------
# Clipping and sensitivity on adversarial neighbours
# ---------------------------------------------------------------------------------------------


def test_clipped_outer_mean_equals_materialised_frobenius_clipping():
    rng = np.random.default_rng(0)
    n, k, m, C = 64, 3, 4, 2.5
    a = jnp.asarray(rng.standard_cauchy((n, k)), jnp.float32)
    b = jnp.asarray(rng.normal(size=(n, m)) * rng.exponential(3.0, (n, 1)), jnp.float32)
    fast = clipped_outer_mean(a, b, C)
    outer = a[:, :, None] * b[:, None, :]
    clipped = clip_l2(outer, C, axis=(-2, -1))
    ref = bounded_mean(clipped, 2 * C, "l2")
    np.testing.assert_allclose(np.asarray(fast.value), np.asarray(ref.value), rtol=2e-5,
                               atol=1e-6)
    assert float(fast.sensitivity) == pytest.approx(float(ref.sensitivity)) == 2 * C / n
    assert fast.norm == "l2" and fast.relation == "replace-one"
    norms = np.linalg.norm(np.asarray(clipped).reshape(n, -1), axis=1)
    assert norms.max() <= C * (1 + 1e-6) and (norms > 0.999 * C).sum() > 5  # clipping is active
    # gamma = inf is a no-op
    np.testing.assert_allclose(np.asarray(clipped_outer_mean(a, b, np.inf).value),
                               np.asarray(outer.mean(0)), rtol=1e-5)


def test_clipped_sums_over_blocks_give_the_clipped_means():
    """The clipped sums of both stages, added up over blocks of records (as a padded step
    adds them, :func:`dpjax.base.fold_rows`), give the clipped means and their sensitivities;
    zero rows add nothing. A wrong count moves value and sensitivity."""
    from dpjax.mechanisms import clipped_outer_mean_from_sum, clipped_outer_sum

    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.standard_cauchy((40, 3)), jnp.float32)
    b = jnp.asarray(rng.normal(size=(40, 2)), jnp.float32)
    whole = clipped_outer_mean(a, b, 1.5)
    parts = sum(clipped_outer_sum(a[i:i + 16], b[i:i + 16], 1.5) for i in range(0, 40, 16))
    got = clipped_outer_mean_from_sum(parts, 1.5, 40)
    np.testing.assert_allclose(got.value, whole.value, rtol=1e-5, atol=1e-7)
    assert float(got.sensitivity) == pytest.approx(float(whole.sensitivity)) == 2 * 1.5 / 40
    assert float(clipped_outer_mean_from_sum(parts, 1.5, 41).sensitivity) != pytest.approx(
        float(whole.sensitivity))

    model = LinearIV(2, 3, 2)
    data = model.simulate(jax.random.key(0), 50, model.pack(model.draw_parameters(
        jax.random.key(1))))
    theta, beta = 0.5 * jnp.ones((3, 2)), jnp.asarray([0.3, -0.2])
    padded = iv.mask_rows(iv.IVData(*(jnp.concatenate([x, jnp.full((14,) + x.shape[1:], 7.0)])
                                      for x in data)), jnp.arange(64) < 50)
    for total, want, gamma in (
            (sum(iv.clipped_first_stage_sum(theta, iv.IVData(*(x[i:i + 16] for x in padded)), 0.8)
                 for i in range(0, 64, 16)), iv.clipped_first_stage_gradient(theta, data, 0.8),
             0.8),
            (sum(iv.clipped_second_stage_sum(theta, beta, iv.IVData(*(x[i:i + 16] for x in
                                                                      padded)), 0.6)
                 for i in range(0, 64, 16)),
             iv.clipped_second_stage_gradient(theta, beta, data, 0.6), 0.6)):
        got = iv.clipped_stage_mean(total, gamma, 50)
        np.testing.assert_allclose(got.value, want.value, rtol=1e-5, atol=1e-7)
        assert float(got.sensitivity) == pytest.approx(float(want.sensitivity)) == 2 * gamma / 50
    np.testing.assert_allclose(iv.first_stage_sum(theta, padded) / 50,
                               iv.first_stage_gradient(theta, data), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(iv.second_stage_sum(theta, beta, padded) / 50,
                               iv.second_stage_gradient(theta, beta, data), rtol=1e-5, atol=1e-7)


def test_first_stage_sensitivity_is_attained_by_an_adversarial_neighbour():
    n, gamma = 50, 3.0
    prm, data = _problem(n=n)
    theta = jnp.asarray(prm.theta) * 0.7  # any public iterate
    big = 1e4
    z_a = np.zeros(3, np.float32)
    z_a[0] = big
    v = np.array([0.6, -0.8], np.float32)
    fit = np.asarray(theta).T @ z_a
    # residuals Theta^T z - x = +-big v: the clipped terms are +-gamma e1 v^T, 2 gamma apart
    da = _replace(data, 7, z=z_a, x=fit - big * v)
    db = _replace(data, 7, z=z_a, x=fit + big * v)
    sa = G1(theta, da, gamma)
    sb = G1(theta, db, gamma)
    gap = float(jnp.linalg.norm(sa.value - sb.value))
    assert float(sa.sensitivity) == pytest.approx(2 * gamma / n)
    assert gap <= float(sa.sensitivity) * (1 + 1e-5)
    assert gap == pytest.approx(2 * gamma / n, rel=1e-4)  # tight
    # Random heavy-tailed replacements never exceed it; per-sample norms are at most gamma.
    rng = np.random.default_rng(1)
    s0 = G1(theta, data, gamma)
    for _ in range(20):
        dc = _replace(data, int(rng.integers(n)), z=rng.standard_cauchy(3) * 1e3,
                      x=rng.standard_cauchy(2) * 1e3)
        sc = G1(theta, dc, gamma)
        assert float(jnp.linalg.norm(s0.value - sc.value)) <= 2 * gamma / n * (1 + 1e-5)
    per = clip_l2(iv.first_stage_per_sample_gradients(theta, da), gamma, axis=(-2, -1))
    assert float(jnp.max(jnp.sqrt(jnp.sum(per**2, axis=(1, 2))))) <= gamma * (1 + 1e-6)


def test_second_stage_sensitivity_is_attained_by_an_adversarial_neighbour():
    n, gamma = 50, 2.0
    prm, data = _problem(n=n)
    theta, beta = jnp.asarray(prm.theta) * 0.9, jnp.asarray(prm.beta) * 0.5
    big = 1e4
    z_a = np.array([0.0, big, 0.0], np.float32)
    fit = float(np.asarray(theta).T @ z_a @ np.asarray(beta))
    # s = z^T Theta beta - y = +-big: the clipped terms are +-gamma w/||w||
    da = _replace(data, 3, z=z_a, y=fit - big)
    db = _replace(data, 3, z=z_a, y=fit + big)
    sa = G2(theta, beta, da, gamma)
    sb = G2(theta, beta, db, gamma)
    gap = float(jnp.linalg.norm(sa.value - sb.value))
    assert sa.value.shape == (2,) and sa.norm == "l2"
    assert float(sa.sensitivity) == pytest.approx(2 * gamma / n)
    assert gap <= float(sa.sensitivity) * (1 + 1e-5)
    assert gap == pytest.approx(2 * gamma / n, rel=1e-4)
    rng = np.random.default_rng(2)
    s0 = G2(theta, beta, data, gamma)
    for _ in range(20):
        dc = _replace(data, int(rng.integers(n)), z=rng.standard_cauchy(3) * 1e3,
                      y=float(rng.standard_cauchy() * 1e4))
        sc = G2(theta, beta, dc, gamma)
        assert float(jnp.linalg.norm(s0.value - sc.value)) <= 2 * gamma / n * (1 + 1e-5)
    # Unclipped, the same neighbour moves the gradient by orders of magnitude more.
    raw = iv.second_stage_gradient(theta, beta, da) - iv.second_stage_gradient(theta, beta, db)
    assert float(jnp.linalg.norm(raw)) > 1e4 * 2 * gamma / n


def test_one_noiseless_step_moves_by_at_most_step_size_times_sensitivity(key):
    n, T = 50, 5
    prm, data = _problem(n=n)
    est = dp_iv.dp_2s_gd(T)
    state = dp_iv.DPIVState(jnp.asarray(prm.theta) * 0.8, jnp.asarray(prm.beta) * 0.6)
    hp = _hp(np.inf, np.inf, eta=0.7, alpha=0.3, gamma1=2.0, gamma2=1.5)
    z_a = np.array([1e3, -1e3, 5e2], np.float32)
    da = _replace(data, 0, z=z_a, x=np.array([1e4, -1e4], np.float32), y=1e5)
    a, _ = est.step(jax.random.fold_in(key, 0), state, data, hp)
    b, _ = est.step(jax.random.fold_in(key, 1), state, da, hp)  # rho = inf: keys unused
    assert float(jnp.linalg.norm(a.theta - b.theta)) <= 0.7 * 2 * 2.0 / n * (1 + 1e-5)
    assert float(jnp.linalg.norm(a.beta - b.beta)) <= 0.3 * 2 * 1.5 / n * (1 + 1e-5)


# ---------------------------------------------------------------------------------------------
# Noise scale, both calibrations, with power
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("calibration", ["paper", "tight"])
def test_noise_scale_with_power(key, calibration):
    n, T, g1, g2, rho1, rho2, eta, alpha = 200, 10, 3.0, 2.0, 0.5, 2.0, 0.6, 0.2
    prm, data = _problem(n=n)
    est = dp_iv.dp_2s_gd(T, calibration)
    state = dp_iv.DPIVState(jnp.asarray(prm.theta) * 0.5, jnp.asarray(prm.beta) * 0.5)
    hp = _hp(rho1, rho2, eta, alpha, g1, g2)
    clean, _ = est.step(jax.random.key(0), state, data, _hp(np.inf, np.inf, eta, alpha, g1, g2))
    draws, info = jax.jit(jax.vmap(lambda k: est.step(k, state, data, hp)))(
        jax.random.split(key, 3000))
    # The printed formulas (spec 004 §2.3), not the code's route through per_step_rho.
    lam1, lam2 = _lam(calibration, g1, n, T, rho1), _lam(calibration, g2, n, T, rho2)
    np.testing.assert_allclose(np.asarray(info.sigma1), lam1, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(info.sigma2), lam2, rtol=1e-5)
    # The events carry the scale that drew the noise and the declared sensitivity 2 gamma/n.
    ev1, ev2 = info.events
    np.testing.assert_allclose(np.asarray(ev1.scale), lam1, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ev2.scale), lam2, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ev1.sensitivity), 2 * g1 / n, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ev2.true_sensitivity), 2 * g2 / n, rtol=1e-6)
    # Noise after the step size: Theta^(t+1) - clean = -eta Xi, beta^(t+1) - clean = -alpha nu.
    xi = (np.asarray(draws.theta) - np.asarray(clean.theta)) / -eta  # (3000, q, p) i.i.d.
    nu = (np.asarray(draws.beta) - np.asarray(clean.beta)) / -alpha  # (3000, p)
    assert_scale_with_power(xi, "norm", lam1)
    assert_scale_with_power(nu, "norm", lam2)
    # The two calibrations differ by sqrt(2): each is distinguishable from the other.
    other = math.sqrt(2) if calibration == "tight" else 1 / math.sqrt(2)
    from scipy import stats

    assert stats.kstest(xi.ravel(), "norm", args=(0.0, lam1 * other)).pvalue < 1e-6
    # Independent noise across entries and stages.
    assert abs(np.corrcoef(xi[:, 0, 0], nu[:, 0])[0, 1]) < 0.08
    assert abs(np.corrcoef(xi[:, 0, 0], xi[:, 1, 1])[0, 1]) < 0.08


def test_calibration_formula_reference_values():
    # spec 004 §6 B1: gamma (c0 = 1) and lambda at rho = 1 with the paper's calibration; the
    # noise scale the estimator draws (read off its events) is the printed lambda.
    for (n, T, q), g_ref, lam_ref in [((1000, 20, 5), 37.2, 0.332), ((2191, 15, 4), 35.1, 0.124),
                                      ((8065, 20, 1), 26.2, 0.029), ((2000, 20, 5), 38.3, 0.171)]:
        g = dp_iv.clipping_threshold(n, q, T)
        assert g == pytest.approx(g_ref, abs=0.05)
        assert _lam("paper", g, n, T, 1.0) == pytest.approx(lam_ref, abs=6e-4)
        ev1, ev2 = _events(dp_iv.dp_2s_gd(T, "paper"),
                           dp_iv.make_hparams(1.0, 1.0, 0.5, 0.1, g, g), n, q=q, p=1)
        for ev in (ev1, ev2):
            np.testing.assert_allclose(np.asarray(ev.scale), lam_ref, atol=6e-4)
    hp = dp_iv.make_hparams(0.3, 0.3, 0.5, 0.1, 3.0, 3.0)
    paper, tight = (_ledger(dp_iv.dp_2s_gd(7, c), 100, hp) for c in ("paper", "tight"))
    for rp, rt in zip(paper.releases, tight.releases):
        assert rp.scale == pytest.approx(math.sqrt(2) * rt.scale, rel=1e-6)
        assert rt.scale == pytest.approx(_lam("tight", 3.0, 100, 7, 0.3), rel=1e-6)
    none = _ledger(dp_iv.dp_2s_gd(7, "tight"), 100,
                   dp_iv.make_hparams(np.inf, np.inf, 0.5, 0.1, 3.0, 3.0))
    assert all(r.scale == 0.0 for r in none.releases)


# ---------------------------------------------------------------------------------------------
# Accounting: delivered rho, composition and conversion against dp_accounting
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("calibration,factor", [("paper", 0.5), ("tight", 1.0)])
def test_ledger_delivers_the_rho_its_noise_earns(calibration, factor):
    n, T, g1, g2, rho1, rho2 = 1000, 20, 37.0, 20.0, 0.3, 1.7
    est = dp_iv.dp_2s_gd(T, calibration)
    led = _ledger(est, n, dp_iv.make_hparams(rho1, rho2, 0.5, 0.1, g1, g2))
    assert led.composition == "zcdp" and led.relation == "replace-one" and led.is_private
    assert led.requested.rho == pytest.approx(rho1 + rho2)
    assert led.guarantee.rho == pytest.approx(factor * (rho1 + rho2), rel=1e-6)  # float32 hp
    # Per stage, rho_stage = 2 T gamma^2 / (n^2 lambda^2) with lambda by the printed formula.
    for rel, g, rho in zip(led.releases, (g1, g2), (rho1, rho2)):
        lam = _lam(calibration, g, n, T, rho)
        assert rel.count == T and rel.mechanism == "gaussian-zcdp" and rel.norm == "l2"
        assert rel.delivered().rho * T == pytest.approx(2 * T * g**2 / (n**2 * lam**2))
        assert rel.sensitivity == pytest.approx(2 * g / n) and rel.sensitivity_ratio == 1.0
        assert rel.scale / rel.sensitivity * 2 * g / n == pytest.approx(lam)
    assert ("over-noised" in led.variant) == (calibration == "paper")
    # The (epsilon, delta) conversion at delta = 1e-5 (default).
    assert led.approx_dp.delta == 1e-5
    assert led.approx_dp.epsilon == pytest.approx(
        A.zcdp_to_approx_dp(factor * (rho1 + rho2), 1e-5).epsilon)


def test_zcdp_composition_and_conversion_against_dp_accounting():
    n, T, g1, g2, rho1, rho2, delta = 500, 15, 10.0, 4.0, 0.4, 0.9, 1e-5
    led = _ledger(dp_iv.dp_2s_gd(T, "paper"), n,
                  dp_iv.make_hparams(rho1, rho2, 0.5, 0.1, g1, g2, delta))
    m1, m2 = (r.scale / r.sensitivity for r in led.releases)  # sigma / Delta per stage
    event = dpa.ComposedDpEvent([
        dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(m1), T),
        dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(m2), T),
    ])
    # RDP of the composed Gaussians is rho * alpha with rho = T/(2 m1^2) + T/(2 m2^2).
    acc = rdp.RdpAccountant(orders=[2.0, 8.0, 32.0]).compose(event)
    np.testing.assert_allclose(acc._rdp, led.guarantee.rho * np.array([2.0, 8.0, 32.0]),
                               rtol=1e-10)
    assert led.guarantee.rho == pytest.approx((rho1 + rho2) / 2)
    orders = 1 + np.logspace(-4, 4, 50_000)
    eps_rdp = rdp.RdpAccountant(orders=list(orders)).compose(event).get_epsilon(delta)
    assert led.approx_dp.epsilon == pytest.approx(eps_rdp, rel=1e-4)
    # The exact (PLD) epsilon of the same Gaussians is smaller: the zCDP bound is valid.
    eps_pld = pld.PLDAccountant().compose(event).get_epsilon(delta)
    mu = math.sqrt(T / m1**2 + T / m2**2)
    assert A.gaussian_epsilon(mu, delta) == pytest.approx(eps_pld, rel=1e-2)
    assert eps_pld < led.approx_dp.epsilon


@pytest.mark.parametrize("rho,eps", [(0.1, 2.2460), (1.0, 7.7861), (10.0, 31.4597)])
def test_paper_footnote_conversions(rho, eps):
    # spec 004 §1.2: Bun & Steinke at delta = 1e-5 (the paper prints 2.25, 7.79, 31.47).
    assert A.zcdp_to_approx_dp(rho, 1e-5, "bun-steinke").epsilon == pytest.approx(eps, abs=1e-4)
    assert A.zcdp_to_approx_dp(rho, 1e-5).epsilon < eps  # the default (CKS) is tighter


def test_rho_inf_ledgers_are_not_private_and_baselines_say_so():
    hp = dp_iv.make_hparams(np.inf, np.inf, 0.5, 0.1, np.inf, np.inf)
    assert not _ledger(dp_iv.dp_2s_gd(10), 100, hp).is_private
    for est in (dp_iv.two_stage_gd(10),):
        led = _ledger(est, 100, hp)
        assert not led.is_private and led.variant == "non-private"
        assert all(r.mechanism == "none" for r in led.releases)


# ---------------------------------------------------------------------------------------------
# The rho = inf limit: 2S-GD, 2SLS, linearmodels
# ---------------------------------------------------------------------------------------------


def _numpy_two_stage_gd(z, x, y, eta, alpha, T):
    """Algorithm 2 written from the paper: simultaneous updates, no clipping, no noise."""
    n, q = z.shape
    p = x.shape[1]
    theta, beta = np.zeros((q, p)), np.zeros(p)
    path = []
    for _ in range(T):
        g_theta = sum(np.outer(z[i], z[i] @ theta - x[i]) for i in range(n)) / n
        g_beta = sum((theta.T @ z[i]) * (z[i] @ theta @ beta - y[i]) for i in range(n)) / n
        theta, beta = theta - eta * g_theta, beta - alpha * g_beta
        path.append(beta)
    return np.array(path), theta


def test_rho_inf_without_clipping_is_exactly_two_stage_gd(key):
    prm, data = _problem(n=120)
    T, eta, alpha = 30, 0.6, 0.03
    hp = _hp(np.inf, np.inf, eta, alpha, np.inf, np.inf)
    state0 = dp_iv._init((jnp.zeros((3, 2)), jnp.zeros(2)))
    _, dp_trace = base.run(dp_iv.dp_2s_gd(T), key, data, state0, hp)
    _, gd_trace = base.run(dp_iv.two_stage_gd(T), jax.random.key(1), data, state0, hp)
    np.testing.assert_allclose(np.asarray(dp_trace.beta), np.asarray(gd_trace.beta), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(np.asarray(dp_trace.theta), np.asarray(gd_trace.theta),
                               rtol=1e-6, atol=1e-7)
    ref, theta_ref = _numpy_two_stage_gd(*(np.asarray(v, np.float64) for v in data), eta, alpha, T)
    np.testing.assert_allclose(np.asarray(gd_trace.beta), ref, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(np.asarray(gd_trace.theta[-1]), theta_ref, rtol=2e-4, atol=2e-5)
    # Update order: beta^(1) uses Theta^(0) = 0, so it is exactly 0 without noise.
    np.testing.assert_array_equal(np.asarray(dp_trace.beta[0]), np.zeros(2))


@pytest.mark.parametrize("p,q", [(2, 2), (2, 4)])
def test_rho_inf_converges_to_2sls_and_linearmodels_iv2sls(key, p, q):
    """In float64, DP-2S-GD at rho = inf (clipping thresholds above every gradient norm, and
    none) reaches closed-form 2SLS to ~1e-10; both equal linearmodels' IV2SLS (no constant)."""
    model = LinearIV(p=p, q=q, r=2)
    with jax.enable_x64(True):
        prm = model.draw_parameters(jax.random.key(7))
        data = model.simulate(jax.random.key(8), 600, model.pack(prm).astype(np.float64))
        z, x, y = (np.asarray(v, np.float64) for v in data)
        assert z.dtype == np.float64
        # Closed-form 2SLS in numpy (Def 2.3) and linearmodels.
        theta_hat = np.linalg.solve(z.T @ z, z.T @ x)
        h = theta_hat.T @ z.T @ z @ theta_hat
        beta_ref = np.linalg.solve(h, theta_hat.T @ z.T @ y)
        lm = IV2SLS(y, None, x, z).fit(cov_type="unadjusted").params.to_numpy()
        np.testing.assert_allclose(lm, beta_ref, rtol=1e-10)
        tsls = dp_iv.fit_2sls(data)
        beta_2sls, theta_2sls = tsls.estimate, tsls.state.theta
        np.testing.assert_allclose(beta_2sls, beta_ref, rtol=1e-10)
        np.testing.assert_allclose(theta_2sls, theta_hat, rtol=1e-10)
        # Step sizes with room (the test may use the data: it is a numerical check).
        eta = 1.0 / np.linalg.eigvalsh(z.T @ z / 600).max()
        alpha = 1.0 / np.linalg.eigvalsh(h / 600).max()
        for gamma in (np.inf, 1e8):
            res = dp_iv.fit_dp_2s_gd(same_key(key), data, rho1=np.inf, rho2=np.inf, eta=eta,
                                     alpha=alpha, num_iterations=1500, gamma1=gamma,
                                     gamma2=gamma)
            assert res.estimate.dtype == np.float64
            np.testing.assert_allclose(res.estimate, beta_ref, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(res.state.theta, theta_hat, rtol=1e-10, atol=1e-12)
            assert res.trace[1].max() == 0.0
            assert not res.ledger.is_private


# ---------------------------------------------------------------------------------------------
# Update order, determinism, compilation
# ---------------------------------------------------------------------------------------------


def test_first_beta_is_pure_noise_independent_of_the_data(key):
    prm, data = _problem(n=200)
    _, other = _problem(n=200, seed=3)
    kw = dict(rho1=1.0, rho2=1.0, eta=0.5, alpha=0.05, num_iterations=4, gamma1=5.0, gamma2=5.0)
    a = dp_iv.fit_dp_2s_gd(same_key(key), data, **kw)
    b = dp_iv.fit_dp_2s_gd(same_key(key), other, **kw)
    # beta^(1) = -alpha nu^(0)
    np.testing.assert_array_equal(a.trace[0].beta[0], b.trace[0].beta[0])
    assert np.abs(a.trace[0].beta[0]).max() > 0
    assert not np.allclose(a.trace[0].theta[0], b.trace[0].theta[0])  # Theta^(1) sees the data
    assert not np.allclose(a.trace[0].beta[1], b.trace[0].beta[1])


def test_determinism_under_a_fixed_key(key):
    prm, data = _problem(n=200)
    kw = dict(rho1=0.5, rho2=2.0, eta=0.5, alpha=0.05, num_iterations=4)
    r1 = dp_iv.fit_dp_2s_gd(same_key(key), data, **kw)
    r2 = dp_iv.fit_dp_2s_gd(same_key(key), data, **kw)
    r3 = dp_iv.fit_dp_2s_gd(jax.random.fold_in(key, 1), data, **kw)
    np.testing.assert_array_equal(r1.trace[0].beta, r2.trace[0].beta)
    np.testing.assert_array_equal(r1.trace[0].theta, r2.trace[0].theta)
    assert not np.array_equal(r1.trace[0].beta, r3.trace[0].beta)


def test_no_recompile_when_budgets_steps_or_clipping_change(key):
    prm, data = _problem(n=200)
    kw = dict(num_iterations=4)
    dp_iv.fit_dp_2s_gd(jax.random.fold_in(key, 0), data, rho1=1.0, rho2=1.0, eta=0.5,
                       alpha=0.05, **kw)
    before = compile_count(base._fit_run)
    for i, (r1, r2, e, a, g) in enumerate([(0.1, 3.0, 0.4, 0.02, 2.0), (np.inf, 0.5, 0.9, 0.1, 9.0),
                                           (np.inf, np.inf, 0.3, 0.07, np.inf)]):
        dp_iv.fit_dp_2s_gd(jax.random.fold_in(key, i + 1), data, rho1=r1, rho2=r2, eta=e,
                           alpha=a, gamma1=g, gamma2=g, **kw)
    assert compile_count(base._fit_run) == before
    assert dp_iv.dp_2s_gd(4) is dp_iv.dp_2s_gd(4, "tight")  # cached builder


# ---------------------------------------------------------------------------------------------
# Algorithm 3 ("privacy for beta only"): not DP as claimed
# ---------------------------------------------------------------------------------------------


def test_beta_only_variant_true_sensitivity_and_ledger(key):
    n, gamma2, eta = 100, 2.0, 0.5
    prm, data = _problem(n=n)
    # One record replaced: Theta^(t) (unclipped, un-noised) moves, so every clipped beta-term does.
    d2 = _replace(data, 0, z=np.array([30.0, -30.0, 30.0], np.float32),
                  x=np.array([-300.0, 300.0], np.float32))
    th_a = th_b = jnp.zeros((3, 2))
    for _ in range(3):
        th_a = th_a - eta * iv.first_stage_gradient(th_a, data)
        th_b = th_b - eta * iv.first_stage_gradient(th_b, d2)
    beta = jnp.asarray(prm.beta) * 0.3
    ga = iv.clipped_second_stage_gradient(th_a, beta, data, gamma2)
    gb = iv.clipped_second_stage_gradient(th_b, beta, d2, gamma2)
    gap = float(jnp.linalg.norm(ga.value - gb.value))
    assert gap > 10 * float(ga.sensitivity)  # the declared 2 gamma2/n is violated
    assert gap <= 2 * gamma2 * (1 + 1e-5)  # the true bound
    led = _ledger(dp_iv.dp_2s_gd_beta_only(20), n,
                  dp_iv.make_hparams(np.inf, 1.0, 0.5, 0.1, np.inf, gamma2))
    assert "NOT DP as claimed" in led.variant
    theta_rel, rel = led.releases
    # The first stage is a non-private release: the transcript is not DP.
    assert theta_rel.mechanism == "none" and not led.is_private
    # The beta releases carry the true sensitivity 2 gamma2 (n x the declared 2 gamma2/n) ...
    assert rel.sensitivity == pytest.approx(2 * gamma2 / n)
    assert rel.sensitivity_ratio == pytest.approx(n, rel=1e-6) and "true 2*gamma2" in rel.statistic
    # ... so alone they give n^2 x the (paper-calibrated) rho2/2: vacuous.
    assert sum(b.rho for b in rel.budgets()) == pytest.approx(n**2 * 0.5, rel=1e-6)
    res = dp_iv.fit_dp_2s_gd_beta_only(key, data, rho2=1.0, eta=0.5, alpha=0.05,
                                       num_iterations=5, gamma2=gamma2)
    assert "NOT DP" in res.ledger.variant and np.isfinite(res.estimate).all()
    assert not res.ledger.is_private
    assert res.ledger.releases[1].sensitivity_ratio == pytest.approx(n, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# Step-size and clipping rules (spec 004 §2.4, §7 item 9)
# ---------------------------------------------------------------------------------------------


def test_step_size_rules():
    theta = np.array([[5.3, 0.4], [-0.7, 4.1], [0.2, 0.9]])
    s = dp_iv.paper_step_sizes(theta, n=1000, tau=5.0)
    d = (math.sqrt(3) + math.sqrt(5)) / math.sqrt(1000)
    sv = np.linalg.svd(theta, compute_uv=False)
    assert s.delta == pytest.approx(d)
    assert s.gamma_up == pytest.approx((1 + d) ** 2 * sv[0] ** 2)
    assert s.gamma_low == pytest.approx((1 - d) ** 2 * sv[-1] ** 2)
    assert s.eta == pytest.approx(1 / (1 + d) ** 2) and s.eta_max == pytest.approx(2 * s.eta)
    assert s.alpha == pytest.approx(2 / (2 * s.gamma_up + s.gamma_low))
    assert s.alpha_max == pytest.approx(2 * s.alpha)
    k_theta, k_beta = dp_iv.contraction_factors(s.eta_opt, s.alpha_opt, s)
    assert k_beta == pytest.approx(s.gamma_up / (s.gamma_up + s.gamma_low))
    assert k_theta == pytest.approx(2 * d / (1 + d**2))
    big = dp_iv.paper_step_sizes(theta, n=10**12)
    assert big.alpha_max == pytest.approx(4 / (2 * sv[0] ** 2 + sv[-1] ** 2), rel=1e-4)
    assert big.eta_max == pytest.approx(2.0, rel=1e-4)
    psi = dp_iv.psi_tau(1000, 5, 5, sigma2=math.sqrt(1 + 4.0))
    assert psi == pytest.approx(math.sqrt(5) * 5 * (5 + math.log(50)) / (math.sqrt(1000)
                                * (1 - (math.sqrt(5) + math.sqrt(5)) / math.sqrt(1000)) ** 2))


# ---------------------------------------------------------------------------------------------
# The simulator
# ---------------------------------------------------------------------------------------------


def test_simulator_confounding_exclusion_and_identification():
    model = LinearIV(p=2, q=3, r=2)
    prm = model.draw_parameters(jax.random.key(3))
    np.testing.assert_allclose(model.unpack(model.pack(prm)).theta, prm.theta)
    n = 100_000
    data = model.simulate(jax.random.key(4), n, model.pack(prm))
    z, x, y = (np.asarray(v, np.float64) for v in data)
    assert z.shape == (n, 3) and x.shape == (n, 2) and y.shape == (n,)
    e2 = x - z @ prm.theta  # Phi^T u + eps_x
    e1 = y - x @ prm.beta  # varphi^T u + eps_y
    # Confounding Cov(eps2, eps1) = Phi^T varphi (the errors are labelled as in eq. 1).
    def close(samples, target):  # sample means within 5 Monte Carlo standard errors
        se = samples.std(axis=0) / math.sqrt(n)
        assert (np.abs(samples.mean(axis=0) - target) < 5 * se).all()

    close(e2 * e1[:, None], model.confounding_covariance(prm))
    close(e2[:, :, None] * e2[:, None, :], np.eye(2) + prm.phi.T @ prm.phi)
    close(z * e1[:, None], 0.0)  # exclusion
    close(z[:, :, None] * z[:, None, :], np.eye(3))  # isotropic instruments
    beta_2sls = dp_iv.fit_2sls(data).estimate
    ols = np.linalg.lstsq(x, y, rcond=None)[0]
    err_2sls, err_ols = np.linalg.norm(beta_2sls - prm.beta), np.linalg.norm(ols - prm.beta)
    assert err_2sls < 0.02 and err_ols > 5 * err_2sls  # OLS is biased by the confounder


def test_parameter_draw_follows_the_stated_design():
    model = LinearIV(p=20, q=20, r=20)
    prm = model.draw_parameters(jax.random.key(0))
    e = prm.theta - 5 * np.eye(20)
    assert abs(e.mean()) < 0.15 and abs(e.std() - 1) < 0.1  # Theta = 5 I + N(0, 1)
    for v in (prm.beta, prm.phi, prm.varphi):
        assert abs(np.mean(v)) < 0.5 and 0.6 < np.std(v) < 1.4


# ---------------------------------------------------------------------------------------------
# Input validation at the public boundary
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(rho1=0.0), ValueError, "rho1 must be > 0"),
        (dict(rho2=-1.0), ValueError, "rho2 must be > 0"),
        (dict(rho1=float("nan")), ValueError, "rho1 must be > 0"),
        (dict(rho2="big"), TypeError, "rho2 must be a real number"),
        (dict(rho1=np.array([1.0, 2.0])), ValueError, "rho1 must be a scalar"),
        (dict(eta=0.0), ValueError, "eta must lie in"),
        (dict(alpha=np.inf), ValueError, "alpha must lie in"),
        (dict(num_iterations=0), ValueError, r"num_iterations must be an integer >= 1"),
        (dict(num_iterations=2.5), TypeError, "num_iterations must be an integer"),
        (dict(gamma1=-1.0), ValueError, "gamma1 must lie in"),
        (dict(gamma2=np.inf), ValueError, "gamma2 = inf"),
        (dict(calibration="loose"), ValueError, "calibration must be one of"),
        (dict(delta=1.0), ValueError, r"delta must lie in the open interval \(0, 1\)"),
        (dict(theta0=np.ones((2, 2))), ValueError, r"theta0 must have shape \(3, 2\)"),
        (dict(beta0=np.full(2, np.nan)), ValueError, "beta0 must be finite"),
    ],
)
def test_invalid_inputs_raise_naming_the_parameter(key, kwargs, exc, match):
    _, data = _problem(n=50)
    args = dict(rho1=1.0, rho2=1.0, eta=0.5, alpha=0.05, num_iterations=3) | kwargs
    with pytest.raises(exc, match=match):
        dp_iv.fit_dp_2s_gd(key, data, **args)


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda z, x, y: (z[:, 0], x, y), ValueError, "data.z must have 2 dimension"),
        (lambda z, x, y: (z, x[:10], y), ValueError, "same number of rows"),
        (lambda z, x, y: (z[:, :1], x, y), ValueError, "q >= p"),
        (lambda z, x, y: (z, x, np.where(np.arange(50) == 3, np.nan, y)), ValueError,
         "data.y must be finite"),
        (lambda z, x, y: (z.astype(complex), x, y), TypeError, "data.z must be a real array"),
        (lambda z, x, y: (z[:1], x[:1], y[:1]), ValueError, "at least 2 records"),
        (lambda z, x, y: z, TypeError, "IVData or a tuple"),
    ],
)
def test_invalid_data_raises(key, make, exc, match):
    _, data = _problem(n=50)
    bad = make(*(np.asarray(v) for v in data))
    with pytest.raises(exc, match=match):
        dp_iv.fit_dp_2s_gd(key, bad, rho1=1.0, rho2=1.0, eta=0.5, alpha=0.05, num_iterations=3)


def test_non_finite_iterates_raise_instead_of_returning_nan():
    _, data = _problem(n=50)
    with pytest.raises(FloatingPointError, match="step sizes are too large"):
        dp_iv.fit_two_stage_gd(data, eta=50.0, alpha=0.05, num_iterations=200)


# --------------------------------------------------------------------------------------------
# 2SLS without LAPACK: accuracy, no custom call, and a study sharded over two CPU devices
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("columns", ["unit", "badly-scaled"])
def test_least_squares_matches_numpy_svd_solver(columns):
    """The plain-XLA least squares behind 2SLS equals NumPy's SVD solver: to float32 rounding
    in float32 (also with column scales 1e-2 .. 1e3, where float32 `jnp.linalg.lstsq` loses the
    small columns to its rcond cut), and to 1e-10 in float64; vector and matrix right sides."""
    rng = np.random.default_rng(3)
    scales = np.ones(8) if columns == "unit" else np.logspace(-2, 3, 8)
    a = rng.normal(size=(1500, 8)) * scales
    b = a @ (rng.normal(size=(8, 3)) / scales[:, None]) + rng.normal(size=(1500, 3))
    for rhs in (b, b[:, 0]):
        ref = np.linalg.lstsq(a, rhs, rcond=None)[0]
        got = np.asarray(jax.jit(iv.least_squares)(jnp.asarray(a, jnp.float32),
                                                   jnp.asarray(rhs, jnp.float32)))
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=2e-3, atol=1e-4 * np.abs(ref).max())
        with jax.enable_x64(True):
            got64 = np.asarray(iv.least_squares(jnp.asarray(a), jnp.asarray(rhs)))
        np.testing.assert_allclose(got64, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


def test_two_stage_least_squares_compiles_without_custom_calls():
    """LAPACK custom calls (gesdd of `jnp.linalg.lstsq`) deadlocked IV studies sharded over
    several CPU devices; the 2SLS kernel must consist of plain XLA operations."""
    model = LinearIV(p=3, q=4, r=2)
    truth = model.pack(model.draw_parameters(jax.random.key(1)))
    data = model.simulate(jax.random.key(0), 200, truth)
    hlo = jax.jit(iv.two_stage_least_squares).lower(data).compile().as_text()
    assert "custom-call" not in hlo


def test_iv_study_runs_sharded_over_two_cpu_devices(tmp_path):
    """`dpjax run iv_fig3 --cpu-devices 2` finishes (it hung before 2SLS dropped LAPACK) and
    gives the one-device numbers: the DP errors exactly, the 2SLS diagnostics to float32."""
    import subprocess
    import sys

    import pandas as pd

    args = ["run", "iv_fig3", "--quick", "--reps", "2", "--set", "n_grid=500",
            "--set", "rho1_grid=5", "--set", "rho2_grid=5", "--set", "T=5"]
    for devices in ("1", "2"):
        subprocess.run([sys.executable, "-m", "dpjax.cli", *args, "--out", str(tmp_path / devices),
                        "--cpu-devices", devices], check=True, timeout=240, capture_output=True)
    one, two = (pd.read_csv(tmp_path / d / "summary.csv") for d in ("1", "2"))
    np.testing.assert_array_equal(two["mean"], one["mean"])
    np.testing.assert_allclose(two["error_2sls_mean"], one["error_2sls_mean"], rtol=1e-4)
