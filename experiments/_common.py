"""Pieces shared by every experiment family (DP-EM, DP GLM, DP-IV): colours and labels of the
figures, the final-iterate rows, and the zero start. Family-specific pieces stay in
``_em_common``, ``_glm_common`` and ``_iv_common``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["COLORS", "INF", "METRICS", "ZeroInit", "eps_label", "final_rows"]

INF = math.inf
# matplotlib's tab10 cycle, in order (experiments index it modulo their number of curves)
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
          "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
# the recorded metrics of iterations.csv rows (every other column identifies the row's group)
METRICS = ("error", "error_2sls", "error_of_2sls", "estimate", "clip1", "clip2", "log_sq_error",
           "support_recall", "error_sym")


def eps_label(e: float) -> str:
    """A legend entry for a privacy level."""
    return "non-private" if math.isinf(e) else f"eps={e:g}"


def final_rows(iter_rows: Sequence[Mapping[str, Any]],
               metrics: Sequence[str] = METRICS) -> list[dict[str, Any]]:
    """The last recorded iteration of every (setting, level, repetition) of ``iterations.csv``
    rows (what a figure against n, d or T plots); the rows are grouped by every column except
    ``iteration`` and the ``metrics``."""
    skip = {"iteration", *metrics}
    last: dict[tuple, dict[str, Any]] = {}
    for r in iter_rows:
        key = tuple(sorted((k, v) for k, v in r.items() if k not in skip))
        if key not in last or r["iteration"] > last[key]["iteration"]:
            last[key] = dict(r)
    return list(last.values())


@dataclasses.dataclass(frozen=True)
class ZeroInit:
    """The start at zero, data-independent (every GLM and IV experiment of the papers): with no
    ``shapes``, ``beta0 = 0`` shaped like the truth; with ``shapes``, a tuple of zero arrays of
    those shapes (the IV start ``(Theta0, beta0) = (0, 0)``)."""

    shapes: tuple[tuple[int, ...], ...] | None = None

    def __call__(self, key: jax.Array, truth: jax.Array) -> Any:
        del key
        if self.shapes is None:
            return jnp.zeros_like(truth)
        return tuple(jnp.zeros(s, truth.dtype) for s in self.shapes)
