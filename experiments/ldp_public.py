"""Algorithm 3 (public unlabeled covariates) against Algorithm 1 as d varies (Zhu et al., ICLR
2024, Theorem 4 vs Theorem 3; spec 001 §2.3, §3.3).

Our design (the paper has no experiments): ``x ~ N(0, I_d)``, ``theta*`` ``k``-sparse with
entries ``1/k``, ``y = <theta*, x> + N(0, noise_sd^2)``; ``n`` private users and ``m`` public
unlabeled covariates from the same law. Both algorithms see the same private data in each
repetition (one data group). Algorithm 1 privatises the covariance and the cross term at
``(eps/2, delta/2)`` each; Algorithm 3 releases only the cross term, at the full ``(eps, delta)``
(the default reading of the illegible variance, spec §2.3 (b)), and inverts the public
covariance. Levels: ``lambda`` by the noise rule of spec §2.1 (Algorithm 3: the cross-term std
only) and ``lambda = 0``; the theory predicts a ratio Alg 1 / Alg 3 growing like ``sqrt d``.
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
from dpjax.local_randomizers import local_gaussian_sigma
from dpjax.models import sparse_lr as M
from dpjax.results import write_csv
from dpjax.study import Experiment

# the paper's Gaussian calibration (classic where a release's epsilon <= 1), passed by name so
# the committed report regenerates unchanged (the estimators' default is "analytic")
CLASSIC = "classic-or-analytic"


@dataclasses.dataclass(frozen=True)
class WithPublic:
    """``simulate`` of Algorithm 3: the private ``(x, y)`` exactly as ``model`` draws them from
    the same key, plus ``m`` public covariates from an independent key."""

    model: M.SparseLinearModel
    m: int

    def __call__(self, key, n, theta):
        x, y = self.model(key, n, theta)
        x_pub, _ = self.model(jax.random.fold_in(key, 7919), self.m, theta)
        return x, y, x_pub


record_alg1 = record_nldp  # both states carry beta and min_eig (Alg 3: of the public Gram)


@dataclasses.dataclass(frozen=True)
class PublicConfig(Config):
    d_grid: tuple[int, ...] = param((2, 4, 8), ge=2, le=64, doc="dimensions")
    k: int = param(2, ge=1, doc="sparsity of theta* (entries 1/k)")
    n: int = param(3_000_000, ge=1000, doc="private users")
    m: int = param(1_000_000, ge=10, doc="public unlabeled covariates")
    epsilon: float = param(1.0, gt=0, le=2, doc="each user's epsilon")
    delta: float = param(1e-5, gt=0, lt=1, doc="each user's delta")
    c_r: float = param(0.3, gt=0, doc="Alg 1: r = c_r sqrt(d log n)")
    c_tau: float = param(math.sqrt(2), gt=0, doc="tau1 = tau2 = c_tau sqrt(log n)")
    c_lam: float = param(0.25, ge=0, doc="lambda = c_lam x the noise rule")
    noise_sd: float = param(0.5, ge=0, doc="sd of the regression noise")
    theta_seed: int = param(0, ge=0, doc="seed of theta*")

    def check(self) -> None:
        if self.k > min(self.d_grid):
            raise ValueError(f"--set k: must be <= min(d_grid) = {min(self.d_grid)}")


DEFAULTS = PublicConfig()
QUICK = dataclasses.replace(DEFAULTS, d_grid=(2, 4), n=300_000, m=50_000)


def _theta(c, d) -> np.ndarray:
    return np.asarray(M.sparse_theta(jax.random.key(c["theta_seed"]), d, c["k"]))


def settings(c):
    n, eps, delta = c["n"], c["epsilon"], c["delta"]
    model = M.SparseLinearModel(noise_sd=c["noise_sd"])
    out = []
    for d in c["d_grid"]:
        theta = _theta(c, d)
        hp1 = L.nldp_hparams(n, d, eps, delta, c_r=c["c_r"], c_tau=c["c_tau"],
                             c_lam=c["c_lam"], lam_rule="noise",
                             calibration=CLASSIC)
        lv1 = {f: float(v) for f, v in zip(L.NLDPHyperparams._fields, hp1)}
        tau = float(hp1.tau1)
        s2 = float(local_gaussian_sigma(L.cross_range(d, tau, tau), eps, delta))
        lam3 = c["c_lam"] * math.sqrt(2 * math.log(2 * d)) * s2 / math.sqrt(n)
        # "r" is not a hyperparameter of Alg 3 (no covariance release): a column only, 0
        lv3 = {"epsilon": eps, "delta": delta, "tau1": tau, "tau2": tau, "r": 0.0}
        group = f"ldp_public,d={d}"
        cols = {"n": n, "d": d, "k": c["k"], "m": c["m"]}
        out.append(sweep.Setting(
            key=f"ldp_public,alg1,d={d}", columns={"method": "alg1"} | cols,
            estimator=L.nldp(1, calibration=CLASSIC), simulate=model, init=ZeroInit(),
            record=record_alg1, truth=theta, plan=sweep.DataPlan(1, n),
            hparams_type=L.NLDPHyperparams, levels=(lv1, lv1 | {"lam": 0.0}), n=n,
            data_group=group, final_only=True))
        out.append(sweep.Setting(
            key=f"ldp_public,alg3,d={d}", columns={"method": "alg3"} | cols,
            estimator=L.nldp_public(batching="disjoint", calibration=CLASSIC),
            simulate=WithPublic(model, c["m"]),
            init=ZeroInit(), record=record_alg1, truth=theta, plan=sweep.DataPlan(1, n),
            hparams_type=L.PublicHyperparams, levels=(lv3 | {"lam": lam3}, lv3 | {"lam": 0.0}),
            n=n, data_group=group, final_only=True))
    return out


def _rows(summary, method, thresholded):
    rows = [r for r in select(summary, method=method) if (r["lam"] > 0) == thresholded]
    return sorted(rows, key=lambda r: r["d"])


def slopes(summary) -> list[dict]:
    out = []
    for method, theory in (("alg1", "+1 (lambda rule) / +3/2 (lambda=0)"),
                           ("alg3", "+1/2 (lambda rule) / +1 (lambda=0)")):
        for thr in (True, False):
            rows = [r for r in _rows(summary, method, thr) if r.get("indefinite_mean", 0) == 0]
            if len(rows) >= 2:
                s, lo, hi = fit_slope([r["d"] for r in rows], [r["mean"] for r in rows],
                                      [r["se"] for r in rows])
                out.append({"method": method, "lambda": "noise rule" if thr else "0",
                            "points": len(rows), "slope_d": s, "ci_low": lo, "ci_high": hi,
                            "theory": theory})
    return out


def plot(iter_rows, summary, c, path):
    del iter_rows
    curves = []
    for method, name in (("alg1", "Alg 1 (private covariance)"), ("alg3", "Alg 3 (public)")):
        for thr in (True, False):
            rows = _rows(summary, method, thr)
            curves.append((f"{name}, " + ("lambda: noise rule" if thr else "lambda=0"),
                           [r["d"] for r in rows], [r["mean"] for r in rows],
                           [r["se"] for r in rows], "-" if thr else ":"))
    ds = sorted({r["d"] for r in summary})
    refs = [("lower bound rate sqrt(dk log d/(n eps^2))", ds,
             [M.lower_bound_nldp(c["n"], d, c["k"], c["epsilon"]) for d in ds])]
    loglog_figure(curves, path, f"Alg 3 vs Alg 1, n={c['n']:g}, m={c['m']:g}, "
                  f"eps={c['epsilon']:g}", "d", refs=refs,
                  hline=float(np.linalg.norm(_theta(c, ds[0]))))
    write_csv(Path(path).with_name("slopes.csv"), slopes(summary))


EXPERIMENTS = [
    Experiment(
        name="ldp_public",
        title="LDP sparse regression: Algorithm 3 (public covariates) vs Algorithm 1 against d",
        defaults=DEFAULTS, settings=settings, quick=QUICK, plot=plot,
        **STUDY,
        description="Same private data for both; lambda by the noise rule and lambda = 0; "
        "d-slopes in slopes.csv. See experiments/reports/ldp_public.md.",
    )
]
