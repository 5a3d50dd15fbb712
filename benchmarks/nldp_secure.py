"""Time ``fit_nldp`` on its two noise paths: the default floating-point path and
``secure=True`` (every user's two reports rounded to a grid plus exact discrete Gaussian noise).

    python benchmarks/nldp_secure.py [--n 10000 100000] [--d 5] [--reps 5]

For each ``n``: one warm-up fit per path (compilation, the secure path's first-use checks),
then ``--reps`` fits per path, alternating, on the same data (x ~ N(0, I_d), eps = 8,
``r = sqrt(d)``, ``tau1 = tau2 = 3``); prints the median wall time of each path and their
ratio. Alternating the paths keeps the ratio fair on a machine whose load changes.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _time(fit, key) -> float:
    start = time.perf_counter()
    np.asarray(fit(key).estimate)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> list[dict]:
    from dpjax.algorithms import ldp_sparse as L

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--d", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    rows = []
    for n in args.n:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(n, args.d)).astype(np.float32)
        y = (x[:, 0] - 0.5 * x[:, 1] + 0.5 * rng.normal(size=n)).astype(np.float32)
        kw = dict(epsilon=8.0, r=float(np.sqrt(args.d)), tau1=3.0, tau2=3.0, lam=0.01)

        def fit(key, secure, x=x, y=y, kw=kw):
            return L.fit_nldp(key, (x, y), secure=secure, **kw)

        first = {s: _time(lambda k, s=s: fit(k, s), 0) for s in (False, True)}
        times: dict[bool, list[float]] = {False: [], True: []}
        for rep in range(args.reps):
            for secure in (False, True):
                times[secure].append(_time(lambda k, s=secure: fit(k, s), 1 + rep))
        med = {s: statistics.median(v) for s, v in times.items()}
        row = {"n": n, "d": args.d, "float_s": med[False], "secure_s": med[True],
               "ratio": med[True] / med[False], "float_first_s": first[False],
               "secure_first_s": first[True]}
        rows.append(row)
        print(f"n = {n:>7}, d = {args.d}: float {med[False]:.4f} s, secure {med[True]:.3f} s "
              f"(median of {args.reps}), ratio {row['ratio']:.1f}; first fits "
              f"{first[False]:.1f} s and {first[True]:.1f} s", flush=True)
    return rows


if __name__ == "__main__":
    main()
