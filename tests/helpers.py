"""Shared test helpers: statistical tests with power."""

from __future__ import annotations

import numpy as np
from scipy import stats

# A correct scale must not be rejected at this level ...
PASS_P = 1e-3
# ... and a scale off by a factor 2/3 or 3/2 must be rejected at this one.
FAIL_P = 1e-6


def assert_scale_with_power(samples, dist: str, scale: float) -> None:
    """KS test: ``samples`` follow ``dist`` (``"laplace"`` or ``"norm"``) with ``scale``, and
    not with 2/3 or 3/2 of it."""
    samples = np.asarray(samples, dtype=np.float64).ravel()
    p_right = stats.kstest(samples, dist, args=(0.0, scale)).pvalue
    assert p_right > PASS_P, f"{dist}({scale:g}) rejected, p = {p_right:g}"
    for factor in (2 / 3, 3 / 2):
        p_wrong = stats.kstest(samples, dist, args=(0.0, scale * factor)).pvalue
        assert p_wrong < FAIL_P, f"{dist}({scale * factor:g}) not rejected, p = {p_wrong:g}"


def counting_jit(fn, **jit_kwargs):
    """``jax.jit(fn, **jit_kwargs)`` that counts its traces (static arguments by position):
    what :func:`compile_count` reads."""
    from dpjax.base import CountingJit

    return CountingJit(fn, **jit_kwargs)


def compile_count(jitted) -> int:
    """Programs built by a :func:`counting_jit` function (or ``dpjax.base._fit_run``): its
    traces. Not jit's own ``_cache_size``, which reads a process-wide dispatch LRU that a long
    test session fills (it read 0 right after a call in CI)."""
    from dpjax.base import CountingJit

    if not isinstance(jitted, CountingJit):
        raise TypeError("compile_count needs a counting_jit function, not a plain jax.jit")
    return jitted._cache_size()


def same_key(key):
    """A fresh key object with the same bits (to call twice with 'the same key' under the
    key-reuse checker)."""
    import jax

    return jax.random.wrap_key_data(jax.random.key_data(key))


def probe_ledger(estimator, model, n: int, d: int, hparams, params0=None):
    """The ledger of ``estimator`` on ``n`` records at one privacy level, composed from the
    events of one step on a zero batch from ``params0`` (default 0), repeated for every step
    (estimators whose events do not depend on the iterate)."""
    import jax.numpy as jnp

    from dpjax import base

    m = n // estimator.num_steps if estimator.batching == "disjoint" else n
    p0 = jnp.zeros(d) if params0 is None else params0
    events = base.probe_events(estimator, model.dummy_batch(m, d), p0, hparams)
    return estimator.ledger(n, hparams, events)
