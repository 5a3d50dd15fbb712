"""Pieces shared by the DP-EM experiments (spec 000)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from dpjax.algorithms import dp_em
from dpjax.config import Config, ConfigError, param
from dpjax.experiments._common import COLORS, INF, eps_label
from dpjax.plotting import Curve, Panel
from dpjax.sweep import DataPlan, Setting


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


def level(epsilon: float, n: int, eta: float, truncation: float) -> dict[str, float]:
    """A DP-EM hyperparameter level with ``delta = 1/(2n)`` (spec 000 §4)."""
    return {"epsilon": epsilon, "delta": 1.0 / (2 * n), "eta": eta, "truncation": truncation}


# --------------------------------------------------------------------------------------------
# The three-panel high-dimensional design of Figures 1 and 4 (vary n, s*, epsilon)
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HDConfig(Config):
    """The three-panel design of Figures 1 and 4 (the defaults: Figure 1's)."""

    d: int = param(1000, ge=1, doc="dimension of beta*")
    sigma: float = param(0.5, gt=0, doc="noise standard deviation")
    eta: float = param(0.5, gt=0, doc="step size")
    n_grid: tuple[int, ...] = param((4000, 5000, 6000), ge=20,
                                    doc="panel (a): the sample sizes (at s_base, eps_base)")
    s_grid: tuple[int, ...] = param((5, 10, 15), ge=1,
                                    doc="panel (b): the sparsities s* (at n_base, eps_base)")
    eps_grid: tuple[float, ...] = param((0.3, 0.5, 0.8), gt=0,
                                        doc="panel (c): the epsilons (at n_base, s_base)")
    n_base: int = param(4000, ge=20, doc="the sample size of panels (b) and (c)")
    s_base: int = param(10, ge=1, doc="the sparsity s* of panels (a), (c) and (d)")
    eps_base: float = param(0.5, gt=0, doc="the epsilon of panels (a), (b) and (d)")
    large_n: tuple[int, ...] = param(
        (20000, 50000, 100000, 200000), ge=20, allow_empty=True,
        doc="panel (d), added: larger sample sizes; empty switches the panel off")
    truncation_const: float = param(1.0, gt=0,
                                    doc="truncation level T = truncation_const sqrt(log n)")
    init_radius: float = param(0.125, ge=0,
                               doc="start at distance init_radius ||beta*|| from beta*")

    def check(self) -> None:
        largest = max(*self.s_grid, self.s_base)
        if self.d < largest:
            raise ConfigError(f"--set d: must be >= the largest sparsity of s_grid and s_base "
                              f"({largest}); got {self.d}")


def hd_pairs(c: Mapping[str, Any]) -> dict[tuple[int, int], set[float]]:
    """(n, s*) -> the epsilons the three-panel design needs (vary n, s*, eps; each with its
    non-private twin), plus the optional large-n panel. Shared by em_fig1, em_fig4, glm_fig2."""
    need: dict[tuple[int, int], set[float]] = {}
    for n in c["n_grid"]:
        need.setdefault((n, c["s_base"]), set()).update({c["eps_base"], INF})
    for s in c["s_grid"]:
        need.setdefault((c["n_base"], s), set()).update({c["eps_base"], INF})
    need.setdefault((c["n_base"], c["s_base"]), set()).update({*c["eps_grid"], INF})
    for n in c.get("large_n", ()):
        need.setdefault((n, c["s_base"]), set()).update({c["eps_base"], INF})
    return need


def hd_settings(c: Mapping[str, Any], model: Any, method: str, truth_fn) -> list[Setting]:
    """Algorithm 2 (NoisyHT) with ``T = c_T sqrt(log n)``, ``N0 = ceil(log n)``,
    ``s_hat = s*`` for every (n, s*) of :func:`hd_pairs`."""
    init, record = InitNearTruth(c["init_radius"]), BetaError()
    out = []
    for (n, s), epss in sorted(hd_pairs(c).items()):
        N0 = dp_em.default_num_iterations(n)
        T = c["truncation_const"] * dp_em.default_truncation(n)
        out.append(Setting(
            key=f"{method},n={n},d={c['d']},s={s}",
            columns={"method": method, "n": n, "d": c["d"], "s": s, "s_hat": s, "N0": N0},
            estimator=dp_em.hd_dp_em(model, s, N0, "paper"),  # the paper's peeling noise
            simulate=model.simulate, init=init, record=record,
            truth=truth_fn(c["d"], s), plan=DataPlan(N0, n // N0),
            hparams_type=dp_em.DPEMHyperparams,
            levels=tuple(level(e, n, c["eta"], T) for e in sorted(epss)), n=n,
        ))
    return out


def hd_panels(c: Mapping[str, Any]) -> list[Panel]:
    """Panels (a) vary n, (b) vary s*, (c) vary epsilon, (d) larger n; error against t."""
    def ls(e):
        return "-" if math.isfinite(e) else "--"

    pa = [Curve(f"n={n}, {eps_label(e)}", {"n": n, "s": c["s_base"], "epsilon": e},
                COLORS[i % 6], ls(e))
          for i, n in enumerate(c["n_grid"]) for e in (c["eps_base"], INF)]
    pb = [Curve(f"s*={s}, {eps_label(e)}", {"n": c["n_base"], "s": s, "epsilon": e},
                COLORS[i % 6], ls(e))
          for i, s in enumerate(c["s_grid"]) for e in (c["eps_base"], INF)]
    pc = [Curve(eps_label(e), {"n": c["n_base"], "s": c["s_base"], "epsilon": e},
                COLORS[i % 6] if math.isfinite(e) else "black", ls(e))
          for i, e in enumerate((*c["eps_grid"], INF))]
    panels = [
        Panel(f"(a) s*={c['s_base']}, eps={c['eps_base']:g}: varying n", pa),
        Panel(f"(b) n={c['n_base']}, eps={c['eps_base']:g}: varying s*", pb),
        Panel(f"(c) n={c['n_base']}, s*={c['s_base']}: varying eps", pc),
    ]
    if c.get("large_n"):
        pd = [Curve(f"n={n}, {eps_label(e)}", {"n": n, "s": c["s_base"], "epsilon": e},
                    COLORS[i % 6], ls(e))
              for i, n in enumerate(c["large_n"]) for e in (c["eps_base"], INF)]
        panels.append(Panel(f"(d) added: larger n, s*={c['s_base']}, eps={c['eps_base']:g}", pd))
    return panels
