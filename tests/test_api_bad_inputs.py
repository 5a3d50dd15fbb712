"""Bad inputs to the public Python API (issue 17, item 1): each is refused before anything is
computed, with an exception whose message names the parameter and its allowed range, and no
entry point returns a NaN.

The table covers the fits of every family (``fit_hd_dp_em``, ``fit_ld_dp_em``, ``fit_dp_glm``,
``fit_sparse_dp_glm``, ``fit_dp_2s_gd``, ``fit_dp_gem``), the protocol's ``base.fit`` and the
study entry points (``sweep.run_setting``, ``study.resolve_config``, ``study.run_experiment``).
A case that does not yet give a clear message goes in ``XFAIL`` (``xfail(strict=True)``) with
the reason: the list of checks still to add; a strict xfail turns into a failure the moment it
is fixed, so the mark is then removed (the five found when this table was written are fixed).
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax.algorithms import dp_em, dp_gem, dp_glm, dp_iv
from dpjax.models import GLM, GaussianMixture, sparse_unit_beta
from dpjax.models.iv import LinearIV

N, D, S = 60, 4, 2
BETA = sparse_unit_beta(D, S)
GMM = GaussianMixture(0.5)
LOGISTIC = GLM("logistic")
IV = LinearIV(2, 3, 2)


def _gmm_data(n=N, d=D):
    return GMM.simulate(jax.random.key(0), n, jnp.asarray(sparse_unit_beta(d, S)))


def _glm_data(n=N, d=D):
    return LOGISTIC.simulate(jax.random.key(1), n, jnp.asarray(sparse_unit_beta(d, S)))


def _iv_data(n=N):
    return IV.simulate(jax.random.key(2), n, IV.pack(IV.draw_parameters(jax.random.key(3))))


def hd_em(**kw):
    args = dict(key=jax.random.key(4), data=_gmm_data(), model=GMM, s_hat=S, beta0=BETA * 0.9,
                epsilon=0.5, truncation=2.0, num_iterations=3)
    args.update(kw)
    return dp_em.fit_hd_dp_em(args.pop("key"), args.pop("data"), args.pop("model"), **args)


def ld_em(**kw):
    args = dict(key=jax.random.key(5), data=_gmm_data(), model=GMM, beta0=BETA * 0.9,
                epsilon=0.5, truncation=2.0, num_iterations=3)
    args.update(kw)
    return dp_em.fit_ld_dp_em(args.pop("key"), args.pop("data"), args.pop("model"), **args)


def glm(**kw):
    args = dict(key=jax.random.key(6), data=_glm_data(), model=LOGISTIC, epsilon=0.5,
                num_iterations=3)
    args.update(kw)
    return dp_glm.fit_dp_glm(args.pop("key"), args.pop("data"), args.pop("model"), **args)


def sparse_glm(**kw):
    args = dict(key=jax.random.key(7), data=_glm_data(), model=LOGISTIC, s=S, epsilon=0.5,
                num_iterations=3)
    args.update(kw)
    return dp_glm.fit_sparse_dp_glm(args.pop("key"), args.pop("data"), args.pop("model"),
                                    **args)


def iv(**kw):
    args = dict(key=jax.random.key(8), data=_iv_data(), rho1=0.5, rho2=0.5, eta=0.05,
                alpha=0.05, num_iterations=3, gamma1=2.0, gamma2=2.0)
    args.update(kw)
    return dp_iv.fit_dp_2s_gd(args.pop("key"), args.pop("data"), **args)


def gem(**kw):
    args = dict(key=jax.random.key(9), data=_gmm_data(d=3), model=GMM, epsilon=0.5,
                delta=1e-3, num_iterations=3, beta0=jnp.ones(3) * 0.8, tau=2.0)
    args.update(kw)
    return dp_gem.fit_dp_gem(args.pop("key"), args.pop("data"), args.pop("model"), **args)


def base_fit(**kw):
    from dpjax.examples import dp_mean

    x = dp_mean.simulate(jax.random.key(10), 50, jnp.ones(3))
    args = dict(estimator=dp_mean.DP_MEAN, key=jax.random.key(11), data=x, params0=jnp.zeros(3),
                hparams=dp_mean.MeanHyperparams(*map(jnp.float32, (0.5, 1e-3, 2.0))))
    args.update(kw)
    return base.fit(**args)


def _mean_hp(epsilon, delta=1e-3, clip=2.0):
    from dpjax.examples import dp_mean

    return dp_mean.MeanHyperparams(*map(jnp.float32, (epsilon, delta, clip)))


def run_setting(**kw):
    from dpjax import sweep
    from dpjax.experiments._em_common import BetaError, InitNearTruth

    model = GaussianMixture(0.5)
    setting = sweep.Setting(
        key="em", columns={"method": "hd-dp-em"}, estimator=dp_em.hd_dp_em(model, S, 3),
        simulate=model.simulate, init=InitNearTruth(0.125), record=BetaError(), truth=BETA,
        plan=sweep.DataPlan(3, 20), hparams_type=dp_em.DPEMHyperparams,
        levels=({"epsilon": 0.5, "delta": 1e-3, "eta": 0.5, "truncation": 2.0},), n=60)
    args = dict(setting=setting, reps=2, seed=0, num_devices=1)
    args.update(kw)
    return sweep.run_setting(args.pop("setting"), **args)


def resolve(name, overrides):
    from dpjax.experiments import registry
    from dpjax.study import resolve_config

    return resolve_config(registry()[name], overrides)


NAN, INF = math.nan, math.inf
POS = r"\(0, inf[\])]|> 0"  # how the messages state (0, inf] or (0, inf)

# (id, call, the parameter's name, a regex the message must match for the allowed range)
CASES = [
    # epsilon / delta / rho: non-positive, NaN, inf where not allowed, delta outside (0, 1)
    ("hd_em-epsilon-0", lambda: hd_em(epsilon=0.0), "epsilon", POS),
    ("hd_em-epsilon-neg", lambda: hd_em(epsilon=-1.0), "epsilon", POS),
    ("hd_em-epsilon-nan", lambda: hd_em(epsilon=NAN), "epsilon", POS),
    ("hd_em-delta-0", lambda: hd_em(delta=0.0), "delta", r"\(0, 1\)"),
    ("hd_em-delta-1", lambda: hd_em(delta=1.0), "delta", r"\(0, 1\)"),
    ("hd_em-delta-nan", lambda: hd_em(delta=NAN), "delta", r"\(0, 1\)"),
    ("ld_em-epsilon-minus-inf", lambda: ld_em(epsilon=-INF), "epsilon", POS),
    ("ld_em-delta-1.5", lambda: ld_em(delta=1.5), "delta", r"\(0, 1\)"),
    ("glm-epsilon-0", lambda: glm(epsilon=0.0), "epsilon", POS),
    ("glm-delta-neg", lambda: glm(delta=-1e-3), "delta", r"\(0, 1\)"),
    ("sparse_glm-epsilon-nan", lambda: sparse_glm(epsilon=NAN), "epsilon", POS),
    ("iv-rho1-0", lambda: iv(rho1=0.0), "rho1", POS),
    ("iv-rho2-neg", lambda: iv(rho2=-0.5), "rho2", POS),
    ("iv-rho1-nan", lambda: iv(rho1=NAN), "rho1", POS),
    ("iv-delta-1", lambda: iv(delta=1.0), "delta", r"\(0, 1\)"),
    ("gem-epsilon-0", lambda: gem(epsilon=0.0), "epsilon", POS),
    ("gem-delta-0", lambda: gem(delta=0.0), "delta", r"\(0, 1\)"),
    ("gem-delta-inf", lambda: gem(delta=INF), "delta", r"\(0, 1\)"),
    # other hyperparameters: step sizes, truncation, clipping
    ("hd_em-eta-0", lambda: hd_em(eta=0.0), "eta", POS),
    ("hd_em-truncation-neg", lambda: hd_em(truncation=-1.0), "truncation", POS),
    ("glm-eta-nan", lambda: glm(eta=NAN), "eta", POS),
    ("iv-eta-neg", lambda: iv(eta=-0.05), "eta", POS),
    ("iv-alpha-0", lambda: iv(alpha=0.0), "alpha", POS),
    ("gem-tau-0", lambda: gem(tau=0.0), "tau", POS),
    # sparsity: s = 0 and s > d
    ("hd_em-s_hat-0", lambda: hd_em(s_hat=0), "s_hat", r"\[1, 4\]"),
    ("hd_em-s_hat-gt-d", lambda: hd_em(s_hat=D + 1), "s_hat", r"\[1, 4\]"),
    ("sparse_glm-s-0", lambda: sparse_glm(s=0), "s", r"\[1, 4\]"),
    ("sparse_glm-s-gt-d", lambda: sparse_glm(s=D + 1), "s", r"\[1, 4\]"),
    # sizes: iterations, and n smaller than the number of batches
    ("hd_em-iterations-0", lambda: hd_em(num_iterations=0), "num_iterations", r">= 1|\[1,"),
    ("hd_em-n-lt-batches", lambda: hd_em(num_iterations=N + 1), "num_iterations",
     r"\[1, 60\]|n = 60"),
    ("ld_em-n-lt-batches", lambda: ld_em(num_iterations=2 * N), "num_iterations",
     r"\[1, 60\]|n = 60"),
    ("glm-iterations-neg", lambda: glm(num_iterations=-2), "num_iterations", r">= 1|\[1,"),
    ("iv-iterations-0", lambda: iv(num_iterations=0), "num_iterations", r">= 1|\[1,"),
    ("gem-iterations-float", lambda: gem(num_iterations=2.5), "num_iterations", r"integer"),
    # wrong dtypes and shapes
    ("hd_em-beta0-wrong-length", lambda: hd_em(beta0=jnp.ones(D + 1)), "beta0", r"\(4,\)"),
    ("glm-beta0-2d", lambda: glm(beta0=jnp.ones((D, 1))), "beta0", r"\(4,\)"),
    ("hd_em-data-complex", lambda: hd_em(data=type(_gmm_data())(np.ones((N, D), complex))),
     "data.y", r"real"),
    ("glm-data-strings", lambda: glm(data=type(_glm_data())(np.full((N, D), "1"), np.ones(N))),
     "data.x", r"real"),
    ("glm-data-no-rows", lambda: glm(data=_glm_data(n=0)), "data", r"at least one row"),
    ("iv-data-rows-mismatch", lambda: iv(data=type(_iv_data())(*(np.asarray(a)[:k] for a, k in
                                                                zip(_iv_data(), (N, N, N - 1))))),
     "data", r"rows|60"),
    ("gem-beta0-wrong-length", lambda: gem(beta0=jnp.ones(4)), "beta0", r"\(3,\)"),
    ("ld_em-model-string", lambda: ld_em(model="gmm"), "model", r"EMModel|model"),
    ("glm-data-x-rows", lambda: glm(data=type(_glm_data())(jnp.ones((N, D)), jnp.ones(N - 1))),
     "data", r"rows|60"),
    ("iv-data-string", lambda: iv(data="data.csv"), "data", r"IVData"),
    ("hd_em-epsilon-string", lambda: hd_em(epsilon="1.0"), "epsilon", r"real number"),
    ("glm-epsilon-complex", lambda: glm(epsilon=1 + 1j), "epsilon", r"real number"),
    # keys of the wrong kind
    ("hd_em-key-float", lambda: hd_em(key=1.5), "key", r"jax.random.key|integer seed"),
    ("glm-key-array", lambda: glm(key=jnp.zeros(3)), "key", r"jax.random.key|integer seed"),
    ("iv-key-string", lambda: iv(key="seed"), "key", r"jax.random.key|integer seed"),
    ("base_fit-key-none", lambda: base_fit(key=None), "key", r"jax.random.key|integer seed"),
    ("base_fit-hparams-epsilon-0", lambda: base_fit(hparams=_mean_hp(0.0)), "hparams.epsilon",
     POS),
    ("base_fit-hparams-epsilon-nan", lambda: base_fit(hparams=_mean_hp(NAN)), "hparams.epsilon",
     POS),
    ("base_fit-hparams-clip-neg", lambda: base_fit(hparams=_mean_hp(0.5, clip=-1.0)),
     "hparams.clip",
     POS),
    ("glm-calibration-unknown", lambda: glm(calibration="exact"), "calibration", r"paper"),
    ("glm-b_constant-0", lambda: glm(b_constant=0.0), "b_constant", POS),
    ("glm-truncation-0", lambda: glm(truncation=0.0), "truncation", POS),
    ("iv-gamma1-0", lambda: iv(gamma1=0.0), "gamma1", POS),
    ("gem-s_rule-unknown", lambda: gem(s_rule="auto"), "s_rule", r"sigma_consistent"),
    # the study entry points
    ("run_setting-reps-0", lambda: run_setting(reps=0), "reps", r">= 1|\[1,"),
    ("run_setting-reps-neg", lambda: run_setting(reps=-3), "reps", r">= 1|\[1,"),
    ("run_setting-chunk-0", lambda: run_setting(chunk_size=0), "chunk_size", r">= 1|\[1,"),
    ("run_setting-reps-float", lambda: run_setting(reps=2.5), "reps", r"integer"),
    ("run_setting-data_mode", lambda: run_setting(data_mode="lazy"), "data_mode", r"stream"),
    ("resolve-eps_grid-nan", lambda: resolve("em_fig1", {"eps_grid": "0.5,nan"}), "eps_grid",
     POS),
    ("resolve-n_base-0", lambda: resolve("glm_fig1", {"n_base": 0}), "n_base", r">= 10"),
    ("resolve-d_grid-0", lambda: resolve("glm_fig1", {"d_grid": "0"}), "d_grid", r">= 1|\[1,"),
    ("resolve-eta-nan", lambda: resolve("glm_fig1", {"eta": "nan"}), "eta", POS),
]

# Cases that do not give a clean error today; each reason says what happens and where the
# check belongs (the files named are owned elsewhere: fixed there, then the mark comes off).
XFAIL: dict[str, str] = {}  # every case gives a clear message (the five gaps found are fixed)


def _params():
    out = []
    for cid, call, name, allowed in CASES:
        marks = ([pytest.mark.xfail(strict=True, reason=XFAIL[cid])] if cid in XFAIL else [])
        out.append(pytest.param(call, name, allowed, id=cid, marks=marks))
    return out


def test_the_table_is_broad_and_every_xfail_is_a_case():
    assert len(CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)
    assert set(XFAIL) <= {c[0] for c in CASES}
    tested = {c[0].split("-")[0] for c in CASES}
    assert {"hd_em", "ld_em", "glm", "sparse_glm", "iv", "gem", "base_fit", "run_setting",
            "resolve"} <= tested


@pytest.mark.parametrize("call,name,allowed", _params())
def test_bad_input_is_refused_naming_the_parameter_and_its_range(call, name, allowed):
    try:
        result = call()
    except (ValueError, TypeError) as exc:
        message = str(exc)
        assert re.search(rf"(?<![\w.]){re.escape(name)}\b", message), message
        assert re.search(allowed, message), message
        return
    # it did not raise: whatever came back must not hold a NaN, and the case fails
    leaves = jax.tree_util.tree_leaves(getattr(result, "estimate", result))
    assert all(np.isfinite(np.asarray(x, float)).all() for x in leaves
               if np.issubdtype(np.asarray(x).dtype, np.number))
    pytest.fail(f"no exception for a bad {name}")


def test_bfloat16_data_is_refused_with_the_dtype_rule():
    """Issue 44 item 12: bfloat16 (an ml_dtypes type, NumPy kind 'V') was refused as "not a real
    array"; the message now states the dtypes a fit takes and how to convert."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=(N, D)), jnp.bfloat16)
    y = jnp.asarray(np.ones(N), jnp.bfloat16)
    with pytest.raises(TypeError, match=r"data\.x must be a real array of a NumPy numeric dtype "
                       r"\(float16, float32, float64 or an integer\); got dtype bfloat16 .*"
                       r"np\.asarray\(x, np\.float32\)"):
        dp_glm.fit_dp_glm(0, (x, y), GLM("logistic"), epsilon=1.0, num_iterations=2)
