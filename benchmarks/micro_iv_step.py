"""One DP-2S-GD step of the IV family, timed in parts (issue 31, what bounds the iv family).

150 repetition-levels batched (vmap), n = 8000, p = q = 5: the unclipped gradients alone, the
shipped clipped step (gradient norms, both clipped gradients), and the small products of the
first stage in four layouts (records on the major or the minor axis, as dots or as broadcast
multiply-adds). One JAX CPU device; pin it to one core to compare machines
(``taskset -c 0 python benchmarks/micro_iv_step.py``). The harness's study kernel shares the
data across levels, where the broadcast form measured slower (see benchmarks/README.md).
"""
import sys
import time

sys.path.insert(0, '.')
from dpjax.cli import set_cpu_devices  # noqa: E402

set_cpu_devices(1)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import dpjax.models.iv as iv  # noqa: E402


def tm(f, *a, n=5):
    r = f(*a)
    jax.block_until_ready(r)
    t = time.perf_counter()
    for _ in range(n):
        r = f(*a)
    jax.block_until_ready(r)
    return (time.perf_counter() - t) / n * 1e3


B, n, q = 150, 8000, 5
k = jax.random.split(jax.random.key(0), 4)
Z = jax.random.normal(k[0], (B, n, q))
X = jax.random.normal(k[1], (B, n, q))
Y = jax.random.normal(k[2], (B, n))
TH = 0.3 * jax.random.normal(k[3], (B, q, q))
BE = jnp.ones((B, q))
ZT, XT = jnp.swapaxes(Z, 1, 2), jnp.swapaxes(X, 1, 2)


def step(z, x, y, th, be):
    d = iv.IVData(z, x, y)
    n1, n2 = iv.gradient_norms(th, be, d)
    g1 = iv.clipped_first_stage_gradient(th, d, 3.0).value
    g2 = iv.clipped_second_stage_gradient(th, be, d, 3.0).value
    return g1, g2, jnp.mean(n1 > 3.0), jnp.mean(n2 > 3.0)


def unclipped(z, x, y, th, be):
    d = iv.IVData(z, x, y)
    return iv.first_stage_gradient(th, d), iv.second_stage_gradient(th, be, d)


def dots_rows(z, x, th):
    return z.T @ (z @ th - x)


def dots_minor(zt, xt, th):
    return zt @ (th.T @ zt - xt).T


def bcast_minor(zt, xt, th):
    r = jnp.sum(th[:, :, None] * zt[:, None, :], axis=0) - xt
    return jnp.sum(zt[:, None, :] * r[None, :, :], axis=-1)


def bcast_dot_minor(zt, xt, th):
    return zt @ (jnp.sum(th[:, :, None] * zt[:, None, :], axis=0) - xt).T


print("unclipped gradients", round(tm(jax.jit(jax.vmap(unclipped)), Z, X, Y, TH, BE), 1), "ms")
print("shipped clipped step", round(tm(jax.jit(jax.vmap(step)), Z, X, Y, TH, BE), 1), "ms")
for name, f, args in [("first stage, dots, records major", dots_rows, (Z, X, TH)),
                      ("first stage, dots, records minor", dots_minor, (ZT, XT, TH)),
                      ("first stage, broadcast, records minor", bcast_minor, (ZT, XT, TH)),
                      ("first stage, broadcast + dot, records minor", bcast_dot_minor,
                       (ZT, XT, TH))]:
    print(name, round(tm(jax.jit(jax.vmap(f)), *args), 1), "ms")
