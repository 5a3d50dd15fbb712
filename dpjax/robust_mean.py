r"""Private mean of a heavy-tailed 1-D variable by smoothed soft truncation (spec 002, §2.1–2.3).

The estimator (Catoni & Giulini 2017; Holland 2019; Wang, Xiao, Devadas & Xu 2020; spec 002
eqs. 8–13 and App D, F) has three public ingredients: a scale ``s > 0``, the precision
``beta_smooth > 0`` of a multiplicative smoothing noise, and the privacy budget. In the paper
the precision is called ``beta``; it is renamed ``beta_smooth`` here because ``beta`` is the
model parameter of the EM algorithms (spec 002 §0.1).

**Soft truncation** (eq. 9):

.. math::

    \phi(u) = u - u^3/6 \ (|u| \le \sqrt2), \qquad \phi(u) = \pm 2\sqrt2/3 \ (\pm u > \sqrt2),

odd, nondecreasing, :math:`C^1`, and :math:`|\phi| \le \phi(\sqrt2) = 2\sqrt2/3`.

**Smoothed score** (eqs. 10–12): with :math:`\eta \sim N(0, 1/\beta)` (``beta = beta_smooth``),

.. math::

    \psi_{s,\beta}(x) = s\, E_\eta\, \phi\big((1+\eta)x/s\big) = s\, E\,\phi(a + b\xi),
    \qquad a = x/s,\ b = |x|/(s\sqrt\beta),\ \xi \sim N(0, 1).

The expectation is computed analytically; nothing is sampled. :math:`\psi` is odd,
:math:`|\psi| \le 2\sqrt2 s/3`, :math:`\psi(x) \to \pm s (2\sqrt2/3)\,\mathrm{erf}(\sqrt{\beta/2})`
as :math:`x \to \pm\infty`, and :math:`\psi(x) = x - x^3 (1/(2\beta) + 1/6)/s^2` up to
exponentially small terms for small :math:`|x|/s`.

**Mechanisms** (replace-one neighbours: data sets of the same size ``n`` differing in one
record; spec 002 §1.3):

* central (eq. 13): :math:`A(D) = \frac1n\sum_i \psi(x_i) + N(0, \sigma^2)` with the classic
  Gaussian calibration :math:`\sigma = \Delta\sqrt{2\log(1.25/\delta)}/\varepsilon`,
  :math:`\Delta = (4\sqrt2/3)\, s/n`; (epsilon, delta)-DP for epsilon <= 1. Two choices of
  ``(s, beta_smooth)``: Wang et al. 2020 (the paper's Lemma 2) and the paper's Theorem 2.
* local (App F, Thm 8): user ``i`` reports :math:`\psi(x_i) + N(0, \sigma_{loc}^2)`,
  :math:`\sigma_{loc} = (4\sqrt2 s/3)\sqrt{2\log(1.25/\delta)}/\varepsilon`; each report is
  (epsilon, delta)-DP in its user's record (non-interactive LDP); the server averages.

Numerics of :func:`psi`
-----------------------
The paper's closed form (eq. 12 with App D; :func:`psi_textbook`) adds a polynomial of size
:math:`|a|^3(1/6 + 1/(2\beta) + 1/(6\beta^{3/2}))` to a tail correction of the same size and
opposite sign, so its absolute error is about ``eps * |a|^3`` (float32: ~1e-3 at ``|a| = 50``,
useless beyond; float64: ~1e-8 at ``|a| = 1000``, garbage at ``1e6``). :func:`psi` evaluates

* ``|a| <= a_sw(beta)``: the paper's closed form, where its cancellation is bounded:
  ``a_sw = (M / c(beta))^(1/3)`` with ``c(beta) = 1/6 + 1/(2 beta) + 1/(6 beta^(3/2))`` and
  ``M = 4`` (so the largest term is at most ~4 and the float32 error is ~1e-7). For
  ``|a| < a_0 = sqrt(2 beta) / (sqrt(beta) + 10)`` both truncation points lie more than 10
  standard deviations away and the tail correction (< 1e-20) is dropped exactly, which also
  gives the guard at ``x = 0``: ``psi(x) = x - x^3 (1/(2 beta) + 1/6) / s^2``, ``psi'(0) = 1``.
* ``|a| > a_sw``: the *saturated-tails* form. With ``Y = a + b xi ~ N(|a|, (|a|/sqrt beta)^2)``
  (take ``a > 0``; psi is odd) and ``r = 1/a = s/|x|``,

  .. math::

      E\phi(Y) = \tfrac{2\sqrt2}{3}\big[\Phi(-V_-) - \Phi(-V_+)\big]
                 + \int_{-\sqrt2}^{\sqrt2} (y - y^3/6)\, p(y)\, dy,

  :math:`V_\mp = \sqrt\beta(\sqrt2\, r \mp 1)`, :math:`p(y) = \sqrt\beta\, r\,
  \varphi(\sqrt\beta(r y - 1))` the density of ``Y``. The tail probabilities are erfc values
  of arguments computed from ``r`` (never from ``a``, which overflows), and the middle term
  integrates a *bounded* smooth function over a bounded interval (``|y - y^3/6| <= 2 sqrt2/3``),
  so nothing large is ever subtracted: the absolute error is a few float32 ulps for every
  ``|x|`` up to the largest finite float, and ``r -> 0`` gives the exact limit
  ``(2 sqrt2/3) erf(sqrt(beta/2))``. The middle integral has no stable elementary closed form
  (it is a Gaussian-moment difference over an interval of width ``2 sqrt2 sqrt(beta) r`` in
  standard units, which is exactly the cancellation to avoid), so it is evaluated by a fixed
  Gauss–Legendre rule (12 nodes in float32, 24 in float64) on ``[-sqrt2, sqrt2]`` clipped to
  ``a -+ 9 b`` (the Gaussian mass outside is < 2e-19). The integrand is entire and, in the tail
  branch, spans at most ~9 standard deviations on one side of the mode or a few around it, where
  8 (16) nodes already reach float32 (float64) round-off for every ``beta`` in [3e-3, 1e5]
  (measured against mpmath; ``tests/test_robust_mean.py`` keeps checking it). This is a
  deterministic quadrature of the analytic expectation, not Monte Carlo.

Measured against a 40-digit mpmath evaluation of the defining expectation, for ``|x|/s`` from
1e-30 to 1e30 and ``beta`` from 0.01 to 1e5: max absolute error of ``psi / s`` 2e-7 in float32
and 5e-16 in float64.

Finally ``psi`` is clamped to ``[-2 sqrt2 s/3, 2 sqrt2 s/3]`` (a no-op in exact arithmetic) so
that the sensitivity bound holds under floating point for *every* input; ``NaN`` inputs are
mapped to ``psi = 0`` (a bounded, deterministic value, so a ``NaN`` record cannot break the
sensitivity bound), ``+-inf`` to the tail limit, and ``s = inf`` gives the identity.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erfc

from dpjax import _validate
from dpjax.mechanisms import (
    BoundedStatistic,
    PrivacyEvent,
    bounded_mean_from_sum,
    gaussian_mechanism,
    local_mechanism,
)

__all__ = [
    "PHI_MAX",
    "CentralRelease",
    "LocalRelease",
    "SmoothingParameters",
    "central_parameters",
    "ldp_parameters",
    "local_scores",
    "phi",
    "private_mean_central",
    "private_mean_central_from_sum",
    "private_mean_local",
    "psi",
    "psi_bound",
    "psi_sums",
    "psi_tail_limit",
    "psi_textbook",
    "robust_mean_from_sum",
    "robust_mean_statistic",
    "thm2_parameters",
    "wang2020_parameters",
]

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

#: ``sup |phi| = phi(sqrt 2) = sqrt2 - sqrt2^3 / 6 = 2 sqrt2 / 3``: the bound every sensitivity
#: in this module is computed from.
PHI_MAX: float = _SQRT2 - _SQRT2**3 / 6.0

# Largest |a|^3 c(beta) for which the paper's closed form is used (its absolute rounding error
# is about eps * _CANCELLATION_MAX; measured ~1e-7 in float32).
_CANCELLATION_MAX = 4.0
# Below a_0 both truncation points are more than _TAIL_SDS standard deviations from the mean:
# the tail correction is < exp(-_TAIL_SDS^2 / 2) * O(1) ~ 2e-22 and is dropped.
_TAIL_SDS = 10.0
# Half-width, in standard deviations of Y, of the window of the middle integral.
_WINDOW_SDS = 9.0
# Finite stand-in for |a| = |x|/s when it overflows (only used to place the window).
_A_CAP = 1e30
# Gauss-Legendre rules for the middle integral. Measured worst absolute error of psi / s over
# beta in [3e-3, 1e5] and every |a| > a_sw: 8 nodes reach float32 round-off (1.1e-7) and 16
# nodes float64 round-off (2e-16); 12 and 24 leave a margin.
_GL_RULES = {
    np.dtype(np.float32): np.polynomial.legendre.leggauss(12),
    np.dtype(np.float64): np.polynomial.legendre.leggauss(24),
}


# --------------------------------------------------------------------------------------------
# The soft truncation and the smoothed score
# --------------------------------------------------------------------------------------------


def phi(u: Any) -> jax.Array:
    r"""Catoni–Giulini soft truncation (spec 002 eq. 9).

    :math:`\phi(u) = u - u^3/6` on :math:`[-\sqrt2, \sqrt2]` and :math:`\pm 2\sqrt2/3` outside;
    odd, nondecreasing, :math:`C^1` (:math:`\phi'(\pm\sqrt2) = 0`), bounded by ``PHI_MAX``.
    Differentiable everywhere (the cubic is only evaluated inside, so huge ``u`` give a zero,
    not a NaN, gradient). NaN propagates.
    """
    u = jnp.asarray(u)
    u = u.astype(jnp.promote_types(u.dtype, jnp.float32))
    inside = jnp.abs(u) <= _SQRT2
    u_in = jnp.where(inside, u, jnp.zeros_like(u))
    return jnp.where(inside, u_in - u_in**3 / 6.0, jnp.sign(u) * PHI_MAX)


def psi_bound(s: Any) -> Any:
    r"""``sup_x |psi_{s,beta}(x)| <= s * PHI_MAX = 2 sqrt2 s / 3`` (any ``beta``).

    :func:`psi` is clamped to exactly this value, and every sensitivity in this module is
    computed from it (the replace-one range of one score is ``2 psi_bound(s)``).
    """
    return PHI_MAX * s


def psi_tail_limit(s: Any, beta_smooth: Any) -> jax.Array:
    r"""``psi(+inf) = s (2 sqrt2/3) (2 Phi(sqrt beta) - 1) = s PHI_MAX erf(sqrt(beta/2))``.

    The supremum of ``psi`` (it increases to this limit), strictly below :func:`psi_bound`.
    """
    return PHI_MAX * jnp.asarray(s) * jax.scipy.special.erf(jnp.sqrt(jnp.asarray(beta_smooth) / 2))


def _norm_sf(v: jax.Array) -> jax.Array:
    """``Phi(-v) = P(xi > v)`` via erfc (relative accuracy in the upper tail)."""
    return 0.5 * erfc(v / _SQRT2)


def _tail_correction(a: jax.Array, sqrt_beta: jax.Array) -> jax.Array:
    r"""The paper's ``C_hat(a, b)`` (App D), ``b = |a| / sqrt(beta)``; needs ``a != 0``.

    ``C_hat = T1 + ... + T5`` are the truncated Gaussian moments of orders 0–3 of ``a + b xi``
    over the two saturated regions ``{xi > V-}`` and ``{xi < -V+}``.
    """
    b = jnp.abs(a) / sqrt_beta
    v_m = (_SQRT2 - a) / b
    v_p = (_SQRT2 + a) / b
    f_m, f_p = _norm_sf(v_m), _norm_sf(v_p)
    e_m, e_p = jnp.exp(-0.5 * v_m * v_m), jnp.exp(-0.5 * v_p * v_p)
    t1 = PHI_MAX * (f_m - f_p)
    t2 = -(a - a**3 / 6.0) * (f_m + f_p)
    t3 = b * _INV_SQRT_2PI * (1.0 - a * a / 2.0) * (e_p - e_m)
    t4 = 0.5 * a * b * b * (f_p + f_m + _INV_SQRT_2PI * (v_p * e_p + v_m * e_m))
    t5 = b**3 * _INV_SQRT_2PI / 6.0 * ((2.0 + v_m * v_m) * e_m - (2.0 + v_p * v_p) * e_p)
    return t1 + t2 + t3 + t4 + t5


def _core(a: jax.Array, beta: jax.Array, sqrt_beta: jax.Array) -> jax.Array:
    """``E phi(a + b xi)`` by the paper's closed form, for signed ``a``; exactly odd in ``a``."""
    # a (1 - b^2/2) - a^3/6 with b^2 = a^2 / beta, written as a * even(a) so that it is odd bit
    # for bit (and d/da = 1 at a = 0).
    poly = a * (1.0 - a * a * (1.0 / 6.0 + 0.5 / beta))
    abs_a = jnp.abs(a)
    # Distance, in standard deviations, from the mean to the nearer truncation point (inf at 0).
    nearer = sqrt_beta * (_SQRT2 / abs_a - 1.0)
    need = nearer <= _TAIL_SDS
    # C_hat is odd; evaluating it at |a| and restoring the sign keeps psi odd bit for bit (at
    # -a the two tails swap roles, and fused multiply-adds would round the swapped sums
    # differently). It is evaluated at a harmless point where it is not needed, so neither the
    # value nor the gradient of the unused branch can be NaN (b = 0 at a = 0 gives V * E = NaN).
    abs_safe = jnp.where(need, abs_a, jnp.ones_like(a))
    correction = jnp.sign(a) * _tail_correction(abs_safe, sqrt_beta)
    return poly + jnp.where(need, correction, jnp.zeros_like(a))


def _saturated(a: jax.Array, r: jax.Array, sqrt_beta: jax.Array) -> jax.Array:
    """``E phi(Y)``, ``Y ~ N(a, a^2/beta)``, for ``a = 1/r > 0`` (possibly ``inf``, ``r = 0``)."""
    dtype = r.dtype
    v_m = sqrt_beta * (_SQRT2 * r - 1.0)  # (sqrt2 - a) / b
    v_p = sqrt_beta * (_SQRT2 * r + 1.0)  # (sqrt2 + a) / b
    tails = PHI_MAX * (_norm_sf(v_m) - _norm_sf(v_p))
    # Middle part over [-sqrt2, sqrt2] intersected with a -+ K b (b = a / sqrt beta).
    a_f = jnp.minimum(a, jnp.asarray(_A_CAP, dtype))
    lo = jnp.maximum(-_SQRT2, a_f * (1.0 - _WINDOW_SDS / sqrt_beta))
    hi = jnp.minimum(_SQRT2, a_f * (1.0 + _WINDOW_SDS / sqrt_beta))
    lo = jnp.minimum(lo, hi)
    mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    rule = _GL_RULES.get(np.dtype(dtype), _GL_RULES[np.dtype(np.float64)])
    rule_shape = (1,) * r.ndim + (-1,)  # the rule on a new last axis (no rank promotion)
    nodes = jnp.reshape(jnp.asarray(rule[0], dtype), rule_shape)
    weights = jnp.reshape(jnp.asarray(rule[1], dtype), rule_shape)
    y = mid[..., None] + half[..., None] * nodes
    z = sqrt_beta * (r[..., None] * y - 1.0)  # (y - a) / b, from r: no overflow
    density = (sqrt_beta * _INV_SQRT_2PI) * r[..., None] * jnp.exp(-0.5 * z * z)
    middle = half * jnp.sum(weights * (y - y**3 / 6.0) * density, -1)
    return tails + middle


def _float_dtype(x: jax.Array) -> Any:
    return jnp.promote_types(x.dtype, jnp.float32)


def _is_concrete(*values: Any) -> bool:
    return not any(isinstance(v, jax.core.Tracer) for v in values)


def _check_psi_params(s: Any, beta_smooth: Any) -> None:
    if _is_concrete(s):
        _validate.check_positive(s, "s", allow_inf=True)
    if _is_concrete(beta_smooth):
        _validate.check_positive(beta_smooth, "beta_smooth")


def psi(x: Any, s: Any, beta_smooth: Any) -> jax.Array:
    r"""Holland's smoothed score :math:`\psi_{s,\beta}(x) = s\,E\,\phi((1+\eta)x/s)`, stable.

    .. math::

        \psi_{s,\beta}(x) = x\Big(1 - \frac{x^2}{2 s^2 \beta}\Big) - \frac{x^3}{6 s^2}
        + s\,\hat C\Big(\frac{x}{s}, \frac{|x|}{s\sqrt\beta}\Big),
        \qquad \eta \sim N(0, 1/\beta),

    evaluated as described in the module docstring (paper's closed form near 0, saturated-tails
    form beyond ``|x|/s = a_sw(beta)``), then clamped to ``[-psi_bound(s), psi_bound(s)]``.
    Elementwise, vectorised, jit/vmap/grad-safe; the gradient is finite everywhere (1 at 0).
    Computed in ``x``'s floating dtype (at least float32).

    Special inputs: ``x = NaN`` gives ``0`` (documented choice: bounded, deterministic, and the
    score of the midpoint of the range, so a NaN record cannot break the sensitivity bound);
    ``x = +-inf`` gives ``+-psi_tail_limit(s, beta_smooth)``; ``s = inf`` gives ``psi(x) = x``
    (no truncation). Float32 denormals are flushed to zero by XLA on CPU, so they score 0 (their
    exact score is the denormal itself); ``+-3.4e38`` scores the tail limit to float32
    precision.

    Args:
        x: data, any shape.
        s: truncation scale, in ``(0, inf]``; a scalar (array allowed, traced allowed).
        beta_smooth: precision of the multiplicative smoothing noise, in ``(0, inf)`` (the paper's
            scalar ``beta``); a scalar.

    Returns:
        ``psi(x)``, same shape as ``x``.

    Raises:
        ValueError: (host values only) if ``s`` or ``beta_smooth`` is out of range.
    """
    _check_psi_params(s, beta_smooth)
    x, s, beta = _as_float_arrays(x, s, beta_smooth)
    return _psi_kernel(x, s, beta)


def _as_float_arrays(x: Any, s: Any, beta_smooth: Any) -> tuple[jax.Array, ...]:
    x = jnp.asarray(x)
    dtype = _float_dtype(x)
    return x.astype(dtype), jnp.asarray(s, dtype), jnp.asarray(beta_smooth, dtype)


@jax.jit
def _psi_kernel(x: jax.Array, s: jax.Array, beta: jax.Array) -> jax.Array:
    # Jitted once per shape/dtype (a nested jit inlines into a caller's jit); eager calls would
    # otherwise dispatch and compile dozens of small ops one by one.
    sqrt_beta = jnp.sqrt(beta)

    is_nan = jnp.isnan(x)
    x0 = jnp.where(is_nan, jnp.zeros_like(x), x)
    s_inf = jnp.isinf(s)
    s_f = jnp.where(s_inf, jnp.ones_like(s), s)

    a = x0 / s_f  # may overflow to +-inf: only compared, never used as a value below
    abs_a = jnp.abs(a)
    c3 = 1.0 / 6.0 + 0.5 / beta + 1.0 / (6.0 * beta * sqrt_beta)
    a_switch = jnp.cbrt(_CANCELLATION_MAX / c3)
    core = abs_a <= a_switch

    # Each branch sees only its own inputs (harmless values elsewhere) so that neither the
    # value nor the gradient of the branch that is not selected can be inf or NaN.
    g_core = _core(jnp.where(core, a, jnp.zeros_like(a)), beta, sqrt_beta)
    abs_x = jnp.where(core, s_f, jnp.abs(x0))  # > 0 in the tail branch
    r = s_f / abs_x
    g_tail = jnp.sign(x0) * _saturated(jnp.where(core, jnp.ones_like(a), abs_a), r, sqrt_beta)
    g = jnp.where(core, g_core, g_tail)

    bound = psi_bound(s_f)
    out = jnp.clip(s_f * g, -bound, bound)
    out = jnp.where(s_inf, x0, out)
    return jnp.where(is_nan, jnp.zeros_like(out), out)


# Records whose score goes through the full kernel (the usual case: a few outliers per column)
# are found in two levels, super-blocks of _BLOCK * _SUPER records and then blocks of _BLOCK
# records, at most ``size / _PASS_SHARE`` of each per pass, so that nothing but the flags costs
# O(size) (``nonzero`` needs a prefix sum, and XLA's run at ~5-40 ns per element on CPU); from
# each block found its first and its last pending record go through the kernel, and the passes
# repeat until none is left (many when most records need it: small truncation scales).
_BLOCK = 16
_SUPER = 16
_PASS_SHARE = 1024
# Relative margin below the polynomial's exact range (|a| <= a_sw, both truncation points more
# than _TAIL_SDS standard deviations away), so that float rounding of the per-row limit cannot
# send a record the kernel treats otherwise to the polynomial; the margin's records take the
# full kernel.
_LIMIT_MARGIN = 1e-5


def _polynomial_only(x: jax.Array, s: jax.Array, beta: jax.Array) -> tuple[jax.Array, ...]:
    """``(value, mask)``: where ``mask``, :func:`_psi_kernel` reduces *exactly* to the clamped
    polynomial ``s a (1 - a^2 (1/6 + 1/(2 beta)))`` (finite ``x`` and ``s``, ``|a| <= a_sw``,
    and both truncation points more than ``_TAIL_SDS`` standard deviations away, that is
    ``|a| < sqrt2 / (1 + _TAIL_SDS / sqrt(beta))``, less a margin) or, for ``s = inf``, to the
    identity; and that value, computed with the kernel's own expressions. The mask is one
    comparison per record against a per-row limit on ``|x|`` (``s`` and ``beta`` broadcast
    against ``x`` are per row)."""
    sqrt_beta = jnp.sqrt(beta)
    s_ok = jnp.isfinite(s)
    s_f = jnp.where(s_ok, s, jnp.ones_like(s))
    c3 = 1.0 / 6.0 + 0.5 / beta + 1.0 / (6.0 * beta * sqrt_beta)
    a_lim = jnp.minimum(jnp.cbrt(_CANCELLATION_MAX / c3), _SQRT2 / (1.0 + _TAIL_SDS / sqrt_beta))
    big = jnp.asarray(jnp.finfo(x.dtype).max, x.dtype)  # a finite x only: +-inf take the kernel
    x_lim = jnp.where(s_ok, jnp.minimum(s_f * (a_lim * (1.0 - _LIMIT_MARGIN)), big),
                      jnp.asarray(jnp.inf, x.dtype))
    poly_ok = jnp.abs(x) <= x_lim  # False for NaN
    a_in = jnp.where(poly_ok, x / s_f, jnp.zeros_like(x))
    poly = a_in * (1.0 - a_in * a_in * (1.0 / 6.0 + 0.5 / beta))
    bound = psi_bound(s_f)
    # s = inf: no truncation, psi(x) = x (x = +-inf included), exactly as in the kernel
    value = jnp.where(s_ok, jnp.clip(s_f * poly, -bound, bound), x)
    return value, poly_ok


def _full_scores(x: jax.Array, s: jax.Array, beta: jax.Array, idx: jax.Array, m: int
                 ) -> jax.Array:
    """The full kernel at the flat positions ``idx`` (clipped into range) of the flat records
    ``x``, each with the ``s`` and ``beta`` of its row (rows of ``m`` records)."""
    idx = jnp.clip(idx, 0, x.shape[0] - 1)
    row = jnp.minimum(idx // m, s.shape[0] - 1)  # (the padding past the last row)
    return jax.vmap(_psi_kernel)(x[idx], s[row], beta[row])


def _gathered_pass(todo, x, s, beta, m, cap):
    """``(target, scores, todo)``: the first and the last pending record of up to ``cap``
    blocks of ``_BLOCK`` records that hold one, found among up to ``cap`` super-blocks of
    ``_BLOCK * _SUPER`` records (``x`` padded to whole super-blocks), their flat positions
    (``size``, out of range, where a slot holds none), their scores by the full kernel, and
    ``todo`` with them cleared."""
    size = x.shape[0]
    big = _BLOCK * _SUPER
    nsup = size // big
    by_super = todo.reshape(nsup, big)
    (sup,) = jnp.nonzero(jnp.any(by_super, axis=1), size=min(cap, nsup), fill_value=nsup)
    sub_todo = jnp.take(by_super, sup, axis=0, mode="fill", fill_value=False)
    sub_todo = sub_todo.reshape(-1, _BLOCK)  # (cap * _SUPER, _BLOCK)
    (sub,) = jnp.nonzero(jnp.any(sub_todo, axis=1), size=min(cap, sub_todo.shape[0]),
                         fill_value=sub_todo.shape[0])
    blocks = jnp.take(sub_todo, sub, axis=0, mode="fill", fill_value=False)  # (cap, _BLOCK)
    sup_of = jnp.take(sup, sub // _SUPER, mode="fill", fill_value=nsup)
    start = sup_of * big + (sub % _SUPER) * _BLOCK  # >= size for fills
    first = jnp.argmax(blocks, axis=1)
    last = _BLOCK - 1 - jnp.argmax(blocks[:, ::-1], axis=1)
    held = jnp.any(blocks, axis=1)
    idx = jnp.concatenate([start + first, start + last])
    pending = jnp.concatenate([held, held & (last != first)])
    target = jnp.where(pending, idx, size)  # size: out of range, dropped
    return target, _full_scores(x, s, beta, idx, m), todo.at[target].set(False, mode="drop")


def _psi_rows_or_sums(x: jax.Array, s: jax.Array, beta: jax.Array, sums: bool) -> jax.Array:
    """:func:`psi` of the rows of ``x`` (``(..., m)``), row ``r`` with its own ``s[r]`` and
    ``beta[r]`` (shape ``x.shape[:-1]``); with ``sums``, only each row's sum of scores (shape
    ``x.shape[:-1]``), never materialising them. Every record takes the clamped polynomial
    where psi reduces to it; only the others go through the full kernel, gathered from the
    blocks that hold them (:func:`_gathered_pass`), in passes until none is left, so every
    input gets its score whatever their number."""
    lead, m = x.shape[:-1], x.shape[-1]
    s_rows = jnp.broadcast_to(s, lead)[..., None]  # (..., 1): per-row scalars, no rank change
    beta_rows = jnp.broadcast_to(beta, lead)[..., None]
    cheap_value, cheap = _polynomial_only(x, s_rows, beta_rows)
    size = x.size
    pad = -(-size // (_BLOCK * _SUPER)) * _BLOCK * _SUPER - size

    def flat(v):
        return jnp.pad(v.reshape(size), (0, pad)) if pad else v.reshape(size)

    x_f, todo = flat(x), flat(~cheap)
    s_f, beta_f = s_rows.reshape(-1), beta_rows.reshape(-1)
    cap = max(1, -(-size // _PASS_SHARE))

    # No branch on how many records are pending: a count over every record, and a conditional
    # carrying the scores, cost more than the whole polynomial here (measured: 20-35 ms against
    # 5 ms at 8e6 records on CPU); when none is, the loop's test is its only cost.
    def loop(body, carry):
        return jax.lax.while_loop(lambda c: jnp.any(c[-1]), body, carry)

    if not sums:
        def scatter(c):
            out, todo = c
            target, full, todo = _gathered_pass(todo, x_f, s_f, beta_f, m, cap)
            return out.at[target].set(full, mode="drop"), todo

        out, _ = loop(scatter, (flat(cheap_value), todo))
        return out[:size].reshape(x.shape)

    rows = size // m

    def add(c):
        corr, todo = c
        target, full, todo = _gathered_pass(todo, x_f, s_f, beta_f, m, cap)
        return corr.at[target // m].add(full, mode="drop"), todo  # size // m: dropped

    # the polynomial's scores summed where they stand (a fused reduction), the others added
    base = jnp.sum(jnp.where(cheap, cheap_value, jnp.zeros_like(cheap_value)), axis=-1)
    corr, _ = loop(add, (jnp.zeros((rows,), x.dtype), todo))
    return base + corr.reshape(lead)


# (custom_vmap traces every parameter, defaults included: one function each, no flag)
def _psi_rows_impl(x: jax.Array, s: jax.Array, beta: jax.Array) -> jax.Array:
    return _psi_rows_or_sums(x, s, beta, sums=False)


def _psi_sums_impl(x: jax.Array, s: jax.Array, beta: jax.Array) -> jax.Array:
    return _psi_rows_or_sums(x, s, beta, sums=True)


_psi_rows = jax.custom_batching.custom_vmap(_psi_rows_impl)


@_psi_rows.def_vmap
def _psi_rows_vmap(axis_size, in_batched, x, s, beta):
    """Under ``vmap`` (over columns, privacy levels, repetitions) the batch axis becomes one
    more row axis, with ``s`` and ``beta`` broadcast per row; the call is again
    :func:`_psi_rows`, so every enclosing ``vmap`` folds in the same way and the loop of
    :func:`_psi_rows_impl` runs once for the whole batch (under a plain ``vmap`` its
    test would be batched and every pass would run on every member)."""
    return _fold_batch(_psi_rows, axis_size, in_batched, x, s, beta)


def _fold_batch(fun, axis_size, in_batched, x, s, beta):
    """The batch axis as one more row axis of ``x`` (``s``, ``beta`` broadcast per row), then
    ``fun`` (a ``custom_vmap`` of the same rows): the vmap rule of both psi row functions."""
    x_b, s_b, beta_b = in_batched
    if not x_b:
        x = jnp.broadcast_to(x, (axis_size, *x.shape))
    lead = x.shape[:-1]
    s = jnp.broadcast_to(s if s_b else jnp.asarray(s), lead)
    beta = jnp.broadcast_to(beta if beta_b else jnp.asarray(beta), lead)
    return fun(x, s, beta), True


_psi_sums = jax.custom_batching.custom_vmap(_psi_sums_impl)


@_psi_sums.def_vmap
def _psi_sums_vmap(axis_size, in_batched, x, s, beta):
    """:func:`_psi_rows_vmap` for the row sums."""
    return _fold_batch(_psi_sums, axis_size, in_batched, x, s, beta)


@jax.custom_jvp
def _psi_scores(x: jax.Array, s: jax.Array, beta: jax.Array) -> jax.Array:
    """:func:`psi` of a 1-D ``x``, the same values, at a fraction of the cost when few records
    need the tail branches: the cheap records take the polynomial, the others are gathered
    through the full kernel (:func:`_psi_rows_impl`; equal to :func:`psi` up to float rounding
    of fused operations, a few ulps of ``s``). Differentiable: the derivative is the full
    kernel's."""
    return _psi_rows(x, s, beta)


@_psi_scores.defjvp
def _psi_scores_jvp(primals, tangents):
    return jax.jvp(_psi_kernel, primals, tangents)


@jax.jit
def _psi_columns(x: jax.Array, s: jax.Array, beta: jax.Array) -> jax.Array:
    """:func:`psi` of ``(n,)`` or ``(n, d)`` records, column by column, with the full kernel
    only where it is needed (:func:`_psi_scores`)."""
    if x.ndim == 1:
        return _psi_scores(x, s, beta)
    return jax.vmap(_psi_scores, (1, None, None), 1)(x, s, beta)


@jax.custom_jvp
def _psi_score_sum(x: jax.Array, s: jax.Array, beta: jax.Array) -> jax.Array:
    """``sum(psi(x))`` of a 1-D ``x`` (:func:`_psi_sums`: the scores are never materialised;
    equal to summing :func:`_psi_scores` up to the order of the float additions).
    Differentiable: the derivative is the full kernel's."""
    return _psi_sums(x, s, beta)


@_psi_score_sum.defjvp
def _psi_score_sum_jvp(primals, tangents):
    return jax.jvp(lambda x, s, beta: jnp.sum(_psi_kernel(x, s, beta)), primals, tangents)


@jax.jit
def _psi_column_sums(x: jax.Array, s: jax.Array, beta: jax.Array) -> jax.Array:
    """Each column's sum of :func:`psi` scores of ``(n,)`` (a scalar) or ``(n, d)`` records
    (``(d,)``), the scores never materialised."""
    if x.ndim == 1:
        return _psi_score_sum(x, s, beta)
    return jax.vmap(_psi_score_sum, (1, None, None), 0)(x, s, beta)


def psi_textbook(x: Any, s: Any, beta_smooth: Any) -> jax.Array:
    r"""The paper's closed form (eq. 12 + App D) for *every* ``x``, with only the guard at 0.

    ``s [a (1 - b^2/2) - a^3/6 + C_hat(a, b)]``, ``a = x/s``, ``b = |x| / (s sqrt(beta))``.
    Exact in exact arithmetic but it cancels catastrophically for large ``|x|/s`` (float32:
    error ~1e-3 at ``|x|/s = 50``; float64: ~1e-8 at 1e3). Not clamped. Kept as the literal
    reference for tests and comparisons; use :func:`psi`.
    """
    _check_psi_params(s, beta_smooth)
    return _textbook_kernel(*_as_float_arrays(x, s, beta_smooth))


@jax.jit
def _textbook_kernel(x: jax.Array, s: jax.Array, beta: jax.Array) -> jax.Array:
    a = x / s
    zero = a == 0
    a_safe = jnp.where(zero, jnp.ones_like(a), a)
    poly = a_safe * (1.0 - a_safe * a_safe / (2.0 * beta)) - a_safe**3 / 6.0
    g = poly + _tail_correction(a_safe, jnp.sqrt(beta))
    return jnp.where(zero, jnp.zeros_like(x), s * g)


# --------------------------------------------------------------------------------------------
# The statistic
# --------------------------------------------------------------------------------------------


def robust_mean_statistic(x: Any, s: Any, beta_smooth: Any, count: Any = None
                          ) -> BoundedStatistic:
    r"""The robust mean :math:`\hat x = \frac1n\sum_i \psi_{s,\beta}(x_i)` with its sensitivity.

    Spec 002 eq. 11 (``(s/n) sum_i E phi((1 + eta_i) x_i / s)``). Every score lies in
    ``[-psi_bound(s), psi_bound(s)]``, so replacing one record moves each coordinate of the
    mean by at most ``2 psi_bound(s) / n = (4 sqrt2 / 3) s / n``: the declared replace-one
    sensitivity, computed from :func:`psi_bound` (the clamp of :func:`psi`), in l2 norm. For
    ``x`` of shape ``(n, d)`` the robust mean is taken per coordinate (spec 002 eq. 16) and the
    l2 sensitivity of the ``d``-vector is ``sqrt(d)`` times that (all coordinates of one record
    may move at once).

    Args:
        x: ``(n,)`` or ``(n, d)`` records on axis 0; ``n`` (a shape) is public.
        s: truncation scale in ``(0, inf]`` (``inf``: the plain mean, infinite sensitivity).
        beta_smooth: smoothing precision in ``(0, inf)``.
        count: the public number of records when ``x`` is padded (its rows past the records
            are zero, whose score ``psi(0) = 0`` adds nothing): a runtime value
            (:class:`dpjax.base.Padded`); default ``x.shape[0]``.

    Returns:
        ``BoundedStatistic(value, sensitivity, norm="l2", relation="replace-one")``.
    """
    x = jnp.asarray(x)
    if x.ndim not in (1, 2) or x.shape[0] < 1:
        raise ValueError(f"x must have shape (n,) or (n, d) with n >= 1; got {x.shape}")
    _check_psi_params(s, beta_smooth)
    x, s_arr, beta = _as_float_arrays(x, s, beta_smooth)
    return robust_mean_from_sum(_psi_column_sums(x, s_arr, beta), s,
                                x.shape[0] if count is None else count)


def psi_sums(x: Any, s: Any, beta_smooth: Any) -> jax.Array:
    """Each column's sum of :func:`psi` scores of ``(n,)`` (a scalar) or ``(n, d)`` records
    (``(d,)``), the scores never materialised: the sum :func:`robust_mean_statistic` takes,
    for a caller that adds it up block by block (:func:`robust_mean_from_sum`)."""
    x = jnp.asarray(x)
    if x.ndim not in (1, 2):
        raise ValueError(f"x must have shape (n,) or (n, d); got {x.shape}")
    _check_psi_params(s, beta_smooth)
    return _psi_column_sums(*_as_float_arrays(x, s, beta_smooth))


def robust_mean_from_sum(total: Any, s: Any, count: Any) -> BoundedStatistic:
    r""":func:`robust_mean_statistic` from the sum of the scores (:func:`psi_sums`, perhaps
    added up over blocks of records) and the public number of records ``count``: the mean
    ``total / count`` with the replace-one sensitivity ``2 psi_bound(s) / count`` per
    coordinate, in l2 norm (``sqrt(d)`` times it for a ``d``-vector)."""
    total = jnp.asarray(total)
    # every score lies in [-psi_bound(s), psi_bound(s)] (psi's clamp): the sum of n of them
    # moves by at most 2 psi_bound(s) when one record is replaced
    diameter = 2.0 * psi_bound(jnp.asarray(s, total.dtype))
    return bounded_mean_from_sum(total, count, diameter, "linf").in_norm("l2")


def local_scores(x: Any, s: Any, beta_smooth: Any) -> BoundedStatistic:
    r"""Per-user scores :math:`\psi_{s,\beta}(x_i)` for local DP (spec 002 eq. 38).

    ``relation="local"``: the sensitivity bounds the range of one user's value. For ``x`` of
    shape ``(n,)`` (one number per user) it is ``2 psi_bound(s) = (4 sqrt2 / 3) s`` (any two
    records' scores differ by at most that). For ``x`` of shape ``(n, d)`` (a ``d``-vector per
    user, scored coordinate-wise as in spec 002 eq. 16) it is the l2 range of one user's
    ``d``-vector of scores, ``sqrt(d) (4 sqrt2 / 3) s`` (every coordinate may move by the full
    range at once).
    """
    x = jnp.asarray(x)
    if x.ndim not in (1, 2) or x.shape[0] < 1:
        raise ValueError(f"x must have shape (n,) or (n, d) with n >= 1; got {x.shape}")
    if x.ndim == 1:
        scores = psi(x, s, beta_smooth)
    else:
        _check_psi_params(s, beta_smooth)
        scores = _psi_columns(*_as_float_arrays(x, s, beta_smooth))
    diameter = 2.0 * psi_bound(jnp.asarray(s, scores.dtype))
    if x.ndim == 2:
        diameter = diameter * math.sqrt(x.shape[1])
    return BoundedStatistic(scores, diameter, "l2", "local")


# --------------------------------------------------------------------------------------------
# Parameter rules (s, beta_smooth) -- all in jnp, so epsilon may be traced
# --------------------------------------------------------------------------------------------


class SmoothingParameters(NamedTuple):
    """The truncation scale ``s`` and the smoothing precision ``beta_smooth``."""

    s: jax.Array
    beta_smooth: jax.Array


def wang2020_parameters(n: int, tau: Any, zeta: Any) -> SmoothingParameters:
    r"""Holland 2019 / Wang et al. 2020 (the paper's Lemmas 1–2): non-private ``s`` and ``beta``.

    ``beta_smooth = 2 log(1/zeta)``, ``s = sqrt(n tau / (2 log(1/zeta)))``. With mechanism (13)
    the error is ``O(sqrt(tau log(1/delta) log(1/zeta) / (n epsilon^2)))`` (Lemma 2): an
    epsilon-slope of -1.

    Args:
        n: number of records.
        tau: public bound on ``E x^2`` (the non-central second moment), ``> 0``.
        zeta: failure probability in ``(0, 1)``.
    """
    log_z = jnp.log(1.0 / jnp.asarray(zeta))
    return SmoothingParameters(jnp.sqrt(n * jnp.asarray(tau) / (2.0 * log_z)), 2.0 * log_z)


def thm2_parameters(n: int, epsilon: Any, delta: Any, tau: Any, zeta: Any) -> SmoothingParameters:
    r"""The paper's Theorem 2 (central DP): ``s`` re-balanced against the privacy noise.

    ``beta_smooth = sqrt(log(1/zeta))``,
    ``s = sqrt(n epsilon tau) / (log(1/zeta) log(1/delta)^(1/4))``; error
    ``O(sqrt(tau log^(1/2)(1/delta) log(1/zeta) / (n epsilon)))`` (eq. 15): an epsilon-slope of
    -1/2. (Spec 002 A6: the bias term is really ``O(tau / s)``, not ``tau / (s beta)``, so the
    rate holds up to a ``sqrt(log(1/zeta))`` factor; the printed ``s`` is used unchanged.)
    ``epsilon = inf`` gives ``s = inf`` (no truncation: the plain mean).
    """
    log_z = jnp.log(1.0 / jnp.asarray(zeta))
    log_d = jnp.log(1.0 / jnp.asarray(delta))
    s = jnp.sqrt(n * jnp.asarray(epsilon) * jnp.asarray(tau)) / (log_z * log_d**0.25)
    return SmoothingParameters(s, jnp.sqrt(log_z))


SRule = Literal["corrected", "paper_literal"]


def ldp_parameters(
    n: int, epsilon: Any, delta: Any, tau: Any, zeta: Any, s_rule: SRule = "corrected"
) -> SmoothingParameters:
    r"""``(s, beta_smooth)`` for the local mechanism (the paper's Theorem 8).

    ``beta_smooth = sqrt(log(1/zeta))`` and

    * ``s_rule="corrected"`` (default; spec 002 A5):
      ``s = n^(1/4) sqrt(epsilon tau) / (log(1/zeta) log(1/delta)^(1/4))``, the scale that
      balances the bias ``tau / s`` against the averaged noise
      ``s sqrt(log(1/delta)) / (epsilon sqrt(n))`` of eq. (41) and so delivers the claimed rate
      (39), ``O(sqrt(tau log^(1/2)(1/delta) log(1/zeta) / (sqrt(n) epsilon)))``
      (``n^(-1/4)``);
    * ``s_rule="paper_literal"``: the ``s`` printed in Thm 8,
      ``s = sqrt(n epsilon tau) / (log(1/zeta) log(1/delta)^(1/4))`` (the central one). The
      mechanism is *still* (epsilon, delta)-LDP (the noise is always calibrated from the ``s``
      actually used), but the accuracy claim (39) does **not** hold: the averaged noise has
      standard deviation ``(4 sqrt2/3) sqrt(2 log(1.25/delta)) sqrt(tau / epsilon) /
      (log(1/zeta) log(1/delta)^(1/4))``, a constant in ``n``, so the error does not go to 0 as
      ``n`` grows (the paper's own remark L196 about Holland's ``s``, which this ``s`` repeats).
    """
    log_z = jnp.log(1.0 / jnp.asarray(zeta))
    log_d = jnp.log(1.0 / jnp.asarray(delta))
    if s_rule == "corrected":
        n_factor = float(n) ** 0.25
    elif s_rule == "paper_literal":
        n_factor = math.sqrt(n)
    else:
        raise ValueError(f"s_rule must be 'corrected' or 'paper_literal'; got {s_rule!r}")
    s = n_factor * jnp.sqrt(jnp.asarray(epsilon) * jnp.asarray(tau)) / (log_z * log_d**0.25)
    return SmoothingParameters(s, jnp.sqrt(log_z))


# --------------------------------------------------------------------------------------------
# Mechanisms
# --------------------------------------------------------------------------------------------


class CentralRelease(NamedTuple):
    """Output of :func:`private_mean_central` (all public)."""

    value: jax.Array  # A(D) = x_hat + Z
    sigma: jax.Array  # std of Z actually added
    s: jax.Array
    beta_smooth: jax.Array
    event: PrivacyEvent  # the release's privacy event (classic Gaussian, replace-one)


class LocalRelease(NamedTuple):
    """Output of :func:`private_mean_local` (all public)."""

    value: jax.Array  # the server's average of the reports
    reports: jax.Array  # (n,) the users' releases psi(x_i) + N(0, sigma_report^2)
    sigma_report: jax.Array  # per-user noise std actually added
    sigma: jax.Array  # std of the noise in the average: sigma_report / sqrt(n)
    s: jax.Array
    beta_smooth: jax.Array
    event: PrivacyEvent  # one user's release (relation local; no composition across users)


Parameterisation = Literal["thm2", "wang2020"]


def _check_data(x: Any) -> jax.Array:
    # Shape only: a check on the values (e.g. NaN) would be a data-dependent error, i.e. a leak.
    x = jnp.asarray(x)
    if x.ndim != 1 or x.shape[0] < 1:
        raise ValueError(f"x must be a 1-D array of n >= 1 records; got shape {x.shape}")
    return x


def _check_budget(epsilon: Any, delta: Any, tau: Any = None, zeta: Any = None) -> None:
    if _is_concrete(epsilon):
        _validate.check_epsilon(epsilon)
    if _is_concrete(delta):
        _validate.check_delta(delta)
    if tau is not None and _is_concrete(tau):
        _validate.check_positive(tau, "tau")
    if zeta is not None and _is_concrete(zeta):
        _validate.check_delta(zeta, "zeta")


def private_mean_central(
    key: jax.Array,
    x: Any,
    epsilon: Any,
    delta: Any,
    tau: Any,
    zeta: Any,
    *,
    parameterisation: Parameterisation = "thm2",
) -> CentralRelease:
    r"""Central (epsilon, delta)-DP mean of heavy-tailed 1-D data (spec 002 mechanism 13).

    .. math::

        A(D) = \frac1n \sum_{i=1}^n \psi_{s,\beta}(x_i) + Z,\qquad Z \sim N(0, \sigma^2),\quad
        \sigma = \frac{4\sqrt2}{3}\frac{s}{n}\,\frac{\sqrt{2\log(1.25/\delta)}}{\varepsilon}.

    ``(s, beta_smooth)`` from ``parameterisation``:

    * ``"thm2"`` (default): the paper's Theorem 2, :func:`thm2_parameters`; error
      ``O(sqrt(tau log^(1/2)(1/delta) log(1/zeta) / (n epsilon)))``.
    * ``"wang2020"``: Wang et al. 2020 = the paper's Lemma 2, :func:`wang2020_parameters`;
      error ``O(sqrt(tau log(1/delta) log(1/zeta) / (n epsilon^2)))``.

    Privacy: (epsilon, delta)-DP under replace-one neighbours (same ``n``, one record
    replaced) at every epsilon (the Gaussian mechanism's default calibration: classic for
    ``epsilon <= 1``, analytic above).
    ``s`` depends only on public quantities (``n``, ``epsilon``, ``delta``, ``tau``, ``zeta``);
    the sensitivity is ``(4 sqrt2/3) s / n`` whatever the data (NaN records score 0).
    ``epsilon = inf`` adds exactly no noise (and with ``"thm2"`` then ``s = inf``: the plain
    mean).

    Pure and jittable (``parameterisation`` static); ``epsilon`` and ``delta`` may be traced
    arrays (vmap over them; no recompilation when they change). Host values are validated.

    Args:
        key: PRNG key (used once).
        x: ``(n,)`` records.
        epsilon: privacy budget in ``(0, inf]``.
        delta: in ``(0, 1)``.
        tau: public bound on ``E x^2`` (not estimated from the data), ``> 0``.
        zeta: failure probability of the accuracy guarantee, in ``(0, 1)``.
        parameterisation: ``"thm2"`` or ``"wang2020"``.

    Returns:
        :class:`CentralRelease` ``(value, sigma, s, beta_smooth)``.
    """
    x = _check_data(x)
    _check_budget(epsilon, delta, tau, zeta)
    params = central_parameters(x.shape[0], epsilon, delta, tau, zeta, parameterisation)
    stat = robust_mean_statistic(x, params.s, params.beta_smooth)
    return _central_release(key, stat, params, epsilon, delta)


def central_parameters(n: Any, epsilon: Any, delta: Any, tau: Any, zeta: Any,
                       parameterisation: Parameterisation = "thm2") -> SmoothingParameters:
    """``(s, beta_smooth)`` of :func:`private_mean_central` for ``n`` records (a public
    number; an array at runtime for a padded program): :func:`thm2_parameters` or
    :func:`wang2020_parameters`."""
    if parameterisation == "thm2":
        return thm2_parameters(n, epsilon, delta, tau, zeta)
    if parameterisation == "wang2020":
        return wang2020_parameters(n, tau, zeta)
    raise ValueError(
        f"parameterisation must be 'thm2' or 'wang2020'; got {parameterisation!r}"
    )


def private_mean_central_from_sum(key: jax.Array, total: Any, count: Any, epsilon: Any,
                                  delta: Any, params: SmoothingParameters) -> CentralRelease:
    """:func:`private_mean_central` from the sum of the records' scores
    (:func:`psi_sums` at ``params``, :func:`central_parameters` of ``count``; perhaps added
    up over blocks of records, :func:`dpjax.base.fold_rows`) and the public number of records
    ``count``: the same release, value, noise and privacy event."""
    _check_budget(epsilon, delta)
    stat = robust_mean_from_sum(total, params.s, count)
    return _central_release(key, stat, params, epsilon, delta)


def _central_release(key: jax.Array, stat: BoundedStatistic, params: SmoothingParameters,
                     epsilon: Any, delta: Any) -> CentralRelease:
    # the classic Gaussian calibration sigma = Delta_2 sqrt(2 log(1.25/delta)) / epsilon
    noisy, event = gaussian_mechanism(key, stat, epsilon, delta)
    return CentralRelease(noisy, event.scale.astype(noisy.dtype), params.s, params.beta_smooth,
                          event)


def private_mean_local(
    key: jax.Array,
    x: Any,
    epsilon: Any,
    delta: Any,
    tau: Any,
    zeta: Any,
    *,
    s_rule: SRule = "corrected",
) -> LocalRelease:
    r"""Local (epsilon, delta)-DP mean of heavy-tailed 1-D data (spec 002 App F, Thm 8).

    User ``i`` releases :math:`r_i = \psi_{s,\beta}(x_i) + N(0, \sigma_{loc}^2)` with
    :math:`\sigma_{loc} = \frac{4\sqrt2 s}{3}\frac{\sqrt{2\log(1.25/\delta)}}{\varepsilon}`; the
    server outputs :math:`\frac1n\sum_i r_i = \hat x + N(0, \sigma_{loc}^2/n)` (eq. 40).

    Privacy: each report is (epsilon, delta)-DP with respect to its own user's record (any two
    records' scores differ by at most ``(4 sqrt2/3) s``; classic Gaussian calibration for
    ``epsilon <= 1``, analytic above): non-interactive (epsilon, delta)-LDP; the average is
    post-processing. ``s`` depends only on public inputs. The users' noise is drawn here from
    ``n`` independent keys split from ``key`` (:func:`~dpjax.mechanisms.local_mechanism`).

    ``s_rule`` (see :func:`ldp_parameters`): ``"corrected"`` (default, spec 002 A5) gives the
    claimed ``n^(-1/4)`` rate; ``"paper_literal"`` (the ``s`` printed in Thm 8) is equally
    private but its error does not decrease with ``n``.

    Args:
        key: PRNG key (used once).
        x: ``(n,)`` records, one per user.
        epsilon, delta: each user's budget; ``epsilon`` in ``(0, inf]``, ``delta`` in (0, 1).
        tau: public bound on ``E x^2``; zeta: failure probability in (0, 1).
        s_rule: ``"corrected"`` or ``"paper_literal"``.

    Returns:
        :class:`LocalRelease` ``(value, reports, sigma_report, sigma, s, beta_smooth)``.
    """
    x = _check_data(x)
    _check_budget(epsilon, delta, tau, zeta)
    n = x.shape[0]
    params = ldp_parameters(n, epsilon, delta, tau, zeta, s_rule)
    scores = local_scores(x, params.s, params.beta_smooth)
    # every user randomises their own score with the classic Gaussian (its own key)
    reports, event = local_mechanism(key, scores, gaussian_mechanism, epsilon, delta)
    sigma_report = event.scale.astype(reports.dtype)
    return LocalRelease(
        jnp.mean(reports), reports, sigma_report, sigma_report / math.sqrt(n), params.s,
        params.beta_smooth, event,
    )
