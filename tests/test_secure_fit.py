"""The floating-point-safe path for real releases: ``secure=True`` on fits.

Inside :func:`dpjax.mechanisms.secure_noise` the Laplace and Gaussian mechanisms release
``grid * (integer statistic + exact integer noise)``; a fit with ``secure=True`` plans its noise
factor on an all-zero data set, runs its steps eagerly under it, composes its ledger from the
discrete events, and delivers the request or raises.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpjax
from dpjax import _pld, base
from dpjax import discrete_noise as dn
from dpjax import mechanisms as M
from dpjax.accounting import GAUSSIAN_CURVE_NOTE, ZCDP, ApproxDP, PrivacyBudgetError
from dpjax.algorithms import dp_em, dp_glm, dp_iv, ldp_sparse
from dpjax.examples import dp_mean
from dpjax.mechanisms import secure
from dpjax.models import iv
from dpjax.models.glm import GLM, sparse_sphere_beta
from dpjax.models.gmm import GaussianMixture


def _stat(value, sensitivity, norm="l2"):
    return M.BoundedStatistic(jnp.asarray(value, jnp.float32), sensitivity, norm)


@pytest.fixture(scope="module")
def iv_data():
    model = iv.LinearIV(p=2, q=3, r=2)
    prm = model.draw_parameters(jax.random.key(0))
    return model.simulate(jax.random.key(1), 600, model.pack(prm))


# ---- the mechanisms --------------------------------------------------------------------------


def test_secure_releases_lie_on_the_grid_and_carry_discrete_events(key):
    grid = 2.0**-6
    x = np.random.default_rng(0).normal(size=50).astype(np.float32)
    k1, k2, k3 = jax.random.split(key, 3)
    with M.secure_noise(grid):
        g, ev_g = M.gaussian_mechanism_zcdp(k1, _stat(x, 1.0), 0.5)
        c, ev_c = M.gaussian_mechanism(k2, _stat(x, 1.0), 0.5, 1e-5)
        lap, ev_l = M.laplace_mechanism(k3, _stat(x, 1.0, "l1"), 0.5)
    for out in (g, c, lap):
        units = np.asarray(out, np.float64) / grid
        np.testing.assert_array_equal(units, np.round(units))  # exact multiples of the grid
    assert (ev_g.kind, ev_c.kind, ev_l.kind) == ("discrete-gaussian",) * 2 + ("discrete-laplace",)
    # the budget carries over (in grid units, for the rounded statistic's sensitivity)
    rho = 0.5 * (float(ev_g.true_sensitivity) / float(ev_g.scale)) ** 2
    assert rho == pytest.approx(0.5, rel=1e-5) and rho <= 0.5
    eps = float(ev_l.true_sensitivity) / float(ev_l.scale)
    assert eps == pytest.approx(0.5, rel=1e-5) and eps <= 0.5


@pytest.mark.parametrize("factor, ok", [(1.0, True), (2 / 3, False), (1.5, False)])
def test_secure_gaussian_noise_has_the_calibrated_scale(key, factor, ok):
    """Noise-scale test with power: the spread of a secure zCDP release of a zero vector matches
    sigma = Delta_Z * grid / sqrt(2 rho) and not 2/3 or 3/2 of it."""
    d, rho, grid = 20000, 0.5, 2.0**-4
    with M.secure_noise(grid):
        out, ev = M.gaussian_mechanism_zcdp(key, _stat(np.zeros(d), 1.0), rho)
    sigma = float(ev.scale) * grid  # the event's scale is in grid units
    delta_z = math.sqrt(math.floor((1.0 / grid + math.sqrt(d)) ** 2))
    assert float(ev.sensitivity) == pytest.approx(delta_z, rel=1e-6)
    assert sigma == pytest.approx(delta_z * grid / math.sqrt(2 * rho), rel=1e-5)
    sd = float(np.std(np.asarray(out, np.float64)))
    assert (abs(sd / (factor * sigma) - 1) < 0.03) is ok


def test_secure_noise_refuses_what_it_cannot_make_safe(key):
    stat = _stat(np.zeros(4), 1.0, "linf")
    with M.secure_noise():
        with pytest.raises(ValueError, match="needs concrete values"):  # exact peeling too
            jax.jit(lambda k, eps: M.noisy_hard_threshold(k, stat, 1, eps, 1e-5))(key, 0.5)
        with pytest.raises(ValueError, match="no floating-point-safe path"):
            M.gaussian_noise(key, (3,), 1.0)
        with pytest.raises(ValueError, match="needs concrete values"):
            # a traced sensitivity (e.g. from swept hyperparameters) cannot be made exact
            jax.jit(lambda k, sens: M.gaussian_mechanism_zcdp(
                k, _stat(np.zeros(3), sens), 0.5))(key, 1.0)
    with pytest.raises(ValueError, match="power of two"):
        with M.secure_noise(0.3):
            pass
    # outside the block the fast path is back
    assert M.gaussian_mechanism_zcdp(key, _stat(np.zeros(3), 1.0), 0.5)[1].kind == \
        "gaussian-zcdp"


# ---- the fits --------------------------------------------------------------------------------


def test_secure_iv_fit_delivers_the_requested_rho_from_discrete_events(iv_data):
    kw = dict(rho1=0.5, rho2=0.5, eta=0.5, alpha=0.03, num_iterations=4)
    fast = dp_iv.fit_dp_2s_gd(3, iv_data, **kw)
    safe = dp_iv.fit_dp_2s_gd(3, iv_data, secure=True, **kw)
    assert {r.mechanism for r in safe.ledger.releases} == {"discrete-gaussian"}
    assert safe.ledger.composition == "zcdp"
    # same budget (the integer calibration rounds the noise up, never down)
    assert safe.ledger.guarantee.rho <= fast.ledger.guarantee.rho
    assert safe.ledger.guarantee.rho == pytest.approx(fast.ledger.guarantee.rho, rel=1e-4)
    assert np.isfinite(safe.estimate).all()
    # deterministic under a fixed key; a different key draws different noise
    again = dp_iv.fit_dp_2s_gd(3, iv_data, secure=True, **kw)
    np.testing.assert_array_equal(safe.estimate, again.estimate)
    other = dp_iv.fit_dp_2s_gd(4, iv_data, secure=True, **kw)
    assert not np.array_equal(safe.estimate, other.estimate)


def test_secure_fit_at_rho_inf_only_rounds_to_the_grid(iv_data):
    """The epsilon = inf limit: no noise, so the secure path equals the fast one up to the
    rounding of each release to the grid (and says it is not private)."""
    kw = dict(rho1=math.inf, rho2=math.inf, eta=0.5, alpha=0.03, num_iterations=4)
    fast = dp_iv.fit_dp_2s_gd(3, iv_data, **kw)
    safe = dp_iv.fit_dp_2s_gd(3, iv_data, secure=True, **kw)
    np.testing.assert_allclose(safe.estimate, fast.estimate, atol=1e-3)
    assert not np.array_equal(safe.estimate, fast.estimate)  # the grid rounding is there
    assert not safe.ledger.is_private


def test_secure_glm_and_ld_em_fits_are_accounted_in_zcdp():
    model = GLM("logistic")
    beta = sparse_sphere_beta(jax.random.key(2), 4, 4)
    data = model.simulate(jax.random.key(3), 1000, jnp.asarray(beta))
    res = dp_glm.fit_dp_glm(1, data, model, epsilon=0.8, num_iterations=3, secure=True,
                            b_constant=4.0)
    assert res.ledger.composition == "zcdp"
    assert {r.mechanism for r in res.ledger.releases} == {"discrete-gaussian"}
    # the printed B is twice the true sensitivity: the ledger reads the true one off the event
    assert all(r.sensitivity_ratio < 0.55 for r in res.ledger.releases)
    assert res.ledger.approx_dp.epsilon < 0.8
    # the default (B at the true bound, the exact calibration) spends the request exactly,
    # under the discrete accounting, through the noise factor
    dflt = dp_glm.fit_dp_glm(1, data, model, epsilon=0.8, num_iterations=3, secure=True)
    assert 0.99 * 0.8 <= dflt.ledger.approx_dp.epsilon <= 0.8

    gmm = GaussianMixture(0.5)
    d3 = gmm.simulate(jax.random.key(4), 2000, jnp.full(3, 0.6))
    em = dp_em.fit_ld_dp_em(2, d3, gmm, beta0=np.full(3, 0.3), epsilon=0.5, secure=True)
    assert em.ledger.composition == "parallel"  # disjoint batches: the largest rho
    # the same default calibration as the fast path (the analytic one), both spending the
    # request: the fast path by its exact curve, the discrete noise (converted from zCDP by
    # CKS) through the noise factor
    fast = dp_em.fit_ld_dp_em(2, d3, gmm, beta0=np.full(3, 0.3), epsilon=0.5)
    assert em.ledger.approx_dp.delta == pytest.approx(fast.ledger.approx_dp.delta)
    assert 0.99 * 0.5 <= fast.ledger.approx_dp.epsilon <= 0.5
    assert 0.99 * 0.5 <= em.ledger.approx_dp.epsilon <= 0.5


def test_dpjax_fit_is_the_public_entry_point():
    assert dpjax.fit is dpjax.base.fit and dpjax.FitResult is dpjax.base.FitResult


# ---- a secure fit delivers what it is asked, or refuses -------------------------------------

SECURE_NOTE = "exact discrete noise (secure=True)"


def _dp_mean_fit(eps, **kw):
    ex = dp_mean._example()
    hp = dp_mean.MeanHyperparams(*map(np.float32, (eps, 1e-5, 2.0)))
    return dpjax.fit(dp_mean.DP_MEAN, 5, ex.data, ex.params0, hp, secure=True, **kw)


def _ld_em_fit(eps):
    gmm = GaussianMixture(0.5)
    data = gmm.simulate(jax.random.key(4), 2000, jnp.full(3, 0.6))
    return dp_em.fit_ld_dp_em(2, data, gmm, beta0=np.full(3, 0.3), epsilon=eps, delta=1e-5,
                              secure=True)


def _glm_fit(eps):
    model = GLM("logistic")
    beta = sparse_sphere_beta(jax.random.key(2), 4, 4)
    data = model.simulate(jax.random.key(3), 1000, jnp.asarray(beta))
    return dp_glm.fit_dp_glm(1, data, model, epsilon=eps, delta=1e-5, num_iterations=3,
                             calibration="gaussian", b_constant=2.0, secure=True)


# The three cases measured before the fix: the secure ledgers delivered 1.633, 3.250, 8.598,
# 4.323 and 1.1256 (the discrete noise carried over at rho = (Delta/sigma)^2/2 and converted by
# CKS, looser than the exact curve the sigma was solved on), with no request recorded.
@pytest.mark.parametrize("fit, eps", [(_dp_mean_fit, 1.5), (_dp_mean_fit, 3.0),
                                      (_dp_mean_fit, 8.0), (_ld_em_fit, 4.0), (_glm_fit, 1.0)])
def test_secure_fit_delivers_the_request_and_records_it(fit, eps):
    led = fit(eps).ledger
    assert isinstance(led.requested, ApproxDP)
    assert led.requested.epsilon == eps and led.requested.delta == pytest.approx(1e-5)
    assert led.approx_dp.delta <= led.requested.delta
    # never above the request (float rounding aside), and spends it: within 0.1% below
    assert eps * (1 - 1e-3) <= led.approx_dp.epsilon <= eps * (1 + 1e-9)
    kappa = [n for n in led.notes if n.startswith("noise factor kappa")]
    assert len(kappa) == 1 and float(kappa[0].split("= ")[1].split(":")[0]) > 1
    assert any(n.startswith(SECURE_NOTE) for n in led.notes)


def test_secure_noise_is_the_carried_noise_times_kappa():
    """The release's discrete sigma is kappa times the float path's, in grid units."""
    res = _dp_mean_fit(1.5)
    (rel,) = res.ledger.releases
    kappa = float([n for n in res.ledger.notes if n.startswith("noise factor kappa")][0]
                  .split("= ")[1].split(":")[0])
    sens = 2 * 2.0 / 200  # 2C/n
    sigma = float(M.gaussian_sigma(sens, 1.5, 1e-5))  # the default path's sigma (host)
    grid = secure._auto_grid(sens, 3)
    delta_z = math.sqrt(dn.integer_sensitivity_l2_sq(sens, grid, 3))
    carried = sigma / sens * delta_z  # rho carried over: sigma_Z = Delta_Z sigma / Delta
    assert rel.scale == pytest.approx(kappa * carried, rel=1e-5)
    assert rel.sensitivity == pytest.approx(delta_z, rel=1e-6)


def test_an_under_spending_secure_path_is_refused(monkeypatch):
    """A planted secure path that keeps the carried-over noise (kappa = 1) delivers more than
    the request and raises instead of returning."""
    real = base._secure_plan
    monkeypatch.setattr(base, "_secure_plan",
                        lambda *a, **k: real(*a, **k)._replace(noise_factor=1.0))
    with pytest.raises(PrivacyBudgetError, match=r"weaker than the requested \(1.5, 1e-05\)"):
        _dp_mean_fit(1.5)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_the_noise_factor_is_a_positive_finite_number(bad):
    with pytest.raises(ValueError, match="noise_factor must be a finite host number > 0"):
        with M.secure_noise(noise_factor=bad):
            pass
    with M.secure_noise(noise_factor=0.5):  # below 1 is allowed: the plan solves both ways
        pass


def test_secure_ledger_keeps_the_variant_label_and_the_notes(iv_data):
    kw = dict(rho1=0.5, rho2=0.5, eta=0.5, alpha=0.03, num_iterations=4)
    fast = dp_iv.fit_dp_2s_gd(3, iv_data, **kw)
    safe = dp_iv.fit_dp_2s_gd(3, iv_data, secure=True, **kw)
    assert safe.ledger.variant == fast.ledger.variant != "corrected"
    assert safe.ledger.requested == fast.ledger.requested == ZCDP(1.0)
    kept = [n for n in fast.ledger.notes if not n.startswith("(epsilon, delta) from rho-zCDP")]
    assert kept and all(n in safe.ledger.notes for n in kept)
    assert any(n.startswith(SECURE_NOTE) for n in safe.ledger.notes)
    # the default path's Gaussian-curve note is not carried into a discrete ledger
    glm = _glm_fit(1.0).ledger
    assert glm.variant == "corrected" and GAUSSIAN_CURVE_NOTE not in glm.notes
    assert any("n = 1000" in n for n in glm.notes)  # the estimator's own notes are kept


def test_pure_epsilon_releases_carry_over_exactly(key):
    """A Laplace release becomes the discrete Laplace at the same epsilon (kappa = 1)."""
    x = np.linspace(-1, 1, 5).astype(np.float32)
    with M.secure_noise(2.0**-6):
        _, ev = M.laplace_mechanism(key, _stat(x, 1.0, "l1"), 0.7)
    eps = float(ev.true_sensitivity) / float(ev.scale)
    assert eps <= 0.7 and eps == pytest.approx(0.7, rel=1e-6)


# ---- NLDP: every user's local Gaussian reports as discrete Gaussians --------------------------


def test_secure_fit_nldp_delivers_each_users_request():
    rng = np.random.default_rng(0)
    n, d = 4000, 3
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5, 0.0]) + 0.1 * rng.normal(size=n)).astype(np.float32)
    res = ldp_sparse.fit_nldp(1, (x, y), epsilon=8.0, delta=1e-4, r=2.0, tau1=3.0, tau2=3.0,
                              lam=0.01, secure=True)
    led = res.ledger
    assert led.relation == "local" and led.requested.epsilon == 8.0
    assert {r.mechanism for r in led.releases} == {"discrete-gaussian"}
    # each user's two releases compose in zCDP, looser than the default ledger's PLD (the
    # default calibrates the two together as the analytic Gaussian of the request): the carried
    # noise would over-spend, so kappa > 1 and the request is spent (with calibration=
    # "analytic", each at (eps/2, delta/2), basic composition, kappa < 1: below)
    assert 0.99 * 8.0 <= led.approx_dp.epsilon <= 8.0
    assert led.approx_dp.delta <= led.requested.delta
    assert any(n.startswith(SECURE_NOTE) for n in led.notes)
    kappa = [n for n in led.notes if n.startswith("noise factor kappa")]
    assert len(kappa) == 1 and float(kappa[0].split("= ")[1].split(":")[0]) > 1
    # no note of the default path's PLD composition in a zCDP ledger
    assert not any("PLD" in n or "privacy loss distributions" in n for n in led.notes)
    analytic = ldp_sparse.fit_nldp(1, (x, y), epsilon=8.0, delta=1e-4, r=2.0, tau1=3.0,
                                   tau2=3.0, lam=0.01, secure=True, calibration="analytic")
    assert 0.99 * 8.0 <= analytic.ledger.approx_dp.epsilon <= 8.0
    assert _kappa(analytic.ledger) < 1
    # the ledger says the composition it uses, and no note says another (a note "basic
    # composition" sat beside "composition: zcdp" before)
    assert led.composition == "zcdp per user (2 releases); parallel across disjoint users"
    assert not any("basic composition" in n for n in led.notes)
    assert any("composed by zCDP" in n for n in led.notes)
    assert np.isfinite(res.estimate).all()


def test_secure_nldp_reports_have_the_discrete_gaussian_spread():
    """Zero records: the released averages are the users' discrete noise alone. Their spread
    matches grid * sigma_Z / sqrt(m) (sigma_Z the discrete Gaussian's, computed independently
    from the float calibration, the integer sensitivity and kappa), and not 2/3 or 3/2 of it
    (230 entries: the relative standard error of the spread is about 0.05)."""
    m, d, grid = 200, 20, 2.0**-4
    hp = ldp_sparse.NLDPHyperparams(*map(np.float32, (2.0, 1e-3, 1.0, 1.0, 1.0, 0.1)))
    data = (jnp.zeros((m, d)), jnp.zeros(m))
    est = ldp_sparse.nldp(1, calibration="analytic")  # each report at (eps/2, delta/2)
    res = dpjax.fit(est, 7, data, jnp.zeros(d), hp, secure=True, grid=grid)
    kappa = float([n for n in res.ledger.notes if n.startswith("noise factor kappa")][0]
                  .split("= ")[1].split(":")[0])
    iu = np.triu_indices(d)
    parts = [(np.asarray(res.state.sxx)[iu], 2.0, iu[0].size),  # cov range 2 r^2
             (np.asarray(res.state.sxy), 2.0 * math.sqrt(d), d)]  # 2 sqrt(d) tau1 tau2
    z = []
    for noise, rng_, size in parts:
        units = noise.astype(np.float64) / grid * m  # sums of integer reports (float32 mean)
        np.testing.assert_allclose(units, np.round(units), atol=0.05)
        # (eps/2, delta/2), value units, in the analytic calibration
        sigma = float(M.gaussian_sigma(rng_, 1.0, 5e-4, "analytic"))
        delta_z = math.sqrt(dn.integer_sensitivity_l2_sq(rng_, grid, size))
        sigma_z = kappa * delta_z * sigma / rng_  # grid units
        z.append(noise / (grid * sigma_z / math.sqrt(m)))
    sd = float(np.sqrt(np.mean(np.square(np.concatenate(z)))))
    for factor, ok in [(1.0, True), (2 / 3, False), (1.5, False)]:
        assert (abs(sd / factor - 1) < 0.15) is ok


# ---- every private registry example has a secure fit ------------------------------------------

# one cheap example per family in the default run (the NLDP fits are tested above); the whole
# registry with -m slow (about 6 minutes on a busy 2-core machine, each fit under a minute)
_DEFAULT_RUN = ("dp-mean", "ld-dp-em/rmc", "clipped-gem/rmc", "dp-gem-split/mor",
                "alg1-noisy-gd/logistic", "dp-2s-gd/tight", "ldp-public", "ldp-iht/general-cov",
                "alg5-noisy-iht/logistic")


def _private_entries():
    return [e if e.name in _DEFAULT_RUN else pytest.param(e, marks=pytest.mark.slow)
            for e in dpjax.registry.entries() if e.private]


@pytest.mark.parametrize("entry", _private_entries(),
                         ids=lambda e: getattr(e, "name", None))
def test_every_private_registry_example_has_a_secure_fit(entry):
    ex = entry.example()
    if entry.name.startswith("baselines/objective-perturbation/"):  # refuses, in one line
        with pytest.raises(ValueError, match="no floating-point-safe path"):
            dpjax.fit(entry.build(), 11, ex.data, ex.params0, ex.hparams(1.0), secure=True)
        return
    import time

    start = time.perf_counter()
    res = dpjax.fit(entry.build(), 11, ex.data, ex.params0, ex.hparams(1.0), secure=True)
    assert time.perf_counter() - start < 60
    led = res.ledger
    assert led.requested is not None
    assert {r.mechanism for r in led.releases} <= set(M.SECURE_KINDS)
    assert any(n.startswith(SECURE_NOTE) for n in led.notes)
    if led.variant == "corrected":
        req = led.requested
        if isinstance(req, ZCDP):
            assert led.guarantee.rho <= req.rho * (1 + 1e-9)
        else:
            assert led.approx_dp.epsilon <= req.epsilon * (1 + 1e-9)
            assert led.approx_dp.delta <= req.delta


def test_local_gaussian_reports_are_exact_under_secure_noise(key):
    """One user's symmetric report: the upper triangle on the grid, mirrored, with a discrete
    event; the aggregate shortcut (noise drawn from the users' average) refuses."""
    from dpjax import local_randomizers as lr

    grid = 2.0**-6
    m = np.outer([0.3, -0.2, 0.1], [0.3, -0.2, 0.1]).astype(np.float32)
    stat = M.BoundedStatistic(jnp.asarray(m), 2.0, "l2", "local")
    with M.secure_noise(grid):
        rel = lr.local_gaussian_symmetric(key, stat, 1.0, 1e-3)
        with pytest.raises(ValueError, match="no floating-point-safe path"):
            lr.local_gaussian_aggregate(key, stat, 5, 1.0, 1e-3)
    out = np.asarray(rel.value, np.float64)
    np.testing.assert_array_equal(out, out.T)
    np.testing.assert_array_equal(out / grid, np.round(out / grid))
    assert rel.event.kind == "discrete-gaussian" and rel.event.relation == "local"
    # six released coordinates: the integer sensitivity is of the upper triangle
    assert float(rel.event.sensitivity) ** 2 == pytest.approx(
        dn.integer_sensitivity_l2_sq(2.0, grid, 6), rel=1e-6)


# ---- issue 44 item 8: exact peeling's delta shares compose to at most the request -------------


def _sparse_glm(n, d, T, **kw):
    model = GLM("logistic")
    beta = sparse_sphere_beta(jax.random.key(2), d, 5)
    data = model.simulate(jax.random.key(3), n, jnp.asarray(beta))
    return dp_glm.fit_sparse_dp_glm(1, data, model, epsilon=2.0, s=10, num_iterations=T,
                                    secure=True, **kw)


def test_secure_sparse_glm_delivers_at_the_default_delta():
    """n 2000, d 20, T 3: by PLD the secure ledger reads its epsilon at the request's delta.
    By basic composition (without dp_accounting): delta / T in float32 is one rounding step
    above a third of the float32 request, three shares composed in float64 exceeded it, and
    the plan bisected kappa (which cannot change a delta) up to 2^20 and refused, blaming the
    zCDP accounting; each share is now rounded down."""
    led = _sparse_glm(2000, 20, 3).ledger
    assert led.requested == ApproxDP(2.0, float(np.float32(1 / 4000)))
    assert led.approx_dp.delta == led.requested.delta and led.composition == "pld"
    assert 0.99 * 2.0 <= led.approx_dp.epsilon <= 2.0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_pld, "available", lambda: False)
        led = _sparse_glm(2000, 20, 3).ledger
    assert led.approx_dp.delta <= led.requested.delta  # exactly: no rounding slack
    assert 0.99 * 2.0 <= led.approx_dp.epsilon <= 2.0
    assert any("spends its share of delta times" in n for n in led.notes)


def test_a_refused_secure_request_names_its_cause(monkeypatch):
    monkeypatch.setattr(_pld, "available", lambda: False)  # basic composition: delta shares add
    model = GLM("logistic")
    data = model.simulate(jax.random.key(3), 2000, jnp.asarray(sparse_sphere_beta(
        jax.random.key(2), 20, 5)))
    est = dp_glm.noisy_iht(model, 10, 3, 2.0, calibration="tight")
    hp = dp_glm.default_hparams(2000, 2.0, 3, calibration="paper")
    # a delta below what the estimator's own split spends: no noise factor changes a delta
    with pytest.raises(PrivacyBudgetError, match="no noise factor changes a delta") as err:
        dpjax.fit(est, 1, data, jnp.zeros(20), hp, secure=True,
                  requested=ApproxDP(2.0, 1e-4))
    assert "zCDP" not in str(err.value) and "positive delta" not in str(err.value)
    # delta = 0 with discrete Gaussian noise: zCDP proves no pure guarantee
    ex = dp_mean._example()
    hp = dp_mean.MeanHyperparams(*map(np.float32, (1.0, 1e-5, 2.0)))
    with pytest.raises(PrivacyBudgetError, match="proves no delta = 0 guarantee"):
        dpjax.fit(dp_mean.DP_MEAN, 5, ex.data, ex.params0, hp, secure=True,
                  requested=ApproxDP(1.0, 0.0))


# ---- issue 44 item 9: the secure path spends the request, in both directions ------------------


def _gem(fit_name, n=400, **options):
    from dpjax.algorithms import dp_gem, ldp_gem

    fit = {"fit_dp_gem": dp_gem.fit_dp_gem, "fit_dp_exact_em": dp_gem.fit_dp_exact_em,
           "fit_clipped_gem": dp_gem.fit_clipped_gem, "fit_ldp_gem": ldp_gem.fit_ldp_gem}[
        fit_name]
    gmm = GaussianMixture(0.5)
    data = gmm.simulate(jax.random.key(0), n, jnp.full(4, 0.5))
    kw = {} if fit_name == "fit_clipped_gem" else dict(tau=2.0)
    return fit(7, data, gmm, epsilon=1.0, beta0=np.array([0.5, 0.5, 0, 0], np.float32),
               num_iterations=2, secure=True, **kw, **options)


def _kappa(led):
    (note,) = [n for n in led.notes if n.startswith("noise factor kappa")]
    return float(note.split("= ")[1].split(":")[0])


@pytest.mark.parametrize("fit_name", ["fit_dp_gem", "fit_dp_exact_em", "fit_clipped_gem",
                                      "fit_ldp_gem"])
def test_secure_gem_family_spends_the_request(fit_name):
    """The secure ledger is solved for the request in both directions. The carried noise used
    to deliver 0.61 of the request at n = 400 while kappa could not go below 1. Today every
    default path of the family (analytic Gaussian, composed by PLD) carries less noise than the
    secure ledger needs (kappa > 1): by a factor of about 1.13 where the discrete Gaussians are
    vectors (clipped GEM, LDP-GEM's reports: zCDP, CKS conversion), by less than 1% where they
    are scalars (DP-GEM's coordinates: their exact PLD, a little above the continuous
    Gaussian's curve); LDP-GEM's paper accounting (zCDP, Bun-Steinke) by name carries more
    (kappa < 1)."""
    led = _gem(fit_name).ledger
    assert led.variant == "corrected"
    assert 0.99 <= led.approx_dp.epsilon / led.requested.epsilon <= 1.0
    assert led.approx_dp.delta <= led.requested.delta
    assert _kappa(led) > 1
    scalar = fit_name in ("fit_dp_gem", "fit_dp_exact_em")
    assert (led.composition == "pld") == scalar and (_kappa(led) < 1.01) == scalar
    if fit_name == "fit_ldp_gem":
        paper = _gem(fit_name, calibration="paper").ledger
        assert 0.99 <= paper.approx_dp.epsilon / paper.requested.epsilon <= 1.0
        assert _kappa(paper) < 1


def test_the_noise_factor_follows_the_secure_ledgers_own_composition(monkeypatch):
    """The bisection reads the secure ledger it is given: under a planted ledger that converts
    zCDP by Bun-Steinke (looser than CKS), the plan still delivers the request, with more
    noise (a larger kappa) than under the real one."""
    from dpjax.accounting import zcdp_to_approx_dp

    real_kappa = _kappa(_gem("fit_clipped_gem").ledger)  # a vector: composed in zCDP
    real = base._secure_guarantee

    def bun_steinke(plan, events):
        guarantee, approx, *rest = real(plan, events)
        if isinstance(guarantee, ZCDP):
            approx = zcdp_to_approx_dp(guarantee.rho, plan.delta, method="bun-steinke")
        return (guarantee, approx, *rest)

    monkeypatch.setattr(base, "_secure_guarantee", bun_steinke)
    led = _gem("fit_clipped_gem").ledger
    assert 0.99 <= led.approx_dp.epsilon / led.requested.epsilon <= 1.0
    assert led.approx_dp == zcdp_to_approx_dp(led.guarantee.rho, led.requested.delta,
                                              method="bun-steinke")
    assert _kappa(led) > real_kappa
