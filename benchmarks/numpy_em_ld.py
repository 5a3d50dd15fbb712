"""Low-dimensional DP-EM for the Gaussian mixture (spec 000 Alg 4, Figure 2) in plain NumPy.

The same estimators as ``dpjax.algorithms.dp_em.ld_dp_em`` (sample splitting into
``N0 = ceil(log n)`` batches, truncation at ``T = sqrt(log n)``, classic Gaussian noise with
``sigma = sqrt(d) lambda sqrt(2 log(1.25/delta)) / eps``, ``lambda = 2 eta T / n0``) and
full-data gradient EM (Balakrishnan et al.; all n records in each of N0 iterations, no noise),
for one setting of ``em_fig2``: n = 10,000, d = 10, eps in {0.5, 1, inf}, 50 repetitions.
"""

from __future__ import annotations

import math

import numpy as np

try:
    from benchmarks._numpy_common import eps_labels, parser, timed, write_outputs
    from benchmarks.numpy_em_hd import init_near_truth, simulate
except ImportError:  # run as a script
    from _numpy_common import eps_labels, parser, timed, write_outputs
    from numpy_em_hd import init_near_truth, simulate

EPS = (0.5, 1.0, math.inf)


def estimate(rng, y, beta0, eps, sigma=0.5, eta=0.5):
    """Algorithm 4: the iterates ``beta_0 .. beta_N0``, shape ``(N0 + 1, d)``."""
    n, d = y.shape
    N0 = math.ceil(math.log(n))
    n0 = n // N0
    T = math.sqrt(math.log(n))
    delta = 1.0 / (2 * n)
    lam = 2 * eta * T / n0
    sd = 0.0 if math.isinf(eps) else (
        math.sqrt(d) * lam * math.sqrt(2 * math.log(1.25 / delta)) / eps)
    beta = beta0.copy()
    out = [beta]
    for t in range(N0):
        yb = y[t * n0:(t + 1) * n0]
        w = np.tanh(yb @ beta / sigma**2)
        beta = beta + eta * (w @ np.clip(yb, -T, T) / n0 - beta)
        if sd > 0:
            beta = beta + sd * rng.standard_normal(d)
        out.append(beta)
    return np.array(out)


def gradient_em(y, beta0, sigma=0.5, eta=0.5):
    """Full-data gradient EM, ``N0`` iterations: the final iterate."""
    n = y.shape[0]
    beta = beta0.copy()
    for _ in range(math.ceil(math.log(n))):
        w = np.tanh(y @ beta / sigma**2)
        beta = beta + eta * (w @ y / n - beta)
    return beta


def run_study(reps, n=10000, d=10, eps_list=EPS, seed=0):
    """Final errors, shape ``(reps, len(eps_list) + 1)`` (the last column: gradient EM)."""
    rng = np.random.default_rng(seed)
    beta_star = np.full(d, 1.0 / math.sqrt(d))
    out = np.zeros((reps, len(eps_list) + 1))
    for r in range(reps):
        y = simulate(rng, n, beta_star)
        beta0 = init_near_truth(rng, beta_star)
        for j, eps in enumerate(eps_list):
            out[r, j] = np.linalg.norm(estimate(rng, y, beta0, eps)[-1] - beta_star)
        out[r, -1] = np.linalg.norm(gradient_em(y, beta0) - beta_star)
    return out


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--d", type=int, default=10)
    a = p.parse_args(argv)
    err, secs = timed(run_study, a.reps, a.n, a.d, EPS, a.seed)
    write_outputs(a.out, err, [*eps_labels(EPS), "gradient EM"],
                  f"LD DP-EM (numpy), n={a.n}, d={a.d}")
    print(f"study: {secs:.3f} s")


if __name__ == "__main__":
    main()
