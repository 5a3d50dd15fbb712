r"""Sparse linear regression data for the local-DP estimators of spec 001.

* :class:`SparseLinearModel`: ``y = <theta*, x> + zeta`` with ``x ~ N(0, Sigma)`` (``Sigma = I``
  or Toeplitz ``Sigma_ij = rho^|i-j|``, spec 001 §4.2) and Gaussian or Student-t noise (heavy
  tailed responses, spec §2.2: ``E|y|^{2p} < inf`` needs ``df > 2p``). A frozen dataclass, so it
  is a hashable static ``simulate(key, n, theta)`` for :class:`dpjax.sweep.Setting`.
* :func:`sparse_theta`: a uniformly random support of size ``k`` with random signs, entries
  ``1/k`` (``||theta||_1 = 1``, Assumption 1) or ``1/sqrt(k)`` (``||theta||_2 = 1``).
* The lower-bound hard instances of spec §2.7: :func:`hard_theta_nldp` (Thm 1 prior),
  :func:`hard_theta_interactive` (Thm 6 prior) and :class:`HardInstanceModel`
  (``x ~ Uniform{-1, 1}^d``, ``y in {-1, 1}`` with ``P(y = 1 | x) = (1 + <x, theta>)/2``), and
  the lower-bound curves :func:`lower_bound_nldp` and :func:`lower_bound_interactive` (rates,
  constants unknown: spec §7.9 uses them as a sanity flag).

Data are ``(x (n, d), y (n,))`` pairs. Everything broadcasts explicitly (the test suite runs
with ``jax_numpy_rank_promotion = "raise"``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _cpu_prng
from dpjax.mechanisms import rows_dot
from dpjax.models.protocol import prefix_stable

__all__ = [
    "HardInstanceModel",
    "SparseLinearModel",
    "hard_theta_interactive",
    "hard_theta_nldp",
    "lower_bound_interactive",
    "lower_bound_nldp",
    "sparse_theta",
    "toeplitz",
]


def _check_dk(d: int, k: int) -> None:
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be an integer >= 1; got {d!r}")
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= d:
        raise ValueError(f"k must be an integer in [1, d = {d}]; got {k!r}")


def toeplitz(d: int, rho: float) -> np.ndarray:
    """``Sigma_ij = rho^|i - j|`` (``|rho| < 1``): positive definite, ``kappa_inf < 1``."""
    if not -1 < rho < 1:
        raise ValueError(f"rho must lie in (-1, 1); got {rho!r}")
    idx = np.arange(d)
    return rho ** np.abs(idx[:, None] - idx[None, :]).astype(np.float64)


def sparse_theta(key: jax.Array, d: int, k: int, norm: Literal["l1", "l2"] = "l1") -> jax.Array:
    """A ``k``-sparse ``theta*`` in ``R^d``: uniform random support, random signs, equal
    magnitudes ``1/k`` (``norm="l1"``: ``||theta||_1 = 1``) or ``1/sqrt(k)`` (``"l2"``)."""
    _check_dk(d, k)
    if norm not in ("l1", "l2"):
        raise ValueError(f"norm must be 'l1' or 'l2'; got {norm!r}")
    key_support, key_sign = jax.random.split(key)
    support = jax.random.permutation(key_support, d)[:k]
    signs = jnp.where(jax.random.bernoulli(key_sign, 0.5, (k,)), 1.0, -1.0)
    mag = 1.0 / k if norm == "l1" else 1.0 / math.sqrt(k)
    return jnp.zeros(d).at[support].set(mag * signs)


@dataclasses.dataclass(frozen=True)
class SparseLinearModel:
    """``y = <theta, x> + zeta``, ``x ~ N(0, sigma_x^2 Sigma)``.

    Attributes:
        sigma_x: covariate scale (``sigma`` of Assumption 2), ``> 0``.
        noise_sd: scale of ``zeta`` (Gaussian sd; Student-t scale), ``>= 0``.
        rho: Toeplitz correlation (0: isotropic), in ``(-1, 1)``.
        df: Student-t degrees of freedom for ``zeta`` (``0``: Gaussian noise); heavy-tailed
            responses with ``E|y|^{2p} < inf`` need ``df > 2p``.
    """

    sigma_x: float = 1.0
    noise_sd: float = 0.5
    rho: float = 0.0
    df: float = 0.0

    def __post_init__(self) -> None:
        if not self.sigma_x > 0:
            raise ValueError(f"sigma_x must be > 0; got {self.sigma_x!r}")
        if not self.noise_sd >= 0:
            raise ValueError(f"noise_sd must be >= 0; got {self.noise_sd!r}")
        if not -1 < self.rho < 1:
            raise ValueError(f"rho must lie in (-1, 1); got {self.rho!r}")
        if not (self.df == 0 or self.df > 2):
            raise ValueError(f"df must be 0 (Gaussian noise) or > 2 (finite variance); "
                             f"got {self.df!r}")

    def covariance(self, d: int) -> np.ndarray:
        """``Cov(x) = sigma_x^2 Sigma``."""
        base = np.eye(d) if self.rho == 0 else toeplitz(d, self.rho)
        return self.sigma_x**2 * base

    @prefix_stable
    def __call__(self, key: jax.Array, n: int, theta: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``n`` records ``(x (n, d), y (n,))``."""
        theta = jnp.asarray(theta)
        d = theta.shape[0]
        key_x, key_noise = jax.random.split(key)
        x = _cpu_prng.normal(key_x, (n, d), theta.dtype)
        if self.rho != 0:
            chol = jnp.asarray(np.linalg.cholesky(toeplitz(d, self.rho)), theta.dtype)
            x = rows_dot(x, chol.T)
        x = self.sigma_x * x
        if self.df == 0:
            zeta = jax.random.normal(key_noise, (n,), theta.dtype)
        else:
            zeta = jax.random.t(key_noise, self.df, (n,), theta.dtype)
        return x, rows_dot(x, theta) + self.noise_sd * zeta


# --------------------------------------------------------------------------------------------
# Lower-bound hard instances (spec 001 §2.7)
# --------------------------------------------------------------------------------------------


def hard_theta_nldp(key: jax.Array, d: int, k: int, nu: float) -> jax.Array:
    r"""Thm 1 prior: ``Z_i`` i.i.d., ``P(+1) = P(-1) = k/(4d)``, ``P(0) = 1 - k/(2d)``;
    ``theta_i = (nu / sqrt k) Z_i``. Expected sparsity ``k/2``; needs ``nu < 1/sqrt k`` so that
    ``||theta||_1 <= 1`` whenever ``||theta||_0 <= k``."""
    _check_dk(d, k)
    if not 0 < nu < 1 / math.sqrt(k):
        raise ValueError(f"nu must lie in (0, 1/sqrt(k) = {1 / math.sqrt(k):.4g}); got {nu!r}")
    u = jax.random.uniform(key, (d,))
    z = jnp.where(u < k / (4 * d), 1.0, jnp.where(u < k / (2 * d), -1.0, 0.0))
    return (nu / math.sqrt(k)) * z


def hard_theta_interactive(key: jax.Array, d: int, k: int, nu: float) -> jax.Array:
    r"""Thm 6 prior: ``Z_i in {-1, +1}`` i.i.d., ``P(+1) = k/(2d)``;
    ``theta_i = gamma (1 + Z_i)/2`` with ``gamma = 4 sqrt(2) nu / sqrt k`` (spec [R]); needs
    ``nu < 1/(4 sqrt(2k))`` [R?]."""
    _check_dk(d, k)
    top = 1 / (4 * math.sqrt(2 * k))
    if not 0 < nu < top:
        raise ValueError(f"nu must lie in (0, 1/(4 sqrt(2k)) = {top:.4g}); got {nu!r}")
    z = jnp.where(jax.random.bernoulli(key, k / (2 * d), (d,)), 1.0, -1.0)
    gamma = 4 * math.sqrt(2) * nu / math.sqrt(k)
    return gamma * (1 + z) / 2


@dataclasses.dataclass(frozen=True)
class HardInstanceModel:
    """``x ~ Uniform{-1, 1}^d``, ``y in {-1, 1}``, ``P(y = 1 | x) = (1 + <x, theta>)/2``.

    So ``zeta = y - <x, theta>`` has ``E[zeta | x] = 0`` and ``|zeta| <= 2`` when
    ``||theta||_1 <= 1`` (spec 001 §2.7, eq. (1)); ``<x, theta>`` is clipped to ``[-1, 1]``
    so that the probability is valid for every ``theta``.
    """

    @prefix_stable
    def __call__(self, key: jax.Array, n: int, theta: jax.Array) -> tuple[jax.Array, jax.Array]:
        theta = jnp.asarray(theta)
        d = theta.shape[0]
        key_x, key_y = jax.random.split(key)
        x = jnp.where(jax.random.bernoulli(key_x, 0.5, (n, d)), 1.0, -1.0).astype(theta.dtype)
        p = (1 + jnp.clip(rows_dot(x, theta), -1.0, 1.0)) / 2
        y = jnp.where(jax.random.uniform(key_y, (n,)) < p, 1.0, -1.0).astype(theta.dtype)
        return x, y


def lower_bound_nldp(n: float, d: int, k: int, epsilon: float) -> float:
    """Thm 1 rate ``sqrt(d k log d / (n eps^2))`` (constant 1; a sanity curve, spec §7.9)."""
    return math.sqrt(d * k * math.log(d) / (n * epsilon**2))


def lower_bound_interactive(n: float, d: int, k: int, epsilon: float) -> float:
    """Thm 6 rate ``sqrt(d k / (n eps^2))`` (constant 1; a sanity curve)."""
    return math.sqrt(d * k / (n * epsilon**2))
