"""The statistic that carries its sensitivity, and the event a release of it records.

A :class:`BoundedStatistic` is a value with its declared sensitivity, its true bound, the norm
and the neighbouring relation: what every mechanism of :mod:`dpjax.mechanisms` takes, and the
only place a noise scale is calibrated from. A :class:`PrivacyEvent` is what every mechanism
returns beside the noisy value, built from the arrays that drew the noise; the ledger
(:mod:`dpjax.accounting`) reads the guarantee off it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

__all__ = [
    "KINDS",
    "NORMS",
    "RELATIONS",
    "ZCDP_KINDS",
    "BoundedStatistic",
    "MechanismKind",
    "Norm",
    "PrivacyEvent",
    "bounded_mean",
    "bounded_mean_from_sum",
    "bounded_sum",
    "no_privacy_event",
    "with_sensitivity_margin",
]

Norm = Literal["l1", "l2", "linf"]


NORMS: tuple[str, ...] = ("l1", "l2", "linf")


RELATIONS: tuple[str, ...] = ("replace-one", "add-remove", "local")


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


MechanismKind = Literal["laplace", "gaussian", "gaussian-zcdp", "noisy-ht",
                        "discrete-laplace", "discrete-gaussian", "ldp-randomizer", "none",
                        "discrete-noisy-ht", "objective-perturbation"]


KINDS: tuple[str, ...] = ("laplace", "gaussian", "gaussian-zcdp", "noisy-ht",
                          "discrete-laplace", "discrete-gaussian", "ldp-randomizer", "none",
                          "discrete-noisy-ht", "objective-perturbation")


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
            ``"objective-perturbation"`` (the noise vector of a perturbed objective,
            :mod:`dpjax.algorithms.baselines`: l2 sensitivity of the summed gradient, the scale
            drawn; its estimator's own ledger states the theorem's guarantee), or ``"none"``
            (a non-private release).
        sensitivity: the declared sensitivity the noise was calibrated from.
        scale: the noise scale drawn (Laplace ``b``, Gaussian ``sigma``); 0 means no noise.
        true_sensitivity: the statistic's actual bound (``inf``: unbounded); the delivered
            guarantee is computed from it.
        delta: the delta of an (epsilon, delta) Gaussian or NoisyHT calibration (0 otherwise;
            for NoisyHT, exact or not, the delta of its advanced composition).
        norm, relation: of the sensitivity (static).
        s: the number of coordinates a NoisyHT release selects (static; for
            ``"objective-perturbation"``, the dimension of the noise vector; for
            ``"discrete-gaussian"``, the statistic's number of coordinates, 0 if not recorded
            (the default for that kind): a scalar's exact privacy loss distribution is
            composed, a vector's or an unrecorded one's zCDP bound).
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
    s: int | None = None
    log_constant: float = 1.25
    calibration: str = ""
    dtype: str = ""

    def __post_init__(self) -> None:
        _validate.check_choice(self.kind, "kind", KINDS)
        if self.s is None:  # unrecorded: 1 (one coordinate selected), but for a discrete
            # Gaussian 0, a statistic of unknown dimension, which the ledger composes by its
            # zCDP bound (only a recorded scalar, s = 1, by its exact PLD)
            object.__setattr__(self, "s", 0 if self.kind == "discrete-gaussian" else 1)


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
    caller is responsible for ``total`` being that sum over ``n`` records (``n`` a shape, or a
    public runtime count: the padded programs of :class:`dpjax.base.Padded`).
    """
    return BoundedStatistic(total, jnp.asarray(diameter), norm, "replace-one").scale(1.0 / n)


def bounded_mean(terms: jax.Array, diameter: Any, norm: Norm) -> BoundedStatistic:
    """The sum of :func:`bounded_sum` divided by the public count ``terms.shape[0]``.

    The divisor is a shape, so it is public and data-independent (privatise sums, divide by
    public constants); the sensitivity is ``diameter / n``.
    """
    n = terms.shape[0]
    return bounded_sum(terms, diameter, norm).scale(1.0 / n)


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
