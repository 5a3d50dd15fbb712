r"""The Monte Carlo engine: repetitions x privacy levels x iterations as one compiled kernel.

A *setting* fixes everything that determines shapes (the estimator with its static
configuration, ``n``, ``d``, the data plan); its *levels* are the swept hyperparameters (epsilon,
delta, step size, truncation, ...), passed as arrays. One kernel is compiled per setting shape
and reused for every chunk and every set of level values. Where the estimator has a padded
form (:class:`dpjax.base.Padded`), settings of one shape family that differ in ``n`` or the
number of iterations share one compiled algorithm program instead (:func:`plan_programs`,
:func:`make_shared_kernels`): each setting draws its data in a small program of its own, at its
own sizes, and the shared program runs them padded, with a row mask.

Keys and common random numbers:

* the data of repetition ``r`` come from ``data_key_r = fold_in(data_key, r)``; block ``b`` of
  the data set is ``simulate(fold_in(data_key_r, b), block_size, truth)``;
* the data-independent starting value of repetition ``r`` comes from
  ``fold_in(data_key_r, INIT_TAG)``;
* the noise of (repetition ``r``, level ``l``) comes from ``fold_in(fold_in(noise_key, r), id_l)``
  where ``id_l`` is a stable hash of the level's hyperparameter values, and step ``t`` uses
  ``fold_in(that, t)`` -- exactly the key :func:`dpjax.base.run` would use.

So every level of a repetition sees the same data set (generated once), and a result never
depends on the chunk size, the number of devices, or which other levels were run.

Shapes of the computation: ``vmap`` over repetitions (sharded over devices with ``shard_map``),
``lax.scan`` over iterations, and inside each step ``vmap`` over levels, so a batch generated
inside the scan (``data_mode="stream"``) is shared by all levels. ``"stream"`` needs estimators
with one disjoint batch per iteration and keeps only ``O(block_size * d)`` data per repetition in
flight; ``"materialize"`` generates the whole data set first.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import re
import struct
import sys
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dpjax import _cpu_prng, _validate
from dpjax._validate import ConfigError
from dpjax.base import CountingJit, Estimator, Sizes, run, run_padded
from dpjax.mechanisms.statistics import PrivacyEvent

# Studies draw most of their time's random numbers: JAX's unrolled threefry on CPU (same bits).
_cpu_prng.install()

__all__ = [
    "INIT_TAG",
    "DataPlan",
    "Setting",
    "PerRepetition",
    "RunPlan",
    "auto_chunk",
    "check_memory",
    "chunk_bounds",
    "default_memory_budget_gb",
    "plan_run",
    "program_fingerprint",
    "rep_bytes",
    "resolve_data_mode",
    "finished_prefix",
    "level_label",
    "plan_bounds",
    "plan_programs",
    "padded_rows",
    "Program",
    "rows_worked",
    "resolve_truth",
    "event_structure",
    "split_events",
    "check_setting",
    "compile_count",
    "data_compile_count",
    "derived_defaults",
    "level_id",
    "level_values",
    "probe_ledger",
    "make_kernel",
    "make_shared_kernels",
    "own_program",
    "shape_family",
    "SHARED_FREE_PAD_BYTES",
    "SHARED_DATA_FREE_BYTES",
    "SHARED_DATA_FREE_BYTES_ACCELERATOR",
    "SHARED_DATA_FREE_BYTES_REJECTION",
    "draws_by_rejection",
    "is_prefix_stable",
    "shares_data_program",
    "SHARED_MAX_REP_BYTES",
    "run_setting",
    "study_function",
    "study_keys",
]

INIT_TAG = 0xFFFFFFFF  # fold_in tag of the starting-value key (blocks use 0, 1, 2, ...)
TRUTH_TAG = 0xFFFFFFFE  # fold_in tag of a truth drawn per repetition (PerRepetition)
EVENT_PREFIX = "__event"  # metric names of the privacy events' arrays (see split_events)
#: the kernel's data check: 1 where a repetition's simulated data hold a NaN or infinite
#: entry, else 0 (axes ``(reps, L)``, the same for every level); the study's ``on_invalid``
#: policy reads it (:func:`run_setting`)
NONFINITE_DATA = "__nonfinite_data"

PyTree = Any


@dataclasses.dataclass(frozen=True)
class DataPlan:
    """How a repetition's data set is generated: ``num_blocks`` blocks of ``block_size`` records.

    For estimators with sample splitting, ``num_blocks`` equals the number of iterations and a
    block is one iteration's batch (``block_size = floor(n / N0)``); for full-data estimators use
    one block of ``n`` records.
    """

    num_blocks: int
    block_size: int

    @property
    def num_records(self) -> int:
        return self.num_blocks * self.block_size


@dataclasses.dataclass(frozen=True)
class PerRepetition:
    """A truth drawn afresh for every repetition: ``draw(key) -> truth`` (a pytree), with the key
    ``fold_in(data_key_r, TRUTH_TAG)`` of repetition ``r``.

    Covers a parameter drawn per repetition (e.g. ``beta`` uniform on the sphere, the usual
    design of spec 003) and fixed real data with a public per-repetition split: ``draw`` returns
    the repetition's train and test sets, ``simulate`` hands out the train set and ``record``
    scores on the test set. Every level of a repetition sees the same draw.
    """

    draw: Callable[[jax.Array], PyTree]


def resolve_truth(truth: Any, key: jax.Array) -> PyTree:
    """A fixed truth as an array, or a :class:`PerRepetition` truth drawn with ``key``."""
    if isinstance(truth, PerRepetition):
        return truth.draw(key)
    return jnp.asarray(truth)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One compiled shape of a study.

    Attributes:
        key: a unique label (used in file names and to derive the setting's keys).
        columns: what identifies the setting in results (``method``, ``n``, ``d``, ``s``, ...).
        estimator: the estimator (static).
        simulate: ``simulate(key, m, truth) -> data`` with ``m`` records (static).
        init: ``init(key, truth) -> params0``, data-independent (static).
        record: ``record(state, truth) -> {metric: scalar}`` kept per iteration (static).
        truth: the true parameter (an array), or a :class:`PerRepetition` draw (a new truth,
            or a new public split of fixed data, for every repetition).
        plan: the data plan.
        hparams_type: the estimator's hyperparameter NamedTuple.
        levels: one dict of hyperparameter values per level (keys: ``hparams_type._fields``).
        n: the nominal number of records (for ledgers).
        data_group: settings with the same group share their data keys (so every method of
            a real-data study sees the same per-repetition split); default: the setting's own.
        final_only: record only the starting value and the final iterate (a study over many
            horizons ``T``): the run is one block of the study whose key is
            ``fold_in(level_key, 0)``, its step ``t`` using ``fold_in(that, t)``.
    """

    key: str
    columns: dict[str, Any]
    estimator: Estimator
    simulate: Callable[..., PyTree]
    init: Callable[..., PyTree]
    record: Callable[..., PyTree]
    truth: Any
    plan: DataPlan
    hparams_type: type
    levels: tuple[dict[str, float], ...]
    n: int
    data_group: str | None = None
    final_only: bool = False

    @property
    def draw_truth(self) -> PerRepetition | None:
        return self.truth if isinstance(self.truth, PerRepetition) else None

    @property
    def fixed_truth(self) -> np.ndarray:
        """The kernel's truth input (a placeholder when the truth is drawn per repetition)."""
        return np.zeros(()) if self.draw_truth is not None else np.asarray(self.truth)

    def example_truth(self) -> PyTree:
        """A concrete truth for shape probes: the fixed one, or repetition 0's draw."""
        return resolve_truth(self.truth, jax.random.key(0))

    def hparams(self, levels: Sequence[dict[str, float]] | None = None) -> PyTree:
        """The levels as one hyperparameter pytree with a leading level axis."""
        levels = self.levels if levels is None else levels
        fields = self.hparams_type._fields
        defaults = derived_defaults(self.hparams_type)
        missing = [f for f in fields if f not in levels[0] and f not in defaults]
        if missing:
            raise ValueError(f"levels of setting {self.key!r} lack hyperparameters {missing}")
        return self.hparams_type(
            *(jnp.asarray([float(v) for v in col], jnp.float32)
              for col in zip(*(level_values(self.hparams_type, lv) for lv in levels)))
        )

    def level_ids(self, levels: Sequence[dict[str, float]] | None = None) -> np.ndarray:
        """Stable ids of the levels: a hash of the hyperparameters that change the draws
        (fields the hparams type lists in ``ACCOUNTING_ONLY`` are read by the ledger only; those
        in ``DERIVED`` are functions of the others, which the hash holds)."""
        levels = self.levels if levels is None else levels
        skip = (*getattr(self.hparams_type, "ACCOUNTING_ONLY", ()),
                *getattr(self.hparams_type, "DERIVED", ()))
        fields = [f for f in self.hparams_type._fields if f not in skip]
        return np.array([level_id([lv[f] for f in fields]) for lv in levels], np.uint32)


def derived_defaults(hparams_type: type) -> dict[str, Any]:
    """The fields of ``hparams_type`` a level may leave out: those it lists in ``DERIVED``
    (computed on the host from the others, e.g. a calibration solved there) that have a
    default (NaN: not solved; the estimator that reads one says what it does then)."""
    derived = getattr(hparams_type, "DERIVED", ())
    return {f: v for f, v in getattr(hparams_type, "_field_defaults", {}).items()
            if f in derived}


def level_values(hparams_type: type, level: Mapping[str, Any]) -> tuple[Any, ...]:
    """A level's value of every field of ``hparams_type``, in order (a DERIVED field it
    leaves out: its default, :func:`derived_defaults`)."""
    defaults = derived_defaults(hparams_type)
    return tuple(level[f] if f in level or f not in defaults else defaults[f]
                 for f in hparams_type._fields)


def level_id(values: Sequence[float]) -> int:
    """A stable 32-bit id of a level's hyperparameter values (crc32 of their float64 bytes)."""
    return zlib.crc32(b"".join(struct.pack("<d", float(v)) for v in values))


def setting_id(key: str) -> int:
    return zlib.crc32(key.encode())


def study_keys(seed: int, setting_key: str, data_group: str | None = None
               ) -> tuple[jax.Array, jax.Array]:
    """``(data_key, noise_key)`` of a setting: independent across settings and of each other;
    the data key is shared by the settings of one ``data_group``."""
    root = jax.random.fold_in(jax.random.key(seed), setting_id(setting_key))
    data_root = root if data_group is None else jax.random.fold_in(
        jax.random.key(seed), setting_id("data:" + data_group))
    return jax.random.fold_in(data_root, 0), jax.random.fold_in(root, 1)


# --------------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------------


def _repetition(
    estimator: Estimator,
    simulate: Callable,
    init: Callable,
    record: Callable,
    plan: DataPlan,
    data_mode: str,
    draw_truth: PerRepetition | None,
    final_only: bool,
    r: jax.Array,
    data_key: jax.Array,
    noise_key: jax.Array,
    truth: jax.Array,
    hparams: PyTree,
    ids: jax.Array,
) -> PyTree:
    """All levels of repetition ``r``: returns the record with axes ``(level, iteration+1)``."""
    data_key = _as_typed_key(data_key)
    noise_key = _as_typed_key(noise_key)
    data_key_r = jax.random.fold_in(data_key, r)
    noise_key_r = jax.random.fold_in(noise_key, r)
    if draw_truth is not None:
        truth = draw_truth.draw(jax.random.fold_in(data_key_r, TRUTH_TAG))
    level_keys = jax.vmap(jax.random.fold_in, (None, 0))(noise_key_r, ids)
    params0 = init(jax.random.fold_in(data_key_r, INIT_TAG), truth)
    num_levels = ids.shape[0]
    state0 = jax.tree_util.tree_map(
        lambda x: jnp.broadcast_to(x, (num_levels,) + jnp.shape(x)), estimator.init(params0)
    )

    def block(b):
        return simulate(jax.random.fold_in(data_key_r, b), plan.block_size, truth)

    streamed = data_mode == "stream"
    if streamed:
        data = block  # batch t generated inside the scan, shared by every level
        # the data check counts each batch where it is drawn (no second draw)
        stepper = estimator._replace(step=_counting_step(estimator.step))
    else:
        def counted_block(b):  # each block counted where it is drawn
            x = block(b)
            return x, _has_nonfinite(x)

        blocks, counts = jax.vmap(counted_block)(jnp.arange(plan.num_blocks))
        data = jax.tree_util.tree_map(  # leaves (num_blocks * bs, ...)
            lambda x: x.reshape((plan.num_records,) + x.shape[2:]), blocks)
        stepper = estimator

    def split(info):  # (events, a streamed step's data check)
        return (info[0].events, info[1]) if streamed else (info.events, ())

    def record_step(state, info):
        return record(state, truth), *split(info)

    def one_level(level_key, hp, s0):
        if final_only:  # one block of the study: its key fold_in(level_key, 0), then per step
            final, (events, bad) = run(stepper, jax.random.fold_in(level_key, 0), data, s0,
                                       hp, lambda state, info: split(info))
            return jax.tree_util.tree_map(lambda x: x[None], record(final, truth)), events, bad
        return run(stepper, level_key, data, s0, hp, record_step)[1]

    # The one driver, vmapped over levels: the data (or each streamed batch) do not depend on
    # the level, so they are computed once for all levels.
    trace, events, bad = jax.vmap(one_level)(level_keys, hparams, state0)  # (L, T or 1, ...)
    nonfinite = (bad[0] if streamed else counts).max()
    record_levels = jax.vmap(record, in_axes=(0, None))
    rec0 = record_levels(state0, truth)  # (L, ...)
    if not isinstance(rec0, dict):
        raise TypeError("a setting's record must return a dict of named metrics")
    out = jax.tree_util.tree_map(
        lambda r0, tr: jnp.concatenate([r0[:, None], tr], axis=1), rec0, trace
    )
    # The privacy events of every step travel with the metrics (axes (L, T)): the ledgers in
    # the results are composed from the noise the run actually drew.
    for i, leaf in enumerate(jax.tree_util.tree_leaves(events)):
        out[f"{EVENT_PREFIX}{i}"] = leaf
    # what a fit's on_invalid="raise" would refuse: the study applies the same policy
    out[NONFINITE_DATA] = jnp.broadcast_to(nonfinite, (num_levels,))
    return out


def _counting_step(step: Callable) -> Callable:
    """``step`` that also checks its batch (:func:`_has_nonfinite`): ``info`` becomes
    ``(info, flag)``."""
    def counted(key, state, batch, hparams):
        new_state, info = step(key, state, batch, hparams)
        return new_state, (info, _has_nonfinite(batch))

    return counted


def _has_nonfinite(data: PyTree) -> jax.Array:
    """1 if a data set's (or block's) float leaves hold a NaN or infinite entry, else 0.

    Read off ``sum(x * 0)``, NaN exactly when some entry is (``inf * 0`` and ``NaN * 0`` are
    NaN, every finite ``x * 0`` is 0, so nothing can overflow): one float reduction, which XLA
    fuses where the data are drawn (a count of ``~isfinite(x)`` made a materialised study
    1.7x slower on CPU)."""
    flags = [jnp.isnan(jnp.sum(x * 0)).astype(jnp.int32) for x in jax.tree_util.tree_leaves(data)
             if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    return functools.reduce(jnp.maximum, flags, jnp.zeros((), jnp.int32))


def _as_typed_key(key: jax.Array) -> jax.Array:
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def _rep_sharding(num_devices: int) -> tuple[Any, Any]:
    mesh = jax.make_mesh(
        (num_devices,), ("reps",), devices=jax.devices()[:num_devices],
        axis_types=(jax.sharding.AxisType.Auto,),
    )
    return mesh, NamedSharding(mesh, P("reps"))


def make_kernel(
    estimator: Estimator,
    simulate: Callable,
    init: Callable,
    record: Callable,
    plan: DataPlan,
    data_mode: Literal["materialize", "stream"] = "materialize",
    num_devices: int = 1,
    draw_truth: PerRepetition | None = None,
    final_only: bool = False,
) -> Callable:
    """The jitted kernel ``(reps (C,), data_key, noise_key, truth, hparams (L,), ids (L,))`` ->
    record with leading axes ``(C, L, num_steps + 1)``.

    Cached on its static arguments, so a study compiles once per shape. With ``num_devices > 1``
    the repetition axis is split over the first ``num_devices`` devices with ``shard_map`` (``C``
    must be a multiple of ``num_devices``).
    """
    cache_key = (estimator, simulate, init, record, plan, data_mode, num_devices, draw_truth,
                 final_only)
    if cache_key not in _KERNELS:
        _KERNELS[cache_key] = _build_kernel(*cache_key)
    return _KERNELS[cache_key]


def _build_kernel(estimator, simulate, init, record, plan, data_mode, num_devices, draw_truth,
                  final_only):
    _validate.check_choice(data_mode, "data_mode", ("materialize", "stream"))
    if data_mode == "stream" and (estimator.batching != "disjoint"
                                  or plan.num_blocks != estimator.num_steps):
        raise ValueError(
            "data_mode='stream' needs an estimator with one disjoint batch per step and one "
            f"data block per step: num_blocks = {plan.num_blocks}, num_steps = "
            f"{estimator.num_steps}, batching = {estimator.batching!r}")
    if estimator.batching == "disjoint" and plan.num_records < estimator.num_steps:
        raise ValueError(
            f"an estimator with sample splitting needs at least one record per iteration: "
            f"{plan.num_records} records for {estimator.num_steps} iterations")

    rep_fn = functools.partial(_repetition, estimator, simulate, init, record, plan, data_mode,
                               draw_truth, final_only)

    def chunk(reps, data_key, noise_key, truth, hparams, ids):
        return jax.vmap(rep_fn, in_axes=(0, None, None, None, None, None))(
            reps, data_key, noise_key, truth, hparams, ids
        )

    if num_devices == 1:
        return _Kernel(chunk)
    mesh, by_rep = _rep_sharding(num_devices)
    sharded = jax.shard_map(
        chunk, mesh=mesh, in_specs=(P("reps"), P(), P(), P(), P(), P()), out_specs=P("reps"),
        check_vma=False,
    )
    replicated = NamedSharding(mesh, P())
    return _Kernel(sharded, in_shardings=(by_rep,) + (replicated,) * 5)


_Kernel = CountingJit


def compile_count() -> int:
    """Programs built by all sweep kernels made so far (for no-recompile tests): the
    per-setting kernels of :func:`make_kernel` and the shared algorithm programs of
    :func:`make_shared_kernels` (their small per-setting data programs are counted by
    :func:`data_compile_count`)."""
    return sum(k._cache_size() for k in _KERNELS.values())


_KERNELS: dict[tuple, Callable] = {}


# --------------------------------------------------------------------------------------------
# The program fingerprint: what a stored result was computed by
# --------------------------------------------------------------------------------------------

PROGRAM_FORMAT = 2  # bump when what program_fingerprint hashes changes
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def program_fingerprint(setting: Setting, cache: dict[Any, str] | None = None
                        ) -> dict[str, Any]:
    """What computes a setting's stored numbers, hashed: a result stored by a study is reused
    only where this is unchanged (:class:`dpjax.results.ChunkStore`).

    Returns ``{"program": HASH, "ledgers": {level_label: HASH, ...}}``:

    * ``program`` hashes the traced computation of one repetition (the kernel's per-repetition
      function, :func:`make_kernel`, for one level, at the setting's shapes and dtypes, in the
      data mode ``"auto"`` picks): the jaxpr's text, the value of every constant it closes
      over (arrays by their bytes) and the code of the functions its primitives keep as
      parameters (e.g. a ``custom_vmap`` rule). Any edit of the estimator, ``simulate``,
      ``init``, ``record`` or a calibration that changes what is computed changes it; so does
      a new dpjax or JAX that traces differently. The number of levels and repetitions, the
      chunking and the devices are not in it: a study grows. The values the kernel takes as
      inputs (the truth, the levels, the keys) are not either: the store checks them itself
      (the setting's signature, the level labels of every chunk, the configuration). Where the
      estimator has a padded form (:class:`dpjax.base.Padded`), the shared path's data and
      algorithm programs (:func:`make_shared_kernels`) traced at the setting's own sizes are
      hashed too: a study may run the setting there, padded to the bucket of its shape family
      (:func:`plan_programs`), with results equal up to float round-off; the bucket depends
      on the study's other settings, the fingerprint does not (a runtime sparsity is traced
      at the setting's own ``s``, ``s_max = s``, whatever bound the bucket has).
    * ``ledgers`` hashes, per level (by :func:`level_label`), the estimator's host ledger
      (``estimator.ledger``) on fixed probe events (every event's sensitivity, scale and true
      sensitivity 1, delta 1e-6), with the code of the ledger function: the path that turns
      the stored events into ``epsilon_delivered`` must be the one that ran with them.

    Tracing costs a fraction of a second per setting; nothing is compiled or computed.
    ``cache``: a dict to share one trace between the settings of one run that have the same
    functions and shapes (a run's settings are fingerprinted in one go; a later call must
    trace again, since the code under those functions may have changed since).
    """
    h = hashlib.sha256(f"program-format:{PROGRAM_FORMAT}".encode())
    h.update(_traced_digest(setting, cache).encode())
    shapes = _event_shapes(setting) if setting.estimator.ledger is not None else None
    return {"program": h.hexdigest()[:16],
            "ledgers": {level_label(lv): _ledger_digest(setting, lv, shapes)
                        for lv in setting.levels}}


def _traced_digest(setting: Setting, cache: dict[Any, str] | None) -> str:
    args = (setting.estimator, setting.simulate, setting.init, setting.record, setting.plan,
            resolve_data_mode(setting), setting.draw_truth, setting.final_only,
            tuple(np.shape(setting.fixed_truth)), np.asarray(setting.fixed_truth).dtype.str,
            setting.hparams_type)
    if cache is None:
        return _trace_digest(*args)
    if args not in cache:
        cache[args] = _trace_digest(*args)
    return cache[args]


def _trace_digest(estimator, simulate, init, record, plan, data_mode, draw_truth, final_only,
                  truth_shape, truth_dtype, hparams_type) -> str:
    rep_fn = functools.partial(_repetition, estimator, simulate, init, record, plan, data_mode,
                               draw_truth, final_only)
    key = jax.ShapeDtypeStruct(jax.random.key_data(jax.random.key(0)).shape, jnp.uint32)
    one = jax.ShapeDtypeStruct((1,), jnp.float32)  # one level, as Setting.hparams makes it
    closed = jax.make_jaxpr(rep_fn)(
        jax.ShapeDtypeStruct((), jnp.uint32), key, key,
        jax.ShapeDtypeStruct(truth_shape, np.dtype(truth_dtype)),
        hparams_type(*(one for _ in hparams_type._fields)),
        jax.ShapeDtypeStruct((1,), jnp.uint32))
    h = hashlib.sha256(str(closed).encode())
    _hash_constants(closed, h, set())
    if getattr(estimator, "padded", None) is not None:
        _padded_digest(estimator, simulate, init, record, plan, draw_truth, final_only, key,
                       jax.ShapeDtypeStruct(truth_shape, np.dtype(truth_dtype)),
                       hparams_type(*(one for _ in hparams_type._fields)), h)
    return h.hexdigest()


def _padded_digest(estimator, simulate, init, record, plan, draw_truth, final_only, key, truth,
                   hparams, h) -> None:
    """Add to ``h`` the shared path's computation of one repetition (its data program and its
    padded form's algorithm program, :func:`make_shared_kernels`) traced at the setting's own
    sizes: no padding beyond its own rows and steps, whatever bucket a study puts it in (a
    study that grows by settings changes the bucket, not the program), so an edit of the
    padded form's step or of the padding is seen. Its results equal the per-setting kernel's
    up to float round-off (tests/test_sweep_shared.py)."""
    rows = (plan.num_records // estimator.num_steps if estimator.batching == "disjoint"
            else plan.num_records)
    # a runtime sparsity at the setting's own s too (s_max = s: whatever the bucket's)
    program = Program(estimator.num_steps, rows, 1, estimator.padded.sparsity)
    reps = jax.ShapeDtypeStruct((1,), jnp.uint32)
    disjoint = estimator.batching == "disjoint"
    batching, steps = (estimator.batching, estimator.num_steps) if disjoint else (None, None)
    own_rows = ()
    if is_prefix_stable(simulate) and _prefix_layout(estimator, plan):
        # the program's shared data program (shares_data_program), at the setting's own rows
        data_fn = _shared_data_fn(simulate, init, plan, draw_truth, batching, steps, program,
                                  True)
        own_rows = (jax.ShapeDtypeStruct((), jnp.int32),)
    else:
        data_fn = _shared_data_fn(simulate, init, plan, draw_truth, batching, steps, program)
    closed = jax.make_jaxpr(data_fn)(reps, key, truth, *own_rows)
    h.update(str(closed).encode())
    _hash_constants(closed, h, set())
    data, params0, truth_r, _ = jax.eval_shape(data_fn, reps, key, truth, *own_rows)
    count = jax.ShapeDtypeStruct((), jnp.int32)
    sparsity = () if program.s_max is None else (count,)
    closed = jax.make_jaxpr(_shared_alg_fn(estimator.padded, record, final_only, program.steps,
                                           program.s_max))(
        reps, key, data, params0, truth_r, hparams, jax.ShapeDtypeStruct((1,), jnp.uint32),
        count, count, *sparsity)
    h.update(str(closed).encode())
    _hash_constants(closed, h, set())


def _hash_constants(closed: Any, h: Any, seen: set[int]) -> None:
    """Add to ``h`` the values of a closed jaxpr's constants and, recursively, those of the
    jaxprs and functions its equations carry as parameters (the jaxpr's text names them
    only by shape)."""
    if id(closed) in seen:
        return
    seen.add(id(closed))
    for c in getattr(closed, "consts", ()):
        _hash_value(c, h, seen)
    jaxpr = getattr(closed, "jaxpr", closed)
    for eqn in getattr(jaxpr, "eqns", ()):
        for name in sorted(eqn.params):
            _hash_value(eqn.params[name], h, seen)


def _hash_value(value: Any, h: Any, seen: set[int], depth: int = 0) -> None:
    if isinstance(value, jax.extend.core.ClosedJaxpr | jax.extend.core.Jaxpr):
        _hash_constants(value, h, seen)
    elif isinstance(value, tuple | list):
        for v in value:
            _hash_value(v, h, seen, depth)
    elif isinstance(value, np.ndarray | jax.Array) and not isinstance(value, jax.core.Tracer):
        arr = np.asarray(value) if not jnp.issubdtype(value.dtype, jax.dtypes.prng_key) \
            else np.asarray(jax.random.key_data(value))
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    elif callable(value) and depth < 3:
        _hash_code(value, h, seen, depth)


def _hash_code(fn: Any, h: Any, seen: set[int], depth: int = 0) -> None:
    """The bytecode, constants and names of a Python function (through ``functools.partial``
    and wrappers), and what its closure holds: arrays by value, functions by their code."""
    while isinstance(fn, functools.partial):
        for v in (*fn.args, *fn.keywords.values()):
            _hash_value(v, h, seen, depth + 1)
        fn = fn.func
    fn = getattr(fn, "__wrapped__", fn)
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None or id(code) in seen:
        return
    seen.add(id(code))

    def walk(co):
        h.update(co.co_code)
        h.update(repr(co.co_names).encode())
        for c in co.co_consts:
            walk(c) if hasattr(c, "co_code") else h.update(_stable_repr(c).encode())

    walk(code)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(v, int | float | str | bool | type(None)):
            h.update(repr(v).encode())
        else:
            _hash_value(v, h, seen, depth + 1)


def _stable_repr(value: Any) -> str:
    """``repr`` with sets in sorted order (a set constant's order varies with the string hash
    seed of each process)."""
    if isinstance(value, frozenset | set):
        return "{" + ", ".join(sorted(_stable_repr(v) for v in value)) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_stable_repr(v) for v in value) + ")"
    return repr(value)


def _ledger_digest(setting: Setting, level: dict[str, float], shapes: Any) -> str:
    """The estimator's ledger of ``level`` on fixed probe events, hashed with its code (an
    error it raises there is hashed too: it is what that code does)."""
    fn = setting.estimator.ledger
    if fn is None:
        return "none"
    h = hashlib.sha256()
    _hash_code(fn, h, set())
    T = setting.estimator.num_steps

    def probe(leaf):
        if isinstance(leaf, PrivacyEvent):
            f = lambda v: np.full((T,) + tuple(np.shape(leaf.scale)), v)  # noqa: E731
            return dataclasses.replace(leaf, sensitivity=f(1.0), scale=f(1.0),
                                       true_sensitivity=f(1.0), delta=f(1e-6))
        return np.ones((T,) + tuple(leaf.shape), leaf.dtype)

    events = jax.tree_util.tree_map(probe, shapes,
                                    is_leaf=lambda x: isinstance(x, PrivacyEvent))
    hp = setting.hparams_type(*(np.asarray(v, np.float64)
                                for v in level_values(setting.hparams_type, level)))
    try:
        out = fn(setting.n, hp, events)
        text = json.dumps(out.to_dict() if hasattr(out, "to_dict") else out, sort_keys=True,
                          default=str)
    except Exception as exc:  # noqa: BLE001 - the refusal is that code's answer
        text = f"{type(exc).__name__}: {exc}"
    h.update(_ADDRESS.sub("0x", text).encode())  # no object address: the same in every run
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Shared programs: one compiled algorithm for every setting of a shape family
# --------------------------------------------------------------------------------------------
#
# A setting whose estimator has a padded form (:class:`dpjax.base.Padded`) runs as two
# programs: a small data program of its own (the draws of today: ``simulate`` at the setting's
# sizes, split into the steps' batches and padded with zeros to the program's shapes) and the
# algorithm program (the scan over iterations, vmapped over levels and repetitions), shared by
# every setting with the same padded form, record, data shapes but for the number of records,
# and padded sizes (:class:`Program`): ``n``, ``n0`` and the number of iterations reach it as
# runtime values, with a row mask, and so does the sparsity ``s`` of a sparse estimator
# (:attr:`dpjax.base.Padded.sparsity`), below the program's static bound ``s_max``.

#: the largest padded data set of one repetition the shared path materialises (bytes); a
#: larger setting keeps its own program, which can generate its batches inside the scan
SHARED_MAX_REP_BYTES = 2**28
#: the padded data of one repetition a setting of a row-block form may take beyond twice its
#: own (bytes): up to this, one program for every ``n`` of its family (its work follows its own
#: blocks, :attr:`dpjax.base.Padded.row_block`); past it, the geometric buckets
SHARED_FREE_PAD_BYTES = 2**26
#: the records a study may draw past its settings' own (bytes, over all its repetitions) so
#: that settings of one program share its data program (:func:`shares_data_program`), on a CPU,
#: for a ``simulate`` of plain draws (no rejection loop, :func:`draws_by_rejection`): on the
#: 2-core CPU of benchmarks/README.md a million float32 normals take 13 ms, so 128 MiB of them
#: about 0.4 s, under the 0.7-1.9 s of compiling one more data program
SHARED_DATA_FREE_BYTES = 2**27
#: the same for a ``simulate`` that draws by rejection (:func:`draws_by_rejection`): a million
#: Student-t draws take 1.1 s on that CPU (85 times a normal's bytes); at 128 MiB gem_mean's
#: shared settings took 2.3-2.4 s each, whatever their n, so this keeps its extra draws under
#: a compile
SHARED_DATA_FREE_BYTES_REJECTION = 2**21
#: the same on an accelerator, which draws at its memory's bandwidth and compiles for seconds
#: (about 4.5 s a program on an H200): not measured (no device lent since)
SHARED_DATA_FREE_BYTES_ACCELERATOR = 2**30


@dataclasses.dataclass(frozen=True)
class Program:
    """The padded sizes a setting runs at in its shape family's shared program.

    Attributes:
        steps: the scan's length (at least the setting's number of iterations; the steps past
            it are skipped at no cost).
        rows: the rows of a step's data: of a batch (disjoint batching) or of the data set
            (full), at least the setting's; the padding is masked.
        levels: the privacy levels of one call (a setting with more runs them in groups; the
            last group is filled with copies of its first level, whose results are dropped).
        s_max: the bound of a runtime sparsity (padded forms with
            :attr:`dpjax.base.Padded.sparsity`: at least the setting's ``s``; the peeling's
            rounds past it select nothing); ``None`` for the others.
    """

    steps: int
    rows: int
    levels: int
    s_max: int | None = None


def _data_rows(setting: Setting) -> int:
    """Rows of one step's data: ``n0 = floor(records / steps)`` with disjoint batches, all
    records with full batching."""
    est = setting.estimator
    if est.batching == "disjoint":
        return setting.plan.num_records // est.num_steps
    return setting.plan.num_records


def _row_shapes(tree: Any) -> tuple:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple((tuple(x.shape), str(x.dtype)) for x in leaves)


def _record_shapes(setting: Setting, truth: Any) -> Any:
    """The shapes of one record of a setting's data: a block as ``simulate`` draws it, less
    its row axis (drawn at the setting's own block size: a simulator of fixed real data
    accepts no other)."""
    block = jax.eval_shape(lambda k: setting.simulate(k, setting.plan.block_size, truth),
                           jax.random.key(0))
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), block)


def _shared_form(padded: Any) -> Any:
    """A padded form as its settings share it: without its runtime sparsity (the settings of
    one form that differ in ``s`` share a program, compiled for the bound ``s_max``)."""
    return padded if padded.sparsity is None else padded._replace(sparsity=None)


def _sparsity(setting: Setting) -> int | None:
    """The setting's runtime sparsity ``s`` (:attr:`dpjax.base.Padded.sparsity`), else None."""
    padded = getattr(setting.estimator, "padded", None)
    return None if padded is None else padded.sparsity


def shape_family(setting: Setting) -> tuple | None:
    """What a setting's shared program is compiled for, but for the padded sizes: the padded
    form of its estimator (without its runtime sparsity, :attr:`dpjax.base.Padded.sparsity`),
    its record, whether only the final iterate is kept, the shapes of a record of data (all
    but the row axis), of the start values and of the truth. ``None``: the estimator has no
    padded form (one program per setting, as :func:`make_kernel`)."""
    est = setting.estimator
    if getattr(est, "padded", None) is None:
        return None
    truth = setting.example_truth()
    key = jax.random.key(0)
    row = _record_shapes(setting, truth)
    params0 = jax.eval_shape(lambda k: setting.init(k, truth), key)
    return (_shared_form(est.padded), setting.record, setting.final_only, setting.hparams_type,
            _row_shapes(row), _row_shapes(params0), _row_shapes(truth))


def _rep_data_bytes(setting: Setting, program: Program) -> int:
    """Bytes of one repetition's padded data in the shared program."""
    batches = program.steps if setting.estimator.batching == "disjoint" else 1
    return _row_bytes(setting) * program.rows * batches


def _row_bytes(setting: Setting) -> int:
    row = _record_shapes(setting, setting.example_truth())
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(row))


def is_prefix_stable(simulate: Callable[..., Any]) -> bool:
    """Whether ``simulate`` says its draws are prefix-stable and JAX's random numbers are.

    A ``simulate`` says so by :func:`dpjax.models.prefix_stable` (an attribute
    ``prefix_stable = True`` on the function, or on the ``__call__`` of a callable object):
    for every key, truth and ``m <= M``, ``simulate(key, m, truth)`` is the first ``m``
    records of ``simulate(key, M, truth)`` (as the bundled models' ``simulate`` are, and
    tests/test_sweep_shared.py checks on every bundled setting). ``jax.random`` draws are
    prefix-stable in their leading axis under JAX's default random number generator
    (threefry with ``jax_threefry_partitionable``, the default since JAX 0.5); with another
    generator or the flag off, this is ``False`` whatever ``simulate`` says."""
    said = getattr(simulate, "prefix_stable", None)
    if said is None and not inspect.isfunction(simulate) and not inspect.ismethod(simulate):
        said = getattr(type(simulate).__call__, "prefix_stable", None)  # a callable object
    return (said is True and bool(jax.config.jax_threefry_partitionable)
            and str(jax.config.jax_default_prng_impl) == "threefry2x32")


def _shared_draws(setting: Setting, program: Program) -> DataPlan | None:
    """The blocks the data program of ``program`` draws for a setting of prefix-stable
    ``simulate`` (as many as the setting's, each of at least its rows): one block per step of
    the program's rows (disjoint batches), else the setting's blocks of records with the
    program's rows split over them; ``None`` for batches split from the records
    (:func:`_data_rows`: blocks other than one per step), which keep a data program of their
    own."""
    est, plan = setting.estimator, setting.plan
    if not _prefix_layout(est, plan):
        return None
    if est.batching == "disjoint":
        return DataPlan(plan.num_blocks, program.rows)
    return DataPlan(plan.num_blocks, -(-program.rows // plan.num_blocks))


def _prefix_layout(estimator: Any, plan: DataPlan) -> bool:
    """Whether a data plan's records can be drawn at more rows per block and masked: blocks of
    records, or disjoint batches of one block per step (not batches split from the records)."""
    return estimator.batching != "disjoint" or plan.num_blocks == estimator.num_steps


def shares_data_program(setting: Setting, program: Program, reps: int) -> bool:
    """Whether a setting run in ``program`` (:func:`plan_programs`) for ``reps`` repetitions
    draws its data in the program's data program, shared by its settings of equal ``simulate``,
    ``init``, truth draw and number of blocks (one compile for all of them), rather than in one
    of its own (one compile per setting): where its ``simulate`` is prefix-stable
    (:func:`is_prefix_stable`) and the records the shared program draws past its own
    (:func:`_shared_draws`: up to the program's rows, then zeroed) cost at most
    :data:`SHARED_DATA_FREE_BYTES` over the ``reps`` repetitions on a CPU
    (:data:`SHARED_DATA_FREE_BYTES_REJECTION` for a ``simulate`` that draws by rejection,
    :func:`draws_by_rejection`), :data:`SHARED_DATA_FREE_BYTES_ACCELERATOR` on an
    accelerator. Either way its data are the same, bit for bit."""
    draws = _shared_draws(setting, program) if is_prefix_stable(setting.simulate) else None
    if draws is None:
        return False
    extra = draws.num_records - setting.plan.num_records
    if jax.default_backend() != "cpu":
        free = SHARED_DATA_FREE_BYTES_ACCELERATOR
    elif draws_by_rejection(setting):
        free = SHARED_DATA_FREE_BYTES_REJECTION
    else:
        free = SHARED_DATA_FREE_BYTES
    return extra * _row_bytes(setting) * reps <= free


#: primitives whose work depends on the values drawn: a loop until a condition holds
#: (``lax.while_loop``: rejection samplers such as ``jax.random.poisson``) and ``jax.random``'s
#: gamma sampler (a rejection loop inside one primitive: gamma, beta, chi-square, Student-t,
#: Dirichlet draws)
_REJECTION_PRIMITIVES = frozenset({"while", "random_gamma"})


def draws_by_rejection(setting: Setting) -> bool:
    """Whether the setting's ``simulate`` draws by rejection: its program (traced, not run, at
    the setting's block size) holds a loop whose length depends on the draws
    (:data:`_REJECTION_PRIMITIVES`, at any depth). Such draws cost far more per byte than
    plain ones (a Student-t draw about 85 times a normal on the CPU of benchmarks/README.md),
    which :func:`shares_data_program` weighs."""
    truth = setting.example_truth()
    closed = jax.make_jaxpr(lambda k: setting.simulate(k, setting.plan.block_size, truth))(
        jax.random.key(0))
    return _holds_primitive(closed, _REJECTION_PRIMITIVES)


def _holds_primitive(closed: Any, names: frozenset[str]) -> bool:
    """Whether a (closed) jaxpr or one nested in its equations' parameters holds one of the
    primitives ``names``."""
    for eqn in getattr(getattr(closed, "jaxpr", closed), "eqns", ()):
        if eqn.primitive.name in names:
            return True
        for value in eqn.params.values():
            for v in value if isinstance(value, tuple | list) else (value,):
                if (isinstance(v, jax.extend.core.ClosedJaxpr | jax.extend.core.Jaxpr)
                        and _holds_primitive(v, names)):
                    return True
    return False


def own_program(setting: Setting) -> Program:
    """A setting's sizes as they are (no padding)."""
    return Program(setting.estimator.num_steps, _data_rows(setting), len(setting.levels),
                   _sparsity(setting))


def plan_programs(settings: Sequence[Setting]) -> dict[str, Program]:
    """The padded sizes of the settings of a study that can share programs: ``{key: Program}``
    (settings left out keep a program of their own).

    Settings of one shape family (:func:`shape_family`) are bucketed by rows, largest first:
    a bucket's rows are its largest setting's, and a setting joins while the rows it works on
    there (:func:`rows_worked`) are at most twice its own (padding never more than doubles a
    setting's work): geometric buckets, or for a padded form that adds up its records block
    by block up to the count (:attr:`dpjax.base.Padded.row_block`), one bucket for every
    setting of at least half a block (its work is its own blocks, whatever the bucket's
    rows) whose data padded to the bucket's rows are at most twice its own or at most
    :data:`SHARED_FREE_PAD_BYTES` a repetition (the memory limit below still applies). A
    bucket's scan runs its longest setting's number of iterations (the others skip the rest,
    at no cost) and its calls carry as many levels as its setting with the fewest (so no
    setting computes more levels than it has, but for filling its last group); where the
    padded form takes a runtime sparsity (:attr:`dpjax.base.Padded.sparsity`), settings that
    differ in ``s`` share the bucket, whose bound ``s_max`` is its largest ``s`` (the
    peeling's extra rounds select nothing: ``O(s_max d)`` per step, small beside the data's
    ``O(rows d)``). A setting
    whose padded data (its own steps at the bucket's rows) would exceed
    :data:`SHARED_MAX_REP_BYTES` per repetition is left out, before the bucket's steps are
    read off the others, and so is a setting alone in its bucket (its own kernel is one
    program, the shared path two).
    """
    families: dict[Any, list[Setting]] = {}
    for s in settings:
        fam = shape_family(s)
        if fam is not None:
            families.setdefault(fam, []).append(s)
    out: dict[str, Program] = {}
    for members in families.values():
        block = members[0].estimator.padded.row_block
        todo = sorted(members, key=lambda s: (-_data_rows(s), s.key))
        while todo:
            rows = padded_rows(_data_rows(todo[0]), block)
            bucket = [s for s in todo if _joins(s, rows, block)]
            todo = [s for s in todo if s not in bucket]
            # a setting whose own steps at the bucket's rows would pass the limit keeps its
            # own kernel (which can stream its batches); the rest run at their longest steps
            fits = [s for s in bucket if _rep_data_bytes(
                s, Program(s.estimator.num_steps, rows, 1)) <= SHARED_MAX_REP_BYTES]
            if len(fits) > 1:  # one setting alone gains nothing: it keeps its own kernel
                sparse = [_sparsity(s) for s in fits if _sparsity(s) is not None]
                prog = Program(max(s.estimator.num_steps for s in fits), rows,
                               min(len(s.levels) for s in fits),
                               max(sparse) if sparse else None)
                out.update((s.key, prog) for s in fits)
    return out


def _joins(setting: Setting, rows: int, block: int | None) -> bool:
    """Whether ``setting`` joins a bucket of ``rows``: the rows it works on there are at most
    twice its own (:func:`rows_worked`), and so are its padded data, or these are at most
    :data:`SHARED_FREE_PAD_BYTES` a repetition (a row-block form works on its own blocks only,
    but its data are still padded to the bucket's rows: zeros to write, and fewer
    repetitions in a call of a given memory)."""
    own = _data_rows(setting)
    if rows_worked(own, rows, block) > 2 * own:
        return False
    if rows <= 2 * own:
        return True
    steps = setting.estimator.num_steps
    return _rep_data_bytes(setting, Program(steps, rows, 1)) <= SHARED_FREE_PAD_BYTES


def padded_rows(rows: int, block: int | None) -> int:
    """The rows of a program whose largest setting has ``rows``: those, or for a padded form
    that adds up its records in blocks (:attr:`dpjax.base.Padded.row_block`) over at least two
    blocks, the whole blocks that hold them (less than one block more): past the whole blocks,
    :func:`dpjax.base.fold_rows` adds the rest of the rows for every setting. Between one and
    two blocks the rows stay as they are (a setting works on one block and that rest: at most
    the rows, where rounding up would double them)."""
    if block is None or rows < 2 * block:
        return rows
    return -(-rows // block) * block


def rows_worked(own: int, rows: int, block: int | None) -> int:
    """The rows a setting of ``own`` rows computes on per step in a program of ``rows``: all of
    them, or with blocks (:attr:`dpjax.base.Padded.row_block`) past one block, the whole blocks
    that hold its own (``ceil(own / block) block``, under ``2 own`` once ``own >= block``) and
    the rows past the program's whole blocks (none where ``rows`` is a multiple of ``block``,
    :func:`padded_rows`)."""
    if block is None or rows <= block:
        return rows
    whole, rest = divmod(rows, block)
    return min(whole, -(-own // block)) * block + rest


def _shared_data_fn(simulate, init, plan, draw_truth, batching, num_steps, program,
                    runtime_rows=False):
    """Repetition ``r``'s padded data, start values, truth and data check (the draws of
    :func:`_repetition`, bit for bit, before padding; the check, :func:`_has_nonfinite`, reads
    every drawn record, as :func:`_repetition` does, and none of the padding's zeros).

    ``runtime_rows``: the program's data program, shared by the settings of ``program`` whose
    ``simulate`` is prefix-stable (:func:`shares_data_program`): ``plan`` is its draws
    (:func:`_shared_draws`: the setting's number of blocks, each of at least its rows), the
    chunk function takes the setting's own rows per block last (an int32 scalar), the records
    drawn past them are zeroed, and blocks of records are joined at the setting's rows per
    block (bit for bit the setting's own draws, then its padding). ``batching`` and
    ``num_steps`` are read for disjoint batches only (others pass ``None``)."""

    def one(r, data_key, truth, *own_rows):
        data_key = _as_typed_key(data_key)
        data_key_r = jax.random.fold_in(data_key, r)
        if draw_truth is not None:
            truth = draw_truth.draw(jax.random.fold_in(data_key_r, TRUTH_TAG))
        params0 = init(jax.random.fold_in(data_key_r, INIT_TAG), truth)
        # one block after another: a draw's temporaries are a block's, not every block's at
        # once (a vmap over 10 blocks of a million Student-t draws held 6.6 GB of them)
        blocks = jax.lax.map(lambda b: simulate(jax.random.fold_in(data_key_r, b),
                                                plan.block_size, truth),
                             jnp.arange(plan.num_blocks))
        if runtime_rows:  # the setting's own records, then zeros (its padding)
            keep = jnp.arange(plan.block_size) < own_rows[0]
            blocks = jax.tree_util.tree_map(
                lambda x: jnp.where(keep.reshape((1, -1) + (1,) * (x.ndim - 2)), x,
                                    jnp.zeros((), x.dtype)), blocks)

        def joined(x):  # blocks of records, each of the setting's rows, one after the other
            i = jnp.arange(program.rows)
            src = jnp.minimum((i // own_rows[0]) * plan.block_size + i % own_rows[0],
                              plan.num_records - 1)
            flat = x.reshape((plan.num_records,) + x.shape[2:])[src]
            valid = (i < plan.num_blocks * own_rows[0]).reshape((-1,) + (1,) * (x.ndim - 2))
            return jnp.where(valid, flat, jnp.zeros((), x.dtype))

        def layout(x):
            if batching == "disjoint" and plan.num_blocks == num_steps:
                batches = x  # a block is a step's batch (the streamed layout)
            elif runtime_rows and plan.num_blocks > 1:
                return joined(x)
            else:
                x = x.reshape((plan.num_records,) + x.shape[2:])
                if batching != "disjoint":
                    pad = [(0, program.rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1)
                    return jnp.pad(x, pad)
                n0 = plan.num_records // num_steps  # split_batches: the remainder is unused
                batches = x[: n0 * num_steps].reshape((num_steps, n0) + x.shape[1:])
            pad = ([(0, program.steps - batches.shape[0]), (0, program.rows - batches.shape[1])]
                   + [(0, 0)] * (batches.ndim - 2))
            return jnp.pad(batches, pad)

        return (jax.tree_util.tree_map(layout, blocks), params0, truth,
                _has_nonfinite(blocks))

    def chunk(reps, data_key, truth, *own_rows):
        return jax.vmap(one, in_axes=(0, None, None) + (None,) * len(own_rows))(
            reps, data_key, truth, *own_rows)

    return chunk


def _shared_alg_fn(padded, record, final_only, steps, s_max=None):
    """All levels of a chunk of repetitions through the padded estimator: the record with
    axes ``(C, L, steps + 1)`` (``(C, L, 2)`` with ``final_only``) and the events
    ``(C, L, steps)``. ``s_max``: the bound of a runtime sparsity, which the program then
    takes as a last argument (the setting's ``s``, an int32 scalar)."""

    def one(r, noise_key, data, params0, truth, hparams, ids, count, num_steps, *sparsity):
        noise_key_r = jax.random.fold_in(_as_typed_key(noise_key), r)
        level_keys = jax.vmap(jax.random.fold_in, (None, 0))(noise_key_r, ids)
        num_levels = ids.shape[0]
        rows = jax.tree_util.tree_leaves(data)[0].shape[1 if padded.batching == "disjoint"
                                                          else 0]

        def broadcast(state):
            return jax.tree_util.tree_map(
                lambda x: jnp.broadcast_to(x, (num_levels,) + jnp.shape(x)), state)

        if s_max is None:
            state0 = broadcast(padded.init(params0))
            sizes = Sizes(jnp.arange(rows) < count, count.astype(jnp.result_type(float)),
                          num_steps)
        else:  # a runtime sparsity: the init thresholds with it too
            sizes = Sizes(jnp.arange(rows) < count, count.astype(jnp.result_type(float)),
                          num_steps, jnp.arange(s_max) < sparsity[0])
            state0 = broadcast(padded.init(params0, sizes))

        def record_step(state, info):
            return record(state, truth), info.events

        def one_level(level_key, hp, s0):
            if final_only:
                final, events = run_padded(padded, jax.random.fold_in(level_key, 0), data, s0,
                                           hp, sizes, steps, lambda state, info: info.events)
                return jax.tree_util.tree_map(lambda x: x[None], record(final, truth)), events
            return run_padded(padded, level_key, data, s0, hp, sizes, steps, record_step)[1]

        trace, events = jax.vmap(one_level)(level_keys, hparams, state0)
        rec0 = jax.vmap(record, in_axes=(0, None))(state0, truth)
        if not isinstance(rec0, dict):
            raise TypeError("a setting's record must return a dict of named metrics")
        out = jax.tree_util.tree_map(
            lambda r0, tr: jnp.concatenate([r0[:, None], tr], axis=1), rec0, trace)
        for i, leaf in enumerate(jax.tree_util.tree_leaves(events)):
            out[f"{EVENT_PREFIX}{i}"] = leaf
        return out

    def chunk(reps, noise_key, data, params0, truth, hparams, ids, count, num_steps,
              *sparsity):
        return jax.vmap(one, in_axes=(0, None, 0, 0, 0, None, None, None, None)
                        + (None,) * len(sparsity))(
            reps, noise_key, data, params0, truth, hparams, ids, count, num_steps, *sparsity)

    return chunk


def _jit_over_reps(fn: Callable, num_devices: int, rep_args: Sequence[bool]) -> Callable:
    """``jit(fn)``; with several devices its repetition axis (the arguments flagged in
    ``rep_args`` and every output) is split over them with ``shard_map``."""
    if num_devices == 1:
        return _Kernel(fn)
    mesh, by_rep = _rep_sharding(num_devices)
    replicated = NamedSharding(mesh, P())
    sharded = jax.shard_map(fn, mesh=mesh, in_specs=tuple(P("reps") if a else P()
                                                          for a in rep_args),
                            out_specs=P("reps"), check_vma=False)
    return _Kernel(sharded, in_shardings=tuple(by_rep if a else replicated for a in rep_args))


def make_shared_kernels(setting: Setting, program: Program, num_devices: int = 1,
                        share_data: bool = False) -> tuple[Callable, Callable]:
    """``(data, algorithm)``: the setting's data program ``(reps (C,), data_key, truth) ->
    (data, params0, truth, nonfinite (C,))`` (padded to ``program``; ``nonfinite``: 1 where a
    repetition's drawn data hold a NaN or infinite entry, see :data:`NONFINITE_DATA`) and its
    family's algorithm program ``(reps, noise_key, data, params0, truth, hparams (L,),
    ids (L,), count, num_steps[, s])`` -> record ``(C, L, program.steps + 1)``, shared by every
    setting of the family at these sizes (cached: a study compiles it once; ``s``: the
    setting's runtime sparsity, with ``program.s_max``).

    ``share_data`` (where :func:`shares_data_program` allows it): the data program is the
    program's, shared by the settings of equal ``simulate``, ``init``, truth draw and blocks
    per repetition, and takes the setting's rows per block (its plan's ``block_size``) last;
    otherwise it is the setting's own (one per data plan)."""
    est = setting.estimator
    disjoint = est.batching == "disjoint"  # only then are the batching and steps read
    batching, steps = (est.batching, est.num_steps) if disjoint else (None, None)
    if share_data:
        data_key = (setting.simulate, setting.init, _shared_draws(setting, program),
                    setting.draw_truth, batching, steps, program, True, num_devices)
        rep_args = (True, False, False, False)
    else:
        data_key = (setting.simulate, setting.init, setting.plan, setting.draw_truth,
                    batching, steps, program, False, num_devices)
        rep_args = (True, False, False)
    if data_key not in _DATA_KERNELS:
        _DATA_KERNELS[data_key] = _jit_over_reps(_shared_data_fn(*data_key[:-1]), num_devices,
                                                 rep_args)
    form = _shared_form(est.padded)
    alg_key = (form, setting.record, setting.final_only, program.steps, program.s_max,
               num_devices)
    if alg_key not in _KERNELS:
        _KERNELS[alg_key] = _jit_over_reps(
            _shared_alg_fn(form, setting.record, setting.final_only, program.steps,
                           program.s_max),
            num_devices, (True, False, True, True, True, False, False, False, False)
            + (() if program.s_max is None else (False,)))
    return _DATA_KERNELS[data_key], _KERNELS[alg_key]


def data_compile_count() -> int:
    """Compiled entries of the shared path's data programs (one per setting and chunk shape:
    small programs, ``simulate`` at the setting's sizes)."""
    return sum(k._cache_size() for k in _DATA_KERNELS.values())


_DATA_KERNELS: dict[tuple, Callable] = {}


# --------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------


def chunk_bounds(reps: int, chunk_size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the repetition chunks."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1; got {chunk_size}")
    return [(a, min(a + chunk_size, reps)) for a in range(0, reps, chunk_size)]


def finished_prefix(existing: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stored chunks that tile the repetitions ``0, 1, 2, ...`` without a gap, in order
    (the longest chunk where two start at the same repetition)."""
    by_start: dict[int, int] = {}
    for a, b in existing:
        if b > a:
            by_start[a] = max(b, by_start.get(a, b))
    out, pos = [], 0
    while pos in by_start:
        out.append((pos, by_start[pos]))
        pos = by_start[pos]
    return out


def plan_bounds(existing: Sequence[tuple[int, int]], reps: int,
                chunk_size: int) -> list[tuple[int, int]]:
    """The chunks of a run of ``reps`` repetitions beside stored chunks ``existing``: the
    stored ones that tile ``0 .. reps - 1`` from the start are reused as they are (a study
    grows: its finished repetitions are not split again), and the rest is cut into chunks of
    ``chunk_size``. The last reused chunk may reach past ``reps`` (a smaller run reads the
    repetitions it asks for)."""
    done = [(a, b) for a, b in finished_prefix(existing) if a < reps]
    start = done[-1][1] if done else 0
    rest = [(a + start, b + start) for a, b in chunk_bounds(reps - start, chunk_size)] \
        if start < reps else []
    return done + rest


# --------------------------------------------------------------------------------------------
# Planning a setting's run: data mode, chunk size, chunks, memory
# --------------------------------------------------------------------------------------------


def rep_bytes(setting: Setting) -> int:
    """Bytes one repetition needs: its data block, generation temporaries and a clipped copy
    per level (all blocks when every iteration sees all data). Read off shapes only."""
    truth = setting.example_truth()
    leaves = jax.eval_shape(
        lambda k: setting.simulate(k, setting.plan.block_size, truth), jax.random.key(0)
    )
    block_bytes = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in
                      jax.tree_util.tree_leaves(leaves))
    per_rep = block_bytes * (len(setting.levels) + 4)
    if setting.estimator.batching != "disjoint":
        per_rep *= setting.plan.num_blocks
    return int(per_rep)


def auto_chunk(setting: Setting, reps: int, budget_bytes: float, devices: int = 1,
               program: Program | None = None) -> int:
    """Repetitions per chunk so that each device's share of a chunk (its data and per-level
    temporaries) fits the budget, evened out over the chunks (every chunk is padded to one
    shape: 50 reps at most 18 per chunk run as 3 x 17, not 18 + 18 + 14 padded to 3 x 18).
    Evening out never takes a device below two repetitions per call where the budget holds
    two (a chunk is a whole number of repetitions per device, and more than half the fit).
    With the ``program`` of a shared path, a repetition also holds its padded data (every
    step's batch at once: the shared path does not stream)."""
    need = rep_bytes(setting) + (0 if program is None else _rep_data_bytes(setting, program))
    fit = int(max(1, budget_bytes // max(need, 1))) * devices
    per = math.ceil(reps / math.ceil(reps / fit))
    return min(reps, math.ceil(per / devices) * devices)


#: The share of a device's memory that one chunk (:func:`rep_bytes` per repetition, data and
#: temporaries) takes by default. A CPU device's memory is the machine's, shared by its JAX CPU
#: devices and by whatever else runs there (other processes, ``dpjax run --all``'s parallel
#: studies): an eighth of it. An accelerator's is its own, but its allocator also holds the
#: compiled program's buffers, which :func:`rep_bytes` does not count: a quarter of what is free.
CPU_MEMORY_FRACTION = 1 / 8
ACCELERATOR_MEMORY_FRACTION = 1 / 4


def device_memory_gb(device: Any = None) -> float | None:
    """The memory of one device, in GB (2^30 bytes): an accelerator's free memory by its
    allocator (``device.memory_stats()``: ``bytes_limit - bytes_in_use``); for a CPU device,
    the machine's physical memory over the local CPU devices (they share it). None when the
    backend does not say."""
    device = jax.local_devices()[0] if device is None else device
    if device.platform == "cpu":
        have = _physical_memory()
        cpus = len([d for d in jax.local_devices() if d.platform == "cpu"]) or 1
        return have / cpus / 2**30 if math.isfinite(have) else None
    try:
        stats = device.memory_stats() or {}
    except Exception:  # pragma: no cover - a backend without memory statistics
        return None
    limit = stats.get("bytes_limit")
    if not limit:
        return None
    return max(float(limit) - float(stats.get("bytes_in_use", 0)), 0.0) / 2**30


def default_memory_budget_gb(share: int = 1) -> float:
    """The default ``--memory-budget`` (per device), sized from the device's memory
    (:func:`device_memory_gb`): :data:`CPU_MEMORY_FRACTION` of it on CPU,
    :data:`ACCELERATOR_MEMORY_FRACTION` on an accelerator. On CPU it is split ``share`` ways
    (processes that run at once on this machine share its memory; an accelerator's allocator
    limit is already the process's own, e.g. ``XLA_PYTHON_CLIENT_MEM_FRACTION``). Where the
    backend does not say, 0.1 GB on CPU and 2 GB on an accelerator.

    Sized so that a device runs at least two repetitions per call wherever they fit: a call of
    one repetition costs about what a call of two does (em_fig1: 272 s of CPU at one per device
    per call, 181 s at two)."""
    share = _validate.check_int_in_range(share, "share", 1)
    cpu = jax.default_backend() == "cpu"
    memory = device_memory_gb()
    if memory is None:
        return 0.1 / share if cpu else 2.0
    return memory * CPU_MEMORY_FRACTION / share if cpu else memory * ACCELERATOR_MEMORY_FRACTION


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return math.inf


def check_memory(settings: Sequence[Setting]) -> None:
    """Fail fast, before anything is allocated or written, when one repetition of a setting
    cannot fit in this machine's memory (chunking cannot split a repetition)."""
    have = _physical_memory()
    for s in settings:
        need = rep_bytes(s)
        if need > have:
            cols = ", ".join(f"{k}={v}" for k, v in s.columns.items() if k in ("n", "d", "s"))
            raise _validate.ConfigError(
                f"setting {s.key!r} ({cols}): one repetition needs {need / 2**30:,.1f} GiB, "
                f"more than this machine's {have / 2**30:,.1f} GiB; choose smaller sizes"
            )


def resolve_data_mode(setting: Setting, data_mode: str = "auto") -> str:
    """``"auto"``: stream where each step's batch is one generated block, else materialise
    (:func:`dpjax.base.run` splits the data into the steps' disjoint batches)."""
    if data_mode != "auto":
        return _validate.check_choice(data_mode, "data_mode", ("materialize", "stream"))
    return ("stream" if setting.estimator.batching == "disjoint"
            and setting.plan.num_blocks == setting.estimator.num_steps else "materialize")


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """How one setting runs: its data mode, the repetitions per kernel call, and the chunks
    ``[(start, stop), ...]`` (stored ones first, as they are; see :func:`plan_bounds`)."""

    data_mode: str
    chunk_size: int
    bounds: tuple[tuple[int, int], ...]


def plan_run(setting: Setting, reps: int, *, stored: Sequence[tuple[int, int]] = (),
             chunk_size: int | None = None, memory_budget_gb: float | None = None,
             num_devices: int | None = None, data_mode: str = "auto",
             program: Program | None = None) -> RunPlan:
    """The run of ``reps`` repetitions of ``setting`` beside the stored chunks ``stored``:
    the data mode (:func:`resolve_data_mode`), the chunk size (``chunk_size``, else as many
    repetitions as fit each device's ``memory_budget_gb``, :func:`auto_chunk`, sized for the
    repetitions still to compute, and for the padded data of the shared ``program`` the
    setting runs in, if any), and the chunks, computed once (:func:`plan_bounds`)."""
    mode = resolve_data_mode(setting, data_mode)
    done = finished_prefix(stored)
    todo = max(reps - (done[-1][1] if done else 0), 1)
    if chunk_size is None:
        budget = default_memory_budget_gb() if memory_budget_gb is None else memory_budget_gb
        chunk_size = auto_chunk(setting, todo, budget * 2**30,
                                num_devices or jax.local_device_count(), program)
    return RunPlan(mode, int(chunk_size), tuple(plan_bounds(stored, reps, chunk_size)))


def level_label(level: dict[str, float]) -> str:
    """A level's identity in stored chunks: its hyperparameters and their float64 values,
    e.g. ``"delta=0.001,epsilon=0.5"`` (a level's draws depend on these values only)."""
    return ",".join(f"{k}={float(level[k])!r}" for k in sorted(level))


def run_setting(
    setting: Setting,
    *,
    reps: int,
    seed: int,
    chunk_size: int | None = None,
    data_mode: Literal["materialize", "stream"] = "materialize",
    num_devices: int | None = None,
    store: Any = None,
    progress: Callable[[int], None] | None = None,
    levels: Sequence[dict[str, float]] | None = None,
    bounds: Sequence[tuple[int, int]] | None = None,
    plan: RunPlan | None = None,
    on_invalid: str = "raise",
    program: Program | None = None,
    programs: dict[str, Any] | None = None,
) -> np.ndarray:
    """Run all repetitions and levels of one setting.

    Returns a dict ``metric -> array (reps, L, num_steps + 1, ...)`` (index 0 along the third
    axis is the starting value).

    Args:
        setting: the setting.
        reps: number of repetitions.
        seed: the study seed.
        chunk_size: repetitions per kernel call (memory is proportional to it); default all.
        data_mode: ``"materialize"`` or ``"stream"`` (see the module docstring).
        num_devices: devices to shard repetitions over (default: all local devices).
        store: optional chunk store (``has(key, i)``, ``load(key, i)``, ``save(key, i, arr)``)
            for resuming: completed chunks are loaded instead of recomputed. A store that also
            has ``levels_of(key, i)`` (the level labels a stored chunk holds, see
            :func:`level_label`) and ``save_levels(key, i, labels)`` lets a study grow: a
            stored chunk that lacks some of the levels asked for gets them computed (the
            same draws: the keys depend on the level's values only) and is rewritten with
            every level; levels it holds beyond those asked for are kept in the file.
        progress: called with the number of repetitions finished after each chunk.
        levels: run only these levels (default: ``setting.levels``).
        bounds: the chunks ``[(start, stop), ...]`` (default: ``chunk_bounds(reps,
            chunk_size)``); they tile ``0 .. reps - 1`` and the last may reach past ``reps``
            (a stored chunk of a larger run: only the first ``reps`` repetitions are read).
        plan: a :func:`plan_run` plan; gives ``chunk_size``, ``data_mode`` and ``bounds``.
        on_invalid: what a repetition whose simulated data hold NaN or infinite entries
            does, as in a fit (:func:`dpjax._validate.check_on_invalid`): ``"raise"`` (the
            default) refuses it with a :class:`~dpjax.config.ConfigError` naming the setting
            and the repetitions, before its chunk is stored; ``"clip"`` keeps it (the
            estimators' bounded statistics sanitise the entries, as a fit with
            ``on_invalid="clip"`` does). Either way the output's :data:`NONFINITE_DATA`
            array flags those repetitions.
        program: the padded sizes of the shared program to run in (:func:`plan_programs`;
            its estimator must have a padded form); default: a program of its own
            (:func:`make_kernel`).
        programs: a dict to fill with the program the setting ran: ``{"program": id,
            "compiled": bool}`` (whether this run compiled it or reused a compiled one).
    """
    on_invalid = _validate.check_on_invalid(on_invalid)
    if plan is not None:
        chunk_size, data_mode, bounds = plan.chunk_size, plan.data_mode, plan.bounds
    reps = _validate.check_int_in_range(reps, "reps", 1)
    chunk_size = reps if chunk_size is None else chunk_size
    bounds = chunk_bounds(reps, chunk_size) if bounds is None else list(bounds)
    tally = getattr(store, "tally", None)
    if program is not None and shape_family(setting) is not None:
        runner = _SharedRunner.build(setting, program, seed, chunk_size, num_devices, tally,
                                     reps)
    else:
        runner = _SettingRunner.build(setting, seed, chunk_size, data_mode, num_devices, tally)
    compiled_before = _cache_size(runner.kernel)
    data_before = _cache_size(runner.data_kernel) if isinstance(runner, _SharedRunner) else 0
    levels = list(setting.levels if levels is None else levels)
    out = []
    for i, (a, b) in enumerate(bounds):
        if a >= reps:
            break
        if _is_stored(store, setting.key, i, runner.multi):
            arr = _reuse_chunk(runner, store, i, a, b, reps, levels, on_invalid)
            if on_invalid == "raise" and arr is not None:
                _refuse_nonfinite(setting, arr, a, min(b, reps))
        else:
            arr = runner.compute(a, b, levels, on_invalid)
            if store is not None and runner.primary:
                if hasattr(store, "levels_of"):
                    store.save_levels(setting.key, i, [level_label(lv) for lv in levels])
                store.save(setting.key, i, arr)
        if arr is not None and b > reps:
            arr = {k: v[: reps - a] for k, v in arr.items()}
        out.append(arr)
        if progress is not None:
            progress(min(b, reps) - a)
    if programs is not None:
        programs.update(program=runner.program_id,
                        compiled=_cache_size(runner.kernel) > compiled_before)
        if isinstance(runner, _SharedRunner):
            programs.update(data_program="shared" if runner.share_data else "own",
                            data_compiled=_cache_size(runner.data_kernel) > data_before)
    if any(o is None for o in out):  # a non-zero process skipped chunks process 0 had stored
        return {}
    return {k: np.concatenate([o[k] for o in out], axis=0) for k in out[0]}


@dataclasses.dataclass(frozen=True)
class _SettingRunner:
    """One setting's compiled kernel and its inputs: :meth:`compute` runs repetitions
    ``a .. b - 1`` of some levels, in kernel calls of ``padded`` repetitions (one shape, one
    compile)."""

    setting: Setting
    kernel: Callable[..., Any]
    data_key: np.ndarray
    noise_key: np.ndarray
    padded: int
    rep_sharding: Any
    multi: bool
    primary: bool
    tally: Callable[..., None] | None

    @classmethod
    def build(cls, setting: Setting, seed: int, chunk_size: int, data_mode: str,
              num_devices: int | None, tally: Callable[..., None] | None) -> _SettingRunner:
        devices = len(jax.devices()) if num_devices is None else num_devices
        devices = max(1, min(devices, chunk_size))
        kernel = make_kernel(
            setting.estimator, setting.simulate, setting.init, setting.record, setting.plan,
            data_mode, devices, setting.draw_truth, setting.final_only,
        )
        # Host (NumPy) inputs: valid global values under multi-process JAX as well.
        data_key, noise_key = (
            np.asarray(jax.random.key_data(k))
            for k in study_keys(seed, setting.key, setting.data_group)
        )
        return cls(setting, kernel, data_key, noise_key,
                   # a common multiple of the device count: one shape, one compile
                   math.ceil(chunk_size / devices) * devices,
                   _rep_sharding(devices)[1] if devices > 1 else None,
                   jax.process_count() > 1, jax.process_index() == 0, tally)

    def compute(self, a: int, b: int, lvls: Sequence[dict[str, float]],
                on_invalid: str = "raise") -> dict[str, np.ndarray]:
        """Repetitions ``a .. b - 1`` of levels ``lvls``: ``metric -> (b - a, len(lvls), ...)``;
        non-finite simulated data (with ``on_invalid="raise"``) or a non-finite metric (other
        than an event) raises."""
        setting, padded = self.setting, self.padded
        hparams = jax.tree_util.tree_map(np.asarray, setting.hparams(lvls))
        ids = setting.level_ids(lvls)
        parts = []
        for a2 in range(a, b, padded):
            parts.append({k: v[: min(padded, b - a2)]
                          for k, v in self._call(a2, hparams, ids).items()})
        arr = {k: np.concatenate([p[k] for p in parts], axis=0) for k in parts[0]}
        if on_invalid == "raise":
            _refuse_nonfinite(setting, arr, a, b)
        bad = [k for k, v in arr.items()
               if not k.startswith(EVENT_PREFIX) and not np.isfinite(v).all()]
        if bad:
            raise FloatingPointError(
                f"setting {setting.key!r}: non-finite {bad} in repetitions {a}..{b - 1}"
            )
        if self.tally is not None:
            self.tally(computed=(b - a) * len(lvls))
        return arr

    @property
    def program_id(self) -> str:
        """The program's name in results: the estimator and the setting (one of its own)."""
        return f"{self.setting.estimator.name} [setting {self.setting.key}]"

    def _call(self, start: int, hparams: Any, ids: Any) -> dict[str, np.ndarray]:
        """One kernel call: repetitions ``start .. start + padded - 1``, on the host."""
        reps_in = _rep_indices(start, self.padded, self.rep_sharding)
        res = self.kernel(reps_in, self.data_key, self.noise_key, self.setting.fixed_truth,
                          hparams, ids)
        if self.multi:
            from jax.experimental import multihost_utils

            res = multihost_utils.process_allgather(res, tiled=True)
        res = jax.device_get(res)
        if not isinstance(res, dict):
            raise TypeError("a setting's record must return a dict of named metrics")
        return {k: np.asarray(v) for k, v in res.items()}


def _refuse_nonfinite(setting: Setting, arr: dict[str, np.ndarray], a: int, b: int) -> None:
    """The ``on_invalid="raise"`` policy on repetitions ``a .. b - 1`` (the rows of ``arr``):
    one line naming the setting and the repetitions whose simulated data are not finite."""
    flags = arr.get(NONFINITE_DATA)
    if flags is None:
        return
    bad = np.flatnonzero(np.asarray(flags)[: b - a].reshape(b - a, -1).max(axis=1))
    if bad.size:
        reps = ", ".join(str(a + int(r)) for r in bad[:5]) + (", ..." if bad.size > 5 else "")
        raise ConfigError(
            f"setting {setting.key!r}: simulate returned data with NaN or infinite entries "
            f"in {bad.size} of repetitions {a}..{b - 1} (repetition {reps}), which a fit "
            "refuses (on_invalid='raise'); "
            "fix simulate, or run with --on-invalid clip (run_experiment(on_invalid='clip')) "
            "to let the estimators sanitise them as a fit with on_invalid='clip' does")


@dataclasses.dataclass(frozen=True)
class _SharedRunner(_SettingRunner):
    """A setting run through its shape family's shared program (:func:`make_shared_kernels`):
    per call, its data program draws and pads the chunk's data once, and the algorithm program
    runs the levels on them in groups of ``program.levels``."""

    data_kernel: Callable[..., Any] = None
    program: Program = None
    share_data: bool = False

    @classmethod
    def build(cls, setting: Setting, program: Program, seed: int, chunk_size: int,
              num_devices: int | None, tally: Callable[..., None] | None,
              reps: int | None = None) -> _SharedRunner:
        devices = len(jax.devices()) if num_devices is None else num_devices
        devices = max(1, min(devices, chunk_size))
        program = _checked_sparsity(setting, program)
        share = shares_data_program(setting, program, chunk_size if reps is None else reps)
        data_kernel, kernel = make_shared_kernels(setting, program, devices, share)
        data_key, noise_key = (
            np.asarray(jax.random.key_data(k))
            for k in study_keys(seed, setting.key, setting.data_group)
        )
        return cls(setting, kernel, data_key, noise_key, math.ceil(chunk_size / devices) * devices,
                   _rep_sharding(devices)[1] if devices > 1 else None,
                   jax.process_count() > 1, jax.process_index() == 0, tally, data_kernel,
                   program, share)

    @property
    def program_id(self) -> str:
        p, est = self.program, self.setting.estimator
        sparse = "" if p.s_max is None else f"s_max={p.s_max}, "
        return (f"{est.padded.family} [steps={p.steps}, rows={p.rows}, levels={p.levels}, "
                f"{sparse}{describe_function(self.setting.record).split(' ')[0]}"
                f"{', final only' if self.setting.final_only else ''}]")

    def _call(self, start: int, hparams: Any, ids: Any) -> dict[str, np.ndarray]:
        reps_in = _rep_indices(start, self.padded, self.rep_sharding)
        setting, prog = self.setting, self.program
        count = np.int32(_data_rows(setting))
        own = (np.int32(setting.plan.block_size),) if self.share_data else ()
        data, params0, truth, bad = self.data_kernel(reps_in, self.data_key,
                                                     setting.fixed_truth, *own)
        num_steps = np.int32(setting.estimator.num_steps)
        sparsity = () if prog.s_max is None else (np.int32(_sparsity(setting)),)
        total = len(ids)
        group = min(prog.levels, total)  # fewer levels asked: no copies computed
        parts = []
        for g in range(0, total, group):
            pick = np.arange(g, g + group)
            pick = np.where(pick < total, pick, g)  # fill the last group with its first level
            hp = jax.tree_util.tree_map(functools.partial(_take_levels, pick=pick), hparams)
            res = self.kernel(reps_in, self.noise_key, data, params0, truth, hp,
                              np.asarray(ids)[pick], count, num_steps, *sparsity)
            if self.multi:
                from jax.experimental import multihost_utils

                res = multihost_utils.process_allgather(res, tiled=True)
            res = jax.device_get(res)
            if not isinstance(res, dict):
                raise TypeError("a setting's record must return a dict of named metrics")
            keep = min(group, total - g)
            steps = setting.estimator.num_steps
            parts.append({k: np.asarray(v)[:, :keep, :steps if k.startswith(EVENT_PREFIX) else (
                v.shape[2] if setting.final_only else steps + 1)] for k, v in res.items()})
        out = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
        if self.multi:
            from jax.experimental import multihost_utils

            bad = multihost_utils.process_allgather(bad, tiled=True)
        # the data check of the data program, per repetition and level (as _repetition's)
        out[NONFINITE_DATA] = np.broadcast_to(
            np.asarray(jax.device_get(bad))[:, None], (len(bad), total)).copy()
        return out


def _checked_sparsity(setting: Setting, program: Program) -> Program:
    """``program`` with the bound of the setting's runtime sparsity: its own ``s`` where the
    program names none; refused where the bound is below ``s`` or the form has no runtime
    sparsity."""
    s = _sparsity(setting)
    if s is None:
        if program.s_max is not None:
            raise ValueError(f"program.s_max: setting {setting.key!r}'s padded form takes no "
                             f"runtime sparsity; give s_max=None (got {program.s_max})")
        return program
    if program.s_max is None:
        return dataclasses.replace(program, s_max=s)
    if program.s_max < s:
        raise ValueError(f"program.s_max must be at least setting {setting.key!r}'s sparsity "
                         f"s = {s}; got {program.s_max}")
    return program


def _rep_indices(start: int, padded: int, sharding: Any) -> Any:
    """Repetitions ``start .. start + padded - 1`` as a kernel's first input: a host array, or
    with several devices (or processes) one placed by the repetition sharding."""
    idx = np.arange(start, start + padded, dtype=np.uint32)
    if sharding is None:
        return idx
    return jax.make_array_from_callback((padded,), sharding, lambda index: idx[index])


def _cache_size(kernel: Callable) -> int:
    """Compiled entries of a jitted kernel (0 for a wrapped one, e.g. a test's counter)."""
    size = getattr(kernel, "_cache_size", None)
    return size() if callable(size) else 0


def _take_levels(x: Any, pick: np.ndarray) -> np.ndarray:
    return np.asarray(x)[pick]


def _is_stored(store: Any, key: str, i: int, multi: bool) -> bool:
    """Whether chunk ``i`` of setting ``key`` is stored; under multi-process JAX (``multi``)
    every process takes process 0's answer (they must take the same branch)."""
    done = store is not None and store.has(key, i)
    if multi:
        from jax.experimental import multihost_utils

        done = bool(multihost_utils.broadcast_one_to_all(np.asarray(done)))
    return done


def _reuse_chunk(runner: _SettingRunner, store: Any, i: int, a: int, b: int, reps: int,
                 levels: Sequence[dict[str, float]], on_invalid: str = "raise"
                 ) -> dict[str, np.ndarray] | None:
    """Stored chunk ``i`` (repetitions ``a .. b - 1``) with the levels asked for, in their
    order: levels it lacks (the study grew) are computed, and the chunk is rewritten with
    every level. ``None`` on a non-zero process (only process 0 reads the store)."""
    key, primary = runner.setting.key, runner.primary
    labels = [level_label(lv) for lv in levels]
    arr = store.load(key, i) if primary else None
    growable = hasattr(store, "levels_of")
    stored = list(store.levels_of(key, i) or labels) if growable else labels
    missing = [lv for lv, lab in zip(levels, labels) if lab not in stored]
    if missing:  # the study grew: these levels' draws, for the stored repetitions
        new = runner.compute(a, b, missing, on_invalid)
        if primary:
            arr = {k: np.concatenate([arr[k], new[k]], axis=1) for k in arr}
            stored = stored + [level_label(lv) for lv in missing]
            store.save_levels(key, i, stored)
            store.save(key, i, arr)
    if not primary:
        return None
    if runner.tally is not None:
        runner.tally(reused=(min(b, reps) - a) * (len(levels) - len(missing)))
    if stored != labels:  # the levels asked for, in their order
        pick = np.array([stored.index(lab) for lab in labels])
        arr = {k: v[:, pick] for k, v in arr.items()}
    return arr


# --------------------------------------------------------------------------------------------
# The callback contract, checked before anything compiles
# --------------------------------------------------------------------------------------------


def describe_function(fn: Any) -> str:
    """``module.qualname (file:line)`` of a user's function, for one-line errors."""
    import inspect
    import os

    inner = fn
    while isinstance(inner, functools.partial):
        inner = inner.func
    inner = getattr(inner, "__func__", inner)
    name = getattr(inner, "__qualname__", None) or type(inner).__name__
    module = getattr(inner, "__module__", None)
    if module and not module.startswith("_dpjax_study_"):
        name = f"{module}.{name}"
    try:
        path = inspect.getsourcefile(inner)
        line = inner.__code__.co_firstlineno
    except (TypeError, AttributeError):
        return name
    if path is None:
        return name
    rel = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    return f"{name} ({rel}:{line})"


def describe_structure(tree: Any) -> str:
    """A pytree of shapes in one line: ``GLMData(x=f32[125,5], y=f32[125])``,
    ``tuple(f32[125,5], f32[125])``, ``{'error': f32[]}``."""
    if isinstance(tree, jax.ShapeDtypeStruct) or hasattr(tree, "shape") and hasattr(
            tree, "dtype"):
        dtype = np.dtype(tree.dtype) if not jnp.issubdtype(tree.dtype, jax.dtypes.prng_key) \
            else None
        short = ("key" if dtype is None else
                 {"f": "f", "i": "i", "u": "u", "b": "bool", "c": "c"}[dtype.kind])
        bits = "" if dtype is None or short == "bool" else str(dtype.itemsize * 8)
        return f"{short}{bits}[{','.join(str(d) for d in tree.shape)}]"
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        inner = ", ".join(f"{f}={describe_structure(v)}" for f, v in zip(tree._fields, tree))
        return f"{type(tree).__name__}({inner})"
    if isinstance(tree, (tuple, list)):
        inner = ", ".join(describe_structure(v) for v in tree)
        return f"{type(tree).__name__}({inner})"
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {describe_structure(v)}" for k, v in tree.items()) + "}"
    if tree is None:
        return "None"
    if dataclasses.is_dataclass(tree):
        inner = ", ".join(f"{f.name}={describe_structure(getattr(tree, f.name))}"
                          for f in dataclasses.fields(tree))
        return f"{type(tree).__name__}({inner})"
    return type(tree).__name__


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).strip().splitlines()[:1]) or type(exc).__name__
    text = text if len(text) <= 240 else text[:237] + "..."
    return f"{type(exc).__name__}: {text}"


def _model_of(estimator: Estimator) -> Any:
    """The model object an estimator's step closes over (one with a ``simulate`` method), if
    any: its ``simulate`` says which data type the estimator expects."""
    def scan(fn, depth=0):
        if depth > 2 or fn is None:
            return None
        if isinstance(fn, functools.partial):
            for obj in (*fn.args, *fn.keywords.values()):
                if callable(getattr(obj, "simulate", None)) and not callable(obj):
                    return obj
            return scan(fn.func, depth + 1)
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                obj = cell.cell_contents
            except ValueError:
                continue
            if callable(getattr(obj, "simulate", None)) and not isinstance(obj, type):
                return obj
            if callable(obj) and hasattr(obj, "__closure__"):
                found = scan(obj, depth + 1)
                if found is not None:
                    return found
        return None

    return scan(estimator.step) or scan(estimator.ledger)


def check_setting(setting: Setting) -> None:
    """Check a setting's callbacks against the estimator by abstract evaluation
    (``jax.eval_shape``: nothing is computed or compiled): ``simulate`` returns the data type
    the estimator's model expects, ``init`` returns start values the estimator's ``init``
    takes (not a state), a step keeps the state's structure, shapes and dtypes, and
    ``record`` returns a dict of scalar metrics. A mistake raises a one-line
    :class:`~dpjax.config.ConfigError` naming the user's function (qualified name and
    file:line) and the structure expected against the one it returned."""
    where = f"setting {setting.key!r}"
    sim, ini, rec = (describe_function(f) for f in (setting.simulate, setting.init,
                                                     setting.record))
    key = jax.random.key(0)
    try:
        truth = setting.example_truth()
    except Exception as exc:  # noqa: BLE001 - reported in one line
        raise ConfigError(f"{where}: drawing the truth fails ({_first_line(exc)})") from None
    block = _check_simulate(setting, key, truth, where, sim)
    params0, state = _check_init(setting, key, truth, where, ini)
    _check_step(setting, key, block, params0, state, where, sim, ini)
    _check_record(setting, state, truth, where, rec)


def _check_simulate(setting: Setting, key: jax.Array, truth: Any, where: str, sim: str) -> Any:
    """The shapes of one block of ``simulate``, of the type the estimator's model returns."""
    est, m = setting.estimator, setting.plan.block_size
    try:
        block = jax.eval_shape(lambda k: setting.simulate(k, m, truth), key)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{where}: simulate, {sim}, fails on (key, {m}, truth): "
                          f"{_first_line(exc)}") from None
    model = _model_of(est)
    if model is not None:
        try:
            expected = jax.eval_shape(lambda k: model.simulate(k, m, truth), key)
        except Exception:  # noqa: BLE001 - only a hint (the truth may not fit the model)
            expected = None
        if expected is not None and (jax.tree_util.tree_structure(expected)
                                     != jax.tree_util.tree_structure(block)):
            raise ConfigError(
                f"{where}: simulate, {sim}, returned {describe_structure(block)}; estimator "
                f"{est.name} expects {describe_structure(expected)} (what its model's "
                "simulate returns)")
    return block


def _check_init(setting: Setting, key: jax.Array, truth: Any, where: str, ini: str
                ) -> tuple[Any, Any]:
    """The shapes of ``init``'s start values and of the estimator's state built from them
    (start values, not a state)."""
    est = setting.estimator
    try:
        params0 = jax.eval_shape(lambda k: setting.init(k, truth), key)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{where}: init, {ini}, fails on (key, truth): "
                          f"{_first_line(exc)}") from None
    like = (f" (start values, e.g. shaped like the truth: {describe_structure(truth)})"
            if hasattr(truth, "shape") else " (the start values)")
    try:
        state = jax.eval_shape(est.init, params0)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{where}: init, {ini}, returned {describe_structure(params0)}, "
                          f"which estimator {est.name}'s init cannot take{like}: "
                          f"{_first_line(exc)}") from None
    if (type(params0) is type(state) and isinstance(params0, tuple)
            and hasattr(params0, "_fields")):
        raise ConfigError(f"{where}: init, {ini}, returned {describe_structure(params0)}, "
                          f"the estimator's state; it must return the values estimator "
                          f"{est.name} builds its state from{like}")
    return params0, state


def _check_step(setting: Setting, key: jax.Array, block: Any, params0: Any, state: Any,
                where: str, sim: str, ini: str) -> None:
    """One step on a batch of ``simulate``'s data keeps the state's structure, shapes and
    dtypes."""
    est = setting.estimator
    if est.batching == "disjoint":
        rows = setting.plan.num_records // est.num_steps
    else:
        rows = setting.plan.num_records
    data = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct((rows,) + tuple(x.shape[1:]), x.dtype), block)
    hp = jax.tree_util.tree_map(lambda x: x[0], setting.hparams())
    try:
        new_state, _ = jax.eval_shape(est.step, key, state, data, hp)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(
            f"{where}: estimator {est.name}'s step fails on the data of simulate, {sim} "
            f"({describe_structure(data)}), from the start values of init, {ini} "
            f"({describe_structure(params0)}): {_first_line(exc)}") from None
    same = (jax.tree_util.tree_structure(new_state) == jax.tree_util.tree_structure(state)
            and all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(
                jax.tree_util.tree_leaves(new_state), jax.tree_util.tree_leaves(state))))
    if not same:
        raise ConfigError(
            f"{where}: init, {ini}, returned {describe_structure(params0)}, from which "
            f"estimator {est.name} builds the state {describe_structure(state)}, but its step "
            f"returns {describe_structure(new_state)}; return start values of the shapes and "
            "dtypes the step keeps")


def _check_record(setting: Setting, state: Any, truth: Any, where: str, rec: str) -> None:
    """``record`` returns a dict of named scalar metrics."""
    try:
        metrics = jax.eval_shape(setting.record, state, truth)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{where}: record, {rec}, fails on (state, truth) with the state "
                          f"{describe_structure(state)}: {_first_line(exc)}") from None
    if not isinstance(metrics, dict) or not metrics or any(
            not isinstance(k, str) or getattr(v, "shape", None) != ()
            for k, v in metrics.items()):
        raise ConfigError(f"{where}: record, {rec}, returned {describe_structure(metrics)}; "
                          "it must return a dict of named scalar metrics, e.g. "
                          "{'error': f32[]}")


def event_structure(setting: Setting) -> Any:
    """The tree structure of one step's ``info.events`` (kinds, norms: the static part), read
    off the step's abstract evaluation; :func:`split_events` rebuilds events with it."""
    return jax.tree_util.tree_structure(_event_shapes(setting))


def _event_shapes(setting: Setting) -> Any:
    """One step's ``info.events`` by abstract evaluation (leaves ``ShapeDtypeStruct``)."""
    truth = setting.example_truth()
    data = jax.eval_shape(
        lambda k: setting.simulate(k, setting.plan.block_size, truth), jax.random.key(0))
    if setting.estimator.batching != "disjoint":
        data = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct((setting.plan.num_records,) + x.shape[1:], x.dtype),
            data)
    hp = jax.tree_util.tree_map(lambda x: x[0], setting.hparams())

    def one(key):
        key_init, key_step = jax.random.split(key)
        params0 = setting.init(key_init, truth)
        _, info = setting.estimator.step(key_step, setting.estimator.init(params0),
                                         jax.tree_util.tree_map(jnp.zeros_like, data), hp)
        return info.events

    return jax.eval_shape(one, jax.random.key(0))


def split_events(metrics: dict[str, np.ndarray], structure: Any
                 ) -> tuple[dict[str, np.ndarray], Any]:
    """``(metrics without the events, events)``: the events rebuilt with ``structure``, their
    arrays with axes ``(reps, L, T)`` (every entry one release). The data check's
    :data:`NONFINITE_DATA` is left out of the metrics too."""
    names = sorted((k for k in metrics if k.startswith(EVENT_PREFIX)),
                   key=lambda k: int(k[len(EVENT_PREFIX):]))
    rest = {k: v for k, v in metrics.items()
            if not k.startswith(EVENT_PREFIX) and k != NONFINITE_DATA}
    return rest, jax.tree_util.tree_unflatten(structure, [metrics[k] for k in names])


def probe_ledger(setting: Setting, index: int = 0) -> Any:
    """The ledger of level ``index`` before any run: events of one step from the starting
    value on one simulated block (:func:`dpjax.base.probe_events`), for estimators whose
    per-step events do not depend on the iterate. A study's results carry the ledger composed
    from the events its runs actually drew."""
    from dpjax.base import probe_events

    key_data, key_init = jax.random.split(jax.random.key(0))
    truth = setting.example_truth()
    m = (setting.plan.block_size if setting.estimator.batching == "disjoint"
         else setting.plan.num_records)
    block = setting.simulate(key_data, m, truth)
    hp = jax.tree_util.tree_map(lambda x: x[index], setting.hparams())
    events = probe_events(setting.estimator, block, setting.init(key_init, truth), hp)
    host_hp = setting.hparams_type(*(np.asarray(v, np.float64) for v in level_values(
        setting.hparams_type, setting.levels[index])))
    return setting.estimator.ledger(setting.n, host_hp, events)


def study_function(
    setting: Setting,
    *,
    reps: int,
    seed: int,
    data_mode: Literal["materialize", "stream"] = "materialize",
    num_devices: int = 1,
) -> Callable[[PyTree], PyTree]:
    """The study as a pure function of its hyperparameters, for ``jax.grad`` and ``jit``.

    Returns ``f(hparams) -> {metric: (reps, L, num_steps + 1)}`` where ``hparams`` has a leading
    level axis (as :meth:`Setting.hparams`). The data and noise keys are fixed (those of
    :func:`run_setting` for ``setting.levels``), so as the hyperparameters move the draws stay
    the same: common random numbers, which makes the Monte Carlo objective smooth in, e.g., the
    step size. Noise scales depend on the hyperparameters through the reparameterisation
    ``noise = scale * standard draw``, so gradients flow through them; the selections of NoisyHT
    (argmax) are piecewise constant.
    """
    kernel = make_kernel(setting.estimator, setting.simulate, setting.init, setting.record,
                         setting.plan, data_mode, num_devices, setting.draw_truth,
                         setting.final_only)
    data_key, noise_key = (jax.random.key_data(k)
                           for k in study_keys(seed, setting.key, setting.data_group))
    ids = jnp.asarray(setting.level_ids())
    truth = jnp.asarray(setting.fixed_truth)
    idx = jnp.arange(math.ceil(reps / num_devices) * num_devices, dtype=jnp.uint32)

    def f(hparams: PyTree) -> PyTree:
        out = kernel(idx, data_key, noise_key, truth, hparams, ids)
        return jax.tree_util.tree_map(lambda x: x[:reps], out)

    return f


def default_progress(total: int, desc: str) -> Any:
    """A tqdm bar on stderr if tqdm is installed, else a plain line per update."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with the [experiments] extra
        return _PlainProgress(total, desc)
    return tqdm(total=total, desc=desc, unit="rep", file=sys.stderr, leave=True)


class _PlainProgress:  # pragma: no cover - trivial fallback
    def __init__(self, total: int, desc: str) -> None:
        self.total, self.done, self.desc = total, 0, desc

    def update(self, k: int) -> None:
        self.done += k
        print(f"{self.desc}: {self.done}/{self.total}", file=sys.stderr)

    def close(self) -> None:
        pass
