"""Longer statistical checks of spec 003 §7.2 (run with ``pytest -m slow``)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax.algorithms import dp_glm
from dpjax.models.glm import GLM, sparse_sphere_beta, sphere_beta

pytestmark = pytest.mark.slow
MODEL = GLM()


def test_non_private_plateau_is_the_inverse_fisher_trace():
    """§7.2 item 10: for x ~ U(-1,1)^d and ||beta|| = 1, E||beta_hat - beta||^2 ~ 12.8 d / n."""
    n, d, T, reps = 40000, 10, 80, 24
    beta = sphere_beta(jax.random.key(0), d)
    est = dp_glm.gd(MODEL, T)
    hp = jax.tree_util.tree_map(jnp.asarray, dp_glm.default_hparams(n, math.inf, T))

    @jax.jit
    def one(r):
        data = MODEL.simulate(jax.random.fold_in(jax.random.key(1), r), n, beta)
        final, _ = base.run(est, jax.random.key(0), data, est.init(jnp.zeros(d)), hp,
                            record=lambda s, i: ())
        return jnp.sum((final.beta - beta) ** 2)

    errs = np.asarray(jax.lax.map(one, jnp.arange(reps)))
    mean, se = errs.mean(), errs.std(ddof=1) / math.sqrt(reps)
    assert abs(mean - 12.8 * d / n) < 3 * se + 0.1 * 12.8 * d / n


def test_sparse_support_recovery_without_noise():
    """§7.2 item 11: non-private IHT with s = 2 s* recovers the true support."""
    n, d, s_true, T = 40000, 1000, 10, 50
    beta = sparse_sphere_beta(jax.random.key(2), d, s_true)
    data = MODEL.simulate(jax.random.key(3), n, beta)
    res = dp_glm.fit_sparse_dp_glm(jax.random.key(4), data, MODEL, s=2 * s_true,
                                   epsilon=math.inf, num_iterations=T)
    support = set(np.flatnonzero(res.estimate).tolist())
    assert set(range(s_true)) <= support
    assert np.sum((res.estimate - np.asarray(beta)) ** 2) < 0.05
