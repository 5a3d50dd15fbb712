"""The canary audit table: each case audited honest and with each planted bug
(:func:`canary_table`), as markdown (:func:`format_table`; docs/audits.md)."""

from __future__ import annotations

import zlib
from typing import NamedTuple

import jax

from dpjax.audit.canary import CanaryCase, audit_case
from dpjax.audit.engine import AuditResult
from dpjax.audit.plants import PLANTS

__all__ = ["CanaryRow", "canary_table", "format_table"]


class CanaryRow(NamedTuple):
    """One row of the audit table: the claim and the three audited lower bounds."""

    name: str
    claim_epsilon: float
    delta: float
    honest: AuditResult
    noise_x02: AuditResult | None  # None where the plant reaches no release
    sensitivity_x05: AuditResult | None
    num_trials: int
    bounds: tuple = (None, None, None)  # CanaryCase.epsilon_bound at factors 1, 0.2, 0.5
    claim_kind: str = "ledger"  # CanaryCase.claim_kind
    # the canary's reach: separation / gdp_mu for a trajectory case with a GDP claim (the mu
    # the pair attains along the noise-free path over the mu the events claim; a halved
    # sensitivity is a violation on this pair only if reach > 1/2), else None
    reach: float | None = None


def canary_table(
    cases: list[CanaryCase], key: jax.Array, num_trials: int | dict[str, int] = 4000
) -> list[CanaryRow]:
    """Audit every case honest, with noise x 0.2 and with the sensitivity halved."""
    rows = []
    for c in cases:
        m = num_trials[c.name] if isinstance(num_trials, dict) else num_trials
        k = jax.random.fold_in(key, zlib.crc32(c.name.encode()))
        res = [audit_case(c, jax.random.fold_in(k, i), plant=p, num_trials=m)
               if p is None or p in c.plants else None
               for i, p in enumerate((None,) + PLANTS)]
        bounds = tuple(c.epsilon_bound(f) for f in (1.0, 0.2, 0.5))
        reach = (c.separation / c.gdp_mu if c.attack == "trajectory" and c.gdp_mu
                 and c.claim_kind == "gdp-curve" else None)
        rows.append(CanaryRow(c.name, c.claim_epsilon, c.delta, *res, m, bounds, c.claim_kind,
                              reach))
    return rows


def format_table(rows: list[CanaryRow]) -> str:
    """The markdown table of :func:`canary_table` (lower bounds at 95% confidence)."""
    def cell(res: AuditResult | None, claim: float, bound: float | None) -> str:
        if res is None:
            return "n/a (the plant reaches no release)"
        out = f"{res.epsilon_lower:.2f}" + (" **caught**" if res.violates(claim) else "")
        return out + ("" if bound is None else f" (≤ {bound:.3g})")

    lines = ["| estimator | claimed (epsilon, delta), from | audited LB, honest | noise x 0.2 | "
             "sensitivity x 0.5 | trials per data set | reach |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r.bounds
        lines.append(f"| `{r.name}` | ({r.claim_epsilon:.3g}, {r.delta:.3g}) {r.claim_kind} | "
                     f"{cell(r.honest, r.claim_epsilon, b[0])} | "
                     f"{cell(r.noise_x02, r.claim_epsilon, b[1])} | "
                     f"{cell(r.sensitivity_x05, r.claim_epsilon, b[2])} | {r.num_trials} | "
                     + ("" if r.reach is None else f"{r.reach:.2f}") + " |")
    return "\n".join(lines)
