r"""One calibration, from the ledger: the noise at which an estimator spends its whole budget.

An estimator's noise is set by the budget fields of its hyperparameters (``epsilon``,
``rho1``, ...), through whatever formula its step uses, and its ledger reads the guarantee the
noise actually delivers off the privacy events (:meth:`dpjax.accounting.Ledger.build`). A
formula that is loose for the composition the ledger proves -- the classic Gaussian constant,
basic composition of per-step budgets, a printed sensitivity with a margin -- delivers less than
the request. :func:`calibrate` closes the gap for *any* estimator built on
:mod:`dpjax.base`, registered or a user's own:

.. math::

    c^\star = \max\{c > 0 : \mathrm{ledger}(h_c) \preceq \mathrm{target}\}, \qquad
    h_c = \text{hparams with every budget field multiplied by } c,

found by bisection on the host in float64 (the delivered epsilon or rho is increasing in
``c``), to within ``rtol`` (default 1%) of the target and never above it. The ledger is read
from the events of a run on an all-zero data set of the same shapes: the noise scales and the
sensitivities of every dpjax release depend on public values only (``n``, the
hyperparameters, the clipping levels), never on the records, so this evaluation is exact and
touches no private data.

**The splitting rule.** Where an estimator has several budget fields or several kinds of
release (the two stages of DP IV regression, ``rho1`` and ``rho2``; peeling and Gaussian
steps), one factor ``c`` multiplies *every* budget field: the estimator's own split of the
budget between its releases is kept, and the whole composition is solved for the target.
``delta`` fields are not scaled: they are the target's delta.

**Levels.** Hyperparameters with a leading axis (a grid of privacy levels for a study's
``vmap``) are solved once per level, on the host; the kernel receives the calibrated arrays and
never solves anything.

The registered estimators' *default* calibrations spend their request (each family page says
how; ``tests/test_budget.py``). :func:`calibrate` is the tool for a paper's calibration (kept
by name, e.g. ``dp_glm.noisy_gd(model, T, "paper")``, which splits the budget over the steps by
basic composition), for a user's estimator, and for a target other than the one the
hyperparameters state.

Example (Algorithm 1 of the DP GLM paper at the paper's calibration, which under-spends; the
API page, docs/api/calibrate.md, runs it)::

    est = dp_glm.noisy_gd(GLM("logistic"), 5, "paper")
    hp = dp_glm.default_hparams(2000, 1.0, 5, calibration="paper")  # data: 2000 records, d = 5
    cal = dpjax.calibrate(est, hp, data=data, params0=jnp.zeros(5))
    cal.factor        # 1.62: the paper's budget fields are multiplied by it
    cal.delivered     # (0.99999, 0.00025)-DP: the request, spent
    res = dpjax.calibrated_fit(est, key, data, jnp.zeros(5), cal)  # ledger.requested: eps 1
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.accounting import DELIVERY_RTOL, ZCDP, ApproxDP, Budget, Ledger
from dpjax.base import Estimator, FitResult, _events_fn, _zeros_like, fit

__all__ = ["Calibration", "CalibrationError", "budget_fields", "calibrate", "calibrated_fit",
           "delivered_fraction"]

#: the default relative tolerance: delivered within 1% of the target, never above
RTOL = 0.01


class CalibrationError(ValueError):
    """No budget factor delivers the target to within the tolerance."""


class Calibration(NamedTuple):
    """The result of :func:`calibrate` (one privacy level, or a grid of them).

    Attributes:
        hparams: the calibrated hyperparameters (the budget fields multiplied by ``factor``,
            same dtypes and shapes as given): pass them to :func:`dpjax.fit` or a study.
        factor: the multiplier of the budget fields (an array for a grid of levels).
        target: the budget to spend (one per level).
        delivered: what the ledger proves at the calibrated hyperparameters (one per level).
        ledger: the ledger at the calibrated hyperparameters, ``requested`` set to ``target``
            (one per level).
    """

    hparams: Any
    factor: Any
    target: Any
    delivered: Any
    ledger: Any

    def __repr__(self) -> str:
        """One readable line: the estimator, the factor, the target and what is delivered
        (each per level for a grid), and the calibrated hyperparameters; the whole ledger is
        ``.ledger``."""
        grid = np.ndim(self.factor) != 0
        ledgers = self.ledger if grid else [self.ledger]
        names = {getattr(led, "estimator", None) for led in ledgers} - {None}
        head = ", ".join(sorted(names)) or "estimator"
        if grid:
            head += f", {len(ledgers)} levels"

        def budgets(value: Any) -> str:
            return f"[{', '.join(map(str, value))}]" if grid else str(value)

        factor = np.asarray(self.factor, np.float64)
        return (f"Calibration({head}: factor {_numbers(factor)}, target "
                f"{budgets(self.target)}, delivered {budgets(self.delivered)}; hparams "
                f"{_show_hparams(self.hparams)})")


def _numbers(arr: Any) -> str:
    """``1.92`` or ``[1.92, 1.5]``: 6 significant digits."""
    arr = np.asarray(arr)
    if arr.ndim == 0:
        return f"{float(arr):.6g}"
    return "[" + ", ".join(f"{float(v):.6g}" for v in arr.ravel()) + "]"


def _show_hparams(hparams: Any) -> str:
    """``MeanHyperparams(epsilon=0.576, delta=0.0025, clip=2)``."""
    fields = getattr(hparams, "_fields", None)
    if fields is None:
        return repr(hparams)
    inner = ", ".join(f"{f}={_numbers(np.asarray(v, np.float64))}"
                      for f, v in zip(fields, hparams))
    return f"{type(hparams).__name__}({inner})"


def budget_fields(hparams: Any) -> tuple[str, ...]:
    """The fields a calibration scales: every field named ``epsilon*`` or ``rho*``."""
    names = getattr(hparams, "_fields", None)
    if names is None:
        raise TypeError("hparams must be a NamedTuple whose budget fields are named epsilon* or "
                        f"rho*; got {type(hparams).__name__}")
    return tuple(f for f in names if f.startswith(("epsilon", "rho")))


def delivered_fraction(ledger: Ledger, target: Budget | None = None) -> float:
    """``delivered / requested``: the delivered epsilon over the requested one (for an
    (epsilon, delta) request) or the delivered rho over the requested rho (a zCDP request).
    ``target`` defaults to ``ledger.requested``; ``nan`` where there is nothing to compare
    (no request, or a request of epsilon = inf)."""
    req = ledger.requested if target is None else target
    if req is None:
        return math.nan
    if isinstance(req, ZCDP):
        got = ledger.guarantee.rho if isinstance(ledger.guarantee, ZCDP) else math.inf
        return got / req.rho if math.isfinite(req.rho) and req.rho > 0 else math.nan
    if not math.isfinite(req.epsilon) or req.epsilon == 0:
        return math.nan
    return ledger.approx_dp.epsilon / req.epsilon


def _spent(ledger: Ledger, target: Budget) -> float:
    """The delivered epsilon (or rho) over the target's; inf where the delta exceeds it (beyond
    the float32 rounding of per-release deltas that :func:`~dpjax.accounting.check_delivers`
    allows)."""
    if isinstance(target, ApproxDP):
        if ledger.approx_dp.delta > target.delta * (1 + DELIVERY_RTOL):
            return math.inf
        return ledger.approx_dp.epsilon / target.epsilon
    got = ledger.guarantee
    return (got.rho if isinstance(got, ZCDP) else math.inf) / target.rho


def _level(hparams: Any, fields: Sequence[str], i: int | None) -> Any:
    """Level ``i`` of a grid of hyperparameters (every field broadcast to the budget's shape)."""
    if i is None:
        return hparams
    shape = np.shape(getattr(hparams, fields[0]))
    return type(hparams)(*(np.broadcast_to(np.asarray(v), shape)[i] for v in hparams))


def _scaled(hparams: Any, fields: Sequence[str], c: float) -> Any:
    """``hparams`` with every budget field multiplied by ``c`` (float64 product, then the
    field's own dtype)."""
    out = {}
    for f in fields:
        v = np.asarray(getattr(hparams, f))
        dt = v.dtype if np.issubdtype(v.dtype, np.floating) else np.float32
        out[f] = np.asarray(v.astype(np.float64) * c, dt)
    return hparams._replace(**out)


def _solve_one(estimator, hparams, fields, target, n, zeros, state, rtol):
    fn = _events_fn(estimator)

    def ledger_at(c: float) -> Ledger:
        hp = _scaled(hparams, fields, c)
        ev = fn(zeros, state, jax.tree_util.tree_map(jnp.asarray, hp))
        ev = jax.tree_util.tree_map(np.asarray, ev)
        return estimator.ledger(n, hp, ev)

    led1 = ledger_at(1.0)
    if target is None:
        target = led1.requested
        if target is None:
            raise CalibrationError(f"{estimator.name}: its ledger states no request; give target")
    if isinstance(target, ApproxDP) and not target.is_private or \
            isinstance(target, ZCDP) and not target.is_private:
        return hparams, 1.0, target, led1  # epsilon = inf: nothing to spend
    f1 = _spent(led1, target)
    # bracket: spent(lo) <= 1 < spent(hi), by factors of 4
    lo, hi, f_lo = (1.0, None, f1) if f1 <= 1 else (None, 1.0, None)
    c = 1.0
    for _ in range(40):
        if lo is not None and hi is not None:
            break
        c = c * 4.0 if hi is None else c / 4.0
        f = _spent(ledger_at(c), target)
        if f <= 1:
            lo, f_lo = c, f
        else:
            hi = c
    if lo is None or hi is None:
        raise CalibrationError(f"{estimator.name}: no budget factor in [4^-40, 4^40] brackets "
                               f"the target {target}")
    for _ in range(80):  # bisection in log c, until within a hundredth of the tolerance
        if f_lo >= 1 - rtol / 100 or hi / lo - 1 < 1e-12:
            break
        mid = math.sqrt(lo * hi)
        f = _spent(ledger_at(mid), target)
        if f <= 1:
            lo, f_lo = mid, f
        else:
            hi = mid
    if f_lo < 1 - rtol:
        raise CalibrationError(
            f"{estimator.name}: the ledger jumps past the target: the largest budget factor "
            f"that delivers {target} delivers only {f_lo:.4g} of it (tolerance {rtol:g})")
    led = ledger_at(lo)
    return _scaled(hparams, fields, lo), lo, target, dataclasses.replace(led, requested=target)


def calibrate(
    estimator: Estimator,
    hparams: Any,
    target: Budget | Sequence[Budget] | None = None,
    *,
    data: Any,
    params0: Any,
    n: int | None = None,
    fields: Sequence[str] | None = None,
    rtol: float = RTOL,
) -> Calibration:
    """Scale the budget fields of ``hparams`` so that ``estimator``'s ledger delivers ``target``.

    Args:
        estimator: any :class:`~dpjax.base.Estimator` with a ledger function.
        hparams: its hyperparameters (a NamedTuple): one privacy level (scalar fields), or a
            grid with a leading level axis (solved once per level, on the host).
        target: the budget to spend: an :class:`~dpjax.accounting.ApproxDP` (its delta must be
            the one the ledger reports, e.g. ``hparams.delta``) or a
            :class:`~dpjax.accounting.ZCDP`; one per level for a grid. Default: what the
            estimator's ledger states as requested at ``hparams`` (the budget fields as given).
        data: the data set, or anything with its shapes and dtypes
            (``jax.ShapeDtypeStruct`` leaves are fine): only shapes are read; the events are
            computed on all-zero records (the noise scales depend on public values only).
        params0: the data-independent starting value (``estimator.init(params0)``).
        n: the number of records (default: the rows of the first data leaf).
        fields: the budget fields to scale (default :func:`budget_fields`: every field named
            ``epsilon*`` or ``rho*``; all by one factor, which keeps the estimator's split).
        rtol: the delivered budget lies in ``[(1 - rtol) target, target]``.

    Returns:
        :class:`Calibration`. Raises :class:`CalibrationError` when no factor delivers the
        target within ``rtol`` (a ledger that jumps, a delta the estimator cannot meet).
    """
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must lie in (0, 1); got {rtol}")
    fields = tuple(budget_fields(hparams) if fields is None else fields)
    if not fields:
        raise ValueError("hparams has no budget field to scale (fields named epsilon* or rho*)")
    if n is None:
        n = int(jax.tree_util.tree_leaves(data)[0].shape[0])
    zeros = _zeros_like(data)
    state = estimator.init(params0)
    shape = np.shape(getattr(hparams, fields[0]))
    if shape == ():
        if isinstance(target, (list, tuple)):
            raise ValueError("one target per level: hparams hold a single level")
        hp, c, tg, led = _solve_one(estimator, hparams, fields, target, n, zeros, state, rtol)
        return Calibration(hp, c, tg, led.approx_dp if isinstance(tg, ApproxDP)
                           else led.guarantee, led)
    if len(shape) != 1:
        raise ValueError(f"a grid of levels has one leading axis; got budget shape {shape}")
    targets = list(target) if isinstance(target, (list, tuple)) else [target] * shape[0]
    if len(targets) != shape[0]:
        raise ValueError(f"{len(targets)} targets for {shape[0]} levels")
    out = [_solve_one(estimator, _level(hparams, fields, i), fields, targets[i], n, zeros,
                      state, rtol) for i in range(shape[0])]
    hps = [o[0] for o in out]
    stacked = type(hparams)(*(np.stack([np.asarray(x) for x in col]) for col in zip(*hps)))
    return Calibration(stacked, np.array([o[1] for o in out]), [o[2] for o in out],
                       [o[3].approx_dp if isinstance(o[2], ApproxDP) else o[3].guarantee
                        for o in out], [o[3] for o in out])


def calibrated_fit(estimator: Estimator, key: Any, data: Any, params0: Any,
                   calibration: Calibration, **kwargs: Any) -> FitResult:
    """:func:`dpjax.fit` at a (single-level) :class:`Calibration`'s hyperparameters, with the
    ledger's ``requested`` set to the calibration's target (and checked against it).

    One calibration for both noise paths: the target is the request of the fit
    (``dpjax.fit(..., requested=calibration.target)``), so with ``secure=True`` the secure
    plan solves its noise factor for the target too, not for the budget the scaled
    hyperparameters would read as (which is ``factor`` times it)."""
    if np.ndim(calibration.factor) != 0:
        raise ValueError("calibrated_fit takes a single-level calibration")
    if "requested" in kwargs:
        raise TypeError("calibrated_fit takes its request from the calibration (its target); "
                        "do not pass requested")
    return fit(estimator, key, data, params0, calibration.hparams,
               requested=calibration.target, **kwargs)
