"""``dpjax.experiments``: reproductions of the papers' figures and tables.

Each module defines ``EXPERIMENTS``: a list of :class:`dpjax.study.Experiment` (one module may
register several, e.g. ``iv_horizon``: ``iv_fig4`` and ``iv_fig6``). Run them with
``dpjax run NAME --out DIR``; list them with ``dpjax list``.

The package lives in the repository's ``experiments/`` directory; it is installed (and, in a
source checkout, imported) as ``dpjax.experiments``.
"""

from __future__ import annotations

import importlib
import pkgutil

__all__ = ["find", "registry"]


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


def find(name: str, fallback: bool = True):
    """The experiment ``name``, or ``None``: read from the module of the same name when it
    defines it (one import instead of every module's: about 0.08 s of each ``dpjax run``),
    else (with ``fallback``) from :func:`registry`."""
    if name.isidentifier() and not name.startswith("_"):
        try:
            mod = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
        else:
            for exp in getattr(mod, "EXPERIMENTS", ()):
                if exp.name == name:
                    return exp
    return registry().get(name) if fallback else None
