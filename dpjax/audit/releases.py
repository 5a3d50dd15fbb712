"""Canary cases of single releases, run as one-step estimators: the core mechanisms of
:mod:`dpjax.mechanisms` (:func:`mechanism_cases`, whose claims are tight, or nearly) and Wang &
Xu's LDP-IHT gradient radius against the rectified one (:func:`wang_xu_radius_cases`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import mechanisms
from dpjax.audit.canary import AUDIT_DELTA, CanaryCase
from dpjax.audit.engine import flat_statistic
from dpjax.base import Estimator

__all__ = ["mechanism_cases", "wang_xu_radius_cases"]


class _Release(NamedTuple):
    beta: jax.Array  # (d,) the release


def _one_release(name: str, release: Callable[[jax.Array, jax.Array], jax.Array]) -> Estimator:
    def step(key, state, data, hparams):
        del state, hparams
        return _Release(release(key, data)), ()

    return Estimator(name, _Release, step, num_steps=1, batching="full", ledger=None)


def mechanism_cases(n: int = 10) -> list[CanaryCase]:
    """Canary cases of the core mechanisms of :mod:`dpjax.mechanisms`, each one release of a
    clipped mean of ``n`` records on which the canary (``+1`` against ``-1`` in the first
    coordinate, the rest of the data 0) moves the mean by exactly its declared sensitivity:

    * ``laplace_mechanism``: epsilon = 1, delta = 0 (the claim is tight: the privacy loss is
      exactly 1 in the tails);
    * ``gaussian_mechanism_zcdp``: rho = 0.5, i.e. mu = 1 GDP, audited on that curve at
      ``AUDIT_DELTA``;
    * ``gaussian_mechanism`` (classic) at (1, 1e-3): mu-GDP with ``mu = 1 / sqrt(2 log(1.25 /
      1e-3))``, audited on that curve at ``AUDIT_DELTA``;
    * ``noisy_hard_threshold``: s = 1 of d = 4, (1, 1e-3), on another pair: a fixed record
      ``(1, 1, 1, 1)`` and the canary ``(1, -1, -1, -1)`` against ``(-1, 1, 1, 1)``, so that
      the mean moves by the declared l-infinity sensitivity in *every* coordinate, from
      ``(0.2, 0, 0, 0)`` to ``(0, 0.2, 0.2, 0.2)``: the scores ``|v_j|`` of the selection
      move in opposite directions, and the statistic (the released value of coordinate 0, 0
      where it is not selected) sees the selection and the value together. On the pair above
      the selection is the same on both data sets (``|v_0| = 0.1``) and only the value
      differs: with noise x 0.2 the best event of that statistic certifies about 0.54 at any
      number of trials, on this pair about 1.49, against the claim of 1 (docs/audits.md).
    """
    from dpjax.accounting import gaussian_epsilon

    # the classic calibration at (1, 1e-3) is mu-GDP with mu = Delta / sigma: audited on that
    # curve at AUDIT_DELTA (the events it records deliver it), where a halved sensitivity shows
    classic_mu = 1.0 / float(mechanisms.epsilon_constant("gaussian", 1e-3))

    def mean(x, norm):
        return mechanisms.bounded_mean(mechanisms.clip_linf(x, 1.0), 2.0, norm)

    releases = {
        "mechanism/laplace": (lambda k, x: mechanisms.laplace_mechanism(k, mean(x, "l1"), 1.0)[0],
                              1, 1.0, 0.0, None, 1.0),
        "mechanism/gaussian-zcdp": (
            lambda k, x: mechanisms.gaussian_mechanism_zcdp(k, mean(x, "l2"), 0.5)[0], 1,
            float(gaussian_epsilon(1.0, AUDIT_DELTA)), AUDIT_DELTA, 1.0, None),
        "mechanism/gaussian-classic": (
            lambda k, x: mechanisms.gaussian_mechanism(k, mean(x, "l2"), 1.0, 1e-3)[0], 1,
            float(gaussian_epsilon(classic_mu, AUDIT_DELTA)), AUDIT_DELTA, classic_mu, None),
        "mechanism/noisy-ht": (
            lambda k, x: mechanisms.noisy_hard_threshold(k, mean(x, "linf"), 1, 1.0, 1e-3).value,
            4, 1.0, 1e-3, None, None),
    }
    cases = []
    for name, (release, d, eps, delta, mu, pure) in releases.items():
        data = jnp.zeros((n, d), jnp.float32)
        data_in = data.at[0, 0].set(1.0)
        data_out = data.at[0, 0].set(-1.0)
        if name == "mechanism/noisy-ht":  # the canary moves every score (see the docstring)
            canary = jnp.array([1.0] + [-1.0] * (d - 1), jnp.float32)
            data = data.at[1].set(1.0)
            data_in, data_out = data.at[0].set(canary), data.at[0].set(-canary)
        direction = np.zeros(d)
        direction[0] = 1.0
        kind = "ledger" if mu is None else "gdp-curve"
        cases.append(CanaryCase(name, _one_release(name, release), (), jnp.zeros(d), data_in,
                                data_out, 0, flat_statistic(direction, np.zeros(d)), eps,
                                delta, 2.0 / n, mu, pure, "final", kind))
    return cases


def wang_xu_radius_cases(epsilon: float = 1.0, delta: float = 1e-5) -> list[CanaryCase]:
    """Wang & Xu's (2021) published LDP-IHT gradient radius against the rectified one, where
    the radius is a privacy parameter: a Gaussian local release of one user's gradient,
    calibrated for ``(epsilon, delta)``-LDP from the declared range ``2 r``.

    The pair: two admissible records (``|x_j| <= 1``, ``|y| <= 0.1``, ``d = 64``, ``k' = 32``)
    at the worst-case unit ``k'``-sparse iterate; their gradients differ by ``sqrt(2)`` times
    the rectified radius, 3.7 times the published range, so the published radius's release is
    not ``(epsilon, delta)``-DP (its exact epsilon at ``delta = 1e-5`` is about 3.6) and the
    rectified one's is. The claim of both is ``(epsilon, delta)``. (The registered
    ``ldp-iht/wang-xu-literal`` estimator uses the l2-ball randomizer, which is epsilon-LDP for
    every radius: there the published radius biases the reports but is no privacy failure.)
    """
    from dpjax import local_randomizers as lr

    d, kp, tau1, tau2 = 64, 32, 1.0, 0.1
    theta = jnp.zeros(d).at[:kp].set(1 / math.sqrt(kp))

    def grad(record):
        return record[:d] * (jnp.dot(theta, record[:d]) - record[d])

    rec_in = jnp.concatenate([jnp.full(d, tau1), jnp.array([-tau2])])
    rec_out = rec_in.at[kp:d].set(-tau1)
    diff = np.asarray(grad(rec_in) - grad(rec_out), np.float64)
    cases = []
    for variant, label in (("rectified", "rectified"),
                           ("wang_xu_2021_literal", "published (not DP as claimed)")):
        r = lr.ldp_iht_radius(d, kp, tau1, tau2, variant=variant)

        def release(key, data, r=r):
            stat = mechanisms.BoundedStatistic(grad(data[0]), jnp.float32(2 * r), "l2", "local")
            return lr.local_gaussian(key, stat, epsilon, delta).value

        name = f"wang-xu-radius/{label}"
        mu = float(np.linalg.norm(diff)) / float(lr.local_gaussian_sigma(2 * r, epsilon, delta))
        cases.append(CanaryCase(name, _one_release(name, release), (), jnp.zeros(d),
                                rec_in[None], rec_out[None], 0,
                                flat_statistic(diff, np.zeros(d)), float(epsilon),
                                float(delta), float(np.linalg.norm(diff)), mu))
    return cases
