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
  covers the 1-D mean only): the users are split into ``T`` disjoint groups, each user of group
  ``t`` releases its ``d``-vector of ``psi``-scored gradients at the public iterate once, with
  its own Gaussian noise calibrated to the vector's l2 range for ``(epsilon, delta)``-LDP, and
  the server steps along the group's average. Its ledger states each user's local guarantee.

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
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, registry
from dpjax.accounting import ApproxDP, Ledger, Release
from dpjax.algorithms._boundary import check_model, checked_inputs
from dpjax.base import Estimator, FitResult, fit
from dpjax.mechanisms import (
    BoundedStatistic,
    PrivacyEvent,
    bounded_mean,
    clip_l2,
    gaussian_mechanism_zcdp,
    local_mechanism,
)
from dpjax.models.protocol import EMModel
from dpjax.robust_mean import PHI_MAX, local_scores, robust_mean_statistic

__all__ = [
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


class DPEMExactHyperparams(NamedTuple):
    """Swept hyperparameters of Algorithm 3 (no step size: the private M-step is the iterate)."""

    epsilon: jax.Array  # () budget of the whole run; inf: non-private (no noise, s = inf)
    delta: jax.Array  # ()
    tau: jax.Array  # () public bound on the per-coordinate second moment of the M-step terms
    zeta: jax.Array  # () failure probability
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
                      exact_m: bool):
    """Algorithm 2 (``exact_m=False``: ``psi`` of the per-sample gradients, then a gradient step)
    or Algorithm 3 (``exact_m=True``: ``psi`` of the per-sample M-step terms ``f_i``, whose
    private mean *is* the next iterate). ``n`` (hence ``s``) is the size of the data the step
    sees: the whole data set, or one disjoint batch with ``sample_split``."""

    def step(key, state: GEMState, data, hp):
        beta = state.beta
        u = (model.m_step_terms(beta, data) if exact_m
             else model.per_sample_gradients(beta, data))  # (n, d)
        n, d = u.shape
        s, beta_s = smoothing_parameters(s_rule, n, d, hp)
        rho = jnp.square(eps_tilde(hp.epsilon, hp.delta)) / _num_releases(
            d, num_iterations, sample_split)

        def coordinate(k, column):
            # the statistic carries its own sensitivity (4 sqrt2 / 3) s / n: never retyped
            return gaussian_mechanism_zcdp(k, robust_mean_statistic(column, s, beta_s), rho)

        g, ev = jax.vmap(coordinate)(jax.random.split(key, d), u.T)
        events = tuple(jax.tree_util.tree_map(lambda a, j=j: a[j], ev) for j in range(d))
        g = g.astype(beta.dtype)
        new = g if exact_m else beta + jnp.asarray(hp.eta, beta.dtype) * g
        return GEMState(new), GEMInfo(ev.scale[0].astype(beta.dtype), s.astype(beta.dtype),
                                      events)

    return step


def _make_clipped_step(model: EMModel, num_iterations: int):
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


def dp_gem(model: EMModel, num_iterations: int, s_rule: SRule = "sigma_consistent",
           sample_split: bool = False) -> Estimator:
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
    """
    return _build_robust(model, num_iterations, s_rule, bool(sample_split), False)


def dp_exact_em(model: EMModel, num_iterations: int,
                s_rule: SRule = "sigma_consistent") -> Estimator:
    r"""Algorithm 3 (DP exact-M-step EM, spec 002 §2.6, the paper's App I), Gaussian mixture only.

    Iteration ``t``, coordinate ``j``:
    :math:`\beta^t_j = \frac1n\sum_i \psi_{s,\beta_s}(f_{ij}(\beta^{t-1})) + Z_j`,
    :math:`f_i(\beta) = (2 w_\beta(y_i) - 1) y_i` (the exact M-step is :math:`\frac1n\sum_i f_i`),
    with ``s``, ``beta_s`` and the noise of Algorithm 2 (``d T`` zCDP releases, ``rho =
    eps~^2 / (d T)`` each; the paper's Thm 9). No step size. Only the Gaussian mixture has an
    M-step that is a mean of independent per-record terms (spec 002 Assumption 2); the paper
    prints ``s = sqrt(n tau eps~) / (2 log(1/zeta))`` here (``s_rule="alg3_literal"``), the
    default is the sigma-consistent rule of A1, as for Algorithm 2.
    """
    from dpjax.models import GaussianMixture

    if not isinstance(model, GaussianMixture):
        raise ValueError("Algorithm 3 (DP exact-M-step EM) applies to the Gaussian mixture "
                         "only (spec 002 §2.6: the M-steps of the other models couple the "
                         f"records); got model {type(model).__name__}")
    return _build_robust(model, num_iterations, s_rule, False, True)


@functools.lru_cache(maxsize=512)
def _build_robust(model: EMModel, num_iterations: int, s_rule: SRule, sample_split: bool,
                  exact_m: bool) -> Estimator:
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    if s_rule not in S_RULES:
        raise ValueError(f"s_rule must be one of {S_RULES}; got {s_rule!r}")
    kind = "exact-m" if exact_m else ("robust-split" if sample_split else "robust")
    prefix = {"exact-m": "dp-em-exact", "robust-split": "dp-gem-split", "robust": "dp-gem"}
    name = f"{prefix[kind]}/{model.name}"
    ledger_fn = functools.partial(_ledger, name, kind, model, num_iterations, s_rule)
    step = _make_robust_step(model, num_iterations, s_rule, sample_split, exact_m)
    return Estimator(name, _init, step, num_iterations,
                     "disjoint" if sample_split else "full", ledger_fn)


@functools.lru_cache(maxsize=512)
def clipped_gem(model: EMModel, num_iterations: int) -> Estimator:
    """Algorithm 1 (clipped DP gradient EM, spec 002 §2.4), full data every iteration."""
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    name = f"clipped-gem/{model.name}"
    ledger_fn = functools.partial(_ledger, name, "clipped", model, num_iterations, None)
    return Estimator(name, _init, _make_clipped_step(model, num_iterations), num_iterations,
                     "full", ledger_fn)


# --------------------------------------------------------------------------------------------
# Local-DP gradient EM (ours: beyond the paper, whose local-DP result covers the 1-D mean only)
# --------------------------------------------------------------------------------------------

LDPSRule = Literal["ldp", "explicit"]
LDP_S_RULES: tuple[str, ...] = ("ldp", "explicit")


class LDPGEMHyperparams(NamedTuple):
    """Swept hyperparameters of the local-DP gradient EM (:func:`ldp_gem`)."""

    epsilon: jax.Array  # () each user's budget (one release per user); inf: non-private
    delta: jax.Array  # () each user's delta
    eta: jax.Array  # () step size
    tau: jax.Array  # () public bound on the per-coordinate second moment of grad q_i
    zeta: jax.Array  # () failure probability (sets beta_s)
    s: jax.Array  # () truncation scale; read only with s_rule="explicit" (else NaN)


class LDPGEMState(NamedTuple):
    beta: jax.Array  # (d,) current iterate (public: built from earlier groups' releases)
    t: jax.Array  # () int32, the user group of the next step


def ldp_user_groups(n: int, num_iterations: int) -> tuple[int, ...]:
    """The public group sizes of :func:`ldp_gem`: ``T`` consecutive index blocks of
    ``floor(n/T)`` users, the remainder ``n mod T`` joining the last block (no user dropped)."""
    n = _validate.check_int_in_range(n, "n", 1)
    num_iterations = _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    if n < num_iterations:
        raise ValueError(f"n = {n} users cannot form num_iterations = {num_iterations} "
                         "non-empty groups")
    m0 = n // num_iterations
    return (m0,) * (num_iterations - 1) + (m0 + n % num_iterations,)


def ldp_smoothing_parameters(s_rule: LDPSRule, m: int, d: int, hp: LDPGEMHyperparams
                             ) -> tuple[jax.Array, jax.Array]:
    r"""``(s, beta_s)`` of the local-DP gradient EM for groups of ``m`` users in dimension ``d``.

    ``beta_s = sqrt(log(d / zeta))`` (as Algorithm 2) and, for ``s_rule="ldp"`` (default),
    ``s = sqrt(sqrt(m) tau eps~) / (2 beta_s)``: Algorithm 2's sigma-consistent rule with
    ``n`` replaced by ``sqrt(m)``, the substitution spec 002 A5 makes for the local 1-D mean
    (the server averages ``m`` independent user noises, so the noise in the average falls like
    ``s / (eps~ sqrt(m))`` instead of ``s / (eps~ n)``; balancing it against the truncation
    bias ``tau / s`` gives ``s ~ (m tau^2 eps~^2)^(1/4)``). Ours, not the paper's.
    ``s_rule="explicit"`` reads ``hp.s``. ``epsilon = inf`` gives ``s = inf`` with ``"ldp"``.
    """
    et = eps_tilde(hp.epsilon, hp.delta)
    dtype = et.dtype
    beta_s = jnp.sqrt(jnp.log(d / jnp.asarray(hp.zeta, dtype)))
    if s_rule == "ldp":
        s = jnp.sqrt(math.sqrt(m) * jnp.asarray(hp.tau, dtype) * et) / (2.0 * beta_s)
    elif s_rule == "explicit":
        s = jnp.asarray(hp.s, dtype)
    else:
        raise ValueError(f"s_rule must be one of {LDP_S_RULES}; got {s_rule!r}")
    return s, beta_s


def local_gradient_scores(model: EMModel, beta: jax.Array, data: Any, s: Any, beta_s: Any
                          ) -> BoundedStatistic:
    r"""Every user's coordinate-wise robust gradient, ready for a local mechanism.

    Row ``i`` is the ``d``-vector :math:`(\psi_{s,\beta_s}(\nabla_j q_i(\beta;\beta)))_j` of
    user ``i`` (:func:`dpjax.robust_mean.local_scores` of the per-sample gradients), with
    relation ``"local"`` and the l2 range of one user's vector,
    ``sqrt(d) (4 sqrt2 / 3) s`` (each coordinate lies in ``[-2 sqrt2 s/3, 2 sqrt2 s/3]`` whatever
    the record: ``psi`` is clamped and maps NaN to 0).
    """
    return local_scores(model.per_sample_gradients(beta, data), s, beta_s)


def _user_group(data: Any, t: jax.Array, num_iterations: int, n: int):
    """Group ``t`` of :func:`ldp_user_groups` as ``m_max = floor(n/T) + n mod T`` rows from
    ``t floor(n/T)``, with its validity mask and size (rows past the group, only for
    ``t < T - 1``, belong to the next group and are masked out)."""
    m0 = n // num_iterations
    m_max = m0 + n % num_iterations
    start = t * m0
    batch = jax.tree_util.tree_map(
        lambda x: jax.lax.dynamic_slice_in_dim(x, start, m_max), data)
    size = jnp.where(t == num_iterations - 1, m_max, m0)
    return batch, jnp.arange(m_max) < size, size


def _make_ldp_step(model: EMModel, num_iterations: int, s_rule: LDPSRule, batching: str):
    def step(key, state: LDPGEMState, data, hp: LDPGEMHyperparams):
        beta = state.beta
        n, d = model.num_records(data), beta.shape[0]
        if batching == "disjoint":  # data is this round's group already
            batch, valid, size, m = data, jnp.ones((n,), bool), jnp.asarray(n), n
        else:
            if n < num_iterations:
                raise ValueError(f"n = {n} users cannot form num_iterations = "
                                 f"{num_iterations} non-empty groups")
            batch, valid, size = _user_group(data, state.t, num_iterations, n)
            m = n // num_iterations
        s, beta_s = ldp_smoothing_parameters(s_rule, m, d, hp)
        # each user releases once: the whole per-user budget rho = eps~^2 on this one report
        rho = jnp.square(eps_tilde(hp.epsilon, hp.delta))
        reports, ev = local_mechanism(key, local_gradient_scores(model, beta, batch, s, beta_s),
                                      gaussian_mechanism_zcdp, rho)
        reports = jnp.where(valid[:, None], reports.astype(beta.dtype), 0.0)
        g = jnp.sum(reports, axis=0) / size.astype(beta.dtype)  # a public group size
        new = beta + jnp.asarray(hp.eta, beta.dtype) * g
        return (LDPGEMState(new, state.t + 1),
                GEMInfo(ev.scale.astype(beta.dtype), s.astype(beta.dtype), (ev,)))

    return step


def _ldp_init(beta0: Any) -> LDPGEMState:
    return LDPGEMState(jnp.asarray(beta0, dtype=jnp.result_type(float)),
                       jnp.zeros((), jnp.int32))


@functools.lru_cache(maxsize=512)
def ldp_gem(model: EMModel, num_iterations: int, s_rule: LDPSRule = "ldp",
            batching: Literal["full", "disjoint"] = "full") -> Estimator:
    r"""Local-DP gradient EM (**ours**: beyond the paper, whose local-DP result, App F, covers
    the 1-D mean only; issue 13 item 7).

    The ``n`` users are split into ``T`` disjoint groups of consecutive indices
    (:func:`ldp_user_groups`: ``floor(n/T)`` users each, the remainder ``n mod T`` joining the
    last group, so no user is dropped). In round ``t`` the server publishes ``beta^{t-1}``;
    every user ``i`` of group ``t`` computes the coordinate-wise score vector
    ``psi_{s,beta_s}(grad q_i(beta^{t-1}; beta^{t-1}))`` (:func:`local_gradient_scores`) and
    releases it once, with its own Gaussian noise:

    .. math::

        r_i = \big(\psi_{s,\beta_s}(\nabla_j q_i(\beta^{t-1};\beta^{t-1}))\big)_{j \le d}
              + N(0, \sigma_{loc}^2 I_d), \qquad
        \sigma_{loc} = \frac{\sqrt d\,(4\sqrt2/3)\, s}{\sqrt{2\rho}}, \quad
        \rho = \tilde\varepsilon^2,

    and the server steps :math:`\beta^t = \beta^{t-1} + \eta\, \frac{1}{|G_t|}\sum_{i\in G_t}
    r_i` (``|G_t|`` public). ``s`` from :func:`ldp_smoothing_parameters` with ``m =
    floor(n/T)`` (the same ``s`` in every round), ``beta_s = sqrt(log(d/zeta))``.

    Privacy (local relation: one user's record replaced by any other): each report is a
    Gaussian mechanism on a vector whose l2 range is ``sqrt(d) (4 sqrt2/3) s`` for every record
    (``psi`` is clamped), calibrated for ``rho = eps~^2``-zCDP, which the Bun-Steinke conversion
    turns into exactly ``(epsilon, delta)``; each user releases once and the iterate it sees is
    post-processing of the other groups' reports, so every user's guarantee is
    ``(epsilon, delta)``-LDP (sequentially interactive), with no composition across users or
    rounds. The zCDP calibration is valid for every ``epsilon > 0`` (unlike the classic one of
    the paper's Thm 8, proven for ``epsilon <= 1``), and matches Algorithm 2's accounting, so the
    two compare at the same ``(epsilon, delta)``. ``epsilon = inf``: no noise and (with
    ``s_rule="ldp"``) ``s = inf``, i.e. non-private minibatch gradient EM on the same groups.

    Args:
        model: a model with ``per_sample_gradients`` (hashable, bound statically).
        num_iterations: ``T``, the number of rounds = user groups (static).
        s_rule: ``"ldp"`` (default) or ``"explicit"`` (``hparams.s``).
        batching: ``"full"`` (default): the data set of all ``n`` users; round ``t`` slices its
            group inside the step (the remainder joins the last group: no user dropped).
            ``"disjoint"``: step ``t`` receives its group as the batch
            (:func:`dpjax.base.split_batches`, which keeps ``T floor(n/T)`` users, or a streamed
            ``batch(t)``, as in the sweep engine); equal groups, ``s`` from the batch size.
    """
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    if s_rule not in LDP_S_RULES:
        raise ValueError(f"s_rule must be one of {LDP_S_RULES}; got {s_rule!r}")
    if batching not in ("full", "disjoint"):
        raise ValueError(f"batching must be 'full' or 'disjoint'; got {batching!r}")
    name = f"ldp-gem/{model.name}"
    ledger_fn = functools.partial(_ldp_ledger, name, model, num_iterations, s_rule)
    return Estimator(name, _ldp_init, _make_ldp_step(model, num_iterations, s_rule, batching),
                     num_iterations, batching, ledger_fn)


def _ldp_ledger(name: str, model: EMModel, num_iterations: int, s_rule: str, n: int, hparams: Any,
                events: tuple[PrivacyEvent, ...]) -> Ledger:
    """Each user's guarantee: the one report of that user (the ``T`` stacked events are the
    ``T`` groups' reports, one event per round standing for every user of its group), composed
    in parallel (disjoint users) and converted from zCDP by Bun-Steinke."""
    (ev,) = events
    eps = float(np.asarray(hparams.epsilon))
    delta = float(np.asarray(hparams.delta))
    sizes = ldp_user_groups(n, num_iterations)
    statistic = ("one user's d-vector (psi_{s,beta_s}(grad_j q_i(beta^t; beta^t)))_j; l2 range "
                 "sqrt(d) (4 sqrt2/3) s")
    data = (f"each user once, in its group's round ({num_iterations} disjoint groups of "
            f"{sizes[0]} users, the last {sizes[-1]})")
    notes = [
        "local DP, ours (not in the paper): each user releases one noisy robust gradient, in "
        "its own round; the iterate it is computed at is public (post-processing of earlier "
        "rounds), so nothing composes across users or rounds",
        f"n = {n}, T = {num_iterations}, eta = {float(np.asarray(hparams.eta)):g}; "
        f"s_rule = {s_rule!r}, tau = {float(np.asarray(hparams.tau)):g}, zeta = "
        f"{float(np.asarray(hparams.zeta)):g}",
    ]
    notes.extend(model.gradient_notes)
    return Ledger.build(name, [Release.from_event(ev, statistic, data)], "parallel",
                        variant="corrected", relation="local",
                        requested=ApproxDP(eps, delta), delta=delta,
                        conversion="bun-steinke", notes=notes)


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
    n: int,
    hparams: Any,
    events: tuple[PrivacyEvent, ...],
) -> Ledger:
    """The privacy ledger of one run on ``n`` records, composed in zCDP from the run's events
    (``d T`` coordinate releases for Algorithms 2 and 3, ``T`` vector releases for Algorithm 1;
    with sample splitting the ``d`` releases of the worst batch, the batches being disjoint)
    and converted to (epsilon, delta) by Bun-Steinke (which inverts ``rho = eps~^2`` exactly)."""
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

    def build(releases, extra=()):
        return Ledger.build(name, releases, "zcdp", variant="corrected",
                            requested=ApproxDP(eps, delta), delta=delta,
                            conversion="bun-steinke", notes=[*notes, *extra])

    if kind != "robust-split":
        return build([release])
    # Sample splitting: a record enters only its own batch's d releases (composed in zCDP);
    # across the disjoint batches the composition is parallel -- the worst batch's guarantee.
    per_batch = [build([Release.from_event(row, statistic, data)])
                 for row in _batch_rows(merged)]
    worst = max(per_batch, key=lambda led: led.guarantee.rho)
    return dataclasses.replace(worst, releases=(release,), composition="parallel", notes=(
        *worst.notes, "sample splitting (spec 002 A10, not in the paper): zCDP composition of "
        "each batch's d releases, parallel composition across the disjoint batches"))


# --------------------------------------------------------------------------------------------
# The convenience API: three thin wrappers over one validating implementation
# --------------------------------------------------------------------------------------------


def _f32(*values: Any) -> list[np.ndarray]:
    return [np.asarray(v, dtype=np.float32) for v in values]


def _robust_fields(eps: float, tau: Any, zeta: Any, s_rule: str, s: Any, n: int,
                   local: bool = False) -> list[np.ndarray]:
    """``(tau, zeta, s)`` of Algorithms 2 and 3, validated (``s`` NaN unless explicit). An
    explicit ``s`` whose score range ``2 PHI_MAX s`` (divided by ``n`` for a central mean) is
    zero or subnormal in float32, or whose sum of ``n`` scores overflows, is refused."""
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
        if math.isfinite(eps):
            bound = PHI_MAX * s_val  # one score's bound: psi_bound(s)
            _validate.check_noise_inputs("s", s_val, 2 * bound / (1 if local else n),
                                         bound if local else n * bound)
    else:
        if s is not None:
            raise ValueError("s is only read with s_rule='explicit'")
        s_val = math.nan
    return _f32(tau, zeta, s_val)


def _checked(key, data, model, num_iterations, on_invalid, epsilon, delta, eta, beta0):
    """The arguments every fit shares, checked: ``(key, data, n, num_iterations, epsilon,
    delta, beta0)``; ``delta`` by the one policy (default ``1/(2n)``; the paper's ``1/n`` is
    allowed, a warning above that)."""
    check_model(model, EMModel, "dpjax.models.EMModel (per_sample_gradients, ...)")
    key, data, n, num_iterations, eps, dl = checked_inputs(
        key, data, model.validate_data, model.num_records, on_invalid=on_invalid,
        num_iterations=num_iterations, epsilon=epsilon, delta=delta, eta=eta,
        allow_1_over_n=True)
    beta0 = _validate.check_array(beta0, "beta0", shape=(model.dim(data),))
    return key, data, n, num_iterations, eps, dl, beta0


def _fit(kind: str, key, data, model, epsilon, delta, num_iterations, beta0, eta, on_invalid,
         secure: bool, options: dict[str, Any]) -> FitResult:
    """Validate the shared arguments, build the estimator of ``kind`` and its hyperparameters,
    and fit. ``kind``: ``"gradient"`` (Alg 2), ``"exact_m"`` (Alg 3) or ``"clipped"`` (Alg 1)."""
    key, data, n, num_iterations, eps, dl, beta0 = _checked(
        key, data, model, num_iterations, on_invalid, epsilon, delta, eta, beta0)
    if kind == "clipped":
        c = _validate.check_truncation(options["clip"], eps, "clip")
        if c.ndim:
            raise ValueError("clip must be a scalar")
        hp: Any = ClippedGEMHyperparams(*_f32(eps, dl, eta, c))
        return fit(clipped_gem(model, num_iterations), key, data, beta0, hp, n=n, secure=secure)
    fields = _robust_fields(eps, options["tau"], options["zeta"], options["s_rule"],
                            options["s"], n)
    if kind == "exact_m":
        est = dp_exact_em(model, num_iterations, options["s_rule"])
        return fit(est, key, data, beta0, DPEMExactHyperparams(*_f32(eps, dl), *fields), n=n,
                   secure=secure)
    if options["sample_split"] and n < num_iterations:
        raise ValueError(f"sample_split=True needs at least one record per iteration: n = {n} "
                         f"< num_iterations = {num_iterations}")
    est = dp_gem(model, num_iterations, options["s_rule"], options["sample_split"])
    return fit(est, key, data, beta0, DPGEMHyperparams(*_f32(eps, dl, eta), *fields), n=n,
               secure=secure)


@_validate.host_only
def fit_dp_gem(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None,
    num_iterations: int, beta0: Any, tau: Any, eta: Any = 1.0, zeta: Any = 0.05,
    s_rule: SRule = "sigma_consistent", s: Any = None, sample_split: bool = False,
    on_invalid: str = "raise", secure: bool = False,
) -> FitResult:
    """Fit Algorithm 2 (DP gradient EM, spec 002 §2.5) to one data set.

    Calibration (the only one): the zCDP Gaussian noise of the ``T`` releases is solved for the
    requested ``(epsilon, delta)`` through the exact conversion, so the ledger delivers the
    request (1.000 of epsilon = 1 at ``n = 200``, ``T = 2``; so do the three fits below).

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

    Returns:
        :class:`~dpjax.base.FitResult`; its ledger delivers exactly ``(epsilon, delta)``.
    """
    return _fit("gradient", key, data, model, epsilon, delta, num_iterations, beta0, eta,
                on_invalid, secure, dict(tau=tau, zeta=zeta, s_rule=s_rule, s=s,
                                         sample_split=sample_split))


@_validate.host_only
def fit_dp_exact_em(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None,
    num_iterations: int, beta0: Any, tau: Any, zeta: Any = 0.05,
    s_rule: SRule = "sigma_consistent", s: Any = None, on_invalid: str = "raise",
    secure: bool = False,
) -> FitResult:
    """Fit Algorithm 3 (DP exact-M-step EM, spec 002 §2.6; Gaussian mixture only).

    Arguments as :func:`fit_dp_gem` (no step size, no sample splitting); ``tau`` bounds the
    per-coordinate second moment of the M-step terms ``(2 w - 1) y_ij`` (about
    ``beta*_j^2 + sigma^2``). ``epsilon = inf`` (with a rule-based ``s``) is the exact EM.
    Its calibration delivers the requested ``(epsilon, delta)``, as :func:`fit_dp_gem`'s.
    """
    return _fit("exact_m", key, data, model, epsilon, delta, num_iterations, beta0, 1.0,
                on_invalid, secure, dict(tau=tau, zeta=zeta, s_rule=s_rule, s=s))


@_validate.host_only
def fit_clipped_gem(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None,
    num_iterations: int, beta0: Any, eta: Any = 1.0, clip: Any = 1.0,
    on_invalid: str = "raise", secure: bool = False,
) -> FitResult:
    """Fit Algorithm 1 (clipped DP gradient EM, spec 002 §2.4) to one data set.

    Arguments as :func:`fit_dp_gem`, with ``clip`` the l2 clipping norm ``C`` in (0, inf]
    (default 1, the paper's experiments; inf only with ``epsilon = inf``) in place of
    ``tau``, ``zeta``, ``s_rule`` and ``s``. Its calibration delivers the requested
    ``(epsilon, delta)``, as :func:`fit_dp_gem`'s.
    """
    return _fit("clipped", key, data, model, epsilon, delta, num_iterations, beta0, eta,
                on_invalid, secure, dict(clip=clip))


@_validate.host_only
def fit_ldp_gem(
    key: Any, data: Any, model: EMModel, *, epsilon: Any, delta: Any = None,
    num_iterations: int, beta0: Any, tau: Any, eta: Any = 1.0, zeta: Any = 0.05,
    s_rule: LDPSRule = "ldp", s: Any = None, on_invalid: str = "raise", secure: bool = False,
) -> FitResult:
    """Fit the local-DP gradient EM (:func:`ldp_gem`; ours, not in the paper) to one data set
    of ``n`` users, one record each.

    Arguments as :func:`fit_dp_gem`, except: ``epsilon`` and ``delta`` are each user's local
    budget (every user releases once; ``delta`` defaults to ``1/(2n)``, ``n`` the users);
    ``num_iterations`` ``T`` is also the number of user groups (needs ``n >= T``; the remainder
    ``n mod T`` joins the last group); ``s_rule`` is ``"ldp"`` (default,
    :func:`ldp_smoothing_parameters`) or ``"explicit"``.

    Returns:
        :class:`~dpjax.base.FitResult`; its ledger (relation ``"local"``) delivers exactly
        ``(epsilon, delta)`` to every user.
    """
    key, data, n, num_iterations, eps, dl, beta0 = _checked(
        key, data, model, num_iterations, on_invalid, epsilon, delta, eta, beta0)
    ldp_user_groups(n, num_iterations)  # raises if n < T
    if s_rule not in LDP_S_RULES:
        raise ValueError(f"s_rule must be one of {LDP_S_RULES}; got {s_rule!r}")
    fields = _robust_fields(eps, tau, zeta, "explicit" if s_rule == "explicit" else
                            "sigma_consistent", s, n, local=True)
    est = ldp_gem(model, num_iterations, s_rule)
    return fit(est, key, data, beta0, LDPGEMHyperparams(*_f32(eps, dl, eta), *fields), n=n,
               secure=secure)


# --------------------------------------------------------------------------------------------
# Registry: every estimator with a small example problem (the conformance suite runs over it)
# --------------------------------------------------------------------------------------------


def _example(model: EMModel, d: int, seed: int, kind: str, n: int = 400) -> registry.Example:
    beta = np.full(d, 1.0 / np.sqrt(d), np.float32)
    data = model.simulate(jax.random.key(seed), n, jnp.asarray(beta))

    def hp(eps):
        f = functools.partial(jnp.asarray, dtype=jnp.float32)
        if kind == "robust":
            return DPGEMHyperparams(f(eps), f(1.0 / n), f(1.0), f(2.0), f(0.05), f(jnp.nan))
        if kind == "exact-m":
            return DPEMExactHyperparams(f(eps), f(1.0 / n), f(2.0), f(0.05), f(jnp.nan))
        if kind == "local":
            # each user's delta: 1/n, but at most 1/400 (the one-user-per-round example has n = 4)
            return LDPGEMHyperparams(f(eps), f(1.0 / max(n, 400)), f(1.0), f(2.0), f(0.05),
                                     f(jnp.nan))
        return ClippedGEMHyperparams(f(eps), f(1.0 / n), f(1.0), f(1.0))

    return registry.Example(data, beta * 0.8, hp)


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
        # gmm: the full data set, n = 403 not a multiple of T (the last group carries the
        # remainder); rmc: one group per step (disjoint batching), which puts the canary
        # audit's record in the last round; mor: groups of ONE user (n = T = 4), so the
        # released iterate moves by that user's whole report and the canary audit tests the
        # per-user local guarantee itself (with m users a round's mean is about sqrt(m) times
        # more private than each report, beyond what an audit of the iterate can see)
        batching, n_users = {"gmm": ("full", 403), "mor": ("disjoint", 4)}.get(
            model.name, ("disjoint", 400))
        entry(f"ldp-gem/{model.name}", functools.partial(ldp_gem, model, 4, "ldp", batching),
              functools.partial(_example, model, d, seed, "local", n_users))
    exact_k = RegressionMissingCovariates(1.0, 0.2, second_moment="exact_conditional")
    entry(f"dp-gem/{exact_k.name}", functools.partial(dp_gem, exact_k, 4),
          functools.partial(_example, exact_k, 3, 2, "robust"))
    gmm = models[0][0]
    entry(f"dp-em-exact/{gmm.name}", functools.partial(dp_exact_em, gmm, 4),
          functools.partial(_example, gmm, 4, 0, "exact-m"))


_register()
