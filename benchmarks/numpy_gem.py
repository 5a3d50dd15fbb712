"""DP gradient EM, Algorithm 2 of spec 002 (Gaussian mixture, Figures 2 and 6), in plain NumPy.

The same estimator as ``dpjax.algorithms.dp_gem.dp_gem(GaussianMixture(1.0), T)``: full data
every iteration; per-sample gradients ``u_i = (2 w_i - 1) y_i - beta`` with the exact weight
``2 w_i - 1 = tanh(<y_i, beta> / sigma^2)``; each coordinate's robust mean
``(1/n) sum_i psi_{s, beta_s}(u_ij)`` (Holland's smoothed Catoni score in the paper's closed
form, eq. 12 with App D, vectorised over the ``(n, d)`` matrix of one iteration, float64, erfc
from SciPy) plus Gaussian noise ``N(0, sigma_Z^2)`` with the zCDP calibration
``sigma_Z = (4 sqrt2 / 3) (s / n) / sqrt(2 rho)``, ``rho = eps~^2 / (d T)``,
``eps~ = sqrt(log(1/delta) + eps) - sqrt(log(1/delta))``; ``beta_s = sqrt(log(d / zeta))``,
``s = sqrt(n tau eps~) / (2 beta_s)`` (the sigma-consistent rule of spec 002 A1), step
``beta <- beta + eta g``. At ``eps = inf``: no noise and ``s = inf`` (psi the identity), i.e.
non-private gradient EM, unless ``s`` is given.

The study is one setting of ``gem_fig6`` (spec 002 §4.3): ``beta* = (snr / sqrt d) 1_d``,
``sigma = 1``, ``delta = 1/n``, ``tau = ||beta*||_inf^2 + sigma^2``, ``eta = 1``,
``zeta = 0.05``, ``beta0 ~ N(0, (||beta*||^2 / d) I_d)``, ``T = 22``, eps in {0.2, 0.5, 1, inf},
written the way researchers write it: Python loops over repetitions, privacy levels and
iterations; each repetition's data and start drawn once (NumPy's default ``Generator``) and
shared by its levels. It imports neither dpjax nor jax.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erfc

try:
    from benchmarks._numpy_common import eps_labels, parser, timed, write_outputs
except ImportError:  # run as a script
    from _numpy_common import eps_labels, parser, timed, write_outputs

EPS = (0.2, 0.5, 1.0, math.inf)
SQRT2 = math.sqrt(2.0)
PHI_MAX = 2.0 * SQRT2 / 3.0


def psi(x, s, beta):
    """Holland's smoothed score ``psi_{s, beta}(x) = s E phi((1 + eta) x / s)``,
    ``eta ~ N(0, 1/beta)``, in the paper's closed form (eq. 12 + App D), elementwise."""
    if math.isinf(s):
        return x
    a = x / s
    zero = a == 0
    a = np.where(zero, 1.0, a)  # the closed form divides by |a|; psi(0) = 0
    b = np.abs(a) / math.sqrt(beta)
    v_m, v_p = (SQRT2 - a) / b, (SQRT2 + a) / b
    f_m, f_p = 0.5 * erfc(v_m / SQRT2), 0.5 * erfc(v_p / SQRT2)
    e_m, e_p = np.exp(-0.5 * v_m**2), np.exp(-0.5 * v_p**2)
    c = 1.0 / math.sqrt(2.0 * math.pi)
    corr = (PHI_MAX * (f_m - f_p)
            - (a - a**3 / 6.0) * (f_m + f_p)
            + b * c * (1.0 - a**2 / 2.0) * (e_p - e_m)
            + 0.5 * a * b**2 * (f_p + f_m + c * (v_p * e_p + v_m * e_m))
            + b**3 * c / 6.0 * ((2.0 + v_m**2) * e_m - (2.0 + v_p**2) * e_p))
    g = a * (1.0 - b**2 / 2.0) - a**3 / 6.0 + corr
    return np.where(zero, 0.0, np.clip(s * g, -PHI_MAX * s, PHI_MAX * s))


def calibration(n, d, eps, delta, tau, T, zeta=0.05, s=None):
    """``(s, beta_s, sigma_Z)`` of Algorithm 2 (``s`` by the sigma-consistent rule unless
    given)."""
    beta_s = math.sqrt(math.log(d / zeta))
    if math.isinf(eps):
        return (math.inf if s is None else s), beta_s, 0.0
    log_d = math.log(1.0 / delta)
    eps_t = math.sqrt(log_d + eps) - math.sqrt(log_d)
    if s is None:
        s = math.sqrt(n * tau * eps_t) / (2.0 * beta_s)
    rho = eps_t**2 / (d * T)
    return s, beta_s, (4.0 * SQRT2 / 3.0) * s / n / math.sqrt(2.0 * rho)


def estimate(rng, y, beta0, eps, tau, T=22, sigma=1.0, eta=1.0, zeta=0.05, s=None):
    """Algorithm 2 on the data ``y`` (n, d) from ``beta0``: the final iterate."""
    n, d = y.shape
    s, beta_s, sd = calibration(n, d, eps, 1.0 / n, tau, T, zeta, s)
    beta = beta0.copy()
    for _ in range(T):
        w = np.tanh(y @ beta / sigma**2)
        u = w[:, None] * y - beta  # per-sample gradients (n, d)
        g = psi(u, s, beta_s).mean(axis=0)
        if sd > 0:
            g = g + sd * rng.standard_normal(d)
        beta = beta + eta * g
    return beta


def simulate(rng, n, beta_star, sigma=1.0):
    z = rng.choice([-1.0, 1.0], size=n)
    return z[:, None] * beta_star + sigma * rng.standard_normal((n, beta_star.shape[0]))


def run_study(reps, n=100000, d=10, eps_list=EPS, T=22, snr=3.0, seed=0):
    """Sign-aligned final errors ``min ||beta^T -+ beta*||``, shape ``(reps, len(eps_list))``."""
    rng = np.random.default_rng(seed)
    beta_star = np.full(d, snr / math.sqrt(d))
    tau = float(np.max(beta_star**2)) + 1.0
    out = np.zeros((reps, len(eps_list)))
    for r in range(reps):
        y = simulate(rng, n, beta_star)
        beta0 = np.linalg.norm(beta_star) / math.sqrt(d) * rng.standard_normal(d)
        for j, eps in enumerate(eps_list):
            b = estimate(rng, y, beta0, eps, tau, T)
            out[r, j] = min(np.linalg.norm(b - beta_star), np.linalg.norm(b + beta_star))
    return out


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=100000)
    p.add_argument("--d", type=int, default=10)
    p.add_argument("--T", type=int, default=22)
    a = p.parse_args(argv)
    err, secs = timed(run_study, a.reps, a.n, a.d, EPS, a.T, seed=a.seed)
    write_outputs(a.out, err, eps_labels(EPS), f"DP gradient EM Alg 2 (numpy), GMM, n={a.n}, "
                  f"d={a.d}, T={a.T}")
    print(f"study: {secs:.3f} s")


if __name__ == "__main__":
    main()
