r"""The linear instrumental-variable (IV) model (spec 004 §1.3, §4.1).

Model (eq. 1 of Liang, Jin, Balasubramanian & Lai; no intercept):

.. math::

    y = \beta^\top x + \epsilon_1, \qquad x = \Theta^\top z + \epsilon_2,

with instruments ``z in R^q``, endogenous regressors ``x in R^p``, outcome ``y in R``,
``Theta in R^{q x p}`` and ``beta in R^p``. The errors are correlated through an unobserved
confounder ``u in R^r`` (the paper's text swaps the labels of the two errors; spec 004 §6 C1):

.. math::

    x_i = \Theta^\top z_i + \Phi^\top u_i + \epsilon_{x,i}, \qquad
    y_i = \beta^\top x_i + \varphi^\top u_i + \epsilon_{y,i},

``z_i ~ N(0, I_q)``, ``u_i ~ N(0, I_r)``, ``eps_x ~ N(0, I_p)``, ``eps_y ~ N(0, 1)``. The true
parameters are drawn once (spec 004 §6 B5): ``beta ~ N(0, I_p)``, ``Theta = 5 I_{q x p} + E`` with
``E_ij ~ N(0, 1)``, ``Phi_ij ~ N(0, 1)`` (``r x p``), ``varphi ~ N(0, I_r)``.

One record is one triple ``(z_i, x_i, y_i)``; neighbouring data sets differ in one record
(replace-one, ``n`` public).

Per-sample gradients (the algorithms use *half* the gradients of the squared losses, spec 004
§1.3): first stage ``g_i^Theta = z_i (z_i^T Theta - x_i^T)`` (a rank-one ``q x p`` matrix), second
stage ``g_i^beta = (Theta^T z_i)(z_i^T Theta beta - y_i)`` (in ``R^p``). Clipped to Frobenius / l2
norm ``gamma``, their means have replace-one sensitivity ``2 gamma / n``
(:func:`~dpjax.mechanisms.clipped_outer_mean`).

2SLS (Def 2.3): ``Theta_hat = (Z^T Z)^{-1} Z^T X``, ``beta_hat = (Theta_hat^T Z^T Z
Theta_hat)^{-1} Theta_hat^T Z^T Y``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _cpu_prng, _validate
from dpjax.mechanisms import (
    BoundedStatistic,
    clipped_outer_mean_from_sum,
    clipped_outer_sum,
    l2_norm,
    records_dot,
    rows_dot,
    sanitize,
)
from dpjax.models.protocol import prefix_stable

__all__ = [
    "IVData",
    "IVParameters",
    "LinearIV",
    "clipped_first_stage_gradient",
    "clipped_first_stage_sum",
    "clipped_second_stage_gradient",
    "clipped_second_stage_sum",
    "clipped_stage_mean",
    "first_stage_gradient",
    "first_stage_per_sample_gradients",
    "first_stage_sum",
    "gradient_norms",
    "least_squares",
    "mask_rows",
    "second_stage_gradient",
    "second_stage_per_sample_gradients",
    "second_stage_sum",
    "two_stage_least_squares",
    "validate_iv_data",
]


class IVData(NamedTuple):
    """An IV data set: one record is one row ``(z_i, x_i, y_i)``."""

    z: jax.Array  # (n, q) instruments
    x: jax.Array  # (n, p) endogenous regressors
    y: jax.Array  # (n,) outcome


class IVParameters(NamedTuple):
    """The parameters of the simulation model."""

    beta: jax.Array  # (p,) structural (causal) parameter
    theta: jax.Array  # (q, p) first-stage coefficients
    phi: jax.Array  # (r, p) confounder loadings of x (the paper's Phi)
    varphi: jax.Array  # (r,) confounder loadings of y (the paper's phi)


# --------------------------------------------------------------------------------------------
# Gradients and their clipped, bounded means
# --------------------------------------------------------------------------------------------


def first_stage_per_sample_gradients(theta: jax.Array, data: IVData) -> jax.Array:
    """``g_i^Theta = z_i (z_i^T Theta - x_i^T)``, materialised, shape ``(n, q, p)``.

    For tests and references; the algorithms use the rank-one factorisation instead.
    """
    resid = data.z @ theta - data.x  # (n, p)
    return data.z[:, :, None] * resid[:, None, :]


def second_stage_per_sample_gradients(
    theta: jax.Array, beta: jax.Array, data: IVData
) -> jax.Array:
    """``g_i^beta = (Theta^T z_i)(z_i^T Theta beta - y_i)``, shape ``(n, p)``."""
    w = data.z @ theta  # (n, p): rows (Theta^T z_i)^T
    s = w @ beta - data.y  # (n,)
    return w * s[:, None]


def mask_rows(data: IVData, mask: jax.Array) -> IVData:
    """The data with the rows outside ``mask`` (padding, :class:`dpjax.base.Padded`) set to
    zero, whatever they held: a zero record's per-sample gradients are exactly zero in both
    stages (``z_i = 0``), so a sum over all rows is the sum over the records."""
    zero = jnp.zeros((), data.z.dtype)
    return IVData(jnp.where(mask[:, None], data.z, zero), jnp.where(mask[:, None], data.x, zero),
                  jnp.where(mask, data.y, zero))


def first_stage_sum(theta: jax.Array, data: IVData) -> jax.Array:
    """``Z^T (Z Theta - X)``: the sum of the first-stage per-sample gradients, ``(q, p)`` (zero
    rows, :func:`mask_rows`, add nothing)."""
    return records_dot(data.z, data.z @ theta - data.x)


def second_stage_sum(theta: jax.Array, beta: jax.Array, data: IVData) -> jax.Array:
    """``Theta^T Z^T (Z Theta beta - Y)``: the sum of the second-stage per-sample gradients,
    ``(p,)``."""
    w = data.z @ theta
    return records_dot(w, w @ beta - data.y)


def first_stage_gradient(theta: jax.Array, data: IVData, count: Any = None) -> jax.Array:
    """Non-private, unclipped ``(1/n) Z^T (Z Theta - X)``, shape ``(q, p)`` (``count``: ``n``
    at runtime, for data padded with zero rows by :func:`mask_rows`)."""
    n = data.z.shape[0] if count is None else count
    return first_stage_sum(theta, data) / n


def second_stage_gradient(theta: jax.Array, beta: jax.Array, data: IVData,
                          count: Any = None) -> jax.Array:
    """Non-private, unclipped ``(1/n) Theta^T Z^T (Z Theta beta - Y)``, shape ``(p,)``
    (``count`` as in :func:`first_stage_gradient`)."""
    n = data.z.shape[0] if count is None else count
    return second_stage_sum(theta, beta, data) / n


def clipped_first_stage_sum(theta: jax.Array, data: IVData, gamma1: Any) -> jax.Array:
    """``sum_i CLIP_{gamma1}(z_i (z_i^T Theta - x_i^T))``, ``(q, p)``: the sum of
    :func:`clipped_first_stage_gradient` (a zero row adds nothing), for a mean over blocks of
    records (:func:`dpjax.base.fold_rows`) that :func:`clipped_stage_mean` completes."""
    zt = data.z.T  # (q, n): records along the minor axis, where XLA's CPU loops vectorise
    resid = _residual(sanitize(theta.T @ zt), data.x.T)  # (p, n)
    return clipped_outer_sum(zt, resid, jnp.asarray(gamma1, zt.dtype), records_axis=1)


def clipped_second_stage_sum(theta: jax.Array, beta: jax.Array, data: IVData, gamma2: Any
                             ) -> jax.Array:
    """``sum_i CLIP_{gamma2}((Theta^T z_i)(z_i^T Theta beta - y_i))``, ``(p,)``: the sum of
    :func:`clipped_second_stage_gradient`, as :func:`clipped_first_stage_sum`."""
    w = sanitize(theta.T @ data.z.T)  # (p, n), records along the minor axis
    s = _residual(sanitize(beta @ w), data.y)  # (n,)
    # (p, 1) -> (p,): dropping the trailing unit axis keeps the l2 norm
    return clipped_outer_sum(w, s[None, :], jnp.asarray(gamma2, w.dtype), records_axis=1)[:, 0]


def clipped_stage_mean(total: jax.Array, gamma: Any, count: Any) -> BoundedStatistic:
    """The clipped mean of either stage from its sum (:func:`clipped_first_stage_sum`,
    :func:`clipped_second_stage_sum`) over ``count`` public records: ``total / count`` with
    replace-one l2 (Frobenius) sensitivity ``2 gamma / count``, every clipped term lying in the
    ball of radius ``gamma``."""
    return clipped_outer_mean_from_sum(total, jnp.asarray(gamma, total.dtype), count)


def clipped_first_stage_gradient(
    theta: jax.Array, data: IVData, gamma1: Any, count: Any = None
) -> BoundedStatistic:
    r"""``G_1 = (1/n) sum_i CLIP_{gamma1}(z_i (z_i^T Theta - x_i^T))``, sensitivity ``2 gamma1/n``.

    Frobenius clipping of the rank-one per-sample gradient ``z_i r_i^T``
    (``||z_i r_i^T||_F = ||z_i|| ||r_i||``). Given the public iterate ``Theta``, replacing one
    record changes one clipped term, each of Frobenius norm at most ``gamma1``: the mean moves by
    at most ``2 gamma1 / n`` in Frobenius norm (spec 004 App. B). ``count``: the public
    ``n`` at runtime, for data padded with zero rows (:func:`mask_rows`).
    """
    n = data.z.shape[0] if count is None else count
    return clipped_stage_mean(clipped_first_stage_sum(theta, data, gamma1), gamma1, n)


def clipped_second_stage_gradient(
    theta: jax.Array, beta: jax.Array, data: IVData, gamma2: Any, count: Any = None
) -> BoundedStatistic:
    r"""``G_2 = (1/n) sum_i CLIP_{gamma2}((Theta^T z_i)(z_i^T Theta beta - y_i))``, sensitivity
    ``2 gamma2 / n`` in l2.

    Valid when ``Theta`` and ``beta`` are public (previous private releases). If ``Theta`` is a
    non-private function of the data (the paper's Algorithm 3), all ``n`` terms move with one
    record and the sensitivity is ``2 gamma2`` instead (spec 004 §6 A2). ``count`` as in
    :func:`clipped_first_stage_gradient`.
    """
    n = data.z.shape[0] if count is None else count
    return clipped_stage_mean(clipped_second_stage_sum(theta, beta, data, gamma2), gamma2, n)


def gradient_norms(theta: jax.Array, beta: jax.Array, data: IVData) -> tuple[jax.Array, jax.Array]:
    """Per-sample gradient norms ``(||g_i^Theta||_F, ||g_i^beta||_2)``, each ``(n,)``."""
    zt = data.z.T  # (q, n), records along the minor axis
    w = sanitize(theta.T @ zt)  # (p, n)
    resid = _residual(w, data.x.T)
    s = _residual(sanitize(beta @ w), data.y)
    return l2_norm(zt, 0) * l2_norm(resid, 0), l2_norm(w, 0) * jnp.abs(s)


def _residual(fitted: jax.Array, observed: jax.Array) -> jax.Array:
    """``fitted - observed``, finite for every record (an overflow becomes +-max, see
    :func:`~dpjax.mechanisms.sanitize`), so the clipping that follows bounds it."""
    return sanitize(fitted - sanitize(observed))


# --------------------------------------------------------------------------------------------
# 2SLS
# --------------------------------------------------------------------------------------------


def two_stage_least_squares(data: IVData) -> tuple[jax.Array, jax.Array]:
    """Closed-form 2SLS (spec 004 Def 2.3), no intercept; non-private.

    Returns:
        ``(beta_hat (p,), theta_hat (q, p))`` with ``theta_hat = argmin ||X - Z Theta||_F`` and
        ``beta_hat = argmin ||Y - Z theta_hat beta||``, i.e.
        ``(X^T P_Z X)^{-1} X^T P_Z Y``, by :func:`least_squares` (plain XLA operations, no LAPACK).
    """
    theta_hat = least_squares(data.z, data.x)
    beta_hat = least_squares(data.z @ theta_hat, data.y)
    return beta_hat, theta_hat


def least_squares(a: jax.Array, b: jax.Array) -> jax.Array:
    """``argmin_x ||a x - b||`` for a full-column-rank ``a (n, k)``, ``b (n,)`` or ``(n, m)``.

    Normal equations on the column-equilibrated ``a`` (each column scaled to unit norm), solved
    by a Cholesky factorisation written in plain XLA operations, plus one step of iterative
    refinement on the residual (the corrected semi-normal equations): accurate to float32
    rounding for the well-posed designs of the IV studies (condition number of ``a`` up to
    ~1e3 after scaling; tested against NumPy's SVD solver).

    Why not ``jnp.linalg.lstsq``: on CPU it is a LAPACK custom call (``gesdd``), and a kernel
    holding it deadlocks when a study shards repetitions over several CPU devices (seen with
    jax 0.10: both device executions wait forever). ``k`` is small here (the number of
    instruments), so the ``O(k^3)`` loops cost nothing beside the ``O(n k^2)`` Gram matrix.
    """
    scale = jnp.sqrt(jnp.sum(jnp.square(a), axis=0))
    scale = jnp.where(scale > 0, scale, 1.0)
    a_s = a / scale[None, :]
    chol = _cholesky(records_dot(a_s, a_s))

    def solve(rhs):
        return _back_substitute(chol, _forward_substitute(chol, records_dot(a_s, rhs)))

    x = solve(b)
    x = x + solve(b - a_s @ x)
    return x / (scale[:, None] if b.ndim == 2 else scale)


def _cholesky(g: jax.Array) -> jax.Array:
    """Lower Cholesky factor of a symmetric positive-definite ``g (k, k)``, column by column.

    A pivot that rounding makes non-positive (a rank-deficient ``g``) is floored at
    ``k * eps * max(diag g)`` instead of producing NaN.
    """
    k = g.shape[0]
    idx = jnp.arange(k)
    floor = k * jnp.finfo(g.dtype).eps * jnp.max(jnp.diagonal(g))

    def column(j, low):
        row = jnp.where(idx < j, low[j], 0.0)
        pivot = jnp.sqrt(jnp.maximum(g[j, j] - row @ row, floor))
        col = (g[:, j] - low @ row) / pivot
        return low.at[:, j].set(jnp.where(idx > j, col, jnp.where(idx == j, pivot, 0.0)))

    return jax.lax.fori_loop(0, k, column, jnp.zeros_like(g))


def _forward_substitute(low: jax.Array, b: jax.Array) -> jax.Array:
    """Solve ``low y = b`` (rows of ``y`` not yet solved are zero, so ``low[i] @ y`` is the sum)."""

    def row(i, y):
        return y.at[i].set((b[i] - low[i] @ y) / low[i, i])

    return jax.lax.fori_loop(0, low.shape[0], row, jnp.zeros_like(b))


def _back_substitute(low: jax.Array, y: jax.Array) -> jax.Array:
    """Solve ``low^T x = y``."""
    k = low.shape[0]

    def row(j, x):
        i = k - 1 - j
        return x.at[i].set((y[i] - low[:, i] @ x) / low[i, i])

    return jax.lax.fori_loop(0, k, row, jnp.zeros_like(y))


# --------------------------------------------------------------------------------------------
# The simulation model
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LinearIV:
    """The simulation design of spec 004 §4.1 with dimensions ``p <= q`` and confounder ``r``.

    The true parameters travel as one flat vector (:meth:`pack` / :meth:`unpack`), so a study's
    ``truth`` is an array.
    """

    p: int
    q: int
    r: int
    theta_diagonal: float = 5.0

    name = "linear-iv"
    data_type = IVData

    def __post_init__(self) -> None:
        _validate.check_int_in_range(self.p, "p", 1)
        _validate.check_int_in_range(self.q, "q", self.p)
        _validate.check_int_in_range(self.r, "r", 1)

    # -- parameters --------------------------------------------------------------------------

    def draw_parameters(self, key: jax.Array) -> IVParameters:
        """Draw ``(beta, Theta, Phi, varphi)`` as spec 004 §4.1 states (float32 numpy)."""
        key_beta, key_theta, key_phi, key_varphi = jax.random.split(key, 4)
        eye = np.eye(self.q, self.p, dtype=np.float32)
        params = IVParameters(
            jax.random.normal(key_beta, (self.p,)),
            self.theta_diagonal * eye + jax.random.normal(key_theta, (self.q, self.p)),
            jax.random.normal(key_phi, (self.r, self.p)),
            jax.random.normal(key_varphi, (self.r,)),
        )
        return IVParameters(*(np.asarray(v, np.float32) for v in params))

    @property
    def num_parameters(self) -> int:
        return self.p + self.q * self.p + self.r * self.p + self.r

    def pack(self, params: IVParameters) -> np.ndarray:
        """The flat vector ``[beta, vec Theta, vec Phi, varphi]``."""
        return np.concatenate([np.ravel(np.asarray(v, np.float32)) for v in params])

    def unpack(self, flat: Any) -> IVParameters:
        p, q, r = self.p, self.q, self.r
        flat = jnp.asarray(flat)
        if flat.shape != (self.num_parameters,):
            raise ValueError(
                f"the parameter vector must have shape ({self.num_parameters},); got {flat.shape}"
            )
        i1, i2, i3 = p, p + q * p, p + q * p + r * p
        return IVParameters(
            flat[:i1], flat[i1:i2].reshape(q, p), flat[i2:i3].reshape(r, p), flat[i3:]
        )

    # -- simulation --------------------------------------------------------------------------

    @prefix_stable
    def simulate(self, key: jax.Array, n: int, truth: Any) -> IVData:
        """Draw ``n`` records of the design, given the packed true parameters ``truth``."""
        prm = self.unpack(truth)
        dtype = prm.beta.dtype
        key_z, key_u, key_ex, key_ey = jax.random.split(key, 4)
        z = _cpu_prng.normal(key_z, (n, self.q), dtype)
        u = _cpu_prng.normal(key_u, (n, self.r), dtype)
        x = (rows_dot(z, prm.theta) + rows_dot(u, prm.phi)
             + _cpu_prng.normal(key_ex, (n, self.p), dtype))
        y = rows_dot(x, prm.beta) + rows_dot(u, prm.varphi) + jax.random.normal(key_ey, (n,), dtype)
        return IVData(z, x, y)

    def confounding_covariance(self, params: IVParameters) -> np.ndarray:
        """``Cov(eps_2, eps_1) = Phi^T varphi`` (``p``-vector): non-zero means x is endogenous."""
        return np.asarray(params.phi).T @ np.asarray(params.varphi)

    def validate_data(self, data: Any, on_invalid: str = "raise") -> IVData:
        return validate_iv_data(data, on_invalid)


def validate_iv_data(data: Any, on_invalid: str = "raise") -> IVData:
    """Check an IV data set at the public boundary.

    Accepts an :class:`IVData` or a tuple ``(z, x, y)`` with ``z`` of shape ``(n, q)``, ``x`` of
    shape ``(n, p)``, ``y`` of shape ``(n,)``, all finite and real, ``n >= 2`` and ``q >= p``
    (identification, Assumption 1). Returns float arrays (float32 unless x64 is enabled).
    """
    if not isinstance(data, (IVData, tuple, list)) or len(data) != 3:
        raise TypeError("data must be an IVData or a tuple (z, x, y)")
    z = _validate.check_array(data[0], "data.z", ndim=2, on_invalid=on_invalid)
    x = _validate.check_array(data[1], "data.x", ndim=2, on_invalid=on_invalid)
    y = _validate.check_array(data[2], "data.y", ndim=1, on_invalid=on_invalid)
    n, q = z.shape
    if x.shape[0] != n or y.shape[0] != n:
        raise ValueError(
            f"data.z, data.x and data.y must have the same number of rows; got {n}, "
            f"{x.shape[0]} and {y.shape[0]}"
        )
    if n < 2:
        raise ValueError(f"data must have at least 2 records; got n = {n}")
    p = x.shape[1]
    if p < 1 or q < p:
        raise ValueError(
            f"data.z must have at least as many columns (instruments, q = {q}) as data.x "
            f"(regressors, p = {p}) and p >= 1 (Assumption 1: q >= p)"
        )
    dtype = jnp.result_type(float)
    return IVData(jnp.asarray(z, dtype), jnp.asarray(x, dtype), jnp.asarray(y, dtype))
