"""Pieces shared by the DP-EM experiments (spec 000)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from dpjax.algorithms import dp_em
from dpjax.plotting import Curve, Panel
from dpjax.study import ConfigError
from dpjax.sweep import DataPlan, Setting

INF = math.inf
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]


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


def eps_label(e: float) -> str:
    return "non-private (eps=inf)" if math.isinf(e) else f"eps={e:g}"


def final_rows(iter_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The last recorded iteration of every (setting, level, repetition) of ``iterations.csv``
    rows (what a figure against n or d plots)."""
    last: dict[tuple, dict[str, Any]] = {}
    for r in iter_rows:
        key = tuple(sorted((k, v) for k, v in r.items() if k not in ("iteration", "error")))
        if key not in last or r["iteration"] > last[key]["iteration"]:
            last[key] = dict(r)
    return list(last.values())


def level(epsilon: float, n: int, eta: float, truncation: float) -> dict[str, float]:
    """A DP-EM hyperparameter level with ``delta = 1/(2n)`` (spec 000 §4)."""
    return {"epsilon": epsilon, "delta": 1.0 / (2 * n), "eta": eta, "truncation": truncation}


# --------------------------------------------------------------------------------------------
# The three-panel high-dimensional design of Figures 1 and 4 (vary n, s*, epsilon)
# --------------------------------------------------------------------------------------------


def hd_check(c: Mapping[str, Any]) -> None:
    """Validate the configuration of the three-panel design (raises :class:`ConfigError`)."""
    if c["d"] < max(*c["s_grid"], c["s_base"]):
        raise ConfigError("--set d: d must be at least the largest sparsity in s_grid/s_base")
    if any(e <= 0 for e in c["eps_grid"]):
        raise ConfigError("--set eps_grid: every epsilon must be > 0")
    if c["eps_base"] <= 0:
        raise ConfigError("--set eps_base: epsilon must be > 0")
    if any(n < 20 for n in (*c["n_grid"], *c.get("large_n", ()), c["n_base"])):
        raise ConfigError("--set n_grid/large_n/n_base: n must be at least 20")
    if c["sigma"] <= 0 or c["eta"] <= 0 or c["truncation_const"] <= 0:
        raise ConfigError("--set sigma/eta/truncation_const: must be > 0")


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
            estimator=dp_em.hd_dp_em(model, s, N0),
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

    def short(e):  # compact legend entries where the curve label already names n or s*
        return "non-private" if math.isinf(e) else f"eps={e:g}"

    pa = [Curve(f"n={n}, {short(e)}", {"n": n, "s": c["s_base"], "epsilon": e},
                COLORS[i % 6], ls(e))
          for i, n in enumerate(c["n_grid"]) for e in (c["eps_base"], INF)]
    pb = [Curve(f"s*={s}, {short(e)}", {"n": c["n_base"], "s": s, "epsilon": e},
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
        pd = [Curve(f"n={n}, {short(e)}", {"n": n, "s": c["s_base"], "epsilon": e},
                    COLORS[i % 6], ls(e))
              for i, n in enumerate(c["large_n"]) for e in (c["eps_base"], INF)]
        panels.append(Panel(f"(d) added: larger n, s*={c['s_base']}, eps={c['eps_base']:g}", pd))
    return panels
