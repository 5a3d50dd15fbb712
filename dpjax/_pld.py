r"""Composition by privacy loss distributions (PLD), on the host, through dp_accounting.

A composition is described by hashable *components*, each a mechanism whose privacy loss
distribution is known exactly (or dominated by one that is), with a count:

* ``("gaussian", mu)`` -- a Gaussian mechanism with ``mu = Delta / sigma`` (l2 sensitivity
  over the noise's standard deviation). The composition of Gaussians with ``mu_t`` is the
  Gaussian with ``mu = sqrt(sum mu_t^2)`` (Dong, Roth & Su 2022, Cor 3.3), so every Gaussian
  release of a composition is merged into one component;
* ``("laplace", r, count)`` -- ``count`` Laplace mechanisms, each with ``r = Delta_1 / b``
  (l1 sensitivity over the scale). For a vector statistic the worst pair of neighbours moves
  one coordinate by ``Delta_1`` (the dominating pair dp_accounting's ``LaplaceDpEvent`` uses);
* ``("discrete-laplace", t, k, count)`` -- the discrete Laplace mechanism ``P(z) ~ e^{-t|z|}``
  on integer statistics of l1 sensitivity ``k`` (an integer, grid units);
* ``("discrete-gaussian", sigma, k, count)`` -- the discrete Gaussian mechanism
  ``P(z) ~ e^{-z^2 / (2 sigma^2)}`` on a *scalar* integer statistic of sensitivity ``k`` (an
  integer, grid units). Its (epsilon, delta) curve is that of the pair ``N_Z(0, sigma^2)``,
  ``N_Z(k, sigma^2)``, exact for every pair of neighbours whose statistics differ by at most
  ``k`` (Canonne, Kamath & Steinke 2020, the discrete Gaussian's approximate-DP theorem for
  integer sensitivity); dp_accounting's ``from_discrete_gaussian_mechanism`` builds it with
  the noise truncated to ``[-T, T]``. :func:`dg_truncation` picks ``T`` so that the removed
  mass is at most :data:`DG_TAIL` per release, and :func:`epsilon_for_delta` reads the epsilon
  at ``delta - count * DG_TAIL`` (:func:`dg_slack`): for any event ``S``, ``P(S) - e^eps
  Q(S) <= (P_T(S) - e^eps Q_T(S)) + P(|Z| > T)``, so the untruncated mechanism's delta is at
  most the truncated one's plus the removed mass, which adds up over releases. A *vector*
  discrete Gaussian has no component here: its privacy loss depends on how the change
  spreads over the coordinates, not only on its l2 norm, and no exact PLD of it is
  implemented (the ledger composes it in zCDP, :meth:`dpjax.accounting.Ledger.build`);
* ``("pure", epsilon, count)`` -- an epsilon-DP mechanism with no better description (a
  report-noisy-max round of peeling, the local l2-ball randomizer): its PLD is dominated by
  that of binary randomized response with ``e^epsilon`` (Kairouz, Oh & Viswanath 2015), which
  is what ``from_privacy_parameters(epsilon, 0)`` builds;
* ``("approx", epsilon, delta, count)`` -- an (epsilon, delta)-DP mechanism with no better
  description (e.g. a whole fit composed in parallel over disjoint batches): dominated by the
  PLD of ``from_privacy_parameters(epsilon, delta)`` (the same theorem);
* ``("none",)`` -- a release without noise: no guarantee.

:func:`normalise` merges a list of components into a canonical sorted tuple (the cache key);
:func:`epsilon_for_delta` and :func:`delta_for_epsilon` read the composed PLD's *pessimistic*
estimate (dp_accounting rounds every privacy loss up: the epsilon it reports is never below the
true one). A composition of Gaussian releases alone is read off the exact Gaussian curve of
``mu`` instead (Balle & Wang 2018; exact, no discretisation). Both are cached, so a study
building many ledgers of one shape composes once.

dp_accounting is imported lazily (``import dpjax`` never imports it): it is an extra
(``pip install dpjax[pld]``); :func:`available` says whether it is installed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

from dpjax._gaussian_curve import gaussian_delta, gaussian_epsilon

_INF = float("inf")

#: the discretization of the privacy loss (dp_accounting's default)
VALUE_DISCRETIZATION = 1e-4

#: a pure release whose epsilon exceeds this is composed with the rest by basic composition
#: (its epsilon added to the rest's PLD epsilon; an upper bound): its PLD would take more grid
#: points than memory holds, and it has next to nothing to gain over its pure epsilon
BIG_LOSS = 50.0

#: how the ledger names this composition (its notes carry it)
NOTE = ("composed by privacy loss distributions (dp_accounting.pld, pessimistic estimate, "
        f"privacy loss discretised to {VALUE_DISCRETIZATION:g}): the delivered epsilon is never "
        "below the true one")

Component = tuple


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether dp_accounting (the ``[pld]`` extra) is installed."""
    try:
        import dp_accounting.pld.privacy_loss_distribution  # noqa: F401
    except ImportError:
        return False
    return True


def normalise(components: Iterable[Component]) -> tuple[Component, ...]:
    """A canonical, hashable form: the Gaussians merged into one ``mu``, equal components
    merged by adding their counts, sorted. ``("none",)`` alone if any release has no noise."""
    mu2 = 0.0
    counts: dict[tuple, int] = {}
    for c in components:
        kind = c[0]
        if kind == "none":
            return (("none",),)
        if kind == "gaussian":
            mu = float(c[1])
            if not math.isfinite(mu):
                return (("none",),)
            mu2 += mu * mu
            continue
        key, count = tuple(float(x) if isinstance(x, float) else x for x in c[:-1]), int(c[-1])
        if any(isinstance(x, float) and not math.isfinite(x) for x in key[1:]):
            return (("none",),)
        if count > 0:
            counts[key] = counts.get(key, 0) + count
    out = [(*k, v) for k, v in counts.items()]
    if mu2 > 0:
        out.append(("gaussian", math.sqrt(mu2)))
    return tuple(sorted(out, key=repr))


#: the noise mass a discrete Gaussian component's truncation removes, at most, per release
DG_TAIL = 1e-30


def dg_truncation(sigma: float, k: int = 1) -> int:
    """The truncation bound ``T`` of a discrete Gaussian component of sensitivity ``k``:
    ``P(|Z| > T) <= DG_TAIL`` for ``Z ~ N_Z(0, sigma^2)``, and ``T >= k`` (dp_accounting needs
    ``2 T >= k``; a larger ``T`` removes less).

    With ``t = T + 1``: ``P(Z >= t) <= (e^{-t^2/(2 sigma^2)} + int_t^inf e^{-u^2/(2 sigma^2)} du)
    / Z_sigma <= e^{-t^2/(2 sigma^2)} (1 + sigma^2 / t)``, since the normaliser ``Z_sigma >= 1``
    (its term at 0) and the Gaussian tail integral is at most ``e^{-t^2/(2 sigma^2)} sigma^2 /
    t``. ``t >= sigma sqrt(2 L)``, ``L = log(2 (1 + sigma) / DG_TAIL)``, makes the exponential at
    most ``DG_TAIL / (2 (1 + sigma))`` and ``sigma^2 / t <= sigma``, so both tails together are
    at most ``DG_TAIL``."""
    sigma = float(sigma)
    big_l = math.log(2.0 * (1.0 + sigma) / DG_TAIL)
    return max(1, int(k), math.ceil(sigma * math.sqrt(2.0 * big_l)))


def dg_slack(components: tuple[Component, ...]) -> float:
    """The delta that the truncation of the discrete Gaussian components may hide: their
    release count times :data:`DG_TAIL` (0 without such components)."""
    return DG_TAIL * sum(int(c[-1]) for c in components if c[0] == "discrete-gaussian")


def _max_loss(c: Component) -> float:
    """The largest privacy loss one release of a pure component takes (0 for a Gaussian)."""
    if c[0] in ("laplace", "pure", "approx"):
        return float(c[1])
    if c[0] == "discrete-laplace":
        return float(c[1]) * float(c[2])
    return 0.0


def _split_big(components: tuple[Component, ...]) -> tuple[float, tuple[Component, ...]]:
    """``(the summed epsilon of the pure components beyond BIG_LOSS per release, the rest)``."""
    big = tuple(c for c in components if c[0] != "approx" and _max_loss(c) > BIG_LOSS)
    if not big:
        return 0.0, components
    return _pure_sum(big), tuple(c for c in components if c not in big)


def _one(c: Component) -> Any:
    """The PLD of one component (dp_accounting, pessimistic)."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pl

    kw = {"value_discretization_interval": VALUE_DISCRETIZATION}
    kind = c[0]
    if kind == "gaussian":
        return pl.from_gaussian_mechanism(1.0 / c[1], sensitivity=1.0, **kw)
    if kind == "laplace":
        p = pl.from_laplace_mechanism(1.0 / c[1], sensitivity=1.0, **kw)
    elif kind == "discrete-laplace":
        p = pl.from_discrete_laplace_mechanism(c[1], sensitivity=int(c[2]), **kw)
    elif kind == "discrete-gaussian":
        p = pl.from_discrete_gaussian_mechanism(float(c[1]), sensitivity=int(c[2]),
                                                truncation_bound=dg_truncation(c[1], c[2]), **kw)
    elif kind == "pure":
        p = pl.from_privacy_parameters(common.DifferentialPrivacyParameters(c[1], 0.0), **kw)
    elif kind == "approx":
        p = pl.from_privacy_parameters(common.DifferentialPrivacyParameters(c[1], c[2]), **kw)
    else:
        raise ValueError(f"unknown PLD component {c!r}")
    count = int(c[-1])
    return p if count == 1 else p.self_compose(count)


@functools.lru_cache(maxsize=256)
def _composed(components: tuple[Component, ...]) -> Any:
    pld = None
    for c in components:
        p = _one(c)
        pld = p if pld is None else pld.compose(p)
    return pld


def _pure_sum(components: tuple[Component, ...]) -> float:
    """The exact epsilon at delta = 0 of a composition of pure-DP components (their sum)."""
    total = 0.0
    for c in components:
        if c[0] == "laplace" or c[0] == "pure":
            total += c[1] * c[-1]
        elif c[0] == "discrete-laplace":
            total += c[1] * c[2] * c[-1]
        else:  # a Gaussian or an approx component has no finite epsilon at delta = 0
            return _INF
    return total


@functools.lru_cache(maxsize=4096)
def epsilon_for_delta(components: tuple[Component, ...], delta: float) -> float:
    """The composed PLD's (pessimistic) epsilon at ``delta``; ``components`` normalised."""
    if not components:
        return 0.0
    if components[0][0] == "none":
        return _INF
    if delta <= 0:
        return _pure_sum(components)
    big, rest = _split_big(components)
    if big:  # basic composition of the very large pure releases with the rest
        return big + (epsilon_for_delta(rest, delta) if rest else 0.0)
    if len(components) == 1 and components[0][0] == "gaussian":  # exact: no discretisation
        return gaussian_epsilon(components[0][1], delta) if delta < 1 else 0.0
    delta = delta - dg_slack(components)  # the truncated discrete Gaussians' tails
    if delta <= 0:
        return _INF
    eps = float(_composed(components).get_epsilon_for_delta(delta))
    return min(max(eps, 0.0), _pure_sum(components))


@functools.lru_cache(maxsize=4096)
def delta_for_epsilon(components: tuple[Component, ...], epsilon: float) -> float:
    """The composed PLD's (pessimistic) delta at ``epsilon``; ``components`` normalised."""
    if not components:
        return 0.0
    if components[0][0] == "none":
        return 1.0
    if epsilon >= _pure_sum(components):
        return 0.0
    big, rest = _split_big(components)
    if big:  # basic composition of the very large pure releases with the rest
        return delta_for_epsilon(rest, epsilon - big) if rest and epsilon > big else 1.0
    if len(components) == 1 and components[0][0] == "gaussian":
        return gaussian_delta(components[0][1], epsilon)
    delta = float(_composed(components).get_delta_for_epsilon(epsilon))
    return min(1.0, max(0.0, delta) + dg_slack(components))


#: a solved calibration aims this far (relative) below the target epsilon, so that the float32
#: rounding of the noise drawn (and the PLD's discretisation of it) never reads back above it
SOLVE_MARGIN = 1e-3


def peeling_components(ratio: float, s: int, count: int) -> tuple[Component, ...]:
    """``count`` NoisyHT releases of ``s`` coordinates at ``ratio = Delta_inf / b``: ``s count``
    report-noisy-max rounds of ``2 ratio``-DP (dominated by randomized response) and ``s count``
    Laplace coordinates of ``ratio`` each (exact) -- what :meth:`dpjax.accounting.Release.
    pld_components` reads off such releases."""
    return normalise([("pure", 2.0 * ratio, s * count), ("laplace", ratio, s * count)])


@functools.lru_cache(maxsize=1024)
def peeling_ratio(s: int, count: int, epsilon: float, delta: float) -> float:
    """The largest ``r = Delta_inf / b`` (the per-coordinate epsilon of the Laplace noise) whose
    ``count`` NoisyHT releases of ``s`` coordinates compose by PLD to at most ``epsilon`` at
    ``delta`` (:func:`peeling_components`, the composed PLD's pessimistic estimate).

    Solved on the host by bisection in ``log r``, to a relative ``1e-4``, aiming
    :data:`SOLVE_MARGIN` below ``epsilon``; the ``r`` returned is checked to stay at most
    ``epsilon`` at ``r (1 + 1e-5)`` too (the float32 rounding of the scale drawn). Basic
    composition (``3 s count r``, exact at delta = 0) bounds it from below. ``inf`` at
    ``epsilon = inf``."""
    s, count, epsilon, delta = int(s), int(count), float(epsilon), float(delta)
    if not math.isfinite(epsilon):
        return _INF
    if not (epsilon > 0 and 0 <= delta < 1 and s >= 1 and count >= 1):
        raise ValueError(f"peeling_ratio needs epsilon > 0, delta in [0, 1), s >= 1 and "
                         f"count >= 1; got {epsilon}, {delta}, {s}, {count}")
    target = epsilon * (1.0 - SOLVE_MARGIN)

    def eps_at(r: float) -> float:
        return epsilon_for_delta(peeling_components(r, s, count), delta)

    lo = target / (3.0 * s * count)  # basic composition: exact for pure releases
    if delta == 0:
        return lo
    hi = lo * 2.0
    while eps_at(hi) <= target:
        lo, hi = hi, hi * 2.0
    while hi / lo - 1.0 > 1e-4:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if eps_at(mid) <= target else (lo, mid)
    while eps_at(lo * (1.0 + 1e-5)) > epsilon:  # never above the target once drawn in float32
        lo *= 1.0 - 1e-4
    return lo


def to_json(components: Iterable[Component]) -> list[list]:
    """The components as JSON lists."""
    return [list(c) for c in components]


def from_json(rows: Iterable[Iterable]) -> tuple[Component, ...]:
    """Inverse of :func:`to_json` (normalised)."""
    return normalise(tuple(r) for r in rows)
