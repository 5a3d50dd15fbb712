"""Planted under-noising: every release of :mod:`dpjax.mechanisms` with less noise than it
records, for as long as a context is open (no file is edited). An honest audit stays below its
claim; with a plant it must not."""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any

import jax.numpy as jnp

from dpjax import mechanisms

__all__ = ["PLANTS", "UNPLANTED_KINDS", "planted_bug", "plants_reaching", "scaled_noise"]

#: The planted bugs: ``"noise-x0.2"`` draws 0.2 times the calibrated noise (the events, and so
#: the ledger, still record the honest scale) and runs every randomized-response coin at
#: ``epsilon / 0.2`` (the l2-ball randomizer of local DP, whose randomness is a coin, not a
#: noise scale); ``"sensitivity-x0.5"`` calibrates every release from half the statistic's
#: declared sensitivity (the events record the halved scale). They reach every Laplace,
#: Gaussian and peeling release, central or local (the reports of
#: :mod:`dpjax.local_randomizers` calibrate and draw through :mod:`dpjax.mechanisms`).
PLANTS = ("noise-x0.2", "sensitivity-x0.5")

#: Plants that do not reach a release kind, with the reason: the l2-ball randomizer is eps-LDP
#: for every radius (its radius, the declared range, only sets the output norm that keeps the
#: report unbiased; a smaller radius shrinks the input onto the ball), so there is no
#: sensitivity calibration for ``"sensitivity-x0.5"`` to halve. Audits of such runs report "n/a"
#: in that column.
UNPLANTED_KINDS = {"ldp-randomizer": {
    "sensitivity-x0.5": "the l2-ball randomizer is eps-LDP for every radius: no sensitivity "
                        "calibration to halve"}}


def plants_reaching(kinds: set[str]) -> tuple[str, ...]:
    """The plants of :data:`PLANTS` that reach at least one release of the given kinds."""
    if not kinds:
        return PLANTS
    return tuple(p for p in PLANTS
                 if any(p not in UNPLANTED_KINDS.get(kind, {}) for kind in kinds))

# The calibration functions of dpjax.mechanisms whose first argument is the sensitivity.
_SCALE_FUNCTIONS = ("laplace_scale", "gaussian_sigma", "gaussian_sigma_zcdp",
                    "peeling_scale")
_NOISE_FUNCTIONS = ("laplace_noise", "gaussian_noise")
# the randomized-response coin (the l2-ball randomizer's hemisphere draw), drawn at eps / f
_COIN_FUNCTIONS = ("randomized_response_bit",)


@contextlib.contextmanager
def planted_bug(kind: str | None):
    """Temporarily plant an under-noising bug in :mod:`dpjax.mechanisms` (no file is edited).

    Every Laplace, Gaussian, zCDP-Gaussian and peeling release of every estimator, and every
    report of :mod:`dpjax.local_randomizers`, goes through the noise draws, calibrations and
    randomized-response coin of :mod:`dpjax.mechanisms`, looked up at trace time, so a function
    traced inside this context (a fresh ``jit``, as :func:`audit` makes) carries the bug and
    one traced outside it does not. ``kind``: one of :data:`PLANTS`, or ``None`` (no bug). Not
    thread-safe; for audits and tests only. (The l2-ball randomizer of local DP has no
    sensitivity calibration: ``"sensitivity-x0.5"`` does not reach it, see
    :data:`UNPLANTED_KINDS`.)
    """
    if kind is None:
        yield
        return
    if kind not in PLANTS + ("noise-x0",):
        raise ValueError(f"kind must be one of {PLANTS} or None; got {kind!r}")
    if kind.startswith("noise-x"):
        factors = (float(kind[len("noise-x"):]), None)
    else:
        factors = (None, 0.5)
    with scaled_noise(*factors):
        yield


@contextlib.contextmanager
def scaled_noise(noise: Any = None, sensitivity: Any = None):
    """Inside: every noise draw of :mod:`dpjax.mechanisms` at ``noise`` times the calibrated
    scale (the events record the honest scale), and every calibration from ``sensitivity``
    times the declared sensitivity (the events record the scale drawn); ``None``: unchanged.

    The factors may be traced values (so one compiled function serves the honest run, factors
    1, and the planted ones): :func:`planted_bug` with fixed factors is this context."""
    names = _SCALE_FUNCTIONS + _NOISE_FUNCTIONS + _COIN_FUNCTIONS
    saved = {name: getattr(mechanisms, name) for name in names}
    homes = {name: _holders(name, saved[name]) for name in names}

    def plant(name, f):
        for module in homes[name]:
            setattr(module, name, f)

    try:
        if noise is not None:
            for name in _NOISE_FUNCTIONS:
                def draw(key, shape, scale, dtype=jnp.float32, _f=saved[name]):
                    return _f(key, shape, noise * jnp.asarray(scale, dtype), dtype)
                plant(name, draw)

            def coin(key, epsilon, _f=saved["randomized_response_bit"]):  # x f <=> eps / f
                return _f(key, jnp.asarray(epsilon) / noise)
            plant("randomized_response_bit", coin)
        if sensitivity is not None:
            for name in _SCALE_FUNCTIONS:
                def calibrate(sens, *budget, _f=saved[name], **kw):
                    return _f(sensitivity * jnp.asarray(sens), *budget, **kw)
                plant(name, calibrate)
        yield
    finally:
        for name, f in saved.items():
            plant(name, f)


def _holders(name: str, f: Any) -> list[types.ModuleType]:
    """The modules of the :mod:`dpjax.mechanisms` package (the package itself included) whose
    global ``name`` is ``f``: where the mechanisms, and the layers above through the package,
    look it up at trace time."""
    prefix = mechanisms.__name__ + "."
    return [m for key, m in sorted(sys.modules.items())
            if (key == mechanisms.__name__ or key.startswith(prefix))
            and getattr(m, name, None) is f]
