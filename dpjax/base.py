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

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax._validate import TracedFitError

__all__ = [
    "ROW_BLOCK",
    "Estimator",
    "FitResult",
    "Padded",
    "Sizes",
    "TracedFitError",
    "fit",
    "InitFn",
    "StepFn",
    "as_key",
    "batch_size",
    "fold_affine",
    "fold_rows",
    "probe_events",
    "run",
    "run_padded",
    "split_batches",
]

PyTree = Any

#: rows per block of the padded steps that add up their records block by block
#: (:attr:`Padded.row_block`, :func:`fold_rows`): work within one block of a setting's own
#: ``n``, whatever rows its program is padded to
ROW_BLOCK = 4096


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


class Sizes(NamedTuple):
    """The sizes of a padded run, as arrays: one compiled program serves every size.

    The step's data have ``m_pad`` rows (a batch, or the whole data set); only the first
    ``count`` are records, the rest is padding that must contribute nothing (to sums, to
    clipping, to sensitivities). ``count`` is public: it is fixed by the public ``n`` and the
    number of iterations, never by the data.

    ``slots`` carries a runtime sparsity (padded forms with :attr:`Padded.sparsity`): an
    ``(s_max,)`` mask whose first ``s`` entries are True, so its length is the static bound
    ``s_max`` (shapes: the peeling's ``(s_max, d)`` draws) and :meth:`sparsity` the runtime
    ``s``; ``None`` for every other padded form.
    """

    mask: jax.Array  # (m_pad,) bool: the rows that are records
    count: jax.Array  # () float: the public number of records (n0 = floor(n / T), or n)
    num_steps: jax.Array  # () int32: the run's number of iterations T (<= the scan's length)
    slots: jax.Array | None = None  # (s_max,) bool: the first s True (a runtime sparsity s)

    def sparsity(self, where: str = "a padded form with a runtime sparsity") -> tuple[Any, int]:
        """``(s, s_max)``: the runtime sparsity (an int32 array) and its static bound, read off
        :attr:`slots` (refused, naming ``where``, when the sizes carry none)."""
        if self.slots is None:
            raise ValueError(f"{where} reads its sparsity s at runtime: give Sizes(..., "
                             "slots=jnp.arange(s_max) < s)")
        return jnp.sum(self.slots, dtype=jnp.int32), int(self.slots.shape[0])


class Padded(NamedTuple):
    """An estimator's padded form (opt-in, see :class:`Estimator`): the same algorithm with the
    sizes that differ between settings (``n``, the number of iterations) as runtime values.

    Attributes:
        family: a short name of the program family (for ids in results; the object itself,
            compared by value, is the cache key of the compiled program).
        init: as :class:`Estimator`'s.
        step: ``step(key, state, data, hparams, sizes) -> (state, info)`` on data padded to
            ``m_pad`` rows with :class:`Sizes`: equal, up to float round-off, to the
            estimator's step on the ``sizes.count`` real rows with ``sizes.num_steps``
            iterations, whatever the padded rows hold. It must not close over ``n`` or the
            number of iterations (settings that differ in them share it).
        batching: as :class:`Estimator`'s.
        sparsity: ``None``, or the estimator's sparsity ``s`` where its padded form takes it
            at runtime (the sparse estimators: peeling and top-``s`` with ``s_max=``): its
            step reads ``s`` from ``sizes.slots`` (:meth:`Sizes.sparsity`) and its init is
            ``init(params0, sizes)``; it must not close over ``s``, so estimators that differ
            in it share the form but for this field (:mod:`dpjax.sweep` compiles it once per
            bound ``s_max``, the largest ``s`` of a bucket, :func:`dpjax.sweep.plan_programs`).
        row_block: ``None``, or the rows per block of a step that adds up its per-record terms
            by :func:`fold_rows`: block by block up to the last block holding a record, so
            its work follows the count, not the padded rows. A study may then pad such a
            setting to a bucket of any size its memory allows (one program for every ``n`` of
            a family): its work is ``ceil(n / row_block) row_block`` rows, under twice its
            own once ``n >= row_block`` (:func:`dpjax.sweep.plan_programs`).
    """

    family: str
    init: InitFn
    step: Callable[..., tuple[PyTree, PyTree]]
    batching: Literal["disjoint", "full"]
    sparsity: int | None = None
    row_block: int | None = None


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
        padded: optional (opt-in) :class:`Padded` form: the step with ``n`` and the number of
            iterations (and a sparse estimator's ``s``) as runtime values and a row mask. A
            study then runs every setting whose estimators share it (and whose data have the
            same shapes but for the number of records) through one compiled program
            (:mod:`dpjax.sweep`); ``None``: one program per setting.
    """

    name: str
    init: InitFn
    step: StepFn
    num_steps: int
    batching: Literal["disjoint", "full"]
    ledger: Callable[[int, PyTree], Any] | None = None
    check: Callable[[int, PyTree, Any], None] | None = None
    padded: Padded | None = None


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


def run_padded(
    padded: Padded,
    key: jax.Array,
    data: PyTree,
    state: PyTree,
    hparams: PyTree,
    sizes: Sizes,
    max_steps: int,
    record: Callable[[PyTree, PyTree], PyTree] | None = None,
) -> tuple[PyTree, PyTree]:
    """:func:`run` of a :class:`Padded` estimator: a loop over the first ``sizes.num_steps`` of
    ``max_steps`` steps (step ``t`` with key ``fold_in(key, t)``, as in :func:`run`); the rest
    never run. A ``lax.fori_loop`` with a runtime bound (an XLA while loop), not a ``lax.scan``
    with a ``lax.cond`` per step: the conditional made XLA's CPU backend run iv_fig9's padded
    2S-GD 4x slower than its own kernel (measured: 33.5 s against 8.2 s for 20 repetitions of
    1000 steps at n = 5000; 8.9 s without the conditional). Not reverse-differentiable (a
    while loop): the shared programs only run studies; :func:`run` is the differentiable form.

    Args:
        data: disjoint batching: the batches, leaves ``(max_steps, m_pad, ...)`` (batch ``t``
            is that of :func:`split_batches`, padded); full batching: the data set, leaves
            ``(m_pad, ...)``.
        sizes: the mask of a batch's (or the data set's) rows, its count, and the number of
            steps.

    Returns:
        ``(final_state, trace)`` with ``max_steps`` entries in the trace (those from
        ``sizes.num_steps`` on are zeros: drop them).
    """
    record = record or _default_record
    disjoint = padded.batching == "disjoint"

    def active(t, state):
        batch = (jax.tree_util.tree_map(
            lambda leaf: jax.lax.dynamic_index_in_dim(leaf, t, keepdims=False), data)
                 if disjoint else data)
        new_state, info = padded.step(jax.random.fold_in(key, t), state, batch, hparams, sizes)
        return new_state, record(new_state, info)

    shapes = jax.eval_shape(active, jnp.zeros((), jnp.int32), state)[1]
    trace0 = jax.tree_util.tree_map(lambda s: jnp.zeros((max_steps,) + s.shape, s.dtype),
                                    shapes)

    def body(t, carry):
        state, trace = carry
        new_state, rec = active(t, state)
        trace = jax.tree_util.tree_map(
            lambda buf, r: jax.lax.dynamic_update_index_in_dim(buf, r, t, 0), trace, rec)
        return new_state, trace

    stop = jnp.minimum(jnp.asarray(sizes.num_steps, jnp.int32), max_steps)
    return jax.lax.fori_loop(jnp.int32(0), stop, body, (state, trace0))


def fold_rows(fn: Callable[[PyTree, jax.Array], PyTree], data: PyTree, mask: jax.Array,
              block: int | None) -> PyTree:
    """``sum_b fn(rows of block b, their mask)`` over the blocks of ``block`` rows that hold a
    record: the sum over records of a padded step (:class:`Padded` with ``row_block``) whose
    work follows its count, not its padded rows.

    The records are the first ``sum(mask)`` rows (:class:`Sizes`: a prefix, public); the loop
    runs the whole blocks up to the one holding the last record (a ``lax.fori_loop`` with
    that runtime bound), so a setting padded from ``n`` to ``m`` rows computes ``ceil(n /
    block) block`` rows, not ``m``; ``fn`` masks the padded rows of the last block as ever.
    Where ``block`` does not divide ``m`` the ``m % block`` rows past the whole blocks are one
    more call of ``fn``, always made (a shared program's rows are whole blocks from two
    blocks up, :func:`dpjax.sweep.padded_rows`, which :func:`dpjax.sweep.rows_worked` counts;
    a setting at its own sizes computes all its rows anyway). ``fn(rows, mask)`` returns the
    block's sum (any pytree of arrays); the blocks are added in order. With ``block`` ``None``
    or at least ``m``, this is ``fn(data, mask)``.

    Args:
        fn: the sum of one block's per-record terms, rows outside ``mask`` contributing
            nothing.
        data: leaves with a leading axis of ``m`` rows.
        mask: ``(m,)`` bool, the rows that are records (a prefix).
        block: rows per block (static).
    """
    if block is not None:
        _validate.check_int_in_range(block, "block", 1)
    m = mask.shape[0]
    if block is None or block >= m:
        return fn(data, mask)
    whole = m // block

    def rows(b):
        start = b * block
        sl = jax.tree_util.tree_map(
            lambda x: jax.lax.dynamic_slice_in_dim(x, start, block, 0), data)
        return sl, jax.lax.dynamic_slice_in_dim(mask, start, block, 0)

    shapes = jax.eval_shape(lambda: fn(*rows(jnp.int32(0))))
    acc0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    count = jnp.sum(mask, dtype=jnp.int32)
    stop = jnp.minimum((count + (block - 1)) // block, whole)

    def body(b, acc):
        return jax.tree_util.tree_map(jnp.add, acc, fn(*rows(b)))

    acc = jax.lax.fori_loop(jnp.int32(0), stop, body, acc0)
    if m % block:
        rest = jax.tree_util.tree_map(lambda x: x[whole * block:], data)
        acc = jax.tree_util.tree_map(jnp.add, acc, fn(rest, mask[whole * block:]))
    return acc


def fold_affine(fn: Callable[[PyTree, jax.Array], Any], data: PyTree, mask: jax.Array,
                block: int | None) -> Any:
    """:func:`fold_rows` for a statistic affine in its records: ``fn(rows, mask)`` -- a
    :class:`~dpjax.mechanisms.BoundedStatistic` or an array -- is the sum of the masked rows'
    terms divided by a public count plus a part that reads no record (e.g. ``- beta``), and
    is defined on zero rows (as a model's masked ``truncated_gradient`` or ``gradient`` with
    ``blockwise = True``). Added up over blocks of ``block`` rows up to the last record.

    The record-free part and the statistic's sensitivity (public values only) are ``fn`` on
    zero rows; every block adds its value less that part, so the result holds the records'
    terms once and the record-free part once. With ``block`` ``None`` or at least the rows,
    this is ``fn(data, mask)``.
    """
    from dpjax.mechanisms import BoundedStatistic

    if block is None or block >= mask.shape[0]:
        return fn(data, mask)
    empty = fn(jax.tree_util.tree_map(lambda x: x[:0], data), mask[:0])
    stat = isinstance(empty, BoundedStatistic)
    base = empty.value if stat else empty

    def part(rows, m):
        out = fn(rows, m)
        return (out.value if stat else out) - base

    value = base + fold_rows(part, data, mask, block)
    return dataclasses.replace(empty, value=value) if stat else value


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


class CountingJit:
    """``jax.jit(fn, **jit_kwargs)`` that counts the programs it builds: JAX traces ``fn``
    exactly when it needs a program it does not hold (a new shape signature or static
    argument, or one its caches let go), so :meth:`_cache_size` is the number of programs built
    for this function (for no-recompile checks). (jit's own ``_cache_size`` reads the dispatch
    fast path, one process-wide LRU that a long session fills: an entry is dropped there
    without any recompile, and the count falls, even to 0 right after a call.) Static
    arguments are named by position (``static_argnums``): the wrapper takes ``*args``."""

    def __init__(self, fn: Callable, **jit_kwargs: Any) -> None:
        self.traces = 0

        def traced(*args):
            self.traces += 1
            return fn(*args)

        self._jitted = jax.jit(traced, **jit_kwargs)

    def __call__(self, *args: Any) -> Any:
        return self._jitted(*args)

    def lower(self, *args: Any) -> Any:
        return self._jitted.lower(*args)

    def _cache_size(self) -> int:
        return self.traces


def _fit_run_impl(estimator, key, data, state, hparams, output, record):
    return run(estimator, key, data, state, hparams, record=_fit_record(output, record))


#: The compiled fit: one program per estimator, shapes, output and record.
_fit_run = CountingJit(_fit_run_impl, static_argnums=(0, 5, 6))


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
    accountant: Any = None,
    requested: Any = None,
) -> FitResult:
    """Fit ``estimator`` to one data set: the single entry point under every ``fit_*``.

    Runs :func:`run` (one compile per estimator and shape; new hyperparameter values do not
    recompile), composes the ledger from the privacy events the run drew
    (``estimator.ledger(n, hparams, events)``), and refuses a non-finite estimate.

    A fit runs on the host (it checks concrete values and builds the ledger there): under
    ``jax.jit`` or ``jax.vmap`` it raises :class:`~dpjax.base.TracedFitError`; trace
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
            discrete events (zCDP for Gaussian noise, converted to (epsilon, delta) by CKS at
            the requested delta) and says that it assumes exact discrete noise; the noise is
            calibrated so that this ledger delivers the request (see :func:`_secure_plan`),
            which :func:`~dpjax.accounting.check_delivers` checks. Peeling selects by exact
            permute-and-flip; an estimator with a release that has no such path raises.
        grid: with ``secure``: the public grid step, a power of two (default: per release,
            from its sensitivity; see :func:`~dpjax.mechanisms.secure_noise`).
        accountant: a :class:`dpjax.Accountant` whose total this fit spends from: the fit's
            ledger, predicted from public values before anything runs, is composed with what
            was spent, and a fit that would exceed the total raises
            :class:`~dpjax.accounting.PrivacyBudgetError` (nothing computed, nothing
            released); the fit's own ledger is then recorded.
        requested: the budget (:class:`~dpjax.accounting.ApproxDP` or
            :class:`~dpjax.accounting.ZCDP`) the ledger records as requested and is checked
            against, in place of the one the estimator's ledger reads off ``hparams`` (default);
            with ``secure``, the one the noise factor is solved for. For hyperparameters
            scaled by a calibration (:func:`dpjax.calibrated_fit` passes its target).
    """
    _validate.check_not_traced("dpjax.fit", key, data, params0, hparams)
    _validate.check_hparams(hparams)
    if n is None:
        n = int(jax.tree_util.tree_leaves(data)[0].shape[0])
    if estimator.check is not None:  # public values only: a refusal never depends on the data
        estimator.check(n, hparams, jnp.result_type(*jax.tree_util.tree_leaves(data)))
    state0, hp = estimator.init(params0), jax.tree_util.tree_map(jnp.asarray, hparams)
    if accountant is not None:
        accountant.check(_predicted_ledger(estimator, n, data, state0, hparams, secure))
    if secure:
        # host (NumPy) hyperparameters: the eager steps then calibrate on the host, in float64
        # (a jnp calibration would compile its bisection loop anew at every eager call)
        hp = jax.tree_util.tree_map(np.asarray, hparams)
        plan = _secure_plan(estimator, n, data, state0, hp, hparams, grid, requested)
        final, (trace, events) = _secure_run(estimator, as_key(key), data, state0, hp,
                                             _fit_record(output, record), grid,
                                             plan.noise_factor, plan.delta_factor)
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
        ledger = _secure_ledger(estimator, plan, events)
    else:
        ledger = None if estimator.ledger is None else estimator.ledger(n, hparams, events)
        if ledger is not None and requested is not None:
            ledger = dataclasses.replace(ledger, requested=requested)
    from dpjax.accounting import check_delivers

    check_delivers(ledger)  # the noise drawn must deliver what was asked (data-independent)
    if accountant is not None:  # refuses (nothing returned) a ledger beyond the total
        if ledger is None:
            raise ValueError(f"{estimator.name}: an accountant needs an estimator with a ledger")
        accountant.spend(ledger)
    to_np = functools.partial(jax.tree_util.tree_map, np.asarray)
    return FitResult(estimate, to_np(trace), ledger, hparams, to_np(final))


_EVENTS_CACHE: dict[Any, Callable] = {}


def _events_fn(estimator: Estimator) -> Callable:
    """A jitted run that records only the privacy events (one compile per estimator/shape;
    new hyperparameter values do not recompile): the ledger's inputs from public values, for
    :func:`dpjax.calibrate` and an accountant's prediction (:func:`_predicted_ledger`)."""
    fn = _EVENTS_CACHE.get(estimator)
    if fn is None:
        def events(data, state, hparams):
            _, ev = run(estimator, jax.random.key(0), data, state, hparams,
                        record=lambda s, info: info.events)
            return ev

        fn = _EVENTS_CACHE.setdefault(estimator, jax.jit(events))
    return fn


def _zeros_like(data: Any) -> Any:
    return jax.tree_util.tree_map(lambda x: jnp.zeros(jnp.shape(x), jnp.result_type(x)), data)


def _predicted_ledger(estimator, n, data, state0, hparams, secure):
    """The fit's ledger before it runs, from public values only: the events of a run on an
    all-zero data set of the same shapes (the noise scales and sensitivities depend on ``n``,
    the hyperparameters and the clipping levels, never on the records). With ``secure`` the
    fit delivers at most its request (checked after the run): the request stands for it."""
    if estimator.ledger is None:
        raise ValueError(f"{estimator.name}: an accountant needs an estimator with a ledger")
    from dpjax.accounting import ApproxDP

    events = _events_fn(estimator)(_zeros_like(data), state0,
                                   jax.tree_util.tree_map(jnp.asarray, hparams))
    led = estimator.ledger(n, hparams, jax.tree_util.tree_map(np.asarray, events))
    if secure and isinstance(led.requested, ApproxDP):
        # the secure ledger (exact discrete noise) delivers at most the request; as a
        # generic (epsilon, delta) mechanism it composes by its dominating PLD
        return dataclasses.replace(led, composition="requested", approx_dp=led.requested)
    return led


def _secure_steps(estimator, key, data, state, hparams, record):
    """:func:`run`'s loop, eagerly (concrete values for the exact integer calibration)."""
    batches = split_batches(data, estimator.num_steps) if estimator.batching == "disjoint" \
        else None
    out = []
    for t in range(estimator.num_steps):
        batch = data if batches is None else jax.tree_util.tree_map(lambda x, t=t: x[t], batches)
        state, info = estimator.step(jax.random.fold_in(key, t), state, batch, hparams)
        out.append(record(state, info))
    return state, jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *out)


def _secure_run(estimator, key, data, state, hparams, record, grid, noise_factor=1.0,
                delta_factor=1.0):
    """The secure run: :func:`_secure_steps` inside
    :func:`~dpjax.mechanisms.secure_noise` ``(grid, noise_factor=noise_factor)`` (exact
    peeling's delta shares scaled by ``delta_factor``, see :func:`_secure_plan`)."""
    from dpjax.mechanisms.secure import _secure_mode

    with _secure_mode(grid, noise_factor, delta_factor=delta_factor):
        return _secure_steps(estimator, key, data, state, hparams, record)


def _events_only(state, info):
    del state
    return info.events


class _SecurePlan(NamedTuple):
    """What a secure fit settles before it touches the data (see :func:`_secure_plan`)."""

    name: str
    batching: str
    num_steps: int
    n: int
    grid: float | None
    requested: Any  # the budget the secure noise is solved for (None: none)
    variant: str
    notes: tuple[str, ...]
    delta: float  # the target delta of the zCDP -> (epsilon, delta) conversion
    noise_factor: float  # kappa > 0
    delta_factor: float = 1.0  # exact peeling's delta shares are scaled by this (<= 1)


#: the bisection aims this far (relative) below the request, to absorb the float32 rounding of
#: the recorded scales; the delivered guarantee is then within ~1e-6 of the request
_KAPPA_MARGIN = 1e-6
#: the noise factor is searched in [2^-_KAPPA_RANGE, 2^_KAPPA_RANGE]
_KAPPA_RANGE = 20


def _spent(ledger, target) -> float:
    """What ``ledger`` delivers as a fraction of ``target``: the epsilon over the target's (inf
    where its delta exceeds the target's, exactly: no tolerance), or the rho over the target's
    for a zCDP target (a pure (epsilon, 0) guarantee read as epsilon^2/2-zCDP). Read off the
    ledger's own composed guarantee, whatever its composition rule."""
    from dpjax.accounting import ZCDP, pure_to_zcdp

    if isinstance(target, ZCDP):
        got = ledger.guarantee
        if not isinstance(got, ZCDP):
            got = pure_to_zcdp(got.epsilon) if got.delta == 0 else ZCDP(math.inf)
        return got.rho / target.rho
    got = ledger.approx_dp
    if got.delta > target.delta:
        return math.inf
    return got.epsilon / target.epsilon


def _spends_request(ledger) -> bool:
    """Whether a (default-path) ledger delivers its request, to within 1% below and the float
    rounding :func:`~dpjax.accounting.check_delivers` allows above: a variant that spends its
    request (e.g. DP-IV's tight calibration, labelled by its name) is calibrated on the secure
    path like the corrected one; a paper-literal one that does not (over- or under-noised)
    keeps the carried noise."""
    from dpjax.accounting import DELIVERY_RTOL, ZCDP

    req = ledger.requested
    if isinstance(req, ZCDP):
        got = ledger.guarantee.rho if isinstance(ledger.guarantee, ZCDP) else math.inf
        return 0.99 * req.rho <= got <= req.rho * (1 + DELIVERY_RTOL)
    got = ledger.approx_dp
    return (0.99 * req.epsilon <= got.epsilon <= req.epsilon * (1 + DELIVERY_RTOL)
            and got.delta <= req.delta * (1 + DELIVERY_RTOL))


def _plan_pass(estimator, data, state0, hp, grid, delta_factor=1.0):
    """The planned events of a secure run (nothing drawn; see :func:`_secure_plan`)."""
    from dpjax.mechanisms.secure import _secure_mode

    zeros = jax.tree_util.tree_map(jnp.zeros_like, data)
    with _secure_mode(grid, plan=True, delta_factor=delta_factor):
        return _secure_steps(estimator, jax.random.key(0), zeros, state0, hp, _events_only)[1]


def _secure_plan(estimator, n, data, state0, hp, hparams, grid, target=None) -> _SecurePlan:
    r"""Settle a secure fit's noise factor ``kappa`` before the real run.

    The discrete noise of a secure release is accounted by the secure ledger
    (:func:`_secure_ledger`: discrete Gaussians in zCDP, converted to (epsilon, delta) at the
    requested delta), which is not the accounting the default path calibrated its noise for
    (the exact Gaussian curve, Bun-Steinke's conversion, basic composition of per-user
    releases, ...). Carried over as it is (``rho = (Delta/sigma)^2/2``), the noise would
    deliver more than requested (e.g. 1.633 for a one-release request of (1.5, 1e-5)) or less
    (0.69-0.92 of it for DP gradient EM). So every discrete noise is multiplied by one factor
    ``kappa > 0`` (``sigma``, the discrete Laplace's ``t``; ``rho / kappa^2``), solved by
    bisection so that the secure ledger delivers the request: the smallest ``kappa`` whose
    ledger delivers at most ``(1 - 1e-6)`` of the target (the target's delta exactly), above
    or below 1. The search calls the secure ledger itself on the planned events with every
    noise scaled by ``kappa``, so it follows that ledger's composition rule whatever it is.

    ``target`` (default: the request the estimator's own ledger reads off ``hparams``) is the
    budget to deliver; :func:`dpjax.calibrate.calibrated_fit` passes its calibration's target.

    Why a planning pass. The ledger's guarantee depends only on each release's noise
    parameter and integer sensitivity (functions of public values: n, the clipping levels, the
    budget, the statistic's size and the grid). The pass runs the steps eagerly inside
    :func:`~dpjax.mechanisms._secure_plan` on an all-zero data set of the same shapes: every
    release computes its exact discrete calibration and draws nothing, and records the event
    the default path would record for it. So ``kappa`` is a function of public values only
    (it never sees the data), the estimator's own ledger on the default path's events gives
    the request, the variant label and the notes, and the structure of the run (which
    release in which step) comes from the estimator's real code, not from a model of it. The
    real run rounds each scaled parameter up, so its noise is at least the planned one, and
    :func:`~dpjax.accounting.check_delivers` checks its ledger anyway.

    Delta. The noise factor cannot change a delta. Exact peeling spends a per-step share of
    delta (``delta / T`` in float32), and ``T`` float32 shares can compose to one rounding step
    above the float32 request; then every share is scaled by the factor that brings the
    composed delta to at most the request, rounded down to float32 (a relative change of about
    1e-7, which the ledger records), and the pass is planned again.

    A variant that is not ``"corrected"`` and does not spend its request on the default path
    (a documented paper-literal one, over- or under-noised) keeps ``kappa = 1``: its ledger
    states what it delivers; one that spends it (e.g. DP-IV's tight calibration) is solved like
    the corrected one, and so is any variant given an explicit ``target``. A request the secure
    accounting cannot meet at any ``kappa`` in ``[2^-20, 2^20]`` raises
    :class:`~dpjax.accounting.PrivacyBudgetError` before anything is released, naming the
    cause (a delta the composition exceeds, or releases the factor does not scale).
    """
    from dpjax.accounting import ApproxDP, PrivacyBudgetError
    from dpjax.mechanisms import NOISE_FACTOR_KINDS, PlannedEvent

    planned = _plan_pass(estimator, data, state0, hp, grid)
    is_planned = lambda e: isinstance(e, PlannedEvent)  # noqa: E731
    float_events = jax.tree_util.tree_map(
        lambda e: e.float_event if is_planned(e) else e, planned, is_leaf=is_planned)
    float_ledger = None if estimator.ledger is None else estimator.ledger(n, hparams,
                                                                          float_events)
    requested = None if float_ledger is None else float_ledger.requested
    if target is not None:
        requested = target
    variant = "corrected" if float_ledger is None else float_ledger.variant
    notes = () if float_ledger is None else float_ledger.notes
    if isinstance(requested, ApproxDP) and requested.delta > 0:
        delta = requested.delta
    else:
        delta = float(np.asarray(getattr(hparams, "delta", 1.0 / (2.0 * n))))
    plan = _SecurePlan(estimator.name, estimator.batching, estimator.num_steps, n, grid,
                       requested, variant, tuple(notes), delta, 1.0)
    if requested is None or not requested.is_private:
        return plan
    if target is None and variant != "corrected" and not _spends_request(float_ledger):
        return plan  # a paper-literal variant: its ledger states what it delivers
    plain = lambda p: jax.tree_util.tree_map(_plain_event, p, is_leaf=is_planned)  # noqa: E731
    events = plain(planned)

    def ledger_at(kappa: float, plan=plan, events=events):
        return _secure_ledger(estimator, plan._replace(noise_factor=kappa),
                              _scaled(events, kappa))

    def refuse(cause: str):
        raise PrivacyBudgetError(
            f"{estimator.name}: secure=True cannot deliver the requested {requested} with exact "
            f"discrete noise: {cause}; nothing is released")

    kinds = {e.kind for e in _as_tuple(events)}

    def delta_cause(got: float) -> str:
        cause = (f"its releases compose to delta = {got:.6g}, above the requested delta, and "
                 "no noise factor changes a delta")
        if requested.delta == 0 and "discrete-gaussian" in kinds:
            cause += (" (a discrete Gaussian release proves no delta = 0 guarantee: request a "
                      "positive delta)")
        return cause

    if isinstance(requested, ApproxDP):
        got = ledger_at(1.0).approx_dp.delta
        if got > requested.delta:  # per-step delta shares composed above the request
            factor = requested.delta / got * (1.0 - 1e-9)
            if factor < 1.0 - 1e-4:  # more than rounding: the estimator's split is wrong
                refuse(delta_cause(got))
            plan = plan._replace(delta_factor=factor)
            events = plain(_plan_pass(estimator, data, state0, hp, grid, factor))
            got = ledger_at(1.0, plan, events).approx_dp.delta
            if got > requested.delta:
                refuse(delta_cause(got) + " (even with every per-step share rounded down)")

    spent_at = functools.lru_cache(maxsize=None)(  # one ledger per factor tried
        lambda kappa: _spent(ledger_at(kappa, plan, events), requested))

    def short(kappa: float, margin: float = _KAPPA_MARGIN) -> bool:
        return not spent_at(kappa) <= 1.0 - margin

    if not kinds & set(NOISE_FACTOR_KINDS):
        # no release the factor scales (pure l2-ball randomizer reports): the planned noise
        # is the noise drawn, no margin needed
        if short(1.0, 0.0):
            led = ledger_at(1.0, plan, events)
            refuse(f"its releases ({', '.join(sorted(kinds))}) deliver {led.approx_dp} and "
                   "none has a noise the factor scales")
        return plan
    top = 2.0**_KAPPA_RANGE
    if short(1.0):
        lo, hi = 1.0, 2.0
        while short(hi):
            lo, hi = hi, 2.0 * hi
            if hi > top:
                led = ledger_at(top, plan, events)
                if led.approx_dp.delta > getattr(requested, "delta", math.inf):
                    cause = delta_cause(led.approx_dp.delta)
                else:
                    others = sorted(kinds - set(NOISE_FACTOR_KINDS) - {"none"})
                    cause = (f"even at noise factor 2^{_KAPPA_RANGE} its ledger delivers "
                             f"{led.approx_dp}; the releases the factor does not scale "
                             f"({', '.join(others) or 'none'}) spend more than the request")
                refuse(cause)
    else:
        lo, hi = 0.5, 1.0
        while not short(lo):
            lo, hi = 0.5 * lo, lo
            if lo < 1.0 / top:  # the request is met at every factor tried: keep the smallest
                return plan._replace(noise_factor=hi)
    return plan._replace(noise_factor=_solve_kappa(spent_at, lo, hi))


def _solve_kappa(spent_at, lo: float, hi: float) -> float:
    """The smallest noise factor (to a relative 1e-9) whose ledger spends at most ``1 -
    _KAPPA_MARGIN`` of the request, in a bracket ``[lo, hi]`` (``lo`` spends more, ``hi`` not):
    regula falsi on ``log spent`` against ``log kappa`` (nearly linear: a few ledgers, where
    each may be a composition of privacy loss distributions) with the Illinois step, a
    bisection every third step so that the bracket at least halves, and an early stop once
    ``hi`` spends within 1e-6 (relative) of the aim: a PLD ledger's epsilon moves in steps of
    about that size (its privacy loss is discretised), so a closer aim only costs ledgers.
    Returns ``hi``: never above the aim."""
    aim = math.log1p(-_KAPPA_MARGIN)

    def f(k: float) -> float:  # > 0 (or nan): spends more than the aim
        got = spent_at(k)
        return math.log(got) - aim if 0 < got < math.inf else (math.inf if got else -math.inf)

    flo, fhi = f(lo), f(hi)
    # the secant's values (Illinois: the end kept twice is halved), aimed at the middle of the
    # accepted window [-1e-6, 0], so that a step landing on the root stops there
    wlo, whi = flo + 5e-7, fhi + 5e-7
    side, step = 0, 0
    while hi - lo > 1e-9 * hi and not -1e-6 <= fhi <= 0:
        step += 1
        x = 0.5 * (lo + hi)
        if step % 3 and math.isfinite(wlo) and math.isfinite(whi) and wlo > whi:
            t = wlo / (wlo - whi)  # the secant's root in log kappa
            cand = math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))
            if lo < cand < hi:
                x = cand
        fx = f(x)
        if not fx <= 0:  # short: the aim lies above x
            lo, flo, wlo = x, fx, fx + 5e-7
            whi = 0.5 * whi if side == -1 else whi
            side = -1
        else:
            hi, fhi, whi = x, fx, fx + 5e-7
            wlo = 0.5 * wlo if side == 1 else wlo
            side = 1
    return hi


def _plain_event(e):
    """A :class:`~dpjax.mechanisms.PlannedEvent` as the plain event of its secure release."""
    from dpjax.mechanisms import PlannedEvent, PrivacyEvent

    if not isinstance(e, PlannedEvent):
        return e
    return PrivacyEvent(**{f.name: getattr(e, f.name) for f in dataclasses.fields(PrivacyEvent)})


def _scaled(events, kappa: float):
    """The events with every discrete noise scale times ``kappa`` (float64)."""
    from dpjax.mechanisms import NOISE_FACTOR_KINDS

    if kappa == 1.0:
        return events
    return tuple(dataclasses.replace(e, scale=np.asarray(e.scale, np.float64) * kappa)
                 if e.kind in NOISE_FACTOR_KINDS else e for e in _as_tuple(events))


def _as_tuple(events):
    return tuple(events) if isinstance(events, (tuple, list)) else (events,)


def _secure_guarantee(plan: _SecurePlan, events):
    """The releases of a secure run and their composition: ``(guarantee, approx_dp,
    releases, composition)``.

    Within a step the releases compose by privacy loss distributions (each release's exact
    PLD: discrete Laplace, a discrete Gaussian on a scalar statistic, exact peeling's rounds and
    values, the l2-ball randomizer's coin; the pessimistic epsilon at the plan's delta,
    :mod:`dpjax._pld`) where dp_accounting is installed; in zCDP (pure releases as
    ``eps^2/2``) when a discrete Gaussian cannot be composed so -- one on a vector statistic
    (no exact PLD here: :data:`~dpjax.accounting.DISCRETE_GAUSSIAN_VECTOR_NOTE`), a zCDP
    request, a pure (delta = 0) request, or no dp_accounting; else by basic composition. Across
    steps in parallel (the largest) where no record enters two
    steps' releases -- disjoint batches, or local DP, where each user reports once, in its own
    round (every local estimator of dpjax is built so; its default ledger composes in parallel
    too) -- else as within a step. zCDP is converted to (epsilon, delta) at the plan's delta by
    CKS.
    """
    from dpjax import _pld
    from dpjax.accounting import (
        ZCDP,
        ApproxDP,
        Release,
        _approx_to_zcdp,
        zcdp_to_approx_dp,
    )

    events = _as_tuple(events)
    local = all(e.relation == "local" for e in events)
    disjoint = plan.batching == "disjoint" or local
    data = ("each user once, in its own round" if local else "disjoint batch" if disjoint
            else f"full data ({plan.n} records)")
    releases = [Release.from_event(e, f"release {i + 1} of each step (integer noise on a "
                                      "public grid)", data) for i, e in enumerate(events)]
    steps = plan.num_steps
    gaussians = [r for r in releases if r.mechanism == "discrete-gaussian"]
    pld_ok = _pld.available() and 0 <= _pld_delta(plan) < 1
    zcdp = bool(gaussians) and not (
        pld_ok and _pld_delta(plan) > 0 and not isinstance(plan.requested, ZCDP)
        and all(r.scalar_discrete_gaussian for r in gaussians))
    per_step = np.zeros(steps)
    per_step_delta = np.zeros(steps)
    for r in releases:
        budgets = r.budgets()
        if zcdp:
            vals = [b.rho if isinstance(b, ZCDP) else _approx_to_zcdp(b).rho for b in budgets]
        else:  # (a scalar discrete Gaussian's rho: finite where noise was drawn, as its PLD)
            vals = [b.rho if isinstance(b, ZCDP) else b.epsilon for b in budgets]
            per_step_delta += np.asarray([getattr(b, "delta", 0.0) for b in budgets]
                                         ).reshape(steps, -1).sum(1)
        with np.errstate(invalid="ignore"):
            per_step += np.asarray(vals, np.float64).reshape(steps, -1).sum(1)
    combine = np.max if disjoint else np.sum
    total = float(combine(per_step))
    per_release = sum(r.count for r in releases) // steps
    if zcdp:
        guarantee = ZCDP(total)
        approx = zcdp_to_approx_dp(total, plan.delta)
        within = "zcdp"
    elif pld_ok and (gaussians or math.isfinite(total)):
        def entries(t: int | None):  # the components of step t's releases (None: all steps)
            out = []
            for r in releases:
                k = r.count // steps
                rows = r.noise if t is None else r.noise[t * k:(t + 1) * k]
                out += dataclasses.replace(r, noise=tuple(rows), count=len(rows)
                                           ).pld_components()
            return _pld.normalise(out)

        target = _pld_delta(plan)
        eps = (max(_pld.epsilon_for_delta(entries(t), target) for t in range(steps))
               if disjoint else _pld.epsilon_for_delta(entries(None), target))
        guarantee = approx = ApproxDP(eps, target)
        within = "pld"
    else:
        guarantee = approx = ApproxDP(total, min(1.0, float(combine(per_step_delta))))
        within = "basic"
    if local and per_release > 1:  # each user reports once: its releases compose, users not
        composition = (f"{within} per user ({per_release} releases); parallel across disjoint "
                       "users")
    elif not disjoint or steps == 1:
        composition = within
    elif per_release == 1:
        composition = "parallel"
    else:
        composition = f"{within} within a step; parallel across steps"
    return guarantee, approx, releases, composition, local


def _pld_delta(plan: _SecurePlan) -> float:
    """The delta a secure ledger's PLD composition reads its epsilon at: the request's (0 for a
    pure request: the exact sum), else the plan's."""
    from dpjax.accounting import ApproxDP

    return plan.requested.delta if isinstance(plan.requested, ApproxDP) else plan.delta


def _secure_ledger(estimator, plan: _SecurePlan, events):
    """The ledger of a secure run, composed from its discrete events (:func:`_secure_guarantee`)
    with the request, variant label and notes of the estimator's own ledger (:func:`_secure_plan`)
    and notes saying what it assumes."""
    from dpjax import _pld
    from dpjax.accounting import (
        DISCRETE_GAUSSIAN_SCALAR_NOTE,
        DISCRETE_GAUSSIAN_VECTOR_NOTE,
        GAUSSIAN_CURVE_NOTE,
        ZCDP,
        Ledger,
    )
    from dpjax.mechanisms import SECURE_KINDS

    events = _as_tuple(events)
    float_kinds = sorted({e.kind for e in events} - set(SECURE_KINDS))
    if float_kinds:
        raise ValueError(f"secure=True: {estimator.name} released through {float_kinds}, which "
                         "has no floating-point-safe path; use the default noise path")
    guarantee, approx, releases, composition, local = _secure_guarantee(plan, events)
    grid_note = ("per release, the largest power of two <= Delta/(64 sqrt(d))" if plan.grid is
                 None else f"{plan.grid:g}")
    kinds = {e.kind for e in events}
    in_zcdp = isinstance(guarantee, ZCDP)  # discrete Gaussians composed in zCDP
    # the estimator's notes, less those about the default path's accounting: its Gaussian
    # curve, its conversion, and a composition rule the secure ledger does not use
    other_rules = (("basic composition", "by pld", "privacy loss distributions")
                   if in_zcdp else ("zcdp composition",))
    kept = tuple(n for n in plan.notes if n != GAUSSIAN_CURVE_NOTE
                 and not n.startswith("(epsilon, delta) from rho-zCDP by the")
                 and not any(rule in n.lower() for rule in other_rules))
    notes = [
        "exact discrete noise (secure=True): on the floating-point-safe path every noisy "
        "release is its statistic rounded to a "
        f"public grid ({grid_note}) plus exactly sampled integer noise (discrete Gaussian or "
        "discrete Laplace, Canonne, Kamath & Steinke 2020), so the guarantee is that of the "
        "implementation as run, assuming a secret random key (up to the samplers' 32-bit "
        "range: delta < exp(-10^5)); sensitivities are of the rounded statistics, in grid "
        "units",
    ]
    if in_zcdp:
        notes.append(f"discrete Gaussian releases accounted in zCDP; (epsilon, delta) from "
                     f"rho-zCDP by the 'cks' conversion at delta = {plan.delta:g}")
        gaussians = [r for r in releases if r.mechanism == "discrete-gaussian"]
        if not all(r.scalar_discrete_gaussian for r in gaussians):
            notes.append(DISCRETE_GAUSSIAN_VECTOR_NOTE + "; the noise factor kappa is solved "
                         "under this zCDP ledger, so it spends the request as zCDP accounts "
                         "for it")
        elif isinstance(plan.requested, ZCDP):
            notes.append("a zCDP request: its discrete Gaussians compose in zCDP (exact in rho)")
        elif not _pld.available():
            notes.append("dp_accounting (the [pld] extra) is not installed: the scalar "
                         "discrete Gaussians' exact PLD is unavailable, composed in zCDP")
    elif _pld.available() and 0 <= _pld_delta(plan) < 1 and approx.is_private:
        notes.append(f"releases composed by privacy loss distributions (each release's exact "
                     f"PLD: discrete Laplace, the discrete Gaussian on a scalar statistic, "
                     f"exact peeling's rounds by their epsilon-DP bound, the randomizer's "
                     f"coin), the pessimistic epsilon at delta = {_pld_delta(plan):g} "
                     f"(dp_accounting.pld)")
        if "discrete-gaussian" in kinds:
            notes.append(DISCRETE_GAUSSIAN_SCALAR_NOTE)
    if kinds & {"discrete-gaussian", "discrete-laplace", "discrete-noisy-ht"}:
        notes.append(
            f"noise factor kappa = {plan.noise_factor:.6g}: every discrete noise is kappa times "
            "the one carried over from the default path's calibration (rho / kappa^2, "
            "epsilon / kappa), solved (above or below 1) so that this accounting delivers the "
            "request: at most it, within about 2e-6 of it where the ledger moves smoothly with "
            "kappa (1 for a paper-literal variant that does not "
            "spend its request)")
    if local:
        rule = "zCDP" if in_zcdp else ("privacy loss distributions"
                                       if "pld" in composition else "basic composition")
        notes.append(f"local DP: each user's own guarantee (its releases composed by {rule}); "
                     "users are disjoint, so nothing composes across users")
    if plan.delta_factor != 1.0:
        notes.append(f"each exact peeling release spends its share of delta times "
                     f"{plan.delta_factor:.9g}, rounded down to float32, so that the float32 "
                     "shares compose to at most the requested delta")
    if "ldp-randomizer" in kinds:
        notes.append("l2-ball randomizer reports are exact as implemented: the side is a 64-bit "
                     "integer coin, and given the pair {u, -u} of directions drawn (whose law "
                     "does not depend on the input) the odds of either are at most e^epsilon")
    notes.extend(kept)
    return Ledger(estimator.name, plan.variant, "local" if local else "replace-one",
                  composition, tuple(releases), guarantee, approx, plan.requested,
                  tuple(notes))
