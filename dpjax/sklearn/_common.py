"""What the estimators of :mod:`dpjax.sklearn` share: keys from ``random_state``, the delta
default, the public bounds and the scaling they allow, clones that share an accountant."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, clone

from dpjax import _validate

#: the largest seed a ``random_state`` may be (a JAX key is seeded from 32 bits here: a larger
#: int would be truncated silently)
MAX_SEED = 2**32 - 1
#: the default delta's ceiling: ``min(DELTA_CAP, 1/(2n))``
DELTA_CAP = 1e-6


def key_from_random_state(random_state: Any) -> tuple[int, str]:
    """``(seed, note)``: the integer the fit's JAX key is built from (``jax.random.key(seed)``),
    deterministically from ``random_state``.

    An int in ``[0, 2**32 - 1]`` is the seed itself. ``None`` draws a seed from NumPy's
    default entropy source (``np.random.SeedSequence()``, the operating system's), so each fit
    draws fresh noise; the note says so, and ``seed_`` keeps it. Any other value (a NumPy
    ``RandomState`` or ``Generator``) is refused: a JAX key is not a NumPy stream.
    """
    if random_state is None:
        seed = int(np.random.SeedSequence().generate_state(1, np.uint32)[0])
        return seed, (f"random_state=None: the noise key jax.random.key({seed}) was seeded from "
                      "NumPy's default entropy (np.random.SeedSequence())")
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        seed = int(random_state)
        if 0 <= seed <= MAX_SEED:
            return seed, f"random_state={seed}: the noise key is jax.random.key({seed})"
    raise ValueError(f"random_state must be None or an int in [0, {MAX_SEED}]; got "
                     f"{random_state!r}")


def resolve_delta(delta: Any, n: int) -> float:
    """The fit's delta: as given (in (0, 1)), or by default ``min(1e-6, 1/(2n))``."""
    if delta is None:
        return min(DELTA_CAP, 1.0 / (2.0 * n))
    return float(_validate.check_delta(delta))


def check_epsilon(epsilon: Any) -> float:
    return float(_validate.check_epsilon(epsilon))


def missing(name: str, what: str) -> ValueError:
    return ValueError(f"{name} must be given: {what} (a public bound, never read from the data)")


def box(bounds: Any, name: str, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``bounds = (lower, upper)``, each a number or ``d`` numbers (diffprivlib's form), as two
    float64 arrays of shape ``(d,)`` with ``lower < upper``, finite."""
    if bounds is None:
        raise missing(name, "a pair (lower, upper), numbers or one per column")
    try:
        lo, hi = bounds
        lo = np.broadcast_to(np.asarray(lo, np.float64), (d,)).copy()
        hi = np.broadcast_to(np.asarray(hi, np.float64), (d,)).copy()
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (lower, upper) of numbers or of {d} numbers; "
                         f"got {bounds!r}") from None
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
        raise ValueError(f"{name} must have finite lower < upper in every column; got {bounds!r}")
    return lo, hi


def scalar_box(bounds: Any, name: str) -> tuple[float, float]:
    lo, hi = box(bounds, name, 1)
    return float(lo[0]), float(hi[0])


def positive(value: Any, name: str, what: str) -> float:
    if value is None:
        raise missing(name, what)
    v = float(_validate.check_positive(value, name))
    return v


def clip_rows_l2(x: np.ndarray, bound: float) -> np.ndarray:
    """Each row projected onto the l2 ball of radius ``bound`` (a per-record map)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norms > bound, bound / norms, 1.0)
    return x * factor


def annotate(ledger: Any, *notes: str) -> Any:
    """The ledger with ``notes`` appended (what the wrapper chose, and why)."""
    return dataclasses.replace(ledger, notes=tuple(ledger.notes) + tuple(notes))


class DPEstimatorBase(BaseEstimator):
    """The shared behaviour of the private estimators."""

    def __sklearn_clone__(self):
        """A clone with the same ``accountant`` object (the budget of one data set is one
        budget: scikit-learn's default would deep-copy it, and every clone -- a
        ``GridSearchCV`` candidate, a ``Pipeline`` step -- would spend a fresh copy)."""
        params = self.get_params(deep=False)
        acct = params.pop("accountant", None)
        new = type(self)(**{k: clone(v, safe=False) for k, v in params.items()})
        if "accountant" in self.get_params(deep=False):
            new.set_params(accountant=acct)
        if hasattr(self, "_sklearn_output_config"):
            new._sklearn_output_config = dict(self._sklearn_output_config)
        return new

    def _seed(self) -> tuple[int, str]:
        return key_from_random_state(self.random_state)
