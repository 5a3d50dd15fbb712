r"""Noise mechanisms, clipping, and calibration from (sensitivity, budget) to a noise scale.

Every privatised quantity in dpjax is a :class:`BoundedStatistic`: a value together with its
sensitivity, the norm the sensitivity is measured in, and the neighbouring relation. The
mechanisms below take a ``BoundedStatistic`` and calibrate their noise from *its* sensitivity
only, so a noise scale can never be computed from a constant retyped at a call site, and a
mechanism refuses a statistic whose sensitivity is in the wrong norm.

All functions here are pure, draw randomness only from an explicit key, and are safe under
``jit`` and ``vmap``: privacy levels (``epsilon``, ``delta``, ``rho``) are array arguments, so a
study can ``vmap`` over them. ``epsilon = inf`` (or ``rho = inf``) gives exactly zero noise, never
``inf * 0 = nan``.

Calibrations (all scale parametrisations; ``log`` is natural):

=====================  =====================================================  ============
mechanism               noise per coordinate                                  guarantee
=====================  =====================================================  ============
Laplace                 ``b = Delta_1 / epsilon``                             (eps, 0)
Gaussian (default)      the classic ``sigma`` below for ``epsilon <= 1``, the   (eps, delta),
                        analytic one above (``calibration="classic-or-        every eps
                        analytic"``)
analytic Gaussian       ``sigma = Delta_2 / mu``, ``mu`` solving the exact    (eps, delta),
                        curve ``delta(mu, eps) = delta`` (Balle & Wang 2018)  every eps
classic Gaussian        ``sigma = Delta_2 sqrt(2 log(c/delta)) / epsilon``,   (eps, delta),
                        ``c = 1.25`` (Dwork & Roth Thm A.1)                   proven eps <= 1
zCDP Gaussian           ``sigma = Delta_2 / sqrt(2 rho)``                     rho-zCDP
NoisyHT / peeling       ``b = Delta_inf * 2 sqrt(3 s log(1/delta)) / epsilon`` (eps, delta)
=====================  =====================================================  ============

Whatever the calibration, the ledger reads a Gaussian release's (epsilon, delta) off the exact
Gaussian privacy curve of the noise actually drawn (:func:`dpjax.accounting.gaussian_epsilon`),
so a calibration used outside its proof (the classic formula at a large epsilon) reports the
weaker guarantee it really delivers. That guarantee is the idealised mechanism's, with
continuous noise: the floating-point samplers drawn here have a bounded support (float32
normal ``[-5.4200, 5.2201]``, Laplace ``[-15.54, 16.64]``), and the ledger states the delta
floor this implies (:mod:`dpjax._float_sampler`); :func:`secure_noise` draws exact noise.
The noise is drawn in the statistic's dtype, and the event records that dtype, so the ledger
checks the scale where it is drawn (a scale subnormal there is flushed to zero: no noise).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _cpu_prng, _validate

__all__ = [
    "KINDS",
    "NORMS",
    "BoundedStatistic",
    "PrivacyEvent",
    "epsilon_constant",
    "no_privacy_event",
    "Peeled",
    "bounded_mean",
    "bounded_mean_from_sum",
    "bounded_sum",
    "clip_l2",
    "clip_linf",
    "l2_norm",
    "sanitize",
    "gaussian_mechanism",
    "gaussian_mechanism_zcdp",
    "GAUSSIAN_CALIBRATIONS",
    "gaussian_multiplier",
    "gaussian_multiplier_analytic",
    "gaussian_multiplier_classic",
    "gaussian_multiplier_zcdp",
    "check_gaussian_mean",
    "gaussian_sigma",
    "gaussian_noise",
    "secure_noise",
    "secure_active",
    "secure_event",
    "PlannedEvent",
    "SECURE_KINDS",
    "gaussian_sigma_classic",
    "gaussian_sigma_zcdp",
    "hard_threshold",
    "laplace_mechanism",
    "laplace_multiplier",
    "laplace_noise",
    "laplace_scale",
    "local_mechanism",
    "noise_scale",
    "noisy_hard_threshold",
    "peeling_multiplier",
    "peeling_scale",
]

Norm = Literal["l1", "l2", "linf"]
NORMS: tuple[str, ...] = ("l1", "l2", "linf")
RELATIONS: tuple[str, ...] = ("replace-one", "add-remove", "local")


# --------------------------------------------------------------------------------------------
# The statistic that carries its sensitivity
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BoundedStatistic:
    """A statistic together with its sensitivity.

    Attributes:
        value: the statistic, any shape.
        sensitivity: scalar; the *declared* ``sup ||value(X) - value(X')||_norm`` over
            neighbouring data sets ``X ~ X'`` under ``relation``: the number noise is calibrated
            from. It may be a traced array (it can depend on public quantities such as a step
            size or a previous private iterate), but never on the data.
        norm: ``"l1"``, ``"l2"`` or ``"linf"`` (static).
        relation: the neighbouring relation, ``"replace-one"`` (default: data sets of the same
            size differing in one record), ``"add-remove"``, or ``"local"`` (the value is one
            record's contribution and the sensitivity bounds its range, for local DP).
        true_sensitivity: the statistic's actual bound when it differs from the declared one (a
            paper-literal variant that under- or over-declares; ``inf`` if unbounded); ``None``
            means equal to ``sensitivity``. The privacy event, and so the ledger, uses it.
    """

    value: jax.Array
    sensitivity: jax.Array
    norm: str = "linf"
    relation: str = "replace-one"
    true_sensitivity: jax.Array | None = None

    def __post_init__(self) -> None:
        _validate.check_choice(self.norm, "norm", NORMS)
        _validate.check_choice(self.relation, "relation", RELATIONS)

    @property
    def true(self) -> jax.Array:
        """The actual sensitivity (``true_sensitivity``, else the declared one)."""
        return self.sensitivity if self.true_sensitivity is None else self.true_sensitivity

    def _with(self, value, factor) -> BoundedStatistic:
        true = None if self.true_sensitivity is None else self.true_sensitivity * factor
        return BoundedStatistic(value, self.sensitivity * factor, self.norm, self.relation, true)

    def scale(self, c: Any) -> BoundedStatistic:
        """Multiply by a public constant ``c``: the sensitivity scales by ``|c|``."""
        return self._with(self.value * c, jnp.abs(c))

    def shift(self, public: Any) -> BoundedStatistic:
        """Add a data-independent term; the sensitivity is unchanged.

        ``public`` must not depend on the private data (a previous private release, the step
        size, the iterate: all fine).
        """
        return self._with(self.value + public, 1.0)

    def declare(self, sensitivity: Any, true_sensitivity: Any = None) -> BoundedStatistic:
        """The same value with another declared sensitivity (what noise is calibrated from);
        the true bound stays this statistic's unless ``true_sensitivity`` is given."""
        true = self.true if true_sensitivity is None else true_sensitivity
        return BoundedStatistic(self.value, jnp.asarray(sensitivity), self.norm, self.relation,
                                jnp.asarray(true))

    def in_norm(self, norm: Norm) -> BoundedStatistic:
        """Re-express the sensitivity in another norm through a valid norm inequality.

        With ``k`` the number of entries of ``value``: ``||v||_2 <= sqrt(k) ||v||_inf``,
        ``||v||_1 <= k ||v||_inf``, ``||v||_1 <= sqrt(k) ||v||_2``, and ``||v||_inf <= ||v||_2
        <= ||v||_1``. (Spec 000 Algs 4, 7, 8 use ``Delta_2 = sqrt(d) Delta_inf``.)
        """
        _validate.check_choice(norm, "norm", NORMS)
        k = float(np.prod(jnp.shape(self.value))) if jnp.ndim(self.value) else 1.0
        factor = {
            ("linf", "linf"): 1.0, ("l2", "l2"): 1.0, ("l1", "l1"): 1.0,
            ("linf", "l2"): float(np.sqrt(k)), ("linf", "l1"): k,
            ("l2", "l1"): float(np.sqrt(k)), ("l2", "linf"): 1.0,
            ("l1", "l2"): 1.0, ("l1", "linf"): 1.0,
        }[(self.norm, norm)]
        out = self._with(self.value, factor)
        return BoundedStatistic(out.value, out.sensitivity, norm, self.relation,
                                out.true_sensitivity)


jax.tree_util.register_dataclass(
    BoundedStatistic, data_fields=["value", "sensitivity", "true_sensitivity"],
    meta_fields=["norm", "relation"],
)


# --------------------------------------------------------------------------------------------
# Privacy events: what a mechanism call released, built from the arrays that drew the noise
# --------------------------------------------------------------------------------------------

MechanismKind = Literal["laplace", "gaussian", "gaussian-zcdp", "noisy-ht",
                        "discrete-laplace", "discrete-gaussian", "ldp-randomizer", "none",
                        "discrete-noisy-ht"]
KINDS: tuple[str, ...] = ("laplace", "gaussian", "gaussian-zcdp", "noisy-ht",
                          "discrete-laplace", "discrete-gaussian", "ldp-randomizer", "none",
                          "discrete-noisy-ht")
#: calibrations of the (epsilon, delta) Gaussian mechanism (:func:`gaussian_multiplier`)
GAUSSIAN_CALIBRATIONS: tuple[str, ...] = ("classic-or-analytic", "analytic", "classic")
# kinds accounted in rho-zCDP, rho = (true_sensitivity / scale)^2 / 2 (Bun & Steinke 2016;
# Canonne, Kamath & Steinke 2020 for the discrete Gaussian on integer queries)
ZCDP_KINDS: tuple[str, ...] = ("gaussian-zcdp", "discrete-gaussian")


@dataclasses.dataclass(frozen=True)
class PrivacyEvent:
    """One release of a mechanism (a pytree; under ``scan``/``vmap`` its arrays gain leading
    axes, one entry per release).

    The mechanism builds it from the same arrays that drew the noise, so the ledger
    (:meth:`dpjax.accounting.Ledger.from_events`) describes the noise actually added.

    Attributes:
        kind: the mechanism (static): ``"laplace"``, ``"gaussian"`` (calibrated for
            (epsilon, delta); ``calibration`` says how; accounted by the exact Gaussian
            curve whatever the calibration), ``"gaussian-zcdp"`` (calibrated for
            rho-zCDP), ``"noisy-ht"`` (peeling), ``"discrete-laplace"`` /
            ``"discrete-gaussian"`` (integer noise on a public grid,
            :mod:`dpjax.discrete_noise`; sensitivity in grid units), ``"discrete-noisy-ht"``
            (exact peeling on a public grid, :func:`noisy_hard_threshold` under
            :func:`secure_noise`; l-infinity sensitivity and scale in grid units; accounted
            like ``"noisy-ht"``), ``"ldp-randomizer"``
            (the l2-ball randomizer of :mod:`dpjax.local_randomizers`: pure epsilon-LDP for
            every input, recorded as sensitivity = its radius and scale = radius / epsilon),
            or ``"none"`` (a non-private release).
        sensitivity: the declared sensitivity the noise was calibrated from.
        scale: the noise scale drawn (Laplace ``b``, Gaussian ``sigma``); 0 means no noise.
        true_sensitivity: the statistic's actual bound (``inf``: unbounded); the delivered
            guarantee is computed from it.
        delta: the delta of an (epsilon, delta) Gaussian or NoisyHT calibration (0 otherwise;
            for NoisyHT, exact or not, the delta of its advanced composition).
        norm, relation: of the sensitivity (static).
        s: the number of coordinates a NoisyHT release selects (static).
        log_constant: the ``c`` of a classic Gaussian's ``log(c / delta)`` (static).
        calibration: for ``"gaussian"``, one of :data:`GAUSSIAN_CALIBRATIONS` (static;
            informative only: the ledger reads the guarantee off the exact curve).
        dtype: the dtype the noise was drawn in (static; ``""``: that of ``scale``). The
            ledger checks the scale in it (a scale subnormal there is flushed to zero: no
            noise) and reads the floating-point sampler's support in it.
    """

    kind: str
    sensitivity: jax.Array
    scale: jax.Array
    true_sensitivity: jax.Array
    delta: jax.Array
    norm: str = "l2"
    relation: str = "replace-one"
    s: int = 1
    log_constant: float = 1.25
    calibration: str = ""
    dtype: str = ""

    def __post_init__(self) -> None:
        _validate.check_choice(self.kind, "kind", KINDS)


jax.tree_util.register_dataclass(
    PrivacyEvent, data_fields=["sensitivity", "scale", "true_sensitivity", "delta"],
    meta_fields=["kind", "norm", "relation", "s", "log_constant", "calibration", "dtype"],
)


def _event(kind: str, stat: BoundedStatistic, scale: Any, delta: Any = 0.0, s: int = 1,
           log_constant: float = 1.25, calibration: str = "", dtype: Any = None
           ) -> PrivacyEvent:
    """The event of one release; ``dtype``: the dtype the noise was drawn in (the ledger
    checks the scale there, so a scale that is normal in float64 but flushed to zero in the
    float32 draw counts as no noise)."""
    dt = jnp.result_type(float)
    f = lambda x: jnp.asarray(x, dt)  # noqa: E731
    drawn = "" if dtype is None else jnp.dtype(dtype).name
    return PrivacyEvent(kind, f(stat.sensitivity), f(scale), f(stat.true), f(delta), stat.norm,
                        stat.relation, s, log_constant, calibration, drawn)


def no_privacy_event(norm: str = "l2", relation: str = "replace-one") -> PrivacyEvent:
    """The event of a non-private release (no clipping, no noise): no guarantee."""
    inf, zero = jnp.asarray(jnp.inf), jnp.asarray(0.0)
    return PrivacyEvent("none", inf, zero, inf, zero, norm, relation)


def bounded_sum(terms: jax.Array, diameter: Any, norm: Norm) -> BoundedStatistic:
    """Sum per-record terms (records on axis 0) under replace-one adjacency.

    Args:
        terms: ``(n, ...)`` per-record contributions.
        diameter: ``sup ||t(r) - t(r')||_norm`` over any two admissible records ``r, r'``:
            replacing one record moves the sum by at most this much. For terms clipped to a
            ball of radius ``C`` it is ``2 C``.
        norm: the norm of ``diameter``.
    """
    return BoundedStatistic(jnp.sum(terms, axis=0), jnp.asarray(diameter), norm, "replace-one")


def bounded_mean_from_sum(total: jax.Array, n: int, diameter: Any, norm: Norm) -> BoundedStatistic:
    """:func:`bounded_mean` for a sum of ``n`` per-record terms computed without materialising
    them (e.g. ``w @ clip(y)`` as one matrix-vector product).

    ``diameter`` bounds the change of one record's term exactly as in :func:`bounded_sum`; the
    caller is responsible for ``total`` being that sum over ``n`` records (``n`` a shape).
    """
    return BoundedStatistic(total, jnp.asarray(diameter), norm, "replace-one").scale(1.0 / n)


def bounded_mean(terms: jax.Array, diameter: Any, norm: Norm) -> BoundedStatistic:
    """The sum of :func:`bounded_sum` divided by the public count ``terms.shape[0]``.

    The divisor is a shape, so it is public and data-independent (privatise sums, divide by
    public constants); the sensitivity is ``diameter / n``.
    """
    n = terms.shape[0]
    return bounded_sum(terms, diameter, norm).scale(1.0 / n)


# --------------------------------------------------------------------------------------------
# Clipping
# --------------------------------------------------------------------------------------------


def sanitize(x: jax.Array) -> jax.Array:
    """Map NaN to 0 and +-inf to +-the largest finite value of ``x``'s dtype (elementwise).

    A deterministic function of its input that is the identity on finite values. Every per-record
    quantity that enters a privatised statistic passes through it (directly or through the
    clipping helpers below), so no record, however extreme, can put a NaN or an infinity into a
    sum: ``inf - inf`` or ``0 * inf`` inside an E-step weight, an overflowing inner product or
    an overflowing residual all become finite values, which the clipping then bounds. The
    mapped value need not be "right" for such a record: privacy only needs every record's
    contribution to be finite and inside the declared bound.
    """
    return jnp.nan_to_num(x, nan=0.0)


def clip_linf(x: jax.Array, bound: Any) -> jax.Array:
    """Coordinate-wise projection onto ``[-bound, bound]`` (the papers' ``Pi_T``).

    Non-finite entries are first mapped by :func:`sanitize` (NaN to 0, +-inf to +-max), so the
    result is finite and inside the box for every input. ``bound = inf`` leaves finite values
    unchanged.
    """
    return jnp.clip(sanitize(x), -bound, bound)


def _pow2(k: jax.Array, dtype) -> jax.Array:
    """``2 ** k`` built from its exponent bits: exact, for integer ``k`` in the normal range
    (XLA's ``exp2`` and the reciprocals it substitutes for divisions are not exact)."""
    fi = jnp.finfo(dtype)
    itype = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[jnp.dtype(dtype).itemsize]
    bias = fi.maxexp - 1
    return jax.lax.bitcast_convert_type((k + bias).astype(itype) << fi.nmant, dtype)


def _scaled_l2(x: jax.Array, axis) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(u, k, r)`` with ``u = x * 2**k`` and ``r = ||u||_2`` along ``axis`` (keepdims), so
    ``||x||_2 = r * 2**-k``, computed without overflow or underflow.

    The naive ``sqrt(sum x^2)`` overflows to inf for entries beyond ~1e19 (float32) and
    underflows to 0 below ~1e-19 (XLA on CPU flushes denormals to zero): a clip factor
    ``min(1, C / norm)`` would then be 1 and let an unclipped term through. Dividing by the
    largest magnitude is not safe either: XLA turns ``x / m`` into ``x * (1 / m)``, and ``1 / m``
    is flushed to zero for ``m`` beyond ~3e38. So ``x`` is scaled by an exact power of two,
    ``2**k`` with ``k`` read off the exponent bits of ``max |x|`` and chosen so that
    ``2**k`` is a normal number and ``max |u|`` lies in ``[2, 4)``: then ``2 <= r <= 4 sqrt(n)``
    for a row with a normal largest entry, and ``r`` is tiny or 0 only for rows of denormals.
    Non-finite entries are sanitised first.
    """
    x = sanitize(x)
    m = jnp.max(jnp.abs(x), axis=axis, keepdims=True)
    fi = jnp.finfo(x.dtype)
    itype = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[x.dtype.itemsize]
    bias = fi.maxexp - 1
    biased = jnp.maximum((jax.lax.bitcast_convert_type(m, itype) >> fi.nmant) & (2 * bias + 1), 1)
    k = bias + 1 - biased  # in [-(bias - 1), bias]: 2**k is normal
    u = x * _pow2(k, x.dtype)
    r = jnp.sqrt(jnp.sum(jnp.square(u), axis=axis, keepdims=True))
    return u, k, r


def _log2_norm(k: jax.Array, r: jax.Array) -> jax.Array:
    """``log2`` of the norm ``r * 2**-k`` (``-inf`` for a zero row); finite where the norm is."""
    return jnp.log2(r) - k.astype(r.dtype)


def l2_norm(x: jax.Array, axis: int | tuple[int, ...] = -1) -> jax.Array:
    """The l2 norm along ``axis`` without intermediate overflow or underflow.

    The result is ``inf`` only when the norm itself exceeds the dtype's range; it is never NaN
    (non-finite entries are sanitised first).
    """
    _, k, r = _scaled_l2(x, axis)
    half = k // 2  # two exact factors, each a normal number
    return jnp.squeeze(r * _pow2(-half, r.dtype) * _pow2(half - k, r.dtype), axis=axis)


def clip_l2(x: jax.Array, bound: Any, axis: int | tuple[int, ...] = -1) -> jax.Array:
    """Project onto the l2 ball of radius ``bound`` along ``axis`` (per record).

    ``axis=(-2, -1)`` clips matrices in Frobenius norm. A row inside the ball is returned
    unchanged; a row outside is ``u * (bound / r)`` with ``u = x * 2**k`` and ``r = ||u||``
    (see :func:`_scaled_l2`), whose norm is ``bound`` up to rounding for every input: entries
    near the dtype's maximum, denormals, rows whose naive squared norm over- or underflows, and
    NaN or infinities (sanitised). Zero rows stay zero; ``bound = inf`` leaves finite rows
    unchanged. The inside/outside test compares ``log2`` of the norm with ``log2(bound)``, so it
    cannot over- or underflow.
    """
    u, k, r = _scaled_l2(x, axis)
    bound = jnp.asarray(bound, x.dtype)
    inside = _log2_norm(k, r) <= jnp.log2(bound)
    clipped = u * (bound / jnp.where(r > 0, r, jnp.ones_like(r)))
    return jnp.where(inside, sanitize(x), clipped)


# --------------------------------------------------------------------------------------------
# Calibration: noise scale = sensitivity x multiplier(budget)
# --------------------------------------------------------------------------------------------


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
      Alg 1, spec 003 Alg 3).
    """
    if kind in ("laplace", "discrete-laplace", "ldp-randomizer"):  # pure epsilon-DP kinds
        return 1.0
    xp = _xp(delta)
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
    from jax.scipy.special import log_ndtr, ndtri

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
    from dpjax._gaussian_curve import gaussian_mu_for_epsilon

    if math.isinf(epsilon):
        return math.inf
    if epsilon > 1e6:  # the closed-form sufficient mu (see _analytic_mu_jnp)
        from scipy.special import ndtri

        z = -float(ndtri(delta)) * (1 + 1e-9)
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
    """
    _validate.check_choice(calibration, "calibration", GAUSSIAN_CALIBRATIONS)
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
    from dpjax import _float_sampler  # a module below this one, imported where it is needed

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
    a relative 1e-5."""
    host = _is_host(epsilon, delta)
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
PEELING_CALIBRATIONS: tuple[str, ...] = ("paper", "tight")


def peeling_multiplier(s: int, epsilon: Any, delta: Any, calibration: str = "paper") -> Any:
    """NoisyHT Laplace scale per unit of l-infinity sensitivity.

    * ``"paper"``: the papers' ``2 sqrt(3 s log(1/delta)) / epsilon`` (Dwork, Su & Zhang 2018;
      spec 000 Alg 1, spec 003 Alg 3) wherever the ledger's composition bound
      (:func:`dpjax.accounting.peeling_epsilon`) proves it delivers (epsilon, delta) -- every
      budget the papers use, where it delivers about half of epsilon --, and otherwise the
      smallest scale that bound proves (a large ``s`` with a large epsilon, where the printed
      formula's proof does not reach): the requested budget is delivered at every epsilon.
    * ``"tight"``: the smallest scale that bound proves, at every epsilon: the ledger reads
      the release back as ``(1 - 1e-5) epsilon`` (the whole budget, spent).
    """
    _validate.check_choice(calibration, "calibration", PEELING_CALIBRATIONS)
    xp = _xp(epsilon, delta)
    paper = epsilon_constant("noisy-ht", delta, s) / xp.asarray(epsilon, dtype=float)
    proven = 1.0 / _proven_peeling_ratio(s, epsilon, delta)
    finite = xp.isfinite(xp.asarray(epsilon, dtype=float))
    if calibration == "tight":
        return xp.where(finite, proven, paper)  # paper = 0 at epsilon = inf
    return xp.where(finite, xp.maximum(paper, proven), paper)


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


def peeling_scale(sensitivity_linf: Any, s: int, epsilon: Any, delta: Any,
                  calibration: str = "paper") -> Any:
    """NoisyHT Laplace scale ``b = Delta_inf * peeling_multiplier(s, epsilon, delta, calibration)``
    (for ``"paper"``, ``Delta_inf 2 sqrt(3 s log(1/delta)) / epsilon``)."""
    return noise_scale(sensitivity_linf, peeling_multiplier(s, epsilon, delta, calibration))


# --------------------------------------------------------------------------------------------
# Noise draws
# --------------------------------------------------------------------------------------------


def laplace_noise(key: jax.Array, shape: tuple[int, ...], scale: Any, dtype=jnp.float32):
    """i.i.d. Laplace(0, scale) noise (density ``exp(-|x|/b)/(2b)``)."""
    _require_float_path("Laplace noise drawn outside laplace_mechanism")
    return jax.random.laplace(key, shape, dtype=dtype) * jnp.asarray(scale, dtype=dtype)


def gaussian_noise(key: jax.Array, shape: tuple[int, ...], sigma: Any, dtype=jnp.float32):
    """i.i.d. N(0, sigma^2) noise."""
    _require_float_path("Gaussian noise drawn outside the Gaussian mechanisms")
    # _cpu_prng.normal: jax.random.normal's values, faster for short minor dimensions on CPU
    return _cpu_prng.normal(key, shape, dtype=dtype) * jnp.asarray(sigma, dtype=dtype)


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
    from fractions import Fraction

    if math.isinf(epsilon):
        return Fraction(0)
    hi, lo = (int(v) for v in response_flip_threshold(epsilon))
    return Fraction(hi * 2**32 + lo, 2**RESPONSE_BITS)


def _require_norm(stat: BoundedStatistic, norm: str, mechanism: str) -> None:
    if not isinstance(stat, BoundedStatistic):
        raise TypeError(
            f"{mechanism} takes a BoundedStatistic (a value with its sensitivity); got "
            f"{type(stat).__name__}. Build one with bounded_mean/bounded_sum."
        )
    if stat.norm != norm:
        raise ValueError(
            f"{mechanism} needs an {norm} sensitivity; the statistic's is in {stat.norm}. "
            f"Use stat.in_norm({norm!r}) if a valid norm inequality applies."
        )


# --------------------------------------------------------------------------------------------
# Mechanisms
# --------------------------------------------------------------------------------------------


def _release(key: jax.Array, stat: BoundedStatistic, norm: str, mechanism: str, scale: Any,
             noise: Any, kind: str, **event: Any) -> tuple[jax.Array, PrivacyEvent]:
    """``stat.value + noise(scale(stat.sensitivity))`` and the event made from the same
    scale; inside :func:`secure_noise`, the floating-point-safe release of the same budget."""
    _require_norm(stat, norm, mechanism)
    if _SECURE.get() is not None:
        return _secure_release(key, stat, scale, kind, **event)
    scale = scale(stat.sensitivity)
    value = jnp.asarray(stat.value)
    noisy = value + noise(key, value.shape, scale, value.dtype)
    return noisy, _event(kind, stat, scale, dtype=value.dtype, **event)


# --------------------------------------------------------------------------------------------
# The floating-point-safe path: the same budgets through dpjax.discrete_noise
# --------------------------------------------------------------------------------------------


class _SecureMode(NamedTuple):
    grid: float | None  # the public grid step; None: per release (see secure_noise)
    noise_factor: float  # kappa >= 1: every discrete noise parameter is kappa times the carried one
    plan: bool  # plan only: compute each release's noise parameter, draw nothing


_SECURE: contextvars.ContextVar[_SecureMode | None] = contextvars.ContextVar(
    "dpjax_secure_noise", default=None)

#: the event kinds a secure run may release through: exact as implemented
SECURE_KINDS: tuple[str, ...] = ("discrete-laplace", "discrete-gaussian", "discrete-noisy-ht",
                                 "ldp-randomizer", "none")
#: the secure kinds whose noise the noise factor scales (exact peeling's scale is solved for its
#: own composition on the grid: never below the float path's, see noisy_hard_threshold)
NOISE_FACTOR_KINDS: tuple[str, ...] = ("discrete-laplace", "discrete-gaussian")


@contextlib.contextmanager
def secure_noise(grid: float | None = None, *, noise_factor: float = 1.0):
    """Inside this block, :func:`laplace_mechanism`, :func:`gaussian_mechanism` and
    :func:`gaussian_mechanism_zcdp` release through :mod:`dpjax.discrete_noise`: the statistic
    is rounded to a public grid and exact integer noise is added (discrete Laplace for Laplace,
    discrete Gaussian for both Gaussian mechanisms), so no low-order bits of the output depend
    on the data (Mironov 2012). :func:`noisy_hard_threshold` (peeling) selects by exact
    permute-and-flip on the rounded scores and releases with discrete Laplace noise (see its
    docstring). Every other noise draw raises.

    Budgets carry over, then the noise is multiplied by ``noise_factor``: the Laplace mechanism
    at ``epsilon`` becomes the discrete Laplace at ``epsilon / noise_factor`` (pure DP); a
    Gaussian mechanism whose scale is ``sigma`` for sensitivity ``Delta`` becomes the discrete
    Gaussian at ``rho = (Delta / sigma)^2 / (2 noise_factor^2)`` (zCDP, Canonne, Kamath &
    Steinke 2020, Thm 4/14), for the integer sensitivity of the rounded statistic (slightly
    larger than ``Delta``, so the noise is slightly larger, never smaller). The events are
    discrete ones (:func:`secure_event`).

    With ``noise_factor = 1`` a Gaussian mechanism calibrated for (epsilon, delta) on the exact
    Gaussian curve keeps its rho, and rho-zCDP converted to (epsilon, delta) is looser than
    that curve: the release then proves a larger epsilon than requested. :func:`dpjax.fit`
    with ``secure=True`` therefore solves, before the run, the smallest factor with which its
    ledger delivers the request, and passes it here.

    Needs concrete values (a single release run eagerly, :func:`dpjax.fit` with
    ``secure=True``), not a jitted or vmapped sweep: the integer sensitivity is computed exactly
    on the host.

    Args:
        grid: the public grid step, a power of two; ``None``: per release, the largest power of
            two at most ``Delta / (64 sqrt(d))`` (rounding then adds at most ~1.6% to the
            l2 sensitivity); for peeling, at most ``Delta_inf / 1024``, coarser where the
            scale would leave the discrete Laplace's range (see :func:`noisy_hard_threshold`).
        noise_factor: ``kappa >= 1``, a host number (default 1: the budgets carried over as
            they are); it scales the Laplace and Gaussian noise, not peeling's (whose
            composition is solved exactly on the grid).
    """
    from dpjax import discrete_noise

    if grid is not None:
        grid = discrete_noise._check_grid(grid)
    mode = _SecureMode(grid, discrete_noise._check_noise_factor(noise_factor), False)
    token = _SECURE.set(mode)
    try:
        yield
    finally:
        _SECURE.reset(token)


@contextlib.contextmanager
def _secure_plan(grid: float | None = None):
    """Like :func:`secure_noise` (factor 1), but a release draws nothing: it returns the
    statistic rounded to its grid and a :class:`PlannedEvent` (what the secure release would
    do, and the event the default path would record). For planning a secure run."""
    from dpjax import discrete_noise

    if grid is not None:
        grid = discrete_noise._check_grid(grid)
    token = _SECURE.set(_SecureMode(grid, 1.0, True))
    try:
        yield
    finally:
        _SECURE.reset(token)


def secure_active() -> bool:
    """Whether the mechanisms release through the floating-point-safe path
    (inside :func:`secure_noise`, e.g. in :func:`dpjax.fit` with ``secure=True``)."""
    return _SECURE.get() is not None


@dataclasses.dataclass(frozen=True)
class PlannedEvent(PrivacyEvent):
    """The event of a planned secure release (noise factor 1; nothing drawn), with the event
    the default floating-point path records for the same call (``float_event``)."""

    float_event: Any = None


jax.tree_util.register_dataclass(
    PlannedEvent, data_fields=["sensitivity", "scale", "true_sensitivity", "delta",
                               "float_event"],
    meta_fields=["kind", "norm", "relation", "s", "log_constant", "calibration", "dtype"],
)


def _require_float_path(what: str) -> None:
    if _SECURE.get() is not None:
        raise ValueError(
            f"secure=True: {what} has no floating-point-safe path yet (only the Laplace, "
            "Gaussian and peeling mechanisms do; raw noise draws do not); use the default "
            "noise path for this estimator"
        )


def _auto_grid(sensitivity: float, size: int) -> float:
    e = math.floor(math.log2(sensitivity / (64.0 * math.sqrt(size))))
    return 2.0 ** min(max(e, -64), 64)


def _concrete(sensitivity: Any, *others: Any) -> tuple[float, ...]:
    """A secure release's host values (the sensitivity first, which must be finite and > 0);
    a traced value (a jitted or vmapped sweep) is refused with the way out."""
    try:
        values = tuple(float(v) for v in (sensitivity, *others))
    except jax.errors.ConcretizationTypeError:
        raise ValueError(
            "secure=True needs concrete values: fit one data set with dpjax.fit(..., "
            "secure=True) (run eagerly); jitted or vmapped sweeps use the fast path"
        ) from None
    if not (math.isfinite(values[0]) and values[0] > 0):
        raise ValueError(f"secure=True needs a finite positive sensitivity; got {values[0]:g} "
                         "(a private fit: finite epsilon or rho, finite clipping)")
    return values


def _secure_release(key: jax.Array, stat: BoundedStatistic, scale: Any, kind: str,
                    **float_event: Any) -> tuple[jax.Array, PrivacyEvent]:
    from dpjax import discrete_noise as dn

    mode = _SECURE.get()
    sens, true = _concrete(stat.sensitivity, stat.true)
    value = jnp.asarray(stat.value)
    size = int(value.size)
    grid = _auto_grid(sens, size) if mode.grid is None else mode.grid
    sc = float(scale(sens))
    ratio = math.inf if sc == 0 else sens / sc  # epsilon or sqrt(2 rho); inf: no noise
    if kind == "laplace":
        dkind, budget = "discrete_laplace", ratio
        true_int = dn.integer_sensitivity_l1(true, grid, size) if math.isfinite(true) else math.inf
    else:
        dkind, budget = "discrete_gaussian", 0.5 * ratio**2
        true_int = (dn.integer_sensitivity_l2_sq(true, grid, size) if math.isfinite(true)
                    else math.inf)
    if mode.plan:  # nothing is drawn: the rounded statistic and the noise it would get
        noise = dn.secure_noise_parameters(dkind, size, sens, budget, grid)
        released = dn.to_grid(value, grid).astype(jnp.asarray(0.0).dtype) * grid
    elif kind == "laplace":
        released, noise = dn.secure_laplace_mechanism(key, value, sens, budget, grid,
                                                      mode.noise_factor)
    else:
        released, noise = dn.secure_gaussian_mechanism(key, value, sens, budget, grid,
                                                       mode.noise_factor)
    event = secure_event(noise, stat.relation, true_int)
    if mode.plan:
        fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(PrivacyEvent)}
        event = PlannedEvent(**fields, float_event=_event(kind, stat, scale(stat.sensitivity),
                                                          **float_event))
    return released.astype(value.dtype), event


def _f32_sqrt(m: Any, up: bool) -> np.float32:
    """The float32 nearest ``sqrt(m)`` on the safe side (``m`` an exact integer or float32):
    at least the root if ``up``, at most it otherwise."""
    from fractions import Fraction

    exact = Fraction(m) if not isinstance(m, np.floating) else Fraction(float(m))
    v = np.float32(math.sqrt(float(exact)))
    step = np.float32(np.inf if up else -np.inf)
    while (Fraction(float(v)) ** 2 < exact) if up else (Fraction(float(v)) ** 2 > exact):
        v = np.nextafter(v, step)
    return v


def secure_event(noise: Any, relation: str = "replace-one", true_sensitivity: Any = None
                 ) -> PrivacyEvent:
    """A secure release (:class:`dpjax.discrete_noise.SecureNoise`) as a
    :class:`PrivacyEvent` (sensitivity in grid units), so :mod:`dpjax.accounting` composes it
    with the others: the discrete Laplace gives ``Delta_1 / t``-DP, the discrete Gaussian
    ``Delta_2^2 / (2 sigma^2)``-zCDP. ``true_sensitivity`` (default: the sensitivity) is in the
    units of ``noise.sensitivity`` (squared for the Gaussian). Concrete values are stored on
    the safe side of float32 (sensitivities rounded up, the Gaussian's ``sigma`` down), so the
    ledger never reads a weaker noise than the one used. (Built here, not in
    :mod:`dpjax.discrete_noise`, which imports nothing from this module.)"""
    true = noise.sensitivity if true_sensitivity is None else true_sensitivity
    param = noise.noise
    try:
        param = np.float32(np.asarray(param))
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        param = None
    if noise.kind == "discrete_laplace":
        kind, norm = "discrete-laplace", "l1"
        sens, tr = np.float32(noise.sensitivity), np.float32(true)  # integers <= 2^24: exact
        scale = jnp.asarray(noise.noise, jnp.float32) if param is None else param
    else:
        kind, norm = "discrete-gaussian", "l2"
        sens = _f32_sqrt(noise.sensitivity, up=True)
        tr = np.float32(np.inf) if math.isinf(true) else _f32_sqrt(true, up=True)
        if param is None:
            scale = jnp.sqrt(jnp.asarray(noise.noise, jnp.float32))
        elif np.isfinite(param) and param > 0:
            scale = _f32_sqrt(param, up=False)
        else:
            scale = np.sqrt(param)  # 0 (no noise) or NaN
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return PrivacyEvent(kind, f(sens), f(scale), f(tr), jnp.zeros((), jnp.float32), norm,
                        relation)


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


class Peeled(NamedTuple):
    """Output of (noisy) hard thresholding."""

    value: jax.Array  # (d,) exactly s non-zeros (almost surely), zeros elsewhere
    support: jax.Array  # (s,) int32, selected coordinates in order of selection
    event: PrivacyEvent | None = None  # the release's privacy event (None: exact top-s)


def hard_threshold(v: jax.Array, s: int) -> Peeled:
    """Exact top-``s`` hard thresholding ``P_s(v)``: keep the ``s`` largest ``|v_j|``.

    Ties go to the lower index, as in :func:`noisy_hard_threshold` at epsilon = inf.
    """
    _, idx = jax.lax.top_k(jnp.abs(v), s)
    mask = jnp.zeros(v.shape, bool).at[idx].set(True)
    return Peeled(jnp.where(mask, v, jnp.zeros_like(v)), idx.astype(jnp.int32))


def noisy_hard_threshold(
    key: jax.Array, stat: BoundedStatistic, s: int, epsilon: Any, delta: Any,
    calibration: str = "paper",
) -> Peeled:
    r"""NoisyHT, the "peeling" mechanism (Dwork, Su & Zhang 2018; spec 000 Alg 1, spec 003 Alg 3).

    For ``i = 1..s``: draw fresh ``w_i ~ Laplace(b)^d`` and add
    ``argmax_{j not in S} |v_j| + w_ij`` to ``S``; then release ``v_S + w~_S`` with fresh
    ``w~ ~ Laplace(b)^d``, where ``b = Delta_inf 2 sqrt(3 s log(1/delta)) / epsilon``.

    Privacy: (epsilon, delta)-DP under ``stat.relation`` if ``stat.sensitivity`` bounds the
    l-infinity change of ``v`` (Lemma 3.1 of spec 000 / Lemma 2 of spec 003). At epsilon = inf
    the noise is exactly zero and this is :func:`hard_threshold`.

    Inside :func:`secure_noise` (``secure=True`` fits) the same budget is released exactly,
    with no floating-point noise anywhere (host integers; needs concrete values):

    1. ``v`` is rounded to the public grid, ``k = to_grid(v, grid)`` (grid: the one given to
       :func:`secure_noise`, else the largest power of two at most ``Delta_inf / 1024``,
       coarsened while the scale below would exceed the discrete Laplace's range ``2^20``).
       Its l-infinity sensitivity is ``Delta^Z = ceil(Delta_inf / grid)``
       (:func:`~dpjax.discrete_noise.integer_sensitivity_linf`, exact, never below the real
       change of ``k``), and ``|k_j|`` moves by at most ``Delta^Z``.
    2. ``b^Z`` is the smallest float32 at least ``Delta^Z * peeling_multiplier(s, epsilon,
       delta)`` (:func:`~dpjax.discrete_noise.peeling_scale_used`): ``Delta^Z / b^Z`` is at
       most the floating-point path's ``Delta_inf / b``.
    3. Each of the ``s`` rounds selects among the coordinates not yet selected by exact
       permute-and-flip on the scores ``|k_j|`` with coins ``Bernoulli(exp(-(q* - |k_j|) /
       b^Z))`` (:func:`~dpjax.discrete_noise.peeling_selection`): ``2 Delta^Z / b^Z``-DP
       (McKenna & Sheldon 2020, Thm 1, at ``epsilon = 2 Delta^Z / b^Z``), the same per-round
       epsilon as a report-noisy-max round with Laplace(``b``) noise at ``lambda / b``.
    4. ``k_S + Z_S`` is released with ``Z ~ DLap(b^Z)`` i.i.d. (exact discrete Laplace):
       each coordinate is ``Delta^Z / b^Z``-DP (``P(k + Z = y) / P(k' + Z = y) <=
       exp(|k - k'| / b^Z)``), ``s Delta^Z / b^Z`` for the ``s`` together; the output is
       ``grid * (k_S + Z_S)`` (post-processing of the exact integers).

    So the exact release is the composition of ``s`` mechanisms of ``2 r``-DP and ``s`` of
    ``r``-DP with ``r = Delta^Z / b^Z``: exactly the structure
    :func:`dpjax.accounting.peeling_epsilon` bounds (basic or advanced composition), at a ratio
    no larger than the floating-point path's, so it delivers at least the requested
    ``(epsilon, delta)``. Its event is ``"discrete-noisy-ht"`` (sensitivity ``Delta^Z`` of the
    declared bound, true sensitivity ``ceil(true / grid)``, scale ``b^Z``, grid units) and
    the ledger accounts it by the same :func:`~dpjax.accounting.peeling_epsilon`. The only
    inexactness is the discrete Laplace sampler's 32-bit range (an additive ``delta <
    1e-437``, :mod:`dpjax.discrete_noise`). At epsilon = inf no noise is drawn and the result
    is :func:`hard_threshold` of ``v`` (unrounded).

    Args:
        key: PRNG key; split into ``key_select`` (the s peeling rounds) and ``key_release``.
        stat: the statistic ``v`` (shape ``(d,)``) with an l-infinity sensitivity.
        s: the number of coordinates to release (static), ``1 <= s <= d``.
        epsilon, delta: the budget of this one release (arrays are fine).
        calibration: of ``b``, ``"paper"`` (the printed formula above) or ``"tight"`` (the
            smallest ``b`` the ledger's bound proves); see :func:`peeling_multiplier`.

    Returns:
        :class:`Peeled` with exactly ``s`` non-zeros, the selected support and the release's
        :class:`PrivacyEvent`.
    """
    _require_norm(stat, "linf", "noisy_hard_threshold")
    v = jnp.asarray(stat.value)
    if v.ndim != 1:
        raise ValueError(f"noisy_hard_threshold needs a vector; got shape {v.shape}")
    d = v.shape[0]
    if not 1 <= s <= d:
        raise ValueError(f"s must be an integer in [1, {d}]; got {s}")
    if _SECURE.get() is not None:
        return _secure_peeling(key, stat, s, epsilon, delta, calibration)
    b = peeling_scale(stat.sensitivity, s, epsilon, delta, calibration)
    key_select, key_release = jax.random.split(key)
    selection_noise = laplace_noise(key_select, (s, d), b, v.dtype)
    scores = jnp.abs(v)

    def peel(i, carry):
        mask, support = carry
        noisy = jnp.where(mask, -jnp.inf, scores + selection_noise[i])
        j = jnp.argmax(noisy)
        return mask.at[j].set(True), support.at[i].set(j.astype(jnp.int32))

    mask, support = jax.lax.fori_loop(
        0, s, peel, (jnp.zeros((d,), bool), jnp.zeros((s,), jnp.int32))
    )
    released = v + laplace_noise(key_release, (d,), b, v.dtype)
    event = _event("noisy-ht", stat, b, delta, s, dtype=v.dtype)
    return Peeled(jnp.where(mask, released, jnp.zeros_like(v)), support, event)


def _peeling_grid(sensitivity: float, multiplier: float) -> float:
    """The automatic grid of exact peeling: ``Delta_inf / grid`` in ``[D, 2 D)`` with
    ``D = min(1024, 2^18 / multiplier)`` (rounding adds at most 1/1024 to the sensitivity, and
    the scale ``ceil(Delta_inf / grid) * multiplier`` stays below the sampler's ``2^20``)."""
    target = min(1024.0, 2.0**18 / multiplier)
    e = math.floor(math.log2(sensitivity / target))
    return 2.0 ** min(max(e, -64), 64)


def _secure_peeling(key: jax.Array, stat: BoundedStatistic, s: int, epsilon: Any,
                    delta: Any, calibration: str = "paper") -> Peeled:
    """:func:`noisy_hard_threshold` inside :func:`secure_noise` (see its docstring)."""
    from dpjax import discrete_noise as dn

    sens, true, eps, dl = _concrete(stat.sensitivity, stat.true, epsilon, delta)
    if not (eps > 0 and 0 < dl < 1):
        raise ValueError(f"peeling needs epsilon > 0 and delta in (0, 1); got epsilon = "
                         f"{eps:g}, delta = {dl:g}")
    v = jnp.asarray(stat.value)
    out_dtype = jnp.asarray(0.0).dtype  # float64 under x64, else float32
    # float32 (float64 under x64), as the float path's events: Delta^Z <= 2^24 and b^Z (a
    # float32) are exact in both
    fl = lambda x: jnp.asarray(x, jnp.result_type(float))  # noqa: E731
    multiplier = float(peeling_multiplier(s, np.float64(eps), np.float64(dl), calibration))
    if multiplier == 0.0:  # epsilon = inf: no noise, exact top-s of v
        top = hard_threshold(v, s)
        event = PrivacyEvent("discrete-noisy-ht", fl(sens), fl(0.0), fl(true), fl(dl),
                             "linf", stat.relation, s)
        return Peeled(top.value, top.support, event)
    mode = _SECURE.get()
    grid = _peeling_grid(sens, multiplier) if mode.grid is None else mode.grid
    sens_int = dn.integer_sensitivity_linf(sens, grid)
    dn._check_sensitivity_int(sens_int, "l-infinity sensitivity")
    true_int = dn.integer_sensitivity_linf(true, grid) if math.isfinite(true) else math.inf
    true_f32 = np.float32(true_int)
    if float(true_f32) < true_int:  # above 2^24: round up, never below the true bound
        true_f32 = np.nextafter(true_f32, np.float32(np.inf))
    b = dn.peeling_scale_used(sens_int, multiplier)
    event = PrivacyEvent("discrete-noisy-ht", fl(sens_int), fl(b), fl(true_f32), fl(dl),
                         "linf", stat.relation, s)
    if mode.plan:  # nothing is drawn: the exact top-s of the rounded statistic and the event
        top = hard_threshold(dn.to_grid(v, grid).astype(out_dtype) * grid, s)
        fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(PrivacyEvent)}
        float_event = _event("noisy-ht", stat, peeling_scale(stat.sensitivity, s, epsilon, delta,
                                                              calibration), delta, s)
        return Peeled(top.value.astype(v.dtype), top.support,
                      PlannedEvent(**fields, float_event=float_event))
    key_select, key_release = jax.random.split(key)
    k = np.asarray(dn.to_grid(v, grid), np.int64)
    support = dn.peeling_selection(key_select, np.abs(k), s, b)
    z = np.asarray(dn.discrete_laplace(key_release, (s,), b), np.int64)
    # grid * (exact integer k_S + Z): post-processing of the exact release
    released = np.zeros(v.shape, np.float64)
    released[support] = (k[support] + z).astype(np.float64) * grid
    value = jnp.asarray(released.astype(out_dtype)).astype(v.dtype)
    return Peeled(value, jnp.asarray(support, jnp.int32), event)


# --------------------------------------------------------------------------------------------
# Local DP: one mechanism per record
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# DP GLMs (spec 003): the response coin and a declared sensitivity margin
# --------------------------------------------------------------------------------------------

__all__ += ["RESPONSE_BITS", "implemented_flip_probability", "randomized_response_bit",
            "response_flip_threshold", "response_probability", "with_sensitivity_margin"]


def with_sensitivity_margin(stat: BoundedStatistic, margin: Any) -> BoundedStatistic:
    """Declare ``margin * stat.sensitivity`` as the sensitivity (the value is unchanged).

    Papers often calibrate from a constant larger than the sensitivity they derive (spec 003:
    ``B = 4 (R + c1) sigma_x`` where the proofs give ``2 (R + c1) sigma_x``). With
    ``margin >= 1`` the declared sensitivity is still a valid bound and the mechanism is
    over-noised by ``margin``; ``margin < 1`` under-noises (only for audits of a planted bug).
    The true sensitivity is kept, so the privacy event (and the ledger) reports the guarantee
    the noise really earns either way.
    """
    if not isinstance(stat, BoundedStatistic):
        raise TypeError(f"with_sensitivity_margin takes a BoundedStatistic; got {type(stat)}")
    return stat.declare(stat.sensitivity * margin)


# --------------------------------------------------------------------------------------------
# Clipped means of rank-one per-record terms (DP two-stage GD for IV regression)
# --------------------------------------------------------------------------------------------

__all__ += ["clipped_outer_mean"]


def clipped_outer_mean(a: jax.Array, b: jax.Array, bound: Any, records_axis: int = 0
                       ) -> BoundedStatistic:
    r"""``(1/n) sum_i CLIP_bound(a_i b_i^T)`` in Frobenius norm, with its replace-one sensitivity.

    Each record contributes the rank-one matrix ``a_i b_i^T`` (``a`` is ``(n, k)``, ``b`` is
    ``(n, m)``), clipped to the Frobenius ball of radius ``bound``:
    ``CLIP_C(G) = G min(1, C / ||G||_F)``. For a rank-one matrix
    ``||a_i b_i^T||_F = ||a_i||_2 ||b_i||_2``, so the clipped mean is
    ``a^T diag(f) b / n`` with ``f_i = min(1, C / (||a_i|| ||b_i||))``: the same value as
    ``bounded_mean(clip_l2(a[:, :, None] * b[:, None, :], C, axis=(-2, -1)), 2 C, "l2")``, in
    ``O(n (k + m))`` memory instead of ``O(n k m)``.

    Privacy: every clipped term lies in the Frobenius ball of radius ``C``, so replacing one record
    moves the mean by at most ``2 C / n`` in Frobenius norm (= the l2 norm of the flattened
    matrix, the norm i.i.d. Gaussian noise per entry is calibrated in). ``n`` is the public shape.
    ``bound = inf`` is a no-op (infinite sensitivity; only for the non-private limit).

    Args:
        a: ``(n, k)`` left factors.
        b: ``(n, m)`` right factors.
        bound: the clipping threshold ``C > 0`` (array is fine).

    Returns:
        A :class:`BoundedStatistic` with value ``(k, m)``, l2 sensitivity ``2 C / n``, replace-one.
    """
    r = records_axis
    if r not in (0, 1) or a.ndim != 2 or b.ndim != 2 or a.shape[r] != b.shape[r]:
        raise ValueError(
            f"clipped_outer_mean needs a (n, k) and b (n, m) (records_axis=0) or a (k, n) and "
            f"b (m, n) (records_axis=1); got {a.shape} and {b.shape}, records_axis={r}"
        )
    n, f = a.shape[r], 1 - r
    # With the overflow-free factorisation of _scaled_l2 (a_i = u_a 2**-k_a, ||u_a|| = r_a):
    # a term inside the ball keeps its raw factors; a term outside becomes
    # u_a u_b^T * C / (r_a r_b), of norm C up to rounding, whatever the magnitudes of a_i and b_i
    # (entries near the dtype's maximum, denormals, a product of norms that over- or underflows).
    ua, ka, ra = _scaled_l2(a, f)
    ub, kb, rb = _scaled_l2(b, f)
    bound = jnp.asarray(bound, a.dtype)
    # log2 ||a_i b_i^T||_F, exact in its exponent part: no product of norms can over- or underflow
    inside = _log2_norm(ka, ra) + _log2_norm(kb, rb) <= jnp.log2(bound)  # (n, 1) or (1, n)
    rr = ra * rb
    left = jnp.where(inside, sanitize(a), ua * (bound / jnp.where(rr > 0, rr, jnp.ones_like(rr))))
    right = jnp.where(inside, sanitize(b), ub)
    value = (left.T @ right if r == 0 else left @ right.T) / n
    return BoundedStatistic(value, 2.0 * jnp.asarray(bound) / n, "l2", "replace-one")
