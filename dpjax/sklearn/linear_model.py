r"""Private linear models as scikit-learn estimators: :class:`LogisticRegression` and
:class:`LinearRegression`.

Each fit calls one of the library's fits on a public rescaling of the data:

=========================  =============================================================
``method``                 the fit
=========================  =============================================================
``"noisy-gd"``             :func:`dpjax.algorithms.dp_glm.fit_dp_glm` (noisy gradient
                           descent, Cai, Wang & Zhang Algorithm 1)
``"noisy-iht"``            :func:`dpjax.algorithms.dp_glm.fit_sparse_dp_glm` (noisy
                           iterative hard thresholding with peeling, Algorithm 5;
                           needs ``sparsity``)
``"objective-perturbation"``  ``fit_objective_perturbation`` of
                           :mod:`dpjax.algorithms.baselines` (logistic only; its default
                           pure (epsilon, 0) variant ``"tight"``, whatever ``delta`` is)
``"adassp"``               ``fit_adassp`` of :mod:`dpjax.algorithms.baselines` (linear only)
``"ssp-laplace"``          ``fit_ssp_laplace`` of :mod:`dpjax.algorithms.baselines` (linear
                           only; pure (epsilon, 0), whatever ``delta`` is)
``"auto"`` (default)       one of the above, chosen on public values only (``n``, ``d``,
                           epsilon, delta, the bounds): ``dpjax.auto.choose_method``
=========================  =============================================================

**Bounds and rescaling** (public, never read from the data). ``LogisticRegression`` takes
``data_norm``, the l2 bound ``D`` of a row of ``X``: rows are clipped to it and divided by
``sigma = D / sqrt(d)`` (so a row's l2 bound is ``sqrt(d)``, the library's ``sigma_x = 1``).
``LinearRegression`` takes the boxes ``bounds_X`` (per column) and ``bounds_y``: values are
clipped into them and mapped affinely onto ``[-1, 1]`` (with ``fit_intercept=False``, divided
by the largest absolute bound instead, so that no shift adds an intercept). Coefficients are
mapped back to the original units.

**Intercept**: ``fit_intercept=True`` appends a constant column, 1 in the rescaled units, inside
the bound: a row's l2 bound becomes ``sqrt(d + 1)`` there, i.e. ``D sqrt(1 + 1/d)`` in the
original units of ``LogisticRegression`` (its box bound stays 1 for ``LinearRegression``). The
intercept is the constant column's coefficient, mapped back.

**Privacy**: one fit is (epsilon, delta)-DP under replace-one adjacency (``n`` public), as its
``ledger_`` states (computed from the noise drawn). The default delta is
``min(1e-6, 1/(2n))``. An ``accountant`` (:class:`dpjax.Accountant`) shared by several
estimators refuses the fit that would exceed its total before anything is computed.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dpjax import _validate, auto
from dpjax.algorithms.baselines import (
    fit_adassp,
    fit_objective_perturbation,
    fit_ssp_laplace,
)
from dpjax.algorithms.dp_glm import fit_dp_glm, fit_sparse_dp_glm
from dpjax.models.glm import GLM
from dpjax.sklearn import _common

__all__ = ["Choice", "LinearRegression", "LogisticRegression", "choose"]

#: the named methods of each task
METHODS = {
    "logistic": ("noisy-gd", "noisy-iht", "objective-perturbation"),
    "linear": ("noisy-gd", "noisy-iht", "adassp", "ssp-laplace"),
}
#: other spellings a chooser may return
_ALIASES = {"gd": "noisy-gd", "dp-glm": "noisy-gd", "noisy_gd": "noisy-gd",
            "iht": "noisy-iht", "sparse": "noisy-iht", "noisy_iht": "noisy-iht",
            "objective_perturbation": "objective-perturbation", "op": "objective-perturbation",
            "ssp": "adassp", "laplace-ssp": "ssp-laplace", "ssp_laplace": "ssp-laplace"}


class Choice(NamedTuple):
    """The method a fit uses and why."""

    name: str
    reason: str


def choose(task: str, *, n: int, d: int, epsilon: float, delta: float, data_norm: float,
           y_bound: float | None = None, sparsity: int | None = None) -> Choice:
    """``method="auto"``: :func:`dpjax.auto.choose_method` on public values only, in the units
    the fit sees (the rescaled design, whose rows have l2 norm at most ``data_norm``, ``d``
    counting the intercept column; ``y`` in ``[-y_bound, y_bound]``). The name is one of
    ``METHODS[task]``."""
    got = auto.choose_method(task, n=n, d=d, epsilon=epsilon, delta=delta,
                             data_norm=data_norm, y_bound=y_bound, sparsity=sparsity)
    c = Choice(_ALIASES.get(got.name, got.name), f"dpjax.auto: {got.reason}")
    if c.name not in METHODS[task]:
        raise RuntimeError(f"method='auto' chose {c.name!r}, which is not one of "
                           f"{METHODS[task]}")
    return c


def _num_iterations(max_iter: int | None) -> dict:
    """``num_iterations`` for the GLM fits: ``max_iter`` if given, else the fit's own default
    (the schedule of :func:`dpjax.algorithms.dp_glm.default_schedule`)."""
    if max_iter is not None:
        return {"num_iterations": _validate.check_int_in_range(max_iter, "max_iter", 1)}
    return {}


class _Design(NamedTuple):
    """The public map between the original and the rescaled units."""

    x: np.ndarray  # (n, d_aug) rescaled (and augmented) design, float32
    y: np.ndarray | None  # (n,) rescaled response, float32
    l2: float  # the l2 bound of a rescaled row
    linf: float  # the box bound of a rescaled row


class _GLMEstimator(_common.DPEstimatorBase):
    """Shared by the two linear models (a private base: not an estimator of its own)."""

    _task = "linear"

    def _check_method(self) -> None:
        _validate.check_choice(self.method, "method", ("auto",) + METHODS[self._task])
        if self.sparsity is not None:
            _validate.check_int_in_range(self.sparsity, "sparsity", 1)
            if self.method not in ("auto", "noisy-iht"):
                raise ValueError(f"sparsity is for method='noisy-iht' (or 'auto'); got "
                                 f"method={self.method!r}")
        elif self.method == "noisy-iht":
            raise ValueError("method='noisy-iht' needs sparsity (an int >= 1)")

    def _fit_glm(self, design: _Design, n: int, d: int, bound_note: str) -> np.ndarray:
        """Run the chosen fit on the rescaled data; set ``method_``, ``ledger_``, ``seed_``;
        return the coefficients in the rescaled units (intercept last)."""
        self._check_method()
        eps = _common.check_epsilon(self.epsilon)
        delta = _common.resolve_delta(self.delta, n)
        d_aug = design.x.shape[1]
        sparsity = self.sparsity
        if self.method == "auto":
            choice = choose(self._task, n=n, d=d_aug, epsilon=eps, delta=delta,
                            data_norm=design.l2, y_bound=1.0, sparsity=sparsity)
        else:
            choice = Choice(self.method, "named by the method parameter")
        seed, seed_note = self._seed()
        key = jax.random.key(seed)
        common = dict(epsilon=eps, delta=delta, accountant=self.accountant,
                      secure=bool(self.secure))
        data = (design.x, design.y)
        if choice.name in ("noisy-gd", "noisy-iht"):
            family = self._task
            U = math.inf if family == "logistic" else 1.0
            if choice.name == "noisy-gd":
                model = GLM(family, sigma_x=design.l2 / math.sqrt(d_aug), predictor_bound=U)
                res = fit_dp_glm(key, data, model, truncation=1.0,
                                 **_num_iterations(self.max_iter), **common)
            else:
                s = min(int(sparsity) + (1 if self.fit_intercept else 0), d_aug)
                model = GLM(family, sigma_x=design.linf, predictor_bound=U)
                res = fit_sparse_dp_glm(key, data, model, s=s, truncation=1.0,
                                        **_num_iterations(self.max_iter), **common)
        elif choice.name == "adassp":
            res = fit_adassp(key, data, x_bound=design.l2, y_bound=1.0, **common)
        elif choice.name == "ssp-laplace":  # pure (epsilon, 0): the fit's delta is not spent
            res = fit_ssp_laplace(key, data, x_bound=design.l2, y_bound=1.0, epsilon=eps,
                                  accountant=self.accountant, secure=bool(self.secure))
        else:
            # the pure (epsilon, 0) variant "tight" (one log-determinant term): more accurate
            # than the Gaussian variant and Chaudhuri et al.'s printed rule at every size
            # measured (docs/families/baselines.md), so the fit's delta is not spent
            res = fit_objective_perturbation(key, data, x_bound=design.l2, variant="tight",
                                             **{**common, "delta": 0.0})
        # the iterations run: the trace's leading axis (1 for a closed-form method, whose
        # result has no trace)
        leaves = jax.tree_util.tree_leaves(res.trace)
        self.n_iter_ = int(np.shape(leaves[0])[0]) if leaves and np.ndim(leaves[0]) else 1
        self.method_ = choice.name
        self.method_reason_ = choice.reason
        self.seed_ = seed
        self.ledger_ = _common.annotate(
            res.ledger, f"dpjax.sklearn.{type(self).__name__}: method {choice.name!r} "
            f"({choice.reason})", bound_note, seed_note)
        return np.asarray(res.estimate, np.float64)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags


class LogisticRegression(ClassifierMixin, _GLMEstimator):
    r"""Private binary logistic regression, a scikit-learn classifier.

    Args:
        epsilon: the privacy budget, in (0, inf] (inf: no noise, the clipped non-private fit).
        delta: in (0, 1); default (``None``) ``min(1e-6, 1/(2n))``.
        data_norm: the l2 bound ``D`` of a row of ``X`` (required; rows beyond it are clipped
            onto it).
        fit_intercept: append a constant column (see the module docstring: the l2 bound
            becomes ``D sqrt(1 + 1/d)``).
        method: ``"auto"`` (default), ``"noisy-gd"``, ``"noisy-iht"`` (with ``sparsity``) or
            ``"objective-perturbation"``.
        sparsity: ``s`` features kept by ``"noisy-iht"`` (the intercept is kept on top).
        max_iter: the iterations ``T`` of the iterative methods (default: the library's).
        accountant: a :class:`dpjax.Accountant` every fit spends from (shared by clones).
        secure: exact discrete noise for a release on real data (see :func:`dpjax.fit`).
        random_state: ``None`` (a fresh seed from NumPy's entropy, kept as ``seed_``) or an
            int in ``[0, 2**32 - 1]``: the noise key is ``jax.random.key(random_state)``.

    Attributes:
        classes_: the two labels (``y`` must have exactly two).
        coef_: ``(1, n_features)``; intercept_: ``(1,)``.
        ledger_: the fit's :class:`~dpjax.accounting.Ledger` (with the method chosen, and why).
        method_, method_reason_: the method used and why; seed_: the key's seed.
        n_iter_: the iterations run (1 for a closed-form method).
    """

    _task = "logistic"

    def __init__(self, epsilon: float = 1.0, delta: float | None = None, *,
                 data_norm: float | None = None, fit_intercept: bool = True,
                 method: str = "auto", sparsity: int | None = None,
                 max_iter: int | None = None, accountant: Any = None, secure: bool = False,
                 random_state: int | None = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.data_norm = data_norm
        self.fit_intercept = fit_intercept
        self.method = method
        self.sparsity = sparsity
        self.max_iter = max_iter
        self.accountant = accountant
        self.secure = secure
        self.random_state = random_state

    def fit(self, X, y) -> LogisticRegression:
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        enc = LabelEncoder().fit(y)
        if len(enc.classes_) != 2:
            raise ValueError("Only binary classification is supported: LogisticRegression needs "
                             f"y with exactly 2 classes; got {len(enc.classes_)} class(es)")
        D = _common.positive(self.data_norm, "data_norm", "the l2 bound of a row of X")
        n, d = X.shape
        sigma = D / math.sqrt(d)
        x = _common.clip_rows_l2(X, D) / sigma
        if self.fit_intercept:
            x = np.hstack([x, np.ones((n, 1))])
        design = _Design(x.astype(np.float32), enc.transform(y).astype(np.float32),
                         math.sqrt(x.shape[1]), math.sqrt(d) if d > 1 else 1.0)
        note = (f"rows clipped to data_norm = {D:g} and divided by D/sqrt(d) = {sigma:g}"
                + (f"; intercept column inside the bound: l2 bound D*sqrt(1 + 1/d) = "
                   f"{D * math.sqrt(1 + 1 / d):g}" if self.fit_intercept else ""))
        beta = self._fit_glm(design, n, d, note)
        self.classes_ = enc.classes_
        self.coef_ = (beta[:d] / sigma)[None, :]
        self.intercept_ = np.array([beta[d] if self.fit_intercept else 0.0])
        return self

    def decision_function(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.coef_[0] + self.intercept_[0]

    def predict_proba(self, X) -> np.ndarray:
        z = self.decision_function(X)
        p = 0.5 * (1.0 + np.tanh(0.5 * z))  # sigmoid, without overflow
        return np.column_stack([1.0 - p, p])

    def predict_log_proba(self, X) -> np.ndarray:
        z = self.decision_function(X)
        return np.column_stack([-np.logaddexp(0.0, z), -np.logaddexp(0.0, -z)])

    def predict(self, X) -> np.ndarray:
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(int)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        # a private fit on a few hundred records misses scikit-learn's accuracy thresholds
        tags.classifier_tags.poor_score = True
        return tags


class LinearRegression(RegressorMixin, _GLMEstimator):
    r"""Private least-squares regression, a scikit-learn regressor.

    Args:
        epsilon, delta: as :class:`LogisticRegression`.
        bounds_X: ``(lower, upper)``, numbers or one per column: the box every row of ``X``
            lies in (required; values are clipped into it).
        bounds_y: ``(lower, upper)``: the range of ``y`` (required; clipped into it).
        fit_intercept, method, sparsity, max_iter, accountant, secure, random_state: as
            :class:`LogisticRegression`, with ``method`` one of ``"auto"``, ``"noisy-gd"``,
            ``"noisy-iht"``, ``"adassp"`` and ``"ssp-laplace"``. ``"noisy-gd"`` and
            ``"noisy-iht"`` clip the linear predictor to the range of ``bounds_y`` (the
            library's linear GLM with ``predictor_bound``).

    Attributes:
        coef_: ``(n_features,)``; intercept_: a float (0 without ``fit_intercept``).
        ledger_, method_, method_reason_, seed_: as :class:`LogisticRegression`.
    """

    _task = "linear"

    def __init__(self, epsilon: float = 1.0, delta: float | None = None, *,
                 bounds_X: Any = None, bounds_y: Any = None, fit_intercept: bool = True,
                 method: str = "auto", sparsity: int | None = None,
                 max_iter: int | None = None, accountant: Any = None, secure: bool = False,
                 random_state: int | None = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.bounds_X = bounds_X
        self.bounds_y = bounds_y
        self.fit_intercept = fit_intercept
        self.method = method
        self.sparsity = sparsity
        self.max_iter = max_iter
        self.accountant = accountant
        self.secure = secure
        self.random_state = random_state

    def fit(self, X, y) -> LinearRegression:
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        n, d = X.shape
        lo, hi = _common.box(self.bounds_X, "bounds_X", d)
        ylo, yhi = _common.scalar_box(self.bounds_y, "bounds_y")
        if self.fit_intercept:
            mid, half = (lo + hi) / 2, (hi - lo) / 2
            ymid, yhalf = (ylo + yhi) / 2, (yhi - ylo) / 2
        else:  # no shift: a shift would add an intercept
            mid, half = np.zeros(d), np.maximum(np.abs(lo), np.abs(hi))
            ymid, yhalf = 0.0, max(abs(ylo), abs(yhi))
        x = (np.clip(X, lo, hi) - mid) / half
        yt = (np.clip(y, ylo, yhi) - ymid) / yhalf
        if self.fit_intercept:
            x = np.hstack([x, np.ones((n, 1))])
        design = _Design(x.astype(np.float32), yt.astype(np.float32),
                         math.sqrt(x.shape[1]), 1.0)
        note = ("X clipped to bounds_X and y to bounds_y, each mapped onto [-1, 1]"
                + ("; intercept column 1 inside the box (l2 bound sqrt(d + 1))"
                   if self.fit_intercept else " by scaling only (no intercept)"))
        beta = self._fit_glm(design, n, d, note)
        self.coef_ = yhalf * beta[:d] / half
        b0 = beta[d] if self.fit_intercept else 0.0
        self.intercept_ = float(ymid + yhalf * b0 - self.coef_ @ mid)
        return self

    def predict(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.coef_ + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True
        return tags
