"""Pieces shared by every experiment family (DP-EM, DP GLM, DP-IV): colours and labels of the
figures and the zero start. The recorded metrics and the final-iterate rows are public in
:mod:`dpjax.plotting` (``METRICS``, ``final_rows``) and re-exported here for the experiments.
Family-specific pieces stay in ``_em_common``, ``_glm_common`` and ``_iv_common``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from dpjax.plotting import METRICS, final_rows  # public there; kept here for the experiments

__all__ = ["COLORS", "INF", "METRICS", "ZeroInit", "eps_label", "final_rows",
           "finish_figure"]

INF = math.inf
# matplotlib's tab10 cycle, in order (experiments index it modulo their number of curves)
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
          "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]


def eps_label(e: float) -> str:
    """A legend entry for a privacy level."""
    return "non-private" if math.isinf(e) else f"eps={e:g}"


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


def finish_figure(fig: Any, path: Any, title: str, fontsize: float = 11) -> None:
    """The end of a figure an experiment draws itself: ``title`` above its panels with what
    the shaded bands are (:data:`dpjax.plotting.BAND_TEXT`) appended, a tight layout, and the
    file (:func:`dpjax.plotting.save_figure`)."""
    from dpjax import plotting

    fig.suptitle(f"{title}{plotting.BAND_TEXT}", fontsize=fontsize)
    fig.tight_layout()
    plotting.save_figure(fig, path)
