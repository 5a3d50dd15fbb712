r"""Symmetric two-component Gaussian mixture (spec 000 §1.4, eq. 4).

Model: ``y = z beta* + e`` with ``P(z = 1) = P(z = -1) = 1/2``, ``e ~ N(0, sigma^2 I_d)``, sigma
known. One record is one row ``y_i`` of ``Y``.

E-step (exact posterior, spec 000 §7 A1): ``P(z = 1 | y) = 1 / (1 + exp(-2 <beta, y> / sigma^2))``,
so ``2 w - 1 = tanh(<beta, y> / sigma^2)``. The paper prints the weight without the factor 2
(``2w - 1 = tanh(<beta, y>/(2 sigma^2))``); that biased form is available as
``weights="paper"`` for reproduction. Both satisfy ``|2w - 1| <= 1``, so privacy is the same.

Gradient of the sample Q-function at ``beta' = beta``:
``grad Q_n(beta; beta) = (1/n) sum_i (2 w_beta(y_i) - 1) y_i - beta``.

Truncated statistic (spec 000 Alg 3):
``f_T = (1/n0) sum_{i in B_t} (2 w(y_i) - 1) Pi_T(y_i) - beta``
with the weight from the unclipped ``y_i``. Each record's term lies in ``[-T, T]^d``, so
replacing one record moves ``f_T`` by at most ``2 T / n0`` in l-infinity norm (the ``-beta`` is
public and cancels).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _cpu_prng, _validate
from dpjax.mechanisms import BoundedStatistic, bounded_mean_from_sum, clip_linf, sanitize
from dpjax.models.protocol import prefix_stable

__all__ = ["GMMData", "GaussianMixture", "sparse_unit_beta"]


class GMMData(NamedTuple):
    """Observations of the Gaussian mixture."""

    y: jax.Array  # (n, d)


@dataclasses.dataclass(frozen=True)
class GaussianMixture:
    """The symmetric two-component Gaussian mixture with known noise level ``sigma``.

    Attributes:
        sigma: the known noise standard deviation (> 0).
        weights: ``"exact"`` posterior (default) or ``"paper"`` (spec 000 §7 A1, biased).
    """

    sigma: float = 0.5
    weights: Literal["exact", "paper"] = "exact"

    name = "gmm"
    data_type = GMMData

    def __post_init__(self) -> None:
        _validate.check_positive(self.sigma, "sigma")
        _validate.check_choice(self.weights, "weights", ("exact", "paper"))

    # -- simulation ---------------------------------------------------------------------------

    @prefix_stable
    def simulate(self, key: jax.Array, n: int, beta: jax.Array) -> GMMData:
        """Draw ``n`` records ``y_i = z_i beta + sigma e_i`` (spec 000 §4.1)."""
        key_z, key_e = jax.random.split(key)
        beta = jnp.asarray(beta)
        z = jax.random.rademacher(key_z, (n,), dtype=beta.dtype)
        e = _cpu_prng.normal(key_e, (n, beta.shape[0]), dtype=beta.dtype)
        return GMMData(z[:, None] * beta[None, :] + self.sigma * e)

    # -- E-step and gradients -----------------------------------------------------------------

    def posterior_sign(self, beta: jax.Array, data: GMMData) -> jax.Array:
        """``2 w_beta(y_i) - 1`` for every record, shape ``(n,)``."""
        scale = 1.0 if self.weights == "exact" else 0.5
        # sanitize: an extreme record can make <beta, y> overflow to inf - inf = NaN; mapped to a
        # finite value, the weight stays in [-1, 1] (tanh(+-inf) = +-1), as the bound needs.
        return jnp.tanh(scale * sanitize(data.y @ beta) / self.sigma**2)

    def gradient(self, beta: jax.Array, data: GMMData, mask: jax.Array | None = None,
                 count: Any = None) -> jax.Array:
        """Non-private ``grad Q_n(beta; beta)`` on ``data`` (no truncation); with ``mask``, on
        its rows only, ``count`` of them (see :meth:`truncated_gradient`)."""
        if mask is None:
            n = data.y.shape[0]
            return (self.posterior_sign(beta, data) @ data.y) / n - beta
        y = jnp.where(mask[:, None], data.y, jnp.zeros_like(data.y))
        w = jnp.where(mask, self.posterior_sign(beta, GMMData(y)), jnp.zeros((), y.dtype))
        return (w @ y) / count - beta

    def per_sample_gradients(self, beta: jax.Array, data: GMMData,
                             mask: jax.Array | None = None) -> jax.Array:
        """``grad q_i(beta; beta) = (2 w_beta(y_i) - 1) y_i - beta`` for every record, ``(n, d)``
        (spec 002 eq. 23, with the exact weight by default); their mean is :meth:`gradient`.
        With ``mask``, the rows outside it are zero (padding, whatever it holds)."""
        if mask is None:
            w = self.posterior_sign(beta, data)
            return w[:, None] * data.y - beta[None, :]
        y = jnp.where(mask[:, None], data.y, jnp.zeros_like(data.y))
        w = self.posterior_sign(beta, GMMData(y))
        return jnp.where(mask[:, None], w[:, None] * y - beta[None, :], jnp.zeros((), y.dtype))

    def m_step_terms(self, beta: jax.Array, data: GMMData,
                     mask: jax.Array | None = None) -> jax.Array:
        """``f_i(beta) = (2 w_beta(y_i) - 1) y_i`` for every record, ``(n, d)``: the exact
        M-step is their mean (spec 002 §2.6, DP EM = Algorithm 3). With ``mask``, the rows
        outside it are zero (padding, whatever it holds: ``y_i = 0`` gives ``f_i = 0``)."""
        y = data.y if mask is None else jnp.where(mask[:, None], data.y, jnp.zeros_like(data.y))
        return self.posterior_sign(beta, GMMData(y))[:, None] * y

    def truncated_gradient(
        self, beta: jax.Array, data: GMMData, truncation: Any,
        mask: jax.Array | None = None, count: Any = None,
    ) -> BoundedStatistic:
        """``f_T(grad Q)`` with its l-infinity replace-one sensitivity ``2 T / n0``.

        With ``mask`` (``(m,)`` bool) only the masked rows are records (the others, padding,
        contribute nothing whatever they hold) and ``count`` is their public number ``n0``
        (a runtime value: :class:`dpjax.base.Padded`)."""
        y = data.y
        if mask is not None:
            y = jnp.where(mask[:, None], y, jnp.zeros_like(y))
        w = self.posterior_sign(beta, GMMData(y))
        if mask is not None:
            w = jnp.where(mask, w, jnp.zeros_like(w))
        # The record terms (2w_i - 1) Pi_T(y_i) lie in [-T, T]^d (|2w - 1| <= 1, |Pi_T(y)_j| <= T),
        # so one record moves their sum by at most 2T per coordinate. The sum is one
        # matrix-vector product rather than an (n, d) array of terms.
        total = w @ clip_linf(y, truncation)
        return bounded_mean_from_sum(
            total, y.shape[0] if count is None else count, 2.0 * jnp.asarray(truncation), "linf"
        ).shift(-beta)

    #: ``truncated_gradient`` takes a row mask and a runtime count (padded programs)
    supports_mask = True
    #: and each is the sum of its masked records' terms over the count plus a part that reads no
    #: record, so a padded step adds them up over blocks of records (``dp_em``'s row blocks)
    blockwise = True

    # -- facts for ledgers and validation ------------------------------------------------------

    sensitivity_formula = "2*T/n0"

    @property
    def variant(self) -> str:
        if self.weights == "paper":
            return "paper-literal posterior weights (spec 000 A1: biased, still DP)"
        return "corrected"

    @property
    def ledger_notes(self) -> tuple[str, ...]:
        return ()

    @property
    def gradient_notes(self) -> tuple[str, ...]:
        return ("paper-literal posterior weights (biased, still DP)",) \
            if self.weights == "paper" else ()

    def ex_post_notes(self, iterates, truncation, epsilon, delta) -> list[str]:
        """None: the declared bound holds for every iterate."""
        del iterates, truncation, epsilon, delta
        return []

    def dummy_batch(self, n: int, d: int) -> GMMData:
        """An all-zero batch of the right structure (for reading off data-free quantities)."""
        return GMMData(jnp.zeros((n, d)))

    def dim(self, data: GMMData) -> int:
        return int(data.y.shape[1])

    def num_records(self, data: GMMData) -> int:
        return int(data.y.shape[0])

    def validate_data(self, data: Any, on_invalid: str = "raise") -> GMMData:
        """Check a data set at the public boundary; accepts a ``GMMData`` or an ``(n, d)`` array."""
        y = data.y if isinstance(data, GMMData) else data
        y = _validate.check_array(y, "data.y", ndim=2, on_invalid=on_invalid)
        if y.shape[0] < 1 or y.shape[1] < 1:
            raise ValueError(f"data.y must have at least one row and column; got {y.shape}")
        return GMMData(jnp.asarray(y, dtype=jnp.result_type(float)))


def sparse_unit_beta(d: int, s: int, dtype=np.float32) -> np.ndarray:
    """``beta*`` of spec 000 §4.1: the first ``s`` coordinates ``1/sqrt(s)``, the rest 0."""
    _validate.check_int_in_range(s, "s", 1, d)
    beta = np.zeros(d, dtype=dtype)
    beta[:s] = 1.0 / np.sqrt(s)
    return beta
