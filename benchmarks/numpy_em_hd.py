"""High-dimensional DP-EM for the Gaussian mixture (spec 000 Alg 3, Figure 1) in plain NumPy.

The same estimator as ``dpjax.algorithms.dp_em.hd_dp_em`` with the Gaussian mixture: exact
posterior, sample splitting into ``N0 = ceil(log n)`` batches of ``n0 = floor(n / N0)``,
coordinate truncation at ``T = sqrt(log n)``, NoisyHT with Laplace scale
``lambda 2 sqrt(3 s log(1/delta)) / eps``, ``lambda = 2 eta T / n0``; the study of issue 15:
n = 4000, d = 1000, s = 10, eps in {0.3, 0.5, 0.8, inf}, 50 repetitions.
"""

from __future__ import annotations

import math

import numpy as np

try:
    from benchmarks._numpy_common import eps_labels, parser, peel, timed, write_outputs
except ImportError:  # run as a script
    from _numpy_common import eps_labels, parser, peel, timed, write_outputs

EPS = (0.3, 0.5, 0.8, math.inf)


def simulate(rng, n, beta_star, sigma=0.5):
    z = rng.choice([-1.0, 1.0], size=n)
    return z[:, None] * beta_star + sigma * rng.standard_normal((n, beta_star.shape[0]))


def init_near_truth(rng, beta_star, radius=0.125):
    u = rng.standard_normal(beta_star.shape[0]) * (beta_star != 0)
    return beta_star + u / np.linalg.norm(u) * np.linalg.norm(beta_star) * radius


def estimate(rng, y, beta0, eps, s, sigma=0.5, eta=0.5):
    """The iterates ``beta_0 .. beta_N0``, shape ``(N0 + 1, d)``."""
    n = y.shape[0]
    N0 = math.ceil(math.log(n))
    n0 = n // N0
    T = math.sqrt(math.log(n))
    delta = 1.0 / (2 * n)
    lam = 2 * eta * T / n0
    b = 0.0 if math.isinf(eps) else lam * 2 * math.sqrt(3 * s * math.log(1 / delta)) / eps
    beta = beta0.copy()
    out = [beta]
    for t in range(N0):
        yb = y[t * n0:(t + 1) * n0]
        w = np.tanh(yb @ beta / sigma**2)  # 2 w - 1, exact posterior
        v = beta + eta * (w @ np.clip(yb, -T, T) / n0 - beta)
        beta = peel(rng, v, s, b)
        out.append(beta)
    return np.array(out)


def run_study(reps, n=4000, d=1000, s=10, eps_list=EPS, seed=0):
    """Final errors ``||beta_N0 - beta*||``, shape ``(reps, len(eps_list))``."""
    rng = np.random.default_rng(seed)
    beta_star = np.zeros(d)
    beta_star[:s] = 1.0 / math.sqrt(s)
    out = np.zeros((reps, len(eps_list)))
    for r in range(reps):
        y = simulate(rng, n, beta_star)
        beta0 = init_near_truth(rng, beta_star)
        for j, eps in enumerate(eps_list):
            out[r, j] = np.linalg.norm(estimate(rng, y, beta0, eps, s)[-1] - beta_star)
    return out


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=4000)
    p.add_argument("--d", type=int, default=1000)
    p.add_argument("--s", type=int, default=10)
    a = p.parse_args(argv)
    err, secs = timed(run_study, a.reps, a.n, a.d, a.s, EPS, a.seed)
    write_outputs(a.out, err, eps_labels(EPS), f"HD DP-EM (numpy), n={a.n}, d={a.d}, s={a.s}")
    print(f"study: {secs:.3f} s")


if __name__ == "__main__":
    main()
