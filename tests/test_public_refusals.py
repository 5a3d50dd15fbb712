"""Refusals never depend on the data: with an extreme public hyperparameter, two neighbouring
data sets (one record changed) get the same outcome -- both refused, with the same one-line
message naming the hyperparameter, before anything runs.

Each case's data set ``D`` makes the private sum reach beyond float32's maximum while its
neighbour ``D'`` keeps it finite, so a check on the data (or none at all) would treat them
differently."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import base
from dpjax.algorithms import dp_em, dp_gem, dp_glm, ldp_gem, ldp_sparse
from dpjax.models.glm import GLM, GLMData
from dpjax.models.gmm import GaussianMixture, GMMData

T = 1e38  # the extreme public level; n = 4 records of that size overflow float32 (3.4e38)


def _gmm_pair():
    """Four records ``(1, T)``; the neighbour flips the last one's second coordinate. At
    ``beta0 = (1, 0)`` every posterior sign is about 1, so the truncated sum's second
    coordinate is about ``4 T`` (inf in float32) on ``D`` and ``2 T`` on ``D'``."""
    y = np.tile(np.array([1.0, T], np.float32), (4, 1))
    y2 = y.copy()
    y2[-1, 1] = -T
    return GMMData(jnp.asarray(y)), GMMData(jnp.asarray(y2))


def _glm_pair():
    """Four records ``x = (1, 0)``, ``y = T``; the neighbour's last response is ``-T``. The
    clipped gradient's sum is about ``-4 T`` on ``D`` and ``-2 T`` on ``D'``."""
    x = np.tile(np.array([1.0, 0.0], np.float32), (4, 1))
    y = np.full(4, T, np.float32)
    y2 = y.copy()
    y2[-1] = -T
    return GLMData(jnp.asarray(x), jnp.asarray(y)), GLMData(jnp.asarray(x), jnp.asarray(y2))


def _nldp_pair():
    """Four users ``x = (T, 0)``, ``y = 1`` (shrunk at ``tau1 = T``, ``tau2 = 1``); the
    neighbour's last response is ``-1``. The chunk's sum of ``x_bar y_bar`` is ``4 T`` on
    ``D`` and ``2 T`` on ``D'``."""
    x = np.tile(np.array([T, 0.0], np.float32), (4, 1))
    y = np.ones(4, np.float32)
    y2 = y.copy()
    y2[-1] = -1.0
    return (jnp.asarray(x), jnp.asarray(y)), (jnp.asarray(x), jnp.asarray(y2))


def _iht_pair():
    """Four users ``x = (S, 0)`` with ``S = 1e19``, ``y = 1`` (shrunk at ``tau1 = S``): a
    report's norm is about ``2.2 S^2 = 2.2e38`` and four of them add up beyond float32's
    maximum; the neighbour's last response is ``-1``."""
    x = np.tile(np.array([1e19, 0.0], np.float32), (4, 1))
    y = np.ones(4, np.float32)
    y2 = y.copy()
    y2[-1] = -1.0
    return (jnp.asarray(x), jnp.asarray(y)), (jnp.asarray(x), jnp.asarray(y2))


_IHT_HP = ldp_sparse.IHTHyperparams(*(np.float32(v) for v in (1.0, 1e19, 1.0, 1.0)))
_GMM = GaussianMixture(0.5)
_LINEAR = GLM("linear", predictor_bound=1.0)
_EM = dict(beta0=jnp.array([1.0, 0.0]), epsilon=1.0, delta=1e-3, num_iterations=1,
           truncation=T)
_GEM = dict(epsilon=1.0, delta=1e-3, num_iterations=1, beta0=jnp.array([1.0, 0.0]), tau=1.0,
            eta=1.0)
_GLM = dict(epsilon=1.0, delta=1e-3, num_iterations=1, eta=0.5, truncation=T)

CASES = {
    "hd-dp-em": (_gmm_pair, lambda d: dp_em.fit_hd_dp_em(0, d, _GMM, s_hat=2, **_EM)),
    "ld-dp-em": (_gmm_pair, lambda d: dp_em.fit_ld_dp_em(0, d, _GMM, **_EM)),
    "dp-glm": (_glm_pair, lambda d: dp_glm.fit_dp_glm(0, d, _LINEAR, **_GLM)),
    "sparse-dp-glm": (_glm_pair, lambda d: dp_glm.fit_sparse_dp_glm(
        0, d, _LINEAR, s=1, beta0=jnp.array([0.0, 0.0]), **_GLM)),
    "nldp": (_nldp_pair, lambda d: ldp_sparse.fit_nldp(
        0, d, epsilon=1.0, delta=1e-3, r=1.0, tau1=T, tau2=1.0)),
    "ldp-iht": (_iht_pair, lambda d: base.fit(ldp_sparse.ldp_iht(1, 1), 0, d, jnp.zeros(2),
                                                _IHT_HP)),
    # explicit smoothing level s: a score is at most PHI_MAX s = 0.94e38, four overflow
    "ldp-gem": (_gmm_pair, lambda d: ldp_gem.fit_ldp_gem(0, d, _GMM, s_rule="explicit", s=T,
                                                         **_GEM)),
    # already refused before this check existed (central sums of n scores), kept for coverage
    "dp-gem": (_gmm_pair, lambda d: dp_gem.fit_dp_gem(0, d, _GMM, s_rule="explicit", s=T,
                                                      **_GEM)),
    "dp-gem-split": (_gmm_pair, lambda d: dp_gem.fit_dp_gem(
        0, d, _GMM, s_rule="explicit", s=T, sample_split=True, **_GEM)),
    "dp-exact-em": (_gmm_pair, lambda d: dp_gem.fit_dp_exact_em(
        0, d, _GMM, s_rule="explicit", s=T, **{k: v for k, v in _GEM.items() if k != "eta"})),
    "clipped-gem": (_gmm_pair, lambda d: dp_gem.fit_clipped_gem(
        0, d, _GMM, clip=T, **{k: v for k, v in _GEM.items() if k not in ("tau", "eta")})),
}

MATCH = {"nldp": "lower tau1", "ldp-iht": "lower tau1", "ldp-gem": "lower s",
         "dp-gem": "lower s", "dp-gem-split": "lower s", "dp-exact-em": "lower s",
         "clipped-gem": "lower clip"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_neighbours_get_the_same_refusal_before_anything_runs(name, monkeypatch):
    pair, fit = CASES[name]

    def never(*args, **kwargs):
        raise AssertionError("the fit ran: the refusal came after the data were touched")

    monkeypatch.setattr(base, "run", never)
    messages = []
    for data in pair():
        with pytest.raises(ValueError, match=MATCH.get(name, "lower truncation")) as err:
            fit(data)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "\n" not in messages[0]
