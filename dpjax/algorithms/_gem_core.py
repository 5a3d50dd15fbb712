"""What the central and the local-DP gradient EM share (:mod:`dpjax.algorithms.dp_gem`,
:mod:`dpjax.algorithms.ldp_gem`): the rules for the truncation scale, the step's info, the
zCDP budget ``eps~`` of spec 002 A2, the checks of the fit functions' shared arguments, and the
registry examples' data. Each name is re-exported by the modules that use it publicly."""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.algorithms._boundary import check_model, checked_inputs
from dpjax.mechanisms import PrivacyEvent
from dpjax.models.protocol import EMModel
from dpjax.robust_mean import PHI_MAX

SRule = Literal["sigma_consistent", "alg2_literal", "alg3_literal", "thm2", "explicit"]
S_RULES: tuple[str, ...] = ("sigma_consistent", "alg2_literal", "alg3_literal", "thm2", "explicit")


class GEMInfo(NamedTuple):
    noise_scale: jax.Array  # () Gaussian sigma per coordinate (0 at epsilon = inf)
    s: jax.Array  # () truncation scale used (Algorithm 2) or the clip norm C (Algorithm 1)
    events: tuple[PrivacyEvent, ...]  # Alg 2: one per coordinate (d); Alg 1: one


def eps_tilde(epsilon: Any, delta: Any) -> jax.Array:
    """``sqrt(log(1/delta) + eps) - sqrt(log(1/delta))`` (spec 002 A2), stably; inf at inf.

    ``rho = eps_tilde^2`` is the largest zCDP budget whose Bun-Steinke conversion gives
    ``epsilon`` at ``delta``.

    Examples:
        >>> from dpjax.accounting import zcdp_to_approx_dp
        >>> rho = float(eps_tilde(1.0, 1e-5)) ** 2
        >>> round(zcdp_to_approx_dp(rho, 1e-5, method="bun-steinke").epsilon, 5)
        1.0
        >>> float(eps_tilde(float("inf"), 1e-5))
        inf
    """
    eps = jnp.asarray(epsilon)
    log_d = jnp.log(1.0 / jnp.asarray(delta, eps.dtype))
    finite = jnp.isfinite(eps)
    eps_f = jnp.where(finite, eps, jnp.ones_like(eps))
    val = eps_f / (jnp.sqrt(log_d + eps_f) + jnp.sqrt(log_d))
    return jnp.where(finite, val, jnp.full_like(val, jnp.inf))


def _f32(*values: Any) -> list[np.ndarray]:
    return [np.asarray(v, dtype=np.float32) for v in values]


def _robust_fields(eps: float, tau: Any, zeta: Any, s_rule: str, s: Any, n: int,
                   local: bool = False) -> list[np.ndarray]:
    """``(tau, zeta, s)`` of Algorithms 2 and 3, validated (``s`` NaN unless explicit). An
    explicit ``s`` whose score range ``2 PHI_MAX s`` (divided by ``n`` for a central mean) is
    zero or subnormal in float32, or whose sum of ``n`` scores overflows, is refused (``local``:
    ``n`` is the largest number of users whose reports the server adds up)."""
    if s_rule not in S_RULES:
        raise ValueError(f"s_rule must be one of {S_RULES}; got {s_rule!r}")
    _validate.check_positive(tau, "tau")
    z = _validate.check_positive(zeta, "zeta")
    if z.ndim or not float(z) < 1.0:
        raise ValueError(f"zeta must be a scalar in (0, 1); got {zeta!r}")
    if s_rule == "explicit":
        if s is None:
            raise ValueError("s_rule='explicit' needs s")
        s_val = float(_validate.check_truncation(s, eps, "s"))
        if math.isfinite(eps):
            bound = PHI_MAX * s_val  # one score's bound: psi_bound(s)
            _validate.check_noise_inputs("s", s_val, 2 * bound / (1 if local else n),
                                         n * bound)
    else:
        if s is not None:
            raise ValueError("s is only read with s_rule='explicit'")
        s_val = math.nan
    return _f32(tau, zeta, s_val)


def _checked(key, data, model, num_iterations, on_invalid, epsilon, delta, eta, beta0):
    """The arguments every fit shares, checked: ``(key, data, n, num_iterations, epsilon,
    delta, beta0)``; ``delta`` by the one policy (default ``1/(2n)``; the paper's ``1/n`` is
    allowed, a warning above that)."""
    check_model(model, EMModel, "dpjax.models.EMModel (per_sample_gradients, ...)")
    key, data, n, num_iterations, eps, dl = checked_inputs(
        key, data, model.validate_data, model.num_records, on_invalid=on_invalid,
        num_iterations=num_iterations, epsilon=epsilon, delta=delta, eta=eta,
        allow_1_over_n=True)
    beta0 = _validate.check_array(beta0, "beta0", shape=(model.dim(data),))
    return key, data, n, num_iterations, eps, dl, beta0


def _example_problem(model: EMModel, d: int, seed: int, n: int) -> tuple[Any, np.ndarray]:
    """A registry example's data (``n`` records simulated at ``beta = 1/sqrt(d)`` in every
    coordinate) and its data-independent start ``0.8 beta``."""
    beta = np.full(d, 1.0 / np.sqrt(d), np.float32)
    return model.simulate(jax.random.key(seed), n, jnp.asarray(beta)), beta * 0.8
