"""Speed and memory of the Figure-1 study: dpjax against a plain NumPy loop.

The study: 50 repetitions x 3 privacy levels (eps = 0.3, 0.5, 0.8), n = 4000, d = 1000, s = 10,
high-dimensional DP-EM for the Gaussian mixture (spec 000 Alg 3). Each part runs in its own
process (clean peak-memory readings; XLA flags fixed at start-up):

* ``numpy``   -- benchmarks/fig1_numpy.py: loops over repetitions and epsilons;
* ``dpjax``   -- the sweep engine (stream mode): compile time apart from run time;
* ``datagen`` -- only generating the study's data with the same PRNG (JAX threefry), the
  floor for any implementation that draws its data this way;
* ``memory``  -- peak memory at n = 100,000, d = 1,000 for R and 2R repetitions.

Usage::

    python benchmarks/bench_fig1.py --all --tag cpu-2core      # writes benchmarks/results/TAG.json
    python benchmarks/bench_fig1.py --part dpjax --devices 2   # one part, prints JSON
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import machine  # noqa: E402  (one description of the machine)

N, D, S, EPS, REPS = 4000, 1000, 10, (0.3, 0.5, 0.8), 50


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _setting(n=N, d=D, s=S, eps=EPS):
    from dpjax.algorithms import dp_em
    from dpjax.experiments._em_common import BetaError, InitNearTruth
    from dpjax.models import GaussianMixture, sparse_unit_beta
    from dpjax.sweep import DataPlan, Setting

    model = GaussianMixture(0.5)
    N0 = dp_em.default_num_iterations(n)
    levels = tuple({"epsilon": e, "delta": 1 / (2 * n), "eta": 0.5,
                    "truncation": dp_em.default_truncation(n)} for e in eps)
    return Setting(f"bench/n={n},d={d},s={s}", {"n": n}, dp_em.hd_dp_em(model, s, N0),
                   model.simulate, InitNearTruth(0.125), BetaError(), sparse_unit_beta(d, s),
                   DataPlan(N0, n // N0), dp_em.DPEMHyperparams, levels, n)


def _device_info():
    import jax

    dev = jax.devices()[0]
    return {"backend": jax.default_backend(), "device": dev.device_kind,
            "num_devices": len(jax.devices())}


def _gpu_peak_mb():
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use", 0) / 2**20 if stats else None


def part_numpy(reps: int) -> dict:
    from benchmarks.fig1_numpy import run_study

    t0 = time.perf_counter()
    err = run_study(reps, N, D, S, EPS, seed=0)
    secs = time.perf_counter() - t0
    return {"seconds": secs, "peak_rss_mb": _peak_rss_mb(),
            "final_error_mean": err[:, :, -1].mean(0).tolist()}


def part_dpjax(reps: int, mode: str) -> dict:
    import jax
    import jax.numpy as jnp

    from dpjax import sweep

    st = _setting()
    devices = len(jax.devices())
    kernel = sweep.make_kernel(st.estimator, st.simulate, st.init, st.record, st.plan, mode,
                               devices)
    dk, nk = sweep.study_keys(0, st.key)
    padded = math.ceil(reps / devices) * devices
    args = (jnp.arange(padded, dtype=jnp.uint32), dk, nk, jnp.asarray(st.truth), st.hparams(),
            jnp.asarray(st.level_ids()))
    t0 = time.perf_counter()
    kernel.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    sweep.run_setting(st, reps=reps, seed=0, data_mode=mode)  # warm (first call)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        out = sweep.run_setting(st, reps=reps, seed=0, data_mode=mode)
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times), "seconds_all": times, "compile_seconds": compile_s,
            "peak_rss_mb": _peak_rss_mb(), "gpu_peak_mb": _gpu_peak_mb(),
            "final_error_mean": out["error"][:, :, -1].mean(0).tolist(), **_device_info()}


def part_datagen(reps: int) -> dict:
    import jax
    import jax.numpy as jnp

    from dpjax import sweep

    st = _setting()
    dk, _ = sweep.study_keys(0, st.key)
    truth = jnp.asarray(st.truth)

    @jax.jit
    def gen(reps_idx):
        # The same access pattern as the sweep's stream mode: repetitions vmapped, one block
        # (one iteration's batch) generated per scan step, reduced so nothing else is computed.
        def one(r):
            dkr = jax.random.fold_in(dk, r)

            def body(acc, b):
                blk = st.simulate(jax.random.fold_in(dkr, b), st.plan.block_size, truth)
                return acc + blk.y.sum(), None

            return jax.lax.scan(body, jnp.zeros(()), jnp.arange(st.plan.num_blocks))[0]

        return jax.vmap(one)(reps_idx).sum()

    idx = jnp.arange(reps, dtype=jnp.uint32)
    gen(idx).block_until_ready()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        gen(idx).block_until_ready()
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times), "seconds_all": times, "peak_rss_mb": _peak_rss_mb(),
            **_device_info()}


def part_memory(reps: int, chunk: int, mode: str, n: int) -> dict:
    from dpjax import sweep

    st = _setting(n=n, eps=(0.5,))
    t0 = time.perf_counter()
    sweep.run_setting(st, reps=reps, seed=0, chunk_size=chunk, data_mode=mode, num_devices=1)
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(),
            "gpu_peak_mb": _gpu_peak_mb(), "reps": reps, "chunk": chunk, "mode": mode, "n": n,
            **_device_info()}


def _spawn(args: list[str], devices: int | None = None) -> dict:
    env = dict(os.environ)
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"part {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_all(tag: str, reps: int, skip_numpy: bool, mem_reps: int, cpu_devices: int) -> dict:
    res: dict = {"tag": tag, "machine": machine(), "study": {
        "reps": reps, "n": N, "d": D, "s": S, "eps": EPS}}
    print(f"[{tag}] dpjax ...", file=sys.stderr)
    res["dpjax_1dev"] = _spawn(["--part", "dpjax", "--reps", str(reps)], devices=None)
    if res["dpjax_1dev"]["backend"] == "cpu" and cpu_devices > 1:
        res[f"dpjax_{cpu_devices}dev"] = _spawn(
            ["--part", "dpjax", "--reps", str(reps)], devices=cpu_devices)
    print(f"[{tag}] datagen ...", file=sys.stderr)
    res["datagen"] = _spawn(["--part", "datagen", "--reps", str(reps)])
    if not skip_numpy:
        print(f"[{tag}] numpy ...", file=sys.stderr)
        res["numpy"] = _spawn(["--part", "numpy", "--reps", str(reps)])
    print(f"[{tag}] memory ...", file=sys.stderr)
    res["memory"] = [
        _spawn(["--part", "memory", "--reps", str(r), "--chunk", str(c), "--mode", m,
                "--n", "100000"])
        for (r, c, m) in ((mem_reps, mem_reps, "stream"), (2 * mem_reps, mem_reps, "stream"),
                          (2, 2, "materialize"), (4, 4, "materialize"))
    ]
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["numpy", "dpjax", "datagen", "memory"])
    p.add_argument("--all", action="store_true")
    p.add_argument("--tag", default="local")
    p.add_argument("--reps", type=int, default=REPS)
    p.add_argument("--chunk", type=int, default=4)
    p.add_argument("--mode", default="stream")
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--mem-reps", type=int, default=4)
    p.add_argument("--cpu-devices", type=int, default=os.cpu_count() or 1)
    p.add_argument("--skip-numpy", action="store_true")
    p.add_argument("--out", default=None, help="JSON file for --all (default results/TAG.json)")
    a = p.parse_args()
    if a.all:
        res = run_all(a.tag, a.reps, a.skip_numpy, a.mem_reps, a.cpu_devices)
        out = Path(a.out) if a.out else ROOT / "benchmarks" / "results" / f"{a.tag}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2) + "\n")
        print(json.dumps(res, indent=2))
        return
    if a.part == "numpy":
        res = part_numpy(a.reps)
    elif a.part == "dpjax":
        res = part_dpjax(a.reps, a.mode)
    elif a.part == "datagen":
        res = part_datagen(a.reps)
    elif a.part == "memory":
        res = part_memory(a.reps, a.chunk, a.mode, a.n)
    else:
        p.error("give --part or --all")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
