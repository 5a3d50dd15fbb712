r"""Privacy budgets, composition, conversion, and the privacy ledger.

Accounting runs on the host in plain Python/NumPy (never inside a jitted kernel): a study
calibrates its noise multipliers here once per privacy level and passes them to the kernel as
arrays.

Budgets:
    * :class:`ApproxDP` -- (epsilon, delta)-DP; ``delta = 0`` is pure DP; ``epsilon = inf`` is no
      guarantee at all.
    * :class:`ZCDP` -- rho-zero-concentrated DP (Bun & Steinke 2016).

Composition rules:
    * basic: ``(sum eps_i, sum delta_i)``;
    * parallel over disjoint batches, adaptive (spec 000 Appendix C.2): if each step is
      (eps, delta)-DP with respect to its own disjoint batch, for every fixed output of the
      previous steps, the whole run is ``(max eps_i, max delta_i)``-DP;
    * zCDP: ``rho = sum rho_i``, then to (eps, delta) by :func:`zcdp_to_approx_dp`;
    * PLD: each release's privacy loss distribution (:meth:`Release.pld_components`), composed
      by dp_accounting's ``pld`` (:mod:`dpjax._pld`); the delivered (eps, delta) is its
      pessimistic estimate.

Every estimator returns a :class:`Ledger` built by :meth:`Ledger.build`: the guarantee is
*computed* from each release's mechanism, the noise it actually adds per unit of its declared
sensitivity, and how the true sensitivity compares to the declared one -- it is never typed in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np

from dpjax import _float_sampler, _pld
from dpjax._gaussian_curve import gaussian_delta, gaussian_epsilon, gaussian_mu_for_epsilon
from dpjax._validate import ConfigError
from dpjax.mechanisms.calibration import epsilon_constant
from dpjax.mechanisms.statistics import ZCDP_KINDS

__all__ = [
    "ApproxDP",
    "DISCRETE_GAUSSIAN_SCALAR_NOTE",
    "DISCRETE_GAUSSIAN_VECTOR_NOTE",
    "GAUSSIAN_CURVE_NOTE",
    "Budget",
    "Ledger",
    "PrivacyBudgetError",
    "Release",
    "ZCDP",
    "advanced_composition",
    "check_delivers",
    "falls_short",
    "compose_basic",
    "compose_parallel",
    "compose_zcdp",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_zcdp",
    "parallel_pld",
    "peeling_epsilon",
    "pure_to_zcdp",
    "zcdp_for_approx_dp",
    "zcdp_to_approx_dp",
]

_INF = float("inf")
#: the kinds drawn by a floating-point sampler (their guarantee is the idealised mechanism's)
_FLOAT_KINDS = ("laplace", "gaussian", "gaussian-zcdp", "noisy-ht")

#: the note every ledger with an (epsilon, delta) Gaussian release carries
GAUSSIAN_CURVE_NOTE = (
    "Gaussian releases: (epsilon, delta) read off the exact Gaussian privacy curve of the noise "
    "drawn (Balle & Wang 2018), whatever formula calibrated it (the classic formula, proven "
    "for epsilon <= 1, or the analytic calibration, exact at every epsilon)"
)

#: why a ledger with a discrete Gaussian release on a vector statistic is composed in zCDP
DISCRETE_GAUSSIAN_VECTOR_NOTE = (
    "a discrete Gaussian release on a vector statistic has no exact privacy loss distribution "
    "here (its privacy loss depends on how a change of l2 norm k spreads over the coordinates, "
    "not only on k, and no (epsilon, delta) bound of the multivariate discrete Gaussian tighter "
    "than its zCDP one is implemented): the ledger is composed in zCDP (rho = k^2 / (2 sigma^2) "
    "per release, Canonne, Kamath & Steinke 2020; every pure release as epsilon^2 / 2), then "
    "converted to (epsilon, delta) by CKS")

#: the note of a PLD ledger with scalar discrete Gaussian releases
DISCRETE_GAUSSIAN_SCALAR_NOTE = (
    "scalar discrete Gaussian releases: each by its exact privacy loss distribution, "
    "N_Z(0, sigma^2) against N_Z(k, sigma^2) for its integer sensitivity k (Canonne, Kamath & "
    "Steinke 2020; dp_accounting's from_discrete_gaussian_mechanism), the noise truncated where "
    f"at most {_pld.DG_TAIL:g} of its mass is removed per release, which the delivered delta "
    "counts")


# --------------------------------------------------------------------------------------------
# Budgets
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ApproxDP:
    """An (epsilon, delta)-DP guarantee. ``epsilon = inf`` means no guarantee."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        eps, delta = float(self.epsilon), float(self.delta)
        if math.isnan(eps) or eps < 0:
            raise ValueError(f"epsilon must lie in [0, inf]; got {self.epsilon}")
        if math.isnan(delta) or not 0.0 <= delta <= 1.0:
            raise ValueError(f"delta must lie in [0, 1]; got {self.delta}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)

    @property
    def is_private(self) -> bool:
        return math.isfinite(self.epsilon) and self.delta < 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"type": "approx-dp", "epsilon": _json_float(self.epsilon), "delta": self.delta}

    def __str__(self) -> str:
        if not self.is_private:
            return "not DP (epsilon = inf)"
        if self.delta == 0:
            return f"({self.epsilon:.6g}, 0)-DP"
        return f"({self.epsilon:.6g}, {self.delta:.3g})-DP"


@dataclasses.dataclass(frozen=True)
class ZCDP:
    """A rho-zCDP guarantee (Bun & Steinke 2016). ``rho = inf`` means no guarantee."""

    rho: float

    def __post_init__(self) -> None:
        rho = float(self.rho)
        if math.isnan(rho) or rho < 0:
            raise ValueError(f"rho must lie in [0, inf]; got {self.rho}")
        object.__setattr__(self, "rho", rho)

    @property
    def is_private(self) -> bool:
        return math.isfinite(self.rho)

    def to_approx_dp(self, delta: float, method: str = "cks") -> ApproxDP:
        return zcdp_to_approx_dp(self.rho, delta, method=method)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "zcdp", "rho": _json_float(self.rho)}

    def __str__(self) -> str:
        return f"{self.rho:.6g}-zCDP" if self.is_private else "not DP (rho = inf)"


Budget = ApproxDP | ZCDP


def _json_float(x: float) -> float | str:
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


# --------------------------------------------------------------------------------------------
# Composition and conversion
# --------------------------------------------------------------------------------------------


def compose_basic(budgets: Iterable[ApproxDP]) -> ApproxDP:
    """Basic (adaptive) composition: ``(sum eps, min(1, sum delta))``."""
    bs = list(budgets)
    if not bs:
        raise ValueError("compose_basic needs at least one budget")
    return ApproxDP(sum(b.epsilon for b in bs), min(1.0, sum(b.delta for b in bs)))


def compose_parallel(budgets: Iterable[ApproxDP]) -> ApproxDP:
    """Adaptive parallel composition over disjoint batches: ``(max eps, max delta)``.

    Valid when step ``t`` touches only batch ``B_t``, the batches are disjoint and chosen
    independently of the data, and step ``t`` is (eps_t, delta_t)-DP in ``B_t`` for every fixed
    value of the previous outputs (spec 000, proof of Lemma 3.3 in Appendix C.2).
    """
    bs = list(budgets)
    if not bs:
        raise ValueError("compose_parallel needs at least one budget")
    return ApproxDP(max(b.epsilon for b in bs), max(b.delta for b in bs))


def compose_zcdp(budgets: Iterable[ZCDP]) -> ZCDP:
    """zCDP composes additively: ``rho = sum rho_i``."""
    bs = list(budgets)
    if not bs:
        raise ValueError("compose_zcdp needs at least one budget")
    return ZCDP(sum(b.rho for b in bs))


def pure_to_zcdp(epsilon: float) -> ZCDP:
    """An (eps, 0)-DP mechanism is (eps^2 / 2)-zCDP (Bun & Steinke 2016, Prop 1.4)."""
    return ZCDP(0.5 * float(epsilon) ** 2)


def gaussian_zcdp(sensitivity: float, sigma: float) -> ZCDP:
    """A Gaussian mechanism (l2 sensitivity Delta, std sigma) is Delta^2/(2 sigma^2)-zCDP."""
    if sigma == 0:
        return ZCDP(_INF)
    return ZCDP(float(sensitivity) ** 2 / (2.0 * float(sigma) ** 2))


def advanced_composition(epsilon: float, delta: float, k: int, delta_prime: float) -> ApproxDP:
    """Advanced composition of k (eps, delta)-DP mechanisms (Dwork, Rothblum & Vadhan 2010).

    ``(sqrt(2 k log(1/delta')) eps + k eps (e^eps - 1), k delta + delta')``.
    """
    eps = math.sqrt(2 * k * math.log(1 / delta_prime)) * epsilon + k * epsilon * math.expm1(
        epsilon
    )
    return ApproxDP(eps, min(1.0, k * delta + delta_prime))


def _cks_epsilon(rho: float, delta: float) -> float:
    """min over alpha > 1 of ``rho a + log1p(-1/a) - (log delta + log a)/(a - 1)``.

    Canonne, Kamath & Steinke (2020), Prop 12, applied to the zCDP RDP curve ``rho * alpha``.
    The objective is unimodal in ``log(alpha - 1)``; golden-section search on a bracketing grid.
    """
    log_delta = math.log(delta)

    def f(u: float) -> float:
        a = 1.0 + math.exp(u)
        return rho * a + math.log1p(-1.0 / a) - (log_delta + math.log(a)) / (a - 1.0)

    grid = [-12.0 + 0.25 * i for i in range(121)]  # alpha - 1 in [6e-6, 1.3e9]
    vals = [f(u) for u in grid]
    i = min(range(len(grid)), key=vals.__getitem__)
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5) - 1) / 2
    c, d = hi - g * (hi - lo), lo + g * (hi - lo)
    fc, fd = f(c), f(d)
    for _ in range(100):
        if fc < fd:
            hi, d, fd = d, c, fc
            c = hi - g * (hi - lo)
            fc = f(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + g * (hi - lo)
            fd = f(d)
    return max(0.0, min(fc, fd, vals[i]))


def zcdp_to_approx_dp(rho: float, delta: float, method: str = "cks") -> ApproxDP:
    """Convert rho-zCDP to (epsilon, delta)-DP.

    Args:
        rho: the zCDP parameter.
        delta: target delta in (0, 1).
        method: ``"bun-steinke"`` -- ``eps = rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke
            2016, Prop 1.3); ``"cks"`` (default) -- the tighter conversion of Canonne, Kamath &
            Steinke (2020, Prop 12), never worse than the first.
    """
    rho = float(rho)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1); got {delta}")
    if not math.isfinite(rho):
        return ApproxDP(_INF, delta)
    if rho == 0:
        return ApproxDP(0.0, 0.0)
    simple = rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
    if method == "bun-steinke":
        return ApproxDP(simple, delta)
    if method == "cks":
        return ApproxDP(min(simple, _cks_epsilon(rho, delta)), delta)
    raise ValueError(f"method must be 'bun-steinke' or 'cks'; got {method!r}")


def zcdp_for_approx_dp(epsilon: float, delta: float, method: str = "cks") -> ZCDP:
    """The largest rho whose conversion (``method``) gives at most ``epsilon`` at ``delta``.

    For ``"bun-steinke"`` this is the closed form ``(sqrt(log(1/delta) + eps) -
    sqrt(log(1/delta)))^2`` (spec 002's ``eps~^2``); for ``"cks"`` a bisection.
    """
    if not math.isfinite(epsilon):
        return ZCDP(_INF)
    L = math.log(1.0 / delta)
    closed = (math.sqrt(L + epsilon) - math.sqrt(L)) ** 2
    if method == "bun-steinke":
        return ZCDP(closed)
    lo, hi = closed, max(closed * 4.0, 1e-12)
    while zcdp_to_approx_dp(hi, delta, method).epsilon <= epsilon:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_to_approx_dp(mid, delta, method).epsilon <= epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * hi:
            break
    return ZCDP(lo)


# --------------------------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------------------------

def _per_release(fn, ratio: np.ndarray, delta: np.ndarray, noisy: np.ndarray) -> np.ndarray:
    """``fn(ratio, delta)`` per release (inf where no noise was drawn), computed once per
    distinct ``(ratio, delta)`` (a run's releases mostly share one)."""
    out = np.full(ratio.shape, _INF)
    cache: dict[tuple[float, float], float] = {}
    for i in np.flatnonzero(noisy):
        k = (float(ratio[i]), float(delta[i]))
        if k not in cache:
            cache[k] = fn(*k) if 0 < k[1] < 1 else _INF
        out[i] = cache[k]
    return out


def peeling_epsilon(ratio: float, s: int, delta: float) -> float:
    """The epsilon (at ``delta``) that a NoisyHT release proves, from its noise as drawn.

    ``ratio = lambda / b``: the true l-infinity sensitivity over the Laplace scale. NoisyHT is
    ``s`` rounds of report-noisy-max on the scores ``|v_j|`` (each moves by at most
    ``lambda``, in either direction, so each round is ``2 lambda / b``-DP; adaptive), then the
    release of ``s`` coordinates with Laplace(``b``) noise (l1 sensitivity ``s lambda``:
    ``s lambda / b``-DP). Composed, the smaller of

    * basic composition: ``3 s lambda / b`` (pure), and
    * advanced composition (Dwork, Rothblum & Vadhan 2010, with per-mechanism epsilons
      ``eps_i``): ``sqrt(2 log(1/delta) sum eps_i^2) + sum eps_i (e^eps_i - 1)``, counting the
      final release as ``s`` Laplace releases of ``lambda / b`` each.

    The exact peeling of ``secure=True`` (event ``"discrete-noisy-ht"``) has the same
    structure with ``ratio = Delta^Z / b^Z`` in grid units: ``s`` exact permute-and-flip rounds
    of ``2 Delta^Z / b^Z``-DP each (McKenna & Sheldon 2020) and ``s`` discrete Laplace
    coordinates of ``Delta^Z / b^Z`` each, so this bound holds for it as it stands.

    The papers' calibration ``b = lambda 2 sqrt(3 s log(1/delta)) / epsilon`` (Dwork, Su &
    Zhang 2018) is read back as at most its epsilon by this bound at the budgets used in
    practice (e.g. 0.93 of it at epsilon = 1, s = 10, delta = 1e-5); where it is not -- a
    large ``s`` with a large epsilon -- the ledger reports what the bound proves.
    """
    if not math.isfinite(ratio):
        return _INF
    e_sel, e_rel = 2.0 * ratio, ratio
    basic = s * e_sel + s * e_rel
    if not 0 < delta < 1 or e_sel > 50:  # beyond 50, the advanced bound exceeds the basic
        return basic
    sq = s * (e_sel**2 + e_rel**2)
    mean = s * (e_sel * math.expm1(e_sel) + e_rel * math.expm1(e_rel))
    return min(basic, math.sqrt(2.0 * math.log(1.0 / delta) * sq) + mean)


def _discrete_laplace_component(true: float, t: float, count: int) -> tuple:
    """The discrete Laplace ``P(z) ~ e^{-|z|/t}`` on integer statistics of l1 sensitivity
    ``true`` (grid units): exact for an integer sensitivity, its epsilon-DP bound otherwise."""
    if float(true).is_integer():
        return ("discrete-laplace", 1.0 / t, int(true), count)
    return ("pure", true / t, count)


@dataclasses.dataclass(frozen=True)
class Release:
    """A stream of releases of one mechanism (e.g. one per iteration), read off their
    :class:`~dpjax.mechanisms.PrivacyEvent` s -- never typed in.

    Build with :meth:`from_event`. The per-release guarantees are computed from each event's
    *true* sensitivity and the noise scale it actually drew, never from the formula that
    calibrated it: ``epsilon = true_sensitivity / scale`` for Laplace (and the pure-DP local
    randomizer), the exact Gaussian curve (:func:`gaussian_epsilon` of
    ``mu = true_sensitivity / sigma`` at the release's delta) for an (epsilon, delta) Gaussian
    whatever its calibration, :func:`peeling_epsilon` for NoisyHT (and for its exact version
    ``"discrete-noisy-ht"``, whose rounds have the same per-round epsilons in grid units), and
    ``rho = (true_sensitivity / scale)^2 / 2`` for the zCDP Gaussian. A scale that is zero,
    subnormal in the dtype it was drawn in, or non-finite counts as no noise (epsilon = inf).

    Attributes:
        mechanism: the events' kind.
        statistic: what is released, in words/math.
        norm, relation: of the sensitivity.
        count: how many releases the stream holds.
        sensitivity: the declared sensitivity (the largest over the stream).
        scale: the noise scale (the smallest over the stream).
        sensitivity_ratio: true / declared sensitivity (the largest; ``inf`` if unbounded).
        delta: the delta of an (epsilon, delta) Gaussian or NoisyHT release (the largest).
        s, log_constant: NoisyHT's selected coordinates (for a discrete Gaussian, the number
            of coordinates of the statistic: 1 a scalar, whose exact PLD the ledger composes;
            0 not recorded); the classic Gaussian's ``c``.
        data: which records each release touches (``"disjoint batch"``, ``"full data"``, ...).
        epsilons: per-release epsilon (approx-DP kinds) or rho (``"gaussian-zcdp"``), in order.
        deltas: per-release delta.
        sampler: the floating-point sampler the noise was drawn from, its random bits and
            its exact support (``""`` for exact noise: discrete kinds, the randomizer's coin).
        delta_floor: the implemented sampler's own floor, the largest over the stream: a delta
            no epsilon removes (:func:`dpjax._float_sampler.delta_floor`: ``max(P(Z > z_max -
            Delta/scale), P(Z < z_min + Delta/scale))`` for the exact support
            ``[z_min, z_max]`` of the sampler ``Z`` in the dtype drawn, neighbours whose
            statistics differ by the true sensitivity in one coordinate); 0 for exact noise,
            1 where no noise was drawn.
    """

    mechanism: str
    statistic: str
    norm: str
    relation: str
    count: int
    sensitivity: float
    scale: float
    sensitivity_ratio: float
    delta: float
    s: int
    log_constant: float
    data: str
    epsilons: tuple[float, ...]
    deltas: tuple[float, ...]
    sampler: str = ""
    delta_floor: float = 0.0
    #: per release: (true sensitivity, noise scale drawn), scale 0 where no noise was drawn --
    #: what the PLD composition reads (:meth:`pld_components`)
    noise: tuple[tuple[float, float], ...] = ()

    @classmethod
    def from_event(cls, event: Any, statistic: str, data: str = "full data") -> Release:
        """Summarise a (stacked) privacy event: every array entry is one release."""
        # the dtype the noise was drawn in (older events: that of the recorded scale)
        drawn = getattr(event, "dtype", "") or np.asarray(event.scale).dtype
        sens, scale, true, delta = (np.asarray(x, np.float64).ravel() for x in (
            event.sensitivity, event.scale, event.true_sensitivity, event.delta))
        sens, scale, true, delta = np.broadcast_arrays(sens, scale, true, delta)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(true == sens, 1.0, true / sens)
            # noise was drawn only where the scale is a normal number of the dtype it was drawn
            # in: a subnormal scale is flushed to zero by XLA on CPU (no noise at all)
            noisy = (scale >= _float_sampler.smallest_normal(drawn)) & np.isfinite(scale) \
                & np.isfinite(true)
            ratio_ts = true / np.where(noisy, scale, 1.0)  # true sensitivity per unit of noise
            if event.kind == "none":
                per = np.full(sens.shape, _INF)
            elif event.kind in ZCDP_KINDS:
                per = np.where(noisy, 0.5 * np.square(ratio_ts), _INF)
            elif event.kind == "gaussian":  # the exact curve of the noise drawn, any calibration
                per = _per_release(lambda mu, dl: gaussian_epsilon(mu, dl), ratio_ts, delta,
                                   noisy)
            elif event.kind in ("noisy-ht", "discrete-noisy-ht"):  # the same composition
                per = _per_release(lambda r, dl: peeling_epsilon(r, event.s, dl), ratio_ts,
                                   delta, noisy)
            else:  # pure epsilon-DP kinds (Laplace, discrete Laplace, the l2-ball randomizer)
                k = epsilon_constant(event.kind)
                per = np.where(noisy, ratio_ts * k, _INF)
            # the sampler's floor grows with Delta / scale: the largest ratio gives the stream's
            sampler, floor = "", 0.0
            if event.kind in _float_sampler.SAMPLERS:
                sampler = _float_sampler.describe(event.kind, drawn)
                floor = (1.0 if not noisy.all() else
                         _float_sampler.delta_floor(event.kind, float(np.max(ratio_ts)), drawn))
        return cls(event.kind, statistic, event.norm, event.relation, int(sens.size),
                   float(np.max(sens)), float(np.min(scale)), float(np.max(ratio)),
                   float(np.max(delta)), int(event.s), float(event.log_constant), data,
                   tuple(float(x) for x in per), tuple(float(x) for x in delta), sampler,
                   floor, tuple((float(t), float(b) if ok else 0.0)
                                for t, b, ok in zip(true, scale, noisy)))

    def pld_components(self) -> list[tuple]:
        """The releases as components of a privacy loss distribution (:mod:`dpjax._pld`),
        from the true sensitivity and the noise scale each drew:

        * ``"gaussian"``, ``"gaussian-zcdp"``: a Gaussian with ``mu = Delta / sigma`` (exact);
        * ``"laplace"``: a Laplace with ``Delta_1 / b`` (exact);
        * ``"discrete-laplace"``: the discrete Laplace ``P(z) ~ e^{-|z|/t}`` with its integer
          l1 sensitivity (exact; an epsilon-DP bound ``Delta / t`` if the sensitivity is not
          an integer);
        * ``"noisy-ht"`` / ``"discrete-noisy-ht"``: ``s`` report-noisy-max rounds by their
          proven epsilon ``2 lambda / b`` each (dominated by randomized response), then ``s``
          (discrete) Laplace coordinates of ``lambda / b`` each (exact);
        * ``"ldp-randomizer"``: its epsilon (binary randomized response, exact for the coin);
        * ``"discrete-gaussian"`` on a scalar statistic (:attr:`scalar_discrete_gaussian`):
          the discrete Gaussian ``N_Z(0, sigma^2)`` against ``N_Z(k, sigma^2)`` with its
          integer sensitivity ``k`` (exact; Canonne, Kamath & Steinke 2020);
        * a release without noise, or ``"none"``: no guarantee.

        A ``"discrete-gaussian"`` release on a vector statistic (or of unrecorded dimension)
        has no exact PLD here -- its privacy loss depends on how a change of l2 norm ``k``
        spreads over the coordinates, not only on ``k`` -- and raises ``ValueError``
        (:meth:`Ledger.build` composes such a ledger in zCDP instead).
        """
        if self.mechanism == "discrete-gaussian" and not self.scalar_discrete_gaussian:
            raise ValueError("a discrete Gaussian release on a vector statistic (or of "
                             "unrecorded dimension) has no exact PLD here (zCDP instead)")
        out: list[tuple] = []
        for true, b in self.noise:
            if self.mechanism == "none" or not b > 0 or not math.isfinite(true):
                return [("none",)]
            r = true / b
            if self.mechanism in ("gaussian", "gaussian-zcdp"):
                out.append(("gaussian", r))
            elif self.mechanism == "laplace":
                out.append(("laplace", r, 1))
            elif self.mechanism == "discrete-laplace":
                out.append(_discrete_laplace_component(true, b, 1))
            elif self.mechanism in ("noisy-ht", "discrete-noisy-ht"):
                out.append(("pure", 2.0 * r, self.s))
                out.append(("laplace", r, self.s) if self.mechanism == "noisy-ht"
                           else _discrete_laplace_component(true, b, self.s))
            elif self.mechanism == "ldp-randomizer":
                out.append(("pure", r * epsilon_constant(self.mechanism), 1))
            elif self.mechanism == "discrete-gaussian":  # a scalar (checked above)
                out.append(("discrete-gaussian", b, int(true), 1))
            else:
                raise ValueError(f"no PLD for mechanism {self.mechanism!r}")
        return out

    @property
    def scalar_discrete_gaussian(self) -> bool:
        """Whether these are discrete Gaussian releases of a scalar statistic (``s == 1``, the
        dimension :func:`dpjax.mechanisms.secure_event` records) with integer sensitivities
        (grid units): the releases whose exact PLD :meth:`pld_components` gives."""
        return (self.mechanism == "discrete-gaussian" and self.s == 1
                and all(not math.isfinite(t) or float(t).is_integer() for t, _ in self.noise))

    def budgets(self) -> list[Budget]:
        """The guarantee of each release, in order."""
        if self.mechanism in ("gaussian-zcdp", "discrete-gaussian"):
            return [ZCDP(r) for r in self.epsilons]
        if self.mechanism == "none":
            return [ApproxDP(_INF, 0.0) for _ in self.epsilons]
        return [ApproxDP(e, d) for e, d in zip(self.epsilons, self.deltas)]

    def delivered(self) -> Budget:
        """The weakest single release's guarantee."""
        return max(self.budgets(), key=lambda b: b.rho if isinstance(b, ZCDP) else b.epsilon)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items()
               if k not in ("epsilons", "deltas", "noise")}
        out["sensitivity"] = _json_float(self.sensitivity)
        out["sensitivity_ratio"] = _json_float(self.sensitivity_ratio)
        out["delivered_per_release"] = self.delivered().to_dict()
        return out


@dataclasses.dataclass(frozen=True)
class Ledger:
    """What a run did to the data and the guarantee it actually delivers.

    Build with :meth:`build`; the ``guarantee`` is computed, never entered by hand.

    Attributes:
        estimator: the estimator's name.
        variant: ``"corrected"`` (the default, private) or a ``"paper-literal: ..."`` label.
        relation: the neighbouring relation (``"replace-one"`` unless stated).
        composition: ``"pld"`` (privacy loss distributions), ``"parallel"`` (disjoint
            batches), ``"basic"`` or ``"zcdp"``: the rule actually used.
        releases: the releases.
        guarantee: the delivered guarantee (``ApproxDP`` or ``ZCDP``).
        approx_dp: the delivered (epsilon, delta) (for zCDP, via the stated conversion).
        requested: the budget the user asked for.
        notes: free-text caveats (validity ranges, deviations from the paper).

    :attr:`assumption` says what the guarantee assumes (read off the releases' kinds): on the
    default floating-point path, the idealised mechanism with continuous noise, with
    :attr:`sampler_delta_floor`, the delta the implemented samplers' bounded support gives at
    every epsilon; on the ``secure=True`` path, exact discrete noise. Both are in
    :meth:`to_dict` (``"assumes"``, ``"sampler_delta_floor"``) and the printed ledger.
    """

    estimator: str
    variant: str
    relation: str
    composition: str
    releases: tuple[Release, ...]
    guarantee: Budget
    approx_dp: ApproxDP
    requested: Budget | None
    notes: tuple[str, ...] = ()

    @property
    def is_private(self) -> bool:
        return self.approx_dp.is_private

    @property
    def sampler_delta_floor(self) -> float:
        """The largest :attr:`Release.delta_floor`: the implemented floating-point samplers
        give the run a delta at least this large at every epsilon (0: exact noise only)."""
        return max(r.delta_floor for r in self.releases)

    @property
    def assumption(self) -> str:
        """What the guarantee assumes, read off the releases' kinds: the idealised mechanism
        with continuous noise on the default (floating-point) path, with the implemented
        sampler's floor; exact discrete noise on the ``secure=True`` path."""
        kinds = {r.mechanism for r in self.releases}
        floats = sorted(kinds & set(_FLOAT_KINDS))
        if not self.is_private:
            return "no guarantee (a release without noise or without a sensitivity bound)"
        if floats:
            floor = self.sampler_delta_floor
            samplers = "; ".join(sorted({r.sampler for r in self.releases if r.sampler}))
            return (
                "the guarantee of the idealised mechanism with continuous noise (default "
                f"floating-point path: {', '.join(floats)}). The implemented sampler "
                f"({samplers}) has a bounded support, so the release as implemented has "
                f"delta >= {floor:.3g} at every epsilon (pure-epsilon and zCDP claims hold "
                "only for the idealised mechanism); for a release on real data use "
                "secure=True (exact discrete noise)")
        if any(k.startswith("discrete-") for k in kinds):  # any exact discrete-noise kind
            return ("exact discrete noise (integer noise on a public grid, sampled exactly): "
                    "the guarantee holds for the implementation")
        if "ldp-randomizer" in kinds:
            return ("an exact coin: the l2-ball randomizer's side is an integer comparison on "
                    "64 random bits, so the stated eps-LDP holds for the implementation")
        return "no guarantee (no noise)"

    @classmethod
    def build(
        cls,
        estimator: str,
        releases: Sequence[Release],
        composition: Literal["pld", "parallel", "basic", "zcdp"] = "pld",
        *,
        variant: str = "corrected",
        relation: str = "replace-one",
        requested: Budget | None = None,
        delta: float | None = None,
        conversion: str = "cks",
        notes: Sequence[str] = (),
    ) -> Ledger:
        """Compose the releases by ``composition`` and record the delivered guarantee.

        ``composition="pld"`` (the default): every release contributes its privacy loss
        distribution (:meth:`Release.pld_components`), composed by dp_accounting on the host
        (cached per mechanism sequence), and the delivered (epsilon, delta) is the composed
        PLD's pessimistic epsilon at ``delta`` (default: the requested delta; else the sum of
        the releases' deltas); Gaussian releases alone are read off the exact Gaussian curve
        of ``mu = sqrt(sum mu_t^2)``. Where it cannot apply -- dp_accounting (the ``[pld]``
        extra) is not installed, or a discrete Gaussian release on a vector statistic
        (:data:`DISCRETE_GAUSSIAN_VECTOR_NOTE`) -- the ledger is composed in
        zCDP (if any release is accounted in zCDP) or by basic composition instead, and a
        note says so (:attr:`composition` names the rule used). ``"basic"``, ``"zcdp"`` and
        ``"parallel"`` (disjoint batches) are the papers' rules, by name.

        ``delta`` is the target delta of a zCDP -> (eps, delta) conversion; ``conversion`` is
        a method of :func:`zcdp_to_approx_dp`, or ``"gaussian"`` (the exact curve, only when
        every release is a Gaussian mechanism; see :func:`gaussian_conversion`).
        """
        rel = tuple(releases)
        if not rel:
            raise ValueError("a ledger needs at least one release")
        per = [b for r in rel for b in r.budgets()]
        notes = tuple(notes)
        if composition == "pld":
            target = delta
            if target is None and isinstance(requested, ApproxDP):
                target = requested.delta
            fallback = "zcdp" if any(isinstance(b, ZCDP) for b in per) else "basic"
            if any(r.mechanism == "discrete-gaussian" and not r.scalar_discrete_gaussian
                   for r in rel):
                why = DISCRETE_GAUSSIAN_VECTOR_NOTE
            elif not _pld.available():
                comps = _pld.normalise(c for r in rel for c in r.pld_components())
                if target and len(comps) == 1 and comps[0][0] == "gaussian":
                    # every release a Gaussian mechanism: their composition is the Gaussian
                    # mechanism of mu = sqrt(sum mu_t^2), whose exact curve needs no PLD library
                    target = min(float(target), 1.0)
                    approx = ApproxDP(gaussian_epsilon(comps[0][1], target), target)
                    notes += ("dp_accounting (the [pld] extra) is not installed; every release "
                              "is a Gaussian mechanism, so their composition is exact without "
                              "it: the Gaussian curve of mu = sqrt(sum mu_t^2)",)
                    if GAUSSIAN_CURVE_NOTE not in notes:
                        notes += (GAUSSIAN_CURVE_NOTE,)
                    return cls(estimator, variant, relation, "pld", rel, approx, approx,
                               requested, notes)
                why = ("dp_accounting (the [pld] extra: pip install dpjax[pld]) is not "
                       f"installed: composed by {fallback!r} composition instead of 'pld'")
            else:
                why = ""
            if why:
                return cls.build(estimator, rel, fallback, variant=variant, relation=relation,
                                 requested=requested, delta=target, conversion=conversion,
                                 notes=(*notes, why))
            if target is None:  # what basic composition would deliver
                target = min(1.0, sum(b.delta for b in per if isinstance(b, ApproxDP)))
            comps = _pld.normalise(c for r in rel for c in r.pld_components())
            if target == 0 and any(c[0] in ("gaussian", "approx", "discrete-gaussian")
                                   for c in comps):
                raise ValueError("composition='pld' of Gaussian releases needs the target "
                                 "delta (delta=, or an (epsilon, delta) request)")
            target = min(float(target), 1.0)
            approx = ApproxDP(_pld.epsilon_for_delta(comps, target), target)
            notes += (_pld.NOTE,)
            if any(r.mechanism == "gaussian" for r in rel) and GAUSSIAN_CURVE_NOTE not in notes:
                notes += (GAUSSIAN_CURVE_NOTE,)
            if any(r.mechanism == "discrete-gaussian" for r in rel) and \
                    DISCRETE_GAUSSIAN_SCALAR_NOTE not in notes:
                notes += (DISCRETE_GAUSSIAN_SCALAR_NOTE,)
            return cls(estimator, variant, relation, "pld", rel, approx, approx, requested,
                       notes)
        zcdp_parallel = composition == "parallel" and any(isinstance(b, ZCDP) for b in per)
        if composition == "zcdp" or zcdp_parallel:
            zs = [b if isinstance(b, ZCDP) else _approx_to_zcdp(b) for b in per]
            # parallel (disjoint batches): the largest rho; otherwise rho adds up
            guarantee: Budget = max(zs, key=lambda b: b.rho) if zcdp_parallel else \
                compose_zcdp(zs)
            if delta is None:
                raise ValueError(f"composition={composition!r} of zCDP releases needs the target "
                                 "delta for the conversion")
            if conversion == "gaussian":  # exact for all-Gaussian compositions
                approx = gaussian_conversion(rel, guarantee.rho, delta)
            else:
                approx = zcdp_to_approx_dp(guarantee.rho, delta, method=conversion)
            notes += (f"(epsilon, delta) from rho-zCDP by the {conversion!r} conversion",)
        else:
            if any(isinstance(b, ZCDP) for b in per):
                raise ValueError("zCDP releases need composition='zcdp'")
            if composition == "basic":
                guarantee = compose_basic(per)
            elif composition == "parallel":
                guarantee = compose_parallel(per)
            else:
                raise ValueError("composition must be 'pld', 'parallel', 'basic' or 'zcdp'; "
                                 f"got {composition!r}")
            approx = guarantee
        if any(r.mechanism == "gaussian" for r in rel) and GAUSSIAN_CURVE_NOTE not in notes:
            notes += (GAUSSIAN_CURVE_NOTE,)
        return cls(estimator, variant, relation, composition, rel, guarantee, approx,
                   requested, notes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "variant": self.variant,
            "relation": self.relation,
            "composition": self.composition,
            "is_private": self.is_private,
            "guarantee": self.guarantee.to_dict(),
            "approx_dp": self.approx_dp.to_dict(),
            "requested": None if self.requested is None else self.requested.to_dict(),
            "assumes": self.assumption,
            "sampler_delta_floor": self.sampler_delta_floor,
            "releases": [r.to_dict() for r in self.releases],
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        lines = [
            f"privacy ledger: {self.estimator} [{self.variant}]",
            f"  neighbouring relation: {self.relation}",
        ]
        for r in self.releases:
            ratio = (f" (true/declared = {r.sensitivity_ratio:g})" if r.sensitivity_ratio != 1
                     else "")
            lines.append(
                f"  release x{r.count} ({r.data}): {r.mechanism} on {r.statistic}; "
                f"{r.norm} sensitivity {r.sensitivity:.6g}{ratio}; noise scale {r.scale:.6g}; "
                f"each {r.delivered()}"
                + (f"; sampler floor delta >= {r.delta_floor:.3g}" if r.sampler else "")
            )
        lines.append(f"  composition: {self.composition}")
        if self.requested is not None:
            lines.append(f"  requested: {self.requested}")
        delivered = str(self.guarantee)
        if isinstance(self.guarantee, ZCDP) and self.guarantee.is_private:
            delivered += f" => {self.approx_dp}"
        lines.append(f"  delivered: {delivered}")
        lines.append(f"  assumes: {self.assumption}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def parallel_pld(estimator: str, release: Release, per_batch: int = 1, *,
                 requested: Budget | None, delta: float, variant: str = "corrected",
                 relation: str = "replace-one", notes: Sequence[str] = (),
                 what: str = "disjoint batches") -> Ledger:
    """A stream of releases over disjoint batches (or users): each batch's ``per_batch``
    consecutive releases of ``release`` compose by PLD (:meth:`Ledger.build`,
    ``composition="pld"``, at ``delta``), and across the batches the composition is parallel
    (a record is in one batch only): the worst batch's guarantee. The ledger lists the whole
    stream and is labelled ``"parallel"``, with a note saying so (where PLD falls back, the
    batch's fallback rule and its note)."""
    rows = release.noise
    if per_batch < 1 or len(rows) % per_batch:
        raise ValueError(f"{len(rows)} releases do not split into batches of {per_batch}")
    worst = None
    for i in range(0, len(rows), per_batch):
        part = dataclasses.replace(release, noise=tuple(rows[i:i + per_batch]),
                                   count=per_batch,
                                   epsilons=tuple(release.epsilons[i:i + per_batch]),
                                   deltas=tuple(release.deltas[i:i + per_batch]))
        led = Ledger.build(estimator, [part], "pld", variant=variant, relation=relation,
                           requested=requested, delta=delta, notes=notes)
        key = led.guarantee.rho if isinstance(led.guarantee, ZCDP) else led.approx_dp.epsilon
        if worst is None or key > worst[0]:
            worst = (key, led)
    led = worst[1]
    return dataclasses.replace(led, releases=(release,), composition="parallel", notes=(
        *led.notes, f"{led.composition} composition within each of the {what}, parallel "
        "composition across them (a record is in one only): the worst one's guarantee"))


class PrivacyBudgetError(ConfigError):
    """The noise a run drew delivers a weaker guarantee than the one requested (a
    :class:`~dpjax.config.ConfigError`: ``dpjax run`` reports it as one line, exit 2)."""


#: relative slack of :func:`check_delivers` (float32 rounding of the noise scales)
DELIVERY_RTOL = 1e-5


def falls_short(ledger: Ledger) -> bool:
    """Whether ``ledger`` delivers less than it was asked for (beyond float rounding)."""
    req = ledger.requested
    if req is None:
        return False
    tol = 1 + DELIVERY_RTOL
    if isinstance(req, ZCDP):
        got = ledger.guarantee
        if isinstance(got, ZCDP):
            return got.rho > req.rho * tol
        return not got.is_private  # an (eps, delta) guarantee is not a zCDP one
    got = ledger.approx_dp
    return got.epsilon > req.epsilon * tol or got.delta > req.delta * tol


def check_delivers(ledger: Ledger | None) -> None:
    """Raise :class:`PrivacyBudgetError` when a corrected (default) variant's ledger delivers a
    weaker guarantee than the one requested: a calibration used outside its proof, a noise
    scale that is zero, subnormal or non-finite in the dtype it was drawn in, a true
    sensitivity above the declared one. Documented paper-literal or not-DP variants
    (``variant != "corrected"``) pass: their ledgers state what they deliver."""
    if ledger is None or ledger.variant != "corrected" or not falls_short(ledger):
        return
    lines = [f"{ledger.estimator}: the noise drawn delivers {ledger.guarantee}"
             + (f" => {ledger.approx_dp}" if isinstance(ledger.guarantee, ZCDP) else "")
             + f", weaker than the requested {ledger.requested}; nothing is returned."]
    for r in ledger.releases:
        if r.mechanism == "none":
            continue
        if not (r.scale >= np.finfo(np.float32).tiny and math.isfinite(r.scale)):
            lines.append(f"  release '{r.statistic}': noise scale {r.scale:g} (zero, subnormal "
                         f"or not finite in float32: no noise) for sensitivity "
                         f"{r.sensitivity:g}; raise the hyperparameters that set this "
                         "sensitivity (a clipping or truncation level, n) or the noise")
        elif r.sensitivity_ratio > 1:
            lines.append(f"  release '{r.statistic}': true sensitivity {r.sensitivity_ratio:g}x "
                         "the declared one")
    raise PrivacyBudgetError("\n".join(lines))


def _approx_to_zcdp(b: ApproxDP) -> ZCDP:
    if b.delta > 0:
        raise ValueError(
            "an (eps, delta>0) release cannot enter zCDP composition; use a pure-DP or "
            "Gaussian-zCDP mechanism"
        )
    return pure_to_zcdp(b.epsilon)


# --------------------------------------------------------------------------------------------
# DP GLMs (spec 003): calibration by the exact Gaussian curve
# --------------------------------------------------------------------------------------------

__all__ += ["gaussian_mu_for_epsilon", "gaussian_conversion"]


def gaussian_conversion(releases: Sequence[Release], rho: float, delta: float) -> ApproxDP:
    """(epsilon, delta) of a composition of Gaussian releases with total zCDP ``rho``: exact.

    A composition of Gaussian mechanisms is a Gaussian mechanism with
    ``mu^2 = sum_t mu_t^2 = 2 rho``, so ``epsilon = gaussian_epsilon(sqrt(2 rho), delta)`` is its
    exact (PLD-tight) curve. Valid only when every release is a Gaussian mechanism
    (``mechanism == "gaussian-zcdp"``); used by :meth:`Ledger.build` with
    ``conversion="gaussian"``.
    """
    bad = [r.mechanism for r in releases if r.mechanism != "gaussian-zcdp"]
    if bad:
        raise ValueError(
            "conversion='gaussian' is exact only for compositions of Gaussian releases "
            f"(mechanism 'gaussian-zcdp'); got {sorted(set(bad))}"
        )
    if not math.isfinite(rho):
        return ApproxDP(_INF, delta)
    return ApproxDP(gaussian_epsilon(math.sqrt(2.0 * rho), delta), delta)
