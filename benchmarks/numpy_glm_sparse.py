"""Sparse logistic regression by noisy IHT with peeling (spec 003 Algorithm 5) in plain NumPy.

The study of issue 15 (``glm_fig2`` restricted to one panel's setting): ``x`` on the 256-point
grid of ``U(-1, 1)`` (as dpjax's ``design="grid8"``), ``beta`` uniform on the unit sphere of its
first ``s*`` coordinates, ``y ~ Bernoulli(sigmoid(x^T beta))``, ``beta0 = 0``, ``eta = 1``,
``R = 1``, ``B = 8``, ``s = 2 s*``, ``delta = 1/(2n)``, each of ``T`` steps at
``(eps/T, delta/T)``: Laplace scale ``2 eta B T sqrt(3 s log(T/delta)) / (n eps)``.

The design is kept in float32 (float64 would need 8 bytes x n x d: 3.2 GB per repetition at
n = 40,000, d = 10,000); the gradients are BLAS matrix-vector products.
"""

from __future__ import annotations

import math

import numpy as np

try:
    from benchmarks._numpy_common import eps_labels, parser, peel, timed, write_outputs
except ImportError:  # run as a script: python benchmarks/numpy_glm_sparse.py
    from _numpy_common import eps_labels, parser, peel, timed, write_outputs


def simulate(rng: np.random.Generator, n: int, beta: np.ndarray):
    codes = rng.integers(0, 256, size=(n, beta.shape[0]), dtype=np.uint8)
    x = (codes.astype(np.float32) + 0.5) / 128.0 - 1.0
    p = 1.0 / (1.0 + np.exp(-(x @ beta)))
    y = (rng.random(n) < p).astype(np.float32)
    return x, y


def estimate(rng, x, y, eps, s, T, eta=1.0, R=1.0, b_const=4.0):
    """The final iterate of ``T`` noisy IHT steps (float32, as the design)."""
    n, d = x.shape
    delta = 1.0 / (2 * n)
    B = 2 * b_const * (R + 1.0)  # B = 4 (R + c1) sigma_x, c1 = 1 (logistic), sigma_x = 1
    b = 0.0 if math.isinf(eps) else (
        2 * eta * B * T * math.sqrt(3 * s * math.log(T / delta)) / (n * eps))
    x = np.clip(x, -1.0, 1.0)  # the design bound (D1'): the identity for this design
    yc = np.clip(y, -R, R)
    beta = np.zeros(d, np.float32)
    for _ in range(T):
        resid = 1.0 / (1.0 + np.exp(-(x @ beta))) - yc
        grad = (resid @ x) / n
        beta = peel(rng, beta - eta * grad, s, b).astype(np.float32)
    return beta


def sphere_beta(rng, d, s):
    beta = np.zeros(d, np.float32)
    u = rng.standard_normal(s)
    beta[:s] = u / np.linalg.norm(u)
    return beta


def run_study(reps, n=40000, d=10000, s_true=10, T=10, eps_list=(0.2, 0.5, 0.8, math.inf),
              seed=0):
    """Final errors, shape ``(reps, len(eps_list))``."""
    rng = np.random.default_rng(seed)
    beta_star = sphere_beta(rng, d, s_true)
    out = np.zeros((reps, len(eps_list)))
    for r in range(reps):
        x, y = simulate(rng, n, beta_star)
        for j, eps in enumerate(eps_list):
            out[r, j] = np.linalg.norm(estimate(rng, x, y, eps, 2 * s_true, T) - beta_star)
        del x
    return out


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=40000)
    p.add_argument("--d", type=int, default=10000)
    p.add_argument("--s", type=int, default=10)
    p.add_argument("--T", type=int, default=10)
    a = p.parse_args(argv)
    eps = (0.2, 0.5, 0.8, math.inf)
    err, secs = timed(run_study, a.reps, a.n, a.d, a.s, a.T, eps, a.seed)
    write_outputs(a.out, err, eps_labels(eps), f"Alg 5 (numpy), n={a.n}, d={a.d}, s*={a.s}")
    print(f"study: {secs:.3f} s")


if __name__ == "__main__":
    main()
