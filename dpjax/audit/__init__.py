r"""Empirical privacy auditing: a statistical lower bound on epsilon from a membership test.

If a mechanism ``M`` is (epsilon, delta)-DP, then for the neighbouring data sets ``D`` (with a
target record) and ``D'`` (the target replaced) and *every* event ``S``,

.. math::

    P(M(D) \in S) \le e^\epsilon P(M(D') \in S) + \delta
    \quad\text{and the same with } D, D' \text{ swapped},

so any test that separates ``M(D)`` from ``M(D')`` certifies
``epsilon >= log((P(M(D) in S) - delta) / P(M(D') in S))``. The audit

1. runs ``M`` ``num_trials`` times on each data set (``vmap`` over keys, chunked),
2. maps each release to a scalar **attack statistic** (e.g. the score/tracing statistic of
   spec 003 §3.4: ``<beta_hat - beta, S_beta(z~)>`` for the target ``z~``),
3. on one half of the trials picks the event ``S`` -- a threshold ``{stat > tau}`` or
   ``{stat <= tau}``, with either data set in the role of ``D`` -- that maximises the plug-in
   bound, and
4. on the other (independent) half bounds ``P(M(D) in S)`` from below and ``P(M(D') in S)`` from
   above by Clopper-Pearson intervals at ``1 - alpha/2`` each, so that the reported

.. math::

    \hat\epsilon_{LB} = \log\frac{\underline{p}_D - \delta}{\overline{p}_{D'}}

is a lower bound on the true epsilon with probability at least ``confidence = 1 - alpha``
(union bound; the threshold is chosen on data independent of the evaluation half). A sound
implementation therefore shows ``epsilon_lower <= claimed epsilon`` except with probability
``alpha``; ``epsilon_lower > claimed`` certifies a privacy bug at that confidence.

The bound is only as strong as the attack and the number of trials: with ``m`` evaluation trials
it cannot exceed about ``log(m / log(2/alpha))``. It checks an implementation, it does not prove
privacy (jax_privacy's auditing module, Jagielski et al. 2020, Nasr et al. 2021).

The interface is generic: any ``mechanism(key, dataset) -> release`` (a pytree) and any
``statistic(release) -> scalar``. :func:`estimator_mechanism` turns a dpjax
:class:`~dpjax.base.Estimator` into such a mechanism; :func:`glm_score_statistic` is the GLM
score attack; :func:`replace_record` builds the neighbouring data set.

Example (the planted under-noising of ``tests/test_audit.py``)::

    est = dp_glm.noisy_gd(GLM(), 3, "paper", b_constant=0.02)  # declares 1% of the sensitivity
    hp = dp_glm.default_hparams(n, 1.0, 3, delta=1e-3)
    mech = estimator_mechanism(est, hp, jnp.zeros(d))
    stat = glm_score_statistic(GLM(), jnp.zeros(d), x_target, y_target)
    res = audit(mech, key, data_in, replace_record(data_in, 0, other), stat,
                num_trials=2000, delta=1e-3)
    res.violates(1.0)  # True: the claimed epsilon = 1 is refuted at 95% confidence

The package, part by part:

* :mod:`dpjax.audit.engine`: the trials, the attack statistics and the Clopper-Pearson bound
  (:func:`audit`, :func:`epsilon_lower_bound`, :func:`estimator_mechanism`, ...);
* :mod:`dpjax.audit.plants`: the planted under-noising (:func:`planted_bug`);
* :mod:`dpjax.audit.trajectory`: the per-step attack on every iterate of a run;
* :mod:`dpjax.audit.canary`: a canary case and its audit (:class:`CanaryCase`,
  :func:`audit_case`);
* :mod:`dpjax.audit.cases`: the canary cases of the registered estimators (:func:`canary_case`,
  :func:`registry_cases`);
* :mod:`dpjax.audit.crafted`: registered estimators on crafted records (:func:`crafted_cases`);
* :mod:`dpjax.audit.releases`: the core mechanisms and Wang & Xu's radius as single releases;
* :mod:`dpjax.audit.table`: the audit table of docs/audits.md; :mod:`dpjax.audit.cli`: its
  command, ``python -m dpjax.audit --table [--trials M] [NAME ...]``.
"""

from dpjax.audit.canary import AUDIT_DELTA, CanaryCase, audit_case
from dpjax.audit.cases import AUDIT_LEVELS, canary_case, registry_cases
from dpjax.audit.cli import main
from dpjax.audit.crafted import crafted_case, crafted_cases, crafted_names
from dpjax.audit.engine import (
    AuditResult,
    audit,
    clopper_pearson,
    epsilon_lower_bound,
    estimator_mechanism,
    flat_statistic,
    glm_score_statistic,
    replace_record,
    run_trials,
)
from dpjax.audit.plants import (
    PLANTS,
    UNPLANTED_KINDS,
    planted_bug,
    plants_reaching,
    scaled_noise,
)
from dpjax.audit.releases import mechanism_cases, wang_xu_radius_cases
from dpjax.audit.table import CanaryRow, canary_table, format_table
from dpjax.audit.trajectory import trajectory_mechanism, trajectory_statistic

__all__ = [
    "AUDIT_DELTA",
    "AUDIT_LEVELS",
    "AuditResult",
    "CanaryCase",
    "CanaryRow",
    "PLANTS",
    "UNPLANTED_KINDS",
    "audit",
    "audit_case",
    "canary_case",
    "canary_table",
    "clopper_pearson",
    "crafted_case",
    "crafted_cases",
    "crafted_names",
    "epsilon_lower_bound",
    "estimator_mechanism",
    "flat_statistic",
    "format_table",
    "glm_score_statistic",
    "main",
    "mechanism_cases",
    "planted_bug",
    "plants_reaching",
    "registry_cases",
    "replace_record",
    "run_trials",
    "scaled_noise",
    "trajectory_mechanism",
    "trajectory_statistic",
    "wang_xu_radius_cases",
]
