"""Reproductions of the papers' figures and tables, one module per figure or table.

Each module defines ``EXPERIMENTS``: a list of :class:`dpjax.study.Experiment`. Run them with
``dpjax run NAME --out DIR``; list them with ``dpjax list``.
"""

from __future__ import annotations

import importlib
import pkgutil

__all__ = ["registry"]


def registry() -> dict:
    """All experiments, by name."""
    out = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        for exp in getattr(mod, "EXPERIMENTS", ()):
            if exp.name in out:
                raise ValueError(f"duplicate experiment name {exp.name!r}")
            out[exp.name] = exp
    return out
