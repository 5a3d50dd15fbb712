"""Cost of the local-DP sparse regression estimators against n, up to n = 1e8 (issue 14).

Two runs per n, each in its own process (a clean peak-memory reading):

* ``alg2`` -- Algorithm 2 (LDP-IHT) with **per-user randomisation** (no shortcut: every user's
  gradient goes through the l2-ball randomizer), ``x ~ N(0, I_d)``, ``T`` rounds, each round's
  group streamed in chunks of ``--chunk`` users generated and randomised inside the scan
  (``ldp_iht(..., chunks_per_round=C)`` with a ``batch(t)`` data function);
* ``alg1`` -- Algorithm 1 on exact per-user data with the aggregate noise (one Gaussian draw
  per chunk, the law of the per-user noise), users streamed in chunks of ``--chunk1``.

Each child process jit-compiles ``dpjax.base.run`` on the streamed data, times the compile and
one run apart, and reads its peak resident memory (``resource.getrusage``). The parent writes
``benchmarks/results/ldp_scale-TAG.json`` and ``benchmarks/figures/ldp_scale.png`` (log-log
time and peak RSS against n, with the fitted slopes).

Usage::

    python benchmarks/ldp_scale.py --tag cpu-2core-shared                 # n = 1e5 .. 1e8
    python benchmarks/ldp_scale.py --n 100000 1000000 --algs alg2 --tag t
    python benchmarks/ldp_scale.py --part alg2 --n 100000                 # one child, JSON
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_N = (100_000, 1_000_000, 10_000_000, 100_000_000)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child(alg: str, n: int, d: int, k: int, eps: float, rounds: int, chunk: int,
          chunk1: int, seed: int) -> dict:
    """One timed run in this process; returns the measurements."""
    import jax
    import jax.numpy as jnp

    import dpjax.sweep  # noqa: F401  (installs the engine's fast CPU threefry, same bits)
    from dpjax import base
    from dpjax.algorithms import ldp_sparse as L
    from dpjax.models import sparse_lr as M

    rss0 = _rss_mb()
    theta = M.sparse_theta(jax.random.key(seed), d, k, norm="l2")
    model = M.SparseLinearModel(noise_sd=0.5)
    data_key = jax.random.fold_in(jax.random.key(seed), 1)
    if alg == "alg2":
        per_round = n // rounds
        chunks = max(1, math.ceil(per_round / chunk))
        m = per_round // chunks
        n_eff = rounds * chunks * m
        kp = min(2 * k, d)
        est = L.ldp_iht(rounds, kp, batching="disjoint", chunks_per_round=chunks)
        tau = 0.5 * math.sqrt(math.log(n_eff))
        hp = L.IHTHyperparams(*map(jnp.float32, (eps, tau, tau, 1.0)))
        extra = {"T": rounds, "chunks_per_round": chunks, "users_per_step": m, "k_prime": kp}
    elif alg == "alg1":
        chunks = max(1, math.ceil(n / chunk1))
        m = n // chunks
        n_eff = chunks * m
        est = L.nldp(chunks)
        hp = L.nldp_hparams(n_eff, d, eps, 1e-5, c_r=0.3, lam_rule="noise", c_lam=0.25)
        hp = L.NLDPHyperparams(*map(jnp.float32, hp))
        extra = {"chunks": chunks, "users_per_step": m}
    else:
        raise ValueError(f"unknown algorithm {alg!r}")

    def batch(t):
        return model(jax.random.fold_in(data_key, t), m, theta)

    def go(key):
        state, events = base.run(est, key, batch, est.init(jnp.zeros(d)), hp,
                                 lambda s, info: info.events)
        return state.beta, events

    t0 = time.perf_counter()
    compiled = jax.jit(go).lower(jax.random.key(seed + 2)).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    beta, events = compiled(jax.random.key(seed + 3))
    beta = jax.block_until_ready(beta)
    run_s = time.perf_counter() - t0
    ledger = est.ledger(n_eff, jax.tree_util.tree_map(float, hp), events)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    return {"alg": alg, "n": n_eff, "d": d, "k": k, "epsilon": eps, "compile_s": compile_s,
            "run_s": run_s, "users_per_s": n_eff / run_s, "peak_rss_mb": _rss_mb(),
            "rss_after_import_mb": rss0, "cpu_user_s": cpu.ru_utime, "cpu_sys_s": cpu.ru_stime,
            "error": float(jnp.linalg.norm(beta - theta)),
            "guarantee": ledger.approx_dp.epsilon, "guarantee_delta": ledger.approx_dp.delta,
            "load": [round(x, 2) for x in os.getloadavg()]} | extra


def _spawn(args: list[str], timeout: float | None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error_message": f"timed out after {timeout} s", "wall_s": timeout}
    if out.returncode != 0:
        return {"error_message": out.stderr[-2000:], "wall_s": time.perf_counter() - t0}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_wall_s"] = time.perf_counter() - t0
    return res


def fit(xs, ys) -> float:
    """Least-squares slope of log y on log x."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx


def slopes(runs: list[dict]) -> dict:
    out = {}
    for alg in sorted({r["alg"] for r in runs if "alg" in r}):
        rows = sorted((r for r in runs if r.get("alg") == alg), key=lambda r: r["n"])
        if len(rows) >= 2:
            out[alg] = {"time": fit([r["n"] for r in rows], [r["run_s"] for r in rows]),
                        "peak_rss": fit([r["n"] for r in rows],
                                        [r["peak_rss_mb"] for r in rows]),
                        "points": len(rows)}
            # below one chunk the chunk is the whole data set, so memory still grows with n;
            # the streaming claim is about the points that share the full chunk size
            full = max(r.get("users_per_step", 0) for r in rows)
            fixed = [r for r in rows if r.get("users_per_step", 0) == full]
            if len(fixed) >= 2:
                out[alg] |= {"peak_rss_fixed_chunk": fit([r["n"] for r in fixed],
                                                         [r["peak_rss_mb"] for r in fixed]),
                             "fixed_chunk_points": len(fixed), "users_per_step": full}
    return out


def figure(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    labels = {"alg2": "Alg 2 (per-user randomizer)", "alg1": "Alg 1 (aggregate noise)"}
    for alg, sl in res["slopes"].items():
        rows = sorted((r for r in res["runs"] if r.get("alg") == alg), key=lambda r: r["n"])
        ns = [r["n"] for r in rows]
        ax1.plot(ns, [r["run_s"] for r in rows], "o-",
                 label=f"{labels.get(alg, alg)}: slope {sl['time']:.2f}")
        fixed = (f", {sl['peak_rss_fixed_chunk']:.3f} over the {sl['fixed_chunk_points']} "
                 f"points with {sl['users_per_step']:,} users per step"
                 if "peak_rss_fixed_chunk" in sl else "")
        ax2.plot(ns, [r["peak_rss_mb"] for r in rows], "o-",
                 label=f"{labels.get(alg, alg)}: slope {sl['peak_rss']:.3f}{fixed}")
    for ax, yl in ((ax1, "run time (s), compile excluded"), (ax2, "peak RSS (MB), linear")):
        ax.set_xscale("log")
        ax.set_xlabel("n (users)")
        ax.set_ylabel(yl)
    ax1.set_yscale("log")
    ax2.set_ylim(0, 1.3 * max(r.get("peak_rss_mb", 0) for r in res["runs"]))
    ax1.legend(fontsize=8, loc="upper left")
    ax2.legend(fontsize=7, loc="lower right")
    m = res["machine"]
    fig.suptitle(f"LDP sparse regression at scale, d={res['d']}: {m.get('cpu_model', '')} "
                 f"({m.get('cpu_count')} cores, shared), load {res['load_before']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table(res: dict) -> str:
    lines = ["| algorithm | n | run time | users/s | compile | peak RSS | load (1 min) | error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(res["runs"], key=lambda r: (r.get("alg", ""), r.get("n", 0))):
        if "run_s" not in r:
            lines.append(f"| {r.get('alg', '?')} | {r.get('n', '?')} | failed: "
                         f"{r.get('error_message', '')[:60]} | | | | | |")
            continue
        lines.append(f"| {r['alg']} | {r['n']:.3g} | {r['run_s']:.1f} s | "
                     f"{r['users_per_s']:.3g} | {r['compile_s']:.1f} s | "
                     f"{r['peak_rss_mb']:.0f} MB | {r['load'][0]:.1f} | {r['error']:.3g} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["alg1", "alg2"], help="run one child and print JSON")
    p.add_argument("--algs", nargs="+", default=["alg2", "alg1"], choices=["alg1", "alg2"])
    p.add_argument("--n", nargs="+", type=float, default=list(DEFAULT_N))
    p.add_argument("--d", type=int, default=20)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=4, help="T of Algorithm 2")
    p.add_argument("--chunk", type=int, default=250_000, help="Alg 2 users per step")
    p.add_argument("--chunk1", type=int, default=1_000_000, help="Alg 1 users per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=None, help="seconds per child")
    p.add_argument("--tag", default="local")
    p.add_argument("--out", type=Path, default=None, help="results JSON path")
    p.add_argument("--figure", type=Path, default=HERE / "figures" / "ldp_scale.png")
    p.add_argument("--redraw", type=Path, default=None,
                   help="recompute the slopes and redraw the figure of a results JSON")
    a = p.parse_args(argv)
    if a.redraw:
        res = json.loads(a.redraw.read_text())
        res["slopes"] = slopes([x for x in res["runs"] if "run_s" in x])
        a.redraw.write_text(json.dumps(res, indent=1))
        figure(res, a.figure)
        print(table(res))
        print(json.dumps(res["slopes"]))
        return 0
    if a.part:
        res = child(a.part, int(a.n[0]), a.d, a.k, a.epsilon, a.rounds, a.chunk, a.chunk1,
                    a.seed)
        print(json.dumps(res))
        return 0
    sys.path.insert(0, str(HERE.parent))
    from benchmarks.run import machine, recorded_command

    res = {"command": recorded_command("benchmarks/ldp_scale.py", argv or sys.argv[1:]),
           "tag": a.tag, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "machine": machine(), "load_before": [round(x, 2) for x in os.getloadavg()],
           "d": a.d, "k": a.k, "epsilon": a.epsilon, "runs": []}
    out = a.out or HERE / "results" / f"ldp_scale-{a.tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for alg in a.algs:
        for n in a.n:
            args = ["--part", alg, "--n", str(int(n)), "--d", str(a.d), "--k", str(a.k),
                    "--epsilon", str(a.epsilon), "--rounds", str(a.rounds), "--chunk",
                    str(a.chunk), "--chunk1", str(a.chunk1), "--seed", str(a.seed)]
            r = _spawn(args, a.timeout)
            r.setdefault("alg", alg)
            r.setdefault("n", int(n))
            res["runs"].append(r)
            print(json.dumps(r), flush=True)
            res["slopes"] = slopes([x for x in res["runs"] if "run_s" in x])
            res["load_after"] = [round(x, 2) for x in os.getloadavg()]
            out.write_text(json.dumps(res, indent=1))  # after every run: a kill loses one
    figure(res, a.figure)
    print(table(res))
    print(json.dumps(res["slopes"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
