"""The Figure-1 study of the DP-EM paper in plain NumPy, written the way researchers usually write
it: Python loops over repetitions, privacy levels, iterations and peeling rounds; the data set of
a repetition generated once (float64, NumPy's default) and shared by its privacy levels.

It implements the same estimator as ``dpjax.algorithms.dp_em.hd_dp_em`` with the Gaussian
mixture (exact posterior, sample splitting into ``N0 = ceil(log n)`` batches, coordinate
truncation at ``T = sqrt(log n)``, NoisyHT with Laplace scale ``lambda * 2 sqrt(3 s log(1/delta))
/ eps``, ``lambda = 2 eta T / n0``), so the two can be timed against each other and their errors
compared in distribution.
"""

from __future__ import annotations

import math

import numpy as np


def run_study(reps: int, n: int, d: int, s: int, eps_list, sigma: float = 0.5,
              eta: float = 0.5, seed: int = 0) -> np.ndarray:
    """Errors ``||beta_t - beta*||`` with shape ``(reps, len(eps_list), N0 + 1)``."""
    rng = np.random.default_rng(seed)
    N0 = math.ceil(math.log(n))
    n0 = n // N0
    T = math.sqrt(math.log(n))
    delta = 1.0 / (2 * n)
    beta_star = np.zeros(d)
    beta_star[:s] = 1.0 / math.sqrt(s)
    errors = np.zeros((reps, len(eps_list), N0 + 1))
    for r in range(reps):
        z = rng.choice([-1.0, 1.0], size=n)
        y = z[:, None] * beta_star + sigma * rng.standard_normal((n, d))
        u = np.zeros(d)
        u[:s] = rng.standard_normal(s)
        beta0 = beta_star + u / np.linalg.norm(u) / 8
        for j, eps in enumerate(eps_list):
            beta = beta0.copy()
            errors[r, j, 0] = np.linalg.norm(beta - beta_star)
            for t in range(N0):
                yb = y[t * n0:(t + 1) * n0]
                w = np.tanh(yb @ beta / sigma**2)  # 2 w - 1, exact posterior
                grad = w @ np.clip(yb, -T, T) / n0 - beta
                v = beta + eta * grad
                lam = 2 * eta * T / n0
                b = lam * 2 * math.sqrt(3 * s * math.log(1 / delta)) / eps
                absv = np.abs(v)
                selected: list[int] = []
                for _ in range(s):
                    scores = absv + rng.laplace(0.0, b, d)
                    scores[selected] = -np.inf
                    selected.append(int(np.argmax(scores)))
                beta = np.zeros(d)
                beta[selected] = v[selected] + rng.laplace(0.0, b, s)
                errors[r, j, t + 1] = np.linalg.norm(beta - beta_star)
    return errors
