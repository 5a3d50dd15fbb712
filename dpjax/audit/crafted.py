"""Crafted canary cases: registered estimators, one step or one user, on records chosen so
that the pair moves the release by (almost) its whole declared sensitivity
(:func:`crafted_cases`; the setups in :func:`_crafted_setups`)."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.audit.canary import AUDIT_DELTA, CanaryCase, _beta_output, _gdp_mu
from dpjax.audit.engine import estimator_mechanism, flat_statistic
from dpjax.audit.plants import planted_bug, plants_reaching
from dpjax.base import probe_events

__all__ = ["crafted_case", "crafted_cases", "crafted_names"]

PyTree = Any


def crafted_names() -> tuple[str, ...]:
    """The names of :func:`crafted_cases`, in order (nothing is built or compiled)."""
    return tuple(_crafted_setups())


def _reports(state: PyTree) -> jax.Array:
    """The two reports an ``ldp-nldp`` state holds (its running means), flattened."""
    return jnp.concatenate([state.sxx.ravel(), state.sxy])


def crafted_cases() -> list[CanaryCase]:
    """One-step canary cases of registered estimators on crafted data: the peeling estimators,
    where the canary moves every coordinate's score as in the core ``mechanism/noisy-ht``
    case; Gaussian releases (the low-dimensional DP-EM of the RMC model, Algorithm 1, and one
    user of each local-DP Gaussian estimator), where the pair moves (almost) every coordinate
    by (almost) the whole sensitivity; and one user of LDP-IHT, whose l2-ball randomizer is
    audited through its hemisphere coin.

    The registry examples audit ``hd-dp-em/*`` and ``alg5-noisy-iht/logistic`` through the
    trajectory statistic on simulated data, where the signal fixes the selection and the
    released values alone leave the planted noise x 0.2 below the claim. Privacy must hold on
    every data set, so these cases choose one: a single step (``N0 = T = 1``; under sample
    splitting each step is its own release on its own batch, so one step is the whole
    guarantee of ``hd-dp-em``), ``s = 1``, a budget whose ledger claims ``(1, 1e-3)``, a
    public start, and two records (a fixed one and the canary) whose noise-free pre-threshold
    vectors are, up to sign, ``lambda (1, 0, 0, 0, 0, 0)`` on ``D`` and ``lambda (0, 0, 1, 1,
    1, 1)`` on ``D'`` (``lambda``: what the pair attains of the sensitivity). Coordinate 1
    carries the start, which drives every record's posterior weight or link to its extreme and
    cancels in the pre-threshold vector (RMC: coordinates 1 and 6, d = 7). The statistic is
    the released value of coordinate 0, 0 where it is not selected.

    * ``hd-dp-em/gmm/one-step``: ``GaussianMixture(0.5)``, ``T = 1``, ``eta = 1`` (the start
      cancels), start ``0.1 (e_0 + e_1)``, records ``10^3 (3, -1, 1, 1, 1, 1)`` (fixed),
      ``10^3 (1, 1, -1, -1, -1, -1)`` (canary) and ``10^3 (-1, 3, 1, 1, 1, 1)``: every weight
      ``tanh(<y, beta>/(2 sigma^2))`` is 1, and the pair attains the declared ``2 T / n0`` in
      every coordinate but coordinate 1.
    * ``hd-dp-em/rmc/one-step``: ``RegressionMissingCovariates(1.0)``, ``T = 1``, ``eta =
      1``, start ``0.01`` in every coordinate, every ``y = 10^3``, d = 7 with two steering
      coordinates (1 and 6, one ``-10^8`` and one ``T`` per record, opposite between the fixed
      record and the others, so that ``<x_obs, beta>`` is about ``-10^6`` and their terms
      cancel). A record's term is ``-2 T^2`` or ``2 T^2`` where ``x_j`` is observed (by its
      sign) and ``3 T^2 - beta_j`` where it is missing (the conditional mean ``c beta_j`` and
      ``<nv, beta>`` are clipped at ``T``): the fixed record (all observed, ``+T``) against the
      canary (coordinate 0 missing, 2-5 at ``-10^8``) and its replacement (2-5 missing, 0 at
      ``-10^8``) attains ``5 T^2 - 0.01`` of the declared ``6 T^2 + 0.01`` (0.83).
    * ``alg5-noisy-iht/logistic/one-step``: logistic GLM, ``R = 1``, ``eta = 1``, start
      ``b e_1`` with ``b = 1 + sigmoid(b) = 1.87`` (so ``beta - eta g`` is 0 on coordinate
      1), designs ``(1, 1, 1, 1, 1, 1)``, ``(1, 1, -1, -1, -1, -1)`` and ``(-1, 1, 1, 1, 1,
      1)``, every ``y = -1``: the residual is ``b`` for every record, and the pair attains
      ``b / 2 = 0.93`` of the true sensitivity ``2 (R + c1) sigma_x / n``. The printed ``B``
      declares twice that, so the ledger delivers ``(epsilon / 2, delta)``: run at epsilon 2.

    * ``ld-dp-em/rmc/one-step``: the classic Gaussian release of the same RMC statistic
      (``Delta_2 = sqrt(d) lambda``, as the paper prints), d = 20, one record: the canary has
      every coordinate but the steering coordinate 0 missing (terms ``3 T^2 - 0.01``), its
      replacement every coordinate observed at ``-10^8`` (terms ``-2 T^2``), so the pair moves
      19 of 20 coordinates by 0.83 of ``lambda``: 0.81 of the declared l2 sensitivity. A
      halved sensitivity is then a violation (``2 x 0.81 > 1``); the claim is the GDP curve of
      the release at :data:`AUDIT_DELTA`, the statistic the projection on the difference.
    * ``alg1-noisy-gd/logistic/one-step``: Algorithm 1 (paper calibration) with ``T = 1`` at
      epsilon 2 (the printed ``B`` is twice the true sensitivity: the events give 1), ``R =
      1``, ``eta = 1``, d = 20, start ``100 e_1``, one record with ``y = -1``: the canary
      ``x = (1, 1, -1, ..., -1)`` against ``(-1, 1, 1, ..., 1)`` (on the l2 ball of radius
      ``sqrt(d)``, unclipped); the link is 1 for both, each residual 2, so the pair moves 19
      of 20 coordinates by the true ``2 (R + c1) sigma_x / n``: a reach of ``sqrt(19/20)``.
      (The registry example, T = 5 steps at ``(eps/5, delta/5)`` with ``log(2T/delta)``,
      leaves both plants within the calibration's slack at the audited delta; one step does
      not.)

    ``hd-dp-em/mor`` has no such case: for the corrected gradient the record term
    ``Pi(x) (c Pi(y) - Pi(x^T beta))`` lies in ``[-T^2, T^2]^d`` (``c Pi(y)`` has the sign of
    ``x^T beta``), so the declared ``4 T^2 / n0`` is twice the true sensitivity, and with
    noise x 0.2 a one-step release at ``(1, 1e-3)`` is at most ``0.82``-DP: no violation to
    catch (docs/audits.md).
    """
    return [crafted_case(name) for name in crafted_names()]


@functools.cache
def _crafted_setups() -> dict[str, tuple]:
    """``name -> (estimator, hparams, start, data(record), canary, replacement[, output[,
    direction]])`` of :func:`crafted_cases`, in their order (nothing compiled here)."""
    return {**_hd_dp_em_setups(), **_glm_setups(), **_ldp_gem_setups(),
            **_ldp_regression_setups(), **_ld_dp_em_setups(), **_ldp_iht_setups()}


_BIG = 1e3  # the scale of the crafted records
_FAR, _CLIP = -1e8, 1.0  # RMC: a steering coordinate's value, and the clipping level T


def _f32(*xs):
    return tuple(jnp.asarray(x, jnp.float32) for x in xs)


def _sign_patterns(d: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sign patterns of the fixed record, the canary and its replacement (coordinate 1: the
    start's): fixed + canary = (2, 0, 0, 0, 0, 0), fixed + replacement = (0, 0, 2, 2, 2, 2)."""
    fixed = np.array([1.0, -1.0] + [1.0] * (d - 2))
    canary = np.array([1.0, 1.0] + [-1.0] * (d - 2))
    other = np.array([-1.0, 1.0] + [1.0] * (d - 2))
    return fixed, canary, other


def _hd_dp_em_setups() -> dict[str, tuple]:
    """``hd-dp-em/gmm/one-step`` and ``hd-dp-em/rmc/one-step``."""
    from dpjax.algorithms import dp_em
    from dpjax.models import GaussianMixture, RegressionMissingCovariates
    from dpjax.models.gmm import GMMData
    from dpjax.models.rmc import RMCData

    fixed, canary, other = _sign_patterns()
    d, big, far, T = len(fixed), _BIG, _FAR, _CLIP
    # GMM: <y, beta0> > 0 for all three records (coordinate 0 of the fixed record and
    # coordinate 1 of the replacement tripled; clipping to T = 1 undoes it)
    gmm = [big * fixed * [3, 1, 1, 1, 1, 1], big * canary, big * other * [1, 3, 1, 1, 1, 1]]
    # RMC (x, z): coordinates 1 and 6 steer; x = 0 where missing (z = 0)
    rmc = [(np.array([T, T, T, T, T, T, far]), np.ones(7)),
           (np.array([0, far, far, far, far, far, T]), np.r_[0.0, np.ones(6)]),
           (np.array([far, far, 0, 0, 0, 0, T]), np.r_[1.0, 1.0, np.zeros(4), 1.0])]
    return {
        "hd-dp-em/gmm/one-step": (
            dp_em.hd_dp_em(GaussianMixture(0.5), 1, 1, calibration="paper"),
            dp_em.DPEMHyperparams(*_f32(1.0, 1e-3, 1.0, 1.0)),
            np.r_[0.1, 0.1, np.zeros(d - 2)],
            lambda r: GMMData(*_f32(np.stack([r, gmm[0]]))), gmm[1], gmm[2]),
        "hd-dp-em/rmc/one-step": (
            dp_em.hd_dp_em(RegressionMissingCovariates(1.0), 1, 1, calibration="paper"),
            dp_em.DPEMHyperparams(*_f32(1.0, 1e-3, 1.0, T)), np.full(7, 0.01),
            lambda r: RMCData(*_f32(np.stack([r[0], rmc[0][0]]), np.stack([r[1], rmc[0][1]]),
                                    [1e3, 1e3])), rmc[1], rmc[2]),
    }


def _glm_setups() -> dict[str, tuple]:
    """``alg5-noisy-iht/logistic/one-step`` and ``alg1-noisy-gd/logistic/one-step``."""
    from dpjax.algorithms import dp_glm
    from dpjax.models.glm import GLM, GLMData

    fixed, canary, other = _sign_patterns()
    d, dg = len(fixed), 20
    b = 1.0
    for _ in range(100):  # the fixed point b = 1 + sigmoid(b)
        b = 1.0 + 1.0 / (1.0 + math.exp(-b))
    glm = [np.abs(fixed), canary, other]  # coordinate 1 = 1 for all: x^T beta0 = b
    # rho is informational for Algorithm 5: eps^2 / (4 T log(2 T / delta)), T = 1
    hp = dp_glm.GLMHyperparams(*_f32(2.0, 1e-3, 1.0, 1.0, 1.0 / math.log(2e3)))
    return {
        "alg5-noisy-iht/logistic/one-step": (
            dp_glm.noisy_iht(GLM("logistic"), 1, 1, dp_glm.PAPER_B_CONSTANT, calibration="paper"),
            hp, np.r_[0.0, b, np.zeros(d - 2)],
            lambda r: GLMData(*_f32(np.stack([r, glm[0]]), [-1.0, -1.0])), glm[1], glm[2]),
        "alg1-noisy-gd/logistic/one-step": (
            dp_glm.noisy_gd(GLM("logistic"), 1, "paper", dp_glm.PAPER_B_CONSTANT), hp,
            np.r_[0.0, 100.0, np.zeros(dg - 2)],
            lambda r: GLMData(*_f32(r[None], [-1.0])), np.r_[1.0, 1.0, -np.ones(dg - 2)],
            np.r_[-1.0, 1.0, np.ones(dg - 2)]),
    }


def _ldp_gem_setups() -> dict[str, tuple]:
    """``ldp-gem/{gmm,mor,rmc}/one-user``: one user in one round, so the release is beta0 +
    eta * (the user's report). The canary's per-sample gradient is +10^6 in every coordinate
    but 0, its replacement's -10^6 (GMM and MoR: coordinate 0 at +1 steers the weight to +1
    under beta0 = 0.5 e_0; RMC, fully observed: y = +-10^6 times x = 1). At the paper
    accounting's calibration (``rho = eps~^2``, by name), as the peeling cases use the paper's:
    the rows of docs/audits.md were measured there."""
    from dpjax.algorithms import ldp_gem
    from dpjax.models import GaussianMixture, MixtureOfRegressions, RegressionMissingCovariates
    from dpjax.models.gmm import GMMData
    from dpjax.models.mor import MoRData
    from dpjax.models.rmc import RMCData

    dl, big = 10, _BIG
    flip = np.r_[1.0, -np.ones(dl - 1)]
    pairs = {GaussianMixture(0.5): (big**2 * np.ones(dl), big**2 * flip),
             MixtureOfRegressions(0.5): ((np.ones(dl), big**2), (flip, big**2)),
             RegressionMissingCovariates(1.0): (big**2, -big**2)}
    hp = ldp_gem.LDPGEMHyperparams(*_f32(1.0, 1e-3, 1.0, 2.0, 0.05, np.nan))

    def one_user(model, rec):
        if model.name == "gmm":
            return GMMData(*_f32(rec[None]))
        if model.name == "mor":
            return MoRData(*_f32(rec[0][None], [rec[1]]))
        return RMCData(*_f32(np.ones((1, dl)), np.ones((1, dl)), [rec]))

    return {f"ldp-gem/{model.name}/one-user": (
        ldp_gem.ldp_gem(model, 1, calibration="paper"), hp, np.r_[0.5, np.zeros(dl - 1)],
        functools.partial(one_user, model), rec_in, rec_out)
        for model, (rec_in, rec_out) in pairs.items()}


def _ldp_regression_setups() -> dict[str, tuple]:
    """The sparse LDP regressions, one user: x = 10^3 (1, 1, 1, 1) against its negation, y =
    10^3 (both shrink to the corners: the cross term x_bar y_bar moves by its whole range, the
    outer product x~ x~^T not at all). ``ldp-nldp``'s state holds the two reports (the
    estimate solves with the noisy covariance); ``ldp-public`` with the public covariance I and
    lambda = 0 releases the cross report as its estimate. ``ldp-nldp`` at
    ``calibration="analytic"`` by name (each report at ``(eps/2, delta/2)``), the default when
    the rows of docs/audits.md were measured."""
    from dpjax.algorithms import ldp_sparse

    d_lr, big = 4, _BIG
    x_lr = [big * np.ones(d_lr), -big * np.ones(d_lr)]
    nldp_hp = ldp_sparse.NLDPHyperparams(*_f32(2.0, 1e-3, 3.0, 2.0, 2.0, 0.05))
    public_hp = ldp_sparse.PublicHyperparams(*_f32(1.0, 1e-3, 2.0, 2.0, 0.0))
    x_pub = math.sqrt(d_lr) * np.eye(d_lr)  # x_pub^T x_pub / d = I
    return {
        **{name: (est, nldp_hp, np.zeros(d_lr),
                  lambda r: (*_f32(r[None], [big]),), x_lr[0], x_lr[1], _reports)
           for name, est in (("ldp-nldp/one-user", ldp_sparse.nldp(calibration="analytic")),
                             ("ldp-nldp/per-user/one-user",
                              ldp_sparse.nldp(per_user=True, calibration="analytic")))},
        "ldp-public/one-user": (ldp_sparse.nldp_public(), public_hp, np.zeros(d_lr),
                                lambda r: (*_f32(r[None], [big], x_pub),), x_lr[0], x_lr[1]),
    }


def _ld_dp_em_setups() -> dict[str, tuple]:
    """``ld-dp-em/rmc/one-step``: one record, coordinate 0 steers (observed at -10^8 in both
    records)."""
    from dpjax.algorithms import dp_em
    from dpjax.models import RegressionMissingCovariates
    from dpjax.models.rmc import RMCData

    dg, far, T = 20, _FAR, _CLIP
    rmc_ld = [(np.r_[far, np.zeros(dg - 1)], np.r_[1.0, np.zeros(dg - 1)]),
              (np.full(dg, far), np.ones(dg))]
    return {"ld-dp-em/rmc/one-step": (
        dp_em.ld_dp_em(RegressionMissingCovariates(1.0), 1),
        dp_em.DPEMHyperparams(*_f32(1.0, 1e-3, 1.0, T)), np.full(dg, 0.01),
        lambda r: RMCData(*_f32(r[0][None], r[1][None], [1e3])), rmc_ld[0], rmc_ld[1])}


def _ldp_iht_setups() -> dict[str, tuple]:
    """``ldp-iht/one-user``: LDP-IHT, one user in one round. The l2-ball randomizer keeps the
    true hemisphere with probability e^eps/(e^eps+1). With theta0 = 0 the gradient is -x_bar
    y_bar: y = +-10^3 at x = 10^3 (1, 1, 1, 1) gives +-tau1 tau2 (1, 1, 1, 1), norm 2 tau1
    tau2, 2/3 of the radius 2 tau1 (theta_norm sqrt(k') tau1 + tau2) for tau1 = 0.25, tau2 = 1
    (the sign draw b is +1 with probability 5/6); k' = d = 4 (no truncation), so the release
    is the report scaled onto the unit ball, and its projection on (1, 1, 1, 1) has the sign
    of the hemisphere (times b): the event's log-ratio is 0.64 honest, 1.57 with noise x 0.2
    (the coin at 5 eps), against the claim eps = 1 (pure, from the ledger). Its noise-free
    release is not defined (the direction is drawn even at noise x 0): the statistic is
    given."""
    from dpjax.algorithms import ldp_sparse

    d_lr, big = 4, _BIG
    return {"ldp-iht/one-user": (
        ldp_sparse.ldp_iht(1, d_lr), ldp_sparse.IHTHyperparams(*_f32(1.0, 0.25, 1.0, 1.0)),
        np.zeros(d_lr), lambda y: (*_f32(big * np.ones((1, d_lr)), [y]),), big, -big, None,
        np.ones(d_lr))}


@functools.cache
def crafted_case(name: str) -> CanaryCase:
    """The case ``name`` of :func:`crafted_cases` (built on first use: each runs its
    estimator a few times)."""
    from dpjax.accounting import gaussian_epsilon

    setups = _crafted_setups()
    if name not in setups:
        raise ValueError(f"name must be one of {sorted(setups)}; got {name!r}")
    estimator, hp, beta0, data, rec_in, rec_out, *rest = setups[name]
    output, direction = (list(rest) + [None, None])[:2]
    data_in, data_out = data(rec_in), data(rec_out)
    beta0 = jnp.asarray(beta0, jnp.float32)
    events = probe_events(estimator, data_in, beta0, hp)
    n = int(jax.tree_util.tree_leaves(data_in)[0].shape[0])  # the records (first leaf's rows)
    approx = estimator.ledger(n, hp, events).approx_dp  # the honest ledger of those events
    kinds = {e.kind for e in events}
    if direction is not None:  # a coin-based randomizer: pure eps, the statistic given
        return CanaryCase(name, estimator, hp, beta0, data_in, data_out, 0,
                          flat_statistic(direction, np.zeros(beta0.shape)),
                          float(approx.epsilon), float(approx.delta), 1.0,
                          pure_epsilon=float(approx.epsilon), plants=plants_reaching(kinds))
    # the noise-free releases at the same hyperparameters (the same clipping)
    with planted_bug("noise-x0"):
        mech = jax.jit(estimator_mechanism(estimator, hp, beta0, output or _beta_output))
        out_in, out_out = (np.asarray(mech(jax.random.key(0), x)) for x in (data_in, data_out))
    mu = _gdp_mu(events, disjoint=True)
    if mu is None:
        # the pure-DP bound of one peeling release: s rounds of report-noisy-max (2 Delta / b
        # each) and s Laplace values (Delta / b each), Delta the true sensitivity
        (ev,) = events
        pure = 3 * ev.s * float(ev.true_sensitivity[0]) / float(ev.scale[0])
        return CanaryCase(name, estimator, hp, beta0, data_in, data_out, 0,
                          flat_statistic(out_in, np.zeros(beta0.shape)), float(approx.epsilon),
                          float(approx.delta), float(np.abs(out_in - out_out).max()),
                          pure_epsilon=pure)
    # a Gaussian release: the claim is its GDP curve at AUDIT_DELTA
    return CanaryCase(name, estimator, hp, beta0, data_in, data_out, 0,
                      flat_statistic(out_in - out_out, out_out),
                      float(gaussian_epsilon(mu, AUDIT_DELTA)), AUDIT_DELTA,
                      float(np.linalg.norm(out_in - out_out)), gdp_mu=mu,
                      claim_kind="gdp-curve", output=output)
