"""A canary audit case (:class:`CanaryCase`: a neighbouring pair, an attack and the claim it
tests) and :func:`audit_case`, its audit honest or with a planted bug."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from dpjax import _validate, mechanisms
from dpjax.audit.engine import AuditResult, audit, epsilon_lower_bound, estimator_mechanism
from dpjax.audit.plants import PLANTS, planted_bug
from dpjax.audit.trajectory import trajectory_mechanism
from dpjax.base import Estimator

__all__ = ["AUDIT_DELTA", "CanaryCase", "audit_case"]

PyTree = Any

#: The delta at which a canary case's curve (GDP or rho-zCDP) is audited: a delta an audit
#: with a few thousand trials can test.
AUDIT_DELTA = 0.05


class CanaryCase(NamedTuple):
    """A canary audit of one estimator: the neighbouring pair, the attack and the claim.

    Attributes:
        name: the registry name.
        estimator: the estimator (static configuration of the registry entry).
        hparams: one privacy level's hyperparameters.
        params0: the data-independent start.
        data_in, data_out: neighbouring data sets (replace-one: they differ in record
            ``index`` only); ``data_in`` holds the canary.
        index: the canary's row (in the last batch under disjoint batching, so no later step
            washes it out).
        statistic: ``release -> scalar``: the projection on the noise-free difference of the
            releases on the two data sets.
        claim_epsilon, delta: the (epsilon, delta) the honest estimator's ledger states.
        separation: the noise-free distance of the two releases (the attack's signal).
        gdp_mu: for runs whose releases are all Gaussian, the mu of mu-Gaussian DP that the
            run's events give (``sqrt(sum_i (true_i / scale_i)^2)`` over the releases, the max
            over steps under sample splitting): ``accounting.gaussian_epsilon(mu, delta)`` is
            the exact epsilon if a record attains every sensitivity bound, and an upper bound
            on what any audit can certify; ``mu / 0.2`` and ``mu / 0.5`` are the planted
            variants'. ``None`` where a release is not Gaussian.
        pure_epsilon: the same for a pure-DP (Laplace) run; ``None`` otherwise.
        attack: ``"final"`` (``statistic`` maps the final ``state.beta``) or ``"trajectory"``
            (``statistic`` maps the stacked states after every step: the per-step score attack
            of :func:`trajectory_statistic`).
        claim_kind: where ``claim_epsilon`` comes from: ``"ledger"`` (the ledger's
            ``approx_dp``), ``"zcdp-curve"`` (the ledger's rho-zCDP converted at ``delta``) or
            ``"gdp-curve"`` (the mu-GDP curve of the run's Gaussian events at ``delta``: the
            exact curve the recorded releases deliver, ``gaussian_epsilon(gdp_mu, delta)``).
    """

    name: str
    estimator: Estimator
    hparams: PyTree
    params0: PyTree
    data_in: PyTree
    data_out: PyTree
    index: int
    statistic: Callable[[PyTree], jax.Array]
    claim_epsilon: float
    delta: float
    separation: float
    gdp_mu: float | None = None
    pure_epsilon: float | None = None
    attack: str = "final"
    claim_kind: str = "ledger"
    engine: Any = None  # the compiled trajectory audit (_Trajectories) that built the case
    records: tuple = ()  # (canary, replacement): the private rows that differ
    weights: Any = None  # the trajectory statistic's weights, (num_steps, state size)
    plants: tuple = PLANTS  # the plants that reach its releases (plants_reaching)
    output: Any = None  # "final" attack: state -> the release audited (None: state.beta)


    def epsilon_bound(self, factor: float = 1.0) -> float | None:
        """The tight epsilon (at ``delta``) of the run with every noise scale times ``factor``,
        from :attr:`gdp_mu` or :attr:`pure_epsilon`; ``None`` where neither applies."""
        from dpjax.accounting import gaussian_epsilon

        if self.gdp_mu is not None:
            return float(gaussian_epsilon(self.gdp_mu / factor, self.delta))
        if self.pure_epsilon is not None:
            return self.pure_epsilon / factor
        return None


def _gdp_mu(events: PyTree, disjoint: bool) -> float | None:
    """The mu-GDP of a run's (stacked) events if all are Gaussian (see :class:`CanaryCase`)."""
    is_event = lambda x: isinstance(x, mechanisms.PrivacyEvent)  # noqa: E731
    per_step = []
    for e in jax.tree_util.tree_leaves(events, is_leaf=is_event):
        if not is_event(e) or e.kind not in ("gaussian", "gaussian-zcdp"):
            return None
        scale = np.asarray(e.scale, np.float64)
        with np.errstate(divide="ignore"):
            mu2 = np.where(scale > 0, (np.asarray(e.true_sensitivity, np.float64) / scale)**2,
                           np.inf)
        per_step.append(mu2.reshape(mu2.shape[0], -1).sum(1))
    if not per_step:
        return None
    total = np.sum(per_step, axis=0)
    return float(np.sqrt(total.max() if disjoint else total.sum()))


def _beta_output(state: PyTree) -> PyTree:
    return state.beta


def audit_case(
    case: CanaryCase,
    key: jax.Array,
    *,
    plant: str | None = None,
    num_trials: int = 4000,
    confidence: float = 0.95,
    batch_size: int | None = 1000,
) -> AuditResult:
    """Audit ``case`` (with the planted bug ``plant``, or honest) at its claimed delta.

    A trajectory case built by :func:`canary_case` reuses its two compiled functions (the
    plant is a traced factor there); ``batch_size`` then does not apply (the case's chunk
    does)."""
    if case.engine is not None:
        s_in, s_out = _engine_statistics(case, key, plant, num_trials)
        return epsilon_lower_bound(s_in, s_out, delta=case.delta, confidence=confidence)
    with planted_bug(plant):
        if case.attack == "trajectory":
            mech = trajectory_mechanism(case.estimator, case.hparams, case.params0)
        else:
            mech = estimator_mechanism(case.estimator, case.hparams, case.params0,
                                       case.output or _beta_output)
        return audit(mech, key, case.data_in, case.data_out, case.statistic,
                     num_trials=num_trials, delta=case.delta, confidence=confidence,
                     batch_size=batch_size)


def _engine_statistics(case: CanaryCase, key: jax.Array, plant: str | None,
                       num_trials: int) -> list[np.ndarray]:
    """:func:`trajectory_statistic` of ``num_trials`` runs on each data set of ``case``
    (keys from ``split(key)``, as :func:`audit`), through the case's compiled functions."""
    _validate.check_int_in_range(num_trials, "num_trials", 4)
    eng, (rec_in, rec_out), w = case.engine, case.records, case.weights
    tile = eng.tile
    out = []
    for k, rec in zip(jax.random.split(key), (rec_in, rec_out)):
        stats = [np.sum(w * (x - 0.5 * (a + b)) * (a - b), axis=(1, 2))
                 for x, a, b, _ in eng.runs(k, tile(rec, num_trials), tile(rec_in, num_trials),
                                            tile(rec_out, num_trials), num_trials, plant)]
        out.append(np.concatenate(stats)[:num_trials])
    return out
