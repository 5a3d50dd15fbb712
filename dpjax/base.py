r"""The estimator protocol and the ``lax.scan`` driver.

An estimator is a pair of pure functions, as in blackjax and optax:

* ``init(params0) -> State``
* ``step(key, state, data, hparams) -> (State, Info)``

The key comes first, is never stored in the state and never defaulted. Everything that fixes
shapes or control flow (the model, the sparsity, the number of iterations, variant flags) is bound
when the estimator is built; everything a study sweeps (epsilon, delta, rho, step size,
truncation level) is an array field of ``hparams``, so ``vmap`` over privacy levels works and a
new value never recompiles.

:func:`run` threads ``step`` through :func:`jax.lax.scan`. Step ``t`` uses the key
``fold_in(key, t)`` and, for estimators with one disjoint batch per iteration, batch ``t`` of the
data (consecutive index blocks of size ``n0 = floor(n / num_steps)``; the remainder is unused).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

__all__ = [
    "Estimator",
    "FitResult",
    "fit",
    "InitFn",
    "StepFn",
    "as_key",
    "batch_size",
    "probe_events",
    "run",
    "split_batches",
]

PyTree = Any


class InitFn(Protocol):
    def __call__(self, params0: jax.Array) -> PyTree:
        """Build the initial state from a data-independent starting value."""


class StepFn(Protocol):
    def __call__(
        self, key: jax.Array, state: PyTree, data: PyTree, hparams: PyTree
    ) -> tuple[PyTree, PyTree]:
        """One iteration: ``(key, state, data, hparams) -> (new_state, info)``.

        ``data`` is the iteration's batch (``batching == "disjoint"``) or the whole data set
        (``batching == "full"``).
        """


class Estimator(NamedTuple):
    """An iterative (private) estimator: ``init`` and ``step`` plus static facts about it.

    Attributes:
        name: a short name, used in ledgers and results.
        init: see :class:`InitFn`.
        step: see :class:`StepFn`.
        num_steps: the number of iterations (static).
        batching: ``"disjoint"`` -- iteration ``t`` sees only batch ``t`` of ``num_steps``
            disjoint batches (sample splitting); ``"full"`` -- every iteration sees all data.
        ledger: host function ``ledger(n, hparams, events) -> Ledger``: the privacy ledger of
            one run on ``n`` records with one privacy level's (scalar) ``hparams``, composed
            from that run's privacy events (``info.events`` of every step, stacked by the scan:
            a tuple of :class:`~dpjax.mechanisms.PrivacyEvent` with a leading step axis).
            Every step's ``info`` has a field ``events``: one event per release the step makes.
        check: host function ``check(n, hparams, dtype) -> None`` run by :func:`fit` before
            anything runs, on public values only (``n``, one level's hyperparameters, the
            dtype the data are in): it raises where a level's noise would be flushed to zero
            or its statistic could overflow (e.g. with
            :func:`dpjax._validate.check_noise_inputs`), naming the hyperparameter to change,
            so whether a fit is refused never depends on the data.
    """

    name: str
    init: InitFn
    step: StepFn
    num_steps: int
    batching: Literal["disjoint", "full"]
    ledger: Callable[[int, PyTree], Any] | None = None
    check: Callable[[int, PyTree, Any], None] | None = None


def as_key(key: Any) -> jax.Array:
    """Accept a typed key (``jax.random.key``), a raw ``uint32[2]`` key, or an int seed."""
    if isinstance(key, (int,)) and not isinstance(key, bool):
        return jax.random.key(key)
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if isinstance(key, jax.Array) and key.dtype == jnp.uint32 and key.shape == (2,):
        return jax.random.wrap_key_data(key)
    raise TypeError(
        "key must be a jax.random.key(...), a raw uint32[2] PRNG key, or an int seed; got "
        f"{type(key).__name__}"
    )


def batch_size(n: int, num_batches: int) -> int:
    """``n0 = floor(n / num_batches)``: the public batch size of sample splitting."""
    return n // num_batches


def split_batches(data: PyTree, num_batches: int) -> PyTree:
    """Reshape every leaf ``(n, ...)`` to ``(num_batches, n0, ...)``, dropping the remainder.

    The partition is into consecutive index blocks, which does not depend on the data values
    (shuffle rows with a public permutation beforehand if the order is informative).
    """
    leaves = jax.tree_util.tree_leaves(data)
    n = leaves[0].shape[0]
    if any(leaf.shape[0] != n for leaf in leaves):
        raise ValueError("all data leaves must have the same number of rows")
    n0 = batch_size(n, num_batches)
    if n0 < 1:
        raise ValueError(f"num_batches = {num_batches} exceeds the number of records n = {n}")
    return jax.tree_util.tree_map(
        lambda x: x[: n0 * num_batches].reshape((num_batches, n0) + x.shape[1:]), data
    )


def _default_record(state: PyTree, info: PyTree) -> PyTree:
    del info
    return state


def run(
    estimator: Estimator,
    key: jax.Array,
    data: PyTree | Callable[[jax.Array], PyTree],
    state: PyTree,
    hparams: PyTree,
    record: Callable[[PyTree, PyTree], PyTree] | None = None,
) -> tuple[PyTree, PyTree]:
    """Run ``estimator.num_steps`` iterations with ``lax.scan``: the one scan driver (fits,
    sweeps and audits all go through it).

    Args:
        estimator: the estimator.
        key: the run's key; step ``t`` uses ``fold_in(key, t)``.
        data: the data set, leaves with ``n`` rows; or, for an estimator with one disjoint
            batch per step, a function ``batch(t) -> batch t`` evaluated inside the scan (data
            generated step by step: memory ``O(batch)``, not ``O(n)``; under ``vmap`` over keys
            or hyperparameters the batch is computed once and shared).
        state: the initial state (``estimator.init(params0)``).
        hparams: the (array) hyperparameters.
        record: ``record(state_after_step, info) -> pytree`` chooses what is kept per iteration
            (keep it small in sweeps: e.g. the error). Defaults to the whole state.

    Returns:
        ``(final_state, trace)``; the leaves of ``trace`` have a leading axis ``num_steps``.
    """
    record = record or _default_record
    steps = jnp.arange(estimator.num_steps)
    streamed = callable(data)
    if streamed:
        if estimator.batching != "disjoint":
            raise ValueError("data given as batch(t) needs an estimator with disjoint batches")
        xs = (steps, None)
    elif estimator.batching == "disjoint":
        xs = (steps, split_batches(data, estimator.num_steps))
    elif estimator.batching == "full":
        xs = (steps, None)
    else:
        raise ValueError(f"unknown batching {estimator.batching!r}")

    def body(carry, x):
        t, batch = x
        if streamed:
            batch = data(t)
        elif batch is None:
            batch = data
        new_state, info = estimator.step(jax.random.fold_in(key, t), carry, batch, hparams)
        return new_state, record(new_state, info)

    return jax.lax.scan(body, state, xs)


def probe_events(estimator: Estimator, batch: PyTree, params0: PyTree, hparams: PyTree) -> PyTree:
    """The privacy events of a run, read off one step from ``params0`` on ``batch`` and repeated
    for every step (the noise it draws is discarded).

    For displays before a run (e.g. the epsilon a level delivers) of estimators whose
    per-step events do not depend on the iterate; the ledger of an actual run is composed from
    that run's own events.
    """
    state = estimator.init(params0)
    _, info = jax.jit(estimator.step)(jax.random.key(0), state, batch,
                                      jax.tree_util.tree_map(jnp.asarray, hparams))
    return jax.tree_util.tree_map(
        lambda x: jnp.broadcast_to(x, (estimator.num_steps,) + jnp.shape(x)), info.events
    )


# --------------------------------------------------------------------------------------------
# The one fit
# --------------------------------------------------------------------------------------------


class FitResult(NamedTuple):
    """The result of one fit (NumPy arrays)."""

    estimate: Any  # output(final state), e.g. beta^T
    trace: Any  # record(state, info) after every step (leading axis: steps)
    ledger: Any  # dpjax.accounting.Ledger composed from the run's privacy events
    hparams: PyTree  # the hyperparameters used (one privacy level)
    state: PyTree  # the final state


def _beta(state: PyTree) -> jax.Array:
    return state.beta


def _fit_record(output, record):
    def rec(state, info):
        return (output(state) if record is None else record(state, info)), info.events

    return rec


@functools.partial(jax.jit, static_argnames=("estimator", "output", "record"))
def _fit_run(estimator, key, data, state, hparams, output, record):
    return run(estimator, key, data, state, hparams, record=_fit_record(output, record))


def fit(
    estimator: Estimator,
    key: Any,
    data: PyTree,
    params0: PyTree,
    hparams: PyTree,
    *,
    n: int | None = None,
    output: Callable[[PyTree], PyTree] = _beta,
    record: Callable[[PyTree, PyTree], PyTree] | None = None,
    secure: bool = False,
    grid: float | None = None,
) -> FitResult:
    """Fit ``estimator`` to one data set: the single entry point under every ``fit_*``.

    Runs :func:`run` (one compile per estimator and shape; new hyperparameter values do not
    recompile), composes the ledger from the privacy events the run drew
    (``estimator.ledger(n, hparams, events)``), and refuses a non-finite estimate.

    A fit runs on the host (it checks concrete values and builds the ledger there): under
    ``jax.jit`` or ``jax.vmap`` it raises :class:`~dpjax._validate.TracedFitError`; trace
    :func:`run` or the sweep (:func:`dpjax.sweep.study_function`) instead.

    Args:
        estimator: the estimator.
        key: PRNG key (or int seed) for the noise.
        data: the (validated) data set, leaves with ``n`` rows.
        params0: the data-independent starting value.
        hparams: one privacy level's hyperparameters (host values; they are also what the
            ledger reads).
        n: the number of records (default: the rows of the first data leaf).
        output: ``output(state) -> estimate`` (module-level function; default ``state.beta``).
        record: ``record(state, info)`` kept per step (module-level; default ``output(state)``).
        secure: release through the floating-point-safe path for real data
            (:func:`dpjax.mechanisms.secure_noise`: exact integer noise on a public grid; the
            steps run eagerly, slower than the default path). The ledger is composed from the
            discrete events (zCDP for Gaussian noise, converted at ``hparams.delta``). An
            estimator with a release that has no such path (peeling) raises.
        grid: with ``secure``: the public grid step, a power of two (default: per release,
            from its sensitivity; see :func:`~dpjax.mechanisms.secure_noise`).
    """
    _validate.check_not_traced("dpjax.fit", key, data, params0, hparams)
    _validate.check_hparams(hparams)
    if n is None:
        n = int(jax.tree_util.tree_leaves(data)[0].shape[0])
    if estimator.check is not None:  # public values only: a refusal never depends on the data
        estimator.check(n, hparams, jnp.result_type(*jax.tree_util.tree_leaves(data)))
    state0, hp = estimator.init(params0), jax.tree_util.tree_map(jnp.asarray, hparams)
    if secure:
        final, (trace, events) = _secure_run(estimator, as_key(key), data, state0, hp,
                                             _fit_record(output, record), grid)
    else:
        final, (trace, events) = _fit_run(estimator, as_key(key), data, state0, hp, output,
                                          record)
    estimate = jax.tree_util.tree_map(np.asarray, output(final))
    if not all(np.isfinite(x).all() for x in jax.tree_util.tree_leaves(estimate)):
        raise FloatingPointError(
            "the estimate is not finite; check the data scale, the step sizes and the "
            "truncation or clipping levels"
        )
    if secure:
        ledger = _secure_ledger(estimator, n, hparams, events, grid)
    else:
        ledger = None if estimator.ledger is None else estimator.ledger(n, hparams, events)
    from dpjax.accounting import check_delivers

    check_delivers(ledger)  # the noise drawn must deliver what was asked (data-independent)
    to_np = functools.partial(jax.tree_util.tree_map, np.asarray)
    return FitResult(estimate, to_np(trace), ledger, hparams, to_np(final))


def _secure_run(estimator, key, data, state, hparams, record, grid):
    """:func:`run`'s loop, eagerly (concrete values for the exact integer calibration)."""
    from dpjax.mechanisms import secure_noise

    batches = split_batches(data, estimator.num_steps) if estimator.batching == "disjoint" \
        else None
    out = []
    with secure_noise(grid):
        for t in range(estimator.num_steps):
            batch = data if batches is None else jax.tree_util.tree_map(lambda x, t=t: x[t],
                                                                        batches)
            state, info = estimator.step(jax.random.fold_in(key, t), state, batch, hparams)
            out.append(record(state, info))
    return state, jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *out)


def _secure_ledger(estimator, n, hparams, events, grid):
    """The ledger of a secure run, composed from its discrete events."""
    from dpjax.accounting import Ledger, Release

    events = tuple(events) if isinstance(events, (tuple, list)) else (events,)
    float_kinds = sorted({e.kind for e in events} - {"discrete-laplace", "discrete-gaussian",
                                                      "none"})
    if float_kinds:
        raise ValueError(f"secure=True: {estimator.name} released through {float_kinds}, which "
                         "has no floating-point-safe path; use the default noise path")
    # Parallel composition across steps where no record enters two steps' releases: disjoint
    # batches, or local DP, where each user reports once, in its own round (every local
    # estimator of dpjax is built so; its float ledger composes in parallel too)
    local = all(e.relation == "local" for e in events)
    disjoint = estimator.batching == "disjoint" or local
    data = ("each user once, in its own round" if local else "disjoint batch" if disjoint
            else f"full data ({n} records)")
    releases = [Release.from_event(e, f"release {i + 1} of each step (integer noise on a "
                                      "public grid)", data) for i, e in enumerate(events)]
    if disjoint and len(releases) == 1:
        composition = "parallel"
    else:
        composition = "zcdp" if any(e.kind == "discrete-gaussian" for e in events) else "basic"
    delta = float(np.asarray(getattr(hparams, "delta", 1.0 / (2.0 * n))))
    grid_note = "per release, the largest power of two <= Delta/(64 sqrt(d))" if grid is None \
        else f"{grid:g}"
    notes = [f"floating-point-safe path: integer noise on a public grid ({grid_note}); the "
             "sensitivities are of the rounded statistics, in grid units"]
    return Ledger.build(estimator.name, releases, composition, relation="local" if local
                        else "replace-one",
                        delta=delta if composition != "basic" else None, notes=notes)
