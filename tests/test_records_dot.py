"""Sums over records in float32 (:func:`dpjax.mechanisms.records_dot`).

XLA's CPU dot of a batch (a ``vmap`` over repetitions, as every study runs) with a contraction
of about a million records lost about 5e-4 of a sum of positive terms in float32 (jax 0.10),
while the same product unbatched kept 4e-7: ``ldp_nldp``'s ``epsilon = inf`` error at
``n = 1e7`` moved by 7 standard errors when the repetitions per call changed from 2 to 10. These
tests hold the sums every estimator forms over many records (``X^T X``, ``X^T r``) to float32's
accuracy against float64, batched, at a million records: the plain product fails them here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax.algorithms import ldp_sparse as L
from dpjax.mechanisms import clipped_outer_mean, records_dot
from dpjax.mechanisms.clipping import RECORDS_BLOCK
from dpjax.models import iv as IV
from dpjax.models.glm import GLM, GLMData

MILLION = 1_000_000


def _rel(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def test_records_dot_is_the_product_in_every_layout():
    for i, n in enumerate((7, RECORDS_BLOCK, RECORDS_BLOCK + 1, 3 * RECORDS_BLOCK + 5, 100_003)):
        ka, kb = jax.random.split(jax.random.key(i))
        a = jax.random.normal(ka, (n, 3))
        b = jax.random.normal(kb, (n, 2))
        ref = np.asarray(a, np.float64).T @ np.asarray(b, np.float64)
        np.testing.assert_allclose(records_dot(a, b), ref, rtol=1e-5, atol=1e-5 * np.sqrt(n))
        np.testing.assert_allclose(records_dot(a.T, b.T, records_axis=1), ref, rtol=1e-5,
                                   atol=1e-5 * np.sqrt(n))
        np.testing.assert_allclose(records_dot(a, b[:, 0]), ref[:, 0], rtol=1e-5,
                                   atol=1e-5 * np.sqrt(n))
        if n <= RECORDS_BLOCK:  # the plain product, bit for bit
            np.testing.assert_array_equal(records_dot(a, b), a.T @ b)
            np.testing.assert_array_equal(records_dot(a, b[:, 0]), b[:, 0] @ a)


def test_records_dot_refuses_what_it_cannot_sum():
    a = jnp.ones((10, 2))
    with pytest.raises(ValueError, match="records_axis must be 0 or 1"):
        records_dot(a, a, records_axis=2)
    with pytest.raises(ValueError, match="same length"):
        records_dot(a, jnp.ones((9, 2)))


@pytest.mark.parametrize("d", [2, 5])
def test_batched_sums_over_a_million_records_keep_float32_accuracy(d):
    x = jax.random.normal(jax.random.key(1), (3, MILLION, d)) + 0.5  # positive-mean terms
    x64 = np.asarray(x, np.float64)
    gram = jax.jit(jax.vmap(records_dot))(x, x)
    assert _rel(gram, np.einsum("rni,rnj->rij", x64, x64)) < 1e-6
    vec = jax.jit(jax.vmap(records_dot))(x, x[:, :, 0])
    assert _rel(vec, np.einsum("rni,rn->ri", x64, x64[:, :, 0])) < 1e-6
    outer = jax.jit(jax.vmap(lambda u: clipped_outer_mean(u, u, jnp.inf).value))(x)
    assert _rel(outer, np.einsum("rni,rnj->rij", x64, x64) / MILLION) < 1e-6


def test_nldp_at_a_million_users_batched_is_the_float64_closed_form():
    """Algorithm 1 without noise or clipping, two repetitions in one batched call, one chunk
    of a million users: float64 least squares on the same float32 data to 1e-5 (the plain
    product gave errors of about 5e-4 in ``Sigma_xx`` here)."""
    n, d = MILLION, 2
    keys = jax.random.split(jax.random.key(3), 2)

    def data(k):
        kx, ky = jax.random.split(k)
        x = jax.random.normal(kx, (n, d)) + 1.0
        return x, x @ jnp.asarray([0.5, -0.25]) + 0.5 * jax.random.normal(ky, (n,))

    inf = jnp.float32(jnp.inf)
    hp = L.NLDPHyperparams(inf, jnp.float32(1e-5), inf, inf, inf, jnp.float32(0.0))
    est = L.nldp(1)

    def one(k):
        k_data, k_run = jax.random.split(k)
        x, y = data(k_data)
        return base.run(est, k_run, (x, y), est.init(jnp.zeros(d)), hp)[0].beta, x, y

    beta, xs, ys = jax.jit(jax.vmap(one))(keys)
    for i in range(len(keys)):
        x, y = np.asarray(xs[i], np.float64), np.asarray(ys[i], np.float64)
        ref = np.linalg.solve(x.T @ x, x.T @ y)
        np.testing.assert_allclose(np.asarray(beta[i]), ref, rtol=1e-5, atol=1e-6)


def test_glm_and_iv_gradients_over_a_million_records_batched():
    n, d = MILLION, 3
    key = jax.random.key(4)
    x = jax.random.normal(key, (2, n, d)) + 0.5
    y = x[:, :, 0] + 1.0
    beta = jnp.zeros(d)
    glm = GLM(family="linear")
    grad = jax.jit(jax.vmap(lambda u, v: glm.gradient(beta, GLMData(u, v))))(x, y)
    x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)
    assert _rel(grad, -np.einsum("rni,rn->ri", x64, y64) / n) < 1e-6
    z = x
    theta = jnp.zeros((d, 2))
    xs = x[:, :, :2]
    first = jax.jit(jax.vmap(lambda zz, xx: IV.first_stage_gradient(
        theta, IV.IVData(zz, xx, xx[:, 0]))))(z, xs)
    assert _rel(first, -np.einsum("rni,rnj->rij", x64, x64[:, :, :2]) / n) < 1e-6
