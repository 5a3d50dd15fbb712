"""Algorithm 1 of Zhu et al. (ICLR 2024; spec 001 §2.1): (eps, delta)-NLDP sparse linear
regression, error against n and epsilon with fitted log-log slopes.

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
from dpjax.experiments._ldp_common import fit_slope, loglog_figure, record_nldp, select
from dpjax.models import sparse_lr as M
from dpjax.results import write_csv
from dpjax.study import Experiment


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
    chunk: int = param(1_000_000, ge=1000, doc="users per streamed chunk")
    theta_seed: int = param(0, ge=0, doc="seed of theta*")

    def check(self) -> None:
        if self.k > self.d:
            raise ValueError(f"--set k: must be <= d = {self.d}; got {self.k}")


DEFAULTS = NLDPConfig()
QUICK = dataclasses.replace(DEFAULTS, n_grid=(300_000, 1_000_000), eps_grid=(1.0,))


def _theta(c) -> np.ndarray:
    return np.asarray(M.sparse_theta(jax.random.key(c["theta_seed"]), c["d"], c["k"]))


def _levels(c, n: int) -> tuple[dict[str, float], ...]:
    levels = []
    for eps in c["eps_grid"]:
        hp = L.nldp_hparams(n, c["d"], eps, c["delta"], c_r=c["c_r"], c_tau=c["c_tau"],
                            c_lam=c["c_lam"], lam_rule="noise")
        for lam in (float(hp.lam), 0.0):
            levels.append({f: float(v) for f, v in zip(L.NLDPHyperparams._fields, hp)}
                          | {"lam": lam})
    hp = L.nldp_hparams(n, c["d"], math.inf, c["delta"], c_r=c["c_r"], c_tau=c["c_tau"])
    levels.append({f: float(v) for f, v in zip(L.NLDPHyperparams._fields, hp)})
    return tuple(levels)


def settings(c):
    theta = _theta(c)
    out = []
    for n in c["n_grid"]:
        chunks = max(1, n // c["chunk"])
        block = n // chunks
        n_eff = chunks * block
        out.append(sweep.Setting(
            key=f"ldp_nldp,n={n_eff},d={c['d']},k={c['k']}",
            columns={"method": "alg1", "n": n_eff, "d": c["d"], "k": c["k"]},
            estimator=L.nldp(chunks), simulate=M.SparseLinearModel(noise_sd=c["noise_sd"]),
            init=ZeroInit(), record=record_nldp, truth=theta,
            plan=sweep.DataPlan(num_blocks=chunks, block_size=block),
            hparams_type=L.NLDPHyperparams, levels=_levels(c, n_eff), n=n_eff,
            final_only=True))
    return out


def _curve(summary, eps: float, thresholded: bool):
    rows = [r for r in select(summary, epsilon=eps) if (r["lam"] > 0) == thresholded
            or math.isinf(eps)]
    rows.sort(key=lambda r: r["n"])
    return rows


def slopes(summary, c) -> list[dict]:
    """Log-log slopes of the mean error: against n per epsilon and lambda rule (over every n
    whose repetitions all had a positive definite noisy covariance, and over the three largest
    such n), and against epsilon at each n (lambda = 0; the theory: -1/2 and -1)."""
    out = []
    for eps in c["eps_grid"]:
        for thr in (True, False):
            rows = [r for r in _curve(summary, eps, thr) if r["indefinite_mean"] == 0]
            for subset, name in ((rows, "all n"), (rows[-3:], "3 largest n")):
                if len(subset) >= 2 and not (name != "all n" and len(rows) <= 3):
                    s, lo, hi = fit_slope([r["n"] for r in subset],
                                          [r["mean"] for r in subset],
                                          [r["se"] for r in subset])
                    out.append({"against": f"n ({name})", "epsilon": eps, "n": math.nan,
                                "lambda": "noise rule" if thr else "0 (Remark 3)",
                                "points": len(subset), "slope": s, "ci_low": lo,
                                "ci_high": hi, "theory": -0.5})
    for n in sorted({r["n"] for r in summary}):
        rows = sorted([r for r in summary if r["n"] == n and r["lam"] == 0
                       and math.isfinite(r["epsilon"]) and r["indefinite_mean"] == 0],
                      key=lambda r: r["epsilon"])
        if len(rows) >= 2:
            s, lo, hi = fit_slope([r["epsilon"] for r in rows], [r["mean"] for r in rows],
                                  [r["se"] for r in rows])
            out.append({"against": "epsilon", "epsilon": math.nan, "n": n,
                        "lambda": "0 (Remark 3)", "points": len(rows), "slope": s,
                        "ci_low": lo, "ci_high": hi, "theory": -1.0})
    return out


def plot(iter_rows, summary, c, path):
    del iter_rows
    norm = float(np.linalg.norm(_theta(c)))
    curves = []
    for eps in (*c["eps_grid"], math.inf):
        for thr in ((True, False) if math.isfinite(eps) else (False,)):
            rows = _curve(summary, eps, thr)
            label = ("non-private (clipped)" if math.isinf(eps) else
                     f"eps={eps:g}, " + ("lambda: noise rule" if thr else "lambda=0"))
            curves.append((label, [r["n"] for r in rows], [r["mean"] for r in rows],
                           [r["se"] for r in rows], "-" if thr else ":",
                           "nonprivate" if math.isinf(eps) else "dp"))
    ns = sorted({r["n"] for r in summary})
    refs = [(f"lower bound rate sqrt(dk log d/(n eps^2)), eps={e:g}", ns,
             [M.lower_bound_nldp(n, c["d"], c["k"], e) for n in ns]) for e in c["eps_grid"]]
    loglog_figure(curves, path, f"Alg 1 (NLDP), d={c['d']}, k={c['k']}, delta={c['delta']:g}, "
                  f"c_r={c['c_r']:g}", "n (users)", refs=refs, hline=norm)
    write_csv(Path(path).with_name("slopes.csv"), slopes(summary, c))


EXPERIMENTS = [
    Experiment(
        name="ldp_nldp",
        title="LDP sparse regression (Zhu et al. 2024), Algorithm 1: error vs n and epsilon",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        reps=10, quick_reps=3,
        summary_extra=("indefinite",),
        description="Streamed users (chunks of 1e6), aggregate noise; lambda by the noise rule "
        "and lambda = 0; fitted slopes in slopes.csv. See experiments/reports/ldp_nldp.md.",
    )
]
