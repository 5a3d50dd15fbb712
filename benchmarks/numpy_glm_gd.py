"""Logistic regression by noisy gradient descent (spec 003 Algorithm 1, Figure 1) in plain NumPy.

The same estimator as ``dpjax.algorithms.dp_glm.noisy_gd``: ``x`` clipped to the l2 ball of
radius ``sqrt(d)``, ``y`` to ``[-R, R]``, ``beta0 = 0``, ``eta = 1``, ``B = 4 (R + 1) = 8``,
declared l2 sensitivity ``eta B sqrt(d) / n``; two calibrations of each level: ``paper``
(classic Gaussian at ``(eps/T, delta/T)`` with ``log(2/delta)``) and ``gaussian`` (the exact
Gaussian-DP curve, ``T`` steps composed). The study of ``glm_fig1`` at one setting:
n = 40,000, d = 20, T = 50, eps in {0.2, 0.5, 0.8} (paper: also inf), 50 repetitions.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

try:
    from benchmarks._numpy_common import parser, timed, write_outputs
except ImportError:  # run as a script
    from _numpy_common import parser, timed, write_outputs

EPS = (0.2, 0.5, 0.8)


def simulate(rng, n, beta):
    x = rng.uniform(-1.0, 1.0, (n, beta.shape[0]))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(x @ beta)))).astype(float)
    return x, y


def gdp_mu(eps, delta):
    """The Gaussian-DP ``mu`` meeting ``(eps, delta)`` exactly (Balle & Wang 2018)."""
    def excess(log_mu):
        mu = math.exp(log_mu)
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
    return math.exp(brentq(excess, -20, 10))


def noise_sd(eps, n, d, T, calibration, eta=1.0, R=1.0):
    if math.isinf(eps):
        return 0.0
    delta = 1.0 / (2 * n)
    sens = eta * 4 * (R + 1.0) * math.sqrt(d) / n
    if calibration == "paper":
        return sens * math.sqrt(2 * math.log(2 / (delta / T))) / (eps / T)
    return sens * math.sqrt(T) / gdp_mu(eps, delta)


def estimate(rng, x, y, sd, T, eta=1.0, R=1.0):
    """The final iterate of ``T`` noisy gradient steps."""
    n, d = x.shape
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x * np.minimum(1.0, math.sqrt(d) / np.maximum(norms, 1e-300))
    yc = np.clip(y, -R, R)
    beta = np.zeros(d)
    for _ in range(T):
        grad = (1.0 / (1.0 + np.exp(-(x @ beta))) - yc) @ x / n
        beta = beta - eta * grad
        if sd > 0:
            beta = beta + sd * rng.standard_normal(d)
    return beta


def run_study(reps, n=40000, d=20, T=50, eps_list=EPS, seed=0):
    """Final errors, shape ``(reps, 2 len(eps_list) + 1)``: paper levels and inf, then
    gaussian levels."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(d)
    beta_star = u / np.linalg.norm(u)
    levels = [(e, "paper") for e in (*eps_list, math.inf)] + [(e, "gaussian") for e in eps_list]
    out = np.zeros((reps, len(levels)))
    for r in range(reps):
        x, y = simulate(rng, n, beta_star)
        for j, (eps, cal) in enumerate(levels):
            beta = estimate(rng, x, y, noise_sd(eps, n, d, T, cal), T)
            out[r, j] = np.linalg.norm(beta - beta_star)
    return out, [f"{c} eps={e:g}" for e, c in levels]


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=40000)
    p.add_argument("--d", type=int, default=20)
    p.add_argument("--T", type=int, default=50)
    a = p.parse_args(argv)
    (err, labels), secs = timed(run_study, a.reps, a.n, a.d, a.T, EPS, a.seed)
    write_outputs(a.out, err, labels, f"Alg 1 (numpy), n={a.n}, d={a.d}, T={a.T}")
    print(f"study: {secs:.3f} s")


if __name__ == "__main__":
    main()
