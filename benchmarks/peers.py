"""dpjax.sklearn against diffprivlib on issue 46's table: accuracy at equal epsilon, and the
first fit's compile time with the persistent compilation cache warm.

Rows: logistic regression at (d, n) = (5, 1e3), (5, 1e5), (20, 1e5); linear regression at
d = 1, 5, 20 with n = 1e5. Data (per seed): ``x ~ U(-1, 1)^d``; logistic:
``beta = 2/sqrt(d)`` per coordinate, ``y ~ Bernoulli(sigmoid(x^T beta))``; linear:
``beta = 1/sqrt(d)`` per coordinate, ``y = x^T beta + N(0, 1)`` truncated to ``[-3, 3]``. No
intercept in the model, and every fit is without one (``fit_intercept=False``).

* dpjax: ``dpjax.sklearn.LogisticRegression(epsilon=1, data_norm=sqrt(d))`` and
  ``LinearRegression(epsilon=1, bounds_X=(-1, 1), bounds_y=(-3, 3))``, their defaults
  otherwise (``method="auto"``; delta ``min(1e-6, 1/(2n))``); ``random_state=seed``.
* diffprivlib 0.6.6: the same classes with the same epsilon and bounds (pure epsilon-DP), its
  defaults otherwise (its logistic regression is regularised, ``C = 1``).
* error: the l2 distance of the coefficients to the non-private fit on the same data
  (scikit-learn, unpenalised).

Compile time: a fresh process with JAX's persistent compilation cache switched on
(``dpjax.cli.enable_compile_cache``) times its first fit and a second one of the same shapes;
the difference is the compile (and tracing) time. The process runs twice on one cache
directory and the second, warm, run is reported (the first, cold, is shown too).

diffprivlib is an optional benchmark dependency: 0.6.6 needs scikit-learn < 1.8, so run this
in a separate virtual environment, from the repository root::

    python3 -m venv peers-venv
    peers-venv/bin/pip install diffprivlib==0.6.6 "scikit-learn<1.8" -e .
    peers-venv/bin/python benchmarks/peers.py [--seeds 10] [--rows all] [--out FILE.json]

A few minutes on 2 CPU cores. The table is printed in Markdown (benchmarks/README.md and the
docs page "From scikit-learn" quote it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

ROWS = {
    "logistic-d5-n1e3": ("logistic", 5, 1000),
    "logistic-d5-n1e5": ("logistic", 5, 100000),
    "logistic-d20-n1e5": ("logistic", 20, 100000),
    "linear-d1-n1e5": ("linear", 1, 100000),
    "linear-d5-n1e5": ("linear", 5, 100000),
    "linear-d20-n1e5": ("linear", 20, 100000),
}
EPSILON = 1.0


def data(task: str, d: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The issue's data, drawn by NumPy (``default_rng(seed)``)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (n, d))
    if task == "logistic":
        beta = np.full(d, 2.0 / math.sqrt(d))
        y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-x @ beta))).astype(int)
    else:
        beta = np.full(d, 1.0 / math.sqrt(d))
        y = np.clip(x @ beta + rng.standard_normal(n), -3.0, 3.0)
    return x, y


def dpjax_estimator(task: str, d: int, seed: int):
    from dpjax.sklearn import LinearRegression, LogisticRegression

    if task == "logistic":
        return LogisticRegression(epsilon=EPSILON, data_norm=math.sqrt(d), fit_intercept=False,
                                  random_state=seed)
    return LinearRegression(epsilon=EPSILON, bounds_X=(-1.0, 1.0), bounds_y=(-3.0, 3.0),
                            fit_intercept=False, random_state=seed)


def diffprivlib_estimator(task: str, d: int, seed: int):
    from diffprivlib import models

    if task == "logistic":
        return models.LogisticRegression(epsilon=EPSILON, data_norm=math.sqrt(d),
                                         fit_intercept=False, random_state=seed)
    return models.LinearRegression(epsilon=EPSILON, bounds_X=(-1.0, 1.0),
                                   bounds_y=(-3.0, 3.0), fit_intercept=False,
                                   random_state=seed)


def reference(task: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from sklearn import linear_model

    if task == "logistic":
        fit = linear_model.LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-10,
                                              max_iter=1000).fit(x, y)
    else:
        fit = linear_model.LinearRegression(fit_intercept=False).fit(x, y)
    return np.ravel(fit.coef_)


def accuracy(row: str, seeds: int) -> dict:
    """Both errors over ``seeds`` seeds (mean, standard error), and the method dpjax chose."""
    task, d, n = ROWS[row]
    errs: dict[str, list[float]] = {"dpjax": [], "diffprivlib": []}
    methods, deltas = set(), set()
    for seed in range(seeds):
        x, y = data(task, d, n, seed)
        ref = reference(task, x, y)
        ours = dpjax_estimator(task, d, seed).fit(x, y)
        methods.add(ours.method_)
        deltas.add(ours.ledger_.approx_dp.delta)
        errs["dpjax"].append(float(np.linalg.norm(np.ravel(ours.coef_) - ref)))
        with warnings.catch_warnings():  # diffprivlib warns about its own defaults
            warnings.simplefilter("ignore")
            peer = diffprivlib_estimator(task, d, seed).fit(x, y)
        errs["diffprivlib"].append(float(np.linalg.norm(np.ravel(peer.coef_) - ref)))
    out = {"row": row, "task": task, "d": d, "n": n, "seeds": seeds,
           "dpjax_method": sorted(methods), "dpjax_delta": max(deltas)}
    for name, e in errs.items():
        e = np.asarray(e)
        out[f"{name}_mean"] = float(e.mean())
        out[f"{name}_se"] = float(e.std(ddof=1) / math.sqrt(len(e))) if len(e) > 1 else 0.0
    return out


def _compile_probe(row: str, cache_dir: str) -> dict:
    """In this (fresh) process: the first fit's seconds minus a second fit's, cache on."""
    from dpjax.cli import enable_compile_cache

    enable_compile_cache(cache_dir)
    import jax.numpy as jnp

    import dpjax.sklearn  # noqa: F401  (imports and the backend's start are not compiles)

    jnp.zeros(1).block_until_ready()
    task, d, n = ROWS[row]
    x, y = data(task, d, n, 0)
    x2, y2 = data(task, d, n, 1)
    t0 = time.perf_counter()
    dpjax_estimator(task, d, 0).fit(x, y)
    t1 = time.perf_counter()
    dpjax_estimator(task, d, 1).fit(x2, y2)
    t2 = time.perf_counter()
    return {"first_s": t1 - t0, "second_s": t2 - t1,
            "compile_s": max(0.0, (t1 - t0) - (t2 - t1))}


def compile_time(row: str, cache_dir: str) -> dict:
    """The compile seconds of ``row``'s first fit: cold (empty cache), then warm."""
    out = {}
    for which in ("cold", "warm"):
        proc = subprocess.run([sys.executable, __file__, "--probe", row, "--cache", cache_dir],
                              capture_output=True, text=True, check=True)
        out[which] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def table(results: list[dict]) -> str:
    lines = ["| task | dpjax.sklearn (method chosen) | diffprivlib | compile, cache warm (cold) |",
             "|---|---|---|---|"]
    for r in results:
        name = f"{r['task']}, d {r['d']}, n {r['n']:.0e}".replace("e+0", "e")
        c = r.get("compile")
        comp = (f"{c['warm']['compile_s']:.2f} s ({c['cold']['compile_s']:.2f} s)" if c
                else "-")
        lines.append(f"| {name} | {r['dpjax_mean']:.4g} ({r['dpjax_se']:.2g}) "
                     f"[{', '.join(r['dpjax_method'])}] | {r['diffprivlib_mean']:.4g} "
                     f"({r['diffprivlib_se']:.2g}) | {comp} |")
    return "\n".join(lines)


def machine() -> dict:
    import diffprivlib
    import jax
    import sklearn

    return {"platform": platform.platform(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "jax": jax.__version__, "backend": jax.default_backend(),
            "scikit-learn": sklearn.__version__, "diffprivlib": diffprivlib.__version__}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rows", default="all", help=f"comma-separated, of {sorted(ROWS)}")
    ap.add_argument("--no-compile", action="store_true", help="skip the compile-time probes")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(_compile_probe(args.probe, args.cache)))
        return 0
    rows = list(ROWS) if args.rows == "all" else args.rows.split(",")
    results = []
    with tempfile.TemporaryDirectory(prefix="dpjax-peers-cache-") as cache:
        for row in rows:
            t = time.perf_counter()
            r = accuracy(row, args.seeds)
            if not args.no_compile:
                r["compile"] = compile_time(row, cache)
            r["seconds"] = time.perf_counter() - t
            results.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    print(table(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine(), "epsilon": EPSILON, "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
