"""Local DP: one mechanism per record, and the randomized-response coin.

:func:`local_mechanism` applies a central mechanism to every record with its own key (each
user's release is private on its own). The coin (:func:`randomized_response_bit`) is the exact
eps-DP randomized response that the l2-ball randomizer of :mod:`dpjax.local_randomizers` draws
its hemisphere with; it is here, beside :func:`local_mechanism`, so that it stays importable
from :mod:`dpjax.mechanisms` (the local randomizers sit a layer above) and the audit's plants
(:mod:`dpjax.audit.plants`) reach it where the randomizers look it up.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp

from dpjax.mechanisms.statistics import BoundedStatistic

__all__ = ["RESPONSE_BITS", "implemented_flip_probability", "local_mechanism",
           "randomized_response_bit", "response_flip_threshold", "response_probability"]

def local_mechanism(key: jax.Array, stat: BoundedStatistic, mechanism, *budget: Any) -> jax.Array:
    """Apply ``mechanism`` independently to every record of a local statistic (axis 0).

    For local DP each user randomises their own record before it leaves them: ``stat.value`` holds
    one row per record and ``stat.sensitivity`` bounds the range of a single record's value (two
    admissible records differ by at most that much in ``stat.norm``), with
    ``stat.relation == "local"``. Record ``i`` is randomised with its own key ``split(key, n)[i]``,
    so the releases are independent and each is ``budget``-DP for its user (parallel composition
    over users).

    Args:
        key: PRNG key for all records.
        stat: ``BoundedStatistic(values (n, ...), sensitivity, norm, relation="local")``.
        mechanism: e.g. :func:`laplace_mechanism`, :func:`gaussian_mechanism`,
            :func:`gaussian_mechanism_zcdp`; called as ``mechanism(key_i, record_stat, *budget)``.
        *budget: the per-record budget arguments of ``mechanism`` (epsilon, delta, rho ...).

    Returns:
        The randomised records, shape ``stat.value.shape``, and the :class:`PrivacyEvent` of
        one user's release (each user's guarantee; no composition across users applies).
    """
    if not isinstance(stat, BoundedStatistic) or stat.relation != "local":
        raise ValueError("local_mechanism needs a BoundedStatistic with relation='local'")
    values = jnp.asarray(stat.value)
    keys = jax.random.split(key, values.shape[0])

    def one(k, v):
        return mechanism(k, BoundedStatistic(v, stat.sensitivity, stat.norm, "local",
                                             stat.true_sensitivity), *budget)

    noisy, events = jax.vmap(one)(keys, values)
    # every user's release is the same mechanism at the same budget: one event, relation local
    return noisy, jax.tree_util.tree_map(lambda x: x[0], events)


def response_probability(epsilon: Any) -> jax.Array:
    """``e^eps / (e^eps + 1)``: the probability that an eps-DP randomized response keeps the
    true side, in floating point (for the randomizer's unbiasing scale and for reading; the
    coin itself is drawn exactly, :func:`randomized_response_bit`)."""
    return jax.nn.sigmoid(jnp.asarray(epsilon))


#: bits of the integer comparison that draws a randomized-response coin
RESPONSE_BITS = 64


def response_flip_threshold(epsilon: Any) -> tuple[jax.Array, jax.Array]:
    """``M = ceil(q * 2^64)`` as two uint32 words ``(M_hi, M_lo)``, for the probability
    ``q = 1 / (e^eps + 1)`` of reporting the wrong side: :func:`randomized_response_bit` flips
    exactly when a uniform 64-bit integer is below ``M``, so the implemented flip probability
    is ``M / 2^64``, with ``q <= M / 2^64 <= 1/2``.

    ``q`` is computed in float32 as ``exp(-softplus(eps))`` and widened by more than its
    rounding error before rounding up, so ``M / 2^64 >= q`` for every epsilon: the keep/flip
    odds are at most ``e^eps`` and the coin is eps-DP as claimed (slightly stronger: at most
    ``2^64 - 1`` to 1, i.e. epsilon <= 44.36, however large the requested epsilon). A float
    comparison ``uniform < sigmoid(eps)`` is not: ``sigmoid(eps)`` rounds to 1 in float32 from
    eps = 16.64, where the wrong side is never reported (no privacy at all).
    """
    dt = jnp.float32
    eps = jnp.asarray(epsilon, dt)
    log_q = -jax.nn.softplus(eps)  # log(1 / (1 + e^eps)), accurate for every eps
    # exp's relative error is a few ulps of its argument's magnitude: widen by 4x that
    q = jnp.exp(log_q) * (1 + (jnp.abs(log_q) + 4) * 4 * float(jnp.finfo(dt).eps))
    x = q * 2.0**32  # exact scaling; q <= 1/2 (x 1.0000x), so x < 2^31 + small
    hi = jnp.floor(x)
    lo = jnp.ceil((x - hi) * 2.0**32)  # x - floor(x) is exact in float
    carry = lo >= 2.0**32
    hi = jnp.where(carry, hi + 1, hi)
    lo = jnp.where(carry, 0.0, lo)
    lo = jnp.where((hi == 0) & (lo == 0), 1.0, lo)  # M >= 1: a flip is always possible
    # M <= 2^63 (q' <= 1/2): the widening must not make the wrong side the likelier one (at a
    # tiny epsilon that would break the reverse odds bound e^-eps)
    over = hi >= 2.0**31
    hi = jnp.where(over, 2.0**31, hi)
    lo = jnp.where(over, 0.0, lo)
    return hi.astype(jnp.uint32), lo.astype(jnp.uint32)


def randomized_response_bit(key: jax.Array, epsilon: Any) -> jax.Array:
    """``True`` (keep the true side) with probability ``1 - M / 2^64``, ``M`` from
    :func:`response_flip_threshold`: an integer comparison on 64 random bits, so the
    implemented probability is exactly the one the ledger accounts for (``e^eps`` odds or
    less) at every epsilon. ``epsilon = inf`` keeps the true side always."""
    m_hi, m_lo = response_flip_threshold(epsilon)
    u = jax.random.bits(key, (2,), jnp.uint32)
    flip = (u[0] < m_hi) | ((u[0] == m_hi) & (u[1] < m_lo))
    return jnp.logical_or(~flip, jnp.isinf(jnp.asarray(epsilon)))


def implemented_flip_probability(epsilon: float):
    """The exact flip probability ``M / 2^64`` that :func:`randomized_response_bit` implements
    at a concrete ``epsilon``, as a :class:`fractions.Fraction` (for tests and audits)."""
    if math.isinf(epsilon):
        return Fraction(0)
    hi, lo = (int(v) for v in response_flip_threshold(epsilon))
    return Fraction(hi * 2**32 + lo, 2**RESPONSE_BITS)
