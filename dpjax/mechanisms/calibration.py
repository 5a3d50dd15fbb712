"""Calibration: noise scale = sensitivity x multiplier(budget).

One function per calibration (the table in :mod:`dpjax.mechanisms`); each works on host
numbers (NumPy, float64) and on traced arrays (float32 unless x64), so privacy levels can be
``vmap``-ed. ``epsilon = inf`` (or ``rho = inf``) gives a zero multiplier and exactly zero
noise (:func:`noise_scale`: ``0 * inf := 0``). The constants of the (epsilon, delta)
calibrations live in :func:`epsilon_constant` only; the ledger reads them there.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
from jax.scipy.special import log_ndtr, ndtri

from dpjax import _float_sampler, _validate
from dpjax._gaussian_curve import gaussian_mu_for_epsilon

__all__ = [
    "GAUSSIAN_CALIBRATIONS",
    "PEELING_CALIBRATIONS",
    "check_gaussian_mean",
    "epsilon_constant",
    "gaussian_multiplier",
    "gaussian_multiplier_analytic",
    "gaussian_multiplier_classic",
    "gaussian_multiplier_zcdp",
    "gaussian_sigma",
    "gaussian_sigma_classic",
    "gaussian_sigma_zcdp",
    "laplace_multiplier",
    "laplace_scale",
    "noise_scale",
    "peeling_coordinate_epsilon",
    "peeling_multiplier",
    "peeling_scale",
]

#: calibrations of the (epsilon, delta) Gaussian mechanism (:func:`gaussian_multiplier`)
GAUSSIAN_CALIBRATIONS: tuple[str, ...] = ("classic-or-analytic", "analytic", "classic", "mu")


def _is_host(*args: Any) -> bool:
    return not any(isinstance(a, jax.Array) for a in args)


def _xp(*args: Any):
    return np if _is_host(*args) else jnp


def epsilon_constant(kind: str, delta: Any = 0.0, s: int = 1, log_constant: float = 1.25) -> Any:
    """``K`` in ``scale = sensitivity * K / epsilon``: the one place each (epsilon, delta)
    calibration constant lives. The ledger inverts it, ``epsilon = sensitivity * K / scale``.

    * ``"laplace"``: ``K = 1`` (epsilon-DP);
    * ``"gaussian"`` (its classic calibration): ``K = sqrt(2 log(c / delta))`` with
      ``c = log_constant`` (1.25, Dwork & Roth Thm A.1; proven for epsilon <= 1; spec 003 prints
      ``c = 2``). The ledger does not invert it: it reads Gaussian releases off the exact curve;
    * ``"noisy-ht"``: ``K = 2 sqrt(3 s log(1 / delta))`` (Dwork, Su & Zhang 2018; spec 000
      Alg 1, spec 003 Alg 3). ``s`` may be an array (a runtime sparsity, traced or not).
    """
    if kind in ("laplace", "discrete-laplace", "ldp-randomizer"):  # pure epsilon-DP kinds
        return 1.0
    xp = _xp(delta, s)
    if kind == "gaussian":
        return xp.sqrt(2.0 * xp.log(log_constant / xp.asarray(delta, dtype=float)))
    if kind == "noisy-ht":
        return 2.0 * xp.sqrt(3.0 * s * xp.log(1.0 / xp.asarray(delta, dtype=float)))
    raise ValueError(f"no epsilon calibration constant for kind {kind!r}")


def laplace_multiplier(epsilon: Any) -> Any:
    """Laplace scale per unit of l1 sensitivity: ``1 / epsilon`` (0 at epsilon = inf)."""
    return epsilon_constant("laplace") / _xp(epsilon).asarray(epsilon, dtype=float)


def gaussian_multiplier_classic(epsilon: Any, delta: Any, log_constant: float = 1.25) -> Any:
    """Classic Gaussian sigma per unit of l2 sensitivity: ``sqrt(2 log(c/delta)) / epsilon``.

    Proven for epsilon <= 1 (Dwork & Roth 2014, Thm A.1); public entry points warn above that.
    ``log_constant`` is ``c``: 1.25 in the classic statement; spec 003 prints 2.
    """
    xp = _xp(epsilon, delta)
    return epsilon_constant("gaussian", delta, log_constant=log_constant) / xp.asarray(
        epsilon, dtype=float)


# Relative safety margins of the float32 analytic calibration: every quantity the bisection
# compares is widened by more than its float32 rounding error, so the mu it returns satisfies the
# exact curve (checked in float64 over a grid in tests/test_mechanisms.py); the cost is a noise
# scale at most ~1e-4 larger than the exact solution's.
_ANALYTIC_BISECTIONS = 64


_ANALYTIC_CLOSED_FORM_FROM = 1e3  # above this epsilon, the closed-form sufficient mu


def _analytic_mu_jnp(epsilon: jax.Array, delta: jax.Array) -> jax.Array:
    """The largest ``mu`` (up to a ~1e-4 margin) with ``delta(mu, epsilon) <= delta`` on the
    exact Gaussian curve, traceable (float32; vmapped levels share one compile)."""
    dt = jnp.result_type(float)
    eps = jnp.asarray(epsilon, dt)
    dl = jnp.asarray(delta, dt)
    finite = jnp.isfinite(eps)
    e = jnp.where(finite, eps, 1.0)
    ulp = 4.0 * float(jnp.finfo(dt).eps)

    def conservative_delta(log_mu):
        mu = jnp.exp(log_mu)
        la = log_ndtr(mu / 2 - e / mu)
        lb = e + log_ndtr(-mu / 2 - e / mu)
        # each term's float32 error: a few ulps of its exponent's magnitude, widened 4x
        first = jnp.exp(la) * (1 + (jnp.abs(la) + 4) * ulp)
        second = jnp.exp(lb) * (1 - (jnp.abs(lb) + jnp.abs(e) + 4) * ulp)
        return first - second

    def body(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        ok = conservative_delta(mid) <= dl
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo0 = jnp.full_like(e, float(np.log(1e-12)))
    hi0 = jnp.full_like(e, float(np.log(1e5)))
    lo, _ = jax.lax.fori_loop(0, _ANALYTIC_BISECTIONS, body, (lo0, hi0))
    mu_bisect = jnp.exp(lo) * (1 - 1e-4)
    # sufficient: Phi(mu/2 - eps/mu) <= delta alone bounds the curve; tight for large epsilon
    z = -ndtri(dl) * (1 + 1e-4) + 1e-4
    mu_closed = (-z + jnp.sqrt(z * z + 2 * e)) * (1 - 1e-5)  # covers mu's own rounding
    mu = jnp.where(e <= _ANALYTIC_CLOSED_FORM_FROM, mu_bisect, mu_closed)
    return jnp.where(finite, mu, jnp.inf)


def _analytic_mu_host(epsilon: float, delta: float) -> float:
    if math.isinf(epsilon):
        return math.inf
    if epsilon > 1e6:  # the closed-form sufficient mu (see _analytic_mu_jnp)
        z = -float(scipy.special.ndtri(delta)) * (1 + 1e-9)
        return -z + math.sqrt(z * z + 2 * epsilon)
    return gaussian_mu_for_epsilon(epsilon, delta) * (1 - 1e-9)


def gaussian_multiplier_analytic(epsilon: Any, delta: Any) -> Any:
    """Analytic Gaussian sigma per unit of l2 sensitivity: ``1 / mu`` with ``mu`` the largest
    value whose Gaussian mechanism is (epsilon, delta)-DP by the exact curve
    ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) <= delta`` (Balle & Wang 2018, Thm 8 and
    their analytic Gaussian mechanism). Proven at every epsilon; the tightest Gaussian
    calibration for a single release. Host inputs are solved in float64; array inputs by a
    float32 bisection that is conservative by construction (a scale at most ~1e-4 larger).
    ``epsilon = inf`` gives 0.
    """
    if _is_host(epsilon, delta):
        eps, dl = np.broadcast_arrays(np.asarray(epsilon, float), np.asarray(delta, float))
        mu = np.vectorize(_analytic_mu_host, otypes=[float])(eps, dl)
        with np.errstate(divide="ignore"):
            return 1.0 / mu
    return 1.0 / _analytic_mu_jnp(epsilon, delta)


def gaussian_multiplier(epsilon: Any, delta: Any, calibration: str = "classic-or-analytic",
                        log_constant: float = 1.25) -> Any:
    """Gaussian sigma per unit of l2 sensitivity for (epsilon, delta)-DP: the one place the
    calibration is chosen.

    * ``"classic-or-analytic"`` (default): the classic formula where its proof holds
      (``epsilon <= 1``; the papers' calibration, so reproductions at those budgets keep the
      printed noise), the analytic one above (where the classic formula is unproven and, from
      epsilon ~ 7.75 at delta = 5e-4, refuted by the exact curve). Delivers (epsilon, delta)
      at every epsilon.
    * ``"analytic"``: :func:`gaussian_multiplier_analytic` at every epsilon (the least noise).
    * ``"classic"``: :func:`gaussian_multiplier_classic` at every epsilon -- the papers'
      formula, for reproduction; above epsilon = 1 it is outside its proof and the ledger
      (the exact curve) says what it really delivers.
    * ``"mu"``: ``epsilon`` *is* ``mu = Delta / sigma``, solved elsewhere (e.g. one release of
      a composition calibrated as a whole by PLD, as NLDP's two reports): ``1 / epsilon``
      (0 at inf); ``delta`` is unused.
    """
    _validate.check_choice(calibration, "calibration", GAUSSIAN_CALIBRATIONS)
    if calibration == "mu":
        return laplace_multiplier(epsilon)
    classic = gaussian_multiplier_classic(epsilon, delta, log_constant)
    if calibration == "classic":
        return classic
    analytic = gaussian_multiplier_analytic(epsilon, delta)
    if calibration == "analytic":
        return analytic
    xp = _xp(epsilon, delta)
    return xp.where(xp.asarray(epsilon) <= 1, classic, analytic)


def gaussian_sigma(sensitivity_l2: Any, epsilon: Any, delta: Any,
                   calibration: str = "classic-or-analytic", log_constant: float = 1.25) -> Any:
    """Gaussian ``sigma = Delta_2 * gaussian_multiplier(...)`` for (epsilon, delta)-DP."""
    return noise_scale(sensitivity_l2, gaussian_multiplier(epsilon, delta, calibration,
                                                           log_constant))


def check_gaussian_mean(name: str, bound: Any, n: int, epsilon: Any, delta: Any, dtype: Any,
                        calibration: str = "classic-or-analytic") -> None:
    """Refuse, on public values only, a level at which the (epsilon, delta) Gaussian release of
    a mean of ``n`` records each of norm at most ``bound`` (the hyperparameter ``name``;
    sensitivity ``2 bound / n``, replace-one; noise by :func:`gaussian_sigma` with
    ``calibration``) cannot be drawn faithfully in ``dtype`` (the dtype the noise is drawn in):
    the sensitivity and the noise scale must be normal numbers, and the sum ``n bound`` plus
    the largest draw of JAX's normal sampler in ``dtype`` times the scale must not overflow.
    Computed in float64; nothing to check at epsilon = inf. For an estimator's
    ``check(n, hparams, dtype)`` hook (:class:`dpjax.base.Estimator`), which :func:`dpjax.fit`
    runs before anything, so a refusal never depends on the data.

    Raises:
        ValueError: naming ``name`` and what to change.
    """
    eps, dl, b = (np.float64(np.asarray(v)) for v in (epsilon, delta, bound))
    if not np.isfinite(eps):
        return
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        sens = 2.0 * b / n
        sigma = np.float64(gaussian_sigma(sens, eps, dl, calibration))
        z = max(abs(v) for v in _float_sampler.support("normal", dtype))
        _validate.check_noise_inputs(name, b, sens, n * b + z * sigma, dtype, scale=sigma)


def gaussian_multiplier_zcdp(rho: Any) -> Any:
    """zCDP Gaussian sigma per unit of l2 sensitivity: ``1 / sqrt(2 rho)`` (Bun & Steinke 2016);
    the ledger inverts it, ``rho = (sensitivity / sigma)^2 / 2``."""
    xp = _xp(rho)
    return 1.0 / xp.sqrt(2.0 * xp.asarray(rho, dtype=float))


def _advanced_ratio_bound(r, s: int, log_inv_delta, xp):
    """:func:`dpjax.accounting.peeling_epsilon`'s advanced-composition bound at ``r = lambda/b``."""
    sel, rel = 2.0 * r, r
    return (xp.sqrt(2.0 * log_inv_delta * s * (sel * sel + rel * rel))
            + s * (sel * xp.expm1(sel) + rel * xp.expm1(rel)))


def _proven_peeling_ratio(s: int, epsilon: Any, delta: Any) -> Any:
    """The largest ``r = lambda / b`` whose NoisyHT release is (epsilon, delta)-DP by
    :func:`dpjax.accounting.peeling_epsilon` (basic or advanced composition), conservative by
    a relative 1e-5. ``s`` may be an array (a runtime sparsity)."""
    host = _is_host(epsilon, delta, s)
    xp = np if host else jnp
    dt = np.float64 if host else jnp.result_type(float)
    eps = xp.asarray(epsilon, dt)
    e = xp.where(xp.isfinite(eps), eps, 1.0)
    lid = xp.log(1.0 / xp.asarray(delta, dt))
    basic = e / (3.0 * s)
    lo, hi = xp.zeros_like(e * lid), xp.ones_like(e * lid) * (e + 1.0)  # the bound is >= 2r

    def body(lo, hi):
        mid = 0.5 * (lo + hi)
        ok = _advanced_ratio_bound(mid, s, lid, xp) <= e
        return xp.where(ok, mid, lo), xp.where(ok, hi, mid)

    if host:
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(80):
                lo, hi = body(lo, hi)
    else:
        lo, hi = jax.lax.fori_loop(0, 80, lambda _, b: body(*b), (lo, hi))
    return xp.maximum(basic, lo) * (1 - 1e-5)


#: calibrations of NoisyHT's Laplace scale (:func:`peeling_multiplier`)
PEELING_CALIBRATIONS: tuple[str, ...] = ("paper", "tight", "per-coordinate")


def peeling_multiplier(s: Any, epsilon: Any, delta: Any, calibration: str = "paper") -> Any:
    """NoisyHT Laplace scale per unit of l-infinity sensitivity.

    * ``"paper"``: the papers' ``2 sqrt(3 s log(1/delta)) / epsilon`` (Dwork, Su & Zhang 2018;
      spec 000 Alg 1, spec 003 Alg 3) wherever the ledger's composition bound
      (:func:`dpjax.accounting.peeling_epsilon`) proves it delivers (epsilon, delta) -- every
      budget the papers use, where it delivers about half of epsilon --, and otherwise the
      smallest scale that bound proves (a large ``s`` with a large epsilon, where the printed
      formula's proof does not reach): the requested budget is delivered at every epsilon.
    * ``"tight"``: the smallest scale that bound proves, at every epsilon: the ledger reads
      the release back as ``(1 - 1e-5) epsilon`` (the whole budget, spent).
    * ``"per-coordinate"``: ``epsilon`` *is* the per-coordinate epsilon ``r = Delta_inf / b``
      of the Laplace noise, solved elsewhere (e.g. on the host for a whole run's PLD
      composition, :func:`dpjax._pld.peeling_ratio`): ``1 / epsilon``; ``delta`` is unused.

    ``s`` is an int or an integer array (a runtime sparsity, e.g. traced in a padded program:
    :func:`~dpjax.mechanisms.noisy_hard_threshold` with ``s_max``); the value is the same.
    """
    _validate.check_choice(calibration, "calibration", PEELING_CALIBRATIONS)
    if calibration == "per-coordinate":
        return laplace_multiplier(epsilon)
    xp = _xp(epsilon, delta, s)
    paper = epsilon_constant("noisy-ht", delta, s) / xp.asarray(epsilon, dtype=float)
    proven = 1.0 / _proven_peeling_ratio(s, epsilon, delta)
    finite = xp.isfinite(xp.asarray(epsilon, dtype=float))
    if calibration == "tight":
        return xp.where(finite, proven, paper)  # paper = 0 at epsilon = inf
    return xp.where(finite, xp.maximum(paper, proven), paper)


def peeling_coordinate_epsilon(epsilon_coord: Any, s: Any, epsilon: Any, delta: Any) -> Any:
    """The per-coordinate epsilon a ``"per-coordinate"`` NoisyHT release is drawn at:
    ``epsilon_coord`` (solved elsewhere, e.g. on the host by PLD), or where it is NaN (not
    solved) the ``"tight"`` calibration's at ``(epsilon, delta)`` (the per-release bound's
    least noise: private, and the ledger reads what it delivers); ``inf`` at
    ``epsilon = inf`` (no noise), whatever ``epsilon_coord`` holds. ``s`` as in
    :func:`peeling_multiplier`."""
    xp = _xp(epsilon_coord, epsilon, delta, s)
    eps = xp.asarray(epsilon, dtype=float)
    with np.errstate(divide="ignore"):  # 1 / 0 = inf at epsilon = inf (host inputs)
        tight = 1.0 / peeling_multiplier(s, epsilon, delta, "tight")
    coord = xp.where(xp.isnan(xp.asarray(epsilon_coord, dtype=float)), tight, epsilon_coord)
    return xp.where(xp.isinf(eps), xp.inf, coord)


def noise_scale(sensitivity: Any, multiplier: Any) -> Any:
    """``sensitivity * multiplier`` with ``0 * inf := 0`` (the epsilon = inf limit is exact)."""
    xp = _xp(sensitivity, multiplier)
    if xp is np:
        with np.errstate(invalid="ignore"):
            prod = np.asarray(sensitivity, dtype=float) * np.asarray(multiplier, dtype=float)
        return np.where(np.asarray(multiplier) == 0, 0.0, prod)
    sens = jnp.asarray(sensitivity)
    mult = jnp.asarray(multiplier)
    return jnp.where(mult == 0, jnp.zeros_like(sens * mult), sens * mult)


def laplace_scale(sensitivity_l1: Any, epsilon: Any) -> Any:
    """Laplace scale ``b = Delta_1 / epsilon`` for (epsilon, 0)-DP."""
    return noise_scale(sensitivity_l1, laplace_multiplier(epsilon))


def gaussian_sigma_classic(
    sensitivity_l2: Any, epsilon: Any, delta: Any, log_constant: float = 1.25
) -> Any:
    """Classic Gaussian ``sigma = Delta_2 sqrt(2 log(c/delta)) / epsilon`` (valid for eps <= 1)."""
    return noise_scale(sensitivity_l2, gaussian_multiplier_classic(epsilon, delta, log_constant))


def gaussian_sigma_zcdp(sensitivity_l2: Any, rho: Any) -> Any:
    """Gaussian ``sigma = Delta_2 / sqrt(2 rho)`` for rho-zCDP."""
    return noise_scale(sensitivity_l2, gaussian_multiplier_zcdp(rho))


def peeling_scale(sensitivity_linf: Any, s: Any, epsilon: Any, delta: Any,
                  calibration: str = "paper") -> Any:
    """NoisyHT Laplace scale ``b = Delta_inf * peeling_multiplier(s, epsilon, delta, calibration)``
    (for ``"paper"``, ``Delta_inf 2 sqrt(3 s log(1/delta)) / epsilon``)."""
    return noise_scale(sensitivity_linf, peeling_multiplier(s, epsilon, delta, calibration))
