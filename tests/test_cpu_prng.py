"""dpjax._cpu_prng: JAX's unrolled threefry lowering on CPU draws the same numbers as JAX's own
rolled CPU lowering (compared across two processes, one with DPJAX_ROLLED_THREEFRY=1)."""

import hashlib
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _cpu_prng, sweep  # noqa: F401  (importing the sweep engine installs it)
from dpjax.models.glm import random_words

_DRAWS = """
import hashlib, os, sys
import jax, jax.numpy as jnp, numpy as np
import dpjax.sweep
from dpjax import _cpu_prng
k = jax.random.key(123)
ks = jax.random.split(k, 5)
draws = [jax.random.bits(ks[0], (1001,), jnp.uint32), jax.random.normal(ks[1], (77, 13)),
         jax.random.laplace(ks[2], (500,)), jax.random.uniform(ks[3], (3, 333)),
         jax.vmap(lambda kk: jax.random.normal(kk, (50,)))(jax.random.split(ks[4], 4))]
h = hashlib.sha256(b"".join(np.asarray(jax.jit(lambda: d)()).tobytes() for d in draws))
print(_cpu_prng.installed(), h.hexdigest())
"""


def _run(rolled: bool) -> tuple[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", DPJAX_ROLLED_THREEFRY="1" if rolled else "0")
    out = subprocess.run([sys.executable, "-c", _DRAWS], capture_output=True, text=True,
                         env=env, check=True)
    return tuple(out.stdout.split())


def test_unrolled_lowering_draws_the_same_numbers():
    rolled, unrolled = _run(True), _run(False)
    assert rolled[0] == "False" and unrolled[0] == "True"  # the switch works both ways
    assert rolled[1] == unrolled[1]


def test_installed_lowering_matches_the_threefry_formula():
    assert _cpu_prng.installed()
    k = jax.random.key(9)
    got = jax.jit(lambda: jax.random.bits(k, (64, 33), jnp.uint32))()
    assert np.array_equal(np.asarray(got), np.asarray(random_words(k, (64, 33))))
    assert hashlib.sha256(np.asarray(got).tobytes()).hexdigest()  # non-empty draw
