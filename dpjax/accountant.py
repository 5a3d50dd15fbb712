r"""One privacy budget across many fits on the same data set: :class:`Accountant`.

A practitioner fits several models on one data set (a model per outcome, a hyperparameter
search, a first look and a final fit) and needs one total guarantee. Pass one
:class:`Accountant` to every fit (``accountant=`` of every private ``fit_*``, of
:func:`dpjax.fit` and of :func:`dpjax.calibrated_fit`)::

    acct = dpjax.Accountant(epsilon=1.0, delta=1e-6)
    fit_dp_glm(key, data, model, epsilon=0.5, delta=2.5e-7, num_iterations=5, accountant=acct)
    ...
    acct.spent()       # the composed guarantee of every fit so far, within (1.0, 1e-6)
    acct.remaining()   # a budget the next fit can be requested at and still be admitted

Before a fit computes anything its ledger is predicted from public values only (the noise
scales and sensitivities of every dpjax release depend on ``n``, the hyperparameters and the
clipping levels, never on the records: the events of a run on an all-zero data set of the same
shapes, as :func:`dpjax.calibrate` reads them), composed with what was spent, and a fit that
would exceed the total is refused with :class:`~dpjax.accounting.PrivacyBudgetError` naming
what is left: nothing is computed on the data and nothing is released. After the fit its own
ledger is composed again (a fit whose ledger would exceed is refused then, its result
discarded) and recorded.

Two rules (``composition``):

* ``"pld"`` (default): the fits' privacy loss distributions (each fit's releases,
  :meth:`~dpjax.accounting.Release.pld_components`) composed by dp_accounting; the total
  guarantee is the composed PLD's pessimistic epsilon at the total delta. This is the
  (optimal-up-to-discretisation) composition of mechanisms whose privacy parameters are fixed
  in advance: the data each fit sees and its outputs may feed later fits, but which fits are
  run, and at which budgets, must not depend on earlier outputs.
* ``"filter"``: a privacy filter, valid when each fit -- its estimator and its budget -- is
  chosen after seeing the outputs of the earlier ones (fully adaptive composition). It admits
  a fit with guarantee ``(eps_i, delta_i)`` while ``sum eps_i <= epsilon`` and
  ``sum delta_i <= delta``: the basic-composition filter, whose validity under fully adaptive
  choice of the budgets is Theorem 3.6 of Rogers, Roth, Ullman & Vadhan (2016), "Privacy
  odometers and filters: pay-as-you-go composition", restated for (epsilon, delta)-DP in
  Whitehouse, Ramdas, Rogers & Wu (2023), "Fully-adaptive composition in differential
  privacy" (ICML), Section 3. It is looser than ``"pld"`` (in the example above it admits two
  fits, ``"pld"`` four).

Without dp_accounting (the ``[pld]`` extra) ``"pld"`` is unavailable and the accountant
uses ``"filter"``, saying so in :attr:`Accountant.note`.

A fit's ledger that :meth:`~dpjax.accounting.Release.pld_components` cannot describe exactly
(composition in parallel over disjoint batches with batches that differ, local DP per user, a
discrete Gaussian release) enters the PLD composition by its delivered (epsilon, delta), whose
PLD dominates that of any (epsilon, delta)-DP mechanism (Kairouz, Oh & Viswanath 2015).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from dpjax import _pld
from dpjax.accounting import DELIVERY_RTOL, ApproxDP, Ledger, PrivacyBudgetError

__all__ = ["Accountant", "ledger_components"]

COMPOSITIONS = ("pld", "filter")


def ledger_components(ledger: Ledger) -> tuple[tuple, ...]:
    """A fit's privacy loss distribution as normalised :mod:`dpjax._pld` components."""
    if not ledger.is_private:
        return (("none",),)
    rel = ledger.releases
    try:
        if ledger.composition in ("pld", "basic", "zcdp"):
            return _pld.normalise(c for r in rel for c in r.pld_components())
        # disjoint batches (or users) with identical noise: one batch's releases, exactly
        rows = {tuple(r.noise[i] for r in rel) for i in range(min(r.count for r in rel))}
        if ledger.composition == "parallel" and len({r.count for r in rel}) == 1 and \
                len(rows) == 1:
            return _pld.normalise(c for r in rel for c in
                                  dataclasses.replace(r, noise=r.noise[:1], count=1)
                                  .pld_components())
    except ValueError:  # a release with no exact PLD (a discrete Gaussian)
        pass
    a = ledger.approx_dp
    return (("approx", a.epsilon, a.delta, 1),)


@dataclasses.dataclass(frozen=True)
class _Fit:
    """One admitted fit: its name, its own guarantee, its PLD and its printed ledger."""

    name: str
    guarantee: ApproxDP
    components: tuple[tuple, ...]
    ledger: str


class Accountant:
    """One (epsilon, delta) budget spent by many fits on one data set (module docstring).

    Args:
        epsilon: the total epsilon, in (0, inf).
        delta: the total delta, in [0, 1).
        composition: ``"pld"`` (fits fixed in advance; default) or ``"filter"`` (each fit
            chosen after seeing earlier outputs; the basic-composition privacy filter of
            Rogers, Roth, Ullman & Vadhan 2016, Thm 3.6, see Whitehouse, Ramdas, Rogers & Wu
            2023, "Fully-adaptive composition in differential privacy").
    """

    def __init__(self, epsilon: float, delta: float, composition: str = "pld") -> None:
        eps, dl = float(epsilon), float(delta)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"epsilon must lie in (0, inf); got {epsilon}")
        if not (0 <= dl < 1):
            raise ValueError(f"delta must lie in [0, 1); got {delta}")
        if composition not in COMPOSITIONS:
            raise ValueError(f"composition must be one of {COMPOSITIONS}; got {composition!r}")
        self.total = ApproxDP(eps, dl)
        self.requested_composition = composition
        self.note = ""
        if composition == "pld" and not _pld.available():
            composition = "filter"
            self.note = ("dp_accounting (the [pld] extra) is not installed: fits compose by the "
                         "basic-composition filter")
        self.composition = composition
        self._fits: list[_Fit] = []

    # ---------------------------------------------------------------------------------------
    @property
    def fits(self) -> tuple[_Fit, ...]:
        """The admitted fits, in order."""
        return tuple(self._fits)

    def _compose(self, fits: list[tuple[ApproxDP, tuple]]) -> ApproxDP:
        if not fits:
            return ApproxDP(0.0, 0.0)
        if self.composition == "filter":
            return ApproxDP(sum(g.epsilon for g, _ in fits),
                            min(1.0, sum(g.delta for g, _ in fits)))
        comps = _pld.normalise(c for _, cs in fits for c in cs)
        return ApproxDP(_pld.epsilon_for_delta(comps, self.total.delta), self.total.delta)

    def _within(self, g: ApproxDP) -> bool:
        # the slack of check_delivers: a fit's noise scale is rounded to float32
        tol = 1 + DELIVERY_RTOL
        return g.epsilon <= self.total.epsilon * tol and g.delta <= self.total.delta * tol

    def spent(self) -> ApproxDP:
        """The composed guarantee of every admitted fit (``(0, 0)`` before the first)."""
        return self._compose([(f.guarantee, f.components) for f in self._fits])

    def remaining(self) -> ApproxDP:
        """A budget ``(r, d)`` at which a next fit is admitted: any fit whose ledger delivers
        ``(r, d)``-DP composes within the total.

        ``"filter"``: ``(epsilon - sum eps_i, delta - sum delta_i)``, exactly what is left.
        ``"pld"``: the largest ``r`` with ``delta_{P o RR(r)}(epsilon) <= delta / 2`` for the
        spent PLD ``P`` and binary randomized response ``RR(r)`` (the dominating pair of an
        ``(r, 0)``-DP mechanism), and ``d = delta - delta_{P o RR(r)}(epsilon)``: an
        ``(r, d)``-DP mechanism's PLD is dominated by ``RR(r)`` with an extra mass ``d`` at
        infinity, so the composition delivers at most ``d + delta_{P o RR(r)}(epsilon)`` =
        ``delta`` at ``epsilon``. A fit with a Gaussian release (whose PLD is tighter than the
        generic one) is usually admitted above ``r``: the admission itself composes the fit's
        own PLD.
        """
        tot = self.total
        if self.composition == "filter":
            s = self.spent()
            return ApproxDP(max(0.0, tot.epsilon - s.epsilon), max(0.0, tot.delta - s.delta))
        base = [c for f in self._fits for c in f.components]

        def extra_delta(r: float) -> float:
            comps = _pld.normalise([*base, ("pure", r, 1)])
            return _pld.delta_for_epsilon(comps, tot.epsilon)

        budget = tot.delta / 2
        if extra_delta(0.0) > budget:
            return ApproxDP(0.0, 0.0)
        lo, hi = 0.0, tot.epsilon
        if extra_delta(hi) <= budget:
            lo = hi
        else:
            for _ in range(40):
                mid = 0.5 * (lo + hi)
                if extra_delta(mid) <= budget:
                    lo = mid
                else:
                    hi = mid
        return ApproxDP(lo, max(0.0, tot.delta - extra_delta(lo)))

    # ---------------------------------------------------------------------------------------
    def check(self, ledger: Ledger, name: str | None = None) -> None:
        """Raise :class:`~dpjax.accounting.PrivacyBudgetError` if admitting ``ledger`` would
        take the composed guarantee beyond the total (naming what is left)."""
        g, comps = ledger.approx_dp, ledger_components(ledger)
        after = self._compose([*((f.guarantee, f.components) for f in self._fits), (g, comps)])
        if self._within(after):
            return
        name = name or ledger.estimator
        raise PrivacyBudgetError(
            f"{name}: refused before anything is computed or released: with the fits so far "
            f"it would compose to {after} ({self.composition} composition), beyond the total "
            f"{self.total}; spent {self.spent()} in {len(self._fits)} fit(s), remaining "
            f"{self.remaining()}")

    def spend(self, ledger: Ledger, name: str | None = None) -> None:
        """Admit a fit's ledger (after :meth:`check`): record its guarantee and its PLD."""
        self.check(ledger, name)
        self._fits.append(_Fit(name or ledger.estimator, ledger.approx_dp,
                               ledger_components(ledger), str(ledger)))

    # ---------------------------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"privacy accountant: total {self.total} ({self.composition} composition)",
                 f"  spent: {self.spent()} in {len(self._fits)} fit(s)",
                 f"  remaining: {self.remaining()}"]
        if self.note:
            lines.append(f"  note: {self.note}")
        for i, f in enumerate(self._fits, 1):
            lines.append(f"  fit {i}: {f.name}, {f.guarantee}")
            lines.extend("    " + line for line in f.ledger.splitlines())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Accountant(epsilon={self.total.epsilon!r}, delta={self.total.delta!r}, "
                f"composition={self.requested_composition!r}; {len(self._fits)} fit(s), "
                f"spent {self.spent()})")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able record (:meth:`from_dict` restores it): the total, the rule, each fit's
        name, guarantee, PLD components and printed ledger."""
        return {
            "type": "dpjax.Accountant",
            "epsilon": self.total.epsilon,
            "delta": self.total.delta,
            "composition": self.requested_composition,
            "fits": [{"name": f.name, "epsilon": f.guarantee.epsilon,
                      "delta": f.guarantee.delta, "pld": _pld.to_json(f.components),
                      "ledger": f.ledger} for f in self._fits],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Accountant:
        """Restore an accountant from :meth:`to_dict` (e.g. after a restart)."""
        if d.get("type") != "dpjax.Accountant":
            raise ValueError("not a dpjax.Accountant record (its 'type' field)")
        acct = cls(d["epsilon"], d["delta"], d.get("composition", "pld"))
        for f in d["fits"]:
            eps = float(f["epsilon"]) if f["epsilon"] != "inf" else math.inf
            acct._fits.append(_Fit(f["name"], ApproxDP(eps, f["delta"]),
                                   _pld.from_json(f["pld"]), f["ledger"]))
        return acct
