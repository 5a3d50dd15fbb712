r"""Differentially private two-stage gradient descent for IV regression (spec 004).

Liang, Jin, Balasubramanian & Lai, *Differentially Private Two-Stage Gradient Descent for
Instrumental Variable Regression*. Three estimators share one step (full batch, ``T`` static):

**DP-2S-GD (Algorithm 1).** From ``Theta^(0) = 0``, ``beta^(0) = 0``, for ``t = 0..T-1``:

.. math::

    \Theta^{(t+1)} &= \Theta^{(t)} - \eta\big(G_1(\Theta^{(t)}) + \Xi^{(t)}\big), \qquad
    G_1 = \tfrac1n \textstyle\sum_i \mathrm{CLIP}_{\gamma_1}\big(z_i (z_i^\top\Theta^{(t)} -
    x_i^\top)\big),\\
    \beta^{(t+1)} &= \beta^{(t)} - \alpha\big(G_2(\Theta^{(t)}, \beta^{(t)}) + \nu^{(t)}\big),
    \qquad G_2 = \tfrac1n \textstyle\sum_i \mathrm{CLIP}_{\gamma_2}\big(\Theta^{(t)\top} z_i
    (z_i^\top \Theta^{(t)} \beta^{(t)} - y_i)\big),

a *simultaneous* update: the beta step uses the old ``Theta^(t)``, so ``beta^(1) = -alpha nu^(0)``
is pure noise. ``Xi^(t)`` has i.i.d. ``N(0, lambda_1^2)`` entries and ``nu^(t) ~ N(0, lambda_2^2
I_p)``: the noise is added to the averaged clipped gradient, i.e. after the step size it has std
``eta lambda_1`` and ``alpha lambda_2`` (the paper writes ``+ eta Xi``; the sign is immaterial).
The estimate is ``beta^(T)``.

**Noise calibration** (static ``calibration``). Each ``G_k`` is a
:class:`~dpjax.mechanisms.BoundedStatistic` with replace-one l2 (Frobenius) sensitivity
``Delta_k = 2 gamma_k / n`` given the released iterates, and the Gaussian mechanism is
calibrated from it alone with a per-step zCDP budget:

* ``"tight"`` (default): ``lambda_k = (gamma_k / n) sqrt(2T / rho_k)``, per-step budget
  ``rho_k / T``; delivers exactly ``rho_1 + rho_2``.
* ``"paper"`` (Prop 3.1, eq. 4): ``lambda_k = (2 gamma_k / n) sqrt(T / rho_k)
  = Delta_k / sqrt(2 rho_k / (2T))``, i.e. per-step budget ``rho_k / (2T)``. Over ``T`` steps this
  is ``Delta^2 T / (2 lambda^2) = rho_k / 2``-zCDP, half of what the paper states (spec 004 §2.3,
  §6 A1): over-noised by ``sqrt 2``, so private, and the ledger reports ``(rho_1 + rho_2)/2``.

**Privacy.** Adaptive zCDP composition of the ``2T`` Gaussian releases (``T`` per stage)
gives ``rho``-zCDP for the whole transcript ``{Theta^(t), beta^(t)}_{t=1..T}`` under replace-one
adjacency (one record = one triple ``(z_i, x_i, y_i)``, ``n`` public), converted to
``(epsilon, delta)`` by :func:`dpjax.accounting.zcdp_to_approx_dp`. Step sizes, clipping
thresholds and the start must not depend on the data. ``rho_k = inf`` gives exactly zero noise.

**DP-2S-GD-beta (Algorithm 3, "privacy for beta only")** -- paper variant, **not DP as
claimed**. ``Theta`` runs non-private, unclipped GD; only the beta step is clipped and noised.
The paper (Lemma F.1) claims ``rho_2``-zCDP for ``{beta^(t)}``, but ``Theta^(t)`` depends on
every record, so one replacement moves all ``n`` clipped beta-terms: the true sensitivity of
``G_2`` is ``2 gamma_2`` (``n`` times the declared ``2 gamma_2 / n``; spec 004 §6 A2). Its privacy
event carries that true sensitivity, so the ledger gives the beta releases the guarantee their noise
really earns (``n^2`` times the claimed rho: vacuous); the first stage is a non-private release
(``Theta^(t)`` is part of the transcript), so the ledger as a whole says not DP.

**2S-GD (Algorithm 2)**: the same iteration without clipping or noise (non-private). Algorithm 1
with ``rho = gamma = inf`` reproduces it exactly; its fixed point is 2SLS (spec 004 §2.5).

**Accounting.** Every step returns its two releases' :class:`~dpjax.mechanisms.PrivacyEvent` s
(``info.events = (Theta event, beta event)``, built by the mechanism from the arrays that drew
the noise; ``no_privacy_event`` for a non-private release), and the ledger of a run is composed
from those events alone (:meth:`dpjax.accounting.Release.from_event`).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, registry
from dpjax.accounting import ZCDP, Ledger, Release
from dpjax.algorithms._boundary import checked_inputs
from dpjax.base import Estimator, FitResult, Padded, fit, fold_rows
from dpjax.mechanisms import PrivacyEvent, gaussian_mechanism_zcdp, no_privacy_event
from dpjax.models import iv

__all__ = [
    "CALIBRATIONS",
    "DPIVHyperparams",
    "DPIVInfo",
    "DPIVState",
    "FitResult",
    "StepSizes",
    "clipping_threshold",
    "contraction_factors",
    "delta_tau",
    "dp_2s_gd",
    "dp_2s_gd_beta_only",
    "fit_2sls",
    "fit_dp_2s_gd",
    "fit_dp_2s_gd_beta_only",
    "fit_two_stage_gd",
    "make_hparams",
    "paper_step_sizes",
    "per_step_rho",
    "psi_tau",
    "two_stage_gd",
]

Calibration = Literal["paper", "tight"]
CALIBRATIONS: tuple[str, ...] = ("paper", "tight")
Variant = Literal["dp", "beta-only", "none"]
#: rows per block of the padded step's sums (:func:`dpjax.base.fold_rows`): a block of the
#: papers' sizes (q, p <= 50) is a few hundred kB, and settings from n = 128 up share a program
ROW_BLOCK = 256
DEFAULT_DELTA = 1e-5  # the paper's delta for (epsilon, delta) conversions (Sec 4, footnote 3)


class DPIVHyperparams(NamedTuple):
    """Swept hyperparameters (arrays; a study may ``vmap`` over any of them)."""

    rho1: jax.Array  # () zCDP budget of the first-stage releases {Theta^(t)}; inf: no noise
    rho2: jax.Array  # () zCDP budget of the second-stage releases {beta^(t)}; inf: no noise
    eta: jax.Array  # () first-stage step size
    alpha: jax.Array  # () second-stage step size
    gamma1: jax.Array  # () first-stage clipping threshold (Frobenius); inf: none
    gamma2: jax.Array  # () second-stage clipping threshold (l2); inf: none
    delta: jax.Array  # () target delta of the ledger's (epsilon, delta) conversion (accounting)

    # in (0, inf], checked with the budgets by dpjax.fit
    POSITIVE = ("eta", "alpha", "gamma1", "gamma2")
    # Read by the ledger only (the noise is calibrated in rho): it does not enter a level's
    # noise key, so adding it left every study's random draws unchanged.
    ACCOUNTING_ONLY = ("delta",)


class DPIVState(NamedTuple):
    theta: jax.Array  # (q, p) first-stage iterate Theta^(t)
    beta: jax.Array  # (p,) second-stage iterate beta^(t)


class DPIVInfo(NamedTuple):
    clip_frac1: jax.Array  # () fraction of first-stage per-sample gradients clipped
    clip_frac2: jax.Array  # () fraction of second-stage per-sample gradients clipped
    sigma1: jax.Array  # () std lambda_1 of the noise on G_1 (0 if none)
    sigma2: jax.Array  # () std lambda_2 of the noise on G_2 (0 if none)
    events: tuple[PrivacyEvent, PrivacyEvent]  # the step's releases: (Theta^(t+1), beta^(t+1))


# --------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------


def per_step_rho(calibration: Calibration, rho: Any, num_iterations: int) -> Any:
    """The per-step zCDP budget the Gaussian mechanism is calibrated to.

    ``"tight"``: ``rho / T``; ``"paper"``: ``rho / (2T)`` -- the paper's
    ``lambda = (2 gamma/n) sqrt(T/rho)`` is the zCDP Gaussian at this budget. Works on host
    values and traced arrays; ``inf`` stays ``inf``. The step's one calibration: the ledger
    reads the noise drawn off the privacy events, it does not recompute it.
    """
    if calibration == "tight":
        return rho / num_iterations
    if calibration == "paper":
        return rho / (2 * num_iterations)
    raise ValueError(f"calibration must be one of {CALIBRATIONS}; got {calibration!r}")


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def _no_release() -> tuple[PrivacyEvent, PrivacyEvent]:
    """The events of a non-private step: both stages released without clipping or noise."""
    return no_privacy_event("l2"), no_privacy_event("l2")


class _Sums(NamedTuple):
    """A step's sums over records (the means divide them by the public count): each stage's
    gradient (clipped where the variant clips it) and the number of per-sample gradients
    clipped (zero where none is)."""

    g1: jax.Array  # (q, p)
    g2: jax.Array  # (p,)
    clipped1: jax.Array  # () float
    clipped2: jax.Array  # () float


def _sums(variant: Variant, theta: jax.Array, beta: jax.Array, hp: DPIVHyperparams,
          data: iv.IVData) -> _Sums:
    """The step's sums over ``data``'s rows, zero rows adding nothing (:func:`iv.mask_rows`:
    a zero record's per-sample gradients are zero in both stages, and its norms 0 never
    clipped)."""
    zero = jnp.zeros((), beta.dtype)
    if variant == "none":
        return _Sums(iv.first_stage_sum(theta, data), iv.second_stage_sum(theta, beta, data),
                     zero, zero)
    norms1, norms2 = iv.gradient_norms(theta, beta, data)
    g2 = iv.clipped_second_stage_sum(theta, beta, data, hp.gamma2)
    clipped2 = jnp.sum((norms2 > hp.gamma2).astype(beta.dtype))
    if variant == "dp":
        g1 = iv.clipped_first_stage_sum(theta, data, hp.gamma1)
        clipped1 = jnp.sum((norms1 > hp.gamma1).astype(beta.dtype))
    else:  # "beta-only": Algorithm 3, first stage unclipped (not DP)
        g1, clipped1 = iv.first_stage_sum(theta, data), zero
    return _Sums(g1, g2, clipped1, clipped2)


def _make_step(variant: Variant, calibration: Calibration, num_iterations: int | None,
               row_block: int | None = None):
    """The step; ``num_iterations=None``: the padded form's (:func:`_padded`), with ``n`` and
    ``T`` from the runtime ``sizes``, the padded rows zeroed (:func:`dpjax.models.iv.mask_rows`)
    and the sums added up over blocks of ``row_block`` rows up to the count
    (:func:`dpjax.base.fold_rows`)."""

    def step(key, state: DPIVState, data: iv.IVData, hp: DPIVHyperparams, sizes=None):
        theta, beta = state.theta, state.beta
        dtype = beta.dtype
        zero = jnp.zeros((), dtype)
        if sizes is None:
            T, n = num_iterations, data.z.shape[0]
            sums = _sums(variant, theta, beta, hp, data)
        else:
            T = sizes.num_steps.astype(dtype)
            n = sizes.count.astype(dtype)
            sums = fold_rows(lambda rows, mask: _sums(variant, theta, beta, hp,
                                                      iv.mask_rows(rows, mask)),
                             data, sizes.mask, row_block)
        if variant == "none":
            del key  # non-private: no randomness
            g1, g2 = sums.g1 / n, sums.g2 / n  # g2 at the old Theta^(t)
            return DPIVState(theta - hp.eta * g1, beta - hp.alpha * g2), DPIVInfo(
                zero, zero, zero, zero, _no_release())

        key_theta, key_beta = jax.random.split(key)
        g2 = iv.clipped_stage_mean(sums.g2, hp.gamma2, n)
        if variant == "dp":
            g1 = iv.clipped_stage_mean(sums.g1, hp.gamma1, n)
            noisy1, ev1 = gaussian_mechanism_zcdp(key_theta, g1, per_step_rho(calibration,
                                                                              hp.rho1, T))
            sigma1, clip1 = ev1.scale, sums.clipped1 / n
        else:  # "beta-only": Algorithm 3, first stage unclipped and un-noised (not DP)
            del key_theta
            noisy1 = sums.g1 / n
            ev1 = no_privacy_event("l2")
            sigma1, clip1 = zero, zero
            # Declared 2 gamma2/n as the paper calibrates; true 2 gamma2: Theta^(t) depends on
            # every record, so one replacement moves all n clipped terms (spec 004 §6 A2).
            g2 = g2.declare(2.0 * hp.gamma2 / n, 2.0 * hp.gamma2)
        noisy2, ev2 = gaussian_mechanism_zcdp(key_beta, g2, per_step_rho(calibration, hp.rho2, T))
        new = DPIVState(theta - hp.eta * noisy1, beta - hp.alpha * noisy2)
        info = DPIVInfo(clip1, sums.clipped2 / n, jnp.asarray(sigma1, dtype),
                        jnp.asarray(ev2.scale, dtype), (ev1, ev2))
        return new, info

    return step


def _init(params0: Any) -> DPIVState:
    """``params0 = (Theta^(0), beta^(0))``, data-independent (the paper: both zero)."""
    theta0, beta0 = params0
    dtype = jnp.result_type(float)
    return DPIVState(jnp.asarray(theta0, dtype), jnp.asarray(beta0, dtype))


_NAMES = {"dp": "dp-2s-gd", "beta-only": "dp-2s-gd-beta", "none": "2s-gd"}


@functools.lru_cache(maxsize=256)
def _build(variant: Variant, calibration: Calibration, num_iterations: int) -> Estimator:
    _validate.check_int_in_range(num_iterations, "num_iterations", 1)
    _validate.check_choice(calibration, "calibration", CALIBRATIONS)
    name = _NAMES[variant]
    if variant in ("dp", "beta-only"):
        name += f"/{calibration}"
    ledger_fn = functools.partial(_ledger, name, variant, calibration, num_iterations)
    return Estimator(name, _init, _make_step(variant, calibration, num_iterations),
                     num_iterations, "full", ledger_fn, padded=_padded(variant, calibration))


@functools.lru_cache(maxsize=64)
def _padded(variant: Variant, calibration: Calibration, row_block: int = ROW_BLOCK) -> Padded:
    """The padded form (one program for every ``n`` and ``T``): the step reads ``n`` only as
    the count its means divide by (and beta-only's declared sensitivity) and ``T`` only in the
    per-step budget (:func:`per_step_rho`); its sums run over blocks of ``row_block`` records
    up to the count, so a study's settings of every ``n`` from ``row_block / 2`` up share one
    program (:func:`dpjax.sweep.plan_programs`)."""
    name = _NAMES[variant] + (f"/{calibration}" if variant != "none" else "")
    return Padded(name, _init, _make_step(variant, calibration, None, row_block), "full",
                  row_block=row_block)


def dp_2s_gd(num_iterations: int, calibration: Calibration = "tight") -> Estimator:
    """DP-2S-GD (Algorithm 1) with ``T = num_iterations`` full-batch steps (static).

    Args:
        num_iterations: ``T``; enters the noise calibration.
        calibration: ``"tight"`` (default, ``lambda = (gamma/n) sqrt(2T/rho)``, delivers
            ``rho``) or ``"paper"`` (``lambda = (2 gamma/n) sqrt(T/rho)``, delivers ``rho/2``).
    """
    return _build("dp", calibration, num_iterations)


def dp_2s_gd_beta_only(num_iterations: int, calibration: Calibration = "paper") -> Estimator:
    """The paper's Algorithm 3 ("privacy for beta only"). **Not DP as claimed**: see the module
    docstring; its ledger reports the true sensitivity ``2 gamma_2`` of the beta releases and,
    the first stage being non-private, not DP. For reproduction only."""
    return _build("beta-only", calibration, num_iterations)


def two_stage_gd(num_iterations: int) -> Estimator:
    """Non-private 2S-GD (Algorithm 2): no clipping, no noise; uses ``eta`` and ``alpha``."""
    return _build("none", "paper", num_iterations)


# --------------------------------------------------------------------------------------------
# Ledger
# --------------------------------------------------------------------------------------------


def _ledger(
    name: str,
    variant: Variant,
    calibration: Calibration,
    T: int,
    n: int,
    hparams: DPIVHyperparams,
    events: tuple[PrivacyEvent, PrivacyEvent],
) -> Ledger:
    """The privacy ledger of one run (one privacy level) on ``n`` records, composed from the
    run's privacy events (``events = (Theta events, beta events)``, leading axis = steps); the
    zCDP guarantee is converted to (epsilon, delta) at ``hparams.delta``. ``hparams`` supply
    only the requested budget and the labels."""
    rho1, rho2, eta, alpha, gamma1, gamma2, delta = (float(np.asarray(v)) for v in hparams)
    ev1, ev2 = events
    notes = [f"n = {n}, T = {T}, eta = {eta:g}, alpha = {alpha:g}, "
             f"gamma1 = {gamma1:g}, gamma2 = {gamma2:g}"]
    if variant == "none":
        what = ("Theta^(t) of unclipped, noise-free two-stage GD",
                "beta^(t) of unclipped, noise-free two-stage GD")
        releases = [Release.from_event(ev, w) for ev, w in zip(events, what)]
        notes.append("non-private baseline")
        return Ledger.build(name, releases, "basic", variant="non-private", notes=notes)

    cal_text = {
        "paper": "lambda = (2*gamma/n)*sqrt(T/rho) (Prop 3.1, eq. 4)",
        "tight": "lambda = (gamma/n)*sqrt(2T/rho)",
    }[calibration]

    def noise(k: int) -> str:
        return (f"noise {cal_text.replace('gamma', f'gamma{k}').replace('rho', f'rho{k}')} "
                "per entry of the averaged gradient")

    g1_text = ("G1 = (1/n) sum_i CLIP_gamma1(z_i (z_i^T Theta^t - x_i^T)) (Frobenius); "
               "sensitivity 2*gamma1/n; " + noise(1))
    g2_text = ("G2 = (1/n) sum_i CLIP_gamma2(Theta^t^T z_i (z_i^T Theta^t beta^t - y_i)); "
               "sensitivity 2*gamma2/n")
    requested = ZCDP(rho2) if variant == "beta-only" else ZCDP(rho1 + rho2)
    if variant == "dp":
        releases = [Release.from_event(ev1, g1_text),
                    Release.from_event(ev2, f"{g2_text}; {noise(2)}")]
        if calibration == "paper":
            var = ("paper calibration (Prop 3.1): over-noised by sqrt(2), delivers "
                   "(rho1 + rho2)/2-zCDP, not the stated rho1 + rho2 (spec 004 §6 A1)")
        else:
            var = "tight calibration: delivers (rho1 + rho2)-zCDP"
        notes += ["simultaneous update; the whole transcript {Theta^t, beta^t}_{t=1..T} is "
                  "released; adaptive zCDP composition of 2T Gaussian mechanisms",
                  "step sizes, clipping thresholds and the start must be data-independent"]
    else:
        releases = [
            Release.from_event(ev1, "Theta^t of unclipped, un-noised first-stage GD on all "
                                    "records"),
            Release.from_event(ev2, f"{g2_text} declared, true 2*gamma2 (n x declared): "
                                    f"Theta^t depends on every record; {noise(2)}"),
        ]
        var = ("paper-literal Algorithm 3 (privacy for beta only): NOT DP as claimed -- "
               "Lemma F.1's rho2-zCDP is invalid (spec 004 §6 A2)")
        beta_rho = sum(b.rho for b in releases[1].budgets())
        notes += ["Theta^t is unclipped, un-noised GD on all records: a non-private release, "
                  "and replacing one record moves Theta^t and hence all n clipped beta-terms, "
                  "so the true l2 sensitivity of G2 is 2*gamma2 = n x the declared 2*gamma2/n",
                  f"the beta releases alone, at their true sensitivity, give {beta_rho:.6g}-zCDP "
                  "(n^2 x the claimed rho: vacuous); for a valid beta-only guarantee run "
                  "Algorithm 1 and charge rho1 + rho2"]
    return Ledger.build(name, releases, "zcdp", variant=var, requested=requested, delta=delta,
                        notes=notes)


# --------------------------------------------------------------------------------------------
# Tuning rules of the paper (host side)
# --------------------------------------------------------------------------------------------


def clipping_threshold(n: int, q: int, num_iterations: int, tau: float = 5.0,
                       c0: float = 1.0) -> float:
    """The paper's ``gamma = c0 (sqrt(q) + sqrt(tau + log(n T)))^2`` (eq. 4); ``c0 = 1`` by
    default (unstated in the paper; spec 004 §6 B1). Data-independent (``n`` is public)."""
    return float(c0 * (math.sqrt(q) + math.sqrt(tau + math.log(n * num_iterations))) ** 2)


def delta_tau(n: int, q: int, tau: float = 5.0, C0: float = 1.0, sigma_z: float = 1.0) -> float:
    """``delta(tau) = C0 sigma_z^2 (sqrt(q) + sqrt(tau)) / sqrt(n)`` (eq. 10)."""
    return float(C0 * sigma_z**2 * (math.sqrt(q) + math.sqrt(tau)) / math.sqrt(n))


def psi_tau(n: int, p: int, q: int, sigma2: float, tau: float = 5.0, c0: float = 1.0,
            sigma_z: float = 1.0, C0: float = 1.0) -> float:
    """``psi(tau) = c0 sigma_z sigma_2 sqrt(pq)(tau + log 2pq) / (sqrt(n)(1 - delta)^2)``."""
    d = delta_tau(n, q, tau, C0, sigma_z)
    return float(c0 * sigma_z * sigma2 * math.sqrt(p * q) * (tau + math.log(2 * p * q))
                 / (math.sqrt(n) * (1 - d) ** 2))


class StepSizes(NamedTuple):
    """The paper's step-size quantities (eqs. 3, 8, 10) for one ``(Theta, n)``."""

    eta: float  # 1/(1+delta)^2 = eta_max/2, used in all the paper's experiments
    alpha: float  # 2/(2 gamma_up + gamma_low) = alpha_max/2
    eta_max: float  # 2/(1+delta)^2 (eq. 3)
    alpha_max: float  # 4/(2 gamma_up + gamma_low)
    eta_opt: float  # 2/((1+delta)^2 + (1-delta)^2) (eq. 8)
    alpha_opt: float  # 2/(gamma_up + gamma_low)
    delta: float  # delta(tau)
    gamma_low: float  # (1-delta)^2 (sigma_min(Theta) - psi)^2
    gamma_up: float  # (1+delta)^2 (||Theta|| + psi)^2


def paper_step_sizes(theta: Any, n: int, tau: float = 5.0, psi: float = 0.0, C0: float = 1.0,
                     sigma_z: float = 1.0) -> StepSizes:
    """The step sizes of the paper's experiments from a first-stage matrix ``Theta`` (``q x p``).

    ``eta = 1/(1+delta)^2`` and ``alpha = 2/(2 gamma_up + gamma_low)`` with ``delta(tau)`` of
    :func:`delta_tau`, ``gamma_low = (1-delta)^2 (sigma_min(Theta) - psi)^2`` and
    ``gamma_up = (1+delta)^2 (||Theta||_2 + psi)^2``. ``psi = 0`` by default (spec 004 §6 B1:
    with any reasonable constant the full ``psi`` exceeds ``sigma_min`` at the paper's ``n``).

    Privacy: ``Theta`` must be public. In simulations it is the true parameter (an oracle); on
    real data a plug-in ``Theta_hat`` computed from the same data is **not** private (spec 004
    §6 A4) and must be reported as such.
    """
    th = np.asarray(theta, np.float64)
    if th.ndim != 2 or th.shape[0] < th.shape[1]:
        raise ValueError(f"theta must be a q x p matrix with q >= p; got shape {th.shape}")
    q = th.shape[0]
    d = delta_tau(n, q, tau, C0, sigma_z)
    sv = np.linalg.svd(th, compute_uv=False)
    g_low = (1 - d) ** 2 * (sv[-1] - psi) ** 2
    g_up = (1 + d) ** 2 * (sv[0] + psi) ** 2
    return StepSizes(
        eta=1.0 / (1 + d) ** 2, alpha=2.0 / (2 * g_up + g_low),
        eta_max=2.0 / (1 + d) ** 2, alpha_max=4.0 / (2 * g_up + g_low),
        eta_opt=2.0 / ((1 + d) ** 2 + (1 - d) ** 2), alpha_opt=2.0 / (g_up + g_low),
        delta=d, gamma_low=float(g_low), gamma_up=float(g_up),
    )


def contraction_factors(eta: float, alpha: float, s: StepSizes) -> tuple[float, float]:
    """``(kappa_Theta, kappa_beta)`` of eq. 10 for step sizes ``eta``, ``alpha``."""
    d = s.delta
    k_theta = max(abs(1 - eta * (1 - d) ** 2), abs(1 - eta * (1 + d) ** 2))
    k_beta = max(abs(1 - alpha * s.gamma_low / 2),
                 abs(1 - alpha * (2 * s.gamma_up + s.gamma_low) / 2))
    return float(k_theta), float(k_beta)


def make_hparams(rho1: Any, rho2: Any, eta: Any, alpha: Any, gamma1: Any = math.inf,
                 gamma2: Any = math.inf, delta: Any = DEFAULT_DELTA) -> DPIVHyperparams:
    """Hyperparameters as NumPy arrays (they broadcast, so grids are fine): float32 for the
    kernel, and ``delta`` (accounting only, read on the host) in float64 as given."""
    b = np.broadcast_arrays(*(np.asarray(v, np.float64)
                              for v in (rho1, rho2, eta, alpha, gamma1, gamma2, delta)))
    return DPIVHyperparams(*(x.astype(np.float32) for x in b[:-1]), b[-1])


# --------------------------------------------------------------------------------------------
# The convenience API
# --------------------------------------------------------------------------------------------


def _record(state: DPIVState, info: DPIVInfo):
    """Per step: the iterates ``(Theta, beta)`` and the two stages' clipped fractions (a
    module-level function, so the jit cache sees the same static argument every call)."""
    return state, jnp.stack([info.clip_frac1, info.clip_frac2])


def _check_gamma(gamma: Any, rho: Any, name: str, rho_name: str) -> np.ndarray:
    g = _validate.check_positive(gamma, name, allow_inf=True)
    if np.isinf(g).any() and np.isfinite(np.asarray(rho, np.float64)).any():
        raise ValueError(
            f"{name} = inf (no clipping) has unbounded sensitivity and is allowed only with "
            f"{rho_name} = inf; give a finite clipping threshold for a private run"
        )
    return g


def _num_records(data: iv.IVData) -> int:
    return int(data.z.shape[0])


def _fit(variant: Variant, key: Any, data: Any, *, rho1: Any, rho2: Any, eta: Any, alpha: Any,
         num_iterations: int, gamma1: Any = None, gamma2: Any = None, calibration: str = "paper",
         delta: Any = None, theta0: Any = None, beta0: Any = None, tau: float = 5.0,
         on_invalid: str = "raise", secure: bool = False, accountant: Any = None) -> FitResult:
    _validate.check_choice(calibration, "calibration", CALIBRATIONS)
    r1 = _validate.check_scalar(_validate.check_rho(rho1, "rho1"), "rho1")
    r2 = _validate.check_scalar(_validate.check_rho(rho2, "rho2"), "rho2")
    key, data, n, T, _, delta = checked_inputs(
        key, data, iv.validate_iv_data, _num_records, on_invalid=on_invalid,
        num_iterations=num_iterations, delta=delta, eta=eta,
        private=math.isfinite(r1) or math.isfinite(r2))
    q, p = data.z.shape[1], data.x.shape[1]
    e = float(eta)
    a = _validate.check_scalar(_validate.check_positive(alpha, "alpha"), "alpha")
    default_gamma = clipping_threshold(n, q, T, tau)
    g1 = default_gamma if gamma1 is None else gamma1
    g2 = default_gamma if gamma2 is None else gamma2
    if variant == "beta-only":
        g1 = math.inf  # Algorithm 3 does not clip the first stage
    else:
        g1 = _validate.check_scalar(_check_gamma(g1, r1, "gamma1", "rho1"), "gamma1")
    g2 = _validate.check_scalar(_check_gamma(g2, r2, "gamma2", "rho2"), "gamma2")
    dtype = data.z.dtype
    # on public values only, before anything runs: a refusal never depends on the data
    for name, g, r in (("gamma1", g1, r1), ("gamma2", g2, r2)):
        if variant != "none" and math.isfinite(r) and math.isfinite(g):
            _validate.check_noise_inputs(name, g, 2.0 * g / n, n * g, dtype)
    th0 = np.zeros((q, p)) if theta0 is None else _validate.check_array(
        theta0, "theta0", shape=(q, p))
    b0 = np.zeros(p) if beta0 is None else _validate.check_array(beta0, "beta0", shape=(p,))
    if variant == "none":
        estimator = two_stage_gd(T)
        r1 = r2 = math.inf
        g1 = g2 = math.inf
        key = jax.random.key(0)  # unused: the step draws nothing
    elif variant == "beta-only":
        estimator = dp_2s_gd_beta_only(T, calibration)
    else:
        estimator = dp_2s_gd(T, calibration)
    hp = make_hparams(r1, r2, e, a, g1, g2, delta)
    state0 = (jnp.asarray(th0, dtype), jnp.asarray(b0, dtype))

    diverged = FloatingPointError(
        "the iterates are not finite; the step sizes are too large for this data "
        "(2S-GD needs eta < 2/lambda_max(Z^T Z/n) and alpha < 2/lambda_max(H))")
    try:
        res = fit(estimator, key, data, state0, hp, n=n, record=_record, secure=secure,
                  accountant=accountant)
    except FloatingPointError:
        raise diverged from None
    if not np.isfinite(res.state.theta).all():
        raise diverged
    return res


@_validate.host_only
def fit_dp_2s_gd(
    key: Any,
    data: Any,
    *,
    rho1: Any,
    rho2: Any,
    delta: Any = None,
    eta: Any,
    alpha: Any,
    num_iterations: int,
    gamma1: Any = None,
    gamma2: Any = None,
    calibration: Calibration = "tight",
    theta0: Any = None,
    beta0: Any = None,
    tau: float = 5.0,
    on_invalid: str = "raise",
    secure: bool = False, accountant: Any = None,
) -> FitResult:
    """Fit DP-2S-GD (Algorithm 1) to one IV data set.

    Default calibration ``"tight"``: the ledger delivers the requested ``rho1 + rho2``
    (exactly). The paper's ``calibration="paper"`` delivers half of it.

    Args:
        key: PRNG key (or int seed) for the noise.
        data: :class:`~dpjax.models.iv.IVData` or ``(z (n, q), x (n, p), y (n,))``, ``q >= p``.
        rho1, rho2: zCDP budgets of the two stages in (0, inf]; inf gives exactly zero noise.
        delta: the delta of the ledger's (epsilon, delta) conversion, in (0, 1); default
            ``1/(2n)`` (the one delta policy of every ``fit_*``; the paper reports at
            ``DEFAULT_DELTA = 1e-5``: pass it to reproduce).
        eta, alpha: step sizes > 0; must be data-independent for the guarantee (see
            :func:`paper_step_sizes` for the paper's rule from a public ``Theta``).
        num_iterations: ``T >= 1``.
        gamma1, gamma2: clipping thresholds in (0, inf]; default the paper's
            ``(sqrt(q) + sqrt(tau + log(n T)))^2`` (``c0 = 1``); inf only with ``rho = inf``.
        calibration: ``"tight"`` (default; delivers ``rho1 + rho2``) or ``"paper"`` (delivers
            ``(rho1 + rho2)/2``).
        theta0, beta0: data-independent start (default zeros, as the paper).
        tau: the ``tau`` of the default clipping rule.
        on_invalid: ``"raise"`` (default; right for simulations) or ``"clip"`` (real data; see
            the privacy page's "Bad records on real data").
        secure: the floating-point-safe noise path for a real release (see
            :func:`dpjax.fit`).
        accountant: a :class:`dpjax.Accountant` this fit spends from (see :func:`dpjax.fit`):
            refused before anything runs if it would exceed the total.

    Returns:
        :class:`FitResult` with ``beta^(T)``, the iterates and the ledger: rho-zCDP under
        replace-one adjacency with rho as delivered (``rho1 + rho2`` by default,
        ``(rho1+rho2)/2`` for ``"paper"``).
    """
    return _fit("dp", key, data, rho1=rho1, rho2=rho2, eta=eta, alpha=alpha,
                num_iterations=num_iterations, gamma1=gamma1, gamma2=gamma2,
                calibration=calibration, delta=delta, theta0=theta0, beta0=beta0, tau=tau,
                on_invalid=on_invalid, secure=secure, accountant=accountant)


@_validate.host_only
def fit_dp_2s_gd_beta_only(
    key: Any, data: Any, *, rho2: Any, delta: Any = None, eta: Any, alpha: Any,
    num_iterations: int, gamma2: Any = None, calibration: Calibration = "paper",
    theta0: Any = None, beta0: Any = None, tau: float = 5.0, on_invalid: str = "raise",
    secure: bool = False, accountant: Any = None,
) -> FitResult:
    """The paper's Algorithm 3, for reproduction only: **not DP as claimed** (its ledger gives
    the beta releases their true sensitivity ``2 gamma2`` and a vacuous guarantee, and the
    non-private first stage makes the run not DP). Arguments as :func:`fit_dp_2s_gd` (no
    ``rho1`` or ``gamma1``: the first stage is neither clipped nor noised)."""
    return _fit("beta-only", key, data, rho1=math.inf, rho2=rho2, eta=eta, alpha=alpha,
                num_iterations=num_iterations, gamma2=gamma2, calibration=calibration,
                delta=delta, theta0=theta0, beta0=beta0, tau=tau, on_invalid=on_invalid,
                secure=secure, accountant=accountant)


@_validate.host_only
def fit_two_stage_gd(data: Any, *, eta: Any, alpha: Any, num_iterations: int,
                     theta0: Any = None, beta0: Any = None) -> FitResult:
    """Non-private 2S-GD (Algorithm 2): no clipping, no noise, no key. Its ledger says
    non-private."""
    return _fit("none", None, data, rho1=math.inf, rho2=math.inf, eta=eta, alpha=alpha,
                num_iterations=num_iterations, gamma1=math.inf, gamma2=math.inf,
                theta0=theta0, beta0=beta0)


@_validate.host_only
def fit_2sls(data: Any) -> FitResult:
    """Closed-form 2SLS (non-private): a :class:`FitResult` with ``estimate = beta_hat (p,)``,
    ``state = DPIVState(Theta_hat (q, p), beta_hat)``, no trace (nothing iterates) and a ledger
    that says non-private."""
    data = iv.validate_iv_data(data)
    beta_hat, theta_hat = (np.asarray(v) for v in _tsls_jit(data))
    n = _num_records(data)
    release = Release.from_event(no_privacy_event(), "closed-form 2SLS (Theta_hat, beta_hat): "
                                 "no clipping, no noise", f"full data ({n} records)")
    ledger = Ledger.build("2sls", [release], "basic", variant="non-private",
                          notes=["non-private baseline"])
    return FitResult(beta_hat, None, ledger, None, DPIVState(theta_hat, beta_hat))


_tsls_jit = jax.jit(iv.two_stage_least_squares)


# --------------------------------------------------------------------------------------------
# Registry: every estimator with a small example problem (the conformance suite runs over it)
# --------------------------------------------------------------------------------------------


def _example() -> registry.Example:
    model = iv.LinearIV(p=2, q=3, r=2)
    prm = model.draw_parameters(jax.random.key(0))
    data = model.simulate(jax.random.key(1), 300, model.pack(prm))

    def hp(level):
        # rho1 = rho2 = level: the paper calibration delivers rho = level in total (half the
        # stated 2 level), the tight one 2 level.
        return DPIVHyperparams(*map(jnp.float32, (level, level, 0.5, 0.03, 5.0, 5.0, 1e-5)))

    return registry.Example(data, (jnp.zeros((3, 2)), jnp.zeros(2)), hp)


def _register() -> None:
    T = 4
    for name, build, kw in [
        ("dp-2s-gd/paper", functools.partial(dp_2s_gd, T, "paper"),
         dict(requested=lambda lv: ("rho", lv))),
        ("dp-2s-gd/tight", functools.partial(dp_2s_gd, T),
         dict(requested=lambda lv: ("rho", 2 * lv))),
        ("dp-2s-gd-beta/paper (not DP as claimed)", functools.partial(dp_2s_gd_beta_only, T),
         dict(ledger_private=False)),
        ("2s-gd", functools.partial(two_stage_gd, T), dict(private=False)),
    ]:
        registry.register(registry.Entry(name, "dp-iv", build, _example, **kw))


_register()
