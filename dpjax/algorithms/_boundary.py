"""The fit boundary every family shares: the checks and preparation at the top of a ``fit_*``.

One place for what each private fit does before it builds its estimator: the key, the model's
type, the ``on_invalid`` policy and the data, ``n``, the number of iterations, the budget (the
one delta policy, documented on the privacy page) and the step size. The family-specific
checks (truncation, sparsity, clipping) stay in the families.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from dpjax import _validate
from dpjax.base import as_key


class FitInputs(NamedTuple):
    """The checked arguments of one fit."""

    key: jax.Array | None  # the typed key (None for a non-private fit, which draws nothing)
    data: Any  # the validated data set
    n: int  # records (users of a local-DP fit)
    num_iterations: int
    epsilon: float  # a scalar in (0, inf] (inf for a fit budgeted in rho)
    delta: float  # in (0, 1): the fit's delta, or the delta of its zCDP conversion


def check_model(model: Any, model_type: type, what: str) -> None:
    """``model`` must be a ``model_type``; ``what`` names it for the message."""
    if not isinstance(model, model_type):
        raise TypeError(f"model must be {what}; got {type(model).__name__}")


def checked_inputs(
    key: Any,
    data: Any,
    validate: Callable[[Any, str], Any],
    num_records: Callable[[Any], int],
    *,
    on_invalid: str,
    num_iterations: int | None,
    default_iterations: Callable[[int], int] | None = None,
    at_most_n: bool = False,
    iterations_name: str = "num_iterations",
    epsilon: Any = None,
    delta: Any = None,
    private: bool = True,
    eta: Any = None,
    allow_1_over_n: bool = False,
) -> FitInputs:
    """Check and prepare the arguments every fit shares, in this order: the key (``None`` for a
    non-private fit), ``on_invalid``, the data (``validate(data, on_invalid)``), the number of
    iterations in ``[1, inf)`` (``[1, n]`` with ``at_most_n``; ``None`` gives
    ``default_iterations(n)``), the budget -- ``epsilon`` in (0, inf] with ``delta``
    by the one delta policy of the privacy page (default ``1/(2n)``), or, with ``epsilon=None``
    (a zCDP fit), only ``delta`` for the conversion -- and the step size ``eta`` > 0.

    Args:
        num_records: ``n`` of the validated data (records; users of a local-DP fit).
        private: whether the delta warning applies (a zCDP fit at rho = inf is not private).
    """
    key = None if key is None else as_key(key)
    _validate.check_on_invalid(on_invalid)
    data = validate(data, on_invalid)
    n = int(num_records(data))
    if num_iterations is None and default_iterations is not None:
        num_iterations = default_iterations(n)
    T = _validate.check_int_in_range(num_iterations, iterations_name, 1, n if at_most_n else None)
    if epsilon is None:
        eps = float("inf")
        dl = _validate.resolve_delta(delta, n, private=private, stacklevel=5,
                                     allow_1_over_n=allow_1_over_n)
    else:
        eps, dl = _validate.check_budget(epsilon, delta, n, 5, allow_1_over_n=allow_1_over_n)
    if eta is not None:
        _validate.check_scalar(_validate.check_positive(eta, "eta"), "eta")
    return FitInputs(key, data, n, T, eps, dl)


def host_solved(fn: Callable[[float], float], level: Any) -> jax.Array:
    """``fn(level)`` as a float32 array, where ``fn`` is a host computation (e.g. a calibration
    solved by PLD on the host) and ``level`` a privacy level: computed directly for a concrete
    level, through ``jax.pure_callback`` (once per level, on the host) for a traced one -- a
    registry example's hyperparameters are vmapped over levels by the conformance suite. Never
    used inside an estimator's step."""
    import jax.numpy as jnp
    import numpy as np

    if not isinstance(level, jax.core.Tracer):
        return jnp.float32(fn(float(level)))
    return jax.pure_callback(lambda e: np.asarray(fn(float(e)), np.float32),
                             jax.ShapeDtypeStruct((), jnp.float32), level,
                             vmap_method="sequential")
