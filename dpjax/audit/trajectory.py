"""The trajectory attack: every iterate of a run is a release, and the per-step score statistic
weighs each step's signal by its noise (:func:`trajectory_statistic`); :class:`_Trajectories`
runs the whole audit of one estimator (pilot, canary search, honest and planted trials) as one
compiled function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.audit.plants import planted_bug, scaled_noise
from dpjax.base import Estimator, run, split_batches
from dpjax.mechanisms import sanitize

__all__ = ["trajectory_mechanism", "trajectory_statistic"]

PyTree = Any


def _flat_state(state: PyTree) -> jax.Array:
    """The floating-point leaves of a state, flattened and concatenated (float32)."""
    leaves = [jnp.ravel(x).astype(jnp.float32) for x in jax.tree_util.tree_leaves(state)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.concatenate(leaves)


def _per_step(estimator: Estimator, data: PyTree) -> PyTree:
    """The data each step sees, with a leading step axis under disjoint batching (else
    ``None``: every step sees ``data``)."""
    if estimator.batching == "disjoint":
        return split_batches(data, estimator.num_steps)
    return None


def _noise_free_steps(estimator: Estimator, hp: PyTree, states: PyTree, data: PyTree,
                      salt: int) -> jax.Array:
    """The noise-free step ``t`` from ``states[t]`` on ``data`` for every ``t`` (vmapped over
    the steps), flattened: ``(num_steps, state size)``. Every noise draw is multiplied by 0
    (traced here, so the current plant's noise is switched off too); the keys are irrelevant
    but fresh."""
    steps = jnp.arange(estimator.num_steps)
    batches = _per_step(estimator, data)

    def one(t, state, batch):
        key = jax.random.fold_in(jax.random.key(0x5EED), 4 * t + salt)
        new, _ = estimator.step(key, state, data if batch is None else batch, hp)
        return sanitize(_flat_state(new))

    with planted_bug("noise-x0"):
        return jax.vmap(one)(steps, states, batches)


def _states_before(estimator: Estimator, params0: PyTree, trace: PyTree) -> PyTree:
    """The state before each step (leading axis ``num_steps``): ``init(params0)``, then the
    recorded states but the last."""
    first = estimator.init(params0)
    return jax.tree_util.tree_map(
        lambda f, x: jnp.concatenate([jnp.asarray(f, x.dtype)[None], x[:-1]]), first, trace)


def _flat_trace(trace: PyTree) -> jax.Array:
    """``(num_steps, state size)``: every recorded state, flattened."""
    return sanitize(jax.vmap(_flat_state)(trace))


def trajectory_mechanism(
    estimator: Estimator, hparams: PyTree, params0: Any
) -> Callable[[jax.Array, PyTree], PyTree]:
    """``(key, dataset) -> the states after every step`` (leaves ``(num_steps, ...)``).

    Every iterate is a release of the composition the ledger accounts for (each step is private
    given the previous iterate, and the steps compose adaptively), so an attack on the whole
    trajectory is as sound as one on the final iterate, and stronger: the per-step signals add.
    """
    hp = jax.tree_util.tree_map(jnp.asarray, hparams)

    def mechanism(key: jax.Array, dataset: PyTree) -> PyTree:
        _, trace = run(estimator, key, dataset, estimator.init(params0), hp,
                       record=lambda state, info: state)
        return trace

    return mechanism


def trajectory_statistic(
    estimator: Estimator, hparams: PyTree, params0: Any, data_in: PyTree, data_out: PyTree,
    weights: Any,
) -> Callable[[PyTree], jax.Array]:
    r"""The per-step score (likelihood-ratio) attack on a trajectory.

    With ``x_t`` the state before step ``t`` (public: the previous release), ``a_t`` and
    ``b_t`` the noise-free next states from ``x_t`` on ``data_in`` and ``data_out``, and
    ``x_{t+1}`` the released next state,

    .. math::

        A = \sum_t \sum_j w_{tj} (x_{t+1,j} - (a_{tj} + b_{tj}) / 2) (a_{tj} - b_{tj}),

    the log-likelihood ratio of ``data_in`` against ``data_out`` when step ``t`` adds Gaussian
    noise of variance ``1 / w_tj`` to coordinate ``j`` (for Gaussian releases it separates the
    two data sets as well as any test can). ``weights``: ``(num_steps, state size)``, fixed
    before the audit (:func:`canary_case` estimates the noise variances from a pilot run).
    Any fixed statistic gives a sound audit; the weights only change its power.
    """
    hp = jax.tree_util.tree_map(jnp.asarray, hparams)
    w = jnp.asarray(weights, jnp.float32)

    def statistic(trace: PyTree) -> jax.Array:
        before = _states_before(estimator, params0, trace)
        a = _noise_free_steps(estimator, hp, before, data_in, 0)
        b = _noise_free_steps(estimator, hp, before, data_out, 1)
        return jnp.sum(w * (_flat_trace(trace) - 0.5 * (a + b)) * (a - b))

    return statistic


def _pilot(estimator: Estimator, hp: PyTree, params0: PyTree, data: PyTree, num: int,
           seed: int) -> tuple[np.ndarray, PyTree]:
    """Per-step, per-coordinate variance of ``x_{t+1} - F(x_t)`` over ``num`` honest runs on
    ``data`` (``F``: the noise-free step), and the runs' privacy events (leading axis ``num``)."""
    def one(key):
        _, (trace, events) = run(estimator, key, data, estimator.init(params0), hp,
                                 record=lambda state, info: (state, info.events))
        before = _states_before(estimator, params0, trace)
        return _flat_trace(trace) - _noise_free_steps(estimator, hp, before, data, 2), events

    keys = jax.random.split(jax.random.key(seed + 0x9177), num)
    res, events = jax.jit(jax.vmap(one))(keys)
    return np.var(np.asarray(res, np.float64), axis=0), events


def _weights(var: np.ndarray) -> np.ndarray:
    """Inverse variances, with a floor (a noise-free coordinate weighs much, not infinitely)."""
    floor = 1e-4 * float(var.max()) if var.max() > 0 else 1.0
    return 1.0 / np.maximum(var, floor)


_FACTORS = {None: (1.0, 1.0), "noise-x0.2": (0.2, 1.0), "sensitivity-x0.5": (1.0, 0.5)}


class _Trajectories:
    """The trajectory audit of one estimator as one compiled function.

    ``runs`` gives, for each trial, a run on the data set with row ``index`` of its private
    leaves replaced by a record, with its noise and sensitivity scaled by traced factors
    (:func:`scaled_noise`; 1 and 1: the honest run), every iterate it releases, its events, and
    the noise-free next states ``a_t``, ``b_t`` from each of its iterates on two more data sets
    (records ``a`` and ``b``). The three steps are one step vmapped over three lanes, so the
    pilot, the noise-free reference path, the canary search and the trials of the honest and
    the planted runs cost one compile per estimator; calls go in chunks of a fixed size (the
    last padded). Trial ``i`` of a call runs with key ``fold_in(key, i)`` (step ``t``:
    ``fold_in(fold_in(key, i), t)``, as :func:`dpjax.base.run`).
    """

    def __init__(self, estimator: Estimator, hp: PyTree, params0: PyTree,
                 with_record: Callable[[int, list], PyTree], index: int, chunk: int):
        self.chunk = chunk
        num_steps = estimator.num_steps
        nf_key = jax.random.key(0x5EED)

        def one(key, i, rec_run, rec_a, rec_b, noise, sens):
            datas = [with_record(index, r) for r in (rec_run, rec_a, rec_b)]
            stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *datas)  # lanes first
            if estimator.batching == "disjoint":
                batches = jax.vmap(lambda d: split_batches(d, num_steps))(stacked)
                xs = (jnp.arange(num_steps), jax.tree_util.tree_map(
                    lambda x: jnp.moveaxis(x, 0, 1), batches))
            else:
                xs = (jnp.arange(num_steps), None)
            run_key = jax.random.fold_in(key, i)

            def lane(k, state, batch, nf, sf):
                with scaled_noise(nf, sf):
                    return estimator.step(k, state, batch, hp)

            def body(state, x):
                t, batch3 = x
                # the noise-free lanes draw noise times 0: their keys are fresh, never used
                keys = jnp.concatenate([jax.random.fold_in(run_key, t)[None],
                                        jax.random.split(jax.random.fold_in(nf_key, t))])
                new3, info3 = jax.vmap(lane, in_axes=(0, None, 0, 0, 0))(
                    keys, state, stacked if batch3 is None else batch3,
                    jnp.stack([noise, jnp.zeros_like(noise), jnp.zeros_like(noise)]),
                    jnp.stack([sens, jnp.ones_like(sens), jnp.ones_like(sens)]))
                lane_of = lambda tree, j: jax.tree_util.tree_map(  # noqa: E731
                    lambda v: v[j], tree)
                flat3 = jax.vmap(lambda st: sanitize(_flat_state(st)))(new3)
                return lane_of(new3, 0), (flat3, lane_of(info3.events, 0))

            _, (flat3, events) = jax.lax.scan(body, estimator.init(params0), xs)
            return flat3[:, 0], flat3[:, 1], flat3[:, 2], events

        self._run = jax.jit(jax.vmap(one, in_axes=(None, 0, 0, 0, 0, 0, 0)))

    @staticmethod
    def tile(record: list, m: int) -> list:
        """``record`` (a list of rows) repeated ``m`` times along a new leading axis."""
        return [jnp.broadcast_to(jnp.asarray(r), (m,) + jnp.shape(r)) for r in record]

    def runs(self, key: jax.Array, rec_run: list, rec_a: list, rec_b: list, m: int,
             plant: str | None = None, noise: float | None = None):
        """``m`` trials (records with a leading axis ``m``): per chunk, numpy ``(x, a, b)``
        (each ``(chunk, num_steps, state size)``: the released iterates and the noise-free
        next states on data sets ``a`` and ``b``) and the events; a generator."""
        nf, sf = _FACTORS[plant]
        nf = nf if noise is None else noise
        extra = -m % self.chunk
        pad = lambda x: jnp.concatenate(  # noqa: E731
            [x, jnp.repeat(x[-1:], extra, axis=0)]) if extra else x
        idx = pad(jnp.arange(m, dtype=jnp.uint32))
        recs = [[pad(jnp.asarray(r)) for r in rec] for rec in (rec_run, rec_a, rec_b)]
        nfs = jnp.full(idx.shape, nf, jnp.float32)
        sfs = jnp.full(idx.shape, sf, jnp.float32)
        for lo in range(0, idx.shape[0], self.chunk):
            sl = slice(lo, lo + self.chunk)
            x, a, b, events = self._run(key, idx[sl], *[[r[sl] for r in rec] for rec in recs],
                                        nfs[sl], sfs[sl])
            yield (np.asarray(x, np.float64), np.asarray(a, np.float64),
                   np.asarray(b, np.float64), events)
