"""The exact privacy curve of the Gaussian mechanism (Balle & Wang 2018), on the host.

The lowest layer: :mod:`dpjax.mechanisms` solves it for its analytic calibration and
:mod:`dpjax.accounting` reads releases off it (and re-exports these functions).
"""

from __future__ import annotations

import math

_INF = float("inf")


def gaussian_delta(mu: float, epsilon: float) -> float:
    """Exact delta(epsilon) of a Gaussian mechanism with ``mu = Delta / sigma``.

    Balle & Wang (2018), Thm 8: ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``. The
    composition of T Gaussian mechanisms with ``mu_t`` is a Gaussian with
    ``mu = sqrt(sum mu_t^2)``, so this is also the exact curve of a composed run. Both terms
    are computed in log space (``scipy.special.log_ndtr``, accurate in the far tails), so the
    second term is kept at every epsilon: dropping it, or an asymptotic tail that overstates
    ``Phi``, would misstate delta.
    """
    if mu == 0:
        return 0.0
    if not math.isfinite(mu):
        return 1.0
    from scipy.special import log_ndtr

    first = float(log_ndtr(mu / 2 - epsilon / mu))
    second = epsilon + float(log_ndtr(-mu / 2 - epsilon / mu))
    if second < first:  # delta = e^first (1 - e^(second - first))
        return max(0.0, math.exp(first) * -math.expm1(second - first))
    return 0.0


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon with :func:`gaussian_delta` ``(mu, epsilon) <= delta`` (bisection)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1); got {delta}")
    if mu == 0:
        return 0.0
    if not math.isfinite(mu):
        return _INF
    if gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(mu, hi) > delta:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gaussian_delta(mu, mid) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(hi, 1.0):
            break
    return hi


def gaussian_mu_for_epsilon(epsilon: float, delta: float) -> float:
    """The largest ``mu = Delta / sigma`` whose Gaussian mechanism is (epsilon, delta)-DP.

    Inverts the exact curve of :func:`gaussian_delta` (Balle & Wang 2018, Thm 8): the ``mu``
    with ``gaussian_delta(mu, epsilon) = delta`` (``delta`` increases in ``mu``), by bisection on
    ``log mu``. Since ``T`` Gaussian releases with ``mu_t`` compose to one with
    ``mu = sqrt(sum mu_t^2)``, a run of ``T`` equal steps meets (epsilon, delta) exactly with
    per-step ``sigma_t / Delta_t = sqrt(T) / mu``. ``epsilon = inf`` gives ``inf`` (no noise).
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1); got {delta}")
    epsilon = float(epsilon)
    if math.isnan(epsilon) or epsilon < 0:
        raise ValueError(f"epsilon must lie in [0, inf]; got {epsilon}")
    if math.isinf(epsilon):
        return _INF
    lo, hi = 1e-12, 1.0
    while gaussian_delta(hi, epsilon) <= delta:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:  # pragma: no cover - absurd budgets: lo is still valid
            return lo
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if gaussian_delta(mid, epsilon) <= delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * hi:
            break
    return lo
