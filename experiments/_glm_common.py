"""Pieces shared by the DP GLM experiments (spec 003)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.config import Config, param
from dpjax.models.glm import sparse_sphere_beta


@dataclasses.dataclass(frozen=True)
class GLMStudyConfig(Config):
    """The settings both simulated GLM figures share (paper 003's Figures 1 and 2)."""

    T: int = param(50, ge=1, doc="iterations (of the main panels)")
    eta: float = param(1.0, gt=0, doc="step size")
    R: float = param(1.0, gt=0, doc="truncation level of y")
    b_constant: float = param(4.0, ge=2, doc="c in the declared sensitivity B = 2c")
    n_grid: tuple[int, ...] = param((20000, 40000, 80000), ge=10,
                                    doc="panel (b): the sample sizes")
    eps_grid: tuple[float, ...] = param((0.2, 0.5, 0.8), gt=0, doc="panel (c): the epsilons")
    n_base: int = param(40000, ge=10, doc="the sample size of the panels that do not vary n")
    eps_base: float = param(0.5, gt=0, doc="the epsilon of the panels that do not vary epsilon")


@dataclasses.dataclass(frozen=True)
class GLMRecord:
    """Per iteration: ``error = ||beta_t - beta||_2``, ``log_sq_error = log ||beta_t - beta||^2``
    (the paper's y-axis) and ``support_recall`` = the fraction of ``supp(beta)`` among the
    non-zeros of ``beta_t`` (1 for dense iterates)."""

    def __call__(self, state, truth: jax.Array) -> dict[str, jax.Array]:
        diff = state.beta - truth
        sq = jnp.sum(diff * diff)
        on = truth != 0
        hit = jnp.sum(on & (state.beta != 0)) / jnp.maximum(jnp.sum(on), 1)
        return {"error": jnp.sqrt(sq), "log_sq_error": jnp.log(sq),
                "support_recall": hit.astype(sq.dtype)}


def truth(seed: int, d: int, s: int | None = None) -> np.ndarray:
    """``beta`` uniform on the unit sphere (on the first ``s`` coordinates if ``s``), drawn once
    per ``(d, s)`` from ``seed`` so every curve of a panel has the same ``beta``."""
    s = d if s is None else s
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), d), s)
    return np.asarray(sparse_sphere_beta(key, d, s))

