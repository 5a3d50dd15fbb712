"""Input validation at the public (host) boundary.

Jitted kernels cannot raise on values, so every public entry point validates its concrete
inputs here first: nothing is computed on invalid input, and each error names the parameter and
the range it must lie in.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import typing
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import numpy as np


class ConfigError(ValueError):
    """An invalid input at the public boundary (a ``--set key=value``, an output directory, a
    study that cannot fit): ``dpjax run`` prints it as one line, ``dpjax: error: ...``, and
    exits with status 2."""

__all__ = [
    "DPJaxWarning",
    "TracedFitError",
    "check_array",
    "check_budget",
    "check_choice",
    "check_hparams",
    "check_xy",
    "check_delta",
    "check_epsilon",
    "check_inf_only_at_inf_epsilon",
    "check_int_in_range",
    "check_noise_inputs",
    "check_not_traced",
    "check_positive",
    "check_rho",
    "check_start",
    "check_truncation",
    "host_only",
    "resolve_delta",
]


class DPJaxWarning(UserWarning):
    """Base class of the warnings dpjax emits about privacy or numerics."""


def _as_float_array(value: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise TypeError(f"{name} must be a real number or array of real numbers") from exc
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise TypeError(
            f"{name} must be a real number or array of real numbers; got dtype {arr.dtype}"
        )
    return arr.astype(np.float64)


def check_epsilon(epsilon: Any, name: str = "epsilon") -> np.ndarray:
    """Epsilon must lie in (0, inf]; inf means no privacy (exactly zero noise)."""
    arr = _as_float_array(epsilon, name)
    if np.isnan(arr).any() or (arr <= 0).any():
        raise ValueError(
            f"{name} must be > 0 (use float('inf') for the non-private limit); got {_show(arr)}"
        )
    return arr


def check_delta(delta: Any, name: str = "delta") -> np.ndarray:
    """Delta must lie in the open interval (0, 1)."""
    arr = _as_float_array(delta, name)
    if np.isnan(arr).any() or (arr <= 0).any() or (arr >= 1).any():
        raise ValueError(f"{name} must lie in the open interval (0, 1); got {_show(arr)}")
    return arr


def check_rho(rho: Any, name: str = "rho") -> np.ndarray:
    """rho (zCDP) must lie in (0, inf]; inf means no privacy."""
    return check_epsilon(rho, name)


def check_hparams(hparams: Any) -> None:
    """The checks :func:`dpjax.fit` makes on any estimator's hyperparameters (a NamedTuple):
    the budgets by name -- ``epsilon*`` and ``rho*`` in (0, inf], ``delta*`` in (0, 1) -- and
    the fields the type lists in ``POSITIVE`` in (0, inf]. A budget field the type lists in
    ``DERIVED`` (computed on the host from the others) may be NaN throughout (not solved: the
    estimator that reads it says what it does then). (The ``fit_*`` wrappers check the rest of
    their own arguments before they build the hyperparameters.)"""
    fields = getattr(hparams, "_fields", None)
    if fields is None:
        return
    positive = tuple(getattr(type(hparams), "POSITIVE", ()))
    unsolved = tuple(getattr(type(hparams), "DERIVED", ()))
    for name, value in zip(fields, hparams):
        label = f"hparams.{name}"
        if name in unsolved and np.isnan(_as_float_array(value, label)).all():
            continue
        if name.startswith(("epsilon", "rho")):
            check_epsilon(value, label)
        elif name.startswith("delta"):
            check_delta(value, label)
        elif name in positive:
            check_positive(value, label, allow_inf=True)


def check_choice(value: Any, name: str, choices: Sequence[Any]) -> Any:
    """``value`` must be one of ``choices`` (a variant name, a calibration, a policy)."""
    if value not in tuple(choices):
        raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}")
    return value


def check_positive(value: Any, name: str, *, allow_inf: bool = False) -> np.ndarray:
    """A strictly positive real (step sizes, scales); finite unless ``allow_inf``."""
    arr = _as_float_array(value, name)
    bad = np.isnan(arr) | (arr <= 0)
    if not allow_inf:
        bad |= np.isinf(arr)
    if bad.any():
        rng = "(0, inf]" if allow_inf else "(0, inf) and finite"
        raise ValueError(f"{name} must lie in {rng}; got {_show(arr)}")
    return arr


def check_truncation(truncation: Any, epsilon: Any, name: str = "truncation") -> np.ndarray:
    """A truncation level in (0, inf]; inf (no truncation) only where epsilon is inf.

    Without truncation the statistic has unbounded sensitivity, so any finite epsilon would need
    infinite noise.
    """
    t = check_positive(truncation, name, allow_inf=True)
    check_inf_only_at_inf_epsilon(
        t, epsilon,
        f"{name} = inf (no truncation) has unbounded sensitivity and is allowed only with "
        "epsilon = inf; give a finite truncation level for a private run",
    )
    return t


def check_inf_only_at_inf_epsilon(value: Any, epsilon: Any, message: str) -> None:
    """Raise ``ValueError(message)`` where ``value`` is inf at a finite ``epsilon`` (the two
    broadcast together): an unbounded sensitivity would need infinite noise at any finite
    epsilon."""
    v_b, eps_b = np.broadcast_arrays(np.asarray(value, dtype=np.float64),
                                     np.asarray(epsilon, dtype=np.float64))
    if (np.isinf(v_b) & np.isfinite(eps_b)).any():
        raise ValueError(message)


def check_int_in_range(
    value: Any, name: str, low: int, high: int | None = None
) -> int:
    """An integer in [low, high] (high inclusive; None for no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer; got {type(value).__name__}")
    v = int(value)
    if v < low or (high is not None and v > high):
        rng = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an integer {rng}; got {v}")
    return v


def check_array(
    value: Any,
    name: str,
    *,
    ndim: int | None = None,
    shape: Sequence[int | None] | None = None,
    allow_bool: bool = False,
    on_invalid: str = "raise",
) -> np.ndarray:
    """A finite real array of the given rank/shape (None in ``shape`` matches any size).

    ``on_invalid="clip"`` (private data on a real release) checks the type and the shape only:
    the values are left to the estimator, whose bounded statistics map non-finite entries to
    bounded ones (:func:`dpjax.mechanisms.sanitize`) and clip everything to the declared bounds.
    An error that depends on the values would itself release whether the data hold a bad
    record (and the count of bad entries would release more)."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover
        raise TypeError(f"{name} must be an array of real numbers") from exc
    if arr.dtype.kind == "b" and not allow_bool:
        raise TypeError(f"{name} must be a real array; got a boolean array")
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{name} must be a real array of a NumPy numeric dtype (float16, "
                        f"float32, float64 or an integer); got dtype {arr.dtype}"
                        + (" (an ml_dtypes type NumPy does not count as a number): convert it, "
                           "e.g. np.asarray(x, np.float32)" if arr.dtype.kind == "V" else ""))
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s); got shape {arr.shape}")
    if shape is not None:
        if arr.ndim != len(shape) or any(
            s is not None and s != a for s, a in zip(shape, arr.shape)
        ):
            want = tuple("*" if s is None else s for s in shape)
            raise ValueError(f"{name} must have shape {want}; got {arr.shape}")
    if check_on_invalid(on_invalid) == "raise" and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name} must be finite; it has {bad} NaN or infinite entries")
    return arr


def check_xy(x: Any, y: Any, on_invalid: str = "raise", allow_bool_y: bool = False
             ) -> tuple[np.ndarray, np.ndarray]:
    """A regression data set: ``x`` a real ``(n, d)`` array with ``n, d >= 1`` and ``y`` a real
    ``(n,)`` array (finite unless ``on_invalid="clip"``)."""
    x = check_array(x, "data.x", ndim=2, on_invalid=on_invalid)
    y = check_array(y, "data.y", ndim=1, allow_bool=allow_bool_y, on_invalid=on_invalid)
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"data.x must have at least one row and column; got {x.shape}")
    if y.shape[0] != x.shape[0]:
        raise ValueError(
            f"data.y must have one entry per row of data.x ({x.shape[0]}); got {y.shape[0]}"
        )
    return x, y


ON_INVALID: tuple[str, ...] = ("raise", "clip")


def check_on_invalid(on_invalid: str) -> str:
    """The policy for non-finite and out-of-range records: ``"raise"`` (the default: right for
    simulations, where a bad record is a bug) or ``"clip"`` (real data: every value is mapped
    into the declared bounds inside the estimator, and nothing depends on it before)."""
    return check_choice(on_invalid, "on_invalid", ON_INVALID)


def check_scalar(value: Any, name: str) -> float:
    """A (checked) hyperparameter of a single fit as a float: grids belong to sweeps."""
    if np.ndim(value):
        raise ValueError(f"{name} must be a scalar for a single fit; use dpjax.sweep for grids")
    return float(value)


def check_budget(epsilon: Any, delta: Any, n: int, stacklevel: int = 4, *,
                 allow_1_over_n: bool = False) -> tuple[float, float]:
    """One fit's ``(epsilon, delta)``: epsilon a scalar in (0, inf], delta by
    :func:`resolve_delta` (default ``1/(2n)``). Warns (:class:`DPJaxWarning`) when epsilon is
    below :data:`TINY_EPSILON`: legal, but the noise (of scale about 1/epsilon) then swamps
    the estimate (epsilon = 1e-12 gives estimates around 1e12)."""
    eps = check_scalar(check_epsilon(epsilon), "epsilon")
    if eps < TINY_EPSILON:
        warnings.warn(
            f"epsilon = {eps:g} < {TINY_EPSILON:g}: the noise, of scale about 1/epsilon, will "
            "swamp the estimate (is epsilon in the right units? epsilon = 1 is a common "
            "budget)", DPJaxWarning, stacklevel=max(stacklevel, _user_stacklevel()))
    return eps, resolve_delta(delta, n, private=math.isfinite(eps), stacklevel=stacklevel + 1,
                              allow_1_over_n=allow_1_over_n)


#: Below this epsilon a ``fit_*`` warns that its noise swamps the estimate (it still runs).
TINY_EPSILON = 1e-3

#: The one delta policy of every ``fit_*`` (README, "Privacy notes"): ``delta`` is keyword-only
#: and defaults to ``1/(2n)``, with ``n`` the records (the users of a local-DP fit); for a zCDP
#: fit it is the delta of the ledger's (epsilon, delta) conversion. The papers' experiments
#: differ (1/(2n) in 000 and 003, 1/n in 002, 1e-5 in 004): pass theirs to reproduce them.
DEFAULT_DELTA_RULE = "1/(2n)"


def resolve_delta(delta: Any, n: int, *, private: bool = True, stacklevel: int = 3,
                  allow_1_over_n: bool = False) -> float:
    """One fit's delta: ``None`` gives the default ``1/(2n)`` (:data:`DEFAULT_DELTA_RULE`); a
    given value must be a scalar in (0, 1). Warns (``private`` fits) when ``delta >= 1/n``
    (``> 1/n`` with ``allow_1_over_n``, for the papers whose experiments use ``delta = 1/n``),
    which permits releasing a record outright."""
    delta = 1.0 / (2.0 * n) if delta is None else delta
    delta = check_scalar(check_delta(delta), "delta")
    if private and (delta > 1.0 / n or (delta == 1.0 / n and not allow_1_over_n)):
        warnings.warn(
            f"delta = {delta:g} {'>' if delta > 1.0 / n else '='} 1/n = {1.0 / n:g}: such a "
            "delta permits releasing a record outright; the usual choice is delta = 1/(2n) or "
            "smaller", DPJaxWarning, stacklevel=max(stacklevel, _user_stacklevel()),
        )
    return delta


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside the dpjax package (the user's call), so
    a warning points at the caller's line however many dpjax layers lie in between."""
    import os
    import sys as _sys

    root = os.path.dirname(os.path.abspath(__file__))
    frame, level = _sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame, level = frame.f_back, level + 1
    return level


class TracedFitError(TypeError):
    """A ``fit_*`` or :func:`dpjax.fit` called on traced values (under ``jax.jit``,
    ``jax.vmap``, ``jax.grad``, ...): fits run on the host."""


_TRACEABLE = (
    "the traceable entry points are dpjax.base.run(estimator, key, data, state, hparams) for "
    "one run (jit, vmap and grad go through it; estimator.ledger(n, hparams, events) composes "
    "the ledger from its events on the host) and the sweep for studies over repetitions and "
    "privacy levels (dpjax.sweep.study_function, one compiled kernel per shape; dpjax.study "
    "runs whole experiments)")


def check_not_traced(entry: str, *values: Any) -> None:
    """Refuse traced inputs to a host entry point with a message that names the traceable ones.

    A fit validates concrete values, raises on them, and builds its privacy ledger on the host
    from the noise scales it drew, so it cannot run inside a JAX transformation (where it would
    end in a raw ``TracerArrayConversionError``)."""
    import jax

    leaves = jax.tree_util.tree_leaves(values)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        raise TracedFitError(
            f"{entry} was called on traced values (under jax.jit, jax.vmap, jax.grad or "
            "another JAX transformation): a fit checks concrete inputs and builds its privacy "
            f"ledger on the host, so it cannot be traced; {_TRACEABLE}")


_F = TypeVar("_F", bound=Callable[..., Any])


def host_only(fn: _F) -> _F:
    """Decorate a public ``fit_*``: :func:`check_not_traced` on all its arguments first, before
    any host conversion."""
    entry = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_not_traced(entry, args, kwargs)
        return fn(*args, **kwargs)

    return cast(_F, wrapper)


def check_start(beta0: Any, d: int, s: int | None = None, s_name: str = "s") -> np.ndarray:
    """A data-independent start of shape ``(d,)`` (default zeros) with at most ``s`` non-zeros
    (sparse estimators)."""
    beta0 = np.zeros(d, np.float32) if beta0 is None else check_array(beta0, "beta0", shape=(d,))
    nnz = int(np.count_nonzero(beta0))
    if s is not None and nnz > s:
        raise ValueError(f"beta0 must have at most {s_name} = {s} non-zeros; it has {nnz}")
    return beta0


def check_noise_inputs(name: str, value: Any, sensitivity: Any, total_bound: Any,
                       dtype: Any = np.float32, scale: Any = None) -> None:
    """Refuse a private level whose noise would silently degenerate, before anything runs.

    A check on public values only (it leaks nothing): ``sensitivity`` is the one the noise of
    the release is calibrated from, ``total_bound`` the largest magnitude the privatised
    statistic can reach (e.g. ``n`` times the per-record bound of a sum). In ``dtype`` (where
    the kernels compute), a sensitivity that is zero, subnormal (XLA on CPU flushes it, and
    the noise scale with it, to zero) or NaN means no noise, and a sensitivity or a total
    beyond the dtype's maximum makes the statistic overflow (the message says which way to
    move ``name``). ``name`` and ``value`` are the hyperparameter the user set, named in the
    message. ``scale``, if given, is the noise scale the release will draw (from the same
    public values): it must be a normal number of ``dtype``, the dtype the noise is drawn in,
    or the draw flushes it to zero.

    Every refusal here depends on public values only, so whether a fit is refused never
    depends on the data (a refusal that did would itself leak).
    """
    import jax.numpy as jnp  # ml_dtypes' finfo (bfloat16) through jnp

    fi = jnp.finfo(dtype)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        sens = np.asarray(sensitivity, np.float64)
        total = np.asarray(total_bound, np.float64)
    if not (sens <= float(fi.max)).all() and not np.isnan(sens).any():
        raise ValueError(
            f"{name} = {_show(np.asarray(value, np.float64))} gives a sensitivity of "
            f"{_show(sens)}, beyond the largest {np.dtype(dtype).name} ({float(fi.max):g}): "
            f"the statistic would overflow; lower {name}")
    if not (np.isfinite(sens).all() and (sens >= fi.tiny).all()):
        raise ValueError(
            f"{name} = {_show(np.asarray(value, np.float64))} gives a sensitivity of "
            f"{_show(sens)}, zero or subnormal in {np.dtype(dtype).name} (smallest normal "
            f"{float(fi.tiny):g}): the noise calibrated from it would be zero and the release "
            f"not private; raise {name}")
    if scale is not None:
        sc = np.asarray(scale, np.float64)
        if not (np.isfinite(sc).all() and (sc >= float(fi.tiny)).all()):
            raise ValueError(
                f"{name} = {_show(np.asarray(value, np.float64))} gives a noise scale of "
                f"{_show(sc)}, zero, subnormal or not finite in {np.dtype(dtype).name}, the "
                f"dtype the noise is drawn in (smallest normal {float(fi.tiny):g}): it would "
                f"be flushed to zero and the release not private; raise {name} or lower "
                "epsilon")
    if not (total <= float(fi.max)).all():
        raise ValueError(
            f"{name} = {_show(np.asarray(value, np.float64))} lets the privatised statistic "
            f"reach {_show(total)}, beyond the largest {np.dtype(dtype).name} "
            f"({float(fi.max):g}): it would overflow; lower {name}")


def _show(arr: np.ndarray) -> str:
    if arr.ndim == 0:
        return repr(float(arr))
    flat = arr.ravel()
    if flat.size <= 6:
        return "[" + ", ".join(f"{float(v):g}" for v in flat) + "]"
    return f"array of shape {arr.shape} (min {np.nanmin(flat):g}, max {np.nanmax(flat):g})"


# --------------------------------------------------------------------------------------------
# Command-line mistakes: one line, exit status 2 (dpjax.cli and dpjax.demo)
# --------------------------------------------------------------------------------------------


class UsageError(Exception):
    """A command-line mistake, reported as one line ``dpjax: error: ...`` with exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, whose errors are one line (not the usage block) and return status 2."""

    def error(self, message: str) -> typing.NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def fail(message: object) -> int:
    """Print ``dpjax: error: MESSAGE`` as one line on stderr; returns the exit status 2."""
    print(f"dpjax: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2
