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

  Variants: ``sample_split=True`` (spec 002 A10, **not in the paper**): iteration ``t`` on the
  ``t``-th of ``T`` disjoint batches of ``n0 = floor(n/T)`` records, ``s`` from ``n0``, and each
  batch's ``d`` releases with ``rho = eps~^2 / d`` (parallel composition across batches). The
  missing-covariates model offers both ``K`` of A4 (``second_moment``).

* :func:`dp_exact_em` -- **Algorithm 3** (spec 002 §2.6, Gaussian mixture only): the same
  coordinate-wise private robust mean, applied to the M-step terms ``f_i = (2 w - 1) y_i``,
  whose private mean is the next iterate (no step size).

* :func:`clipped_gem` -- **Algorithm 1** (spec 002 §2.4, the DP-SGD-style baseline): per-sample
  gradients clipped in l2 to ``C``, their mean released by the zCDP Gaussian mechanism with
  l2 sensitivity ``2 C / n`` and budget ``eps~^2 / T`` per iteration (spec 002's recommended
  calibration: noise std ``(2C/n) sqrt(T / (2 eps~^2))``), then ``beta + eta * release``.

* :func:`ldp_gem` -- **local-DP gradient EM, ours** (not in the paper, whose local-DP result
  covers the 1-D mean only), in its own module :mod:`dpjax.algorithms.ldp_gem`; its public
  names are re-exported here.

Privacy of Algorithms 1-3 (replace-one; :func:`ldp_gem` is local, see there): every release
is a Gaussian mechanism on a statistic whose sensitivity holds for every input (``psi`` is
clamped to ``+-2 sqrt2 s / 3``; ``clip_l2`` sanitises), given the previous public iterate; the
``d T`` (resp. ``T``) releases compose adaptively to ``rho = eps~^2``-zCDP, which the
Bun-Steinke conversion turns back into exactly ``(epsilon, delta)``-DP
(``eps~^2 + 2 eps~ sqrt(log(1/delta)) = epsilon``). The ledger is composed from the events the
run drew. ``epsilon = inf`` gives ``eps~ = inf``: exactly zero noise, and (for the rule-based
``s``) ``s = inf``, i.e. ``psi`` is the identity -- the non-private gradient
EM of Balakrishnan et al. (2017) on the full data.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, registry
from dpjax.accounting import ZCDP, ApproxDP, Ledger, Release
from dpjax.algorithms._gem_core import (
    S_RULES,
    GEMInfo,
    SRule,
    _checked,
    _example_problem,
    _f32,
    _robust_fields,
    eps_tilde,
)
from dpjax.algorithms.ldp_gem import (
    LDP_S_RULES,
    LDPGEMHyperparams,
    LDPGEMState,
    LDPSRule,  # noqa: F401 (re-exported: importable from here as before)
    fit_ldp_gem,
    ldp_gem,
    ldp_smoothing_parameters,
    ldp_user_groups,
    local_gradient_scores,
)
from dpjax.base import ROW_BLOCK, Estimator, FitResult, Padded, fit, fold_rows
from dpjax.mechanisms import (
    PrivacyEvent,
    bounded_mean,
    bounded_mean_from_sum,
    clip_l2,
    gaussian_mechanism_zcdp,
)
from dpjax.mechanisms.calibration import gaussian_multiplier_analytic
from dpjax.models.protocol import EMModel, algorithm_view
from dpjax.robust_mean import psi_sums, robust_mean_from_sum, robust_mean_statistic

__all__ = [
    "CALIBRATIONS",
    "ClippedGEMHyperparams",
    "DPEMExactHyperparams",
    "DPGEMHyperparams",
    "GEMInfo",
    "GEMState",
    "LDPGEMHyperparams",
    "LDPGEMState",
    "LDP_S_RULES",
    "S_RULES",
    "clipped_gem",
    "dp_exact_em",
    "dp_gem",
    "eps_tilde",
    "fit_clipped_gem",
    "fit_dp_exact_em",
    "fit_dp_gem",
    "fit_ldp_gem",
    "ldp_gem",
    "ldp_smoothing_parameters",
    "ldp_user_groups",
    "local_gradient_scores",
    "smoothing_parameters",
]


#: how the whole run's zCDP budget ``rho`` is set from (epsilon, delta): ``"gaussian"`` (the
#: default) -- ``rho = mu^2 / 2`` with ``mu`` the analytic Gaussian mechanism's of (epsilon,
#: delta) (Balle & Wang 2018): the run's Gaussian releases compose to exactly that Gaussian, so
#: its ledger (PLD composition: the exact Gaussian curve) delivers the request; ``"paper"`` --
#: ``rho = eps~^2`` (spec 002 A2), which the Bun-Steinke conversion of the paper's ledger
#: inverts: the same request read off the exact curve is spent only in part
CALIBRATIONS = ("gaussian", "paper")


def total_rho(epsilon: Any, delta: Any, calibration: str) -> Any:
    """The whole run's zCDP budget under ``calibration`` (:data:`CALIBRATIONS`); inf at
    epsilon = inf."""
    if calibration == "paper":
        return jnp.square(eps_tilde(epsilon, delta))
    m = gaussian_multiplier_analytic(epsilon, delta)  # 1 / mu (0 at epsilon = inf)
    with np.errstate(divide="ignore"):
        return 0.5 / (m * m)


class DPGEMHyperparams(NamedTuple):
    """Swept hyperparameters of Algorithm 2 (arrays; a study may ``vmap`` over any of them)."""

    epsilon: jax.Array  # () budget of the whole run; inf: non-private (no noise, s = inf)
    delta: jax.Array  # ()
    eta: jax.Array  # () step size
    tau: jax.Array  # () public bound on the per-coordinate second moment of grad q_i
    zeta: jax.Array  # () failure probability (sets beta_s and, for some rules, s)
    s: jax.Array  # () truncation scale; read only with s_rule="explicit" (else NaN)

    POSITIVE = ("eta", "tau", "zeta")  # in (0, inf], checked with the budgets by dpjax.fit


class DPEMExactHyperparams(NamedTuple):
    """Swept hyperparameters of Algorithm 3 (no step size: the private M-step is the iterate)."""

    epsilon: jax.Array  # () budget of the whole run; inf: non-private (no noise, s = inf)
    delta: jax.Array  # ()
    tau: jax.Array  # () public bound on the per-coordinate second moment of the M-step terms
    zeta: jax.Array  # () failure probability
    s: jax.Array  # () truncation scale; read only with s_rule="explicit" (else NaN)

    POSITIVE = ("tau", "zeta")  # in (0, inf], checked with the budgets by dpjax.fit


class ClippedGEMHyperparams(NamedTuple):
    """Swept hyperparameters of Algorithm 1."""

    epsilon: jax.Array  # ()
    delta: jax.Array  # ()
    eta: jax.Array  # () step size
    clip: jax.Array  # () l2 clipping norm C (inf: none; only with epsilon = inf)

    POSITIVE = ("eta", "clip")  # in (0, inf], checked with the budgets by dpjax.fit


class GEMState(NamedTuple):
    beta: jax.Array  # (d,) current iterate


def smoothing_parameters(
    s_rule: SRule, n: int, d: int, hp: DPGEMHyperparams | DPEMExactHyperparams
) -> tuple[jax.Array, jax.Array]:
    """``(s, beta_s)`` of Algorithms 2 and 3 (spec 002 §2.5, §2.6 and A1) for ``n`` records in
    dimension ``d`` (``n`` is one batch's size under sample splitting, spec 002 A10)."""
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


def _num_releases(d: int, num_iterations: int, sample_split: bool) -> int:
    """How many coordinate releases one record enters: ``d`` with sample splitting (its one
    batch), ``d T`` on the full data."""
    return d if sample_split else d * num_iterations


def _make_robust_step(model: EMModel, num_iterations: int, s_rule: SRule, sample_split: bool,
                      exact_m: bool, calibration: str = "gaussian", row_block: int | None = None):
    """Algorithm 2 (``exact_m=False``: ``psi`` of the per-sample gradients, then a gradient step)
    or Algorithm 3 (``exact_m=True``: ``psi`` of the per-sample M-step terms ``f_i``, whose
    private mean *is* the next iterate). ``n`` (hence ``s``) is the size of the data the step
    sees: the whole data set, or one disjoint batch with ``sample_split``. The padded form
    (``sizes`` given) adds the scores up over blocks of ``row_block`` records up to the count
    (:func:`dpjax.base.fold_rows`)."""

    def terms(beta, data, mask=None):
        return (model.m_step_terms(beta, data, mask=mask) if exact_m
                else model.per_sample_gradients(beta, data, mask=mask))  # (n, d)

    def step(key, state: GEMState, data, hp, sizes=None):
        beta = state.beta
        d = beta.shape[0]
        if sizes is None:
            u = terms(beta, data)
            n = u.shape[0]
            steps = num_iterations
        else:  # padded (see _padded_robust): zero rows past the count, psi(0) = 0
            n = sizes.count.astype(beta.dtype)
            steps = sizes.num_steps.astype(beta.dtype)
        s, beta_s = smoothing_parameters(s_rule, n, d, hp)
        rho = total_rho(hp.epsilon, hp.delta, calibration) / _num_releases(
            d, steps, sample_split)
        if sizes is None:
            def coordinate(k, column):
                # the statistic carries its own sensitivity (4 sqrt2 / 3) s / n: never retyped
                return gaussian_mechanism_zcdp(k, robust_mean_statistic(column, s, beta_s), rho)

            g, ev = jax.vmap(coordinate)(jax.random.split(key, d), u.T)
        else:
            total = fold_rows(lambda rows, mask: psi_sums(terms(beta, rows, mask), s, beta_s),
                              data, sizes.mask, row_block)

            def coordinate_sum(k, t):  # t: one coordinate's sum of scores over the records
                return gaussian_mechanism_zcdp(k, robust_mean_from_sum(t, s, n), rho)

            g, ev = jax.vmap(coordinate_sum)(jax.random.split(key, d), total)
        events = tuple(jax.tree_util.tree_map(lambda a, j=j: a[j], ev) for j in range(d))
        g = g.astype(beta.dtype)
        new = g if exact_m else beta + jnp.asarray(hp.eta, beta.dtype) * g
        return GEMState(new), GEMInfo(ev.scale[0].astype(beta.dtype), s.astype(beta.dtype),
                                      events)

    return step


def _make_clipped_step(model: EMModel, num_iterations: int | None,
                       calibration: str = "gaussian", row_block: int | None = None):
    """Algorithm 1's step; ``num_iterations=None``: the padded form's (:func:`_padded_clipped`),
    with ``n`` and ``T`` from the runtime ``sizes`` (the padded rows' gradients are zero, and so
    are their clipped terms), the clipped gradients added up over blocks of ``row_block``
    records up to the count (:func:`dpjax.base.fold_rows`)."""
    def step(key, state: GEMState, data, hp: ClippedGEMHyperparams, sizes=None):
        beta = state.beta
        if sizes is None:
            g = model.per_sample_gradients(beta, data)  # (n, d)
            clip = jnp.asarray(hp.clip, g.dtype)
            # one clipped record moves the mean by at most 2C/n in l2
            stat = bounded_mean(clip_l2(g, clip), 2.0 * clip, "l2")
            steps = num_iterations
        else:
            clip = jnp.asarray(hp.clip, beta.dtype)
            total = fold_rows(lambda rows, mask: jnp.sum(clip_l2(
                model.per_sample_gradients(beta, rows, mask=mask), clip), axis=0),
                data, sizes.mask, row_block)
            stat = bounded_mean_from_sum(total, sizes.count.astype(beta.dtype), 2.0 * clip,
                                         "l2")
            steps = sizes.num_steps.astype(beta.dtype)
        rho = total_rho(hp.epsilon, hp.delta, calibration) / steps
        release, ev = gaussian_mechanism_zcdp(key, stat, rho)
        new = beta + jnp.asarray(hp.eta, beta.dtype) * release.astype(beta.dtype)
        return GEMState(new), GEMInfo(ev.scale.astype(beta.dtype), clip.astype(beta.dtype),
                                      (ev,))

    return step


def _init(beta0: Any) -> GEMState:
    return GEMState(jnp.asarray(beta0, dtype=jnp.result_type(float)))


def dp_gem(model: EMModel, num_iterations: int, s_rule: SRule = "sigma_consistent",
           sample_split: bool = False, calibration: str = "gaussian") -> Estimator:
    """Algorithm 2 (DP gradient EM, spec 002 §2.5).

    Args:
        model: a model with ``per_sample_gradients`` (hashable, bound statically).
        num_iterations: ``T`` (static; it enters the noise calibration).
        s_rule: how the truncation scale ``s`` is set (module docstring; static).
        sample_split: ``False`` (default, the paper): every iteration on the full data, ``d T``
            releases composed in zCDP. ``True`` (spec 002 A10, **not in the paper**): iteration
            ``t`` sees only the ``t``-th of ``T`` disjoint batches of ``n0 = floor(n / T)``
            records; ``s`` is computed from ``n0`` and each batch's ``d`` releases get the whole
            budget ``rho = eps~^2 / d`` (parallel composition across batches), i.e.
            ``sigma^2 = 16 s'^2 d / (9 n0^2 eps~^2)``.
        calibration: ``"gaussian"`` (default; the ledger delivers the request by PLD
            composition) or ``"paper"`` (``rho = eps~^2``, the paper's; reproductions pass
            it); :data:`CALIBRATIONS`. It sets only the noise: ``s`` keeps the paper's rule.
    """
    return _build_robust(model, num_iterations, s_rule, bool(sample_split), False, calibration)


def dp_exact_em(model: EMModel, num_iterations: int,
                s_rule: SRule = "sigma_consistent", calibration: str = "gaussian") -> Estimator:
    r"""Algorithm 3 (DP exact-M-step EM, spec 002 §2.6, the paper's App I), Gaussian mixture only.

    Iteration ``t``, coordinate ``j``:
    :math:`\beta^t_j = \frac1n\sum_i \psi_{s,\beta_s}(f_{ij}(\beta^{t-1})) + Z_j`,
    :math:`f_i(\beta) = (2 w_\beta(y_i) - 1) y_i` (the exact M-step is :math:`\frac1n\sum_i f_i`),
    with ``s``, ``beta_s`` and the noise of Algorithm 2 (``d T`` zCDP releases, ``rho =
    eps~^2 / (d T)`` each; the paper's Thm 9). No step size. Only the Gaussian mixture has an
    M-step that is a mean of independent per-record terms (spec 002 Assumption 2); the paper
    prints ``s = sqrt(n tau eps~) / (2 log(1/zeta))`` here (``s_rule="alg3_literal"``), the
    default is the sigma-consistent rule of A1, as for Algorithm 2. ``calibration`` as in
    :func:`dp_gem`.
    """
    from dpjax.models import GaussianMixture

    if not isinstance(model, GaussianMixture):
        raise ValueError("Algorithm 3 (DP exact-M-step EM) applies to the Gaussian mixture "
                         "only (spec 002 §2.6: the M-steps of the other models couple the "
                         f"records); got model {type(model).__name__}")
    return _build_robust(model, num_iterations, s_rule, False, True, calibration)


@functools.lru_cache(maxsize=512)
def _build_robust(model: EMModel, num_iterations: int, s_rule: SRule, sample_split: bool,
                  exact_m: bool, calibration: str = "gaussian") -> Estimator:
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    _validate.check_choice(calibration, "calibration", CALIBRATIONS)
    if s_rule not in S_RULES:
        raise ValueError(f"s_rule must be one of {S_RULES}; got {s_rule!r}")
    kind = "exact-m" if exact_m else ("robust-split" if sample_split else "robust")
    prefix = {"exact-m": "dp-em-exact", "robust-split": "dp-gem-split", "robust": "dp-gem"}
    name = f"{prefix[kind]}/{model.name}"
    ledger_fn = functools.partial(_ledger, name, kind, model, num_iterations, s_rule,
                                  calibration)
    step = _make_robust_step(model, num_iterations, s_rule, sample_split, exact_m, calibration)
    batching = "disjoint" if sample_split else "full"
    return Estimator(name, _init, step, num_iterations, batching, ledger_fn,
                     padded=_padded_robust(algorithm_view(model), s_rule, sample_split,
                                           calibration, exact_m))


@functools.lru_cache(maxsize=512)
def _padded_robust(model: EMModel, s_rule: SRule, sample_split: bool,
                   calibration: str = "gaussian", exact_m: bool = False,
                   row_block: int = ROW_BLOCK) -> Padded | None:
    """Algorithms 2 and 3 with ``n`` and ``T`` as runtime values (one program for every ``n``
    and ``T``): they enter the step only through the count of its data (``s``, the mean) and
    the number of releases (``rho``); the padded rows' per-sample terms are zero, and
    ``psi(0) = 0``. The scores are added up over blocks of ``row_block`` records up to the
    count, so a setting's work follows its own ``n`` in a program padded to a larger one."""
    if not getattr(model, "supports_mask", False):
        return None
    batching = "disjoint" if sample_split else "full"
    prefix = "dp-em-exact" if exact_m else "dp-gem"
    return Padded(f"{prefix}/{model.name}[{s_rule},{batching},{calibration}]", _init,
                  _make_robust_step(model, None, s_rule, sample_split, exact_m, calibration,
                                    row_block),
                  batching, row_block=row_block)


@functools.lru_cache(maxsize=512)
def _padded_clipped(model: EMModel, calibration: str, row_block: int = ROW_BLOCK
                    ) -> Padded | None:
    """Algorithm 1 with ``n`` and ``T`` as runtime values: they enter the step only through
    the count of the clipped mean and the per-step budget ``rho / T``; the clipped gradients
    are added up over blocks of ``row_block`` records up to the count."""
    if not getattr(model, "supports_mask", False):
        return None
    return Padded(f"clipped-gem/{model.name}[{calibration}]", _init,
                  _make_clipped_step(model, None, calibration, row_block), "full",
                  row_block=row_block)


@functools.lru_cache(maxsize=512)
def clipped_gem(model: EMModel, num_iterations: int, calibration: str = "gaussian"
                ) -> Estimator:
    """Algorithm 1 (clipped DP gradient EM, spec 002 §2.4), full data every iteration;
    ``calibration`` as in :func:`dp_gem`."""
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    _validate.check_choice(calibration, "calibration", CALIBRATIONS)
    name = f"clipped-gem/{model.name}"
    ledger_fn = functools.partial(_ledger, name, "clipped", model, num_iterations, None,
                                  calibration)
    return Estimator(name, _init, _make_clipped_step(model, num_iterations, calibration),
                     num_iterations, "full", ledger_fn,
                     padded=_padded_clipped(algorithm_view(model), calibration))


# --------------------------------------------------------------------------------------------
# Ledger
# --------------------------------------------------------------------------------------------


def _merge_events(events: tuple[PrivacyEvent, ...]) -> PrivacyEvent:
    """One stacked event (last axis: the coordinates) from per-coordinate events of one kind."""
    return jax.tree_util.tree_map(
        lambda *xs: np.stack([np.asarray(x) for x in xs], axis=-1), *events)


def _batch_rows(merged: PrivacyEvent) -> list[PrivacyEvent]:
    """The per-iteration events (axes ``(T, d)`` -> ``T`` events of ``d`` releases)."""
    if np.ndim(merged.scale) < 2:
        return [merged]
    return [jax.tree_util.tree_map(lambda a, t=t: np.asarray(a)[t] if np.ndim(a) else a, merged)
            for t in range(np.shape(merged.scale)[0])]


_STATISTICS = {
    "robust": "coordinate j of (1/n) sum_i psi_{s,beta_s}(grad_j q_i(beta^t; beta^t))",
    "robust-split": "coordinate j of (1/n0) sum_{i in batch t} psi_{s,beta_s}(grad_j q_i"
                    "(beta^t; beta^t))",
    "exact-m": "coordinate j of (1/n) sum_i psi_{s,beta_s}((2 w_beta^t(y_i) - 1) y_ij)",
}


def _ledger(
    name: str,
    kind: str,
    model: EMModel,
    num_iterations: int,
    s_rule: str | None,
    calibration: str,
    n: int,
    hparams: Any,
    events: tuple[PrivacyEvent, ...],
) -> Ledger:
    """The privacy ledger of one run on ``n`` records, composed in zCDP from the run's events
    (``d T`` coordinate releases for Algorithms 2 and 3, ``T`` vector releases for Algorithm 1;
    with sample splitting the ``d`` releases of the worst batch, the batches being disjoint).
    ``calibration="paper"``: composed in zCDP and converted to (epsilon, delta) by
    Bun-Steinke (which inverts ``rho = eps~^2`` exactly); ``"gaussian"`` (default): composed
    by PLD -- Gaussian releases alone, so the exact Gaussian curve of ``mu = sqrt(2 rho)``."""
    eps = float(np.asarray(hparams.epsilon))
    delta = float(np.asarray(hparams.delta))
    data = f"all {n} records every iteration"
    notes = [f"n = {n}, T = {num_iterations}"]
    if hasattr(hparams, "eta") and kind != "exact-m":
        notes[0] += f", eta = {float(np.asarray(hparams.eta)):g}"
    if kind == "clipped":
        merged = events[0]
        statistic = ("(1/n) sum_i clip_l2(grad q_i(beta^t; beta^t), C); l2 sensitivity 2C/n, "
                     f"C = {float(np.asarray(hparams.clip)):g}")
        notes.append("each iteration rho = eps~^2/T")
    else:
        d = len(events)
        merged = _merge_events(events)
        statistic = _STATISTICS[kind] + "; sensitivity (4 sqrt2/3) s/n"
        per = (f"{d} coordinate releases per batch, each rho = eps~^2/d"
               if kind == "robust-split" else
               f"{d * num_iterations} coordinate releases, each rho = eps~^2/(d T)")
        notes.append(f"d = {d}: {per}; s_rule = {s_rule!r}, tau = "
                     f"{float(np.asarray(hparams.tau)):g}, zeta = "
                     f"{float(np.asarray(hparams.zeta)):g}")
        if kind == "robust-split":
            data = (f"one of {num_iterations} disjoint batches of {n // num_iterations} "
                    "records per iteration")
    release = Release.from_event(merged, statistic, data)
    if release.sensitivity_ratio != 1.0:
        notes.append(f"true/declared sensitivity = {release.sensitivity_ratio:g}")
    notes.extend(model.gradient_notes)

    if calibration != "paper":  # the notes name the paper's eps~^2 split; say what is used
        notes = [x.replace("eps~^2", "mu^2/2") for x in notes]
        notes.append("calibration 'gaussian': rho = mu^2/2 for the whole run, mu the analytic "
                     "Gaussian mechanism's of (epsilon, delta) (the paper's rho = eps~^2 is "
                     "calibration='paper')")

    def build(releases, extra=()):
        if calibration != "paper":
            return Ledger.build(name, releases, "pld", variant="corrected",
                                requested=ApproxDP(eps, delta), delta=delta,
                                notes=[*notes, *extra])
        return Ledger.build(name, releases, "zcdp", variant="corrected",
                            requested=ApproxDP(eps, delta), delta=delta,
                            conversion="bun-steinke", notes=[*notes, *extra])

    if kind != "robust-split":
        return build([release])
    # Sample splitting: a record enters only its own batch's d releases (composed in zCDP);
    # across the disjoint batches the composition is parallel -- the worst batch's guarantee.
    per_batch = [build([Release.from_event(row, statistic, data)])
                 for row in _batch_rows(merged)]
    worst = max(per_batch, key=lambda led: led.guarantee.rho if isinstance(led.guarantee, ZCDP)
                else led.approx_dp.epsilon)
    within = "zCDP" if calibration == "paper" else "PLD"
    return dataclasses.replace(worst, releases=(release,), composition="parallel", notes=(
        *worst.notes, f"sample splitting (spec 002 A10, not in the paper): {within} composition "
        "of each batch's d releases, parallel composition across the disjoint batches"))


# --------------------------------------------------------------------------------------------
# The convenience API: three thin wrappers over one validating implementation
# --------------------------------------------------------------------------------------------


def _fit(kind: str, key, data, model, epsilon, delta, num_iterations, beta0, eta, on_invalid,
         secure: bool, options: dict[str, Any], accountant: Any = None) -> FitResult:
    """Validate the shared arguments, build the estimator of ``kind`` and its hyperparameters,
    and fit. ``kind``: ``"gradient"`` (Alg 2), ``"exact_m"`` (Alg 3) or ``"clipped"`` (Alg 1)."""
    key, data, n, num_iterations, eps, dl, beta0 = _checked(
        key, data, model, num_iterations, on_invalid, epsilon, delta, eta, beta0)
    cal = "gaussian" if options.get("calibration") is None else options["calibration"]
    _validate.check_choice(cal, "calibration", CALIBRATIONS)
    if kind == "clipped":
        c = _validate.check_truncation(options["clip"], eps, "clip")
        if c.ndim:
            raise ValueError("clip must be a scalar")
        if math.isfinite(eps):  # public values only: a refusal never depends on the data
            _validate.check_noise_inputs("clip", float(c), 2.0 * float(c) / n, n * float(c))
        hp: Any = ClippedGEMHyperparams(*_f32(eps, dl, eta, c))
        return fit(clipped_gem(model, num_iterations, cal), key, data, beta0, hp, n=n,
                   secure=secure,
                   accountant=accountant)
    fields = _robust_fields(eps, options["tau"], options["zeta"], options["s_rule"],
                            options["s"], n)
    if kind == "exact_m":
        est = dp_exact_em(model, num_iterations, options["s_rule"], cal)
        return fit(est, key, data, beta0, DPEMExactHyperparams(*_f32(eps, dl), *fields), n=n,
                   secure=secure, accountant=accountant)
    if options["sample_split"] and n < num_iterations:
        raise ValueError(f"sample_split=True needs at least one record per iteration: n = {n} "
                         f"< num_iterations = {num_iterations}")
    est = dp_gem(model, num_iterations, options["s_rule"], options["sample_split"], cal)
    return fit(est, key, data, beta0, DPGEMHyperparams(*_f32(eps, dl, eta), *fields), n=n,
               secure=secure, accountant=accountant)


@_validate.host_only
def fit_dp_gem(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None,
    num_iterations: int, beta0: Any, tau: Any, eta: Any = 1.0, zeta: Any = 0.05,
    s_rule: SRule = "sigma_consistent", s: Any = None, sample_split: bool = False,
    on_invalid: str = "raise", secure: bool = False, accountant: Any = None,
    calibration: str | None = None,
) -> FitResult:
    """Fit Algorithm 2 (DP gradient EM, spec 002 §2.5) to one data set.

    Calibration (``calibration``, :data:`CALIBRATIONS`): by default (``"gaussian"``) the
    Gaussian noise of the ``d T`` releases composes to the analytic Gaussian mechanism of the
    requested ``(epsilon, delta)``, and the ledger (PLD composition: the exact Gaussian curve)
    delivers the request; ``"paper"`` is the paper's ``rho = eps~^2``, delivered by its own
    ledger (zCDP, Bun-Steinke) and spent in part by the exact curve. So do the three fits
    below.

    Args:
        key: PRNG key (or int seed) for the noise.
        data: the model's data (:class:`~dpjax.models.gmm.GMMData` or an ``(n, d)`` array,
            :class:`~dpjax.models.mor.MoRData`, :class:`~dpjax.models.rmc.RMCData`).
        model: e.g. ``GaussianMixture(0.5)``; needs ``per_sample_gradients``.
        epsilon: in (0, inf]; inf gives the non-private gradient EM (no noise, and ``s = inf``
            unless ``s_rule="explicit"``).
        delta: in (0, 1); default ``1/(2n)`` (the one delta policy of every ``fit_*``; the
            paper's experiments use ``1/n``, allowed here; a warning above that).
        num_iterations: ``T >= 1`` (the paper's experiments: 22).
        beta0: data-independent initial value, shape ``(d,)``.
        tau: public bound on the per-coordinate second moment of the per-sample gradients (> 0).
        eta: step size > 0 (theory: 1).
        zeta: failure probability in (0, 1) (default 0.05).
        s_rule: ``"sigma_consistent"`` (default), ``"alg2_literal"``, ``"alg3_literal"``,
            ``"thm2"`` or ``"explicit"`` (then ``s`` is required).
        s: the truncation scale for ``s_rule="explicit"``, in (0, inf].
        sample_split: the variant of spec 002 A10, not in the paper (see :func:`dp_gem`);
            needs ``n >= num_iterations``.
        on_invalid: as in :func:`dpjax.algorithms.dp_em.fit_ld_dp_em`.
        secure: the floating-point-safe noise path for a real release (see :func:`dpjax.fit`).
        accountant: a :class:`dpjax.Accountant` this fit spends from (see :func:`dpjax.fit`):
            refused before anything runs if it would exceed the total.

    Returns:
        :class:`~dpjax.base.FitResult`; its ledger delivers exactly ``(epsilon, delta)``.
    """
    return _fit("gradient", key, data, model, epsilon, delta, num_iterations, beta0, eta,
                on_invalid, secure, dict(tau=tau, zeta=zeta, s_rule=s_rule, s=s,
                                         sample_split=sample_split, calibration=calibration),
                accountant)


@_validate.host_only
def fit_dp_exact_em(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None,
    num_iterations: int, beta0: Any, tau: Any, zeta: Any = 0.05,
    s_rule: SRule = "sigma_consistent", s: Any = None, on_invalid: str = "raise",
    secure: bool = False, accountant: Any = None, calibration: str | None = None,
) -> FitResult:
    """Fit Algorithm 3 (DP exact-M-step EM, spec 002 §2.6; Gaussian mixture only).

    Arguments as :func:`fit_dp_gem` (no step size, no sample splitting); ``tau`` bounds the
    per-coordinate second moment of the M-step terms ``(2 w - 1) y_ij`` (about
    ``beta*_j^2 + sigma^2``). ``epsilon = inf`` (with a rule-based ``s``) is the exact EM.
    Its calibration delivers the requested ``(epsilon, delta)``, as :func:`fit_dp_gem`'s.
    """
    return _fit("exact_m", key, data, model, epsilon, delta, num_iterations, beta0, 1.0,
                on_invalid, secure, dict(tau=tau, zeta=zeta, s_rule=s_rule, s=s,
                                         calibration=calibration), accountant)


@_validate.host_only
def fit_clipped_gem(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None,
    num_iterations: int, beta0: Any, eta: Any = 1.0, clip: Any = 1.0,
    on_invalid: str = "raise", secure: bool = False, accountant: Any = None,
    calibration: str | None = None,
) -> FitResult:
    """Fit Algorithm 1 (clipped DP gradient EM, spec 002 §2.4) to one data set.

    Arguments as :func:`fit_dp_gem`, with ``clip`` the l2 clipping norm ``C`` in (0, inf]
    (default 1, the paper's experiments; inf only with ``epsilon = inf``) in place of
    ``tau``, ``zeta``, ``s_rule`` and ``s``. Its calibration delivers the requested
    ``(epsilon, delta)``, as :func:`fit_dp_gem`'s.
    """
    return _fit("clipped", key, data, model, epsilon, delta, num_iterations, beta0, eta,
                on_invalid, secure, dict(clip=clip, calibration=calibration), accountant)


# --------------------------------------------------------------------------------------------
# Registry: every estimator with a small example problem (the conformance suite runs over it)
# --------------------------------------------------------------------------------------------


def _example(model: EMModel, d: int, seed: int, kind: str, n: int = 400) -> registry.Example:
    data, beta0 = _example_problem(model, d, seed, n)

    def hp(eps):
        f = functools.partial(jnp.asarray, dtype=jnp.float32)
        if kind == "robust":
            return DPGEMHyperparams(f(eps), f(1.0 / n), f(1.0), f(2.0), f(0.05), f(jnp.nan))
        if kind == "exact-m":
            return DPEMExactHyperparams(f(eps), f(1.0 / n), f(2.0), f(0.05), f(jnp.nan))
        return ClippedGEMHyperparams(f(eps), f(1.0 / n), f(1.0), f(1.0))

    return registry.Example(data, beta0, hp)


def _register() -> None:
    from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates

    def req(eps):
        return ("epsilon", eps)

    def entry(name, build, example):
        registry.register(registry.Entry(name, "dp-gem", build, example, requested=req))

    models = [(GaussianMixture(0.5), 4, 0), (MixtureOfRegressions(0.5), 3, 1),
              (RegressionMissingCovariates(1.0, 0.2), 3, 2)]
    for model, d, seed in models:
        robust = functools.partial(_example, model, d, seed, "robust")
        entry(f"dp-gem/{model.name}", functools.partial(dp_gem, model, 4), robust)
        entry(f"clipped-gem/{model.name}", functools.partial(clipped_gem, model, 4),
              functools.partial(_example, model, d, seed, "clipped"))
        entry(f"dp-gem-split/{model.name}",
              functools.partial(dp_gem, model, 4, "sigma_consistent", True), robust)
    exact_k = RegressionMissingCovariates(1.0, 0.2, second_moment="exact_conditional")
    entry(f"dp-gem/{exact_k.name}", functools.partial(dp_gem, exact_k, 4),
          functools.partial(_example, exact_k, 3, 2, "robust"))
    gmm = models[0][0]
    entry(f"dp-em-exact/{gmm.name}", functools.partial(dp_exact_em, gmm, 4),
          functools.partial(_example, gmm, 4, 0, "exact-m"))


_register()
