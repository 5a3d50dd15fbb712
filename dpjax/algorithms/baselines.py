r"""The standard baselines a practitioner compares against, as estimators of the library.

Four one-step estimators (``num_steps = 1``), each with a ledger, a registry entry (so the
conformance suite and the canary audit run them) and a ``fit_*`` function:

* **AdaSSP** (Wang 2018, "Revisiting differentially private linear regression: optimal and
  adaptive prediction & estimation in unbounded domain", Algorithm 2): sufficient-statistics
  perturbation for linear regression with an adaptive ridge.
* **Objective perturbation** for logistic regression (Chaudhuri, Monteleoni & Sarwate 2011,
  Algorithm 2, pure epsilon, by default with one log-determinant term and a planned split of
  epsilon, ``"tight"``; the paper's rule as ``"pure"``; the (epsilon, delta) Gaussian variant
  of Kifer, Smith & Thakurta 2012).
* **Sufficient-statistics perturbation with Laplace noise** for linear regression (pure
  epsilon; ``X^T X`` and ``X^T y`` with their l1 sensitivities and a simple ridge rule): more
  accurate than AdaSSP at small ``d``.
* **The bounded mean** with Laplace (pure epsilon) or Gaussian noise.

Neighbouring relation: replace-one (data sets of the same size ``n`` differing in one record),
as every central estimator of dpjax. Records that exceed the public bounds are clipped onto
them (rows of ``x`` onto the l2 ball of radius ``x_bound``, ``y`` onto its interval, the mean's
records onto their box), so every sensitivity below holds for any data.

An intercept: none of them has an intercept argument. Append a constant column to ``x``
inside the bound (e.g. the column ``c`` with ``x_bound^2 = B^2 + c^2`` where ``B`` bounds the
rows of the features): its coefficient is the intercept (``dpjax.sklearn`` does this).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _float_sampler, _validate, mechanisms, registry
from dpjax.accounting import ApproxDP, Ledger, Release
from dpjax.base import Estimator, FitResult, as_key, fit
from dpjax.mechanisms import (
    BoundedStatistic,
    PrivacyEvent,
    bounded_mean,
    clip_l2,
    clip_linf,
    gaussian_mechanism,
    gaussian_mechanism_zcdp,
    laplace_mechanism,
    records_dot,
    sanitize,
)
from dpjax.mechanisms.calibration import gaussian_multiplier_analytic

__all__ = [
    "ADASSP_SHARES",
    "AdaSSPHyperparams",
    "BaselineInfo",
    "BaselineState",
    "BoundedMeanHyperparams",
    "GaussianBoundedMeanHyperparams",
    "GaussianObjectivePerturbationHyperparams",
    "LOGISTIC_SMOOTHNESS",
    "MEAN_MECHANISMS",
    "NEWTON_STEPS",
    "ObjectivePerturbationHyperparams",
    "SSPLaplaceHyperparams",
    "adassp",
    "bounded_mean_estimator",
    "fit_adassp",
    "fit_bounded_mean",
    "fit_objective_perturbation",
    "fit_ssp_laplace",
    "objective_perturbation",
    "objective_perturbation_terms",
    "ssp_laplace",
    "ssp_laplace_sensitivities",
    "ssp_laplace_share",
]


class BaselineState(NamedTuple):
    beta: jax.Array  # (d,) the released estimate; init is BaselineState(params0)


class BaselineInfo(NamedTuple):
    events: tuple[PrivacyEvent, ...]  # the step's releases
    grad_norm: jax.Array  # () objective perturbation: ||grad|| of the perturbed objective at
    #                       the released beta (0 for the other two: nothing is minimised)
    released: tuple[jax.Array, ...] = ()  # AdaSSP: its three noisy statistics (the releases
    #                                       beta is computed from; () for the other two)


def _init(params0: Any) -> BaselineState:
    return BaselineState(jnp.asarray(params0))


def _rho_of(epsilon: Any, delta: Any) -> Any:
    """``rho = mu^2 / 2`` of the analytic Gaussian mechanism of ``(epsilon, delta)`` (Balle &
    Wang 2018): Gaussian releases whose ``mu_i^2`` add up to ``mu^2`` compose to exactly that
    Gaussian (Dong, Roth & Su 2022), which delivers ``(epsilon, delta)``; inf at epsilon =
    inf."""
    m = gaussian_multiplier_analytic(epsilon, delta)  # 1 / mu (0 at epsilon = inf)
    return 0.5 / (m * m)


# --------------------------------------------------------------------------------------------
# AdaSSP (Wang 2018, Algorithm 2)
# --------------------------------------------------------------------------------------------

#: AdaSSP's three Gaussian releases and their shares of ``mu^2`` (the paper's epsilon/3 each):
#: the smallest eigenvalue of X^T X, the upper triangle of X^T X, and X^T y
ADASSP_SHARES = (1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0)


class AdaSSPHyperparams(NamedTuple):
    epsilon: jax.Array  # () budget of the whole fit (three releases); inf: no noise (OLS)
    delta: jax.Array  # () in (0, 1)
    x_bound: jax.Array  # () public l2 bound on a row of x (rows beyond it are clipped)
    y_bound: jax.Array  # () public bound on |y| (values beyond it are clipped)
    zeta: jax.Array  # () the paper's failure probability rho of the eigenvalue bound (0.05)

    POSITIVE = ("x_bound", "y_bound", "zeta")


def _adassp_stats(x: jax.Array, y: jax.Array, hp: AdaSSPHyperparams):
    """The three bounded statistics of AdaSSP on clipped records (replace-one, l2):

    * ``lambda_min(X^T X)``: sensitivity ``x_bound^2`` (Weyl: ``xx^T - x'x'^T`` has
      eigenvalues in ``[-x_bound^2, x_bound^2]``);
    * the upper triangle of ``X^T X`` (``d (d + 1) / 2`` entries, the symmetric noise of the
      paper): sensitivity ``sqrt(2) x_bound^2`` (its squared norm is
      ``(||A||_F^2 + ||diag A||^2) / 2 <= 2 x_bound^4`` for ``A = xx^T - x'x'^T``; attained by
      orthogonal records);
    * ``X^T y``: sensitivity ``2 x_bound y_bound``.
    """
    xc = clip_l2(x, hp.x_bound)
    yc = clip_linf(y, hp.y_bound)
    xtx = records_dot(xc, xc)
    d = x.shape[1]
    iu = jnp.triu_indices(d)
    xb2 = jnp.square(hp.x_bound)
    lam_min = jnp.linalg.eigvalsh(xtx)[0]
    return (BoundedStatistic(lam_min, xb2, "l2"),
            BoundedStatistic(xtx[iu], jnp.sqrt(2.0) * xb2, "l2"),
            BoundedStatistic(records_dot(xc, yc), 2.0 * hp.x_bound * hp.y_bound, "l2"))


def _adassp_step(key: jax.Array, state: BaselineState, data, hp: AdaSSPHyperparams):
    """Algorithm 2 of Wang (2018) with each Gaussian calibrated from its own sensitivity:
    release ``i`` gets ``rho_i = share_i rho`` with ``rho = mu^2/2`` the analytic Gaussian's
    of the request, so the three compose to exactly the requested ``(epsilon, delta)``."""
    del state
    x, y = data
    d = x.shape[1]
    k_lam, k_xtx, k_xty = jax.random.split(key, 3)
    s_lam, s_xtx, s_xty = _adassp_stats(x, y, hp)
    rho = _rho_of(hp.epsilon, hp.delta)
    lam_hat, ev_lam = gaussian_mechanism_zcdp(k_lam, s_lam, rho * ADASSP_SHARES[0])
    upper, ev_xtx = gaussian_mechanism_zcdp(k_xtx, s_xtx, rho * ADASSP_SHARES[1])
    xty, ev_xty = gaussian_mechanism_zcdp(k_xty, s_xty, rho * ADASSP_SHARES[2])
    dtype = upper.dtype
    log6 = jnp.log(6.0 / jnp.asarray(hp.delta, dtype))
    # the paper's high-probability lower bound on lambda_min: the release minus sqrt(log(6 /
    # delta)) of its noise std (the paper's log(6/delta) / (eps/3) ||X||^2)
    lam_low = jnp.maximum(lam_hat - ev_lam.scale.astype(dtype) * jnp.sqrt(log6), 0.0)
    # the adaptive ridge: the paper's sqrt(d log(6/delta) log(2 d^2 / rho)) ||X||^2 / (eps/3)
    # is the noise std of X^T X times sqrt(d log(2 d^2 / rho)), a bound on its operator norm
    bound = ev_xtx.scale.astype(dtype) * jnp.sqrt(
        d * jnp.log(2.0 * d * d / jnp.asarray(hp.zeta, dtype)))
    lam = jnp.maximum(bound - lam_low, 0.0)
    iu = jnp.triu_indices(d)
    m = jnp.zeros((d, d), dtype).at[iu].set(upper)
    xtx = m + m.T - jnp.diag(jnp.diag(m))
    beta = jnp.linalg.solve(xtx + lam * jnp.eye(d, dtype=dtype), xty)
    return BaselineState(beta), BaselineInfo((ev_lam, ev_xtx, ev_xty), jnp.zeros((), dtype),
                                             (lam_hat, upper, xty))


_ADASSP_STATISTICS = (
    "lambda_min(X^T X) of the clipped rows (then a lower bound and the adaptive ridge)",
    "upper triangle of X^T X (symmetric noise)",
    "X^T y (y clipped to [-y_bound, y_bound])",
)


def _adassp_ledger(n: int, hp: AdaSSPHyperparams, events) -> Ledger:
    """The three Gaussian releases composed by PLD (Gaussian releases alone: the exact curve of
    ``mu = sqrt(sum mu_i^2)``), which delivers the requested (epsilon, delta)."""
    eps, delta = float(np.asarray(hp.epsilon)), float(np.asarray(hp.delta))
    releases = [Release.from_event(ev, stat, f"all {n} records")
                for ev, stat in zip(events, _ADASSP_STATISTICS)]
    notes = [f"n = {n}, x_bound = {float(np.asarray(hp.x_bound)):g}, y_bound = "
             f"{float(np.asarray(hp.y_bound)):g}, zeta = {float(np.asarray(hp.zeta)):g}",
             "AdaSSP (Wang 2018, Algorithm 2): each release's share of mu^2 is 1/3 (the "
             "paper's epsilon/3 each), mu the analytic Gaussian mechanism's of the request; "
             "the ridge lambda and the eigenvalue lower bound are post-processing of the "
             "releases"]
    return Ledger.build("adassp", releases, "pld", requested=ApproxDP(eps, delta),
                        delta=delta, notes=notes)


def _ssp_check(n: int, hp: AdaSSPHyperparams | SSPLaplaceHyperparams, dtype) -> None:
    """The bounds of both sufficient-statistics perturbations (AdaSSP and Laplace SSP)."""
    xb, yb = float(np.asarray(hp.x_bound)), float(np.asarray(hp.y_bound))
    if not math.isfinite(float(np.asarray(hp.epsilon))):
        return
    _validate.check_noise_inputs("x_bound", xb, xb * xb, n * xb * xb, dtype)
    _validate.check_noise_inputs("y_bound", yb, 2.0 * xb * yb, n * xb * yb, dtype)


@functools.cache
def adassp() -> Estimator:
    """AdaSSP (Wang 2018, Algorithm 2) as an :class:`~dpjax.base.Estimator`: one step that
    releases ``lambda_min(X^T X)``, ``X^T X`` and ``X^T y`` of the clipped records, each by a
    Gaussian mechanism calibrated from its own sensitivity (see :func:`_adassp_stats`) with a
    third of ``mu^2``, and returns ``(X^T X~ + lambda I)^{-1} X^T y~`` with the paper's adaptive
    ridge ``lambda = max(0, sigma_2 sqrt(d log(2 d^2 / zeta)) - lambda_min~)`` and
    ``lambda_min~ = max(0, lambda_min^ - sigma_1 sqrt(log(6 / delta)))``. Data ``(x, y)``;
    hyperparameters :class:`AdaSSPHyperparams`. At epsilon = inf every noise is 0, the ridge
    is 0 and the estimate is ordinary least squares (no intercept)."""
    return Estimator("adassp", _init, _adassp_step, num_steps=1, batching="full",
                     ledger=_adassp_ledger, check=_ssp_check)


# --------------------------------------------------------------------------------------------
# Sufficient-statistics perturbation with Laplace noise (pure epsilon)
# --------------------------------------------------------------------------------------------


class SSPLaplaceHyperparams(NamedTuple):
    """Pure epsilon-DP: no delta."""

    epsilon: jax.Array  # () budget of the whole fit (two releases); inf: no noise (OLS)
    x_bound: jax.Array  # () public l2 bound on a row of x (rows beyond it are clipped)
    y_bound: jax.Array  # () public bound on |y| (values beyond it are clipped)

    POSITIVE = ("x_bound", "y_bound")


def ssp_laplace_sensitivities(d: int, x_bound: Any, y_bound: Any) -> tuple[Any, Any]:
    r"""The replace-one l1 sensitivities of SSP's two statistics, rows clipped to ``||x|| <=
    X``, ``|y| <= Y``:

    * the upper triangle ``T(x)`` of ``x x^T`` (``d (d + 1) / 2`` entries): ``||T(x)||_1 =
      (||x||_1^2 + ||x||_2^2) / 2 <= (d + 1) X^2 / 2`` (``||x||_1 <= sqrt(d) ||x||_2``), so
      ``||T(x) - T(x')||_1 <= (d + 1) X^2``; at ``d = 1``, ``x^2`` and ``x'^2`` both lie in
      ``[0, X^2]``: ``X^2`` (attained);
    * ``x y``: ``||x y - x' y'||_1 <= ||x||_1 |y| + ||x'||_1 |y'| <= 2 sqrt(d) X Y``
      (attained by ``x = x'`` with equal entries of magnitude ``X / sqrt(d)``, ``y = -y' =
      Y``).
    """
    xx = x_bound * x_bound * (1.0 if d == 1 else float(d + 1))
    return xx, 2.0 * math.sqrt(d) * x_bound * y_bound


def ssp_laplace_share(d: int) -> float:
    r"""The share of epsilon the ``X^T X`` release gets (a function of ``d`` alone).

    With Laplace scales ``b_1 = S_1 / eps_1`` (``X^T X``) and ``b_2 = S_2 / eps_2`` (``X^T
    y``), the estimate's error ``(X^T X)^{-1} (e_2 - E beta)`` has ``E||e_2||^2 = 2 d b_2^2``
    and ``E||E beta||^2 <= 2 d b_1^2 ||beta||^2``: the split minimising ``b_2^2 + r^2 b_1^2``
    under ``eps_1 + eps_2 = eps`` is ``eps_i`` proportional to ``w_i^{1/3}``, ``w_1 = (r
    S_1)^2``, ``w_2 = S_2^2``. The planned norm is ``r = Y / X`` (the largest ``||beta||``
    whose prediction ``x.beta`` stays within ``[-Y, Y]`` on the whole ball ``||x|| <= X``), so
    ``w_1 / w_2 = (S_1 / X^2)^2 / (4 d)``: ``1/4`` at ``d = 1``, ``(d + 1)^2 / (4 d)`` above.
    """
    s1 = 1.0 if d == 1 else float(d + 1)
    ratio = (s1 * s1 / (4.0 * d)) ** (1.0 / 3.0)
    return ratio / (1.0 + ratio)


def _ssp_laplace_stats(x: jax.Array, y: jax.Array, hp: SSPLaplaceHyperparams):
    """The upper triangle of ``X^T X`` and ``X^T y`` of the clipped records, with their l1
    sensitivities (:func:`ssp_laplace_sensitivities`)."""
    xc = clip_l2(x, hp.x_bound)
    yc = clip_linf(y, hp.y_bound)
    d = x.shape[1]
    s_xx, s_xy = ssp_laplace_sensitivities(d, hp.x_bound, hp.y_bound)
    iu = jnp.triu_indices(d)
    return (BoundedStatistic(records_dot(xc, xc)[iu], s_xx, "l1"),
            BoundedStatistic(records_dot(xc, yc), s_xy, "l1"))


def _ssp_laplace_step(key: jax.Array, state: BaselineState, data, hp: SSPLaplaceHyperparams):
    """Two Laplace releases (``eps_1 = share eps`` and ``(1 - share) eps``), then the ridge
    ``lambda = max(0, t - lambda_min(X^T X~))`` with ``t = sqrt(2) d b_1`` (the root mean square
    of the Frobenius norm of the symmetric noise matrix, a bound on that of its operator norm)
    and ``beta = (X^T X~ + lambda I)^{-1} X^T y~``: post-processing of the releases."""
    del state
    x, y = data
    d = x.shape[1]
    k_xx, k_xy = jax.random.split(key)
    s_xx, s_xy = _ssp_laplace_stats(x, y, hp)
    share = ssp_laplace_share(d)
    upper, ev_xx = laplace_mechanism(k_xx, s_xx, hp.epsilon * share)
    xty, ev_xy = laplace_mechanism(k_xy, s_xy, hp.epsilon * (1.0 - share))  # inf at inf
    dtype = upper.dtype
    iu = jnp.triu_indices(d)
    m = jnp.zeros((d, d), dtype).at[iu].set(upper)
    xtx = m + m.T - jnp.diag(jnp.diag(m))
    t = jnp.sqrt(2.0) * d * jnp.max(ev_xx.scale).astype(dtype)
    lam = jnp.maximum(t - jnp.linalg.eigvalsh(xtx)[0], 0.0)
    beta = jnp.linalg.solve(xtx + lam * jnp.eye(d, dtype=dtype), xty)
    return BaselineState(beta), BaselineInfo((ev_xx, ev_xy), jnp.zeros((), dtype),
                                             (upper, xty))


def _ssp_laplace_ledger(n: int, hp: SSPLaplaceHyperparams, events) -> Ledger:
    eps = float(np.asarray(hp.epsilon))
    releases = [Release.from_event(ev, stat, f"all {n} records") for ev, stat in zip(
        events, ("upper triangle of X^T X (l1 sensitivity (d + 1) x_bound^2; x_bound^2 at d = "
                 "1)", "X^T y (l1 sensitivity 2 sqrt(d) x_bound y_bound)"))]
    notes = [f"n = {n}, x_bound = {float(np.asarray(hp.x_bound)):g}, y_bound = "
             f"{float(np.asarray(hp.y_bound)):g}",
             "sufficient-statistics perturbation with Laplace noise: epsilon split by the rule "
             "of ssp_laplace_share (public: d alone); the ridge and the solve are "
             "post-processing of the two releases"]
    return Ledger.build("ssp-laplace", releases, "basic", requested=ApproxDP(eps, 0.0),
                        notes=notes)


@functools.cache
def ssp_laplace() -> Estimator:
    """Sufficient-statistics perturbation for linear regression with Laplace noise, pure
    epsilon-DP (replace-one), as an :class:`~dpjax.base.Estimator`: the upper triangle of
    ``X^T X`` and ``X^T y`` of the clipped records, each released by the Laplace mechanism
    with its l1 sensitivity (:func:`ssp_laplace_sensitivities`) and its share of epsilon
    (:func:`ssp_laplace_share`), then ``beta = (X^T X~ + lambda I)^{-1} X^T y~`` with the ridge
    ``lambda = max(0, sqrt(2) d b_1 - lambda_min(X^T X~))`` that lifts the released matrix's
    smallest eigenvalue to the typical size of its noise (a simpler rule than AdaSSP's, which
    spends a third release on ``lambda_min``). Basic composition of the two releases:
    ``eps_1 + eps_2 = eps``. At small ``d`` this is more accurate than AdaSSP at the same
    epsilon (a Laplace coordinate at epsilon has about a third of the standard deviation of a
    Gaussian one at delta 1e-6); its l1 sensitivity grows as ``d X^2``, so AdaSSP wins at
    large ``d``. Data ``(x, y)``; hyperparameters :class:`SSPLaplaceHyperparams`. At epsilon
    = inf: ordinary least squares (no intercept)."""
    return Estimator("ssp-laplace", _init, _ssp_laplace_step, num_steps=1, batching="full",
                     ledger=_ssp_laplace_ledger, check=_ssp_check)


# --------------------------------------------------------------------------------------------
# Objective perturbation (Chaudhuri, Monteleoni & Sarwate 2011; Kifer, Smith & Thakurta 2012)
# --------------------------------------------------------------------------------------------

#: ``c``: the logistic loss's second derivative is at most 1/4
LOGISTIC_SMOOTHNESS = 0.25
#: the damped Newton steps after the one noise draw (static)
NEWTON_STEPS = 40
#: the step lengths each damped Newton step tries: 1, 1/2, ..., 2^-11
_STEP_LENGTHS = tuple(2.0 ** -k for k in range(12))
#: the variants: ``"tight"`` (delta = 0, the default: one log-determinant term and a split
#: of epsilon planned on public values), ``"pure"`` (delta = 0, Chaudhuri et al.'s rule, by
#: name) and ``"gaussian"`` (delta > 0)
OP_VARIANTS = ("tight", "pure", "gaussian")
#: the variants with pure epsilon-DP (noise density ``exp(-||b|| / scale)``)
_OP_PURE = ("tight", "pure")
#: ``r``: the norm of the coefficients the "tight" split plans for (the starting radius of
#: dpjax's GLM schedules, :data:`dpjax.algorithms.dp_glm.START_RADIUS`): a public planning
#: value, never read from the data
OP_PLAN_NORM = 3.0


class ObjectivePerturbationHyperparams(NamedTuple):
    """The pure variant's (epsilon-DP: no delta)."""

    epsilon: jax.Array  # () budget; inf: no noise (the regularised logistic regression)
    x_bound: jax.Array  # () public l2 bound on a row of x (rows beyond it are clipped)
    lam: jax.Array  # () the ridge Lambda >= 0 of the objective (1/n) sum loss + Lambda/2 ||b||^2

    POSITIVE = ("x_bound",)


class GaussianObjectivePerturbationHyperparams(NamedTuple):
    """The Gaussian variant's ((epsilon, delta)-DP)."""

    epsilon: jax.Array  # () budget; inf: no noise (the regularised logistic regression)
    delta: jax.Array  # () in (0, 1)
    x_bound: jax.Array  # () public l2 bound on a row of x (rows beyond it are clipped)
    lam: jax.Array  # () the ridge Lambda >= 0, as in ObjectivePerturbationHyperparams

    POSITIVE = ("x_bound",)


def objective_perturbation_terms(n: int, hp: ObjectivePerturbationHyperparams, variant: str,
                                 xp: Any = jnp, d: int | None = None) -> tuple[Any, Any, Any]:
    r"""``(Gamma, eps_jac, eps_noise)``: the total ridge on the summed objective, the part of
    epsilon the Jacobian (the regulariser) accounts for, and the part left to the noise; in
    ``xp`` (``jnp`` in the kernel, ``np`` on the host in float64 for the ledger). ``d``, the
    number of coefficients, is needed by ``"tight"`` only.

    With rows clipped to ``||x|| <= X`` the loss of one record has gradient norm at most
    ``X`` (``|l'| <= 1``) and a rank-one Hessian of eigenvalue at most ``c X^2``
    (``l'' <= c = 1/4``): the smoothness constant enters as ``c X^2`` (the papers' ``c`` with
    ``||x|| <= 1``), and the noise scales with ``X``.

    * ``"pure"`` (Chaudhuri et al. 2011, Algorithm 2, the paper's rule):
      ``eps' = eps - 2 log(1 + c X^2 / (n Lambda))``; if ``eps' > 0`` no extra ridge, else the
      extra ridge ``Delta`` with ``n (Lambda + Delta) = c X^2 / (e^{eps/4} - 1)`` and
      ``eps' = eps / 2``.
    * ``"gaussian"`` (Kifer et al. 2012's rule in its exact form): the total ridge
      ``Gamma = max(n Lambda, c X^2 / (e^{eps/2} - 1))``, so ``eps_jac = log(1 + c X^2 /
      Gamma) <= eps / 2``, and the rest ``eps - eps_jac`` goes to the noise.
    * ``"tight"`` (one log-determinant term, see :func:`objective_perturbation`): ``u =
      eps / (1 + k)``, ``k = (4 d (d + 1) / (c X r)^2)^{1/3}`` (``r`` =
      :data:`OP_PLAN_NORM`), the total ridge ``Gamma = max(n Lambda, c X^2 / u)``,
      ``eps_jac = log(1 + c X^2 / Gamma) <= log(1 + u) < u`` and ``eps_noise = eps -
      eps_jac``. The split minimises the error proxy ``E||b||^2 / eps_noise^2 + Gamma^2 r^2``
      (the displacement of the minimiser, ``(b + Gamma beta) / (n alpha + Gamma)``
      linearised, at large ``n`` where ``Gamma << n alpha``; ``E||b||^2 = d (d + 1) (2 X /
      eps_noise)^2`` for the noise of density ``exp(-eps_noise ||b|| / (2 X))``), with
      ``eps_jac`` replaced by its upper bound ``u = c X^2 / Gamma``: ``((eps - u) / u)^3 = 4 d
      (d + 1) X^2 / (c X^2 r)^2``. A closed form of public values, continuous in all of them
      (the kernel in float32 and the ledger in float64 agree to round-off).
    """
    c = LOGISTIC_SMOOTHNESS
    eps, lam, xb = (xp.asarray(v, xp.float64) if xp is np else v
                    for v in (hp.epsilon, hp.lam, hp.x_bound))
    cx2 = c * xb * xb
    g_user = n * lam
    with np.errstate(divide="ignore", invalid="ignore"):
        if variant == "pure":
            jac_user = 2.0 * xp.log1p(cx2 / g_user)
            eps_p = eps - jac_user
            ok = eps_p > 0
            gamma = xp.where(ok, g_user, cx2 / xp.expm1(eps / 4.0))
            eps_noise = xp.where(ok, eps_p, eps / 2.0)
            eps_jac = 2.0 * xp.log1p(cx2 / gamma)
        elif variant == "tight":
            if d is None:
                raise ValueError("d (the number of coefficients) is needed by the 'tight' "
                                 "variant's split of epsilon")
            k = (4.0 * d * (d + 1) / (c * xb * OP_PLAN_NORM) ** 2) ** (1.0 / 3.0)
            u = eps / (1.0 + k)  # inf at eps = inf: no extra ridge
            gamma = xp.maximum(g_user, cx2 / u)
            eps_jac = xp.log1p(cx2 / gamma)
            eps_noise = xp.where(xp.isinf(eps), xp.inf, eps - eps_jac)
        else:
            gamma = xp.maximum(g_user, cx2 / xp.expm1(eps / 2.0))
            eps_jac = xp.log1p(cx2 / gamma)
            eps_noise = eps - eps_jac
    return gamma, eps_jac, eps_noise


def _gaussian_mu(eps_noise: Any, delta: Any, xp: Any = jnp) -> Any:
    """The largest ``mu = 2 X / sigma`` with ``mu t + mu^2 / 2 <= eps_noise``,
    ``t = sqrt(2 log(1 / delta))`` (see :func:`objective_perturbation`); inf at inf."""
    t = xp.sqrt(2.0 * xp.log(1.0 / delta))
    with np.errstate(invalid="ignore"):
        mu = 2.0 * eps_noise / (xp.sqrt(t * t + 2.0 * eps_noise) + t)
    return xp.where(xp.isinf(eps_noise), xp.inf, mu)


def _logistic_objective(x, s, gamma, b):
    """Value differences, gradient and Hessian of ``F(beta) = sum_i softplus(-s_i x_i.beta) +
    Gamma/2 ||beta||^2 + b.beta`` (``s_i`` in {-1, +1})."""

    def grad_hess(beta):
        m = s * (x @ beta)
        p = jax.nn.sigmoid(-m)  # -dl/dm
        g = -records_dot(x, s * p) + gamma * beta + b
        w = p * (1.0 - p)
        h = records_dot(x * w[:, None], x) + gamma * jnp.eye(x.shape[1], dtype=x.dtype)
        return g, h

    def decrease(beta, direction, alpha):
        """``F(beta + alpha direction) - F(beta)``, computed term by term (precise near the
        optimum, where F itself is large and its change small)."""
        m = s * (x @ beta)
        dm = s * (x @ direction)
        loss = jnp.sum(jax.nn.softplus(-(m + alpha * dm)) - jax.nn.softplus(-m))
        ridge = gamma * (alpha * (beta @ direction) + 0.5 * alpha**2 * (direction @ direction))
        return loss + ridge + alpha * (b @ direction)

    return grad_hess, decrease


def _newton(x, s, gamma, b, num_steps: int):
    """Damped Newton from 0 threaded through ``lax.scan``: each step takes the Newton direction
    and the longest of the step lengths 1, 1/2, ..., 2^-11 that does not increase ``F`` (the
    objective is ``Gamma``-strongly convex and smooth, so the full step is taken near the
    minimiser: quadratic convergence). Returns ``(beta, ||grad F(beta)||)``."""
    grad_hess, decrease = _logistic_objective(x, s, gamma, b)
    alphas = jnp.asarray(_STEP_LENGTHS, x.dtype)

    def body(beta, _):
        g, h = grad_hess(beta)
        direction = -jnp.linalg.solve(h, g)
        dec = jax.vmap(lambda a: decrease(beta, direction, a))(alphas)
        ok = dec <= 0.0
        alpha = jnp.where(ok.any(), alphas[jnp.argmax(ok)], 0.0)
        return beta + alpha * direction, None

    beta0 = jnp.zeros(x.shape[1], x.dtype)
    beta, _ = jax.lax.scan(body, beta0, None, length=num_steps)
    return beta, jnp.linalg.norm(grad_hess(beta)[0])


def _op_noise(key: jax.Array, d: int, eps_noise, delta, x_bound, variant: str, dtype):
    """The noise vector ``b`` and its event (kind ``"objective-perturbation"``: l2
    sensitivity ``2 X`` of the summed gradient, the scale drawn, the variant's delta, and
    ``s = d``, the dimension of ``b``).

    ``"tight"``, ``"pure"``: density proportional to ``exp(-||b|| / scale)``, ``scale = 2 X /
    eps_noise``: ``||b|| ~ Gamma(d, scale)``, drawn as the sum of ``d`` absolute
    Laplace(scale) draws, and a uniform direction. ``"gaussian"``: ``b ~ N(0, sigma^2 I)``,
    ``sigma = 2 X / mu``. Both draw through :mod:`dpjax.mechanisms` (so the audit's planted
    bugs reach them)."""
    sens = 2.0 * jnp.asarray(x_bound, dtype)
    stat = BoundedStatistic(jnp.zeros(d, dtype), sens, "l2")
    if variant in _OP_PURE:
        scale = mechanisms.laplace_scale(sens, eps_noise).astype(dtype)
        k_norm, k_dir = jax.random.split(key)
        radius = jnp.sum(jnp.abs(mechanisms.laplace_noise(k_norm, (d,), scale, dtype)))
        u = jax.random.normal(k_dir, (d,), dtype)
        b = radius * u / jnp.maximum(jnp.linalg.norm(u), jnp.finfo(dtype).tiny)
        ev_delta = 0.0
    else:
        mu = _gaussian_mu(eps_noise, jnp.asarray(delta, dtype))
        scale = mechanisms.gaussian_sigma_zcdp(sens, 0.5 * mu * mu).astype(dtype)
        b = mechanisms.gaussian_noise(key, (d,), scale, dtype)
        ev_delta = delta
    event = mechanisms._event("objective-perturbation", stat, scale, delta=ev_delta, s=d,
                              dtype=dtype)
    return b, event


def _make_op_step(variant: str, newton_steps: int):
    def step(key: jax.Array, state: BaselineState, data, hp: ObjectivePerturbationHyperparams):
        del state
        if mechanisms.secure_active():
            raise ValueError("secure=True: objective perturbation has no floating-point-safe "
                             "path (a perturbed objective is not a noisy statistic on a grid)")
        x, y = data
        n, d = x.shape
        dtype = x.dtype
        xc = clip_l2(x, hp.x_bound)
        s = jnp.where(sanitize(y) > 0.5, 1.0, -1.0).astype(dtype)  # {0, 1} -> {-1, +1}
        gamma, _, eps_noise = objective_perturbation_terms(n, hp, variant, d=d)
        b, event = _op_noise(key, d, eps_noise, getattr(hp, "delta", 0.0), hp.x_bound,
                             variant, dtype)
        beta, gnorm = _newton(xc, s, gamma.astype(dtype), b, newton_steps)
        return BaselineState(beta), BaselineInfo((event,), gnorm)

    return step


def _op_sampler_floor(variant: str, ratio: float, d: int) -> tuple[str, float]:
    """The float32 sampler of ``b`` and the delta it cannot go below (``ratio = 2 X / scale``),
    by the convention of every dpjax release (:func:`dpjax._float_sampler.delta_floor`:
    neighbours whose statistics differ by the sensitivity, at the edge of the support).
    Gaussian variant: the normal sampler's floor at ``2 X / sigma``. Pure variant: ``||b||`` is
    a sum of ``d`` absolute Laplace draws, at most ``d z_max scale`` with ``z_max`` the largest
    magnitude the Laplace sampler returns, so outputs beyond ``d z_max - 2 X / scale`` scales
    are reachable from one neighbour only: ``P(Gamma(d, 1) > d z_max - ratio)``."""
    if variant == "gaussian":
        return (_float_sampler.describe("gaussian", jnp.float32),
                _float_sampler.delta_floor("gaussian", ratio, jnp.float32))
    z_min, z_max = _float_sampler.support("laplace", jnp.float32)
    top = max(abs(z_min), abs(z_max))
    from scipy import stats

    floor = 1.0 if not math.isfinite(ratio) else float(stats.gamma.sf(d * top - ratio, d))
    return (f"||b||: sum of {d} |Laplace| draws ({_float_sampler.describe('laplace')}), "
            "times a uniform direction (normalised float32 normals)", floor)


def _pure_branch(n: int, hp: Any, eps_drawn: float) -> tuple[float, float]:
    """``(Gamma, eps_jac)`` of the pure variant's rule, with the branch (no extra ridge, or the
    extra ridge) read off the noise actually drawn: the kernel decides ``eps' > 0`` in float32,
    the ledger in float64, and near ``eps' = 0`` the two could differ; the branch whose
    ``eps'`` is the drawn ``2 X / scale`` is the one the kernel took (they are far apart
    there: ``eps' ~ 0`` against ``eps / 2``)."""
    c = LOGISTIC_SMOOTHNESS
    eps, lam, xb = (float(np.asarray(v, np.float64)) for v in (hp.epsilon, hp.lam, hp.x_bound))
    cx2, g_user = c * xb * xb, n * lam
    jac_user = 2.0 * math.log1p(cx2 / g_user) if g_user > 0 else math.inf
    g_extra = cx2 / math.expm1(eps / 4.0)
    user_gap = abs(eps - jac_user - eps_drawn) if math.isfinite(jac_user) else math.inf
    if user_gap <= abs(eps / 2.0 - eps_drawn):
        return g_user, jac_user
    return g_extra, 2.0 * math.log1p(cx2 / g_extra)


class _ObjectivePerturbationLedger(Ledger):
    """A ledger whose guarantee is objective perturbation's theorem (see
    :func:`objective_perturbation`): it assumes the exact minimiser."""

    @property
    def assumption(self) -> str:
        if not self.is_private:
            return "no guarantee (no noise)"
        return (
            "the guarantee of the idealised mechanism: continuous noise and the exact "
            "minimiser of the perturbed objective (the theorem is proven for the exact "
            "minimiser; dpjax computes it by a fixed number of damped Newton steps, to "
            "float32 precision at the sizes tested). The floating-point samplers have a "
            "bounded support, so the release as implemented has delta >= "
            f"{self.sampler_delta_floor:.3g} at every epsilon. secure=True is not available "
            "for objective perturbation")


def _op_ledger(variant: str, newton_steps: int, n: int, hp: ObjectivePerturbationHyperparams,
               events) -> Ledger:
    """The guarantee of objective perturbation, computed from the event (the sensitivity and
    the noise scale drawn) and the public ridge; composition: the one release."""
    (ev,) = events
    eps_req = float(np.asarray(hp.epsilon))
    delta = float(np.asarray(hp.delta)) if variant == "gaussian" else 0.0
    gamma, eps_jac, _ = objective_perturbation_terms(n, hp, variant, np, d=ev.s)
    true = float(np.max(np.asarray(ev.true_sensitivity, np.float64)))
    scale = float(np.min(np.asarray(ev.scale, np.float64)))
    count = int(np.asarray(ev.scale).size)
    noisy = scale >= np.finfo(np.float32).tiny and math.isfinite(scale) and math.isfinite(true)
    if not noisy:
        eps = math.inf
    elif variant == "pure":
        gamma, eps_jac = _pure_branch(n, hp, true / scale)
        eps = eps_jac + true / scale
    elif variant == "tight":  # one log-determinant term (a continuous rule: no branch)
        eps = float(eps_jac) + true / scale
    else:
        mu = true / scale
        t = math.sqrt(2.0 * math.log(1.0 / delta))
        eps = float(eps_jac) + mu * t + 0.5 * mu * mu
    sampler, floor = _op_sampler_floor(variant, true / scale if noisy else math.inf, ev.s)
    statistic = ("beta = argmin sum_i l(beta; x_i, y_i) + Gamma/2 ||beta||^2 + b.beta "
                 "(rows clipped to ||x|| <= x_bound; b the noise)")
    release = Release("objective-perturbation", statistic, "l2", "replace-one", count,
                      float(np.max(np.asarray(ev.sensitivity, np.float64))), scale, 1.0, delta,
                      1, 1.25, f"all {n} records", (eps,) * count, (delta,) * count,
                      sampler, floor, ((true, scale if noisy else 0.0),) * count)
    xb = float(np.asarray(hp.x_bound))
    c_note = (f"c X^2 = {LOGISTIC_SMOOTHNESS * xb * xb:g} (logistic l'' <= c = 1/4, rows "
              f"||x|| <= X = {xb:g}); total ridge Gamma = {float(gamma):g} on the summed loss "
              f"(n Lambda = {n * float(np.asarray(hp.lam)):g}); Jacobian term "
              f"{float(eps_jac):g}")
    if variant == "pure":
        rule = ("Chaudhuri, Monteleoni & Sarwate 2011, Algorithm 2 (Theorem 9): epsilon = "
                "2 log(1 + c X^2 / Gamma) + 2 X / scale, noise density exp(-||b|| / scale)")
    elif variant == "tight":
        rule = ("objective perturbation with one log-determinant term: epsilon = log(1 + c X^2 "
                "/ Gamma) + 2 X / scale, noise density exp(-||b|| / scale). The output's "
                "density ratio on replace-one neighbours is the noise densities' ratio (the "
                "two records' gradients differ by at most 2 X: at most e^{2 X / scale}) times "
                "the Jacobians' det(A + E1) / det(A + E2) <= det(A + E1) / det(A) = 1 + l'' "
                "x^T A^-1 x <= 1 + c X^2 / Gamma (A = Gamma I + the other records' Hessians, "
                "E1, E2 the two records' rank-one PSD Hessians); the split of epsilon is a "
                f"rule of public values (objective_perturbation_terms, r = {OP_PLAN_NORM:g})")
    else:
        rule = ("Gaussian objective perturbation (Kifer, Smith & Thakurta 2012's variant): "
                "epsilon = log(1 + c X^2 / Gamma) + mu t + mu^2 / 2 with mu = 2 X / sigma and "
                "t = sqrt(2 log(1 / delta)): the privacy loss is the log-determinant ratio "
                "(at most log(1 + c X^2 / Gamma), the Hessians differing by a rank-one term of "
                "norm <= c X^2 each) plus b.v / sigma^2 + ||v||^2 / (2 sigma^2), v the "
                "difference of the two records' gradients (||v|| <= 2 X, in their 2-dim span), "
                "bounded with probability 1 - delta by the chi(2) tail")
    led = Ledger.build(f"objective-perturbation/{variant}", [release], "basic",
                       variant="corrected", requested=ApproxDP(eps_req, delta),
                       notes=[c_note, rule, f"exact minimiser assumed; computed by "
                              f"{newton_steps} damped Newton steps from 0"])
    fields = {f: getattr(led, f) for f in led.__dataclass_fields__}
    fields["composition"] = "one release (objective perturbation's theorem)"
    return _ObjectivePerturbationLedger(**fields)


def _op_check(n: int, hp: ObjectivePerturbationHyperparams, dtype) -> None:
    xb = float(np.asarray(hp.x_bound))
    if math.isfinite(float(np.asarray(hp.epsilon))):
        _validate.check_noise_inputs("x_bound", xb, 2.0 * xb, n * xb, dtype)


def objective_perturbation(variant: str = "tight", newton_steps: int = NEWTON_STEPS
                           ) -> Estimator:
    r"""Objective perturbation for logistic regression as an :class:`~dpjax.base.Estimator`.

    Releases ``beta = argmin_beta sum_i l(y_i x_i.beta) + (Gamma/2) ||beta||^2 + b.beta``
    (the papers' ``J(beta) + b.beta / n + (Delta/2) ||beta||^2`` times ``n``, with ``Gamma =
    n (Lambda + Delta)``), ``l(m) = log(1 + e^{-m})``, labels ``y`` in {0, 1} mapped to
    {-1, +1}, rows clipped to ``||x|| <= X``, and the noise ``b`` drawn once
    (:func:`objective_perturbation_terms` sets ``Gamma`` and the split of epsilon):

    * ``variant="tight"`` (the default): ``b`` with density proportional to
      ``exp(-eps_noise ||b|| / (2 X))`` and ``eps = eps_jac + eps_noise``, ``eps_jac = log(1 +
      c X^2 / Gamma)``: epsilon-DP. *Proof sketch* (replace-one neighbours ``D``, ``D'``
      differing in record ``n``): the objective is ``Gamma``-strongly convex and smooth, so
      ``beta`` determines ``b = -(sum_i grad l_i(beta) + Gamma beta)`` and the output's
      density is ``p_b(b_D(beta)) |det J_D(beta)|`` with ``J_D = A + E_1``, ``A = Gamma I +
      sum_{i<n} grad^2 l_i(beta)`` (shared) and ``E_1 = l''(.) x_n x_n^T`` (PSD, rank one,
      ``<= c X^2``). The noise ratio: ``b_D - b_D'`` is the difference of the two records'
      gradients, of norm at most ``2 X``, so ``p_b(b_D) / p_b(b_D') <= e^{eps_noise}``. The
      Jacobian ratio: ``det(A + E_1) / det(A + E_2) <= det(A + E_1) / det(A) = 1 + l'' x_n^T
      A^{-1} x_n <= 1 + c X^2 / Gamma`` (``det(A + E_2) >= det(A)``; the matrix determinant
      lemma), and symmetrically -- one log where Chaudhuri et al.'s rule charges two. The
      split of epsilon (the ridge ``Gamma``) is a rule of public values
      (:func:`objective_perturbation_terms`): most of epsilon goes to the noise at any ``n``
      (at epsilon 1, 0.80 at ``d = 5``, ``X = sqrt(5)``).
    * ``variant="pure"`` (Chaudhuri, Monteleoni & Sarwate 2011, Algorithm 2, the paper's rule
      by name): ``b`` with density proportional to ``exp(-eps' ||b|| / (2 X))``,
      ``eps' = eps - 2 log(1 + c X^2 / Gamma)``: epsilon-DP.
    * ``variant="gaussian"`` (the (epsilon, delta) variant of Kifer, Smith & Thakurta 2012):
      ``b ~ N(0, sigma^2 I)``, ``sigma = 2 X / mu``, ``mu t + mu^2/2 = eps - eps_jac``,
      ``t = sqrt(2 log(1/delta))``: (epsilon, delta)-DP by the bound the ledger states (the
      privacy loss is at most ``eps_jac + mu ||P u|| / sigma + mu^2 / 2`` with ``P u`` the
      noise projected on the two records' span, ``||P u||^2 / sigma^2 ~ chi^2(2)``, which
      exceeds ``t^2`` with probability ``delta``).

    **The guarantee assumes the exact minimiser.** The minimiser is computed by
    ``newton_steps`` damped Newton steps (``lax.scan``) after the one noise draw; the
    objective is ``Gamma``-strongly convex, and the tests check that the gradient at the
    result is 0 to float32 precision at the sizes they use (``info.grad_norm`` reports it).
    The ledger says so in its assumptions. ``epsilon = inf``: no noise, no extra ridge: the
    logistic regression with ridge ``n Lambda`` (scikit-learn's ``C = 1 / (n Lambda)``).
    """
    _validate.check_choice(variant, "variant", OP_VARIANTS)
    return _objective_perturbation(
        variant, _validate.check_int_in_range(newton_steps, "newton_steps", 1))


@functools.lru_cache(maxsize=64)
def _objective_perturbation(variant: str, newton_steps: int) -> Estimator:
    """The cached build: the same configuration gives the same Estimator (one compile)."""
    return Estimator(f"objective-perturbation/{variant}", _init,
                     _make_op_step(variant, newton_steps), num_steps=1, batching="full",
                     ledger=functools.partial(_op_ledger, variant, newton_steps),
                     check=_op_check)


# --------------------------------------------------------------------------------------------
# The bounded mean
# --------------------------------------------------------------------------------------------

#: the bounded mean's mechanisms: Laplace (pure epsilon, l1) and Gaussian ((epsilon, delta), l2)
MEAN_MECHANISMS = ("laplace", "gaussian")


class BoundedMeanHyperparams(NamedTuple):
    """The Laplace mechanism's (epsilon-DP: no delta)."""

    epsilon: jax.Array  # () budget of the one release; inf: no noise (the clipped mean)
    lo: jax.Array  # (d,) public lower bounds per coordinate
    hi: jax.Array  # (d,) public upper bounds per coordinate (> lo)


class GaussianBoundedMeanHyperparams(NamedTuple):
    """The Gaussian mechanism's ((epsilon, delta)-DP)."""

    epsilon: jax.Array  # () budget of the one release; inf: no noise (the clipped mean)
    delta: jax.Array  # () in (0, 1)
    lo: jax.Array  # (d,) public lower bounds per coordinate
    hi: jax.Array  # (d,) public upper bounds per coordinate (> lo)


def _box_mean(x: jax.Array, hp: BoundedMeanHyperparams, norm: str) -> BoundedStatistic:
    """The mean of the records clipped to the box ``[lo, hi]``: replacing one record moves it
    by at most ``(hi - lo) / n`` per coordinate, ``||hi - lo||_1 / n`` in l1 and
    ``||hi - lo||_2 / n`` in l2."""
    lo, hi = jnp.asarray(hp.lo, x.dtype), jnp.asarray(hp.hi, x.dtype)
    xc = jnp.clip(sanitize(x), lo[None, :], hi[None, :])
    width = hi - lo
    diameter = jnp.sum(width) if norm == "l1" else jnp.sqrt(jnp.sum(jnp.square(width)))
    return bounded_mean(xc, diameter, norm)


def _make_mean_step(mechanism: str):
    def step(key: jax.Array, state: BaselineState, x: jax.Array, hp: BoundedMeanHyperparams):
        del state
        if mechanism == "laplace":
            beta, event = laplace_mechanism(key, _box_mean(x, hp, "l1"), hp.epsilon)
        else:
            beta, event = gaussian_mechanism(key, _box_mean(x, hp, "l2"), hp.epsilon,
                                             hp.delta, calibration="analytic")
        return BaselineState(beta), BaselineInfo((event,), jnp.zeros((), beta.dtype))

    return step


def _mean_ledger(mechanism: str, n: int, hp: BoundedMeanHyperparams, events) -> Ledger:
    eps = float(np.asarray(hp.epsilon))
    delta = float(np.asarray(hp.delta)) if mechanism == "gaussian" else 0.0
    norm = "l1" if mechanism == "laplace" else "l2"
    release = Release.from_event(events[0], f"mean of the records clipped to the box [lo, hi] "
                                            f"({norm} sensitivity ||hi - lo||_{norm[1]} / n)",
                                 f"all {n} records")
    return Ledger.build(f"bounded-mean/{mechanism}", [release], "basic",
                        requested=ApproxDP(eps, delta), delta=delta or None)


def _mean_check(mechanism: str, n: int, hp: BoundedMeanHyperparams, dtype) -> None:
    if not math.isfinite(float(np.asarray(hp.epsilon))):
        return
    width = np.asarray(hp.hi, np.float64) - np.asarray(hp.lo, np.float64)
    diam = float(np.sum(width)) if mechanism == "laplace" else float(np.linalg.norm(width))
    big = float(np.max(np.abs(np.concatenate([np.ravel(hp.lo), np.ravel(hp.hi)]))))
    _validate.check_noise_inputs("bounds", diam, diam / n, n * big, dtype)


def bounded_mean_estimator(mechanism: str = "laplace") -> Estimator:
    """The mean of records clipped to a public box ``[lo, hi]`` (per coordinate) plus Laplace
    noise of scale ``||hi - lo||_1 / (n epsilon)`` (``"laplace"``: epsilon-DP) or Gaussian noise
    of the analytic calibration for l2 sensitivity ``||hi - lo||_2 / n`` (``"gaussian"``:
    (epsilon, delta)-DP at every epsilon), one release, replace-one. Data: ``x`` ``(n, d)``;
    hyperparameters :class:`BoundedMeanHyperparams`."""
    _validate.check_choice(mechanism, "mechanism", MEAN_MECHANISMS)
    return _bounded_mean_estimator(mechanism)


@functools.cache
def _bounded_mean_estimator(mechanism: str) -> Estimator:
    return Estimator(f"bounded-mean/{mechanism}", _init, _make_mean_step(mechanism),
                     num_steps=1, batching="full",
                     ledger=functools.partial(_mean_ledger, mechanism),
                     check=functools.partial(_mean_check, mechanism))


# --------------------------------------------------------------------------------------------
# The fits
# --------------------------------------------------------------------------------------------


def _f32(*values: Any) -> list[jax.Array]:
    return [jnp.asarray(v, jnp.float32) for v in values]


def _bound(value: Any, name: str) -> float:
    """A public bound: a scalar in (0, inf) (a bound of inf would give infinite noise)."""
    if value is None:
        raise ValueError(f"{name} is required: a public bound, never read from the data")
    return _validate.check_scalar(_validate.check_positive(value, name), name)


def _xy(data: Any, on_invalid: str, labels: bool = False):
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError("data must be a pair (x, y): x of shape (n, d), y of shape (n,)")
    x, y = _validate.check_xy(data[0], data[1], on_invalid, allow_bool_y=labels)
    if labels and on_invalid == "raise" and not np.isin(y, (0, 1)).all():
        raise ValueError("data.y must hold labels in {0, 1} (on_invalid='clip' maps y > 0.5 to "
                         "1 and the rest to 0)")
    return jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)


@_validate.host_only
def fit_adassp(key: Any, data: Any, *, epsilon: Any, delta: Any = None, x_bound: Any,
               y_bound: Any, zeta: Any = 0.05, on_invalid: str = "raise", secure: bool = False,
               accountant: Any = None) -> FitResult:
    """Fit AdaSSP (Wang 2018, Algorithm 2; see :func:`adassp`) to one data set.

    Args:
        key: PRNG key (or int seed) for the noise.
        data: ``(x, y)``, ``x`` of shape ``(n, d)``, ``y`` of shape ``(n,)``.
        epsilon: in (0, inf]; inf gives ordinary least squares (no intercept: append a
            constant column to ``x`` inside ``x_bound`` for one).
        delta: in (0, 1); default ``1/(2n)``.
        x_bound: public l2 bound on a row of ``x`` (rows beyond it are clipped onto the ball).
        y_bound: public bound on ``|y|`` (values beyond it are clipped).
        zeta: the failure probability of the adaptive ridge's eigenvalue bound (the paper's
            rho, default 0.05), in (0, 1).
        on_invalid: ``"raise"`` or ``"clip"`` (non-finite entries mapped into the bounds).
        secure: exact discrete noise for a release on real data (see :func:`dpjax.fit`).
        accountant: a :class:`dpjax.Accountant` this fit spends from.

    Returns:
        :class:`~dpjax.base.FitResult`, ``estimate`` the coefficients ``(d,)``; the ledger
        (PLD) delivers ``(epsilon, delta)``.
    """
    key = as_key(key)
    _validate.check_on_invalid(on_invalid)
    x, y = _xy(data, on_invalid)
    n = int(x.shape[0])
    eps, dl = _validate.check_budget(epsilon, delta, n)
    xb, yb = _bound(x_bound, "x_bound"), _bound(y_bound, "y_bound")
    z = _validate.check_scalar(_validate.check_positive(zeta, "zeta"), "zeta")
    if not z < 1:
        raise ValueError(f"zeta must lie in (0, 1); got {z:g}")
    hp = AdaSSPHyperparams(*_f32(eps, dl, xb, yb, z))
    return fit(adassp(), key, (x, y), jnp.zeros(x.shape[1], jnp.float32), hp, n=n,
               secure=secure, accountant=accountant)


@_validate.host_only
def fit_ssp_laplace(key: Any, data: Any, *, epsilon: Any, delta: Any = 0.0, x_bound: Any,
                    y_bound: Any, on_invalid: str = "raise", secure: bool = False,
                    accountant: Any = None) -> FitResult:
    """Fit sufficient-statistics perturbation with Laplace noise (see :func:`ssp_laplace`):
    pure epsilon-DP, no delta.

    Args:
        key: PRNG key (or int seed) for the noise.
        data: ``(x, y)``, ``x`` of shape ``(n, d)``, ``y`` of shape ``(n,)``.
        epsilon: in (0, inf]; inf gives ordinary least squares (no intercept: append a
            constant column to ``x`` inside ``x_bound`` for one).
        delta: 0 (default) or ``None``: the fit is pure epsilon-DP (a delta > 0 is refused;
            :func:`fit_adassp` is the (epsilon, delta) method).
        x_bound: public l2 bound on a row of ``x`` (rows beyond it are clipped onto the ball).
        y_bound: public bound on ``|y|`` (values beyond it are clipped).
        on_invalid: ``"raise"`` or ``"clip"`` (non-finite entries mapped into the bounds).
        secure: exact discrete noise for a release on real data (see :func:`dpjax.fit`).
        accountant: a :class:`dpjax.Accountant` this fit spends from.

    Returns:
        :class:`~dpjax.base.FitResult`, ``estimate`` the coefficients ``(d,)``; the ledger
        (basic composition of two Laplace releases) delivers ``(epsilon, 0)``.
    """
    key = as_key(key)
    _validate.check_on_invalid(on_invalid)
    x, y = _xy(data, on_invalid)
    n = int(x.shape[0])
    eps = _validate.check_scalar(_validate.check_epsilon(epsilon), "epsilon")
    if delta is not None and _validate.check_scalar(delta, "delta") != 0:
        raise ValueError(f"delta must be 0 or None for fit_ssp_laplace (pure epsilon-DP; "
                         f"fit_adassp takes a delta); got {delta}")
    xb, yb = _bound(x_bound, "x_bound"), _bound(y_bound, "y_bound")
    hp = SSPLaplaceHyperparams(*_f32(eps, xb, yb))
    return fit(ssp_laplace(), key, (x, y), jnp.zeros(x.shape[1], jnp.float32), hp, n=n,
               secure=secure, accountant=accountant)


@_validate.host_only
def fit_objective_perturbation(key: Any, data: Any, *, epsilon: Any, delta: Any = 0.0,
                               x_bound: Any, lam: Any = None, newton_steps: int = NEWTON_STEPS,
                               variant: str | None = None, on_invalid: str = "raise",
                               secure: bool = False, accountant: Any = None) -> FitResult:
    """Fit objective perturbation for logistic regression (see :func:`objective_perturbation`).

    Args:
        key: PRNG key (or int seed) for the noise.
        data: ``(x, y)``, ``x`` of shape ``(n, d)``, ``y`` of shape ``(n,)`` in {0, 1}.
        epsilon: in (0, inf]; inf gives the ridge-regularised logistic regression (no
            intercept: append a constant column to ``x`` inside ``x_bound`` for one).
        delta: 0 (default): a pure epsilon-DP variant (``"tight"`` unless ``variant``
            says ``"pure"``); in (0, 1): the Gaussian variant (Kifer et al. 2012). (The one
            fit whose delta does not default to ``1/(2n)``: its default is pure DP.)
        x_bound: public l2 bound ``X`` on a row of ``x`` (rows beyond it are clipped).
        lam: the ridge ``Lambda >= 0`` of ``(1/n) sum_i l + (Lambda/2) ||beta||^2``; default
            ``1/n`` (scikit-learn's default ``C = 1 = 1 / (n Lambda)``). An extra ridge is
            added where the budget needs it (the papers' rules).
        newton_steps: the damped Newton steps computing the minimiser (default 40).
        variant: ``None`` (default: ``"tight"`` at ``delta = 0``, ``"gaussian"`` at
            ``delta > 0``), ``"tight"`` (one log-determinant term, the split of epsilon
            planned on public values), ``"pure"`` (Chaudhuri et al.'s Algorithm 2 as printed:
            two log terms) -- both need ``delta = 0`` -- or ``"gaussian"`` (``delta > 0``).
            See :func:`objective_perturbation`.
        on_invalid: ``"raise"`` or ``"clip"`` (labels mapped to ``y > 0.5``, non-finite
            features to bounded values).
        secure: not available (the minimiser of a perturbed objective is not a noisy
            statistic on a grid): ``True`` raises.
        accountant: a :class:`dpjax.Accountant` this fit spends from.

    Returns:
        :class:`~dpjax.base.FitResult`, ``estimate`` the coefficients ``(d,)``; the ledger
        states the theorem's guarantee, which equals the request, and assumes the exact
        minimiser.
    """
    if secure:
        raise ValueError("secure=True is not available for objective perturbation: a perturbed "
                         "objective has no floating-point-safe path; use fit_dp_glm")
    key = as_key(key)
    _validate.check_on_invalid(on_invalid)
    x, y = _xy(data, on_invalid, labels=True)
    n = int(x.shape[0])
    if delta is None:
        raise ValueError("delta must be 0 (the pure epsilon-DP algorithm, the default) or in "
                         "(0, 1) (the Gaussian variant); got None")
    if _validate.check_scalar(delta, "delta") == 0:
        eps, dl = _validate.check_scalar(_validate.check_epsilon(epsilon), "epsilon"), 0.0
    else:  # the Gaussian variant: the one delta check of every fit
        eps, dl = _validate.check_budget(epsilon, delta, n)
    xb = _bound(x_bound, "x_bound")
    lam_v = 1.0 / n if lam is None else _validate.check_scalar(lam, "lam")
    if not (math.isfinite(lam_v) and lam_v >= 0):
        raise ValueError(f"lam must be a finite number >= 0; got {lam_v:g}")
    if variant is None:
        variant = "gaussian" if dl > 0 else "tight"
    _validate.check_choice(variant, "variant", OP_VARIANTS)
    if (variant == "gaussian") != (dl > 0):
        raise ValueError(f"variant={variant!r} needs delta "
                         f"{'in (0, 1)' if variant == 'gaussian' else '= 0'}; got delta={dl:g}")
    hp: Any = (GaussianObjectivePerturbationHyperparams(*_f32(eps, dl, xb, lam_v)) if dl > 0
               else ObjectivePerturbationHyperparams(*_f32(eps, xb, lam_v)))
    return fit(objective_perturbation(variant, newton_steps), key, (x, y),
               jnp.zeros(x.shape[1], jnp.float32), hp, n=n, accountant=accountant)


@_validate.host_only
def fit_bounded_mean(key: Any, data: Any, *, epsilon: Any, delta: Any = None, bounds: Any,
                     mechanism: str = "laplace", on_invalid: str = "raise",
                     secure: bool = False, accountant: Any = None) -> FitResult:
    """Fit the bounded mean (see :func:`bounded_mean_estimator`) to one data set.

    Args:
        key: PRNG key (or int seed) for the noise.
        data: the records ``x``, shape ``(n, d)`` (or ``(n,)``: ``d = 1``).
        epsilon: in (0, inf]; inf gives the mean of the clipped records.
        delta: ``"laplace"``: ``None`` or 0 (pure epsilon-DP); ``"gaussian"``: in (0, 1),
            default ``1/(2n)``.
        bounds: ``(lo, hi)``, scalars or arrays of shape ``(d,)``, ``lo < hi`` finite: the
            public box; records are clipped onto it.
        mechanism: ``"laplace"`` (default) or ``"gaussian"``.
        on_invalid: ``"raise"`` or ``"clip"`` (non-finite entries mapped into the box).
        secure: exact discrete noise for a release on real data (see :func:`dpjax.fit`).
        accountant: a :class:`dpjax.Accountant` this fit spends from.

    Returns:
        :class:`~dpjax.base.FitResult`, ``estimate`` the mean ``(d,)``.
    """
    key = as_key(key)
    _validate.check_choice(mechanism, "mechanism", MEAN_MECHANISMS)
    _validate.check_on_invalid(on_invalid)
    arr = _validate.check_array(data, "data", on_invalid=on_invalid)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"data must have shape (n, d) or (n,) with n, d >= 1; got "
                         f"{arr.shape}")
    n, d = arr.shape
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise TypeError("bounds must be a pair (lo, hi) of scalars or arrays of shape (d,)")
    lo, hi = (np.broadcast_to(_validate.check_array(b, name, on_invalid="raise"), (d,))
              if np.ndim(b) in (0, 1) and np.size(b) in (1, d) else None
              for b, name in zip(bounds, ("bounds[0]", "bounds[1]")))
    if lo is None or hi is None:
        raise ValueError(f"bounds must be scalars or arrays of shape ({d},)")
    if not (lo < hi).all():
        raise ValueError("bounds must satisfy lo < hi in every coordinate")
    if mechanism == "laplace":
        eps = _validate.check_scalar(_validate.check_epsilon(epsilon), "epsilon")
        if delta is not None and _validate.check_scalar(delta, "delta") != 0:
            raise ValueError(f"delta must be None or 0 for mechanism='laplace' (pure "
                             f"epsilon-DP); got {delta}")
        dl = 0.0
    else:
        eps, dl = _validate.check_budget(epsilon, delta, n)
    hp: Any = (BoundedMeanHyperparams(*_f32(eps, lo, hi)) if mechanism == "laplace" else
               GaussianBoundedMeanHyperparams(*_f32(eps, dl, lo, hi)))
    return fit(bounded_mean_estimator(mechanism), key, jnp.asarray(arr, jnp.float32),
               jnp.zeros(d, jnp.float32), hp, n=n, secure=secure, accountant=accountant)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def _regression_example(n: int = 300, d: int = 3, seed: int = 0, logistic: bool = False):
    kx, ky = jax.random.split(jax.random.key(seed))
    x = jax.random.uniform(kx, (n, d), jnp.float32, -1.0, 1.0)
    beta = jnp.full((d,), 1.0 / math.sqrt(d), jnp.float32)
    if logistic:
        y = (jax.random.uniform(ky, (n,)) < jax.nn.sigmoid(2.0 * (x @ beta))).astype(jnp.float32)
    else:
        y = jnp.clip(x @ beta + 0.5 * jax.random.normal(ky, (n,)), -3.0, 3.0)
    return x, y


def _example_adassp() -> registry.Example:
    data = _regression_example()
    hp = lambda eps: AdaSSPHyperparams(*_f32(eps, 1 / 600, math.sqrt(3.0), 3.0, 0.05))  # noqa
    return registry.Example(data, jnp.zeros(3, jnp.float32), hp)


def _example_ssp_laplace() -> registry.Example:
    data = _regression_example()
    hp = lambda eps: SSPLaplaceHyperparams(*_f32(eps, math.sqrt(3.0), 3.0))  # noqa
    return registry.Example(data, jnp.zeros(3, jnp.float32), hp)


def _example_op(variant: str) -> registry.Example:
    data = _regression_example(logistic=True)
    def hp(eps):
        if variant == "gaussian":
            return GaussianObjectivePerturbationHyperparams(*_f32(eps, 1 / 600, math.sqrt(3.0),
                                                                  1 / 300))
        return ObjectivePerturbationHyperparams(*_f32(eps, math.sqrt(3.0), 1 / 300))

    return registry.Example(data, jnp.zeros(3, jnp.float32), hp)


def _example_mean(mechanism: str) -> registry.Example:
    x = jax.random.uniform(jax.random.key(3), (200, 3), jnp.float32, -1.0, 2.0)
    def hp(eps):
        lo, hi = jnp.full(3, -1.0), jnp.full(3, 2.0)
        if mechanism == "gaussian":
            return GaussianBoundedMeanHyperparams(*_f32(eps, 1 / 400, lo, hi))
        return BoundedMeanHyperparams(*_f32(eps, lo, hi))

    return registry.Example(x, jnp.zeros(3, jnp.float32), hp)


def _register() -> None:
    def req(eps):
        return ("epsilon", eps)

    def entry(name, build, example):
        registry.register(registry.Entry(name, "baselines", build, example, requested=req))

    entry("baselines/adassp", adassp, _example_adassp)
    entry("baselines/ssp-laplace", ssp_laplace, _example_ssp_laplace)
    for variant in OP_VARIANTS:
        entry(f"baselines/objective-perturbation/{variant}",
              functools.partial(objective_perturbation, variant, 20),
              functools.partial(_example_op, variant))
    for mech in MEAN_MECHANISMS:
        entry(f"baselines/bounded-mean/{mech}", functools.partial(bounded_mean_estimator, mech),
              functools.partial(_example_mean, mech))


_register()
