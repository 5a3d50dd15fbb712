"""Local-DP gradient EM (ours, beyond spec 002; issue 13 item 7): user groups, per-user
sensitivity on adversarial records, per-user noise with power, the epsilon = inf limit against a
NumPy minibatch gradient EM, determinism, compilation and the local ledger."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax.accounting import gaussian_epsilon
from dpjax.algorithms import dp_gem as G
from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates
from dpjax.models.mor import MoRData
from dpjax.models.rmc import RMCData
from tests.helpers import assert_scale_with_power

N, D, T = 303, 3, 5  # N not a multiple of T: the last group holds 60 + 3 users
BETA = np.full(D, 1.0 / np.sqrt(D), np.float32)
MODELS = [GaussianMixture(0.5), MixtureOfRegressions(0.5), RegressionMissingCovariates(1.0, 0.2)]
IDS = [m.name for m in MODELS]
PSI_RANGE = 4.0 * math.sqrt(2.0) / 3.0  # range of one psi score per unit of s


def _data(model, seed=0, n=N):
    return model.simulate(jax.random.key(seed), n, jnp.asarray(BETA))


def _eps_tilde_np(eps, delta):
    L = math.log(1.0 / delta)
    return math.sqrt(L + eps) - math.sqrt(L)


def _hp(eps, s=math.nan, tau=2.0, zeta=0.05, delta=1.0 / N, eta=1.0):
    return G.LDPGEMHyperparams(*map(jnp.float32, (eps, delta, eta, tau, zeta, s)))


def _rule_s(eps, m, tau=2.0, zeta=0.05, delta=1.0 / N):
    """The default rule, computed here: sqrt(sqrt(m) tau eps~) / (2 sqrt(log(d/zeta)))."""
    return math.sqrt(math.sqrt(m) * tau * _eps_tilde_np(eps, delta)) / (
        2.0 * math.sqrt(math.log(D / zeta)))


def test_user_groups_keep_every_user():
    assert G.ldp_user_groups(303, 5) == (60, 60, 60, 60, 63)
    assert G.ldp_user_groups(10, 10) == (1,) * 10
    assert sum(G.ldp_user_groups(10_007, 22)) == 10_007
    with pytest.raises(ValueError, match="cannot form"):
        G.ldp_user_groups(4, 5)


# -------------------------------------------------------------------------------------------
# Sensitivity: one user's record replaced by an adversarial one (+-1e12, inf, NaN)
# -------------------------------------------------------------------------------------------


def _extreme_neighbours(model, data):
    out = []
    for v in (1e12, -1e12, np.inf, np.nan):
        for pattern in (np.ones(D), np.array([1.0, -1.0, 1.0])):
            row = (v * pattern).astype(np.float32)
            if isinstance(model, GaussianMixture):
                out.append(type(data)(data.y.at[0].set(row)))
            elif isinstance(model, MixtureOfRegressions):
                out.append(MoRData(data.x.at[0].set(row), data.y.at[0].set(row[0])))
            else:
                for z in (np.zeros(D), np.ones(D)):
                    out.append(RMCData(data.x.at[0].set(row), data.z.at[0].set(z),
                                       data.y.at[0].set(-row[0])))
    return out


def _step(est, data, beta, hp, key=None):
    state = G.LDPGEMState(beta, jnp.zeros((), jnp.int32))
    new, info = jax.jit(est.step)(jax.random.key(0) if key is None else key, state, data, hp)
    return np.asarray(new.beta - beta, np.float64) / float(hp.eta), info


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_one_users_release_has_the_declared_range(model):
    data, beta = _data(model), jnp.asarray(BETA * 0.5)
    s = _rule_s(0.5, N // T)
    beta_s = math.sqrt(math.log(D / 0.05))
    declared = math.sqrt(D) * PSI_RANGE * s  # l2 range of one user's d-vector
    base_stat = G.local_gradient_scores(model, beta, data, s, beta_s)
    assert base_stat.relation == "local" and base_stat.norm == "l2"
    assert float(base_stat.sensitivity) == pytest.approx(declared, rel=1e-6)
    # the step's event is calibrated from exactly that range; no noise at eps = inf
    est = G.ldp_gem(model, T, "explicit")
    hp = _hp(math.inf, s=s)
    g, info = _step(est, data, beta, hp)
    (ev,) = info.events
    assert ev.relation == "local" and ev.kind == "gaussian-zcdp"
    assert float(ev.sensitivity) == pytest.approx(declared, rel=1e-6)
    assert float(ev.scale) == 0.0
    worst_user = worst_mean = 0.0
    for other in _extreme_neighbours(model, data):
        stat = G.local_gradient_scores(model, beta, other, s, beta_s)
        diff = np.asarray(stat.value, np.float64) - np.asarray(base_stat.value, np.float64)
        assert np.isfinite(diff).all()
        np.testing.assert_array_equal(diff[1:], 0.0)  # only user 0's report changes
        worst_user = max(worst_user, float(np.linalg.norm(diff[0])))
        g2, _ = _step(est, other, beta, hp)
        worst_mean = max(worst_mean, float(np.linalg.norm(g2 - g)))
    assert worst_user <= declared * (1 + 1e-5)
    # user 0 is in group 0 (N // T users): the server's average moves by at most range / m
    assert worst_mean <= declared / (N // T) * (1 + 1e-3)
    if isinstance(model, GaussianMixture):  # the bound is nearly attained (psi's tail limit)
        assert worst_user >= 0.4 * declared


# -------------------------------------------------------------------------------------------
# Noise: every user adds N(0, sigma_loc^2 I_d); the group average carries sigma_loc / sqrt(m)
# -------------------------------------------------------------------------------------------


def test_noise_scale_with_power():
    model = GaussianMixture(0.5)
    data, beta = _data(model), jnp.asarray(BETA * 0.5)
    eps, m = 0.5, N // T
    et = _eps_tilde_np(eps, 1.0 / N)
    s = _rule_s(eps, m)
    sigma_loc = math.sqrt(D) * PSI_RANGE * s / math.sqrt(2.0 * et**2)  # rho = eps~^2 per user
    g0, _ = _step(G.ldp_gem(model, T, "explicit"), data, beta, _hp(math.inf, s=s))
    keys = jax.random.split(jax.random.key(7), 700)
    state = G.LDPGEMState(beta, jnp.zeros((), jnp.int32))
    step = jax.jit(jax.vmap(G.ldp_gem(model, T, calibration="paper").step,
                            in_axes=(0, None, None, None)))
    new, info = step(keys, state, data, _hp(eps))
    noise = np.asarray(new.beta, np.float64) - np.asarray(beta, np.float64) - g0[None, :]
    assert float(info.s[0]) == pytest.approx(s, rel=1e-4)
    assert float(info.noise_scale[0]) == pytest.approx(sigma_loc, rel=1e-4)
    assert_scale_with_power(noise, "norm", sigma_loc / math.sqrt(m))
    c = np.corrcoef(noise.T)  # independent across coordinates
    assert np.max(np.abs(c - np.eye(D))) < 0.2


# -------------------------------------------------------------------------------------------
# epsilon = inf (no noise, s = inf): NumPy minibatch gradient EM on the same groups
# -------------------------------------------------------------------------------------------


def _groups(n, t_steps):
    m0 = n // t_steps
    return [slice(t * m0, (t + 1) * m0 if t < t_steps - 1 else n) for t in range(t_steps)]


def _numpy_minibatch_gem(model, data, beta0, eta):
    beta = np.asarray(beta0, np.float64)
    out = []
    for g in _groups(N, T):
        if isinstance(model, GaussianMixture):
            y = np.asarray(data.y, np.float64)[g]
            grad = (np.tanh(y @ beta / model.sigma**2)[:, None] * y).mean(0) - beta
        else:
            x, y = np.asarray(data.x, np.float64)[g], np.asarray(data.y, np.float64)[g]
            w = np.tanh(y * (x @ beta) / model.sigma**2)
            grad = ((w * y - x @ beta)[:, None] * x).mean(0)
        beta = beta + eta * grad
        out.append(beta.copy())
    return np.array(out)


@pytest.mark.parametrize("model", MODELS[:2], ids=IDS[:2])
def test_eps_inf_is_minibatch_gradient_em_on_the_groups(model):
    data, beta0 = _data(model, 1), BETA * 0.3
    ref = _numpy_minibatch_gem(model, data, beta0, 0.7)
    for k in (1, 2):  # no noise at all: the key does not matter
        r = G.fit_ldp_gem(k, data, model, epsilon=math.inf, delta=1 / N, num_iterations=T,
                          beta0=beta0, tau=2.0, eta=0.7)
        np.testing.assert_allclose(r.trace, ref, rtol=1e-5, atol=1e-6)
        assert not r.ledger.is_private
    # the same groups, the full data: it is not full-batch gradient EM
    full = G.fit_dp_gem(0, data, model, epsilon=math.inf, delta=1 / N, num_iterations=T,
                        beta0=beta0, tau=2.0, eta=0.7)
    assert np.max(np.abs(full.trace - ref)) > 1e-3


# -------------------------------------------------------------------------------------------
# Determinism, compilation, ledger, inputs
# -------------------------------------------------------------------------------------------


def _fit(key, eps, model=None, **kw):
    model = model or GaussianMixture(0.5)
    return G.fit_ldp_gem(key, _data(model), model, epsilon=eps, delta=1 / N, num_iterations=T,
                         beta0=BETA * 0.5, tau=2.0, **kw)


def test_determinism_under_a_fixed_key_and_no_recompile():
    a, b, c = _fit(11, 0.5), _fit(11, 0.5), _fit(12, 0.5)
    np.testing.assert_array_equal(a.trace, b.trace)
    assert not np.array_equal(a.trace, c.trace)
    before = base._fit_run._cache_size()
    for i, eps in enumerate((0.2, 1.0, 3.0, math.inf)):
        _fit(i + 1, eps)
    assert base._fit_run._cache_size() == before


@pytest.mark.parametrize("model", MODELS, ids=IDS)
@pytest.mark.parametrize("eps", [0.2, 4.0])
def test_ledger_states_each_users_local_guarantee(model, eps):
    # the paper's accounting, by name: rho = eps~^2 per user, Bun-Steinke
    led = _fit(0, eps, model, calibration="paper").ledger
    assert led.relation == "local" and led.composition == "parallel"
    (rel,) = led.releases
    assert rel.count == T and rel.relation == "local"  # one stacked event per round
    et = _eps_tilde_np(eps, 1.0 / N)
    assert led.guarantee.rho == pytest.approx(et**2, rel=1e-5)  # one release per user
    assert led.approx_dp.epsilon == pytest.approx(eps, rel=1e-5)
    assert led.approx_dp.delta == pytest.approx(1.0 / N)
    assert "each user once" in rel.data and "63" in rel.data
    assert any("ours" in note for note in led.notes)
    # the default: each user's one Gaussian report is the analytic Gaussian mechanism of the
    # request, read off its PLD (the exact Gaussian curve): the request, with less noise
    default = _fit(0, eps, model).ledger
    assert default.relation == "local" and default.composition == "parallel"
    (drel,) = default.releases
    mu = drel.sensitivity * drel.sensitivity_ratio / drel.scale
    assert default.approx_dp.epsilon == pytest.approx(gaussian_epsilon(mu, 1.0 / N), rel=1e-6)
    assert eps * 0.999 <= default.approx_dp.epsilon <= eps * (1 + 1e-5)
    assert drel.scale < rel.scale  # the same request, less noise than rho = eps~^2
    assert any("calibration 'gaussian'" in note for note in default.notes)


def test_invalid_inputs_are_rejected():
    model = GaussianMixture(0.5)
    with pytest.raises(ValueError, match="cannot form"):
        G.fit_ldp_gem(0, _data(model, 0, 4), model, epsilon=0.5, delta=0.01,
                      num_iterations=T, beta0=BETA, tau=2.0)
    with pytest.raises(ValueError, match="s_rule"):
        _fit(0, 0.5, s_rule="sigma_consistent")
    with pytest.raises(ValueError, match="explicit"):
        _fit(0, 0.5, s=1.0)
    with pytest.raises(ValueError, match="needs s"):
        _fit(0, 0.5, s_rule="explicit")
    with pytest.raises(ValueError, match="s_rule"):
        G.ldp_gem(model, T, "thm2")
    r = _fit(0, 0.5, s_rule="explicit", s=2.0)
    assert np.isfinite(r.estimate).all()


@pytest.mark.production_compiler
def test_disjoint_batching_is_the_same_estimator_on_equal_groups():
    """With ``n`` a multiple of ``T`` the two batchings make the same groups and draw the same
    noise (round ``t``'s key, one subkey per user), so their runs are identical."""
    model = GaussianMixture(0.5)
    data = _data(model, 5, n=300)
    hp = _hp(0.5, delta=1.0 / 300)
    runs = [base.fit(G.ldp_gem(model, T, batching=b), 3, data, BETA * 0.5, hp, n=300)
            for b in ("full", "disjoint")]
    np.testing.assert_array_equal(runs[0].trace, runs[1].trace)
    assert runs[0].ledger.approx_dp == runs[1].ledger.approx_dp
    with pytest.raises(ValueError, match="batching"):
        G.ldp_gem(model, T, batching="stream")
