"""NoisyHT ("peeling"): the private top-``s`` selection and release of the sparse papers, on
the floating-point path and, inside :func:`~dpjax.mechanisms.secure_noise`, exactly (both
described in :func:`noisy_hard_threshold`); :func:`hard_threshold` is its epsilon = inf limit.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import discrete_noise as dn
from dpjax.mechanisms.calibration import peeling_multiplier, peeling_scale
from dpjax.mechanisms.noise import laplace_noise
from dpjax.mechanisms.secure import _SECURE, PlannedEvent, _concrete
from dpjax.mechanisms.statistics import BoundedStatistic, PrivacyEvent, _event, _require_norm

__all__ = ["Peeled", "hard_threshold", "noisy_hard_threshold"]

class Peeled(NamedTuple):
    """Output of (noisy) hard thresholding."""

    value: jax.Array  # (d,) exactly s non-zeros (almost surely), zeros elsewhere
    # (s,) int32, selected coordinates in order of selection; with a runtime s (s_max=),
    # (s_max,) whose entries from s on are d: no coordinate (out of range, so a scatter in
    # JAX's default mode drops them, and `support < d` masks them)
    support: jax.Array
    event: PrivacyEvent | None = None  # the release's privacy event (None: exact top-s)


def _runtime_s(s: Any, s_max: Any, d: int, where: str) -> tuple[jax.Array, int]:
    """``(s as an int32 array, s_max)`` of a runtime-sparsity call: ``s_max`` a static int in
    ``[1, d]``; ``s`` an integer scalar, checked to lie in ``[1, s_max]`` where it is concrete
    (a traced ``s`` is the caller's to keep there: the padded programs read it off their
    plan)."""
    if isinstance(s_max, bool) or not isinstance(s_max, int | np.integer) \
            or not 1 <= s_max <= d:
        raise ValueError(f"{where}: s_max must be a static integer in [1, {d}]; got {s_max!r}")
    s_arr = jnp.asarray(s)
    if s_arr.ndim != 0 or not jnp.issubdtype(s_arr.dtype, jnp.integer):
        raise ValueError(f"{where}: a runtime s must be an integer scalar; got "
                         f"{s_arr.dtype} of shape {s_arr.shape}")
    if not isinstance(s_arr, jax.core.Tracer) and not 1 <= int(s_arr) <= s_max:
        raise ValueError(f"{where}: s must be an integer in [1, s_max = {s_max}]; got "
                         f"{int(s_arr)}")
    return s_arr.astype(jnp.int32), int(s_max)


def _static_s(s: jax.Array, s_max: int) -> int:
    """The event's (static) ``s`` of a runtime-``s`` release: ``s`` itself where it is concrete,
    else its bound ``s_max`` (the host that composes the ledger sets the runtime value:
    :mod:`dpjax.sweep` rebuilds a shared program's events with each setting's own ``s``)."""
    return s_max if isinstance(s, jax.core.Tracer) else int(s)


def hard_threshold(v: jax.Array, s: Any, *, s_max: int | None = None) -> Peeled:
    """Exact top-``s`` hard thresholding ``P_s(v)``: keep the ``s`` largest ``|v_j|``.

    Ties go to the lower index, as in :func:`noisy_hard_threshold` at epsilon = inf.

    ``s_max``: ``s`` is then a runtime integer (it may be traced) in ``[1, s_max]``: the top
    ``s_max`` are ranked and the first ``s`` kept, so the value equals the static call's and
    the ``(s_max,)`` support's first ``s`` entries are its support (the rest ``d``,
    no coordinate; see :class:`Peeled`).
    """
    if s_max is None:
        _, idx = jax.lax.top_k(jnp.abs(v), s)
        mask = jnp.zeros(v.shape, bool).at[idx].set(True)
        return Peeled(jnp.where(mask, v, jnp.zeros_like(v)), idx.astype(jnp.int32))
    d = v.shape[-1]
    s_arr, s_max = _runtime_s(s, s_max, d, "hard_threshold")
    _, idx = jax.lax.top_k(jnp.abs(v), s_max)
    support = jnp.where(jnp.arange(s_max) < s_arr, idx.astype(jnp.int32), jnp.int32(d))
    mask = jnp.zeros(v.shape, bool).at[support].set(True, mode="drop")
    return Peeled(jnp.where(mask, v, jnp.zeros_like(v)), support)


def noisy_hard_threshold(
    key: jax.Array, stat: BoundedStatistic, s: Any, epsilon: Any, delta: Any,
    calibration: str = "paper", *, s_max: int | None = None,
) -> Peeled:
    r"""NoisyHT, the "peeling" mechanism (Dwork, Su & Zhang 2018; spec 000 Alg 1, spec 003 Alg 3).

    For ``i = 1..s``: draw fresh ``w_i ~ Laplace(b)^d`` and add
    ``argmax_{j not in S} |v_j| + w_ij`` to ``S``; then release ``v_S + w~_S`` with fresh
    ``w~ ~ Laplace(b)^d``, where ``b = Delta_inf 2 sqrt(3 s log(1/delta)) / epsilon``.

    Privacy: (epsilon, delta)-DP under ``stat.relation`` if ``stat.sensitivity`` bounds the
    l-infinity change of ``v`` (Lemma 3.1 of spec 000 / Lemma 2 of spec 003). At epsilon = inf
    the noise is exactly zero and this is :func:`hard_threshold`.

    Inside :func:`secure_noise` (``secure=True`` fits) the same budget is released exactly,
    with no floating-point noise anywhere (host integers; needs concrete values):

    1. ``v`` is rounded to the public grid, ``k = to_grid(v, grid)`` (grid: the one given to
       :func:`secure_noise`, else the largest power of two at most ``Delta_inf / 1024``,
       coarsened while the scale below would exceed the discrete Laplace's range ``2^20``).
       Its l-infinity sensitivity is ``Delta^Z = ceil(Delta_inf / grid)``
       (:func:`~dpjax.discrete_noise.integer_sensitivity_linf`, exact, never below the real
       change of ``k``), and ``|k_j|`` moves by at most ``Delta^Z``.
    2. ``b^Z`` is the smallest float32 at least ``Delta^Z * peeling_multiplier(s, epsilon,
       delta)`` times the secure plan's noise factor ``kappa``
       (:func:`~dpjax.discrete_noise.peeling_scale_used`; :func:`dpjax.fit` solves ``kappa``
       so that the secure ledger delivers the request): at ``kappa = 1``, ``Delta^Z / b^Z``
       is at most the floating-point path's ``Delta_inf / b``.
    3. Each of the ``s`` rounds selects among the coordinates not yet selected by exact
       permute-and-flip on the scores ``|k_j|`` with coins ``Bernoulli(exp(-(q* - |k_j|) /
       b^Z))`` (:func:`~dpjax.discrete_noise.peeling_selection`): ``2 Delta^Z / b^Z``-DP
       (McKenna & Sheldon 2020, Thm 1, at ``epsilon = 2 Delta^Z / b^Z``), the same per-round
       epsilon as a report-noisy-max round with Laplace(``b``) noise at ``lambda / b``.
    4. ``k_S + Z_S`` is released with ``Z ~ DLap(b^Z)`` i.i.d. (exact discrete Laplace):
       each coordinate is ``Delta^Z / b^Z``-DP (``P(k + Z = y) / P(k' + Z = y) <=
       exp(|k - k'| / b^Z)``), ``s Delta^Z / b^Z`` for the ``s`` together; the output is
       ``grid * (k_S + Z_S)`` (post-processing of the exact integers).

    So the exact release is the composition of ``s`` mechanisms of ``2 r``-DP and ``s`` of
    ``r``-DP with ``r = Delta^Z / b^Z``: exactly the structure
    :func:`dpjax.accounting.peeling_epsilon` bounds (basic or advanced composition), at a ratio
    no larger than the floating-point path's, so it delivers at least the requested
    ``(epsilon, delta)``. Its event is ``"discrete-noisy-ht"`` (sensitivity ``Delta^Z`` of the
    declared bound, true sensitivity ``ceil(true / grid)``, scale ``b^Z``, grid units) and
    the ledger accounts it by the same :func:`~dpjax.accounting.peeling_epsilon`. The only
    inexactness is the discrete Laplace sampler's 32-bit range (an additive ``delta <
    1e-437``, :mod:`dpjax.discrete_noise`). At epsilon = inf no noise is drawn and the result
    is :func:`hard_threshold` of ``v`` (unrounded).

    Args:
        key: PRNG key; split into ``key_select`` (the s peeling rounds) and ``key_release``.
        stat: the statistic ``v`` (shape ``(d,)``) with an l-infinity sensitivity.
        s: the number of coordinates to release (static), ``1 <= s <= d``; with ``s_max``,
            a runtime integer scalar (it may be traced) in ``[1, s_max]``.
        epsilon, delta: the budget of this one release (arrays are fine).
        calibration: of ``b``, ``"paper"`` (the printed formula above) or ``"tight"`` (the
            smallest ``b`` the ledger's bound proves); see :func:`peeling_multiplier`.
        s_max: ``None`` (``s`` static) or a static bound on a runtime ``s``, ``1 <= s_max <=
            d``: one program serves every ``s`` up to it (the padded programs of
            :class:`dpjax.base.Padded`). The release is the static call's, draw for draw: the
            ``(s_max, d)`` selection noise is drawn and its first ``s`` rows are the static
            call's ``(s, d)`` draws (JAX's threefry is partitionable, the default: a draw of a
            larger shape extends a smaller one row by row, tested); the scale is computed from
            the runtime ``s``; the rounds from ``s`` on select nothing; the support has
            ``s_max`` entries, the first ``s`` the static call's and the rest ``d`` (no
            coordinate, see :class:`Peeled`). The event's ``s`` (static) is the runtime ``s``
            where it is concrete, else the bound ``s_max``: a host that composes a ledger
            from a traced call's events must set the runtime ``s``
            (``dataclasses.replace(event, s=s)``; :mod:`dpjax.sweep` rebuilds a shared
            program's events with each setting's own ``s``). The exact path (under
            :func:`secure_noise`) stays static: it runs on the host, so it needs a concrete
            ``s`` (a traced one is refused) and pads its support alike.

    Returns:
        :class:`Peeled` with exactly ``s`` non-zeros, the selected support and the release's
        :class:`PrivacyEvent`.
    """
    _require_norm(stat, "linf", "noisy_hard_threshold")
    v = jnp.asarray(stat.value)
    if v.ndim != 1:
        raise ValueError(f"noisy_hard_threshold needs a vector; got shape {v.shape}")
    d = v.shape[0]
    if s_max is not None:
        return _runtime_peeling(key, stat, v, s, s_max, epsilon, delta, calibration)
    if not 1 <= s <= d:
        raise ValueError(f"s must be an integer in [1, {d}]; got {s}")
    if _SECURE.get() is not None:
        return _secure_peeling(key, stat, s, epsilon, delta, calibration)
    b = peeling_scale(stat.sensitivity, s, epsilon, delta, calibration)
    key_select, key_release = jax.random.split(key)
    selection_noise = laplace_noise(key_select, (s, d), b, v.dtype)
    scores = jnp.abs(v)

    def peel(i, carry):
        mask, support = carry
        noisy = jnp.where(mask, -jnp.inf, scores + selection_noise[i])
        j = jnp.argmax(noisy)
        return mask.at[j].set(True), support.at[i].set(j.astype(jnp.int32))

    mask, support = jax.lax.fori_loop(
        0, s, peel, (jnp.zeros((d,), bool), jnp.zeros((s,), jnp.int32))
    )
    released = v + laplace_noise(key_release, (d,), b, v.dtype)
    event = _event("noisy-ht", stat, b, delta, s, dtype=v.dtype)
    return Peeled(jnp.where(mask, released, jnp.zeros_like(v)), support, event)


def _runtime_peeling(key: jax.Array, stat: BoundedStatistic, v: jax.Array, s: Any, s_max: int,
                     epsilon: Any, delta: Any, calibration: str) -> Peeled:
    """:func:`noisy_hard_threshold` with a runtime ``s`` bounded by ``s_max`` (its docstring)."""
    d = v.shape[0]
    s_arr, s_max = _runtime_s(s, s_max, d, "noisy_hard_threshold")
    if _SECURE.get() is not None:  # exact peeling runs on the host: a concrete s
        if isinstance(s_arr, jax.core.Tracer):
            raise ValueError("noisy_hard_threshold: the exact path (secure_noise) runs on the "
                             "host and needs a concrete s; got a traced one")
        s_int = int(s_arr)
        out = _secure_peeling(key, stat, s_int, epsilon, delta, calibration)
        pad = jnp.full((s_max - s_int,), d, jnp.int32)
        return out._replace(support=jnp.concatenate([out.support.astype(jnp.int32), pad]))
    b = peeling_scale(stat.sensitivity, s_arr, epsilon, delta, calibration)
    key_select, key_release = jax.random.split(key)
    # (s_max, d): its first s rows are the static call's (s, d) draws (partitionable threefry)
    selection_noise = laplace_noise(key_select, (s_max, d), b, v.dtype)
    scores = jnp.abs(v)

    def peel(i, carry):  # rounds i >= s select nothing
        mask, support = carry
        noisy = jnp.where(mask, -jnp.inf, scores + selection_noise[i])
        j = jnp.argmax(noisy)
        live = i < s_arr
        return (jnp.where(live, mask.at[j].set(True), mask),
                support.at[i].set(jnp.where(live, j.astype(jnp.int32), jnp.int32(d))))

    mask, support = jax.lax.fori_loop(
        0, s_max, peel, (jnp.zeros((d,), bool), jnp.full((s_max,), d, jnp.int32))
    )
    released = v + laplace_noise(key_release, (d,), b, v.dtype)
    event = _event("noisy-ht", stat, b, delta, _static_s(s_arr, s_max), dtype=v.dtype)
    return Peeled(jnp.where(mask, released, jnp.zeros_like(v)), support, event)


def _peeling_grid(sensitivity: float, multiplier: float) -> float:
    """The automatic grid of exact peeling: ``Delta_inf / grid`` in ``[D, 2 D)`` with
    ``D = min(1024, 2^18 / multiplier)`` (rounding adds at most 1/1024 to the sensitivity, and
    the scale ``ceil(Delta_inf / grid) * multiplier`` stays below the sampler's ``2^20``)."""
    target = min(1024.0, 2.0**18 / multiplier)
    e = math.floor(math.log2(sensitivity / target))
    return 2.0 ** min(max(e, -64), 64)


def _f32_down(x: float) -> float:
    """The largest float32 at most ``x`` (``x > 0``), as a host float."""
    v = np.float32(x)
    if float(v) > x:
        v = np.nextafter(v, np.float32(0.0))
    return float(v)


def _secure_peeling(key: jax.Array, stat: BoundedStatistic, s: int, epsilon: Any,
                    delta: Any, calibration: str = "paper") -> Peeled:
    """:func:`noisy_hard_threshold` inside :func:`secure_noise` (see its docstring)."""
    sens, true, eps, dl = _concrete(stat.sensitivity, stat.true, epsilon, delta)
    if not (eps > 0 and 0 < dl < 1):
        raise ValueError(f"peeling needs epsilon > 0 and delta in (0, 1); got epsilon = "
                         f"{eps:g}, delta = {dl:g}")
    mode = _SECURE.get()
    if mode.delta_factor != 1.0:
        dl = _f32_down(dl * mode.delta_factor)
    v = jnp.asarray(stat.value)
    out_dtype = jnp.asarray(0.0).dtype  # float64 under x64, else float32
    # float32 (float64 under x64), as the float path's events: Delta^Z <= 2^24 and b^Z (a
    # float32) are exact in both
    fl = lambda x: jnp.asarray(x, jnp.result_type(float))  # noqa: E731
    multiplier = float(peeling_multiplier(s, np.float64(eps), np.float64(dl), calibration))
    if multiplier == 0.0:  # epsilon = inf: no noise, exact top-s of v
        top = hard_threshold(v, s)
        event = PrivacyEvent("discrete-noisy-ht", fl(sens), fl(0.0), fl(true), fl(dl),
                             "linf", stat.relation, s)
        return Peeled(top.value, top.support, event)
    grid = _peeling_grid(sens, multiplier) if mode.grid is None else mode.grid
    sens_int = dn.integer_sensitivity_linf(sens, grid)
    dn._check_sensitivity_int(sens_int, "l-infinity sensitivity")
    true_int = dn.integer_sensitivity_linf(true, grid) if math.isfinite(true) else math.inf
    true_f32 = np.float32(true_int)
    if float(true_f32) < true_int:  # above 2^24: round up, never below the true bound
        true_f32 = np.nextafter(true_f32, np.float32(np.inf))
    b = dn.peeling_scale_used(sens_int, multiplier)
    if mode.noise_factor != 1.0:  # the secure plan's kappa (1 while planning), grid chosen first:
        # the smallest float32 at least b^Z kappa exactly, so never below the scale it planned
        target = Fraction(float(b)) * Fraction(mode.noise_factor)
        b = np.float32(float(target))
        if Fraction(float(b)) < target:
            b = np.nextafter(b, np.float32(np.inf))
        b = dn.peeling_scale_used(1, float(b))  # the same range checks (exact: b is float32)
    event = PrivacyEvent("discrete-noisy-ht", fl(sens_int), fl(b), fl(true_f32), fl(dl),
                         "linf", stat.relation, s)
    if mode.plan:  # nothing is drawn: the exact top-s of the rounded statistic and the event
        top = hard_threshold(dn.to_grid(v, grid).astype(out_dtype) * grid, s)
        fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(PrivacyEvent)}
        float_event = _event("noisy-ht", stat, peeling_scale(stat.sensitivity, s, epsilon, delta,
                                                              calibration), delta, s)
        return Peeled(top.value.astype(v.dtype), top.support,
                      PlannedEvent(**fields, float_event=float_event))
    key_select, key_release = jax.random.split(key)
    k = np.asarray(dn.to_grid(v, grid), np.int64)
    support = dn.peeling_selection(key_select, np.abs(k), s, b)
    z = np.asarray(dn.discrete_laplace(key_release, (s,), b), np.int64)
    # grid * (exact integer k_S + Z): post-processing of the exact release
    released = np.zeros(v.shape, np.float64)
    released[support] = (k[support] + z).astype(np.float64) * grid
    value = jnp.asarray(released.astype(out_dtype)).astype(v.dtype)
    return Peeled(value, jnp.asarray(support, jnp.int32), event)
