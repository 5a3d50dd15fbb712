"""One benchmark harness for every estimator family: dpjax against a plain NumPy loop.

For each family (a study of one of the papers, restricted to one or two settings), it measures

* **kernel**: the study's compute through the sweep engine (``sweep.run_setting`` for every
  setting, with the chunk size ``dpjax run`` would choose), warm, and its **compile** time
  (first call minus a warm call), against the NumPy loop (``benchmarks/numpy_*.py``) timed in
  the same process, alternating with dpjax round by round (paired; the ratio is the median of
  the rounds' ratios);
* **end to end**: the whole ``python -m dpjax.cli run NAME ...`` process (import, compile,
  results files, figure), cold (an empty JAX compilation cache) and warm (the cache the cold
  run filled), against the whole NumPy script (its loop, summary CSV and figure), paired round
  by round, with each process's peak resident memory (``os.wait4``);
* **agreement**: on the same data set (drawn by dpjax), the NumPy baseline and dpjax give the
  same estimate at epsilon = inf (no noise) up to float32 rounding -- what makes the baseline
  the same algorithm.
* **floor**: what this machine needs at least for the study (``setting_work`` counts its
  random numbers, flops and memory traffic; ``machine_rates`` measures threefry's draws, the
  matmul and vector peaks and the bandwidth in the same run): the largest of the three times,
  and the kernel's ratio to it.

Usage::

    python benchmarks/run.py --all --tag cpu-2core     # results/TAG.json + the README table
    python benchmarks/run.py --quick                   # every family at tiny sizes (< 1 min)
    python benchmarks/run.py --family glm_sparse --rounds 3
    python benchmarks/run.py --all --device gpu --tag h100 --skip-numpy-e2e
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import math
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
INF = math.inf


@dataclasses.dataclass(frozen=True)
class Size:
    """One size of a family's study: the ``dpjax run`` overrides and the NumPy arguments."""

    reps: int  # repetitions of the kernel comparison and of the end-to-end runs
    sets: tuple[str, ...]  # --set KEY=VALUE of `dpjax run`
    numpy_kwargs: dict  # keyword arguments of the NumPy run_study
    numpy_argv: tuple[str, ...]  # the same, as the NumPy script's command line


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    title: str
    experiment: str
    numpy_module: str
    full: Size
    quick: Size
    n_keys: tuple[str, ...] = ("n_grid", "n_base")  # the --set keys that fix n
    d_keys: tuple[str, ...] = ("d",)  # the --set keys that fix the dimension

    def at(self, size: Size, reps: int | None = None, n: int | None = None,
           d: int | None = None) -> Size:
        """``size`` with other repetitions, sample size and / or dimension."""
        sets = size.sets
        for keys, value in ((self.n_keys, n), (self.d_keys, d)):
            if value is not None:
                sets = tuple(kv for kv in sets if kv.split("=")[0] not in keys)
                sets += tuple(f"{k}={value}" for k in keys)
        return dataclasses.replace(size, reps=size.reps if reps is None else reps, sets=sets)


FAMILIES = {
    f.name: f for f in [
        Family(
            "em_hd", "high-dim DP-EM (spec 000 Alg 3, Fig 1): n=4000, d=1000, s=10, "
            "eps in {0.3, 0.5, 0.8, inf}", "em_fig1", "numpy_em_hd",
            Size(50, ("n_grid=4000", "s_grid=10", "eps_grid=0.3,0.5,0.8", "large_n="),
                 {"n": 4000, "d": 1000, "s": 10}, ("--n", "4000", "--d", "1000", "--s", "10")),
            Size(4, ("n_grid=1000", "n_base=1000", "s_grid=5", "s_base=5",
                     "eps_grid=0.3,0.5,0.8", "large_n=", "d=200"),
                 {"n": 1000, "d": 200, "s": 5}, ("--n", "1000", "--d", "200", "--s", "5")),
        ),
        Family(
            "em_ld", "low-dim DP-EM (spec 000 Alg 4, Fig 2): n=10000, d=10, eps in {0.5, 1, "
            "inf}, and full-data gradient EM", "em_fig2", "numpy_em_ld",
            Size(50, ("n_grid=10000", "d_grid=10", "d_base=10", "n_base=10000",
                      "gem_curve=false"),
                 {"n": 10000, "d": 10}, ("--n", "10000", "--d", "10")),
            Size(4, ("n_grid=2000", "d_grid=5", "d_base=5", "n_base=2000", "gem_curve=false"),
                 {"n": 2000, "d": 5}, ("--n", "2000", "--d", "5")),
            d_keys=("d_grid", "d_base"),
        ),
        Family(
            "glm_gd", "DP-GLM Alg 1, noisy GD (spec 003, Fig 1): n=40000, d=20, T=50, "
            "paper and exact-Gaussian calibrations", "glm_fig1", "numpy_glm_gd",
            Size(50, ("n_grid=40000", "d_grid=20", "T_grid=50", "unsplit=false"),
                 {"n": 40000, "d": 20, "T": 50}, ("--n", "40000", "--d", "20", "--T", "50")),
            Size(4, ("n_grid=4000", "n_base=4000", "d_grid=5", "d_base=5", "T=10",
                     "T_grid=10", "unsplit=false"),
                 {"n": 4000, "d": 5, "T": 10}, ("--n", "4000", "--d", "5", "--T", "10")),
            d_keys=("d_grid", "d_base"),
        ),
        Family(
            "glm_sparse", "sparse DP-GLM Alg 5, noisy IHT (spec 003, Fig 2): n=40000, "
            "d=10000, s*=10, T=10, eps in {0.2, 0.5, 0.8, inf}", "glm_fig2", "numpy_glm_sparse",
            Size(4, ("n_grid=40000", "s_grid=10", "T=10", "unsplit=false"),
                 {"n": 40000, "d": 10000, "s_true": 10, "T": 10},
                 ("--n", "40000", "--d", "10000", "--s", "10", "--T", "10")),
            Size(2, ("n_grid=2000", "n_base=2000", "s_grid=5", "s_base=5", "d=400", "T=5",
                     "unsplit=false"),
                 {"n": 2000, "d": 400, "s_true": 5, "T": 5},
                 ("--n", "2000", "--d", "400", "--s", "5", "--T", "5")),
        ),
        Family(
            "iv", "DP-IV, DP-2S-GD (spec 004 Alg 1, Fig 3): p=q=r=5, n=8000, T=20, three "
            "budget splits", "iv_fig3", "numpy_iv",
            Size(100, ("dims=5", "n_grid=8000", "clip_consts=1", "references=false"),
                 {"n": 8000, "dim": 5, "T": 20}, ("--n", "8000", "--dim", "5", "--T", "20")),
            Size(4, ("dims=3", "n_grid=1000", "clip_consts=1", "references=false", "T=5"),
                 {"n": 1000, "dim": 3, "T": 5}, ("--n", "1000", "--dim", "3", "--T", "5")),
            n_keys=("n_grid",), d_keys=("dims",),
        ),
        Family(
            "gem", "DP gradient EM Alg 2 (spec 002, Figs 2/6): GMM, n=100000, d=10, T=22, "
            "eps in {0.2, 0.5, 1, inf}", "gem_fig6", "numpy_gem",
            Size(20, ("methods=dp-gem", "n_grid=100000", "d_grid=10", "n_base=100000",
                      "d_base=10", "eps_grid=0.2,0.5,1"),
                 {"n": 100000, "d": 10, "T": 22}, ("--n", "100000", "--d", "10", "--T", "22")),
            Size(2, ("methods=dp-gem", "n_grid=10000", "d_grid=5", "n_base=10000",
                     "d_base=5", "eps_grid=0.2,0.5,1", "T=5"),
                 {"n": 10000, "d": 5, "T": 5}, ("--n", "10000", "--d", "5", "--T", "5")),
            n_keys=("n_grid", "n_base"), d_keys=("d_grid", "d_base"),
        ),
        Family(
            "ldp", "LDP-IHT Alg 2 (spec 001, ldp_iht's n panel): n=2e6 users, d=10, k=2, "
            "k'=4, T=3 rounds, eps in {0.5, 1, inf}", "ldp_iht", "numpy_ldp",
            Size(20, ("methods=alg2", "panels=n", "n_grid=2000000", "eps_grid=0.5,1", "d=10",
                      "k=2", "rounds=3"),
                 {"n": 2_000_000, "d": 10, "k": 2, "T": 3},
                 ("--n", "2000000", "--d", "10", "--k", "2", "--T", "3")),
            Size(2, ("methods=alg2", "panels=n", "n_grid=60000", "eps_grid=0.5,1", "d=5",
                     "k=2", "rounds=3"),
                 {"n": 60000, "d": 5, "k": 2, "T": 3},
                 ("--n", "60000", "--d", "5", "--k", "2", "--T", "3")),
            n_keys=("n_grid",), d_keys=("d",),
        ),
    ]
}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _median(xs):
    xs = sorted(xs)
    k = len(xs)
    return xs[k // 2] if k % 2 else 0.5 * (xs[k // 2 - 1] + xs[k // 2])


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _peak_rss_mb() -> float:
    """This process's own peak RSS (see ``benchmarks/_peak.py``: not ``ru_maxrss``, which
    starts from the harness's size in a process the harness launched)."""
    from benchmarks._peak import peak_rss_mb

    return peak_rss_mb()


def _numpy(name: str):
    return importlib.import_module(f"benchmarks.{name}")


def _settings(family: Family, size: Size):
    from dpjax.experiments import registry

    exp = registry()[family.experiment]
    overrides = dict(kv.split("=", 1) for kv in size.sets)
    config = exp.defaults.with_overrides(overrides, experiment=exp.name)
    return list(exp.settings(config))


def _run_kernel(settings, reps: int, budget_gb: float):
    """Every setting through the sweep engine, as ``dpjax run`` would run it (data mode, chunk
    size and the sharding over every local device chosen the same way); returns the metrics of
    each setting."""
    import jax

    from dpjax import study, sweep

    out = {}
    for s in settings:
        mode = ("stream" if s.estimator.batching == "disjoint"
                and s.plan.num_blocks == s.estimator.num_steps else "materialize")
        chunk = study._auto_chunk(s, reps, budget_gb * 2**30, jax.local_device_count())
        out[s.key] = sweep.run_setting(s, reps=reps, seed=0, chunk_size=chunk, data_mode=mode)
    return out


# --------------------------------------------------------------------------------------------
# The floor: what this machine needs at least for a family's study
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Work:
    """A study's work, counted analytically (its dominant terms, so a lower bound).

    normals / words: standard-normal draws and 32-bit random words (uniforms, Bernoulli and
    Rademacher draws, Laplace noise, the hashed 8-bit design, per-user keys) of threefry;
    mm_flops: the products a BLAS could run at the matmul peak; vec_flops: elementwise work at
    the vector peak; bytes: traffic to main memory (data written once, read once per step:
    the levels of a step share one pass; a chunk's data exceeds the caches at the default
    memory budget, 0.1 GB per device)."""

    normals: float = 0.0
    words: float = 0.0
    mm_flops: float = 0.0
    vec_flops: float = 0.0
    bytes: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(*(a + b for a, b in zip(dataclasses.astuple(self),
                                            dataclasses.astuple(other))))

    def __mul__(self, k: float) -> Work:
        return Work(*(k * a for a in dataclasses.astuple(self)))


# What dominates each family's work (the floor's binding term is measured: see floor()).
FLOOR_NOTES = {
    "em_hd": "the data (n x d normals per repetition) and 2 passes over each batch per level",
    "em_ld": "tiny: 10 x 1000 x 10 per step; fixed per-step cost (not counted) dominates",
    "glm_gd": "50 full passes (X beta, X^T r, per-record clipping) over n x d per level",
    "glm_sparse": "10 full passes over the 8-bit n x d design per level, and its hashing",
    "iv": "20 full passes over n x (p+q) per level; the data is p+q+r+1 normals per record",
    "gem": "22 full passes per level with the robust mean's psi on every coordinate",
    "ldp": "per user and level: d normals, 2 coins and 4 keys of the l2-ball randomizer",
}


def setting_work(family: str, s, reps: int) -> Work:
    """The work of one setting of family ``family`` over ``reps`` repetitions.

    Per repetition: records m = blocks x block size, dimension d, steps T, levels L, records
    per step b (a disjoint batch, or all m). Counts per family (float32, 4 bytes):

    * em_hd / em_ld (GMM DP-EM, Alg 3 / 4, and gradient EM): data m d normals + m words;
      per step and level 4 b d matmul flops (E-step products and the weighted sum) and 2 b d
      vector flops (the truncation); noise per step and level: Alg 3 peels s_hat times over
      d coordinates (s_hat d + s_hat Laplace words, s_hat d vector flops), Alg 4 draws d
      normals, gradient EM nothing; bytes 4 d (m + T b).
    * glm_gd (noisy GD): data m d uniform words + m Bernoulli words; per step and level
      4 m d matmul + 3 m d vector flops (per-record clipping); d normals; bytes 4 d m (1 + T).
    * glm_sparse (noisy IHT, 8-bit design): data m d / 4 hashed words + m; per step and level
      4 m d matmul flops, per step 2 m d vector flops (decoding, shared by the levels); peeling
      of s_alg over d (s_alg d + s_alg words and vector flops); bytes m d (1 + T).
    * iv (DP-2S-GD, p = q = r): data m (q + r + p + 1) normals; per step and level
      4 m q p + 4 m p matmul flops and 2 m (q + p) vector flops (clipping); p q + p normals;
      bytes 4 m (q + p + 1) (1 + T).
    * gem (gradient EM, Alg 2): data m d normals + m words; per step and level 2 m d matmul
      and 8 m d vector flops (the gradient and psi of the robust mean); d normals; bytes
      4 d m (1 + T).
    * ldp (LDP-IHT, Alg 2): data m d + m normals; per user and level the l2-ball randomizer:
      d normals and 10 words (2 coins, 4 keys of 2 words), 2 d matmul and 8 d vector flops;
      bytes 8 m (d + 1).
    """
    m = s.plan.num_blocks * s.plan.block_size
    T = s.estimator.num_steps
    L = len(s.levels)
    b = s.plan.block_size if s.estimator.batching == "disjoint" else m
    c = s.columns
    if family in ("em_hd", "em_ld"):
        d = c["d"]
        w = Work(normals=m * d, words=m, bytes=4 * d * (m + T * b))
        w += Work(mm_flops=4 * b * d, vec_flops=2 * b * d) * (T * L)
        if c["method"] == "hd-dp-em":
            sh = c["s_hat"]
            w += Work(words=sh * d + sh, vec_flops=sh * d) * (T * L)
        elif c["method"] == "ld-dp-em":
            w += Work(normals=d) * (T * L)
    elif family == "glm_gd":
        d = c["d"]
        w = Work(words=m * d + m, bytes=4 * d * m * (1 + T))
        w += Work(mm_flops=4 * m * d, vec_flops=3 * m * d, normals=d) * (T * L)
    elif family == "glm_sparse":
        d, sa = c["d"], c["s_alg"]
        w = Work(words=m * d / 4 + m, bytes=m * d * (1 + T), vec_flops=2 * m * d * T)
        w += Work(mm_flops=4 * m * d, words=sa * d + sa, vec_flops=sa * d) * (T * L)
    elif family == "iv":
        p, q, r = c["p"], c["q"], c["r"]
        w = Work(normals=m * (q + r + p + 1), bytes=4 * m * (q + p + 1) * (1 + T))
        w += Work(mm_flops=4 * m * q * p + 4 * m * p, vec_flops=2 * m * (q + p),
                  normals=p * q + p) * (T * L)
    elif family == "gem":
        d = c["d"]
        w = Work(normals=m * d, words=m, bytes=4 * d * m * (1 + T))
        w += Work(mm_flops=2 * m * d, vec_flops=8 * m * d, normals=d) * (T * L)
    elif family == "ldp":
        d = c["d"]
        w = Work(normals=m * (d + 1), bytes=8 * m * (d + 1))
        w += Work(normals=m * d, words=10 * m, mm_flops=2 * m * d, vec_flops=8 * m * d) * L
    else:
        raise ValueError(f"unknown family {family!r}")
    return w * reps


def study_work(family: str, settings, reps: int) -> Work:
    """:func:`setting_work` summed over the study's settings."""
    total = Work()
    for s in settings:
        total += setting_work(family, s, reps)
    return total


def _best_of(fn, *args, rounds: int = 3) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # compile
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best


@functools.lru_cache(maxsize=1)
def machine_rates() -> dict:
    """This machine's rates, over every local device as a study shards its repetitions:
    seconds per normal and per random word of threefry (a draw per repetition key,
    ``fold_in(key, r)``, as the studies lay out their keys; flat arrays, the fast path), the
    float32 matmul peak (batched 1024 x 1024 products), the vector peak (a chain of 64 fused
    multiply-adds per element on a cache-sized array) and the memory bandwidth (a 128 MB
    elementwise copy: read + write). On an accelerator every size is larger (normals 2^22 a
    key, 4096 x 4096 products, 2^24 elements, 1 GB), so that launches do not set the rate."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devs = jax.local_devices()
    D = len(devs)
    shard = NamedSharding(Mesh(np.array(devs), ("r",)), PartitionSpec("r"))

    def put(x):
        return jax.device_put(x, shard)

    gpu = devs[0].platform != "cpu"  # an accelerator: sizes that fill it (launches amortised)
    R, m = 8 * D, 2**22 if gpu else 2**18
    ids = put(jnp.arange(R, dtype=jnp.uint32))
    key = jax.random.key(0)
    normal = jax.jit(jax.vmap(lambda r: jax.random.normal(jax.random.fold_in(key, r), (m,))))
    bits = jax.jit(jax.vmap(lambda r: jax.random.bits(jax.random.fold_in(key, r), (m,))))
    out = {"devices": D, "normal_s": _best_of(normal, ids) / (R * m),
           "word_s": _best_of(bits, ids) / (R * m)}
    k = 4096 if gpu else 1024
    a = put(jnp.ones((2 * D, k, k), jnp.float32) / k)
    mm = jax.jit(lambda x: jnp.einsum("bij,bjk->bik", x, x))
    out["matmul_flops_per_s"] = 2 * D * 2 * k**3 / _best_of(mm, a)
    v = put(jnp.linspace(0.0, 1.0, D * (2**24 if gpu else 2**16), dtype=jnp.float32))

    def fma_chain(x, steps=50):
        def body(_, y):
            for _ in range(64):
                y = y * 0.999 + 0.001
            return y
        return jax.lax.fori_loop(0, steps, body, x)

    out["vector_flops_per_s"] = 2 * 64 * 50 * v.size / _best_of(jax.jit(fma_chain), v)
    big = put(jnp.zeros(D * ((2**28 if gpu else 2**25) // D), jnp.float32))
    out["bytes_per_s"] = 8 * big.size / _best_of(jax.jit(lambda x: x + 1.0), big)
    return out


def floor(work: Work, rates: dict) -> dict:
    """The time ``work`` needs at ``rates``: random numbers, floating point (matmul flops at
    the matmul peak plus vector flops at the vector peak), memory traffic; the floor is the
    largest of the three, and ``bound`` names it."""
    parts = {
        "rng": work.normals * rates["normal_s"] + work.words * rates["word_s"],
        "flops": (work.mm_flops / rates["matmul_flops_per_s"]
                  + work.vec_flops / rates["vector_flops_per_s"]),
        "memory": work.bytes / rates["bytes_per_s"],
    }
    bound = max(parts, key=parts.get)
    return {**{f"{k}_s": v for k, v in parts.items()}, "floor_s": parts[bound],
            "bound": bound, "work": dataclasses.asdict(work)}


def machine() -> dict:
    info = {"platform": platform.platform(), "cpu_count": os.cpu_count(),
            "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        info["cpu_model"] = names[0] if names else ""
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_gb"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    import numpy

    info["numpy"] = numpy.__version__
    try:
        import jax

        info |= {"jax": jax.__version__, "backend": jax.default_backend(),
                 "device": jax.devices()[0].device_kind, "num_devices": len(jax.devices())}
    except ImportError:
        pass
    return info


def load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return []


# --------------------------------------------------------------------------------------------
# Part 1: kernel and compile, paired with the NumPy loop in one process
# --------------------------------------------------------------------------------------------


def part_kernel(family: Family, size: Size, rounds: int, budget_gb: float,
                skip_numpy: bool = False) -> dict:
    import jax

    settings = _settings(family, size)
    t0 = time.perf_counter()
    jax.block_until_ready(_run_kernel(settings, size.reps, budget_gb))
    first = time.perf_counter() - t0
    rss_dpjax = _peak_rss_mb()  # before any NumPy run: dpjax's own peak
    np_mod = _numpy(family.numpy_module)
    dp_times, np_times, ratios, np_peak = [], [], [], 0.0
    dp_cpu, np_cpu, cpu_ratios = [], [], []
    for _ in range(rounds):
        if not skip_numpy:
            tracemalloc.start()
            t0, c0 = time.perf_counter(), _cpu_s()
            np_mod.run_study(size.reps, **size.numpy_kwargs)
            np_times.append(time.perf_counter() - t0)
            np_cpu.append(_cpu_s() - c0)
            np_peak = max(np_peak, tracemalloc.get_traced_memory()[1] / 2**20)
            tracemalloc.stop()
        t0, c0 = time.perf_counter(), _cpu_s()
        jax.block_until_ready(_run_kernel(settings, size.reps, budget_gb))
        dp_times.append(time.perf_counter() - t0)
        dp_cpu.append(_cpu_s() - c0)
        if not skip_numpy:
            ratios.append(np_times[-1] / dp_times[-1])
            cpu_ratios.append(np_cpu[-1] / dp_cpu[-1])
    warm = _median(dp_times)
    fl = floor(study_work(family.name, settings, size.reps), machine_rates())
    fl |= {"rates": machine_rates(), "ratio": warm / fl["floor_s"]}
    res = {"reps": size.reps, "settings": [s.key for s in settings], "floor": fl,
           "levels": sum(len(s.levels) for s in settings),
           "dpjax_s": warm, "dpjax_all_s": dp_times, "dpjax_cpu_s": _median(dp_cpu),
           "compile_s": max(first - warm, 0.0), "first_call_s": first,
           "dpjax_peak_rss_mb": rss_dpjax, "load_avg": load()}
    if not skip_numpy:
        res |= {"numpy_s": _median(np_times), "numpy_all_s": np_times,
                "numpy_peak_traced_mb": np_peak, "speedup": _median(ratios),
                "speedup_all": ratios, "numpy_cpu_s": _median(np_cpu),
                "speedup_cpu": _median(cpu_ratios)}
    return res


# --------------------------------------------------------------------------------------------
# Part 2: whole processes
# --------------------------------------------------------------------------------------------


def _timed_process(cmd: list[str], env: dict) -> dict:
    """Wall and CPU time of ``cmd`` (``[python, -m NAME | PATH, ...]``), and its peak RSS as
    the process itself reads it at exit (``benchmarks/_peak.py``)."""
    fd, peak_file = tempfile.mkstemp(prefix="dpjax-bench-peak-")
    os.close(fd)
    cmd = [cmd[0], str(ROOT / "benchmarks" / "_peak.py"), *cmd[1:]]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env | {"BENCH_PEAK_FILE": peak_file},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    secs = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    try:
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr.decode()[-3000:]}")
        with open(peak_file) as f:
            peak = float(f.read())
    finally:
        os.unlink(peak_file)
    return {"seconds": secs, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": peak}


def part_e2e(family: Family, size: Size, rounds: int, warm_cache: bool,
             skip_numpy: bool = False) -> dict:
    rows = []
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION")}
    for _ in range(rounds):
        tmp = Path(tempfile.mkdtemp(prefix="dpjax-bench-"))
        try:
            row = {}
            if not skip_numpy:
                row["numpy"] = _timed_process(
                    [sys.executable, str(ROOT / "benchmarks" / f"{family.numpy_module}.py"),
                     "--reps", str(size.reps), "--out", str(tmp / "numpy"),
                     *size.numpy_argv], base_env)
            env = base_env | {"JAX_COMPILATION_CACHE_DIR": str(tmp / "cache")}
            cmd = [sys.executable, "-m", "dpjax.cli", "run", family.experiment,
                   "--reps", str(size.reps), "--no-progress"]
            for kv in size.sets:
                cmd += ["--set", kv]
            row["cold"] = _timed_process(cmd + ["--out", str(tmp / "cold")], env)
            if warm_cache:
                row["warm"] = _timed_process(cmd + ["--out", str(tmp / "warm")], env)
            rows.append(row)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    out: dict = {"reps": size.reps, "rounds": rows, "load_avg": load()}
    for k in ("numpy", "cold", "warm"):
        if rows and k in rows[0]:
            out[f"{k}_s"] = _median([r[k]["seconds"] for r in rows])
            out[f"{k}_peak_rss_mb"] = max(r[k]["peak_rss_mb"] for r in rows)
    for k in ("cold", "warm"):
        if rows and k in rows[0] and "numpy" in rows[0]:
            out[f"speedup_{k}"] = _median([r["numpy"]["seconds"] / r[k]["seconds"]
                                           for r in rows])
            out[f"speedup_{k}_cpu"] = _median([r["numpy"]["cpu_s"] / r[k]["cpu_s"]
                                               for r in rows])
    return out


# --------------------------------------------------------------------------------------------
# Part 3: agreement at epsilon = inf on the same data
# --------------------------------------------------------------------------------------------


def _dpjax_final(estimator, data, params0, hparams):
    import jax
    import numpy as np

    from dpjax.base import run

    state, _ = jax.jit(lambda d, p: run(estimator, jax.random.key(7), d, estimator.init(p),
                                        hparams, lambda s, i: 0.0))(data, params0)
    return jax.tree_util.tree_map(np.asarray, state)


def agreement(name: str) -> dict:
    """``max |numpy - dpjax|`` of the final estimate at epsilon = inf on one data set drawn by
    dpjax (float32), and the scale of the estimate, for family ``name``."""
    import jax
    import numpy as np

    rng = np.random.default_rng(0)  # unused by the noise-free runs
    key = jax.random.key(11)
    if name in ("em_hd", "em_ld"):
        from dpjax.algorithms import dp_em
        from dpjax.models import GaussianMixture, sparse_unit_beta

        model = GaussianMixture(0.5)
        n, d, s = (1200, 60, 5) if name == "em_hd" else (1200, 6, 6)
        N0 = dp_em.default_num_iterations(n)
        truth = sparse_unit_beta(d, s)
        y = model.simulate(key, (n // N0) * N0, truth)
        beta0 = np.asarray(truth) + 0.1 * np.eye(d)[0]
        hp = dp_em.default_hparams(n, INF)
        if name == "em_hd":
            est = dp_em.hd_dp_em(model, s, N0)
            ref = _numpy("numpy_em_hd").estimate(rng, np.asarray(y.y, np.float64), beta0, INF, s)
        else:
            est = dp_em.ld_dp_em(model, N0)
            ref = _numpy("numpy_em_ld").estimate(rng, np.asarray(y.y, np.float64), beta0, INF)
        # the NumPy loops take n0 = floor(n / N0) from n: give them exactly N0 * n0 records
        got = _dpjax_final(est, y, beta0, hp).beta
        want = ref[-1]
    elif name in ("glm_gd", "glm_sparse"):
        from dpjax.algorithms import dp_glm
        from dpjax.models.glm import GLM, decode_design, sparse_sphere_beta

        if name == "glm_gd":
            n, d, T = 3000, 8, 20
            model = GLM()
            truth = sparse_sphere_beta(jax.random.key(1), d, d)
            data = model.simulate(key, n, truth)
            est = dp_glm.noisy_gd(model, T)
            want = _numpy("numpy_glm_gd").estimate(
                rng, np.asarray(data.x, np.float64), np.asarray(data.y, np.float64), 0.0, T)
        else:
            n, d, s, T = 2000, 200, 6, 8
            model = GLM(design="grid8", row_block=64)
            truth = sparse_sphere_beta(jax.random.key(1), d, 3)
            data = model.simulate(key, n, truth)
            est = dp_glm.noisy_iht(model, s, T)
            want = _numpy("numpy_glm_sparse").estimate(
                rng, np.asarray(decode_design(data.x)), np.asarray(data.y), INF, s, T)
        hp = dp_glm.default_hparams(n, INF, T)
        got = _dpjax_final(est, data, np.zeros(d, np.float32), hp).beta
    elif name == "iv":
        from dpjax.algorithms import dp_iv
        from dpjax.models.iv import LinearIV

        n, dim, T = 2000, 4, 15
        model = LinearIV(dim, dim, dim)
        prm = model.draw_parameters(jax.random.key(3))
        data = model.simulate(key, n, model.pack(prm))
        npiv = _numpy("numpy_iv")
        eta, alpha = npiv.step_sizes(np.asarray(prm.theta, np.float64), n)
        hp = dp_iv.make_hparams(INF, INF, eta, alpha, INF, INF)
        state = _dpjax_final(dp_iv.dp_2s_gd(T), data,
                             (np.zeros((dim, dim), np.float32), np.zeros(dim, np.float32)), hp)
        got = np.concatenate([state.theta.ravel(), state.beta])
        theta, beta = npiv.estimate(rng, *(np.asarray(v, np.float64) for v in data), INF, INF,
                                    INF, INF, eta, alpha, T)
        want = np.concatenate([theta.ravel(), beta])
    elif name == "gem":
        from dpjax.algorithms import dp_gem
        from dpjax.models import GaussianMixture

        # epsilon = inf with an explicit, small truncation scale: no noise, but psi far from
        # the identity (most scores beyond its polynomial range), so the comparison
        # covers psi's closed form, the robust mean and the gradient-EM loop
        n, d, T, s = 3000, 4, 12, 1.5
        model = GaussianMixture(1.0)
        truth = np.full(d, 3.0 / math.sqrt(d), np.float32)
        data = model.simulate(key, n, truth)
        beta0 = (0.5 * truth * np.array([1.0, -1.0, 0.5, 2.0], np.float32)).astype(np.float32)
        f = functools.partial(np.asarray, dtype=np.float32)
        hp = dp_gem.DPGEMHyperparams(f(INF), f(1.0 / n), f(1.0), f(1.0), f(0.05), f(s))
        est = dp_gem.dp_gem(model, T, "explicit", calibration="paper")
        got = _dpjax_final(est, data, beta0, hp).beta
        want = _numpy("numpy_gem").estimate(rng, np.asarray(data.y, np.float64),
                                            beta0.astype(np.float64), INF, 1.0, T, s=s)
    elif name == "ldp":
        from dpjax.algorithms import ldp_sparse as L
        from dpjax.models import sparse_lr as M

        # epsilon = inf: the randomizer is the identity, so Algorithm 2 is deterministic given
        # the data (plain IHT on shrunk records, disjoint groups). The experiment's estimator
        # (rounds streamed in C = 2 chunks); theta* of norm 2 so that the projection onto the
        # unit ball acts, tau small enough that the shrinkage of x and y acts
        n, d, k, T, C = 12000, 10, 2, 3, 2
        kp = 2 * k
        truth = 2.0 * M.sparse_theta(jax.random.key(1), d, k, norm="l2")
        x, y = M.SparseLinearModel(noise_sd=0.5)(key, n, truth)
        tau = np.float32(0.5 * math.sqrt(math.log(n)))
        f = functools.partial(np.asarray, dtype=np.float32)
        hp = L.IHTHyperparams(f(INF), tau, tau, f(1.0))
        est = L.ldp_iht(T, kp, batching="disjoint", chunks_per_round=C)
        got = _dpjax_final(est, (x, y), np.zeros(d, np.float32), hp).beta
        want = _numpy("numpy_ldp").estimate(rng, np.asarray(x, np.float64),
                                            np.asarray(y, np.float64), INF, float(tau), kp, T)
    else:
        raise ValueError(f"unknown family {name!r}")
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return {"max_abs_diff": float(np.max(np.abs(got - want))),
            "scale": float(np.max(np.abs(want))),
            "same_support": bool(np.array_equal(got != 0, want != 0))}


# --------------------------------------------------------------------------------------------
# Driver, table
# --------------------------------------------------------------------------------------------


def run_family(family: Family, args) -> dict:
    size = family.quick if args.quick else family.full
    if args.reps:
        size = dataclasses.replace(size, reps=args.reps)
    res: dict = {"title": family.title, "experiment": family.experiment,
                 "dpjax_run": ["--reps", str(size.reps), *[f"--set {kv}" for kv in size.sets]]}
    res["agreement"] = agreement(family.name)
    if args.inline:
        res["kernel"] = part_kernel(family, size, args.rounds, args.memory_budget,
                                    args.skip_numpy)
    else:
        res["kernel"] = _spawn(["--part", "kernel", "--family", family.name,
                                "--rounds", str(args.rounds), "--memory-budget",
                                str(args.memory_budget), *(["--quick"] if args.quick else []),
                                *(["--reps", str(args.reps)] if args.reps else []),
                                *(["--skip-numpy"] if args.skip_numpy else [])], args.device)
    if not args.no_e2e:
        res["e2e"] = part_e2e(family, size, args.e2e_rounds or args.rounds, not args.quick,
                              args.skip_numpy or args.skip_numpy_e2e)
    return res


SCALING = {  # family -> (repetitions at the full size, sample sizes and dimensions at n_reps)
    "em_hd": ((5, 10, 20, 40), (2000, 4000, 8000, 16000), (250, 500, 1000, 2000)),
    "em_ld": ((10, 20, 40, 80), (5000, 10000, 20000, 40000), (5, 10, 20, 40)),
    "glm_gd": ((5, 10, 20, 40), (10000, 20000, 40000, 80000), (10, 20, 40, 80)),
    "glm_sparse": ((1, 2, 4), (10000, 20000, 40000), (2500, 5000, 10000)),
    "iv": ((10, 20, 40, 80), (2000, 4000, 8000, 16000), (3, 5, 8, 12)),
    "gem": ((5, 10, 20, 40), (30000, 100000, 300000), (5, 10, 20, 40)),
    "ldp": ((5, 10, 20, 40), (500000, 1000000, 2000000, 4000000), (5, 10, 20, 40)),
}
AXES = ("reps", "n", "d")


def scaling(name: str, device: str, budget_gb: float, n_reps: int) -> dict:
    """Kernel time (wall and CPU), compile time and peak RSS against repetitions (at the full
    size), against n and against d (at ``n_reps`` repetitions), each point in its own process."""
    out: dict = {}
    for axis, grid in zip(AXES, SCALING[name]):
        flag = ["--reps", "{x}"] if axis == "reps" else ["--reps", str(n_reps), f"--{axis}", "{x}"]
        out[axis] = [{"x": x, **_spawn(
            ["--part", "kernel", "--family", name, "--rounds", "1", "--skip-numpy",
             "--memory-budget", str(budget_gb), *(f.format(x=x) for f in flag)], device)}
            for x in grid]
    return out


def slope(xs, ys) -> float:
    """Least-squares slope of log y against log x."""
    import numpy as np

    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def plot_scaling(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = list(results)
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.4))
    for i, name in enumerate(fams):
        color = f"C{i}"
        for ax, axis in zip(axes[:3], AXES):
            pts = results[name].get(axis, [])
            if len(pts) < 2:
                continue
            xs = [p["x"] for p in pts]
            ys = [p["dpjax_cpu_s"] for p in pts]  # CPU time: steadier than wall on a loaded host
            ax.loglog(xs, ys, "o-", color=color, label=f"{name} (slope {slope(xs, ys):.2f})")
        pts = results[name]["reps"]
        axes[3].semilogx([p["x"] for p in pts], [p["dpjax_peak_rss_mb"] for p in pts], "o-",
                         color=color, label=name)
    axes[0].set(xlabel="repetitions", ylabel="warm kernel, process CPU time (s)",
                title="cost vs repetitions (full-size n)")
    axes[1].set(xlabel="n", ylabel="warm kernel, process CPU time (s)", title="cost vs n")
    axes[2].set(xlabel="d (the family's dimension setting)",
                ylabel="warm kernel, process CPU time (s)", title="cost vs d")
    axes[3].set(xlabel="repetitions", ylabel="peak RSS (MB)",
                title="peak memory vs repetitions (chunks from the memory budget)")
    from matplotlib.ticker import NullFormatter

    for ax in axes:
        ax.xaxis.set_minor_formatter(NullFormatter())  # no crowded 2x10^3, 3x10^3, ... labels
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _spawn(argv: list[str], device: str) -> dict:
    env = dict(os.environ)  # (carries --numpy-threads' variables, set in main)
    if device == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"part {argv} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results: dict) -> str:
    """The Markdown table of one run of the harness."""
    lines = [
        "| family | reps x levels | dpjax kernel | NumPy loop | **kernel speedup** (CPU-time "
        "ratio) | **kernel / floor** (floor, bound) | compile "
        "| dpjax run, cold | dpjax run, warm cache | NumPy script | **end-to-end speedup "
        "cold / warm** (CPU-time ratios) | peak RSS dpjax / NumPy | agreement at eps=inf |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    reasons = []
    for name, r in results["families"].items():
        k, e, a = r["kernel"], r.get("e2e", {}), r["agreement"]

        def s(x, fmt="{:.2f} s"):
            return fmt.format(x) if x is not None else "--"

        def cpu(kind, e=e):  # CPU-time ratio of the whole processes (median over rounds)
            rows = [r for r in e.get("rounds", []) if kind in r and "numpy" in r]
            return _median([r["numpy"]["cpu_s"] / r[kind]["cpu_s"] for r in rows]) if rows \
                else None

        f = k.get("floor")
        ratio = (f"**{f['ratio']:.1f}x** ({f['floor_s']:.3g} s, {f['bound']})" if f
                 else "--")
        if f:
            reasons.append(f"* `{name}`: {f['bound']}-bound floor {f['floor_s']:.3g} s (random "
                           f"numbers {f['rng_s']:.3g} s, flops {f['flops_s']:.3g} s, memory "
                           f"{f['memory_s']:.3g} s); {FLOOR_NOTES.get(name, '')}")
        lines.append(
            f"| {name} | {k['reps']} x {k['levels']} | {s(k['dpjax_s'])} | "
            f"{s(k.get('numpy_s'))} | **{s(k.get('speedup'), '{:.1f}x')}** "
            f"({s(k.get('speedup_cpu'), '{:.1f}x')}) | {ratio} | "
            f"{s(k['compile_s'])} | {s(e.get('cold_s'))} | {s(e.get('warm_s'))} | "
            f"{s(e.get('numpy_s'))} | **{s(e.get('speedup_cold'), '{:.1f}x')} / "
            f"{s(e.get('speedup_warm'), '{:.1f}x')}** ({s(cpu('cold'), '{:.1f}x')} / "
            f"{s(cpu('warm'), '{:.1f}x')}) | "
            f"{s(e.get('cold_peak_rss_mb'), '{:.0f}')} / {s(e.get('numpy_peak_rss_mb'), '{:.0f}')}"
            f" MB | {a['max_abs_diff']:.1e} (of {a['scale']:.2f}) |")
    if reasons:
        lines += ["", "What bounds each family's floor (its largest part, measured in the same "
                  "run; see `setting_work` for the counts):", "", *reasons]
    return "\n".join(lines)


def recorded_command(script: str, argv: list[str]) -> str:
    """``python SCRIPT ARGS`` as a user runs it from the repository root, for a results file:
    an absolute path inside the checkout is written relative to it, and one outside it (a
    scratch folder of the machine that ran it, which no reader has) as where results files
    are kept, ``benchmarks/results/<its name>``. ``--opt=PATH`` counts too."""
    out = []
    for arg in argv:
        opt, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if value.startswith("/"):
            path = Path(value).resolve()
            value = (str(path.relative_to(ROOT)) if path.is_relative_to(ROOT)
                     else f"benchmarks/results/{path.name}")
        out.append(opt + eq + value)
    return shlex.join(["python", script, *out])


def merge(runs: list[dict]) -> dict:
    """Several runs of the harness as one (families in order; commands, dates and loads
    joined)."""
    out = dict(runs[0])
    out["families"] = {k: v for r in runs for k, v in r["families"].items()}
    for key in ("command", "date", "tag"):
        out[key] = " ; ".join(dict.fromkeys(str(r[key]) for r in runs))
    out["load_before"] = [r["load_before"] for r in runs]
    out["load_after"] = [r.get("load_after") for r in runs]
    return out


def write_readme_table(results: dict, readme: Path) -> None:
    start, end = "<!-- harness-table:start -->", "<!-- harness-table:end -->"
    m = results["machine"]
    body = "\n".join([
        start,
        f"Run `{results['command']}` (tag `{results['tag']}`, {results['date']}): "
        f"{m.get('cpu_model', '?')}, {m.get('cpu_count')} cores, {m.get('mem_total_gb')} GB, "
        f"jax {m.get('jax')} ({m.get('backend')}, {m.get('device')}), NumPy {m.get('numpy')}; "
        f"load average before / after: {results['load_before']} / {results['load_after']}.",
        "",
        table(results),
        end,
    ])
    text = readme.read_text() if readme.exists() else ""
    if start in text and end in text:
        text = text[:text.index(start)] + body + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    readme.write_text(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="every family at full size")
    p.add_argument("--quick", action="store_true", help="every family at tiny sizes")
    p.add_argument("--family", action="append", choices=sorted(FAMILIES), default=[])
    p.add_argument("--part", choices=["kernel"], help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=None, help="paired rounds (3; quick: 1)")
    p.add_argument("--e2e-rounds", type=int, default=None,
                   help="paired rounds of the whole-process timings (default: --rounds)")
    p.add_argument("--reps", type=int, default=None, help="override every family's reps")
    p.add_argument("--n", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--d", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--scaling", action="store_true",
                   help="time against reps, n and d (benchmarks/figures/scaling.png)")
    p.add_argument("--memory-budget", type=float, default=None,
                   help="GB per chunk (default: dpjax run's, 0.1 on CPU and 2 on a GPU)")
    p.add_argument("--device", choices=["cpu", "gpu", "auto"], default="auto")
    p.add_argument("--inline", action="store_true", help="kernel part in this process")
    p.add_argument("--no-e2e", action="store_true", help="skip the whole-process timings")
    p.add_argument("--skip-numpy", action="store_true", help="dpjax only (e.g. on a GPU)")
    p.add_argument("--skip-numpy-e2e", action="store_true")
    p.add_argument("--numpy-threads", type=int, default=None,
                   help="BLAS threads of the NumPy baselines (OPENBLAS/OMP/MKL_NUM_THREADS); "
                   "default: NumPy's own (all cores). 1 avoids BLAS spin-waiting on a loaded host")
    p.add_argument("--tag", default=None)
    p.add_argument("--out", default=None, help="JSON file (default results/TAG.json)")
    p.add_argument("--readme", action="store_true", help="write the table into README.md")
    p.add_argument("--table-from", nargs="+", default=None, metavar="JSON",
                   help="write README.md's table from these result files (merged)")
    a = p.parse_args(argv)
    if a.rounds is None:
        a.rounds = 1 if a.quick else 3
    if a.table_from:
        merged = merge([json.loads(Path(f).read_text()) for f in a.table_from])
        write_readme_table(merged, ROOT / "benchmarks" / "README.md")
        print(table(merged))
        return 0
    if a.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    if a.device != "gpu":
        # one JAX CPU device per core, as `dpjax run` asks (before JAX starts; a user's
        # XLA_FLAGS / JAX_NUM_CPU_DEVICES count wins), so the kernel is the one dpjax run runs
        from dpjax.cli import set_cpu_devices

        set_cpu_devices(0)
    if a.numpy_threads:  # before NumPy's BLAS starts (parts and scripts are new processes)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(a.numpy_threads)
    if a.memory_budget is None:  # after JAX_PLATFORMS is set: the default follows the device
        from dpjax.study import default_memory_budget_gb

        a.memory_budget = default_memory_budget_gb()
    if a.part == "kernel":
        fam = FAMILIES[a.family[0]]
        size = fam.at(fam.quick if a.quick else fam.full, a.reps, a.n, a.d)
        print(json.dumps(part_kernel(fam, size, a.rounds, a.memory_budget, a.skip_numpy)))
        return 0
    names = a.family or (sorted(FAMILIES) if (a.all or a.quick) else [])
    if not names:
        p.error("give --all, --quick or --family NAME")
    tag = a.tag or ("quick" if a.quick else "local")
    if a.scaling:
        res = {"machine": machine(), "load_before": load(), "families": {}}
        for name in names:
            print(f"[scaling] {name} ...", file=sys.stderr, flush=True)
            res["families"][name] = scaling(name, a.device, a.memory_budget,
                                            max(FAMILIES[name].full.reps // 4, 1))
            out = ROOT / "benchmarks" / "results" / f"scaling-{tag}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            res["load_after"] = load()
            out.write_text(json.dumps(res, indent=2) + "\n")
            plot_scaling(res["families"], ROOT / "benchmarks" / "figures" / "scaling.png")
        for name, r in res["families"].items():
            print(name, {ax: round(slope([p["x"] for p in r[ax]],
                                         [p["dpjax_cpu_s"] for p in r[ax]]), 2)
                         for ax in AXES if len(r.get(ax, [])) > 1})
        return 0
    results = {"tag": tag, "command": recorded_command("benchmarks/run.py", argv or sys.argv[1:]),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "machine": machine(), "load_before": load(), "quick": a.quick,
               "rounds": a.rounds, "e2e_rounds": a.e2e_rounds or a.rounds,
               "numpy_threads": a.numpy_threads, "families": {}}
    out = Path(a.out) if a.out else ROOT / "benchmarks" / "results" / f"{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in names:
        print(f"[{tag}] {name} ...", file=sys.stderr, flush=True)
        results["families"][name] = run_family(FAMILIES[name], a)
        results["load_after"] = load()
        out.write_text(json.dumps(results, indent=2) + "\n")  # after every family
    print(table(results))
    if a.readme:
        write_readme_table(results, ROOT / "benchmarks" / "README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
