r"""Local-DP randomizers: per-user Gaussian releases and the l2-ball randomizer ``R_eps^r``.

Under local differential privacy every user randomises their own record before it leaves them.
The **neighbouring relation is local**: one user's record replaced by any other admissible
record, with everything else (the other users, the public iterate the server sent) fixed. A
release ``Z = Q(x)`` is (epsilon, delta)-LDP if ``P(Q(x) in S) <= e^eps P(Q(x') in S) + delta``
for all admissible ``x, x'`` and all events ``S``. A statistic's **range** ``Delta`` is
``sup ||s(x) - s(x')||`` over two admissible records (for a statistic with values in a ball of
radius ``r`` it is at most ``2 r``); in :class:`~dpjax.mechanisms.BoundedStatistic` terms it is
the ``sensitivity`` of a statistic with ``relation="local"``.

Mechanisms (spec 001 §2.1, §2.4; calibration of each in exactly one function):

====================================  ===========================================  ===========
release                                calibration                                 guarantee
====================================  ===========================================  ===========
:func:`local_gaussian`                 :func:`local_gaussian_sigma`:                (eps, delta)
  ``s(x) + N(0, sigma^2 I)``           ``sigma = Delta_2 sqrt(2 log(1.25/delta))``  eps <= 1
                                       ``/ eps``
:func:`local_gaussian_symmetric`       :func:`symmetric_gaussian_sigma`: the same   (eps, delta)
  ``M(x) + Sym(Z)``, ``Z`` upper-      with ``Delta_2 = Delta_F`` (see below)       eps <= 1
  triangular, mirrored
:func:`local_gaussian_mean`            :func:`aggregate_sigma`:                     per user as
  average of ``n`` reports, exact      ``sigma_mean = sigma / sqrt(n)``             above
  per-user or one aggregate draw
:func:`l2_ball_randomizer`             :func:`randomizer_scale`: ``B = r coth(eps   eps (pure)
  ``B u``, ``u`` on a hemisphere       /2) sqrt(pi) Gamma((p+1)/2) / Gamma(p/2)``
====================================  ===========================================  ===========

**Symmetric matrix noise.** For a symmetric statistic ``M(x)`` (e.g. the clipped ``x x^T`` of
spec 001 Alg 1) the user releases ``M(x) + N`` where the upper triangle of ``N`` (diagonal
included) is i.i.d. ``N(0, sigma^2)`` and the lower triangle mirrors it. The mirror is a
bijective post-processing of the upper triangle, so the release is exactly the Gaussian
mechanism applied to the vector ``u(M) = (M_ij)_{i <= j}``: the norm the noise is calibrated in
is ``||u(D)||_2`` for the difference ``D = M(x) - M(x')``, **not** the Frobenius norm of ``D``.
Mirroring doubles every off-diagonal entry's contribution to ``||D||_F^2`` but not to
``||u(D)||_2^2``:

.. math::

    \|u(D)\|_2^2 = \sum_i D_{ii}^2 + \sum_{i<j} D_{ij}^2
                 = \tfrac12 \left(\|D\|_F^2 + \|\mathrm{diag}\,D\|_2^2\right)
                 \in \left[\tfrac12 \|D\|_F^2,\ \|D\|_F^2\right].

Hence a declared Frobenius range ``Delta_F`` bounds the calibrated range, ``Delta_u <=
Delta_F``, and ``sigma = Delta_F sqrt(2 log(1.25/delta)) / eps`` per upper-triangle entry is
(eps, delta)-LDP. The bound is tight: for a diagonal ``D`` (e.g. ``x = r e_1``, ``x' = r e_2``
for the outer product) ``||u(D)|| = ||D||_F``, so dividing ``Delta_F`` by ``sqrt 2`` ("the upper
triangle holds half of the off-diagonal mass") under-noises. In the released matrix both the
diagonal and the off-diagonal entries have variance ``sigma^2``, and ``N_ij = N_ji`` exactly.
(A different, also valid, convention is ``(Z + Z^T)/2`` with i.i.d. ``Z``: off-diagonal variance
``sigma^2/2`` and the Frobenius norm is then the exactly calibrated norm. It is not the
paper's mechanism and is not used here.)

**The aggregate shortcut.** The server only sees the average of the ``n`` reports, and the
average of ``n`` independent ``N(0, sigma^2)`` noises (or of symmetric noises) has exactly the
law of one ``N(0, sigma^2 / n)`` draw (respectively one symmetric draw with upper-triangle
variance ``sigma^2 / n``). :func:`local_gaussian_mean` offers both paths with the same law:
``per_user=True`` draws each user's noise (memory ``O(n size)``, for tests and audits) and
``per_user=False`` draws once (``O(size)``, for simulations). The aggregate's scale comes from
:func:`aggregate_sigma` only.

**The randomizer** ``R_eps^r`` (Duchi, Jordan & Wainwright 2013/2018; spec 001 §2.4): for
``||x||_2 <= r`` draw ``b = +-1`` with ``P(b = +1) = 1/2 + ||x||/(2r)``, ``x_hat = b r x/||x||``
(``b = +-1`` with probability 1/2 and direction ``e_1`` when ``x = 0``), ``s ~ Bernoulli(e^eps /
(e^eps + 1))``, ``u`` uniform on the hemisphere ``{<u, x_hat> > 0}`` if ``s = 1`` and on its
complement if ``s = 0``; output ``B u``. Its output density on the sphere of radius ``B`` takes
only the two values ``2 e^eps / ((e^eps + 1) A)`` and ``2 / ((e^eps + 1) A)`` (``A`` the area),
whatever ``x`` is, so it is eps-LDP **for every input**: the radius ``r`` does not enter the
privacy guarantee, only the unbiasedness ``E[R(x)] = x``, which needs ``||x|| <= r``.

All mechanisms are pure, take the key first, are jittable and vmappable (over users: vmap over
``jax.random.split(key, n)``; over privacy levels: ``epsilon``, ``delta``, ``radius`` are array
arguments). ``epsilon = inf`` gives exactly zero noise (Gaussian) or the identity (randomizer),
never inf or NaN. Concrete (host) inputs are validated with ``ValueError``s that name the
parameter and its range; traced values are the caller's responsibility (validate where they are
made).
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _cpu_prng, _validate
from dpjax import discrete_noise as _dn
from dpjax import mechanisms as _mechanisms
from dpjax.mechanisms import (
    BoundedStatistic,
    PlannedEvent,
    PrivacyEvent,
    _event,
    clip_l2,
    gaussian_mechanism,
)

__all__ = [
    "GaussianMeanRelease",
    "GaussianRelease",
    "RandomizerRelease",
    "aggregate_sigma",
    "l2_ball_randomizer",
    "ldp_iht_radius",
    "local_gaussian",
    "local_gaussian_mean",
    "local_gaussian_sigma",
    "local_gaussian_symmetric",
    "outer_product_range",
    "randomizer_scale",
    "symmetric_gaussian_noise",
    "symmetric_gaussian_sigma",
    "upper_triangle_norm",
]


class GaussianRelease(NamedTuple):
    """One user's Gaussian report.

    Attributes:
        value: the report, the statistic's shape (``(d,)`` or a symmetric ``(d, d)``).
        sigma: ``()`` the per-entry noise std actually drawn (per upper-triangle entry for a
            symmetric matrix), in the value's dtype; 0 at epsilon = inf.
    """

    value: jax.Array
    sigma: jax.Array
    event: PrivacyEvent  # the user's release (relation "local"; no composition across users)


class GaussianMeanRelease(NamedTuple):
    """The server's average of ``n`` users' Gaussian reports.

    Attributes:
        value: the average, one record's shape.
        sigma: ``()`` each user's calibrated per-entry noise std.
        sigma_mean: ``()`` the std of the average's noise per (upper-triangle) entry,
            ``aggregate_sigma(sigma, n) = sigma / sqrt(n)``, whichever path drew it.
    """

    value: jax.Array
    sigma: jax.Array
    sigma_mean: jax.Array
    event: PrivacyEvent  # one user's release (each user's own guarantee; relation "local")


class RandomizerRelease(NamedTuple):
    """One user's report from :func:`l2_ball_randomizer`.

    Attributes:
        value: ``(p,)`` the report ``B u`` with ``||value||_2 = B``; ``x`` itself at
            epsilon = inf.
        scale: ``()`` the output norm ``B`` actually used; 0 at epsilon = inf (identity).
    """

    value: jax.Array
    scale: jax.Array


# --------------------------------------------------------------------------------------------
# Host-side validation (concrete inputs only; traced ones are checked where they are made)
# --------------------------------------------------------------------------------------------


def _concrete(value: Any) -> bool:
    return not isinstance(value, jax.core.Tracer)


def _check_epsilon(epsilon: Any) -> None:
    if _concrete(epsilon):
        _validate.check_epsilon(epsilon)


def _check_gaussian_budget(epsilon: Any, delta: Any) -> None:
    if _concrete(epsilon):
        _validate.check_epsilon(epsilon)
    if _concrete(delta):
        _validate.check_delta(delta)


def _check_range(value: Any, epsilon: Any, name: str) -> None:
    """A range (sensitivity) in [0, inf]; inf only where epsilon is inf."""
    if not _concrete(value):
        return
    arr = np.asarray(value, dtype=np.float64)
    if np.isnan(arr).any() or (arr < 0).any():
        raise ValueError(f"{name} must lie in [0, inf); got {_validate._show(arr)}")
    if _concrete(epsilon):
        _validate.check_inf_only_at_inf_epsilon(
            arr, epsilon,
            f"{name} = inf (unbounded statistic) is allowed only with epsilon = inf; "
            "give a finite range for a private release",
        )


def _require_local_l2(stat: Any, mechanism: str) -> None:
    if not isinstance(stat, BoundedStatistic):
        raise TypeError(
            f"{mechanism} takes a BoundedStatistic (one record's value and its range); got "
            f"{type(stat).__name__}"
        )
    if stat.norm != "l2" or stat.relation != "local":
        raise ValueError(
            f"{mechanism} needs norm='l2' (Frobenius for a matrix) and relation='local'; got "
            f"norm={stat.norm!r}, relation={stat.relation!r}"
        )


# --------------------------------------------------------------------------------------------
# Gaussian releases: calibration
# --------------------------------------------------------------------------------------------


def local_gaussian_sigma(
    range_l2: Any, epsilon: Any, delta: Any, log_constant: float = 1.25,
    calibration: str = "classic-or-analytic",
) -> Any:
    r"""Per-user Gaussian noise std for (epsilon, delta)-LDP: the one place it is computed.

    .. math:: \sigma = \Delta_2 \sqrt{2 \log(c/\delta)} / \epsilon, \quad c = 1.25,

    the classic Gaussian mechanism (Dwork & Roth 2014, Thm A.1; spec 001 Def 3), for
    ``epsilon <= 1``, where it is proven; above that, by default, the analytic calibration
    (the exact Gaussian curve solved for sigma, :func:`dpjax.mechanisms.gaussian_multiplier`),
    so (epsilon, delta)-LDP holds at every epsilon. ``calibration="classic"`` keeps the printed
    formula at every epsilon (its ledger reads the exact curve). ``epsilon = inf`` gives
    exactly 0, even with an infinite range.

    Args:
        range_l2: ``Delta_2 = sup ||s(x) - s(x')||_2`` over two admissible records of one user
            (local relation); in ``[0, inf)``.
        epsilon: in ``(0, inf]``.
        delta: in ``(0, 1)``.
        log_constant: ``c`` (1.25 in the classic statement).

    Returns:
        ``sigma`` (numpy for host inputs, jax for jax inputs).
    """
    _check_gaussian_budget(epsilon, delta)
    _check_range(range_l2, epsilon, "range_l2")
    # looked up in dpjax.mechanisms at call time, like every calibration there (so a planted
    # bug of dpjax.audit.planted_bug reaches the local randomizers too)
    return _mechanisms.gaussian_sigma(range_l2, epsilon, delta, calibration, log_constant)


def symmetric_gaussian_sigma(
    range_fro: Any, epsilon: Any, delta: Any, log_constant: float = 1.25,
    calibration: str = "classic-or-analytic",
) -> Any:
    r"""Per-upper-triangle-entry noise std of :func:`local_gaussian_symmetric`.

    The mirrored noise is calibrated in the norm ``||u(D)||_2`` of the upper triangle (diagonal
    included) of the difference ``D`` of two records' matrices, and ``||u(D)||_2 <= ||D||_F``
    with equality for diagonal ``D`` (module docstring). So the Frobenius range is the
    calibrated range, undiminished:

    .. math:: \sigma = \Delta_F \sqrt{2 \log(c/\delta)} / \epsilon

    for every upper-triangle entry, diagonal and off-diagonal alike.

    Args:
        range_fro: ``Delta_F = sup ||M(x) - M(x')||_F`` over two admissible records; for the
            clipped outer product see :func:`outer_product_range`.
        epsilon: in ``(0, inf]``.
        delta: in ``(0, 1)``.
        log_constant: ``c``.
        calibration: one of :data:`~dpjax.mechanisms.GAUSSIAN_CALIBRATIONS`, as
            :func:`local_gaussian_sigma`.
    """
    _check_range(range_fro, epsilon, "range_fro")
    # Delta_u <= Delta_F, tight: calibrate the upper-triangle Gaussian mechanism at Delta_F.
    return local_gaussian_sigma(range_fro, epsilon, delta, log_constant, calibration)


def aggregate_sigma(sigma: Any, n: int) -> Any:
    r"""The std of the average of ``n`` independent ``N(0, sigma^2)`` noises: ``sigma/sqrt(n)``.

    ``(1/n) sum_i sigma g_i`` with i.i.d. ``g_i ~ N(0, 1)`` is exactly ``N(0, sigma^2 / n)``;
    entrywise the same holds for symmetric noise (independent upper triangles).

    Args:
        sigma: the per-user std (from :func:`local_gaussian_sigma` or
            :func:`symmetric_gaussian_sigma`).
        n: the public number of users, an integer ``>= 1``; or a runtime array (the padded
            programs of :class:`dpjax.base.Padded`, whose count is public).
    """
    if isinstance(n, jax.Array):
        return sigma / jnp.sqrt(n)
    n = _validate.check_int_in_range(n, "n", 1)
    return sigma / math.sqrt(n)


def upper_triangle_norm(m: jax.Array) -> jax.Array:
    r"""``||u(m)||_2 = sqrt(sum_{i <= j} m_ij^2)`` over the last two axes.

    The norm symmetric mirrored noise is calibrated in (module docstring); for symmetric ``m``,
    ``||m||_F / sqrt(2) <= ||u(m)||_2 <= ||m||_F``.
    """
    m = jnp.asarray(m)
    return jnp.sqrt(jnp.sum(jnp.square(jnp.triu(m)), axis=(-2, -1)))


def outer_product_range(radius: Any) -> Any:
    r"""Exact Frobenius range of ``x x^T`` over ``||x||_2 <= r``: ``sqrt(2) r^2``.

    ``||x x^T - y y^T||_F^2 = ||x||^4 + ||y||^4 - 2 <x, y>^2 <= 2 r^4``, attained by orthogonal
    ``x, y`` of norm ``r`` (whose difference is diagonal in their basis, so the upper-triangle
    range :func:`upper_triangle_norm` is also ``sqrt(2) r^2``). Spec 001 §2.1 uses the
    triangle-inequality bound ``2 r^2``: valid, and over-noising by ``sqrt 2`` (its entry variance
    ``32 r^4 log(2.5/delta)/eps^2`` is :func:`symmetric_gaussian_sigma` squared at range
    ``2 r^2`` and budget ``(eps/2, delta/2)``); paper-faithful reproductions pass ``2 r^2``.

    Args:
        radius: the clipping radius ``r`` of :func:`~dpjax.mechanisms.clip_l2`, in ``[0, inf]``.
    """
    if _concrete(radius):
        arr = np.asarray(radius, dtype=np.float64)
        if np.isnan(arr).any() or (arr < 0).any():
            raise ValueError(f"radius must lie in [0, inf]; got {_validate._show(arr)}")
    return math.sqrt(2.0) * radius * radius


# --------------------------------------------------------------------------------------------
# Gaussian releases: noise and mechanisms
# --------------------------------------------------------------------------------------------


def symmetric_gaussian_noise(
    key: jax.Array, dim: int, sigma: Any, dtype: Any = jnp.float32
) -> jax.Array:
    """A ``(dim, dim)`` symmetric Gaussian matrix: upper triangle (diagonal included) i.i.d.
    ``N(0, sigma^2)``, lower triangle its mirror (spec 001 §2.1, ``n_{1,i}``)."""
    z = _mechanisms.gaussian_noise(key, (dim, dim), sigma, dtype)
    return jnp.triu(z) + jnp.triu(z, 1).T


def _mirror_upper(m: jax.Array) -> jax.Array:
    """The symmetric matrix with the upper triangle of ``m`` (the only part released)."""
    return jnp.triu(m) + jnp.triu(m, 1).T


def _local_event(stat: BoundedStatistic, sigma: Any, delta: Any, log_constant: float,
                 dtype: Any, calibration: str = "classic-or-analytic") -> PrivacyEvent:
    """The privacy event of one user's (epsilon, delta) Gaussian report: built from the sigma
    that drew the noise and the statistic's own range (relation ``"local"``), with the dtype
    the noise is drawn in; the ledger reads it off the exact Gaussian curve."""
    return _event("gaussian", BoundedStatistic(jnp.zeros(()), stat.sensitivity, "l2",
                                               "local", stat.true_sensitivity),
                  sigma, delta, log_constant=log_constant, calibration=calibration,
                  dtype=dtype)


def local_gaussian(
    key: jax.Array,
    stat: BoundedStatistic,
    epsilon: Any,
    delta: Any,
    log_constant: float = 1.25,
    calibration: str = "classic-or-analytic",
) -> GaussianRelease:
    r"""One user's Gaussian report ``s(x) + N(0, sigma^2 I)`` under (epsilon, delta)-LDP.

    ``sigma = Delta_2 sqrt(2 log(1.25/delta)) / epsilon`` (:func:`local_gaussian_sigma`) with
    ``Delta_2 = stat.sensitivity`` the l2 range of one user's statistic (two admissible records'
    values differ by at most ``Delta_2``; for a matrix, the Frobenius range, i.e. the l2 norm of
    the flattened value, with i.i.d. noise on every entry).

    Privacy: (epsilon, delta)-LDP at every epsilon (the default calibration: classic for
    ``epsilon <= 1``, analytic above) under the local relation (one user's record replaced).
    ``epsilon = inf`` returns the value unchanged.

    Args:
        key: PRNG key for this user.
        stat: ``BoundedStatistic(value, range, "l2", "local")``; ``value`` is one user's
            statistic (any shape). For many users vmap over ``jax.random.split(key, n)``, or use
            :func:`local_gaussian_mean`.
        epsilon: in ``(0, inf]``.
        delta: in ``(0, 1)``.
        log_constant: ``c`` of the classic calibration.
        calibration: one of :data:`~dpjax.mechanisms.GAUSSIAN_CALIBRATIONS` (default
            ``"classic-or-analytic"``: classic for ``epsilon <= 1``, analytic above;
            ``"analytic"``: the exact Gaussian curve, which delivers the request at every
            epsilon; ``"classic"``: the printed formula at every epsilon).

    Returns:
        :class:`GaussianRelease` ``(value + noise, sigma)``.
    """
    _require_local_l2(stat, "local_gaussian")
    _check_gaussian_budget(epsilon, delta)
    _check_range(stat.sensitivity, epsilon, "range_l2")
    # the shared classic Gaussian mechanism (its noise and event); relation "local"
    noisy, event = gaussian_mechanism(key, stat, epsilon, delta, log_constant, calibration)
    return GaussianRelease(noisy, event.scale.astype(noisy.dtype), event)


def local_gaussian_symmetric(
    key: jax.Array,
    stat: BoundedStatistic,
    epsilon: Any,
    delta: Any,
    log_constant: float = 1.25,
    calibration: str = "classic-or-analytic",
) -> GaussianRelease:
    r"""One user's symmetric-matrix report ``M(x) + N``, ``N`` symmetric Gaussian.

    The upper triangle of ``N`` (diagonal included) is i.i.d. ``N(0, sigma^2)`` and mirrored,
    with ``sigma = symmetric_gaussian_sigma(Delta_F, epsilon, delta)`` per entry: the mirror is
    post-processing, the calibrated norm is the upper-triangle l2 norm, which is at most the
    Frobenius range ``Delta_F`` and equal to it for diagonal differences (module docstring).
    Only the upper triangle of ``stat.value`` is read (and mirrored), so the release depends on
    ``M(x)`` only through the released coordinates even if ``value`` is not exactly symmetric.

    Privacy: (epsilon, delta)-LDP at every epsilon (``calibration="classic"``: for
    ``epsilon <= 1``), local relation (one user's record replaced), if
    ``Delta_F >= sup ||M(x) - M(x')||_F``. ``epsilon = inf``: no noise. Inside
    :func:`~dpjax.mechanisms.secure_noise` the upper triangle is released through
    :func:`~dpjax.mechanisms.gaussian_mechanism` (rounded to a grid, exact discrete Gaussian
    noise) and mirrored; the event is then the discrete one.

    Args:
        key: PRNG key for this user.
        stat: ``BoundedStatistic(M (d, d), Delta_F, "l2", "local")``; the l2 norm of a matrix
            is its Frobenius norm (e.g. ``outer_product_range(r)`` for ``clip_l2(x, r)``'s
            outer product).
        epsilon: in ``(0, inf]``.
        delta: in ``(0, 1)``.
        log_constant: ``c`` of the classic calibration.
        calibration: one of :data:`~dpjax.mechanisms.GAUSSIAN_CALIBRATIONS` (default
            ``"classic-or-analytic"``: classic for ``epsilon <= 1``, analytic above;
            ``"analytic"``: the exact Gaussian curve, which delivers the request at every
            epsilon; ``"classic"``: the printed formula at every epsilon).

    Returns:
        :class:`GaussianRelease` ``(M + N, sigma)``, ``sigma`` per upper-triangle entry.
    """
    _require_local_l2(stat, "local_gaussian_symmetric")
    value = jnp.asarray(stat.value)
    if value.ndim != 2 or value.shape[0] != value.shape[1]:
        raise ValueError(f"local_gaussian_symmetric needs a (d, d) matrix; got {value.shape}")
    sigma = jnp.asarray(symmetric_gaussian_sigma(stat.sensitivity, epsilon, delta, log_constant,
                                                 calibration), value.dtype)
    if _mechanisms.secure_active():  # exact: the upper triangle through the Gaussian mechanism
        iu = jnp.triu_indices(value.shape[0])
        upper = BoundedStatistic(value[iu], stat.sensitivity, "l2", "local",
                                 stat.true_sensitivity)
        noisy, event = gaussian_mechanism(key, upper, epsilon, delta, log_constant, calibration)
        released = jnp.zeros_like(value).at[iu].set(noisy.astype(value.dtype))
        return GaussianRelease(_mirror_upper(released), sigma, event)
    noise = symmetric_gaussian_noise(key, value.shape[0], sigma, value.dtype)
    return GaussianRelease(_mirror_upper(value) + noise, sigma,
                           _local_event(stat, sigma, delta, log_constant, value.dtype,
                                        calibration))


def local_gaussian_mean(
    key: jax.Array,
    stat: BoundedStatistic,
    epsilon: Any,
    delta: Any,
    *,
    symmetric: bool = False,
    per_user: bool = False,
    log_constant: float = 1.25,
    calibration: str = "classic-or-analytic",
) -> GaussianMeanRelease:
    r"""The server's average of ``n`` users' Gaussian reports, by either of two equal-law paths.

    Each user ``i`` releases ``s(x_i) + N_i`` (:func:`local_gaussian`, or
    :func:`local_gaussian_symmetric` with ``symmetric=True``) and the server averages:

    .. math::

        \frac1n \sum_i (s(x_i) + N_i) \overset{d}{=} \bar s + \frac{\sigma}{\sqrt n} G,

    ``G`` one standard (symmetric) Gaussian draw.

    * ``per_user=True``: user ``i`` draws with ``jax.random.split(key, n)[i]`` through the
      single-user mechanism, exactly as deployed; memory ``O(n size)``.
    * ``per_user=False``: the aggregate shortcut, one draw at
      ``aggregate_sigma(sigma, n)``; memory ``O(size)``. Same law, different numbers.

    Privacy: each user's report is (epsilon, delta)-LDP (local relation; at every epsilon,
    ``calibration="classic"``: for ``epsilon <= 1``); the average is post-processing. The
    divisor ``n`` is the public shape.

    Args:
        key: PRNG key for all users.
        stat: ``BoundedStatistic(values (n, ...), Delta, "l2", "local")``: one row per user,
            ``Delta`` the range of one row (Frobenius range of a ``(d, d)`` row if
            ``symmetric``).
        epsilon: in ``(0, inf]``.
        delta: in ``(0, 1)``.
        symmetric: rows are symmetric ``(d, d)`` matrices with mirrored noise (static).
        per_user: draw every user's noise (static). Inside
            :func:`~dpjax.mechanisms.secure_noise` (``secure=True``) every user's report is
            exact discrete noise on a grid, whatever ``per_user`` says: the aggregate shortcut
            has no exact counterpart (a sum of discrete Gaussians is not one).
        log_constant: ``c`` of the classic calibration.
        calibration: one of :data:`~dpjax.mechanisms.GAUSSIAN_CALIBRATIONS` (default
            ``"classic-or-analytic"``: classic for ``epsilon <= 1``, analytic above;
            ``"analytic"``: the exact Gaussian curve, which delivers the request at every
            epsilon; ``"classic"``: the printed formula at every epsilon).

    Returns:
        :class:`GaussianMeanRelease` ``(average, sigma, sigma / sqrt(n))`` (``sigma``: the
        default path's calibration; on the secure path the event records the discrete noise
        drawn, in grid units).
    """
    _require_local_l2(stat, "local_gaussian_mean")
    values = jnp.asarray(stat.value)
    if values.ndim < 1 or values.shape[0] < 1:
        raise ValueError(f"local_gaussian_mean needs one row per user; got {values.shape}")
    if symmetric and (values.ndim != 3 or values.shape[1] != values.shape[2]):
        raise ValueError(f"symmetric=True needs (n, d, d) rows; got {values.shape}")
    n = values.shape[0]
    calibrate = symmetric_gaussian_sigma if symmetric else local_gaussian_sigma
    sigma = jnp.asarray(calibrate(stat.sensitivity, epsilon, delta, log_constant, calibration),
                        values.dtype)
    sigma_mean = jnp.asarray(aggregate_sigma(sigma, n), values.dtype)
    if _mechanisms.secure_active():
        value, event = _secure_gaussian_mean(key, stat, epsilon, delta, symmetric, log_constant,
                                             calibration)
        return GaussianMeanRelease(value, sigma, sigma_mean, event)
    if per_user:
        release = local_gaussian_symmetric if symmetric else local_gaussian

        def one(k: jax.Array, v: jax.Array) -> jax.Array:
            rec = BoundedStatistic(v, stat.sensitivity, "l2", "local")
            return release(k, rec, epsilon, delta, log_constant, calibration).value

        reports = jax.vmap(one)(jax.random.split(key, n), values)
        return GaussianMeanRelease(jnp.mean(reports, axis=0), sigma, sigma_mean,
                                   _local_event(stat, sigma, delta, log_constant, values.dtype,
                                                calibration))
    if symmetric:
        mean = _mirror_upper(jnp.mean(values, axis=0))
        noise = symmetric_gaussian_noise(key, values.shape[1], sigma_mean, values.dtype)
    else:
        mean = jnp.mean(values, axis=0)
        noise = _mechanisms.gaussian_noise(key, mean.shape, sigma_mean, values.dtype)
    return GaussianMeanRelease(mean + noise, sigma, sigma_mean,
                               _local_event(stat, sigma, delta, log_constant, values.dtype,
                                            calibration))


def _secure_gaussian_mean(key: jax.Array, stat: BoundedStatistic, epsilon: Any, delta: Any,
                          symmetric: bool, log_constant: float,
                          calibration: str) -> tuple[jax.Array, PrivacyEvent]:
    """The secure path of :func:`local_gaussian_mean`: user ``i`` releases its coordinates
    (the upper triangle, diagonal included, when ``symmetric``: the coordinates the mirrored
    noise is calibrated on, range at most ``Delta_F``) through
    :func:`~dpjax.mechanisms.gaussian_mechanism` -- inside
    :func:`~dpjax.mechanisms.secure_noise` the rounded coordinates plus exact discrete Gaussian
    noise at the same budget. The server's average (and the mirror) is post-processing of the
    users' integer reports.

    The first user's release runs through the mechanism itself (its event is every user's,
    and it fixes the grid and the exact ``sigma^2``); the other users' reports are the same
    mechanism at those parameters, their noise drawn in one batch of i.i.d. exact discrete
    Gaussians (:func:`dpjax.discrete_noise.secure_gaussian_rows`): the law of ``n`` separate
    releases, each user's own noise. (Planning a secure run draws nothing and takes every
    user through the mechanism.)"""
    values = jnp.asarray(stat.value)
    n = values.shape[0]
    if symmetric:
        d = values.shape[1]
        iu = jnp.triu_indices(d)
        rows = values[:, iu[0], iu[1]]
    else:
        rows = values.reshape(n, -1)
    rows_stat = BoundedStatistic(rows, stat.sensitivity, "l2", "local", stat.true_sensitivity)
    key_first, key_rest = jax.random.split(key)
    with _dn.recording_releases() as made:
        first, event = gaussian_mechanism(
            key_first, BoundedStatistic(rows[0], stat.sensitivity, "l2", "local",
                                        stat.true_sensitivity),
            epsilon, delta, log_constant, calibration)
    if isinstance(event, PlannedEvent) or len(made) != 1:
        reports, event = _mechanisms.local_mechanism(
            key_rest, rows_stat, gaussian_mechanism, epsilon, delta, log_constant, calibration)
    else:
        rest = _dn.secure_gaussian_rows(key_rest, rows[1:], made[0]) if n > 1 else None
        reports = first[None] if rest is None else jnp.concatenate(
            [first[None], rest.astype(first.dtype)])
    mean = jnp.mean(reports, axis=0)
    if symmetric:
        mean = _mirror_upper(jnp.zeros((d, d), mean.dtype).at[iu].set(mean))
    else:
        mean = mean.reshape(values.shape[1:])
    return mean, event


# --------------------------------------------------------------------------------------------
# The l2-ball randomizer R_eps^r (spec 001 §2.4)
# --------------------------------------------------------------------------------------------


def _unit_sphere_inverse_mean_abs(dim: int) -> float:
    r"""``1 / E|u_1| = sqrt(pi) Gamma((p+1)/2) / Gamma(p/2)`` for ``u`` uniform on ``S^{p-1}``,
    by log-gamma (``Gamma`` itself overflows for ``p > 340``); ``~ sqrt(pi p / 2)``."""
    return math.sqrt(math.pi) * math.exp(math.lgamma((dim + 1) / 2) - math.lgamma(dim / 2))


def randomizer_scale(radius: Any, epsilon: Any, dim: int) -> Any:
    r"""The output norm ``B`` of :func:`l2_ball_randomizer`: the one place it is computed.

    .. math::

        B = r \, \frac{e^\epsilon + 1}{e^\epsilon - 1} \,
            \frac{\sqrt\pi\, \Gamma(\frac{p+1}{2})}{\Gamma(\frac p2)}
          = \frac{r \coth(\epsilon/2)}{E|u_1|}.

    This is the unique scale with ``E[R(x)] = x`` (spec 001 §2.4, Lemma 8; the paper prints only
    ``O(r sqrt(p) / eps)``): given the direction ``v`` of ``x_hat``, the hemisphere draw has mean
    ``+- E|u_1| v``, the ``s`` step gives ``(2 sigmoid(eps) - 1) E|u_1| = tanh(eps/2) E|u_1|``,
    and ``E[b] = ||x|| / r``. ``coth(eps/2)`` avoids the cancellation in ``e^eps - 1`` for small
    epsilon, and the Gamma ratio uses log-gamma, stable for any ``p``. For large ``p``,
    ``B ~ r sqrt(pi p / 2) coth(eps/2)``.

    ``epsilon = inf`` returns 0: the randomizer is then defined as the identity (the non-private
    limit, spec 001 §7.7). ``R`` itself does not tend to the identity as ``eps -> inf``: ``B``
    tends to ``r / E|u_1|`` and the ``b`` and ``u`` draws remain.

    Args:
        radius: ``r`` in ``(0, inf)`` (inf only with epsilon = inf).
        epsilon: in ``(0, inf]``.
        dim: ``p``, the (static) dimension of the input, ``>= 1``.
    """
    dim = _validate.check_int_in_range(dim, "dim", 1)
    _check_epsilon(epsilon)
    if _concrete(radius):
        if _concrete(epsilon):
            _validate.check_truncation(radius, epsilon, "radius")
        else:
            _validate.check_positive(radius, "radius", allow_inf=True)
    c = _unit_sphere_inverse_mean_abs(dim)
    if not isinstance(radius, jax.Array) and not isinstance(epsilon, jax.Array):  # host
        eps = np.asarray(epsilon, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            b = np.asarray(radius, dtype=np.float64) * c / np.tanh(eps / 2.0)
        return np.where(np.isinf(eps), 0.0, b)
    eps = jnp.asarray(epsilon)
    b = jnp.asarray(radius) * c / jnp.tanh(eps / 2)
    return jnp.where(jnp.isinf(eps), jnp.zeros_like(b), b)


def _coin_epsilon(epsilon: Any) -> jax.Array:
    """The requested epsilon in float32 or wider (float64 stays float64): never rounded to a
    low-precision input's dtype before the coin is drawn."""
    eps = jnp.asarray(epsilon)
    if not jnp.issubdtype(eps.dtype, jnp.floating) or jnp.finfo(eps.dtype).bits < 32:
        eps = jnp.asarray(epsilon, jnp.float32)
    return eps


def l2_ball_randomizer(
    key: jax.Array, x: jax.Array, radius: Any, epsilon: Any
) -> RandomizerRelease:
    r"""The private randomizer ``R_eps^r(x)`` of spec 001 §2.4: an unbiased eps-LDP report.

    1. Project ``x`` onto the l2 ball of radius ``r`` (a no-op for admissible ``||x|| <= r``;
       it keeps the Bernoulli parameter below 1, and the estimate is unbiased for the projection).
    2. ``b = +1`` with probability ``1/2 + ||x||/(2r)``, else ``-1``; ``v = b x/||x||``. For
       ``x = 0``: ``b = +-1`` with probability 1/2 and ``v = b e_1`` (any direction is allowed).
    3. ``s = 1`` with probability ``e^eps / (e^eps + 1)``.
    4. ``u = g/||g||``, ``g ~ N(0, I_p)``, reflected ``u -> -u`` onto the hemisphere
       ``{<u, v> > 0}`` if ``s = 1``, or ``{<u, v> <= 0}`` if ``s = 0`` (reflection preserves
       the uniform law on the sphere, so ``u`` is uniform on the chosen hemisphere).
    5. Output ``B u``, ``B = randomizer_scale(r, eps, p)``.

    Properties: ``||R(x)||_2 = B``; ``E[R(x)] = x`` for ``||x|| <= r``;
    ``Cov R(x) = (B^2/p) I - x x^T``; ``P(<R(x), v> > 0 | v) = e^eps/(e^eps + 1)``.

    Privacy: eps-LDP (pure), local relation, for any two inputs whatsoever: the output density
    on the radius-``B`` sphere is ``2 e^eps/((e^eps+1) A)`` or ``2/((e^eps+1) A)`` for every
    input. A radius smaller than the true range of the input therefore costs unbiasedness
    (inputs are shrunk onto the ball), not privacy. ``epsilon = inf``: the identity on the
    projected input (``radius = inf`` then allowed: no projection).

    Args:
        key: PRNG key for this user (split into ``key_sign``, ``key_side``, ``key_direction``).
        x: ``(p,)`` the user's vector; vmap over users with ``jax.random.split(key, n)``.
        radius: ``r`` in ``(0, inf)`` (inf only with epsilon = inf); array is fine.
        epsilon: in ``(0, inf]``; array is fine (no recompile when it changes).

    Returns:
        :class:`RandomizerRelease` ``(B u, B)``.
    """
    x = jnp.asarray(x)
    if x.ndim != 1 or x.shape[0] < 1:
        raise ValueError(f"l2_ball_randomizer needs one user's vector (p,); got {x.shape}")
    dim = x.shape[0]
    dtype = x.dtype
    scale = jnp.asarray(randomizer_scale(radius, epsilon, dim), dtype)
    r = jnp.asarray(radius, dtype)
    # the coin's probability comes from the requested epsilon in float32 (float64 under x64)
    # whatever the input's dtype: a bfloat16 epsilon of 5.02 would be 5.03125
    eps = _coin_epsilon(epsilon)
    key_sign, key_side, key_direction = jax.random.split(key, 3)

    x = clip_l2(x, r)
    norm = jnp.sqrt(jnp.sum(jnp.square(x)))
    nonzero = norm > 0
    # Where x = 0 the direction is e_1; r = inf (only at eps = inf) gives p_plus = 1/2, unused.
    e1 = jnp.zeros((dim,), dtype).at[0].set(1)
    direction = jnp.where(nonzero, x / jnp.where(nonzero, norm, 1), e1)
    p_plus = 0.5 + norm / (2 * r)
    b = jnp.where(jax.random.bernoulli(key_sign, p_plus), 1, -1).astype(dtype)
    s = _mechanisms.randomized_response_bit(key_side, eps)  # exact: odds e^eps or less
    g = _cpu_prng.normal(key_direction, (dim,), dtype)  # same values, faster
    u = g / jnp.maximum(jnp.sqrt(jnp.sum(jnp.square(g))), jnp.finfo(dtype).tiny)
    side = b * jnp.dot(u, direction)  # <u, v>
    wrong = jnp.where(s, side <= 0, side > 0)
    u = jnp.where(wrong, -u, u)
    value = jnp.where(jnp.isinf(eps), x, scale * u)
    return RandomizerRelease(value, scale)


# --------------------------------------------------------------------------------------------
# LDP-IHT randomizer radius: rectified vs Wang & Xu (2021) literal (spec 001 §2.5, §2.6, §6.1)
# --------------------------------------------------------------------------------------------


def ldp_iht_radius(
    d: int,
    k_prime: int,
    tau1: Any,
    tau2: Any,
    *,
    theta_norm: float = 1.0,
    variant: Literal["rectified", "wang_xu_2021_literal"] = "rectified",
) -> Any:
    r"""The randomizer radius (per-user gradient l2 bound) of LDP-IHT.

    User ``i`` sends ``R(grad_i)`` with ``grad_i = x_bar_i (<theta, x_bar_i> - y_bar_i)``,
    ``|x_bar_ij| <= tau1``, ``|y_bar_i| <= tau2``, and a public iterate with
    ``||theta||_2 <= R`` (``theta_norm``: 1 in Alg 2, 2 in Alg 4) and ``||theta||_0 <= k'``.

    * ``"rectified"`` (default; spec 001 L606 and App F):
      ``|<theta, x_bar>| <= ||theta||_1 ||x_bar||_inf <= sqrt(k') R tau1`` and
      ``||x_bar||_2 <= sqrt(d) tau1``, so

      .. math:: r = \sqrt d\, \tau_1 (R \sqrt{k'}\, \tau_1 + \tau_2),

      with ``k'`` capped at ``d`` (a vector in ``R^d`` has at most ``d`` non-zeros; the cap only
      matters when ``k' = 8k > d``, where the paper's ``sqrt(k')`` over-noises). It is the exact
      supremum of ``||grad_i||`` (all ``|x_bar_ij| = tau1`` with signs matching ``theta``,
      ``theta`` flat on ``min(k', d)`` coordinates, ``y_bar = -+tau2``).
    * ``"wang_xu_2021_literal"``: the radius of Wang & Xu (2021) transcribed to this notation.
      Their proof bounds ``<x, theta>`` by ``||theta||_2`` for ``x`` in ``{+-1}^d``, i.e.
      ``|<theta, x_bar>| <= R tau1``, giving ``sqrt(d) tau1 (R tau1 + tau2)``: too small by a
      factor tending to ``sqrt(k')`` (``O(sqrt k)``) when ``tau2 << sqrt(k') tau1`` (spec §6.1).

      **This is NOT a valid sensitivity.** An additive-noise release (e.g. :func:`local_gaussian`)
      calibrated to it is NOT (epsilon, delta)-LDP: admissible gradients differ by more than the
      declared range (the audit in ``tests/test_local_randomizers.py`` certifies an epsilon above
      the claim). Fed to :func:`l2_ball_randomizer`, whose eps-LDP guarantee does not depend on
      the radius, the reports stay eps-LDP but are **biased**: gradients beyond the ball are
      shrunk onto it, ``E[R(grad)] != grad``, and the Lemma 8 unbiasedness behind Wang & Xu's
      utility bound fails. For reproducing the published (mistaken) analysis only.

    Args:
        d: dimension, ``>= 1``.
        k_prime: sparsity ``k'`` of the iterates, ``>= 1`` (unused by the literal variant).
        tau1: covariate shrinkage level, in ``(0, inf]``.
        tau2: response shrinkage level, in ``(0, inf]``.
        theta_norm: ``R``, the iterate's l2 bound, in ``(0, inf)``.
        variant: ``"rectified"`` or ``"wang_xu_2021_literal"`` (static).
    """
    d = _validate.check_int_in_range(d, "d", 1)
    k_prime = _validate.check_int_in_range(k_prime, "k_prime", 1)
    for name, value in (("tau1", tau1), ("tau2", tau2)):
        if _concrete(value):
            _validate.check_positive(value, name, allow_inf=True)
    if _concrete(theta_norm):
        _validate.check_positive(theta_norm, "theta_norm")
    if variant == "rectified":
        inner = theta_norm * math.sqrt(min(k_prime, d)) * tau1
    elif variant == "wang_xu_2021_literal":
        inner = theta_norm * tau1
    else:
        raise ValueError(
            f"variant must be 'rectified' or 'wang_xu_2021_literal'; got {variant!r}"
        )
    return math.sqrt(d) * tau1 * (inner + tau2)


# --------------------------------------------------------------------------------------------
# Mechanisms with privacy events for the estimators of spec 001 (dpjax.algorithms.ldp_sparse)
# --------------------------------------------------------------------------------------------

__all__ += ["l2_ball_mechanism", "local_gaussian_aggregate", "randomizer_event"]


def randomizer_event(radius: Any, epsilon: Any) -> PrivacyEvent:
    r"""The privacy event of one user's :func:`l2_ball_randomizer` report.

    ``R_eps^r`` is pure eps-LDP for every pair of inputs (its output density on the sphere of
    radius ``B`` takes two values whose ratio is ``e^eps``), whatever the radius. The event
    records the kind ``"ldp-randomizer"`` with ``sensitivity = true_sensitivity = r`` (inputs
    are projected onto the radius-``r`` ball, so every input is admissible) and
    ``scale = r / epsilon``; the ledger's inversion ``epsilon = true * 1 / scale`` gives back
    exactly ``epsilon``. ``epsilon = inf`` (the identity): scale 0, no guarantee.
    """
    r = jnp.asarray(radius)
    eps = jnp.asarray(epsilon)
    scale = jnp.where(jnp.isinf(eps), jnp.zeros_like(r * eps), r / eps)
    stat = BoundedStatistic(jnp.zeros(()), r, "l2", "local")
    return _event("ldp-randomizer", stat, scale)


def l2_ball_mechanism(
    key: jax.Array, stat: BoundedStatistic, epsilon: Any
) -> tuple[jax.Array, PrivacyEvent]:
    """One user's :func:`l2_ball_randomizer` report with its :class:`PrivacyEvent`.

    Args:
        key: PRNG key for this user.
        stat: ``BoundedStatistic(x (p,), r, "l2", "local")``: the user's vector and the
            randomizer radius (the bound under which the report is unbiased).
        epsilon: in ``(0, inf]``.

    Returns:
        ``(report, event)``; the event is :func:`randomizer_event` (eps-LDP, local relation).
    """
    _require_local_l2(stat, "l2_ball_mechanism")
    out = l2_ball_randomizer(key, stat.value, stat.sensitivity, epsilon)
    return out.value, randomizer_event(stat.sensitivity, epsilon)


def local_gaussian_aggregate(
    key: jax.Array,
    mean: BoundedStatistic,
    n: Any,
    epsilon: Any,
    delta: Any,
    *,
    symmetric: bool = False,
    log_constant: float = 1.25,
    calibration: str = "classic-or-analytic",
) -> GaussianMeanRelease:
    r"""The aggregate shortcut of :func:`local_gaussian_mean` from the users' average itself.

    ``mean.value`` is ``(1/n) sum_i s(x_i)`` (computed by the caller without materialising the
    per-user rows, e.g. ``X^T X / n``) and ``mean.sensitivity`` is the range of **one user's**
    ``s(x_i)`` (relation ``"local"``). The release is ``mean + (sigma/sqrt n) G`` with
    ``sigma`` calibrated exactly as each user's report (:func:`local_gaussian_sigma` or
    :func:`symmetric_gaussian_sigma`), which has the law of the average of ``n`` per-user
    reports. Memory ``O(size)``.

    Args:
        key: PRNG key.
        mean: ``BoundedStatistic(average, one user's range, "l2", "local")``.
        n: the public number of users averaged (static int ``>= 1``, or a runtime count:
            :func:`aggregate_sigma`).
        epsilon, delta: each user's budget.
        symmetric: the average is a symmetric ``(d, d)`` matrix with mirrored noise.
        log_constant: ``c`` of the classic calibration.
        calibration: one of :data:`~dpjax.mechanisms.GAUSSIAN_CALIBRATIONS` (default
            ``"classic-or-analytic"``: classic for ``epsilon <= 1``, analytic above;
            ``"analytic"``: the exact Gaussian curve, which delivers the request at every
            epsilon; ``"classic"``: the printed formula at every epsilon).

    Returns:
        :class:`GaussianMeanRelease`; its event is one user's release.

    No floating-point-safe path: it draws the noise of the users' average from the average, so
    there are no per-user reports to make exact (and a sum of discrete Gaussians is not one).
    Inside :func:`~dpjax.mechanisms.secure_noise` it raises; the estimators then take
    :func:`local_gaussian_mean`'s per-user path.
    """
    _require_local_l2(mean, "local_gaussian_aggregate")
    value = jnp.asarray(mean.value)
    calibrate = symmetric_gaussian_sigma if symmetric else local_gaussian_sigma
    sigma = jnp.asarray(calibrate(mean.sensitivity, epsilon, delta, log_constant, calibration),
                        value.dtype)
    sigma_mean = jnp.asarray(aggregate_sigma(sigma, n), value.dtype)
    if symmetric:
        if value.ndim != 2 or value.shape[0] != value.shape[1]:
            raise ValueError(f"symmetric=True needs a (d, d) average; got {value.shape}")
        noisy = _mirror_upper(value) + symmetric_gaussian_noise(key, value.shape[0], sigma_mean,
                                                                value.dtype)
    else:
        noisy = value + _mechanisms.gaussian_noise(key, value.shape, sigma_mean, value.dtype)
    return GaussianMeanRelease(noisy, sigma, sigma_mean,
                               _local_event(mean, sigma, delta, log_constant, value.dtype,
                                            calibration))
