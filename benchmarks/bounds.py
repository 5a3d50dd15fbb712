"""What bounds a family's kernel: the harness's kernel timed with one part swapped for a stand-in.

Each run times one family's study kernel (``benchmarks/run.py``'s ``part_kernel``: warm, the
median of ``--rounds``) at ``--reps`` repetitions, as shipped or with one internal function
replaced. The stand-ins are for timing only: they compute something else (no privacy, other
values), and say how much of the kernel the swapped part costs.

Variants (``--variant``):

* ``shipped``: dpjax as it is.
* gem: ``psi-identity`` (the robust mean's score ``psi`` replaced by the identity: the cost of
  everything else) and ``psi-polynomial`` (psi by its clamped polynomial alone, the form every
  record within ``a_sw`` takes, with none of the machinery that finds and scores the others)
  and ``psi-no-passes`` (that machinery, the mask and the loop's test, but no pass of the full
  kernel: what the passes cost).
* iv: ``naive-norms`` (the overflow-safe per-record norms ``mechanisms._scaled_l2``, which
  rescale every record by a power of two read off its exponent bits, replaced by
  ``sqrt(sum x^2)`` with no rescaling and no sanitising).
* ldp: ``flat-draws`` (the l2-ball randomizer with every user's draws taken as flat arrays from
  four keys, ``normal(n, d)``, ``uniform(n)`` and ``bits(n, 2)``, instead of one key per user split
  three ways: a different key layout, same law) and ``no-draws`` (the randomizer's draws replaced
  by values computed from the input: the cost of everything but its random numbers).

Usage (one process per variant, so each compiles and measures alone)::

    python benchmarks/bounds.py --family gem --variant psi-polynomial --reps 4
    python benchmarks/bounds.py --family iv --variant naive-norms
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "gem": ("shipped", "psi-identity", "psi-polynomial", "psi-no-passes"),
    "iv": ("shipped", "naive-norms"),
    "ldp": ("shipped", "flat-draws", "no-draws"),
}


def _patch_gem(variant: str) -> None:
    import jax
    import jax.numpy as jnp

    import dpjax.robust_mean as rm

    def poly(x, s, beta):
        return rm._polynomial_only(x, jnp.asarray(s, x.dtype), jnp.asarray(beta, x.dtype))[0]

    if variant == "psi-identity":
        rm._psi_columns = jax.jit(lambda x, s, beta: x)
        rm._psi_column_sums = jax.jit(lambda x, s, beta: jnp.sum(x, axis=0))
    elif variant == "psi-polynomial":
        rm._psi_columns = jax.jit(poly)
        rm._psi_column_sums = jax.jit(lambda x, s, beta: jnp.sum(poly(x, s, beta), axis=0))
    elif variant == "psi-no-passes":  # the machinery, but no record goes through the kernel
        def nothing(todo, x, s, beta, m, cap):
            size = todo.shape[0]
            return (jnp.full((2 * cap,), size), jnp.zeros((2 * cap,), x.dtype),
                    jnp.zeros_like(todo))
        rm._gathered_pass = nothing


def _patch_iv(variant: str) -> None:
    import jax.numpy as jnp

    import dpjax.mechanisms as mech

    if variant == "naive-norms":
        def naive(x, axis):
            k = jnp.zeros(jnp.max(x, axis=axis, keepdims=True).shape, jnp.int32)
            return x, k, jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True))
        mech._scaled_l2 = naive


def _patch_ldp(variant: str) -> None:
    import jax
    import jax.numpy as jnp

    import dpjax.algorithms.ldp_sparse as ls
    import dpjax.local_randomizers as lr
    from dpjax import mechanisms as mech

    if variant == "shipped":
        return
    original = ls.local_mechanism

    def batched(key, stat, mechanism, epsilon):
        if mechanism is not lr.l2_ball_mechanism:
            return original(key, stat, mechanism, epsilon)
        x = stat.value
        n, dim = x.shape
        dtype = x.dtype
        r = jnp.asarray(stat.sensitivity, dtype)
        eps = jnp.asarray(epsilon, dtype)
        scale = jnp.asarray(lr.randomizer_scale(stat.sensitivity, epsilon, dim), dtype)
        x = mech.clip_l2(x, r)
        norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=1, keepdims=True))
        nonzero = norm > 0
        direction = jnp.where(nonzero, x / jnp.where(nonzero, norm, 1), 0.0)
        if variant == "flat-draws":
            k1, k2, k3 = jax.random.split(key, 3)
            b = jnp.where(jax.random.uniform(k1, (n, 1), dtype) < 0.5 + norm / (2 * r), 1.0, -1.0)
            m_hi, _ = mech.response_flip_threshold(epsilon)
            s = (jax.random.bits(k2, (n, 1), jnp.uint32) >= m_hi) | jnp.isinf(eps)
            g = jax.random.normal(k3, (n, dim), dtype)
        else:  # no-draws: the same arithmetic on values computed from the input
            b = jnp.where(norm < 0.5 * r, 1.0, -1.0)
            s = x[:, :1] > 0
            g = x[:, ::-1] + 0.5
        u = g / jnp.maximum(jnp.sqrt(jnp.sum(jnp.square(g), axis=1, keepdims=True)),
                            jnp.finfo(dtype).tiny)
        side = b * jnp.sum(u * direction, axis=1, keepdims=True)
        wrong = jnp.where(s, side <= 0, side > 0)
        u = jnp.where(wrong, -u, u)
        value = jnp.where(jnp.isinf(eps), x, scale * u)
        return value, lr.randomizer_event(stat.sensitivity, epsilon)

    ls.local_mechanism = batched


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True, choices=sorted(VARIANTS))
    p.add_argument("--variant", default="shipped")
    p.add_argument("--reps", type=int, default=None, help="default: the harness's full size")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--budget-gb", type=float, default=0.1)
    p.add_argument("--json", type=Path, default=None, help="append the result here")
    args = p.parse_args(argv)
    if args.variant not in VARIANTS[args.family]:
        p.error(f"--variant for {args.family}: one of {', '.join(VARIANTS[args.family])}")

    from dpjax.cli import set_cpu_devices

    set_cpu_devices(0)
    import run  # benchmarks/run.py

    {"gem": _patch_gem, "iv": _patch_iv, "ldp": _patch_ldp}[args.family](args.variant)
    fam = run.FAMILIES[args.family]
    reps = args.reps or fam.full.reps
    size = fam.at(fam.full, reps, None, None)
    res = run.part_kernel(fam, size, args.rounds, args.budget_gb, skip_numpy=True)
    out = {"family": args.family, "variant": args.variant, "reps": reps,
           "kernel_s": res["dpjax_s"], "kernel_all_s": res["dpjax_all_s"],
           "floor_s": res["floor"]["floor_s"], "load_avg": res["load_avg"],
           "machine": run.machine()}
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}))
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
