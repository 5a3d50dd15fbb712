"""Algorithm 1 of Zhu et al. (ICLR 2024; spec 001 §2.1): (eps, delta)-NLDP sparse linear
regression, error against n, epsilon, d and k with fitted log-log slopes.

The paper has no experiments; this is our design (spec §4.2). Data: ``x ~ N(0, I_d)``,
``theta*`` with a random support of size ``k``, random signs, entries ``1/k``
(``||theta*||_1 = 1``), ``y = <theta*, x> + N(0, noise_sd^2)``. Users are streamed in chunks of
``chunk`` (the running means of Algorithm 1; aggregate noise per chunk, exactly the law of the
per-user noise), so memory does not grow with ``n``. Levels per ``n``: each ``epsilon`` with
``lambda`` from the data-independent noise rule of spec §2.1 (``c_lam sqrt(2 log 2d)
sqrt(sigma_1^2 + sigma_2^2)/sqrt(n)``), the same ``epsilon`` with ``lambda = 0`` (Remark 3:
no soft thresholding, the cleanest ``n^{-1/2} eps^{-1}`` check), and ``epsilon = inf`` (same
clipping and shrinkage, no noise). The figure draws the NLDP lower-bound rate
``sqrt(d k log d / (n eps^2))`` (constant 1) for reference, and ``plot`` writes ``slopes.csv``
(weighted log-log fits over the ``n`` with no indefinite covariance).

The d and k panels: every ``d`` of ``d_grid`` (at ``k``) and every ``k`` of ``k_grid`` (at
``d``) at ``n_dk`` users, with the same three kinds of levels at ``eps_dk``. A setting is
identified by ``(n, d, k)``, so the n panel's setting at ``(n_dk, d, k)`` is shared. Their
slopes are fitted beside the theory (Table 1: d +1, k +1/2; Remark 3, ``lambda = 0``:
d +3/2, k 0) and beside the slope of the predicted noise size ``sqrt(d (sigma_2^2 +
sigma_1^2 ||theta*||^2) / n)`` (the norm of ``Sigma^{-1}(N_2 - N_1 theta*)`` with ``Sigma =
I``, spec §4.2's advice); ``plot`` also draws ``figure_d.png`` and ``figure_k.png``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import numpy as np

from dpjax import sweep
from dpjax.algorithms import ldp_sparse as L
from dpjax.config import Config, param
from dpjax.experiments._common import ZeroInit
from dpjax.experiments._ldp_common import STUDY, fit_slope, loglog_figure, record_nldp, select
from dpjax.models import sparse_lr as M
from dpjax.results import write_csv
from dpjax.study import Experiment

# the paper's Gaussian calibration (classic where a release's epsilon <= 1), passed by name so
# the committed report regenerates unchanged (the estimators' default is "analytic")
CLASSIC = "classic-or-analytic"


@dataclasses.dataclass(frozen=True)
class NLDPConfig(Config):
    d: int = param(4, ge=2, le=64, doc="dimension")
    k: int = param(2, ge=1, doc="sparsity of theta* (entries 1/k)")
    n_grid: tuple[int, ...] = param((1_000_000, 3_000_000, 10_000_000, 30_000_000),
                                    ge=1000, doc="numbers of users")
    eps_grid: tuple[float, ...] = param((0.5, 1.0), gt=0, le=2, doc="each user's epsilon")
    delta: float = param(1e-5, gt=0, lt=1, doc="each user's delta")
    c_r: float = param(0.3, gt=0, doc="r = c_r sqrt(d log n)")
    c_tau: float = param(math.sqrt(2), gt=0, doc="tau1 = tau2 = c_tau sqrt(log n)")
    c_lam: float = param(0.25, ge=0, doc="lambda = c_lam x the noise rule of spec 2.1")
    noise_sd: float = param(0.5, ge=0, doc="sd of the regression noise")
    d_grid: tuple[int, ...] = param((2, 4, 8), ge=2, le=64, doc="dimensions (d panel)")
    k_grid: tuple[int, ...] = param((1, 2, 4), ge=1, doc="sparsities (k panel, at d)")
    n_dk: int = param(10_000_000, ge=1000, doc="users of the d and k panels")
    eps_dk: float = param(1.0, gt=0, le=2, doc="epsilon of the d and k panels")
    chunk: int = param(1_000_000, ge=1000, doc="users per streamed chunk")
    theta_seed: int = param(0, ge=0, doc="seed of theta*")

    def check(self) -> None:
        for k in (self.k, *self.k_grid):
            if k > self.d:
                raise ValueError(f"--set k / k_grid: each k must be <= d = {self.d}; got {k}")
        if self.k > min(self.d_grid):
            raise ValueError(f"--set k: must be <= min(d_grid) = {min(self.d_grid)}")


DEFAULTS = NLDPConfig()
QUICK = dataclasses.replace(DEFAULTS, n_grid=(300_000, 1_000_000), eps_grid=(1.0,),
                            d_grid=(2, 4), k_grid=(1, 2), n_dk=1_000_000)


def _theta(c, d: int | None = None, k: int | None = None) -> np.ndarray:
    d = c["d"] if d is None else d
    k = c["k"] if k is None else k
    return np.asarray(M.sparse_theta(jax.random.key(c["theta_seed"]), d, k))


def _levels(c, n: int, d: int, epsilons) -> tuple[dict[str, float], ...]:
    levels = []
    for eps in epsilons:
        hp = L.nldp_hparams(n, d, eps, c["delta"], c_r=c["c_r"], c_tau=c["c_tau"],
                            c_lam=c["c_lam"], lam_rule="noise", calibration=CLASSIC)
        for lam in (float(hp.lam), 0.0):
            levels.append({f: float(v) for f, v in zip(L.NLDPHyperparams._fields, hp)}
                          | {"lam": lam})
    hp = L.nldp_hparams(n, d, math.inf, c["delta"], c_r=c["c_r"], c_tau=c["c_tau"])
    levels.append({f: float(v) for f, v in zip(L.NLDPHyperparams._fields, hp)})
    return tuple(levels)


def _n_eff(c, n: int) -> tuple[int, int, int]:
    chunks = max(1, n // c["chunk"])
    block = n // chunks
    return chunks, block, chunks * block


def settings(c):
    wanted = {}  # (n, d, k) -> epsilons; the n panel first
    for n in c["n_grid"]:
        wanted[(n, c["d"], c["k"])] = tuple(c["eps_grid"])
    for d in c["d_grid"]:
        wanted.setdefault((c["n_dk"], d, c["k"]), (c["eps_dk"],))
    for k in c["k_grid"]:
        wanted.setdefault((c["n_dk"], c["d"], k), (c["eps_dk"],))
    out = []
    for (n, d, k), epsilons in wanted.items():
        chunks, block, n_eff = _n_eff(c, n)
        out.append(sweep.Setting(
            key=f"ldp_nldp,n={n_eff},d={d},k={k}",
            columns={"method": "alg1", "n": n_eff, "d": d, "k": k},
            estimator=L.nldp(chunks, calibration=CLASSIC),
            simulate=M.SparseLinearModel(noise_sd=c["noise_sd"]),
            init=ZeroInit(), record=record_nldp, truth=_theta(c, d, k),
            plan=sweep.DataPlan(num_blocks=chunks, block_size=block),
            hparams_type=L.NLDPHyperparams, levels=_levels(c, n_eff, d, epsilons), n=n_eff,
            final_only=True))
    return out


def _curve(summary, eps: float, thresholded: bool, c=None, x: str = "n"):
    """The rows of one level kind along the n panel (``c`` given: at ``d``, ``k`` of the
    config) or, ``x = "d"`` / ``"k"``, along the d or k panel."""
    rows = [r for r in select(summary, epsilon=eps) if (r["lam"] > 0) == thresholded
            or math.isinf(eps)]
    if c is not None:
        if x == "n":
            rows = [r for r in rows if r["d"] == c["d"] and r["k"] == c["k"]]
        else:
            n_dk = _n_eff(c, c["n_dk"])[2]
            other = "k" if x == "d" else "d"
            rows = [r for r in rows if r["n"] == n_dk and r[other] == c[other]]
    rows.sort(key=lambda r: r[x])
    return rows


def predicted_noise(c, n: int, d: int, k: int, eps: float) -> float:
    """``sqrt(d (sigma_2^2 + sigma_1^2 ||theta*||_2^2) / n)``: the size of
    ``Sigma^{-1}(N_2 - N_1 theta*)`` for ``Sigma = I`` (``lambda = 0``, before clipping)."""
    hp = L.nldp_hparams(n, d, eps, c["delta"], c_r=c["c_r"], c_tau=c["c_tau"])
    s1, s2 = L.nldp_noise_stds(d, float(hp.r), float(hp.tau1), float(hp.tau2), eps,
                               c["delta"], calibration=CLASSIC)
    norm2 = float(np.sum(_theta(c, d, k) ** 2))
    return math.sqrt(d * (s2**2 + s1**2 * norm2) / n)


def slopes(summary, c) -> list[dict]:
    """Log-log slopes of the mean error: against n per epsilon and lambda rule (over every n
    whose repetitions all had a positive definite noisy covariance, and over the three largest
    such n), and against epsilon at each n (lambda = 0; the theory: -1/2 and -1)."""
    out = []
    for eps in c["eps_grid"]:
        for thr in (True, False):
            rows = [r for r in _curve(summary, eps, thr, c) if r["indefinite_mean"] == 0]
            for subset, name in ((rows, "all n"), (rows[-3:], "3 largest n")):
                if len(subset) >= 2 and not (name != "all n" and len(rows) <= 3):
                    s, lo, hi = fit_slope([r["n"] for r in subset],
                                          [r["mean"] for r in subset],
                                          [r["se"] for r in subset])
                    out.append({"against": f"n ({name})", "epsilon": eps, "n": math.nan,
                                "lambda": "noise rule" if thr else "0 (Remark 3)",
                                "points": len(subset), "slope": s, "ci_low": lo,
                                "ci_high": hi, "theory": -0.5})
    for n in sorted({r["n"] for r in _curve(summary, math.inf, False, c)}):
        rows = sorted([r for r in summary if r["n"] == n and r["lam"] == 0
                       and r["d"] == c["d"] and r["k"] == c["k"]
                       and math.isfinite(r["epsilon"]) and r["indefinite_mean"] == 0],
                      key=lambda r: r["epsilon"])
        if len(rows) >= 2:
            s, lo, hi = fit_slope([r["epsilon"] for r in rows], [r["mean"] for r in rows],
                                  [r["se"] for r in rows])
            out.append({"against": "epsilon", "epsilon": math.nan, "n": n,
                        "lambda": "0 (Remark 3)", "points": len(rows), "slope": s,
                        "ci_low": lo, "ci_high": hi, "theory": -1.0})
    n_dk = _n_eff(c, c["n_dk"])[2]
    for x, theory in (("d", {True: 1.0, False: 1.5}), ("k", {True: 0.5, False: 0.0})):
        for thr in (True, False):
            rows = [r for r in _curve(summary, c["eps_dk"], thr, c, x)
                    if r["indefinite_mean"] == 0]
            if len(rows) < 2:
                continue
            s, lo, hi = fit_slope([r[x] for r in rows], [r["mean"] for r in rows],
                                  [r["se"] for r in rows])
            xs = [r[x] for r in rows]
            pred = [predicted_noise(c, n_dk, r["d"], r["k"], c["eps_dk"]) for r in rows]
            out.append({"against": x, "epsilon": c["eps_dk"], "n": n_dk,
                        "lambda": "noise rule" if thr else "0 (Remark 3)",
                        "points": len(rows), "slope": s, "ci_low": lo, "ci_high": hi,
                        "theory": theory[thr],
                        "noise_slope": float(np.polyfit(np.log(xs), np.log(pred), 1)[0])})
    return out


def plot_dk(summary, c, path) -> None:
    """The d and k panels: the errors at ``n_dk`` against d and against k, beside the predicted
    noise size (matched at the first point of the lambda = 0 curve)."""
    n_dk = _n_eff(c, c["n_dk"])[2]
    for x in ("d", "k"):
        curves, refs = [], []
        for eps, thr in ((c["eps_dk"], True), (c["eps_dk"], False), (math.inf, False)):
            rows = _curve(summary, eps, thr, c, x)
            label = ("non-private (clipped)" if math.isinf(eps) else
                     f"eps={eps:g}, " + ("lambda: noise rule" if thr else "lambda=0"))
            curves.append((label, [r[x] for r in rows], [r["mean"] for r in rows],
                           [r["se"] for r in rows], "-" if thr else ":",
                           "nonprivate" if math.isinf(eps) else "dp"))
            if math.isfinite(eps) and not thr and rows:
                pred = [predicted_noise(c, n_dk, r["d"], r["k"], eps) for r in rows]
                refs.append(("predicted noise size (matched at left)", [r[x] for r in rows],
                             [p * rows[0]["mean"] / pred[0] for p in pred]))
        fixed = f"k={c['k']}" if x == "d" else f"d={c['d']}"
        loglog_figure(curves, Path(path).with_name(f"figure_{x}.png"),
                      f"Alg 1 (NLDP) at n={n_dk:.3g}, {fixed}", x, refs=refs)


def plot(iter_rows, summary, c, path):
    del iter_rows
    norm = float(np.linalg.norm(_theta(c)))
    curves = []
    for eps in (*c["eps_grid"], math.inf):
        for thr in ((True, False) if math.isfinite(eps) else (False,)):
            rows = _curve(summary, eps, thr, c)
            label = ("non-private (clipped)" if math.isinf(eps) else
                     f"eps={eps:g}, " + ("lambda: noise rule" if thr else "lambda=0"))
            curves.append((label, [r["n"] for r in rows], [r["mean"] for r in rows],
                           [r["se"] for r in rows], "-" if thr else ":",
                           "nonprivate" if math.isinf(eps) else "dp"))
    ns = sorted({r["n"] for r in _curve(summary, math.inf, False, c)})
    refs = [(f"lower bound rate sqrt(dk log d/(n eps^2)), eps={e:g}", ns,
             [M.lower_bound_nldp(n, c["d"], c["k"], e) for n in ns]) for e in c["eps_grid"]]
    loglog_figure(curves, path, f"Alg 1 (NLDP), d={c['d']}, k={c['k']}, delta={c['delta']:g}, "
                  f"c_r={c['c_r']:g}", "n (users)", refs=refs, hline=norm)
    write_csv(Path(path).with_name("slopes.csv"), slopes(summary, c))
    plot_dk(summary, c, path)


EXPERIMENTS = [
    Experiment(
        name="ldp_nldp",
        title="LDP sparse regression (Zhu et al. 2024), Algorithm 1: error vs n, epsilon, d, k",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        **STUDY,
        description="Streamed users (chunks of 1e6), aggregate noise; lambda by the noise rule "
        "and lambda = 0; d and k panels at n_dk (figure_d.png, figure_k.png); fitted slopes "
        "in slopes.csv. See experiments/reports/ldp_nldp.md.",
    )
]
