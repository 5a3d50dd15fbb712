"""A short end-to-end example: simulate a sparse Gaussian mixture, fit high-dimensional DP-EM,
print the error and the privacy ledger.

Run with ``python -m dpjax.demo`` (or ``dpjax demo``).
"""

from __future__ import annotations

import argparse
import math
import sys

import jax
import jax.numpy as jnp
import numpy as np

from dpjax._validate import ConfigError, OneLineParser, UsageError, fail
from dpjax.algorithms import dp_em
from dpjax.models import GaussianMixture, sparse_unit_beta


def _check(args: argparse.Namespace) -> None:
    """The options' ranges, checked before anything is simulated (raises ConfigError)."""
    if args.n < 2:  # n = 1: the truncation level ~ sqrt(log n) is 0
        raise ConfigError(f"--n must be >= 2; got {args.n}")
    if args.d < 1:
        raise ConfigError(f"--d must be >= 1; got {args.d}")
    if not 1 <= args.s <= args.d:
        raise ConfigError(f"--s must be in [1, --d = {args.d}]; got {args.s}")
    if math.isinf(args.epsilon) and args.epsilon > 0:
        raise ConfigError("--epsilon must be a finite number > 0; got inf (the demo always "
                          "runs the non-private limit, epsilon = inf, after the private fit)")
    if not args.epsilon > 0 or math.isnan(args.epsilon):
        raise ConfigError(f"--epsilon must be a finite number > 0; got {args.epsilon:g}")
    if not 0 <= args.seed < 2**63:
        raise ConfigError(f"--seed must be an integer in [0, 2^63); got {args.seed}")


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit status (2, with one line on stderr, on a bad option)."""
    p = OneLineParser(prog="dpjax demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="sample size, >= 2 (default 100000)")
    p.add_argument("--d", type=int, default=1000, help="dimension (default 1000)")
    p.add_argument("--s", type=int, default=10, help="sparsity s*, in [1, d] (default 10)")
    p.add_argument("--epsilon", type=float, default=0.5,
                   help="the private fit's epsilon, finite > 0 (default 0.5); the non-private "
                   "limit is always run after it")
    p.add_argument("--seed", type=int, default=0, help="seed, >= 0 (default 0)")
    try:
        args = p.parse_args(argv)
        _check(args)
    except (UsageError, ConfigError) as exc:
        return fail(exc)

    model = GaussianMixture(sigma=0.5)
    beta_star = sparse_unit_beta(args.d, args.s)
    data_key, noise_key = jax.random.split(jax.random.key(args.seed))
    data = model.simulate(data_key, args.n, jnp.asarray(beta_star))
    # A data-independent start near beta* (spec 000 §7 A5): a perturbation of norm 1/8.
    direction = np.zeros(args.d, np.float32)
    direction[: args.s] = np.random.default_rng(args.seed).normal(size=args.s)
    beta0 = beta_star + direction / np.linalg.norm(direction) / 8

    print(f"Gaussian mixture: n = {args.n}, d = {args.d}, s* = {args.s}, sigma = 0.5")
    for i, eps in enumerate((args.epsilon, float("inf"))):
        try:
            res = dp_em.fit_hd_dp_em(
                jax.random.fold_in(noise_key, i), data, model, s_hat=args.s, beta0=beta0,
                epsilon=eps,
            )
        except ValueError as exc:  # the estimator's own input checks (e.g. n too small)
            return fail(f"the fit refused these options: {exc}")
        err = float(np.linalg.norm(res.estimate - beta_star))
        label = "non-private limit" if eps == float("inf") else f"epsilon = {eps:g}"
        print(f"\nhigh-dimensional DP-EM, {label}: ||beta_hat - beta*||_2 = {err:.4f}")
        print(res.ledger)
    return 0


if __name__ == "__main__":
    sys.exit(main())
