"""The floating-point-safe path: the same budgets through :mod:`dpjax.discrete_noise`.

Inside :func:`secure_noise` (what :func:`dpjax.fit` opens with ``secure=True``) the Laplace and
Gaussian mechanisms of :mod:`dpjax.mechanisms.noise` round the statistic to a public grid and
add exact integer noise (:func:`_secure_release` here), and peeling selects by exact
permute-and-flip (:mod:`dpjax.mechanisms.peeling`); every other noise draw raises
(:func:`_require_float_path`). :func:`secure_event` turns what a discrete release did into a
:class:`~dpjax.mechanisms.PrivacyEvent`, so the ledger composes it with the others.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from fractions import Fraction
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import discrete_noise as dn
from dpjax.mechanisms.statistics import BoundedStatistic, PrivacyEvent, _event

__all__ = ["NOISE_FACTOR_KINDS", "SECURE_KINDS", "PlannedEvent", "secure_active", "secure_event",
           "secure_noise"]

class _SecureMode(NamedTuple):
    grid: float | None  # the public grid step; None: per release (see secure_noise)
    noise_factor: float  # kappa > 0: every discrete noise parameter is kappa times the carried one
    plan: bool  # plan only: compute each release's noise parameter, draw nothing
    delta_factor: float = 1.0  # in (0, 1]: exact peeling's delta is its share times this,
    # rounded down to float32 (so per-step shares compose to at most the request; see
    # dpjax.base._secure_plan)


_SECURE: contextvars.ContextVar[_SecureMode | None] = contextvars.ContextVar(
    "dpjax_secure_noise", default=None)


#: the event kinds a secure run may release through: exact as implemented
SECURE_KINDS: tuple[str, ...] = ("discrete-laplace", "discrete-gaussian", "discrete-noisy-ht",
                                 "ldp-randomizer", "none")


#: the secure kinds whose noise the noise factor scales (exact peeling: its discrete Laplace
#: scale ``b^Z``, which sets both its selection rounds and its values, see
#: noisy_hard_threshold; its grid is chosen before the factor)
NOISE_FACTOR_KINDS: tuple[str, ...] = ("discrete-laplace", "discrete-gaussian",
                                       "discrete-noisy-ht")


@contextlib.contextmanager
def secure_noise(grid: float | None = None, *, noise_factor: float = 1.0):
    """Inside this block, :func:`laplace_mechanism`, :func:`gaussian_mechanism` and
    :func:`gaussian_mechanism_zcdp` release through :mod:`dpjax.discrete_noise`: the statistic
    is rounded to a public grid and exact integer noise is added (discrete Laplace for Laplace,
    discrete Gaussian for both Gaussian mechanisms), so no low-order bits of the output depend
    on the data (Mironov 2012). :func:`noisy_hard_threshold` (peeling) selects by exact
    permute-and-flip on the rounded scores and releases with discrete Laplace noise (see its
    docstring). Every other noise draw raises.

    Budgets carry over, then the noise is multiplied by ``noise_factor``: the Laplace mechanism
    at ``epsilon`` becomes the discrete Laplace at ``epsilon / noise_factor`` (pure DP); a
    Gaussian mechanism whose scale is ``sigma`` for sensitivity ``Delta`` becomes the discrete
    Gaussian at ``rho = (Delta / sigma)^2 / (2 noise_factor^2)`` (zCDP, Canonne, Kamath &
    Steinke 2020, Thm 4/14), for the integer sensitivity of the rounded statistic (slightly
    larger than ``Delta``, so the noise is slightly larger, never smaller). The events are
    discrete ones (:func:`secure_event`).

    With ``noise_factor = 1`` a Gaussian mechanism calibrated for (epsilon, delta) on the exact
    Gaussian curve keeps its rho, and rho-zCDP converted to (epsilon, delta) is looser than
    that curve: the release then proves a larger epsilon than requested (and a calibration
    looser than the secure accounting, e.g. Bun-Steinke's conversion, a smaller one).
    :func:`dpjax.fit` with ``secure=True`` therefore solves, before the run, the factor (above
    or below 1) with which its ledger delivers the request, and passes it here.

    Needs concrete values (a single release run eagerly, :func:`dpjax.fit` with
    ``secure=True``), not a jitted or vmapped sweep: the integer sensitivity is computed exactly
    on the host.

    Args:
        grid: the public grid step, a power of two; ``None``: per release, the largest power of
            two at most ``Delta / (64 sqrt(d))`` (rounding then adds at most ~1.6% to the
            l2 sensitivity); for peeling, at most ``Delta_inf / 1024``, coarser where the
            scale would leave the discrete Laplace's range (see :func:`noisy_hard_threshold`).
        noise_factor: ``kappa > 0``, a host number (default 1: the budgets carried over as
            they are); it scales the Laplace and Gaussian noise, not peeling's (whose
            composition is solved exactly on the grid). :func:`dpjax.fit` solves it so that
            the secure ledger delivers the request (above or below 1).
    """
    with _secure_mode(grid, noise_factor):
        yield


@contextlib.contextmanager
def _secure_mode(grid: float | None = None, noise_factor: float = 1.0, *, plan: bool = False,
                 delta_factor: float = 1.0):
    """:func:`secure_noise` with the private settings of a planned secure fit: ``plan`` (a
    release draws nothing: it returns the statistic rounded to its grid and a
    :class:`PlannedEvent`, what the secure release would do and the event the default path
    would record) and ``delta_factor`` in ``(0, 1]`` (exact peeling runs at its delta share
    times this factor, rounded down to float32; see :func:`dpjax.base._secure_plan`)."""
    if grid is not None:
        grid = dn._check_grid(grid)
    delta_factor = float(delta_factor)
    if not 0.0 < delta_factor <= 1.0:
        raise ValueError(f"delta_factor must lie in (0, 1]; got {delta_factor!r}")
    token = _SECURE.set(_SecureMode(grid, dn._check_noise_factor(noise_factor), plan,
                                    delta_factor))
    try:
        yield
    finally:
        _SECURE.reset(token)


@contextlib.contextmanager
def _secure_plan(grid: float | None = None, delta_factor: float = 1.0):
    """Like :func:`secure_noise` (factor 1), but a release draws nothing: it returns the
    statistic rounded to its grid and a :class:`PlannedEvent` (what the secure release would
    do, and the event the default path would record). For planning a secure run."""
    with _secure_mode(grid, 1.0, plan=True, delta_factor=delta_factor):
        yield


def secure_active() -> bool:
    """Whether the mechanisms release through the floating-point-safe path
    (inside :func:`secure_noise`, e.g. in :func:`dpjax.fit` with ``secure=True``)."""
    return _SECURE.get() is not None


@dataclasses.dataclass(frozen=True)
class PlannedEvent(PrivacyEvent):
    """The event of a planned secure release (noise factor 1; nothing drawn), with the event
    the default floating-point path records for the same call (``float_event``)."""

    float_event: Any = None


jax.tree_util.register_dataclass(
    PlannedEvent, data_fields=["sensitivity", "scale", "true_sensitivity", "delta",
                               "float_event"],
    meta_fields=["kind", "norm", "relation", "s", "log_constant", "calibration", "dtype"],
)


def _require_float_path(what: str) -> None:
    if _SECURE.get() is not None:
        raise ValueError(
            f"secure=True: {what} has no floating-point-safe path yet (only the Laplace, "
            "Gaussian and peeling mechanisms do; raw noise draws do not); use the default "
            "noise path for this estimator"
        )


def _auto_grid(sensitivity: float, size: int) -> float:
    e = math.floor(math.log2(sensitivity / (64.0 * math.sqrt(size))))
    return 2.0 ** min(max(e, -64), 64)


def _concrete(sensitivity: Any, *others: Any) -> tuple[float, ...]:
    """A secure release's host values (the sensitivity first, which must be finite and > 0);
    a traced value (a jitted or vmapped sweep) is refused with the way out."""
    try:
        values = tuple(float(v) for v in (sensitivity, *others))
    except jax.errors.ConcretizationTypeError:
        raise ValueError(
            "secure=True needs concrete values: fit one data set with dpjax.fit(..., "
            "secure=True) (run eagerly); jitted or vmapped sweeps use the fast path"
        ) from None
    if not (math.isfinite(values[0]) and values[0] > 0):
        raise ValueError(f"secure=True needs a finite positive sensitivity; got {values[0]:g} "
                         "(a private fit: finite epsilon or rho, finite clipping)")
    return values


def _secure_release(key: jax.Array, stat: BoundedStatistic, scale: Any, kind: str,
                    **float_event: Any) -> tuple[jax.Array, PrivacyEvent]:
    mode = _SECURE.get()
    sens, true = _concrete(stat.sensitivity, stat.true)
    value = jnp.asarray(stat.value)
    size = int(value.size)
    grid = _auto_grid(sens, size) if mode.grid is None else mode.grid
    sc = float(scale(sens))
    ratio = math.inf if sc == 0 else sens / sc  # epsilon or sqrt(2 rho); inf: no noise
    if kind == "laplace":
        dkind, budget = "discrete_laplace", ratio
        true_int = dn.integer_sensitivity_l1(true, grid, size) if math.isfinite(true) else math.inf
    else:
        dkind, budget = "discrete_gaussian", 0.5 * ratio**2
        true_int = (dn.integer_sensitivity_l2_sq(true, grid, size) if math.isfinite(true)
                    else math.inf)
    if mode.plan:  # nothing is drawn: the rounded statistic and the noise it would get
        noise = dn.secure_noise_parameters(dkind, size, sens, budget, grid)
        released = dn.to_grid(value, grid).astype(jnp.asarray(0.0).dtype) * grid
    elif kind == "laplace":
        released, noise = dn.secure_laplace_mechanism(key, value, sens, budget, grid,
                                                      mode.noise_factor)
    else:
        released, noise = dn.secure_gaussian_mechanism(key, value, sens, budget, grid,
                                                       mode.noise_factor)
    event = secure_event(noise, stat.relation, true_int, size)
    if mode.plan:
        fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(PrivacyEvent)}
        event = PlannedEvent(**fields, float_event=_event(kind, stat, scale(stat.sensitivity),
                                                          **float_event))
    return released.astype(value.dtype), event


def _f32_sqrt(m: Any, up: bool) -> np.float32:
    """The float32 nearest ``sqrt(m)`` on the safe side (``m`` an exact integer or float32):
    at least the root if ``up``, at most it otherwise."""
    exact = Fraction(m) if not isinstance(m, np.floating) else Fraction(float(m))
    v = np.float32(math.sqrt(float(exact)))
    step = np.float32(np.inf if up else -np.inf)
    while (Fraction(float(v)) ** 2 < exact) if up else (Fraction(float(v)) ** 2 > exact):
        v = np.nextafter(v, step)
    return v


def secure_event(noise: Any, relation: str = "replace-one", true_sensitivity: Any = None,
                 size: int | None = None) -> PrivacyEvent:
    """A secure release (:class:`dpjax.discrete_noise.SecureNoise`) as a
    :class:`PrivacyEvent` (sensitivity in grid units), so :mod:`dpjax.accounting` composes it
    with the others: the discrete Laplace gives ``Delta_1 / t``-DP, the discrete Gaussian
    ``Delta_2^2 / (2 sigma^2)``-zCDP, and on a scalar statistic (``size = 1``) its exact
    privacy loss distribution. ``true_sensitivity`` (default: the sensitivity) is in the
    units of ``noise.sensitivity`` (squared for the Gaussian). ``size``: the number of
    coordinates of the statistic, recorded as the discrete Gaussian event's ``s`` (``None``:
    not recorded, ``s = 0``, which the ledger treats as a vector). Concrete values are stored on
    the safe side of float32 (sensitivities rounded up, the Gaussian's ``sigma`` down), so the
    ledger never reads a weaker noise than the one used. (Built here, not in
    :mod:`dpjax.discrete_noise`, which imports nothing from the mechanisms.)"""
    true = noise.sensitivity if true_sensitivity is None else true_sensitivity
    param = noise.noise
    try:
        param = np.float32(np.asarray(param))
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        param = None
    if noise.kind == "discrete_laplace":
        kind, norm = "discrete-laplace", "l1"
        sens, tr = np.float32(noise.sensitivity), np.float32(true)  # integers <= 2^24: exact
        scale = jnp.asarray(noise.noise, jnp.float32) if param is None else param
    else:
        kind, norm = "discrete-gaussian", "l2"
        sens = _f32_sqrt(noise.sensitivity, up=True)
        tr = np.float32(np.inf) if math.isinf(true) else _f32_sqrt(true, up=True)
        if param is None:
            scale = jnp.sqrt(jnp.asarray(noise.noise, jnp.float32))
        elif np.isfinite(param) and param > 0:
            scale = _f32_sqrt(param, up=False)
        else:
            scale = np.sqrt(param)  # 0 (no noise) or NaN
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    dim = 1 if kind == "discrete-laplace" else (0 if size is None else int(size))
    return PrivacyEvent(kind, f(sens), f(scale), f(tr), jnp.zeros((), jnp.float32), norm,
                        relation, dim)
