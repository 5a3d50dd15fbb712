"""The estimator protocol, the scan driver, keys, and the package's import surface."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base


def _counting_estimator(batching):
    """A toy estimator whose state accumulates the batch sums and one noise draw per step."""

    def init(x0):
        return jnp.asarray(x0, jnp.float32)

    def step(key, state, data, hparams):
        noise = jax.random.normal(key) * hparams
        return state + jnp.sum(data) + noise, noise

    return base.Estimator("toy", init, step, 3, batching)


def test_run_feeds_disjoint_batches_and_fold_in_keys(key):
    data = jnp.arange(10.0)  # n = 10, N0 = 3, n0 = 3: records 9 unused
    est = _counting_estimator("disjoint")
    final, noises = base.run(est, key, data, est.init(0.0), jnp.float32(1.0),
                             record=lambda s, i: i)
    expected_noise = [float(jax.random.normal(jax.random.fold_in(key, t))) for t in range(3)]
    np.testing.assert_allclose(np.asarray(noises), expected_noise, rtol=1e-6)
    assert float(final) == pytest.approx(sum(range(9)) + sum(expected_noise), rel=1e-5)


def test_run_full_batching_sees_all_data(key):
    est = _counting_estimator("full")
    final, _ = base.run(est, key, jnp.arange(10.0), est.init(0.0), jnp.float32(0.0))
    assert float(final) == 3 * 45


def test_split_batches_rejects_too_many_batches():
    with pytest.raises(ValueError, match="exceeds the number of records"):
        base.split_batches(jnp.arange(3.0), 4)


def test_as_key_accepts_typed_raw_and_int_keys():
    k = base.as_key(3)
    assert jnp.issubdtype(k.dtype, jax.dtypes.prng_key)
    raw = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(jax.random.key_data(base.as_key(raw)), raw)
    with pytest.raises(TypeError, match="key must be"):
        base.as_key(3.5)


def test_import_dpjax_pulls_in_only_core_dependencies():
    code = (
        "import sys, dpjax\n"
        "bad = [m for m in ('pandas', 'matplotlib', 'sklearn', 'statsmodels', 'dp_accounting',"
        " 'tqdm') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_strict_numerics_are_on():
    assert jax.config.jax_numpy_rank_promotion == "raise"
    assert jax.config.jax_debug_key_reuse
    with pytest.raises(ValueError):
        jnp.ones((3,)) + jnp.ones((2, 3))
