"""The conformance suite: every estimator honours the protocol of dpjax.base.

It runs over every estimator of :mod:`dpjax.registry` (a new estimator is tested by
registering it): ``step`` is pure and jittable; the state keeps its structure, shapes and
dtypes across steps; a run is deterministic under a fixed key and changes with the key;
``vmap`` over keys and over privacy levels works; the non-private level is finite and exactly
noise-free (two keys give the same answer); a second call with new privacy levels does not
recompile; and the ledger, composed from the events of an actual run, delivers the requested
budget for the default (corrected) variant.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base, registry
from dpjax.base import CountingJit
from tests.helpers import same_key


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    estimator: base.Estimator
    data: Any
    params0: Any
    hparams: Callable[[float], Any]  # privacy level -> hparams (scalar fields)
    private: bool = True  # False for non-private baselines (they draw no noise)
    requested: Callable[[float], tuple[str, float]] | None = None  # level -> ("epsilon", value)
    ledger_private: bool | None = None  # the ledger's verdict, if not ``private``


@functools.cache
def _case(name: str) -> Case:
    """The estimator and its example problem, built on first use: collecting the suite (or
    selecting one estimator with ``-k NAME``) builds no example data."""
    (entry,) = [e for e in registry.entries() if e.name == name]
    example = entry.example()
    return Case(entry.name, entry.build(), example.data, example.params0, example.hparams,
                entry.private, entry.requested, entry.ledger_private)


NAMES = [e.name for e in registry.entries()]


def _test_id(name: str) -> str:
    """The registry name as a ``-k`` expression can type it (``pytest -k dp-gem/gmm``): runs
    of other characters, e.g. the spaces and parentheses of ``"... (not DP as claimed)"``, as
    one ``-``."""
    return re.sub(r"[^\w/.+-]+", "-", name).strip("-")


def test_every_estimator_family_is_registered():
    assert {e.family for e in registry.entries()} >= {"dp-em", "dp-glm", "dp-iv"}
    assert len(set(NAMES)) == len(NAMES) >= 17
    assert len({_test_id(name) for name in NAMES}) == len(NAMES)  # -k tells them apart


# module scope: the tests of one estimator run together (pytest orders them by the parameter),
# so its example is built once and its kernels compiled once per worker
@pytest.fixture(scope="module", params=NAMES, ids=_test_id)
def case(request):
    return _case(request.param)


def _trace_all(state, info):
    """The whole run: states, diagnostics and events per step (one record function for every
    test, so every test of an estimator runs the same compiled kernel)."""
    return state, info._replace(events=()), info.events


#: base.run with the record above: one compile per estimator (the hyperparameters are arrays,
#: so every privacy level, the extreme ones included, runs the same kernel)
_RUN = CountingJit(base.run, static_argnums=(0, 5))


def _run(case, key, eps):
    """``(final state, (states, diagnostics, events))`` of a run at privacy level ``eps``."""
    est = case.estimator
    return _RUN(est, key, case.data, est.init(case.params0), case.hparams(eps), _trace_all)


def test_step_keeps_the_state_structure(case, key):
    est = case.estimator
    k_step, k_run = jax.random.split(key)
    state = est.init(case.params0)
    batch = (base.split_batches(case.data, est.num_steps) if est.batching == "disjoint"
             else case.data)
    if est.batching == "disjoint":
        batch = jax.tree_util.tree_map(lambda x: x[0], batch)
    # step traced as jax.jit traces it (abstract values: no compile of its own) ...
    new, _ = jax.eval_shape(est.step, k_step, state, batch, case.hparams(0.5))
    assert jax.tree_util.tree_structure(new) == jax.tree_util.tree_structure(state)
    for a, b in zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(state)):
        assert a.shape == b.shape and a.dtype == b.dtype
    # ... and run, in the kernel every test of the estimator shares: every diagnostic of every
    # step is finite (a non-private release's event has infinite sensitivity)
    _, (_, diagnostics, events) = _run(case, k_run, 0.5)
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(diagnostics))
    for ev in jax.tree_util.tree_leaves(events, is_leaf=lambda x: hasattr(x, "kind")):
        assert ev.kind == "none" or np.isfinite(np.asarray(ev.scale)).all()


def test_determinism_and_key_dependence(case, key):
    a = _run(case, same_key(key), 0.5)[1][0]  # the states of every step
    b = _run(case, same_key(key), 0.5)[1][0]
    c = _run(case, jax.random.fold_in(key, 1), 0.5)[1][0]
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    differs = any(not np.array_equal(np.asarray(x), np.asarray(y))
                  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(c)))
    assert differs == case.private  # only a private estimator draws noise


def test_non_private_level_is_finite_and_noise_free(case, key):
    a = _run(case, jax.random.fold_in(key, 2), math.inf)[0]
    b = _run(case, jax.random.fold_in(key, 3), math.inf)[0]
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert np.isfinite(np.asarray(x)).all()
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


#: the budgets at which every private estimator must deliver what it is asked (issue 28)
DELIVERY_LEVELS = (0.1, 0.5, 1.0, 4.0, 8.0, 16.0, 50.0)
#: the levels of the vmapped run: the delivery levels and the non-private one
VMAP_LEVELS = (*DELIVERY_LEVELS, math.inf)

#: base.run vmapped over keys and hyperparameters, with the record above: one compile per
#: estimator, shared by the vmap test and the ledger test
_VRUN = jax.jit(jax.vmap(base.run, in_axes=(None, 0, None, None, 0, None)),
                static_argnums=(0, 5))


def _vrun(case, key, hparams):
    """The runs at ``VMAP_LEVELS`` (``hparams``: stacked along a leading axis), one key each."""
    est = case.estimator
    keys = jax.random.split(key, len(VMAP_LEVELS))
    return _VRUN(est, keys, case.data, est.init(case.params0), hparams, _trace_all)


def test_vmap_over_keys_and_privacy_levels(case, key):
    hp = jax.vmap(case.hparams)(jnp.array(VMAP_LEVELS))
    final, _ = _vrun(case, key, hp)
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(final))


def test_no_recompile_for_new_privacy_levels(case, key):
    _run(case, jax.random.fold_in(key, 4), 0.5)
    before = _RUN._cache_size()
    for i, eps in enumerate((0.2, 2.0, math.inf)):
        _run(case, jax.random.fold_in(key, 5 + i), eps)
    assert _RUN._cache_size() == before


def test_ledger_delivers_the_requested_budget(case, key):
    """The ledger is composed from the events of an actual run: one event per release per
    step, and, for the default variant, the guarantee the noise drawn delivers -- read off the
    exact curves, never the calibration formula -- is at least as strong as the requested one
    at every level from 0.1 to 50 (one compile: the levels are vmapped)."""
    from dpjax.accounting import ZCDP, ApproxDP, falls_short

    est = case.estimator
    hps = [case.hparams(lv) for lv in VMAP_LEVELS]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *hps)
    _, (_, _, events) = _vrun(case, key, stacked)
    n = jax.tree_util.tree_leaves(case.data)[0].shape[0]
    for i, level in enumerate(DELIVERY_LEVELS):
        ev_i = jax.tree_util.tree_map(lambda x, i=i: np.asarray(x[i]), events)
        for ev in jax.tree_util.tree_leaves(ev_i, is_leaf=lambda x: hasattr(x, "kind")):
            assert np.shape(ev.scale) == (est.num_steps,)  # one release per step
        led = est.ledger(n, jax.tree_util.tree_map(np.asarray, hps[i]), ev_i)
        assert led.is_private == (case.private if case.ledger_private is None
                                  else case.ledger_private)
        assert sum(r.count for r in led.releases) == est.num_steps * len(ev_i)
        if case.private and case.requested is not None:
            name, value = case.requested(level)
            delta = float(np.asarray(getattr(hps[i], "delta", 0.0)))  # 0: pure (eps-LDP)
            asked = ApproxDP(value, delta) if name == "epsilon" else ZCDP(value)
            check = dataclasses.replace(led, requested=asked, variant="corrected")
            assert not falls_short(check), (level, str(led))
        json_ready = led.to_dict()
        assert json_ready["estimator"] == case.estimator.name


def test_ledger_delivers_without_dp_accounting(case, key, monkeypatch):
    """Without the [pld] extra (dp_accounting), a user's install: the ledgers fall back (exact
    for Gaussian sequences, the papers' rules otherwise), and the default variant still
    delivers what it was asked -- its calibration must not assume a composition the ledger
    cannot use."""
    from dpjax import _pld

    monkeypatch.setattr(_pld, "available", lambda: False)
    test_ledger_delivers_the_requested_budget(case, key)


@pytest.mark.parametrize("level", [1e-8, 1e-6, 1e6, 1e8], ids=lambda v: f"level={v:g}")
def test_extreme_budgets_give_finite_results(case, key, level):
    """Budgets from 1e-8 to 1e8 (the level is epsilon, or rho for the zCDP estimators): the
    noise scale does not overflow, and every iterate, diagnostic and event of the run is finite
    or, for a non-private release's event, explicitly unbounded."""
    final, (states, diag, events) = _run(case, key, level)
    for x in jax.tree_util.tree_leaves((final, states, diag)):
        assert np.isfinite(np.asarray(x)).all()
    for ev in jax.tree_util.tree_leaves(events, is_leaf=lambda x: hasattr(x, "kind")):
        assert ev.kind == "none" or np.isfinite(np.asarray(ev.scale)).all()


# The canary audit of every private registered estimator runs in the default suite:
# tests/test_canary_audit.py::test_small_audit_of_every_estimator (honest below its claim,
# noise x 0.2 caught); the full-power table rows under -m slow.
