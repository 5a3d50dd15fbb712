r"""The symmetric two-component Gaussian mixture by DP-EM, as a scikit-learn estimator:
:class:`GaussianMixture`.

The model is DP-EM's (Zhang & Zhang; :class:`dpjax.models.gmm.GaussianMixture`): a record is
``x = z beta + sigma e`` with ``z = +-1`` equally likely, ``e ~ N(0, I_d)`` and ``sigma``
known -- two components with means ``+beta`` and ``-beta``, weights 1/2 and the covariance
``sigma^2 I`` -- not scikit-learn's general mixture. The fit is
:func:`dpjax.algorithms.dp_em.fit_ld_dp_em` (the Gaussian mechanism on the truncated gradient
step, one disjoint batch per iteration), or with ``sparsity`` the high-dimensional
:func:`~dpjax.algorithms.dp_em.fit_hd_dp_em` (peeling).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from sklearn.base import DensityMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from dpjax import _validate
from dpjax.algorithms.dp_em import fit_hd_dp_em, fit_ld_dp_em
from dpjax.models.gmm import GaussianMixture as _GMM
from dpjax.sklearn import _common

__all__ = ["GaussianMixture"]


class GaussianMixture(DensityMixin, _common.DPEstimatorBase):
    r"""Private symmetric two-component Gaussian mixture (DP-EM).

    Args:
        epsilon: the privacy budget, in (0, inf].
        delta: in (0, 1); default (``None``) ``min(1e-6, 1/(2n))``.
        bounds_X: ``(lower, upper)``, numbers or one per column: the box every row lies in
            (required). The fit truncates every coordinate to ``[-T, T]`` with ``T`` the
            largest absolute bound (DP-EM's truncation level).
        sigma: the known standard deviation of each coordinate around its component's mean.
        means_init: the public start ``beta0`` (``(d,)``; never computed from the data);
            default a random direction of norm ``sigma`` drawn from ``random_state``.
        sparsity: coordinates kept per iteration by the high-dimensional fit (``None``: the
            low-dimensional fit).
        max_iter: the iterations (disjoint batches) ``N0``; default the library's
            ``ceil(log n)``.
        accountant, secure, random_state: as :class:`dpjax.sklearn.LogisticRegression`.

    Attributes:
        means_: ``(2, d)``: ``beta`` and ``-beta``; weights_: ``[0.5, 0.5]``;
        covariances_: ``(2,)`` spherical variances ``sigma^2``; ledger_, seed_: as the others.
    """

    def __init__(self, epsilon: float = 1.0, delta: float | None = None, *,
                 bounds_X: Any = None, sigma: float = 1.0, means_init: Any = None,
                 sparsity: int | None = None, max_iter: int | None = None,
                 accountant: Any = None, secure: bool = False,
                 random_state: int | None = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.bounds_X = bounds_X
        self.sigma = sigma
        self.means_init = means_init
        self.sparsity = sparsity
        self.max_iter = max_iter
        self.accountant = accountant
        self.secure = secure
        self.random_state = random_state

    def fit(self, X, y=None) -> GaussianMixture:
        del y
        X = validate_data(self, X, dtype=np.float64)
        n, d = X.shape
        lo, hi = _common.box(self.bounds_X, "bounds_X", d)
        T = float(np.max(np.maximum(np.abs(lo), np.abs(hi))))
        sigma = float(_validate.check_positive(self.sigma, "sigma"))
        eps = _common.check_epsilon(self.epsilon)
        delta = _common.resolve_delta(self.delta, n)
        seed, seed_note = self._seed()
        if self.means_init is None:
            u = np.random.default_rng(seed).standard_normal(d)
            beta0 = sigma * u / np.linalg.norm(u)
        else:
            beta0 = np.asarray(_validate.check_array(self.means_init, "means_init", shape=(d,)),
                               np.float64)
        kw = dict(epsilon=eps, delta=delta, truncation=T, num_iterations=self.max_iter,
                  accountant=self.accountant, secure=bool(self.secure))
        data = np.clip(X, lo, hi).astype(np.float32)
        model = _GMM(sigma=sigma)
        key = jax.random.key(seed)
        if self.sparsity is None:
            res = fit_ld_dp_em(key, data, model, beta0=beta0, **kw)
        else:
            s = _validate.check_int_in_range(self.sparsity, "sparsity", 1, d)
            if self.means_init is None:  # the start must have at most s non-zeros
                beta0[np.argsort(-np.abs(beta0))[s:]] = 0.0
            res = fit_hd_dp_em(key, data, model, s_hat=s, beta0=beta0, **kw)
        beta = np.asarray(res.estimate, np.float64)
        self.means_ = np.stack([beta, -beta])
        self.weights_ = np.array([0.5, 0.5])
        self.covariances_ = np.full(2, sigma**2)
        self.seed_ = seed
        self.ledger_ = _common.annotate(
            res.ledger, f"dpjax.sklearn.GaussianMixture: X clipped to bounds_X, truncation "
            f"T = {T:g}", seed_note)
        return self

    def _inner(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X, X @ self.means_[0] / self.covariances_[0]

    def predict_proba(self, X) -> np.ndarray:
        """``P(component | x)``: ``sigmoid(+-2 <beta, x> / sigma^2)``."""
        _, u = self._inner(X)
        p = 0.5 * (1.0 + np.tanh(u))
        return np.column_stack([p, 1.0 - p])

    def predict(self, X) -> np.ndarray:
        """The more likely component: 0 (mean ``beta``) or 1 (mean ``-beta``)."""
        _, u = self._inner(X)
        return (u < 0).astype(int)

    def score_samples(self, X) -> np.ndarray:
        """The log density of each row under the fitted mixture."""
        X, u = self._inner(X)
        var = self.covariances_[0]
        d = X.shape[1]
        base = -0.5 * (np.sum(X * X, axis=1) + self.means_[0] @ self.means_[0]) / var
        # log(cosh(u)) without overflow
        logcosh = np.abs(u) + np.log1p(np.exp(-2 * np.abs(u))) - np.log(2.0)
        return base + logcosh - 0.5 * d * np.log(2 * np.pi * var)

    def score(self, X, y=None) -> float:
        """The mean log density per row."""
        del y
        return float(np.mean(self.score_samples(X)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags
