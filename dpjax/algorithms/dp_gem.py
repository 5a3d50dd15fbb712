r"""DP gradient EM with coordinate-wise robust gradients (spec 002, Wang, Ding, Xie, Pan & Xu).

Two private gradient-EM algorithms on the *full* data every iteration (no sample splitting;
spec 002 A10: the faithful version), for every model of :mod:`dpjax.models` that supplies
``per_sample_gradients(beta, data) -> (n, d)`` (``grad q_i(beta; beta)``, spec 002 §2.7):

* :func:`dp_gem` -- **Algorithm 2** (spec 002 §2.5). Iteration ``t``, coordinate ``j``:

  .. math::

      g_j = \frac1n \sum_i \psi_{s,\beta_s}(u_{ij}) + Z_j, \qquad
      u_{ij} = \nabla_j q_i(\beta^{t-1}; \beta^{t-1}), \qquad
      \beta^t = \beta^{t-1} + \eta\, g,

  with the smoothed Catoni score :func:`dpjax.robust_mean.psi` and each coordinate released by
  the zCDP Gaussian mechanism with budget ``rho = eps~^2 / (d T)`` and the sensitivity of
  :func:`dpjax.robust_mean.robust_mean_statistic` (``(4 sqrt2 / 3) s / n``), so
  ``sigma^2 = 16 s^2 d T / (9 n^2 eps~^2)`` (computed from the ``s`` actually used, spec 002
  A1). Here ``eps~ = sqrt(log(1/delta) + eps) - sqrt(log(1/delta))`` (A2), evaluated as
  ``eps / (sqrt(log(1/delta) + eps) + sqrt(log(1/delta)))`` (no cancellation).
  ``beta_s = sqrt(log(d / zeta))`` and ``s`` by ``s_rule`` (A1):

  ====================  =====================================
  ``s_rule``            ``s``
  ====================  =====================================
  ``sigma_consistent``  ``sqrt(n tau eps~) / (2 beta_s)`` (default)
  ``alg2_literal``      ``sqrt(n tau eps~) / (2 log(1/delta))``
  ``alg3_literal``      ``sqrt(n tau eps~) / (2 log(1/zeta))``
  ``thm2``              ``sqrt(n tau eps~) / log(d / zeta)``
  ``explicit``          ``hparams.s``
  ====================  =====================================

* :func:`clipped_gem` -- **Algorithm 1** (spec 002 §2.4, the DP-SGD-style baseline): per-sample
  gradients clipped in l2 to ``C``, their mean released by the zCDP Gaussian mechanism with
  l2 sensitivity ``2 C / n`` and budget ``eps~^2 / T`` per iteration (spec 002's recommended
  calibration: noise std ``(2C/n) sqrt(T / (2 eps~^2))``), then ``beta + eta * release``.

Privacy (replace-one): every release is a Gaussian mechanism on a statistic whose sensitivity
holds for every input (``psi`` is clamped to ``+-2 sqrt2 s / 3``; ``clip_l2`` sanitises), given
the previous public iterate; the ``d T`` (resp. ``T``) releases compose adaptively to
``rho = eps~^2``-zCDP, which the Bun-Steinke conversion turns back into exactly
``(epsilon, delta)``-DP (``eps~^2 + 2 eps~ sqrt(log(1/delta)) = epsilon``). The ledger is composed
from the events the run drew. ``epsilon = inf`` gives ``eps~ = inf``: exactly zero noise, and
(for the rule-based ``s``) ``s = inf``, i.e. ``psi`` is the identity -- the non-private gradient
EM of Balakrishnan et al. (2017) on the full data.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, registry
from dpjax.accounting import ApproxDP, Ledger, Release
from dpjax.base import Estimator, FitResult, as_key, fit
from dpjax.mechanisms import (
    PrivacyEvent,
    bounded_mean,
    clip_l2,
    gaussian_mechanism_zcdp,
)
from dpjax.models.protocol import EMModel
from dpjax.robust_mean import robust_mean_statistic

__all__ = [
    "ClippedGEMHyperparams",
    "DPGEMHyperparams",
    "GEMInfo",
    "GEMState",
    "S_RULES",
    "clipped_gem",
    "dp_gem",
    "eps_tilde",
    "fit_clipped_gem",
    "fit_dp_gem",
    "smoothing_parameters",
]

SRule = Literal["sigma_consistent", "alg2_literal", "alg3_literal", "thm2", "explicit"]
S_RULES: tuple[str, ...] = ("sigma_consistent", "alg2_literal", "alg3_literal", "thm2", "explicit")


class DPGEMHyperparams(NamedTuple):
    """Swept hyperparameters of Algorithm 2 (arrays; a study may ``vmap`` over any of them)."""

    epsilon: jax.Array  # () budget of the whole run; inf: non-private (no noise, s = inf)
    delta: jax.Array  # ()
    eta: jax.Array  # () step size
    tau: jax.Array  # () public bound on the per-coordinate second moment of grad q_i
    zeta: jax.Array  # () failure probability (sets beta_s and, for some rules, s)
    s: jax.Array  # () truncation scale; read only with s_rule="explicit" (else NaN)


class ClippedGEMHyperparams(NamedTuple):
    """Swept hyperparameters of Algorithm 1."""

    epsilon: jax.Array  # ()
    delta: jax.Array  # ()
    eta: jax.Array  # () step size
    clip: jax.Array  # () l2 clipping norm C (inf: none; only with epsilon = inf)


class GEMState(NamedTuple):
    beta: jax.Array  # (d,) current iterate


class GEMInfo(NamedTuple):
    noise_scale: jax.Array  # () Gaussian sigma per coordinate (0 at epsilon = inf)
    s: jax.Array  # () truncation scale used (Algorithm 2) or the clip norm C (Algorithm 1)
    events: tuple[PrivacyEvent, ...]  # Alg 2: one per coordinate (d); Alg 1: one


def eps_tilde(epsilon: Any, delta: Any) -> jax.Array:
    """``sqrt(log(1/delta) + eps) - sqrt(log(1/delta))`` (spec 002 A2), stably; inf at inf.

    ``rho = eps_tilde^2`` is the largest zCDP budget whose Bun-Steinke conversion gives
    ``epsilon`` at ``delta``.
    """
    eps = jnp.asarray(epsilon)
    log_d = jnp.log(1.0 / jnp.asarray(delta, eps.dtype))
    finite = jnp.isfinite(eps)
    eps_f = jnp.where(finite, eps, jnp.ones_like(eps))
    val = eps_f / (jnp.sqrt(log_d + eps_f) + jnp.sqrt(log_d))
    return jnp.where(finite, val, jnp.full_like(val, jnp.inf))


def smoothing_parameters(
    s_rule: SRule, n: int, d: int, hp: DPGEMHyperparams
) -> tuple[jax.Array, jax.Array]:
    """``(s, beta_s)`` of Algorithm 2 (spec 002 §2.5 and A1) for ``n`` records in dimension d."""
    et = eps_tilde(hp.epsilon, hp.delta)
    dtype = et.dtype
    log_dz = jnp.log(d / jnp.asarray(hp.zeta, dtype))
    beta_s = jnp.sqrt(log_dz)
    root = jnp.sqrt(n * jnp.asarray(hp.tau, dtype) * et)
    if s_rule == "sigma_consistent":
        s = root / (2.0 * beta_s)
    elif s_rule == "alg2_literal":
        s = root / (2.0 * jnp.log(1.0 / jnp.asarray(hp.delta, dtype)))
    elif s_rule == "alg3_literal":
        s = root / (2.0 * jnp.log(1.0 / jnp.asarray(hp.zeta, dtype)))
    elif s_rule == "thm2":
        s = root / log_dz
    elif s_rule == "explicit":
        s = jnp.asarray(hp.s, dtype)
    else:
        raise ValueError(f"s_rule must be one of {S_RULES}; got {s_rule!r}")
    return s, beta_s


# --------------------------------------------------------------------------------------------
# The steps
# --------------------------------------------------------------------------------------------


def _make_dp_gem_step(model: Any, num_iterations: int, s_rule: SRule):
    def step(key, state: GEMState, data, hp: DPGEMHyperparams):
        beta = state.beta
        u = model.per_sample_gradients(beta, data)  # (n, d)
        n, d = u.shape
        s, beta_s = smoothing_parameters(s_rule, n, d, hp)
        rho = jnp.square(eps_tilde(hp.epsilon, hp.delta)) / (d * num_iterations)

        def coordinate(k, column):
            # the statistic carries its own sensitivity (4 sqrt2 / 3) s / n: never retyped
            return gaussian_mechanism_zcdp(k, robust_mean_statistic(column, s, beta_s), rho)

        g, ev = jax.vmap(coordinate)(jax.random.split(key, d), u.T)
        events = tuple(jax.tree_util.tree_map(lambda a, j=j: a[j], ev) for j in range(d))
        new = beta + jnp.asarray(hp.eta, beta.dtype) * g.astype(beta.dtype)
        return GEMState(new), GEMInfo(ev.scale[0].astype(beta.dtype), s.astype(beta.dtype),
                                      events)

    return step


def _make_clipped_step(model: Any, num_iterations: int):
    def step(key, state: GEMState, data, hp: ClippedGEMHyperparams):
        beta = state.beta
        g = model.per_sample_gradients(beta, data)  # (n, d)
        clip = jnp.asarray(hp.clip, g.dtype)
        # one clipped record moves the mean by at most 2C/n in l2
        stat = bounded_mean(clip_l2(g, clip), 2.0 * clip, "l2")
        rho = jnp.square(eps_tilde(hp.epsilon, hp.delta)) / num_iterations
        release, ev = gaussian_mechanism_zcdp(key, stat, rho)
        new = beta + jnp.asarray(hp.eta, beta.dtype) * release.astype(beta.dtype)
        return GEMState(new), GEMInfo(ev.scale.astype(beta.dtype), clip.astype(beta.dtype),
                                      (ev,))

    return step


def _init(beta0: Any) -> GEMState:
    return GEMState(jnp.asarray(beta0, dtype=jnp.result_type(float)))


def dp_gem(model: Any, num_iterations: int, s_rule: SRule = "sigma_consistent") -> Estimator:
    """Algorithm 2 (DP gradient EM, spec 002 §2.5), every iteration on the full data.

    Args:
        model: a model with ``per_sample_gradients`` (hashable, bound statically).
        num_iterations: ``T`` (static; it enters the noise calibration).
        s_rule: how the truncation scale ``s`` is set (module docstring; static).
    """
    return _build_dp_gem(model, num_iterations, s_rule)


@functools.lru_cache(maxsize=512)
def _build_dp_gem(model: Any, num_iterations: int, s_rule: SRule) -> Estimator:
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    if s_rule not in S_RULES:
        raise ValueError(f"s_rule must be one of {S_RULES}; got {s_rule!r}")
    name = f"dp-gem/{model.name}"
    ledger_fn = functools.partial(_ledger, name, "robust", model, num_iterations, s_rule)
    return Estimator(name, _init, _make_dp_gem_step(model, num_iterations, s_rule),
                     num_iterations, "full", ledger_fn)


@functools.lru_cache(maxsize=512)
def clipped_gem(model: Any, num_iterations: int) -> Estimator:
    """Algorithm 1 (clipped DP gradient EM, spec 002 §2.4), full data every iteration."""
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    name = f"clipped-gem/{model.name}"
    ledger_fn = functools.partial(_ledger, name, "clipped", model, num_iterations, None)
    return Estimator(name, _init, _make_clipped_step(model, num_iterations), num_iterations,
                     "full", ledger_fn)


# --------------------------------------------------------------------------------------------
# Ledger
# --------------------------------------------------------------------------------------------


def _merge_events(events: tuple[PrivacyEvent, ...]) -> PrivacyEvent:
    """One stacked event (last axis: the coordinates) from per-coordinate events of one kind."""
    return jax.tree_util.tree_map(
        lambda *xs: np.stack([np.asarray(x) for x in xs], axis=-1), *events)


def _ledger(
    name: str,
    kind: str,
    model: Any,
    num_iterations: int,
    s_rule: str | None,
    n: int,
    hparams: Any,
    events: tuple[PrivacyEvent, ...],
) -> Ledger:
    """The privacy ledger of one run on ``n`` records, composed in zCDP from the run's events
    (``d T`` coordinate releases for Algorithm 2, ``T`` vector releases for Algorithm 1) and
    converted to (epsilon, delta) by Bun-Steinke (which inverts ``rho = eps~^2`` exactly)."""
    eps = float(np.asarray(hparams.epsilon))
    delta = float(np.asarray(hparams.delta))
    eta = float(np.asarray(hparams.eta))
    data = f"all {n} records every iteration"
    notes = [f"n = {n}, T = {num_iterations}, eta = {eta:g}"]
    if kind == "robust":
        d = len(events)
        merged = _merge_events(events)
        statistic = ("coordinate j of (1/n) sum_i psi_{s,beta_s}(grad_j q_i(beta^t; beta^t)); "
                     "sensitivity (4 sqrt2/3) s/n")
        notes.append(f"d = {d}: {d * num_iterations} coordinate releases, each rho = "
                     f"eps~^2/(d T); s_rule = {s_rule!r}, tau = "
                     f"{float(np.asarray(hparams.tau)):g}, zeta = "
                     f"{float(np.asarray(hparams.zeta)):g}")
    else:
        merged = events[0]
        statistic = ("(1/n) sum_i clip_l2(grad q_i(beta^t; beta^t), C); l2 sensitivity 2C/n, "
                     f"C = {float(np.asarray(hparams.clip)):g}")
        notes.append("each iteration rho = eps~^2/T")
    release = Release.from_event(merged, statistic, data)
    if release.sensitivity_ratio != 1.0:
        notes.append(f"true/declared sensitivity = {release.sensitivity_ratio:g}")
    if getattr(model, "weights", "exact") == "paper":
        notes.append("paper-literal posterior weights (biased, still DP)")
    return Ledger.build(
        name, [release], "zcdp", variant="corrected", requested=ApproxDP(eps, delta),
        delta=delta, conversion="bun-steinke", notes=notes,
    )


# --------------------------------------------------------------------------------------------
# The convenience API
# --------------------------------------------------------------------------------------------


def _common(key, data, model, epsilon, delta, num_iterations, beta0, eta, on_invalid):
    key = as_key(key)
    if not isinstance(model, EMModel):
        raise TypeError(f"model must implement dpjax.models.EMModel (per_sample_gradients, ...); "
                        f"got {type(model).__name__}")
    _validate.check_on_invalid(on_invalid)
    data = model.validate_data(data, on_invalid)
    n, d = model.num_records(data), model.dim(data)
    T = _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    eps = _validate.check_epsilon(epsilon)
    if eps.ndim:
        raise ValueError("epsilon must be a scalar for a single fit; use dpjax.sweep for grids")
    dl = _validate.check_delta(delta)
    if dl.ndim:
        raise ValueError("delta must be a scalar")
    if math.isfinite(float(eps)) and float(dl) > 1.0 / n:
        warnings.warn(
            f"delta = {float(dl):g} > 1/n = {1.0 / n:g}: such a delta permits releasing a "
            "record outright (the paper uses delta = 1/n)",
            _validate.DPJaxWarning, stacklevel=4,
        )
    _validate.check_positive(eta, "eta")
    beta0 = _validate.check_array(beta0, "beta0", shape=(d,))
    return key, data, n, d, T, float(eps), float(dl), beta0


def _f32(*values: Any) -> list[np.ndarray]:
    return [np.asarray(v, dtype=np.float32) for v in values]


def fit_dp_gem(
    key: Any,
    data: Any,
    model: Any,
    *,
    epsilon: Any,
    delta: Any,
    num_iterations: int,
    beta0: Any,
    tau: Any,
    eta: Any = 1.0,
    zeta: Any = 0.05,
    s_rule: SRule = "sigma_consistent",
    s: Any = None,
    on_invalid: str = "raise",
) -> FitResult:
    """Fit Algorithm 2 (DP gradient EM, spec 002 §2.5) to one data set.

    Args:
        key: PRNG key (or int seed) for the noise.
        data: the model's data (:class:`~dpjax.models.gmm.GMMData` or an ``(n, d)`` array,
            :class:`~dpjax.models.mor.MoRData`, :class:`~dpjax.models.rmc.RMCData`).
        model: e.g. ``GaussianMixture(0.5)``; needs ``per_sample_gradients``.
        epsilon: in (0, inf]; inf gives the non-private gradient EM (no noise, and ``s = inf``
            unless ``s_rule="explicit"``).
        delta: in (0, 1) (the paper uses ``1/n``; a warning above that).
        num_iterations: ``T >= 1`` (the paper's experiments: 22).
        beta0: data-independent initial value, shape ``(d,)``.
        tau: public bound on the per-coordinate second moment of the per-sample gradients (> 0).
        eta: step size > 0 (theory: 1).
        zeta: failure probability in (0, 1) (default 0.05).
        s_rule: ``"sigma_consistent"`` (default), ``"alg2_literal"``, ``"alg3_literal"``,
            ``"thm2"`` or ``"explicit"`` (then ``s`` is required).
        s: the truncation scale for ``s_rule="explicit"``, in (0, inf].
        on_invalid: as in :func:`dpjax.algorithms.dp_em.fit_ld_dp_em`.

    Returns:
        :class:`~dpjax.base.FitResult`; its ledger delivers exactly ``(epsilon, delta)``.
    """
    key, data, n, d, T, eps, dl, beta0 = _common(key, data, model, epsilon, delta,
                                                 num_iterations, beta0, eta, on_invalid)
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
    else:
        if s is not None:
            raise ValueError("s is only read with s_rule='explicit'")
        s_val = math.nan
    hp = DPGEMHyperparams(*_f32(eps, dl, eta, tau, zeta, s_val))
    return fit(dp_gem(model, T, s_rule), key, data, beta0, hp, n=n)


def fit_clipped_gem(
    key: Any,
    data: Any,
    model: Any,
    *,
    epsilon: Any,
    delta: Any,
    num_iterations: int,
    beta0: Any,
    eta: Any = 1.0,
    clip: Any = 1.0,
    on_invalid: str = "raise",
) -> FitResult:
    """Fit Algorithm 1 (clipped DP gradient EM, spec 002 §2.4) to one data set.

    Arguments as :func:`fit_dp_gem`, with ``clip`` the l2 clipping norm ``C`` in (0, inf]
    (default 1, the paper's experiments; inf only with ``epsilon = inf``) in place of
    ``tau``, ``zeta``, ``s_rule`` and ``s``.
    """
    key, data, n, d, T, eps, dl, beta0 = _common(key, data, model, epsilon, delta,
                                                 num_iterations, beta0, eta, on_invalid)
    c = _validate.check_truncation(clip, eps, "clip")
    if c.ndim:
        raise ValueError("clip must be a scalar")
    hp = ClippedGEMHyperparams(*_f32(eps, dl, eta, c))
    return fit(clipped_gem(model, T), key, data, beta0, hp, n=n)


# --------------------------------------------------------------------------------------------
# Registry: every estimator with a small example problem (the conformance suite runs over it)
# --------------------------------------------------------------------------------------------


def _example(model: Any, d: int, seed: int, kind: str) -> registry.Example:
    n = 400
    beta = np.full(d, 1.0 / np.sqrt(d), np.float32)
    data = model.simulate(jax.random.key(seed), n, jnp.asarray(beta))

    def hp(eps):
        f = functools.partial(jnp.asarray, dtype=jnp.float32)
        if kind == "robust":
            return DPGEMHyperparams(f(eps), f(1.0 / n), f(1.0), f(2.0), f(0.05), f(jnp.nan))
        return ClippedGEMHyperparams(f(eps), f(1.0 / n), f(1.0), f(1.0))

    return registry.Example(data, beta * 0.8, hp)


def _register() -> None:
    from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates

    def req(eps):
        return ("epsilon", eps)

    models = [(GaussianMixture(0.5), 4, 0), (MixtureOfRegressions(0.5), 3, 1),
              (RegressionMissingCovariates(1.0, 0.2), 3, 2)]
    for model, d, seed in models:
        registry.register(registry.Entry(
            f"dp-gem/{model.name}", "dp-gem", functools.partial(dp_gem, model, 4),
            functools.partial(_example, model, d, seed, "robust"), requested=req))
        registry.register(registry.Entry(
            f"clipped-gem/{model.name}", "dp-gem", functools.partial(clipped_gem, model, 4),
            functools.partial(_example, model, d, seed, "clipped"), requested=req))


_register()
