"""``python -m dpjax.audit --table [--trials M] [--seed S] [NAME ...]``: the canary audit
table of docs/audits.md, one row per case as it is audited."""

from __future__ import annotations

import jax

from dpjax.audit.cases import registry_cases
from dpjax.audit.crafted import crafted_case, crafted_names
from dpjax.audit.releases import mechanism_cases, wang_xu_radius_cases
from dpjax.audit.table import canary_table, format_table

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m dpjax.audit --table [--trials M] [NAME ...]``: print the audit table."""
    import argparse
    import time
    import warnings

    parser = argparse.ArgumentParser(prog="python -m dpjax.audit")
    parser.add_argument("--table", action="store_true", help="print the canary audit table")
    parser.add_argument("--trials", type=int, default=2000, help="trials per data set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("names", nargs="*", help="registry names (default: every private one)")
    args = parser.parse_args(argv)
    if not args.table:
        parser.print_help()
        return 0
    start = time.time()
    with warnings.catch_warnings():  # the classic-Gaussian range warning at epsilon > 1
        warnings.simplefilter("ignore")
        rows = []
        from dpjax import registry

        # (name, build, trials): each case built and audited in turn (rows print as they
        # come); the Wang & Xu release is audited at delta = 1e-5, which needs 10^5 trials
        todo = [(c.name, lambda c=c: c, args.trials) for c in mechanism_cases()]
        todo += [(name, lambda name=name: crafted_case(name), args.trials)
                 for name in crafted_names()]
        todo += [(c.name, lambda c=c: c, max(args.trials, 100_000))
                 for c in wang_xu_radius_cases()]
        todo += [(e.name, lambda name=e.name: registry_cases([name])[0], args.trials)
                 for e in registry.entries() if e.private]
        if args.names:  # the named cases, in the order named
            todo = sorted((t for t in todo if t[0] in args.names),
                          key=lambda t: args.names.index(t[0]))
        for _name, build, trials in todo:
            rows += canary_table([build()], jax.random.key(args.seed), trials)
            print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(format_table(rows))
    print(f"\n{len(rows)} estimators, {time.time() - start:.0f} s")
    return 0
