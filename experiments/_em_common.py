"""Pieces shared by the DP-EM experiments (spec 000)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class InitNearTruth:
    """``beta0 = beta* + radius * ||beta*|| * u`` with ``u`` a uniformly random unit direction on
    ``supp(beta*)`` (spec 000 §7 A5): data-independent, and ``||beta0||_0 <= s*``."""

    radius: float

    def __call__(self, key: jax.Array, truth: jax.Array) -> jax.Array:
        support = (truth != 0).astype(truth.dtype)
        u = jax.random.normal(key, truth.shape, truth.dtype) * support
        return truth + u / jnp.linalg.norm(u) * jnp.linalg.norm(truth) * self.radius


@dataclasses.dataclass(frozen=True)
class BetaError:
    """``{"error": ||beta_t - beta*||_2}`` of a state with a ``beta`` field."""

    def __call__(self, state, truth: jax.Array) -> dict[str, jax.Array]:
        return {"error": jnp.linalg.norm(state.beta - truth)}
