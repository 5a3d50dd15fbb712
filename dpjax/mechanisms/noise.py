"""The Laplace and Gaussian mechanisms, and the noise draws they add.

Each mechanism checks the statistic's norm, calibrates the scale from the statistic's own
sensitivity (:mod:`dpjax.mechanisms.calibration`), draws the noise in the statistic's dtype
and returns the noisy value with the :class:`~dpjax.mechanisms.PrivacyEvent` made from the same
scale; inside :func:`~dpjax.mechanisms.secure_noise` it releases through the exact path
(:mod:`dpjax.mechanisms.secure`) instead.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _cpu_prng, _validate
from dpjax.mechanisms.calibration import (
    GAUSSIAN_CALIBRATIONS,
    gaussian_sigma,
    gaussian_sigma_zcdp,
    laplace_scale,
)
from dpjax.mechanisms.secure import _require_float_path, _secure_release, secure_active
from dpjax.mechanisms.statistics import BoundedStatistic, PrivacyEvent, _event, _require_norm

__all__ = ["gaussian_mechanism", "gaussian_mechanism_zcdp", "gaussian_noise",
           "laplace_mechanism", "laplace_noise"]

def laplace_noise(key: jax.Array, shape: tuple[int, ...], scale: Any, dtype=jnp.float32):
    """i.i.d. Laplace(0, scale) noise (density ``exp(-|x|/b)/(2b)``)."""
    _require_float_path("Laplace noise drawn outside laplace_mechanism")
    return jax.random.laplace(key, shape, dtype=dtype) * jnp.asarray(scale, dtype=dtype)


def gaussian_noise(key: jax.Array, shape: tuple[int, ...], sigma: Any, dtype=jnp.float32):
    """i.i.d. N(0, sigma^2) noise."""
    _require_float_path("Gaussian noise drawn outside the Gaussian mechanisms")
    # _cpu_prng.normal: jax.random.normal's values, faster for short minor dimensions on CPU
    return _cpu_prng.normal(key, shape, dtype=dtype) * jnp.asarray(sigma, dtype=dtype)


def _release(key: jax.Array, stat: BoundedStatistic, norm: str, mechanism: str, scale: Any,
             noise: Any, kind: str, **event: Any) -> tuple[jax.Array, PrivacyEvent]:
    """``stat.value + noise(scale(stat.sensitivity))`` and the event made from the same
    scale; inside :func:`secure_noise`, the floating-point-safe release of the same budget."""
    _require_norm(stat, norm, mechanism)
    if secure_active():
        return _secure_release(key, stat, scale, kind, **event)
    scale = scale(stat.sensitivity)
    value = jnp.asarray(stat.value)
    noisy = value + noise(key, value.shape, scale, value.dtype)
    return noisy, _event(kind, stat, scale, dtype=value.dtype, **event)


def laplace_mechanism(
    key: jax.Array, stat: BoundedStatistic, epsilon: Any
) -> tuple[jax.Array, PrivacyEvent]:
    """Release ``stat.value + Laplace(Delta_1/epsilon)``: (epsilon, 0)-DP (``stat.relation``).

    Returns the noisy value and its :class:`PrivacyEvent`.
    """
    return _release(key, stat, "l1", "laplace_mechanism",
                    lambda sens: laplace_scale(sens, epsilon), laplace_noise, "laplace")


def gaussian_mechanism(
    key: jax.Array,
    stat: BoundedStatistic,
    epsilon: Any,
    delta: Any,
    log_constant: float = 1.25,
    calibration: str = "classic-or-analytic",
) -> tuple[jax.Array, PrivacyEvent]:
    """Gaussian mechanism for (epsilon, delta)-DP under ``stat.relation``.

    ``sigma = Delta_2 * gaussian_multiplier(epsilon, delta, calibration)``: by default the
    classic formula for ``epsilon <= 1`` and the analytic (exact-curve) calibration above, so
    the requested budget is delivered at every epsilon; ``calibration="classic"`` is the
    papers' formula at every epsilon (its ledger then says what the exact curve gives).
    ``log_constant`` is the classic formula's ``c``.

    Returns the noisy value and its :class:`PrivacyEvent` (kind ``"gaussian"``).
    """
    _validate.check_choice(calibration, "calibration", GAUSSIAN_CALIBRATIONS)
    return _release(key, stat, "l2", "gaussian_mechanism",
                    lambda sens: gaussian_sigma(sens, epsilon, delta, calibration, log_constant),
                    gaussian_noise, "gaussian", delta=delta, log_constant=log_constant,
                    calibration=calibration)


def gaussian_mechanism_zcdp(
    key: jax.Array, stat: BoundedStatistic, rho: Any
) -> tuple[jax.Array, PrivacyEvent]:
    """Gaussian mechanism calibrated for rho-zCDP: ``sigma = Delta_2 / sqrt(2 rho)``.

    Returns the noisy value and its :class:`PrivacyEvent`.
    """
    return _release(key, stat, "l2", "gaussian_mechanism_zcdp",
                    lambda sens: gaussian_sigma_zcdp(sens, rho), gaussian_noise, "gaussian-zcdp")
