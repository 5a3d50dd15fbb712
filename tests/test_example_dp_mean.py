"""The worked example dpjax.examples.dp_mean (docs/adding_an_estimator.md).

The estimator's own checks (the conformance suite covers the protocol):

- sensitivity on adversarial neighbours, including extreme floats;
- the noise scale, tested with power;
- the non-private limit against an independent NumPy reference;
- determinism, and no recompile for new privacy levels;
- the ledger.

Also checked: the page's code blocks are the module's source verbatim, and its usage blocks
run and print what the page shows.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base, registry
from dpjax.accounting import GAUSSIAN_CURVE_NOTE, ApproxDP, gaussian_epsilon
from dpjax.examples import dp_mean
from tests.helpers import assert_scale_with_power, compile_count, same_key

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "adding_an_estimator.md"
MODULE = ROOT / "dpjax" / "examples" / "dp_mean.py"
N, D, C, DELTA = 100, 3, 2.0, 1e-5


def _hp(eps, clip=C, delta=DELTA):
    return dp_mean.MeanHyperparams(*map(jnp.float32, (eps, delta, clip)))


def _classic_sigma(eps, clip=C, n=N, delta=DELTA):
    """The classic Gaussian sigma, from the formula (float64, independent)."""
    return (2.0 * clip / n) * math.sqrt(2.0 * math.log(1.25 / delta)) / eps


def _sigma(eps, clip=C, n=N, delta=DELTA):
    """The example's analytic sigma, solved independently (float64, scipy): the noise at which
    the exact Gaussian curve, ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` with
    ``mu = (2C/n) / sigma``, equals ``delta`` (Balle & Wang 2018, Thm 8)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def curve(mu):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return (2.0 * clip / n) / brentq(curve, 1e-6, 100.0, xtol=1e-14, rtol=1e-14)


def _data(key, n=N, d=D, spread=2.0):
    """Records around (1, ..., 1), many of them beyond the clipping radius C."""
    return dp_mean.simulate(key, n, jnp.ones(d)) * spread


# --------------------------------------------------------------------------------------------
# Sensitivity
# --------------------------------------------------------------------------------------------

_BIG = float(np.finfo(np.float32).max)
_TINY = float(np.finfo(np.float32).smallest_subnormal)
ADVERSARIAL = np.array([
    [C, 0.0, 0.0],  # on the sphere
    [-C, 0.0, 0.0],  # on the sphere, opposite
    [0.0, C * (1 + 1e-6), 0.0],  # just beyond
    [10 * C, -10 * C, 10 * C],  # beyond
    [1e20, 1e20, -1e20],  # squares overflow float32
    [_BIG, _BIG, -_BIG],  # the largest finite values
    [_TINY, -_TINY, _TINY],  # denormals
    [np.inf, -np.inf, 1.0],
    [np.nan, 1.0, -1.0],
    [np.nan, np.inf, -_BIG],
    [0.0, 0.0, 0.0],
], np.float32)


def test_sensitivity_on_adversarial_neighbours(key):
    """Replacing any one record by any adversarial record (and the reverse) moves the clipped
    mean by at most the declared 2C/n in l2; every output is finite; the bound is attained."""
    x = _data(key)
    base_stat = dp_mean.clipped_mean(x, jnp.float32(C))
    declared = float(base_stat.sensitivity)
    assert declared == pytest.approx(2 * C / N, rel=1e-6)
    assert base_stat.norm == "l2" and base_stat.relation == "replace-one"

    def mean_with(row, i):
        return dp_mean.clipped_mean(x.at[i].set(row), jnp.float32(C)).value

    rows = jnp.asarray(ADVERSARIAL)
    # neighbours: record 0 replaced by every adversarial record, pairwise over the battery
    means = jax.jit(jax.vmap(mean_with, (0, None)))(rows, 0)
    means = np.asarray(means, np.float64)
    assert np.isfinite(means).all()
    gaps = np.linalg.norm(means[:, None, :] - means[None, :, :], axis=-1)
    assert gaps.max() <= declared * (1 + 1e-5)
    # the two opposite records on the sphere are exactly 2C apart: the bound is tight
    assert gaps[0, 1] == pytest.approx(declared, rel=1e-5)
    # and against the original data set (record 0 unchanged)
    orig = np.asarray(base_stat.value, np.float64)
    assert np.linalg.norm(means - orig, axis=-1).max() <= declared * (1 + 1e-5)


def test_the_step_releases_the_bounded_statistic(key):
    """At epsilon = inf the step returns exactly the statistic the sensitivity test checks."""
    key_data, key_noise = jax.random.split(key)
    x = _data(key_data)
    state, info = jax.jit(dp_mean.step)(key_noise, dp_mean.MeanState(jnp.zeros(D)), x,
                                        _hp(math.inf))
    np.testing.assert_array_equal(np.asarray(state.beta),
                                  np.asarray(dp_mean.clipped_mean(x, jnp.float32(C)).value))
    (event,) = info.events
    assert event.kind == "gaussian" and float(event.scale) == 0.0


# --------------------------------------------------------------------------------------------
# Noise
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_noise_scale_with_power(key, eps):
    """The released noise is N(0, sigma^2) at the analytic sigma, and is rejected at 2/3 and 3/2
    of it."""
    key_data, key_noise = jax.random.split(key)
    x = _data(key_data)
    keys = jax.random.split(key_noise, 2000)
    state0 = dp_mean.MeanState(jnp.zeros(D))
    states, infos = jax.jit(jax.vmap(dp_mean.step, (0, None, None, None)))(
        keys, state0, x, _hp(eps))
    exact = np.asarray(dp_mean.clipped_mean(x, jnp.float32(C)).value, np.float64)
    noise = np.asarray(states.beta, np.float64) - exact[None, :]
    sigma = _sigma(eps)
    assert_scale_with_power(noise, "norm", sigma)
    # the analytic calibration keeps a margin of 1e-4 on the safe side (more noise)
    np.testing.assert_allclose(np.asarray(infos.events[0].scale), sigma, rtol=1e-3)
    assert float(infos.events[0].scale[0]) >= sigma * (1 - 1e-5)


def test_non_private_limit_equals_the_numpy_clipped_mean(key):
    """epsilon = inf: exactly no noise, and the clipped mean of an independent float64 NumPy
    implementation."""
    x = _data(key, spread=3.0)
    xs = np.asarray(x, np.float64)
    norms = np.linalg.norm(xs, axis=1)
    assert (norms > C).sum() > N // 2  # the clipping matters
    reference = (xs * np.minimum(1.0, C / norms)[:, None]).mean(axis=0)
    a = base.fit(dp_mean.DP_MEAN, jax.random.fold_in(key, 1), x, jnp.zeros(D), _hp(math.inf))
    b = base.fit(dp_mean.DP_MEAN, jax.random.fold_in(key, 2), x, jnp.zeros(D), _hp(math.inf))
    np.testing.assert_array_equal(a.estimate, b.estimate)
    np.testing.assert_allclose(a.estimate, reference, rtol=1e-5, atol=1e-6)
    assert not a.ledger.is_private


# --------------------------------------------------------------------------------------------
# Determinism, compilation, ledger
# --------------------------------------------------------------------------------------------


def test_determinism_under_a_fixed_key(key):
    x = _data(jax.random.fold_in(key, 7))
    a = base.fit(dp_mean.DP_MEAN, same_key(key), x, jnp.zeros(D), _hp(0.5)).estimate
    b = base.fit(dp_mean.DP_MEAN, same_key(key), x, jnp.zeros(D), _hp(0.5)).estimate
    c = base.fit(dp_mean.DP_MEAN, jax.random.fold_in(key, 1), x, jnp.zeros(D), _hp(0.5)).estimate
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_no_recompile_for_new_privacy_levels(key):
    x = _data(jax.random.fold_in(key, 7))
    base.fit(dp_mean.DP_MEAN, jax.random.fold_in(key, 1), x, jnp.zeros(D), _hp(0.5))
    before = compile_count(base._fit_run)
    for i, (eps, clip) in enumerate([(0.3, C), (1.0, 0.5), (math.inf, C), (0.7, 10.0)]):
        base.fit(dp_mean.DP_MEAN, jax.random.fold_in(key, 2 + i), x, jnp.zeros(D),
                 _hp(eps, clip))
    assert compile_count(base._fit_run) == before


@pytest.mark.parametrize("eps", [0.25, 1.0, 2.0])
def test_the_ledger_delivers_the_requested_budget(key, eps):
    x = _data(key)
    res = base.fit(dp_mean.DP_MEAN, jax.random.fold_in(key, 1), x, jnp.zeros(D), _hp(eps))
    led = res.ledger
    delta = float(np.float32(DELTA))
    assert led.requested == ApproxDP(eps, delta)
    # read off the exact Gaussian curve of the sigma drawn: the analytic calibration spends
    # the request (up to its 1e-4 margin), never more
    (release,) = led.releases
    mu = (2 * C / N) / release.scale
    assert led.approx_dp.epsilon == pytest.approx(gaussian_epsilon(mu, delta), rel=1e-5)
    assert led.approx_dp.epsilon == pytest.approx(eps, rel=1e-3)
    assert led.approx_dp.epsilon <= eps
    assert led.approx_dp.delta == pytest.approx(delta, rel=1e-6)
    assert led.composition == "basic" and led.relation == "replace-one" and led.is_private
    assert release.count == 1 and release.mechanism == "gaussian"
    assert release.sensitivity == pytest.approx(2 * C / N, rel=1e-6)
    assert release.scale == pytest.approx(_sigma(eps), rel=1e-3)
    assert release.scale < _classic_sigma(eps)  # less noise than the classic formula here
    assert led.notes == (GAUSSIAN_CURVE_NOTE,)  # generated, not typed by the estimator


def test_the_example_is_registered():
    (entry,) = [e for e in registry.entries() if e.name == "dp-mean"]
    assert entry.family == "example" and entry.private
    assert entry.build() is dp_mean.DP_MEAN
    assert entry.requested(0.5) == ("epsilon", 0.5)
    assert entry in registry.entries("example")


# --------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------

_BLOCK = re.compile(r"^<!-- (?P<tag>[^>]*?) -->\n```[a-z]*\n(?P<body>.*?)^```$",
                    re.MULTILINE | re.DOTALL)


def doc_blocks(tag: str) -> list[str]:
    """The fenced blocks of the page announced by the comment ``<!-- tag -->``."""
    return [m["body"] for m in _BLOCK.finditer(DOC.read_text()) if m["tag"] == tag]


def test_the_doc_shows_the_module_source_verbatim():
    """The page's source blocks, in order, are the module: concatenated with the two blank
    lines that separate top-level definitions, they equal the file byte for byte."""
    blocks = doc_blocks("source: dpjax/examples/dp_mean.py")
    assert len(blocks) >= 5
    assert "\n\n\n".join(b.strip("\n") for b in blocks) + "\n" == MODULE.read_text()


def test_the_module_is_short():
    assert len(MODULE.read_text().splitlines()) < 100


def test_the_doc_usage_blocks_run_and_print_what_is_shown(tmp_path, monkeypatch):
    """The page's usage blocks, run in order in one namespace (writing results/ under a
    temporary directory), print exactly the outputs the page shows."""
    runs, outputs = doc_blocks("run"), doc_blocks("output")
    assert len(runs) == len(outputs) == 3
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__doc__"}
    for code, expected in zip(runs, outputs):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(compile(code, str(DOC), "exec"), namespace)
        assert buffer.getvalue() == expected
    assert (tmp_path / "results" / "dp_mean" / "config.json").exists()
