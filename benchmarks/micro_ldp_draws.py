"""The LDP randomizer's draws, timed alone (issue 31, what bounds the ldp family).

For n = 2e6 users and d = 10: the draws of the l2-ball randomizer in the shipped layout (one key
per user, split three ways: a uniform coin, 64 bits, d normals), the keys alone, the same draws
from three flat arrays, and d normals per user as one (n, d) array. One JAX CPU device; pin it
to one core to compare machines (``taskset -c 0 python benchmarks/micro_ldp_draws.py``).
"""

import sys
import time

sys.path.insert(0, ".")
from dpjax.cli import set_cpu_devices  # noqa: E402

set_cpu_devices(1)  # before JAX starts

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from dpjax import _cpu_prng  # noqa: E402  (importing dpjax installs the unrolled threefry)

n, d = 2_000_000, 10


def tm(f, *a, n=3):
    r = f(*a)
    jax.block_until_ready(r)
    t = time.perf_counter()
    for _ in range(n):
        r = f(*a)
    jax.block_until_ready(r)
    return (time.perf_counter() - t) / n * 1e3


def per_user(key):
    keys = jax.random.split(key, n)

    def one(k):
        k1, k2, k3 = jax.random.split(k, 3)
        return (jax.random.uniform(k1, ()), jax.random.bits(k2, (2,), jnp.uint32),
                _cpu_prng.normal(k3, (d,), jnp.float32))

    return jax.vmap(one)(keys)


def keys_only(key):
    keys = jax.random.split(key, n)
    return jax.vmap(lambda k: jax.random.key_data(jax.random.split(k, 3)))(keys)


def split_n(key):
    return jax.random.key_data(jax.random.split(key, n))


def flat(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return (jax.random.uniform(k1, (n,)), jax.random.bits(k2, (n, 2), jnp.uint32),
            _cpu_prng.normal(k3, (n, d), jnp.float32))


def flat_normal(key):
    return _cpu_prng.normal(key, (n, d), jnp.float32)


if __name__ == "__main__":
    key = jax.random.key(0)
    for name, f in [("per-user (shipped layout)", per_user),
                    ("split n + split 3 per user", keys_only), ("split n", split_n),
                    ("flat draws", flat), ("flat normals only", flat_normal)]:
        ms = tm(jax.jit(f), key)
        print(f"{name}: {ms:.1f} ms = {ms * 1e6 / n:.1f} ns per user")
