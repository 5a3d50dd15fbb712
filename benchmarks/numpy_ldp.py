"""LDP-IHT, Algorithm 2 of spec 001 (Zhu et al. 2024; isotropic covariates), in plain NumPy.

The same estimator as ``dpjax.algorithms.ldp_sparse.ldp_iht(T, k', theta_norm=1)`` (the
rectified randomizer radius; ``batching="disjoint"``, the ``chunks_per_round`` streaming of
the experiment being the same algorithm): ``T`` disjoint groups of ``m = floor(n / T)``
consecutive users (the at most ``T - 1`` users left over are dropped); in round ``t`` each
user of group ``t`` shrinks its record coordinate-wise, ``x_bar = clip(x, -tau1, tau1)``,
``y_bar = clip(y, -tau2, tau2)``, computes ``g_i = x_bar_i (<theta, x_bar_i> - y_bar_i)`` and
sends the l2-ball randomizer's report ``R_eps^r(g_i)`` (spec 001 §2.4, as
``dpjax.local_randomizers.l2_ball_randomizer`` draws it): project ``g`` onto the ball of radius
``r``; ``b = +1`` with probability ``1/2 + ||g|| / (2r)``, else ``-1``; ``v = b g / ||g||``
(``e_1`` for ``g = 0``); ``s = 1`` with probability ``e^eps / (e^eps + 1)``; ``u`` uniform on
the sphere, reflected onto the hemisphere ``<u, v> > 0`` if ``s = 1`` (``<= 0`` if ``s = 0``);
report ``B u`` with ``B = r coth(eps/2) sqrt(pi) Gamma((d+1)/2) / Gamma(d/2)`` (the unbiased
scale). The radius is ``r = sqrt(d) tau1 (theta_norm sqrt(k') tau1 + tau2)`` (the exact bound on
``||g_i||``). The server averages the group's reports (``g_bar``, over the public ``m``) and
steps ``theta <- Proj_{theta_norm}(Trunc(theta - eta g_bar, k'))`` (keep the ``k'``
largest-magnitude entries, then project onto the l2 ball). At ``eps = inf`` the randomizer is the
identity (on the projected gradient): plain IHT on shrunk records with disjoint groups, a
deterministic function of the data.

The study is the one Algorithm-2 setting of ``ldp_iht``'s ``n`` panel (spec 001 §4.2, the
experiment's defaults): ``x ~ N(0, I_d)``, ``theta*`` ``k``-sparse with a random support, random
signs and entries ``1/sqrt(k)`` (drawn once, fixed over repetitions), ``y = <theta*, x> +
N(0, 0.5^2)``, ``k' = min(2k, d)``, ``tau1 = tau2 = 0.5 sqrt(log n)``, ``eta = 1``,
``theta_norm = 1``, ``T = 3`` rounds from ``theta = 0``, eps in {0.5, 1, inf}; ``n = 2e6`` by
default: 1,999,998 users in three groups, the users the experiment's streamed plan keeps too
(three chunks of 222,222 per round). Written the way researchers write it: Python loops over
repetitions, privacy levels and rounds, one ``(m, d)`` matrix per round (every user's gradient
and report at once); each repetition's ``n`` users drawn once (NumPy's default ``Generator``,
float64) and shared by its levels. It imports neither dpjax nor jax.
"""

from __future__ import annotations

import math

import numpy as np

try:
    from benchmarks._numpy_common import eps_labels, parser, timed, write_outputs
except ImportError:  # run as a script
    from _numpy_common import eps_labels, parser, timed, write_outputs

EPS = (0.5, 1.0, math.inf)


def radius(d, k_prime, tau1, tau2, theta_norm=1.0):
    """The rectified randomizer radius ``sqrt(d) tau1 (R sqrt(k') tau1 + tau2)``."""
    return math.sqrt(d) * tau1 * (theta_norm * math.sqrt(min(k_prime, d)) * tau1 + tau2)


def randomizer_scale(r, eps, d):
    """``B = r coth(eps/2) / E|u_1|`` (0 at ``eps = inf``: the identity)."""
    if math.isinf(eps):
        return 0.0
    inv_mean_abs = math.sqrt(math.pi) * math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2))
    return r * inv_mean_abs / math.tanh(eps / 2)


def randomize(rng, g, r, eps):
    """Every row of ``g`` (m, d) through the l2-ball randomizer ``R_eps^r``."""
    norm = np.linalg.norm(g, axis=1)
    shrink = np.minimum(1.0, r / np.maximum(norm, np.finfo(g.dtype).tiny))
    g = g * shrink[:, None]
    if math.isinf(eps):
        return g
    norm = norm * shrink
    m, d = g.shape
    b = np.where(rng.random(m) < 0.5 + norm / (2 * r), 1.0, -1.0)
    v = g / np.where(norm > 0, norm, 1.0)[:, None]
    v[norm == 0, 0] = 1.0
    s = rng.random(m) < 1.0 / (1.0 + math.exp(-eps))
    u = rng.standard_normal((m, d))
    u /= np.linalg.norm(u, axis=1)[:, None]
    side = b * np.sum(u * v, axis=1)
    wrong = np.where(s, side <= 0, side > 0)
    u[wrong] *= -1.0
    return randomizer_scale(r, eps, d) * u


def trunc(v, s):
    """Keep the ``s`` largest-magnitude entries of ``v``."""
    if s >= v.shape[0]:
        return v
    out = np.zeros_like(v)
    idx = np.argpartition(-np.abs(v), s - 1)[:s]
    out[idx] = v[idx]
    return out


def project(v, R):
    norm = np.linalg.norm(v)
    return v * min(1.0, R / norm) if norm > 0 else v


def estimate(rng, x, y, eps, tau, k_prime, T=3, eta=1.0, theta_norm=1.0):
    """Algorithm 2 on the users ``(x (n, d), y (n,))`` from ``theta = 0``: the final iterate."""
    n, d = x.shape
    m = n // T
    r = radius(d, k_prime, tau, tau, theta_norm)
    theta = np.zeros(d)
    for t in range(T):
        xb = np.clip(x[t * m:(t + 1) * m], -tau, tau)
        yb = np.clip(y[t * m:(t + 1) * m], -tau, tau)
        grads = xb * (xb @ theta - yb)[:, None]  # the group's gradients (m, d)
        g = randomize(rng, grads, r, eps).mean(axis=0)
        theta = project(trunc(theta - eta * g, k_prime), theta_norm)
    return theta


def run_study(reps, n=2_000_000, d=10, k=2, eps_list=EPS, T=3, c_k=2, c_tau=0.5,
              noise_sd=0.5, seed=0):
    """Final errors ``||theta^T - theta*||``, shape ``(reps, len(eps_list))``."""
    rng = np.random.default_rng(seed)
    theta_star = np.zeros(d)
    theta_star[rng.choice(d, k, replace=False)] = rng.choice([-1.0, 1.0], k) / math.sqrt(k)
    k_prime = min(c_k * k, d)
    n_used = (n // T) * T
    tau = c_tau * math.sqrt(math.log(n_used))
    out = np.zeros((reps, len(eps_list)))
    for r in range(reps):
        x = rng.standard_normal((n_used, d))
        y = x @ theta_star + noise_sd * rng.standard_normal(n_used)
        for j, eps in enumerate(eps_list):
            theta = estimate(rng, x, y, eps, tau, k_prime, T)
            out[r, j] = np.linalg.norm(theta - theta_star)
    return out


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--d", type=int, default=10)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--T", type=int, default=3)
    a = p.parse_args(argv)
    err, secs = timed(run_study, a.reps, a.n, a.d, a.k, EPS, a.T, seed=a.seed)
    write_outputs(a.out, err, eps_labels(EPS), f"LDP-IHT Alg 2 (numpy), n={a.n}, d={a.d}, "
                  f"k={a.k}, T={a.T}")
    print(f"study: {secs:.3f} s")


if __name__ == "__main__":
    main()
