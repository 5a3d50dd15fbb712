r"""Instrumental-variable regression by two-stage DP gradient descent, as a scikit-learn
estimator: :class:`IVRegression`.

The fit is :func:`dpjax.algorithms.dp_iv.fit_dp_2s_gd` (Liang, Jin, Balasubramanian & Lai,
Algorithm 1): ``y = x^T beta + e1``, ``x = Theta^T z + e2``, each stage's per-record gradient
clipped (levels ``gamma1``, ``gamma2``: the public bounds of this fit) and released with
Gaussian noise. The budget: the ``2T`` Gaussian releases compose to ``rho``-zCDP, and
``rho`` is the largest whose conversion to (epsilon, delta) by the ledger's rule (Canonne,
Kamath & Steinke, ``"cks"``) stays within the request; each stage gets half.

Instruments: ``fit(X, y, Z)``; or, for a ``Pipeline`` (which passes only ``X`` and ``y``),
``instruments=`` the column indices of ``X`` that hold them: ``fit(X, y)`` then splits ``X``,
and ``predict(X)`` reads the other columns.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from dpjax import _validate
from dpjax.accounting import zcdp_for_approx_dp
from dpjax.algorithms.dp_iv import fit_dp_2s_gd
from dpjax.sklearn import _common

__all__ = ["IVRegression"]


class IVRegression(RegressorMixin, _common.DPEstimatorBase):
    r"""Private two-stage IV regression (DP-2S-GD).

    Args:
        epsilon: the privacy budget, in (0, inf] (inf: no noise and no clipping, 2S-GD).
        delta: in (0, 1); default (``None``) ``min(1e-6, 1/(2n))``.
        instruments: ``None`` (pass ``Z`` to :meth:`fit`) or the column indices of ``X`` that
            are instruments.
        fit_intercept: append a constant 1 to the regressors and to the instruments (the
            constant instruments itself).
        eta, alpha: the two stages' step sizes (data-independent; 2S-GD converges for
            ``eta < 2 / lambda_max(Z^T Z / n)`` and ``alpha`` below ``2`` over the largest
            eigenvalue of the second stage's Hessian; a diverging run raises).
        max_iter: the iterations ``T``.
        gamma1, gamma2: the clipping levels (default: the paper's rule
            ``(sqrt(q) + sqrt(5 + log(n T)))^2``, which assumes instruments of unit scale).
        accountant, secure, random_state: as :class:`dpjax.sklearn.LogisticRegression`.

    Attributes:
        coef_: ``(p,)``: ``beta``; intercept_: a float; first_stage_: ``(q, p)``: ``Theta``;
        ledger_, seed_: as the others.
    """

    def __init__(self, epsilon: float = 1.0, delta: float | None = None, *,
                 instruments: Any = None, fit_intercept: bool = False, eta: float = 0.5,
                 alpha: float = 0.5, max_iter: int = 20, gamma1: float | None = None,
                 gamma2: float | None = None, accountant: Any = None, secure: bool = False,
                 random_state: int | None = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.instruments = instruments
        self.fit_intercept = fit_intercept
        self.eta = eta
        self.alpha = alpha
        self.max_iter = max_iter
        self.gamma1 = gamma1
        self.gamma2 = gamma2
        self.accountant = accountant
        self.secure = secure
        self.random_state = random_state

    def _regressors(self, X: np.ndarray) -> np.ndarray:
        if self.instruments is None:
            return X
        keep = np.ones(X.shape[1], bool)
        keep[np.asarray(self.instruments, int)] = False
        return X[:, keep]

    def fit(self, X, y, Z=None) -> IVRegression:
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        if (Z is None) == (self.instruments is None):
            raise ValueError("give the instruments either as fit(X, y, Z) or as instruments= "
                             "(the column indices of X that hold them), not both or neither")
        if Z is None:
            idx = np.asarray(self.instruments, int).ravel()
            if idx.size == 0 or idx.min() < -X.shape[1] or idx.max() >= X.shape[1]:
                raise ValueError(f"instruments must be column indices of X (it has "
                                 f"{X.shape[1]} columns); got {self.instruments!r}")
            Z = X[:, idx]
            X = self._regressors(X)
        else:
            Z = check_array(Z, dtype=np.float64)
            if Z.shape[0] != X.shape[0]:
                raise ValueError(f"Z must have one row per row of X ({X.shape[0]}); got "
                                 f"{Z.shape[0]}")
        n = X.shape[0]
        if self.fit_intercept:
            X = np.hstack([X, np.ones((n, 1))])
            Z = np.hstack([Z, np.ones((n, 1))])
        p, q = X.shape[1], Z.shape[1]
        if q < p:
            raise ValueError(f"IV regression needs at least as many instruments as regressors "
                             f"(q >= p); got q = {q}, p = {p}")
        eps = _common.check_epsilon(self.epsilon)
        delta = _common.resolve_delta(self.delta, n)
        rho = math.inf if math.isinf(eps) else zcdp_for_approx_dp(eps, delta, "cks").rho
        T = _validate.check_int_in_range(self.max_iter, "max_iter", 1)
        seed, seed_note = self._seed()
        # epsilon = inf: no clipping either (the non-private 2S-GD)
        gammas = ({"gamma1": math.inf, "gamma2": math.inf} if math.isinf(eps)
                  else {"gamma1": self.gamma1, "gamma2": self.gamma2})
        res = fit_dp_2s_gd(jax.random.key(seed), (Z.astype(np.float32), X.astype(np.float32),
                                                   y.astype(np.float32)),
                           rho1=rho / 2, rho2=rho / 2, delta=delta, eta=self.eta,
                           alpha=self.alpha, num_iterations=T, accountant=self.accountant,
                           secure=bool(self.secure), **gammas)
        beta = np.asarray(res.estimate, np.float64)
        self.coef_ = beta[:-1] if self.fit_intercept else beta
        self.intercept_ = float(beta[-1]) if self.fit_intercept else 0.0
        self.first_stage_ = np.asarray(res.state.theta, np.float64)
        self.seed_ = seed
        self.ledger_ = _common.annotate(
            res.ledger, f"dpjax.sklearn.IVRegression: (epsilon, delta) = ({eps:g}, {delta:g}) "
            f"-> rho = {rho:g} (the ledger's 'cks' conversion), half per stage", seed_note)
        return self

    def predict(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self._regressors(X) @ self.coef_ + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        tags.regressor_tags.poor_score = True
        return tags
