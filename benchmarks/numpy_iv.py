"""DP two-stage gradient descent for IV regression (spec 004 Algorithm 1, Figure 3) in plain
NumPy.

The same estimator as ``dpjax.algorithms.dp_iv.dp_2s_gd`` (paper calibration): per-sample
gradients clipped in Frobenius / l2 norm (``gamma = c0 (sqrt q + sqrt(tau + log nT))^2``),
Gaussian noise with ``lambda_k = (2 gamma_k / n) sqrt(T / rho_k)``, simultaneous updates from
``Theta0 = 0``, ``beta0 = 0``, the paper's step sizes from the true Theta; plus the closed-form
2SLS of each data set (dpjax's ``iv_fig3`` records it as a diagnostic). The study: ``iv_fig3``
at p = q = r = 5, n = 8,000, T = 20, (rho1, rho2) in {(1, 9), (5, 5), (9, 1)}, c0 = 1,
100 repetitions.
"""

from __future__ import annotations

import math

import numpy as np

try:
    from benchmarks._numpy_common import parser, timed, write_outputs
except ImportError:  # run as a script
    from _numpy_common import parser, timed, write_outputs

SPLITS = ((1.0, 9.0), (5.0, 5.0), (9.0, 1.0))


def draw_parameters(rng, p, q, r):
    return (rng.standard_normal(p), 5.0 * np.eye(q, p) + rng.standard_normal((q, p)),
            rng.standard_normal((r, p)), rng.standard_normal(r))


def simulate(rng, n, params):
    beta, theta, phi, varphi = params
    q, r = theta.shape[0], phi.shape[0]
    z = rng.standard_normal((n, q))
    u = rng.standard_normal((n, r))
    x = z @ theta + u @ phi + rng.standard_normal((n, theta.shape[1]))
    y = x @ beta + u @ varphi + rng.standard_normal(n)
    return z, x, y


def step_sizes(theta, n, tau=5.0):
    q = theta.shape[0]
    dl = (math.sqrt(q) + math.sqrt(tau)) / math.sqrt(n)
    sv = np.linalg.svd(theta, compute_uv=False)
    g_low, g_up = (1 - dl) ** 2 * sv[-1] ** 2, (1 + dl) ** 2 * sv[0] ** 2
    return 1.0 / (1 + dl) ** 2, 2.0 / (2 * g_up + g_low)


def clip_threshold(n, q, T, tau=5.0, c0=1.0):
    return c0 * (math.sqrt(q) + math.sqrt(tau + math.log(n * T))) ** 2


def estimate(rng, z, x, y, rho1, rho2, gamma1, gamma2, eta, alpha, T):
    """DP-2S-GD: the final ``(Theta, beta)``."""
    n, q = z.shape
    p = x.shape[1]
    theta, beta = np.zeros((q, p)), np.zeros(p)
    sd1 = 0.0 if math.isinf(rho1) else (2 * gamma1 / n) * math.sqrt(T / rho1)
    sd2 = 0.0 if math.isinf(rho2) else (2 * gamma2 / n) * math.sqrt(T / rho2)
    znorm = np.linalg.norm(z, axis=1)
    for _ in range(T):
        w = z @ theta
        resid = w - x
        f1 = np.minimum(1.0, gamma1 / np.maximum(znorm * np.linalg.norm(resid, axis=1), 1e-300))
        g1 = z.T @ (f1[:, None] * resid) / n
        s = w @ beta - y
        f2 = np.minimum(1.0, gamma2 / np.maximum(np.linalg.norm(w, axis=1) * np.abs(s), 1e-300))
        g2 = w.T @ (f2 * s) / n
        if sd1 > 0:
            g1 = g1 + sd1 * rng.standard_normal((q, p))
        if sd2 > 0:
            g2 = g2 + sd2 * rng.standard_normal(p)
        theta, beta = theta - eta * g1, beta - alpha * g2
    return theta, beta


def two_sls(z, x, y):
    theta_hat = np.linalg.lstsq(z, x, rcond=None)[0]
    return np.linalg.lstsq(z @ theta_hat, y, rcond=None)[0]


def run_study(reps, n=8000, dim=5, T=20, splits=SPLITS, seed=0):
    """Final errors, shape ``(reps, len(splits) + 1)`` (the last column: 2SLS)."""
    rng = np.random.default_rng(seed)
    params = draw_parameters(rng, dim, dim, dim)
    eta, alpha = step_sizes(params[1], n)
    gamma = clip_threshold(n, dim, T)
    out = np.zeros((reps, len(splits) + 1))
    for r in range(reps):
        z, x, y = simulate(rng, n, params)
        for j, (r1, r2) in enumerate(splits):
            beta = estimate(rng, z, x, y, r1, r2, gamma, gamma, eta, alpha, T)[1]
            out[r, j] = np.linalg.norm(beta - params[0])
        out[r, -1] = np.linalg.norm(two_sls(z, x, y) - params[0])
    return out


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=8000)
    p.add_argument("--dim", type=int, default=5)
    p.add_argument("--T", type=int, default=20)
    a = p.parse_args(argv)
    err, secs = timed(run_study, a.reps, a.n, a.dim, a.T, SPLITS, a.seed)
    labels = [f"rho=({r1:g},{r2:g})" for r1, r2 in SPLITS] + ["2SLS"]
    write_outputs(a.out, err, labels, f"DP-2S-GD (numpy), n={a.n}, p=q=r={a.dim}, T={a.T}")
    print(f"study: {secs:.3f} s")


if __name__ == "__main__":
    main()
