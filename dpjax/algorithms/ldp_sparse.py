r"""Sparse linear regression under local differential privacy (spec 001; Zhu, Ding, Aggarwal,
Xu & Wang, ICLR 2024).

Every user ``i`` holds one record ``(x_i, y_i)`` and randomises it before it leaves them. The
**neighbouring relation is local**: one user's record replaced by any other, everything else
fixed. Each user releases exactly once (Algorithms 1 and 3: one non-interactive round of two
resp. one Gaussian report; Algorithms 2 and 4: one randomised gradient, in the round of the
user's group), so the ledger states **each user's guarantee** and no composition across users
applies.

Estimators (:class:`dpjax.base.Estimator`, registered in :mod:`dpjax.registry`):

* :func:`nldp` -- **Algorithm 1**, (eps, delta)-NLDP (spec §2.1). User ``i`` releases
  ``x~_i x~_i^T + N_1i`` (``x~ = clip_l2(x, r)``, ``N_1`` symmetric Gaussian) and
  ``x_bar_i y_bar_i + N_2i`` (coordinate shrinkage at ``tau1``, ``tau2``), each at budget
  ``(eps/2, delta/2)``; the server outputs ``S_lambda(Sigma_hat^{-1} Sigma_hat_xy)``. By
  default (``calibration="pld"``) the two reports together are the analytic Gaussian
  mechanism of ``(eps, delta)`` (each at ``mu*/sqrt(2)``; their PLD, the exact Gaussian curve,
  delivers the request at every epsilon); ``calibration="analytic"`` calibrates each on the
  exact curve at ``(eps/2, delta/2)`` (basic composition); the paper's per-user entry variances
  (``calibration="classic-or-analytic"``, ``cov_range="paper"``, ``eps/2 <= 1``):
  ``32 r^4 log(2.5/delta)/eps^2`` and ``32 d tau1^2 tau2^2 log(2.5/delta)/eps^2``. Two
  equal-law simulation paths: exact per-user noise (``per_user=True``) or one aggregate draw
  (default). Users may be streamed in
  ``num_chunks`` disjoint chunks (running means; memory ``O(chunk)``, exact law). An
  indefinite noisy covariance is detected (``min_eig <= 0``): the estimate is then 0 and the
  ``indefinite`` flag is set (:func:`fit_nldp` raises :class:`IndefiniteCovarianceError`).
  Heavy-tailed responses (spec §2.2) are Algorithm 1 with :func:`heavy_tailed_hparams`.
* :func:`nldp_public` -- **Algorithm 3** (spec §2.3): only the cross term is released; the
  server inverts the (unclipped) public covariance. The illegible noise variance is a choice:
  ``release="full"`` (default, one release at (eps, delta): with the paper's calibration
  ``8 d tau1^2 tau2^2 log(1.25/delta)/eps^2``) or ``"alg1-copy"`` (``(eps/2, delta/2)``,
  Algorithm 1's variance).
* :func:`ldp_iht` -- **Algorithm 2** (``theta_norm=1``) and **Algorithm 4** (``theta_norm=2``,
  general covariance, spec §2.6), eps sequentially-interactive LDP (spec §2.5): ``T`` disjoint
  user groups (the remainder joins the last group; padded and masked), each user sends
  ``R_eps^r(x_bar(<theta, x_bar> - y_bar))`` with the rectified radius
  ``r = sqrt(d) tau1 (R sqrt(k') tau1 + tau2)``, then ``theta <- Proj_R(Trunc(theta - eta g, k'))``.
  ``variant="wang_xu_2021_literal"`` uses the published radius ``sqrt(d) tau1 (R tau1 + tau2)``
  (spec §6.1): see :func:`ldp_iht` for what it does and does not break.

Non-private baselines: :func:`closed_form` (``S_lambda(Sigma_hat^{-1} Sigma_hat_xy)``, eq. 2),
:func:`ols`, :func:`plain_iht`. Shared operators: :func:`soft_threshold`, :func:`trunc`,
:func:`project_l2`.

Constants (spec §2.1, §2.5: all ``O(.)`` constants are unspecified) are explicit multipliers of
:func:`nldp_hparams`, :func:`heavy_tailed_hparams` and :func:`iht_hparams`.
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
from dpjax.accounting import (
    GAUSSIAN_CURVE_NOTE,
    ApproxDP,
    Ledger,
    Release,
    compose_basic,
    compose_parallel,
)
from dpjax.algorithms._boundary import checked_inputs
from dpjax.base import Estimator, FitResult, Padded, batch_size, fit
from dpjax.local_randomizers import (
    l2_ball_mechanism,
    ldp_iht_radius,
    local_gaussian_aggregate,
    local_gaussian_mean,
    local_gaussian_sigma,
    outer_product_range,
    randomizer_scale,
    symmetric_gaussian_sigma,
)
from dpjax.mechanisms import (
    GAUSSIAN_CALIBRATIONS,
    BoundedStatistic,
    PrivacyEvent,
    _analytic_mu_jnp,
    clip_l2,
    clip_linf,
    gaussian_multiplier_analytic,
    local_mechanism,
    records_dot,
    secure_active,
)

__all__ = [
    "IHTHyperparams",
    "IHTInfo",
    "IHTState",
    "IndefiniteCovarianceError",
    "InfeasibleCovarianceError",
    "NLDPHyperparams",
    "NLDPInfo",
    "NLDPState",
    "NLDP_CALIBRATIONS",
    "PublicHyperparams",
    "closed_form",
    "cov_range",
    "cross_range",
    "fit_nldp",
    "heavy_tailed_hparams",
    "iht_hparams",
    "ldp_iht",
    "nldp",
    "nldp_hparams",
    "nldp_feasibility",
    "nldp_noise_stds",
    "nldp_public",
    "nldp_release_budget",
    "ols",
    "plain_iht",
    "project_l2",
    "soft_threshold",
    "trunc",
]


# --------------------------------------------------------------------------------------------
# Shared operators (spec §2.0)
# --------------------------------------------------------------------------------------------


def soft_threshold(u: jax.Array, lam: Any) -> jax.Array:
    """``S_lambda(u)_i = sgn(u_i) max(|u_i| - lambda, 0)`` (spec §2.0, §6.2.5)."""
    return jnp.sign(u) * jnp.maximum(jnp.abs(u) - lam, 0)


def trunc(v: jax.Array, s: int) -> jax.Array:
    """``Trunc(v, s)``: keep the ``s`` largest-magnitude entries of ``v`` (``s >= d``: ``v``)."""
    d = v.shape[-1]
    if s >= d:
        return v
    _, idx = jax.lax.top_k(jnp.abs(v), s)
    return jnp.zeros_like(v).at[idx].set(v[idx])


def project_l2(v: jax.Array, radius: Any) -> jax.Array:
    """Projection onto the centred l2 ball: ``v min(1, R / ||v||)``."""
    norm = jnp.sqrt(jnp.sum(jnp.square(v)))
    return v * jnp.minimum(1.0, radius / jnp.maximum(norm, jnp.finfo(v.dtype).tiny))


def _solve_threshold(sxx: jax.Array, sxy: jax.Array, lam: Any):
    """``(S_lambda(sxx^{-1} sxy), lambda_min(sxx))`` through one symmetric eigendecomposition."""
    evals, evecs = jnp.linalg.eigh(sxx)
    min_eig = evals[0]
    safe = jnp.where(evals > 0, evals, 1.0)
    u = evecs @ ((evecs.T @ sxy) / safe)
    return soft_threshold(u, lam), min_eig


# --------------------------------------------------------------------------------------------
# Non-private baselines (spec §2.0 eq. 2, §4.2)
# --------------------------------------------------------------------------------------------


def closed_form(x: jax.Array, y: jax.Array, lam: Any) -> jax.Array:
    """The non-private estimator ``S_lambda(Sigma_hat_xx^{-1} Sigma_hat_xy)`` (eq. 2)."""
    n = x.shape[0]
    return soft_threshold(jnp.linalg.solve(records_dot(x, x) / n, records_dot(x, y) / n), lam)


def ols(x: jax.Array, y: jax.Array) -> jax.Array:
    """Ordinary least squares (``closed_form`` with ``lambda = 0``)."""
    return closed_form(x, y, 0.0)


def plain_iht(x: jax.Array, y: jax.Array, k_prime: int, num_steps: int, eta: Any = 1.0,
              theta_norm: float = 1.0) -> jax.Array:
    """Non-private projected IHT on the full data: ``theta <- Proj_R(Trunc(theta - eta
    grad L(theta), k'))`` from 0, ``grad L = X^T (X theta - y)/n`` (spec §7.7)."""
    n = x.shape[0]

    def body(theta, _):
        grad = records_dot(x, x @ theta - y) / n
        return project_l2(trunc(theta - eta * grad, k_prime), theta_norm), None

    theta, _ = jax.lax.scan(body, jnp.zeros(x.shape[1], x.dtype), None, length=num_steps)
    return theta


# --------------------------------------------------------------------------------------------
# Algorithm 1: NLDP (spec §2.1), with streamed chunks of users
# --------------------------------------------------------------------------------------------


class NLDPHyperparams(NamedTuple):
    epsilon: jax.Array  # () each user's total budget (two releases at eps/2); inf: no noise
    delta: jax.Array  # () in (0, 1); each release at delta/2
    r: jax.Array  # () l2 clipping radius of x for the covariance
    tau1: jax.Array  # () coordinate shrinkage of x for the cross term
    tau2: jax.Array  # () shrinkage of y
    lam: jax.Array  # () soft-threshold level lambda_n

    POSITIVE = ("r", "tau1", "tau2")  # in (0, inf], checked with the budgets by dpjax.fit


class NLDPState(NamedTuple):
    beta: jax.Array  # (d,) S_lambda(sxx^{-1} sxy) of the users seen so far (0 if indefinite)
    sxx: jax.Array  # (d, d) running mean of the users' noisy covariance reports
    sxy: jax.Array  # (d,) running mean of the users' noisy cross-term reports
    count: jax.Array  # () int32 users seen so far
    min_eig: jax.Array  # () smallest eigenvalue of sxx


class NLDPInfo(NamedTuple):
    indefinite: jax.Array  # () bool: sxx is not positive definite (beta set to 0)
    min_eig: jax.Array  # () lambda_min(sxx)
    events: tuple[PrivacyEvent, PrivacyEvent]  # covariance release, cross-term release


def cov_range(r: Any, which: Literal["paper", "exact"] = "paper") -> Any:
    """Frobenius range of one user's ``x~ x~^T``, ``||x~|| <= r``: ``2 r^2`` (spec §2.1, the
    triangle inequality) or the exact supremum ``sqrt(2) r^2`` (over-noising by sqrt 2 avoided)."""
    if which == "paper":
        return 2.0 * r * r
    if which == "exact":
        return outer_product_range(r)
    raise ValueError(f"cov_range must be 'paper' or 'exact'; got {which!r}")


def cross_range(d: int, tau1: Any, tau2: Any) -> Any:
    """l2 range of one user's ``x_bar y_bar`` (``|x_bar_j| <= tau1``, ``|y_bar| <= tau2``):
    ``2 sqrt(d) tau1 tau2`` (spec §2.1 step 5)."""
    return 2.0 * math.sqrt(d) * tau1 * tau2


#: calibrations of NLDP's two reports: ``"pld"`` (default) -- the two compose by PLD to the
#: analytic Gaussian mechanism of (epsilon, delta), each at ``mu* / sqrt(2)``; or one of
#: :data:`~dpjax.mechanisms.GAUSSIAN_CALIBRATIONS` for each report at ``(eps/2, delta/2)``
NLDP_CALIBRATIONS: tuple[str, ...] = ("pld", "analytic", "classic-or-analytic", "classic")


def nldp_release_budget(epsilon: Any, delta: Any, calibration: str) -> tuple[Any, Any, str]:
    """``(budget, delta, calibration)`` of each of NLDP's two reports: ``"pld"`` -- ``mu* /
    sqrt(2)`` with ``mu*`` the analytic Gaussian mechanism's of ``(epsilon, delta)``
    (calibration ``"mu"``): the two Gaussians compose to exactly that one (their ``mu^2``
    add), so each user's PLD is ``(epsilon, delta)``; otherwise ``(epsilon/2, delta/2)`` with
    ``calibration`` (basic composition). Host numbers or traced arrays."""
    if calibration != "pld":
        return epsilon / 2, delta / 2, calibration
    if isinstance(epsilon, jax.Array) or isinstance(delta, jax.Array):
        mu = _analytic_mu_jnp(epsilon, delta)
    else:
        mu = 1.0 / gaussian_multiplier_analytic(np.float64(epsilon), np.float64(delta))
    return mu / math.sqrt(2.0), delta / 2, "mu"


def nldp_noise_stds(d: int, r: float, tau1: float, tau2: float, epsilon: float, delta: float,
                    cov: Literal["paper", "exact"] = "paper",
                    calibration: str = "pld") -> tuple[float, float]:
    """Each user's noise std ``(sigma_1, sigma_2)`` (covariance entry, cross-term entry) of
    :func:`nldp`, at budget ``(eps/2, delta/2)`` per release. With the paper's range and the
    classic calibration (``calibration="classic-or-analytic"``, ``eps/2 <= 1``),
    ``sigma_1^2 = 32 r^4 log(2.5/delta)/eps^2`` and ``sigma_2^2 = 32 d tau1^2 tau2^2
    log(2.5/delta)/eps^2``; ``"analytic"`` each on the exact Gaussian curve at ``(eps/2,
    delta/2)``; the default ``"pld"`` is :func:`nldp`'s default (the two together the analytic
    Gaussian of ``(eps, delta)``, smaller still). Public quantities only (for choosing
    lambda)."""
    budget, dl, cal = nldp_release_budget(epsilon, delta, calibration)
    s1 = symmetric_gaussian_sigma(cov_range(r, cov), budget, dl, calibration=cal)
    s2 = local_gaussian_sigma(cross_range(d, tau1, tau2), budget, dl, calibration=cal)
    return float(s1), float(s2)


def _check_nldp_hparams(n: int, d: int, epsilon: float, delta: float) -> None:
    if not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an integer >= 2; got {n!r}")
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be an integer >= 1; got {d!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0; got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1); got {delta!r}")


def nldp_hparams(n: int, d: int, epsilon: float, delta: float, *, sigma: float = 1.0,
                 c_r: float | None = None, c_tau: float = math.sqrt(2.0), c_lam: float = 1.0,
                 lam_rule: Literal["theory", "noise"] = "theory",
                 cov: Literal["paper", "exact"] = "paper",
                 calibration: str = "analytic") -> NLDPHyperparams:
    r"""Theorem 3's parameters with explicit constants (spec §2.1 defaults).

    ``tau1 = tau2 = c_tau sigma sqrt(log n)``; ``r = sigma sqrt(d)`` by default, or Theorem 3's
    form ``r = c_r sigma sqrt(d log n)`` when ``c_r`` is given; and

    **Why ``r = sigma sqrt(d)`` by default.** ``r`` clips ``x`` for the covariance report, whose
    noise (entry sd ``sigma_1 ∝ r^2``) decides whether the noisy covariance is invertible
    (spec §4.2). Its smallest eigenvalue is at most ``r^2 / d`` whatever the data (each
    ``||x~|| <= r``) and at most ``lambda_min(Sigma) <= sigma^2`` under Assumption 2, while the
    noise's spectral reach is about ``2 sqrt(d) sigma_1 / sqrt(n)``. A radius beyond the
    root-mean-square norm ``sqrt(E||x||^2) <= sigma sqrt(d)`` therefore adds noise (as
    ``r^2``) and no signal; below it, typical users are clipped (bias). Theorem 3 takes ``r =
    O(sigma sqrt(d log n))`` so that no user is clipped (Lemma 12 with failure probability
    ``1/n``: ``c_r = 4``, the previous default): that multiplies ``sigma_1`` by ``16 log n``
    (184 at ``n = 1e5``) and moves the invertible regime to ``n ~ 1e10`` users at ``d = 5``,
    where the fit was indefinite at every size tried. The reproductions pass their own
    ``c_r = 0.3`` (``r ≈ sigma sqrt(d)`` for ``n`` of 1e5 to 1e7).

    * ``lam_rule="theory"``: ``lambda = c_lam d log n sqrt(log d log(1/delta)) / (sqrt(n) eps)``
      (``log d`` read as ``max(log d, 1)`` so that ``d <= 2`` is allowed);
    * ``lam_rule="noise"`` (spec §2.1's data-independent alternative): ``lambda = c_lam
      sqrt(2 log(2d)) sqrt(sigma_1^2 + sigma_2^2) / sqrt(n)`` with the per-user noise stds of
      :func:`nldp_noise_stds` (``||theta*||_2 <= 1``).

    Args:
        n, d: users and dimension.
        epsilon, delta: each user's budget, ``epsilon > 0`` (inf: ``lambda = 0``), ``delta``
            in ``(0, 1)``.
        sigma: the sub-Gaussian scale of ``x`` and ``y`` (Assumption 2).
        c_r, c_tau, c_lam: the multipliers (``> 0``; ``c_lam >= 0``); ``c_r=None``
            (default): ``r = sigma sqrt(d)``, see above.
        lam_rule: see above.
        cov: the covariance range of :func:`cov_range` (for the ``"noise"`` rule).
        calibration: the Gaussian calibration of :func:`nldp_noise_stds` (for the ``"noise"``
            rule; pass the estimator's).
    """
    _check_nldp_hparams(n, d, epsilon, delta)
    for name, v in (("c_r", 1.0 if c_r is None else c_r), ("c_tau", c_tau), ("sigma", sigma)):
        if not v > 0:
            raise ValueError(f"{name} must be > 0; got {v!r}")
    if not c_lam >= 0:
        raise ValueError(f"c_lam must be >= 0; got {c_lam!r}")
    log_n = math.log(n)
    tau = c_tau * sigma * math.sqrt(log_n)
    r = sigma * math.sqrt(d) if c_r is None else c_r * sigma * math.sqrt(d * log_n)
    if math.isinf(epsilon):
        lam = 0.0
    elif lam_rule == "theory":
        lam = c_lam * d * log_n * math.sqrt(max(math.log(d), 1.0) * math.log(1 / delta)) / (
            math.sqrt(n) * epsilon)
    elif lam_rule == "noise":
        s1, s2 = nldp_noise_stds(d, r, tau, tau, epsilon, delta, cov, calibration)
        lam = c_lam * math.sqrt(2 * math.log(2 * d)) * math.hypot(s1, s2) / math.sqrt(n)
    else:
        raise ValueError(f"lam_rule must be 'theory' or 'noise'; got {lam_rule!r}")
    return NLDPHyperparams(*(np.float32(v) for v in (epsilon, delta, r, tau, tau, lam)))


def heavy_tailed_hparams(n: int, d: int, epsilon: float, delta: float, p: float, *,
                         sigma: float = 1.0, c_r: float | None = None,
                         c_tau: float = math.sqrt(2.0),
                         c_tau2: float = 1.0, c_lam: float = 1.0) -> NLDPHyperparams:
    r"""Theorem 5's parameters (heavy-tailed responses, ``E|y|^{2p} <= M``, spec §2.2 [R?]):
    ``tau1 = c_tau sigma sqrt(log n)``, ``tau2 = c_tau2 (n eps^2 / log d)^{1/(2p)}``,
    ``r`` as :func:`nldp_hparams` (``sigma sqrt(d)``, or ``c_r sigma sqrt(d log n)``),
    ``lambda = c_lam d log n sqrt(log(1/delta)) (log d / (n eps^2))^{(p-1)/(2p)}`` (``log d``
    read as ``max(log d, 1)``)."""
    _check_nldp_hparams(n, d, epsilon, delta)
    if not p > 1:
        raise ValueError(f"p must be > 1 (E|y|^(2p) finite); got {p!r}")
    log_n, log_d = math.log(n), max(math.log(d), 1.0)
    base = nldp_hparams(n, d, epsilon, delta, sigma=sigma, c_r=c_r, c_tau=c_tau, c_lam=0.0)
    if math.isinf(epsilon):
        tau2, lam = math.inf, 0.0
    else:
        tau2 = c_tau2 * (n * epsilon**2 / log_d) ** (1 / (2 * p))
        lam = c_lam * d * log_n * math.sqrt(math.log(1 / delta)) * (
            log_d / (n * epsilon**2)) ** ((p - 1) / (2 * p))
    return base._replace(tau2=np.float32(tau2), lam=np.float32(lam))


def _nldp_reports(key, x, y, hp, d, per_user, cov, calibration, count=None):
    """One chunk of users' two averaged releases (values and events), per user or aggregate
    (``count``: the chunk's users at runtime, aggregate only, its padded rows zero)."""
    m = x.shape[0] if count is None else count
    per_user = per_user or secure_active()  # exact reports are every user's own
    key_cov, key_xy = jax.random.split(key)
    eps_half, delta_half, calibration = nldp_release_budget(hp.epsilon, hp.delta, calibration)
    x_clip = clip_l2(x, hp.r)  # ||x~|| <= r
    x_bar = clip_linf(x, hp.tau1)  # |x_bar_j| <= tau1
    y_bar = clip_linf(y, hp.tau2)  # |y_bar| <= tau2
    range_cov = cov_range(hp.r, cov)
    range_xy = cross_range(d, hp.tau1, hp.tau2)
    prods = x_bar * y_bar[:, None]
    if per_user:
        outer = BoundedStatistic(x_clip[:, :, None] * x_clip[:, None, :], range_cov, "l2", "local")
        rel_cov = local_gaussian_mean(key_cov, outer, eps_half, delta_half, symmetric=True,
                                      per_user=True, calibration=calibration)
        rel_xy = local_gaussian_mean(key_xy, BoundedStatistic(prods, range_xy, "l2", "local"),
                                     eps_half, delta_half, per_user=True,
                                     calibration=calibration)
    else:
        mean_cov = BoundedStatistic(records_dot(x_clip, x_clip) / m, range_cov, "l2", "local")
        rel_cov = local_gaussian_aggregate(key_cov, mean_cov, m, eps_half, delta_half,
                                           symmetric=True, calibration=calibration)
        mean_xy = BoundedStatistic(jnp.mean(prods, axis=0) if count is None else
                                   jnp.sum(prods, axis=0) / m, range_xy, "l2", "local")
        rel_xy = local_gaussian_aggregate(key_xy, mean_xy, m, eps_half, delta_half,
                                          calibration=calibration)
    return rel_cov, rel_xy


def _nldp_ledger(name: str, cov: str, calibration: str = "analytic"):
    def ledger(n: int, hp: NLDPHyperparams, events) -> Ledger:
        ev_cov, ev_xy = events
        eps, delta = float(hp.epsilon), float(hp.delta)
        rel_cov = Release.from_event(
            ev_cov, f"clipped outer product x~ x~^T (symmetric noise; Frobenius range "
            f"{'2 r^2' if cov == 'paper' else 'sqrt(2) r^2'})", "each user once, its own record")
        rel_xy = Release.from_event(ev_xy, "shrunk cross term x_bar y_bar (l2 range "
                                    "2 sqrt(d) tau1 tau2)", "each user once, its own record")
        if calibration == "pld":
            return _nldp_pld_ledger(name, cov, rel_cov, rel_xy, eps, delta)
        # each user makes the two releases of its chunk (basic composition); chunks hold
        # disjoint users, so the guarantee is the weakest chunk's (no composition across users)
        per_user = [compose_basic([a, b]) for a, b in zip(rel_cov.budgets(), rel_xy.budgets())]
        guarantee = compose_parallel(per_user)
        notes = ["local DP: each user's own guarantee (two Gaussian releases, basic "
                 "composition); users are disjoint, so nothing composes across users"]
        notes.append(GAUSSIAN_CURVE_NOTE)
        if cov == "paper":
            notes.append("covariance range 2 r^2 as in the paper (exact sup sqrt(2) r^2: "
                         "over-noised by sqrt(2))")
        return Ledger(name, "corrected", "local",
                      "basic per user (2 releases); parallel across disjoint users",
                      (rel_cov, rel_xy), guarantee, guarantee, ApproxDP(eps, delta), tuple(notes))

    return ledger


def _nldp_pld_ledger(name, cov, rel_cov, rel_xy, eps, delta) -> Ledger:
    """Each user's two reports composed by PLD (two Gaussians: the Gaussian of ``mu =
    sqrt(mu_cov^2 + mu_xy^2)``, its exact curve), each chunk alone, parallel across the
    disjoint users: the worst chunk's guarantee."""
    notes = ["local DP: each user's own guarantee (two Gaussian releases composed by PLD: "
             "together the analytic Gaussian mechanism of the request, each at mu*/sqrt(2)); "
             "users are disjoint, so nothing composes across users"]
    if cov == "paper":
        notes.append("covariance range 2 r^2 as in the paper (exact sup sqrt(2) r^2: "
                     "over-noised by sqrt(2))")
    worst = None
    for pair in dict.fromkeys(zip(rel_cov.noise, rel_xy.noise)):  # each distinct user's pair
        parts = [dataclasses.replace(r, noise=(row,), count=1)
                 for r, row in zip((rel_cov, rel_xy), pair)]
        led = Ledger.build(name, parts, "pld", relation="local",
                           requested=ApproxDP(eps, delta), delta=delta, notes=notes)
        if worst is None or led.approx_dp.epsilon > worst.approx_dp.epsilon:
            worst = led
    return dataclasses.replace(
        worst, releases=(rel_cov, rel_xy),
        composition=f"{worst.composition} per user (2 releases); parallel across disjoint users")


@functools.cache
def nldp(num_chunks: int = 1, *, per_user: bool = False,
         cov: Literal["paper", "exact"] = "paper",
         calibration: str = "pld") -> Estimator:
    """Algorithm 1 (spec §2.1) as an :class:`~dpjax.base.Estimator`.

    Args:
        num_chunks: the users arrive in this many disjoint chunks (``batching="disjoint"``,
            one step each; give the data as ``batch(t)`` to stream them). Each step adds its
            chunk's reports to the running means and recomputes the estimate, so the final
            state is Algorithm 1 on all ``num_chunks * floor(n / num_chunks)`` users (the
            remainder of ``n`` is unused, as in :func:`dpjax.base.split_batches`).
        per_user: draw every user's noise (exact, ``O(chunk d^2)`` memory) instead of one
            aggregate draw per chunk (same law).
        cov: covariance range, ``"paper"`` (``2 r^2``, default) or ``"exact"``
            (``sqrt(2) r^2``).
        calibration: the Gaussian calibration of both releases, one of
            :data:`NLDP_CALIBRATIONS`: ``"pld"`` (default; the two together the analytic
            Gaussian mechanism of (eps, delta), so the ledger, composing each user's two
            reports by PLD, delivers the request at every epsilon), ``"analytic"`` (each at
            (eps/2, delta/2) on the exact Gaussian curve, basic composition: the previous
            default), the paper's ``"classic-or-analytic"`` (classic where ``eps/2 <= 1``,
            delivering 0.35 to 0.66 of the request there) or ``"classic"`` (static).

    Hyperparameters: :class:`NLDPHyperparams`. Data: ``(x (n, d), y (n,))``.

    Privacy: (eps, delta)-LDP per user at every epsilon, local relation, non-interactive.
    ``epsilon = inf``: no noise (with ``r = tau = inf``: the
    closed-form estimator :func:`closed_form`).
    """
    if not isinstance(num_chunks, int) or num_chunks < 1:
        raise ValueError(f"num_chunks must be an integer >= 1; got {num_chunks!r}")
    if cov not in ("paper", "exact"):
        raise ValueError(f"cov must be 'paper' or 'exact'; got {cov!r}")
    _validate.check_choice(calibration, "calibration", NLDP_CALIBRATIONS)
    name = "ldp-nldp" + ("/per-user" if per_user else "") + ("/exact-range" if cov == "exact"
                                                               else "")

    init = _nldp_init
    step = _make_nldp_step(per_user, cov, calibration)
    padded = None if per_user else _padded_nldp(cov, calibration)
    return Estimator(name, init, step, num_steps=num_chunks, batching="disjoint",
                     ledger=_nldp_ledger(name, cov, calibration),
                     check=functools.partial(_nldp_check, num_chunks, cov), padded=padded)


def _nldp_init(params0):
    d = params0.shape[0]
    z = jnp.zeros((), params0.dtype)
    return NLDPState(jnp.zeros_like(params0), jnp.zeros((d, d), params0.dtype),
                     jnp.zeros_like(params0), jnp.zeros((), jnp.int32), z)


@functools.lru_cache(maxsize=64)
def _padded_nldp(cov: str, calibration: str) -> Padded:
    """Algorithm 1 with the chunk size and the number of chunks as runtime values (one
    program for every ``n``): the step reads the chunk size only as the count of its means
    and of the aggregate noise (:func:`~dpjax.local_randomizers.aggregate_sigma`), and never
    the number of chunks. The aggregate path only (a per-user draw is every user's own)."""
    return Padded(f"ldp-nldp[{cov},{calibration}]", _nldp_init,
                  _make_nldp_step(False, cov, calibration), "disjoint")


def _make_nldp_step(per_user: bool, cov: str, calibration: str):
    def step(key, state, batch, hp, sizes=None):
        x, y = batch
        m, d = x.shape
        count_m = None
        if sizes is not None:  # padded rows are no users: zero, so they add nothing
            zero = jnp.zeros((), x.dtype)
            x = jnp.where(sizes.mask[:, None], x, zero)
            y = jnp.where(sizes.mask, y, zero)
            count_m = sizes.count.astype(x.dtype)
            m = sizes.count.astype(jnp.int32)
        rel_cov, rel_xy = _nldp_reports(key, x, y, hp, d, per_user, cov, calibration, count_m)
        count = state.count + m
        w = jnp.asarray(m, x.dtype) / count.astype(x.dtype)  # running mean, exact weights
        sxx = state.sxx + w * (rel_cov.value - state.sxx)
        sxy = state.sxy + w * (rel_xy.value - state.sxy)
        beta, min_eig = _solve_threshold(sxx, sxy, hp.lam)
        indefinite = ~(min_eig > 0)
        beta = jnp.where(indefinite, jnp.zeros_like(beta), beta)
        return (NLDPState(beta, sxx, sxy, count, min_eig),
                NLDPInfo(indefinite, min_eig, (rel_cov.event, rel_xy.event)))

    return step


def _nldp_check(num_chunks: int, cov: str, n: int, hp: NLDPHyperparams, dtype) -> None:
    """Refuse the clipping levels on public values only, before anything runs (a refusal never
    depends on the data): each user's ``x~ x~^T`` is at most ``r^2`` per entry and
    ``x_bar y_bar`` at most ``tau1 tau2``, so a chunk's sums of ``n // num_chunks`` users must
    not overflow ``dtype`` and the ranges the noise is calibrated from (at ``d = 1`` for the
    cross term) must be normal numbers of it."""
    if not math.isfinite(float(np.asarray(hp.epsilon))):
        return
    m0 = max(batch_size(n, num_chunks), 1)
    r, t1, t2 = (float(np.asarray(v)) for v in (hp.r, hp.tau1, hp.tau2))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        _validate.check_noise_inputs("r", r, float(cov_range(r, cov)), m0 * r * r, dtype)
        name, value = ("tau1", t1) if t1 >= t2 else ("tau2", t2)
        _validate.check_noise_inputs(name, value, cross_range(1, t1, t2), m0 * t1 * t2, dtype)


class IndefiniteCovarianceError(FloatingPointError):
    """The noisy covariance of Algorithm 1 is not positive definite (n too small for the noise;
    spec §4.2 feasibility: ``n >~ 512 d r^4 log(2.5/delta) / eps^2``)."""


class InfeasibleCovarianceError(IndefiniteCovarianceError, ValueError):
    """Raised by :func:`fit_nldp` before any user reports: on public values alone, the noisy
    covariance would be indefinite with probability at least 0.98 whatever the data
    (:func:`nldp_feasibility`)."""


def _edge_quantile(d: int) -> float:
    """``q_d = 2 sqrt(d) - 4 d^(-1/6)``: ``P(lambda_max(W) < q_d) <= 0.023`` for the ``d x d``
    symmetric ``W`` with i.i.d. standard normal upper triangle (the noise of the covariance
    report, diagonal included, in units of its entry sd). Semicircle edge ``2 sqrt(d)`` minus
    4 Tracy-Widom widths ``d^(-1/6)``; by simulation 1.3% to 2.3% for d = 1 to 200
    (``tests/test_ldp_sparse.py`` checks d = 1 to 60)."""
    return 2.0 * math.sqrt(d) - 4.0 * d ** (-1.0 / 6.0)


def nldp_feasibility(n: int, d: int, r: float, epsilon: float, delta: float, *,
                     cov: Literal["paper", "exact"] = "paper",
                     calibration: str = "pld") -> tuple[bool, float]:
    r"""Whether Algorithm 1's noisy covariance can be positive definite, on public values.

    The server's covariance is ``C + N``: ``C = (1/n) sum x~_i x~_i^T`` (each ``||x~_i|| <=
    r``, so ``lambda_min(C) <= tr(C)/d <= r^2/d`` for every data set) and ``N`` symmetric with
    i.i.d. ``N(0, s^2)`` upper triangle, ``s = sigma_1 / sqrt(n)`` (:func:`nldp_noise_stds`).
    For the most favourable ``C`` of that trace, ``(r^2/d) I``, ``C + N`` is positive definite
    iff ``lambda_max(-N) < r^2/d``; when ``r^2/d < q_d s`` (:func:`_edge_quantile`) that has
    probability below about 0.02. Both sides scale as ``r^2``: **no radius helps**; the
    condition is ``sqrt(n) >= q_d d sigma_1 / r^2``, i.e. ``n`` large enough for ``epsilon``,
    ``delta`` and ``d``.

    Returns:
        ``(feasible, n_min)``: ``n_min = (q_d d sigma_1 / r^2)^2`` at this ``delta``
        (``feasible`` iff ``n >= n_min``; ``epsilon = inf``: always).
    """
    if math.isinf(epsilon) or d < 1:
        return True, 0.0
    q = _edge_quantile(d)
    if q <= 0:  # d <= 2: r^2/d > 0 > q_d s, never refused
        return True, 0.0
    s1, _ = nldp_noise_stds(d, r, 1.0, 1.0, epsilon, delta, cov, calibration)
    n_min = (q * d * s1 / (r * r)) ** 2
    return n >= n_min, n_min


def _xy(data: Any, on_invalid: str) -> tuple[jax.Array, jax.Array]:
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise TypeError(f"data must be a pair (x (n, d), y (n,)); got {type(data).__name__}")
    x, y = _validate.check_xy(*data, on_invalid=on_invalid)
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float32
    return jnp.asarray(x, dtype), jnp.asarray(y, dtype)


def _num_users(data: tuple[jax.Array, jax.Array]) -> int:
    return int(data[0].shape[0])


@_validate.host_only
def fit_nldp(
    key: Any,
    data: Any,
    *,
    epsilon: Any,
    delta: Any = None,
    r: Any = None,
    tau1: Any = None,
    tau2: Any = None,
    lam: Any = None,
    sigma: float = 1.0,
    num_chunks: int = 1,
    per_user: bool = False,
    cov: Literal["paper", "exact"] = "paper",
    calibration: str = "pld",
    on_invalid: str = "raise",
    secure: bool = False, accountant: Any = None,
) -> FitResult:
    """Fit Algorithm 1 (NLDP, spec 001 §2.1) once to ``n`` users, one record each.

    Calibration: by default (``calibration="pld"``) the two Gaussian releases together are the
    analytic Gaussian mechanism of ``(epsilon, delta)`` (each at ``mu*/sqrt(2)``), and the
    ledger, composing each user's two reports by PLD (the exact Gaussian curve), delivers the
    request at every epsilon; ``calibration="analytic"`` calibrates each on the exact curve at
    ``(epsilon/2, delta/2)`` (basic composition; 0.67 of the request by PLD at epsilon = 1).
    ``calibration="classic-or-analytic"`` is the
    paper's (the classic formula where ``epsilon/2 <= 1``, analytic above): it delivers 0.59
    of epsilon = 1 and 0.35 of 0.1 (``docs/families/ldp_sparse.md``).

    Args:
        key: PRNG key (or int seed) for the users' noise.
        data: the pair ``(x (n, d), y (n,))``.
        epsilon: each user's budget in (0, inf] (two releases at ``epsilon/2``); inf: no noise.
        delta: each user's delta in (0, 1); default ``1/(2n)`` (the one delta policy of every
            ``fit_*``).
        r, tau1, tau2, lam: the clipping radius of ``x``, the shrinkage levels of ``x`` and
            ``y`` and the soft threshold; each defaults to :func:`nldp_hparams` with its
            default constants and ``sigma`` (``r = sigma sqrt(d)``, Theorem 3's
            ``tau`` and ``lambda``). A tuned set, e.g.
            ``nldp_hparams(...)`` or ``heavy_tailed_hparams(...)``, is passed as
            ``fit_nldp(key, (x, y), **hp._asdict())``.
        sigma: the sub-Gaussian scale of the default rules.
        num_chunks, per_user, cov, calibration: as :func:`nldp`.
        on_invalid: ``"raise"`` (default; right for simulations) or ``"clip"`` (real data; see
            the privacy page's "Bad records on real data").
        secure: the floating-point-safe noise path for a real release (see :func:`dpjax.fit`):
            every user's two reports are its statistics rounded to a public grid plus exact
            discrete Gaussian noise (drawn per user, whatever ``per_user`` says), calibrated so
            that the secure ledger (zCDP per user, converted by CKS) delivers each user's
            (epsilon, delta); the users' reports then run eagerly, their noise drawn by
            :func:`dpjax.discrete_noise.discrete_gaussian_batch` (a few dozen times the
            default's time at n = 1e4 to 1e5: ``benchmarks/README.md``).
        accountant: a :class:`dpjax.Accountant` this fit spends from (see :func:`dpjax.fit`):
            refused before anything runs if it would exceed the total.

    Returns:
        :class:`~dpjax.base.FitResult`; its ledger (relation ``"local"``) is each user's
        guarantee. Raises :class:`IndefiniteCovarianceError` instead of returning an estimate
        from an indefinite noisy covariance, and :class:`InfeasibleCovarianceError` (a
        subclass, also a ``ValueError``) before anything runs where public values alone put
        that at probability 0.98 or more whatever the data (:func:`nldp_feasibility`: ``n``
        too small for ``epsilon`` at this ``d``; no radius helps).
    """
    key, (x, y), n, num_chunks, eps, dl = checked_inputs(
        key, data, _xy, _num_users, on_invalid=on_invalid, num_iterations=num_chunks,
        at_most_n=True, iterations_name="num_chunks", epsilon=epsilon, delta=delta)
    d = x.shape[1]
    rule = nldp_hparams(max(n, 2), d, eps, dl, sigma=sigma)
    given = {"r": r, "tau1": tau1, "tau2": tau2}
    for name, value in given.items():
        given[name] = getattr(rule, name) if value is None else _validate.check_scalar(
            _validate.check_truncation(value, eps, name), name)
    if lam is None:
        lam = rule.lam
    elif not float(lam) >= 0:
        raise ValueError(f"lam must be >= 0; got {lam!r}")
    hp = NLDPHyperparams(*(np.float32(v) for v in (eps, dl, given["r"], given["tau1"],
                                                   given["tau2"], lam)))
    est = nldp(num_chunks, per_user=per_user, cov=cov, calibration=calibration)
    est.check(n, hp, x.dtype)  # the public range checks first, as fit would
    n_used = num_chunks * (n // num_chunks)
    feasible, n_min = nldp_feasibility(n_used, d, float(hp.r), float(hp.epsilon),
                                       float(hp.delta), cov=cov, calibration=calibration)
    if not feasible:
        raise InfeasibleCovarianceError(
            f"fit_nldp: n = {n_used} users are too few for epsilon = {float(hp.epsilon):g} at "
            f"d = {d}: the covariance report's noise would leave the noisy covariance "
            f"indefinite with probability >= 0.98 for any data and any radius r; raise n to "
            f">= {n_min:.3g} (or epsilon; or lower d; cov='exact' needs half the n)")
    res = fit(est, key, (x, y), jnp.zeros(d, x.dtype), hp, record=_record_min_eig,
              secure=secure, accountant=accountant)
    min_eig = float(res.state.min_eig)
    if not min_eig > 0:
        need = 512 * d * float(hp.r) ** 4 * math.log(2.5 / float(hp.delta)) / float(
            hp.epsilon) ** 2
        raise IndefiniteCovarianceError(
            f"the noisy covariance is indefinite (lambda_min = {min_eig:.4g}): n = "
            f"{n} is too small for epsilon = {float(hp.epsilon):g}, r = "
            f"{float(hp.r):.4g}; spec 001 §4.2 puts the invertible regime at n >~ "
            f"512 d r^4 log(2.5/delta)/eps^2 = {need:.3g}; a radius r above sigma sqrt(d) "
            f"(the default) adds noise and no signal")
    return res


def _record_min_eig(state, info):
    del info
    return state.min_eig


# --------------------------------------------------------------------------------------------
# Algorithm 3: NLDP with public unlabeled data (spec §2.3)
# --------------------------------------------------------------------------------------------


class PublicHyperparams(NamedTuple):
    epsilon: jax.Array  # () each user's budget; inf: no noise
    delta: jax.Array  # () in (0, 1)
    tau1: jax.Array  # () coordinate shrinkage of x
    tau2: jax.Array  # () shrinkage of y
    lam: jax.Array  # () soft-threshold level

    POSITIVE = ("tau1", "tau2")  # in (0, inf], checked with the budgets by dpjax.fit


class PublicState(NamedTuple):
    beta: jax.Array  # (d,) S_lambda(Sigma_pub^{-1} sxy)
    min_eig: jax.Array  # () lambda_min of the public covariance


class PublicInfo(NamedTuple):
    events: tuple[PrivacyEvent]  # the cross-term release


@functools.cache
def nldp_public(*, release: Literal["full", "alg1-copy"] = "full",
                per_user: bool = False,
                batching: Literal["full", "disjoint"] = "full",
                calibration: str = "analytic") -> Estimator:
    """Algorithm 3 (spec §2.3): private ``x_bar y_bar + N_2``, public ``Sigma_pub = X_pub^T
    X_pub / m`` (not clipped), output ``S_lambda(Sigma_pub^{-1} Sigma_hat_xy)``.

    Args:
        release: the noise of the single release (illegible in the paper): ``"full"``
            (default, budget (eps, delta)) or ``"alg1-copy"`` ((eps/2, delta/2), Algorithm 1's
            variance; conservative).
        per_user: exact per-user noise instead of the aggregate draw (same law).
        batching: ``"full"`` (default; the data set as given) or ``"disjoint"`` (one step whose
            batch is the whole data set, for the sweep engine's streamed data: a study's
            ``simulate`` then returns ``(x, y, x_pub)`` with ``m != n`` rows).
        calibration: the Gaussian calibration of the release, as :func:`nldp` (default
            ``"analytic"``: the request delivered at every epsilon; the paper's
            ``"classic-or-analytic"`` by name).

    Data: ``(x (n, d), y (n,), x_pub (m, d))``; one step. Privacy:
    (eps, delta)-LDP per user (or (eps/2, delta/2) with ``"alg1-copy"``), local relation.
    """
    if release not in ("full", "alg1-copy"):
        raise ValueError(f"release must be 'full' or 'alg1-copy'; got {release!r}")
    if batching not in ("full", "disjoint"):
        raise ValueError(f"batching must be 'full' or 'disjoint'; got {batching!r}")
    _validate.check_choice(calibration, "calibration",
                           tuple(c for c in GAUSSIAN_CALIBRATIONS if c != "mu"))
    name = "ldp-public" + ("/alg1-copy" if release == "alg1-copy" else "") + (
        "/per-user" if per_user else "")
    share = 1.0 if release == "full" else 0.5

    def init(params0):
        return PublicState(jnp.zeros_like(params0), jnp.zeros((), params0.dtype))

    def step(key, state, data, hp):
        del state
        x, y, x_pub = data
        m, d = x.shape
        prods = clip_linf(x, hp.tau1) * clip_linf(y, hp.tau2)[:, None]
        range_xy = cross_range(d, hp.tau1, hp.tau2)
        eps, delta = hp.epsilon * share, hp.delta * share
        if per_user or secure_active():  # exact reports are every user's own
            rel = local_gaussian_mean(key, BoundedStatistic(prods, range_xy, "l2", "local"),
                                      eps, delta, per_user=True, calibration=calibration)
        else:
            rel = local_gaussian_aggregate(
                key, BoundedStatistic(jnp.mean(prods, axis=0), range_xy, "l2", "local"), m,
                eps, delta, calibration=calibration)
        sigma_pub = records_dot(x_pub, x_pub) / x_pub.shape[0]
        beta, min_eig = _solve_threshold(sigma_pub, rel.value, hp.lam)
        beta = jnp.where(min_eig > 0, beta, jnp.zeros_like(beta))
        return PublicState(beta, min_eig), PublicInfo((rel.event,))

    def ledger(n, hp, events):
        (ev,) = events
        eps, delta = float(hp.epsilon), float(hp.delta)
        rel = Release.from_event(ev, "shrunk cross term x_bar y_bar (l2 range 2 sqrt(d) tau1 "
                                 "tau2)", "each user once, its own record")
        notes = ["local DP: each user's own guarantee; the public covariates cost nothing"]
        if release == "alg1-copy":
            notes.append("noise of Algorithm 1's cross term (eps/2, delta/2): the guarantee "
                         "delivered is stronger than requested")
        return Ledger.build(name, [rel], "basic", relation="local",
                            requested=ApproxDP(eps, delta), notes=notes)

    return Estimator(name, init, step, num_steps=1, batching=batching, ledger=ledger)


# --------------------------------------------------------------------------------------------
# Algorithms 2 and 4: LDP iterative hard thresholding (spec §2.5, §2.6, §6.1)
# --------------------------------------------------------------------------------------------


class IHTHyperparams(NamedTuple):
    epsilon: jax.Array  # () each user's budget (pure); inf: the randomizer is the identity
    tau1: jax.Array  # () coordinate shrinkage of x
    tau2: jax.Array  # () shrinkage of y
    eta: jax.Array  # () step size (Alg 2: 1; Alg 4: 2 / (3 gamma))

    POSITIVE = ("tau1", "tau2", "eta")  # in (0, inf], checked with the budgets by dpjax.fit


class IHTState(NamedTuple):
    beta: jax.Array  # (d,) theta_t: k'-sparse, ||theta_t|| <= theta_norm
    t: jax.Array  # () int32 steps done (full batching: rounds, selecting the user group)
    g_sum: jax.Array  # (d,) sum of the current round's reports so far (chunked rounds; else 0)


class IHTInfo(NamedTuple):
    max_grad_norm: jax.Array  # () max_i ||grad_i||_2 over the round's users (the invariant)
    radius: jax.Array  # () the randomizer radius r used
    events: tuple[PrivacyEvent]  # one user's randomised gradient (each user releases once)


def iht_hparams(n: int, epsilon: float, *, sigma: float = 1.0, c_tau: float = math.sqrt(2.0),
                eta: float = 1.0) -> IHTHyperparams:
    """Theorem 7's parameters: ``tau1 = tau2 = c_tau sigma sqrt(log n)``, ``eta = 1``."""
    if not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an integer >= 2; got {n!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0; got {epsilon!r}")
    if not (c_tau > 0 and sigma > 0 and eta > 0):
        raise ValueError(f"c_tau, sigma and eta must be > 0; got {c_tau!r}, {sigma!r}, {eta!r}")
    tau = c_tau * sigma * math.sqrt(math.log(n))
    return IHTHyperparams(*(np.float32(v) for v in (epsilon, tau, tau, eta)))


def _group(x, y, t, num_steps):
    """Group ``t`` of ``n`` users (``floor(n/T)`` each, the remainder in the last group), as
    ``m_max = floor(n/T) + n mod T`` rows starting at ``t floor(n/T)`` with a validity mask;
    the rows past the group (only for ``t < T-1``) are the next group's, masked out."""
    n = x.shape[0]
    m0 = n // num_steps
    m_max = m0 + n % num_steps
    start = t * m0
    xg = jax.lax.dynamic_slice_in_dim(x, start, m_max)
    yg = jax.lax.dynamic_slice_in_dim(y, start, m_max)
    size = jnp.where(t == num_steps - 1, m_max, m0)
    valid = jnp.arange(m_max) < size
    return xg, yg, valid, size


def _check_iht_args(num_steps, k_prime, theta_norm, variant, batching, chunks_per_round) -> None:
    """Refuse :func:`ldp_iht`'s arguments outside their ranges, naming the parameter."""
    if not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be an integer >= 1; got {num_steps!r}")
    if not isinstance(k_prime, int) or k_prime < 1:
        raise ValueError(f"k_prime must be an integer >= 1; got {k_prime!r}")
    if not theta_norm > 0:
        raise ValueError(f"theta_norm must be > 0; got {theta_norm!r}")
    if variant not in ("rectified", "wang_xu_2021_literal"):
        raise ValueError(f"variant must be 'rectified' or 'wang_xu_2021_literal'; "
                         f"got {variant!r}")
    if batching not in ("full", "disjoint"):
        raise ValueError(f"batching must be 'full' or 'disjoint'; got {batching!r}")
    if not isinstance(chunks_per_round, int) or chunks_per_round < 1:
        raise ValueError(f"chunks_per_round must be an integer >= 1; got {chunks_per_round!r}")
    if chunks_per_round > 1 and batching != "disjoint":
        raise ValueError("chunks_per_round > 1 needs batching='disjoint' (the chunks are the "
                         "steps' batches)")


def _iht_users(x, y, t, num_steps, batching):
    """The users of step ``t``: its group sliced from the data set (``"full"``) or the whole
    batch (``"disjoint"``), with a validity mask and the (public) group size."""
    n = x.shape[0]
    if batching == "full":
        if n < num_steps:
            raise ValueError(f"n = {n} users cannot form num_steps = {num_steps} groups")
        return _group(x, y, t, num_steps)
    return x, y, jnp.ones((n,), bool), n


def _iht_reports(key, x, y, theta, hp, k_prime, theta_norm, variant):
    """What the users send: each shrinks its record and randomises its gradient
    ``x_bar (<theta, x_bar> - y_bar)`` within the radius (the gradients are returned too, for
    the invariant ``||g_i|| <= r`` that :class:`IHTInfo` reports)."""
    x_bar = clip_linf(x, hp.tau1)
    y_bar = clip_linf(y, hp.tau2)
    grads = x_bar * (x_bar @ theta - y_bar)[:, None]
    radius = ldp_iht_radius(x.shape[1], k_prime, hp.tau1, hp.tau2, theta_norm=theta_norm,
                            variant=variant)
    reports, event = local_mechanism(
        key, BoundedStatistic(grads, radius, "l2", "local"), l2_ball_mechanism, hp.epsilon)
    return grads, radius, reports, event


def _iht_next_state(state, beta, g_sum, chunks):
    """The state after a step: ``theta`` moves at a round's last step (every step when the
    round is one batch); mid-round steps only accumulate ``g_sum``."""
    if chunks == 1:
        return IHTState(beta, state.t + 1, jnp.zeros_like(g_sum))
    end = (state.t + 1) % chunks == 0
    return IHTState(jnp.where(end, beta, state.beta), state.t + 1,
                    jnp.where(end, jnp.zeros_like(g_sum), g_sum))


def _iht_ledger(name, variant):
    """The ledger of :func:`ldp_iht`: each user's one randomised gradient; the paper-literal
    radius says what it breaks (the utility analysis) and what it keeps (eps-LDP)."""

    def ledger(n, hp, events):
        (ev,) = events
        eps = float(hp.epsilon)
        rel = Release.from_event(ev, "randomised gradient R_eps^r(x_bar (<theta, x_bar> - "
                                 "y_bar))", "each user once, in its group's round")
        notes = ["local DP, sequentially interactive: each user releases once in its own "
                 "round (disjoint groups), so nothing composes across users or rounds"]
        label = "corrected"
        if variant == "wang_xu_2021_literal":
            label = "paper-literal: Wang & Xu (2021) randomizer radius"
            notes.append(
                "the radius sqrt(d) tau1 (R tau1 + tau2) is below the gradient bound "
                "sqrt(d) tau1 (R sqrt(k') tau1 + tau2): gradients beyond the ball are shrunk "
                "before randomising, so the reports are biased (E[R(g)] != g) and the "
                "published utility bound does not hold; the randomizer's eps-LDP does not "
                "depend on its radius and holds")
        return Ledger.build(name, [rel], "parallel", variant=label, relation="local",
                            requested=ApproxDP(eps, 0.0), notes=notes)

    return ledger


@functools.cache
def ldp_iht(num_steps: int, k_prime: int, *, theta_norm: float = 1.0,
            variant: Literal["rectified", "wang_xu_2021_literal"] = "rectified",
            batching: Literal["full", "disjoint"] = "full",
            chunks_per_round: int = 1) -> Estimator:
    r"""LDP iterative hard thresholding: Algorithm 2 (``theta_norm = 1``) or 4 (``= 2``).

    Round ``t`` (one step): the users of group ``S_t`` shrink their record (``tau1``,
    ``tau2``), compute ``g_i = x_bar_i (<theta_{t-1}, x_bar_i> - y_bar_i)`` and send
    ``R_eps^r(g_i)`` (:func:`dpjax.local_randomizers.l2_ball_randomizer`); the server averages
    over ``|S_t|`` (public), steps ``theta' = theta - eta g_bar``, keeps the ``k'`` largest
    entries (``Trunc``, spec §6.2.3) and projects onto the l2 ball of radius ``theta_norm``.

    Radius (:func:`dpjax.local_randomizers.ldp_iht_radius`):

    * ``"rectified"`` (default): ``r = sqrt(d) tau1 (theta_norm sqrt(k') tau1 + tau2)``, the
      exact bound on ``||g_i||`` for every admissible record and every iterate, so every report
      is unbiased (Lemma 8) and the analysis of Theorems 7 / 34 applies.
    * ``"wang_xu_2021_literal"``: the published ``sqrt(d) tau1 (theta_norm tau1 + tau2)``
      (spec §6.1), too small by up to ``sqrt(k')``. The randomizer projects inputs onto its
      ball and its eps-LDP guarantee does not depend on the radius, so the reports are still
      eps-LDP (the ledger says so), but gradients beyond the ball are shrunk: the reports are
      **biased**, ``E[R(g)] != g``, and the published utility analysis does not hold. (The
      radius is not a valid sensitivity: calibrating *additive* noise to it would break
      privacy, see ``tests/test_local_randomizers.py``.)

    Args:
        num_steps: ``T`` rounds = user groups (``n >= T``).
        k_prime: the sparsity ``k'`` of the iterates (``8k`` in Thm 7; capped at ``d``).
        theta_norm: the projection radius (1: Alg 2; 2: Alg 4).
        variant: the randomizer radius, see above.
        batching: ``"full"`` (default): the data set ``(x (n, d), y (n,))``; group ``t`` is
            sliced inside the step, the remainder ``n mod T`` joins the last group (padded
            slice, masked; no user dropped). ``"disjoint"``: step ``t`` gets its group as the
            batch (:func:`dpjax.base.split_batches`, or a streamed ``batch(t)``; equal groups);
            with it the estimator has a padded form (:class:`dpjax.base.Padded`: one study
            program for every ``n`` and ``chunks_per_round`` at these ``T``, ``k'``,
            ``theta_norm`` and ``variant``: the rounds and the sparsity stay static).
        chunks_per_round: ``C >= 1`` (``batching="disjoint"`` only): each round's group arrives
            as ``C`` consecutive disjoint batches, one step each (``num_steps = T C`` steps;
            a streamed ``batch(s)`` then holds ``O(n / (T C))`` users at a time, so memory does
            not grow with ``n``). Steps add their users' reports to ``g_sum``; the last step of
            a round divides by the round's ``C m`` users (public) and updates ``theta``. The
            same algorithm as ``C = 1`` with groups of ``C m`` users.

    Privacy: eps sequentially-interactive LDP per user for any ``eps > 0`` (Thms 7, 34): each
    user releases once, in its own round. ``epsilon = inf``: the identity randomizer (plain
    IHT on shrunk records with disjoint groups).
    """
    _check_iht_args(num_steps, k_prime, theta_norm, variant, batching, chunks_per_round)
    chunks = chunks_per_round
    name = ("ldp-iht" if theta_norm == 1.0 else f"ldp-iht/R={theta_norm:g}") + (
        "/wang-xu-literal" if variant == "wang_xu_2021_literal" else "")

    init = _iht_init

    def step(key, state, data, hp):
        x, y = data
        x, y, valid, size = _iht_users(x, y, state.t, num_steps, batching)
        grads, radius, reports, event = _iht_reports(key, x, y, state.beta, hp, k_prime,
                                                     theta_norm, variant)
        g_sum = state.g_sum + jnp.sum(jnp.where(valid[:, None], reports, 0), axis=0)
        g_bar = g_sum / (jnp.asarray(size, x.dtype) * chunks)  # the round's users: public
        beta = project_l2(trunc(state.beta - hp.eta * g_bar, k_prime), theta_norm)
        norms = jnp.sqrt(jnp.sum(jnp.square(grads), axis=1))
        info = IHTInfo(jnp.max(jnp.where(valid, norms, 0)), jnp.asarray(radius, x.dtype),
                       (event,))
        return _iht_next_state(state, beta, g_sum, chunks), info

    padded = (_padded_iht(num_steps, k_prime, theta_norm, variant) if batching == "disjoint"
              else None)
    return Estimator(name, init, step, num_steps=num_steps * chunks, batching=batching,
                     ledger=_iht_ledger(name, variant),
                     check=functools.partial(_iht_check, num_steps, chunks, k_prime, theta_norm,
                                             variant, batching),
                     padded=padded)


def _iht_init(params0):
    return IHTState(jnp.zeros_like(params0), jnp.zeros((), jnp.int32), jnp.zeros_like(params0))


@functools.lru_cache(maxsize=256)
def _padded_iht(rounds: int, k_prime: int, theta_norm: float, variant: str) -> Padded | None:
    """Disjoint-batch LDP-IHT with the batch size and the number of steps as runtime values:
    one program for every ``n`` and every ``chunks_per_round`` at ``T = rounds`` rounds.

    A round is ``C = sizes.num_steps // rounds`` consecutive steps (``C`` at runtime: the
    bundled studies stream more chunks per round as ``n`` grows, at a fixed ``T``); its
    ``C sizes.count`` users are public and divide the round's sum of reports. The padded rows
    are no users: zeroed before anything reads them, their reports dropped. Each user's
    report draws from ``split(key, rows)[i]``, which JAX's partitionable threefry makes a
    prefix of the longer split of a padded batch (every real user keeps its key); ``None``
    without it. ``T`` stays static: the round boundary needs one of ``T`` and ``C``, and the
    bundled studies vary ``C`` at fixed ``T``."""
    if not jax.config.jax_threefry_partitionable:
        return None

    def step(key, state, batch, hp, sizes):
        x, y = batch
        valid = sizes.mask
        zero = jnp.zeros((), x.dtype)
        x = jnp.where(valid[:, None], x, zero)  # padded rows: no users, whatever they hold
        y = jnp.where(valid, y, zero)
        grads, radius, reports, event = _iht_reports(key, x, y, state.beta, hp, k_prime,
                                                     theta_norm, variant)
        chunks = jnp.maximum(sizes.num_steps // rounds, 1)
        g_sum = state.g_sum + jnp.sum(jnp.where(valid[:, None], reports, 0), axis=0)
        # the round's users: public (C batches of sizes.count users)
        g_bar = g_sum / (sizes.count.astype(x.dtype) * chunks.astype(x.dtype))
        beta = project_l2(trunc(state.beta - hp.eta * g_bar, k_prime), theta_norm)
        norms = jnp.sqrt(jnp.sum(jnp.square(grads), axis=1))
        info = IHTInfo(jnp.max(jnp.where(valid, norms, 0)), jnp.asarray(radius, x.dtype),
                       (event,))
        end = (state.t + 1) % chunks == 0
        return IHTState(jnp.where(end, beta, state.beta), state.t + 1,
                        jnp.where(end, jnp.zeros_like(g_sum), g_sum)), info

    label = "ldp-iht" + ("/wang-xu-literal" if variant == "wang_xu_2021_literal" else "")
    return Padded(f"{label}[T={rounds},k'={k_prime},R={theta_norm:g}]", _iht_init, step,
                  "disjoint")


def _iht_check(num_steps: int, chunks: int, k_prime: int, theta_norm: float, variant: str,
               batching: str, n: int, hp: IHTHyperparams, dtype) -> None:
    """Refuse the shrinkage levels on public values only, before anything runs (a refusal
    never depends on the data): every report has norm ``B`` (:func:`randomizer_scale` of the
    radius, taken at ``d = 1``, the smallest), so a round's sum of reports (at most
    ``n // T + n mod T`` users with groups, ``C (n // (T C))`` with batches) must not overflow
    ``dtype``, and the radius and ``B`` must be normal numbers of it."""
    eps = float(np.asarray(hp.epsilon))
    if not math.isfinite(eps):
        return
    t1, t2 = (float(np.asarray(v)) for v in (hp.tau1, hp.tau2))
    users = (n // num_steps + n % num_steps if batching == "full"
             else chunks * batch_size(n, num_steps * chunks))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        radius = float(ldp_iht_radius(1, k_prime, t1, t2, theta_norm=theta_norm,
                                      variant=variant))
        b = float(randomizer_scale(radius, eps, 1))
        name, value = ("tau1", t1) if theta_norm * t1 >= t2 else ("tau2", t2)
        _validate.check_noise_inputs(name, value, radius, max(users, 1) * b, dtype, scale=b)


# --------------------------------------------------------------------------------------------
# Registration (tests/test_conformance.py runs over these)
# --------------------------------------------------------------------------------------------


def _example_data(n: int, d: int, k: int, seed: int = 0):
    from dpjax.models.sparse_lr import SparseLinearModel, sparse_theta

    key_theta, key_data = jax.random.split(jax.random.key(seed))
    return SparseLinearModel(noise_sd=0.5)(key_data, n, sparse_theta(key_theta, d, k))


def _nldp_example() -> registry.Example:
    n, d = 400, 4
    x, y = _example_data(n, d, 2)

    def hparams(eps):
        return NLDPHyperparams(*map(jnp.float32, (eps, 1e-3, 3.0, 2.0, 2.0, 0.05)))

    return registry.Example((x, y), jnp.zeros(d), hparams)


def _public_example() -> registry.Example:
    n, d = 400, 4
    x, y = _example_data(n, d, 2)
    x_pub, _ = _example_data(300, d, 2, seed=1)

    def hparams(eps):
        return PublicHyperparams(*map(jnp.float32, (eps, 1e-3, 2.0, 2.0, 0.05)))

    # x_pub is the public unlabeled sample: neighbouring data sets differ in a user's (x, y) only
    return registry.Example((x, y, x_pub), jnp.zeros(d), hparams, public=(False, False, True))


def _iht_example() -> registry.Example:
    n, d = 403, 6  # n not a multiple of T: the remainder joins the last group
    x, y = _example_data(n, d, 2)

    def hparams(eps):
        return IHTHyperparams(*map(jnp.float32, (eps, 2.0, 2.0, 1.0)))

    return registry.Example((x, y), jnp.zeros(d), hparams)


_EPS = lambda eps: ("epsilon", eps)  # noqa: E731

registry.register(registry.Entry("ldp-nldp", "ldp-sparse", lambda: nldp(), _nldp_example,
                                 requested=_EPS))
registry.register(registry.Entry("ldp-nldp/chunked-per-user", "ldp-sparse",
                                 lambda: nldp(2, per_user=True), _nldp_example,
                                 requested=_EPS))
registry.register(registry.Entry("ldp-public", "ldp-sparse", lambda: nldp_public(),
                                 _public_example, requested=_EPS))
registry.register(registry.Entry("ldp-iht", "ldp-sparse", lambda: ldp_iht(3, 4),
                                 _iht_example, requested=_EPS))
registry.register(registry.Entry("ldp-iht/general-cov", "ldp-sparse",
                                 lambda: ldp_iht(3, 4, theta_norm=2.0), _iht_example,
                                 requested=_EPS))
registry.register(registry.Entry("ldp-iht/wang-xu-literal", "ldp-sparse",
                                 lambda: ldp_iht(3, 4, variant="wang_xu_2021_literal"),
                                 _iht_example, requested=_EPS))
