"""em_fig1's largest setting (n = 200,000, d = 1,000): one call of its kernel (stream mode, a
chunk of R repetitions, all its levels) against drawing the same data alone, in one process.

    python benchmarks/em_fig1_floor.py [--reps R] [--rounds K]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import dpjax.experiments
    from dpjax import _cpu_prng, study, sweep

    _cpu_prng.install()
    exp = dpjax.experiments.registry()["em_fig1"]
    config = study.resolve_config(exp)
    (s,) = [x for x in study._study_settings(exp, config) if x.n == max(
        y.n for y in study._study_settings(exp, config))]
    plan, truth = s.plan, jnp.asarray(s.fixed_truth)
    kernel = jax.jit(sweep.study_function(s, reps=args.reps, seed=0, data_mode="stream"))
    hp = s.hparams()

    def draws(key):  # the repetitions' data, block by block, as the kernel draws them
        def rep(r):
            kr = jax.random.fold_in(key, r)
            return jax.lax.map(lambda b: jax.tree_util.tree_reduce(
                jnp.add, jax.tree_util.tree_map(jnp.sum, s.simulate(
                    jax.random.fold_in(kr, b), plan.block_size, truth))),
                jnp.arange(plan.num_blocks)).sum()
        return jax.vmap(rep)(jnp.arange(args.reps))

    data = jax.jit(draws)
    key = jax.random.key(0)
    for name, fn, arg in (("kernel", kernel, hp), ("data draws alone", data, key)):
        jax.block_until_ready(fn(arg))  # compile
        t = time.perf_counter()
        for _ in range(args.rounds):
            jax.block_until_ready(fn(arg))
        dt = (time.perf_counter() - t) / args.rounds
        print(f"{s.key}: {name}: {dt:.2f} s per call of {args.reps} repetitions "
              f"({plan.num_blocks} blocks of {plan.block_size} x {truth.shape[0]}; "
              f"{len(s.levels)} levels)")


if __name__ == "__main__":
    main()
